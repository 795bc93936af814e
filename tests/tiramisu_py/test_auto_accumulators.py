"""``auto_schedule`` gives an update that reads its accumulator's array at
other elements (trisolv's ``x[i] -= L[i][j] * x[j]``) a one-element buffer of
its own (``store_in``), which makes it a reduction: kept only where every
other read of the array, and its final content, see the same writes as
before (a finishing statement writes the array) and no loop of the
computation runs in parallel.  Results: bit for bit the unscheduled kernel's
without reassociation; with ``reassociate=True`` four vectors of partial sums
(NumPy's result within rounding).  No timing is asserted."""
from __future__ import annotations

import numpy as np

import tiramisu_py as tp


def trisolv(N=40, finish=True, read_own=False):
    """Forward substitution; ``finish=False``: no statement writes ``x``
    after the sum (the sum is the output); ``read_own``: the update reads the
    element it accumulates through the array (``x[i]``) as well."""
    f = tp.Function("trisolv", params=dict(N=N))
    i = f.var("i", 0, "N")
    j = f.var("j", 0, i)
    L, b = f.input("L", ("N", "N"), tp.float64), f.input("b", ("N",), tp.float64)
    x = f.buffer("x", ("N",), tp.float64, output=True)
    with f.nest(i):
        xi = f.computation("x0", [i], b[i]).store_in(x, [i])
        xi[i] -= L[i, j] * (x[j] + x[i] if read_own else x[j])
        if finish:
            f.computation("x2", [i], xi[i] / L[i, i]).store_in(x, [i])
    return f


def inputs(N=40):
    rng = np.random.default_rng(0)
    return {"L": np.tril(rng.standard_normal((N, N))) + N * np.eye(N), "b": rng.standard_normal(N)}


def reference(a):
    L, x = a["L"], a["b"].copy()
    for i in range(len(x)):
        x[i] = (x[i] - L[i, :i] @ x[:i]) / L[i, i]
    return x


ACC = "f.computations['x0'].store_in(f.buffer('x0_acc', (1,), f.computations['x0'].dtype), [0])"


def test_a_forward_substitution_sums_in_a_scalar_of_its_own():
    f = trisolv()
    steps = [str(s) for s in f.auto_schedule()]
    assert steps[0] == ACC, steps
    a = inputs()
    plain = trisolv().compile()(**a)
    np.testing.assert_array_equal(f.compile()(**a), plain)       # the program's order
    np.testing.assert_allclose(plain, reference(a), rtol=1e-12)
    replay = trisolv()
    exec("\n".join(steps), {"f": replay})                         # the printed schedule, pasted
    assert replay.compile().source == f.compile().source


def test_reassociated_the_scalar_sum_takes_four_vectors_of_partial_sums():
    from codegen import loops
    lanes = loops.host_lanes(64)
    f = trisolv(N=8 * lanes + 3)
    steps = [str(s) for s in f.auto_schedule(reassociate=True)]
    upd = "f.computations['x0'].update"
    assert steps == [ACC, f"{upd}.split('j', {4 * lanes}, names=('j0', 'jv'))",
                     f"{upd}.vectorize('jv', {lanes}, allow_reassociation=True)",
                     f"{upd}.unroll('jv0')"], steps
    a = inputs(8 * lanes + 3)
    np.testing.assert_allclose(f.compile()(**a), reference(a), rtol=1e-12)
    np.testing.assert_allclose(f.compile("llvm")(**a), reference(a), rtol=1e-12)


def test_storage_that_would_change_what_the_array_holds_is_not_moved():
    """Without the finishing statement the sums are the output: moved out,
    ``x`` would never be written.  An update that reads the element it
    accumulates through the array would read stale values.  Neither is
    given a buffer, and both keep the unscheduled results."""
    for build in (lambda: trisolv(finish=False), lambda: trisolv(read_own=True)):
        f = build()
        steps = [str(s) for s in f.auto_schedule(reassociate=True)]
        assert not any("store_in" in s or "allow_reassociation" in s for s in steps), steps
        a = inputs()
        np.testing.assert_array_equal(f.compile()(**a), build().compile()(**a))


def test_a_parallel_computation_keeps_its_array():
    """``y[i]`` summed from the array's other half: ``i`` runs in parallel,
    which one slot for every ``i`` would forbid, so the array stays."""
    f = tp.Function("halves", params=dict(N=256))
    i, j = f.var("i", 0, "N"), f.var("j", 0, "N")
    A = f.input("A", ("N", "N"), tp.float64)
    y = f.buffer("y", ("2*N",), tp.float64, output=True)
    with f.nest(i):
        yi = f.computation("y0", [i], 0.0, dtype=tp.float64).store_in(y, [i])
        yi[i] += A[i, j] * y[j + 256]
    steps = [str(s) for s in f.auto_schedule()]
    assert not any("store_in" in s for s in steps), steps
    assert any(".parallelize('i" in s for s in steps), steps

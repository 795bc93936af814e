"""``auto_schedule`` gives an update that reads its accumulator's array at
other elements (trisolv's ``x[i] -= L[i][j] * x[j]``) a buffer of its own
(``store_in``), which makes it a reduction: kept only where every other read
of the array, and its final content, see the same writes as before (a
finishing statement writes the array).  Results: bit for bit the unscheduled
kernel's without reassociation; with ``reassociate=True`` four registers of
partial sums (NumPy's result within rounding).  Where a loop of the
computation runs in parallel, the buffer has a slot per iteration (trmm), no
larger than the array it leaves.  No timing is asserted."""
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
    """``vectorize(j, 4 L)``: partial sums four registers wide."""
    from codegen import loops
    lanes = loops.host_lanes(64)
    f = trisolv(N=8 * lanes + 3)
    steps = [str(s) for s in f.auto_schedule(reassociate=True)]
    upd = "f.computations['x0'].update"
    assert steps == [ACC, f"{upd}.vectorize('j', {4 * lanes}, allow_reassociation=True)"], steps
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


def trmm(M=48, N=40):
    """PolyBench's trmm: ``B[i][j] = alpha (B[i][j] + sum_{k > i} A[k][i] B[k][j])``,
    the sum read from rows below, which it has not written yet."""
    f = tp.Function("trmm", params=dict(M=M, N=N))
    i, j = f.var("i", 0, "M"), f.var("j", 0, "N")
    k = f.var("k", i + 1, "M")
    A = f.input("A", ("M", "M"), tp.float64)
    B = f.buffer("B", ("M", "N"), tp.float64, output=True)
    with f.nest(i, j):
        acc = f.computation("acc", [i, j], B[i, j]).store_in(B, [i, j])
        acc[i, j] += A[k, i] * B[k, j]
        f.computation("scale", [i, j], 1.5 * acc[i, j]).store_in(B, [i, j])
    return f


def test_parallel_columns_keep_a_slot_each_and_the_sum_becomes_a_product():
    """trmm's columns run in parallel: one slot for all of them would
    forbid it, so the sums get a buffer of the computation's shape, and the
    update, a reduction now, runs its columns in vectors (at PolyBench's
    LARGE size it is tiled and register-blocked as a GEMM)."""
    f = trmm()
    steps = [str(s) for s in f.auto_schedule()]
    assert steps[0] == ("f.computations['acc'].store_in(f.buffer('acc_acc', (48, 40), "
                        "f.computations['acc'].dtype))"), steps
    # (at this size, in cache: not tiled; the rows' columns in vectors, k outside them)
    assert "f.computations['acc'].update.reorder('k', 'j')" in steps, steps
    assert any(s.startswith("f.computations['acc'].update.vectorize('j'") for s in steps), steps
    rng = np.random.default_rng(0)
    a = {"A": rng.standard_normal((48, 48)), "B": rng.standard_normal((48, 40))}
    want = a["B"].copy()
    for i in range(48):
        want[i] = 1.5 * (a["B"][i] + a["A"][i + 1:, i] @ a["B"][i + 1:])
    for target in ("c", "llvm"):
        b = {"A": a["A"], "B": a["B"].copy()}
        f.compile(target)(**b)
        np.testing.assert_allclose(b["B"], want, rtol=1e-12, atol=1e-12)


def test_a_parallel_computation_keeps_its_array_when_nothing_writes_it_back():
    """``y[i]`` summed from the array's other half, its sums the output: a
    buffer of its own would leave ``y`` unwritten, so the array stays."""
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


def test_a_slot_per_iteration_never_takes_more_memory_than_the_array():
    """A computation over ``i, j`` folded into a row ``r[j]``: a slot per
    iteration would hold N times the row, so none is offered (trmm's sums
    take exactly B's size)."""
    from tiramisu_py.driver.auto_schedule import AutoScheduler
    f = tp.Function("folded", params=dict(N=32, M=16))
    i, j, k = f.var("i", 0, "N"), f.var("j", 0, "M"), f.var("k", 0, "M")
    A = f.input("A", ("N", "M"), tp.float64)
    r = f.buffer("r", ("M",), tp.float64, output=True)
    with f.nest(i, j):
        c = f.computation("c", [i, j], A[i, j]).store_in(r, [j])
        c[i, j] += r[k] * A[i, k]
    auto = AutoScheduler(f)
    assert auto.box_store(f.computations["c"], "_acc") is None
    t = trmm()
    assert AutoScheduler(t).box_store(t.computations["acc"], "_acc") is not None


def test_cholesky_columns_run_in_parallel_after_the_interchange():
    """Cholesky's row loop and its dot products' column loop both carry:
    the nest of the dot products (sharing ``j``) is interchanged, moved after
    the diagonal, its ``i`` parallel (tiramisu_py/driver/auto_nests.py):
    bit for bit the unscheduled kernel's result on C (within rounding on
    LLVM, whose FMA contraction depends on the loop's form), and the
    printed commands replay.  Trisolv's columns (one row of work per
    column, below a parallel region's) stay as they were."""
    from examples.polybench import solvers
    s = {"N": 180}
    f = solvers.build_cholesky(s)
    steps = [str(x) for x in f.auto_schedule()]
    assert "f.computations['C0'].interchange('i', 'j')" in steps
    assert "f.computations['C0'].after(f.computations['C4'], 'i')" in steps
    assert "f.computations['C0'].update.parallelize('i')" in steps
    a = solvers.spd(np.random.default_rng(1), s)
    plain = {"A": a["A"].copy()}
    solvers.build_cholesky(s).compile("c", tuned=False)(**plain)
    for target in ("c", "llvm"):
        got = {"A": a["A"].copy()}
        f.compile(target)(**got)
        if target == "c":
            np.testing.assert_array_equal(got["A"], plain["A"])
        else:      # LLVM fuses a product into its sum (an FMA) where the sum is no latency chain
            np.testing.assert_allclose(got["A"], plain["A"], rtol=1e-12, atol=1e-12)
    np.testing.assert_allclose(plain["A"], solvers.ref_cholesky(a, s)["A"], rtol=1e-10)
    g = solvers.build_cholesky(s)
    exec("\n".join(steps), {"f": g})
    assert g.schedule_commands() == f.schedule_commands()
    t = trisolv(N=400)
    assert not any("interchange" in str(x) for x in t.auto_schedule())


def row_recurrence(seed, N=160):
    """A seeded program of cholesky's form (a row's dot products over the
    rows before it, then its diagonal), its reads, operators and constants
    drawn: what the interchange for parallelism may turn inside out."""
    rng = np.random.default_rng(seed)
    c = [round(float(x), 3) for x in rng.uniform(0.5, 1.5, 4)]
    f = tp.Function(f"rows{seed}", params=dict(N=N))
    A = f.buffer("A", ("N", "N"), tp.float64, output=True)
    i = f.var("i", 0, "N")
    j = f.var("j", 0, i)
    k, kd = f.var("k", 0, j), f.var("kd", 0, i)
    other = (lambda: A[j, k]) if rng.random() < 0.5 else (lambda: A[k, j])
    with f.nest(i):
        with f.nest(j):
            a = f.computation("S0", [i, j], A[i, j] * c[0]).store_in(A, [i, j])
            a[i, j] -= A[i, k] * other() * c[1]
            finish = a[i, j] / A[j, j] if rng.random() < 0.7 else a[i, j] * c[2]
            f.computation("S2", [i, j], finish).store_in(A, [i, j])
        d = f.computation("S3", [i], A[i, i]).store_in(A, [i, i])
        d[i] -= A[i, kd] * (A[i, kd] if rng.random() < 0.5 else A[kd, i]) * c[3]
        f.computation("S4", [i], tp.sqrt(tp.abs(d[i])) + 1.0).store_in(A, [i, i])
    return f


def test_random_row_recurrences_auto_scheduled_equal_the_unscheduled_kernel(uncontracted):
    """Seeded differential test of the interchange for parallelism: each
    program's auto schedule (interchanged where legal and worth it, as
    written where not) gives the unscheduled kernel's result, bit for bit on
    C (built without contraction: the additions' order is what is compared);
    reassociated within rounding; the rule fired on some of them."""
    fired = 0
    for seed in range(6):
        rng = np.random.default_rng(100 + seed)
        A0 = rng.uniform(-1, 1, (160, 160)) + 160 * np.eye(160)
        plain = {"A": A0.copy()}
        row_recurrence(seed).compile("c", tuned=False)(**plain)
        for reassociate in (False, True):
            f = row_recurrence(seed)
            steps = [str(x) for x in f.auto_schedule(target="c", reassociate=reassociate)]
            fired += any(".interchange(" in s for s in steps)
            got = {"A": A0.copy()}
            f.compile("c")(**got)
            if reassociate:
                np.testing.assert_allclose(got["A"], plain["A"], rtol=1e-9, atol=1e-12)
            else:
                np.testing.assert_array_equal(got["A"], plain["A"], err_msg=f"seed {seed}")
    assert fired >= 2

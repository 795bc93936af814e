"""The commands issue 29 added to the language, each with its rule:
``parallelize(loop, schedule=, chunk=)`` (OpenMP's schedule clause; legality
as any parallel loop; the LLVM backend refuses what it cannot do, by name),
``tile`` over any number of loops, and ``f.tile_band`` (several statements of
a nest tiled as one band, legal iff the band is permutable); and issue 55's
``collapse`` (two loops as one, for a parallel loop of more iterations)."""
from __future__ import annotations

import numpy as np
import pytest

import tiramisu_py as tp
from tiramisu_py.commands.state import state_of
from tests.auto_kernels import SUITE


def triangular_sum():
    f = tp.Function("trisum", params=["N"])
    i = f.var("i", 0, "N")
    j = f.var("j", 0, i + 1)
    A = f.input("A", ("N", "N"), tp.float64)
    C = f.computation("C", [i], 0.0, dtype=tp.float64)
    C[i] += A[i, j]
    return f, C


@pytest.mark.parametrize("schedule,chunk,clause", [
    ("dynamic", 4, "schedule(dynamic, 4)"), ("guided", None, "schedule(guided)"),
    ("static", 2, "schedule(static, 2)"), (None, 3, "schedule(static, 3)")])
def test_parallelize_schedule_clause(schedule, chunk, clause):
    f, C = triangular_sum()
    C.update.parallelize("i", schedule=schedule, chunk=chunk)
    k = f.compile()
    assert "#pragma omp parallel for " + clause in k.source
    a = np.random.rand(9, 9)
    np.testing.assert_allclose(k(A=a), np.tril(a).sum(1))


def test_parallelize_schedule_is_checked_as_parallel():
    f, C = triangular_sum()
    C.update.parallelize("j", schedule="dynamic")     # a reduction loop: carries a dependence
    with pytest.raises(tp.IllegalScheduleError, match="cannot be parallelised"):
        f.compile()


def test_parallelize_schedule_arguments():
    f, C = triangular_sum()
    with pytest.raises(ValueError, match="schedule must be one of"):
        C.update.parallelize("i", schedule="auto")
    for bad in (0, -2, 1.5, True):
        with pytest.raises(ValueError, match="chunk must be a positive int"):
            C.update.parallelize("i", schedule="dynamic", chunk=bad)
    assert f.schedule_commands() == []


def test_llvm_refuses_dynamic_schedule_by_name():
    f, C = triangular_sum()
    C.update.parallelize("i", schedule="dynamic")
    with pytest.raises(ValueError, match="parallel loop 'i'.*target='cpu'"):
        f.compile("llvm")
    g, D = triangular_sum()
    D.update.parallelize("i", schedule="static")        # what LLVM does anyway: accepted
    a = np.random.rand(6, 6)
    np.testing.assert_allclose(g.compile("llvm")(A=a), np.tril(a).sum(1))


def test_tile_four_loops():
    f = tp.Function("t4", params=["N"])
    a, b, c, d = (f.var(n, 0, "N") for n in "abcd")
    X = f.input("X", ("N", "N", "N", "N"), tp.float64)
    Y = f.computation("Y", [a, b, c, d], X[a, b, c, d] * 2.0 + X[d, c, b, a])
    Y.tile("a", "b", "c", "d", 2, 3, 2, 3)
    assert [lp.name for lp in f._state_cache["Y"].loops] == \
        ["a0", "b0", "c0", "d0", "a1", "b1", "c1", "d1"]
    x = np.random.rand(5, 5, 5, 5)
    np.testing.assert_allclose(f.compile()(X=x), 2 * x + x.transpose())
    with pytest.raises(TypeError, match="one or more loops followed by as many factors"):
        Y.tile("a", "b", 2)
    with pytest.raises(ValueError, match="named twice"):
        Y.tile("a1", "a1", 2, 2)


def jacobi1d_band(skew=True, statements=("sB", "sA")):
    case = SUITE["jacobi-1d"]
    f = case.build()
    sB, sA = f.computations["sB"], f.computations["sA"]
    sA.shift("i", 1)
    if skew:
        sB.skew("t", "i", 2)
        sA.skew("t", "i", 2)
    f.tile_band([f.computations[s] for s in statements], ["t", "i"], [3, 4])
    return case, f


def test_tile_band_two_statement_stencil():
    case, f = jacobi1d_band()
    st = f._state_cache
    assert [lp.name for lp in st["sB"].loops] == ["t0", "i0", "t1", "i1"]
    assert st["sB"].consts[:3] == st["sA"].consts[:3]       # t0, i0, t1 shared
    assert st["sB"].consts[3] < st["sA"].consts[3]          # sA after sB inside t1
    inputs = case.inputs(np.random.default_rng(0))
    out = case.run(f.compile(), inputs)
    ref = case.reference(inputs)
    for k in ref:
        np.testing.assert_allclose(out[k], ref[k])
    assert f.undo().startswith("f.tile_band(")                 # one call, undone whole
    assert not any(c.op == "tile_band" for c in f._commands)


def test_tile_band_without_skew_is_illegal():
    _, f = jacobi1d_band(skew=False)
    with pytest.raises(tp.IllegalScheduleError, match="tile_band"):
        f.compile()


def test_tile_band_must_list_the_whole_loop():
    with pytest.raises(ValueError, match="sA also run.*list every statement"):
        jacobi1d_band(statements=("sB",))
    f = SUITE["jacobi-1d"].build()
    with pytest.raises(ValueError, match="one size per loop"):
        f.tile_band([f.computations["sB"], f.computations["sA"]], ["t", "i"], [3])
    with pytest.raises(TypeError, match="statements must be a list"):
        f.tile_band("sB", ["t"], [3])
    assert f.schedule_commands() == []


def collapsible(params=None):
    f = tp.Function("coll", params=params or {"A": 3, "B": 10, "C": 7})
    a, b, c = f.var("a", 0, "A"), f.var("b", 0, "B"), f.var("c", 0, "C")
    X = f.input("X", ("A", "B", "C"), tp.float64)
    Y = f.computation("Y", [a, b, c], X[a, b, c] * 2.0)
    return f, Y


@pytest.mark.parametrize("target", ["cpu", "llvm"])
def test_collapse_runs_two_loops_as_one(target):
    f, Y = collapsible()
    Y.tile("b", "c", 4, 4)
    Y.collapse("a", "b0")                 # 3 x 3 tiles of b: one loop of 9
    Y.parallelize("a_b0")
    assert [lp.name for lp in state_of(f)["Y"].loops] == ["a_b0", "c0", "b1", "c1"]
    k = f.compile(target)
    if target == "cpu":
        # the loops' values once per iteration; the indices the split's plain sums
        assert "for (int64_t a_b0 = 0; a_b0 < 9; a_b0++) {\n" \
               "    const int64_t a = a_b0 / 3;\n" \
               "    const int64_t b0 = a_b0 % 3;\n" \
               "    for (int64_t c0 = 0; c0 < 2; c0++) {\n" \
               "      for (int64_t b1 = 0; b1 < tp_min_i64(3, -4 * b0 + 9) + 1; b1++) {" \
               in k.source
        assert "Y[a][4 * b0 + b1][4 * c0 + c1] = X[a][4 * b0 + b1][4 * c0 + c1]" in k.source
    x = np.random.default_rng(0).standard_normal((3, 10, 7))
    np.testing.assert_allclose(k(X=x), 2 * x)
    assert f.undo() == 'Y.parallelize("a_b0")' and f.undo() == 'Y.collapse("a", "b0")'
    assert [lp.name for lp in state_of(f)["Y"].loops] == ["a", "b0", "c0", "b1", "c1"]


def test_collapse_of_a_shifted_inner_loop_and_a_free_outer_size():
    """The inner loop's range, not its extent alone: ``i - lo``; the outer
    loop may have a size given at call time (only the inner's must be fixed)."""
    f = tp.Function("freesize", params=["N"])
    i, j = f.var("i", 0, "N"), f.var("j", 2, 5)
    X = f.input("X", ("N", 5), tp.float64)
    Y = f.computation("Y", [i, j], X[i, j] + 1.0)
    Y.shift("j", 3)                       # j takes 5..7
    Y.collapse("i", "j", name="ij")
    x = np.random.default_rng(1).standard_normal((6, 5))
    k = f.compile()
    assert "for (int64_t ij = 0; ij < N * 3; ij++) {\n    const int64_t i = ij / 3;\n" \
           "    const int64_t j = ij % 3 + 5;\n    Y[i][j - 5] = X[i][j - 3] + 1.0;" in k.source
    np.testing.assert_allclose(k(X=x, N=6), x[:, 2:] + 1)


@pytest.mark.parametrize("target", ["cpu", "llvm"])
def test_collapsed_loops_that_are_no_perfect_nest_keep_the_tag_outside(target):
    """A triangle collapsed (j's bounds 0..3 overall, j <= i per row): isl's
    inner loop changes with the outer one, so they stay two loops, the outer
    one parallel; the result is right.  A collapsed loop two statements
    share (collapsed each, then ``after``) is given to isl as it is: right too."""
    f = tp.Function("tri", params={"N": 300})    # (enough work for the parallel grain)
    i = f.var("i", 0, "N")
    j = f.var("j", 0, i + 1)
    X = f.input("X", ("N", "N"), tp.float64)
    Y = f.computation("Y", [i, j], X[i, j] * 3.0)
    Y.collapse("i", "j")
    Y.parallelize("i_j")
    k = f.compile(target)
    if target == "cpu":
        assert "#pragma omp parallel for\n  for (int64_t i = 0; i < 300; i++) {\n" \
               "    for (int64_t j = 0; j < i + 1; j++) {" in k.source
    x = np.random.default_rng(2).standard_normal((300, 300))
    np.testing.assert_allclose(np.tril(k(X=x)), np.tril(3 * x))
    g, Z = collapsible()
    W = g.computation("W", [g.vars[0], g.vars[1], g.vars[2]], Z[g.vars[0], g.vars[1],
                                                              g.vars[2]] + 1.0)
    Z.collapse("a", "b")
    W.collapse("a", "b")
    W.after(Z, "a_b")                     # both in one loop a_b: isl gets it as it is
    x = np.random.default_rng(3).standard_normal((3, 10, 7))
    np.testing.assert_allclose(g.compile(target)(X=x), 2 * x + 1)


def test_collapse_refusals_name_the_reason():
    f, Y = collapsible()
    with pytest.raises(ValueError, match="must be the loop nested directly in 'a'"):
        Y.collapse("a", "c")
    with pytest.raises(ValueError, match="no loop 'q'"):
        Y.collapse("a", "q")
    with pytest.raises(ValueError, match="must be an identifier"):
        Y.collapse("a", "b", name="a b")
    Y.parallelize("a")
    with pytest.raises(ValueError, match="loop 'a' is already tagged"):
        Y.collapse("a", "b")
    assert f.schedule_commands() == ["Y.parallelize(a)"]
    g, Z = collapsible(["A", "B", "C"])
    with pytest.raises(ValueError, match="bounds of loop 'b' change with a size given at call"):
        Z.collapse("a", "b")
    h = tp.Function("two", params={"N": 4})
    i, j = h.var("i", 0, "N"), h.var("j", 0, "N")
    P = h.computation("P", [i, j], 1.0)
    Q = h.computation("Q", [i, j], P[i, j] * 2.0)
    Q.after(P, "i")
    with pytest.raises(ValueError, match="P also run.*inside loop 'i'"):
        Q.collapse("i", "j")
    assert h.schedule_commands() == ["Q.after(P, i)"]

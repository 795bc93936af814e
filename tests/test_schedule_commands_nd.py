"""The commands issue 29 added to the language, each with its rule:
``parallelize(loop, schedule=, chunk=)`` (OpenMP's schedule clause; legality
as any parallel loop; the LLVM backend refuses what it cannot do, by name),
``tile`` over any number of loops, and ``f.tile_band`` (several statements of
a nest tiled as one band, legal iff the band is permutable)."""
from __future__ import annotations

import numpy as np
import pytest

import tiramisu_py as tp
from auto_kernels import KERNELS


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
    spec = KERNELS["jacobi-1d"]
    f = spec.build()
    sB, sA = f.computations["sB"], f.computations["sA"]
    sA.shift("i", 1)
    if skew:
        sB.skew("t", "i", 2)
        sA.skew("t", "i", 2)
    f.tile_band([f.computations[s] for s in statements], ["t", "i"], [3, 4])
    return spec, f


def test_tile_band_two_statement_stencil():
    spec, f = jacobi1d_band()
    st = f._state_cache
    assert [lp.name for lp in st["sB"].loops] == ["t0", "i0", "t1", "i1"]
    assert st["sB"].consts[:3] == st["sA"].consts[:3]       # t0, i0, t1 shared
    assert st["sB"].consts[3] < st["sA"].consts[3]          # sA after sB inside t1
    inputs = spec.inputs(np.random.default_rng(0))
    out = f.compile()(**{k: v.copy() for k, v in inputs.items()}, **spec.params)
    ref = spec.reference(**inputs, **spec.params)
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
    spec = KERNELS["jacobi-1d"]
    f = spec.build()
    with pytest.raises(ValueError, match="one size per loop"):
        f.tile_band([f.computations["sB"], f.computations["sA"]], ["t", "i"], [3])
    with pytest.raises(TypeError, match="statements must be a list"):
        f.tile_band("sB", ["t"], [3])
    assert f.schedule_commands() == []

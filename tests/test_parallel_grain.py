"""The parallel grain (codegen.regions.run_small_serially,
tiramisu_py.driver.grain): a parallel loop, a region of adjacent ones or a
stepped region whose work between two synchronisations is below the grain
runs on one thread; its result is the same."""
import numpy as np
import pytest

import tiramisu_py as tp
from codegen import ir
from codegen.regions import run_small_serially, work
from tiramisu_py.driver import grain

from tests.test_stepped_region import _jacobi, _reference


def _kinds(fn):
    return [s.kind for s in ir.walk_stmts(fn.body) if isinstance(s, ir.For) and s.var == "i"]


def _lowered(f, target="cpu"):
    return f.compile(target=target).lowered


@pytest.fixture
def grain_env(monkeypatch):
    def set_grain(value):
        monkeypatch.setenv(grain.ENV, str(value))
    return set_grain


def test_work_bounds_a_loop_nest_from_its_intervals():
    i, j = ir.Var("i"), ir.Var("j")
    store = ir.Store("A", (i, j), ir.Const(0.0, "float64"))
    inner = ir.For("j", ir.Const(0, "int64"),
                   ir.Binary("min", ir.Const(16, "int64"), ir.Binary("sub", ir.Var("N"), i, "int64"),
                             "int64"), store)
    outer = ir.For("i", ir.Const(0, "int64"), ir.Var("N"), inner, kind="parallel")
    assert work(outer, {"N": (100, 100)}) == 100 * 16
    assert work(outer, {}) is None                   # N given at call time: no bound


def test_small_stepped_region_runs_on_one_thread_with_the_same_result(backend, grain_env):
    grain_env(1 << 15)
    a, b = np.linspace(0, 1, 64), np.zeros(64)
    k = _jacobi(30, 64).compile(target=backend)
    assert set(_kinds(k.lowered)) == {"serial"}
    got = k(A=a.copy(), B=b.copy())
    np.testing.assert_allclose(got["A"], _reference(a, b, 30)[0], rtol=1e-13)
    if backend == "c":
        assert "#pragma omp" not in k.source
        assert "runs on one thread: at most 62 statement instances" in k.source


def test_large_or_unbounded_work_stays_parallel(grain_env):
    grain_env(1 << 15)
    assert set(_kinds(_lowered(_jacobi(3, 1 << 16)))) == {"parallel"}
    f = tp.Function("sym", params=["N"])             # N at call time: stays parallel
    i = f.var("i", 0, "N")
    x = f.input("x", ("N",), tp.float64)
    f.computation("y", [i], x[i] * 2.0).parallelize("i")
    assert _kinds(_lowered(f)) == ["parallel"]


def test_a_region_turns_serial_together_or_not_at_all():
    """Two adjacent parallel loops share one region: one small and one large
    stay parallel together (one fork), both small go serial together."""
    def fn(n_small, n_large):
        loops = []
        for name, n in (("i", n_small), ("k", n_large)):
            v = ir.Var(name)
            loops.append(ir.For(name, ir.Const(0, "int64"), ir.Const(n, "int64"),
                                ir.Store(name.upper(), (v,), ir.Const(1.0, "float64")),
                                kind="parallel"))
        return ir.LoweredFunction("f", [], [], ir.Block(loops))
    mixed = run_small_serially(fn(10, 10 ** 6), 1000)
    assert [s.kind for s in mixed.body.stmts] == ["parallel", "parallel"]
    small = run_small_serially(fn(10, 20), 1000)
    assert [s.kind for s in small.body.stmts] == ["serial", "serial"]
    assert run_small_serially(fn(10, 20), 0).body.stmts[0].kind == "parallel"


def test_the_grain_comes_from_the_environment_then_the_store(grain_env, monkeypatch):
    grain_env(123)
    assert grain.parallel_grain() == 123 and "$TIRAMISU_PY_PARALLEL_GRAIN" in grain.describe()
    monkeypatch.delenv(grain.ENV)
    assert grain.parallel_grain() == grain.DEFAULT
    tp.tuning.put(grain.KIND, grain.host_key(), 4096)
    try:
        assert grain.parallel_grain() == 4096 and "measured" in grain.describe()
    finally:
        tp.tuning.forget(grain.KIND)
    grain_env("many")
    with pytest.raises(ValueError, match="TIRAMISU_PY_PARALLEL_GRAIN"):
        grain.parallel_grain()

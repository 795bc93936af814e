"""The parallel grain (codegen.regions.run_small_serially,
tiramisu_py.tuning.grain): a parallel loop, a region of adjacent ones or a
stepped region whose work between two synchronisations is below the grain
runs on one thread; its result is the same."""
import numpy as np
import pytest

import tiramisu_py as tp
from codegen import ir
from codegen.regions import run_small_serially, work
from tiramisu_py.tuning import grain, keys

from tests.codegen.test_stepped_region import _jacobi, _reference


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
    tp.tuning.put(grain.KIND, keys.grain_host(), 4096)
    try:
        assert grain.parallel_grain() == 4096 and "measured" in grain.describe()
    finally:
        tp.tuning.forget(grain.KIND)
    grain_env("many")
    with pytest.raises(ValueError, match="TIRAMISU_PY_PARALLEL_GRAIN"):
        grain.parallel_grain()


class _Host:
    """A fake host: ``make(n, grain)`` gives a probe whose call advances the
    fake clock by a modelled time: one thread ``n`` ns a step, the team half
    that plus a barrier's ``sync`` s a step (``sync_ab`` for the probes made
    after the sweep: the A/B)."""

    def __init__(self, sync, sync_ab=None):
        self.now, self.made, self.sync, self.sync_ab = 0.0, 0, sync, sync if sync_ab is None else sync_ab

    def clock(self):
        return self.now

    def make(self, n, value):
        self.made += 1
        sweep = self.made <= 2 * len(grain.SIZES)
        sync = self.sync if sweep else self.sync_ab
        step = n * 1e-9 if value > n else n * 0.5e-9 + sync

        def call():
            self.now += grain.STEPS * step
        return call


def _tune(host, **kw):
    return grain.tune(host.make, clock=host.clock, **kw)


@pytest.fixture
def no_grain_record(monkeypatch):
    monkeypatch.delenv(grain.ENV, raising=False)
    tp.tuning.forget(grain.KIND)
    yield
    tp.tuning.forget(grain.KIND)


def test_a_measured_grain_is_recorded_when_the_ab_confirms_it(no_grain_record):
    host = _Host(sync=5e-6)          # the team wins from 12,500 instances a step on
    r = _tune(host)
    assert r["measured"] == 16384 and r["grain"] == grain.DEFAULT
    assert r["verdict"].kept and r["recorded"]
    assert grain.parallel_grain() == 16384 and "measured" in grain.describe()


def test_a_team_fast_only_in_the_sweep_is_not_recorded(no_grain_record):
    """The sweep saw the team win at every size (another process paused
    that moment); timed again beside one thread it ties or loses: nothing is
    recorded, and the grain in use stays the default."""
    host = _Host(sync=0.0, sync_ab=1e-3)
    r = _tune(host)
    assert r["measured"] == 1024
    assert not r["verdict"].kept and not r["recorded"]
    assert grain.parallel_grain() == grain.DEFAULT


def test_a_dry_run_records_nothing(no_grain_record):
    r = _tune(_Host(sync=5e-6), dry_run=True)
    assert r["verdict"].kept and not r["recorded"]
    assert grain.parallel_grain() == grain.DEFAULT


def test_the_probe_runs_and_the_cli_says_what_it_kept(no_grain_record, capsys, monkeypatch):
    from tiramisu_py import cli
    for value in (0, 1 << 30):                        # the team, one thread: the same result
        call = cli.grain_probe(4096, value)
        np.testing.assert_allclose(call(), np.full(4096, 2.0, np.float32), rtol=1e-6)
    host = _Host(sync=5e-6)
    monkeypatch.setattr(cli, "grain_probe", host.make)
    real = grain.tune
    monkeypatch.setattr(grain, "tune", lambda make, **kw: real(make, clock=host.clock, **kw))
    cli.tune_grain(dry_run=True)
    out = capsys.readouterr().out
    assert "grain: measured 16384, in use 32768" in out and "not recorded (dry run)" in out


def test_the_grain_record_is_listed_and_forgotten(no_grain_record, capsys):
    from tiramisu_py import cli
    tp.tuning.put(grain.KIND, keys.grain_host(), 8192)
    cli.list_tuned()
    assert "parallel grain: 8192 statement instances (measured on this host)" in \
        capsys.readouterr().out
    cli.forget_tuned("grain")
    assert "forgot 1 parallel grain record(s)" in capsys.readouterr().out
    assert grain.record() is None and grain.parallel_grain() == grain.DEFAULT


def test_a_warm_library_kernel_is_keyed_by_the_grain(grain_env):
    """A library kernel made under one grain is not reused under another
    (its loops may run on one thread in one and not in the other)."""
    from tiramisu_py.driver import warm
    grain_env(0)
    a = warm.library_key(("gemm", 64), "llvm", "host")
    grain_env(1 << 20)
    assert warm.library_key(("gemm", 64), "llvm", "host") != a

"""The team a kernel call runs with (codegen.team): the whole team on a
quiet machine; on a busy one, a kernel with little work between its
synchronisations runs with the cores other processes leave free (the setting
restored after the call); the free cores from /proc/stat less this
process's own CPU time."""
import numpy as np
import pytest

from codegen import regions, team


class _Omp:
    """libgomp's omp_get_max_threads / omp_set_num_threads, recorded."""

    def __init__(self, threads=2):
        self.threads, self.calls = threads, []

    def get(self):
        return self.threads

    def put(self, n):
        self.calls.append(n)
        self.threads = n


@pytest.fixture
def omp(monkeypatch):
    fake = _Omp()
    monkeypatch.setattr(team, "_omp", [(fake.get, fake.put)])
    monkeypatch.setattr(team, "ADAPT", True)
    return fake


def _run(syncs, mean=None):
    t = team.Timing()
    t.mean = mean
    seen = []
    team.call(lambda: seen.append(1), (), t, syncs)
    return t


def test_a_busy_machine_runs_short_kernels_with_the_free_cores(omp):
    with team.forced(1):
        t = _run(syncs=9)                       # no time yet: short until known
        assert omp.calls == [1, 2] and omp.threads == 2      # restored after the call
        assert t.mean is not None
        omp.calls.clear()
        _run(syncs=9, mean=1e-3)                 # 1 ms for 9 meetings: short
        assert omp.calls == [1, 2]
        omp.calls.clear()
        _run(syncs=1, mean=1e-3)                 # 1 ms for one: keeps the team
        _run(syncs=0)                            # no parallel region
        assert omp.calls == []
    with team.forced(2):                         # quiet: the whole team
        _run(syncs=9)
        assert omp.calls == []


def test_a_busy_machine_keeps_the_way_that_measured_faster(omp, monkeypatch):
    """After the first guess, each way once, then the faster on average; the
    slower tried again every EXPLORE calls (a fake clock: a call with the
    free cores takes 3 units here, with the whole team 1)."""
    from types import SimpleNamespace
    clock = {"t": 0.0}
    monkeypatch.setattr(team, "time", SimpleNamespace(
        perf_counter=lambda: clock["t"], monotonic=lambda: clock["t"],
        process_time=lambda: 0.0))
    t = team.Timing()

    def kernel():
        clock["t"] += 3.0 if omp.threads == 1 else 1.0
    with team.forced(1):
        ways = []
        for _ in range(3 * team.EXPLORE):
            omp.calls.clear()
            team.call(kernel, (), t, syncs=1000)       # short: the first guess is fewer
            ways.append("fewer" if omp.calls == [1, 2] else "whole")
    assert ways[:2] == ["fewer", "whole"]
    assert t.fewer == 3.0 and t.whole == 1.0
    tried = [k for k, w in enumerate(ways) if w == "fewer"]
    assert tried == [0] + [k for k in range(2, 3 * team.EXPLORE) if k % team.EXPLORE == team.EXPLORE - 1]
    assert omp.threads == 2                              # always restored


def test_a_quiet_machine_leaves_the_busy_averages_alone(omp):
    t = team.Timing()
    with team.forced(2):
        team.call(lambda: None, (), t, syncs=5)
    assert t.mean is not None and t.whole is None and t.fewer is None and t.busy_calls == 0


def test_adapting_can_be_turned_off(omp, monkeypatch):
    monkeypatch.setattr(team, "ADAPT", False)
    with team.forced(1):
        _run(syncs=9)
    assert omp.calls == []


def test_the_free_cores_leave_out_this_process_own_time(monkeypatch):
    clock = {"t": 100.0, "busy": 50.0, "self": 10.0}
    monkeypatch.setattr(team.time, "monotonic", lambda: clock["t"])
    monkeypatch.setattr(team.time, "process_time", lambda: clock["self"])
    monkeypatch.setattr(team, "_host_busy", lambda: clock["busy"])
    monkeypatch.setattr(team.target, "cores", lambda: 2)
    monkeypatch.setattr(team, "_state", {"at": None, "busy": None, "self": None, "free": None})
    assert team.free_cores() is None                 # the first reading: nothing to compare
    clock.update(t=101.0, busy=51.9, self=10.9)       # 1.9 busy core-s, 0.9 of them ours
    assert team.free_cores() == 1
    clock.update(t=101.05, busy=60.0)                 # within INTERVAL: the last reading
    assert team.free_cores() == 1
    clock.update(t=102.0, busy=53.1, self=11.9)       # only ours busy now (1.2 vs 1.0 s)
    assert team.free_cores() == 2


def test_a_kernel_counts_its_team_meetings():
    from tests.codegen.test_stepped_region import _jacobi
    k = _jacobi(5, 64).compile()                  # two parallel sweeps a step
    assert k.lowered.syncs == regions.synchronisations(k.lowered) == 1 + 5 * 2   # a fork, barriers
    got = k(A=np.zeros(64), B=np.zeros(64))
    np.testing.assert_array_equal(got["A"], np.zeros(64))


def _spin_in_child(code, **env):
    """What ``codegen.team`` decided about libgomp's waiting in a fresh
    process (``code`` runs first), and the GOMP_SPINCOUNT libgomp will read."""
    import os
    import subprocess
    import sys
    environ = {k: v for k, v in os.environ.items()
               if k not in ("OMP_WAIT_POLICY", "GOMP_SPINCOUNT", team.ENV)}
    environ.update(env)
    out = subprocess.run([sys.executable, "-c", code + "\nimport os, codegen.team as t\n"
                          "print(t.SPIN, os.environ.get('GOMP_SPINCOUNT'))"],
                         capture_output=True, text=True, env=environ, check=True)
    return out.stdout.split()


def test_libgomps_waiting_is_bounded_where_the_user_left_it_to_libgomp():
    """Imported before libgomp is loaded, with no wait policy or spin count
    set: the idle workers poll SPINCOUNT times, not libgomp's 300,000 (~9 ms
    on a Zen 5 core) after every call; the user's own setting is kept; and
    TIRAMISU_PY_ADAPTIVE_TEAM=0 leaves libgomp alone."""
    assert _spin_in_child("") == ["bounded", str(team.SPINCOUNT)]
    assert _spin_in_child("", OMP_WAIT_POLICY="active") == ["user", "None"]
    assert _spin_in_child("", GOMP_SPINCOUNT="123") == ["user", "123"]
    assert _spin_in_child("", TIRAMISU_PY_ADAPTIVE_TEAM="0") == ["off", "None"]


def test_libgomp_loaded_before_is_left_as_it_is_and_said():
    """libgomp loaded first (as torch does when imported first): too late to
    change its waiting; the module says so and touches nothing."""
    code = "import ctypes, os; ctypes.CDLL('libgomp.so.1', mode=os.RTLD_GLOBAL)"
    assert _spin_in_child(code) == ["default", "None"]


def test_a_busy_machine_under_the_unchangeable_default_warns_once(omp, monkeypatch):
    monkeypatch.setattr(team, "SPIN", "default")
    monkeypatch.setattr(team, "_warned", [])
    with team.forced(1):
        with pytest.warns(RuntimeWarning, match="OMP_WAIT_POLICY=passive"):
            _run(syncs=9)
        import warnings
        with warnings.catch_warnings():
            warnings.simplefilter("error")
            _run(syncs=9)                        # once a process
    assert "libgomp's default" in team.runtime_spin()
    monkeypatch.setattr(team, "SPIN", "bounded")
    assert f"GOMP_SPINCOUNT={team.SPINCOUNT}" in team.runtime_spin()


def test_the_bound_leaves_the_environment_once_libgomp_has_read_it():
    """Child processes started after the first parallel call see the user's
    environment, not the bound."""
    code = ("import os, numpy as np, tiramisu_py as tp, codegen.team as t\n"
            "f = tp.Function('f', params={'N': 64})\n"
            "i = f.var('i', 0, 'N')\n"
            "A = f.input('A', ('N',), tp.float32)\n"
            "C = f.computation('C', [i], A[i] + 1)\n"
            "C.parallelize('i')\n"
            "before = os.environ.get('GOMP_SPINCOUNT')\n"
            "f.compile()(A=np.zeros(64, np.float32))\n"
            "print(t.SPIN, before, os.environ.get('GOMP_SPINCOUNT'))\n")
    assert _spin_in_child(code, TIRAMISU_PY_PARALLEL_GRAIN="0")[:3] == \
        ["bounded", str(team.SPINCOUNT), "None"]

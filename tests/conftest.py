"""Test set-up: passive OpenMP waiting, parallel loops kept parallel however
small, the repo root importable (examples), and a fresh compile cache per test
session."""
import os
import sys

import pytest

os.environ.setdefault("OMP_WAIT_POLICY", "passive")
# the tests' kernels are small: without this their parallel loops would run on
# one thread (below the parallel grain) and the parallel code would go
# untested; tests/test_parallel_grain.py tests the grain itself
os.environ.setdefault("TIRAMISU_PY_PARALLEL_GRAIN", "0")
# the bench suites the tests run check results and reports, never times
os.environ.setdefault("TIRAMISU_PY_BENCH_SMOKE", "1")
ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
if ROOT not in sys.path:
    sys.path.insert(0, ROOT)


@pytest.fixture(scope="session", autouse=True)
def _session_cache(tmp_path_factory):
    old = os.environ.get("TIRAMISU_PY_CACHE")
    os.environ["TIRAMISU_PY_CACHE"] = str(tmp_path_factory.mktemp("tp_cache"))
    yield
    if old is None:
        os.environ.pop("TIRAMISU_PY_CACHE", None)
    else:
        os.environ["TIRAMISU_PY_CACHE"] = old


@pytest.fixture(params=["c", "llvm"])
def backend(request, monkeypatch):
    """Runs a test once per CPU backend (the default target of compile())."""
    monkeypatch.setenv("TIRAMISU_PY_TARGET", request.param)
    return request.param


def pytest_collection_modifyitems(config, items):
    """The long fuzz runs (tests marked ``fuzz``) run only when asked for:
    ``pytest -m fuzz`` or ``TIRAMISU_PY_FUZZ=nightly``; otherwise they are
    deselected (their CI-sized versions always run)."""
    if "fuzz" in (config.option.markexpr or "") or os.environ.get("TIRAMISU_PY_FUZZ"):
        return
    long_runs = [item for item in items if item.get_closest_marker("fuzz")]
    if long_runs:
        config.hook.pytest_deselected(items=long_runs)
        items[:] = [item for item in items if not item.get_closest_marker("fuzz")]

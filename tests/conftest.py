"""Test set-up: passive OpenMP waiting, parallel loops kept parallel however
small, the import paths (the checkout and tests/, also for child processes),
and a fresh compile cache per test session."""
import os
import sys

import pytest

os.environ.setdefault("OMP_WAIT_POLICY", "passive")
# the tests' kernels are small: without this their parallel loops would run on
# one thread (below the parallel grain) and the parallel code would go
# untested; tests/codegen/test_parallel_grain.py tests the grain itself
os.environ.setdefault("TIRAMISU_PY_PARALLEL_GRAIN", "0")
# the library's "auto" takes the first candidate solver, untimed (a model's test
# compiled every candidate of every layer to time them: half its time); the find
# step's timing and records are tested where it is the subject (find_timed below)
os.environ.setdefault("TIRAMISU_PY_FIND", "first")
# the bench suites the tests run check results and reports, never times
os.environ.setdefault("TIRAMISU_PY_BENCH_SMOKE", "1")
# the import paths, set up once: the checkout (examples, bench) and tests/ (the
# helpers every folder's tests import: repo_paths, lang_helpers, ...), for this
# process and, through PYTHONPATH, for the child processes tests start
TESTS = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(TESTS)
for _p in (TESTS, ROOT):
    if _p not in sys.path:
        sys.path.insert(0, _p)
os.environ["PYTHONPATH"] = os.pathsep.join(
    [ROOT, TESTS] + [p for p in os.environ.get("PYTHONPATH", "").split(os.pathsep) if p])


@pytest.fixture(scope="session", autouse=True)
def _session_cache(tmp_path_factory):
    old = os.environ.get("TIRAMISU_PY_CACHE")
    base = tmp_path_factory.getbasetemp()
    if os.environ.get("PYTEST_XDIST_WORKER"):
        # one cache for the run, shared by its workers (the cache is safe for
        # concurrent processes): a kernel one worker built, the other loads
        base = base.parent
    cache = base / "tp_cache"
    cache.mkdir(mode=0o700, exist_ok=True)
    os.environ["TIRAMISU_PY_CACHE"] = str(cache)
    yield
    if old is None:
        os.environ.pop("TIRAMISU_PY_CACHE", None)
    else:
        os.environ["TIRAMISU_PY_CACHE"] = old


@pytest.fixture
def uncontracted(monkeypatch):
    """C builds without multiply-add contraction (``-ffp-contract=off``), for
    tests that compare two schedules of one program bit for bit: gcc fuses
    ``c + a * b`` in one loop form and not in another (its Zen tuning leaves
    a loop-carried chain unfused, an in-order vectorised reduction is never
    fused), so two orders of the same additions may round differently;
    without contraction they may not."""
    monkeypatch.setenv("TIRAMISU_PY_CFLAGS", "-ffp-contract=off")


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


def _cuda_device():
    try:
        import torch
    except ImportError:
        return "torch is not installed"
    return None if torch.cuda.is_available() else "no CUDA device (torch.cuda)"


def pytest_runtest_setup(item):
    """A test marked ``gpu`` runs only where torch sees a CUDA device."""
    if item.get_closest_marker("gpu") is not None:
        missing = _cuda_device()
        if missing:
            pytest.skip(f"needs a CUDA GPU: {missing}")


@pytest.fixture
def find_timed(monkeypatch):
    """The library's find step as users have it: "auto" times its candidates."""
    monkeypatch.setenv("TIRAMISU_PY_FIND", "timed")

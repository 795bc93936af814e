"""A serial loop around parallel loops (a time loop around its parallel
sweeps) runs as one parallel region with the generated barrier after each
inner loop (codegen.regions), on both CPU backends: the same results as
NumPy, inner bounds that move with the step, an empty time loop, more
threads than cores, and two threads on one core (a waiting thread sleeps
after a short spin instead of holding the core its partner needs)."""
from repo_paths import ROOT
import os
import subprocess
import sys

import numpy as np
import pytest

import tiramisu_py as tp
from codegen import emit_llvm



def _jacobi(steps, n, shrink=False):
    """Two parallel sweeps a step; ``shrink``: step t updates [1 + t % 3, N - 1)."""
    f = tp.Function("steps", params={"T": steps, "N": n})
    t = f.var("t", 0, "T")
    i = f.var("i", 1 + t % 3 if shrink else 1, "N - 1")
    A = f.buffer("A", ("N",), tp.float64, output=True)
    B = f.buffer("B", ("N",), tp.float64, output=True)
    with f.nest(t):
        sb = f.computation("sB", [t, i], (A[i - 1] + A[i] + A[i + 1]) / 3.0).store_in(B, [i])
        sa = f.computation("sA", [t, i], 0.5 * (B[i - 1] + B[i + 1])).store_in(A, [i])
    sb.parallelize("i")
    sa.parallelize("i")
    return f


def _reference(a, b, steps, shrink=False):
    a, b = a.copy(), b.copy()
    n = len(a)
    for t in range(steps):
        lo = 1 + t % 3 if shrink else 1
        b[lo:n - 1] = (a[lo - 1:n - 2] + a[lo:n - 1] + a[lo + 1:n]) / 3.0
        a[lo:n - 1] = 0.5 * (b[lo - 1:n - 2] + b[lo + 1:n])
    return a, b



def _mixed(steps, n):
    """A parallel loop, a time loop around a parallel sweep, a parallel loop:
    one mixed region (codegen.regions.mixed_run)."""
    f = tp.Function("mixed", params={"T": steps, "N": n})
    t, i, j = f.var("t", 0, "T"), f.var("i", 1, "N - 1"), f.var("j", 0, "N")
    A = f.buffer("A", ("N",), tp.float64, output=True)
    B = f.buffer("B", ("N",), tp.float64, output=True)
    pre = f.computation("pre", [i], A[i] * 2.0).store_in(B, [i])
    with f.nest(t):
        sw = f.computation("sw", [t, i], 0.5 * (B[i - 1] + B[i + 1])).store_in(A, [i])
    post = f.computation("post", [j], A[j] + B[j]).store_in(B, [j])
    for c in (pre, sw, post):
        c.parallelize(c.vars[-1].name)
    return f


def _mixed_reference(a, b, steps):
    a, b = a.copy(), b.copy()
    b[1:-1] = a[1:-1] * 2.0
    for _ in range(steps):
        a[1:-1] = 0.5 * (b[:-2] + b[2:])
    return a, a + b


@pytest.mark.parametrize("steps", [0, 1, 6])
def test_a_loop_beside_a_stepped_region_shares_its_region(backend, steps):
    """One fork and join a call for the three loops (OpenMP's barrier after a
    plain loop, the generated one in the steps), the results NumPy's."""
    rng = np.random.default_rng(1)
    a, b = rng.standard_normal(40), rng.standard_normal(40)
    kern = _mixed(steps, 40).compile(target=backend)
    got = kern(A=a.copy(), B=b.copy())
    want = _mixed_reference(a, b, steps)
    np.testing.assert_allclose(got["A"], want[0], rtol=1e-14)
    np.testing.assert_allclose(got["B"], want[1], rtol=1e-14)
    # (a time loop of 0 or 1 steps is gone before: the plain loops' region)
    if backend == "llvm":
        src = emit_llvm(kern.lowered)
        assert src.count("call void @GOMP_parallel") == 1
        if steps > 1:
            assert src.count("call void @GOMP_barrier") == 2
            assert src.count('call void @"tp.barrier"(') == 1
    else:
        assert kern.source.count("#pragma omp parallel\n") == 1
        assert ("loops i, t, j: one region" in kern.source) == (steps > 1)


def test_a_loop_whose_bound_reads_memory_stays_out_of_a_mixed_region():
    """Its bound is evaluated before the fork (or by each thread), while a loop
    before it in the region could still write what it reads."""
    from codegen import ir, regions
    i, t = ir.Var("i", "int64"), ir.Var("t", "int64")
    store = ir.Store("A", (i,), ir.Const(1.0, "float64"))
    plain = ir.For("i", ir.Const(0, "int64"), ir.Const(8, "int64"), store, kind="parallel")
    stepped = ir.For("t", ir.Const(0, "int64"), ir.Const(3, "int64"), plain, kind="serial")
    read = ir.For("i", ir.Const(0, "int64"), ir.Load("K", (ir.Const(0, "int64"),), "int64"),
                  store, kind="parallel")
    assert regions.mixed_run([plain, stepped, plain], 0) == [plain, stepped, plain]
    assert regions.mixed_run([stepped, read], 0) == []
    assert regions.mixed_run([plain, plain], 0) == []          # no stepped loop: the plain run's


@pytest.mark.parametrize("shrink", [False, True])
def test_stepped_region_matches_numpy(backend, shrink):
    rng = np.random.default_rng(0)
    a, b = rng.standard_normal(50), rng.standard_normal(50)
    kern = _jacobi(7, 50, shrink).compile(target=backend)
    got = kern(A=a.copy(), B=b.copy())
    want = _reference(a, b, 7, shrink)
    np.testing.assert_allclose(got["A"], want[0], rtol=1e-14)
    np.testing.assert_allclose(got["B"], want[1], rtol=1e-14)
    if backend == "llvm":
        src = emit_llvm(kern.lowered)
        assert src.count("call void @GOMP_parallel") == 1          # one fork/join a call
        assert src.count('call void @"tp.barrier"') == 2       # after each sweep
    else:
        assert "one region, a barrier after each" in kern.source
        assert kern.source.count("#pragma omp parallel\n") == 1
        assert kern.source.count("tp_barrier(&tp_steps_t);") == 2


def test_empty_time_loop(backend):
    a = np.arange(10.0)
    got = _jacobi(0, 10).compile(target=backend)(A=a.copy(), B=a.copy())
    np.testing.assert_array_equal(got["A"], a)


_CHILD = """
import numpy as np, sys
sys.path.insert(0, {root!r})
from tests.codegen.test_stepped_region import _jacobi, _reference
a = np.linspace(0, 1, 300); b = np.zeros(300)
got = _jacobi(40, 300).compile(target={target!r})(A=a.copy(), B=b.copy())
want = _reference(a, b, 40)
assert np.allclose(got["A"], want[0], rtol=1e-13), "wrong"
print("ok")
"""


@pytest.mark.parametrize("threads", ["1", "5"])
def test_team_sizes(backend, threads):
    """One thread (the barrier returns at once) and more threads than this
    host's cores (waiting threads spin briefly, then sleep)."""
    env = dict(os.environ, OMP_NUM_THREADS=threads, OMP_WAIT_POLICY="passive")
    done = subprocess.run([sys.executable, "-c", _CHILD.format(root=ROOT, target=backend)],
                          env=env, capture_output=True, text=True, timeout=120)
    assert done.returncode == 0 and done.stdout.strip() == "ok", done.stderr[-2000:]


def test_bounds_that_read_memory_keep_a_region_per_step(backend):
    """An inner bound read from an array (which the team's stores could
    change while another thread still reads it) is not a stepped region."""
    f = tp.Function("counts", params={"T": 4, "N": 16})
    t = f.var("t", 0, "T")
    cnt = f.input("cnt", ("T",), tp.int32)
    i = f.var("i", 0, cnt[t])
    A = f.buffer("A", ("N",), tp.float64, output=True)
    with f.nest(t):
        s = f.computation("s", [t, i], A[i] + 1.0).store_in(A, [i])
    s.parallelize("i")
    kern = f.compile(target=backend)
    got = kern(cnt=np.array([3, 16, 0, 5], np.int32), A=np.zeros(16))
    want = np.zeros(16)
    for c in (3, 16, 0, 5):
        want[:c] += 1
    np.testing.assert_array_equal(got, want)
    if backend == "llvm":
        assert "tp.barrier" not in emit_llvm(kern.lowered)
    else:
        assert "one region" not in kern.source


_ONE_CORE = """
import os, resource, sys
import numpy as np
os.sched_setaffinity(0, {{min(os.sched_getaffinity(0))}})    # before OpenMP starts its threads
sys.path.insert(0, {root!r})
from tests.codegen.test_stepped_region import _jacobi, _reference
a = np.linspace(0, 1, 64); b = np.zeros(64)
kern = _jacobi(500, 64).compile(target={target!r})
kern(A=a.copy(), B=b.copy())                                  # the team exists
before = resource.getrusage(resource.RUSAGE_SELF).ru_nvcsw
got = kern(A=a.copy(), B=b.copy())
slept = resource.getrusage(resource.RUSAGE_SELF).ru_nvcsw - before
assert np.allclose(got["A"], _reference(a, b, 500)[0], rtol=1e-13), "wrong"
print(slept)
"""


def test_a_descheduled_partner_is_waited_for_asleep(backend):
    """Two threads on one core: at each of the 1,000 barriers the first to
    arrive cannot see its partner arrive while it holds the core.  A pure
    spin (this barrier before) held it for a whole spin budget or a
    scheduler slice per barrier; now the waiting thread sleeps on a futex
    after a short spin -- a voluntary context switch, counted by the kernel
    (getrusage), where a spin or a yield is an involuntary one."""
    # (the team is kept whole: codegen.team would run a short kernel on the one free core)
    env = dict(os.environ, OMP_NUM_THREADS="2", OMP_WAIT_POLICY="passive",
               TIRAMISU_PY_ADAPTIVE_TEAM="0")
    done = subprocess.run([sys.executable, "-c", _ONE_CORE.format(root=ROOT, target=backend)],
                          env=env, capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr[-2000:]
    if sys.platform.startswith("linux"):
        assert int(done.stdout) >= 500, done.stdout     # about one sleep per barrier

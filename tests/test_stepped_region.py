"""A serial loop around parallel loops (a time loop around its parallel
sweeps) runs as one parallel region with the generated spin barrier after
each inner loop (codegen.regions), on both CPU backends: the same results as
NumPy, inner bounds that move with the step, an empty time loop, and more
threads than cores (the barrier yields the core after its spin)."""
import os
import subprocess
import sys

import numpy as np
import pytest

import tiramisu_py as tp
from codegen import emit_llvm

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


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
        assert src.count('call void @"tp.spin_barrier"') == 2       # after each sweep
    else:
        assert "one region, a barrier after each" in kern.source
        assert kern.source.count("#pragma omp parallel\n") == 1
        assert kern.source.count("tp_spin_barrier(&tp_steps_t);") == 2


def test_empty_time_loop(backend):
    a = np.arange(10.0)
    got = _jacobi(0, 10).compile(target=backend)(A=a.copy(), B=a.copy())
    np.testing.assert_array_equal(got["A"], a)


_CHILD = """
import numpy as np, sys
sys.path.insert(0, {root!r})
from tests.test_stepped_region import _jacobi, _reference
a = np.linspace(0, 1, 300); b = np.zeros(300)
got = _jacobi(40, 300).compile(target={target!r})(A=a.copy(), B=b.copy())
want = _reference(a, b, 40)
assert np.allclose(got["A"], want[0], rtol=1e-13), "wrong"
print("ok")
"""


@pytest.mark.parametrize("threads", ["1", "5"])
def test_team_sizes(backend, threads):
    """One thread (the barrier returns at once) and more threads than this
    host's cores (waiting threads spin, then yield)."""
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
        assert "tp.spin_barrier" not in emit_llvm(kern.lowered)
    else:
        assert "one region" not in kern.source

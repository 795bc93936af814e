"""Kernels in a forked child (codegen.after_fork): after the parent ran a
parallel region, libgomp's docked workers do not exist in the child; the
child's first region used to wait for them forever.  Each case runs in a
subprocess under a time limit, so a regression fails instead of hanging."""
from repo_paths import ROOT
import os
import subprocess
import sys

import pytest


pytestmark = pytest.mark.skipif(not hasattr(os, "fork"), reason="no os.fork on this platform")

_KERNELS = r"""
import ctypes, multiprocessing, os, sys, threading
import numpy as np
import tiramisu_py as tp

def kernels(target):
    # a parallel loop, then a time loop around two parallel sweeps (one region
    # with the generated barrier), then a parallel sum
    f = tp.Function("fk_add", params=["N"])
    i = f.var("i", 0, "N")
    A = f.input("A", ("N",), tp.float64)
    f.computation("B", [i], A[i] * 2.0 + 1.0).parallelize(i)
    g = tp.Function("fk_steps", params={"T": 5, "N": 4000})
    t, j = g.var("t", 0, "T"), g.var("j", 1, "N - 1")
    X = g.buffer("X", ("N",), tp.float64, output=True)
    Y = g.buffer("Y", ("N",), tp.float64, output=True)
    with g.nest(t):
        sy = g.computation("sY", [t, j], (X[j - 1] + X[j] + X[j + 1]) / 3.0).store_in(Y, [j])
        sx = g.computation("sX", [t, j], 0.5 * (Y[j - 1] + Y[j + 1])).store_in(X, [j])
    sy.parallelize("j")
    sx.parallelize("j")
    h = tp.Function("fk_sum", params=["M", "N"])
    r, k = h.var("r", 0, "M"), h.var("k", 0, "N")
    Z = h.input("Z", ("M", "N"), tp.float64)
    S = h.computation("S", [r], 0.0)
    S[r] += Z[r, k]
    S.update.parallelize("k", allow_reassociation=True)
    return [f.compile(target=target), g.compile(target=target), h.compile(target=target)]

a = np.linspace(0.0, 1.0, 100000)
x0, y0 = np.sin(np.arange(4000.0)), np.cos(np.arange(4000.0))
z = np.arange(3 * 5000.0).reshape(3, 5000) % 7      # small integers: any order sums exactly

def run(ks):
    add, steps, total = ks
    out = steps(X=x0.copy(), Y=y0.copy())
    return [add(a), out["X"], out["Y"], total(z)]

def same(xs, ys):
    return all(np.array_equal(p, q) for p, q in zip(xs, ys))
"""


def _run(body: str, timeout: int = 120):
    env = {**os.environ, "OMP_NUM_THREADS": "2", "PYTHONPATH": ROOT}
    try:
        r = subprocess.run([sys.executable, "-c", _KERNELS + body], env=env, timeout=timeout,
                           capture_output=True, text=True)
    except subprocess.TimeoutExpired:
        pytest.fail("a kernel in a forked child hung (no result within %d s)" % timeout)
    assert r.returncode == 0, r.stdout + r.stderr
    return r.stdout


@pytest.mark.parametrize("target", ["cpu", "llvm"])
def test_os_fork_child_runs_parallel_kernels(target):
    """The parent ran each kernel (its team docked); the child, its threads
    gone, gets the parent's results; so does a thread the child starts, and
    the child's main thread after other code asked libgomp for 2 threads."""
    out = _run(f"""
ks = kernels({target!r})
want = run(ks)
pid = os.fork()
if pid == 0:
    ok = same(run(ks), want)
    box = []
    th = threading.Thread(target=lambda: box.append(same(run(ks), want)))
    th.start(); th.join()
    ctypes.CDLL("libgomp.so.1").omp_set_num_threads(2)   # as torch.set_num_threads(2) would
    ok = ok and box == [True] and same(run(ks), want)
    os._exit(0 if ok else 3)
_, status = os.waitpid(pid, 0)
print("child", os.waitstatus_to_exitcode(status))
""")
    assert out.strip() == "child 0"


def test_fork_pool_workers_run_parallel_kernels():
    """multiprocessing's 'fork' start method (Linux's default, a torch
    DataLoader's workers): every worker computes what the parent did."""
    out = _run("""
ks = kernels("llvm")
want = run(ks)
def work(_):
    return same(run(ks), want)
with multiprocessing.get_context("fork").Pool(2) as pool:
    print(pool.map(work, range(4)))
""")
    assert out.strip() == "[True, True, True, True]"

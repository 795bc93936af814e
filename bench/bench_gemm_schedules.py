"""DESIGN.md's GEMM schedule and the issue's LLVM GEMM on both backends and
NumPy, in one process, calls interleaved (one of each per round, so a load
change hits all alike), over several freshly allocated array sets (timings
depend on the physical pages an array gets), medians and minimums.

    python -m bench.bench_gemm_schedules [--sets 4] [--rounds 5]

Cases: ``tile(i, j, 32, 32)``, ``vectorize("j1", 16)``, ``parallelize("i0")``
at 1024^3 (vs NumPy), and ``tile(i, j, 32, 64)`` (same) at 512^3 (LLVM vs C).
"""
from __future__ import annotations

import argparse
import os
import statistics
import sys
import time

os.environ.setdefault("OMP_WAIT_POLICY", "passive")
# NumPy's OpenBLAS threads spin ~0.1 s after each call (2^28 cycles) and, on a
# 2-core host, halve the speed of a kernel timed right after a NumPy call:
# let them sleep at once, as our own threads do (OMP_WAIT_POLICY=passive)
os.environ.setdefault("OPENBLAS_THREAD_TIMEOUT", "4")
sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

import numpy as np  # noqa: E402

from bench.corpus import _gemm_design  # noqa: E402


def measure(n, tile, sets, rounds, seed=0):
    """{name: [seconds]} for numpy, C and LLVM on ``sets`` array sets."""
    kernels = {t: _gemm_design(tile).compile(t) for t in ("c", "llvm")}
    rng = np.random.default_rng(seed)
    times = {"numpy": [], "c": [], "llvm": []}
    for _ in range(sets):
        a = rng.standard_normal((n, n), dtype=np.float32)
        b = rng.standard_normal((n, n), dtype=np.float32)
        ref = a @ b
        calls = {"numpy": lambda: a @ b}
        for t, k in kernels.items():
            if not np.allclose(k(a, b), ref, rtol=1e-3, atol=1e-3):
                raise SystemExit(f"{t}: GEMM {n}^3 tile {tile} does not match NumPy")
            calls[t] = lambda k=k: k(a, b)
        for _ in range(rounds):
            for name, call in calls.items():
                t0 = time.perf_counter()
                call()
                times[name].append(time.perf_counter() - t0)
    return times


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--sets", type=int, default=4)
    p.add_argument("--rounds", type=int, default=5)
    args = p.parse_args(argv)
    print(f"threads: {os.environ.get('OMP_NUM_THREADS', 'default')}; "
          f"{args.sets} array sets x {args.rounds} rounds")
    for n, tile in ((1024, (32, 32)), (512, (32, 64))):
        ts = measure(n, tile, args.sets, args.rounds)
        med = {k: statistics.median(v) for k, v in ts.items()}
        low = {k: min(v) for k, v in ts.items()}
        print(f"gemm {n}^3 tile {tile[0]}x{tile[1]}, vectorize j1 16, parallel i0")
        for k in ts:
            print(f"  {k:6} median {med[k] * 1e3:8.2f} ms  min {low[k] * 1e3:8.2f} ms  "
                  f"{2.0 * n ** 3 / med[k] / 1e9:6.1f} GF/s (median)  "
                  f"x NumPy: {med['numpy'] / med[k]:.2f} (median) {low['numpy'] / low[k]:.2f} (min)")
        print(f"  LLVM/C speed: {med['c'] / med['llvm']:.2f} (median) {low['c'] / low['llvm']:.2f} (min)")


if __name__ == "__main__":
    main()

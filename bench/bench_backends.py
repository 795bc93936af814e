"""Backend benchmark: the same loop IR through the C and the LLVM backends.

``time_compiled(cf, scalars, addresses)`` times any compiled function (either
backend: both have ``.func``).  ``python bench/bench_backends.py [n] [repeats]``
builds a hand-written GEMM loop IR (n^3, default 1024: ``i`` parallel, ``k`` in the
middle, ``j`` vector, i-k-j order), checks both results against NumPy and prints
the medians and the LLVM/C ratio.
"""
from __future__ import annotations

import os
import statistics
import sys
import time
from pathlib import Path

os.environ.setdefault("OMP_WAIT_POLICY", "passive")
ROOT = Path(__file__).resolve().parents[1]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

import numpy as np  # noqa: E402

from codegen import compile_c, compile_llvm  # noqa: E402
from codegen.ir import (ArrayArg, Block, Const, For, Load, LoweredFunction,  # noqa: E402
                        ScalarArg, Store, Var, binary)


def time_compiled(cf, scalars, addresses, repeats: int = 10) -> float:
    """Median wall time in seconds of ``cf.func(*scalars, *addresses)`` over
    ``repeats`` calls, after one warm-up call.  Raises if a call fails."""
    args = (*scalars, *addresses)
    func = cf.func
    if func(*args) != 0:
        raise RuntimeError(f"{cf.name}: non-zero status")
    times = []
    for _ in range(repeats):
        t0 = time.perf_counter()
        func(*args)
        times.append(time.perf_counter() - t0)
    return statistics.median(times)


def gemm_ikj_ir(name: str = "gemm_ikj") -> LoweredFunction:
    """C[i,j] = sum_k A[i,k] * B[k,j]; i parallel, k serial, j vector (i-k-j)."""
    i, j, k, M, N, K = (Var(x) for x in ("i", "j", "k", "M", "N", "K"))
    zero = Const(0, "int64")
    cij = Load("C", (i, j), "float32")
    acc = Store("C", (i, j), binary("add", cij, binary("mul", Load("A", (i, k), "float32"),
                                                        Load("B", (k, j), "float32"))))
    body = For("i", zero, M, Block([
        For("j", zero, N, Store("C", (i, j), Const(0.0, "float32")), kind="vector"),
        For("k", zero, K, For("j", zero, N, acc, kind="vector")),
    ]), kind="parallel")
    return LoweredFunction(name, [ScalarArg("M"), ScalarArg("N"), ScalarArg("K")],
                           [ArrayArg("A", "float32", (M, K), False),
                            ArrayArg("B", "float32", (K, N), False),
                            ArrayArg("C", "float32", (M, N), True)], body)


def main(n: int = 1024, repeats: int = 10) -> dict:
    rng = np.random.default_rng(0)
    A = rng.standard_normal((n, n), dtype=np.float32)
    B = rng.standard_normal((n, n), dtype=np.float32)
    ref = A.astype(np.float64) @ B.astype(np.float64)
    fn = gemm_ikj_ir()
    results = {}
    for label, compile_fn in (("C", compile_c), ("LLVM", compile_llvm)):
        t0 = time.perf_counter()
        try:
            cf = compile_fn(fn)
        except Exception as exc:          # e.g. no C compiler on this machine
            print(f"{label:5s} unavailable: {exc}")
            continue
        t_compile = time.perf_counter() - t0
        C = np.zeros((n, n), np.float32)
        addrs = [x.__array_interface__["data"][0] for x in (A, B, C)]
        t = time_compiled(cf, [n, n, n], addrs, repeats)
        err = float(np.max(np.abs(C - ref)) / np.max(np.abs(ref)))
        results[label] = t
        print(f"{label:5s} compile+load {t_compile * 1e3:7.1f} ms   median {t * 1e3:8.2f} ms   "
              f"{2 * n ** 3 / t / 1e9:6.1f} GFLOP/s   rel. error {err:.1e}")
    if len(results) == 2:
        print(f"LLVM / C time ratio: {results['LLVM'] / results['C']:.3f}  "
              f"(threads: OMP_NUM_THREADS={os.environ.get('OMP_NUM_THREADS', 'default')})")
    return results


if __name__ == "__main__":
    main(*(int(a) for a in sys.argv[1:3]))

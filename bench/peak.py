"""The host's measured ceilings, for the benchmark header and each row's
fraction of peak: float32 FMA throughput and memory bandwidth, measured by
two small C kernels built with the library's own compiler and flags
(:mod:`codegen.toolchain`: ``-O3 -march=native -fopenmp``), on as many
threads as the row.

* FMA peak: each thread runs ``CHAINS`` independent chains of
  ``acc = acc * x + y`` on vectors of the widest SIMD width the compiler
  targets (GCC vector extensions: the same source gives AVX-512, AVX2 or
  NEON code), enough chains to cover the FMA latency on every port (Zen 4:
  2 ports x 4 cycles; Intel: 2 x 4), 2 FLOPs per lane.
* Bandwidth: STREAM's triad ``a[i] = b[i] + s * c[i]`` over three arrays of
  ``BYTES`` each (far beyond the last-level cache), counting 3 accesses of
  4 bytes per element (no write-allocate credit), best of ``REPEATS``.

Measured once per process and thread count (about 0.3 s each)."""
from __future__ import annotations

import ctypes
import functools
import os
import tempfile
import time

from codegen import target, toolchain

CHAINS = 16
BYTES = 64 << 20
REPEATS = 5

_SOURCE = r"""
#include <stdint.h>
#include <stdlib.h>
#include <omp.h>
typedef float vf __attribute__((vector_size(%(vbytes)d)));

/* every thread: CHAINS independent FMA chains, %(lanes)d lanes each */
double fma_loop(int64_t iters, int threads, float seed) {
  double sink = 0.0;
  #pragma omp parallel num_threads(threads) reduction(+: sink)
  {
    vf acc[%(chains)d];
    vf x, y;
    for (int l = 0; l < %(lanes)d; l++) { x[l] = 0.999f; y[l] = seed * 1e-3f; }
    for (int c = 0; c < %(chains)d; c++) acc[c] = x * (float)(c + 1);
    for (int64_t i = 0; i < iters; i++) {
      #pragma GCC unroll 64
      for (int c = 0; c < %(chains)d; c++) acc[c] = acc[c] * x + y;
    }
    for (int c = 0; c < %(chains)d; c++)
      for (int l = 0; l < %(lanes)d; l++) sink += acc[c][l];
  }
  return sink;
}

void triad(float *restrict a, const float *restrict b, const float *restrict c,
           int64_t n, float s, int threads) {
  #pragma omp parallel for num_threads(threads) schedule(static)
  for (int64_t i = 0; i < n; i++) a[i] = b[i] + s * c[i];
}

void fill(float *restrict a, int64_t n, float v, int threads) {
  #pragma omp parallel for num_threads(threads) schedule(static)
  for (int64_t i = 0; i < n; i++) a[i] = v;
}
"""


@functools.lru_cache(maxsize=None)
def _library():
    lanes = max(4, target.vector_bits() // 32)
    src = _SOURCE % {"vbytes": lanes * 4, "lanes": lanes, "chains": CHAINS}
    cc = toolchain.find_c_compiler()
    tmp = tempfile.mkdtemp(prefix="tiramisu_py_peak_")
    c_path, so_path = os.path.join(tmp, "peak.c"), os.path.join(tmp, "peak.so")
    with open(c_path, "w") as f:
        f.write(src)
    toolchain.build_shared(cc, toolchain.compiler_flags(cc), c_path, so_path)
    lib = ctypes.CDLL(so_path)
    lib.fma_loop.restype = ctypes.c_double
    lib.fma_loop.argtypes = [ctypes.c_int64, ctypes.c_int, ctypes.c_float]
    lib.triad.argtypes = [ctypes.c_void_p] * 3 + [ctypes.c_int64, ctypes.c_float, ctypes.c_int]
    lib.fill.argtypes = [ctypes.c_void_p, ctypes.c_int64, ctypes.c_float, ctypes.c_int]
    return lib, lanes


@functools.lru_cache(maxsize=None)
def fma_gflops(threads: int) -> float:
    """Measured float32 FMA throughput of ``threads`` threads, GFLOP/s."""
    lib, lanes = _library()
    iters = 1 << 16
    lib.fma_loop(iters, threads, 1.0)                         # warm up, wake the team
    best = float("inf")
    for _ in range(REPEATS):
        t0 = time.perf_counter()
        lib.fma_loop(iters * 8, threads, 1.0)
        best = min(best, time.perf_counter() - t0)
    return 2.0 * lanes * CHAINS * iters * 8 * threads / best / 1e9


@functools.lru_cache(maxsize=None)
def bandwidth_gbs(threads: int) -> float:
    """Measured triad bandwidth of ``threads`` threads, GB/s (10^9 bytes)."""
    import numpy as np
    lib, _ = _library()
    n = BYTES // 4
    arrays = [np.empty(n, np.float32) for _ in range(3)]
    for k, a in enumerate(arrays):                            # first touch by the team
        lib.fill(a.ctypes.data, n, float(k), threads)
    a, b, c = (x.ctypes.data for x in arrays)
    lib.triad(a, b, c, n, 3.0, threads)
    best = float("inf")
    for _ in range(REPEATS):
        t0 = time.perf_counter()
        lib.triad(a, b, c, n, 3.0, threads)
        best = min(best, time.perf_counter() - t0)
    return 3 * 4 * n / best / 1e9


def ceilings(threads) -> dict:
    """``{n: {"fma_gflops": .., "bandwidth_gbs": ..}}`` for each thread count;
    an entry is None where the C compiler could not build the probes."""
    out = {}
    for n in threads:
        try:
            out[n] = {"fma_gflops": round(fma_gflops(n), 1),
                      "bandwidth_gbs": round(bandwidth_gbs(n), 1)}
        except (toolchain.CompileError, OSError) as exc:
            out[n] = {"fma_gflops": None, "bandwidth_gbs": None, "failure": str(exc)}
    return out


def format_ceilings(ceil: dict) -> str:
    parts = []
    for n, c in ceil.items():
        if c.get("fma_gflops") is None:
            parts.append(f"{n} thread{'s' * (n != 1)}: not measured ({c.get('failure', '')[:60]})")
        else:
            parts.append(f"{n} thread{'s' * (n != 1)}: FMA peak {c['fma_gflops']:.0f} GFLOP/s, "
                         f"triad {c['bandwidth_gbs']:.1f} GB/s")
    return "measured: " + "; ".join(parts)

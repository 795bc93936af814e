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
* Dot-product peaks, where the compiler targets them (``-march=native`` on
  a host with AVX-512 VNNI / BF16): the same chains of ``vpdpbusd`` (u8 x s8
  quadruples into int32: 128 operations a 512-bit instruction, a
  multiply-add counted as 2, as the int8 GEMM counts them) and of
  ``vdpbf16ps`` (bf16 pairs into float32: 64 FLOPs an instruction); the
  ceilings of the int8 and bf16 GEMM rows (``Case.ceiling``).  ``None``
  where the host lacks the instruction.
* Bandwidth: STREAM's triad ``a[i] = b[i] + s * c[i]`` over three arrays of
  ``BYTES`` each (far beyond the last-level cache), counting 3 accesses of
  4 bytes per element (no write-allocate credit), best of ``REPEATS``.

Measured per process and thread count (about 0.7 s each) before the cases
and again after them, the higher of the two kept (:func:`best_of`)."""
from __future__ import annotations

import ctypes
import functools
import os
import tempfile
import time

from codegen import target, toolchain

CHAINS = 16          # 12 where the host has 16 vector registers: 16 chains and x, y spill there
BYTES = 64 << 20
REPEATS = 5
PROBE_S = 0.2        # the compute probes repeat for this long at least (best of all)

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

/* the dot-product instructions' chains, in assembly (GCC shuffles the
   accumulators of the intrinsics between registers every step): 16
   accumulators zmm0-15, the operands in zmm30/31; NaN where the target lacks
   the instructions */
#if defined(__x86_64__) && defined(__AVX512VNNI__) && defined(__AVX512BF16__)
#define DOT16(op) \
  op " %%%%zmm30, %%%%zmm31, %%%%zmm0\n\t" op " %%%%zmm30, %%%%zmm31, %%%%zmm1\n\t" \
  op " %%%%zmm30, %%%%zmm31, %%%%zmm2\n\t" op " %%%%zmm30, %%%%zmm31, %%%%zmm3\n\t" \
  op " %%%%zmm30, %%%%zmm31, %%%%zmm4\n\t" op " %%%%zmm30, %%%%zmm31, %%%%zmm5\n\t" \
  op " %%%%zmm30, %%%%zmm31, %%%%zmm6\n\t" op " %%%%zmm30, %%%%zmm31, %%%%zmm7\n\t" \
  op " %%%%zmm30, %%%%zmm31, %%%%zmm8\n\t" op " %%%%zmm30, %%%%zmm31, %%%%zmm9\n\t" \
  op " %%%%zmm30, %%%%zmm31, %%%%zmm10\n\t" op " %%%%zmm30, %%%%zmm31, %%%%zmm11\n\t" \
  op " %%%%zmm30, %%%%zmm31, %%%%zmm12\n\t" op " %%%%zmm30, %%%%zmm31, %%%%zmm13\n\t" \
  op " %%%%zmm30, %%%%zmm31, %%%%zmm14\n\t" op " %%%%zmm30, %%%%zmm31, %%%%zmm15\n\t"
#define CLOBBERS "xmm0", "xmm1", "xmm2", "xmm3", "xmm4", "xmm5", "xmm6", "xmm7", "xmm8", \
  "xmm9", "xmm10", "xmm11", "xmm12", "xmm13", "xmm14", "xmm15", "xmm30", "xmm31"
#define SETUP "vpxord %%%%zmm30, %%%%zmm30, %%%%zmm30\n\tvpternlogd $0xff, %%%%zmm31, %%%%zmm31, %%%%zmm31\n\t"
#endif

double dot_loop(int64_t iters, int threads, int bf16) {
#if defined(__x86_64__) && defined(__AVX512VNNI__) && defined(__AVX512BF16__)
  double sink = 0.0;
  #pragma omp parallel num_threads(threads) reduction(+: sink)
  {
    int64_t n = iters;
    if (bf16)
      __asm__ volatile(SETUP "1:\n\t" DOT16("vdpbf16ps") "dec %%0\n\tjnz 1b" : "+r"(n) :: CLOBBERS);
    else
      __asm__ volatile(SETUP "1:\n\t" DOT16("vpdpbusd") "dec %%0\n\tjnz 1b" : "+r"(n) :: CLOBBERS);
    sink += (double)n;
  }
  return sink;
#else
  (void)iters; (void)threads; (void)bf16;
  return 0.0 / 0.0;
#endif
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
    src = _SOURCE % {"vbytes": lanes * 4, "lanes": lanes, "chains": _chains()}
    cc = toolchain.find_c_compiler()
    tmp = tempfile.mkdtemp(prefix="tiramisu_py_peak_")
    c_path, so_path = os.path.join(tmp, "peak.c"), os.path.join(tmp, "peak.so")
    with open(c_path, "w") as f:
        f.write(src)
    toolchain.build_shared(cc, toolchain.compiler_flags(cc), c_path, so_path)
    lib = ctypes.CDLL(so_path)
    lib.fma_loop.restype = ctypes.c_double
    lib.fma_loop.argtypes = [ctypes.c_int64, ctypes.c_int, ctypes.c_float]
    lib.dot_loop.restype = ctypes.c_double
    lib.dot_loop.argtypes = [ctypes.c_int64, ctypes.c_int, ctypes.c_int]
    lib.triad.argtypes = [ctypes.c_void_p] * 3 + [ctypes.c_int64, ctypes.c_float, ctypes.c_int]
    lib.fill.argtypes = [ctypes.c_void_p, ctypes.c_int64, ctypes.c_float, ctypes.c_int]
    return lib, lanes


def _chains() -> int:
    """FMA chains a thread runs: :data:`CHAINS`, fewer where they and the two
    operands would not fit in the vector registers (AVX2: 12 of 16; 16 chains
    spilled there and measured half of the peak: 117 GFLOP/s on a Zen 3 where
    torch's GEMM ran at 159)."""
    return min(CHAINS, target.vector_registers() - 4)


def _probe_rounds():
    """The rounds of a compute probe: :data:`REPEATS` at least, and more
    until :data:`PROBE_S` have passed (a round is a few milliseconds; a
    virtual CPU taken away for a moment spoils a round, not the best one)."""
    start, k = time.perf_counter(), 0
    while k < REPEATS or time.perf_counter() - start < PROBE_S:
        yield k
        k += 1


@functools.lru_cache(maxsize=None)
def fma_gflops(threads: int) -> float:
    """Measured float32 FMA throughput of ``threads`` threads, GFLOP/s."""
    lib, lanes = _library()
    iters = 1 << 16
    lib.fma_loop(iters, threads, 1.0)                         # warm up, wake the team
    best = float("inf")
    for _ in _probe_rounds():
        t0 = time.perf_counter()
        lib.fma_loop(iters * 8, threads, 1.0)
        best = min(best, time.perf_counter() - t0)
    return 2.0 * lanes * _chains() * iters * 8 * threads / best / 1e9


@functools.lru_cache(maxsize=None)
def dot_gops(threads: int, kind: str) -> float | None:
    """Measured throughput of the host's dot-product instruction, ``kind``
    "vnni" (``vpdpbusd``, int8 GOPS) or "bf16" (``vdpbf16ps``, GFLOP/s);
    None where the compiler's target lacks AVX-512 VNNI and BF16."""
    lib, _ = _library()
    iters = 1 << 16
    bf16 = int(kind == "bf16")
    if lib.dot_loop(iters, threads, bf16) != 0.0:            # NaN: not on this target
        return None
    best = float("inf")
    for _ in _probe_rounds():
        t0 = time.perf_counter()
        lib.dot_loop(iters * 8, threads, bf16)
        best = min(best, time.perf_counter() - t0)
    per_instruction = 64 if bf16 else 128             # 512 bits: 16 lanes x 2 pairs / 4 quads
    return per_instruction * CHAINS * iters * 8 * threads / best / 1e9


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
    """``{n: {"fma_gflops": .., "bandwidth_gbs": .., "vnni_gops": ..,
    "bf16_gflops": ..}}`` for each thread count (the last two None without
    the instructions); an entry is None where the C compiler could not build
    the probes."""
    out = {}
    for n in threads:
        try:
            vnni, bf16 = dot_gops(n, "vnni"), dot_gops(n, "bf16")
            out[n] = {"fma_gflops": round(fma_gflops(n), 1),
                      "bandwidth_gbs": round(bandwidth_gbs(n), 1),
                      "vnni_gops": vnni and round(vnni, 1), "bf16_gflops": bf16 and round(bf16, 1)}
        except (toolchain.CompileError, OSError) as exc:
            out[n] = {"fma_gflops": None, "bandwidth_gbs": None, "failure": str(exc)}
    return out


def measure_again():
    """Forgets the measured ceilings, so that :func:`ceilings` measures anew."""
    for f in (fma_gflops, dot_gops, bandwidth_gbs):
        f.cache_clear()


def best_of(first: dict, second: dict) -> dict:
    """One thread count's ceilings from two measurements (before and after
    its cases): the higher of each.  The threads of a VM can share one core
    for seconds (the FMA peak of two threads then measures as one's); the
    lower FMA peak is kept as ``fma_gflops_low`` when it is under 0.8x the
    higher, and the table says so."""
    out = dict(first)
    for key, value in second.items():
        if isinstance(value, (int, float)) and isinstance(out.get(key), (int, float)):
            out[key] = max(out[key], value)
        elif out.get(key) is None:
            out[key] = value
    low = [c.get("fma_gflops") for c in (first, second)]
    if all(isinstance(v, (int, float)) for v in low) and min(low) < 0.8 * max(low):
        out["fma_gflops_low"] = min(low)
    return out


def format_ceilings(ceil: dict) -> str:
    parts = []
    for n, c in ceil.items():
        if c.get("fma_gflops") is None:
            parts.append(f"{n} thread{'s' * (n != 1)}: not measured ({c.get('failure', '')[:60]})")
        else:
            dots = "".join(f", {name} {c[key]:.0f} {unit}" for key, name, unit in (
                ("vnni_gops", "vpdpbusd", "GOPS"), ("bf16_gflops", "vdpbf16ps", "GFLOP/s"))
                if c.get(key))
            low = (f" (one of its two measurements, before and after the cases, gave "
                   f"{c['fma_gflops_low']:.0f}: the threads shared a core then)"
                   if c.get("fma_gflops_low") else "")
            parts.append(f"{n} thread{'s' * (n != 1)}: FMA peak {c['fma_gflops']:.0f} GFLOP/s{low}"
                         f"{dots}, triad {c['bandwidth_gbs']:.1f} GB/s")
    return "measured: " + "; ".join(parts)

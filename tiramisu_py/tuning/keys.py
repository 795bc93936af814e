"""Who a tuning record is for: this host's identity and the sizes' class, in
one place for every tuner.

A record is a measurement on one host for one class of sizes, and is read
only there: its key holds the host facts that change what is fastest for
what it measures, and sizes by their power-of-two class (1000 and 1024 share
a record, 512 does not).  Each tuner takes the facts it depends on:

* :func:`tiramisu_py.tune` (:func:`schedule_host`): CPU model, SIMD width,
  caches, cores (a schedule's tiles follow the caches);
* the parallel grain (:func:`grain_host`): CPU model, cores, SIMD width;
* the library's parameters (:func:`library_host`): CPU model, ISA features
  (:data:`ISA_FLAGS`), vector width and registers, cores, L1d/L2/L3 (with
  ``TIRAMISU_PY_HOST``'s pins), backend and library version.

The CPU model has one reader (:func:`codegen.target.cpu_model`).  The text of
each key is the one its tuner always wrote, so records made before are found."""
from __future__ import annotations

import math

from codegen import target

cpu_model = target.cpu_model

# the CPU features that change what is fastest (the ISA part of the library's key)
ISA_FLAGS = ("sse4_2", "avx", "avx2", "fma", "avx512f", "avx512bw", "avx512vl", "avx512_bf16",
             "avx512_vnni", "avx512_fp16", "avx_vnni", "amx_tile", "amx_bf16", "amx_int8",
             "asimd", "sve", "sve2")


def exponent(v) -> int:
    """The power of two nearest ``v`` (> 0; 0 for 0): its size class."""
    return round(math.log2(v)) if v > 0 else 0


def size_class(params: dict) -> str:
    """``{"N": 1000, "M": 24}`` -> ``"M~2^5,N~2^10"`` (:func:`tiramisu_py.tune`'s)."""
    return ",".join(f"{p}~2^{exponent(v)}" for p, v in sorted(params.items()))


def shape_class(key: dict, sizes) -> dict:
    """``key`` with the int values >= 2 of the fields named in ``sizes``
    (nested dicts too) as ``"~2^k"`` (the library's problem keys)."""
    def cls(k, v):
        if isinstance(v, dict):
            return {kk: cls(kk, vv) for kk, vv in v.items()}
        if k in sizes and isinstance(v, int) and not isinstance(v, bool) and v >= 2:
            return f"~2^{exponent(v)}"
        return v
    return {k: cls(k, v) for k, v in key.items()}


def isa() -> list:
    """The :data:`ISA_FLAGS` this CPU has, in that order."""
    flags = target.cpu_flags()
    return [f for f in ISA_FLAGS if f in flags]


def schedule_host() -> str:
    """The host part of a :func:`tiramisu_py.tune` record's key."""
    caches = sorted(f"L{lv}{k[0]}={v}" for (lv, k), v in target.cache_sizes().items())
    return f"{cpu_model()}|{target.vector_bits()}|{','.join(caches)}|{target.cores()}"


def grain_host() -> str:
    """The key of this host's parallel grain record."""
    return f"{cpu_model()}|cores={target.cores()}|simd={target.vector_bits()}"


def library_host(backend, facts, version) -> dict:
    """The host part of a library parameter record's key: ``facts`` are the
    host's as the library sizes its schedules (``schedules.host()``:
    vector_bits, vector_registers, cores, l1d, l2, l3, pins applied),
    ``backend`` ("llvm", "c") and the library's ``version``."""
    return {"cpu": cpu_model(), "isa": isa(), "vector_bits": facts.vector_bits,
            "vector_registers": facts.vector_registers, "cores": facts.cores,
            "l1d": facts.l1d, "l2": facts.l2, "l3": facts.l3, "backend": backend,
            "library": version}

"""The machine the generated code is for, read at run time: the CPU's
flags, its SIMD width, its caches and the cores this process may use.

Nothing here is hard-wired to one CPU.  Every fact can be pinned with the
environment variable ``TIRAMISU_PY_HOST`` (comma-separated ``name=value``,
names from :data:`FIELDS`), e.g. ``TIRAMISU_PY_HOST=vector_bits=256,cores=8``:
to generate (and tune) code for a machine one does not have, and to make the
generated code reproducible across hosts (the recorded-hash test pins it).
A pinned fact replaces what the probe read; the others are still read."""
from __future__ import annotations

import functools
import os
import platform

ENV = "TIRAMISU_PY_HOST"
FIELDS = ("vector_bits", "vector_registers", "l1d", "l2", "l3", "cores", "avx512_bf16",
          "avx512_vnni")
# instruction-set flags (0 or 1 when pinned): the dot-product instructions
# codegen.dotprod emits (vdpbf16ps, vpdpbusd)
FLAGS = ("avx512_bf16", "avx512_vnni")
_SYSFS_CACHE = "/sys/devices/system/cpu/cpu0/cache"


def pinned() -> dict:
    """{field: int} from ``TIRAMISU_PY_HOST``; ValueError naming the variable
    and the bad entry otherwise."""
    text = os.environ.get(ENV, "").strip()
    out = {}
    for item in filter(None, (x.strip() for x in text.split(","))):
        name, eq, value = item.partition("=")
        name = name.strip()
        if not eq or name not in FIELDS:
            raise ValueError(f"{ENV}: {item!r} is not name=value with a name from "
                             f"{', '.join(FIELDS)}")
        try:
            out[name] = int(value)
        except ValueError:
            raise ValueError(f"{ENV}: {name} must be an integer, got {value.strip()!r}") from None
        if name in FLAGS:
            if out[name] not in (0, 1):
                raise ValueError(f"{ENV}: {name} must be 0 or 1, got {out[name]}")
        elif out[name] <= 0 or (name == "vector_bits" and out[name] % 128):
            raise ValueError(f"{ENV}: {name} must be positive"
                             + (" and a multiple of 128" if name == "vector_bits" else "")
                             + f", got {out[name]}")
    return out


@functools.lru_cache(maxsize=None)
def cpu_flags() -> frozenset:
    """The CPU's feature flags (``/proc/cpuinfo``'s ``flags``, or ``Features``
    on Arm); empty where that cannot be read."""
    try:
        with open("/proc/cpuinfo") as fh:
            for line in fh:
                if line.startswith(("flags", "Features")):
                    return frozenset(line.split(":", 1)[1].split())
    except OSError:
        pass
    return frozenset()


def has(flag: str) -> bool:
    """Whether the host has the instruction-set ``flag`` (one of :data:`FLAGS`,
    as ``/proc/cpuinfo`` names it), unless pinned (``avx512_bf16=0`` generates
    the code of a host without it; ``=1`` code that only such a host runs)."""
    if flag not in FLAGS:
        raise ValueError(f"codegen.target.has: unknown flag {flag!r} (known: {', '.join(FLAGS)})")
    p = pinned().get(flag)
    return bool(p) if p is not None else flag in cpu_flags()


def _probed_vector_bits() -> int:
    flags = cpu_flags()
    if "avx512f" in flags:
        return 512
    if "avx2" in flags or "avx" in flags:
        return 256
    return 128


def vector_bits() -> int:
    """The widest SIMD register the generated code may use (AVX-512: 512,
    AVX/AVX2: 256, else 128), unless pinned."""
    return pinned().get("vector_bits") or _probed_vector_bits()


def vector_registers() -> int:
    """Architectural SIMD registers, unless pinned."""
    p = pinned().get("vector_registers")
    if p:
        return p
    arm = platform.machine().lower() in ("aarch64", "arm64")
    return 32 if vector_bits() >= 512 or arm else 16


def _parse_size(text: str) -> int:
    text = text.strip().upper()
    scale = {"K": 1 << 10, "M": 1 << 20, "G": 1 << 30}.get(text[-1:], 1)
    return int(text.rstrip("KMG")) * scale


@functools.lru_cache(maxsize=None)
def cache_sizes() -> dict:
    """{(level, kind): bytes} from sysfs (Linux); empty elsewhere."""
    out = {}
    try:
        entries = sorted(os.listdir(_SYSFS_CACHE))
    except OSError:
        return out
    for entry in entries:
        if not entry.startswith("index"):
            continue
        path = os.path.join(_SYSFS_CACHE, entry)
        try:
            with open(os.path.join(path, "level")) as fh:
                level = int(fh.read())
            with open(os.path.join(path, "type")) as fh:
                kind = fh.read().strip()
            with open(os.path.join(path, "size")) as fh:
                size = _parse_size(fh.read())
        except (OSError, ValueError):
            continue
        out[(level, kind)] = size
    return out


def cores() -> int:
    """Cores this process may run on, unless pinned."""
    p = pinned().get("cores")
    if p:
        return p
    try:
        return len(os.sched_getaffinity(0))
    except AttributeError:
        return os.cpu_count() or 1


@functools.lru_cache(maxsize=None)
def cpu_model() -> str:
    """The CPU's model name (``/proc/cpuinfo``), else the platform's word for it."""
    model = platform.processor() or platform.machine()
    try:
        with open("/proc/cpuinfo") as fh:
            for line in fh:
                if line.startswith("model name"):
                    return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return model

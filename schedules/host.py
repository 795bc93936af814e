"""What the schedules tune for, read from the machine at run time: SIMD width,
vector register count, cache sizes and usable cores.  Nothing here is
hard-coded to one CPU; every value has a conservative fallback."""
from __future__ import annotations

import functools
import os
import platform
from dataclasses import dataclass

_SYSFS_CACHE = "/sys/devices/system/cpu/cpu0/cache"


@dataclass(frozen=True)
class Host:
    vector_bits: int        # widest SIMD register the compiler may use
    vector_registers: int   # architectural SIMD registers
    l1d: int                # bytes, per core
    l2: int                 # bytes, per core
    l3: int                 # bytes, shared
    cores: int              # cores this process may run on

    def lanes(self, itemsize: int) -> int:
        """SIMD lanes for elements of ``itemsize`` bytes."""
        return max(1, self.vector_bits // (8 * itemsize))


def cpu_flags() -> set:
    try:
        with open("/proc/cpuinfo") as fh:
            for line in fh:
                if line.startswith(("flags", "Features")):
                    return set(line.split(":", 1)[1].split())
    except OSError:
        pass
    return set()


def _parse_size(text: str) -> int:
    text = text.strip().upper()
    scale = {"K": 1 << 10, "M": 1 << 20, "G": 1 << 30}.get(text[-1:], 1)
    return int(text.rstrip("KMG")) * scale


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


@functools.lru_cache(maxsize=None)
def host() -> Host:
    flags = cpu_flags()
    machine = platform.machine().lower()
    if "avx512f" in flags:
        bits, regs = 512, 32
    elif "avx2" in flags or "avx" in flags:
        bits, regs = 256, 16
    elif machine in ("aarch64", "arm64"):
        bits, regs = 128, 32
    else:
        bits, regs = 128, 16
    caches = cache_sizes()
    l1 = caches.get((1, "Data"), 32 << 10)
    l2 = caches.get((2, "Unified"), 1 << 20)
    l3 = caches.get((3, "Unified"), 8 << 20)
    try:
        cores = len(os.sched_getaffinity(0))
    except AttributeError:
        cores = os.cpu_count() or 1
    return Host(bits, regs, l1, l2, l3, cores)

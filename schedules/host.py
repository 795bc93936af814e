"""What the schedules tune for, read from the machine at run time
(:mod:`codegen.target`, the one reader): SIMD width, vector register count,
cache sizes and usable cores.  Nothing here is hard-coded to one CPU; every
value has a conservative fallback, and ``TIRAMISU_PY_HOST`` pins any of them."""
from __future__ import annotations

import functools
import os
from dataclasses import dataclass

from codegen import target


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


def host() -> Host:
    """This machine's facts (:mod:`codegen.target`; ``TIRAMISU_PY_HOST`` pins any of them)."""
    return _host(os.environ.get(target.ENV, ""))


@functools.lru_cache(maxsize=None)
def _host(_pin: str) -> Host:
    pinned = target.pinned()
    caches = target.cache_sizes()
    return Host(target.vector_bits(), target.vector_registers(),
                pinned.get("l1d") or caches.get((1, "Data"), 32 << 10),
                pinned.get("l2") or caches.get((2, "Unified"), 1 << 20),
                pinned.get("l3") or caches.get((3, "Unified"), 8 << 20),
                target.cores())

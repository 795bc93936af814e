"""Tile sizes the schedules derive from a problem's extents."""
from __future__ import annotations


def largest_divisor(n: int, limit: int) -> int:
    """The largest divisor of ``n`` that is at most ``limit`` (1 when there
    is none: ``n`` or ``limit`` below 1): a tile that splits ``n`` with no
    remainder."""
    return max((d for d in range(1, min(n, limit) + 1) if n % d == 0), default=1)

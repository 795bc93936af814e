"""Threads for the library's memory-bound C helpers (comparing a cached
weight's bytes, packing a weight): a call releases the GIL (ctypes, cffi),
so a loop cut into ranges runs on the host's cores from Python threads.

:func:`split` runs ``part(lo, hi)`` over ``[0, n)`` cut into :data:`THREADS`
ranges where the work is large enough to pay for the hand-offs (about 20
us a range), else in the caller's thread; :func:`pool` is the shared
executor (one per process; a forked child makes its own)."""
from __future__ import annotations

import os
import threading
from concurrent.futures import ThreadPoolExecutor, wait

THREADS = max(1, min(8, len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity")
                     else (os.cpu_count() or 1)))
# below this many bytes (read and written) one thread does the work as fast: a 256x256x3x3
# weight (4.7 MB) flipped and packed in 0.38 ms by one, 0.26 by two
SPLIT_BYTES = 4 << 20
_pool = None
_lock = threading.Lock()


def _forget_pool():             # a forked child has none of the parent's threads
    global _pool
    _pool = None


if hasattr(os, "register_at_fork"):
    os.register_at_fork(after_in_child=_forget_pool)


def pool() -> ThreadPoolExecutor:
    """The shared executor of :data:`THREADS` threads, made at the first call."""
    global _pool
    with _lock:
        if _pool is None:
            _pool = ThreadPoolExecutor(THREADS, thread_name_prefix="tp-workers")
        return _pool


def split(part, n: int, nbytes: int, least: int = 0) -> None:
    """``part(lo, hi)`` for ranges covering ``[0, n)``: one call in this
    thread where ``nbytes`` (the memory the whole loop touches) is below
    ``least`` (default :data:`SPLIT_BYTES`: a loop that computes as much as
    it moves; one that only moves bytes pays for the threads later) or one
    thread is all there is, else :data:`THREADS` ranges of about equal
    length at once (the first in this thread).  Returns once every range
    is done (the callers' C loops write into arrays they hold only until
    then), raising the first exception, this thread's range's first."""
    parts = min(THREADS, n) if nbytes >= (least or SPLIT_BYTES) else 1
    if parts <= 1:
        if n > 0:
            part(0, n)
        return
    bounds = [n * i // parts for i in range(parts + 1)]
    futures = [pool().submit(part, lo, hi) for lo, hi in zip(bounds[1:-1], bounds[2:])]
    error = None
    try:
        part(bounds[0], bounds[1])
    except BaseException as e:          # (raised once the other ranges are done)
        error = e
    wait(futures)
    error = error or next((f.exception() for f in futures if f.exception()), None)
    if error is not None:
        raise error

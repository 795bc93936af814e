"""Kernels in a forked child: one thread where libgomp's team is gone.

libgomp keeps the worker threads of a thread's last parallel region docked
in a per-thread pool and reuses them in its next region.  ``fork()`` copies
the pool's bookkeeping into the child but not the threads, so the forking
thread's first parallel region in the child (after ``os.fork``, in a
``multiprocessing`` 'fork' worker, a torch DataLoader worker) waits forever
for workers that do not exist.  libgomp has no fork handler, and every
kernel of both CPU backends runs its parallel loops through libgomp (C:
``#pragma omp parallel``, LLVM: ``GOMP_parallel``).

The rule: in a child forked while libgomp was loaded, the thread that forked
(the child's only thread at first) runs its parallel regions with a team of
one.  ``os.register_at_fork`` handlers look libgomp's ``omp_set_num_threads``
up in the parent (without loading the library) and call it with 1 in the
child; :func:`before_call` repeats that before each kernel call on that
thread, since other code in the child (``torch.set_num_threads``) may have
raised the count since.  A team of one never touches the pool; the results
are the same (but for a reassociated reduction's rounding: its partials are
per thread).  Threads the child starts
have no pool yet: their regions start fresh workers and keep the usual
count.  libomp (clang's OpenMP) re-initialises itself in a forked child and
needs none of this; a fork made by C code, not through ``os.fork``, runs no
handler.  For parallel kernels in the child's main thread, start workers
with the 'spawn' or 'forkserver' method instead.
"""
from __future__ import annotations

import ctypes
import os
import threading

__all__ = ["before_call"]

_LIBGOMP = "libgomp.so.1"
_set_num_threads = None          # libgomp's omp_set_num_threads, once it is seen loaded
_serial_thread = None            # in a forked child: the ident of the thread that forked


def _find_libgomp() -> None:
    """Keeps libgomp's ``omp_set_num_threads`` if this process has loaded
    libgomp (``RTLD_NOLOAD``: never loads it); runs in the parent before a
    fork, where calling the dynamic loader is safe."""
    global _set_num_threads
    if _set_num_threads is not None or not hasattr(os, "RTLD_NOLOAD"):
        return
    try:
        f = ctypes.CDLL(_LIBGOMP, mode=os.RTLD_NOLOAD | os.RTLD_NOW).omp_set_num_threads
    except (OSError, AttributeError):
        return
    f.argtypes, f.restype = (ctypes.c_int,), None
    _set_num_threads = f


def _after_fork_in_child() -> None:
    global _serial_thread
    if _set_num_threads is not None:
        _serial_thread = threading.get_ident()
        _set_num_threads(1)


def before_call() -> None:
    """Called before each kernel call: on the thread that forked this child,
    asks libgomp for a team of one again."""
    if _serial_thread is not None and _serial_thread == threading.get_ident():
        _set_num_threads(1)


if hasattr(os, "register_at_fork"):
    os.register_at_fork(before=_find_libgomp, after_in_child=_after_fork_in_child)

"""How many threads a kernel call's parallel regions use: the whole team on
a quiet machine, the cores other processes leave free on a busy one, one in
a forked child (:mod:`codegen.after_fork`).

On a busy machine (a laptop's browser, a CI box, a data loader's workers)
a thread of a kernel's team is often descheduled for a scheduler slice (a
few ms); every fork, join and barrier then waits for it.  A kernel of a
millisecond with a few of them took several times its quiet time beside one
busy process on two cores, where on the cores left free it takes about its
one-thread time.  So, before each call (:func:`call`):

* the cores other processes keep busy are read at most every
  :data:`INTERVAL` s: the host's busy time (``/proc/stat``, a hypervisor's
  steal left out) minus this process's own CPU time, over the time since the
  last reading;
* when fewer cores are free than the team has threads, a kernel whose recent
  calls took under :data:`SYNC_S` a synchronisation of its team (forks, joins
  and barriers a call: ``LoweredFunction.syncs``, from
  :func:`codegen.regions.synchronisations`) runs with the free cores (at
  least one):
  ``omp_set_num_threads`` for this thread around the call, restored after it
  (libgomp is the OpenMP runtime of both CPU backends, and torch's when it
  is loaded first: the setting is this thread's, for this call only).  A
  kernel with more work between synchronisations keeps its team: its work
  outweighs a slow meeting, and a busy machine's cores still add up (a
  batched GEMM's one parallel loop of a millisecond ran faster on the team
  beside one busy process; a convolution's five regions in 1.3 ms ran in
  half the time on one thread).

A kernel's time is an exponential average of its calls (whatever team ran
them).  Where ``/proc/stat`` cannot be read (not Linux), or with
``TIRAMISU_PY_ADAPTIVE_TEAM=0``, nothing changes: every call has the team.

This module imports nothing from ``tiramisu_py``."""
from __future__ import annotations

import ctypes
import os
import threading
import time

from . import after_fork, target

ENV = "TIRAMISU_PY_ADAPTIVE_TEAM"
ADAPT = os.environ.get(ENV, "1") != "0"      # read once, at import
INTERVAL = 0.1          # seconds between two readings of the host's busy cores
SYNC_S = 0.0005         # work between two meetings of the team that keeps it on a busy machine
_LIBGOMP = "libgomp.so.1"
_TICK = os.sysconf("SC_CLK_TCK") if hasattr(os, "sysconf") else 100

_lock = threading.Lock()
_state = {"at": None, "busy": None, "self": None, "free": None}
_omp: list = []           # [omp_get_max_threads, omp_set_num_threads] once libgomp is seen
_forced: list = []        # a test's stand-in for the free cores
_missing: list = []       # when libgomp was last looked for and not found


def _host_busy():
    """Seconds of CPU the host has spent busy (no idle, iowait or steal), or None."""
    try:
        with open("/proc/stat") as f:
            v = [int(x) for x in f.readline().split()[1:]]
    except (OSError, ValueError):
        return None
    busy = v[0] + v[1] + v[2] + (v[5] + v[6] if len(v) > 6 else 0)
    return busy / _TICK


def free_cores():
    """The cores of this process's (affinity's) that other processes left free
    over the last reading (None: unknown, or no reading before the first);
    read at most every INTERVAL s."""
    if _forced:
        return _forced[-1]
    cores = target.cores()
    now = time.monotonic()
    with _lock:
        at = _state["at"]
        if at is not None and now - at < INTERVAL:
            return _state["free"]
        busy, mine = _host_busy(), time.process_time()
        if busy is None:
            return None
        if at is not None:
            others = ((busy - _state["busy"]) - (mine - _state["self"])) / (now - at)
            _state["free"] = max(1, min(cores, int(cores - others + 0.5)))
        _state.update(at=now, busy=busy, self=mine)
        return _state["free"]


def _openmp():
    """(omp_get_max_threads, omp_set_num_threads) of the loaded libgomp, or
    None (not loaded yet: looked for again after INTERVAL s)."""
    if _omp:
        return _omp[0]
    now = time.monotonic()
    if _missing and now - _missing[0] < INTERVAL:
        return None
    try:
        lib = ctypes.CDLL(_LIBGOMP, mode=os.RTLD_NOLOAD | os.RTLD_NOW)
        get, put = lib.omp_get_max_threads, lib.omp_set_num_threads
    except (OSError, AttributeError):
        _missing[:] = [now]
        return None
    get.restype, put.argtypes, put.restype = ctypes.c_int, (ctypes.c_int,), None
    _omp.append((get, put))
    return _omp[0]


class Timing:
    """A kernel's recent call time (exponential average, seconds; None: never called)."""
    __slots__ = ("mean",)

    def __init__(self):
        self.mean = None

    def add(self, seconds):
        self.mean = seconds if self.mean is None else 0.8 * self.mean + 0.2 * seconds


def call(func, args, timing: Timing, syncs: int = 0):
    """``func(*args)`` with the team this call should have (the module
    docstring); ``timing`` is the kernel's, updated; ``syncs``: its team's
    meetings a call."""
    after_fork.before_call()
    t0 = time.perf_counter()
    fewer = None
    if ADAPT and syncs and (timing.mean is None or timing.mean < SYNC_S * syncs):
        omp = _openmp()
        if omp is not None:
            team = omp[0]()
            free = free_cores() if team > 1 else None
            if free is not None and free < team:
                omp[1](free)
                fewer = (omp[1], team)
    try:
        return func(*args)
    finally:
        if fewer is not None:
            fewer[0](fewer[1])
        timing.add(time.perf_counter() - t0)


def forced(free):
    """For tests: ``with forced(1):`` calls see ``free`` free cores."""
    class _Forced:
        def __enter__(self):
            _forced.append(free)

        def __exit__(self, *exc):
            _forced.pop()
    return _Forced()

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
* when fewer cores are free than the team has threads, the kernel's first
  busy call runs with the free cores (at least one) if its recent calls took
  under :data:`SYNC_S` a synchronisation of its team (forks, joins and
  barriers a call: ``LoweredFunction.syncs``, from
  :func:`codegen.regions.synchronisations`), else with the whole team; its
  second busy call the other way; from then on the way with the lower
  average time on the busy machine, the other tried again every
  :data:`EXPLORE` calls (:func:`choose_fewer`).  The free cores are set
  with ``omp_set_num_threads`` for this thread around the call, restored
  after it (libgomp is the OpenMP runtime of both CPU backends, and torch's
  when it is loaded first: the setting is this thread's, for this call
  only).  Which way wins depends on the kernel and on the runtime's waiting:
  a convolution's five regions in 1.3 ms ran in half the time on one thread
  beside one busy process, a batched GEMM's one parallel loop of a
  millisecond faster on the team; a 0.2 ms GEMM beside a busy process took
  0.19 ms on the team under libgomp's default spinning and 0.34 ms on one
  thread, but the same on both under ``OMP_WAIT_POLICY=passive``.

A kernel's times are exponential averages of its calls.  Where
``/proc/stat`` cannot be read (not Linux), or with
``TIRAMISU_PY_ADAPTIVE_TEAM=0``, nothing changes: every call has the team.

*The runtime's waiting between calls* (:func:`bound_runtime_spin`, at
import): libgomp's idle workers, where the user set neither
``OMP_WAIT_POLICY`` nor ``GOMP_SPINCOUNT``, poll 300,000 times (about 3 ms
by its own estimate, 5 ms on a Zen 5 core) after every parallel region
before they sleep.  On a busy machine those polls hold a core the calling
thread, the kernel's partner or another process needs, after every call:
a 0.2 ms GEMM beside one busy process on two cores took 3x its quiet time.
Where libgomp is not loaded yet when this module is imported, the module
sets ``GOMP_SPINCOUNT`` to :data:`SPINCOUNT` (a fiftieth: about as long as
the generated barrier's longest spin): workers still catch a call that
follows within ~0.2 ms, and sleep soon after.  It is the process's
libgomp, so torch's too when torch is imported later.  The variable is
removed once libgomp has read it (the first parallel call), so child
processes started after that inherit the user's environment.  Where libgomp was
loaded first (torch imported before tiramisu_py) its waiting cannot be
changed any more; a call that finds the machine busy then warns once,
saying how to set it (:func:`runtime_spin`).

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
SYNC_S = 0.0005         # work between two meetings of the team that keeps it on a busy machine (at first)
EXPLORE = 8             # on a busy machine, the way not chosen is tried again every this many calls
WEIGHT = 0.25           # the weight of a new call in a kernel's average times
_LIBGOMP = "libgomp.so.1"
SPINCOUNT = 6000        # libgomp's polls before an idle worker sleeps, where the user set none
_TICK = os.sysconf("SC_CLK_TCK") if hasattr(os, "sysconf") else 100

_lock = threading.Lock()
_state = {"at": None, "busy": None, "self": None, "free": None}
_omp: list = []           # [omp_get_max_threads, omp_set_num_threads] once libgomp is seen
_forced: list = []        # a test's stand-in for the free cores
_missing: list = []       # when libgomp was last looked for and not found


def _loaded_libgomp():
    """This process's libgomp if something loaded it already, else None
    (never loads it)."""
    try:
        return ctypes.CDLL(_LIBGOMP, mode=os.RTLD_NOLOAD | os.RTLD_NOW)
    except OSError:
        return None


def bound_runtime_spin(environ=os.environ) -> str:
    """Bounds libgomp's waiting where the user left it to libgomp and it is
    not loaded yet (the module docstring); returns what holds: ``"user"``
    (``OMP_WAIT_POLICY`` or ``GOMP_SPINCOUNT`` set), ``"bounded"`` (set
    here), ``"default"`` (libgomp loaded before, with its own default), or
    ``"off"`` (``TIRAMISU_PY_ADAPTIVE_TEAM=0``, or no ``RTLD_NOLOAD``: not
    Linux)."""
    if environ.get("OMP_WAIT_POLICY") or environ.get("GOMP_SPINCOUNT"):
        return "user"
    if environ.get(ENV, "1") == "0" or not hasattr(os, "RTLD_NOLOAD"):
        return "off"
    if _loaded_libgomp() is not None:
        return "default"
    environ["GOMP_SPINCOUNT"] = str(SPINCOUNT)
    return "bounded"


SPIN = bound_runtime_spin()
_warned: list = []


def runtime_spin() -> str:
    """How the OpenMP runtime's idle threads wait in this process, in words
    (for a benchmark's header and a warning)."""
    if SPIN == "user":
        return ("as the user set it: OMP_WAIT_POLICY="
                f"{os.environ.get('OMP_WAIT_POLICY') or '(unset)'}, GOMP_SPINCOUNT="
                f"{os.environ.get('GOMP_SPINCOUNT') or '(unset)'}")
    if SPIN == "bounded":
        return f"GOMP_SPINCOUNT={SPINCOUNT}, set by tiramisu_py (libgomp not loaded before it)"
    if SPIN == "default":
        return ("libgomp's default, 300,000 polls (several ms) after each parallel call "
                "(libgomp was loaded before tiramisu_py, e.g. by torch)")
    return "libgomp's default (TIRAMISU_PY_ADAPTIVE_TEAM=0, or not Linux)"


def _warn_spinning() -> None:
    """Once a process, on a busy machine, where libgomp polls several ms after each
    call and it is too late to change."""
    if SPIN != "default" or _warned:
        return
    _warned.append(True)
    import warnings
    warnings.warn(
        "tiramisu_py: this machine's cores are busy and the OpenMP runtime (libgomp, loaded "
        "before tiramisu_py, e.g. by torch) polls for several ms after every parallel call, "
        "holding a core the next call needs; parallel calls (ours and torch's) may take several "
        "times their quiet time. Set OMP_WAIT_POLICY=passive (or GOMP_SPINCOUNT=6000) before the "
        "process starts, or import tiramisu_py before torch.", RuntimeWarning, stacklevel=4)


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
    now = time.monotonic()
    with _lock:
        at = _state["at"]
        if at is not None and now - at < INTERVAL:
            return _state["free"]
        cores = target.cores()
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
    lib = _loaded_libgomp()
    try:
        get, put = lib.omp_get_max_threads, lib.omp_set_num_threads
    except AttributeError:                       # not loaded (None), or not an OpenMP runtime
        _missing[:] = [now]
        return None
    get.restype, put.argtypes, put.restype = ctypes.c_int, (ctypes.c_int,), None
    _omp.append((get, put))
    if SPIN == "bounded" and os.environ.get("GOMP_SPINCOUNT") == str(SPINCOUNT):
        del os.environ["GOMP_SPINCOUNT"]        # read by libgomp: child processes start as before
    return _omp[0]


class Timing:
    """A kernel's recent call times (exponential averages, seconds; None: no
    call yet): ``mean`` over every call; on a busy machine, ``whole`` over
    the calls with the whole team and ``fewer`` over those with the free
    cores, and ``busy_calls`` counts them (:func:`choose_fewer`)."""
    __slots__ = ("mean", "whole", "fewer", "busy_calls")

    def __init__(self):
        self.mean = self.whole = self.fewer = None
        self.busy_calls = 0

    def add(self, seconds, busy=None):
        """One call's time; ``busy``: None (a quiet machine), else whether it
        ran with the free cores (True) or the whole team (False)."""
        self.mean = _average(self.mean, seconds)
        if busy is not None:
            self.busy_calls += 1
            if busy:
                self.fewer = _average(self.fewer, seconds)
            else:
                self.whole = _average(self.whole, seconds)


def _average(mean, seconds):
    return seconds if mean is None else (1 - WEIGHT) * mean + WEIGHT * seconds


def choose_fewer(timing: Timing, syncs: int) -> bool:
    """On a busy machine, whether this call runs with the free cores: first
    as the kernel's work between its team's meetings says (under
    :data:`SYNC_S`: fewer), then each way once, then the way with the lower
    average, the other tried again every :data:`EXPLORE` calls (a machine's
    load changes; so does the cost of its runtime's waiting: under libgomp's
    default spinning the whole team ran a 0.2 ms GEMM in 0.19 ms beside a
    busy process, the free core in 0.34)."""
    if timing.whole is None and timing.fewer is None:
        return timing.mean is None or timing.mean < SYNC_S * syncs
    if timing.whole is None or timing.fewer is None:
        return timing.fewer is None
    best = timing.fewer < timing.whole
    return not best if timing.busy_calls % EXPLORE == EXPLORE - 1 else best


def call(func, args, timing: Timing, syncs: int = 0):
    """``func(*args)`` with the team this call should have (the module
    docstring); ``timing`` is the kernel's, updated where the team is sized
    (``syncs``, its team's meetings a call, above 0)."""
    after_fork.before_call()
    if not (ADAPT and syncs):
        return func(*args)      # no team to size: nothing reads its time
    t0 = time.perf_counter()
    busy = restore = None
    omp = _openmp()
    if omp is not None:
        team = omp[0]()
        free = free_cores() if team > 1 else None
        if free is not None and free < team:
            _warn_spinning()
            busy = choose_fewer(timing, syncs)
            if busy:
                omp[1](free)
                restore = (omp[1], team)
    try:
        return func(*args)
    finally:
        if restore is not None:
            restore[0](restore[1])
        timing.add(time.perf_counter() - t0, busy)


def forced(free):
    """For tests: ``with forced(1):`` calls see ``free`` free cores."""
    class _Forced:
        def __enter__(self):
            _forced.append(free)

        def __exit__(self, *exc):
            _forced.pop()
    return _Forced()

"""The one find step over the tuning store: the fastest applicable solver of
a problem, remembered per problem key and host (see :mod:`schedules.registry`
for the design)."""
from __future__ import annotations

import json
import os
import time

import tiramisu_py as tp
from tiramisu_py import tuning

from ..host import host
from . import environ
from .solver import reasons

KIND = "find"                                 # the one record kind
RETIRED = ("conv_find", "rnn_find")           # the former kinds: removed, never read
_retired: set = set()
# (solvers, problem, environment) -> (store generation, solver) of "auto": the
# choice found again without building its key or reading the store, while this
# process has changed no store (tiramisu_py.tuning.generation)
_MEMO: dict = {}
MEMO_LIMIT = 4096               # bounded: problems differ by a CSR weight's density
# "first": "auto" takes the first candidate in order of preference, untimed and
# unrecorded (as torch.backends.cudnn.benchmark = False takes cuDNN's heuristic)
MODE = "TIRAMISU_PY_FIND"
# what decides the cache directory, the host's pinned facts and the mode
ENVIRONMENT = ("TIRAMISU_PY_CACHE", "XDG_CACHE_HOME", "HOME", "TIRAMISU_PY_HOST", MODE)


def _valid(value):
    """A find record: ``{"algo": name, "seconds": {name: time}}``."""
    return (isinstance(value, dict) and isinstance(value.get("algo"), str)
            and isinstance(value.get("seconds"), dict)
            and all(isinstance(t, (int, float)) and not isinstance(t, bool)
                    for t in value["seconds"].values()))


def store():
    """The tuning store of the cache directory, the retired kinds' records
    removed (once per process and directory)."""
    s = tuning.store()
    if s.directory not in _retired:
        _retired.add(s.directory)
        for kind in RETIRED:
            s.forget(kind)
    return s


def key(p, candidates=()) -> str:
    """The record's key: the problem's explicit key (every field by name and
    the problem's version), the candidates' versions and their tuned
    parameters where recorded (:mod:`schedules.core.tuned`: a choice made
    before tuning is made again), the library's version and the host (SIMD
    width, cores)."""
    h = host()
    tuned = {s.name: s.chosen(p) for s in candidates}
    tuned = {name: values for name, values in tuned.items() if values}
    return json.dumps({**p.key(), "solvers": {s.name: s.version for s in candidates},
                       **({"tuned": tuned} if tuned else {}),
                       "library": tp.__version__,
                       "host": {"vector_bits": h.vector_bits, "cores": h.cores}},
                      sort_keys=True)


def load(k):
    """The record of key ``k``, or None: missing, or damaged (then reported
    once and timed again)."""
    return store().get(KIND, k, valid=_valid)


def save(k, algo, seconds, repeats=None):
    store().put(KIND, k, {"algo": algo, "seconds": seconds},
                meta={"repeats": repeats, "pid": os.getpid()})


def records():
    """{key: record} of every find record in the cache directory."""
    return store().records(KIND, valid=_valid)


def choose(k, names, run, repeats):
    """The remembered choice for key ``k`` if it is one of ``names``; else
    each is run once (compile and warm-up), then timed ``repeats`` times on
    the same arguments, and the fastest remembered."""
    known = load(k)
    if known is not None and known["algo"] in names:
        return known["algo"]
    times = {}
    for name in names:
        run(name)                                           # compile + warm up
        samples = []
        for _ in range(repeats):
            t0 = time.perf_counter()
            run(name)
            samples.append(time.perf_counter() - t0)
        times[name] = min(samples)        # noise only ever slows a run down
    best = min(times, key=times.get)
    save(k, best, times, repeats)
    return best


def candidates(p, solvers):
    """The solvers "auto" may choose for ``p``: the applicable ones (in
    order of preference) whose ``numerics`` is the first applicable one's,
    so that every candidate gives the same IEEE result bit for bit (see
    :class:`schedules.core.solver.Solver`): a dense weight is never run by
    the sparse solver (structural zeros absent: ``0 * inf`` is never
    computed), nor by im2col (GEMM blocks summed apart) or Winograd
    (transformed inputs), which run only when ``algo=`` names them."""
    cands = [s for s in solvers if s.applicable(p) is True]
    return [s for s in cands if s.numerics_for(p) == cands[0].numerics_for(p)]


def find(p, solvers, args, algo="auto", *, call, param="algo", repeats=3):
    """The solver of ``solvers`` (in order of preference) that computes
    ``p``: the one named by ``algo``, or with "auto" the only candidate
    (:func:`candidates`), the first for a degenerate problem, else the
    fastest candidate (remembered, or timed now on ``args``; a record naming
    a solver that is not a candidate is ignored, timed again and replaced).
    Errors name the public ``call`` and list every solver with why it does
    not apply.  An "auto" choice is remembered for the process (the same
    solvers, problem and environment) while it has changed no tuning store:
    a model's every layer does not read the store again on every call."""
    if algo == "auto":
        memo = (tuple(solvers), p, environ.values(ENVIRONMENT))
        known = _MEMO.get(memo)
        if known is not None and known[0] == tuning.generation():
            return known[1]
        chosen = _auto(p, solvers, args, call, repeats)
        if len(_MEMO) >= MEMO_LIMIT:
            _MEMO.clear()
        _MEMO[memo] = (tuning.generation(), chosen)
        return chosen
    cands = [s for s in solvers if s.applicable(p) is True]
    names = list(dict.fromkeys(s.name for s in solvers))
    if algo not in names:
        raise ValueError(f"{call}: {param} must be 'auto' or one of {', '.join(names)}; got "
                         f"{algo!r}")
    chosen = next((s for s in cands if s.name == algo), None)
    if chosen is None:
        named = [s for s in solvers if s.name == algo]
        mine = next((s for s in named if s.target == p.device), named[0])
        raise ValueError(f"{call}: {param} {algo!r} {mine.applicable(p)} (the solvers of "
                         f"{p.op}: {reasons(solvers, p)})")
    return chosen


def solve(solvers, p, args, algo="auto", *, call, param="algo", repeats=3):
    """The result of a public call: the solver :func:`find` gives (of
    ``solvers``, the registry's list of ``p``'s operator), solving ``p`` on
    ``args`` (:meth:`schedules.core.solver.Solver.solve`).  The one way a
    call reaches a solver."""
    return find(p, solvers, args, algo, call=call, param=param, repeats=repeats).solve(p, args)


def _first() -> bool:
    """Whether ``$TIRAMISU_PY_FIND`` asks for the first candidate untimed;
    any other value than "first" or "timed" (the default) is refused by name."""
    mode = os.environ.get(MODE, "timed") or "timed"
    if mode not in ("first", "timed"):
        raise ValueError(f"{MODE} must be 'timed' (the default: the fastest candidate, timed "
                         f"once and remembered) or 'first' (the first in order of preference, "
                         f"untimed); got {mode!r}")
    return mode == "first"


def _auto(p, solvers, args, call, repeats):
    """The "auto" choice of :func:`find` (not remembered here)."""
    if not any(s.applicable(p) is True for s in solvers):
        raise ValueError(f"{call}: no solver applies (the solvers of {p.op}: "
                         f"{reasons(solvers, p)})")
    cands = candidates(p, solvers)
    if len(cands) == 1 or p.degenerate or _first():
        return cands[0]
    by_name = {s.name: s for s in cands}
    best = choose(key(p, cands), list(by_name), lambda n: by_name[n].result(p, args), repeats)
    return by_name[best]

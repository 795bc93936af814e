"""The library's tuned parameters: what :func:`schedules.tune_library`
recorded for a solver on this host, looked up once per record key per
process (see :mod:`schedules.tuner` for how they are measured).

A record (kind :data:`KIND` in the tuning store, :mod:`tiramisu_py.tuning`)
is keyed by JSON text of (the host part: :func:`tiramisu_py.tuning.keys.library_host`)::

    {"op": "gemm", "solver": "blis", "version": 1,
     "class": {... the problem's key, sizes as power-of-two classes ...},
     "host": {"cpu": "<model name of /proc/cpuinfo>", "isa": ["avx2", "avx512f", ...],
              "vector_bits": 512, "vector_registers": 32, "cores": 2,
              "l1d": ..., "l2": ..., "l3": ..., "backend": "llvm", "library": "0.1.0"}}

and holds ``{"values": {name: value}, "seconds": best, "default_seconds":
the defaults' time, "verdict": the A/B against the defaults
(:meth:`tiramisu_py.tuning.confirm.Verdict.as_dict`), "candidate": the search's
winner, "complete": false when the budget cut the search}``.  ``values``
are names of the solver's :meth:`~schedules.core.solver.Solver.space` (``{}``
when the winner was not confirmed); a solver's ``run`` builds with its host
defaults (``params(p)``) updated by them.  A record whose value is damaged,
has no verdict (made before wins were confirmed), or names a parameter or a
value that the solver's space for the problem does not hold (a foreign
record: another solver version's, another shape's), is ignored: the
defaults run.  Records of another host
(another CPU model, ISA, core count, pinned facts with ``TIRAMISU_PY_HOST``,
backend or library version) are under other keys and are never read.
"""
from __future__ import annotations

import json

import tiramisu_py as tp
from codegen import target as machine
from tiramisu_py import tuning
from tiramisu_py.tuning import keys
from tiramisu_py.tuning.confirm import recorded as recorded_verdict
from tiramisu_py.tuning.kinds import RecordKind

from ..host import host
from . import environ

KIND = "params"
# problem-key fields that are sizes: recorded by their power-of-two class
SIZES = ("n", "m", "k", "batch", "h", "w", "T")

_CACHE: dict = {}               # (store, record key) -> values (or {}): one lookup per process
_FAST: dict = {}                # (solver, problem, environment) -> values: no key built per call
_FAST_ENV = (machine.ENV, "TIRAMISU_PY_CACHE")   # what the fast key reads
LOOKUPS = {"store": 0}          # reads of the store (tests count them)


def host_key(backend) -> dict:
    """This host's part of a record key, for ``backend`` ("llvm", "c")."""
    return keys.library_host(backend, host(), tp.__version__)


def shape_class(p) -> dict:
    """The problem's key with its sizes (:data:`SIZES`, nested too) as
    power-of-two classes: 1000 and 1024 share a record, 512 does not."""
    return keys.shape_class(p.key(), SIZES)


def record_key(solver, p, device=None) -> str:
    """The record's key for ``solver`` on problem ``p`` on this host, or on
    the GPU ``device`` (:func:`device_key`) for a CUDA solver."""
    where = {"device": device} if device is not None else {"host": host_key(p.target)}
    return json.dumps({"op": p.op, "solver": solver.name, "version": solver.version,
                       "class": shape_class(p), **where}, sort_keys=True)


def device_key(arch, name) -> dict:
    """A GPU's part of a CUDA solver's record key: its architecture
    ("sm_90"), its name ("NVIDIA H200") and the library's version."""
    return {"arch": arch, "name": name, "library": tp.__version__}


def _valid(value):
    return (isinstance(value, dict) and isinstance(value.get("values"), dict)
            and all(isinstance(k, str) for k in value["values"]))


def fits(solver, p, values) -> bool:
    """Whether every value is one the solver's space for ``p`` holds."""
    space = solver.space(p)
    return all(k in space and v in space[k] for k, v in values.items())


def recorded(solver, p, device=None) -> dict:
    """The tuned values of ``solver`` for ``p`` on this host (``{}``: none,
    damaged or foreign), read from the store once per key and process; a
    CUDA problem's on the GPU ``device`` (:func:`device_key`; None: none).
    A caller's own parameters (``p.params``, the GEMM's tiles) win: ``{}``."""
    if getattr(p, "params", None) is not None:
        return {}
    if p.device != "cpu":
        return _on_device(solver, p, device) if device is not None else {}
    fast = (type(solver), solver.op, p, *environ.values(_FAST_ENV))
    if fast not in _FAST:
        k = _where(record_key(solver, p))
        if k not in _CACHE:
            LOOKUPS["store"] += 1
            value = tuning.store().get(KIND, k[1], valid=_valid)
            values = value["values"] if _confirmed(value) else {}
            _CACHE[k] = values if fits(solver, p, values) else {}
        if len(_FAST) > 4096:         # bounded: problems differ by a CSR weight's density
            _FAST.clear()
        _FAST[fast] = _CACHE[k]
    return dict(_FAST[fast])


def _on_device(solver, p, device):
    k = _where(record_key(solver, p, device))
    if k not in _CACHE:
        LOOKUPS["store"] += 1
        value = tuning.store().get(KIND, k[1], valid=_valid)
        values = value["values"] if _confirmed(value) else {}
        _CACHE[k] = values if fits(solver, p, values) else {}
    return dict(_CACHE[k])


def _where(key):
    return (str(tuning.store().directory), key)


def _confirmed(value):
    return recorded_verdict(value) is not None


def save(solver, p, values, verdict, timed, complete=True, candidate=None, device=None) -> None:
    """Records ``values`` for ``solver`` on ``p`` (``{}``: the defaults)
    with the ``verdict`` (:class:`tiramisu_py.tuning.confirm.Verdict`) of the A/B
    that decided it, and uses them from now on in this process too;
    ``candidate``: the search's winner; ``complete``: False when the budget
    ended the search (a later tuning run continues it); ``device``: a GPU's
    record (:func:`device_key`, measured there, e.g. by bench/bench_cuda.py)."""
    k = record_key(solver, p, device)
    tuning.store().put(KIND, k, {"values": values,
                                 "seconds": verdict.best_s if values else verdict.default_s,
                                 "default_seconds": verdict.default_s,
                                 "verdict": verdict.as_dict(),
                                 "candidate": dict(candidate or values), "complete": complete},
                       meta={"timed": timed})
    _CACHE[_where(k)] = dict(values) if fits(solver, p, values) else {}
    _FAST.clear()


def has_record(solver, p) -> bool:
    """Whether a complete, confirmed search for ``solver`` on ``p`` is
    recorded on this host."""
    value = tuning.store().get(KIND, record_key(solver, p), valid=_valid)
    return _confirmed(value) and value.get("complete", True) is not False


def describe(key, value) -> str:
    """A record in words: op, solver, shape class, the values kept and the
    A/B verdict (or why it is not used)."""
    try:
        k = json.loads(key)
        what = f"{k['op']} [{k['solver']}] {json.dumps(k['class'], sort_keys=True)}"
        if "device" in k:
            what += f" on {k['device'].get('name')} ({k['device'].get('arch')})"
        elif k.get("host") != host_key(k["host"].get("backend")):
            what += " (another host)"
    except (ValueError, TypeError, KeyError, AttributeError):
        what = key[:80]
    verdict = recorded_verdict(value) if _valid(value) else None
    if verdict is None:
        return f"{what}: unconfirmed (made before A/B) or damaged, not used"
    return f"{what}: {value['values'] or 'defaults'}; {verdict.line()}"


def _names(key, value):
    """What ``--forget WHAT`` removes a record by: its op and its solver."""
    try:
        k = json.loads(key)
        return (k.get("op"), k.get("solver"))
    except (ValueError, AttributeError):
        return ()


def _forgotten():
    _CACHE.clear()
    _FAST.clear()


RECORDS = RecordKind(KIND, "library parameter record", describe, names=_names,
                     forgotten=_forgotten)


def forget(what=None) -> int:
    """Removes the tuned-parameters records (all, or those whose op or
    solver is named ``what``) and this process's copies: the host defaults
    run again.  Returns how many were removed."""
    return RECORDS.forget(what)


def records() -> dict:
    """{key: record} of every intact tuned-parameters record."""
    return tuning.store().records(KIND, valid=_valid)

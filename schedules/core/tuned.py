"""The library's tuned parameters: what :func:`schedules.tune_library`
recorded for a solver on this host, looked up once per record key per
process (see :mod:`schedules.tuner` for how they are measured).

A record (kind :data:`KIND` in the tuning store, :mod:`tiramisu_py.tuning`)
is keyed by JSON text of::

    {"op": "gemm", "solver": "blis", "version": 1,
     "class": {... the problem's key, sizes as power-of-two classes ...},
     "host": {"cpu": "<model name of /proc/cpuinfo>", "isa": ["avx2", "avx512f", ...],
              "vector_bits": 512, "vector_registers": 32, "cores": 2,
              "l1d": ..., "l2": ..., "l3": ..., "backend": "llvm", "library": "0.1.0"}}

and holds ``{"values": {name: value}, "seconds": best, "default_seconds":
the defaults' time, "verdict": the A/B against the defaults
(:meth:`tiramisu_py.confirm.Verdict.as_dict`), "candidate": the search's
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

import functools
import json
import math

import tiramisu_py as tp
from codegen import target as machine
from tiramisu_py import tuning
from tiramisu_py.confirm import Verdict

from ..host import host
from . import environ

KIND = "params"
# the CPU features that change what is fastest (the ISA part of the host key)
ISA_FLAGS = ("sse4_2", "avx", "avx2", "fma", "avx512f", "avx512bw", "avx512vl", "avx512_bf16",
             "avx512_vnni", "avx512_fp16", "avx_vnni", "amx_tile", "amx_bf16", "amx_int8",
             "asimd", "sve", "sve2")
# problem-key fields that are sizes: recorded by their power-of-two class
SIZES = ("n", "m", "k", "batch", "h", "w", "T")

_CACHE: dict = {}               # (store, record key) -> values (or {}): one lookup per process
_FAST: dict = {}                # (solver, problem, environment) -> values: no key built per call
_FAST_ENV = (machine.ENV, "TIRAMISU_PY_CACHE")   # what the fast key reads
LOOKUPS = {"store": 0}          # reads of the store (tests count them)


@functools.lru_cache(maxsize=None)
def cpu_model() -> str:
    """The CPU's model name (``/proc/cpuinfo``), or "unknown"."""
    try:
        with open("/proc/cpuinfo") as fh:
            for line in fh:
                if line.startswith(("model name", "Model", "cpu model")):
                    return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return "unknown"


def host_key(backend) -> dict:
    """This host's part of a record key, for ``backend`` ("llvm", "c")."""
    h = host()
    flags = machine.cpu_flags()
    return {"cpu": cpu_model(), "isa": [f for f in ISA_FLAGS if f in flags],
            "vector_bits": h.vector_bits, "vector_registers": h.vector_registers,
            "cores": h.cores, "l1d": h.l1d, "l2": h.l2, "l3": h.l3,
            "backend": backend, "library": tp.__version__}


def _size_class(v):
    return v if not isinstance(v, int) or isinstance(v, bool) or v < 2 else \
        f"~2^{round(math.log2(v))}"


def shape_class(p) -> dict:
    """The problem's key with its sizes (:data:`SIZES`, nested too) as
    power-of-two classes: 1000 and 1024 share a record, 512 does not."""
    def cls(d):
        return {k: cls(v) if isinstance(v, dict) else (_size_class(v) if k in SIZES else v)
                for k, v in d.items()}
    return cls(p.key())


def record_key(solver, p) -> str:
    """The record's key for ``solver`` on problem ``p`` on this host."""
    return json.dumps({"op": p.op, "solver": solver.name, "version": solver.version,
                       "class": shape_class(p), "host": host_key(p.target)}, sort_keys=True)


def _valid(value):
    return (isinstance(value, dict) and isinstance(value.get("values"), dict)
            and all(isinstance(k, str) for k in value["values"]))


def fits(solver, p, values) -> bool:
    """Whether every value is one the solver's space for ``p`` holds."""
    space = solver.space(p)
    return all(k in space and v in space[k] for k, v in values.items())


def recorded(solver, p) -> dict:
    """The tuned values of ``solver`` for ``p`` on this host (``{}``: none,
    damaged or foreign), read from the store once per key and process.
    A caller's own parameters (``p.params``, the GEMM's tiles) win: ``{}``."""
    if getattr(p, "params", None) is not None or p.device != "cpu":
        return {}
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


def _where(key):
    return (str(tuning.store().directory), key)


def _confirmed(value):
    return value is not None and Verdict.from_dict(value.get("verdict") or {}) is not None


def save(solver, p, values, verdict, timed, complete=True, candidate=None) -> None:
    """Records ``values`` for ``solver`` on ``p`` (``{}``: the defaults)
    with the ``verdict`` (:class:`tiramisu_py.confirm.Verdict`) of the A/B
    that decided it, and uses them from now on in this process too;
    ``candidate``: the search's winner; ``complete``: False when the budget
    ended the search (a later tuning run continues it)."""
    k = record_key(solver, p)
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
        if k.get("host") != host_key(k["host"].get("backend")):
            what += " (another host)"
    except (ValueError, TypeError, KeyError, AttributeError):
        what = key[:80]
    verdict = Verdict.from_dict(value.get("verdict") or {}) if _valid(value) else None
    if verdict is None:
        return f"{what}: unconfirmed (made before A/B) or damaged, not used"
    return f"{what}: {value['values'] or 'defaults'}; {verdict.line()}"


def _matches(key, what):
    try:
        k = json.loads(key)
        return what in (k.get("op"), k.get("solver"))
    except (ValueError, AttributeError):
        return False


def forget(what=None) -> int:
    """Removes the tuned-parameters records (all, or those whose op or
    solver is named ``what``) and this process's copies: the host defaults
    run again.  Returns how many were removed."""
    found = tuning.store().records(KIND)
    if what is None:
        tuning.store().forget(KIND)               # damaged records too
        gone = len(found)
    else:
        keys = [k for k in found if _matches(k, what)]
        for k in keys:
            tuning.store().forget(KIND, k)
        gone = len(keys)
    _CACHE.clear()
    _FAST.clear()
    return gone


def records() -> dict:
    """{key: record} of every intact tuned-parameters record."""
    return tuning.store().records(KIND, valid=_valid)

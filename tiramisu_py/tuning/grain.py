"""The parallel grain: a parallel loop (or region) whose work between two
synchronisations is below it runs on one thread (:mod:`codegen.regions`,
``run_small_serially``), as torch's ``at::parallel_for`` runs a range below its
grain size inline.  Work is counted in statement instances, an upper bound
from the loop bounds over the kernel's fixed parameters.

Where it comes from, first found:

* ``$TIRAMISU_PY_PARALLEL_GRAIN`` (an int >= 0; 0: every parallel loop stays
  parallel);
* this host's record in the tuning store (kind :data:`KIND`, keyed by the CPU
  model, the cores and the SIMD width: :func:`.keys.grain_host`), written by
  :func:`tune` through ``tiramisu-py tune grain`` only when an interleaved A/B
  confirms it;
* :data:`DEFAULT`.

The generated C says it where it made a loop serial (a comment naming the
work and the grain), and :func:`describe` says which grain a compile uses
and why."""
from __future__ import annotations

import contextlib
import math
import os
import statistics
import time

from . import database
from .confirm import confirm
from .keys import grain_host
from .kinds import RecordKind

ENV = "TIRAMISU_PY_PARALLEL_GRAIN"
KIND = "parallel_grain"
# statement instances between synchronisations below which two threads lose
# to one: ~2^15 vector-lane stores (a few microseconds of work) cost less than
# a fork/join or a barrier on a quiet machine (see docs/performance.md)
DEFAULT = 1 << 15
SIZES = tuple(1 << k for k in range(10, 21))    # the probe's statement instances a step
STEPS = 32                                       # the probe's steps (barriers) a call
SAMPLE_S = 0.004                                 # the sweep's samples: seconds of calls each
ROUNDS = 6                                       # the sweep's alternating samples a size
_cache: dict = {}
_forced: list = []


def _valid(value) -> bool:
    return isinstance(value, int) and not isinstance(value, bool) and value >= 0


def parallel_grain() -> int:
    """The grain a compile uses now (the module docstring)."""
    return _source()[0]


def describe() -> str:
    """Which grain a compile uses and where it comes from, in words."""
    value, where = _source()
    return f"parallel grain {value} statement instances ({where})"


def record():
    """This host's recorded grain, or None."""
    return database.get(KIND, grain_host(), valid=_valid)


def forget() -> None:
    """Removes this host's recorded grain (the default applies again)."""
    database.forget(KIND, grain_host())


class _Records(RecordKind):
    """Listed as one line: this host's grain, or where the grain comes from."""

    def lines(self):
        value = record()
        return [f"parallel grain: {value} statement instances (measured on this host)"
                if value is not None else f"parallel grain: no record ({describe()})"]


RECORDS = _Records(KIND, "parallel grain record",
                   lambda key, value: f"{value} statement instances ({key})",
                   names=lambda key, value: ("grain",))


@contextlib.contextmanager
def forced(value: int):
    """Compiles inside the block use the grain ``value`` (the probe's kernels)."""
    _forced.append(value)
    try:
        yield
    finally:
        _forced.pop()


def _source() -> tuple:
    if _forced:
        return _forced[-1], "forced"
    text = os.environ.get(ENV)
    if text is not None and text.strip():
        try:
            value = int(text)
        except ValueError:
            value = -1
        if value < 0:
            raise ValueError(f"${ENV}={text!r}: expected a whole number of statement instances "
                             ">= 0 (0: every parallel loop stays parallel)")
        return value, f"${ENV}"
    gen = database.generation()
    hit = _cache.get(gen)
    if hit is None:
        rec = record()
        hit = (rec, "measured on this host, tuning store") if rec is not None \
            else (DEFAULT, "the default; `tiramisu-py tune grain` measures this host's")
        _cache.clear()
        _cache[gen] = hit
    return hit


# ------------------------------------------------------------------ measuring
def tune(make, dry_run=False, clock=None, log=None) -> dict:
    """Measures this host's grain and records it when an interleaved A/B
    confirms it: the probe (``make(n, grain)``: a zero-argument call of
    :data:`STEPS` steps of ``n`` statement instances each, one barrier a
    step, compiled with ``grain``: 0 on the team, above ``n`` on one thread;
    ``tiramisu_py.cli.grain_probe``) at each of :data:`SIZES`, one thread against the
    team (alternating calls, medians); the measured grain is the smallest
    size from which the team is 10% faster at every larger size.  Where it
    and the grain in use disagree (sizes between them), the probe at their
    geometric mean runs both ways under :func:`tiramisu_py.tuning.confirm.confirm`
    (the default: what the grain in use does there); the measured grain is
    recorded (``dry_run``: never) only if kept.  Returns ``{"grain" (in use
    before), "measured", "table" ({size: (one thread s, team s)}), "verdict",
    "recorded"}``.  ``log``: a function of one line (progress); tests give
    a fake ``make`` and ``clock``."""
    log = log or (lambda line: None)
    clock = clock or time.perf_counter
    before = parallel_grain()
    table = {}
    for n in SIZES:
        serial, team = make(n, n + 1), make(n, 0)
        ts, tt = [], []
        t0 = clock()
        serial()
        team()
        # samples of SAMPLE_S at least (a single call of a few microseconds is
        # at the mercy of a thread's wake-up), alternating
        number = max(1, min(1000, math.ceil(SAMPLE_S / max(clock() - t0, 1e-9))))
        for r in range(ROUNDS):
            for fn, out in ((serial, ts), (team, tt)) if r % 2 == 0 else ((team, tt), (serial, ts)):
                t0 = clock()
                for _ in range(number):
                    fn()
                out.append((clock() - t0) / number)
        table[n] = (statistics.median(ts), statistics.median(tt))
        log(f"  {n:>8} instances a step: one thread {table[n][0] * 1e3:.3f} ms, "
            f"the team {table[n][1] * 1e3:.3f} ms")
    wins = [n for n in SIZES if table[n][1] < 0.9 * table[n][0]]
    measured = next((n for n in SIZES if all(m in wins for m in SIZES if m >= n)), SIZES[-1] * 2)
    out = {"grain": before, "measured": measured, "table": table, "verdict": None,
           "recorded": False}
    if measured == before:
        return out
    # a size where the two grains disagree: the grain in use runs it one
    # way (the default of the A/B), the measured one the other
    mid = 1 << round((math.log2(measured) + math.log2(max(1, before))) / 2)
    mid = max(mid, min(measured, before))
    if (mid >= measured) == (mid >= before):
        return out
    parallel_fn, serial_fn = make(mid, 0), make(mid, mid + 1)
    default, candidate = (parallel_fn, serial_fn) if mid >= before else (serial_fn, parallel_fn)
    v = out["verdict"] = confirm(default, candidate, clock=clock)
    log(f"  A/B at {mid} instances a step (grain {before} vs {measured}): {v.line()}")
    if v.kept and not dry_run:
        database.put(KIND, grain_host(), measured, meta=v.as_dict())
        out["recorded"] = True
    return out

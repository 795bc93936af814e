"""A tuning win confirmed before it is recorded, for every tuner
(:func:`tiramisu_py.tune`, :func:`schedules.tune_library`, the parallel grain).

A tuner's search times each candidate with a few calls; on a busy host one
candidate can look fast once (another process paused, a frequency step),
and a record is used by every later process on the host.  So the search's
winner is timed again against the defaults before it is recorded
(:func:`confirm`):

* one warm-up call of each (timed: it sizes the samples);
* ``rounds`` rounds, each one sample of the defaults and one of the
  candidate, back to back, in alternating order (A B, B A, A B, ...: a
  drift of the host's speed falls on both alike); a sample is ``number``
  calls, enough for ``min_sample`` seconds;
* each round gives a paired ratio, candidate / defaults; the candidate is
  **kept only if the upper quartile of the ratios is below 1 - margin**:
  in about three rounds of four or more it beat the defaults timed beside
  it by more than the margin.  Under a tie each round is a coin toss, and
  9 of 12 heads is a 7% chance before the margin; with it, far less.  A
  real 10% win passes;
* a clear result ends it at half the rounds (with 8 rounds or more): every
  ratio so far below 1 - margin (kept: 6 heads of 6 under a tie is a 1.6%
  chance), or every one above 1 (not kept: slower).  A slow default (a
  serial loop nest as written) is then not timed twelve times over.

Every time is read from ``clock`` (default :func:`time.perf_counter`), so
tests can give a fake one.  :class:`Verdict` is what was measured and
decided; :meth:`Verdict.line` says it in one line."""
from __future__ import annotations

import math
import statistics
import time
from dataclasses import asdict, dataclass

ROUNDS = 12             # paired A/B rounds
MARGIN = 0.03           # the least win kept: the upper quartile below 1 - MARGIN
MIN_SAMPLE = 0.01       # seconds a sample lasts at least (short calls are repeated)
MAX_NUMBER = 1000       # calls per sample at most


@dataclass(frozen=True)
class Verdict:
    """What the A/B measured (seconds per call, medians over the rounds;
    the paired ratios' median and quartiles) and whether the candidate is
    kept (``why``: "kept", "not kept: within noise", "not kept: slower",
    "not kept: no candidate beat the defaults in the search")."""
    default_s: float
    best_s: float
    ratio: float
    low: float
    high: float
    rounds: int
    kept: bool
    why: str

    def line(self) -> str:
        """``default 10.200 ms, best 9.800 ms, ratio 0.96 [0.91-1.02] over
        12 A/B rounds: not kept: within noise``."""
        ms = f"default {self.default_s * 1e3:.3f} ms, best {self.best_s * 1e3:.3f} ms"
        if not self.rounds:
            return f"{ms}: {self.why}"
        return (f"{ms}, ratio {self.ratio:.2f} [{self.low:.2f}-{self.high:.2f}] over "
                f"{self.rounds} A/B rounds: {self.why}")

    def as_dict(self) -> dict:
        """JSON-ready (a tuning record keeps it)."""
        return asdict(self)

    @classmethod
    def from_dict(cls, d):
        """The Verdict of :meth:`as_dict`'s output, or None if ``d`` is not one."""
        try:
            return cls(**{k: d[k] for k in cls.__dataclass_fields__})
        except (TypeError, KeyError):
            return None


def no_win(default_s, best_s=None) -> Verdict:
    """The verdict of a search in which no candidate beat the defaults
    (nothing to confirm)."""
    best_s = default_s if best_s is None else best_s
    return Verdict(default_s, best_s, best_s / default_s if default_s else 1.0, 1.0, 1.0, 0,
                   False, "not kept: no candidate beat the defaults in the search")


def decide(default, candidate, default_s, candidate_s, clock=None) -> Verdict:
    """The verdict on a search's winner: ``candidate()`` (``candidate_s``
    seconds a call in the search) against ``default()`` (``default_s``),
    confirmed by :func:`confirm` if it was faster in the search, else
    :func:`no_win` without timing anything."""
    if candidate_s < default_s:
        return confirm(default, candidate, clock=clock)
    return no_win(default_s, candidate_s)


def recorded(value):
    """The :class:`Verdict` a tuning record (a dict) holds under "verdict",
    or None (no verdict: made before wins were confirmed, or damaged)."""
    if not isinstance(value, dict):
        return None
    return Verdict.from_dict(value.get("verdict") or {})


def _check(name, value, low, cls=(int, float)):
    if isinstance(value, bool) or not isinstance(value, cls) or not math.isfinite(value) \
            or value < low:
        raise ValueError(f"confirm: {name} must be a number >= {low}, not {value!r}")


def confirm(default, candidate, *, rounds=ROUNDS, margin=MARGIN, clock=None,
            min_sample=MIN_SAMPLE, max_number=MAX_NUMBER) -> Verdict:
    """Times ``candidate()`` against ``default()`` (each one call of a
    kernel, no arguments) interleaved and decides whether the candidate is
    kept (see the module's doc for the rule).  ``clock``: a callable giving
    seconds (default :func:`time.perf_counter`)."""
    _check("rounds", rounds, 2, int)
    _check("margin", margin, 0)
    _check("min_sample", min_sample, 0)
    _check("max_number", max_number, 1, int)
    clock = clock or time.perf_counter

    def sample(fn, number):
        t0 = clock()
        for _ in range(number):
            fn()
        return max(clock() - t0, 0.0) / number

    first = min(sample(default, 1), sample(candidate, 1))          # the warm-up calls
    number = max_number if first <= 0 else \
        max(1, min(max_number, math.ceil(min_sample / first)))
    ta, tb, ratios = [], [], []
    early = rounds // 2 if rounds >= 8 else rounds
    for r in range(rounds):
        if len(ratios) >= early and (max(ratios) < 1.0 - margin or min(ratios) > 1.0):
            break
        if r % 2 == 0:
            a = sample(default, number)
            b = sample(candidate, number)
        else:
            b = sample(candidate, number)
            a = sample(default, number)
        ta.append(a)
        tb.append(b)
        ratios.append(b / a if a > 0 else (1.0 if b <= 0 else 1e9))     # finite: JSON
    q1, median, q3 = statistics.quantiles(ratios, n=4, method="inclusive")
    kept = q3 < 1.0 - margin
    why = "kept" if kept else ("not kept: slower" if median > 1.0 + margin else
                               "not kept: within noise")
    return Verdict(statistics.median(ta), statistics.median(tb), median, q1, q3, len(ratios),
                   kept, why)


__all__ = ["Verdict", "confirm", "decide", "no_win", "recorded", "ROUNDS", "MARGIN"]

"""tiramisu_py.tuning.confirm: the A/B both tuners confirm a win with before
recording it (interleaved paired rounds, kept only if the upper quartile of
the ratios candidate/defaults is below 1 - margin).  Timed with a fake
clock: deterministic, nothing about the host is asserted."""
import pytest

from tiramisu_py.tuning.confirm import MARGIN, ROUNDS, Verdict, confirm, no_win
from tuning_fakes import FakeClock, fast_once, steady


def _ab(default, candidate, **kw):
    clock = FakeClock()
    v = confirm(clock.kernel(default, "A"), clock.kernel(candidate, "B"), clock=clock, **kw)
    return v, clock


def test_a_tie_under_noise_is_not_kept():
    v, _ = _ab(steady(1e-3, 0.05, seed=1), steady(1e-3, 0.05, seed=2))
    assert not v.kept and v.why == "not kept: within noise"
    assert v.low < 1 < v.high and v.rounds == ROUNDS


def test_a_candidate_fast_once_is_not_kept():
    # fast on one call of the A/B (its first timed sample's first call)
    v, _ = _ab(steady(1e-3, 0.02), fast_once(1e-3, 1, 1e-5, 0.02, seed=3))
    assert not v.kept and v.why == "not kept: within noise"


def test_a_real_win_is_kept_and_a_slower_one_never():
    v, _ = _ab(steady(1e-3, 0.05, seed=1), steady(0.7e-3, 0.05, seed=2))
    assert v.kept and v.why == "kept" and v.high < 1 - MARGIN
    assert v.default_s == pytest.approx(1e-3, rel=0.06) and v.best_s == pytest.approx(0.7e-3,
                                                                                   rel=0.06)
    assert v.rounds == ROUNDS // 2                  # every round a clear win: ended early
    slow, _ = _ab(steady(1e-3, 0.05, seed=1), steady(1.3e-3, 0.05, seed=2))
    assert not slow.kept and slow.why == "not kept: slower" and slow.rounds == ROUNDS // 2
    # a win in most rounds but not all runs every round
    mixed, _ = _ab(steady(1e-3), lambda n: 1.05e-3 if n in (2, 3) else 0.8e-3,
                   min_sample=0)                    # one call a sample: call n is round n
    assert mixed.kept and mixed.rounds == ROUNDS
    # a win smaller than the margin is not worth a record
    small, _ = _ab(steady(1e-3), steady(0.99e-3))
    assert not small.kept and small.high == pytest.approx(0.99)


def test_rounds_alternate_and_short_calls_are_repeated():
    v, clock = _ab(steady(1e-3), steady(1e-3), rounds=4, min_sample=0.01)
    # warm-ups A, B; then 10 calls a sample (0.01 s / 1 ms), in the order AB BA AB BA
    samples = [clock.calls[i] for i in range(2, len(clock.calls), 10)]
    assert clock.calls[:2] == ["A", "B"] and len(clock.calls) == 2 + 4 * 2 * 10
    assert samples == ["A", "B", "B", "A", "A", "B", "B", "A"]
    assert v.ratio == 1.0 and not v.kept


def test_verdict_line_and_record_round_trip():
    v, _ = _ab(steady(2e-3), steady(1e-3))
    assert v.line() == ("default 2.000 ms, best 1.000 ms, ratio 0.50 [0.50-0.50] over "
                        f"{ROUNDS // 2} A/B rounds: kept")
    assert Verdict.from_dict(v.as_dict()) == v and Verdict.from_dict({"x": 1}) is None
    n = no_win(2e-3, 3e-3)
    assert not n.kept and n.line() == ("default 2.000 ms, best 3.000 ms: not kept: no "
                                       "candidate beat the defaults in the search")


def test_bad_arguments_are_refused():
    clock = FakeClock()
    k = clock.kernel(steady(1e-3))
    for kw, name in (({"rounds": 1}, "rounds"), ({"margin": float("nan")}, "margin"),
                     ({"rounds": True}, "rounds"), ({"max_number": 0}, "max_number")):
        with pytest.raises(ValueError, match=name):
            confirm(k, k, clock=clock, **kw)

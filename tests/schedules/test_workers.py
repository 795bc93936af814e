"""``schedules.core.workers.split``: a loop cut into ranges over the host's
cores where it touches enough memory, every index exactly once, in the
caller's thread otherwise; an exception of any range reaches the caller."""
from __future__ import annotations

import threading

import pytest

from schedules.core import workers


@pytest.mark.parametrize("n,threads", [(10, 3), (2, 3), (1, 4), (0, 2), (7, 1)])
def test_split_covers_every_index_once(n, threads, monkeypatch):
    monkeypatch.setattr(workers, "THREADS", threads)
    seen, lock, ranges = [], threading.Lock(), []

    def part(lo, hi):
        with lock:
            seen.extend(range(lo, hi))
            ranges.append(hi - lo)
    workers.split(part, n, nbytes=workers.SPLIT_BYTES)
    assert sorted(seen) == list(range(n))
    assert len(ranges) == min(n, threads) and max(ranges, default=0) - min(ranges, default=0) <= 1


def test_small_work_stays_in_the_callers_thread(monkeypatch):
    monkeypatch.setattr(workers, "THREADS", 4)
    calls = []
    workers.split(lambda lo, hi: calls.append((lo, hi, threading.get_ident())), 100,
                  nbytes=workers.SPLIT_BYTES - 1)
    assert calls == [(0, 100, threading.get_ident())]
    workers.split(lambda lo, hi: calls.append((lo, hi)), 100, nbytes=10, least=20)
    assert calls[-1] == (0, 100)


def test_an_exception_of_any_range_is_raised_after_all_ranges_ran(monkeypatch):
    monkeypatch.setattr(workers, "THREADS", 3)
    done = []

    def part(lo, hi):
        done.append(lo)
        if lo > 0:
            raise ValueError(f"range {lo}")
    with pytest.raises(ValueError, match="range"):
        workers.split(part, 9, nbytes=workers.SPLIT_BYTES)
    assert sorted(done) == [0, 3, 6]


def test_split_returns_only_when_every_range_is_done(monkeypatch):
    """A range that raises early does not let ``split`` return while the
    others still run (the C loops write into arrays the caller holds only
    until then), and this thread's own error is the one raised."""
    import time
    monkeypatch.setattr(workers, "THREADS", 4)
    finished = []

    def part(lo, hi):
        if lo == 0:
            raise ValueError("the caller's range")
        if lo == 25:
            raise KeyError("a worker's range")
        time.sleep(0.2)
        finished.append(lo)
    with pytest.raises(ValueError, match="the caller's range"):
        workers.split(part, 100, nbytes=workers.SPLIT_BYTES)
    assert sorted(finished) == [50, 75]

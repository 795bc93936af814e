"""A fake clock for the tuners' tests: time moves only when a fake kernel
runs, by what its cost profile says for that call, so which candidate
looks fast (in the search, in the A/B) is decided by the test, never by the
host."""
from __future__ import annotations

import itertools
import random


class FakeClock:
    """``clock()`` gives the fake time; ``kernel(costs)`` a callable (any
    arguments) whose n-th call (from 0) advances it by ``costs(n)`` seconds."""

    def __init__(self):
        self.now = 0.0
        self.calls = []             # the labels of the kernels called, in order

    def __call__(self):
        return self.now

    def kernel(self, costs, label=None, result=None):
        count = itertools.count()

        def call(*args, **kwargs):
            self.now += costs(next(count))
            self.calls.append(label)
            return result
        return call


def steady(t, noise=0.0, seed=0):
    """``t`` seconds a call, give or take ``noise`` (a fraction; seeded)."""
    rng = random.Random(seed)
    return lambda n: t * (1 + rng.uniform(-noise, noise))


def fast_once(t, at, fast, noise=0.0, seed=0):
    """``t`` (with ``noise``), but ``fast`` on call ``at``: a candidate that
    looks fast once (the search's one timed call)."""
    base = steady(t, noise, seed)
    return lambda n: fast if n == at else base(n)

"""Parallel regions both CPU backends form from the loop IR.

*Adjacent plain parallel loops* (no reduction, the default static schedule:
:func:`plain_parallel`) share one region: one fork/join for a layer norm's
statements instead of one per statement.

*A stepped region* (:func:`stepped_loops`): a serial loop whose body is only
plain parallel loops -- the time loop of a recurrence or of a stencil
around its parallel sweep -- runs as one region: every thread runs the serial
loop and its static block of each inner loop, and a barrier after each inner
loop keeps the steps in order.  One fork/join per call instead of one per
step, and the barrier is the generated code's own (``tp_spin_barrier``):
the team's threads arrive on a shared counter and wait on a generation
number, spinning (with the CPU's pause hint) for up to :data:`SPIN_LIMIT`
polls, then yielding the core at each poll.  OpenMP's own barrier, under
``OMP_WAIT_POLICY=passive``, puts a waiting thread to sleep at once, and
waking it cost about 60 us a step on a 2-core VM (an LSTM layer of 100 steps,
each 40 us of work, ran 2.6x slower); the bounded spin waits about as
long as GOMP's default policy does before it gives the core away, and a
region's threads leave it (and sleep, as the policy says) when the loop ends.

This module imports nothing from ``tiramisu_py``."""
from __future__ import annotations

from . import ir

SPIN_LIMIT = 1 << 16      # polls with a pause hint before each poll also yields the core


def plain_parallel(s) -> bool:
    """A parallel loop without a reduction and with the default schedule (one
    static block per thread): it can share a region."""
    sched = isinstance(s, ir.For) and s.attrs.get("omp_schedule")
    return (isinstance(s, ir.For) and s.kind == "parallel" and not s.attrs.get("reduction")
            and not (sched and (sched[0] != "static" or sched[1])))


def _reads_memory(*exprs) -> bool:
    return any(isinstance(n, ir.Load) for e in exprs for n in ir.walk_exprs(e))


def stepped_loops(s) -> list | None:
    """The plain parallel loops that make up the whole body of the serial
    loop ``s`` (a stepped region), or None.  No bound may read memory: the
    loops' own stores could change it while another thread of the team
    still reads it (each thread evaluates the bounds)."""
    if not (isinstance(s, ir.For) and s.kind == "serial") or _reads_memory(s.lo, s.hi):
        return None
    body = s.body.stmts if isinstance(s.body, ir.Block) else [s.body]
    if not body or not all(plain_parallel(b) and not _reads_memory(b.lo, b.hi) for b in body):
        return None
    return list(body)

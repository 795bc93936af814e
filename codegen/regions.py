"""Parallel regions both CPU backends form from the loop IR.

*Adjacent plain parallel loops* (no reduction, the default static schedule:
:func:`plain_parallel`) share one region: one fork/join for a layer norm's
statements instead of one per statement.

*A stepped region* (:func:`stepped_loops`): a serial loop whose body is only
plain parallel loops -- the time loop of a recurrence or of a stencil
around its parallel sweep -- runs as one region: every thread runs the serial
loop and its static block of each inner loop, and a barrier after each inner
loop keeps the steps in order.  One fork/join per call instead of one per
step, and the barrier is the generated code's own (``tp_barrier``): the
team's threads arrive on a shared counter and wait on a generation number,
polling it (with the CPU's pause hint) for the module's spin budget, then
sleeping on it (a futex on Linux; the last to arrive wakes the sleepers).
The budget adapts as an adaptive mutex's: it halves when a spin ends in a
sleep and doubles when the generation moves in time, between
:data:`SPIN_MIN` and :data:`SPIN_MAX` polls.  OpenMP's own barrier, under
``OMP_WAIT_POLICY=passive``, puts a waiting thread to sleep at once, and
waking it cost about 60 us a step on a 2-core VM (an LSTM layer of 100 steps,
each 40 us of work, ran 2.6x slower): on a quiet machine the spin covers a
step's imbalance.  On a busy one a partner thread is often descheduled for a
scheduler slice (~3 ms): a pure spin (as this barrier was) then holds the
core the partner waits for, every step; the budget falls to its floor and
the waiting thread gives its core away at once.

This module imports nothing from ``tiramisu_py``."""
from __future__ import annotations

from . import ir

SPIN_MAX = 1 << 12        # polls with a pause hint before a waiting thread sleeps (~20-100 us)
SPIN_MIN = 1 << 6         # the floor the budget falls to on a busy machine (~1-5 us)


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

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

*A mixed region* (:func:`mixed_run`): adjacent plain parallel loops and
stepped regions -- a convolution's packing loop, its stepped sweep over
output channel blocks, its finishing loop -- run as one region: one fork and
join per call instead of one per loop, OpenMP's barrier after each plain
loop (it waits as the user's ``OMP_WAIT_POLICY`` says: under libgomp's
default spinning a convolution's region took 2.5 ms with the generated
barrier there, 1.4 ms with OpenMP's) and the generated one inside the
stepped loops.

*Small parallel loops run on one thread* (:func:`run_small_serially`, a
loop pass): a parallel loop, a region of adjacent ones or a stepped region
whose work between two synchronisations -- an upper bound on the statement
instances it runs, from its bounds' intervals over the kernel's fixed
parameters -- is below the host's *parallel grain* becomes serial (as
torch's ``at::parallel_for`` runs a range below its grain size inline).
Its fork, join and barriers would cost more than the work: a few
microseconds each on a quiet machine, a scheduler slice (~3 ms) each when a
busy machine has descheduled a thread of the team.  A loop with a bound
that has no finite interval (a parameter given at call time, a bound read
from memory) stays parallel.

This module imports nothing from ``tiramisu_py``."""
from __future__ import annotations

from . import ir
from .simplify import interval

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


def mixed_run(stmts, k: int) -> list:
    """The statements from ``stmts[k]`` on that can share one region with a
    stepped one among them: plain parallel loops and stepped regions
    (:func:`stepped_loops`), no bound reading memory (each is evaluated
    before the fork or by every thread, while an earlier loop of the region
    may still write it).  A run of at least two with a stepped one is a
    *mixed region*: one fork/join, each plain loop's static block and a
    barrier after it, each stepped loop as in its own region; else []."""
    run = []
    while k + len(run) < len(stmts):
        s = stmts[k + len(run)]
        if not (stepped_loops(s) or plain_parallel(s) and not _reads_memory(s.lo, s.hi)):
            break
        run.append(s)
    if len(run) < 2 or not any(stepped_loops(s) for s in run):
        return []
    return run


def work(s, ranges) -> int | None:
    """An upper bound on the statement instances (stores) ``s`` runs, its
    loops' iterators and the names in ``ranges`` (name -> inclusive (lo,
    hi)) within their intervals; None when a loop's trip count has no bound."""
    if isinstance(s, ir.Store):
        return 1
    if isinstance(s, ir.For):
        lo, hi = interval(s.lo, ranges)[0], interval(s.hi, ranges)[1]
        if lo is None or hi is None:
            return None
        trip = max(0, -(-(hi - lo) // max(1, int(s.step))))
        if trip == 0:
            return 0
        w = work(s.body, {**ranges, s.var: (lo, hi - 1)})
        return None if w is None else trip * w
    parts = [work(c, ranges) for c in ir.stmt_children(s)]
    if None in parts:
        return None
    return max(parts, default=0) if isinstance(s, ir.If) else sum(parts)


def run_small_serially(fn: ir.LoweredFunction, grain: int) -> ir.LoweredFunction:
    """Makes serial every parallel loop whose region's work between two
    synchronisations is below ``grain`` statement instances (the module
    docstring); a region's loops (adjacent plain parallel loops, or the
    parallel loops of a stepped region, per step) turn serial together or
    not at all, so no region splits into more forks.  ``grain`` 0: nothing
    changes.  In place; ``fn`` returned."""
    if grain > 0:
        fn.body = _serialise(fn.body, {n: (int(v), int(v)) for n, v in fn.constants.items()},
                             grain)
    return fn


def _serialise(s, ranges, grain):
    if isinstance(s, ir.Block):
        out, k = [], 0
        while k < len(s.stmts):
            run = []
            while k + len(run) < len(s.stmts) and plain_parallel(s.stmts[k + len(run)]):
                run.append(s.stmts[k + len(run)])
            if run:
                out += _small(run, ranges, grain) or run
                k += len(run)
            else:
                out.append(_serialise(s.stmts[k], ranges, grain))
                k += 1
        return ir.Block(out)
    if isinstance(s, ir.For):
        lo, hi = interval(s.lo, ranges)[0], interval(s.hi, ranges)[1]
        inner = {**ranges, s.var: (lo, None if hi is None else hi - 1)}
        steps = stepped_loops(s)
        if steps:
            small = _small(steps, inner, grain)
            if small:
                body = ir.Block(small) if isinstance(s.body, ir.Block) else small[0]
                return ir.For(s.var, s.lo, s.hi, body, kind=s.kind, step=s.step, attrs=s.attrs)
            return s
        if s.kind == "parallel":
            return (_small([s], ranges, grain) or [s])[0]
        return ir.rebuild(s, lambda c: _serialise(c, inner, grain))
    return ir.rebuild(s, lambda c: _serialise(c, ranges, grain))


def _small(loops, ranges, grain):
    """``loops`` made serial when each one's work is below ``grain``, else None."""
    ws = [work(x, ranges) for x in loops]
    if None in ws or max(ws) >= grain:
        return None
    drop = ("reduction", "omp_schedule", "private")
    return [ir.For(x.var, x.lo, x.hi, x.body, kind="serial", step=x.step,
                   attrs={**{k: v for k, v in x.attrs.items() if k not in drop},
                          "small": (w, grain)})
            for x, w in zip(loops, ws)]


def synchronisations(fn: ir.LoweredFunction) -> int:
    """About how many times a call of ``fn`` makes its team meet: a fork and
    join per parallel loop run (a run of adjacent ones counts each, for the
    barriers between them), a barrier per inner loop and step of a stepped
    region; serial loops multiply by their trip counts (1 where one has no
    bound).  What :mod:`codegen.team` weighs a call's time against."""
    return _syncs(fn.body, {n: (int(v), int(v)) for n, v in fn.constants.items()})


def _syncs(s, ranges) -> int:
    if isinstance(s, ir.For):
        if s.kind == "parallel":
            return 1
        lo, hi = interval(s.lo, ranges)[0], interval(s.hi, ranges)[1]
        trip = 1 if lo is None or hi is None else max(0, -(-(hi - lo) // max(1, int(s.step))))
        steps = stepped_loops(s)
        if steps:
            return 1 + trip * len(steps)
        return trip * _syncs(s.body, {**ranges, s.var: (lo, None if hi is None else hi - 1)})
    parts = [_syncs(c, ranges) for c in ir.stmt_children(s)]
    return max(parts, default=0) if isinstance(s, ir.If) else sum(parts)

"""Asynchronous copies (``cp.async``) of a pipelined loop, and their waits,
derived from the dependences.

A copy that ``pipeline(loop, stages)`` runs ahead (:mod:`tiramisu_py.commands
.gpu_pipeline`) is *asynchronous* on the GPU when it copies a global array
into a shared tile (its value the plain read of the source, same dtype).
Each thread commits its copies of one iteration of ``loop`` as one group
(at the end of the iteration), and before the barrier that ends the
iteration it waits until at most ``N`` groups are pending.  An async write
is complete once its group is retired, so every dependence whose source is
an async copy must reach its sink only after that: with the sink ``d``
iterations of ``loop`` after the source (both in one block, the loops
around ``loop`` at the same iteration), the groups committed after the
source's and before the barrier closing iteration ``source + d - 1`` are
``d - 1``, so ``N = min d - 1`` over those dependences (RAW, WAW and the
storage conflicts of the tile), computed exactly with isl.  A dependence
inside one iteration (``d = 0``) is refused: no wait can sit between an
issue and a read of the same iteration without serialising it.  After the
loop every thread waits for all its groups, then a barrier: dependences
that leave the loop are ordered by it, and so are those of a loop isl's AST
splits in two (a short pipeline: the copies' iterations first, then the
reads', whose per-iteration waits then have no copy to wait for).

The wait is the only difference from a synchronous copy: the barriers are
the plan's (:mod:`tiramisu_py.analysis.gpu_plan`), and the emulator runs
``cp.async`` with its writes deferred to the wait that retires them, so a
wait that is missing or too lax shows as a wrong result.
"""
from __future__ import annotations

import islpy as isl

from ..base.errors import IllegalScheduleError


def async_copies(model, state, stmts):
    """The pipelined copies among ``stmts`` that run as ``cp.async``: a shared
    tile filled from a global array, dtype for dtype."""
    out = []
    for s in stmts:
        m = model.by_name[s]
        writes = [a for a in m.accesses if a.write]
        reads = [a for a in m.accesses if not a.write]
        if len(writes) != 1 or len(reads) != 1:
            continue
        w, r = writes[0].buffer, reads[0].buffer
        if getattr(w, "memory", "global") == "shared" \
                and getattr(r, "memory", "global") == "global" and w.dtype == r.dtype:
            out.append(s)
    return out


def plan_async(model, state, commands, plan, sched, gdeps, depth):
    """Fills ``plan.async_stmts`` and ``plan.async_waits`` ({(stmt, schedule
    position of the loop): N} for every statement under a pipelined loop)."""
    for stmt, st in state.items():
        k = plan.by_stmt.get(stmt)
        if k is None:
            continue
        for loop, (stages, copies, index) in st.pipelines.items():
            j = [lp.name for lp in st.loops].index(loop)
            p = 2 * j + 1
            chosen = async_copies(model, state, [c for c in copies if c in plan.by_stmt])
            if not chosen:
                continue
            d = _min_distance(model, state, commands[index].text, chosen, sched, gdeps, depth, p)
            if d is None:
                continue
            n = max(0, d - 1)
            plan.async_stmts.update(chosen)
            for s in k.stmts:
                lps = state[s].loops
                if len(lps) > j and lps[j].name == loop \
                        and state[s].consts[:j + 1] == st.consts[:j + 1]:
                    plan.async_waits[(s, p)] = n


def _min_distance(model, state, text, copies, sched, gdeps, depth, p):
    """The smallest number of iterations at position ``p`` between an async
    copy and a later instance depending on it in the same block and outer
    iterations; refuses 0."""
    a = [f"a{i}" for i in range(depth)]
    b = [f"b{i}" for i in range(depth)]
    same = isl.Map(f"{{ [{', '.join(a)}] -> [{', '.join(b)}] : "
                   + " and ".join([f"a{i} = b{i}" for i in range(p)] or ["true"]) + " }",
                   context=model.ctx)
    best = None
    for buf, (d, conflicts) in gdeps.items():
        rel = d if conflicts is None else d.union(conflicts).union(conflicts.reverse())
        pieces = []
        rel.foreach_map(pieces.append)
        for m in pieces:
            s = m.get_tuple_name(isl.dim_type.in_)
            t = m.get_tuple_name(isl.dim_type.out)
            if s not in copies or s not in sched or t not in sched:
                continue
            timed = sched[s].reverse().apply_range(m).apply_range(sched[t]).intersect(same)
            later = timed.intersect(_lex_lt(model, depth))
            if later.is_empty():
                continue
            delta = later.deltas().dim_min(p)
            if delta.n_piece() == 0:
                continue
            v = delta.min_val()
            if not v.is_int():
                continue
            v = int(v.to_python())
            if v <= 0:
                raise IllegalScheduleError(
                    f"{text} is illegal on the GPU: {t} depends on the asynchronous copy {s} "
                    "in the iteration that issues it (cp.async completes only at a later "
                    "wait); give more stages, or copy it at an outer loop")
            best = v if best is None else min(best, v)
    return best


def _lex_lt(model, depth):
    a = [f"a{i}" for i in range(depth)]
    b = [f"b{i}" for i in range(depth)]
    space = isl.Set(f"{{ [{', '.join(a)}] }}", context=model.ctx).get_space()
    return isl.Map.lex_lt(space)

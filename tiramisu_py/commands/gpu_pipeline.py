"""``s.pipeline(loop, stages)``: software pipelining of the copies computed
at a serial loop (``cache_shared`` tiles, ``cache_local`` fragments).

Each copy computed at ``loop`` of ``s`` runs ``stages - 1`` iterations ahead
of the iteration that reads it (its schedule shifted: ``loop`` starts
``stages - 1`` iterations early with the first copies, its last iterations
only compute), and its storage gets ``stages`` slots along the dimensions
whose footprint moves with ``loop`` (index ``v % (stages * width)``), so
the copy for iteration ``t + stages - 1`` writes a slot no iteration still
to come before it reads.

Nothing here is assumed legal: the shift and the storage are an ordinary
schedule and storage mapping, so ``compile()``'s exact dependence check
refuses a pipeline the slots cannot hold (a WAR on the tile, instances
named), and the GPU check derives the barriers (one per iteration where a
plain tile needs two: the copy and the reads of one iteration touch
different slots).  On the GPU a shared tile copied from global memory is
copied with ``cp.async`` (sm_80+), committed once per iteration, and the
barrier at the end of each iteration first waits until all but the ``d -
1`` newest groups are complete, ``d`` the smallest distance (in iterations
of ``loop``) between a copy and a read of what it wrote, from the
dependences (:mod:`tiramisu_py.analysis.gpu_async`).
"""
from __future__ import annotations

import math

from ..poly.footprint import footprint_moves
from .gpu_copies import MAX_LOCAL_ELEMENTS, store_regs, store_tile
from .state import state_of

MAX_STAGES = 8


def copies_at(state, stmt, loop):
    """The compute_at copies that run in ``stmt``'s ``loop`` and are computed
    there (directly, or at a copy computed at ``stmt``: a nested compute_at)."""
    k = [lp.name for lp in state[stmt].loops].index(loop)
    out = []
    for name, x in state.items():
        if x.at is None or x.at[2] != k + 1 or x.loops[k].name != loop:
            continue
        owner = x.at[1]
        while owner != stmt and state[owner].at is not None:
            owner = state[owner].at[1]
        if owner == stmt:
            out.append(name)
    return out


def pipeline(stmt, loop, stages):
    f = stmt.function
    text = f"{stmt.name}.pipeline({loop}, stages={stages!r})"
    if not isinstance(stages, int) or isinstance(stages, bool) or not 2 <= stages <= MAX_STAGES:
        raise ValueError(f"{text}: stages must be an int from 2 to {MAX_STAGES} (the copies "
                         "run stages - 1 iterations ahead)")
    state = state_of(f)
    st = state[stmt.name]
    k = st.find(loop, text, stmt.name)
    tag = st.tags.get(loop)
    if tag is not None and tag.kind in ("gpu_block", "gpu_thread"):
        raise ValueError(f"{text}: {loop!r} is bound to the GPU ({tag.kind[4:]}); pipeline a "
                         "serial loop (the k-step loop)")
    if loop in st.pipelines:
        raise ValueError(f"{text}: {loop!r} is already pipelined")
    copies = copies_at(state, stmt.name, loop)
    if not copies:
        raise ValueError(f"{text}: no copy is computed at {loop!r}; cache_shared or cache_local "
                         f"a source at {loop!r} first")
    plans = []
    for name in copies:
        copy_ = f.computations[name]
        buf = copy_.buffer
        moving = footprint_moves(f, name, k)
        if not any(moving):
            raise ValueError(f"{text}: what {name} copies does not change with {loop!r} (the "
                             "same data each iteration); copy it at an outer loop instead")
        if getattr(buf, "tile", None) is not None:
            plans.append((copy_, buf, dict(buf.tile, stages=stages, moving=moving)))
        elif getattr(buf, "regs", None) is not None:
            counts = buf.regs["counts"]
            slots = [stages if mv else 1 for mv in moving]
            n = math.prod(c * s for c, s in zip(counts, slots))
            if n > MAX_LOCAL_ELEMENTS:
                raise ValueError(f"{text}: {stages} stages of {name} make {n} elements per "
                                 f"thread, beyond {MAX_LOCAL_ELEMENTS} (registers)")
            plans.append((copy_, buf, (counts, buf.regs["strides"], slots)))
        else:
            raise ValueError(f"{text}: {name} is not a cache_shared or cache_local copy")
    stmt._command("pipeline", loop, stages, tuple(copies), text=text)
    for copy_, buf, how in plans:
        if isinstance(how, dict):
            store_tile(copy_, buf, how, text)
        else:
            store_regs(copy_, buf, *how)
    f._state_cache = f._model_cache = None
    return stmt

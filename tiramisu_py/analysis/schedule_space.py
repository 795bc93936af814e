"""What the auto-scheduler reads of the dependences, in schedule time.

* :func:`deltas`: the distance vectors ``t(sink) - t(source)`` of every
  ordering dependence (memory-based: every pair the legality check could
  order, a superset of the value-based ones its order rule keeps) under
  a schedule state, one isl set over the common schedule dimensions.
* :func:`permutable`: whether a band of loops is permutable (every
  dependence between two instances of the same iteration of the loops
  outside the band has a non-negative distance along every loop of the
  band), the condition for tiling it, for any tile sizes.
* :func:`parallel_loops`: which loops of a statement carry no dependence.
* :func:`stride_one_var`: the loop variable of a statement's written
  element's last index (its stride-1 loop).

These are facts for choosing commands; whether a chosen schedule is legal is
always decided by :func:`tiramisu_py.analysis.legality.check`, as for a
user's commands."""
from __future__ import annotations

import islpy as isl

from ..lang import affine
from ..lang.expr import Var, walk
from .legality import carried_by, schedule_depth


def deltas(model, deps, state, stmts=None):
    """The union of the dependence distance vectors under ``state`` (an
    isl UnionSet over ``[d0, ..., dn]``, the 2d+1 schedule dims), or None;
    ``stmts``: only the dependences between those statements (a group's
    band is permutable or not by its own, not by another group's)."""
    sched = deps.schedule(state)
    among = None
    if stmts is not None:
        for n in stmts:
            dom = isl.UnionSet.from_set(model.domain(model.by_name[n]))
            among = dom if among is None else among.union(dom)
    out = None
    for d in deps.relevant(state).values():
        if among is not None:
            d = d.intersect_domain(among).intersect_range(among)
            if d.is_empty():
                continue
        dl = d.apply_domain(sched).apply_range(sched).deltas()
        out = dl if out is None else out.union(dl)
    return out


def permutable(model, state, dl, stmt, band):
    """True when the loops ``band`` of ``stmt`` (consecutive, names) form a
    permutable band under the distance vectors ``dl`` (from :func:`deltas`)."""
    if dl is None:
        return True
    s = state[stmt]
    names = [lp.name for lp in s.loops]
    k0 = names.index(band[0])
    positions = [2 * names.index(n) + 1 for n in band]
    depth = schedule_depth(model, state)
    dims = ", ".join(f"d{i}" for i in range(depth))
    same_outer = [f"d{p} = 0" for p in range(2 * k0 + 1)]
    for pos in positions:
        bad = isl.Set(f"{model.prefix()}{{ [{dims}] : "
                      + " and ".join(same_outer + [f"d{pos} < 0"]) + " }", context=model.ctx)
        if not dl.intersect(bad.to_union_set()).is_empty():
            return False
    return True


def parallel_loops(model, deps, state, stmt):
    """The names of ``stmt``'s loops that carry no dependence under ``state``."""
    return [lp.name for lp in state[stmt].loops
            if carried_by(model, deps, state, stmt, lp.name) is None]


def stride_one_var(model, stmt):
    """The loop variable in the last index of the element ``stmt`` writes
    (the loop along which its stores are contiguous), or None."""
    m = model.by_name[stmt]
    for a in m.accesses:
        if a.write and a.index:
            vs = [n.name for n in walk(a.index[-1]) if isinstance(n, Var)]
            names = {v.name for v in m.vars}
            vs = [v for v in vs if v in names]
            return vs[-1] if vs else None
    return None


def written_vars(model, stmt):
    """Per index of the element ``stmt`` writes, the loop variables in it
    (``C[i][j]``: ``[["i"], ["j"]]``); empty when it writes none."""
    m = model.by_name[stmt]
    names = {v.name for v in m.vars}
    for a in m.accesses:
        if a.write:
            return [[n.name for n in walk(e) if isinstance(n, Var) and n.name in names]
                    for e in a.index]
    return []


def loop_names(e):
    """The names of the loop variables in the index expression ``e``."""
    return {n.name for n in walk(e) if isinstance(n, Var)}


def strided_reads(model, stmt, var):
    """The arrays ``stmt`` reads with ``var`` in an index other than the
    last: along ``var`` those reads are strided (a vector loop over ``var``
    gathers them lane by lane)."""
    out = []
    for a in model.by_name[stmt].accesses:
        if a.write or len(a.index) < 2:
            continue
        if any(var in loop_names(e) for e in a.index[:-1]):
            out.append(a.buffer.name)
    return out


def rows_read_again(model, stmt, var):
    """True when two reads of one array by ``stmt`` differ only by a constant,
    nonzero in an index that uses ``var`` (a 9-point stencil's
    ``A[i + 1][j]`` and ``A[i + 2][j]``: the row one iteration of ``var``
    reads is read again by the next)."""
    seen = {}
    for a in model.by_name[stmt].accesses:
        if a.write or a.implicit:
            continue
        try:
            forms = [affine.linear(e) for e in a.index]
        except affine.NonAffine:
            continue
        shape = tuple(tuple(sorted((k, v) for k, v in f.items() if k != 1)) for f in forms)
        consts = tuple(f.get(1, 0) for f in forms)
        for other in seen.get((a.buffer.name, shape), ()):
            if any(c != o and var in loop_names(e) for c, o, e in zip(consts, other, a.index)):
                return True
        seen.setdefault((a.buffer.name, shape), []).append(consts)
    return False


def data_dependent_from(model, stmt):
    """The position of ``stmt``'s first loop with data-dependent bounds
    (loops from there on stay in place: the loops its bounds read must stay
    outside it), or its number of loops."""
    vs = model.by_name[stmt].vars
    return next((k for k, v in enumerate(vs) if v.data_dependent), len(vs))


def has_data_dependent_loop(model, stmt):
    """True when one of ``stmt``'s loops has data-dependent bounds (its
    loops from there on stay in place)."""
    return data_dependent_from(model, stmt) < len(model.by_name[stmt].vars)


def reuse_reads(model, stmt, loops):
    """The reads of a 2-D (or more) array by ``stmt`` that leave out one of
    ``loops`` (their elements are used again across that loop: tiling can
    keep them in cache; a vector's reuse fits in cache untiled), each with
    the names of the loops in its index."""
    out = []
    for a in model.by_name[stmt].accesses:
        if a.write or len(a.index) < 2:
            continue
        used = set().union(*(loop_names(e) for e in a.index))
        if any(lp not in used for lp in loops):
            out.append((a, used))
    return out


def element_bytes(model, stmt):
    """Bytes of the element ``stmt`` writes (its buffer's dtype)."""
    for a in model.by_name[stmt].accesses:
        if a.write:
            return max(1, a.buffer.dtype.bits // 8)
    return 8


def arrays_touched(model, stmt):
    return len({a.buffer.name for a in model.by_name[stmt].accesses})

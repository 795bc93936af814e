"""What one iteration of the loops a compute_at copy sits in reads (its
footprint, exact with isl): the widths that shape a ``cache_shared`` tile or
a ``cache_local`` array, and the strides that compress the latter; the
widths of what one iteration of a statement's outer loops covers of its own
dimensions; and the extent and range of a statement's loop under a
schedule."""
from __future__ import annotations

import islpy as isl

from ..lang.schedule import replay
from .model import build_model


def footprint_widths(f, copy_name):
    """The bounding box of what one iteration of the loops a compute_at copy
    sits in reads: per own dimension, the largest width (over iterations and
    param values), or None when unbounded."""
    model = build_model(f)
    state = replay(model, f._commands)
    at = model.compute_ats(state)[copy_name]
    dom = at.member_domain(copy_name)
    depth = state[copy_name].at[2]
    n = dom.dim(isl.dim_type.set) - depth
    m = isl.Map.from_domain_and_range(dom, dom)
    for k in range(depth):
        m = m.equate(isl.dim_type.in_, k, isl.dim_type.out, k)
    m = m.intersect_domain(dom).intersect_range(dom)
    return _widths(m.deltas(), range(depth, depth + n))


def _per_iteration(f, copy_name):
    """(one iteration's footprint of a compute_at copy: the enclosing loops'
    values as parameters after the params, number of params, own dims)."""
    model = build_model(f)
    state = replay(model, f._commands)
    dom = model.compute_ats(state)[copy_name].member_domain(copy_name)
    depth = state[copy_name].at[2]
    nparam = dom.dim(isl.dim_type.param)
    per_iter = dom.move_dims(isl.dim_type.param, nparam, isl.dim_type.set, 0, depth)
    return per_iter, nparam, dom.dim(isl.dim_type.set) - depth


def footprint_strides(f, copy_name):
    """Per own dimension of a compute_at copy, the stride of what one
    iteration of its enclosing loops reads (1 when none)."""
    per_iter, _, n = _per_iteration(f, copy_name)
    out = []
    for d in range(n):
        s = per_iter.get_stride(d)
        out.append(int(s.to_python()) if s.is_int() and s.to_python() > 0 else 1)
    return out


def footprint_moves(f, copy_name, level):
    """Per own dimension of a compute_at copy, True when where its footprint
    starts changes with the enclosing loop at ``level`` (0: outermost): the
    dimensions a multi-buffered tile (``pipeline``) gives one slot per stage."""
    per_iter, nparam, n = _per_iteration(f, copy_name)
    out = []
    for d in range(n):
        lo = per_iter.dim_min(d)
        out.append(any(aff.involves_dims(isl.dim_type.param, nparam + level, 1)
                       for _, aff in lo.get_pieces()))
    return out


def block_widths(model, state, stmt, depth):
    """Per dimension of ``stmt``'s domain, the largest width (over
    iterations and param values) that one iteration of its ``depth``
    outermost loops under the schedule ``state`` covers; None where that is
    unbounded."""
    outer = _to_loops(model, stmt, [lp.expr for lp in state[stmt].loops[:depth]])
    deltas = outer.apply_range(outer.reverse()).deltas()
    return _widths(deltas, range(deltas.dim(isl.dim_type.set)))


def _widths(deltas, dims):
    """Per dimension ``dims`` of the difference set ``deltas``, its largest
    value plus one (the width it spans), or None when unbounded."""
    out = []
    for d in dims:
        pw = deltas.dim_max(d)
        v = pw.max_val() if pw.n_piece() else None
        out.append(None if v is None or not v.is_int() else int(v.to_python()) + 1)
    return out


def _to_loops(model, stmt, exprs):
    """``stmt``'s iterations (its domain) -> the values of the loop
    expressions ``exprs`` under a schedule."""
    m = model.by_name[stmt]
    return isl.Map(f"{model.prefix()}{{ {stmt}[{', '.join(v.name for v in m.vars)}] -> "
                   f"[{', '.join(exprs)}] }}", context=model.ctx).intersect_domain(model.domain(m))


def loop_extent(model, state, stmt, loop):
    """The largest extent ``loop`` of statement ``stmt`` has under the
    schedule ``state``, over all param values, or None when it is unbounded."""
    st = state[stmt]
    k = st.find(loop, f"{stmt}: loop {loop}", stmt)
    rng = _to_loops(model, stmt, [st.loops[k].expr]).range()
    ext = rng.dim_max(0).sub(rng.dim_min(0)).coalesce()
    if ext.n_piece() == 0:
        return 0
    val = ext.max_val()            # over all param values
    if not val.is_int():
        return None                # unbounded (grows with a param)
    return int(val.to_python()) + 1


def loop_range(model, state, stmt, loop):
    """``(lo, hi)``: the smallest and largest values ``loop`` of statement
    ``stmt`` takes under the schedule ``state``, when both are the same for
    every param value (constants); else None (a bound that grows with a size
    given at call time, or no iteration at all)."""
    st = state[stmt]
    k = st.find(loop, f"{stmt}: loop {loop}", stmt)
    rng = _to_loops(model, stmt, [st.loops[k].expr]).range()
    out = (constant_value(rng.dim_min(0)), constant_value(rng.dim_max(0)))
    return None if None in out else out


def constant_value(pw):
    """The value of the piecewise affine ``pw`` when it is the same for
    every param value, else None (none at all included)."""
    if pw.n_piece() == 0:
        return None
    low, high = pw.min_val(), pw.max_val()
    if not (low.is_int() and high.is_int()) or low.to_python() != high.to_python():
        return None
    return int(low.to_python())


def extent_varies_with(model, state, stmt, outer, inner):
    """True when, for fixed values of the loops around ``outer``, the extent
    of ``stmt``'s loop ``inner`` changes with the value of its loop ``outer``
    over more than a couple of ``outer``'s values: a triangle (``j <= i``),
    not a tiled loop's clamped last tile."""
    st = state[stmt]
    k = st.find(outer, f"{stmt}: loop {outer}", stmt)
    n = st.find(inner, f"{stmt}: loop {inner}", stmt)
    # (the loops down to outer) -> the inner loop's values
    around = _to_loops(model, stmt, [lp.expr for lp in st.loops[:k + 1]]).reverse() \
        .apply_range(_to_loops(model, stmt, [st.loops[n].expr]))
    ext = around.dim_max(0).sub(around.dim_min(0)).coalesce()
    for where, aff in ext.get_pieces():
        if not aff.involves_dims(isl.dim_type.in_, k, 1):
            continue
        # the loops around outer fixed (as parameters): outer's span there
        fixed = where.move_dims(isl.dim_type.param, where.dim(isl.dim_type.param),
                                isl.dim_type.set, 0, k)
        span = fixed.dim_max(0).sub(fixed.dim_min(0))
        wide = span.max_val() if span.n_piece() else None
        if wide is None or not wide.is_int() or wide.to_python() > 1:
            return True
    return False

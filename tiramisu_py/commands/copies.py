"""``cache_at``'s copy: a computation that reads a source over its whole
domain, declared before the consumer's loop nest and computed at the
consumer's loop; the consumer's reads of the source are redirected to it.
Reads guarded by their own bounds (``select(inside, A[iy, ix], 0)``, zero
padding) get a padded copy: its domain reaches as far past each edge as the
reads do, it holds the guards' constant there, and the guards go."""
from __future__ import annotations

from ..lang.expr import Access, BinOp, Call, Cast, Select, UnOp, select, walk
from ..lang.program import Buffer, Computation
from ..lang.schedule import loop_name
from ..lang import affine
from ..lang.affine import NonAffine
from ..poly.footprint import footprint_widths
from ..poly.padding import padded_reads, same_access


def _root_item(f, stmt):
    """The top-level item (statement or nest) of ``f`` that contains ``stmt``."""
    def contains(item):
        if item is stmt:
            return True
        return any(contains(x) for x in getattr(item, "items", []))
    return next(x for x in f._root.items if contains(x))


def writers_in_root_item(f, stmt, source):
    item = _root_item(f, stmt)
    stmts = []

    def walk_items(x):
        if hasattr(x, "items"):
            for y in x.items:
                walk_items(y)
        else:
            stmts.append(x)
    walk_items(item)
    out = []
    for s in stmts:
        target = s.parent if s.is_update else s
        buf = target.buffer
        if (isinstance(source, Buffer) and buf is source) or target is source:
            out.append(s.name)
    return out


def access_named(stmt, text):
    """The read of ``stmt`` written ``text`` (``"A[j, k]"``, spaces free)."""
    def plain(t):
        return "".join(t.split())
    reads = [n for n in walk(stmt.value) if isinstance(n, Access)]
    for a in reads:
        if plain(repr(a)) == plain(text):
            return a
    raise ValueError(f"{stmt.name}.cache_at({text!r}): {stmt.name} does not read {text} "
                     f"(it reads {', '.join(sorted({repr(a) for a in reads})) or 'nothing'}; "
                     "write the access with the statement's own loops)")


def _redirect(e, source, copy_, only=None, guards=()):
    """``e`` with every read of ``source`` (``only``: every read written as
    that access) turned into a read of ``copy_``, and each select of
    ``guards`` (by identity) into its read of ``copy_`` (the padded copy)."""
    def go(x):
        return _redirect(x, source, copy_, only, guards)
    if any(e is g for g in guards):
        return Access(copy_, [go(i) for i in e.a.indices])
    if isinstance(e, Access):
        idx = [go(i) for i in e.indices]
        hit = e.target is source and (only is None or same_access(e, only))
        return Access(copy_ if hit else e.target, idx)
    if isinstance(e, BinOp):
        return BinOp(e.op, go(e.a), go(e.b))
    if isinstance(e, UnOp):
        return UnOp(e.op, go(e.a))
    if isinstance(e, Call):
        return Call(e.func, [go(a) for a in e.args])
    if isinstance(e, Select):
        return Select(*(go(x) for x in (e.cond, e.a, e.b)))
    if isinstance(e, Cast):
        return Cast(e.to, go(e.a))
    return e


def make_copy(stmt, source, loop, name, access=None):
    """The copy of ``cache_at``: a computation reading ``source`` over its
    whole domain, computed at ``stmt``'s ``loop``; ``stmt`` reads the copy
    (``access``: one of its reads, :func:`access_named`; only where it reads
    ``source`` as written there)."""
    f = stmt.function
    reads = [n.target for n in walk(stmt.value) if isinstance(n, Access)]
    if not any(t is source for t in reads):
        names = sorted({t.name for t in reads})
        raise ValueError(f"{stmt.name}: cannot copy {source.name!r} for it at "
                         f"{loop_name(loop)!r}: "
                         f"{stmt.name} does not read {source.name!r} (it reads "
                         f"{', '.join(names) or 'nothing'}; a source already copied is read "
                         "through its copy)")
    pad = None if isinstance(source, Computation) else padded_reads(f, stmt, source, access)
    if isinstance(source, Computation):
        vars_ = list(source.vars)
    elif pad:
        vars_ = [f.var(f"{name}_{k}", -lo, dim + hi if hi else dim)
                 for k, (dim, (lo, hi)) in enumerate(zip(source.shape, pad.pads))]
    else:
        vars_ = [f.var(f"{name}_{k}", 0, dim) for k, dim in enumerate(source.shape)]
    value = source[tuple(vars_)]
    if pad and any(lo or hi for lo, hi in pad.pads):
        inside = [(v >= 0) & (v < dim) for v, dim, (lo, hi) in zip(vars_, source.shape, pad.pads)
                  if lo or hi]
        cond = inside[0]
        for c in inside[1:]:
            cond = cond & c
        value = select(cond, value, pad.fill)
    # declare the copy right before the consumer's outermost loop nest
    saved_stack, saved_objs = f._nest_stack, getattr(f, "_nest_objs", [])
    f._nest_stack, f._nest_objs = [], []
    try:
        copy_ = f.computation(name, vars_, value, dtype=source.dtype)
    finally:
        f._nest_stack, f._nest_objs = saved_stack, saved_objs
    root = f._root.items
    root.remove(copy_)
    root.insert(root.index(_root_item(f, stmt)), copy_)
    stmt.value = _redirect(stmt.value, source, copy_, access, pad.guards if pad else ())
    copy_.compute_at(stmt, loop)
    return copy_


def store_in_tile(copy_, what):
    """``cache_at(tile=True)``: ``copy_`` stored in a buffer the size of
    what one iteration of its loop reads, reused by each: a dimension that
    footprint covers whole (a constant extent) indexed from its lower bound,
    one of width 1 at 0, the others modulo the width (one iteration's
    values, consecutive along each dimension, never share a slot)."""
    f = copy_.function
    widths = footprint_widths(f, copy_.name)
    if None in widths:
        raise ValueError(f"{what}: what one iteration reads is unbounded along "
                         f"{copy_.vars[widths.index(None)].name!r}; store_in a buffer instead")
    index = []
    for v, w in zip(copy_.vars, widths):
        try:
            lo, hi = affine.linear(v.lo, values=f.fixed), affine.linear(v.hi, values=f.fixed)
        except NonAffine:
            lo = hi = {v.name: 1}
        whole = affine.is_const(lo) and affine.is_const(hi) and hi.get(1, 0) - lo.get(1, 0) == w
        start = lo.get(1, 0) if whole else 0
        index.append(0 if w == 1 else (v + -start if start else v) if whole else v % w)
    copy_.store_in(f.buffer(f"{copy_.name}_tile", tuple(widths), copy_.dtype), index)

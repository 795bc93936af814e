"""``cache_at``'s copy: a computation that reads a source over its whole
domain, declared before the consumer's loop nest and computed at the
consumer's loop; the consumer's reads of the source are redirected to it."""
from __future__ import annotations

from ..lang.expr import Access, BinOp, Call, Cast, Select, UnOp, walk
from ..lang.program import Buffer, Computation
from ..lang.schedule import loop_name


def _root_item(f, stmt):
    """The top-level item (statement or nest) of ``f`` that contains ``stmt``."""
    def contains(item):
        if item is stmt:
            return True
        return any(contains(x) for x in getattr(item, "items", []))
    return next(x for x in f._root.items if contains(x))


def _writers_in_root_item(f, stmt, source):
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


def _redirect(e, source, copy_):
    """``e`` with every read of ``source`` turned into a read of ``copy_``."""
    if isinstance(e, Access):
        idx = [_redirect(i, source, copy_) for i in e.indices]
        return Access(copy_ if e.target is source else e.target, idx)
    if isinstance(e, BinOp):
        return BinOp(e.op, _redirect(e.a, source, copy_), _redirect(e.b, source, copy_))
    if isinstance(e, UnOp):
        return UnOp(e.op, _redirect(e.a, source, copy_))
    if isinstance(e, Call):
        return Call(e.func, [_redirect(a, source, copy_) for a in e.args])
    if isinstance(e, Select):
        return Select(*(_redirect(x, source, copy_) for x in (e.cond, e.a, e.b)))
    if isinstance(e, Cast):
        return Cast(e.to, _redirect(e.a, source, copy_))
    return e


def _make_copy(stmt, source, loop, name):
    """The copy of ``cache_at``: a computation reading ``source`` over its
    whole domain, computed at ``stmt``'s ``loop``; ``stmt`` reads the copy."""
    f = stmt.function
    reads = [n.target for n in walk(stmt.value) if isinstance(n, Access)]
    if not any(t is source for t in reads):
        names = sorted({t.name for t in reads})
        raise ValueError(f"{stmt.name}: cannot copy {source.name!r} for it at "
                         f"{loop_name(loop)!r}: "
                         f"{stmt.name} does not read {source.name!r} (it reads "
                         f"{', '.join(names) or 'nothing'}; a source already copied is read "
                         "through its copy)")
    if isinstance(source, Computation):
        vars_ = list(source.vars)
    else:
        vars_ = [f.var(f"{name}_{k}", 0, dim) for k, dim in enumerate(source.shape)]
    # declare the copy right before the consumer's outermost loop nest
    saved_stack, saved_objs = f._nest_stack, getattr(f, "_nest_objs", [])
    f._nest_stack, f._nest_objs = [], []
    try:
        copy_ = f.computation(name, vars_, source[tuple(vars_)], dtype=source.dtype)
    finally:
        f._nest_stack, f._nest_objs = saved_stack, saved_objs
    root = f._root.items
    root.remove(copy_)
    root.insert(root.index(_root_item(f, stmt)), copy_)
    stmt.value = _redirect(stmt.value, source, copy_)
    copy_.compute_at(stmt, loop)
    return copy_

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


def _same_access(a, b) -> bool:
    """``a`` and ``b`` read the same target with the same index expressions."""
    return a.target is b.target and list(map(repr, a.indices)) == list(map(repr, b.indices))


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


def _redirect(e, source, copy_, only=None):
    """``e`` with every read of ``source`` (``only``: every read written as
    that access) turned into a read of ``copy_``."""
    def go(x):
        return _redirect(x, source, copy_, only)
    if isinstance(e, Access):
        idx = [go(i) for i in e.indices]
        hit = e.target is source and (only is None or _same_access(e, only))
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
    stmt.value = _redirect(stmt.value, source, copy_, access)
    copy_.compute_at(stmt, loop)
    return copy_

"""Vector reductions kept in a vector across the loops around them (both
backends, before emission).

``vectorize(j, 8, allow_reassociation=True)`` on ``m[i] = max(m[i], x[i, j])``
strip-mines ``j`` into ``j0`` (serial) and ``j1`` (the vector loop, with the
reduction): each ``j0`` iteration would end in a horizontal reduction of 8
lanes into ``m[i]``.  The update may be reordered (that is what allowed the
vector loop), so when a serial loop ``L`` around the vector loop(s) accesses
the element ``m[idx]`` only through such updates (same element, same op, an
index fixed during ``L``) and the vector loops have at most ``W`` lanes, the
partial results of the loops with exactly ``W`` lanes (full tiles; a partial
tile keeps updating ``m[idx]``, a reordering the update allows) live in a
``W``-slot tile across ``L``, indexed by constants, so in a register::

    m_vacc[l] = -inf                      (vector loop, l < W)
    for j0: for j1 (vector): m_vacc[j1] = max(m_vacc[j1], x[i][8*j0 + j1])
    for l (vector reduction): m[i] = max(m[i], m_vacc[l])     (one horizontal step)

The vector loops inside then carry no reduction (each lane its own slot) and
the horizontal step runs once per run of ``L``.  Float add/mul/max/min and
integer reductions alike; max/min keep NaN (the identity is -inf/+inf).
"""
from __future__ import annotations

from . import ir, loops
from .ir import expr_key
from .regblock import rewrite_serial_loops
from .simplify import clamped_bound


def hoist_vector_reductions(fn: ir.LoweredFunction) -> ir.LoweredFunction:
    names = {a.name for a in fn.arrays} | set(fn.constants) | {s.name for s in fn.scalars}
    for s in ir.walk_stmts(fn.body):
        if isinstance(s, ir.For):
            names.add(s.var)
        elif isinstance(s, ir.Let):
            names.add(s.name)
        elif isinstance(s, (ir.Allocate, ir.Store)):
            names.add(s.array)
    return rewrite_serial_loops(fn, lambda s: _hoist(s, names))


def _pattern(v: ir.For):
    """(array, op, store) if ``v``'s body is one ``A[idx] = A[idx] op e`` reduction
    of its attrs with ``idx`` free of ``v``'s iterator."""
    body = loops.sole_stmt(v.body)
    if not isinstance(body, ir.Store) or not isinstance(body.value, ir.Binary):
        return None
    val, ops = body.value, dict(v.attrs.get("reduction") or ())
    if ops.get(body.array) != val.op or val.op not in ir.COMBINE or val.dtype == "bool":
        return None
    if not isinstance(val.a, ir.Load) or ir.expr_key(val.a) != ir.expr_key(
            ir.Load(body.array, body.index, val.dtype)):
        return None
    if any(isinstance(x, ir.Load) and x.array == body.array for x in ir.walk_exprs(val.b)):
        return None
    if any(v.var in ir.free_vars(i) for i in body.index):
        return None
    return body.array, val.op, body


def _lanes(v: ir.For):
    """The most iterations of ``v`` (constant ``lo`` 0, unit step), or None."""
    if not isinstance(v.lo, ir.Const) or int(v.lo.value) != 0 or int(v.step) != 1:
        return None
    if isinstance(v.hi, ir.Const):
        return int(v.hi.value)
    c = clamped_bound(v.hi)
    return None if c is None else c[0] + c[2]


def _hoist(loop: ir.For, names: set):
    vecs = [s for s in ir.walk_stmts(loop.body) if isinstance(s, ir.For) and s.kind == "vector"
            and s.attrs.get("reduction")]
    pats = [(v, _pattern(v)) for v in vecs]
    if not pats or any(p is None for _, p in pats):
        return None
    arrays = {p[0] for _, p in pats}
    if len(arrays) != 1:
        return None
    (array,) = arrays
    ops = {p[1] for _, p in pats}
    keys = {tuple(expr_key(i) for i in p[2].index) for _, p in pats}
    if len(ops) != 1 or len(keys) != 1:
        return None
    (op,), store = ops, pats[0][1][2]
    w = max(int(v.attrs.get("vector_width") or 0) for v, _ in pats)
    if w < 2 or any(_lanes(v) is None or _lanes(v) > w for v, _ in pats):
        return None
    bound = set()
    own = {id(p[2]) for _, p in pats} | {id(p[2].value.a) for _, p in pats}
    for s in ir.walk_stmts(loop):
        if isinstance(s, ir.For):
            bound.add(s.var)
        elif isinstance(s, ir.Let):
            bound.add(s.name)
        elif isinstance(s, ir.Allocate):
            return None
        if isinstance(s, ir.Store) and s.array == array and id(s) not in own:
            return None
        for e in ir.stmt_exprs(s):
            if any(isinstance(x, ir.Load) and x.array == array and id(x) not in own
                   for x in ir.walk_exprs(e)):
                return None
    if any(isinstance(x, ir.Load) or isinstance(x, ir.Var) and x.name in bound
           for i in store.index for x in ir.walk_exprs(i)):
        return None
    dt = store.value.dtype
    tile, lane = ir.fresh_name(f"{array}_vacc", names), ir.fresh_name(f"{array}_lane", names)
    repl = {}
    for v, (_, _, st) in pats:
        if not isinstance(v.hi, ir.Const):     # a partial tile keeps reducing into the array
            continue                           # (the tile stays at constant offsets: a register)
        slot = (ir.Var(v.var),)
        upd = ir.Store(tile, slot, ir.Binary(op, ir.Load(tile, slot, dt), st.value.b, dt))
        attrs = {k: x for k, x in v.attrs.items() if k != "reduction"}
        repl[id(v)] = ir.For(v.var, v.lo, v.hi, upd, kind="vector", step=v.step, attrs=attrs)
    lanes = ir.Const(w, ir.INDEX)
    zero = ir.Const(0, ir.INDEX)
    init = ir.For(lane, zero, lanes, ir.Store(tile, (ir.Var(lane),), ir.Const(ir.identity(op, dt), dt)),
                  kind="vector", attrs={"vector_width": w})
    comb_op = ir.COMBINE[op]
    combined = ir.Binary(comb_op, ir.Load(array, store.index, dt), ir.Load(tile, (ir.Var(lane),), dt), dt)
    comb = ir.For(lane, zero, lanes, ir.Store(array, store.index, combined), kind="vector",
                  attrs={"vector_width": w, "reduction": [(array, comb_op)]})
    if not repl:
        return None
    new = _replace(loop, repl)
    return ir.Allocate(tile, dt, (lanes,), ir.Block([init, new, comb]))


def _replace(s, repl):
    if id(s) in repl:
        return repl[id(s)]
    return ir.rebuild(s, lambda x: _replace(x, repl))

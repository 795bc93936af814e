"""Local accumulation: a loop marked ``attrs["accumulate"] = [(array, op), ...]``
accumulates the updates ``array[idx] = array[idx] op e`` of its body in a small
local tile that starts at ``op``'s identity, and combines the tile into
``array`` once, after the loop::

    for kk: for jv: C[i][j + jv] = C[i][j + jv] + a * b[kk][jv]
->
    C_local[jv] = 0                                   (for jv)
    for kk: for jv: C_local[jv] = C_local[jv] + a * b[kk][jv]
    C[i][j + jv] = C[i][j + jv] + C_local[jv]         (for jv)

The tile is indexed by the loops between the marked loop and the update, so
each of their iterations has its own slot; backends keep a small tile in
registers.  This reassociates the accumulation (the caller, the scheduling
layer, checks that the program allowed it and that one slot always holds one
element).

A loop inside the marked one may have a bound that varies with the outer
loops (a clamped partial tile, ``iu < min(5, N - 1 - i) + 1``) as long as its
extent has a constant bound: the tile takes that size and the init and combine
loops run over the same bounds.  A part of the body the transformation cannot
take as it is (an If or a temporary around the update, an unbounded inner
loop, other reads of the array) is left unchanged: that part then accumulates
into the array directly, which is the same result.

This module imports nothing from ``tiramisu_py``."""
from __future__ import annotations

from . import ir
from .simplify import clamped_bound


def accumulate_locally(fn: ir.LoweredFunction) -> ir.LoweredFunction:
    """``fn`` with every loop marked ``accumulate`` rewritten (see the module)."""
    taken = {a.name for a in fn.arrays} | {s.array for s in ir.walk_stmts(fn.body)
                                           if isinstance(s, ir.Allocate)}

    def visit(s):
        s = ir.rebuild(s, visit)
        if isinstance(s, ir.For) and s.attrs.get("accumulate"):
            s = _rewrite(s, dict(s.attrs["accumulate"]), taken)
        return s

    fn.body = visit(fn.body)
    return fn


def _loads(e):
    return [x for x in ir.walk_exprs(e) if isinstance(x, ir.Load)]


def _extent(p: ir.For):
    """The largest number of iterations of ``p`` (constant ``lo``, unit step),
    or None."""
    if not isinstance(p.lo, ir.Const) or p.step != 1:
        return None
    if isinstance(p.hi, ir.Const):
        hi = int(p.hi.value)
    else:
        clamp = clamped_bound(p.hi)         # min(C, ...) + plus
        if clamp is None:
            return None
        hi = clamp[0] + clamp[2]
    return max(0, hi - int(p.lo.value))


def _sites(loop: ir.For, ops: dict):
    """[(store, path)] of the updates of ``ops``'s arrays in ``loop``'s body, with
    the loops and lets between ``loop`` and each; None when a store sits where
    it cannot be taken out (under an If or an Allocate)."""
    out = []

    def find(s, path):
        if isinstance(s, ir.Store):
            if s.array in ops:
                out.append((s, path))
            return True
        if isinstance(s, (ir.For, ir.Let)):
            return find(s.body, path + [s])
        if isinstance(s, ir.Block):
            return all(find(x, path) for x in s.stmts)
        inner = [x for x in ir.walk_stmts(s) if isinstance(x, ir.Store) and x.array in ops]
        return not inner

    return out if find(loop.body, []) else None


def _takeable(loop: ir.For, store: ir.Store, path, op: str, written: set):
    """The update's right-hand side when ``store`` is ``a[idx] = a[idx] op rhs``
    with ``idx`` and every enclosing loop's bounds fixed during one execution of
    ``loop``; else None."""
    v = store.value
    if op not in ir.COMBINE or not isinstance(v, ir.Binary) or v.op != op \
            or not isinstance(v.a, ir.Load) or v.a.array != store.array:
        return None
    if ir.expr_key(v.a) != ir.expr_key(ir.Load(store.array, store.index, v.dtype)):
        return None
    if v.dtype != v.a.dtype:
        return None
    varying = {loop.var}
    for p in path:
        if isinstance(p, ir.For):
            if _extent(p) is None or ir.free_vars(p.hi) & varying \
                    or any(x.array in written for x in _loads(p.hi)):
                return None
        elif ir.free_vars(p.value) & varying or any(x.array in written for x in _loads(p.value)):
            return None
    if any(ir.free_vars(i) & varying for i in store.index):
        return None
    if any(x.array in written for i in store.index for x in _loads(i)):
        return None
    return v.b


def _wrap(path, body):
    for p in reversed(path):
        if isinstance(p, ir.For):
            attrs = {k: v for k, v in p.attrs.items() if k in ("vector_width", "unroll")}
            body = ir.For(p.var, p.lo, p.hi, body, kind=p.kind, step=p.step, attrs=attrs)
        else:
            body = ir.Let(p.name, p.value, body)
    return body


def _replace(s, new):
    if id(s) in new:
        return new[id(s)]
    return ir.rebuild(s, lambda x: _replace(x, new))


def _rewrite(loop: ir.For, ops: dict, taken: set) -> ir.Stmt:
    sites = _sites(loop, ops)
    if not sites:
        return loop
    written = {s.array for s in ir.walk_stmts(loop.body) if isinstance(s, ir.Store)}
    self_loads = set()
    plans = []
    for store, path in sites:
        rhs = _takeable(loop, store, path, ops[store.array], written)
        if rhs is None:
            return loop
        self_loads.add(id(store.value.a))
        plans.append((store, path, rhs))
    # the arrays may be read only by the updates themselves
    for s in ir.walk_stmts(loop.body):
        for e in ir.stmt_exprs(s):
            if any(x.array in ops and id(x) not in self_loads for x in _loads(e)):
                return loop

    new, inits, combines, tiles = {}, [], [], []
    for n, (store, path, rhs) in enumerate(plans):
        dtype, op = store.value.dtype, ops[store.array]
        name = f"{store.array}_local"
        k = 1
        while name in taken:
            name, k = f"{store.array}_local{k}", k + 1
        taken.add(name)
        fors = [p for p in path if isinstance(p, ir.For)]
        shape = tuple(ir.Const(max(1, _extent(p)), ir.INDEX) for p in fors) \
            or (ir.Const(1, ir.INDEX),)
        tidx = tuple(ir.Var(p.var) if p.lo.value == 0 else
                     ir.Binary("sub", ir.Var(p.var), p.lo, ir.INDEX) for p in fors) \
            or (ir.Const(0, ir.INDEX),)
        tile = ir.Load(name, tidx, dtype)
        new[id(store)] = ir.Store(name, tidx, ir.Binary(store.value.op, tile, rhs, dtype))
        inits.append(_wrap(path, ir.Store(name, tidx, ir.Const(ir.identity(op, dtype), dtype))))
        combined = ir.Binary(ir.COMBINE[op], ir.Load(store.array, store.index, dtype), tile, dtype)
        combines.append(_wrap(path, ir.Store(store.array, store.index, combined)))
        tiles.append((name, dtype, shape))
    attrs = {k: v for k, v in loop.attrs.items() if k != "accumulate"}
    body = _replace(loop.body, new)
    out = ir.Block(inits + [ir.For(loop.var, loop.lo, loop.hi, body, kind=loop.kind,
                                   step=loop.step, attrs=attrs)] + combines)
    for name, dtype, shape in reversed(tiles):
        out = ir.Allocate(name, dtype, shape, out)
    return out

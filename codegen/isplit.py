"""Index-set splitting around the one iteration that writes a loop-invariant
load (target-neutral; the LLVM backend uses it, :meth:`codegen.llvm.stmt.Lowering.run`).

An innermost serial loop that reads ``X[p]`` at an index ``p`` invariant in
the loop and stores to ``X`` where one dimension is ``i + g`` (or ``-i + g``)
with ``g`` invariant can hit ``X[p]`` in one iteration only, ``i0`` where that
dimension equals ``p``'s (floyd-warshall with ``i`` innermost:
``path[i][j] = min(path[i][j], path[i][k] + path[k][j])`` writes
``path[k][j]`` at ``i == k`` only).  LLVM cannot prove the store misses the
load elsewhere, so it reloads ``X[p]`` each iteration and does not vectorise;
gcc versions the loop at run time.  The loop becomes three parts, in the
original order::

    if (lo < min(hi, i0)) { v = X[p]; for (i = lo; i < min(hi, i0); i++) body[X[p] := v] }
    if (i0 < hi) {
      if (lo <= i0) { i = i0; body }
      if (max(lo, i0 + 1) < hi) { v = X[p]; for (i = max(lo, i0 + 1); i < hi; i++) body[X[p] := v] }
    }

Exact: with ``d(i) = i + g`` the store's index equals ``p``'s in that
dimension iff ``i == p_d - g`` (in wrapping int64 arithmetic too, the
coefficient being 1), so no store of the other parts writes ``X[p]``;
``i0 + 1`` is computed only when ``i0 < hi``.  ``X[p]`` is read before a part
only when the part runs and the body reads it in every iteration (reached
through blocks and lets only, not under a ``select``), so no load is added
that the program does not do.  Conditions: the loop is serial, step 1,
without attributes; its body has no loop, allocation or ``if``; ``p``, the
dimension's indices and the bounds read no array, no cast, no name bound in
the body; every store to ``X`` in the body gives the same ``i0``.
"""
from __future__ import annotations

from . import ir
from .ir import expr_key
from .loops import affine

__all__ = ["split_invariant_loads"]
SHORT = 16          # loops of at most this many iterations (bounds alone tell) are left alone


def split_invariant_loads(s: ir.Stmt) -> ir.Stmt:
    """``s`` with every innermost serial loop of that shape split (see module doc);
    vector loops and what is inside them are left alone."""
    names = {e.name for x in ir.walk_stmts(s) for r in ir.stmt_exprs(x)
             for e in ir.walk_exprs(r) if isinstance(e, ir.Var)}
    names |= {x.var for x in ir.walk_stmts(s) if isinstance(x, ir.For)}
    names |= {x.name for x in ir.walk_stmts(s) if isinstance(x, ir.Let)}
    names |= {x.array for x in ir.walk_stmts(s) if isinstance(x, (ir.Store, ir.Allocate))}
    return _split(s, names)


def _split(s, names):
    if isinstance(s, ir.For) and s.kind not in ("serial", "parallel"):
        return s
    if isinstance(s, ir.For):
        out = _split_loop(s, names)
        if out is not None:
            return out
    return ir.rebuild(s, lambda c: _split(c, names))


def _plain(e, bound) -> bool:
    """``e`` reads no array, has no cast and no name in ``bound``."""
    return all(not isinstance(x, (ir.Load, ir.Cast)) and not (isinstance(x, ir.Var) and x.name in bound)
               for x in ir.walk_exprs(e))


def _unconditional_loads(e):
    if isinstance(e, ir.Load):
        yield e
    if isinstance(e, ir.Select):
        yield from _unconditional_loads(e.cond)
        return
    for c in ir.expr_children(e):
        yield from _unconditional_loads(c)


def _subst_var(e, name, value):
    if isinstance(e, ir.Var) and e.name == name:
        return value
    if isinstance(e, ir.Binary):
        a, b = _subst_var(e.a, name, value), _subst_var(e.b, name, value)
        zero = [isinstance(x, ir.Const) and x.value == 0 for x in (a, b)]
        if e.op == "add" and any(zero):
            return b if zero[0] else a
        if e.op in ("add", "sub") and zero[1]:
            return a
        return ir.Binary(e.op, a, b, e.dtype)
    if isinstance(e, ir.Unary):
        return ir.Unary(e.op, _subst_var(e.a, name, value), e.dtype)
    return e


def _split_point(store, load, var, bound):
    """``i0`` where ``store`` may write ``load``'s element, or None if it never
    pins one iteration."""
    for sd, ld in zip(store.index, load.index):
        if sd.dtype != ir.INDEX or not _plain(sd, bound - {var}) or not _plain(ld, bound):
            continue
        a = affine(sd, lambda n: n not in bound or n == var)
        if a is None or a[0].get(var) not in (1, -1):
            continue
        g = _subst_var(sd, var, ir.const(0))
        if isinstance(g, ir.Const) and g.value == 0:
            return ld if a[0][var] == 1 else ir.Unary("neg", ld, ld.dtype)
        return (ir.binary("sub", ld, g) if a[0][var] == 1 else ir.binary("sub", g, ld))
    return None


def _replace_loads(e, keys, repl):
    if isinstance(e, ir.Load) and (e.array, tuple(expr_key(i) for i in e.index)) in keys:
        return repl[(e.array, tuple(expr_key(i) for i in e.index))]
    kids = ir.expr_children(e)
    if not kids:
        return e
    return ir.with_children(e, (_replace_loads(c, keys, repl) for c in kids))


def _replace_stmt(s, keys, repl):
    if isinstance(s, ir.Store):
        return ir.store_like(s, s.array, tuple(_replace_loads(i, keys, repl) for i in s.index),
                             _replace_loads(s.value, keys, repl))
    if isinstance(s, ir.Let):
        return ir.Let(s.name, _replace_loads(s.value, keys, repl), _replace_stmt(s.body, keys, repl))
    return ir.rebuild(s, lambda c: _replace_stmt(c, keys, repl))


def _at_most(e):
    """A constant upper bound of the int expression ``e``, or None."""
    if isinstance(e, ir.Const) and ir.is_int(e.dtype):
        return int(e.value)
    if isinstance(e, ir.Binary) and e.op == "min":
        b = [x for x in (_at_most(e.a), _at_most(e.b)) if x is not None]
        return min(b) if b else None
    if isinstance(e, ir.Binary) and e.op in ("add", "max"):
        a, b = _at_most(e.a), _at_most(e.b)
        return None if a is None or b is None else (a + b if e.op == "add" else max(a, b))
    return None


def _split_loop(s: ir.For, names):
    if s.kind != "serial" or s.step != 1 or s.attrs:
        return None
    hi = _at_most(s.hi)
    if hi is not None and isinstance(s.lo, ir.Const) and hi - int(s.lo.value) <= SHORT:
        return None                  # LLVM unrolls it whole: the parts would cost more
    stmts, bound, loads = list(ir.walk_stmts(s.body)), {s.var}, []
    if any(isinstance(x, (ir.For, ir.Allocate, ir.If, ir.Barrier)) for x in stmts):
        return None
    bound |= {x.name for x in stmts if isinstance(x, ir.Let)}
    if not (_plain(s.lo, bound) and _plain(s.hi, bound)):
        return None
    for x in stmts:
        for e in ir.stmt_exprs(x):
            loads += list(_unconditional_loads(e))
    stores = [x for x in stmts if isinstance(x, ir.Store)]
    i0, keys = None, {}
    for ld in loads:
        if not all(_plain(i, bound) for i in ld.index):
            continue
        mine = [st for st in stores if st.array == ld.array]
        if not mine:
            continue                 # nothing in the loop writes it: LLVM hoists it itself
        points = [_split_point(st, ld, s.var, bound) for st in mine]
        if any(p is None for p in points) or len({expr_key(p) for p in points}) != 1:
            continue
        if i0 is None:
            i0 = points[0]
        if expr_key(points[0]) == expr_key(i0):
            keys.setdefault((ld.array, tuple(expr_key(i) for i in ld.index)), ld)
    if i0 is None:
        return None
    repl = {}
    for k, ld in keys.items():
        repl[k] = ir.Var(ir.fresh_name(f"{ld.array}_held", names), ld.dtype)
    body = _replace_stmt(s.body, keys, repl)

    def part(lo, hi):
        loop = ir.For(s.var, lo, hi, body, kind=s.kind, step=1)
        for k, ld in keys.items():
            loop = ir.Let(repl[k].name, ld, loop)
        return ir.If(ir.binary("lt", lo, hi), loop)
    upper_lo = ir.binary("max", s.lo, ir.binary("add", i0, ir.const(1)))
    return ir.Block([
        part(s.lo, ir.binary("min", s.hi, i0)),
        ir.If(ir.binary("lt", i0, s.hi), ir.Block([
            ir.If(ir.binary("le", s.lo, i0), ir.Let(s.var, i0, s.body)),
            part(upper_lo, s.hi)])),
    ])

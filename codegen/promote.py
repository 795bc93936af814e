"""Scalar promotion for serial loops (target-neutral analysis; the LLVM backend
uses it, :meth:`codegen.llvm.stmt.Lowering.loop`).

An element ``X[p]`` that a serial loop updates at an index ``p`` invariant in
the loop (``A[i][j] -= A[i][k] * A[j][k]`` over ``k``) can live in a register
over the loop: loaded once before it, stored once after it (when it runs).
gcc's loop invariant motion does this even when the loop also reads other
elements of ``X`` if it can prove them different; LLVM's only when no other
access to ``X`` may alias, so it reloads the element through the store each
iteration of an outer loop (cholesky with ``k`` split: 0.72x gcc).  Here the
proof is made on the loop IR: every other access to ``X`` in the loop differs
from ``p`` in some dimension by a nonzero constant, or by an affine difference
whose sign the bounds of the loops inside fix (``j - (4*k0 + k1)`` with
``k1 < min(3, j - 4*k0 - 1) + 1`` is >= 1).

Conditions (else nothing is promoted): the loop and every loop in it are
serial (or unrolled) without reduction attributes, nothing is allocated in it;
every store to ``X[p]`` is reached from the loop body through blocks, lets and
loops only (no ``if``), ``p`` reads no array and no name bound inside, and no
loop bound in the loop reads ``X``.  A
store only inside an inner loop (that may not run) makes the write-back after
the loop a write the program might not do: allowed only where no other thread
runs (``threads=False``).  Arithmetic on indices is taken as exact (in-bounds
accesses), as in :mod:`codegen.vectorize`.
"""
from __future__ import annotations

from . import ir
from .ir import expr_key
from .loops import affine

__all__ = ["promotable"]
_SERIAL = ("serial", "unrolled")
_MAX_STEPS = 256                     # bound on the proof search (alternative bounds)


def promotable(loop: ir.For, threads: bool, enclosing=()) -> list:
    """[(array, index)] of the elements ``loop`` may hold in registers;
    ``enclosing``: the loops around it, outermost first (their bounds count too)."""
    bound, twice, order, bounds, accesses, stores = set(), set(), [], {}, {}, {}
    in_bounds = set()
    for s in enclosing:
        order.append(s.var)
        twice.update(n for n in (s.var,) if n in bounds)
        bounds[s.var] = _bounds(s)
    ok = [True]

    def visit(s, direct, top):
        if isinstance(s, ir.Block):
            for x in s.stmts:
                visit(x, direct, top)
            return
        for e in ir.stmt_exprs(s):
            for x in ir.walk_exprs(e):
                if isinstance(x, ir.Load):
                    accesses.setdefault(x.array, {})[tuple(expr_key(i) for i in x.index)] = x.index
        if isinstance(s, ir.Let):
            twice.add(s.name)
            bound.add(s.name)
            visit(s.body, direct, top)
        elif isinstance(s, ir.For):
            for x in list(ir.walk_exprs(s.lo)) + list(ir.walk_exprs(s.hi)):
                if isinstance(x, ir.Load):      # a bound re-read each iteration
                    in_bounds.add(x.array)
            if s.kind not in _SERIAL or (s.attrs or {}).get("reduction"):
                ok[0] = False
            if s.var in bound or s.var in bounds:     # two loops of one name: no bounds
                twice.add(s.var)
            bound.add(s.var)
            order.append(s.var)
            bounds[s.var] = _bounds(s)
            visit(s.body, direct, False)
        elif isinstance(s, ir.If):
            visit(s.then, False, False)
            if s.else_ is not None:
                visit(s.else_, False, False)
        elif isinstance(s, ir.Store):
            key = tuple(expr_key(i) for i in s.index)
            accesses.setdefault(s.array, {})[key] = s.index
            st = stores.setdefault(s.array, {}).setdefault(key, [True, False])
            st[0] = st[0] and direct
            st[1] = st[1] or top
        else:                                   # Allocate and anything else
            ok[0] = False

    visit(loop, True, False)
    if not ok[0]:
        return []
    bounds = {v: (([], []) if v in twice else bounds[v]) for v in order}
    out = []
    for name, st in stores.items():
        if name in in_bounds:
            continue
        cands = []
        for key, (direct, top) in st.items():
            index = accesses[name][key]
            if not direct or not (top or not threads):
                continue
            if any(isinstance(x, ir.Load) or (isinstance(x, ir.Var) and x.name in bound)
                   for i in index for x in ir.walk_exprs(i)):
                continue
            cands.append((key, index))
        keep = [(k, ix) for k, ix in cands
                if all(k2 == k or _differ(ix, ix2, order, bounds)
                       for k2, ix2 in accesses[name].items())]
        out += [(name, ix) for _, ix in keep]
    return out


def _bounds(s: ir.For) -> tuple:
    """(lower bounds, inclusive upper bounds) of ``s.var``, affine alternatives."""
    return (_alternatives(s.lo, "lower"),
            [(v, c - 1) for v, c in _alternatives(s.hi, "upper")])


def _alternatives(e, side: str) -> list:
    """Affine forms ``(coefficients, constant)`` each bounding ``e`` from ``side``
    ("upper": each >= e; "lower": each <= e): ``min``/``max`` split, constants
    and affine terms added on."""
    f = affine(e, lambda n: True)
    if f is not None:
        return [f]
    if isinstance(e, ir.Binary):
        if e.op == ("min" if side == "upper" else "max"):
            return _alternatives(e.a, side) + _alternatives(e.b, side)
        if e.op in ("add", "sub"):
            fb = affine(e.b, lambda n: True)
            if fb is not None:
                s = 1 if e.op == "add" else -1
                return [_lin(fa, fb, s) for fa in _alternatives(e.a, side)]
            fa = affine(e.a, lambda n: True)
            if fa is not None and e.op == "add":
                return [_lin(fa, fb2, 1) for fb2 in _alternatives(e.b, side)]
    return []


def _lin(a, b, s):
    v = dict(a[0])
    for n, c in b[0].items():
        v[n] = v.get(n, 0) + s * c
    return {n: c for n, c in v.items() if c}, a[1] + s * b[1]


def _differ(ix1, ix2, order, bounds) -> bool:
    """Whether two index tuples name different elements for every value of the
    loop iterators in ``bounds``: some dimension's difference is provably
    nonzero (a nonzero constant, or of one sign under the bounds)."""
    if len(ix1) != len(ix2):
        return False
    for x, y in zip(ix1, ix2):
        fx, fy = affine(x, lambda n: True), affine(y, lambda n: True)
        if fx is None or fy is None:
            continue
        d = _lin(fx, fy, -1)
        steps = [0]
        if _sign(d, 1, order, bounds, steps) or _sign(_lin(({}, 0), d, -1), 1, order, bounds, steps):
            return True
    return False


def _sign(d, want, order, bounds, steps) -> bool:
    """Proves ``d >= want`` (d an affine form) by replacing iterators, innermost
    first, with their lower bounds (positive coefficient) or upper bounds."""
    steps[0] += 1
    if steps[0] > _MAX_STEPS:
        return False
    for v in reversed(order):
        c = d[0].get(v)
        if not c:
            continue
        lows, highs = bounds[v]
        rest = ({n: k for n, k in d[0].items() if n != v}, d[1])
        for b in (lows if c > 0 else highs):
            if _sign(_lin(rest, ({n: k * c for n, k in b[0].items()}, b[1] * c), 1),
                     want, order, bounds, steps):
                return True
        return False
    return not d[0] and d[1] >= want

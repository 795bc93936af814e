"""Index simplification on the loop IR, using the ranges of the loop iterators.

isl writes the index of a packed or tiled buffer as it was given, e.g.
``Bp[floordiv(floormod(32 * jr + jv, 1024), 32)]``.  Inside the loops that
access it, ``0 <= jv < 32`` and ``0 <= jr < 32``, so that index is just ``jr``.
This pass proves such facts from the loop bounds (interval arithmetic over
affine integer expressions) and rewrites:

* ``floormod(e, m)`` to ``r`` when ``e = m * q + r`` with ``0 <= r < m``;
* ``floordiv(e, m)`` to ``q`` under the same condition;
* sums of constants (``127 + 1``) to one constant.

Everything else is left as it is.  The rewrite is exact: it only fires when the
range of ``r`` is proven, so it never changes a result.
"""
from __future__ import annotations

from . import ir
from .loops import affine

_INT = ("int32", "int64")


# --------------------------------------------------------- affine forms
class _Affine:
    """``sum(coef * term) + const``; terms are IR Vars (keyed by name) or opaque
    expressions (keyed by identity), kept in first-appearance order."""

    def __init__(self, terms=None, const=0):
        self.terms = terms or {}          # key -> [coef, expr]
        self.const = const

    def scaled(self, c):
        return _Affine({k: [v[0] * c, v[1]] for k, v in self.terms.items()}, self.const * c)

    def plus(self, other):
        terms = {k: list(v) for k, v in self.terms.items()}
        for k, (c, e) in other.terms.items():
            if k in terms:
                terms[k][0] += c
            else:
                terms[k] = [c, e]
        return _Affine({k: v for k, v in terms.items() if v[0] != 0}, self.const + other.const)


def _affine(e):
    if isinstance(e, ir.Const) and e.dtype in _INT:
        return _Affine(const=int(e.value))
    if isinstance(e, ir.Binary) and e.dtype in _INT:
        if e.op in ("add", "sub"):
            b = _affine(e.b)
            return _affine(e.a).plus(b if e.op == "add" else b.scaled(-1))
        if e.op == "mul":
            if isinstance(e.a, ir.Const):
                return _affine(e.b).scaled(int(e.a.value))
            if isinstance(e.b, ir.Const):
                return _affine(e.a).scaled(int(e.b.value))
    if isinstance(e, ir.Unary) and e.op == "neg" and e.dtype in _INT:
        return _affine(e.a).scaled(-1)
    key = ("v", e.name) if isinstance(e, ir.Var) else ("x", id(e))
    return _Affine({key: [1, e]})


def _build(a: _Affine, dtype):
    """The affine form as IR: ``c1 * x + c2 * y - c3``."""
    out = None
    for c, e in a.terms.values():
        mag = abs(c)
        t = e if mag == 1 else ir.Binary("mul", ir.Const(mag, dtype), e, dtype)
        if out is None:
            out = t if c > 0 else ir.Unary("neg", t, dtype)
        else:
            out = ir.Binary("add" if c > 0 else "sub", out, t, dtype)
    if out is None:
        return ir.Const(a.const, dtype)
    if a.const:
        out = ir.Binary("add" if a.const > 0 else "sub", out, ir.Const(abs(a.const), dtype), dtype)
    return out


# --------------------------------------------------------- ranges
def _range(a: _Affine, ranges):
    """Inclusive (lo, hi) of an affine form, or None when a term is unbounded."""
    lo = hi = a.const
    for key, (c, e) in a.terms.items():
        r = ranges.get(key[1] if key[0] == "v" else key) if key[0] != "x" else None
        if r is None:
            return None
        lo += min(c * r[0], c * r[1])
        hi += max(c * r[0], c * r[1])
    return lo, hi


def interval(e, ranges):
    """Inclusive (lo, hi) of an integer IR expression over ``ranges`` (var ->
    (lo, hi)); either may be None (unbounded).  Knows + - *, unary minus,
    min, max, and div / floordiv by a positive constant (both monotone)."""
    if isinstance(e, ir.Const) and not isinstance(e.value, bool):
        return int(e.value), int(e.value)
    if isinstance(e, ir.Var):
        return ranges.get(e.name, (None, None))
    if isinstance(e, ir.Unary) and e.op == "neg":
        lo, hi = interval(e.a, ranges)
        return (None if hi is None else -hi), (None if lo is None else -lo)
    if not isinstance(e, ir.Binary):
        return None, None
    (alo, ahi), (blo, bhi) = interval(e.a, ranges), interval(e.b, ranges)
    if e.op in ("add", "sub"):
        if e.op == "sub":
            blo, bhi = (None if bhi is None else -bhi), (None if blo is None else -blo)
        return (None if None in (alo, blo) else alo + blo), (None if None in (ahi, bhi) else ahi + bhi)
    if e.op == "mul" and None not in (alo, ahi, blo, bhi):
        products = [alo * blo, alo * bhi, ahi * blo, ahi * bhi]
        return min(products), max(products)
    if e.op == "min":
        return (None if None in (alo, blo) else min(alo, blo)), \
               min((x for x in (ahi, bhi) if x is not None), default=None)
    if e.op == "max":
        return max((x for x in (alo, blo) if x is not None), default=None), \
               (None if None in (ahi, bhi) else max(ahi, bhi))
    if e.op in ("div", "floordiv") and blo is not None and blo == bhi and blo > 0:
        def q(x):                   # div truncates toward zero, floordiv floors
            if x is None:
                return None
            return -(-x // blo) if e.op == "div" and x < 0 else x // blo
        return q(alo), q(ahi)
    return None, None



def _split_mod(a: _Affine, m):
    """``a = m * q + r`` with the coefficients of ``r`` in ``[0, m)``."""
    q = _Affine({k: [c // m, e] for k, (c, e) in a.terms.items() if c // m}, a.const // m)
    r = _Affine({k: [c % m, e] for k, (c, e) in a.terms.items() if c % m}, a.const % m)
    return q, r


# --------------------------------------------------------- the pass
def _expand(a: _Affine, offsets):
    """``a`` with each loop iterator ``v`` that starts at an affine ``lo`` written
    ``lo + (v - lo)``; ``(v - lo)`` becomes a term of its own."""
    out = _Affine(const=a.const)
    for k, (c, e) in a.terms.items():
        off = offsets.get(e.name) if isinstance(e, ir.Var) else None
        if off is None:
            out = out.plus(_Affine({k: [c, e]}))
        else:
            lo, delta = off
            out = out.plus(lo.scaled(c)).plus(_Affine({("d", e.name): [c, delta]}))
    return out


class _Simplifier:
    def __init__(self):
        self.ranges = {}      # iterator -> inclusive (lo, hi)
        self.offsets = {}     # iterator -> (affine lo, Var of its offset from lo)

    def divided(self, e: ir.Binary):
        """``floordiv(x, m)`` / ``floormod(x, m)`` (``e``) rewritten, or None.
        With ``x = m * q + r`` and ``0 <= r < m`` proven: ``q`` / ``r``.
        Else, for index arithmetic (int64; a narrower part could wrap where
        ``x`` does not), the terms of ``x`` whose coefficients are multiples
        of ``m`` (``m * q``) leave, whatever the rest ``r``'s range:
        ``q + floordiv(r, m)`` / ``floormod(r, m)`` (a strided read ``2 * x +
        kx`` of a copy stored de-interleaved by ``% 2`` and ``// 2`` moves
        with ``x``)."""
        x, m = e.a, int(e.b.value)
        a = _affine(x)
        if not self._cannot_wrap(x, a):
            return None
        for form in (a, _expand(a, self.offsets)):
            q, r = _split_mod(form, m)
            rng = _range(r, self.ranges)
            if rng is not None and 0 <= rng[0] and rng[1] < m:
                return _build(q if e.op == "floordiv" else r, e.dtype)
        q = _Affine({k: [c // m, t] for k, (c, t) in a.terms.items() if c % m == 0})
        r = _Affine({k: [c, t] for k, (c, t) in a.terms.items() if c % m}, a.const)
        if e.dtype != "int64" or not q.terms or not r.terms:
            return None
        rest = ir.Binary(e.op, _build(r, e.dtype), e.b, e.dtype)
        return rest if e.op == "floormod" else ir.Binary("add", _build(q, e.dtype), rest, e.dtype)

    def _cannot_wrap(self, e, a: _Affine) -> bool:
        """Integer arithmetic wraps (NumPy, ``-fwrapv``), and ``m * q + r``
        splits only a sum that does not: ``e``'s range is proven inside its
        dtype, or ``e`` is int64 over loop iterators and params only (index
        arithmetic; a load or a narrower value may be anything)."""
        lo, hi = interval(e, self.ranges)
        limits = ir.INT_LIMITS[e.dtype]
        if lo is not None and hi is not None and limits[0] <= lo and hi <= limits[1]:
            return True
        return e.dtype == "int64" and all(k[0] == "v" for k in a.terms)

    def expr(self, e):
        if isinstance(e, ir.Binary):
            a, b = self.expr(e.a), self.expr(e.b)
            if a is not e.a or b is not e.b:
                e = ir.Binary(e.op, a, b, e.dtype)
            if e.dtype in _INT and e.op in ("floordiv", "floormod") \
                    and isinstance(e.b, ir.Const) and int(e.b.value) > 0:
                done = self.divided(e)
                if done is not None:
                    return done
            if e.dtype in _INT and e.op in ("add", "sub") and _folds_constants(e):
                return _build(_affine(e), e.dtype)
            return e
        if isinstance(e, ir.Load):
            idx = tuple(self.expr(i) for i in e.index)
            return ir.Load(e.array, idx, e.dtype)
        if isinstance(e, ir.Unary):
            a = self.expr(e.a)
            return e if a is e.a else ir.Unary(e.op, a, e.dtype)
        if isinstance(e, ir.Call):
            return ir.Call(e.func, tuple(self.expr(x) for x in e.args), e.dtype)
        if isinstance(e, ir.Select):
            return ir.Select(self.expr(e.cond), self.expr(e.a), self.expr(e.b), e.dtype)
        if isinstance(e, ir.Cast):
            a = self.expr(e.a)
            return e if a is e.a else ir.Cast(a, e.dtype)
        return e

    def bounds_of(self, e):
        if e.dtype not in _INT:
            return None
        lo, hi = interval(e, self.ranges)
        return None if lo is None or hi is None else (lo, hi)

    def stmt(self, s):
        if isinstance(s, ir.For):
            lo, hi = self.expr(s.lo), self.expr(s.hi)
            rlo = interval(lo, self.ranges) if lo.dtype in _INT else (None, None)
            rhi = interval(hi, self.ranges) if hi.dtype in _INT else (None, None)
            saved = self.ranges.get(s.var), self.offsets.get(s.var)
            self.ranges.pop(s.var, None)
            self.offsets.pop(s.var, None)
            if rlo[0] is not None and rhi[1] is not None and s.step > 0:
                self.ranges[s.var] = (rlo[0], rhi[1] - 1)
            alo = _affine(lo) if lo.dtype in _INT else None
            span = _constant_span(alo, hi) if alo is not None and alo.terms else None
            if span is not None and s.step == 1:
                # v = lo + delta, 0 <= delta < span: the offset is a term of its own
                delta = ir.Binary("sub", ir.Var(s.var, lo.dtype), _build(alo, lo.dtype), lo.dtype)
                self.offsets[s.var] = (alo, delta)
                self.ranges[("d", s.var)] = (0, span - 1)
            body = self.stmt(s.body)
            self.ranges.pop(("d", s.var), None)
            self._restore(s.var, saved)
            return ir.For(s.var, lo, hi, body, kind=s.kind, step=s.step, attrs=s.attrs)
        if isinstance(s, ir.Let):
            value = self.expr(s.value)
            saved = self.ranges.get(s.name), self.offsets.get(s.name)
            self.offsets.pop(s.name, None)
            r = self.bounds_of(value)
            if r is not None:
                self.ranges[s.name] = r
            else:
                self.ranges.pop(s.name, None)
            body = self.stmt(s.body)
            self._restore(s.name, saved)
            return ir.Let(s.name, value, body)
        if isinstance(s, ir.If):
            return ir.If(self.expr(s.cond), self.stmt(s.then),
                         None if s.else_ is None else self.stmt(s.else_))
        if isinstance(s, ir.Block):
            return ir.Block([self.stmt(x) for x in s.stmts])
        if isinstance(s, ir.Allocate):
            return ir.Allocate(s.array, s.dtype, s.shape, self.stmt(s.body), s.zero_init, s.scope,
                               s.layout)
        if isinstance(s, ir.Store):
            return ir.store_like(s, s.array, tuple(self.expr(i) for i in s.index),
                                 self.expr(s.value))
        return s

    def _restore(self, name, saved):
        for table, value in zip((self.ranges, self.offsets), saved):
            if value is None:
                table.pop(name, None)
            else:
                table[name] = value


def _constant_span(alo: _Affine, hi):
    """The smallest constant ``span`` with ``hi - lo <= span`` (``lo`` affine),
    when ``hi`` is ``lo + c`` or ``min(..., lo + c, ...) [+ k]``; else None.  A
    clamped last tile (``min(N - 1, 32 * t + 31) + 1``) thus still gives its
    iterator the offset form ``32 * t + delta`` with ``0 <= delta < 32``."""
    args, plus = _terms(hi, "min")
    spans = [d.const + plus for d in (_affine(a).plus(alo.scaled(-1)) for a in args)
             if not d.terms]
    return min(spans) if spans else None


def _folds_constants(e):
    """True when an add/sub tree holds more than one constant (``x + 127 + 1``)."""
    n = 0
    stack = [e]
    while stack:
        x = stack.pop()
        if isinstance(x, ir.Binary) and x.op in ("add", "sub") and x.dtype == e.dtype:
            stack += [x.a, x.b]
        elif isinstance(x, ir.Const):
            n += 1
    return n > 1


def simplify_indices(fn: ir.LoweredFunction) -> ir.LoweredFunction:
    """``fn`` with its integer index arithmetic simplified (see the module doc)."""
    fn.body = _Simplifier().stmt(fn.body)
    return fn


# --------------------------------------------------------- full-tile versioning
def _args(e, op):
    if isinstance(e, ir.Binary) and e.op == op:
        return _args(e.a, op) + _args(e.b, op)
    return [e]


def _terms(bound, op):
    """``(args, plus)`` with ``bound = op(*args) + plus`` (``plus`` 0 and one
    argument when ``bound`` is no clamped bound)."""
    if isinstance(bound, ir.Binary) and bound.op == "add" and isinstance(bound.b, ir.Const) \
            and isinstance(bound.a, ir.Binary) and bound.a.op == op:
        return _args(bound.a, op), int(bound.b.value)
    return _args(bound, op), 0


def _clamp(bound, op):
    """``(C, others, plus)`` when ``bound`` is ``op(C, e1, ...) + plus`` with
    one constant ``C``; else None."""
    args, plus = _terms(bound, op)
    consts = [a for a in args if isinstance(a, ir.Const)]
    if len(args) < 2 or len(consts) != 1:
        return None
    return int(consts[0].value), [a for a in args if a is not consts[0]], plus


def clamped_bound(hi):
    """``(C, others, plus)`` when ``hi`` is ``min(C, e1, ...) + plus`` with one
    constant ``C``; else None."""
    return _clamp(hi, "min")


def _clamps(loop):
    """The full-tile conditions and constant bounds of an unrolled or vector
    loop: ``(conditions, lo, hi)`` -- ``hi = min(C, e...) + plus`` is
    ``C + plus`` when every ``e >= C``; ``lo = max(C, e...) + plus`` is
    ``C + plus`` when every ``e <= C`` (the first tile of a loop that starts
    after the tiles' origin, as a stencil's ``1 .. N - 1`` split by 8);
    ``lo``/``hi`` None where that bound is not clamped."""
    conds, bounds = [], []
    for bound, op, cmp in ((loop.lo, "max", "le"), (loop.hi, "min", "ge")):
        c = _clamp(bound, op)
        if c is None:
            bounds.append(None)
            continue
        const, others, plus = c
        conds += [(o, ir.Binary(cmp, o, ir.Const(const, o.dtype), "bool")) for o in others]
        bounds.append(ir.Const(const + plus, bound.dtype))
    return conds, bounds[0], bounds[1]


def _clamped_loops(s, bound_inside, ranges=None, accumulating=False, over_serial=False):
    """Tile loops under ``s`` (unrolled and vector loops, and, inside a loop
    marked ``accumulate``, serial loops directly around a vector loop: the
    vector count of ``vectorize(j, 32)`` with 8 lanes) whose extent is clamped by a ``min`` (upper bound) or
    ``max`` (lower bound): [(loop, conditions, lo, hi)] (:func:`_clamps`).  A
    clamp over names bound outside ``s`` qualifies; so does one over the
    iterators of tile loops between ``s`` and it whose range is constant in
    the full tiles (``ranges``: var -> (first, last)), affinely: its
    condition is then taken at their worst values (``jv1 < min(7, 109 - 32 jr
    - 8 jv0) + 1`` under ``jv0 < 4``: ``85 - 32 jr >= 7``), so that one test
    outside a reduction loop covers every vector inside it (and the full side
    runs without a test, its accumulators local)."""
    ranges = {} if ranges is None else ranges
    out = []
    if isinstance(s, ir.For):
        if _tile_loop(s, accumulating):
            conds, lo, hi = _clamps(s)
            worst = _worst_case(conds, bound_inside, ranges) if conds else None
            if worst:
                out.append((s, worst, lo, hi))
            full_lo = s.lo if lo is None else lo
            full_hi = s.hi if hi is None else hi
            if (not conds or worst) and isinstance(full_lo, ir.Const) \
                    and isinstance(full_hi, ir.Const) and s.step == 1 \
                    and int(full_hi.value) > int(full_lo.value):
                ranges = {**ranges, s.var: (int(full_lo.value), int(full_hi.value) - 1)}
        elif over_serial and s.kind == "serial" and s.step == 1 and isinstance(s.lo, ir.Const) \
                and isinstance(s.hi, ir.Const) and int(s.hi.value) > int(s.lo.value):
            ranges = {**ranges, s.var: (int(s.lo.value), int(s.hi.value) - 1)}
        bound_inside = bound_inside | {s.var}
        accumulating = accumulating or bool(s.attrs.get("accumulate"))
    elif isinstance(s, ir.Let):
        bound_inside = bound_inside | {s.name}
        if isinstance(s.value, ir.Const) and ir.is_int(s.value.dtype):
            # an unrolled copy's iterator (``const int64_t iu = 3``)
            ranges = {**ranges, s.name: (int(s.value.value),) * 2}
    for k in ir.stmt_children(s):
        out += _clamped_loops(k, bound_inside, ranges, accumulating, over_serial)
    return out


def _tile_loop(s: ir.For, accumulating=False) -> bool:
    """An unrolled or vector loop, or (inside a loop that accumulates
    locally, where a test would keep the tile from registers) a serial one
    holding a vector loop directly (through blocks only)."""
    if s.kind in ("unrolled", "vector"):
        return True
    if s.kind != "serial" or not accumulating:
        return False
    todo = [s.body]
    while todo:
        x = todo.pop()
        if isinstance(x, ir.Block):
            todo += list(x.stmts)
        elif isinstance(x, ir.For) and x.kind == "vector":
            return True
    return False


def _worst_case(conds, bound_inside, ranges):
    """``conds`` (``(e, e cmp C)``) with every name bound inside taken at its
    worst value over ``ranges`` (None when a name bound inside has no
    constant range or ``e`` does not move one way with it: :func:`_monotone`)."""
    out = []
    for o, cond in conds:
        inner = ir.free_vars(o) & bound_inside
        if not inner:
            out.append((o, cond))
            continue
        if not inner <= set(ranges):
            return None
        e = o
        for v in inner:
            sign = _monotone(o, v)
            if sign is None:
                return None
            first, last = ranges[v]
            # ">= C" is hardest where e is smallest, "<= C" where it is largest
            low = (cond.op == "ge") == (sign > 0)
            e = _substitute(e, v, first if low else last)
        e = _folded(e)                          # the constants folded
        out.append((e, ir.Binary(cond.op, e, cond.b, "bool")))
    return out


def _same_way(x, y):
    """The direction of a sum of two terms moving in directions ``x`` and ``y``
    (1 up, -1 down, 0 constant, None either)."""
    if x is None or y is None:
        return None
    if not x or not y or x == y:
        return x or y
    return None


def _monotone(e, var):
    """How the integer expression ``e`` moves as ``var`` grows: 1 never down,
    -1 never up, 0 not at all, None either way or unknown.  Sums, constant
    multiples, floor divisions by a positive constant (``(6*ir + iu) / 8``
    in a triangle's tile bound), ``min`` and ``max`` of monotone terms."""
    if var not in ir.free_vars(e):
        return 0
    if isinstance(e, ir.Var):
        return 1
    if isinstance(e, ir.Cast) and ir.is_int(e.dtype) and ir.is_int(e.a.dtype):
        return _monotone(e.a, var)
    if isinstance(e, ir.Unary) and e.op == "neg":
        m = _monotone(e.a, var)
        return None if m is None else -m
    if isinstance(e, ir.Binary):
        a, b = _monotone(e.a, var), _monotone(e.b, var)
        if e.op in ("add", "min", "max"):
            return _same_way(a, b)
        if e.op == "sub":
            return _same_way(a, None if b is None else -b)
        if e.op == "mul" and isinstance(e.b, ir.Const) and a is not None:
            return a * (int(e.b.value) > 0) - a * (int(e.b.value) < 0)
        if e.op == "mul" and isinstance(e.a, ir.Const) and b is not None:
            return b * (int(e.a.value) > 0) - b * (int(e.a.value) < 0)
        if e.op in ("floordiv", "div") and ir.is_int(e.dtype) and isinstance(e.b, ir.Const) \
                and int(e.b.value) > 0:         # rounded down or toward zero: both monotone
            return a
    return None


def extremes(e, var, first, last):
    """(least, greatest) of the integer expression ``e`` as ``var`` runs from
    the expression ``first`` to ``last`` (``first <= last``), as IR: ``e`` at
    the two ends, folded; None where ``e`` does not move one way with ``var``
    (:func:`_monotone`)."""
    sign = _monotone(e, var)
    if sign is None:
        return None
    a, b = (_folded(_substitute(e, var, x)) for x in (first, last))
    return (a, b) if sign >= 0 else (b, a)


def _folded(e):
    """``e`` with each integer sum's constants folded, inside divisions too."""
    e = ir.with_children(e, [_folded(k) for k in ir.expr_children(e)])
    if (isinstance(e, ir.Binary) and e.op in ("add", "sub", "mul")
            or isinstance(e, ir.Unary) and e.op == "neg") and e.dtype in _INT:
        return _build(_affine(e), e.dtype)
    return e


def _substitute(e, var, value):
    """``e`` with ``var`` replaced by ``value``: an IR expression, or an int
    (a constant of the variable's type)."""
    if isinstance(e, ir.Var) and e.name == var:
        return value if isinstance(value, ir.Expr) else ir.Const(value, e.dtype)
    return ir.with_children(e, [_substitute(k, var, value) for k in ir.expr_children(e)])


def partial_tiles(s) -> bool:
    """Whether ``s`` holds an unrolled or vector loop clamped by a ``min`` or
    ``max`` over outer names: the generic (partial-tile) side of a versioned
    body."""
    return bool(_clamped_loops(s, set()))


def _with_bounds(s, fixed):
    """A copy of ``s`` where each loop in ``fixed`` gets its full-tile bounds."""
    if isinstance(s, ir.For) and id(s) in fixed:
        lo, hi = fixed[id(s)]
        return ir.For(s.var, s.lo if lo is None else lo, s.hi if hi is None else hi,
                      _with_bounds(s.body, fixed), kind=s.kind, step=s.step, attrs=s.attrs)
    return ir.rebuild(s, lambda x: _with_bounds(x, fixed))


def _version(s, seen):
    """Versions the body of a serial or parallel loop that holds clamped
    unrolled/vector loops, at the innermost loop their clamps depend on:
    ``if (every tile is full) {constant bounds} else {as is}``, so full tiles
    run with constant trip counts (unrolled, no remainder, no run-time start).
    ``seen``: loops already versioned (their generic copy is not versioned
    again)."""
    if isinstance(s, ir.For) and s.kind in ("serial", "parallel"):
        clamped = [c for c in _clamped_loops(s.body, set()) if id(c[0]) not in seen]
        if not any(s.var in ir.free_vars(o) for c in clamped for o, _ in c[1]):
            peeled = _peel_over_serial(s, seen)
            if peeled is not None:
                return peeled
        else:
            conds, fixed = [], {}
            for loop, checks, lo, hi in clamped:
                conds += [cond for _, cond in checks]
                fixed[id(loop)] = (lo, hi)
                seen.add(id(loop))
            lower = any(lo is not None for _, _, lo, _ in clamped)
            peeled = _peel(s, conds, fixed, seen) if lower else None
            if peeled is not None:
                return peeled
            cond = conds[0]
            for x in conds[1:]:
                cond = ir.Binary("and", cond, x, "bool")
            s = ir.rebuild(s, lambda body: ir.If(cond, _with_bounds(body, fixed), body))
    return ir.rebuild(s, lambda x: _version(x, seen))


def _peel_over_serial(s, seen):
    """``s`` peeled (:func:`_peel`) where tiles clamped from below depend on
    it through a serial loop of constant range inside it, taken at its worst
    value: the columns of a convolution's register block, ``x1`` from
    ``max(0, 1 - kx - 7 * x0)``, the taps ``kx < 3`` between (the padding's
    taps are skipped).  The border tiles of ``x0``, one iteration each, are
    pinned (:func:`_pinned`) and versioned again inside, at ``kx``; the
    others are full.  None where no such tile depends on ``s`` or the peel
    does not apply (upper clamps alone keep the versioning at the innermost
    loop, as before: a worst case over a serial loop would make fewer
    tiles full)."""
    if s.kind != "serial" or s.step != 1:        # (what _peel takes: no walk for the others)
        return None
    clamped = [c for c in _clamped_loops(s.body, set(), over_serial=True)
               if id(c[0]) not in seen and c[2] is not None]
    if not any(s.var in ir.free_vars(o) for c in clamped for o, _ in c[1]):
        return None
    conds = [cond for c in clamped for _, cond in c[1]]
    fixed = {id(loop): (lo, hi) for loop, _, lo, hi in clamped}
    marked = {id(loop) for loop, *_ in clamped}
    peeled = _peel(s, conds, fixed, seen | marked)
    if peeled is not None:
        seen |= marked
    return peeled


def _full_range(var, conds):
    """``([L...], [U...])``: ``var`` satisfies every condition ``a*var + r
    cmp C`` (``cmp`` "ge" or "le", ``a != 0``) iff ``max(L...) <= var <
    min(U...)``; None when a condition is not affine in ``var``."""
    lows, highs = [], []
    for cond in conds:
        a = affine(cond.a, lambda n: True)
        if a is None or not a[0].get(var):
            return None
        coef, dt = a[0][var], cond.a.dtype
        r, c, k = _substitute(cond.a, var, 0), ir.Const(int(cond.b.value), dt), ir.Const(abs(coef), dt)
        # with x = C - r (a > 0) or r - C (a < 0), the condition is
        # var >= x / k ("ge" and a > 0, "le" and a < 0) or var <= x / k
        x = ir.binary("sub", c, r) if coef > 0 else ir.binary("sub", r, c)
        if (cond.op == "ge") == (coef > 0):       # var >= ceil(x / k) = -floor(-x / k)
            neg = ir.binary("sub", ir.Const(0, dt), x)
            lows.append(ir.binary("sub", ir.Const(0, dt), ir.binary("floordiv", neg, k)))
        else:                                     # var < floor(x / k) + 1
            highs.append(ir.binary("add", ir.binary("floordiv", x, k), ir.Const(1, dt)))
    return lows, highs


def _fold(e):
    """``e`` as a Python int when it is constant, else ``e``."""
    v = ir.const_eval(e, {})
    return e if v is None else v


def _peel(s, conds, fixed, seen):
    """A serial loop over tiles whose first tiles start inside (a lower clamp:
    the stencil's ``1 .. N - 1`` split by 8) becomes three loops, the tiles
    before the full ones, the full ones (constant bounds, no test), the
    tiles after: ``for (v = lo; v < a; v++) generic; for (; v < b; v++)
    full; for (; v < hi; v++) generic`` with ``a = min(max(lo, L), hi)``,
    ``b = max(min(hi, U), a)`` -- the same iterations in the same order.
    None (the caller versions instead) when the loop is not serial with step
    1 or a condition is not affine in its variable."""
    if s.kind != "serial" or s.step != 1:
        return None
    rng = _full_range(s.var, conds)
    if rng is None:
        return None
    lows, highs = rng
    dt = s.lo.dtype
    start = s.lo
    for x in lows:
        start = ir.binary("max", start, x)
    start = ir.binary("min", start, s.hi)
    end = s.hi
    for x in highs:
        end = ir.binary("min", end, x)
    full = _with_bounds(s.body, fixed)
    a, b = _fold(start), _fold(end)
    if isinstance(a, int) and isinstance(b, int):
        b = max(a, b)
        lo, hi = _fold(s.lo), _fold(s.hi)
        pieces = [(s.lo, ir.Const(a, dt), s.body, lo is not None and lo == a),
                  (ir.Const(a, dt), ir.Const(b, dt), full, a == b),
                  (ir.Const(b, dt), s.hi, s.body, hi is not None and hi == b)]
        loops = [ir.For(s.var, x, y, _version(_pinned(body, s.var, x, y), seen), kind=s.kind,
                        step=1, attrs=s.attrs)
                 for x, y, body, empty in pieces if not empty]
        return ir.Block(loops)
    return None


def _pinned(body, var, lo, hi):
    """``body`` of a loop over ``[lo, hi)``: when that is one constant
    iteration, the bounds of the loops inside that fold to constants once
    ``var`` is that value are those constants (a border tile of a stencil's
    taps, ``x1 < min(13, 14 - kx) + 1`` at ``kx = 2``: a tile of 13
    iterations, unrolled without a test); else ``body``."""
    if not (isinstance(lo, ir.Const) and isinstance(hi, ir.Const)
            and int(hi.value) == int(lo.value) + 1):
        return body
    value = int(lo.value)

    def fold(e):
        if var not in ir.free_vars(e):
            return e
        e = _folded(_substitute(e, var, value))
        v = ir.const_eval(e, {})
        return e if v is None else ir.Const(v, e.dtype)

    def pin(x):
        if isinstance(x, ir.For):
            return ir.For(x.var, fold(x.lo), fold(x.hi), pin(x.body), kind=x.kind, step=x.step,
                          attrs=x.attrs)
        return ir.rebuild(x, pin)
    return pin(body)


def version_full_tiles(fn: ir.LoweredFunction) -> ir.LoweredFunction:
    """``fn`` with full tiles of its unrolled and vector loops versioned."""
    fn.body = _version(fn.body, set())
    return fn

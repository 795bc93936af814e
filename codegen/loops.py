"""Facts about loops and index expressions that the target-neutral passes
(:mod:`codegen.vectorize`, :mod:`codegen.regblock`, :mod:`codegen.promote`,
:mod:`codegen.isplit`, :mod:`codegen.jam`, :mod:`codegen.ordered`) and both CPU
backends read: the affine form of an index, constant bounds on a loop's trip
count, whether a vector loop has loops inside, the host's SIMD lanes.

:func:`affine` is partial: an index that is not an integer combination of
names (a load, a ``floordiv``) has no form.  :mod:`codegen.simplify` keeps its
own total form (``_Affine``: any sub-expression becomes an opaque term, in
first-appearance order, which its rewrites rebuild into IR), a different tool
for a different job.

This module imports nothing from ``tiramisu_py``.
"""
from __future__ import annotations

from . import ir, target


def nested(body) -> bool:
    """Whether a vector loop body contains a loop or an if (outer-loop vectorisation)."""
    return any(isinstance(s, (ir.For, ir.If)) for s in ir.walk_stmts(body))


def sole_stmt(body):
    """The one statement of a loop's ``body`` (a Block of one, or the statement)."""
    return body.stmts[0] if isinstance(body, ir.Block) and len(body.stmts) == 1 else body


def affine(e, fixed_ok):
    """``e`` as ({name: coeff}, const) over names, or None; names for which
    ``fixed_ok(name)`` is false make it None unless it is the lane variable."""
    if isinstance(e, ir.Const) and ir.is_int(e.dtype):
        return {}, int(e.value)
    if isinstance(e, ir.Var):
        return ({e.name: 1}, 0) if fixed_ok(e.name) else None
    if isinstance(e, ir.Cast) and ir.is_int(e.dtype) and ir.is_int(e.a.dtype):
        return affine(e.a, fixed_ok)
    if isinstance(e, ir.Unary) and e.op == "neg":
        a = affine(e.a, fixed_ok)
        return None if a is None else ({n: -c for n, c in a[0].items()}, -a[1])
    if isinstance(e, ir.Binary) and e.op in ("add", "sub", "mul"):
        a, b = affine(e.a, fixed_ok), affine(e.b, fixed_ok)
        if a is None or b is None:
            return None
        if e.op == "mul":
            if a[0] and b[0]:
                return None
            (va, ca), k = (a, b[1]) if not b[0] else (b, a[1])
            return {n: c * k for n, c in va.items() if c * k}, ca * k
        s = 1 if e.op == "add" else -1
        v = dict(a[0])
        for n, c in b[0].items():
            v[n] = v.get(n, 0) + s * c
        return {n: c for n, c in v.items() if c}, a[1] + s * b[1]
    return None


def max_trip(loop: ir.For):
    """An upper bound on the iterations of ``loop`` when its lower bound is a
    constant and its upper bound has a constant bound (``min(31, N - ...) + 1``),
    else None."""
    if not isinstance(loop.lo, ir.Const):
        return None
    hi = _upper(loop.hi)
    return None if hi is None else max(0, hi - int(loop.lo.value))


def trip_bound(loop: ir.For):
    """An upper bound on the iterations of ``loop`` (unit step) when both
    bounds are clamped by constants: ``lo`` a ``max`` with a constant argument
    (``max(max(0, a), b)`` >= 0) and ``hi`` a ``min`` with one (``min(min(2,
    c), d) + 1`` <= 3); else None.  Exact: ``max(k, ...) >= k`` and ``min(k,
    ...) <= k`` hold for any values of the other arguments; the bound is
    only used for loop hints, never for correctness."""
    lo, hi = _lower(loop.lo), _upper(loop.hi)
    if lo is None or hi is None or int(loop.step) != 1:
        return None
    return max(0, hi - lo)


def _lower(e):
    return _bound(e, "max", max)


def _upper(e):
    return _bound(e, "min", min)


def _bound(e, clamp, pick):
    """A constant bound of ``e`` on one side (``clamp`` ``"max"``: below,
    ``"min"``: above) that holds whatever its variables are: constants,
    ``clamp`` with at least one bounded argument, sums of bounded terms, a
    bounded term minus a constant; else None."""
    if isinstance(e, ir.Const):
        return int(e.value)
    if isinstance(e, ir.Binary):
        a, b = _bound(e.a, clamp, pick), _bound(e.b, clamp, pick)
        if e.op == clamp:
            return a if b is None else b if a is None else pick(a, b)
        if e.op == "add" and a is not None and b is not None:
            return a + b
        if e.op == "sub" and a is not None and isinstance(e.b, ir.Const):
            return a - int(e.b.value)
    return None


def host_lanes(bits: int) -> int:
    """Lanes of ``bits``-wide elements in one SIMD register of this host
    (:func:`codegen.target.vector_bits`: AVX-512 512 bits, AVX 256, else 128)."""
    return max(1, target.vector_bits() // bits)

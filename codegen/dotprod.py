"""Dot-product instructions: a vector loop whose body is a short reduction
over interleaved pairs (bfloat16) or quadruples (uint8 x int8) becomes one
instruction per vector: ``vdpbf16ps`` (AVX-512 BF16) or ``vpdpbusd``
(AVX-512 VNNI), where the host has them (:func:`codegen.target.has`).

The pattern, as the DSL writes it with the reduction loop ``k`` split by
``n`` (2 or 4) and the operand that varies along the vector loop packed so
that its ``n`` values of one lane are adjacent (``cache_at`` + ``store_in``,
e.g. ``Bp[j, k % 2]``)::

    for j (vector, a multiple of 16 lanes, constant trip)
      for k1 in [0, n)                      (serial or unrolled)
        X[I] = X[I] + cast(a[.., k1]) * cast(b[.., n*j + k1])   (one or more)

where ``X`` is float32 (``a``, ``b`` bfloat16, the casts to float32) or
int32 (one of ``a``, ``b`` uint8 and the other int8, the casts to int32),
``I`` does not use ``k1`` and is contiguous in ``j``; ``a`` does not use
``j`` and its ``n`` values are adjacent (the last index is ``k1`` plus
terms free of ``j`` and ``k1``); ``b``'s last index is ``n*j + k1`` plus
such terms, its other indices free of both, or ``b`` is ``P[.., j + c,
k1]`` with a last dimension of extent ``n`` (the same memory).  Each store becomes per 16 lanes
``X[I..] = dot(X[I..], broadcast(a's n values), b's 16n values)``.

The loop keeps its body (the scalar meaning); :func:`mark_dot_products`
only tags it (``attrs["dot"]``, ``attrs["dot_stores"]``: the parts), and a
backend prints a tagged loop from the parts.  Results: int8 bit-identical to the plain
path (exact products, wrapping int32 sums); bfloat16 products are exact in
float32 and the instruction sums the pair in its own order (with denormal
inputs and outputs flushed to zero), so results differ from the plain path
by float32 rounding only (the tests use bf16's relative 1e-2).

This module imports nothing from ``tiramisu_py``.
"""
from __future__ import annotations

from dataclasses import dataclass

from . import ir, loops, target

LANES = 16          # float32 / int32 lanes of one 512-bit register
# kind -> (pair size n, accumulator dtype, operand dtypes, the host flag)
KINDS = {"bf16": (2, "float32", ("bfloat16", "bfloat16"), "avx512_bf16"),
         "u8s8": (4, "int32", ("uint8", "int8"), "avx512_vnni")}


@dataclass(frozen=True)
class DotStore:
    """One ``X[I] = X[I] + a * b`` of a tagged loop, with ``k1 = 0`` put in
    (the address of the first of each operand's ``n`` values)."""
    array: str              # X
    index: tuple            # I
    pair: ir.Load           # the operand free of the vector iterator
    lanes: ir.Load          # the operand packed along it


def mark_dot_products(fn: ir.LoweredFunction) -> ir.LoweredFunction:
    """``fn`` with every vector loop of the pattern tagged (``attrs["dot"]``:
    the kind, ``attrs["dot_stores"]``: its :class:`DotStore` tuple) when the
    host has the kind's instruction and 512-bit vectors."""
    kinds = [k for k, v in KINDS.items() if target.has(v[3])]
    if not kinds or target.vector_bits() < 512:
        return fn
    shapes = {a.name: a.shape for a in fn.arrays}
    shapes.update((x.array, x.shape) for x in ir.walk_stmts(fn.body) if isinstance(x, ir.Allocate))

    def visit(s):
        s = ir.rebuild(s, visit)
        if isinstance(s, ir.For) and s.kind == "vector" and "dot" not in s.attrs:
            found = match(s, shapes, fn.constants)
            if found and found[0] in kinds:
                return ir.For(s.var, s.lo, s.hi, s.body, kind=s.kind, step=s.step,
                              attrs=dict(s.attrs, dot=found[0], dot_stores=found[1]))
        return s
    return ir.LoweredFunction(fn.name, fn.scalars, fn.arrays, visit(fn.body), fn.constants)


def match(s: ir.For, shapes: dict, consts: dict):
    """(kind, (DotStore, ...)) of the vector loop ``s``, or None."""
    trip = ir.const_eval(ir.Binary("sub", s.hi, s.lo, "int64"), consts)
    inner = s.body
    if (trip is None or trip <= 0 or trip % LANES or s.step != 1 or not isinstance(inner, ir.For)
            or inner.kind not in ("serial", "unrolled") or inner.step != 1
            or ir.const_eval(inner.lo, consts) != 0):
        return None
    n = ir.const_eval(inner.hi, consts)
    stores = _flat(inner.body)
    for kind, (size, _, _, _) in KINDS.items():
        if n != size or not stores:
            continue
        parts = [_parts(st, s.var, inner.var, kind, shapes, consts) for st in stores]
        if all(parts):
            return kind, tuple(parts)
    return None


def _flat(s) -> list:
    """The statements of ``s``, nested blocks flattened."""
    if isinstance(s, ir.Block):
        return [x for y in s.stmts for x in _flat(y)]
    return [s]


def _parts(st, j: str, k: str, kind: str, shapes: dict, consts: dict):
    size, acc, dts, _ = KINDS[kind]
    if not isinstance(st, ir.Store) or not isinstance(st.value, ir.Binary) or \
            st.value.op != "add" or st.value.dtype != acc:
        return None
    key = ir.expr_key(ir.Load(st.array, st.index, acc))
    x, prod = st.value.a, st.value.b
    if not (isinstance(x, ir.Load) and ir.expr_key(x) == key):
        x, prod = prod, x
    if not (isinstance(x, ir.Load) and ir.expr_key(x) == key) or not isinstance(prod, ir.Binary) \
            or prod.op != "mul":
        return None
    ops = []
    for c in (prod.a, prod.b):
        if not (isinstance(c, ir.Cast) and c.dtype == acc and isinstance(c.a, ir.Load)):
            return None
        ops.append(c.a)
    if sorted(o.dtype for o in ops) != sorted(dts):
        return None
    pair = [o for o in ops if not any(j in ir.free_vars(i) for i in o.index)]
    lanes = [o for o in ops if o not in pair]
    if len(pair) != 1 or len(lanes) != 1 or not _last(st.index, {j: 1}, j, k) \
            or not _last(pair[0].index, {k: 1}, j, k) \
            or not (_last(lanes[0].index, {j: size, k: 1}, j, k)
                    or _rows_of(lanes[0], size, j, k, shapes, consts)):
        return None
    zero = {k: ir.Const(0, "int64")}
    return DotStore(st.array, st.index, ir.substitute(pair[0], zero),
                    ir.substitute(lanes[0], zero))


def _coefs(e, j: str, k: str):
    """(j's, k's coefficient) in the affine index ``e``, or None."""
    f = loops.affine(e, lambda n: True)
    if f is None or any(isinstance(x, ir.Load) for x in ir.walk_exprs(e)):
        return None
    return f[0].get(j, 0), f[0].get(k, 0)


def _last(index, want: dict, j: str, k: str) -> bool:
    """Whether only the last index uses ``j``/``k``, with the coefficients
    ``want`` (a missing name: 0)."""
    if not index or any(ir.free_vars(i) & {j, k} for i in index[:-1]):
        return False
    return _coefs(index[-1], j, k) == (want.get(j, 0), want.get(k, 0))


def _rows_of(load, size: int, j: str, k: str, shapes: dict, consts: dict) -> bool:
    """``P[.., j + c, k]`` with a last dimension of ``size``: the same
    interleaved layout, written with the pair as its own dimension."""
    ix, shape = load.index, shapes.get(load.array)
    if len(ix) < 2 or shape is None or len(shape) != len(ix) or \
            ir.const_eval(shape[-1], consts) != size:
        return False
    if loops.affine(ix[-1], lambda n: True) != ({k: 1}, 0) or \
            any(ir.free_vars(i) & {j, k} for i in ix[:-2]):
        return False
    return _coefs(ix[-2], j, k) == (1, 0)

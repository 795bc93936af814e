"""Ordered (in-order) float reductions in serial innermost loops: which ones
are worth vectorising.

``C[i][j] = C[i][j] + alpha * A[i][k] * A[j][k]`` over a serial ``k`` is a
strict float reduction: its adds must run in program order (no
reassociation).  Its products are independent, though, so a loop vectorizer may
compute ``W`` of them at once with vector loads and multiplies and then add the
lanes to the accumulator one after another, in order -- the scalar
program's order of sums (only the ``contract`` flag the backend puts on every
float operation may still fuse a multiply into an add where one is left).  gcc does this at ``-O3``; LLVM does it only
when told (``-force-ordered-reductions``, which the LLVM backend sets).

It pays only when the products' operands come as vector loads: when every
access in the loop is contiguous (unit stride in the last dimension) or
invariant in the iterator.  With a strided operand (``B[k][j]`` over ``k``) the
lanes are gathered element by element and the in-order adds stay, so the
vector loop is slower than the scalar one (measured: PolyBench gemm with a
reversed ``k``, 0.91x -> 0.7x gcc).  :func:`strided_ordered_reduction` finds
those loops; the LLVM backend marks them ``llvm.loop.vectorize.enable false``
(what they got before the option: a loop with an ordered reduction was never
vectorised on x86), with a comment naming the access.

This module imports nothing from ``tiramisu_py``.
"""
from __future__ import annotations

from . import ir
from .ir import expr_key
from .loops import affine


def _accesses(body):
    """(array, index, is_store) of every access in a straight-line body, and
    the names its lets bind (with their values); None if the body holds a loop,
    an if or an allocation."""
    acc, lets = [], {}
    for s in ir.walk_stmts(body):
        if isinstance(s, (ir.For, ir.If, ir.Allocate)):
            return None
        if isinstance(s, ir.Let):
            lets[s.name] = s.value
        exprs = ir.stmt_exprs(s)
        if isinstance(s, ir.Store):
            acc.append((s.array, tuple(s.index), True))
        for e in exprs:
            for x in ir.walk_exprs(e):
                if isinstance(x, ir.Load):
                    acc.append((x.array, tuple(x.index), False))
    return acc, lets


def _dependent(var, lets) -> set:
    """``var`` and the let-bound names whose value depends on it."""
    dep, grow = {var}, True
    while grow:
        grow = False
        for n, v in lets.items():
            if n not in dep and ir.free_vars(v) & dep:
                dep.add(n)
                grow = True
    return dep


def _stride(index, var, dep):
    """The access's element stride in ``var``: 0 (invariant), +-1 (contiguous)
    or None (anything else: another coefficient, ``var`` in an outer dimension,
    a non-affine index)."""
    stride = 0
    for d, e in enumerate(index):
        if not (ir.free_vars(e) & dep):
            continue
        f = affine(e, lambda n: n == var or n not in dep)
        if f is None or d != len(index) - 1 or abs(f[0].get(var, 0)) != 1:
            return None
        stride = f[0][var]
    return stride


def strided_ordered_reduction(loop: ir.For, dtypes: dict):
    """For a serial innermost ``loop`` that accumulates a float array element
    at an index invariant in the loop (``X[..] = f(X[..], ...)``): the text of a
    non-contiguous access in it, or None (no such reduction, or every access is
    contiguous or invariant).  ``dtypes``: array name -> element dtype."""
    if loop.kind not in ("serial", None) or loop.step not in (1, -1):
        return None
    found = _accesses(loop.body)
    if found is None:
        return None
    acc, lets = found
    dep = _dependent(loop.var, lets)
    reduced = False
    for s in ir.walk_stmts(loop.body):
        if (isinstance(s, ir.Store) and ir.is_float(dtypes.get(s.array, "int32"))
                and not any(ir.free_vars(e) & dep for e in s.index)):
            key = tuple(expr_key(e) for e in s.index)
            if any(isinstance(x, ir.Load) and x.array == s.array
                   and tuple(expr_key(e) for e in x.index) == key for x in ir.walk_exprs(s.value)):
                reduced = True
    if not reduced:
        return None
    for array, index, _ in acc:
        if _stride(index, loop.var, dep) is None:
            return f"{array}[{']['.join(_show(e) for e in index)}]"
    return None


def _show(e) -> str:
    if isinstance(e, ir.Var):
        return e.name
    if isinstance(e, ir.Const):
        return str(e.value)
    if isinstance(e, ir.Binary):
        op = {"add": "+", "sub": "-", "mul": "*"}.get(e.op, e.op)
        return f"{_show(e.a)} {op} {_show(e.b)}"
    if isinstance(e, ir.Unary) and e.op == "neg":
        return f"-{_show(e.a)}"
    if isinstance(e, ir.Cast):
        return _show(e.a)
    return "..."

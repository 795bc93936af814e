"""Unroll-and-jam of column walks: which serial loop nests the LLVM backend
unrolls and jams.

``for j: for i: B[i][j] = f(A[i][j], A[i][j-1], A[i+1][j], ...)`` walks
columns: the inner loop's accesses are strided (``i`` in an outer dimension)
while the outer iterator ``j`` runs along the contiguous last dimension.
Unrolling ``j`` by ``JAM`` and jamming the copies into one inner loop makes
each inner iteration touch ``JAM`` adjacent elements of every row it visits
(one cache line instead of ``JAM``) and share the loads the copies have in
common (``A[i][j+1]`` of one copy is ``A[i][j]`` of the next).  gcc does this
at ``-O3`` (``-floop-unroll-and-jam``); LLVM's pass runs on x86 only where
loop metadata asks, and then failed on some fuzz nests (printing a warning),
so the LLVM backend jams the nest itself (``regblock.jam``, the register
blocking's unroll-and-jam: ``j`` by steps of ``JAM`` with the body's stores
repeated for ``j .. j + JAM - 1`` in one inner loop, then the remaining
``j`` one by one; the loops it makes carry ``attrs["jammed"]``).

:func:`jam_count` asks only where the jam provably keeps the program's meaning
and pays:

* the outer loop is serial with step 1 and its body is exactly one serial
  inner loop (step 1) whose bounds do not depend on the outer iterator, and
  whose body is straight-line (stores and lets: no loop, if or allocation);
* every array the inner body stores is accessed there (loaded or stored) at
  one index only, whose dimensions include ``+-inner + c`` and ``+-outer + c``
  (``c`` free of both iterators): each element is then touched by one
  iteration of the nest, so running iterations of neighbouring ``j`` in an
  interleaved order reorders nothing that depends on each other (reads of
  arrays that are not stored there may be anywhere; the backend's arrays are
  distinct, ``noalias``);
* some access is a column walk: its last dimension depends on the outer
  iterator and not on the inner one, and an earlier dimension depends on the
  inner one; every access depends on the inner iterator, and none in its last
  dimension (a loop contiguous in its own iterator is the vectorizer's; an
  element invariant in it is hoisted by LICM: neither is a column walk).

This module imports nothing from ``tiramisu_py``.
"""
from __future__ import annotations

from . import ir
from .ir import expr_key
from .loops import affine

JAM = 4          # outer iterations per jammed inner loop


def inner_loop(loop: ir.For):
    """The loop that is ``loop``'s whole body, or None."""
    return _only_loop(loop.body)


def _only_loop(s):
    while isinstance(s, ir.Block) and len(s.stmts) == 1:
        s = s.stmts[0]
    return s if isinstance(s, ir.For) else None


def _straight(body):
    """(accesses [(array, index, is_store)], lets {name: value}) of a
    straight-line body, or None."""
    acc, lets = [], {}
    for s in ir.walk_stmts(body):
        if isinstance(s, (ir.For, ir.If, ir.Allocate, ir.Barrier)):
            return None
        if isinstance(s, ir.Let):
            lets[s.name] = s.value
        if isinstance(s, ir.Store):
            acc.append((s.array, tuple(s.index), True))
        for e in ir.stmt_exprs(s):
            for x in ir.walk_exprs(e):
                if isinstance(x, ir.Load):
                    acc.append((x.array, tuple(x.index), False))
    return acc, lets


def _unit_in(e, var, other) -> bool:
    """Whether ``e`` is ``+-var + c`` with ``c`` free of ``var`` and ``other``."""
    f = affine(e, lambda n: n not in other or n == var)
    return f is not None and abs(f[0].get(var, 0)) == 1 and not any(
        n in other and n != var for n in f[0])


def jam_count(loop: ir.For) -> int:
    """How many iterations of ``loop`` to unroll-and-jam (0: none); see the
    module doc for the rule."""
    inner = inner_loop(loop)
    if (loop.kind != "serial" or loop.step != 1 or inner is None or inner.kind != "serial"
            or inner.step != 1 or loop.attrs or inner.attrs):
        return 0
    if loop.var in ir.free_vars(inner.lo) | ir.free_vars(inner.hi):
        return 0
    found = _straight(inner.body)
    if found is None:
        return 0
    acc, lets = found
    if set(lets) & {loop.var, inner.var}:
        return 0
    if any(ir.free_vars(v) & ({loop.var, inner.var} | set(lets)) for v in lets.values()):
        return 0          # a value bound from an iterator hides it from the index analysis
    iters = {loop.var, inner.var}
    stored = {a for a, _, st in acc if st}
    for a in stored:
        keys = {tuple(expr_key(e) for e in ix) for b, ix, _ in acc if b == a}
        if len(keys) != 1:
            return 0
        index = next(ix for b, ix, _ in acc if b == a)
        if not (any(_unit_in(e, inner.var, iters) for e in index)
                and any(_unit_in(e, loop.var, iters) for e in index)):
            return 0
    if any(not any(inner.var in ir.free_vars(e) for e in index) for _, index, _ in acc):
        return 0
    if any(index and inner.var in ir.free_vars(index[-1]) for _, index, _ in acc):
        return 0
    for _, index, _ in acc:
        if (index and loop.var in ir.free_vars(index[-1])
                and inner.var not in ir.free_vars(index[-1])
                and any(inner.var in ir.free_vars(e) for e in index[:-1])):
            return JAM
    return 0

"""The explain report of the target-neutral vector decisions: one line per
vector loop (widened or not, and why: :mod:`codegen.vectorize`) and per
register block (:mod:`codegen.regblock`); ``f.explain()`` ends with them.

This module imports nothing from ``tiramisu_py``.
"""
from __future__ import annotations

from . import ir
from .loops import nested
from .regblock import register_block
from .vectorize import plan


def describe(loop: ir.For, width: int) -> str:
    """One line: whether ``loop`` (a vector loop) is widened, and why not."""
    if not nested(loop.body):
        return (f"vector loop {loop.var} ({width} lanes): straight-line body, widened "
                "(LLVM: explicit vectors; C: #pragma omp simd)")
    if int(loop.step) != 1:
        return f"vector loop {loop.var}: not widened (step {loop.step})"
    p, reason = plan(loop)
    if p is None:
        return f"vector loop {loop.var}: not widened ({reason}); runs as a scalar loop"
    acc = sorted({a for v in p.promote.values() for a, _ in v})
    return (f"vector loop {loop.var} ({width} lanes): widened with the loops inside it"
            + (f"; {', '.join(acc)} accumulated in registers over the inner loop" if acc else ""))


def report(fn: ir.LoweredFunction, default_width=None) -> list:
    """``describe`` for every vector loop of ``fn`` (each loop name once), then
    the register blocks."""
    out, seen = [], set()
    for s in ir.walk_stmts(fn.body):
        if isinstance(s, ir.For) and s.kind == "vector" and not s.attrs.get("reduction"):
            w = s.attrs.get("vector_width") or default_width or "host"
            line = describe(s, w)
            if line not in seen:
                seen.add(line)
                out.append(line)
    for s in ir.walk_stmts(register_block(fn).body):
        r = isinstance(s, ir.For) and s.attrs.get("register_block")
        c = isinstance(s, ir.For) and s.attrs.get("register_block_columns")
        line = (f"loop {s.var}: unrolled by {r} and jammed into the widened vector loop "
                f"(a register block of {r} rows)") if r else (
                f"loop {s.var}: unrolled by {c} and jammed into the widened vector loop "
                f"({c} vectors per row of the register block)") if c else None
        if line and line not in seen:
            seen.add(line)
            out.append(line)
    return out

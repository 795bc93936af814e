"""Bounded work for the in-process LLVM build.

The C compiler runs in a child process under a time limit; LLVM runs inside
this process, where a runaway build cannot be interrupted.  What makes an
LLVM build run away is its own unrolling: an ``unrolled`` loop asks LLVM for
``attrs["unroll"]`` copies of its body, so the module LLVM optimises holds
the body's operations times every unroll factor around it (an expression of
3,000 nodes unrolled 256 times ran for more than 15 minutes at 1.8 GB).

:func:`check` estimates that size before LLVM sees the module (every
statement and expression node counts one; an unrolled loop multiplies its
body by its unroll count, or by its trip count when that is a smaller
constant) and refuses a Function whose estimate exceeds
:data:`MAX_UNROLLED_NODES` with a :class:`BuildBudgetError` naming the loop
to unroll less.  The library's kernels stay below 31,000 (the Winograd fused
block; its LLVM build takes about 2 s); an estimate of 120,000 built in about
20 s on a 2-core host.  ``$TIRAMISU_PY_LLVM_MAX_NODES`` raises (or lowers) the
limit."""
from __future__ import annotations

import os

from . import ir

MAX_UNROLLED_NODES = 200_000
ENV = "TIRAMISU_PY_LLVM_MAX_NODES"
DEFAULT_UNROLL = 8          # the LLVM backend's count when a loop gives none


class BuildBudgetError(ValueError):
    """The unrolled module would exceed the build budget."""


def limit() -> int:
    text = os.environ.get(ENV, "").strip()
    if not text:
        return MAX_UNROLLED_NODES
    try:
        value = int(text)
    except ValueError:
        raise ValueError(f"${ENV}={text!r} must be a positive integer") from None
    if value <= 0:
        raise ValueError(f"${ENV}={text!r} must be a positive integer")
    return value


def unroll_factor(s: ir.For) -> int:
    """How many copies of ``s``'s body LLVM is asked for."""
    if s.kind != "unrolled":
        return 1
    count = int(s.attrs.get("unroll", DEFAULT_UNROLL))
    if isinstance(s.lo, ir.Const) and isinstance(s.hi, ir.Const):
        count = min(count, max(int(s.hi.value) - int(s.lo.value), 1))
    return max(count, 1)


def unrolled_size(body: ir.Stmt) -> tuple:
    """(estimated operations after unrolling, the unrolled loop contributing
    most as (loop, factor, body operations) or None)."""
    total, worst = 0, None
    stack = [(body, 1)]
    sizes = {}
    while stack:
        s, factor = stack.pop()
        own = 1 + sum(sum(1 for _ in ir.walk_exprs(e)) for e in ir.stmt_exprs(s))
        total += own * factor
        inner = factor
        if isinstance(s, ir.For) and s.kind == "unrolled":
            inner = factor * unroll_factor(s)
            sizes[id(s)] = s
        stack.extend((c, inner) for c in ir.stmt_children(s))
    for s in sizes.values():
        n = sum(1 + sum(sum(1 for _ in ir.walk_exprs(e)) for e in ir.stmt_exprs(x))
                for x in ir.walk_stmts(s.body))
        contribution = n * unroll_factor(s)
        if worst is None or contribution > worst[2] * worst[1]:
            worst = (s, unroll_factor(s), n)
    return total, worst


def check(fn: ir.LoweredFunction) -> None:
    """Raises BuildBudgetError when ``fn`` would be too large once unrolled."""
    size, worst = unrolled_size(fn.body)
    cap = limit()
    if size <= cap:
        return
    hint = ""
    if worst is not None:
        loop, factor, n = worst
        hint = (f"; loop {loop.var!r} is unrolled {factor}x over a body of about {n} "
                f"operations: unroll it less, or split the computation")
    raise BuildBudgetError(
        f"LLVM backend: {fn.name!r} would hold about {size:,} operations after unrolling, "
        f"beyond the build budget of {cap:,} (codegen.budget.MAX_UNROLLED_NODES, "
        f"${ENV}){hint}")

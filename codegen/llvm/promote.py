"""LLVM backend: serial loops holding elements in registers (scalar promotion,
the analysis in :mod:`codegen.promote`), a mixin of :class:`codegen.llvm.stmt.Lowering`."""
from __future__ import annotations

from .. import ir, promote
from ..ir import expr_key
from .lower import LLT, Val, name_hint
from .reduce import ACC


class PromotionLowering:
    def _held(self, s: ir.For) -> list:
        """[(array, index, key)] a serial loop carries in registers: the elements
        an enclosing loop holds that it stores to, and its own (codegen.promote)."""
        if self.vec is not None:
            return []
        keys = {(x.array, tuple(expr_key(i) for i in x.index)): x.index
                for x in ir.walk_stmts(s) if isinstance(x, ir.Store)}
        out = [(k[0], keys[k], k) for k in self.spromoted if k in keys]
        for a, ix in promote.promotable(s, self.ctx.parallel, self.enclosing[:-1]):
            k = (a, tuple(expr_key(i) for i in ix))
            if k not in self.spromoted:
                out.append((a, ix, k))
        return out

    def _latency_chain(self, s: ir.For, inits) -> bool:
        """Whether the adds onto the held floats of innermost loop ``s`` form
        latency-bound chains (at most two, nothing else carried): their
        ``fadd``/``fsub`` then lose ``contract`` (:meth:`_arith`), so LLVM does
        not fuse ``acc - a*b`` into an FMA, whose latency (4 cycles on Zen 4,
        as on Intel) is longer than an add's (3 on Zen 4): the product leaves
        the chain, as gcc's znver tuning does (trisolv's ``x[i] -= L[i][j] *
        x[j]``: LLVM 0.88x gcc with the FMA chain)."""
        return (len(inits) <= 2 and all(ir.is_float(x.dtype) for x in inits)
                and not any(isinstance(x, ir.For) for x in ir.walk_stmts(s.body)))

    def promoted_loop(self, s: ir.For, step: int, held: list, md: str) -> None:
        """A serial loop with elements held in registers (phis): loaded before it
        (or taken from the enclosing loop's register), stored after it, only if
        it runs; an enclosing loop's register gets a phi where the two paths meet."""
        f, reg = self.f, self.spromoted
        lo = self.index(s.lo)
        go, done = f.label("hold"), f.label("endhold")
        test = f.op(f"icmp slt i64 {lo.t}, {self.index(s.hi).t}")
        pre = f.cur
        f.cbr(test, go, done)
        f.start(go)
        f.emit(f"; {', '.join(sorted({a for a, _, _ in held}))} held in registers over loop {name_hint(s.var)}")
        outer = {k: reg.get(k) for _, _, k in held}
        inits = [self.ex(ir.Load(a, ix, self.array(a).dtype)) for a, ix, _ in held]

        chain = self._latency_chain(s, inits)

        def body(v, regs):
            for (_, _, k), x, r in zip(held, inits, regs):
                reg[k] = Val(r, x.dtype)
                if chain:
                    self.chains.add(r)
            self.with_var(s.var, Val(v, "int64"), s.body)
            return [reg[k].t for _, _, k in held]

        final = self.carried_loop(s.var, lo.t, lambda: self.index(s.hi).t, step,
                                  [(LLT[x.dtype], x.t) for x in inits], body, md)
        self.chains.clear()             # the chain ends with the (innermost) loop
        for (a, ix, k), x, r in zip(held, inits, final):
            if outer[k] is None:
                reg.pop(k, None)
                self.with_var(ACC, Val(r, x.dtype), ir.Store(a, ix, ir.Var(ACC, x.dtype)))
            else:
                reg[k] = Val(r, x.dtype)
        post = f.cur
        f.br(done)
        f.start(done)
        for (_, _, k), x in zip(held, inits):
            if outer[k] is not None:
                reg[k] = Val(f.op(f"phi {LLT[x.dtype]} [ {outer[k].t}, %{pre} ], [ {reg[k].t}, %{post} ]"),
                             x.dtype)


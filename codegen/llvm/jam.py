"""LLVM backend: unroll-and-jam of column walks (the rule in :mod:`codegen.jam`),
a mixin of :class:`codegen.llvm.stmt.Lowering`.

``for j: for i: body(i, j)`` becomes

    for (j = lo; j < lo + ((hi - lo) / n) * n; j += n)   // (hi - lo) taken as >= 0
      for i: body(i, j); body(i, j + 1); ...; body(i, j + n - 1)
    for (j = ...; j < hi; j++)                           // the remainder
      for i: body(i, j)

emitted directly (LLVM's own pass, asked by metadata, failed on some nests
and then printed a warning).  The outer loop's iterator of copy ``u`` is
``j + u``; the inner loop's bounds do not depend on ``j`` (the rule)."""
from __future__ import annotations

from .. import ir, jam
from .lower import Val, _san


class JamLowering:
    def jammed_loop(self, s: ir.For, n: int) -> None:
        f = self.f
        inner = jam.inner_loop(s)
        f.emit(f"; loop {_san(s.var)}: unroll-and-jam {n} into loop {_san(inner.var)} "
               f"(a column walk: codegen.jam)")
        lo, hi = self.index(s.lo).t, self.index(s.hi).t
        span = f.op(f"sub i64 {hi}, {lo}")
        span = f.op(f"select i1 {f.op(f'icmp sgt i64 {span}, 0')}, i64 {span}, i64 0")
        whole = f.op(f"mul i64 {f.op(f'sdiv i64 {span}, {n}')}, {n}")
        end = f.op(f"add i64 {lo}, {whole}", "jamend")

        def copies(jj):
            def body(iv):
                for u in range(n):
                    ju = jj if u == 0 else f.op(f"add nsw i64 {jj}, {u}")
                    saved = self.env
                    self.env = dict(saved)
                    self.env[s.var] = Val(ju, "int64")
                    try:
                        self.with_var(inner.var, Val(iv, "int64"), inner.body)
                    finally:
                        self.env = saved
            self.counted_loop(inner.var, self.index(inner.lo).t, lambda: self.index(inner.hi).t,
                              inner.step, body)

        self.counted_loop(s.var, lo, end, n, copies)
        self.counted_loop(s.var, end, hi, 1, lambda v: self.with_var(s.var, Val(v, "int64"), s.body))

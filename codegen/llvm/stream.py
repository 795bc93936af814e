"""LLVM backend: the stores of :class:`codegen.ir.StreamStore` (the schedule's
``store_nontemporal()``) and their fences (mixed into the expression
lowering).  A contiguous vector of 64 bytes is stored with ``!nontemporal``
(``vmovntps``) where its address starts a cache line, tested when it runs,
and plainly elsewhere: LLVM lowers a misaligned non-temporal vector store
to 8-byte ``movnti``/``movntsd`` pieces, slower than a plain store.  (The C
backend, :mod:`codegen.c.stream`, also streams misaligned rows, holding
the lanes of a partial line in registers between vectors; this backend
does not.)  Other stores of such a statement stay plain."""
from __future__ import annotations

from .. import ir


class StreamMixin:
    """Needs :class:`codegen.llvm.expr.ExprLowering` (``f``, ``m``, ``host``)."""

    def stream_line(self, ty: str, x: str, ptr: str, al: int) -> None:
        """A vector of 64 bytes of a streaming store (:class:`ir.StreamStore`):
        where it fills a cache line (its address a multiple of 64), written
        past the caches (``!nontemporal``: ``vmovntps``), else a plain store
        (LLVM would split a misaligned one into 8-byte ``movnti``, slower
        than the plain store)."""
        f = self.f
        at = f.op(f"ptrtoint ptr {ptr} to i64")
        aligned = f.op(f"icmp eq i64 {f.op(f'and i64 {at}, 63')}, 0")
        nt, plain, done = f.label("nt"), f.label("st"), f.label("stdone")
        f.cbr(aligned, nt, plain)
        f.start(nt)
        f.emit(f"store {ty} {x}, ptr {ptr}, align 64, !nontemporal {self.m.nontemporal()}")
        f.br(done)
        f.start(plain)
        f.emit(f"store {ty} {x}, ptr {ptr}, align {al}")
        f.br(done)
        f.start(done)

    def stream_fence(self, body) -> None:
        """Ends a thread's work (a parallel range, the kernel) that streams
        with ``sfence``: its streamed stores visible to the others after it."""
        if any(isinstance(x, ir.StreamStore) for x in ir.walk_stmts(body)):
            if self.host.triple.startswith(("x86_64", "i686", "i386")):
                self.m.declare("llvm.x86.sse.sfence", "void", [])
                self.f.emit("call void @llvm.x86.sse.sfence()")
            else:
                self.f.emit("fence seq_cst")

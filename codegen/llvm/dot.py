"""LLVM backend: the vector loops :mod:`codegen.dotprod` tagged, as the
AVX-512 intrinsics ``llvm.x86.avx512bf16.dpbf16ps.512`` (vdpbf16ps: bfloat16
pairs into float32) and ``llvm.x86.avx512.vpdpbusd.512`` (vpdpbusd: u8 x s8
quadruples into int32), one call per store and 16 lanes: the accumulator's
16 lanes loaded, the pair operand's 32 bits broadcast, the packed operand's
64 bytes loaded, the call, the store (mixed into the statement lowering)."""
from __future__ import annotations

from .. import dotprod
from .lower import Val, name_hint

_BF16 = "llvm.x86.avx512bf16.dpbf16ps.512"
_VNNI = "llvm.x86.avx512.vpdpbusd.512"
_WHAT = {"bf16": "bfloat16 pairs (vdpbf16ps)", "u8s8": "u8 x s8 quadruples (vpdpbusd)"}


class DotLowering:
    """Needs :class:`codegen.llvm.stmt.Lowering` (``counted_loop``, ``env``,
    ``index``, ``array``, ``indices``, ``addr``, ``m``, ``f``)."""

    def dot_loop(self, s) -> None:
        kind, f = s.attrs["dot"], self.f
        f.emit(f"; loop {name_hint(s.var)}: dot products of {_WHAT[kind]}, "
               f"{dotprod.LANES} lanes a step")
        if kind == "bf16":
            self.m.declare(_BF16, "<16 x float>", ["<16 x float>", "<32 x bfloat>", "<32 x bfloat>"])
        else:
            self.m.declare(_VNNI, "<16 x i32>", ["<16 x i32>", "<64 x i8>", "<64 x i8>"])

        def body(v):
            saved = self.env
            self.env = dict(saved)
            self.env[s.var] = Val(v, "int64")
            try:
                for d in s.attrs["dot_stores"]:
                    self._dot_store(kind, d)
            finally:
                self.env = saved
        self.counted_loop(s.var, self.index(s.lo).t, lambda: self.index(s.hi).t, dotprod.LANES,
                          body)

    def _ptr(self, name, index) -> str:
        a = self.array(name)
        return self.addr(a, self.indices(a, index, name))

    def _dot_store(self, kind: str, d) -> None:
        f = self.f
        acc_t = "<16 x float>" if kind == "bf16" else "<16 x i32>"
        op_t = "<32 x bfloat>" if kind == "bf16" else "<64 x i8>"
        px = self._ptr(d.array, d.index)
        x = f.op(f"load {acc_t}, ptr {px}, align 4", "dacc")
        p = f.op(f"load i32, ptr {self._ptr(d.pair.array, d.pair.index)}, align 1", "dpair")
        p = f.op(f"insertelement <16 x i32> poison, i32 {p}, i64 0")
        p = f.op(f"shufflevector <16 x i32> {p}, <16 x i32> poison, <16 x i32> zeroinitializer")
        p = f.op(f"bitcast <16 x i32> {p} to {op_t}")
        lanes = f.op(f"load {op_t}, ptr {self._ptr(d.lanes.array, d.lanes.index)}, align 1",
                     "dlanes")
        if kind == "bf16":
            r = f.op(f"call <16 x float> @{_BF16}({acc_t} {x}, {op_t} {p}, {op_t} {lanes})")
        else:
            u, s8 = (p, lanes) if d.pair.dtype == "uint8" else (lanes, p)
            r = f.op(f"call <16 x i32> @{_VNNI}({acc_t} {x}, {op_t} {u}, {op_t} {s8})")
        f.emit(f"store {acc_t} {r}, ptr {px}, align 4")

"""C backend: the vector loops :mod:`codegen.dotprod` tagged, as AVX-512
intrinsics (``<immintrin.h>``; the kernel is compiled with ``-march=native``
on a host that has them): ``_mm512_dpbf16_ps`` (vdpbf16ps) for bfloat16
pairs into float32, ``_mm512_dpbusd_epi32`` (vpdpbusd) for u8 x s8
quadruples into int32, one per store and 16 lanes (mixed into the C emitter)::

    /* loop j1: dot products of bfloat16 pairs (vdpbf16ps), 16 lanes a step */
    for (int64_t j1 = 0; j1 < 16; j1 += 16) {
      _mm512_storeu_ps(&C[i][16 * j0 + j1], _mm512_dpbf16_ps(_mm512_loadu_ps(&C[i][16 * j0 + j1]),
          (__m512bh)_mm512_set1_epi32(tp_ld32(&A[i][2 * k0])), (__m512bh)_mm512_loadu_si512(&Bp[16 * j0 + j1][0])));
    }
"""
from __future__ import annotations

from .. import dotprod

DOT_SOURCE = ("#include <immintrin.h>\n"
              "static inline int32_t tp_ld32(const void *p) { int32_t v; memcpy(&v, p, 4); return v; }")
_WHAT = {"bf16": "bfloat16 pairs (vdpbf16ps)", "u8s8": "u8 x s8 quadruples (vpdpbusd)"}


class DotMixin:
    """Needs :class:`codegen.c.emit.CPrinter` (``expr``, ``access``, ``out``, ``helper``)."""

    def dot_loop(self, s, ind: int) -> None:
        kind, v = s.attrs["dot"], s.var
        self.helper("tp_dot")
        self.out(ind, f"/* loop {v}: dot products of {_WHAT[kind]}, {dotprod.LANES} lanes a step */")
        self.out(ind, f"for (int64_t {v} = {self.expr(s.lo)}; {v} < {self.expr(s.hi)}; "
                      f"{v} += {dotprod.LANES}) {{")
        for d in s.attrs["dot_stores"]:
            x = f"&{self.access(d.array, d.index)}"
            pair = f"_mm512_set1_epi32(tp_ld32(&{self.access(d.pair.array, d.pair.index)}))"
            lanes = f"_mm512_loadu_si512(&{self.access(d.lanes.array, d.lanes.index)})"
            if kind == "bf16":
                val = (f"_mm512_dpbf16_ps(_mm512_loadu_ps({x}), (__m512bh){pair}, "
                       f"(__m512bh){lanes})")
                self.out(ind + 1, f"_mm512_storeu_ps({x}, {val});")
            else:
                u, s8 = (pair, lanes) if d.pair.dtype == "uint8" else (lanes, pair)
                val = f"_mm512_dpbusd_epi32(_mm512_loadu_si512({x}), {u}, {s8})"
                self.out(ind + 1, f"_mm512_storeu_si512({x}, {val});")
        self.out(ind, "}")

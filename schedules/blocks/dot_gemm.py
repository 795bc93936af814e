"""Reduced-precision GEMM, written with the public language only: bfloat16 /
float16 operands accumulated in float32 (the result rounded once to the
operands' type, as torch's ``a @ b``), and int8 x int8 into int32
(``torch._int_mm``'s contract).

The reduction is split into pairs (bf16, fp16) or quadruples (int8) and the
columns' operand B is packed by a ``cache_at`` + ``store_in`` into
``Bp[k / n, j, k % n]``: each column's ``n`` values of a k-step adjacent,
the layout of the dot-product instructions (:mod:`codegen.dotprod`), so that
on a host with AVX-512 BF16 / VNNI the vector loop over 16 columns is one
``vdpbf16ps`` / ``vpdpbusd`` per row and k-step; elsewhere the same kernel
runs with conversions and float32 (int32) multiply-adds::

    jc  (NC columns)   pack B[:, jc] -> Bp[K/n][M][n]
     ic (MR rows)
      jr (NV x 16 columns)
       k0  (K/n steps; the MR x NV vectors of acc local, in registers)
        iu  unrolled (MR rows)
         ju  unrolled (NV vectors)
          jv  vectorised (16 columns)
           k1  unrolled (n)            acc[i, j] += A[i, n*k0 + k1] * Bp[k0, j, k1]
    C[i, j] = cast(acc[i, j])

int8: ``vpdpbusd`` multiplies unsigned by signed bytes, so A is shifted to
unsigned first (``Au = A + 128`` as uint8, a copy in the DSL) and the
compensation ``128 * sum_k B[k, j]`` (a column sum, int32) is subtracted
from the result: ``sum (a + 128) b - 128 sum b = sum a b``, exact in
wrapping int32 arithmetic.
"""
from __future__ import annotations

import tiramisu_py as tp

from ..host import host

PAIR = {"bfloat16": 2, "float16": 2, "int8": 4}
LANES = 16           # float32/int32 lanes of a 512-bit vector; the vector loop's width


def function(n, m, k, dtype, batch=None, mr=4, nc=None):
    """The scheduled Function of ``(n x k) @ (k x m)`` in ``dtype``
    ("bfloat16", "float16" or "int8"; ``batch``: that many products)."""
    pair = PAIR[dtype]
    t = getattr(tp, dtype)
    acc_t, out_t = (tp.int32, tp.int32) if dtype == "int8" else (tp.float32, t)
    f = tp.Function(f"gemm_{dtype}" if batch is None else f"batched_gemm_{dtype}",
                    params={"N": n, "M": m, "K": k, **({} if batch is None else {"NB": batch})})
    i, j, kk = f.var("i", 0, "N"), f.var("j", 0, "M"), f.var("k", 0, "K")
    outer = [] if batch is None else [f.var("b", 0, "NB")]
    lead = () if batch is None else ("NB",)
    a = f.input("A", (*lead, "N", "K"), t)
    b = f.input("B", (*lead, "K", "M"), t)
    if dtype == "int8":
        au = f.computation("Au", [*outer, i, kk], tp.cast(a[(*outer, i, kk)] + 128, tp.uint8))
        colsum = f.computation("colsum", [*outer, j], 0, dtype=tp.int32)
        colsum[(*outer, j)] += tp.cast(b[(*outer, kk, j)], tp.int32)
        left = au
    else:
        left = a
    acc = f.computation("acc", [*outer, i, j], 0, dtype=acc_t)
    acc[(*outer, i, j)] += tp.cast(left[(*outer, i, kk)], acc_t) * tp.cast(b[(*outer, kk, j)], acc_t)
    value = acc[(*outer, i, j)]
    if dtype == "int8":
        value = value - 128 * colsum[(*outer, j)]
    c = f.computation("C", [*outer, i, j], value, dtype=out_t)
    # the O(n^2) passes: rows in parallel, the contiguous loop in vectors
    rows = "b" if batch is not None else "i"
    for s in (acc, c):
        s.vectorize(j, LANES)
        s.parallelize(rows)
    if dtype == "int8":
        au.vectorize(kk, LANES)
        au.parallelize(rows)
        colsum.vectorize(j, LANES)
        colsum.update.interchange(j, kk)        # B read along its rows
        colsum.update.vectorize(j, LANES)
    schedule(f, acc.update, b, pair, n, m, k, mr, nc, outer)
    return f


def schedule(f, update, b, pair, n, m, k, mr=4, nc=None, outer=(), nv=None):
    """Pairs along k, B packed per column block, a register block of ``mr``
    rows (unrolled) by ``nv`` vectors of 16 columns (unrolled, vectorised),
    its accumulators local over the k-steps (see the module docstring)."""
    h = host()
    vectors = -(-m // LANES)
    # mr x nv accumulators in about 3/4 of the registers, one more for B's vector
    nv = nv or max(1, min(4, vectors, (h.vector_registers * 3 // 4) // mr))
    width = nv * LANES
    nc = nc or max(width, min(-(-m // width) * width,
                              h.l2 // 4 // max(1, 2 * k) // width * width))
    i, j, kk = "i", "j", "k"
    update.split(kk, pair, names=("k0", "k1"))
    update.split(i, mr, names=("ic", "iu"))
    update.split(j, nc, names=("jc", "j_")).split("j_", width, names=("jr", "j2"))
    update.split("j2", LANES, names=("ju", "jv"))
    update.reorder(*[o.name for o in outer], "jc", "ic", "jr", "k0", "iu", "ju", "jv", "k1")
    bp = update.cache_at(b, "jc", name="B_packed")
    kb, jb = bp.vars[-2], bp.vars[-1]
    # BLIS's panel: per block of NV x 16 columns, the k-steps one after the
    # other, each one the block's pairs (contiguous: one stream per micro-kernel)
    bp.store_in(f.buffer("B_pairs", (-(-nc // width), -(-k // pair), width, pair), b.dtype),
                [(jb % nc) // width, kb // pair, jb % width, kb % pair])
    if k % pair == 0:
        # per k-step, column by column, the pair (quadruple) of rows unrolled:
        # the panel written in order, no division per element
        bp.split(kb, pair, names=("kp0", "kp1"))
        bp.reorder("kp0", jb.name, "kp1")
        bp.unroll("kp1", pair)
    update.unroll("iu", mr)
    update.unroll("ju", nv)
    update.vectorize("jv", LANES)
    update.unroll("k1", pair)
    update.accumulate_locally("k0", allow_reassociation=True)   # acc starts at 0: combined once
    update.parallelize("jc" if -(-m // nc) >= h.cores else "ic")
    return bp

"""Reduced-precision GEMM, written with the public language only: bfloat16 /
float16 operands accumulated in float32 (the result rounded once to the
operands' type, as torch's ``a @ b``), and int8 x int8 into int32
(``torch._int_mm``'s contract).

The reduction is split into pairs (bf16, fp16) or quadruples (int8), and the
operand that varies along the columns, B, is packed by a ``cache_at`` +
``store_in`` into panels ``Bp[j / W][k / n][j % W][k % n]``: each column's
``n`` values of a k-step adjacent, the layout of the dot-product
instructions (:mod:`codegen.dotprod`), so that on a host with AVX-512 BF16 /
VNNI the vector loop over 16 columns is one ``vdpbf16ps`` / ``vpdpbusd`` per
row and k-step; elsewhere the same kernel runs with conversions and float32
(int32) multiply-adds.  The loops are BLIS's::

    jc  (NC columns)   pack B[:, jc] -> Bp[NC/W][K/n][W][n]
     ic  (MC rows: the MC x NC block of acc set to its initial value here,
          so that it is in L1 when the micro-kernels add to it; when all of
          K is one KC block, per register block instead, just before jr's
          micro-kernel: its stores drain while the micro-kernel runs)
      kc  (KC k-steps)
       ir  (MR rows: A's MR x KC n-tuples stay in L1)
        jr  (W = NV x 16 columns: a KC-deep micro-panel of Bp)
         k0  (the k-steps; the MR x NV vectors of acc local, in registers)
          iu  unrolled (MR rows: one broadcast of A's n-tuple each)
           ju  unrolled (NV vectors)
            jv  vectorised (16 columns)
             k1  unrolled (n)          acc[i, j] += A[i, n*k0 + k1] * Bp[.., j, k1]
    C[i, j] = cast(acc[i, j])          (bf16/fp16; int8 accumulates in C)

int8: ``vpdpbusd`` multiplies unsigned by signed bytes.  B is shifted to
unsigned (``Bu = B + 128`` as uint8, computed per column block by
``compute_at`` and stored in the panel layout: the shift is the packing)
and A, signed, is the broadcast operand, read in place; the
compensation ``128 * sum_k A[i, k]`` (a row sum, int32) is C's initial
value: ``sum a (b + 128) - 128 sum a = sum a b``, exact in wrapping int32
arithmetic.
"""
from __future__ import annotations

import tiramisu_py as tp

from ..host import host

PAIR = {"bfloat16": 2, "float16": 2, "int8": 4}
LANES = 16           # float32/int32 lanes of a 512-bit vector; the vector loop's width


def function(n, m, k, dtype, batch=None, mr=None, nv=None, kc=None, mc=None, nc=None,
             float32_io=False):
    """The scheduled Function of ``(n x k) @ (k x m)`` in ``dtype``
    ("bfloat16", "float16" or "int8"; ``batch``: that many products); the
    tile sizes default to :func:`tiles`.  ``float32_io`` (bfloat16 /
    float16): A is float32, rounded to ``dtype`` (to nearest even) by the
    kernel's first statement, and C is the float32 sums, not rounded (a
    recurrent layer's input projection: :mod:`schedules.solvers.rnn_cpu`)."""
    pair = PAIR[dtype]
    t = getattr(tp, dtype)
    if float32_io and dtype == "int8":
        raise ValueError("function: float32_io is for bfloat16 and float16")
    f = tp.Function(f"gemm_{dtype}" if batch is None else f"batched_gemm_{dtype}",
                    params={"N": n, "M": m, "K": k, **({} if batch is None else {"NB": batch})})
    i, j, kk = f.var("i", 0, "N"), f.var("j", 0, "M"), f.var("k", 0, "K")
    outer = [] if batch is None else [f.var("b", 0, "NB")]
    lead = () if batch is None else ("NB",)
    a = f.input("A", (*lead, "N", "K"), tp.float32 if float32_io else t)
    if float32_io:
        # A's rows rounded once (O(n k)), in parallel, k in vectors
        rounded = f.computation("A_rounded", [*outer, i, kk], tp.cast(a[(*outer, i, kk)], t))
        rounded.vectorize(kk, LANES)
        rounded.parallelize("b" if batch is not None else "i")
        a = rounded
    b = f.input("B", (*lead, "K", "M"), t)
    rows = "b" if batch is not None else "i"
    if dtype == "int8":
        bu = f.computation("Bu", [*outer, kk, j], tp.cast(b[(*outer, kk, j)] + 128, tp.uint8))
        rowsum = f.computation("rowsum", [*outer, i], 0, dtype=tp.int32)
        rowsum[(*outer, i)] += tp.cast(a[(*outer, i, kk)], tp.int32)
        acc = f.computation("C", [*outer, i, j], -128 * rowsum[(*outer, i)], dtype=tp.int32)
        acc[(*outer, i, j)] += tp.cast(a[(*outer, i, kk)], tp.int32) * \
            tp.cast(bu[(*outer, kk, j)], tp.int32)
        rowsum.parallelize(rows)
        packed = bu
    else:
        acc = f.computation("acc", [*outer, i, j], 0, dtype=tp.float32)
        acc[(*outer, i, j)] += tp.cast(a[(*outer, i, kk)], tp.float32) * \
            tp.cast(b[(*outer, kk, j)], tp.float32)
        c = f.computation("C", [*outer, i, j], acc[(*outer, i, j)],
                          dtype=tp.float32 if float32_io else t)
        c.vectorize(j, LANES)          # the O(n^2) pass: rows in parallel, columns in vectors
        c.parallelize(rows)
        packed = b
    p = tiles(m, k, dtype, mr=mr, nv=nv, kc=kc, mc=mc, nc=nc)
    schedule(f, acc, packed, pair, k, p, outer)
    return f


def tiles(m, k, dtype, mr=None, nv=None, kc=None, mc=None, nc=None):
    """The tile sizes of a ``k``-deep product with ``m`` columns, from the
    host: ``mr`` x ``nv`` accumulator vectors in
    3/4 of the registers (6 x 4 with 32; the broadcasts of A and the loads of
    B take the rest), ``kc`` k-steps whose ``mr`` rows of A (n-tuples) stay in
    L1 (all of K when that fits half of L1 at ``mr`` rows, as on 2048), ``nc``
    columns whose packed ``KC x NC`` panel part takes an eighth of L2 (64
    on 2048 int8: 1.1x faster than a quarter's 128), and
    ``mc`` rows whose ``MC x NC`` block of C (int32/float32) takes a quarter
    of L1 (C's rows are long strides apart: a small block, not L2's share,
    stays cached)."""
    h = host()
    pair = PAIR[dtype]
    vectors = -(-max(1, m) // LANES)
    regs = h.vector_registers
    nv = nv or max(1, min(4 if regs >= 32 else 2, vectors))
    mr = mr or max(1, min(8, (regs * 3 // 4) // nv))
    width = nv * LANES
    steps = -(-max(1, k) // pair)
    # bytes of an element; A's mr rows take mr * pair * size bytes a k-step
    size = {"int8": 1}.get(dtype, 2)
    kc = kc or max(1, min(steps, h.l1d // 2 // max(1, mr * pair * size)))
    nc = nc or max(width, min(-(-m // width) * width,
                              h.l2 // 8 // max(1, kc * pair * size) // width * width))
    mc = mc or max(mr, h.l1d // 4 // (4 * nc) // mr * mr)
    # whole panels of columns per core, else the threads share the rows
    parallel = "jc" if -(-m // nc) >= h.cores else "ic"
    return dict(mr=mr, nv=nv, kc=kc, mc=mc, nc=nc, parallel=parallel)


def schedule(f, acc, b, pair, k, p, outer=()):
    """BLIS's loops over ``acc.update`` (see the module docstring): pairs
    along k, B packed per column block, a register block of ``mr`` rows
    (unrolled) by ``nv`` vectors of 16 columns (unrolled, vectorised), its
    accumulators local over the k-steps; ``acc``'s initial values computed
    per (jc, ic) block, just before it (per register block when K is one
    block).  ``b``: an input, packed by ``cache_at``, or a computation
    (int8's ``Bu``), computed per column block in the panel layout.
    ``p``: :func:`tiles`."""
    mr, nv, kc, mc, nc = p["mr"], p["nv"], p["kc"], p["mc"], p["nc"]
    update = acc.update
    width = nv * LANES
    lead = [o.name for o in outer]
    update.split("k", pair, names=("k0", "k1"))
    update.split("k0", kc, names=("kc", "ks"))

    def register_blocks(c):
        """i -> ic, ir, iu and j -> jc, jr, ju, jv (BLIS's blocks) on ``c``."""
        c.split("i", mc, names=("ic", "i_")).split("i_", mr, names=("ir", "iu"))
        c.split("j", nc, names=("jc", "j_")).split("j_", width, names=("jr", "j2"))
        c.split("j2", LANES, names=("ju", "jv"))
    register_blocks(update)
    one_block = -(-k // pair) <= kc
    if one_block:
        # all of k in one block: acc's initial values per register block,
        # stored just before its micro-kernel (the stores drain while it runs)
        update.reorder(*lead, "jc", "ic", "ir", "jr", "kc", "ks", "iu", "ju", "jv", "k1")
        register_blocks(acc)
        acc.reorder(*lead, "jc", "ic", "ir", "jr", "iu", "ju", "jv")
        acc.vectorize("jv", LANES)
        update.after(acc, "jr")
    else:
        update.reorder(*lead, "jc", "ic", "kc", "ir", "jr", "ks", "iu", "ju", "jv", "k1")
        # acc's initial values per (jc, ic) block, just before the block's
        # micro-kernels add to it: in L1 then, not written out and read back
        acc.split("i", mc, names=("ic", "i_")).split("j", nc, names=("jc", "j_"))
        acc.reorder(*lead, "jc", "ic", "i_", "j_")
        acc.split("j_", LANES, names=("j0", "j1"))
        acc.vectorize("j1", LANES)
        update.after(acc, "ic")
    if isinstance(b, tp.Computation):
        # int8's shift to unsigned is the packing itself: Bu computed per
        # column block, stored in the panel layout
        b.compute_at(update, "jc")
        bp = b
    else:
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
    update.accumulate_locally("ks", allow_reassociation=True)   # from 0, added to acc once
    update.parallelize(p["parallel"])
    return bp

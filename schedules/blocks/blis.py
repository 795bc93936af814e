"""GEMM and batched GEMM (float32, or float64 with ``dtype=tp.float64``): the algorithm in three lines, and a Goto/BLIS
style schedule written with the public scheduling language only.

The schedule (for ``C[i, j] += A[i, k] * B[k, j]``)::

    jc  (NC columns of B)
     pack B[:, jc] -> Bp[NC/NR][K][NR]         cache_at + store_in (parallel copy
                                               when ic is the parallel loop)
     ic  (MC rows of A; the thread's MC x NC block of C stays in L2)
      kc  (KC rows: the depth of one rank-KC update; Bp's KC x NC part in L2)
       ir  (MR rows: these MR x KC elements of A stay in L1, read in place)
        jr  (NR columns: a KC x NR micro-panel of Bp, streamed from L2)
         kk  (the KC-deep rank-1 updates)
          iu  unrolled (MR rows: broadcasts of A)
           jv  vectorised (NR columns)         -> MR x NR accumulators in registers:
                                                  accumulate_locally(kk) starts them
                                                  at zero and adds them to C once

``jc`` or ``ic`` is the parallel loop (``GemmParams.parallel``): with ``jc``
each thread packs its own panel of B (privatised) in one parallel region.
``GemmParams(micro="jr", pack_a=True)`` gives BLIS's own order instead: ``jr``
outside ``ir`` with B's micro-panel in L1, and A packed per (ic, kc) into
``Ap[MC/MR][KC][MR]``.

Tile sizes come from the machine (:mod:`schedules.host`), see
:func:`default_params`; pass your own :class:`GemmParams` to tune.
"""
from __future__ import annotations

from dataclasses import dataclass

import tiramisu_py as tp

from ..core.kernels import kernel as _kernel
from ..host import host


@dataclass(frozen=True)
class GemmParams:
    mr: int          # rows of the register block (unrolled)
    nr: int          # columns of the register block (vectorised)
    kc: int          # depth of a packed panel
    mc: int          # rows of a packed block of A
    nc: int          # columns of a packed panel of B
    vector: int      # SIMD lanes
    parallel: str = "ic"   # the parallel loop: "ic" (threads share B's panel), "jc", or
                           # "b" (a batch's products: each thread packs its own panels)
    micro: str = "ir"      # the outer micro loop: "ir" (A's MR rows stay in L1, B's
                           # micro-panels stream) or "jr" (B's micro-panel stays in L1)
    pack_a: bool = False   # copy MC x KC blocks of A into MR x KC slivers first


def _round_up(x, m):
    return -(-x // m) * m


def _balanced(extent, limit, multiple):
    """The tile size <= ``limit`` (a multiple of ``multiple``) that splits
    ``extent`` into the fewest, most even tiles."""
    limit = max(multiple, limit // multiple * multiple)
    tiles = -(-extent // limit)
    return min(limit, _round_up(-(-extent // tiles), multiple))


# a product with B given transposed and at most this many rows of A takes a register block of
# 8 rows x 2 vectors on a host of 32 vector registers (see default_params)
FEW_ROWS = 128


def default_params(n, m, k, machine=None, itemsize=4, batch=None,
                   b_transposed=False) -> GemmParams:
    """Tile sizes for an ``n x k`` by ``k x m`` product on this machine.

    The register block's MR x NR accumulators take about 3/4 of the SIMD
    registers.  The micro-kernel's MR rows of A (KC deep, read in place: a
    broadcast operand needs no packing) stay in L1, up to 3/8 of it (a
    quarter gave KC 256 for K = 512, two passes over C: on 512^3, 2 threads,
    KC 512 / NC 128 measured 9% faster, 2% on 1024^3, even on 2048^3),
    while the KC x NR micro-panels of B stream from a KC x NC panel in a
    quarter of L2 (with the MC x NC block of C in another quarter: a deeper KC
    means C's tiles are loaded and stored fewer times; on 2048^3 KC 512 / NC
    256 measured 1-4% faster than KC 344 / NC 512, a fifth of L1, half of L2).
    The parallel loop is ``jc`` (each thread packs and streams its own panels
    of B, one parallel region) when there are enough columns for a whole
    number of panels per core, else ``ic`` (threads share the panel of B) with
    at least two blocks of rows per core.  A ``batch`` of products with as
    many products per core (a whole number, or at least four) runs them in
    parallel instead ("b"): each thread packs its own panels, one parallel
    loop and no barrier a call (a barrier a product, 512 for 256 small ones,
    made a busy machine's descheduled thread cost each of them a scheduler
    slice).  ``itemsize``: bytes of an element (4: float32, 8: float64; the
    lanes and the cache budgets follow it).

    With B given transposed (``b_transposed``: ``nn.Linear``'s weight as
    stored) and at most :data:`FEW_ROWS` rows of A, the register block is 8
    rows by 2 vectors (float32, hosts of 32 vector registers): its packing of B
    reads NR rows of B^T at once, and with few rows of A to amortise it,
    6 rows by 4 vectors measured 1.0-1.6x slower on 25 shapes of 24 to 128
    rows (64 x 8000 x 256, a seq2seq's output layer at batch 2: 1.19x;
    64 x 4096 x 512: 1.43x), never faster; with B as it is the two blocks
    measured alike (0.95-1.12x), so it keeps 6 by 4.  KC is the default
    block's (what was measured): the same sums in the same order, so the
    same bits as the 6 by 4 block and as B passed untransposed."""
    h = machine or host()
    # an empty product (a zero extent) is tiled as a 1 x 1 x 1 one: its loops
    # run no iteration, the tiles only need to be valid
    n, m, k = max(1, n), max(1, m), max(1, k)
    lanes = h.lanes(itemsize)
    # NR = 4 vectors with 32 registers, 2 with 16: MR x NR/lanes accumulators
    # take 3/4 of the registers (6 x 64 on AVX-512 measured ~7% faster than
    # 8 x 32: 4 loads and 6 broadcasts per 24 FMAs instead of 2 and 8 per 16)
    vectors = 4 if h.vector_registers >= 32 else 2
    mr = max(2, min(8, h.vector_registers * 3 // 4 // vectors))
    kc = _balanced(k, max(64, h.l1d * 3 // 8 // (itemsize * mr)), 8) if k > 64 else k
    if b_transposed and n <= FEW_ROWS and h.vector_registers >= 32 and batch is None \
            and itemsize == 4:
        # (KC stays the default block's: each C element's sums in the same order, the bits
        # of a product the same whichever block runs it, B given transposed or not)
        vectors, mr = 2, 8
    nr = vectors * lanes
    nr = min(nr, _round_up(m, lanes))
    nc_limit = max(nr, h.l2 // 4 // (itemsize * kc))
    if batch and h.cores > 1 and batch >= h.cores and (batch % h.cores == 0
                                                       or batch >= 4 * h.cores):
        nc = _balanced(m, nc_limit, nr)
        mc = _balanced(n, max(mr, h.l2 // 4 // (itemsize * nc)), mr)
        parallel = "b"
    elif m >= h.cores * 4 * nr:
        # a multiple of ``cores`` panels, each at most nc_limit wide
        rounds = -(-m // (h.cores * nc_limit))
        nc = _round_up(-(-m // (h.cores * rounds)), nr)
        mc = _balanced(n, max(mr, h.l2 // 4 // (itemsize * nc)), mr)
        parallel = "jc"
    else:
        nc = _balanced(m, nc_limit, nr)
        per_thread = _round_up(-(-n // (2 * h.cores)), mr)
        mc = _balanced(n, max(mr, min(per_thread, h.l2 // 4 // (itemsize * nc))), mr)
        parallel = "ic"
    return GemmParams(mr=mr, nr=nr, kc=kc, mc=mc, nc=nc, vector=min(lanes, nr),
                      parallel=parallel)


def algorithm(n, m, k, batch=None, dtype=tp.float32, b_transposed=False):
    """The unscheduled ``C = A @ B`` (``batch``: a leading batch dimension) of
    ``dtype`` (float32 or float64) matrices; ``b_transposed``: B given as its
    transpose, an ``M x K`` matrix read ``B[j, k]``, as ``nn.Linear`` stores
    its weight."""
    if b_transposed and batch is not None:
        raise ValueError("gemm: b_transposed is for one (unbatched) product")
    name = "gemm_bt" if b_transposed else "gemm"
    f = tp.Function(name if batch is None else "batched_gemm",
                    params={"N": n, "M": m, "K": k, **({} if batch is None else {"NB": batch})})
    i, j, kk = f.var("i", 0, "N"), f.var("j", 0, "M"), f.var("k", 0, "K")
    if batch is None:
        A = f.input("A", ("N", "K"), dtype)
        B = f.input("B", ("M", "K") if b_transposed else ("K", "M"), dtype)
        C = f.computation("C", [i, j], 0.0, dtype=_explicit(dtype))
        C[i, j] += A[i, kk] * (B[j, kk] if b_transposed else B[kk, j])
    else:
        b = f.var("b", 0, "NB")
        A = f.input("A", ("NB", "N", "K"), dtype)
        B = f.input("B", ("NB", "K", "M"), dtype)
        C = f.computation("C", [b, i, j], 0.0, dtype=_explicit(dtype))
        C[b, i, j] += A[b, i, kk] * B[b, kk, j]
    return f


def _explicit(dtype):
    """The dtype= of C: none for float32 (the float32 algorithm stays as it
    always was written, so its generated code is unchanged)."""
    return None if dtype is tp.float32 else dtype


def blis(update, a, b, i, j, k, p: GemmParams, outer=(), depth=None,
         b_transposed=False):
    """Applies the Goto/BLIS schedule to ``update`` (a ``+=`` of ``a[.., i, k] *
    b[.., k, j]`` over loops ``outer..., i, j, k``): tiling, packing of ``b``
    (and of ``a`` with ``p.pack_a``; inputs or computations, or one access
    of one, ``A[j, k]``, where it is read twice; several: a list) into contiguous
    panels, register blocking, parallel ``ic`` or ``jc``.  ``depth``: the
    extent of ``k`` (the packed panel of ``b`` holds all of it).  ``b=None``:
    ``b`` is already stored as packed panels ``[j / NR][k][j % NR]`` and is
    read in place; ``b_transposed``: ``b`` is read ``b[.., j, k]`` (its
    transpose is the operand), and its packing reads it so: the panels are
    the same, no transposed copy of ``b`` is made first.  Returns the packed
    copies (``None`` for one not made)."""
    update.split(i, p.mc, names=("ic", "i_")).split("i_", p.mr, names=("ir", "iu"))
    update.split(j, p.nc, names=("jc", "j_")).split("j_", p.nr, names=("jr", "jv"))
    update.split(k, p.kc, names=("kc", "kk"))
    micro = ("jr", "ir") if p.micro == "jr" else ("ir", "jr")
    update.reorder(*outer, "jc", "ic", "kc", *micro, "kk", "iu", "jv")

    bp = None
    if b is not None:
        packed = [_pack_b(update, x, p, depth, b_transposed)
                  for x in (b if isinstance(b, (list, tuple)) else [b])]
        bp = packed if isinstance(b, (list, tuple)) else packed[0]
    # A is the broadcast operand: read in place by default (its MR x KC
    # elements stay in L1 over the jr loop), or packed per (ic, kc)
    ap = None
    if p.pack_a:
        ap = _pack_a(update, a, p)
    update.unroll("iu", p.mr)
    update.vectorize("jv", p.vector if p.nr % p.vector == 0 else p.nr)
    # the MR x NR block of C accumulates in registers from zero over kk and is
    # added to C once (the micro-kernel never waits on a load of C)
    update.accumulate_locally("kk", allow_reassociation=True)
    update.parallelize(p.parallel)
    return ap, bp


# the rows of B^T packed read along k: from a page to 256 KB (measured, see _pack_b)
ROW_BYTES = (4096, 256 << 10)


def _pack_b(update, b, p, depth, b_transposed):
    """The K x NC panel of ``b`` (a buffer, or one access of it), shared by
    the threads, one NR-wide row of a micro-panel per innermost loop (a
    contiguous vector copy)."""
    f = update.function
    src = getattr(b, "target", b)
    bp = update.cache_at(b, "jc", name=f"{src.name}_packed")
    kb, jb = bp.vars[-2], bp.vars[-1]
    if b_transposed:
        jb, kb = kb, jb
    bp.store_in(f.buffer(f"{src.name}_panel", (-(-p.nc // p.nr), depth, p.nr), src.dtype),
                [(jb % p.nc) // p.nr, kb, jb % p.nr])
    bp.split(jb, p.nr, names=(f"{jb.name}_r", f"{jb.name}_v"))
    if b_transposed and depth and ROW_BYTES[0] <= depth * src.dtype.bits // 8 <= ROW_BYTES[1]:
        # long rows of B^T: each read along k, contiguous, written into the
        # panel's column (NR rows read at once, one element each, touched
        # NR pages per vector: 4096^2 at 64 rows of A took 36 ms, 19 this
        # way, 15 untransposed; rows of 147 or 576 floats measured 10-15%
        # faster the other way, and so did rows of 451 KB, 23 vs 43 ms)
        bp.reorder(f"{jb.name}_r", f"{jb.name}_v", kb)
        bp.split(kb, p.vector, names=(f"{kb.name}_0", f"{kb.name}_1"))
        bp.vectorize(f"{kb.name}_1", p.vector)
        if p.parallel == "ic":
            bp.parallelize(f"{jb.name}_r")
        return bp
    if b_transposed:
        # a transpose: NR rows of B^T read along k (contiguous), written
        # NR-wide into the panel (k outer of the vector: one row per kb)
        bp.reorder(f"{jb.name}_r", kb, f"{jb.name}_v")
        if p.parallel == "ic":
            bp.parallelize(f"{jb.name}_r")
    bp.vectorize(f"{jb.name}_v", p.vector if p.nr % p.vector == 0 else p.nr)
    if p.parallel == "ic" and not b_transposed:
        bp.parallelize(kb)
    return bp


def _pack_a(update, a, p):
    """The MC x KC block of A, one per thread (privatised by a parallel ic), MR
    rows at a time, written contiguously (an MR x KC transpose per sliver)."""
    f = update.function
    ap = update.cache_at(a, "kc", name=f"{a.name}_packed")
    ia, ka = ap.vars[-2], ap.vars[-1]
    ap.store_in(f.buffer(f"{a.name}_block", (-(-p.mc // p.mr), p.kc, p.mr), a.dtype),
                [(ia % p.mc) // p.mr, ka % p.kc, ia % p.mr])
    ap.split(ia, p.mr, names=(f"{ia.name}_r", f"{ia.name}_u"))
    ap.reorder(f"{ia.name}_r", ka, f"{ia.name}_u")
    ap.unroll(f"{ia.name}_u", p.mr)
    return ap


def function(n, m, k, batch=None, params: GemmParams | None = None, dtype=tp.float32,
             b_transposed=False):
    """``C = A @ B`` (``batch``: batched; ``dtype``: float32 or float64;
    ``b_transposed``: B passed as its ``M x K`` transpose) with the BLIS
    schedule; change it or compile it (``.compile(target="llvm")``)."""
    p = params or default_params(n, m, k, itemsize=dtype.bits // 8, batch=batch,
                                 b_transposed=b_transposed)
    if p.parallel == "b" and batch is None:
        raise ValueError("gemm: parallel='b' runs a batch's products in parallel; this GEMM "
                         "has no batch")
    f = algorithm(n, m, k, batch, dtype, b_transposed)
    C = f.computations["C"]
    C.parallelize("b" if batch is not None else "i")
    if p.parallel == "b":
        C.update.after(C, "b")          # each product zeroes its C, then accumulates it
    outer = ("b",) if batch is not None else ()
    blis(C.update, f.buffers["A"], f.buffers["B"], "i", "j", "k", p, outer, depth=k,
         b_transposed=b_transposed)
    return f


def kernel(n, m, k, p: GemmParams, target, batch=None, dtype=tp.float32, b_transposed=False):
    """The compiled ``C = A @ B`` of these sizes and tiles (``batch``:
    batched; ``dtype``: float32 or float64; ``b_transposed``: B passed as
    ``M x K``), once per process: the GEMM solvers' kernel, and the RNN
    layer's input projection."""
    wide = () if dtype is tp.float32 else (dtype.name,)     # float32 keys as before
    if b_transposed:
        return _kernel(("gemm_bt", n, m, k, p) + wide,
                       lambda: function(n, m, k, params=p, dtype=dtype, b_transposed=True),
                       target)
    if batch is None:
        return _kernel(("gemm", n, m, k, p) + wide,
                       lambda: function(n, m, k, params=p, dtype=dtype), target)
    return _kernel(("batched_gemm", batch, n, m, k, p) + wide,
                   lambda: function(n, m, k, batch=batch, params=p, dtype=dtype), target)


__all__ = ["GemmParams", "default_params", "algorithm", "blis", "function", "kernel"]

"""The CSR sparse-weight convolution (the weights: :mod:`schedules.weights.csr`).

``sparse_conv2d`` is the direct sparse convolution of Park et al. (ICLR'17),
an algorithm and a schedule in the DSL (:func:`function`):

* per image, the input is zero-padded once into a flat image
  ``x_image[ci*Hp*Wp + y*Wp + x]`` (plus a zero tail, see below);
* ``colidx`` holds, per nonzero ``(co, ci, ky, kx)``, the flat offset
  ``ci*Hp*Wp + ky*dh*Wp + kx*dw`` (:meth:`schedules.CSRWeights.conv_offsets`), so the
  output of row ``co`` at the flat position ``q = y*Wp + x`` is
  ``bias[co] + sum_j val[j] * x_image[colidx[j] + stride*q]``: with stride 1
  every nonzero reads a *contiguous* run of the padded image (no im2col);
* the output row of one channel, in that flat layout (``Wp - Wo`` unused
  columns per row, padded to whole register tiles), is split into tiles of
  ``vector_registers - 2`` SIMD vectors: loops ``n, co, q0, j, qu, qv`` with
  the tile accumulated in registers across the data-dependent nonzero loop
  ``j`` (``accumulate_locally``: one broadcast and one FMA per vector per
  nonzero, the output row touched once per tile), then copied (or, fused,
  pooled with ReLU) to NCHW;
* images are parallel when there are enough of them, else output channels.
"""
from __future__ import annotations

import tiramisu_py as tp

from ..blocks.conv_common import by_group
from ..core.kernels import kernel
from ..core.solver import Solver
from ..host import host
from ..problems.conv import ConvShape, conv_shape
from ..weights.csr import as_csr


# ------------------------------------------------------------------ shape
def pitch(s: ConvShape):
    """Row pitch of the flat output row of shape ``s``: the padded width
    when both strides agree (then an output row is a run of the flat input),
    else Wo."""
    return s.wp if s.sh == s.sw else s.wo


def tile_size(s: ConvShape, vectors=None):
    """``(T, Qp)``: floats per register tile (whole SIMD vectors, at most
    ``vectors``, default two fewer than the vector registers: one holds the
    broadcast weight) and the flat output row padded to whole tiles."""
    lanes = host().lanes(4)
    vectors = vectors or max(1, host().vector_registers - 2)
    q = (s.ho - 1) * pitch(s) + s.wo
    ntiles = -(-q // (vectors * lanes))
    t = -(-(-(-q // ntiles)) // lanes) * lanes
    return t, ntiles * t


def plan(s: ConvShape, vectors=None, rows_outer=None, channel_block=None, density=1.0):
    """The schedule's choices for shape ``s`` and weight ``density``
    (arguments given win): ``tile`` / ``qp`` (:func:`tile_size`), ``size`` /
    ``tail`` (floats of the flat padded image and of the zero tail after it
    that the last tile may read), ``channel_block`` (input channels per
    block, so that one block of the band of input rows a tile reads fills
    half of L1; None or 0: no blocking) and ``rows_outer``: by default when
    the padded image exceeds twice L2 and a block's share of a CSR row holds
    at least 16 nonzeros on average.  Below that the tile loads and stores
    per block cost more than L1 reuse saves, and channels outer won in every
    measurement (8x512x14x14, one run: 7.6 vs 19.5 ms at 1%, 102 vs 108 ms
    at 10%, 351 ms both at 40%; 4x512x28x28: 30 vs 44 ms at 1%, 876 vs 759 ms
    at 40%, where rows outer with blocks wins and unblocked took 938 ms)."""
    t, qp = tile_size(s, vectors)
    size = s.ci * s.hp * s.wp
    # the last read: the largest offset of a nonzero + the last (padded) position
    last = max(s.ci - 1, 0) * s.hp * s.wp + (s.kh - 1) * s.dh * s.wp + (s.kw - 1) * s.dw + \
        (((qp - 1) // pitch(s)) * s.sh * s.wp + ((qp - 1) % pitch(s)) * s.sw if s.sh != s.sw
         else (qp - 1) * s.sh)
    tail = max(0, last + 1 - size)
    if channel_block is None:
        band = (-(-t // pitch(s)) + 1) * s.sh + (s.kh - 1) * s.dh      # input rows a tile reads
        channel_block = max(1, host().l1d // 2 // (band * s.wp * 4))
    if rows_outer is None:
        rows_outer = (4 * (size + tail) > 2 * host().l2
                      and density * min(channel_block or s.ci, s.ci) * s.kh * s.kw >= 16)
    if not rows_outer or not channel_block or channel_block >= s.ci:
        channel_block = None
    return dict(tile=t, qp=qp, size=size, tail=tail, rows_outer=rows_outer,
                channel_block=channel_block)


# ------------------------------------------------------------------ the Function
def function(s: ConvShape, bias=True, pool=1, relu=False, vectors=None, parallel=None,
             rows_outer=None, channel_block=None, density=1.0):
    """The scheduled sparse convolution (``pool > 1``: ``max_pool(relu?(conv))``
    with non-overlapping ``pool x pool`` windows, fused).  Kernel arguments:
    ``data`` (NCHW), ``rowptr`` (int32, Cout + 1), ``colidx`` (int32 flat
    offsets, :meth:`schedules.CSRWeights.conv_offsets`), ``val`` (float32), ``bias``;
    the param ``NNZ`` is the length of ``colidx``/``val``.  ``vectors``:
    SIMD vectors per register tile; ``parallel``: "n" or "co";
    ``rows_outer``: loops ``n, q0, co`` (each tile of output rows for every
    channel, so the band of input rows it reads stays in L2; the image's
    output is kept whole) instead of ``n, co, q0`` (one channel's row at a
    time, in L1).
    ``channel_block`` (rows outer only): loops ``n, q0, b, co, j`` where
    ``b`` runs over blocks of input channels and ``j`` over the nonzeros of
    row ``co`` in block ``b`` (``rowptr`` then has ``Cout * blocks + 1``
    entries, :meth:`CSRWeights.conv_layout`), so the slice of the input
    band one block reads stays in L1 while every channel reads it (4x512x28x28,
    40%: 547 ms with 16 channels per block, 1095 ms unblocked, one run).
    Defaults: :func:`plan` for ``density``."""
    name = "sparse_conv2d" if pool == 1 and not relu else "sparse_conv_relu_maxpool"
    f = tp.Function(name, params=["NNZ"])
    X = f.input("data", (s.n, s.ci, s.h, s.w), tp.float32)
    p = plan(s, vectors, rows_outer, channel_block, density)
    t, qp, size, tail, rows_outer, cb = (p[k] for k in ("tile", "qp", "size", "tail", "rows_outer",
                                                         "channel_block"))
    nb = -(-s.ci // cb) if cb else 1
    rowptr = f.input("rowptr", (s.co * nb + 1,), tp.int32)
    colidx = f.input("colidx", ("NNZ",), tp.int32)
    val = f.input("val", ("NNZ",), tp.float32)
    B = f.input("bias", (s.co,), tp.float32) if bias else None
    lanes = host().lanes(4)

    def offset(q):          # where output position q starts reading the flat image
        if s.sh == s.sw:
            return q * s.sh
        return (q // pitch(s)) * (s.sh * s.wp) + (q % pitch(s)) * s.sw
    plane = s.hp * s.wp
    ximg = f.buffer("x_image", (size + tail,), tp.float32)
    if parallel is None:
        cores = host().cores
        parallel = "n" if s.n >= cores and (s.n % cores == 0 or s.n >= 4 * cores) else "co"
    if parallel not in ("n", "co"):
        raise ValueError(f"{name}: parallel must be 'n' or 'co', got {parallel!r}")

    n = f.var("n", 0, s.n)
    with f.nest(n):
        # the input of image n, zero-padded, flat: x_image[ci*Hp*Wp + y*Wp + x]
        c, y, x = f.var("ic", 0, s.ci), f.var("iy", 0, s.hp), f.var("ix", 0, s.wp)
        inside = (y >= s.ph) & (y < s.h + s.ph) & (x >= s.pw) & (x < s.w + s.pw)
        xp = f.computation("x_padded", [n, c, y, x],
                           tp.select(inside, X[n, c, y - s.ph, x - s.pw], 0.0))
        xp.store_in(ximg, [c * plane + y * s.wp + x])
        if tail:        # read only by the unused positions of the last tile
            e = f.var("it", 0, tail)
            f.computation("x_tail", [n, e], 0.0).store_in(ximg, [size + e])
        co = f.var("co", 0, s.co)
        q = f.var("q", 0, qp)
        if rows_outer:      # tiles outside channels: acc holds the image's output
            b = f.var("b", 0, nb)
            j = f.var("j", rowptr[co * nb + b], rowptr[co * nb + b + 1])  # row co, block b
            acc = f.computation("acc", [n, co, q], B[co] if bias else 0.0)
            acc.store_in(f.buffer("acc_image", (s.co, qp), tp.float32), [co, q])
            acc[n, co, q].reduce("+", val[j] * ximg[colidx[j] + offset(q)],
                                 loops=[n, co, q, b, j])
            out = _write_out(f, s, acc, n, co, pool, relu)
        else:
            j = f.var("j", rowptr[co], rowptr[co + 1])        # the nonzeros of row co
            with f.nest(co):
                acc = f.computation("acc", [n, co, q], B[co] if bias else 0.0)
                acc.store_in(f.buffer("acc_row", (qp,), tp.float32), [q])
                acc[n, co, q].reduce("+", val[j] * ximg[colidx[j] + offset(q)], loops=[n, co, q, j])
                out = _write_out(f, s, acc, n, co, pool, relu)
    u = acc.update
    u.split("q", t, names=("q0", "q1"))
    u.split("q1", lanes, names=("qu", "qv"))
    if rows_outer:
        u.reorder("n", "q0", "b", "co", "j", "qu", "qv")
        acc.split("q", t, names=("q0", "q1"))
        acc.reorder("n", "q0", "co", "q1")
        u.after(acc, "q0")          # the tile's init for every channel, then its blocks
    else:
        u.reorder("n", "co", "q0", "j", "qu", "qv")
    u.accumulate_locally("j", allow_reassociation=True)
    if t > lanes:
        u.unroll("qu", t // lanes)
    u.vectorize("qv", lanes)
    acc.vectorize("q1" if rows_outer else "q", lanes)
    out.vectorize(out.loops[-1], lanes)
    if parallel == "n":
        xp.parallelize("n")
    else:
        xp.parallelize("ic")
        acc.parallelize("co")
        if rows_outer:
            u.parallelize("co")
            out.parallelize("co")
    return f


def _write_out(f, s, acc, n, co, pool, relu):
    """NCHW from the flat row: the copy (``pool == 1``), or the max over each
    pooling window, after ReLU when asked."""
    ph, pw = s.ho // pool, s.wo // pool
    oy, ox = f.var("oy", 0, ph), f.var("ox", 0, pw)
    best = None
    for dy in range(pool):
        for dx in range(pool):
            v = acc[n, co, (oy * pool + dy) * pitch(s) + ox * pool + dx]
            best = v if best is None else tp.max(best, v)
    return f.computation("out", [n, co, oy, ox], tp.max(best, 0.0) if relu else best)


def sparse_conv2d_function(n, ci, h, w, co, kh=3, kw=3, stride=1, padding=0, dilation=1,
                           bias=True, pool=1, relu=False, **schedule):
    """The scheduled Function, to inspect or re-schedule."""
    s = conv_shape((n, ci, h, w), (co, ci, kh, kw), stride, padding, dilation,
                   "sparse_conv2d_function")
    return function(s, bias=bias, pool=pool, relu=relu, **schedule)


class SparseCSR(Solver):
    """The CSR sparse convolution on the CPU (``op`` "conv2d", or the fused
    block "conv_relu_maxpool"): a sparse weight (:class:`schedules.CSRWeights`,
    a torch sparse-CSR tensor, a scipy CSR matrix), or a dense one with
    ``algo="sparse"`` (converted on every call, its zeros dropped).

    Its rule, as ``torch.sparse``'s: **structural zeros are absent**.  Only
    the stored entries are multiplied, so a weight that is not stored never
    meets the input: ``0 * inf`` and ``0 * nan`` are never computed, where a
    dense convolution (and torch's ``conv2d``) gives NaN; an explicitly
    stored 0.0 is multiplied like any value.  So "auto" offers it only for
    a sparse weight, never for a dense one however many zeros it holds
    (``numerics = "structural"``)."""
    name = "sparse"
    numerics = "structural"
    weight = "csr"

    def __init__(self, op):
        self.op = op

    def params(self, p):
        return plan(p.shape, density=1.0 if p.density is None else p.density)

    def space(self, p):
        return {"rows_outer": [False, True]}

    def build(self, p, params):
        order = dict(rows_outer=params["rows_outer"], channel_block=params["channel_block"] or 0)
        return function(p.shape, bias=p.bias, pool=p.pool, relu=p.relu, **order)

    def run(self, p, args):
        return by_group(self._run, p, args)       # the CSR rows of each group

    def _run(self, p, args):
        s = p.shape
        csr = args.csr if args.csr is not None else as_csr(args.w, s.ci)
        params = plan(s, density=csr.density)
        order = dict(rows_outer=params["rows_outer"], channel_block=params["channel_block"] or 0)
        k = kernel(("sparse_conv", s, p.bias, p.pool, p.relu, tuple(order.values())),
                   lambda: self.build(p, params), p.target)
        rowptr, colidx, val = csr.conv_layout(s.kh, s.kw, s.hp, s.wp, s.dh, s.dw,
                                              params["channel_block"])
        kw = dict(data=args.x, rowptr=rowptr, colidx=colidx, val=val)
        if args.b is not None:
            kw["bias"] = args.b
        return k(**kw)

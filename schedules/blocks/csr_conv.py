"""The CSR sparse-weight convolution's Function, which the sparse solvers share
(:mod:`schedules.solvers.conv_sparse`, :mod:`schedules.solvers.resize_conv`;
the weights: :mod:`schedules.weights.csr`).

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
* images are parallel when there are enough of them, else output channels;
* **aligned reads** (stride 1, by default where it adds at most 15% of
  positions): the row pitch is rounded up to whole SIMD vectors and the padded
  image is held ``KW`` times, copy ``kx`` shifted left by ``kx * dw``
  (``x_image[kx*S + ci*Hp*P + y*P + x]`` = the padded input at ``(y, x +
  kx*dw)``), and ``colidx`` offsets into copy ``kx``: every vector a nonzero
  reads then starts on a vector boundary (a read that straddles two cache
  lines costs two; 8x512x14x14 at 50%: 18.3 ms straddling, 13.3 ms aligned,
  one run).
"""
from __future__ import annotations

import tiramisu_py as tp

from ..host import host
from ..problems.conv import ConvShape


# ------------------------------------------------------------------ shape
def pitch(s: ConvShape):
    """Row pitch of the flat output row of shape ``s``: the padded width
    when both strides agree (then an output row is a run of the flat input),
    else Wo."""
    return s.wp if s.sh == s.sw else s.wo


def aligned_pitch(s: ConvShape):
    """The row pitch of the aligned layout (the padded width rounded up to
    whole SIMD vectors), or None where it does not apply (strides other than
    1, a kernel one column wide, no SIMD)."""
    lanes = host().lanes(4)
    if s.sh != 1 or s.sw != 1 or s.kw < 2 or lanes < 2:
        return None
    return -(-s.wp // lanes) * lanes


def tile_size(s: ConvShape, vectors=None, row_pitch=None):
    """``(T, Qp)``: floats per register tile (whole SIMD vectors, at most
    ``vectors``, default two fewer than the vector registers: one holds the
    broadcast weight) and the flat output row (of pitch ``row_pitch``,
    default :func:`pitch`) padded to whole tiles."""
    lanes = host().lanes(4)
    vectors = vectors or max(1, host().vector_registers - 2)
    q = (s.ho - 1) * (row_pitch or pitch(s)) + s.wo
    ntiles = -(-q // (vectors * lanes))
    t = -(-(-(-q // ntiles)) // lanes) * lanes
    return t, ntiles * t


def plan(s: ConvShape, vectors=None, rows_outer=None, channel_block=None, density=1.0,
         aligned=None):
    """The schedule's choices for shape ``s`` and weight ``density``
    (arguments given win): ``aligned`` (the aligned layout of the module's
    doc; asked where it does not apply, it is off; by default where
    :func:`aligned_pitch` applies, adds at most 15% to the row, one
    register tile holds a whole output plane, the density is at least 20%
    and the loops are not asked to be unblocked: then rows outer, with
    blocks of channels whose copies fill L1 (8x512x14x14, one run, ms
    unaligned / aligned: 10%: 4.4 / 5.1, 30%: 11.3 / 10.4, 50%: 17.7 / 15.6
    with 16 channels per block; 17.7 / 26.8 unblocked, the copies streamed
    from L2).  Where a tile is a band of rows the copies shrink the blocks
    and it lost (8x512x28x28 at 30%: 49 vs 58 ms; 32x3x224x224 at 20%: 17
    vs 25 ms): the tuner's space has it, the default does not), ``pitch``
    (the padded image's row pitch), ``row`` (the flat output row's),
    ``copies`` (of the padded image: ``KW`` aligned, else 1) and ``copy``
    (floats per copy, whole vectors), ``tile`` / ``qp``
    (:func:`tile_size`), ``size`` / ``tail`` (floats of one flat padded
    image and of the zero tail after it that the last tile may read),
    ``channel_block`` (input channels per
    block, so that one block of the band of input rows a tile reads fills
    half of L1; None or 0: no blocking) and ``rows_outer``: by default when
    the padded image exceeds twice L2 and a block's share of a CSR row holds
    at least 16 nonzeros on average.  Below that the tile loads and stores
    per block cost more than L1 reuse saves, and channels outer won in every
    measurement (8x512x14x14, one run: 7.6 vs 19.5 ms at 1%, 102 vs 108 ms
    at 10%, 351 ms both at 40%; 4x512x28x28: 30 vs 44 ms at 1%, 876 vs 759 ms
    at 40%, where rows outer with blocks wins and unblocked took 938 ms)."""
    lanes = host().lanes(4)
    ap = aligned_pitch(s)
    if aligned is None:
        whole = ap is not None and tile_size(s, vectors, ap)[0] >= (s.ho - 1) * ap + s.wo
        aligned = (whole and ap <= 1.15 * s.wp and density >= 0.2
                   and rows_outer is not False and channel_block != 0)
        rows_outer = True if aligned and rows_outer is None else rows_outer
    aligned = bool(aligned) and ap is not None
    wp = ap if aligned else s.wp
    row = wp if aligned else pitch(s)           # the flat output row's pitch
    t, qp = tile_size(s, vectors, row)
    size = s.ci * s.hp * wp
    # the last read: the largest offset of a nonzero (within its copy, aligned) + the last
    # (padded) position
    last = max(s.ci - 1, 0) * s.hp * wp + (s.kh - 1) * s.dh * wp + \
        (0 if aligned else (s.kw - 1) * s.dw) + \
        (((qp - 1) // row) * s.sh * wp + ((qp - 1) % row) * s.sw if s.sh != s.sw
         else (qp - 1) * s.sh)
    tail = max(0, last + 1 - size)
    copies = s.kw if aligned else 1
    copy = -(-(size + tail) // lanes) * lanes if aligned else size + tail
    if channel_block is None:
        band = min(s.hp, (-(-t // row) + 1) * s.sh + (s.kh - 1) * s.dh)  # rows a tile reads
        # half of L1 for a block's band, all of it for its copies (aligned)
        channel_block = max(1, host().l1d // (1 if aligned else 2) // (copies * band * wp * 4))
    if rows_outer is None:
        rows_outer = (4 * (size + tail) > 2 * host().l2
                      and density * min(channel_block or s.ci, s.ci) * s.kh * s.kw >= 16)
    if not rows_outer or not channel_block or channel_block >= s.ci:
        channel_block = None
    return dict(tile=t, qp=qp, size=size, tail=tail, rows_outer=rows_outer,
                channel_block=channel_block, aligned=aligned, pitch=wp, row=row, copies=copies,
                copy=copy)


def schedule_args(p):
    """The loop-order arguments of :func:`function` that the plan ``p`` chose."""
    return dict(rows_outer=p["rows_outer"], channel_block=p["channel_block"] or 0,
                aligned=p["aligned"])


def layout(s: ConvShape, p):
    """The arguments of :meth:`schedules.CSRWeights.conv_layout` for the plan
    ``p`` of shape ``s``: the offsets into its padded image (copies)."""
    return dict(kh=s.kh, kw=s.kw, hp=s.hp, wp=p["pitch"], dh=s.dh, dw=s.dw,
                cb=p["channel_block"], copy=p["copy"] if p["aligned"] else 0)


# ------------------------------------------------------------------ the Function
def function(s: ConvShape, bias=True, pool=1, relu=False, vectors=None, parallel=None,
             rows_outer=None, channel_block=None, density=1.0, source=None, name=None,
             aligned=None):
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
    ``aligned``: the aligned layout (module doc; ``colidx`` then from
    :func:`layout`).  Defaults: :func:`plan` for ``density``.  ``source(f)`` (with
    ``name``): declares ``data`` (of its own shape: ``s.h``/``s.w`` are then
    the produced image's) and returns ``(data, value)``, ``value(n, c, y, x)``
    the input at the padded coordinate, evaluated into the flat padded image
    in place of the plain read (:mod:`schedules.solvers.resize_conv`)."""
    name = name or ("sparse_conv2d" if pool == 1 and not relu else "sparse_conv_relu_maxpool")
    f = tp.Function(name, params=["NNZ"])
    X, read = (f.input("data", (s.n, s.ci, s.h, s.w), tp.float32), None) if source is None \
        else source(f)
    p = plan(s, vectors, rows_outer, channel_block, density, aligned)
    t, qp, size, tail, rows_outer, cb = (p[k] for k in ("tile", "qp", "size", "tail", "rows_outer",
                                                         "channel_block"))
    wp, row, copies, copy = p["pitch"], p["row"], p["copies"], p["copy"]
    nb = -(-s.ci // cb) if cb else 1
    rowptr = f.input("rowptr", (s.co * nb + 1,), tp.int32)
    colidx = f.input("colidx", ("NNZ",), tp.int32)
    val = f.input("val", ("NNZ",), tp.float32)
    B = f.input("bias", (s.co,), tp.float32) if bias else None
    lanes = host().lanes(4)

    def offset(q):          # where output position q starts reading the flat image
        if s.sh == s.sw:
            return q * s.sh
        return (q // row) * (s.sh * wp) + (q % row) * s.sw
    plane = s.hp * wp
    ximg = f.buffer("x_image", (copies * copy,), tp.float32)
    if parallel is None:
        cores = host().cores
        parallel = "n" if s.n >= cores and (s.n % cores == 0 or s.n >= 4 * cores) else "co"
    if parallel not in ("n", "co"):
        raise ValueError(f"{name}: parallel must be 'n' or 'co', got {parallel!r}")

    n = f.var("n", 0, s.n)
    with f.nest(n):
        # the input of image n, zero-padded, flat: x_image[ci*Hp*Wp + y*Wp + x]; aligned:
        # copy kx (of pitch P) shifted by kx*dw, x_image[kx*S + ci*Hp*P + y*P + x]
        c, y = f.var("ic", 0, s.ci), f.var("iy", 0, s.hp)

        def padded(xs):
            inside = (y >= s.ph) & (y < s.h + s.ph) & (xs >= s.pw) & (xs < s.w + s.pw)
            value = X[n, c, y - s.ph, xs - s.pw] if read is None else read(n, c, y, xs)
            return tp.select(inside, value, 0.0)
        if p["aligned"]:
            k = f.var("kx", 0, copies)
            x = f.var("ix", 0, s.wp - k * s.dw)
            xp = f.computation("x_padded", [n, k, c, y, x], padded(x + k * s.dw))
            xp.store_in(ximg, [k * copy + c * plane + y * wp + x])
            # the columns past the copy's shifted row: read by unused positions only, zeroed
            xz = f.var("iz", s.wp - k * s.dw, wp)
            f.computation("x_zero", [n, k, c, y, xz], 0.0).store_in(
                ximg, [k * copy + c * plane + y * wp + xz])
            if copy > size:
                e = f.var("it", 0, copy - size)
                f.computation("x_tail", [n, k, e], 0.0).store_in(ximg, [k * copy + size + e])
        else:
            x = f.var("ix", 0, s.wp)
            xp = f.computation("x_padded", [n, c, y, x], padded(x))
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
            out = _write_out(f, s, acc, n, co, pool, relu, row)
        else:
            j = f.var("j", rowptr[co], rowptr[co + 1])        # the nonzeros of row co
            with f.nest(co):
                acc = f.computation("acc", [n, co, q], B[co] if bias else 0.0)
                acc.store_in(f.buffer("acc_row", (qp,), tp.float32), [q])
                acc[n, co, q].reduce("+", val[j] * ximg[colidx[j] + offset(q)], loops=[n, co, q, j])
                out = _write_out(f, s, acc, n, co, pool, relu, row)
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


def _write_out(f, s, acc, n, co, pool, relu, row):
    """NCHW from the flat row (of pitch ``row``): the copy (``pool == 1``), or
    the max over each pooling window, after ReLU when asked."""
    ph, pw = s.ho // pool, s.wo // pool
    oy, ox = f.var("oy", 0, ph), f.var("ox", 0, pw)
    best = None
    for dy in range(pool):
        for dx in range(pool):
            v = acc[n, co, (oy * pool + dy) * row + ox * pool + dx]
            best = v if best is None else tp.max(best, v)
    return f.computation("out", [n, co, oy, ox], tp.max(best, 0.0) if relu else best)

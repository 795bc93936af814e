"""The NCHWc convolution that ``spatial_pack`` and the fused block share.

:func:`blocked_conv` packs the input (zero-padded on the way) into
``[n][C/CB][Hp][Wp][CB]`` and the weights into ``[Co/VB][Ci][Kh][Kw][VB]``, and
computes the output in ``[n][Co/VB][Ho][Wo][VB]`` with a register-blocked
schedule (XB columns unrolled x VB output channels in SIMD lanes).

:func:`tiled_block` is the consumer that writes NCHW: ``out[n, c, py, px]``, the
maximum over a ``pool x pool`` window (``pool=1``: the plain unpack), with
ReLU when asked.  The NCHWc output is computed with ``compute_at`` inside the
consumer's tile of rows, into one tile-sized buffer sized to stay in L2 and
reused by every tile, and pooled or unpacked right away: no full-size NCHWc
output is ever written to memory.  With at least two images per core (or
one per core and small weights, :func:`images_in_parallel`) the image loop
is the parallel one, each thread has its own tile, and the padded,
packed input is made per image too (a nested ``compute_at``: the packing is
computed at the convolution, itself computed at the consumer), so there is
no full-size packed copy of the input either.
"""
from __future__ import annotations

from typing import TYPE_CHECKING

import tiramisu_py as tp

from ..core.sizes import largest_divisor
from ..host import host
from .conv_common import epilogue, taps

if TYPE_CHECKING:
    from ..problems.conv import ConvShape


def channel_block(s: ConvShape) -> int:
    """Output channels per SIMD block: two vectors when they divide Co, else
    one, else all of Co."""
    lanes = host().lanes(4)
    return next((v for v in (2 * lanes, lanes) if s.co % v == 0), s.co)


def register_block(vb: int, extent: int, spare: int = 0) -> int:
    """Columns (or tiles) unrolled next to ``vb`` channels: xb x (vb / lanes)
    accumulators in half of the vector registers less ``spare``, a divisor
    of ``extent`` if one fits.  (Half: a larger block measured slower, 28
    accumulators ran at 0.5-0.65x of 16 on an AVX-512 Xeon, through spills
    and reloads.)"""
    room = max(1, (host().vector_registers // 2 - spare) // -(-vb // host().lanes(4)))
    xb = largest_divisor(extent, room)
    return min(room, extent) if xb < room // 2 else xb


# registers the NCHWc block leaves to its broadcasts: the kx taps of a row
# share theirs (xb + kw - 1 inputs live at once), and 16 accumulators of 2
# vectors x 8 columns spilled (1.1x slower than 2 x 7 at 56x56, Zen 4)
TAP_BROADCASTS = 2


def group_vectors(s: ConvShape) -> list:
    """The channel blocks (VB) an NCHWc kernel of a grouped ``s`` may take:
    each block inside one group (VB divides the group's output channels):
    two vectors, one, or half of one; empty where none does (and for
    ``groups=1``, which takes any)."""
    if s.groups == 1:
        return []
    lanes, cog = host().lanes(4), s.co // s.groups
    return [v for v in (2 * lanes, lanes, lanes // 2) if v >= 4 and cog % v == 0]


def register_tile(s: ConvShape) -> tuple:
    """``(vb, xb)``, the default register block of :func:`blocked_conv`:
    two vectors of output channels (half the broadcasts per product of one),
    unless their weights, ``Ci*Kh*Kw*VB`` floats, overflow half of L2 and one
    vector covers a row in fewer column blocks: each block of a row streams
    those weights again (512 -> 512 at 14 columns: one vector x 14 columns,
    one pass, not two vectors x 7 from L3 twice, 3% faster on Zen 4; at 64
    or 128 channels two vectors were 13-17% faster).  Grouped: the blocks
    of :func:`group_vectors`."""
    lanes = host().lanes(4)
    options = group_vectors(s) if s.groups > 1 else \
        [v for v in (2 * lanes, lanes) if s.co % v == 0] or [s.co]
    tiles = [(v, register_block(v, s.wo, TAP_BROADCASTS)) for v in options]
    (v, xb), rest = tiles[0], tiles[1:]
    weights = s.ci // s.groups * s.kh * s.kw * v * 4
    if rest and weights > host().l2 // 2 and -(-s.wo // rest[0][1]) < -(-s.wo // xb):
        return rest[0]
    return v, xb


def images_in_parallel(s: ConvShape) -> bool:
    """Whether the default parallel loop is the images' (each thread whole
    images, no barrier per tile): with two images a core, or one a core
    (every core an equal share) where the weights, ``Ci*Kh*Kw*Co`` floats,
    fit in half of L2, since each thread then streams all of them for its
    image.  Batch 2 on 2 cores: VGG's 3 -> 64 block 4.3 ms against 7.7-11.5
    sharing each tile's channels, its 64 -> 128 18.0 against 19.2-26.6,
    ResNet-18's 64@56 2.36 against 2.58, its stem 3.1 against 3.9; its
    256@14 (2.4 MB of weights) 4.3 against 2.2."""
    cores = host().cores
    weights = s.ci // s.groups * s.kh * s.kw * s.co * 4
    return s.n >= 2 * cores or (s.n >= cores and s.n % cores == 0
                                and weights <= host().l2 // 2)


def packed_input(f, X, s: ConvShape, n, per_image: bool, source=None, band=None):
    """``x_packed[n][Ci/CB][Hp][Wp][CB]``: the input, zero-padded, CB = one
    SIMD vector of channels, over the image loop ``n``.  ``per_image``:
    stored in an image-sized buffer ``x_image`` (for the caller to compute
    per image) instead of a full copy.  ``source(n, c, y, x)``: the value at
    the padded coordinate ``(y, x)`` in place of the read of ``X`` (a
    producer evaluated on the way, such as a resize,
    :mod:`schedules.blocks.resize`).  ``band``: stored instead in a buffer
    ``x_band`` of ``band`` rows, row ``y`` at ``y % band`` (for the caller
    to compute per band of rows).  Returns ``(x_packed, CB)``."""
    cb = max(1, min(s.ci, host().lanes(4)))      # 1 for Ci = 0 (an empty packed input)
    cib = -(-s.ci // cb)
    ph, pw = s.ph, s.pw
    hp, wp = s.hp, s.wp
    xb_, xy, xx, xc = (f.var(nm, 0, e) for nm, e in
                       (("icb", cib), ("iy", hp), ("ix", wp), ("ic", cb)))
    inside = (xb_ * cb + xc < s.ci) & (xy >= ph) & (xy < s.h + ph) & (xx >= pw) & (xx < s.w + pw)
    value = (X[n, xb_ * cb + xc, xy - ph, xx - pw] if source is None
             else source(n, xb_ * cb + xc, xy, xx))
    xpk = f.computation("x_packed", [n, xb_, xy, xx, xc], tp.select(inside, value, 0.0))
    if band:
        xpk.store_in(f.buffer("x_band", (cib, band, wp, cb), tp.float32), [xb_, xy % band, xx, xc])
    elif per_image:
        xpk.store_in(f.buffer("x_image", (cib, hp, wp, cb), tp.float32), [xb_, xy, xx, xc])
    return xpk, cb


def blocked_conv(f, X, Wt, B, s: ConvShape, vb=None, xb=None, per_image=False, source=None,
                 band=None):
    """Packs the input and the weights and returns ``(out_blocked, vb,
    x_packed)``: the output ``[n][Co/VB][Ho][Wo][VB]`` with its register-blocked
    schedule (``xb`` columns unrolled x ``vb`` channels vectorised), the
    channels per SIMD block and the packed input.  Parallelism is left to the
    caller, as is the placement of ``x_packed`` when ``per_image``: it is then
    stored in an image-sized buffer (one per thread when the image loop is
    parallel) instead of a full copy, for the caller to compute per image.
    ``source``, ``band``: as in :func:`packed_input` (a band is placed by
    the caller too).  ``Wt``: the weight, or already packed (an input of
    rank 5, ``w_packed`` of :func:`schedules.blocks.conv_common.conv_inputs`
    with ``packed_vb=vb``: :func:`schedules.weights.conv.packed_weight`)."""
    if vb is None:
        vb = register_tile(s)[0]
    cob = -(-s.co // vb)
    # input [n][Ci/CB][Hp][Wp][CB]
    xpk, cb = packed_input(f, X, s, f.var("pn", 0, s.n), per_image, source, band)
    if not per_image and not band:
        xpk.parallelize("pn" if s.n >= host().cores else "icb")
    # weights [Co/VB][Ci/groups][Kh][Kw][VB]: given so, or packed here at every call
    cig = s.ci // s.groups
    if len(Wt.shape) == 5:
        wpk = Wt
    else:
        wo_, wc, wy, wx, wv = (f.var(nm, 0, e) for nm, e in
                               (("wb", cob), ("wci", cig), ("wky", s.kh), ("wkx", s.kw),
                                ("wv", vb)))
        wpk = f.computation("w_packed", [wo_, wc, wy, wx, wv], Wt[wo_ * vb + wv, wc, wy, wx])
        wpk.parallelize("wb" if cob >= 2 * host().cores else "wci")
    # output [n][Co/VB][Ho][Wo][VB], XB columns x VB channels in registers
    n, ob = f.var("n", 0, s.n), f.var("ob", 0, cob)
    y, x, v = f.var("y", 0, s.ho), f.var("x", 0, s.wo), f.var("v", 0, vb)
    ci = f.var("ci", 0, cig)
    # the input channel: of the block's group (each block inside one group)
    chan = ci if s.groups == 1 else (ob // (s.co // s.groups // vb)) * cig + ci
    ky, kx = taps(f, s, y, x)
    with f.nest(n, ob, y):      # each output row is initialised, then accumulated
        outc = f.computation("out_blocked", [n, ob, y, x, v], B[ob * vb + v] if B is not None else 0.0)
        outc[n, ob, y, x, v] += wpk[ob, ci, ky, kx, v] * xpk[n, chan // cb, y * s.sh + ky * s.dh,
                                                              x * s.sw + kx * s.dw, chan % cb]
    if xb is None:
        xb = register_block(vb, s.wo, TAP_BROADCASTS)
    u = outc.update
    u.split("x", xb, names=("x0", "x1"))
    u.reorder("n", "ob", "y", "x0", "ci", "ky", "kx", "x1", "v")
    u.unroll("x1", xb)
    u.vectorize("v", vb)
    return outc, vb, xpk


def rows_per_tile(s: ConvShape, pool: int) -> int:
    """Output rows (after pooling) per tile: the conv rows they need fill
    about half of L2."""
    row = s.co * s.wo * 4 * pool
    return max(1, min(s.ho // pool, host().l2 // 2 // max(1, row)))


def tiled_block(f, X, Wt, B, s: ConvShape, pool=1, relu=False, rows=None, parallel=None,
                vb=None, xb=None, pack_per_image=None, source=None, activation=None,
                residual=None):
    """``out[n, c, py, px]`` (NCHW) = max over the ``pool x pool`` window
    (non-overlapping, floor mode; ``pool=1``: the convolution itself) of the
    NCHWc convolution, with ReLU if ``relu`` (``activation``: "relu" or
    "relu6" the same way, :func:`~schedules.blocks.conv_common.epilogue`); the convolution is computed per
    tile of ``rows`` output rows.  ``parallel``: "n" (whole images per
    thread; the default where :func:`images_in_parallel`) or "c" (channels
    inside each tile).  ``pack_per_image``: pack the input per image (default: when
    the image loop is parallel) instead of one full-size copy.  ``source``
    (a producer of the input, :func:`packed_input`): the packed input is
    then computed per tile instead, only the band of rows one tile's
    convolution reads, into a band-sized buffer ``x_band`` (rows stored
    modulo the band: the halo rows are recomputed per tile), so no
    image-sized copy of the produced input exists.  ``residual`` (``pool``
    1): the input added to each result before the activation
    (:func:`~schedules.blocks.conv_common.residual_input`).  Returns the
    consumer computation."""
    if parallel not in (None, "n", "c"):
        raise ValueError(f"{f.name}: parallel must be 'n' or 'c', got {parallel!r}")
    per_image = parallel == "n" if parallel else images_in_parallel(s)
    if pack_per_image is None:
        pack_per_image = per_image
    rows = rows or rows_per_tile(s, pool)
    # the input rows one tile of pool * rows conv rows reads
    band = min(s.hp, (pool * rows - 1) * s.sh + (s.kh - 1) * s.dh + 1) if source is not None \
        else None
    outc, vb, xpk = blocked_conv(f, X, Wt, B, s, vb, xb, per_image=pack_per_image, source=source,
                                 band=band)
    ph, pw = s.ho // pool, s.wo // pool
    n, c = f.var("pn_", 0, s.n), f.var("c", 0, s.co)
    py, px = f.var("py", 0, ph), f.var("px", 0, pw)
    best = None
    for dy in range(pool):
        for dx in range(pool):
            v = outc[n, c // vb, py * pool + dy, px * pool + dx, c % vb]
            best = v if best is None else tp.max(best, v)
    out = f.computation("out", [n, c, py, px],
                        epilogue(best, "relu" if relu else activation,
                                 None if residual is None else residual[n, c, py, px]))
    out.split("py", rows, names=("py0", "py1"))
    out.reorder("pn_", "py0", "c", "py1", "px")
    # with images in parallel each thread runs whole images: one parallel
    # region per call, and each thread gets its own conv tile (privatised);
    # else the channels of each tile are shared (two regions per tile, which
    # cost ~25% at 56x56 when idle threads sleep, OMP_WAIT_POLICY=passive)
    out.parallelize("pn_" if per_image else "c")
    # the conv rows of one tile, computed right before they are pooled, into a
    # tile-sized buffer reused by every tile: [Co/VB][pool * rows][Wo][VB]
    tile_rows = pool * rows
    n_, ob, y, x, v = outc.vars
    outc.store_in(f.buffer("conv_tile", (-(-s.co // vb), tile_rows, s.wo, vb), tp.float32),
                  [ob, y % tile_rows, x, v])
    if not per_image:
        outc.update.parallelize("y" if s.co // vb < 2 * host().cores else "ob")
    outc.compute_at(out, "py0")
    if band:      # the band of input rows of each tile, right before it
        xpk.compute_at(outc.update, "py0")
    elif pack_per_image:     # each image's packed input, right before its first tile
        xpk.compute_at(outc.update, "pn_")
        if not per_image:
            xpk.parallelize("icb")
    return out

"""The fused block ``maxpool(relu(conv2d(x, w) + bias))`` in one pass.

The convolution is the NCHWc register-blocked kernel of
:func:`schedules.conv.blocked_conv`; the pooling (which also applies ReLU and
writes NCHW) is the consumer, and the convolution is computed with
``compute_at`` inside the pooling's row-tile loop: for each image and each tile
of pooled rows, only the conv rows that tile needs are computed, into one
tile-sized buffer (``store_in``, reused by every tile, sized to stay in L2),
then pooled.  No full-size
conv output is ever written to memory.  With at least two images per core the
image loop is the parallel one, each thread has its own tile, and the padded
NCHWc input is packed per image too (a nested ``compute_at``: the packing is
computed at the conv, itself computed at the pooling), so no full-size packed
copy of the input is made either.
"""
from __future__ import annotations

import tiramisu_py as tp

from .conv import ConvShape, _function, blocked_conv
from .host import host


def pooled_rows_per_tile(s: ConvShape, pool: int) -> int:
    """Pooled rows per tile: the conv rows they need fill about half of L2."""
    row = s.co * s.wo * 4 * pool
    return max(1, min(s.ho // pool, host().l2 // 2 // max(1, row)))


def function(s: ConvShape, pool=2, bias=True, rows=None, pack_per_image=None):
    """The scheduled Function for ``maxpool(relu(conv(x) + bias), pool)``
    (non-overlapping ``pool x pool`` windows, floor mode).  ``rows``: pooled
    rows per tile; ``pack_per_image``: pack the input per image (default: when
    the image loop is the parallel one) instead of one full-size copy."""
    if s.groups != 1:
        raise ValueError("conv_relu_maxpool: groups must be 1")
    f, X, Wt, B = _function("conv_relu_maxpool", s, bias)
    per_image = s.n >= 2 * host().cores
    if pack_per_image is None:
        pack_per_image = per_image
    outc, vb, xpk = blocked_conv(f, X, Wt, B, s, per_image=pack_per_image)
    ph, pw = s.ho // pool, s.wo // pool
    rows = rows or pooled_rows_per_tile(s, pool)
    n, c = f.var("pn_", 0, s.n), f.var("c", 0, s.co)
    py, px = f.var("py", 0, ph), f.var("px", 0, pw)
    best = None
    for dy in range(pool):
        for dx in range(pool):
            v = outc[n, c // vb, py * pool + dy, px * pool + dx, c % vb]
            best = v if best is None else tp.max(best, v)
    out = f.computation("out", [n, c, py, px], tp.max(best, 0.0))
    out.split("py", rows, names=("py0", "py1"))
    out.reorder("pn_", "py0", "c", "py1", "px")
    # with >= 2 images per core each thread runs whole images: one parallel
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
    if pack_per_image:     # each image's packed input, right before its first tile
        xpk.compute_at(outc.update, "pn_")
    return f

"""conv2d on a GPU: the direct convolution of :mod:`schedules.conv` (same
algorithm, NCHW float32, torch's stride / padding / dilation) with a CUDA
schedule, written in the public language only.

Two kernels, launched in order:

* ``xp`` (only with padding): the zero-padded input, ``n -> blockIdx.z``,
  ``c -> blockIdx.y``, tiles of rows ``-> blockIdx.x``, a row tile's pixels
  on ``threadIdx.y/x`` (column tiles serial);
* the convolution::

      co0, y0, x0 -> blockIdx.z, .y, .x   (TCO channels x TY x TX pixels)
      n        serial, the whole block    (every image, one launch)
        init   co1, y1, x1 -> threadIdx.z, .y, .x: out = bias
        ci0    serial, the whole block    (steps of TCI input channels)
          xp_shared     TCI x IH x IW input tile  (cache_shared: copied by
          weight_shared TCO x TCI x KH x KW       the block's threads)
          barrier                                  (derived: RAW)
          co1, y1, x1 -> threadIdx.z, .y, .x       (one output per thread)
            ci1, ky, kx serial: out += w_tile * x_tile
          barrier                                  (derived: WAR, next step)

  with ``IH = (TY - 1) * stride + (KH - 1) * dilation + 1`` (``IW`` alike).
  The barriers are not written here: the GPU legality check derives them
  from the dependences through the shared tiles.

``groups`` must be 1 (a tile of output channels reads one input-channel
range).  Not yet: register blocking (several outputs per thread, kept in
registers across ``ci0``: needs per-thread storage that outlives a thread
loop, see docs/DESIGN.md), double buffering.
"""
from __future__ import annotations

from .conv import ConvShape, direct_algorithm

THREADS = 256            # threads per block the default tiles aim at
SHARED_BUDGET = 16 * 1024  # bytes of shared tiles per block the default TCI aims at


def tiles(s: ConvShape, tile_co=None, tile_y=None, tile_x=None, tile_ci=None):
    """``(TCO, TY, TX, TCI)``: the given ones, else TX up to 16 columns, TY up
    to 8 rows, TCO channels to fill :data:`THREADS` threads (a power of 2),
    TCI input channels per step to fill :data:`SHARED_BUDGET`."""
    tx = tile_x or min(16, s.wo)
    ty = tile_y or min(8, s.ho, max(1, THREADS // tx))
    if tile_co is None:
        tile_co = 1
        while tile_co * 2 * ty * tx <= THREADS and tile_co * 2 <= max(1, s.co):
            tile_co *= 2
    if tile_ci is None:
        ih = (ty - 1) * s.sh + (s.kh - 1) * s.dh + 1
        iw = (tx - 1) * s.sw + (s.kw - 1) * s.dw + 1
        per_ci = 4 * (ih * iw + tile_co * s.kh * s.kw)
        tile_ci = max(1, min(s.ci, SHARED_BUDGET // per_ci, 16))
    for name, v in (("tile_co", tile_co), ("tile_y", ty), ("tile_x", tx), ("tile_ci", tile_ci)):
        if not isinstance(v, int) or isinstance(v, bool) or v < 1:
            raise ValueError(f"conv2d (cuda): {name} must be a positive int, got {v!r}")
    return tile_co, ty, tx, tile_ci


def function(shape: ConvShape, bias=True, tile_co=None, tile_y=None, tile_x=None, tile_ci=None):
    """The direct conv2d of ``shape`` scheduled for CUDA (see the module);
    compile it with ``.compile(target="cuda")``, or for the CPU, where
    blocks and threads run as loops.  Arguments: ``data``, ``weight`` and
    (``bias=True``) ``bias``; the tiles as in :func:`tiles`."""
    s = shape
    if s.groups != 1:
        raise ValueError(f"conv2d: target='cuda' supports groups=1 only, got groups={s.groups}; "
                         "use a CPU target for grouped convolutions")
    tco, ty, tx, tci = tiles(s, tile_co, tile_y, tile_x, tile_ci)
    f, xp, out = direct_algorithm(s, bias, name="conv2d_cuda")
    if xp is not f.buffers["data"]:
        map_rows(xp, "xp_n", "xp_c", "xp_y", "xp_x", s.w + 2 * s.pw)
    u = out.update
    for st in (out, u):
        st.split("co", tco).split("y", ty).split("x", tx)
    out.reorder("co0", "y0", "x0", "n", "co1", "y1", "x1")
    u.split("ci", tci)
    u.reorder("co0", "y0", "x0", "n", "ci0", "co1", "y1", "x1", "ci1", "ky", "kx")
    for st in (out, u):
        for loop, to in (("co0", "block.z"), ("y0", "block.y"), ("x0", "block.x"),
                         ("co1", "thread.z"), ("y1", "thread.y"), ("x1", "thread.x")):
            st.bind(loop, to)
    u.after(out, "n")
    u.cache_shared(xp, "ci0")
    u.cache_shared(f.buffers["weight"], "ci0")
    return f


def map_rows(comp, n, c, y, x, width, threads=THREADS):
    """A copy-like computation over ``(n, c, y, x)`` (e.g. a padded input)
    mapped to the GPU: ``n -> block.z``, ``c -> block.y``, tiles of rows
    ``-> block.x``, the tile's pixels on ``thread.y/x`` (column tiles of at
    most 64, serial in the block)."""
    tx = min(64, width)
    ty = max(1, threads // tx)
    comp.split(y, ty).split(x, tx)
    comp.reorder(n, c, y + "0", x + "0", y + "1", x + "1")
    for loop, to in ((n, "block.z"), (c, "block.y"), (y + "0", "block.x"),
                     (y + "1", "thread.y"), (x + "1", "thread.x")):
        comp.bind(loop, to)
    return comp

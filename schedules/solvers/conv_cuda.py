"""conv2d on a GPU: the direct convolution of :mod:`schedules.solvers.conv_dense` (same
algorithm, NCHW float32, torch's stride / padding / dilation) with a CUDA
schedule, written in the public language only.

Two kernels, launched in order:

* ``x_tiles``: the input as overlapping, zero-padded tiles
  ``x_tiles[n][ty0][tx0][ci][IH][IW]``, tile ``(ty0, tx0)`` holding the
  ``IH x IW`` input pixels the ``TY x TX`` output tile reads, with
  ``IH = (TY - 1) * stride + (KH - 1) * dilation + 1`` (``IW`` alike): a
  tile's origin is 0, so the shared copy is indexed without a modulo in
  the inner loop (indexing the padded input directly put a 64-bit modulo
  there, and ptxas spilled).  ``n -> blockIdx.z``, ``ci -> blockIdx.y``,
  ``ty0 -> blockIdx.x``, a tile's pixels on ``threadIdx.y/x``;
* the convolution::

      co0, y0, x0 -> blockIdx.z, .y, .x   (TCO channels x TY x TX pixels)
      n        serial, the whole block    (every image, one launch)
        init   co_th, y1, x_th -> threadIdx.z, .y, .x: out = bias
               (co_reg, x_reg: the thread's micro_co x micro_x outputs)
        out_local = 0                    (per-thread tile, registers)
        ci0    serial, the whole block    (steps of TCI input channels)
          x_tiles_shared TCI x IH x IW   (cache_shared: copied by the
          weight_shared  TCO x TCI x KH x KW        block's threads)
          barrier                                  (derived: RAW)
          co_th, y1, x_th -> threadIdx.z, .y, .x
            ci1, ky, kx serial
              co_reg, x_reg (unrolled): out_local += w_tile * x_tile
          barrier                                  (derived: WAR, next step)
        out += out_local                 (once per output, after ci0)

  A thread owns channels ``co_th + k * TCO / micro_co`` and columns
  ``x_th + k * TX / micro_x``; the tile is ``accumulate_locally`` over
  ``ci0`` (over the first of ``ci1, ky, kx`` with several iterations when
  there is a single ci step: isl drops a loop of one iteration).

  The barriers are not written here: the GPU legality check derives them
  from the dependences through the shared tiles.

The schedule is of one group (a tile of output channels reads one
input-channel range); the solver runs it once per group
(:func:`schedules.blocks.conv_common.by_group`).  Not yet: double
buffering, vector loads.
"""
from __future__ import annotations

import tiramisu_py as tp

from ..blocks.conv_common import ConvSolver, by_group, conv_inputs
from ..blocks.gpu_map import check_shape, map_rows
from ..core.arrays import positive_int
from ..core.kernels import cuda_kernel
from ..problems.conv import ConvShape

THREADS = 128            # threads per block the default tiles aim at
SHARED_BUDGET = 16 * 1024  # bytes of shared tiles per block the default TCI aims at
MICRO_CO = 4             # output channels per thread (registers)
MICRO_X = 1              # output columns per thread (registers)


def _micro(tile, given, default):
    """The micro-tile along one axis: ``given``, else ``default`` (for a given
    ``tile``: the largest divisor of it up to ``default``)."""
    if given is not None or tile is None or not isinstance(tile, int) or tile < 1:
        return default if given is None else given
    return max(d for d in range(1, default + 1) if tile % d == 0)


def tiles(s: ConvShape, tile_co=None, tile_y=None, tile_x=None, tile_ci=None,
          micro_co=None, micro_x=None):
    """``(TCO, TY, TX, TCI)``: the given ones, else TX up to 16 threads of
    ``micro_x`` columns, TY up to 8 rows, TCO a power of 2 of threads (each
    ``micro_co`` channels) to fill :data:`THREADS` threads, TCI input
    channels per step to fill :data:`SHARED_BUDGET` (at most 16 and half
    the channels: two steps or more).  ``micro_co`` /
    ``micro_x`` default to :data:`MICRO_CO` / :data:`MICRO_X` (with a tile
    given: its largest divisor up to those)."""
    micro_co, micro_x = _micro(tile_co, micro_co, MICRO_CO), _micro(tile_x, micro_x, MICRO_X)
    for name, v in (("micro_co", micro_co), ("micro_x", micro_x)):
        _check(name, v)
    tx = tile_x or min(16, -(-s.wo // micro_x)) * micro_x
    ty = tile_y or min(8, s.ho, max(1, THREADS // -(-tx // micro_x)))
    if tile_co is None:
        threads_co = 1
        while (threads_co * 2 * ty * -(-tx // micro_x) <= THREADS
               and threads_co * 2 * micro_co <= max(1, s.co)):
            threads_co *= 2
        tile_co = threads_co * micro_co
    if tile_ci is None:
        ih = (ty - 1) * s.sh + (s.kh - 1) * s.dh + 1
        iw = (tx - 1) * s.sw + (s.kw - 1) * s.dw + 1
        per_ci = 4 * (ih * iw + tile_co * s.kh * s.kw)
        # at least two steps: the tile then spans ci0 (with one step it spans
        # the thread's ci1 loop, which ptxas 13 unrolled into 254 registers
        # on sm_80 at 2x16x28x28 -> 32, 96 on sm_90)
        tile_ci = max(1, min(-(-s.ci // 2), SHARED_BUDGET // per_ci, 16))
    for name, v in (("tile_co", tile_co), ("tile_y", ty), ("tile_x", tx), ("tile_ci", tile_ci)):
        _check(name, v)
    for name, tile, micro in (("tile_co", tile_co, micro_co), ("tile_x", tx, micro_x)):
        if tile % micro:
            raise ValueError(f"conv2d (cuda): {name} ({tile}) must be a multiple of "
                             f"micro_{name[5:]} ({micro})")
    return tile_co, ty, tx, tile_ci


def _check(name, v):
    positive_int("conv2d (cuda)", name, v)


def function(shape: ConvShape, bias=True, tile_co=None, tile_y=None, tile_x=None, tile_ci=None,
             micro_co=None, micro_x=None):
    """The direct conv2d of ``shape`` scheduled for CUDA (see the module);
    compile it with ``.compile(target="cuda")``, or for the CPU, where
    blocks and threads run as loops.  Arguments: ``data``, ``weight`` and
    (``bias=True``) ``bias``; the tiles as in :func:`tiles`; each thread
    computes ``micro_co`` channels x ``micro_x`` columns of outputs in
    registers (``micro_co = micro_x = 1``: one output per thread, accumulated
    in global memory; defaults as in :func:`tiles`)."""
    check_shape("conv2d (cuda)", shape, bias)
    s = shape
    if s.groups != 1:
        raise ValueError(f"conv2d: target='cuda' supports groups=1 only, got groups={s.groups}; "
                         "use a CPU target for grouped convolutions")
    tco, ty, tx, tci = tiles(s, tile_co, tile_y, tile_x, tile_ci, micro_co, micro_x)
    micro_co, micro_x = _micro(tile_co, micro_co, MICRO_CO), _micro(tile_x, micro_x, MICRO_X)
    f, X, Wt, B = conv_inputs("conv2d_cuda", s, bias)
    # the input as overlapping tiles, zero-padded: tile (ty0, tx0) holds the
    # IH x IW input pixels the TY x TX output tile reads (its origin is 0)
    ih = (ty - 1) * s.sh + (s.kh - 1) * s.dh + 1
    iw = (tx - 1) * s.sw + (s.kw - 1) * s.dw + 1
    n, c = f.var("tn", 0, s.n), f.var("tc", 0, s.ci)
    y0, x0 = f.var("ty0", 0, -(-s.ho // ty)), f.var("tx0", 0, -(-s.wo // tx))
    yy, xx = f.var("tyy", 0, ih), f.var("txx", 0, iw)
    iy, ix = y0 * (ty * s.sh) + yy - s.ph, x0 * (tx * s.sw) + xx - s.pw
    inside = (iy >= 0) & (iy < s.h) & (ix >= 0) & (ix < s.w)
    xt = f.computation("x_tiles", [n, y0, x0, c, yy, xx],
                       tp.select(inside, X[n, c, iy, ix], 0.0))
    map_rows(xt, ("tn", "tc", "ty0"), "tyy", "txx", iw, serial=("tx0",))

    n, co = f.var("n", 0, s.n), f.var("co", 0, s.co)
    y, x = f.var("y", 0, s.ho), f.var("x", 0, s.wo)
    ci, ky, kx = f.var("ci", 0, s.ci), f.var("ky", 0, s.kh), f.var("kx", 0, s.kw)
    out = f.computation("out", [n, co, y, x], B[co] if bias else 0.0)
    out[n, co, y, x] += Wt[co, ci, ky, kx] * xt[n, y // ty, x // tx, ci, (y % ty) * s.sh + ky * s.dh,
                                               (x % tx) * s.sw + kx * s.dw]
    u = out.update
    # a thread owns channels co_th + k * (TCO / micro_co) and columns
    # x_th + k * (TX / micro_x): a warp's threads read neighbouring tile words
    inner = ("co_th", "y1", "x_th", "co_reg", "x_reg")
    for st in (out, u):
        st.split("co", tco).split("y", ty).split("x", tx)
        st.split("co1", tco // micro_co, names=("co_reg", "co_th"))
        st.split("x1", tx // micro_x, names=("x_reg", "x_th"))
    out.reorder("co0", "y0", "x0", "n", *inner)
    u.split("ci", tci)
    u.reorder("co0", "y0", "x0", "n", "ci0", *inner[:3], "ci1", "ky", "kx", *inner[3:])
    for st in (out, u):
        for loop, to in (("co0", "block.z"), ("y0", "block.y"), ("x0", "block.x"),
                         ("co_th", "thread.z"), ("y1", "thread.y"), ("x_th", "thread.x")):
            st.bind(loop, to)
    u.after(out, "n")
    u.cache_shared(xt, "ci0")
    u.cache_shared(Wt, "ci0")
    # the micro-tile in registers over the reduction (ci0 and, inside it,
    # ci1, ky, kx): zeroed before ci0, added to out (= bias) after it.  isl
    # drops a loop of one iteration (one ci step), so then the tile spans the
    # thread's own loops, from the outermost that has several iterations
    extents = {"ci0": -(-s.ci // tci), "ci1": min(tci, s.ci), "ky": s.kh, "kx": s.kw}
    over = next((v for v, e in extents.items() if e > 1), None)
    if micro_co * micro_x > 1 and over is not None:
        u.accumulate_locally(over, allow_reassociation=True)
    return f


class CudaDirect(ConvSolver):
    """The direct conv2d with the CUDA schedule of :func:`function`."""
    op = "conv2d"
    name = "direct"
    target = "cuda"
    weight = "dense"

    def space(self, p):
        return {"tile_co": [16, 32, 64], "micro_co": [1, 2, 4], "micro_x": [1, 2]}

    def build(self, p, params):
        return function(p.shape, bias=p.bias, **params)

    def run(self, p, args):
        if p.degenerate:
            return args.zeros(p)
        return by_group(self._run, p, args)       # a schedule of one group

    def _run(self, p, args):
        k = cuda_kernel(("conv2d", "cuda", p.shape, p.bias), lambda: self.build(p, {}))
        return k(weight=args.w, **args.inputs())

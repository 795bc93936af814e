"""The CSR sparse-weight convolution on a GPU: the algorithm of
:mod:`schedules.solvers.conv_sparse` (the padded input as a flat image per channel,
``colidx`` as flat offsets, a data-dependent loop over the nonzeros of a CSR
row ``rowptr[co] <= j < rowptr[co + 1]``) with a CUDA schedule, written in
the public language only.

Two kernels, launched in order:

* ``x_padded``: image ``n``'s input zero-padded into
  ``x_image[n][ci*Hp*Wp + y*Wp + x]`` (``n -> blockIdx.z``, ``ci ->
  blockIdx.y``, tiles of rows ``-> blockIdx.x``, pixels on threads);
* the convolution, over the output pixels ``q = y*Wo + x`` of each
  (image, output channel = CSR row)::

      q0, co, n -> blockIdx.x, .y, .z     (TQ * micro output pixels of one row)
        q_th -> threadIdx.x                (micro pixels per thread: q_reg)
          out = bias[co]
          out_local = 0                              (per-thread tile, registers)
          for j in rowptr[co] .. rowptr[co+1]:      (data-dependent, serial)
            for q_reg (unrolled):
              out_local += val[j] * x_image[n][colidx[j] + y*sh*Wp + x*sw]
          out += out_local

The tile is ``accumulate_locally`` over the data-dependent ``j`` loop (a
thread's own loop: the tile's element does not change with ``j``), so no
store to ``out`` happens inside it.

Every thread of a block runs the same CSR row, so the data-dependent bounds
and ``val[j]``, ``colidx[j]`` are block-uniform (one broadcast load per
warp); consecutive threads read consecutive input pixels (coalesced).  No
thread reads another's value, so there is no barrier; the bounds are loads
of ``rowptr`` inside the thread loop (a data-dependent loop on a thread axis
is refused: its extent has no constant bound).  No shared memory: what a
block reads of the input depends on the row's nonzeros.
"""
from __future__ import annotations

import tiramisu_py as tp

from ..blocks.conv_common import ConvSolver, by_group
from ..blocks.gpu_map import check_shape, map_rows
from ..core.arrays import positive_int
from ..core.kernels import cuda_kernel
from ..problems.conv import ConvShape

THREADS = 128            # threads per block (the last block of a row is partial)
MICRO = 2                # output pixels per thread (registers)


def function(s: ConvShape, bias=True, threads=None, micro=MICRO):
    """The sparse convolution of shape ``s`` scheduled for CUDA (compile with
    ``.compile(target="cuda")``, or for the CPU).  Arguments: ``data``
    (NCHW), ``rowptr`` (int32, Cout + 1), ``colidx`` (int32 flat offsets,
    :meth:`CSRWeights.conv_offsets`), ``val`` (float32), ``bias``; the param
    ``NNZ`` is the length of ``colidx``/``val`` (at least 1).  ``threads``
    per block (default: up to 128), each summing ``micro`` output pixels in
    registers."""
    check_shape("sparse_conv2d (cuda)", s, bias)
    p = s.ho * s.wo
    positive_int("sparse_conv2d (cuda)", "micro", micro)
    tq = threads if threads is not None else min(THREADS, -(-p // (32 * micro)) * 32)
    if not isinstance(tq, int) or isinstance(tq, bool) or not 1 <= tq <= 1024:
        raise ValueError(f"sparse_conv2d (cuda): threads must be an int in [1, 1024], got {threads!r}")
    f = tp.Function("sparse_conv2d_cuda", params=["NNZ"])
    X = f.input("data", (s.n, s.ci, s.h, s.w), tp.float32)
    rowptr = f.input("rowptr", (s.co + 1,), tp.int32)
    colidx = f.input("colidx", ("NNZ",), tp.int32)
    val = f.input("val", ("NNZ",), tp.float32)
    B = f.input("bias", (s.co,), tp.float32) if bias else None
    plane = s.hp * s.wp
    ximg = f.buffer("x_image", (s.n, s.ci * plane), tp.float32)
    n, c = f.var("img", 0, s.n), f.var("ic", 0, s.ci)
    y, x = f.var("iy", 0, s.hp), f.var("ix", 0, s.wp)
    inside = (y >= s.ph) & (y < s.h + s.ph) & (x >= s.pw) & (x < s.w + s.pw)
    xp = f.computation("x_padded", [n, c, y, x], tp.select(inside, X[n, c, y - s.ph, x - s.pw], 0.0))
    xp.store_in(ximg, [n, c * plane + y * s.wp + x])
    map_rows(xp, ("img", "ic", "iy0"), "iy", "ix", s.wp)

    n, co, q = f.var("n", 0, s.n), f.var("co", 0, s.co), f.var("q", 0, p)
    j = f.var("j", rowptr[co], rowptr[co + 1])          # the nonzeros of row co
    out = f.computation("acc", [n, co, q], B[co] if bias else 0.0)
    out.store_in(f.buffer("out", (s.n, s.co, s.ho, s.wo), tp.float32, output=True),
                 [n, co, q // s.wo, q % s.wo])
    read = (q // s.wo) * (s.sh * s.wp) + (q % s.wo) * s.sw
    out[n, co, q].reduce("+", val[j] * ximg[n, colidx[j] + read], loops=[n, co, q, j])
    u = out.update
    # a thread owns the pixels q0 * TQ * micro + q_reg * TQ + q_th: a warp's
    # threads read neighbouring input words for each nonzero
    for st in (out, u):
        st.split("q", tq * micro)
        st.split("q1", tq, names=("q_reg", "q_th"))
        for loop, to in (("q0", "block.x"), ("co", "block.y"), ("n", "block.z"),
                         ("q_th", "thread.x")):
            st.bind(loop, to)
    out.reorder("q0", "co", "n", "q_th", "q_reg")
    u.reorder("q0", "co", "n", "q_th", "j", "q_reg")
    u.after(out, "q_th")
    # the sums over the row's nonzeros in registers (one per pixel of the
    # thread): zeroed before j, added to out (= bias) after it
    u.accumulate_locally("j", allow_reassociation=True)
    return f


class CudaSparseCSR(ConvSolver):
    """The CSR sparse conv2d with the CUDA schedule of :func:`function`; the
    CSR arrays are copied to the input's device once per CSRWeights and
    device.  Structural zeros are absent, as on the CPU
    (:class:`schedules.solvers.conv_sparse.SparseCSR`)."""
    op = "conv2d"
    name = "sparse"
    target = "cuda"
    numerics = "structural"
    weight = "csr"

    def build(self, p, params):
        return function(p.shape, bias=p.bias, **params)

    def run(self, p, args):
        if p.degenerate:
            return args.zeros(p)
        return by_group(self._run, p, args)       # each group its CSR rows

    def _run(self, p, args):
        s, csr, dev = p.shape, args.csr, args.device
        layout = (s.kh, s.kw, s.hp, s.wp, s.dh, s.dw)
        arrays = csr.conv_layout(*layout)
        if dev is not None:
            import torch
            arrays = csr.derived(("cuda_layout", *layout, str(dev)),
                                 lambda: tuple(torch.tensor(a, device=dev) for a in arrays))
        rowptr, colidx, val = arrays
        k = cuda_kernel(("sparse_conv2d", "cuda", s, p.bias), lambda: self.build(p, {}))
        return k(rowptr=rowptr, colidx=colidx, val=val, **args.inputs())

"""The resize block: ``max_pool2d(relu(conv2d(interpolate(x, size, mode,
align_corners=False), weight, bias, stride, padding, dilation)), pool)`` in
one pass, the resize (:mod:`schedules.blocks.resize`, torch's coordinates)
computed where the convolution reads its input, by two algorithms:

* ``direct`` (a dense weight): the fused block of
  :mod:`schedules.solvers.conv_fused` (:func:`schedules.blocks.nchwc.tiled_block`)
  with the resize as the packed input's producer: the packed input is
  computed with ``compute_at`` inside the pooling's tile of rows, only the
  band of resized rows that tile's convolution reads, into a band-sized
  buffer (``x_band``).  Neither the resized image nor the conv output
  exists in memory at full size.
* ``sparse`` (a CSR weight, :mod:`schedules.blocks.csr_conv`): the
  resized values are written straight into the sparse convolution's own
  flat zero-padded image of one image (``x_image``, the layout its
  contiguous reads need; per image, never the batch), in place of the plain
  copy that the sparse convolution makes of its input anyway.

Numerics: each resized value is computed as torch computes it (the same
source indices and float32 weights, the same order of operations), then the
convolution as :mod:`schedules.solvers.conv_fused` (``direct``) or the
sparse convolution (structural zeros absent) computes it.
"""
from __future__ import annotations

import tiramisu_py as tp

from ..blocks import csr_conv, resize
from ..blocks.nchwc import tiled_block
from ..core.kernels import kernel
from ..core.solver import Solver
from ..problems.conv import ConvShape
from ..problems.resize_conv import OP
from ..weights.csr import as_csr


def _source(f, s: ConvShape, src_hw, mode):
    """``(data, value)``: the source image input and the resized value at a
    padded coordinate."""
    X = f.input("data", (s.n, s.ci, src_hw[0], src_hw[1]), tp.float32)
    return X, resize.source(f, X, mode, (s.hp, s.wp))


def function(s: ConvShape, src_hw, mode="bilinear", pool=2, bias=True, sparse=False, rows=None,
             parallel=None, density=1.0):
    """The scheduled Function of the resize block on the conv shape ``s``
    (its ``h``/``w``: the resized size) from images of ``src_hw``.  Kernel
    arguments: ``data``, the resize tables (:func:`schedules.blocks.resize.tables`),
    and ``weight`` (dense) or ``rowptr``/``colidx``/``val`` (``sparse``, as
    :func:`schedules.blocks.csr_conv.function`), ``bias``.  ``rows``
    (pooled rows per tile) and ``parallel`` ("n" or "c") as in
    :func:`schedules.blocks.nchwc.tiled_block` (dense only)."""
    if mode not in resize.MODES:
        raise ValueError(f"{OP}: mode must be one of {', '.join(resize.MODES)}, got {mode!r}")
    if sparse:
        if rows is not None or parallel is not None:
            raise ValueError(f"{OP}: rows and parallel apply to the dense block only")
        return csr_conv.function(s, bias=bias, pool=pool, relu=True, density=density,
                                    source=lambda f: _source(f, s, src_hw, mode), name=OP)
    f = tp.Function(OP, params={})
    X, value = _source(f, s, src_hw, mode)
    Wt = f.input("weight", (s.co, s.ci, s.kh, s.kw), tp.float32)
    B = f.input("bias", (s.co,), tp.float32) if bias else None
    tiled_block(f, X, Wt, B, s, pool=pool, relu=True, rows=rows, parallel=parallel,
                source=value)
    return f


class _Resize(Solver):
    op = OP

    def tables(self, p):
        s = p.shape
        return resize.tables(p.mode, (p.src_h, p.src_w), (s.h, s.w), (s.ph, s.pw))


class ResizeDirect(_Resize):
    """The dense resize block (:func:`function`)."""
    name = "direct"
    weight = "dense"

    def space(self, p):
        return {"parallel": ["n", "c"]}

    def build(self, p, params):
        return function(p.shape, (p.src_h, p.src_w), p.mode, p.pool, p.bias, **params)

    def run(self, p, args):
        k = kernel((OP, self.name, p.shape, p.src_h, p.src_w, p.mode, p.pool, p.bias),
                   lambda: self.build(p, self.params(p)), p.target)
        return k(weight=args.w, **self.tables(p), **args.inputs())


class ResizeSparse(_Resize):
    """The resize block with a CSR weight (:func:`function` with ``sparse``);
    structural zeros absent, as :class:`schedules.solvers.conv_sparse.SparseCSR`."""
    name = "sparse"
    weight = "csr"
    numerics = "structural"

    def build(self, p, params):
        return function(p.shape, (p.src_h, p.src_w), p.mode, p.pool, p.bias, sparse=True,
                        **params)

    def run(self, p, args):
        s = p.shape
        csr = args.csr if args.csr is not None else as_csr(args.w, s.ci)
        plan = csr_conv.plan(s, density=csr.density)
        order = csr_conv.schedule_args(plan)
        k = kernel((OP, self.name, s, p.src_h, p.src_w, p.mode, p.pool, p.bias,
                    tuple(order.values())),
                   lambda: csr_conv.function(
                       s, bias=p.bias, pool=p.pool, relu=True, **order,
                       source=lambda f: _source(f, s, (p.src_h, p.src_w), p.mode), name=OP),
                   p.target)
        rowptr, colidx, val = csr.conv_layout(**csr_conv.layout(s, plan))
        return k(rowptr=rowptr, colidx=colidx, val=val, **self.tables(p), **args.inputs())

"""The CSR sparse-weight convolution solver (the Function and its schedule:
:mod:`schedules.blocks.csr_conv`; the weights: :mod:`schedules.weights.csr`)."""
from __future__ import annotations

from ..blocks.conv_common import PerGroupSolver
from ..blocks.csr_conv import (aligned_pitch, function, layout, pitch, plan, schedule_args,
                               tile_size)
from ..core.kernels import kernel
from ..problems.conv import conv_shape
from ..weights.csr import as_csr

__all__ = ["function", "layout", "pitch", "plan", "tile_size", "sparse_conv2d_function",
           "SparseCSR"]


def sparse_conv2d_function(n, ci, h, w, co, kh=3, kw=3, stride=1, padding=0, dilation=1,
                           bias=True, pool=1, relu=False, **schedule):
    """The scheduled Function, to inspect or re-schedule."""
    s = conv_shape((n, ci, h, w), (co, ci, kh, kw), stride, padding, dilation,
                   "sparse_conv2d_function")
    return function(s, bias=bias, pool=pool, relu=relu, **schedule)


class SparseCSR(PerGroupSolver):
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
        """The loop order (tiles of rows outside the channels or inside), the
        input channels per block (rows outer; 0: unblocked) and, where it
        applies, the aligned layout."""
        return {"rows_outer": [False, True],
                "channel_block": [0] + [c for c in (4, 8, 16, 32, 64) if c < p.shape.ci],
                **({"aligned": [False, True]} if aligned_pitch(p.shape) else {})}

    def with_values(self, p, values):
        return plan(p.shape, density=1.0 if p.density is None else p.density, **values)

    def build(self, p, params):
        return function(p.shape, bias=p.bias, pool=p.pool, relu=p.relu, **schedule_args(params))

    def run_group(self, p, args, values=None):          # each group's CSR rows
        s = p.shape
        csr = args.csr if args.csr is not None else as_csr(args.w, s.ci)
        params = plan(s, density=csr.density, **self.chosen(p, values))
        k = kernel(("sparse_conv", s, p.bias, p.pool, p.relu, *_key(params)),
                   lambda: self.build(p, params), p.target)
        rowptr, colidx, val = csr.conv_layout(**layout(s, params))
        return k(rowptr=rowptr, colidx=colidx, val=val, **args.inputs())


def _key(params):
    """A plan's part of the kernel key (unaligned kernels keep their old key)."""
    order = schedule_args(params)
    aligned = ("aligned",) if order["aligned"] else ()
    return (order["rows_outer"], order["channel_block"]) + aligned

"""The fused block ``maxpool(relu(conv2d(x, w) + bias))`` in one pass, by two
algorithms:

* ``direct``: the NCHWc register-blocked convolution of
  :mod:`schedules.blocks.nchwc`; the pooling (which also applies ReLU and writes
  NCHW) is the consumer, and the convolution is computed with ``compute_at``
  inside the pooling's tile of rows: for each image and each tile of pooled
  rows, only the conv rows that tile needs are computed, into one tile-sized
  buffer reused by every tile and sized to stay in L2, then pooled.  No
  full-size conv output is ever written to memory; with at least two images
  per core the packed input is made per image too (see
  :func:`schedules.blocks.nchwc.tiled_block`).
* ``winograd``: F(2x2, 3x3) (:mod:`schedules.blocks.winograd`), each 2x2 output
  tile being one pooling window: 2.25x fewer multiplications, every
  intermediate per image.  3x3 kernels, 2x2 pooling.

``schedules.conv_relu_maxpool(..., algo="auto")`` picks between them with the
find step of :mod:`schedules.core.find`.
"""
from __future__ import annotations

from ..blocks import winograd
from ..blocks.conv_common import conv_inputs
from ..blocks.nchwc import tiled_block
from ..core.kernels import kernel
from ..core.solver import Solver
from ..problems.conv import ConvShape

ALGOS = ("direct", "winograd")


def function(s: ConvShape, pool=2, bias=True, rows=None, parallel=None, pack_per_image=None,
             algo="direct", vb=None, tb=None, cc=None):
    """The scheduled Function for ``maxpool(relu(conv(x) + bias), pool)``
    (non-overlapping ``pool x pool`` windows, floor mode).

    ``algo="direct"``: ``rows``: pooled rows per tile; ``parallel``: "n" or
    "c"; ``pack_per_image``: pack the input per image instead of one
    full-size copy.  ``algo="winograd"``: ``vb`` output channels per SIMD
    block, ``tb`` tiles in registers, ``cc`` input channels per block (see
    :func:`schedules.blocks.winograd.fused_block`).  Defaults come from the host."""
    if s.groups != 1:
        raise ValueError("conv_relu_maxpool: groups must be 1")
    if algo not in ALGOS:
        raise ValueError(f"conv_relu_maxpool: algo must be one of {', '.join(ALGOS)}; got {algo!r}")
    own = {"direct": dict(rows=rows, parallel=parallel, pack_per_image=pack_per_image),
           "winograd": dict(vb=vb, tb=tb, cc=cc)}
    other = [k for a, kw in own.items() if a != algo for k, v in kw.items() if v is not None]
    if other:
        raise ValueError(f"conv_relu_maxpool: {', '.join(other)} do not apply to algo {algo!r}")
    f, X, Wt, B = conv_inputs("conv_relu_maxpool", s, bias)
    if algo == "winograd":
        winograd.fused_block(f, X, Wt, B, s, pool, vb=vb, tb=tb, cc=cc)
    else:
        tiled_block(f, X, Wt, B, s, pool=pool, relu=True, rows=rows, parallel=parallel,
                    pack_per_image=pack_per_image)
    return f


class _Fused(Solver):
    """A dense fused block on the CPU (:func:`function` with ``algo=name``)."""
    op = "conv_relu_maxpool"

    def applicable(self, p):
        why = super().applicable(p)
        if why is True and p.weight != "dense":
            return "needs a dense w; a sparse w takes 'auto' or 'sparse'"
        return why

    def build(self, p, params):
        return function(p.shape, p.pool, bias=p.bias, algo=self.name, **params)

    def run(self, p, args):
        k = kernel(("conv_relu_maxpool", self.name, p.shape, p.pool, p.bias),
                   lambda: self.build(p, self.params(p)), p.target)
        if args.b is not None:
            return k(data=args.x, weight=args.w, bias=args.b)
        return k(data=args.x, weight=args.w)


class FusedDirect(_Fused):
    name = "direct"

    def space(self, p):
        return {"parallel": ["n", "c"], "pack_per_image": [False, True]}


class FusedWinograd(_Fused):
    name = "winograd"

    def applicable(self, p):
        why = super().applicable(p)
        if why is True and not winograd.applicable(p.shape, p.pool):
            s = p.shape
            return (f"needs a 3x3 kernel and pool=2 (got {s.kh}x{s.kw}, pool={p.pool}); "
                    "use 'direct'")
        return why

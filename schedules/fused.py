"""The fused block ``maxpool(relu(conv2d(x, w) + bias))`` in one pass, by two
algorithms:

* ``direct``: the NCHWc register-blocked convolution of
  :mod:`schedules.nchwc`; the pooling (which also applies ReLU and writes
  NCHW) is the consumer, and the convolution is computed with ``compute_at``
  inside the pooling's tile of rows: for each image and each tile of pooled
  rows, only the conv rows that tile needs are computed, into one tile-sized
  buffer reused by every tile and sized to stay in L2, then pooled.  No
  full-size conv output is ever written to memory; with at least two images
  per core the packed input is made per image too (see
  :func:`schedules.nchwc.tiled_block`).
* ``winograd``: F(2x2, 3x3) (:mod:`schedules.winograd`), each 2x2 output
  tile being one pooling window: 2.25x fewer multiplications, every
  intermediate per image.  3x3 kernels, 2x2 pooling.

``schedules.conv_relu_maxpool(..., algo="auto")`` picks between them with the
find step of :mod:`schedules.conv_ops`.
"""
from __future__ import annotations

from . import winograd
from .conv import ConvShape, _function
from .nchwc import tiled_block

ALGOS = ("direct", "winograd")


def applicable(algo, s: ConvShape, pool) -> bool:
    return algo == "direct" or winograd.applicable(s, pool)


def function(s: ConvShape, pool=2, bias=True, rows=None, parallel=None, pack_per_image=None,
             algo="direct", vb=None, tb=None, cc=None):
    """The scheduled Function for ``maxpool(relu(conv(x) + bias), pool)``
    (non-overlapping ``pool x pool`` windows, floor mode).

    ``algo="direct"``: ``rows``: pooled rows per tile; ``parallel``: "n" or
    "c"; ``pack_per_image``: pack the input per image instead of one
    full-size copy.  ``algo="winograd"``: ``vb`` output channels per SIMD
    block, ``tb`` tiles in registers, ``cc`` input channels per block (see
    :func:`schedules.winograd.fused_block`).  Defaults come from the host."""
    if s.groups != 1:
        raise ValueError("conv_relu_maxpool: groups must be 1")
    if algo not in ALGOS:
        raise ValueError(f"conv_relu_maxpool: algo must be one of {', '.join(ALGOS)}; got {algo!r}")
    own = {"direct": dict(rows=rows, parallel=parallel, pack_per_image=pack_per_image),
           "winograd": dict(vb=vb, tb=tb, cc=cc)}
    other = [k for a, kw in own.items() if a != algo for k, v in kw.items() if v is not None]
    if other:
        raise ValueError(f"conv_relu_maxpool: {', '.join(other)} do not apply to algo {algo!r}")
    f, X, Wt, B = _function("conv_relu_maxpool", s, bias)
    if algo == "winograd":
        winograd.fused_block(f, X, Wt, B, s, pool, vb=vb, tb=tb, cc=cc)
    else:
        tiled_block(f, X, Wt, B, s, pool=pool, relu=True, rows=rows, parallel=parallel,
                    pack_per_image=pack_per_image)
    return f

"""The fused block ``maxpool(relu(conv2d(x, w) + bias))`` in one pass.

The convolution is the NCHWc register-blocked kernel of
:mod:`schedules.nchwc`; the pooling (which also applies ReLU and writes NCHW)
is the consumer, and the convolution is computed with ``compute_at`` inside
the pooling's tile of rows: for each image and each tile of pooled rows, only
the conv rows that tile needs are computed, into one tile-sized buffer reused
by every tile and sized to stay in L2, then pooled.  No full-size conv output
is ever written to memory; with at least two images per core the packed input
is made per image too (see :func:`schedules.nchwc.tiled_block`).
"""
from __future__ import annotations

from .conv import ConvShape, _function
from .nchwc import tiled_block


def function(s: ConvShape, pool=2, bias=True, rows=None, parallel=None, pack_per_image=None):
    """The scheduled Function for ``maxpool(relu(conv(x) + bias), pool)``
    (non-overlapping ``pool x pool`` windows, floor mode).  ``rows``: pooled
    rows per tile; ``parallel``: "n" or "c"; ``pack_per_image``: pack the
    input per image instead of one full-size copy (defaults from the host)."""
    if s.groups != 1:
        raise ValueError("conv_relu_maxpool: groups must be 1")
    f, X, Wt, B = _function("conv_relu_maxpool", s, bias)
    tiled_block(f, X, Wt, B, s, pool=pool, relu=True, rows=rows, parallel=parallel,
                pack_per_image=pack_per_image)
    return f

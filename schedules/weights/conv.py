"""Dense convolution weights in the blocked layout the NCHWc convolution
reads (:mod:`schedules.blocks.nchwc`), made once per weight: the solvers
that read it (``spatial_pack``, the fused block's ``direct``) take the
packed weight as an input instead of packing at every call (a 512 x 512 x 3
x 3 weight is 9.4 MB read and written per call, into fresh memory)."""
from __future__ import annotations

import numpy as np

from ..core.prepared import prepared
from ..core.transpose import transposed_into


def pack_weight(w, vb: int):
    """The weight ``w`` (a float32 ``Co x Ci x Kh x Kw`` NumPy array) as
    ``[Co/VB][Ci][Kh][Kw][VB]``, the output channels zero-padded to whole
    blocks of ``vb``: each block of ``vb`` output channels one tiled
    transpose (:func:`schedules.core.transpose.transposed_into`; NumPy's
    strided copy took 24 of a ResNet-18 training step's 200 ms at batch 2,
    every weight packed again after each update)."""
    co, ci, kh, kw = w.shape
    cob, inner = -(-co // vb), ci * kh * kw
    out = np.empty((cob, inner, vb), np.float32)
    rows = np.ascontiguousarray(w, np.float32).reshape(co, inner)
    for b in range(cob):
        block = rows[b * vb:(b + 1) * vb]
        if block.shape[0] < vb:                     # the last block's padding channels
            out[b] = 0.0
        transposed_into(block, out[b])
    return out.reshape(cob, ci, kh, kw, vb)


def packed_weight(w, vb: int):
    """:func:`pack_weight` of ``w`` (a NumPy array or CPU tensor), made once
    per value of ``w`` and kept (:func:`schedules.core.prepared.prepared`:
    never stale, in-place changes included)."""
    return prepared("nchwc_weight", [w], lambda a: pack_weight(a[0], vb), extra=(vb,))

"""Dense convolution weights in the blocked layout the NCHWc convolution
reads (:mod:`schedules.blocks.nchwc`), made once per weight: the solvers
that read it (``spatial_pack``, the fused block's ``direct``) take the
packed weight as an input instead of packing at every call (a 512 x 512 x 3
x 3 weight is 9.4 MB read and written per call, into fresh memory)."""
from __future__ import annotations

import numpy as np

from ..core.prepared import prepared
from ..core.transpose import packed_blocks


def pack_weight(w, vb: int):
    """The weight ``w`` (a float32 ``Co x Ci x Kh x Kw`` NumPy array) as
    ``[Co/VB][Ci][Kh][Kw][VB]``, the output channels zero-padded to whole
    blocks of ``vb``: each block of ``vb`` output channels one tiled
    transpose (:func:`schedules.core.transpose.packed_blocks`, the blocks
    split over the host's cores; NumPy's strided copy took 24 of a
    ResNet-18 training step's 200 ms at batch 2, every weight packed again
    after each update)."""
    co, ci, kh, kw = w.shape
    rows = np.ascontiguousarray(w, np.float32).reshape(co, ci * kh * kw)
    return packed_blocks(rows, vb).reshape(-(-co // vb), ci, kh, kw, vb)


def packed_weight(w, vb: int):
    """:func:`pack_weight` of ``w`` (a NumPy array or CPU tensor), made once
    per value of ``w`` and kept (:func:`schedules.core.prepared.prepared`:
    never stale, in-place changes included)."""
    return prepared("nchwc_weight", [w], lambda a: pack_weight(a[0], vb), extra=(vb,))

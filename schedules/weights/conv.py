"""Dense convolution weights in the blocked layout the NCHWc convolution
reads (:mod:`schedules.blocks.nchwc`), made once per weight: the solvers
that read it (``spatial_pack``, the fused block's ``direct``) take the
packed weight as an input instead of packing at every call (a 512 x 512 x 3
x 3 weight is 9.4 MB read and written per call, into fresh memory)."""
from __future__ import annotations

import numpy as np

from ..core.prepared import prepared


def pack_weight(w, vb: int):
    """The weight ``w`` (a float32 ``Co x Ci x Kh x Kw`` NumPy array) as
    ``[Co/VB][Ci][Kh][Kw][VB]``, the output channels zero-padded to whole
    blocks of ``vb``."""
    co, ci, kh, kw = w.shape
    cob = -(-co // vb)
    out = np.zeros((cob * vb, ci, kh, kw), np.float32)
    out[:co] = w
    return np.ascontiguousarray(out.reshape(cob, vb, ci, kh, kw).transpose(0, 2, 3, 4, 1))


def packed_weight(w, vb: int):
    """:func:`pack_weight` of ``w`` (a NumPy array or CPU tensor), made once
    per value of ``w`` and kept (:func:`schedules.core.prepared.prepared`:
    never stale, in-place changes included)."""
    return prepared("nchwc_weight", [w], lambda a: pack_weight(a[0], vb), extra=(vb,))

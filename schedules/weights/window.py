"""Sparse weights in windows: the layout of the sparse recurrent product on
AVX-512 hosts (:func:`schedules.blocks.rnn_cells.layer_function`).

Rows go in slices of ``SLICE`` (16, the float32 lanes of a 512-bit vector),
columns in windows of ``WINDOW`` (32).  For each slice and window, its
nonzeros are laid out in *slots*: slot ``k`` holds, for every row of the
slice, that row's ``k``-th nonzero in the window (its value, and its column
within the window as a byte), or a zero where the row has fewer; a window
of a slice has as many slots as its fullest row.  The product then reads,
per slot, 16 values, 16 bytes and, through the window's two vectors of the
input and one permute (:mod:`codegen.llvm.window`), 16 inputs: no gather.
The cost is the padding: at 15% density a 32-column window holds 4.8
nonzeros a row on average and 8 or 9 in the fullest of 16 rows (about 1.8
slots a nonzero, 9.4 bytes where CSR takes 8 and a gather each).

``wptr[slice * NW + w]`` is the first slot of window ``w`` of ``slice``
(``NW`` windows a row), so the slots of one window are
``wptr[i] .. wptr[i + 1]``; ``wval[slot * 16 + lane]`` and
``widx[slot * 16 + lane]`` (uint8, ``< 32``) the value and column."""
from __future__ import annotations

import numpy as np

SLICE = 16
WINDOW = 32


def windowed(rowptr, colidx, values, rows: int, cols: int):
    """``(wptr, wval, widx)`` of the CSR matrix ``rowptr, colidx, values``
    (``rows`` a multiple of :data:`SLICE`, ``cols`` columns); duplicate
    columns stay separate entries (summed by the product, as CSR's)."""
    if rows % SLICE:
        raise ValueError(f"windowed: rows ({rows}) must be a multiple of {SLICE}")
    rowptr = np.asarray(rowptr, np.int64)
    cols_of = np.asarray(colidx, np.int64)
    vals = np.asarray(values, np.float32)
    nw = max(1, -(-cols // WINDOW))
    row = np.repeat(np.arange(rows, dtype=np.int64), np.diff(rowptr))
    block = (row // SLICE) * nw + cols_of // WINDOW          # (slice, window)
    lane = row % SLICE
    # rank of each nonzero among its row's in the same window: sort by
    # (block, lane), stable (CSR order within a row)
    order = np.lexsort((lane, block))
    key = block[order] * SLICE + lane[order]
    first = np.ones(len(key), bool)
    first[1:] = key[1:] != key[:-1]
    start = np.maximum.accumulate(np.where(first, np.arange(len(key)), 0))
    rank = np.arange(len(key)) - start
    nblocks = rows // SLICE * nw
    slots = np.zeros(nblocks, np.int64)
    np.maximum.at(slots, block[order], rank + 1)
    wptr = np.zeros(nblocks + 1, np.int64)
    np.cumsum(slots, out=wptr[1:])
    total = int(wptr[-1])
    if total >= 2 ** 31:
        raise ValueError(f"windowed: {total} slots exceed int32 offsets")
    wval = np.zeros(total * SLICE, np.float32)
    widx = np.zeros(total * SLICE, np.uint8)
    at = (wptr[block[order]] + rank) * SLICE + lane[order]
    wval[at] = vals[order]
    widx[at] = (cols_of[order] % WINDOW).astype(np.uint8)
    return wptr.astype(np.int32), wval, widx

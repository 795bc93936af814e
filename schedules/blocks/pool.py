"""Max pooling (``torch.nn.functional.max_pool2d``'s windows: any kernel,
stride, padding, dilation and ceil mode) as one kernel over the planes of
an NCHW input.

Each plane (one image's channel) is copied, padded with -inf, into a
buffer of the plane's size that stays in cache (made right before the
plane's rows are pooled: ``compute_at``), then each output is the
NaN-propagating maximum of its window's taps (unrolled), the output
columns in vectors.  The planes run in parallel; their count is the
kernel's one param, so another batch size reuses the kernel."""
from __future__ import annotations

import tiramisu_py as tp

from ..host import host
from ..problems.pool import PoolShape


def max_pool2d_function(s: PoolShape, indices=False):
    """``out[p, y, x]`` = max over the window's taps of the -inf padded
    ``data[p]`` (``P`` planes: the kernel's param); with ``indices`` also
    ``indices[p, y, x]``, the flat position in the plane (``row * w + col``)
    of the tap torch's max_pool2d picks: the first maximum in row-major
    order, or, for a NaN maximum, the last NaN (its scan replaces the
    maximum on ``v > max`` or ``v != v``); computed in the same plane
    iteration from the maximum, two chains of selects over the taps."""
    f = tp.Function("max_pool2d_indices" if indices else "max_pool2d", params=["P"])
    X = f.input("data", ("P", s.h, s.w), tp.float32)
    q, iy, ix = f.var("q", 0, "P"), f.var("iy", 0, s.hp), f.var("ix", 0, s.wp)
    inside = (iy >= s.ph) & (iy < s.h + s.ph) & (ix >= s.pw) & (ix < s.w + s.pw)
    plane = f.computation("plane", [q, iy, ix],
                          tp.select(inside, X[q, iy - s.ph, ix - s.pw], float("-inf")))
    p, y, x = f.var("p", 0, "P"), f.var("y", 0, s.ho), f.var("x", 0, s.wo)
    taps = []                       # (value, row, column in the input) in scan order
    for ky in range(s.kh):
        for kx in range(s.kw):
            row, col = y * s.sh + ky * s.dh, x * s.sw + kx * s.dw
            taps.append((plane[p, row, col], row - s.ph, col - s.pw))
    best = taps[0][0]
    for v, _, _ in taps[1:]:
        best = tp.max(best, v)
    out = f.computation("pooled", [p, y, x], best)
    out.store_in(f.buffer("out", ("P", s.ho, s.wo), tp.float32, output=True), [p, y, x])
    plane.store_in(f.buffer("plane_padded", (s.hp, s.wp), tp.float32), [iy, ix])
    plane.compute_at(out, "p")
    lanes = host().lanes(4)
    for stmt, loop, extent in ((plane, "ix", s.wp), (out, "x", s.wo)):
        if extent >= 2 * lanes:
            stmt.split(loop, lanes, names=(f"{loop}0", f"{loop}1"))
            stmt.vectorize(f"{loop}1", lanes)
    out.parallelize("p")
    if indices:
        # (the taps read from the input, the padding as a value that never
        # matches: the plane's buffer is the next plane's once out is done)
        m = out[p, y, x]
        inputs = [((row >= 0) & (row < s.h) & (col >= 0) & (col < s.w), X[p, row, col],
                   tp.cast(row * s.w + col, tp.int64)) for _, row, col in taps]
        first, last_nan = tp.cast(0, tp.int64), tp.cast(0, tp.int64)
        for valid, v, at in reversed(inputs):   # the first tap equal to the maximum
            first = tp.select(tp.select(valid, v, float("nan")) == m, at, first)
        for valid, v, at in inputs:             # the last NaN
            v = tp.select(valid, v, 0.0)
            last_nan = tp.select(v != v, at, last_nan)
        where = f.computation("argmax", [p, y, x], tp.select(m != m, last_nan, first),
                              dtype=tp.int64)
        where.store_in(f.buffer("indices", ("P", s.ho, s.wo), tp.int64, output=True), [p, y, x])
        where.after(out, "p")
    return f

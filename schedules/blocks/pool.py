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


def max_pool2d_function(s: PoolShape):
    """``out[p, y, x]`` = max over the window's taps of the -inf padded
    ``data[p]`` (``P`` planes: the kernel's param)."""
    f = tp.Function("max_pool2d", params=["P"])
    X = f.input("data", ("P", s.h, s.w), tp.float32)
    q, iy, ix = f.var("q", 0, "P"), f.var("iy", 0, s.hp), f.var("ix", 0, s.wp)
    inside = (iy >= s.ph) & (iy < s.h + s.ph) & (ix >= s.pw) & (ix < s.w + s.pw)
    plane = f.computation("plane", [q, iy, ix],
                          tp.select(inside, X[q, iy - s.ph, ix - s.pw], float("-inf")))
    p, y, x = f.var("p", 0, "P"), f.var("y", 0, s.ho), f.var("x", 0, s.wo)
    best = None
    for ky in range(s.kh):
        for kx in range(s.kw):
            v = plane[p, y * s.sh + ky * s.dh, x * s.sw + kx * s.dw]
            best = v if best is None else tp.max(best, v)
    out = f.computation("out", [p, y, x], best)
    plane.store_in(f.buffer("plane_padded", (s.hp, s.wp), tp.float32), [iy, ix])
    plane.compute_at(out, "p")
    lanes = host().lanes(4)
    for stmt, loop, extent in ((plane, "ix", s.wp), (out, "x", s.wo)):
        if extent >= 2 * lanes:
            stmt.split(loop, lanes, names=(f"{loop}0", f"{loop}1"))
            stmt.vectorize(f"{loop}1", lanes)
    out.parallelize("p")
    return f

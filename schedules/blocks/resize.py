"""Image resize as a producer inside a convolution: torch's
``interpolate(x, size, mode, align_corners=False)`` for ``mode`` "bilinear"
and "nearest", written as an expression of the source image that a conv's
packed input evaluates in place of its plain read, so the resized image is
never a tensor of its own (:mod:`schedules.solvers.resize_conv`).

Coordinates are torch's, computed on the host once per shape as torch's CPU
kernels compute them (float32 arithmetic, ``aten/src/ATen/native/UpSample.h``):

* ``bilinear`` (half-pixel centres): ``scale = float(in) / out``;
  ``src = max(scale * (dst + 0.5) - 0.5, 0)``; ``i0 = min(floor(src), in - 1)``;
  ``i1 = i0 + (i0 < in - 1)``; ``l1 = clamp(src - i0, 0, 1)``, ``l0 = 1 - l1``
  (``in == out``: the identity).  The value is
  ``(x[i0, j0] * m0 + x[i0, j1] * m1) * l0 + (x[i1, j0] * m0 + x[i1, j1] * m1) * l1``,
  torch's order of operations.
* ``nearest`` (torch's legacy "nearest", not "nearest-exact"):
  ``min(floor(dst * scale), in - 1)`` (``out == in``: the identity,
  ``out == 2 * in``: ``dst >> 1``).

The tables are kernel inputs (``ry0``, ``ry1``, ``rly0``, ``rly1`` for rows,
``rx0``, ... for columns), indexed by the *padded* coordinate of the conv's
input: the padding entries point at row/column 0 with weight 0, and the read
there is discarded by the padding's ``select``, so every table read is in
bounds and a padded position is an exact 0.
"""
from __future__ import annotations

import numpy as np

import tiramisu_py as tp

MODES = ("bilinear", "nearest")


def linear_table(n_in: int, n_out: int):
    """``(i0, i1, l0, l1)`` of length ``n_out``: torch's bilinear source rows
    and weights (align_corners=False), float32 as torch computes them."""
    dst = np.arange(n_out)
    if n_in == n_out:
        return (dst.astype(np.int32), dst.astype(np.int32), np.ones(n_out, np.float32),
                np.zeros(n_out, np.float32))
    f32 = np.float32
    scale = f32(n_in) / f32(n_out)
    src = scale * (dst.astype(f32) + f32(0.5)) - f32(0.5)
    src = np.where(src < 0, f32(0), src).astype(f32)
    i0 = np.minimum(np.floor(src).astype(np.int64), n_in - 1)
    l1 = np.clip(src - i0.astype(f32), f32(0), f32(1)).astype(f32)
    i1 = i0 + (i0 < n_in - 1)
    return i0.astype(np.int32), i1.astype(np.int32), (f32(1) - l1).astype(f32), l1


def nearest_table(n_in: int, n_out: int):
    """torch's legacy nearest source index of each of ``n_out`` positions."""
    dst = np.arange(n_out)
    if n_out == n_in:
        return dst.astype(np.int32)
    if n_out == 2 * n_in:
        return (dst >> 1).astype(np.int32)
    scale = np.float32(n_in) / np.float32(n_out)
    src = np.floor(dst.astype(np.float32) * scale).astype(np.int64)
    return np.minimum(src, n_in - 1).astype(np.int32)


def _padded(a, pad):
    """``a`` with ``pad`` zeros on both sides (index 0, weight 0)."""
    return np.concatenate([np.zeros(pad, a.dtype), a, np.zeros(pad, a.dtype)]) if pad else a


def tables(mode, src_hw, size, padding):
    """The kernel's table arguments, by name, for a resize from ``src_hw`` to
    ``size`` ((height, width)), indexed by the coordinate padded by
    ``padding`` ((ph, pw))."""
    out = {}
    for axis, (n_in, n_out, pad) in zip("yx", zip(src_hw, size, padding)):
        if mode == "nearest":
            out[f"r{axis}0"] = _padded(nearest_table(n_in, n_out), pad)
        else:
            for name, t in zip(("0", "1", "l0", "l1"), linear_table(n_in, n_out)):
                out[f"r{axis}{name}"] = _padded(t, pad)
    return out


def source(f, X, mode, padded_hw):
    """Declares the tables as inputs of ``f`` and returns ``value(n, c, y, x)``:
    the resized image of ``X`` at the padded coordinate ``(y, x)`` (the
    caller selects 0 outside the image)."""
    if mode not in MODES:
        raise ValueError(f"resize: mode must be one of {', '.join(MODES)}, got {mode!r}")
    hp, wp = padded_hw
    if mode == "nearest":
        ry, rx = f.input("ry0", (hp,), tp.int32), f.input("rx0", (wp,), tp.int32)
        return lambda n, c, y, x: X[n, c, ry[y], rx[x]]
    ry0, ry1 = f.input("ry0", (hp,), tp.int32), f.input("ry1", (hp,), tp.int32)
    ly0, ly1 = f.input("ryl0", (hp,), tp.float32), f.input("ryl1", (hp,), tp.float32)
    rx0, rx1 = f.input("rx0", (wp,), tp.int32), f.input("rx1", (wp,), tp.int32)
    lx0, lx1 = f.input("rxl0", (wp,), tp.float32), f.input("rxl1", (wp,), tp.float32)

    def value(n, c, y, x):
        top = X[n, c, ry0[y], rx0[x]] * lx0[x] + X[n, c, ry0[y], rx1[x]] * lx1[x]
        bottom = X[n, c, ry1[y], rx0[x]] * lx0[x] + X[n, c, ry1[y], rx1[x]] * lx1[x]
        return top * ly0[y] + bottom * ly1[y]
    return value

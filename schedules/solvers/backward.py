"""Backward kernels (and any-dtype forward kernels) written in the DSL, for
the PyTorch ops of :mod:`schedules.torch_ops`.

* GEMM: ``dA = dC @ B^T`` and ``dB = A^T @ dC`` are two GEMMs
  (:func:`matmul`; float32 goes to the BLIS schedule of :mod:`schedules.gemm`).
* conv2d: the gradient of the input is a transposed convolution
  (:func:`conv_grad_input`: the output gradient with ``stride - 1`` zeros
  inserted between its elements and padded by ``dilation * (k - 1) -
  padding``, convolved with the flipped weights, input and output channels
  swapped); the gradient of the weights is a correlation of the padded input
  with the output gradient, and the bias's the sum of the output gradient
  (:func:`conv_grad_weight`).
* the fused conv-ReLU-maxpool block: :func:`fused_grad_pre` recomputes the
  convolution in one pass, takes the first maximum of each pooling window
  (as torch's max_pool2d does) and the ReLU mask, and scatters the pooled
  gradient to the convolution's output; the conv kernels above finish.

Every kernel here takes ``dtype`` (float32 or float64), and stride, padding
and dilation as ``(h, w)`` pairs; its schedule is plain (parallel outer loop,
vector inner loop): these are the reference kernels that make float64 and
gradcheck possible, not tuned ones.
"""
from __future__ import annotations

import tiramisu_py as tp

from ..blocks.conv_common import taps, vector_loop, window_first
from ..host import host
from ..problems.conv import ConvShape


def _dt(dtype):
    return {"float32": tp.float32, "float64": tp.float64}[dtype]


def _lanes(dtype):
    return host().lanes(4 if dtype == "float32" else 8)


def _parallel(n):
    """Images in parallel when there are enough, else channels."""
    return n >= 2 * host().cores


# ------------------------------------------------------------------ GEMM
def matmul(n, m, k, dtype="float64"):
    """``C = A @ B``: a plain schedule (``i`` parallel, ``j`` vectorised)."""
    dt = _dt(dtype)
    f = tp.Function(f"matmul_{dtype}", params={})
    i, j, kk = f.var("i", 0, n), f.var("j", 0, m), f.var("k", 0, k)
    A = f.input("A", (n, k), dt)
    B = f.input("B", (k, m), dt)
    C = f.computation("C", [i, j], tp.cast(dt, 0.0))
    C[i, j] += A[i, kk] * B[kk, j]
    C.update.reorder("i", "k", "j")
    vector_loop(C.update, "j", m, _lanes(dtype))
    C.update.parallelize("i")
    C.parallelize("i")
    return f


# ------------------------------------------------------------------ conv2d
def _padded(f, X, s: ConvShape, dt, name="xp"):
    ph, pw = s.ph, s.pw
    if ph == 0 and pw == 0:
        return X
    hp, wp = s.hp, s.wp
    n, c = f.var(f"{name}_n", 0, s.n), f.var(f"{name}_c", 0, s.ci)
    y, x = f.var(f"{name}_y", 0, hp), f.var(f"{name}_x", 0, wp)
    inside = (y >= ph) & (y < s.h + ph) & (x >= pw) & (x < s.w + pw)
    xp = f.computation(name, [n, c, y, x],
                       tp.select(inside, X[n, c, y - ph, x - pw], tp.cast(dt, 0.0)))
    xp.parallelize(n if _parallel(s.n) else c)
    return xp


def _conv_into(f, name, X, Wt, B, s: ConvShape, dt, dtype):
    """``name[n, co, y, x] = bias[co] + sum W * X`` over the taps inside the
    input (:func:`~schedules.blocks.conv_common.taps`; a computation)."""
    xp = _padded(f, X, s, dt)
    cig, cog = s.ci // s.groups, s.co // s.groups
    sh, sw, dh, dw = s.sh, s.sw, s.dh, s.dw
    n, co = f.var(f"{name}_n", 0, s.n), f.var(f"{name}_co", 0, s.co)
    y, x = f.var(f"{name}_y", 0, s.ho), f.var(f"{name}_x", 0, s.wo)
    ci = f.var(f"{name}_ci", 0, cig)
    ky, kx = taps(f, s, y, x, names=(f"{name}_ky", f"{name}_kx"))     # the padding's skipped
    out = f.computation(name, [n, co, y, x], B[co] if B is not None else tp.cast(dt, 0.0))
    chan = ci if s.groups == 1 else (co // cog) * cig + ci
    out[n, co, y, x] += Wt[co, ci, ky, kx] * xp[n, chan, y * sh + ky * dh, x * sw + kx * dw]
    u = out.update
    u.reorder(n.name, co.name, y.name, ci.name, ky.name, kx.name, x.name)
    vector_loop(u, x.name, s.wo, _lanes(dtype))
    par = n.name if _parallel(s.n) else co.name
    u.parallelize(par)
    out.parallelize(par)
    return out


def conv_forward(s: ConvShape, dtype="float64", bias=True):
    """conv2d, NCHW, any stride/padding/dilation/groups (inputs ``data``,
    ``weight``, ``bias``; output ``out``)."""
    dt = _dt(dtype)
    f = tp.Function(f"conv2d_{dtype}", params={})
    X = f.input("data", (s.n, s.ci, s.h, s.w), dt)
    Wt = f.input("weight", (s.co, s.ci // s.groups, s.kh, s.kw), dt)
    B = f.input("bias", (s.co,), dt) if bias else None
    _conv_into(f, "out", X, Wt, B, s, dt, dtype)
    return f


def conv_grad_input(s: ConvShape, dtype="float32"):
    """``grad_data`` from ``grad`` (N, Co, Ho, Wo) and ``weight``: the
    transposed convolution."""
    dt = _dt(dtype)
    f = tp.Function(f"conv2d_grad_input_{dtype}", params={})
    G = f.input("grad", (s.n, s.co, s.ho, s.wo), dt)
    Wt = f.input("weight", (s.co, s.ci // s.groups, s.kh, s.kw), dt)
    sh, sw, ph, pw, dh, dw = s.sh, s.sw, s.ph, s.pw, s.dh, s.dw
    qh, qw = dh * (s.kh - 1) - ph, dw * (s.kw - 1) - pw
    hd, wd = s.h + dh * (s.kh - 1), s.w + dw * (s.kw - 1)
    # the output gradient, zero-inserted by the stride and padded: gd[yy]
    # holds grad[(yy - qh) / sh] where that is a whole row inside grad
    n, c = f.var("gn", 0, s.n), f.var("gc", 0, s.co)
    yy, xx = f.var("gy", 0, hd), f.var("gx", 0, wd)
    ty, tx = yy - qh, xx - qw
    hit = (ty >= 0) & (ty < s.ho * sh) & (tx >= 0) & (tx < s.wo * sw)
    if sh > 1:
        hit = hit & (ty % sh == 0)
    if sw > 1:
        hit = hit & (tx % sw == 0)
    gd = f.computation("grad_dilated", [n, c, yy, xx],
                       tp.select(hit, G[n, c, ty // sh, tx // sw], tp.cast(dt, 0.0)))
    gd.parallelize(n if _parallel(s.n) else c)
    cig, cog = s.ci // s.groups, s.co // s.groups
    n2, ci = f.var("n", 0, s.n), f.var("ci", 0, s.ci)
    y, x = f.var("y", 0, s.h), f.var("x", 0, s.w)
    co, ky, kx = f.var("co", 0, cog), f.var("ky", 0, s.kh), f.var("kx", 0, s.kw)
    dx = f.computation("grad_data", [n2, ci, y, x], tp.cast(dt, 0.0))
    chan = co if s.groups == 1 else (ci // cig) * cog + co
    wci = ci if s.groups == 1 else ci % cig
    dx[n2, ci, y, x] += gd[n2, chan, y + ky * dh, x + kx * dw] * \
        Wt[chan, wci, s.kh - 1 - ky, s.kw - 1 - kx]
    u = dx.update
    u.reorder("n", "ci", "y", "co", "ky", "kx", "x")
    vector_loop(u, "x", s.w, _lanes(dtype))
    par = "n" if _parallel(s.n) else "ci"
    u.parallelize(par)
    dx.parallelize(par)
    return f


def conv_grad_weight(s: ConvShape, dtype="float32"):
    """``grad_weight`` (Co, Ci/g, Kh, Kw) and ``grad_bias`` (Co,) from the
    input ``data`` and ``grad``: a correlation, and a sum."""
    dt = _dt(dtype)
    f = tp.Function(f"conv2d_grad_weight_{dtype}", params={})
    X = f.input("data", (s.n, s.ci, s.h, s.w), dt)
    G = f.input("grad", (s.n, s.co, s.ho, s.wo), dt)
    xp = _padded(f, X, s, dt)
    sh, sw, dh, dw = s.sh, s.sw, s.dh, s.dw
    cig, cog = s.ci // s.groups, s.co // s.groups
    co, ci = f.var("co", 0, s.co), f.var("ci", 0, cig)
    ky, kx = f.var("ky", 0, s.kh), f.var("kx", 0, s.kw)
    n, y, x = f.var("n", 0, s.n), f.var("y", 0, s.ho), f.var("x", 0, s.wo)
    dw_ = f.computation("grad_weight", [co, ci, ky, kx], tp.cast(dt, 0.0))
    chan = ci if s.groups == 1 else (co // cog) * cig + ci
    dw_[co, ci, ky, kx] += G[n, co, y, x] * xp[n, chan, y * sh + ky * dh, x * sw + kx * dw]
    dw_.update.parallelize("co")
    dw_.parallelize("co")
    bc, bn, by, bx = f.var("bco", 0, s.co), f.var("bn", 0, s.n), f.var("by", 0, s.ho), f.var("bx", 0, s.wo)
    db = f.computation("grad_bias", [bc], tp.cast(dt, 0.0))
    db[bc] += G[bn, bc, by, bx]
    db.update.parallelize("bco")
    return f


# ------------------------------------------------------------------ fused block
def fused_forward(s: ConvShape, pool, dtype="float64"):
    """``max_pool2d(relu(conv2d(data, weight, bias)), pool)`` (floor mode),
    plain: the convolution, then the pooled maximum."""
    dt = _dt(dtype)
    f = tp.Function(f"conv_relu_maxpool_{dtype}", params={})
    X = f.input("data", (s.n, s.ci, s.h, s.w), dt)
    Wt = f.input("weight", (s.co, s.ci // s.groups, s.kh, s.kw), dt)
    B = f.input("bias", (s.co,), dt)
    z = _conv_into(f, "conv", X, Wt, B, s, dt, dtype)
    n, c = f.var("pn", 0, s.n), f.var("pc", 0, s.co)
    py, px = f.var("py", 0, s.ho // pool), f.var("px", 0, s.wo // pool)
    best = None
    for dy in range(pool):
        for dx in range(pool):
            v = z[n, c, py * pool + dy, px * pool + dx]
            best = v if best is None else tp.max(best, v)
    out = f.computation("out", [n, c, py, px], tp.max(best, tp.cast(dt, 0.0)))
    out.parallelize(n if _parallel(s.n) else c)
    return f


def fused_grad_pre(s: ConvShape, pool, dtype="float32"):
    """``grad_conv`` (N, Co, Ho, Wo): the pooled output's ``grad`` sent to the
    first maximum of its window where the convolution is positive (ReLU), 0
    elsewhere.  Recomputes the convolution from ``data``, ``weight``,
    ``bias``."""
    dt = _dt(dtype)
    f = tp.Function(f"conv_relu_maxpool_grad_{dtype}", params={})
    X = f.input("data", (s.n, s.ci, s.h, s.w), dt)
    Wt = f.input("weight", (s.co, s.ci // s.groups, s.kh, s.kw), dt)
    B = f.input("bias", (s.co,), dt)
    ph, pw = s.ho // pool, s.wo // pool
    G = f.input("grad", (s.n, s.co, ph, pw), dt)
    z = _conv_into(f, "conv", X, Wt, B, s, dt, dtype)
    _, first = window_first(f, z, s, pool)
    n, c = f.var("n", 0, s.n), f.var("c", 0, s.co)
    y, x = f.var("y", 0, s.ho), f.var("x", 0, s.wo)
    gz = f.computation("grad_conv", [n, c, y, x], tp.cast(dt, 0.0))
    # rows and columns past the last whole window (floor mode) keep 0
    y2, x2 = f.var("y2", 0, ph * pool), f.var("x2", 0, pw * pool)
    pos = tp.cast(tp.int32, (y2 % pool) * pool + x2 % pool)
    take = (z[n, c, y2, x2] > tp.cast(dt, 0.0)) & (first[n, c, y2 // pool, x2 // pool] == pos)
    gz[n, c, y2, x2] += tp.select(take, G[n, c, y2 // pool, x2 // pool], tp.cast(dt, 0.0))
    gz.update.parallelize(n if _parallel(s.n) else c)
    gz.parallelize(n if _parallel(s.n) else c)
    return f

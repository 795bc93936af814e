"""conv2d (NCHW, float32; stride, padding, dilation, groups incl. depthwise)
with three algorithms, each an algorithm + schedule in the DSL:

* ``direct``: the 7-deep loop nest; an output tile of COB channels x XB columns
  is accumulated in registers (co unrolled, x vectorised) while ci, ky, kx run.
* ``im2col``: per image, the input patches are copied into a matrix laid out as
  the GEMM's packed B panels; the product with the weights (as a ``Co x
  Ci*Kh*Kw`` matrix) is the BLIS GEMM of :mod:`schedules.gemm`.  ``groups == 1``.
* ``spatial_pack``: NCHWc blocking: the input is packed into ``[n][C/CB][H][W][CB]``
  and the weights into ``[Co/VB][Ci][Kh][Kw][VB]``; the output is computed in
  ``[n][Co/VB][Ho][Wo][VB]`` (VB output channels in SIMD lanes, XB columns in
  registers) and unpacked to NCHW.  ``groups == 1``.

Padding is a computation (``select`` on the borders) of the padded input.
"""
from __future__ import annotations

from dataclasses import dataclass

import tiramisu_py as tp

from .gemm import blis, default_params
from .host import host

ALGOS = ("direct", "im2col", "spatial_pack")


@dataclass(frozen=True)
class ConvShape:
    n: int
    ci: int
    h: int
    w: int
    co: int
    kh: int
    kw: int
    stride: int = 1
    padding: int = 0
    dilation: int = 1
    groups: int = 1

    @property
    def ho(self):
        return (self.h + 2 * self.padding - self.dilation * (self.kh - 1) - 1) // self.stride + 1

    @property
    def wo(self):
        return (self.w + 2 * self.padding - self.dilation * (self.kw - 1) - 1) // self.stride + 1

    @property
    def flops(self):
        return 2 * self.n * self.co * self.ho * self.wo * (self.ci // self.groups) * self.kh * self.kw


def applicable(algo, s: ConvShape) -> bool:
    return algo == "direct" or s.groups == 1


# ------------------------------------------------------------------ pieces
def _function(name, s: ConvShape, bias):
    f = tp.Function(name, params={})
    X = f.input("data", (s.n, s.ci, s.h, s.w), tp.float32)
    Wt = f.input("weight", (s.co, s.ci // s.groups, s.kh, s.kw), tp.float32)
    B = f.input("bias", (s.co,), tp.float32) if bias else None
    return f, X, Wt, B


def padded(f, X, s: ConvShape, name="xp"):
    """The zero-padded input (a computation), or ``X`` itself without padding."""
    p = s.padding
    if p == 0:
        return X
    hp, wp = s.h + 2 * p, s.w + 2 * p
    n, c = f.var(f"{name}_n", 0, s.n), f.var(f"{name}_c", 0, s.ci)
    y, x = f.var(f"{name}_y", 0, hp), f.var(f"{name}_x", 0, wp)
    inside = (y >= p) & (y < s.h + p) & (x >= p) & (x < s.w + p)
    xp = f.computation(name, [n, c, y, x], tp.select(inside, X[n, c, y - p, x - p], 0.0))
    xp.parallelize(c if s.n < 2 * host().cores else n)
    return xp


def _vector_tile(extent, lanes):
    """Columns per SIMD tile: the extent itself when short, else the largest
    divisor in [lanes, 2 lanes] (a multiple of lanes first), else 2 lanes."""
    if extent <= 2 * lanes:
        return extent
    for want_multiple in (True, False):
        for t in range(2 * lanes, lanes - 1, -1):
            if extent % t == 0 and (t % lanes == 0 or not want_multiple):
                return t
    return 2 * lanes


def _accumulators():
    """SIMD registers a register block may use for accumulators."""
    return max(4, host().vector_registers // 2)


# ------------------------------------------------------------------ direct
def direct(s: ConvShape, bias=True):
    f, X, Wt, B = _function("conv2d_direct", s, bias)
    xp = padded(f, X, s)
    cig, cog = s.ci // s.groups, s.co // s.groups
    n, co = f.var("n", 0, s.n), f.var("co", 0, s.co)
    y, x = f.var("y", 0, s.ho), f.var("x", 0, s.wo)
    ci, ky, kx = f.var("ci", 0, cig), f.var("ky", 0, s.kh), f.var("kx", 0, s.kw)
    out = f.computation("out", [n, co, y, x], B[co] if bias else 0.0)
    chan = ci if s.groups == 1 else (co // cog) * cig + ci
    out[n, co, y, x] += Wt[co, ci, ky, kx] * xp[n, chan, y * s.stride + ky * s.dilation,
                                                 x * s.stride + kx * s.dilation]
    lanes = host().lanes(4)
    xb = _vector_tile(s.wo, lanes)
    cob = max(1, min(s.co, _accumulators() // -(-xb // lanes)))
    u = out.update
    u.split("co", cob, names=("co0", "co1")).split("x", xb, names=("x0", "x1"))
    u.reorder("n", "co0", "y", "x0", "ci", "ky", "kx", "co1", "x1")
    u.unroll("co1", cob)
    u.vectorize("x1", xb)
    par = "co0" if -(-s.co // cob) >= 4 * host().cores or s.n < host().cores else "n"
    u.parallelize(par)
    out.parallelize("co" if par == "co0" else "n")
    return f


# ------------------------------------------------------------------ im2col + GEMM
def im2col(s: ConvShape, bias=True):
    """``out[n] = W (Co x R) @ col[n] (R x P)``, R = Ci*Kh*Kw, P = Ho*Wo; the
    weights are passed as the ``Co x R`` matrix ``w2``."""
    if s.groups != 1:
        raise ValueError("im2col: groups must be 1")
    f = tp.Function("conv2d_im2col", params={})
    X = f.input("data", (s.n, s.ci, s.h, s.w), tp.float32)
    R, P = s.ci * s.kh * s.kw, s.ho * s.wo
    W2 = f.input("w2", (s.co, R), tp.float32)
    B = f.input("bias", (s.co,), tp.float32) if bias else None
    xp = padded(f, X, s)
    p_ = default_params(s.co, P, R)
    n, r, p = f.var("cn", 0, s.n), f.var("r", 0, R), f.var("p", 0, P)
    kk = s.kh * s.kw
    col = f.computation("col", [n, r, p], xp[n, r // kk,
                                              (p // s.wo) * s.stride + ((r // s.kw) % s.kh) * s.dilation,
                                              (p % s.wo) * s.stride + (r % s.kw) * s.dilation])
    # laid out as the GEMM's packed B panels: [p / NR][r][p % NR]
    col.store_in(f.buffer("col_panels", (-(-P // p_.nr), R, p_.nr), tp.float32),
                 [p // p_.nr, r, p % p_.nr])
    n2, co, p2, r2 = f.var("n", 0, s.n), f.var("co", 0, s.co), f.var("j", 0, P), f.var("k", 0, R)
    out = f.computation("out", [n2, co, p2], B[co] if bias else 0.0)
    out[n2, co, p2] += W2[co, r2] * col[n2, r2, p2]
    out.parallelize("co")
    blis(out.update, W2, None, "co", "j", "k", p_, outer=("n",))
    col.compute_at(out.update, "n")
    return f


# ------------------------------------------------------------------ spatial pack
def blocked_conv(f, X, Wt, B, s: ConvShape, vb=None, xb=None, per_image=False):
    """The NCHWc part of ``spatial_pack``: packs the input (zero-padded on the
    way) and the weights and returns ``(out_blocked, vb)``, the output
    ``[n][Co/VB][Ho][Wo][VB]`` with its register-blocked schedule (``xb``
    columns unrolled x ``vb`` channels vectorised); parallelism is left to the
    caller, as is the placement of the packed input ``x_packed`` when
    ``per_image``: then it is stored in an image-sized buffer (one per thread
    when the image loop is parallel) instead of a full copy, and the caller
    computes it per image, right before that image's convolution.  Returns
    ``(out_blocked, vb, x_packed)``."""
    lanes = host().lanes(4)
    if vb is None:      # two SIMD vectors of output channels when they divide Co
        vb = next((v for v in (2 * lanes, lanes) if s.co % v == 0), s.co)
    cob = -(-s.co // vb)
    # input [n][Ci/CB][Hp][Wp][CB]
    cb = min(s.ci, lanes)
    hp, wp = s.h + 2 * s.padding, s.w + 2 * s.padding
    xn, xb_, xy, xx, xc = (f.var(nm, 0, e) for nm, e in
                           (("pn", s.n), ("icb", -(-s.ci // cb)), ("iy", hp), ("ix", wp), ("ic", cb)))
    p = s.padding
    inside = (xb_ * cb + xc < s.ci) & (xy >= p) & (xy < s.h + p) & (xx >= p) & (xx < s.w + p)
    xpk = f.computation("x_packed", [xn, xb_, xy, xx, xc],
                        tp.select(inside, X[xn, xb_ * cb + xc, xy - p, xx - p], 0.0))
    if per_image:
        xpk.store_in(f.buffer("x_image", (-(-s.ci // cb), hp, wp, cb), tp.float32),
                     [xb_, xy, xx, xc])
    else:
        xpk.parallelize("pn" if s.n >= host().cores else "icb")
    # weights [Co/VB][Ci][Kh][Kw][VB]
    wo_, wc, wy, wx, wv = (f.var(nm, 0, e) for nm, e in
                           (("wb", cob), ("wci", s.ci), ("wky", s.kh), ("wkx", s.kw), ("wv", vb)))
    wpk = f.computation("w_packed", [wo_, wc, wy, wx, wv], Wt[wo_ * vb + wv, wc, wy, wx])
    wpk.parallelize("wb" if cob >= 2 * host().cores else "wci")
    # output [n][Co/VB][Ho][Wo][VB], XB columns x VB channels in registers
    n, ob = f.var("n", 0, s.n), f.var("ob", 0, cob)
    y, x, v = f.var("y", 0, s.ho), f.var("x", 0, s.wo), f.var("v", 0, vb)
    ci, ky, kx = f.var("ci", 0, s.ci), f.var("ky", 0, s.kh), f.var("kx", 0, s.kw)
    with f.nest(n, ob, y):      # each output row is initialised, then accumulated
        outc = f.computation("out_blocked", [n, ob, y, x, v], B[ob * vb + v] if B is not None else 0.0)
        outc[n, ob, y, x, v] += wpk[ob, ci, ky, kx, v] * xpk[n, ci // cb, y * s.stride + ky * s.dilation,
                                                              x * s.stride + kx * s.dilation, ci % cb]
    if xb is None:      # accumulators: xb x (vb / lanes) registers, a divisor of Wo if one fits
        # (half of the registers: a larger block measured slower, 28 accumulators
        # ran at 0.5-0.65x of 16 on an AVX-512 Xeon, through spills and reloads)
        room = max(1, host().vector_registers // 2 // -(-vb // lanes))
        xb = max((d for d in range(1, min(room, s.wo) + 1) if s.wo % d == 0), default=1)
        if xb < room // 2:
            xb = min(room, s.wo)
    u = outc.update
    u.split("x", xb, names=("x0", "x1"))
    u.reorder("n", "ob", "y", "x0", "ci", "ky", "kx", "x1", "v")
    u.unroll("x1", xb)
    u.vectorize("v", vb)
    return outc, vb, xpk


def spatial_pack(s: ConvShape, bias=True, vb=None, xb=None, parallel=None):
    """``vb`` output channels per register (a multiple of the SIMD lanes), ``xb``
    output columns per register block, ``parallel``: the loop run in parallel,
    "n" (images: each thread packs its own) or "ob" (blocks of output
    channels); defaults from the host."""
    if s.groups != 1:
        raise ValueError("spatial_pack: groups must be 1")
    if parallel not in (None, "n", "ob"):
        raise ValueError(f"spatial_pack: parallel must be 'n' or 'ob', got {parallel!r}")
    f, X, Wt, B = _function("conv2d_spatial_pack", s, bias)
    par = parallel or ("n" if s.n >= 2 * host().cores else "ob")
    outc, vb, xpk = blocked_conv(f, X, Wt, B, s, vb, xb, per_image=True)
    xpk.compute_at(outc.update, "n")
    outc.update.parallelize(par)
    outc.parallelize(par)
    # unpack to NCHW
    n3, c3 = f.var("un", 0, s.n), f.var("uc", 0, s.co)
    y3, x3 = f.var("uy", 0, s.ho), f.var("ux", 0, s.wo)
    out = f.computation("out", [n3, c3, y3, x3], outc[n3, c3 // vb, y3, x3, c3 % vb])
    out.parallelize("uc" if par == "ob" else "un")
    return f


BUILDERS = {"direct": direct, "im2col": im2col, "spatial_pack": spatial_pack}

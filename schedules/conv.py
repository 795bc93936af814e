"""conv2d (NCHW, float32; stride, padding, dilation, groups incl. depthwise)
with three algorithms, each an algorithm + schedule in the DSL:

* ``direct``: the 7-deep loop nest; an output tile of COB channels x XB columns
  is accumulated in registers (co unrolled, x vectorised) while ci, ky, kx run.
* ``im2col``: per image, the input patches are copied into a matrix laid out as
  the GEMM's packed B panels; the product with the weights (as a ``Co x
  Ci*Kh*Kw`` matrix) is the BLIS GEMM of :mod:`schedules.gemm`.  ``groups == 1``.
* ``spatial_pack``: NCHWc blocking (:mod:`schedules.nchwc`): the input is
  packed into ``[n][C/CB][H][W][CB]`` (per image) and the weights into
  ``[Co/VB][Ci][Kh][Kw][VB]``; the output is computed in ``[Co/VB][rows][Wo][VB]``
  tiles of rows (VB output channels in SIMD lanes, XB columns in registers)
  that stay in L2, each unpacked to NCHW right away.  ``groups == 1``.

Padding is a computation (``select`` on the borders) of the padded input.
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np

import tiramisu_py as tp

from .gemm import blis, default_params
from .host import host
from .nchwc import tiled_block

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
    stride: int | tuple = 1        # int, or (height, width) as torch takes them;
    padding: int | tuple = 0       # kept as an int when both are equal (as torch
    dilation: int | tuple = 1      # prints them), so equal shapes compare equal
    groups: int = 1

    def __post_init__(self):
        for name in ("stride", "padding", "dilation"):
            v = getattr(self, name)
            if isinstance(v, (tuple, list)) and len(v) == 2 and v[0] == v[1]:
                object.__setattr__(self, name, int(v[0]))
            elif isinstance(v, list):
                object.__setattr__(self, name, tuple(v))

    def _hw(self, name, axis):
        v = getattr(self, name)
        return v[axis] if isinstance(v, tuple) else v

    sh = property(lambda self: self._hw("stride", 0))
    sw = property(lambda self: self._hw("stride", 1))
    ph = property(lambda self: self._hw("padding", 0))
    pw = property(lambda self: self._hw("padding", 1))
    dh = property(lambda self: self._hw("dilation", 0))
    dw = property(lambda self: self._hw("dilation", 1))

    hp = property(lambda self: self.h + 2 * self.ph, doc="the zero-padded input's height")
    wp = property(lambda self: self.w + 2 * self.pw, doc="the zero-padded input's width")

    @property
    def ho(self):
        return (self.hp - self.dh * (self.kh - 1) - 1) // self.sh + 1

    @property
    def wo(self):
        return (self.wp - self.dw * (self.kw - 1) - 1) // self.sw + 1

    @property
    def flops(self):
        return 2 * self.n * self.co * self.ho * self.wo * (self.ci // self.groups) * self.kh * self.kw

    @classmethod
    def make(cls, x_shape, w_shape, stride=1, padding=0, dilation=1, groups=1, op="conv2d",
             names=("input", "weight")):
        """The shape of ``op``'s call on an input of shape ``x_shape`` (NCHW)
        and a weight of shape ``w_shape`` (OIHW), checked: ValueError starting
        with ``op`` and naming the argument (``names``: what the op calls its
        input and weight).  ``stride``, ``padding``, ``dilation``: an int or a
        (height, width) pair, as torch takes them; ``padding`` also "valid"
        or "same" (:func:`padding_of`)."""
        stride, dilation = pair(stride, "stride", 1, op), pair(dilation, "dilation", 1, op)
        if not isinstance(groups, (int, np.integer)) or isinstance(groups, bool) or groups < 1:
            raise ValueError(f"{op}: groups must be a positive int, got {groups!r}")
        n, ci, h, w = x_shape
        co, cig, kh, kw = w_shape
        if kh < 1 or kw < 1:
            raise ValueError(f"{op}: the kernel is {kh}x{kw}; it must be at least 1x1")
        padding = padding_of(padding, kh, kw, stride, dilation, op)
        if ci % groups or co % groups:
            raise ValueError(f"{op}: groups={groups} must divide the {ci} input and {co} output "
                             "channels")
        (xn, wn), groups = names, int(groups)
        if cig != ci // groups:
            raise ValueError(f"{op}: {wn} has {cig} input channels, {xn} has {ci}" if groups == 1
                             else f"{op}: {wn} has {cig} input channels per group; {xn} has {ci} "
                             f"channels in {groups} groups, so {ci // groups} were expected")
        s = cls(n, ci, h, w, co, kh, kw, stride, padding, dilation, groups)
        if s.ho < 1 or s.wo < 1:
            raise ValueError(f"{op}: the {kh}x{kw} kernel (dilation {dilation}) does not fit the "
                             f"{h}x{w} input with padding {padding}")
        return s


def pair(v, name, least, op="conv2d"):
    """``v`` (an int, or a pair of ints for height and width, as torch takes
    them) checked: each at least ``least``; an int or a tuple of two ints."""
    def ok(i):
        return isinstance(i, (int, np.integer)) and not isinstance(i, bool) and i >= least
    items = tuple(v) if isinstance(v, (tuple, list)) else (v,)
    if not (ok(v) or (isinstance(v, (tuple, list)) and len(items) == 2 and all(map(ok, items)))):
        what = "non-negative" if least == 0 else "positive"
        raise ValueError(f"{op}: {name} must be a {what} int or a pair of them "
                         f"(height, width), got {v!r}")
    return int(items[0]) if len(items) == 1 else (int(items[0]), int(items[1]))


def padding_of(padding, kh, kw, stride, dilation, op="conv2d"):
    """torch's ``padding``: an int, a pair, "valid" (0) or "same" (stride 1;
    the total padding ``dilation * (k - 1)`` must be even: torch puts an odd
    extra row on one side, which these kernels do not).  ``stride`` and
    ``dilation`` as :func:`pair` returns them."""
    if isinstance(padding, str):
        if padding == "valid":
            return 0
        if padding != "same":
            raise ValueError(f"{op}: padding must be an int, a pair, 'valid' or 'same'; "
                             f"got {padding!r}")
        if stride not in (1, (1, 1)):
            raise ValueError(f"{op}: padding='same' is not supported for strided convolutions "
                             f"(stride={stride!r}), as in torch")
        dh, dw = dilation if isinstance(dilation, tuple) else (dilation, dilation)
        th, tw = dh * (kh - 1), dw * (kw - 1)
        if th % 2 or tw % 2:
            raise ValueError(f"{op}: padding='same' with a {kh}x{kw} kernel (dilation "
                             f"{dilation!r}) needs uneven padding, which is not supported; "
                             f"pad the input and use padding=0")
        return (th // 2, tw // 2)
    return pair(padding, "padding", 0, op)


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
    ph, pw = s.ph, s.pw
    if ph == pw == 0:
        return X
    hp, wp = s.hp, s.wp
    n, c = f.var(f"{name}_n", 0, s.n), f.var(f"{name}_c", 0, s.ci)
    y, x = f.var(f"{name}_y", 0, hp), f.var(f"{name}_x", 0, wp)
    inside = (y >= ph) & (y < s.h + ph) & (x >= pw) & (x < s.w + pw)
    xp = f.computation(name, [n, c, y, x], tp.select(inside, X[n, c, y - ph, x - pw], 0.0))
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
    out[n, co, y, x] += Wt[co, ci, ky, kx] * xp[n, chan, y * s.sh + ky * s.dh,
                                                 x * s.sw + kx * s.dw]
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
                                              (p // s.wo) * s.sh + ((r // s.kw) % s.kh) * s.dh,
                                              (p % s.wo) * s.sw + (r % s.kw) * s.dw])
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
def spatial_pack(s: ConvShape, bias=True, vb=None, xb=None, parallel=None, rows=None):
    """NCHWc blocking (:mod:`schedules.nchwc`): ``vb`` output channels per
    register (a multiple of the SIMD lanes), ``xb`` output columns per
    register block, ``rows`` output rows per tile (computed blocked into an
    L2-sized buffer, then unpacked to NCHW), ``parallel``: the loop run in
    parallel, "n" (whole images per thread, each packing its own input) or
    "c" (channels, inside each tile); defaults from the host."""
    if s.groups != 1:
        raise ValueError("spatial_pack: groups must be 1")
    f, X, Wt, B = _function("conv2d_spatial_pack", s, bias)
    tiled_block(f, X, Wt, B, s, pool=1, relu=False, rows=rows, parallel=parallel, vb=vb, xb=xb)
    return f


BUILDERS = {"direct": direct, "im2col": im2col, "spatial_pack": spatial_pack}

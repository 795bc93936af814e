"""The depthwise conv2d solver (``groups == in channels == out channels``,
MobileNet's 3x3 layers): channels in the SIMD lanes.

The direct schedule vectorises a depthwise conv along the output columns,
which a 7x7 or 14x14 map fills badly, and it has one input channel per
output channel to sum over.  Here the channels are the vector: the input is
packed per image and block of VB channels into ``[Hp][Wp][VB]`` (zero-padded
on the way), the weights into ``[C/VB][Kh][Kw][VB]``, and each output tile
``[Ho][Wo][VB]`` (XB columns unrolled x VB channels in a vector, the
``Kh x Kw`` taps summed in registers) is computed right before it is written
back to NCHW, into a tile-sized buffer that stays in L2.

Numerics: every output starts at its bias and adds the ``Kh x Kw`` products
in the direct solver's order (ky, then kx), one by one, each product fused
into its add: the same IEEE result as ``direct`` wherever that fuses them
too, so "auto" times the two and keeps the faster
(:func:`schedules.core.find.candidates`).  Where ``direct`` runs a row's
last columns as an in-order vectorised reduction (LLVM's: products in a
vector, then added one by one, unfused; a 5-wide map on an 8-lane host),
those outputs may differ from it in the last bit.
"""
from __future__ import annotations

import tiramisu_py as tp

from ..blocks.conv_common import ConvSolver, conv_inputs, epilogue, packed_channels, taps
from ..blocks.nchwc import register_block
from ..core.kernels import kernel
from ..host import host
from ..problems.conv import ConvShape


def channel_lanes(c: int) -> int | None:
    """Channels per vector: the SIMD lanes (or half of them, at least 8)
    that divide ``c``; None when none does (fewer channels than that fill a
    vector badly: ``direct`` takes them)."""
    lanes = host().lanes(4)
    return next((v for v in (lanes, lanes // 2) if v >= 8 and c % v == 0), None)


def function(s: ConvShape, bias=True, vb=None, xb=None, activation=None):
    """The scheduled depthwise convolution of shape ``s`` (``vb`` channels
    per vector, ``xb`` columns per register block; defaults from the host),
    ``activation`` ("relu" / "relu6", or None) applied as the blocked tile
    is written back (:func:`~schedules.blocks.conv_common.epilogue`)."""
    if not (s.groups == s.ci == s.co and s.groups > 1):
        raise ValueError(f"depthwise: needs groups == in channels == out channels > 1 (got "
                         f"groups={s.groups}, {s.ci} -> {s.co} channels)")
    vb = vb or channel_lanes(s.co)
    if vb is None or s.co % vb:
        raise ValueError(f"depthwise: the channels ({s.co}) must be a multiple of vb ({vb})")
    f, X, Wt, B = conv_inputs("conv2d_depthwise", s, bias)
    nb = s.co // vb
    # the NCHW output, written per (image, block of VB channels)
    n, c0, c1 = f.var("n", 0, s.n), f.var("c0", 0, nb), f.var("c1", 0, vb)
    y, x = f.var("y", 0, s.ho), f.var("x", 0, s.wo)
    # packed input [n][C/VB][Hp][Wp][VB], padded with zeros, one block per (image,
    # block), made right before the block is written back, reused by every block
    xpk = packed_channels(f, X, s, vb)
    # weights [C/VB][Kh][Kw][VB]
    wb, wy, wx, wv = (f.var(nm, 0, e) for nm, e in
                      (("wb", nb), ("wky", s.kh), ("wkx", s.kw), ("wv", vb)))
    wpk = f.computation("w_packed", [wb, wy, wx, wv], Wt[wb * vb + wv, 0, wy, wx])
    # the blocked output [n][C/VB][Ho][Wo][VB]
    bn, bb, by, bx, bv = (f.var(nm, 0, e) for nm, e in
                          (("bn", s.n), ("bb", nb), ("by", s.ho), ("bx", s.wo), ("bv", vb)))
    ky, kx = taps(f, s, by, bx)
    with f.nest(bn, bb, by):
        outc = f.computation("out_blocked", [bn, bb, by, bx, bv],
                             B[bb * vb + bv] if B is not None else 0.0)
        outc[bn, bb, by, bx, bv] += wpk[bb, ky, kx, bv] * xpk[bn, bb, by * s.sh + ky * s.dh,
                                                              bx * s.sw + kx * s.dw, bv]
    out = f.computation("out_nchw", [n, c0, c1, y, x],
                        epilogue(outc[n, c0, y, x, c1], activation))
    out.store_in(f.buffer("out", (s.n, s.co, s.ho, s.wo), tp.float32, output=True),
                 [n, c0 * vb + c1, y, x])
    # the register block: XB columns x one vector of channels, taps innermost-but-two
    xb = xb or register_block(vb, s.wo)
    u = outc.update
    u.split("bx", xb, names=("bx0", "bx1"))
    u.reorder("bn", "bb", "by", "bx0", "ky", "kx", "bx1", "bv")
    u.unroll("bx1", xb)
    u.vectorize("bv", vb)
    outc.vectorize("bv", vb)
    # one tile [Ho][Wo][VB] per (image, block), reused by every block
    outc.store_in(f.buffer("tile", (s.ho, s.wo, vb), tp.float32), [by, bx, bv])
    out.reorder("n", "c0", "y", "x", "c1")
    outc.compute_at(out, "c0")
    xpk.compute_at(outc.update, "c0")
    par = "n" if s.n >= 2 * host().cores else "c0"
    out.parallelize(par)
    wpk.parallelize("wb")
    return f


class Depthwise(ConvSolver):
    """A depthwise conv2d (groups = channels, one weight per channel and
    tap), channels in the vector lanes; the same numerics as ``direct``."""
    op = "conv2d"
    name = "depthwise"
    weight = "dense"
    activations = ("relu", "relu6")

    def applicable(self, p):
        why = super().applicable(p)
        s = p.shape
        if why is True and not (s.groups == s.ci == s.co and s.groups > 1):
            return (f"needs a depthwise conv: groups == in channels == out channels (got "
                    f"groups={s.groups}, {s.ci} -> {s.co} channels)")
        if why is True and channel_lanes(s.co) is None:
            return (f"needs channels a multiple of {max(8, host().lanes(4) // 2)} "
                    f"(got {s.co})")
        return why

    def space(self, p):
        lanes = host().lanes(4)
        return {"vb": [v for v in (lanes, lanes // 2) if v >= 8 and p.shape.co % v == 0]}

    def build(self, p, params):
        return function(p.shape, bias=p.bias, activation=p.activation, **params)

    def run(self, p, args):
        return self.runner(p)(args)

    def runner(self, p):
        """The kernel found once."""
        k = kernel(("conv2d", self.name, p.shape, p.bias)
                   + ((p.activation,) if p.activation else ()), lambda: self.build(p, {}), p.target)
        return lambda args: k(weight=args.w, **args.inputs())

"""The fused block ``maxpool2(relu(conv3x3(x, w) + bias))`` by Winograd's
minimal filtering F(2x2, 3x3), written in the DSL.

Each 2x2 output tile is one 2x2 pooling window, and it comes from a 4x4
input tile (tiles overlap by 2)::

    Y = A^T [ (G g G^T) (.) (B^T d B) ] A           (.): elementwise, 4x4

so the 9 multiply-adds per output and input channel of the direct
convolution become 16/4 = 4: the 16 elementwise products, summed over the
input channels, are 16 independent GEMMs ``M[e] = V[e] x U[e]`` (e: the 4x4
position), and the transforms are additions (the constants of ``B^T``,
``A^T`` are 0 and +-1; ``G`` has +-1/2).  The computations:

``x_packed``  the zero-padded input, ``[C/CB][Hp][Wp][CB]`` per image
``u``         the transformed filters ``G g G^T``: ``[4][4][Co/VB][Ci][VB]``
``v``         the transformed input tiles ``B^T d B``: ``[4][4][C/CB][Th][Tw][CB]``
              per image (the select over the unrolled 4x4 position folds to
              the two or four additions of each row of ``B^T``)
``m``         the 16 products ``M[e][Co/VB][Th][Tw][VB] = sum_ci V[e] U[e]``
              per image, with the register-blocked schedule of the NCHWc conv
              (Tw tiles unrolled x VB output channels in SIMD lanes)
``out``       ``max(max over the tile of A^T M A + bias, 0)``, NCHW

The image loop of ``out`` is the parallel one: ``m`` is computed at it
(``compute_at``), ``v`` at ``m`` and ``x_packed`` at ``v`` (nested), all in
per-image buffers private to each thread; only ``u`` is full size.

Arithmetic: 2.25x fewer multiplications than the direct convolution.  The
rounding differs from the direct sum (the transforms add and subtract
neighbouring inputs first); relative errors stay around 1e-6 in float32.
"""
from __future__ import annotations

from typing import TYPE_CHECKING

import tiramisu_py as tp

from ..host import host
from .nchwc import channel_block, packed_input, register_block

if TYPE_CHECKING:
    from ..problems.conv import ConvShape

# F(2x2, 3x3) (Lavin & Gray, 2016)
BT = ((1, 0, -1, 0), (0, 1, 1, 0), (0, -1, 1, 0), (0, 1, 0, -1))
G = ((1, 0, 0), (0.5, 0.5, 0.5), (0.5, -0.5, 0.5), (0, 0, 1))
AT = ((1, 1, 1, 0), (0, 1, -1, -1))


def applicable(s: ConvShape, pool: int) -> bool:
    """F(2x2, 3x3) with each output tile one pooling window: a 3x3 kernel,
    stride 1, no dilation or groups, 2x2 pooling."""
    return (s.kh, s.kw, s.stride, s.dilation, s.groups, pool) == (3, 3, 1, 1, 1, 2) \
        and s.ho >= 2 and s.wo >= 2


def _lin(coefs, terms):
    """``sum(c * t)`` without the zero terms, +-1 as additions."""
    out = None
    for c, t in zip(coefs, terms):
        if c == 0:
            continue
        if c == 1 or c == -1:
            out = t if out is None and c == 1 else (-t if out is None else
                                                     (out + t if c == 1 else out - t))
        else:
            out = c * t if out is None else out + c * t
    return out


def _by(var, exprs):
    """``exprs[var]`` for a loop ``var`` over ``range(len(exprs))``: a select
    chain, which the compiler folds away once ``var`` is unrolled."""
    e = exprs[-1]
    for k in range(len(exprs) - 2, -1, -1):
        e = tp.select(var == k, exprs[k], e)
    return e


def fused_block(f, X, Wt, B, s: ConvShape, pool=2, vb=None, tb=None, cc=None):
    """Defines and schedules the Winograd fused block in ``f``; returns the
    consumer ``out[n, c, py, px]`` (stored NCHW in the output ``output``).

    ``vb``: output channels per SIMD block (a divisor of Co; default two
    vectors, or one); ``tb``: tiles of a row in registers (default: as many
    as half the vector registers hold with ``vb``); ``cc``: input channels
    per block of the products (default: U's ``cc x vb`` block in a third of
    L1, a divisor of Ci)."""
    if not applicable(s, pool):
        raise ValueError(f"{f.name}: Winograd F(2x2, 3x3) needs a 3x3 kernel, stride 1, "
                         f"no dilation or groups, 2x2 pooling and at least 2x2 outputs")
    if vb is None:
        vb = channel_block(s)
    if s.co % vb:
        raise ValueError(f"{f.name}: vb={vb} must divide the {s.co} output channels")
    cob = s.co // vb
    th, tw = s.ho // 2, s.wo // 2

    # the transformed filters G g G^T: [4][4][Co/VB][Ci][VB]
    ue, un, uo, uc, uv = (f.var(nm, 0, e) for nm, e in
                          (("ue", 4), ("un", 4), ("uo", cob), ("uci", s.ci), ("uv", vb)))

    def g(ky, kx):
        return Wt[uo * vb + uv, uc, ky, kx]
    u = f.computation("u", [ue, un, uo, uc, uv], _by(ue, [
        _lin(G[a], [_by(un, [_lin(G[b], [g(ky, kx) for kx in range(3)]) for b in range(4)])
                    for ky in range(3)]) for a in range(4)]))
    u.reorder("uo", "uci", "ue", "un", "uv")
    u.unroll("ue", 4)
    u.unroll("un", 4)
    u.parallelize("uo" if cob >= 2 * host().cores else "uci")

    n = f.var("n", 0, s.n)
    with f.nest(n):     # each image: pack, transform, multiply, transform back
        # the padded, packed input [C/CB][Hp][Wp][CB]
        xpk, cb = packed_input(f, X, s, n, per_image=True)

        # the transformed input tiles B^T d B: [4][4][Th][Tw][Ci]
        ve, vv, vy, vx, vc = (f.var(nm, 0, e) for nm, e in
                              (("ve", 4), ("vnu", 4), ("vty", th), ("vtx", tw), ("vc", s.ci)))

        def d(a, b):
            return xpk[n, vc // cb, 2 * vy + a, 2 * vx + b, vc % cb]
        v = f.computation("v", [n, ve, vv, vy, vx, vc], _by(ve, [
            _lin(BT[a], [_by(vv, [_lin(BT[b], [d(i, j) for j in range(4)]) for b in range(4)])
                         for i in range(4)]) for a in range(4)]))
        v.store_in(f.buffer("v_image", (4, 4, th, tw, s.ci), tp.float32), [ve, vv, vy, vx, vc])

        # the 16 GEMMs: M[e][Co/VB][Th][Tw][VB] = sum_ci V[e] U[e]
        e, nu = f.var("e", 0, 4), f.var("nu", 0, 4)
        ob, ty, tx = f.var("ob", 0, cob), f.var("ty", 0, th), f.var("tx", 0, tw)
        lv, ci = f.var("lv", 0, vb), f.var("ci", 0, s.ci)
        with f.nest(e, nu, ob):
            m = f.computation("m", [n, e, nu, ob, ty, tx, lv], 0.0)
            m[n, e, nu, ob, ty, tx, lv] += v[n, e, nu, ty, tx, ci] * u[e, nu, ob, ci, lv]
        m.store_in(f.buffer("m_image", (4, 4, cob, th, tw, vb), tp.float32),
                   [e, nu, ob, ty, tx, lv])

        # out = max(max over the 2x2 tile of A^T M A + bias, 0), NCHW
        oo, ov, oy, ox = (f.var(nm, 0, e) for nm, e in
                          (("oob", cob), ("ov", vb), ("py", th), ("px", tw)))

        def mm(a, b):
            return m[n, a, b, oo, oy, ox, ov]
        ys = [_lin(AT[i], [_lin(AT[j], [mm(a, b) for b in range(4)]) for a in range(4)])
              for i in range(2) for j in range(2)]
        best = tp.max(*ys)
        if B is not None:
            best = best + B[oo * vb + ov]
        out = f.computation("out", [n, oo, ov, oy, ox], tp.max(best, 0.0))
        out.store_in(f.buffer("output", (s.n, s.co, th, tw), tp.float32, output=True),
                     [n, oo * vb + ov, oy, ox])

    xpk.vectorize("ic", cb)
    v.split("vc", cb, names=("vcb", "vc1"))
    v.reorder("n", "vcb", "vty", "vtx", "ve", "vnu", "vc1")
    v.unroll("ve", 4)
    v.unroll("vnu", 4)
    v.vectorize("vc1", cb)
    if tb is None:      # tiles in registers, as the NCHWc conv's columns
        tb = register_block(vb, tw)
    if cc is None:      # input channels per block: U's cc x VB block in a third of L1
        cc = max(1, min(s.ci, host().l1d // 3 // (4 * vb)))
        cc = max(d for d in range(1, cc + 1) if s.ci % d == 0)
    mu = m.update
    mu.split("tx", tb, names=("tx0", "tx1"))
    mu.split("ci", cc, names=("ci0", "ci1"))
    mu.reorder("n", "e", "nu", "ob", "ci0", "ty", "tx0", "ci1", "tx1", "lv")
    mu.unroll("tx1", tb)
    mu.vectorize("lv", vb)
    mu.accumulate_locally("ci1", allow_reassociation=True)     # tb x VB/lanes registers
    out.reorder("n", "oob", "py", "px", "ov")
    out.vectorize("ov", vb)
    out.parallelize("n")
    return out

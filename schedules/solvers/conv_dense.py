"""conv2d (NCHW, float32 -- and bfloat16/float16 with ``direct``, summing in
float32; stride, padding, dilation, groups incl. depthwise)
with three algorithms, each an algorithm + schedule in the DSL:

* ``direct``: the 7-deep loop nest; an output tile of COB channels x XB columns
  is accumulated in registers (co unrolled, x vectorised) while ci, ky, kx run.
Direct and spatial_pack add every product to the bias one by one in the
same order (bit-identical results, so "auto" chooses between them); im2col
sums blocks of products apart (``numerics = "gemm"``): it runs only when
``algo="im2col"`` names it.

* ``im2col``: per image, the input patches are copied into a matrix laid out as
  the GEMM's packed B panels; the product with the weights (as a ``Co x
  Ci*Kh*Kw`` matrix) is the BLIS GEMM of :mod:`schedules.blocks.blis`.  The
  schedule is of one group; the solver runs it per group
  (:func:`schedules.blocks.conv_common.by_group`).
* ``spatial_pack``: NCHWc blocking (:mod:`schedules.blocks.nchwc`): the input is
  packed into ``[n][C/CB][H][W][CB]`` (per image) and the weights into
  ``[Co/VB][Ci][Kh][Kw][VB]``; the output is computed in ``[Co/VB][rows][Wo][VB]``
  tiles of rows (VB output channels in SIMD lanes, XB columns in registers)
  that stay in L2, each unpacked to NCHW right away.  One group, run per
  group as im2col.

Padding is a computation (``select`` on the borders) of the padded input.
"""
from __future__ import annotations

import tiramisu_py as tp

from ..blocks.blis import blis, default_params
from ..blocks.conv_common import (ConvSolver, PerGroupSolver, conv_inputs, padded,
                                  residual_input, taps)
from ..blocks.nchwc import group_vectors, register_tile, tiled_block
from ..core.kernels import kernel
from ..host import host
from ..problems.conv import ConvShape
from ..weights.conv import packed_weight


# ------------------------------------------------------------------ direct
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



def direct(s: ConvShape, bias=True, xb=None, cob=None, parallel=None, dtype="float32"):
    """The 7-deep nest, ``cob`` output channels (unrolled) x ``xb`` columns
    (vectorised) accumulated in registers, ``parallel`` "co" or "n"
    (defaults from the host).  ``dtype`` "bfloat16"/"float16": the same nest
    summing in float32 (the padded input converted once), the output rounded
    once, as torch's."""
    low = dtype != "float32"
    f, X, Wt, B = conv_inputs("conv2d_direct" + (f"_{dtype}" if low else ""), s, bias,
                              getattr(tp, dtype))
    xp = padded(f, X, s)
    cig, cog = s.ci // s.groups, s.co // s.groups
    n, co = f.var("n", 0, s.n), f.var("co", 0, s.co)
    y, x = f.var("y", 0, s.ho), f.var("x", 0, s.wo)
    ci = f.var("ci", 0, cig)
    ky, kx = taps(f, s, y, x)
    out = f.computation("out", [n, co, y, x], B[co] if bias else 0.0,
                        dtype=tp.float32 if low else None)
    chan = ci if s.groups == 1 else (co // cog) * cig + ci
    out[n, co, y, x] += Wt[co, ci, ky, kx] * xp[n, chan, y * s.sh + ky * s.dh,
                                                 x * s.sw + kx * s.dw]
    lanes = host().lanes(4)
    xb = xb or _vector_tile(s.wo, lanes)
    cob = cob or max(1, min(s.co, _accumulators() // -(-xb // lanes)))
    u = out.update
    u.split("co", cob, names=("co0", "co1")).split("x", xb, names=("x0", "x1"))
    u.reorder("n", "co0", "y", "x0", "ci", "ky", "kx", "co1", "x1")
    u.unroll("co1", cob)
    u.vectorize("x1", xb)
    par = {"co": "co0", "n": "n"}.get(parallel) or \
        ("co0" if -(-s.co // cob) >= 4 * host().cores or s.n < host().cores else "n")
    u.parallelize(par)
    out.parallelize("co" if par == "co0" else "n")
    if low:
        res = f.computation("result", [n, co, y, x], out[n, co, y, x], dtype=getattr(tp, dtype))
        res.parallelize("co" if par == "co0" else "n")
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
def spatial_pack(s: ConvShape, bias=True, vb=None, xb=None, parallel=None, rows=None,
                 packed=False, activation=None, residual=False):
    """NCHWc blocking (:mod:`schedules.blocks.nchwc`): ``vb`` output channels per
    register (a multiple of the SIMD lanes), ``xb`` output columns per
    register block, ``rows`` output rows per tile (computed blocked into an
    L2-sized buffer, then unpacked to NCHW), ``parallel``: the loop run in
    parallel, "n" (whole images per thread, each packing its own input) or
    "c" (channels, inside each tile); defaults from the host.  ``packed``:
    the kernel takes the weight packed (``w_packed``,
    :func:`schedules.weights.conv.pack_weight` with ``vb``) instead of
    packing ``weight`` at every call.  ``activation``: "relu" / "relu6"
    applied as each tile is unpacked (:func:`~schedules.blocks.conv_common.epilogue`),
    after the input ``residual`` is added where ``residual``."""
    if s.groups != 1 and not group_vectors(s):
        raise ValueError("spatial_pack: groups must be 1, or each group's output channels a "
                         f"multiple of {host().lanes(4) // 2}")
    vb = vb or register_tile(s)[0]
    f, X, Wt, B = conv_inputs("conv2d_spatial_pack", s, bias, packed_vb=vb if packed else None)
    tiled_block(f, X, Wt, B, s, pool=1, rows=rows, parallel=parallel, vb=vb, xb=xb,
                activation=activation, residual=residual_input(f, s) if residual else None)
    return f


BUILDERS = {"direct": direct, "im2col": im2col, "spatial_pack": spatial_pack}


def conv2d_function(n, ci, h, w, co, kh=3, kw=3, stride=1, padding=0, dilation=1, groups=1,
                    algo="direct", bias=True):
    """The scheduled Function of one algorithm (``algo``: one of
    :data:`BUILDERS`), to inspect or re-schedule (``stride``, ``padding``,
    ``dilation`` as in :func:`schedules.conv2d`)."""
    good = isinstance(groups, int) and not isinstance(groups, bool) and groups >= 1
    s = ConvShape.make((n, ci, h, w), (co, ci // groups if good else ci, kh, kw), stride,
                       padding, dilation, groups, op="conv2d_function")   # (bad groups: named)
    return BUILDERS[algo](s, bias=bias)


# ------------------------------------------------------------------ solvers
def _kernel(solver, p, params, extra=()):
    """The compiled kernel of ``solver`` for ``p`` built with ``params``
    (keyed by the solver's name, the shape, the bias, the params other than
    the defaults and ``extra``: what else its build reads)."""
    return kernel(("conv2d", solver.name, p.shape, p.bias) + _chosen(params) + extra,
                  lambda: solver.build(p, params), p.target)


def _chosen(params):
    """The kernel key's part for params other than the defaults (none: the key as before)."""
    return (tuple(sorted(params.items())),) if params else ()


def _float32_only(p, why):
    """``why`` (the base checks), or the reason a float32-only solver refuses ``p``."""
    if why is True and p.dtype != "float32":
        return f"needs float32 (got {p.dtype}); use 'direct'"
    return why


class Direct(ConvSolver):
    """:func:`direct`: the grouped loop nest (any ``groups``), float32 or
    bfloat16/float16 summed in float32."""
    op = "conv2d"
    name = "direct"
    weight = "dense"

    def space(self, p):
        s, lanes = p.shape, host().lanes(4)
        return {"xb": [x for x in (lanes, 2 * lanes, 3 * lanes) if x <= max(lanes, s.wo)],
                "cob": [c for c in (1, 2, 4, 6, 8) if c <= max(1, s.co)],
                "parallel": ["co", "n"]}

    def build(self, p, params):
        extra = {"dtype": p.dtype} if p.dtype != "float32" else {}
        return direct(p.shape, bias=p.bias, **params, **extra)

    def run(self, p, args, values=None):
        return self._call(self._kernel(p, self.tuned(p, values)), args)

    def runner(self, p):
        k = self._kernel(p, self.tuned(p))
        return lambda args: self._call(k, args)

    def _kernel(self, p, params):
        return _kernel(self, p, params, (p.dtype,) if p.dtype != "float32" else ())

    @staticmethod
    def _call(k, args):
        return k(weight=args.w, **args.inputs())


class Im2col(PerGroupSolver):
    """:func:`im2col`, run per group (a schedule of one group).  Rounds
    apart from direct: the BLIS micro-kernel sums each block of KC products
    from zero and adds it to the output (:mod:`schedules.blocks.blis`), so
    "auto" never offers it (``algo="im2col"`` runs it)."""
    op = "conv2d"
    name = "im2col"
    weight = "dense"
    numerics = "gemm"

    def applicable(self, p):
        return _float32_only(p, super().applicable(p))

    def build(self, p, params):
        return im2col(p.shape, bias=p.bias, **params)

    def run_group(self, p, args, values=None):
        s = p.shape
        k = _kernel(self, p, self.tuned(p, values))
        # the weight as the GEMM's Co x Ci*Kh*Kw matrix (-1 fails when Co = 0)
        out = k(w2=args.w.reshape(s.co, s.ci * s.kh * s.kw), **args.inputs())
        return out.reshape(s.n, s.co, s.ho, s.wo)


class SpatialPack(PerGroupSolver):
    """:func:`spatial_pack` on the weight packed once
    (:func:`schedules.weights.conv.packed_weight`).  Grouped where a block
    of channels fits in a group (:func:`~schedules.blocks.nchwc.group_vectors`:
    ResNeXt's 32 groups of 8 or more channels) one kernel of every group,
    each block reading its group's input channels: direct's sums in direct's
    order, so "auto" offers it; other groupings run one kernel per group
    (not checked bit for bit against direct's grouped loop nest: a
    one-channel group can round apart), which "auto" does not offer.  Its
    kernels apply a ReLU / ReLU6 and add a residual as they unpack each
    tile."""
    op = "conv2d"
    name = "spatial_pack"
    weight = "dense"
    activations = ("relu", "relu6")
    residual = True

    def applicable(self, p):
        return _float32_only(p, super().applicable(p))

    def numerics_for(self, p):
        return self.numerics if p.shape.groups == 1 or group_vectors(p.shape) else "per_group"

    def run(self, p, args, values=None):
        if group_vectors(p.shape):            # grouped, one kernel
            return self.run_group(p, args, values)
        return super().run(p, args, values)

    def runner(self, p):
        return self.group_runner(p) if group_vectors(p.shape) else super().runner(p)

    def space(self, p):
        lanes = host().lanes(4)
        s = p.shape
        return {"vb": group_vectors(s) if s.groups > 1 else
                [v for v in (lanes, 2 * lanes) if s.co % v == 0],
                "xb": [x for x in (2, 4, 6, 7, 8, 14) if x <= max(1, s.wo)],
                "rows": [r for r in (1, 2, 4, 8, 16) if r <= max(1, s.ho)],
                "parallel": ["n", "c"]}

    def build(self, p, params):
        extra = {"activation": p.activation} if p.activation else {}
        return spatial_pack(p.shape, bias=p.bias, **params, packed=True, residual=p.residual,
                            **extra)

    def run_group(self, p, args, values=None):
        return self._group(p, self.tuned(p, values))(args)

    def group_runner(self, p):
        return self._group(p, self.tuned(p))

    def _group(self, p, params):
        vb, run = self._packed(p, params)
        return lambda args: run(args, packed_weight(args.w, vb))

    def packed_runner(self, p):
        """``(vb, run)`` for a one-group ``p``: ``run(args, w_packed)`` runs the
        kernel :meth:`runner` would on a weight its caller packed in blocks
        of ``vb`` output channels (``args.w`` unread: the input gradient's
        weight, flipped and packed in one pass, :func:`schedules.plans.flipped_conv`)."""
        return self._packed(p, self.tuned(p))

    def _packed(self, p, params):
        k = _kernel(self, p, params, ((p.activation,) if p.activation else ())
                    + (("residual",) if p.residual else ()))
        vb = params.get("vb") or register_tile(p.shape)[0]
        return vb, lambda args, packed: k(w_packed=packed, **args.inputs())

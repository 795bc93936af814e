"""The pointwise conv2d solver (a 1x1 kernel, stride 1, no padding, one
group: MobileNet's expand and project layers): a product of the weight
``Co x Ci`` and each image's ``Ci x (H*W)`` pixels, written NCHW.

``spatial_pack`` packs the input into channel blocks and puts output
channels in the vector lanes, then unpacks every tile to NCHW; a 1x1 kernel
reads each input pixel once per output channel block, so here the pixels
are the vector and nothing is packed: each image is read as ``[Ci][H*W]``
(a view of NCHW), and a tile of ``PB`` pixels x every output channel is
accumulated, ``COB`` channels (unrolled) x ``PB`` pixels (vectors) in
registers, into a tile-sized buffer that stays in L1, then written back
with the activation.  At 24 -> 144 channels, 56x56, two images, 0.34 ms
against spatial_pack's 0.68 on a 2-core AVX-512 host; MobileNetV2's 1x1
layers at batch 2 8.6 ms against the best of the other two's 12.6.

Numerics: every output starts at its bias and adds the ``Ci`` products in
order, one by one: ``direct``'s sum for a 1x1 kernel, bit for bit, so
"auto" times it against ``direct`` and ``spatial_pack`` and keeps the
fastest (:func:`schedules.core.find.candidates`).
"""
from __future__ import annotations

import tiramisu_py as tp

from ..blocks.conv_common import ConvSolver, epilogue
from ..core.kernels import kernel
from ..host import host
from ..problems.conv import ConvShape

PARALLEL = ("n", "p")     # images, or the pixel tiles of each image


def applies(s: ConvShape) -> bool:
    """A 1x1 kernel, stride 1, no padding, one group."""
    return ((s.kh, s.kw) == (1, 1) and (s.sh, s.sw) == (1, 1) and (s.ph, s.pw) == (0, 0)
            and s.groups == 1)


def refusal(s: ConvShape) -> str:
    """Why a convolution of shape ``s`` is not pointwise (after the solver's name)."""
    return (f"needs a 1x1 kernel, stride 1, no padding and groups=1 (got {s.kh}x{s.kw}, "
            f"stride {(s.sh, s.sw)}, padding {(s.ph, s.pw)}, groups={s.groups})")


def defaults(s: ConvShape) -> dict:
    """``cob`` channels x ``pb`` pixels in half the vector registers (two
    vectors of pixels, or one for a map of fewer), and the parallel loop:
    images with two a core, or one a core when an image has fewer than two
    tiles a core (a 7x7 map: 0.47 against 0.66 ms at 960 -> 320, two
    images), else the pixel tiles of each image.  (The channel blocks of
    each tile in parallel, a region per tile, measured 2-50x slower.)"""
    lanes = host().lanes(4)
    pixels = s.ho * s.wo
    pb = 2 * lanes if pixels >= 2 * lanes else lanes
    cob = max(1, min(s.co, host().vector_registers // 2 // (pb // lanes)))
    cores = host().cores
    few_tiles = s.n >= cores and pixels // pb < 2 * cores
    return {"cob": cob, "pb": pb, "parallel": "n" if s.n >= 2 * cores or few_tiles else "p"}


def function(s: ConvShape, bias=True, cob=None, pb=None, parallel=None, activation=None,
             residual=False):
    """The scheduled pointwise convolution of shape ``s``: inputs ``data``
    ``[N][Ci][H*W]`` and ``weight`` ``[Co][Ci]`` (views of NCHW and of the
    1x1 weight), output ``[N][Co][H*W]``; ``cob``, ``pb``, ``parallel``
    (one of :data:`PARALLEL`) default to :func:`defaults`; ``activation``
    ("relu" / "relu6", or None) applied as each tile is written back
    (:func:`~schedules.blocks.conv_common.epilogue`), after the input
    ``residual`` ``[N][Co][H*W]`` is added where ``residual``."""
    if not applies(s):
        raise ValueError(f"pointwise: {refusal(s)}")
    d = defaults(s)
    cob, pb, parallel = cob or d["cob"], pb or d["pb"], parallel or d["parallel"]
    if parallel not in PARALLEL:
        raise ValueError(f"pointwise: parallel must be one of {', '.join(PARALLEL)}, "
                         f"got {parallel!r}")
    pixels = s.ho * s.wo
    f = tp.Function("conv2d_pointwise", params={})
    X = f.input("data", (s.n, s.ci, pixels), tp.float32)
    W = f.input("weight", (s.co, s.ci), tp.float32)
    B = f.input("bias", (s.co,), tp.float32) if bias else None
    R = f.input("residual", (s.n, s.co, pixels), tp.float32) if residual else None
    result = f.buffer("out", (s.n, s.co, pixels), tp.float32, output=True)
    main = pixels - pixels % pb
    if main:
        out = _pixels(f, (X, W, B, R, result), s, 0, main, pb, cob, activation, "")
        out.parallelize("on" if parallel == "n" else "op0")
    if main < pixels:       # the last pixels, one tile of constant width (vectors, not scalars)
        out = _pixels(f, (X, W, B, R, result), s, main, pixels - main, pixels - main, cob,
                      activation, "_tail")
        if s.n > 1:
            out.parallelize("on_tail")
    return f


def _pixels(f, arrays, s: ConvShape, first, count, pb, cob, activation, suffix):
    """The outputs of pixels ``first`` to ``first + count - 1`` of every image
    and channel, in tiles of ``pb`` pixels (``count`` a multiple of it):
    the sums of a tile (``[Co][PB]``, each row started at its bias) in
    registers (``cob`` channels unrolled x ``pb`` pixels in vectors, Ci in
    order), written back with the residual (``R``, or None) and
    ``activation``.  Returns the writing
    computation (loops ``on``, ``op0``, ``oc``, ``op1`` with ``suffix``)."""
    X, W, B, R, result = arrays

    def name(v):
        return v + suffix
    n, co = f.var(name("n"), 0, s.n), f.var(name("co"), 0, s.co)
    p, ci = f.var(name("p"), 0, count), f.var(name("ci"), 0, s.ci)
    acc = f.computation(name("acc"), [n, co, p], B[co] if B is not None else 0.0)
    acc[n, co, p] += W[co, ci] * X[n, ci, first + p]
    on, oc, op = f.var(name("on"), 0, s.n), f.var(name("oc"), 0, s.co), f.var(name("op"), 0, count)
    out = f.computation(name("written"), [on, oc, op],
                        epilogue(acc[on, oc, op], activation,
                                 None if R is None else R[on, oc, first + op]))
    out.store_in(result, [on, oc, first + op])
    out.split(name("op"), pb, names=(name("op0"), name("op1")))
    out.reorder(name("on"), name("op0"), name("oc"), name("op1"))
    out.vectorize(name("op1"), pb)
    u = acc.update
    u.split(name("co"), cob, names=(name("co0"), name("co1")))
    u.split(name("p"), pb, names=(name("p0"), name("p1")))
    u.reorder(name("n"), name("p0"), name("co0"), name("ci"), name("co1"), name("p1"))
    u.unroll(name("co1"), cob)
    u.vectorize(name("p1"), pb)
    acc.split(name("p"), pb, names=(name("ip0"), name("ip1")))
    acc.reorder(name("n"), name("ip0"), name("co"), name("ip1"))
    acc.vectorize(name("ip1"), pb)
    acc.store_in(f.buffer(name("tile"), (s.co, pb), tp.float32), [co, p % pb])
    acc.compute_at(out, name("op0"))
    return out


class Pointwise(ConvSolver):
    """A 1x1, stride-1, unpadded conv2d of one group, float32: pixels in
    the vector lanes, the same numerics as ``direct``."""
    op = "conv2d"
    name = "pointwise"
    weight = "dense"
    activations = ("relu", "relu6")
    residual = True

    def applicable(self, p):
        why = super().applicable(p)
        s = p.shape
        if why is True and not applies(s):
            return refusal(s)
        if why is True and p.dtype != "float32":
            return f"needs float32 (got {p.dtype}); use 'direct'"
        return why

    def params(self, p):
        return defaults(p.shape)

    def space(self, p):
        lanes, room = host().lanes(4), host().vector_registers // 2
        return {"cob": [c for c in (2, 4, 6, 8, 12, 16) if c <= max(1, p.shape.co)],
                "pb": [b * lanes for b in (1, 2, 4) if b <= room],
                "parallel": list(PARALLEL)}

    def build(self, p, params):
        return function(p.shape, bias=p.bias, activation=p.activation, residual=p.residual,
                        **params)

    def run(self, p, args, values=None):
        return self._runner(p, self.tuned(p, values))(args)

    def runner(self, p):
        """The kernel found once."""
        return self._runner(p, self.tuned(p))

    def _runner(self, p, params):
        key = ("conv2d", self.name, p.shape, p.bias, p.activation, tuple(sorted(params.items())),
               *(("residual",) if p.residual else ()))
        k = kernel(key, lambda: self.build(p, params), p.target)
        s = p.shape
        pixels = s.ho * s.wo

        def call(args):
            given = args.inputs(args.x.reshape(s.n, s.ci, pixels))
            if args.r is not None:
                given["residual"] = args.r.reshape(s.n, s.co, pixels)
            out = k(weight=args.w.reshape(s.co, s.ci), **given)
            return out.reshape(s.n, s.co, s.ho, s.wo)
        return call

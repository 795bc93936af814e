"""The fused block ``maxpool(relu(conv2d(x, w) + bias))`` in one pass, by two
algorithms:

* ``direct``: the NCHWc register-blocked convolution of
  :mod:`schedules.blocks.nchwc`; the pooling (which also applies ReLU and writes
  NCHW) is the consumer, and the convolution is computed with ``compute_at``
  inside the pooling's tile of rows: for each image and each tile of pooled
  rows, only the conv rows that tile needs are computed, into one tile-sized
  buffer reused by every tile and sized to stay in L2, then pooled.  No
  full-size conv output is ever written to memory; with at least two images
  per core the packed input is made per image too (see
  :func:`schedules.blocks.nchwc.tiled_block`).
* ``winograd``: F(2x2, 3x3) (:mod:`schedules.blocks.winograd`), each 2x2 output
  tile being one pooling window: 2.25x fewer multiplications, every
  intermediate per image.  3x3 kernels, 2x2 pooling.

Both schedules are of one group; with ``groups > 1`` the solvers run them
once per group (:func:`schedules.blocks.conv_common.by_group`: ReLU and the
pooling are per channel, so the block of a group is the group's channels of
the whole block).

``schedules.conv_relu_maxpool(..., algo="auto")`` runs ``direct`` only:
Winograd's transforms add and subtract inputs before the products (an input
of 3e38 overflows to inf, ``inf - inf`` gives NaN where the direct
convolution, as torch's, gives inf) and round differently, so it is never
chosen by the find step (:mod:`schedules.core.find`) and runs only when
``algo="winograd"`` names it -- the exact choice: which algorithm is timed
fastest never changes the answer.
"""
from __future__ import annotations

from ..blocks import winograd
from ..blocks.conv_common import PerGroupSolver, conv_inputs
from ..blocks.nchwc import register_tile, tiled_block
from ..core.kernels import kernel
from ..problems.conv import ConvShape
from ..weights.conv import packed_weight

ALGOS = ("direct", "winograd")


def function(s: ConvShape, pool=2, bias=True, rows=None, parallel=None, pack_per_image=None,
             algo="direct", vb=None, tb=None, cc=None, packed=False):
    """The scheduled Function for ``maxpool(relu(conv(x) + bias), pool)``
    (non-overlapping ``pool x pool`` windows, floor mode).

    ``algo="direct"``: ``rows``: pooled rows per tile; ``parallel``: "n" or
    "c"; ``pack_per_image``: pack the input per image instead of one
    full-size copy.  ``algo="winograd"``: ``vb`` output channels per SIMD
    block, ``tb`` tiles in registers, ``cc`` input channels per block (see
    :func:`schedules.blocks.winograd.fused_block`).  Defaults come from the host.
    ``packed`` (direct): the kernel takes the weight packed (``w_packed``,
    :func:`schedules.weights.conv.pack_weight` with the host's channel
    block) instead of packing ``weight`` at every call."""
    if s.groups != 1:
        raise ValueError("conv_relu_maxpool: groups must be 1")
    if algo not in ALGOS:
        raise ValueError(f"conv_relu_maxpool: algo must be one of {', '.join(ALGOS)}; got {algo!r}")
    own = {"direct": dict(rows=rows, parallel=parallel, pack_per_image=pack_per_image),
           "winograd": dict(vb=vb, tb=tb, cc=cc)}
    other = [k for a, kw in own.items() if a != algo for k, v in kw.items() if v is not None]
    if other:
        raise ValueError(f"conv_relu_maxpool: {', '.join(other)} do not apply to algo {algo!r}")
    if packed and algo != "direct":
        raise ValueError("conv_relu_maxpool: packed applies to algo 'direct'")
    f, X, Wt, B = conv_inputs("conv_relu_maxpool", s, bias,
                              packed_vb=register_tile(s)[0] if packed else None)
    if algo == "winograd":
        winograd.fused_block(f, X, Wt, B, s, pool, vb=vb, tb=tb, cc=cc)
    else:
        tiled_block(f, X, Wt, B, s, pool=pool, relu=True, rows=rows, parallel=parallel,
                    pack_per_image=pack_per_image)
    return f


def _kernel(solver, p, params):
    """The compiled kernel of ``solver`` for ``p`` built with ``params``."""
    return kernel(("conv_relu_maxpool", solver.name, p.shape, p.pool, p.bias)
                  + ((tuple(sorted(params.items())),) if params else ()),
                  lambda: solver.build(p, params), p.target)


class FusedDirect(PerGroupSolver):
    """The dense fused block on the CPU (:func:`function`, ``algo="direct"``)
    on the weight packed once (:func:`schedules.weights.conv.packed_weight`),
    run per group."""
    op = "conv_relu_maxpool"
    name = "direct"
    weight = "dense"

    def space(self, p):
        rows = max(1, p.shape.ho // p.pool)
        return {"rows": [r for r in (1, 2, 4, 8) if r <= rows], "parallel": ["n", "c"],
                "pack_per_image": [False, True]}

    def build(self, p, params):
        return function(p.shape, p.pool, bias=p.bias, algo="direct", **params, packed=True)

    def run_group(self, p, args, values=None):
        return self._group(p, self.tuned(p, values))(args)

    def group_runner(self, p):
        return self._group(p, self.tuned(p))

    def _group(self, p, params):
        k, vb = _kernel(self, p, params), register_tile(p.shape)[0]
        return lambda args: k(w_packed=packed_weight(args.w, vb), **args.inputs())


class FusedWinograd(PerGroupSolver):
    """The dense fused block by Winograd (:func:`function`,
    ``algo="winograd"``), run per group."""
    op = "conv_relu_maxpool"
    name = "winograd"
    weight = "dense"
    numerics = "winograd"        # transformed inputs: "auto" never offers it

    def applicable(self, p):
        why = super().applicable(p)
        if why is True and not winograd.applicable(p.per_group().shape, p.pool):
            s = p.shape
            got = [f"a {s.kh}x{s.kw} kernel" if (s.kh, s.kw) != (3, 3) else "",
                   f"stride={s.stride!r}" if s.stride != 1 else "",
                   f"dilation={s.dilation!r}" if s.dilation != 1 else "",
                   f"pool={p.pool}" if p.pool != 2 else "",
                   f"a {s.ho}x{s.wo} output" if min(s.ho, s.wo) < 2 else ""]
            return ("needs a 3x3 kernel, stride=1, dilation=1, pool=2 and an output of at "
                    f"least 2x2 (got {', '.join(g for g in got if g)}); use 'direct'")
        return why

    def build(self, p, params):
        return function(p.shape, p.pool, bias=p.bias, algo="winograd", **params)

    def run_group(self, p, args, values=None):
        return _kernel(self, p, self.tuned(p, values))(weight=args.w, **args.inputs())

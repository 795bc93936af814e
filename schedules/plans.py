"""A library call made once and kept: the plan of a convolution, what
:mod:`schedules.torch_ops` memoises per layout of its arguments
(:mod:`schedules.core.call_memo`), so that a model's every later call of the
same layer skips the parse, the find step, the tuned parameters' and the
kernel's lookups and runs the solver's kernel at once.

:func:`conv` parses and finds as :func:`schedules.conv2d` /
:func:`schedules.conv_relu_maxpool` do (the same problem, the same solver,
hence the same kernel and the same bits) and returns a callable
``(input, weight, bias) -> result`` for arrays of that layout, or None where
the parse would change an argument (a copy, an unbatched input, a "same"
padding's extra zeros) or where no kernel runs (a degenerate problem).

:func:`flipped_conv` is the convolution of an input's gradient (the output's
gradient with the weight flipped, or a strided conv's phase sub-kernel
flipped): where the find step picks ``spatial_pack`` for it, later calls
of its layout flip and pack the weight in one pass and run that kernel on
it."""
from __future__ import annotations

from .blocks.conv_common import epilogue_after
from .core import call_memo
from .core.find import find
from .problems.conv import ConvArgs, ConvProblem
from .registry import SOLVERS
from .solvers import conv_grad
from .solvers.conv_dense import SpatialPack


def conv(op, input, weight, bias, stride, padding, dilation, groups, algo="auto",
         activation=None, pool=1, residual=None):
    """The plan of ``op`` ("conv2d" or "conv_relu_maxpool") on these
    arguments (as :func:`schedules.conv2d` takes them; ``pool`` for the
    fused block), or None (see the module).  With a ``residual`` the plan
    is ``(input, weight, bias, residual) -> result``."""
    found = _found(op, input, weight, bias, stride, padding, dilation, groups, algo,
                   activation, pool, residual)
    return None if found is None else _plan(found[0], found[1])


def _found(op, input, weight, bias, stride, padding, dilation, groups, algo="auto",
           activation=None, pool=1, residual=None):
    """``(problem, solver)`` of :func:`conv`'s parse and find, or None where
    the parse would change an argument or no kernel runs."""
    extra = {"pool": pool, "gpu": False} if op == "conv_relu_maxpool" else \
        {"activation": activation, "residual": residual}
    p, args = ConvProblem.from_call(op, input, weight, bias, stride, padding, dilation, groups,
                                    algo=algo, **extra)
    if args.x is not input or args.w is not weight or args.b is not bias or args.unbatched \
            or args.r is not residual or args.csr is not None or p.degenerate \
            or p.device != "cpu":
        return None
    return p, find(p, SOLVERS[op], args, algo, call=op)


def _plan(p, solver):
    """The plan running ``solver``'s kernel for problem ``p`` (:func:`conv`)."""
    ran = solver.problem_run(p)
    run = solver.runner(ran)

    def plan(x, w, b, r=None):
        out = run(ConvArgs(x, w, b, r=r if ran.residual else None))
        return epilogue_after(out, p, ran, r, solver.activations)
    return plan


def flipped_conv(x, weight, padding, dilation, groups, conv2d, stride=1, phase=(0, 0)):
    """``conv2d(x, flipped(weight))``, stride 1 (the input's gradient of a
    conv of ``weight``, :func:`schedules.solvers.conv_grad.grad_input`'s
    transposed convolution; for a conv of a ``stride`` above 1, the
    convolution of ``phase``'s sub-kernel,
    :func:`~schedules.solvers.conv_grad.phase_weight`): ``conv2d`` (the
    library's call) on the flipped weight
    (:func:`~schedules.solvers.conv_grad.flipped`); then, for a float32
    one-group call on a layout whose call took ``spatial_pack``, that
    kernel at once on the weight flipped and packed in one pass
    (:func:`~schedules.solvers.conv_grad.flipped_packed`: a training step
    made the flipped weight and its packing, two passes, for every conv),
    elsewhere the conv's plan (:func:`conv`) on the flipped weight,
    remembered per layout in the call memo (the same solver, kernel and
    bits as the library's call)."""
    memo = call_memo.key("flipped_conv", (x, weight), padding, dilation, groups, stride, phase)
    plan = call_memo.get(memo)
    if plan is not None:
        return plan(x, weight)

    def flipped(weight):
        if stride == 1:
            return conv_grad.flipped(weight, groups)
        return conv_grad.phase_weight(weight, groups, stride, phase)
    w = flipped(weight)
    out = conv2d(x, w, None, stride=1, padding=padding, dilation=dilation, groups=groups)
    if memo is not None:
        call_memo.put(memo, _flipped_plan(x, w, flipped, padding, dilation, groups, conv2d,
                                          stride, phase))
    return out


def _flipped_plan(x, w, flipped, padding, dilation, groups, conv2d, stride, phase):
    """The plan of :func:`flipped_conv` for this layout (``w``: the flipped
    weight its first call made by ``flipped(weight)``)."""
    found = _found("conv2d", x, w, None, 1, padding, dilation, groups)
    if found is None:
        def whole(x, weight):
            return conv2d(x, flipped(weight), None, stride=1, padding=padding,
                          dilation=dilation, groups=groups)
        return whole
    p, solver = found
    if groups == 1 and p.dtype == "float32" and isinstance(solver, SpatialPack) \
            and solver.problem_run(p) is p:
        vb, run = solver.packed_runner(p)

        def packed(x, weight):
            return run(ConvArgs(x, None, None),
                       conv_grad.flipped_packed(weight, vb, stride, phase))
        return packed
    general = _plan(p, solver)

    def planned(x, weight):         # (the conv's plan: no parse or find at each call)
        return general(x, flipped(weight), None)
    return planned

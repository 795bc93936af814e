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
padding's extra zeros) or where no kernel runs (a degenerate problem)."""
from __future__ import annotations

from .blocks.conv_common import epilogue_after
from .core.find import find
from .problems.conv import ConvArgs, ConvProblem
from .registry import SOLVERS


def conv(op, input, weight, bias, stride, padding, dilation, groups, algo="auto",
         activation=None, pool=1, residual=None):
    """The plan of ``op`` ("conv2d" or "conv_relu_maxpool") on these
    arguments (as :func:`schedules.conv2d` takes them; ``pool`` for the
    fused block), or None (see the module).  With a ``residual`` the plan
    is ``(input, weight, bias, residual) -> result``."""
    extra = {"pool": pool, "gpu": False} if op == "conv_relu_maxpool" else \
        {"activation": activation, "residual": residual}
    p, args = ConvProblem.from_call(op, input, weight, bias, stride, padding, dilation, groups,
                                    algo=algo, **extra)
    if args.x is not input or args.w is not weight or args.b is not bias or args.unbatched \
            or args.r is not residual or args.csr is not None or p.degenerate \
            or p.device != "cpu":
        return None
    solver = find(p, SOLVERS[op], args, algo, call=op)
    ran = solver.problem_run(p)
    run = solver.runner(ran)

    def plan(x, w, b, r=None):
        out = run(ConvArgs(x, w, b, r=r if ran.residual else None))
        return epilogue_after(out, p, ran, r, solver.activations)
    return plan

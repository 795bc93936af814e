"""The base of the LSTM/GRU solvers (:class:`RnnSolver`): what an ``lstm``
/ ``gru`` call returns around a solver's run."""
from __future__ import annotations

from ..core.arrays import without_backward
from ..core.solver import Solver


class RnnSolver(Solver):
    """A solver of a recurrent problem; :meth:`run` gives ``(y, h_n, c_n)``
    (``c_n`` None for the GRU) of the inputs' kind.  ``no_backward``: what
    the error names when a gradient is asked of results that have none."""
    no_backward = "schedules.{cell} (CSR weights, RNNWeights, bfloat16/float16 or the GPU)"

    def solve(self, p, args):
        """:meth:`run`'s results as the call returns them: attached to the
        inputs that require grad (``args.grad``) by a node whose backward
        raises (no backward kernel on this path), and without the batch
        axis of an unbatched call (``args.unbatched``)."""
        y, hn, cn = self.run(p, args)
        if args.grad:
            outs = without_backward(self.no_backward.format(cell=p.cell),
                                    (y, hn) + ((cn,) if cn is not None else ()), args.grad)
            y, hn, cn = outs[0], outs[1], outs[2] if cn is not None else None
        if args.unbatched:
            y, hn, cn = (None if a is None else a[:, 0] for a in (y, hn, cn))
        return y, hn, cn

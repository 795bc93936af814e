"""The GEMM solvers on the CPU: the Goto/BLIS schedule of
:mod:`schedules.blocks.blis`, plain and batched."""
from __future__ import annotations

from ..blocks.blis import default_params, function, kernel
from ..core.solver import Solver


class Blis(Solver):
    """``a @ b`` (``op`` "gemm") or a batch of them ("batched_gemm") with the
    BLIS schedule; the tiles from the host unless the caller gives them."""
    name = "blis"

    def __init__(self, op):
        self.op = op

    def params(self, p):
        return {"params": p.params or default_params(p.n, p.m, p.k)}

    def space(self, p):
        return {"parallel": ["ic", "jc"], "micro": ["ir", "jr"], "pack_a": [False, True]}

    def build(self, p, params):
        return function(p.n, p.m, p.k, batch=p.batch, b_transposed=p.trans_b, **params)

    def run(self, p, args):
        """``args``: ``(a, b)``, ``b`` as ``m x k`` when ``p.trans_b``."""
        return kernel(p.n, p.m, p.k, self.params(p)["params"], p.target, batch=p.batch,
                      b_transposed=p.trans_b)(*args)

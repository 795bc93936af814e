"""The reduced-precision GEMM solver on the CPU: bfloat16/float16 with
float32 accumulation (``gemm``, ``batched_gemm``; the result in the
operands' dtype, as torch's ``a @ b``) and int8 x int8 into int32
(``gemm_int8``, ``torch._int_mm``'s contract), with the pair/quadruple
packing of :mod:`schedules.blocks.dot_gemm` that the host's dot-product
instructions take."""
from __future__ import annotations

from ..blocks.dot_gemm import PAIR, function
from ..core.kernels import kernel
from ..core.solver import Solver


class DotGemm(Solver):
    """``a @ b`` in bfloat16, float16 (op "gemm" or "batched_gemm") or int8
    (op "gemm_int8")."""
    name = "dot"
    numerics = "pairs"     # the sum runs over pairs/quadruples of k (float32 rounding)

    def __init__(self, op):
        self.op = op

    def applicable(self, p):
        why = super().applicable(p)
        if why is True and p.dtype not in PAIR:
            return f"needs bfloat16, float16 or int8 (got {p.dtype}; 'blis' takes it)"
        if why is True and p.params is not None:
            return "takes no params (GemmParams are the float32 schedule's tiles)"
        return why

    def build(self, p, params):
        return function(p.n, p.m, p.k, p.dtype, batch=p.batch, **params)

    def run(self, p, args):
        key = ("dot_gemm", p.op, p.dtype, p.n, p.m, p.k, p.batch)
        return kernel(key, lambda: self.build(p, {}), p.target)(*args)

"""Kernels outside PolyBench for the auto-scheduler's tests, each a
:class:`polybench_kernels.Spec` (fresh unscheduled Function, random inputs,
an independent NumPy reference): a tensor contraction, a naive convolution,
a 9-point stencil with a time loop, a softmax over rows, a batched
matrix-vector product and a triangular matrix product
(:mod:`examples.beyond_polybench`, at their MINI sizes), and a few of
PolyBench's."""
from __future__ import annotations

from examples.beyond_polybench import KERNELS as BEYOND
from polybench_kernels import SPECS, Spec, build_jacobi1d


MM_SOURCE = '''
import tiramisu_py as tp

def mm():
    f = tp.Function("mm_tuned", params=["N", "M", "K"])
    i, j, k = f.var("i", 0, "N"), f.var("j", 0, "M"), f.var("k", 0, "K")
    A, B = f.input("A", ("N", "K"), tp.float64), f.input("B", ("K", "M"), tp.float64)
    C = f.computation("C", [i, j], 0.0, dtype=tp.float64)
    C[i, j] += A[i, k] * B[k, j]
    return f
'''
_mm_space: dict = {}
exec(MM_SOURCE, _mm_space)
build_mm = _mm_space["mm"]           # a plain GEMM (init, then the update over k), float64


def build_jacobi1d_fixed(T=5, N=23):
    """jacobi-1d with its sizes fixed at declaration (known to the scheduler)."""
    return build_jacobi1d({"T": T, "N": N})


def _spec(kernel, **params):
    """A beyond-PolyBench kernel at its MINI sizes, symbolic in the Function
    (``params``: the sizes the arrays do not give)."""
    mini = kernel.sizes["MINI"]
    return Spec(kernel.name, lambda: kernel.build(None), lambda rng: kernel.inputs(rng, mini),
                lambda **kw: kernel.reference(kw, {**mini, **kw}), params)


KERNELS = {name: _spec(k, **({"T": k.sizes["MINI"]["T"]} if name == "stencil9" else {}))
           for name, k in BEYOND.items()}
KERNELS.update({k: SPECS[k] for k in ("gemm", "2mm", "jacobi-1d", "jacobi-2d", "seidel-2d")})

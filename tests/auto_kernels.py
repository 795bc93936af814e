"""The tests' kernels, all from the examples: PolyBench's
(:mod:`examples.polybench`) and the six beyond it
(:mod:`examples.beyond_polybench`), each a :class:`Case`, a kernel at the
tests' sizes; and a plain GEMM written as a user would (``MM_SOURCE``).

``SUITE``: the 13 PolyBench kernels of the legality suite
(tests/tiramisu_py/test_legality_polybench.py) and of its GPU mappings
(tests/polybench_gpu.py), at sizes below MINI and deliberately not multiples
of the tile and split factors the tests use (3 and 4), symbolic in the
Function (adi's coefficients depend on its sizes: fixed).  ``KERNELS``: the
auto-scheduler's kernels, the six beyond PolyBench at their MINI sizes and
five of ``SUITE``.  Imported as ``tests.auto_kernels`` (bench/corpus.py
reaches the suite through it too)."""
from __future__ import annotations

import dataclasses
from dataclasses import dataclass

import numpy as np

import examples.polybench as pb
from examples.beyond_polybench import KERNELS as BEYOND
from examples.polybench.common import Kernel


@dataclass(frozen=True)
class Case:
    """``kernel`` (a :class:`examples.polybench.common.Kernel`) at ``sizes``:
    ``build(*names)`` a fresh unscheduled Function with the sizes in
    ``fixed`` and ``names`` fixed at declaration (known to the scheduler),
    the others symbolic; ``inputs(rng)`` random arrays; ``reference(arrays)``
    the NumPy outputs by name; ``params`` the sizes passed at call time (the
    ``given`` ones, which no array's shape gives; the others are read from the
    arrays); ``run(compiled, arrays)`` the outputs by name."""
    kernel: Kernel
    sizes: dict
    given: tuple = ()
    fixed: tuple = ()

    @property
    def name(self) -> str:
        return self.kernel.name

    @property
    def params(self) -> dict:
        return {p: self.sizes[p] for p in self.given}

    def at(self, **sizes) -> Case:
        """The same kernel at other sizes (the ones not named are kept)."""
        return dataclasses.replace(self, sizes={**self.sizes, **sizes})

    def build(self, *names):
        fixed = set(self.fixed) | set(names)
        return self.kernel.build({p: v if p in fixed else None for p, v in self.sizes.items()})

    def inputs(self, rng) -> dict:
        return self.kernel.inputs(rng, self.sizes)

    def reference(self, arrays) -> dict:
        return self.kernel.reference({n: np.array(a, copy=True) for n, a in arrays.items()},
                                     self.sizes)

    def run(self, compiled, arrays) -> dict:
        """Calls ``compiled`` (or an emulator's call) on copies of ``arrays``
        (outputs are updated in place) with ``params``."""
        args = {n: np.array(a, copy=True) for n, a in arrays.items()}
        out = compiled(**args, **self.params)
        if not isinstance(out, dict):
            out = {self.kernel.outputs[0]: out}
        return {n: out[n] if n in out else args[n] for n in self.kernel.outputs}


def _suite(name, given=(), fixed=(), **sizes):
    return Case(pb.KERNELS[name], sizes, given, fixed)


SUITE = {c.name: c for c in (
    _suite("gemm", NI=11, NJ=13, NK=10),
    _suite("2mm", NI=11, NJ=10, NK=7, NL=13),
    _suite("jacobi-1d", ("TSTEPS",), TSTEPS=5, N=23),
    _suite("jacobi-2d", ("TSTEPS",), TSTEPS=5, N=12),
    _suite("seidel-2d", ("TSTEPS",), TSTEPS=5, N=11),
    _suite("heat-3d", ("TSTEPS",), TSTEPS=3, N=7),
    _suite("fdtd-2d", ("TMAX",), TMAX=4, NX=10, NY=11),
    _suite("lu", N=11),
    _suite("cholesky", N=11),
    _suite("trisolv", N=13),
    _suite("floyd-warshall", N=11),
    _suite("syrk", N=11, M=10),
    _suite("adi", fixed=("TSTEPS", "N"), TSTEPS=3, N=10),
)}


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


KERNELS = {name: Case(k, k.sizes["MINI"], ("T",) if name == "stencil9" else ())
           for name, k in BEYOND.items()}
KERNELS.update({k: SUITE[k] for k in ("gemm", "2mm", "jacobi-1d", "jacobi-2d", "seidel-2d")})

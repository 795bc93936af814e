"""PolyBench/C 4.2.1, all 30 kernels, in tiramisu_py: each as the plain
algorithm (a), a hand schedule (b) and ``f.auto_schedule()`` (c), with NumPy
references on random inputs (see :mod:`examples.polybench.common`).

``KERNELS``: name -> :class:`Kernel`, in PolyBench's order (datamining, blas,
kernels, solvers, medley, stencils).  ``tiramisu-py bench polybench`` times
them (bench/suite_polybench.py)."""
from examples.polybench import blas, datamining, kernels, medley, solvers, stencils
from examples.polybench.common import (DATASETS, VARIANTS, Kernel, assert_close, auto_schedule,
                                       function, max_error, random_inputs, run, sizes)

KERNELS = {k.name: k for module in (datamining, blas, kernels, solvers, medley, stencils)
           for k in module.KERNELS}

__all__ = ["DATASETS", "KERNELS", "VARIANTS", "Kernel", "assert_close", "auto_schedule", "function", "max_error", "random_inputs", "run",
           "sizes"]

"""tiramisu_py: a polyhedral compiler with a scheduling language.

Write an algorithm (a :class:`Function` of computations over loop variables),
compile it, call the kernel on NumPy arrays or torch tensors::

    import tiramisu_py as tp
    f = tp.Function("gemm", params=["N", "M", "K"])
    i, j, k = f.var("i", 0, "N"), f.var("j", 0, "M"), f.var("k", 0, "K")
    A = f.input("A", ("N", "K"), tp.float32)
    B = f.input("B", ("K", "M"), tp.float32)
    C = f.computation("C", [i, j], 0.0)
    C[i, j] += A[i, k] * B[k, j]
    gemm = f.compile()
    out = gemm(a, b)
"""
from .base.errors import IllegalScheduleError
from .lang.expr import (Expr, Var, abs, cast, ceil, exp, floor, log, max, min, select, sigmoid,
                        sqrt, tanh)
from .function import Computation, Function, Update
from .draw import Picture, draw_compare
from .lang.program import Buffer
from .runtime.kernel import Kernel
from .driver.tune import tune
from .base.types import (DType, bfloat16, bool_, float16, float32, float64, int8, int32, int64,
                         uint8)

bool = bool_  # noqa: A001 - tp.bool mirrors numpy's name


def cache_dir():
    """The on-disk cache directory (``$TIRAMISU_PY_CACHE``, else
    ``$XDG_CACHE_HOME/tiramisu_py``, else ``~/.cache/tiramisu_py``)."""
    from codegen.cache import cache_dir as _dir
    return _dir()

__version__ = "0.1.0"

__all__ = [
    "Function", "Var", "Buffer", "Computation", "Update", "Kernel", "Expr", "DType",
    "bfloat16", "float16", "float32", "float64", "int8", "uint8", "int32", "int64", "bool_", "bool",
    "exp", "log", "tanh", "sigmoid", "sqrt", "abs", "floor", "ceil", "min", "max",
    "select", "cast", "IllegalScheduleError", "cache_dir", "Picture", "draw_compare", "tune",
]

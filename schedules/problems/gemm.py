"""The GEMM problem: ``a @ b`` (or a batch of them) parsed once, with its
explicit, versioned key."""
from __future__ import annotations

from dataclasses import dataclass

from ..core import arrays as A
from ..core.kernels import target_of, use_cuda


LOW_PRECISION = ("bfloat16", "float16")     # gemm/batched_gemm: float32 accumulation


@dataclass(frozen=True)
class GemmProblem:
    """``(n x k) @ (k x m)`` of ``dtype`` (float32; bfloat16 and float16 on the
    CPU; int8 for ``op`` "gemm_int8") (``batch``: that many of them), the
    backend ``target``, the ``device`` ("cpu" or "cuda") and the caller's
    tiles ``params`` (a :class:`schedules.GemmParams`, or None: from the host)."""
    op: str
    n: int
    m: int
    k: int
    target: str
    device: str = "cpu"
    batch: int | None = None
    params: object = None
    dtype: str = "float32"

    VERSION = 2         # 2: dtype

    degenerate = property(lambda self: min(self.n, self.m, self.k) == 0)

    def key(self) -> dict:
        return {"op": self.op, "version": self.VERSION, "n": self.n, "m": self.m, "k": self.k,
                "batch": self.batch, "target": self.target, "device": self.device,
                "params": None if self.params is None else repr(self.params), "dtype": self.dtype}

    @classmethod
    def from_call(cls, op, a, b, params, target, gpu=True):
        """``(problem, (a, b))``, checked: float32 matrices (``op`` "gemm") or
        batches (``op`` "batched_gemm"), NumPy or torch of one kind; on the
        GPU (``gpu`` and ``target="cuda"`` or device arrays) device arrays too."""
        cuda = gpu and use_cuda(target, a, b, names=("a", "b"))
        A.same_kind((a, b), ("a", "b"))
        ndim = 3 if op == "batched_gemm" else 2
        if cuda:
            a, b = A.cuda_float32(a, "a", ndim), A.cuda_float32(b, "b", ndim)
        else:
            kinds = ("int8",) if op == "gemm_int8" else ("float32",) + LOW_PRECISION
            a, b = A.typed_array(a, "a", ndim, kinds), A.typed_array(b, "b", ndim, kinds)
        dtype = str(a.dtype).split(".")[-1]
        if str(b.dtype).split(".")[-1] != dtype:     # as torch's matmul
            raise TypeError(f"{op}: a and b must have the same dtype, got {a.dtype} and {b.dtype}")
        if op != "batched_gemm":
            (n, k), (k2, m) = a.shape, b.shape
            if k != k2:
                raise ValueError(f"{op}: a is {n}x{k} but b is {k2}x{m}; inner dimensions differ")
            batch = None
        else:
            (batch, n, k), (nb2, k2, m) = a.shape, b.shape
            if batch != nb2:
                raise ValueError(f"batched_gemm: a holds {batch} matrices but b holds {nb2} "
                                 f"(shapes {tuple(a.shape)} and {tuple(b.shape)}); pass the same "
                                 "batch B, as (B, N, K) @ (B, K, M)")
            if k != k2:
                raise ValueError(f"batched_gemm: a is {batch}x{n}x{k} but b is {nb2}x{k2}x{m}; "
                                 f"inner dimensions differ ({k} and {k2}), as (B, N, K) @ (B, K, M)")
        p = cls(op, int(n), int(m), int(k), target_of(target), "cuda" if cuda else "cpu",
                batch, params, dtype)
        return p, (a, b)

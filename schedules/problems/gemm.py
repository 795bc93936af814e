"""The GEMM problem: ``a @ b`` (or a batch of them) parsed once, with its
explicit, versioned key."""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from ..core import arrays as A
from ..core.kernels import target_of, use_cuda


@dataclass(frozen=True)
class GemmProblem:
    """``(n x k) @ (k x m)`` float32 (``batch``: that many of them), the
    backend ``target``, the ``device`` ("cpu" or "cuda") and the caller's
    tiles ``params`` (a :class:`schedules.GemmParams`, or None: from the host);
    ``trans_b``: ``b`` came as the transpose of a contiguous ``m x k`` matrix
    (``weight.t()``, as ``nn.Linear`` passes it) and is read in that layout,
    never copied (CPU, unbatched)."""
    op: str
    n: int
    m: int
    k: int
    target: str
    device: str = "cpu"
    batch: int | None = None
    params: object = None
    trans_b: bool = False

    VERSION = 2

    degenerate = property(lambda self: min(self.n, self.m, self.k) == 0)

    def key(self) -> dict:
        return {"op": self.op, "version": self.VERSION, "n": self.n, "m": self.m, "k": self.k,
                "batch": self.batch, "target": self.target, "device": self.device,
                "params": None if self.params is None else repr(self.params),
                "trans_b": self.trans_b}

    @classmethod
    def from_call(cls, op, a, b, params, target, gpu=True):
        """``(problem, (a, b))``, checked: float32 matrices (``op`` "gemm") or
        batches (``op`` "batched_gemm"), NumPy or torch of one kind; on the
        GPU (``gpu`` and ``target="cuda"`` or device arrays) device arrays too."""
        cuda = gpu and use_cuda(target, a, b, names=("a", "b"))
        A.same_kind((a, b), ("a", "b"))
        ndim = 2 if op == "gemm" else 3
        check = A.cuda_float32 if cuda else A.float32_array
        trans_b = not cuda and op == "gemm" and _transposed(b)
        a = check(a, "a", ndim)
        b = check(b.T, "b", ndim).T if trans_b else check(b, "b", ndim)
        if op == "gemm":
            (n, k), (k2, m) = a.shape, b.shape
            if k != k2:
                raise ValueError(f"gemm: a is {n}x{k} but b is {k2}x{m}; inner dimensions differ")
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
                batch, params, trans_b)
        return p, (a, b.T if trans_b else b)


def _transposed(b) -> bool:
    """``b`` is a 2-D array whose transpose, not itself, is C-contiguous."""
    if getattr(b, "ndim", None) != 2 or min(b.shape) < 2:
        return False
    if A.is_torch(b):
        return not b.is_contiguous() and b.t().is_contiguous()
    return (isinstance(b, np.ndarray) and not b.flags.c_contiguous
            and b.T.flags.c_contiguous)

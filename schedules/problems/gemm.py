"""The GEMM problem: ``a @ b`` (or a batch of them) parsed once, with its
explicit, versioned key; and :class:`MatmulShapes`, ``torch.matmul``'s
shape rule (1-D operands, broadcast batch dimensions) onto those problems."""
from __future__ import annotations

from dataclasses import dataclass
from math import prod

import numpy as np

from ..core import arrays as A
from ..core.kernels import target_of, use_cuda


LOW_PRECISION = ("bfloat16", "float16")     # gemm/batched_gemm: float32 accumulation


@dataclass(frozen=True)
class GemmProblem:
    """``(n x k) @ (k x m)`` of ``dtype`` (float32; float64, bfloat16 and
    float16 on the CPU; int8 for ``op`` "gemm_int8") (``batch``: that many of
    them), the backend ``target``, the ``device`` ("cpu" or "cuda") and the
    caller's tiles ``params`` (a :class:`schedules.GemmParams`, or None: from
    the host).;
    ``trans_b``: ``b`` came as the transpose of a contiguous ``m x k`` matrix
    (``weight.t()``, as ``nn.Linear`` passes it) and is read in that layout,
    never copied (CPU, unbatched, float32/float64)."""
    op: str
    n: int
    m: int
    k: int
    target: str
    device: str = "cpu"
    batch: int | None = None
    params: object = None
    dtype: str = "float32"
    trans_b: bool = False

    VERSION = 3                 # 2: the dtype; 3: trans_b

    degenerate = property(lambda self: min(self.n, self.m, self.k) == 0)

    def key(self) -> dict:
        return {"op": self.op, "version": self.VERSION, "n": self.n, "m": self.m, "k": self.k,
                "batch": self.batch, "target": self.target, "device": self.device,
                "params": None if self.params is None else repr(self.params),
                "dtype": self.dtype, "trans_b": self.trans_b}

    @classmethod
    def from_call(cls, op, a, b, params, target, gpu=True):
        """``(problem, (a, b))``, checked: float32 matrices (``op`` "gemm") or
        batches (``op`` "batched_gemm"), NumPy or torch of one kind; on the
        CPU float64 too (both of one dtype); on the GPU (``gpu`` and
        ``target="cuda"`` or device arrays) device arrays too (float32);
        without ``gpu`` (no CUDA solver) ``target="cuda"`` is refused, named
        (device arrays are, by the checks of :mod:`schedules.core.arrays`)."""
        if not gpu and target_of(target) == "cuda":
            raise ValueError(f"{op}: runs on the CPU only (no CUDA solver); pass host arrays "
                             "(NumPy or CPU tensors) and no target='cuda'")
        cuda = gpu and use_cuda(target, a, b, names=("a", "b"))
        A.same_kind((a, b), ("a", "b"))
        ndim = 3 if op == "batched_gemm" else 2
        trans_b = False
        if cuda:
            kinds = ("float32",) + (LOW_PRECISION if op == "gemm" else ())
            a = A.cuda_float32(a, "a", ndim, kinds)
            dtype = A.dtype_name(a) if A.is_torch(a) or isinstance(a, np.ndarray) else "float32"
            b = A.cuda_float32(b, "b", ndim, (dtype,))
        else:
            kinds = ("int8",) if op == "gemm_int8" else ("float32", "float64") + LOW_PRECISION
            a = A.typed_array(a, "a", ndim, kinds)
            dtype = A.dtype_name(a)
            b_dtype = A.dtype_name(b) if hasattr(b, "dtype") else ""
            if b_dtype != dtype and b_dtype in kinds:              # as torch's matmul
                raise TypeError(f"{op}: b: expected {dtype}, got {b_dtype} "
                                "(a and b must have the same dtype)")
            # weight.t() (nn.Linear's): read as stored, never copied (float32/float64)
            trans_b = op == "gemm" and dtype in ("float32", "float64") and _transposed(b)
            b = A.typed_array(b.T, "b", ndim, (dtype,)).T if trans_b else \
                A.typed_array(b, "b", ndim, (dtype,))
        if op != "batched_gemm":
            (n, k), (k2, m) = a.shape, b.shape
            if k != k2:
                raise ValueError(f"{op}: a is {n}x{k} but b is {k2}x{m}; inner dimensions differ")
            batch = None
        else:
            (batch, n, k), (nb2, k2, m) = a.shape, b.shape
            if batch != nb2 and 1 not in (batch, nb2):
                raise ValueError(f"batched_gemm: a holds {batch} matrices but b holds {nb2} "
                                 f"(shapes {tuple(a.shape)} and {tuple(b.shape)}); pass the same "
                                 "batch B, or a batch of 1 on one side, as (B, N, K) @ (B, K, M)")
            if k != k2:
                raise ValueError(f"batched_gemm: a is {batch}x{n}x{k} but b is {nb2}x{k2}x{m}; "
                                 f"inner dimensions differ ({k} and {k2}), as (B, N, K) @ (B, K, M)")
            if batch != nb2:         # a batch of 1 is broadcast, as torch.matmul does
                batch = max(batch, nb2)
                a, b = A.broadcast(a, (batch, n, k)), A.broadcast(b, (batch, k2, m))
        p = cls(op, int(n), int(m), int(k), target_of(target), "cuda" if cuda else "cpu",
                batch, params, dtype, trans_b)
        return p, (a, b.T if trans_b else b)


def cpu_operands(a, b, dtype, trans_b):
    """The operands :meth:`GemmProblem.from_call` returns for a CPU
    ``"gemm"`` of ``dtype`` whose layouts it accepted (``trans_b``: its
    choice for ``b``, by layout alone): each C-contiguous (a copy where it
    is not), ``b`` as its ``M x K`` transpose, read as stored, where
    ``trans_b`` -- the call memo's plan of a call whose parse converted
    its operands (:func:`schedules.api.gemm`) converts them so again."""
    return (A.typed_array(a, "a", 2, (dtype,)),
            A.typed_array(b.T if trans_b else b, "b", 2, (dtype,)))


def _refuse(cond, message):
    if not cond:
        raise ValueError(message())


@dataclass(frozen=True)
class MatmulShapes:
    """``torch.matmul(a, b)``'s shapes: ``a`` viewed as ``batch + (n, k)``
    and ``b`` as ``batch + (k, m)`` (a 1-D ``a`` gains a leading 1, a 1-D
    ``b`` a trailing 1, dropped from the result ``out``); ``batch`` the
    broadcast of both operands' leading dimensions (torch's rule: aligned
    from the right, a size 1 or a missing dimension stretches)."""
    a: tuple
    b: tuple
    batch: tuple
    n: int
    k: int
    m: int
    out: tuple

    @classmethod
    def of(cls, a_shape, b_shape, op="matmul", names=("a", "b"), check=None):
        """The shapes of ``a @ b``, checked by ``check(condition, message)``
        (``torch._check`` in the torch ops; by default a ValueError): both
        operands at least 1-D, equal inner sizes, batch dimensions that
        broadcast."""
        check = check or _refuse
        a_shape, b_shape = tuple(a_shape), tuple(b_shape)
        na, nb = names
        check(len(a_shape) >= 1 and len(b_shape) >= 1,
              lambda: f"{op}: both arguments need at least 1 dimension, got {na} of shape "
                      f"{a_shape} and {nb} of shape {b_shape}")
        a2 = (1,) + a_shape if len(a_shape) == 1 else a_shape
        b2 = b_shape + (1,) if len(b_shape) == 1 else b_shape
        (n, k), (k2, m) = a2[-2:], b2[-2:]
        check(k == k2, lambda: f"{op}: {na} of shape {a_shape} and {nb} of shape {b_shape}: the "
                               f"inner sizes differ ({k} and {k2})")
        ba, bb = a2[:-2], b2[:-2]
        width = max(len(ba), len(bb))
        ba1, bb1 = (1,) * (width - len(ba)) + ba, (1,) * (width - len(bb)) + bb
        check(all(x == y or 1 in (x, y) for x, y in zip(ba1, bb1)),
              lambda: f"{op}: the batch dimensions of {na} {ba} and {nb} {bb} do not broadcast "
                      "(each pair, aligned from the right, must be equal or have a 1)")
        batch = tuple(y if x == 1 else x for x, y in zip(ba1, bb1))
        out = batch + ((n,) if len(a_shape) > 1 else ()) + ((m,) if len(b_shape) > 1 else ())
        return cls(a_shape, b_shape, batch, n, k, m, out)

    @property
    def folded(self) -> bool:
        """``b`` has no batch dimension: ``a``'s batch folds into its rows,
        one ``(batch * n, k) @ (k, m)`` GEMM."""
        return len(self.b) <= 2

    def operands(self, a, b):
        """``a`` and ``b`` (NumPy or torch) as the GEMM's operands: 2-D
        matrices (:attr:`folded`) or ``(B, n, k)`` and ``(B, k, m)``
        batches (broadcast batch dimensions copied)."""
        if self.folded:
            return a.reshape(prod(self.batch) * self.n, self.k), b.reshape(self.k, self.m)
        size = prod(self.batch)
        return (self._batched(a, self.a, (self.n, self.k), size),
                self._batched(b, self.b, (self.k, self.m), size))

    def _batched(self, x, shape, mat, size):
        """``x`` of ``shape`` broadcast to ``batch + mat``, as ``(size,) + mat``."""
        x = A.broadcast(x.reshape(shape[:-2] + mat), self.batch + mat)
        return x.reshape((size,) + mat)


def _transposed(b) -> bool:
    """``b`` is a 2-D array whose transpose, not itself, is C-contiguous."""
    if getattr(b, "ndim", None) != 2 or min(b.shape) < 2:
        return False
    if A.is_torch(b):
        return not b.is_contiguous() and b.t().is_contiguous()
    return (isinstance(b, np.ndarray) and not b.flags.c_contiguous
            and b.T.flags.c_contiguous)

"""Scalar types of the DSL and the promotion rules between them.

``bfloat16`` and ``float16`` are *storage* types: arrays hold them, loads
and stores convert, and arithmetic on them runs in float32 (``promote`` and
``arith`` give float32, float64 if the other operand is float64).  A
computation over them stores float32 unless it is a plain copy, declared
with ``dtype=``, or its value is cast (``tp.cast(x, tp.bfloat16)`` rounds to
nearest even).  int8/uint8 keep NumPy's wrap-around arithmetic; accumulate
them into int32 by casting the operands (``tp.cast(a, tp.int32) * ...``)."""
from __future__ import annotations

import numpy as np


def _numpy_dtype(name: str):
    """NumPy's dtype of ``name``; for bfloat16 (which NumPy lacks) ml_dtypes'
    if that optional package is installed, else None."""
    if name != "bfloat16":
        return np.dtype(name)
    try:
        import ml_dtypes
    except ImportError:
        return None
    return np.dtype(ml_dtypes.bfloat16)


class DType:
    """A scalar type.  Instances are singletons: ``tp.float32`` etc."""

    def __init__(self, name: str, kind: str, bits: int):
        self.name = name
        self.kind = kind          # "b" bool, "i" signed, "u" unsigned, "f" float
        self.bits = bits
        self.np = _numpy_dtype(name)      # None: bfloat16 without ml_dtypes

    @property
    def is_float(self) -> bool:
        return self.kind == "f"

    @property
    def is_half(self) -> bool:
        """A 16-bit float storage type (bfloat16, float16)."""
        return self.kind == "f" and self.bits == 16

    @property
    def is_int(self) -> bool:
        return self.kind in "iu"

    @property
    def is_bool(self) -> bool:
        return self.kind == "b"

    def __repr__(self):
        return f"tp.{self.name}"

    def __reduce__(self):
        return (from_any, (self.name,))


bool_ = DType("bool", "b", 8)
int8 = DType("int8", "i", 8)
uint8 = DType("uint8", "u", 8)
int32 = DType("int32", "i", 32)
int64 = DType("int64", "i", 64)
bfloat16 = DType("bfloat16", "f", 16)
float16 = DType("float16", "f", 16)
float32 = DType("float32", "f", 32)
float64 = DType("float64", "f", 64)

ALL = {d.name: d for d in (bool_, int8, uint8, int32, int64, bfloat16, float16, float32,
                           float64)}
INDEX = int64          # loop iterators and params
DEFAULT_FLOAT = float64
DEFAULT_INT = int64


def from_any(x) -> DType:
    """Accepts a DType, a NumPy dtype (or anything np.dtype understands), a
    torch dtype, or a name; raises TypeError for unsupported types."""
    if isinstance(x, DType):
        return x
    name = None
    if isinstance(x, str):
        name = "bool" if x == "bool_" else x
    elif type(x).__module__ == "torch":        # torch.float32 and friends
        name = str(x).split(".")[-1]
    elif getattr(x, "__name__", None) == "bfloat16" or str(x) == "bfloat16":
        name = "bfloat16"                      # ml_dtypes.bfloat16 (type or dtype)
    else:
        try:
            name = np.dtype(x).name
        except TypeError:
            name = None
    if name not in ALL:
        raise TypeError(f"unsupported dtype {x!r}; use one of "
                        + ", ".join(f"tp.{n}" for n in ALL))
    return ALL[name]


def promote(a: DType, b: DType) -> DType:
    """The result type of an arithmetic operation on two typed operands.

    A float operand decides the result (C-like: ``float32 * int64 -> float32``);
    between floats or between integers the wider wins; mixing int8 and uint8
    gives int32; bool promotes to the other operand's type.  The 16-bit
    floats compute in float32: any operation on them gives float32 (float64
    with a float64 operand)."""
    if a.is_half or b.is_half:
        return float64 if float64 in (a, b) else float32
    if a is b:
        return a
    if a.is_bool:
        return b
    if b.is_bool:
        return a
    if a.is_float or b.is_float:
        if a.is_float and b.is_float:
            return a if a.bits >= b.bits else b
        return a if a.is_float else b
    if a.kind != b.kind and a.bits == b.bits:     # int8 with uint8
        return int32
    return a if a.bits >= b.bits else b


def arith(t: DType) -> DType:
    """The type arithmetic on ``t`` computes in: float32 for the 16-bit
    floats, ``t`` otherwise."""
    return float32 if t.is_half else t

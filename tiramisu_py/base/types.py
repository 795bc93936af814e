"""Scalar types of the DSL and the promotion rules between them."""
from __future__ import annotations

import numpy as np


class DType:
    """A scalar type.  Instances are singletons: ``tp.float32`` etc."""

    def __init__(self, name: str, kind: str, bits: int):
        self.name = name
        self.kind = kind          # "b" bool, "i" signed, "u" unsigned, "f" float
        self.bits = bits
        self.np = np.dtype(name)

    @property
    def is_float(self) -> bool:
        return self.kind == "f"

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
float32 = DType("float32", "f", 32)
float64 = DType("float64", "f", 64)

ALL = {d.name: d for d in (bool_, int8, uint8, int32, int64, float32, float64)}
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
    gives int32; bool promotes to the other operand's type."""
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

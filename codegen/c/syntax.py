"""The C family's spelling of the loop IR's types, literals and operators,
shared by the C printer (:mod:`codegen.c.emit`) and the CUDA printer: the C
type of each dtype, exact literals, operator precedence, the libm names.
"""
from __future__ import annotations

import math
import struct
from fractions import Fraction

from .. import ir
from ..ir import INT_RANGE, to_f32

CTYPES = {"float32": "float", "float64": "double", "int8": "int8_t", "uint8": "uint8_t",
          "int32": "int32_t", "int64": "int64_t", "bool": "bool",
          "bfloat16": "uint16_t", "float16": "uint16_t"}     # 16-bit floats: their bits
# the dtype's suffix in the names of the generated helpers (``tp_min_f32``)
SUFFIX = {"float32": "f32", "float64": "f64", "int8": "i8", "uint8": "u8",
          "int32": "i32", "int64": "i64", "bool": "b", "bfloat16": "bf16", "float16": "f16"}

# precedence levels (higher binds tighter)
P_PRIMARY, P_UNARY, P_MUL, P_ADD, P_REL, P_EQ, P_AND, P_OR = 100, 90, 80, 70, 60, 55, 40, 35
BINOPS = {"add": ("+", P_ADD), "sub": ("-", P_ADD), "mul": ("*", P_MUL), "div": ("/", P_MUL),
          "mod": ("%", P_MUL), "lt": ("<", P_REL), "le": ("<=", P_REL), "gt": (">", P_REL),
          "ge": (">=", P_REL), "eq": ("==", P_EQ), "ne": ("!=", P_EQ),
          "and": ("&&", P_AND), "or": ("||", P_OR)}
# the double-precision libm function of each math call (float32: with an ``f``)
LIBM = {"exp": "exp", "log": "log", "tanh": "tanh", "sqrt": "sqrt", "abs": "fabs",
        "floor": "floor", "ceil": "ceil"}


# ------------------------------------------------------------------ literals
def int_literal(v: int, dtype: str) -> tuple:
    """(C literal of the integer ``v`` wrapped to ``dtype``, its precedence)."""
    lo, hi = INT_RANGE[dtype]
    v = (int(v) - lo) % (hi - lo) + lo          # wrap like a C conversion
    if dtype == "int64" and v == lo:
        return "(-9223372036854775807LL - 1)", P_PRIMARY
    if dtype == "int32" and v == lo:
        return "(-2147483647 - 1)", P_PRIMARY
    s = str(v) + ("LL" if dtype == "int64" and not -2**31 < v < 2**31 else "")
    return s, (P_UNARY if v < 0 else P_PRIMARY)


def _rounds_to_f32(text: str, f: float) -> bool:
    """Whether the decimal ``text`` rounds (to nearest even) to the float32 ``f``,
    computed exactly, i.e. as a C compiler reads ``<text>f``."""
    d, x = Fraction(text), Fraction(f)
    bits = struct.unpack("I", struct.pack("f", f))[0]
    if f == 0 or math.isinf(f):
        return False
    if (bits & 0x7fffffff) < 0x7f7fffff:
        up = Fraction(struct.unpack("f", struct.pack("I", bits + 1))[0])
    else:                                      # beyond the largest float lies infinity
        up = Fraction(math.copysign(2.0 ** 128, f))
    down = Fraction(struct.unpack("f", struct.pack("I", bits - 1))[0])
    for nb in (up, down):
        if abs(d - x) > abs(d - nb) or (abs(d - x) == abs(d - nb) and bits & 1):
            return False
    return True


def _float_literal(v: float, dtype: str) -> tuple:
    v = float(v)
    if dtype == "float32":
        v = to_f32(v)
    if math.isnan(v):
        return "NAN", P_PRIMARY
    if math.isinf(v):
        return ("INFINITY", P_PRIMARY) if v > 0 else ("-INFINITY", P_UNARY)
    if dtype == "float64":
        s = repr(v)
    elif v == 0.0:
        s = "0.0" if math.copysign(1.0, v) > 0 else "-0.0"
    else:
        s = None
        for digits in range(1, 10):
            cand = "%.*g" % (digits, v)
            if _rounds_to_f32(cand, v):
                s = cand
                break
        if s is None:                          # never expected; hex floats are exact
            s = v.hex()
    if not any(c in s for c in ".ex"):
        s += ".0"
    s += "f" if dtype == "float32" else ""
    return s, (P_UNARY if s.startswith("-") else P_PRIMARY)


def c_literal(value, dtype: str) -> str:
    """The exact C literal of ``value`` read as ``dtype``."""
    return const_literal(ir.Const(value, dtype))[0]


def const_literal(e: ir.Const) -> tuple:
    """(the exact C literal of the constant ``e``, its precedence)."""
    if e.dtype == "bool":
        return ("true" if e.value else "false"), P_PRIMARY
    if ir.is_int(e.dtype):
        return int_literal(e.value, e.dtype)
    if ir.is_float(e.dtype):
        return _float_literal(e.value, e.dtype)
    raise TypeError(f"C backend: unknown dtype {e.dtype!r}")

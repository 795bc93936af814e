"""C backend: the vector math programs of :mod:`codegen.vecmath` as
``static inline`` C helpers (scalar C that gcc vectorises inside ``omp simd``
loops and in the explicit vector code of widened loops)."""
from __future__ import annotations

from ..ir import ELSIZE
from ..vecmath import PROGRAMS
from .syntax import c_literal

_C_BIN = {"fadd": "+", "fsub": "-", "fmul": "*", "fdiv": "/", "iadd": "+", "isub": "-",
          "shl": "<<", "ashr": ">>", "and": "&", "or": "|",
          "flt": "<", "fgt": ">", "fge": ">=", "fne": "!=", "feq": "=="}


_SUF = {"float32": "f32", "float64": "f64"}
_CT = {"float32": ("float", "int32_t", "uint32_t"), "float64": ("double", "int64_t", "uint64_t")}


def c_helper(func: str, dtype: str = "float32") -> str:
    """The ``static inline T tp_<func>_<f32|f64>(T x)`` helper."""
    b = CBuilder(dtype)
    r = PROGRAMS[(func, dtype)](b, "x")
    body = "\n".join(b.lines)
    ft = _CT[dtype][0]
    return (f"static inline {ft} tp_{func}_{_SUF[dtype]}({ft} x) {{  /* codegen.vecmath */\n"
            f"{body}\n  return {r};\n}}")


def c_bits_helpers(dtype: str) -> str:
    """``tp_bits_<suf>`` / ``tp_from_bits_<suf>``: the float's bits as an int and back."""
    ft, it, _ = _CT[dtype]
    suf, n = _SUF[dtype], ELSIZE[dtype]
    return (f"static inline {it} tp_bits_{suf}({ft} x) {{ {it} b; memcpy(&b, &x, {n}); return b; }}\n"
            f"static inline {ft} tp_from_bits_{suf}({it} b) {{ {ft} x; memcpy(&x, &b, {n}); return x; }}")


class CBuilder:
    """The builder of :mod:`codegen.vecmath`'s programs as scalar C: one
    ``const`` temporary per operation, tracking the C type of each."""

    def __init__(self, dtype="float32"):
        self.dt, self.bits = dtype, 32 if dtype == "float32" else 64
        self.ft, self.it, self.ut = _CT[dtype]
        self.suf = _SUF[dtype]
        self.lines, self.n, self.types = [], 0, {"x": self.ft}

    def f(self, v: float) -> str:
        s = c_literal(v, self.dt)
        self.types[s] = self.ft
        return s

    def i(self, v: int) -> str:
        if self.bits == 64 and not -2**31 < v < 2**31:
            s = f"({v}LL)" if v > -2**63 else "(-9223372036854775807LL - 1)"
        else:
            s = f"({v})" if v < 0 else str(v)
        self.types[s] = self.it
        return s

    def _new(self, ctype: str, text: str) -> str:
        self.n += 1
        name = f"t{self.n}"
        self.types[name] = ctype
        self.lines.append(f"  const {ctype} {name} = {text};")
        return name

    def op(self, name: str, *a) -> str:
        ft, it = self.ft, self.it
        if name == "bits":
            return self._new(it, f"tp_bits_{self.suf}({a[0]})")
        if name == "from_bits":
            return self._new(ft, f"tp_from_bits_{self.suf}({a[0]})")
        if name == "sitofp":
            return self._new(ft, f"({ft}){a[0]}")
        if name == "select":
            return self._new(self.types[a[1]], f"{a[0]} ? {a[1]} : {a[2]}")
        if name in ("flt", "fgt", "fge", "fne", "feq"):
            return self._new("int", f"{a[0]} {_C_BIN[name]} {a[1]}")
        if name == "ashr":          # arithmetic shift of a signed int (gcc, clang)
            return self._new(it, f"{a[0]} >> {a[1]}")
        if name == "shl":           # on unsigned: no signed-overflow UB
            return self._new(it, f"({it})(({self.ut}){a[0]} << {a[1]})")
        return self._new(ft if name[0] == "f" else it, f"{a[0]} {_C_BIN[name]} {a[1]}")

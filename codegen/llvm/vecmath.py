"""LLVM backend: the vector math programs of :mod:`codegen.vecmath` as
``alwaysinline`` LLVM functions on ``float``/``double`` or ``<W x T>``, each
defined once per module (:func:`define`)."""
from __future__ import annotations

from ..vecmath import PROGRAMS
from .lower import Func, Module, lit


def define(m: Module, func: str, w, dtype: str = "float32") -> str:
    """The symbol of ``func`` on ``dtype`` or ``w``-lane vectors of it in the
    module ``m``, its function defined there on first use."""
    key = ("vecmath", func, w, dtype)
    if key not in m.decls:
        sym, text = llvm_function(func, w, dtype)
        m.decls[key] = sym
        m.funcs.append(text)
    return m.decls[key]


class LLVMBuilder:
    """LLVM instructions on ``float``/``i32`` or ``double``/``i64`` (``w`` None) or
    vectors of ``w`` of them."""

    def __init__(self, func, w, dtype="float32"):
        self.fn, self.w, self.dt = func, w, dtype
        self.bits = 32 if dtype == "float32" else 64
        self.sft, self.sit = ("float", "i32") if self.bits == 32 else ("double", "i64")
        self.ft = self.sft if w is None else f"<{w} x {self.sft}>"
        self.it = self.sit if w is None else f"<{w} x {self.sit}>"
        self.mt = "i1" if w is None else f"<{w} x i1>"
        self.types = {}

    def _splat(self, t: str, s: str) -> str:
        return s if self.w is None else f"splat ({t} {s})"

    def f(self, v: float) -> str:
        s = self._splat(self.sft, lit(v, self.dt))
        self.types[s] = self.ft
        return s

    def i(self, v: int) -> str:
        s = self._splat(self.sit, str(v))
        self.types[s] = self.it
        return s

    def _new(self, t: str, text: str) -> str:
        r = self.fn.op(text, "m")
        self.types[r] = t
        return r

    def op(self, name: str, *a) -> str:
        ft, it, mt = self.ft, self.it, self.mt
        if name == "bits":
            return self._new(it, f"bitcast {ft} {a[0]} to {it}")
        if name == "from_bits":
            return self._new(ft, f"bitcast {it} {a[0]} to {ft}")
        if name == "sitofp":
            return self._new(ft, f"sitofp {it} {a[0]} to {ft}")
        if name == "select":
            t = self.types[a[1]]
            return self._new(t, f"select {mt} {a[0]}, {t} {a[1]}, {t} {a[2]}")
        fc = {"flt": "olt", "fgt": "ogt", "fge": "oge", "fne": "une", "feq": "oeq"}
        if name in fc:
            return self._new(mt, f"fcmp {fc[name]} {ft} {a[0]}, {a[1]}")
        if name[0] == "f":
            return self._new(ft, f"{name} contract {ft} {a[0]}, {a[1]}")
        ins = {"iadd": "add", "isub": "sub", "shl": "shl", "ashr": "ashr", "and": "and", "or": "or"}
        return self._new(it, f"{ins[name]} {it} {a[0]}, {a[1]}")


def llvm_function(func: str, w, dtype: str = "float32") -> tuple:
    """(symbol, definition text) of the ``alwaysinline`` LLVM function computing
    ``func`` on ``dtype`` (``w`` None) or ``w``-lane vectors of it."""
    st, suf = ("float", "f32") if dtype == "float32" else ("double", "f64")
    t = st if w is None else f"<{w} x {st}>"
    sym = f"tp.{func}.{suf if w is None else f'v{w}{suf}'}"
    fn = Func(f"define internal {t} @\"{sym}\"({t} %x) #1")
    b = LLVMBuilder(fn, w, dtype)
    b.types["%x"] = t
    r = PROGRAMS[(func, dtype)](b, "%x")
    fn.emit(f"ret {t} {r}")
    return sym, fn.text()

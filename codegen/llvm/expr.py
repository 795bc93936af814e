"""LLVM backend, IR building, part 2: expressions.

:class:`ExprLowering` turns an expression into LLVM instructions.  Outside a
vector loop every value is a scalar.  While a vector loop body is widened
(``self.vec`` set) each value is tagged (:class:`~codegen.llvm.lower.Val`):
uniform over the lanes (``u``, kept scalar and broadcast only where it meets a
vector), affine in the lane (``a``: ``base + lane * stride`` for int64 index
arithmetic, so that unit-stride accesses become vector loads/stores) or a
``<W x T>`` vector (``v``).  Operators follow the C backend's semantics exactly
(see :mod:`codegen.llvm.lower`).
"""
from __future__ import annotations

import re

from .. import ir, vecmath
from ..ir import ELSIZE, expr_key
from . import lower as llvm_lower
from . import vecmath as llvm_vecmath
from .half import f32_to_half, half_to_f32
from .lower import (BITS, FCMP, INTRINSICS, LLT, MEMT, Arr, CannotWiden, Ctx, Func, Host,
                    Module, Val, common, kind, lit, may_trap, splat_lit, vt, zero)
from .stream import StreamMixin
from .window import window_load


class VecState:
    """While widening a vector loop body: the lane count, the arrays the body
    loads, and the loads it evaluates unconditionally (safe to speculate); for
    a body with loops (:mod:`codegen.vectorize`) its plan and the accumulators
    now held in registers ({(array, index key): Val})."""

    def __init__(self, w: int, loaded: set, safe: set, plan=None):
        self.w, self.loaded, self.safe, self.plan = w, loaded, safe, plan
        self.promoted = {}


_SUFFIX = {"float": "f32", "double": "f64"}     # intrinsic name mangling of element types

_INT_LIT = re.compile(r"\A(?:splat \(i\d+ )?(-?\d+)\)?\Z")


def _split_offset(e) -> tuple:
    """``(x, c)`` with ``e == x + c`` for an int64 ``e`` whose top-level adds and
    subtractions have constant int64 operands; ``(e, 0)`` otherwise."""
    if not (isinstance(e, ir.Binary) and e.op in ("add", "sub") and e.dtype == "int64"):
        return e, 0

    def const(x):
        return x.value if isinstance(x, ir.Const) and x.dtype == "int64" \
            and isinstance(x.value, int) and not isinstance(x.value, bool) else None
    cb, ca = const(e.b), const(e.a)
    if cb is not None and e.a.dtype == "int64":
        x, c = _split_offset(e.a)
        return x, c + (cb if e.op == "add" else -cb)
    if ca is not None and e.op == "add" and e.b.dtype == "int64":
        x, c = _split_offset(e.b)
        return x, c + ca
    return e, 0


def _int_literal_of(text: str):
    """The value of an integer literal operand (``7``, ``splat (i32 7)``), else None."""
    m = _INT_LIT.match(text)
    return int(m.group(1)) if m else None


# ------------------------------------------------------------------ expressions
class ExprLowering(StreamMixin):
    """Expressions, scalar or (``self.vec`` set) widened over the vector lanes."""

    def __init__(self, fn: ir.LoweredFunction, h: Host):
        self.fn, self.host, self.m = fn, h, Module(h)
        self.consts = {n: int(v) for n, v in fn.constants.items()}
        self.env: dict = {}          # scalar name -> Val
        self.arrays: dict = {}       # array name -> Arr
        self.f: Func = None
        self.ctx: Ctx = None
        self.vec: VecState = None
        self.spromoted: dict = {}    # (array, index key) -> Val: held over serial loops
        self.chains: set = set()     # registers on a latency-bound add chain (codegen.llvm.promote)
        self.enclosing: list = []    # the For statements being emitted, outermost first
        self.spec = 0                # > 0: evaluating lanes that may be inactive
        self.masks: list = []        # the active lanes there (<W x i1>), innermost last

    # -------------------------------------------------------------- lanes
    def lanes(self, *vals) -> tuple:
        """(None, scalar texts) if every value is uniform, else (W, vector texts)."""
        if self.vec is None or all(v.kind == "u" for v in vals):
            return None, [v.t for v in vals]
        return self.vec.w, [self.mat(v) for v in vals]

    def mat(self, v: Val) -> str:
        """``v`` as a ``<W x T>`` vector."""
        w, f = self.vec.w, self.f
        if v.kind == "v":
            return v.t
        t = LLT[v.dtype]
        if v.kind == "u":
            if v.const is not None:
                return f"splat ({t} {v.t})"
            i = f.op(f"insertelement <{w} x {t}> poison, {t} {v.t}, i64 0")
            return f.op(f"shufflevector <{w} x {t}> {i}, <{w} x {t}> poison, <{w} x i32> zeroinitializer",
                        "splat")
        base = self.mat(Val(v.t, "int64"))
        ramp = ", ".join(f"i64 {k * v.stride}" for k in range(w))
        return f.op(f"add <{w} x i64> {base}, <{ramp}>", "ramp")

    # -------------------------------------------------------------- dispatch
    def ex(self, e) -> Val:
        if isinstance(e, ir.Const):
            if e.dtype not in LLT:
                raise TypeError(f"LLVM backend: unknown dtype {e.dtype!r}")
            c = e.value
            if ir.is_int(e.dtype):
                c = int(lit(c, e.dtype)) % 256 if e.dtype == "uint8" else int(lit(c, e.dtype))
            return Val(lit(e.value, e.dtype), e.dtype, const=c)
        if isinstance(e, ir.Var):
            v = self.env.get(e.name)
            if v is not None:
                return v
            if e.name in self.consts:
                c = self.consts[e.name]
                return Val(lit(c, "int64"), "int64", const=c)
            raise ValueError(f"LLVM backend: undeclared variable {e.name!r}")
        if isinstance(e, ir.Load):
            return self.load(e)
        if isinstance(e, ir.Binary):
            return self.binary(e)
        if isinstance(e, ir.Unary):
            return self.unary(e)
        if isinstance(e, ir.Call):
            return self.call(e)
        if isinstance(e, ir.Select):
            return self.select(e)
        if isinstance(e, ir.Cast):
            if e.dtype not in LLT:
                raise TypeError(f"LLVM backend: unknown dtype {e.dtype!r}")
            return self.convert(self.ex(e.a), e.dtype)
        raise TypeError(f"LLVM backend: not an expression: {e!r}")

    def index(self, e) -> Val:
        v = self.ex(e)
        return v if v.dtype == "int64" else self.convert(v, "int64")

    def to_bool(self, v: Val) -> Val:
        return self.convert(v, "bool")

    # -------------------------------------------------------------- conversions
    def convert(self, v: Val, to: str) -> Val:
        """C conversion semantics (the C backend's casts)."""
        if v.dtype == to:
            return v
        w, (x,) = self.lanes(v)
        return Val(self._conv(x, v.dtype, to, w), to, kind(w))

    def _conv(self, x: str, fr: str, to: str, w) -> str:
        if ir.is_half(fr):                      # 16-bit floats convert through float32
            y = half_to_f32(self.f, x, fr, w)
            return y if to == "float32" else self._conv(y, "float32", to, w)
        if ir.is_half(to):
            return f32_to_half(self.f, x if fr == "float32" else self._conv(x, fr, "float32", w),
                               to, w)
        f = self.f
        tf, tt = vt(LLT[fr], w), vt(LLT[to], w)
        if to == "bool":
            return f.op(f"{'fcmp une' if ir.is_float(fr) else 'icmp ne'} {tf} {x}, {zero(fr, w)}")
        if fr == "bool":
            return f.op(f"{'uitofp' if ir.is_float(to) else 'zext'} {tf} {x} to {tt}")
        if ir.is_int(fr) and ir.is_int(to):
            bf, bt = BITS[fr], BITS[to]
            if bf == bt:
                return x
            if bf > bt:
                return f.op(f"trunc {tf} {x} to {tt}")
            return f.op(f"{'zext' if fr == 'uint8' else 'sext'} {tf} {x} to {tt}")
        if ir.is_int(fr):
            return f.op(f"{'uitofp' if fr == 'uint8' else 'sitofp'} {tf} {x} to {tt}")
        if ir.is_int(to):
            if BITS[to] < 32:       # as C on x86: convert to int, then wrap
                t32 = vt("i32", w)
                y = f.op(f"fptosi {tf} {x} to {t32}")
                return f.op(f"trunc {t32} {y} to {tt}")
            return f.op(f"fptosi {tf} {x} to {tt}")
        return f.op(f"{'fpext' if BITS[to] > BITS[fr] else 'fptrunc'} {tf} {x} to {tt}")

    # -------------------------------------------------------------- operators
    def binary(self, e: ir.Binary) -> Val:
        op = e.op
        if op in ir.LOGIC_OPS:
            return self.logic(e)
        if op in ir.CMP_OPS:
            a, b = self.ex(e.a), self.ex(e.b)
            ct = common(a.dtype, b.dtype)
            a, b = self.convert(a, ct), self.convert(b, ct)
            w, (x, y) = self.lanes(a, b)
            r = Val(self._cmp(op, ct, x, y, w), "bool", kind(w))
            return self.convert(r, e.dtype) if e.dtype in LLT else r
        if op not in ir.ARITH_OPS:
            raise ValueError(f"LLVM backend: unknown binary op {op!r}")
        dt = e.dtype
        if dt not in LLT:
            raise TypeError(f"LLVM backend: unknown dtype {dt!r}")
        if self.vec is not None and ir.is_float(dt) and op in ("add", "sub"):
            r = self._fma(e)
            if r is not None:
                return r
        a, b = self.ex(e.a), self.ex(e.b)
        if self.vec is not None and dt == "int64" and "a" in (a.kind, b.kind):
            r = self._affine(op, a, b)
            if r is not None:
                return r
        ct = a.dtype if a.dtype == b.dtype else common(a.dtype, b.dtype)
        a, b = self.convert(a, ct), self.convert(b, ct)
        w, (x, y) = self.lanes(a, b)
        return self.convert(Val(self._arith(op, ct, x, y, w), ct, kind(w)), dt)

    def _affine(self, op: str, a: Val, b: Val):
        """int64 add/sub/mul keeping ``base + lane * stride`` form; None if not affine."""
        if "v" in (a.kind, b.kind) or a.dtype != "int64" or b.dtype != "int64":
            return None
        if op in ("add", "sub"):
            s = a.stride + (b.stride if op == "add" else -b.stride)
            return Val(self.f.op(f"{op} i64 {a.t}, {b.t}"), "int64", "a" if s else "u", s)
        if op == "mul":
            if a.kind == "u":
                a, b = b, a
            if b.kind == "u" and b.const is not None:
                s = a.stride * b.const
                return Val(self.f.op(f"mul i64 {a.t}, {b.t}"), "int64", "a" if s else "u", s)
        return None

    def _fma(self, e: ir.Binary):
        """``a*b + c``, ``c + a*b``, ``a*b - c``, ``c - a*b`` -> ``llvm.fma`` on vectors."""
        dt = e.dtype
        if isinstance(e.b, ir.Binary) and e.b.op == "mul" and e.b.dtype == dt == e.a.dtype:
            m, other, mul_right = e.b, e.a, True
        elif isinstance(e.a, ir.Binary) and e.a.op == "mul" and e.a.dtype == dt == e.b.dtype:
            m, other, mul_right = e.a, e.b, False
        else:
            return None
        x, y = self.convert(self.ex(m.a), dt), self.convert(self.ex(m.b), dt)
        c = self.convert(self.ex(other), dt)
        w, (xs, ys, cs) = self.lanes(x, y, c)
        if w is None:                      # all uniform: plain (contractable) scalar ops
            p = self._arith("mul", dt, xs, ys, None)
            return Val(self._arith(e.op, dt, *((cs, p) if mul_right else (p, cs)), None), dt)
        t = vt(LLT[dt], w)
        if e.op == "sub" and mul_right:
            xs = self.f.op(f"fneg {t} {xs}")
        elif e.op == "sub":
            cs = self.f.op(f"fneg {t} {cs}")
        name, _ = self.m.intrinsic("llvm.fma", dt, w, 3)
        return Val(self.f.op(f"call {t} @{name}({t} {xs}, {t} {ys}, {t} {cs})", "fma"), dt, "v")

    def _arith(self, op: str, dt: str, x: str, y: str, w) -> str:
        f, t, c1 = self.f, vt(LLT[dt], w), vt("i1", w)
        if ir.is_float(dt):
            if op in ("add", "sub") and w is None and (x in self.chains or y in self.chains):
                r = f.op(f"f{op} {t} {x}, {y}")      # no FMA on the chain
                self.chains.add(r)
                return r
            if op in ("add", "sub", "mul", "div"):
                return f.op(f"f{op} contract {t} {x}, {y}")
            if op == "mod":
                return f.op(f"frem {t} {x}, {y}")
            if op in ("min", "max"):        # NaN-propagating (np.minimum / np.maximum)
                return self.fminmax(op, t, x, y, w)
            q = f.op(f"fdiv contract {t} {x}, {y}")
            fl, _ = self.m.intrinsic("llvm.floor", dt, w)
            q = f.op(f"call {t} @{fl}({t} {q})")
            if op == "floordiv":
                return q
            p = f.op(f"fmul contract {t} {q}, {y}")          # floormod: a - floor(a/b)*b
            return f.op(f"fsub contract {t} {x}, {p}")
        if dt == "bool":                 # C promotes to int
            xi, yi = self._conv(x, "bool", "int32", w), self._conv(y, "bool", "int32", w)
            return self._conv(self._arith(op, "int32", xi, yi, w), "int32", "bool", w)
        if op in ("min", "max"):
            pred = ("u" if dt == "uint8" else "s") + ("lt" if op == "min" else "gt")
            c = f.op(f"icmp {pred} {t} {x}, {y}")
            return f.op(f"select {c1} {c}, {t} {x}, {t} {y}")
        if op in ("add", "sub", "mul"):            # wraps: no nsw/nuw on values
            return f.op(f"{op} {t} {x}, {y}")
        if dt == "int8":                 # as C: in int (-128 / -1 = 128), then wrap
            xi, yi = self._conv(x, "int8", "int32", w), self._conv(y, "int8", "int32", w)
            return self._conv(self._arith(op, "int32", xi, yi, w), "int32", "int8", w)
        # x / 0 == x % 0 == 0 and MIN / -1 == MIN, MIN % -1 == 0 (NumPy's results,
        # the C backend's): a divisor that is 0, or -1 with x == MIN, becomes 1
        # (MIN / 1 == MIN, x % 1 == 0), and a zero divisor's result is then 0
        y, yzero = self._safe_divisor(dt, x, y, w)
        if dt == "uint8":
            r = f.op(f"{'udiv' if op in ('div', 'floordiv') else 'urem'} {t} {x}, {y}")
            return r if yzero is None else f.op(f"select {c1} {yzero}, {t} {zero(dt, w)}, {t} {r}")
        r = self._signed_divmod(op, dt, x, y, w)
        return r if yzero is None else f.op(f"select {c1} {yzero}, {t} {zero(dt, w)}, {t} {r}")

    def _safe_divisor(self, dt: str, x: str, y: str, w) -> tuple:
        """(divisor that cannot trap, i1 "the divisor was 0" or None when it cannot be)."""
        f, t, c1 = self.f, vt(LLT[dt], w), vt("i1", w)
        c = _int_literal_of(y)
        lo = ir.INT_LIMITS[dt][0]
        if c is not None and c != 0 and (dt == "uint8" or c != -1):
            return y, None
        yzero = f.op(f"icmp eq {t} {y}, {zero(dt, w)}")
        bad = yzero
        if dt != "uint8" and (c is None or c == -1):
            xmin = f.op(f"icmp eq {t} {x}, {splat_lit(str(lo), LLT[dt], w)}")
            ym1 = f.op(f"icmp eq {t} {y}, {splat_lit('-1', LLT[dt], w)}")
            bad = f.op(f"or {c1} {yzero}, {f.op(f'and {c1} {xmin}, {ym1}')}")
        one = splat_lit("1", LLT[dt], w)
        return f.op(f"select {c1} {bad}, {t} {one}, {t} {y}", "divisor"), yzero

    def _signed_divmod(self, op: str, dt: str, x: str, y: str, w) -> str:
        """Signed ``op`` with a divisor that is neither 0 nor -1 against MIN."""
        f, t, c1 = self.f, vt(LLT[dt], w), vt("i1", w)
        if op == "div":
            return f.op(f"sdiv {t} {x}, {y}")
        r = f.op(f"srem {t} {x}, {y}")
        if op == "mod":
            return r
        z = zero(dt, w)
        nz = f.op(f"icmp ne {t} {r}, {z}")
        rn = f.op(f"icmp slt {t} {r}, {z}")
        bn = f.op(f"icmp slt {t} {y}, {z}")
        fix = f.op(f"and {c1} {nz}, {f.op(f'xor {c1} {rn}, {bn}')}")
        if op == "floordiv":
            q = f.op(f"sdiv {t} {x}, {y}")
            q1 = f.op(f"sub {t} {q}, {splat_lit('1', LLT[dt], w)}")
            return f.op(f"select {c1} {fix}, {t} {q1}, {t} {q}")
        r1 = f.op(f"add {t} {r}, {y}")
        return f.op(f"select {c1} {fix}, {t} {r1}, {t} {r}")

    def fminmax(self, op: str, t: str, x: str, y: str, w) -> str:
        """NaN-propagating float min/max, as the C backend's helper
        ``(x OP y || x != x) ? x : y``: NaN if either operand is NaN (x86:
        a min/max, an unordered compare and a blend)."""
        f, c1 = self.f, vt("i1", w)
        c = f.op(f"fcmp {'olt' if op == 'min' else 'ogt'} {t} {x}, {y}")
        m = f.op(f"select {c1} {c}, {t} {x}, {t} {y}")
        nan = f.op(f"fcmp uno {t} {x}, {x}")
        return f.op(f"select {c1} {nan}, {t} {x}, {t} {m}")

    def _cmp(self, op: str, dt: str, x: str, y: str, w) -> str:
        t = vt(LLT[dt], w)
        if ir.is_float(dt):
            return self.f.op(f"fcmp {FCMP[op]} {t} {x}, {y}")
        pred = op if op in ("eq", "ne") else ("s" if dt in ("int8", "int32", "int64") else "u") + op
        return self.f.op(f"icmp {pred} {t} {x}, {y}")

    def logic(self, e: ir.Binary) -> Val:
        a = self.to_bool(self.ex(e.a))
        if may_trap(e.b):
            if a.kind == "u":
                return self._short_circuit(e, a)
            self.spec += 1
            try:
                b = self.to_bool(self.masked(a, e.op == "or", lambda: self.ex(e.b)))
            finally:
                self.spec -= 1
        else:
            b = self.to_bool(self.ex(e.b))
        w, (x, y) = self.lanes(a, b)
        return Val(self.f.op(f"{e.op} {vt('i1', w)} {x}, {y}"), "bool", kind(w))

    def masked(self, c: Val, negate: bool, lower):
        """``lower()`` with the lanes where ``c`` (or, ``negate``, not ``c``)
        holds, within the current mask, as the active lanes: a contiguous load
        there becomes ``llvm.masked.load``, touching no inactive lane."""
        w, (m,) = self.lanes(c)
        if negate:
            m = self.f.op(f"xor {vt('i1', w)} {m}, {splat_lit('true', 'i1', w)}")
        if self.masks:
            m = self.f.op(f"and {vt('i1', w)} {m}, {self.masks[-1]}")
        self.masks.append(m)
        try:
            return lower()
        finally:
            self.masks.pop()

    def _short_circuit(self, e: ir.Binary, a: Val) -> Val:
        f = self.f
        rhs, done = f.label("rhs"), f.label("endlogic")
        pre = f.cur
        f.cbr(a.t, rhs, done) if e.op == "and" else f.cbr(a.t, done, rhs)
        f.start(rhs)
        w, (y,) = self.lanes(self.to_bool(self.ex(e.b)))
        end = f.cur
        f.br(done)
        f.start(done)
        short = splat_lit("false" if e.op == "and" else "true", "i1", w)
        return Val(f.op(f"phi {vt('i1', w)} [ {short}, %{pre} ], [ {y}, %{end} ]"), "bool", kind(w))

    def unary(self, e: ir.Unary) -> Val:
        f = self.f
        if e.op == "neg":
            a = self.ex(e.a)
            if a.kind == "a" and e.dtype == "int64":
                return Val(f.op(f"sub i64 0, {a.t}"), "int64", "a", -a.stride)
            a = self.convert(a, e.dtype)
            if e.dtype == "bool":
                return a
            w, (x,) = self.lanes(a)
            t = vt(LLT[e.dtype], w)
            r = f.op(f"fneg {t} {x}") if ir.is_float(e.dtype) else f.op(f"sub {t} {zero(e.dtype, w)}, {x}")
            return Val(r, e.dtype, kind(w))
        if e.op == "not":
            w, (x,) = self.lanes(self.to_bool(self.ex(e.a)))
            r = Val(f.op(f"xor {vt('i1', w)} {x}, {splat_lit('true', 'i1', w)}"), "bool", kind(w))
            return self.convert(r, e.dtype) if e.dtype in LLT else r
        raise ValueError(f"LLVM backend: unknown unary op {e.op!r}")

    def select(self, e: ir.Select) -> Val:
        c = self.to_bool(self.ex(e.cond))
        if may_trap(e.a) or may_trap(e.b):
            if c.kind == "u":
                return self._lazy_select(e, c)
            self.spec += 1
            try:
                a = self.masked(c, False, lambda: self.ex(e.a))
                b = self.masked(c, True, lambda: self.ex(e.b))
            finally:
                self.spec -= 1
        else:
            a, b = self.ex(e.a), self.ex(e.b)
        a, b = self.convert(a, e.dtype), self.convert(b, e.dtype)
        w, (cc, x, y) = self.lanes(c, a, b)
        t = vt(LLT[e.dtype], w)
        return Val(self.f.op(f"select {vt('i1', w)} {cc}, {t} {x}, {t} {y}"), e.dtype, kind(w))

    def _lazy_select(self, e: ir.Select, c: Val) -> Val:
        """C's ``c ? a : b`` evaluates one side only: branches and a phi."""
        f = self.f
        tl, el, done = f.label("then"), f.label("else"), f.label("endsel")
        f.cbr(c.t, tl, el)
        w = None if self.vec is None else self.vec.w
        outs = []
        for label, sub in ((tl, e.a), (el, e.b)):
            f.start(label)
            v = self.convert(self.ex(sub), e.dtype)
            outs.append((v.t if w is None else self.mat(v), f.cur))
            f.br(done)
        f.start(done)
        t = vt(LLT[e.dtype], w)
        return Val(f.op(f"phi {t} [ {outs[0][0]}, %{outs[0][1]} ], [ {outs[1][0]}, %{outs[1][1]} ]"),
                   e.dtype, kind(w))

    # -------------------------------------------------------------- math
    def call(self, e: ir.Call) -> Val:
        fname, dt = e.func, e.dtype
        ir.check_call(e, "LLVM backend")
        if ir.is_float(dt):
            return self._fmath(fname, dt, self.convert(self.ex(e.args[0]), dt))
        if not ir.is_int(dt):
            raise TypeError(f"LLVM backend: {fname} of dtype {dt}")
        a = self.ex(e.args[0])
        if fname in ("floor", "ceil"):
            return self.convert(a, dt)
        if fname == "abs":
            a = self.convert(a, dt)
            if dt == "uint8":
                return a
            w, (x,) = self.lanes(a)
            name, t = self.m.intrinsic("llvm.abs", dt, w, 1, ["i1"])
            return Val(self.f.op(f"call {t} @{name}({t} {x}, i1 false)"), dt, kind(w))
        return self.convert(self._fmath(fname, "float64", self.convert(a, "float64")), dt)

    def _fmath(self, fname: str, dt: str, x: Val) -> Val:
        f = self.f
        w, (xs,) = self.lanes(x)
        t, st = vt(LLT[dt], w), LLT[dt]
        if vecmath.supported(fname, dt):               # polynomial, no libm
            sym = llvm_vecmath.define(self.m, fname, w, dt)
            return Val(f.op(f'call {t} @"{sym}"({t} {xs})', fname), dt, kind(w))
        if fname in INTRINSICS:
            name, _ = self.m.intrinsic(f"llvm.{INTRINSICS[fname]}", dt, w)
            return Val(f.op(f"call {t} @{name}({t} {xs})"), dt, kind(w))
        if fname == "sigmoid":                         # 1 / (1 + exp(-x)), as the C helper
            n = f.op(f"fneg {t} {xs}")
            name, _ = self.m.intrinsic("llvm.exp", dt, w)
            ex = f.op(f"call {t} @{name}({t} {n})")
            one = splat_lit(lit(1.0, dt), st, w)
            return Val(f.op(f"fdiv {t} {one}, {f.op(f'fadd {t} {one}, {ex}')}"), dt, kind(w))
        sym = f'"{llvm_lower.LIBM_NAMES[(fname, dt)]}"'               # tanh: libm
        self.m.decls.setdefault(sym, f"declare {st} @{sym}({st}) #2")
        if w is None:
            return Val(f.op(f"call {st} @{sym}({st} {xs})"), dt)
        acc = "poison"
        for k in range(w):
            xk = f.op(f"extractelement {t} {xs}, i64 {k}")
            rk = f.op(f"call {st} @{sym}({st} {xk})")
            acc = f.op(f"insertelement {t} {acc}, {st} {rk}, i64 {k}")
        return Val(acc, dt, "v")

    # -------------------------------------------------------------- memory
    def array(self, name: str) -> Arr:
        a = self.arrays.get(name)
        if a is None:
            raise ValueError(f"LLVM backend: undeclared array {name!r}")
        return a

    def indices(self, a: Arr, index, name: str) -> list:
        if len(index) == 0:
            return []                                  # element 0, as the C backend
        if len(index) != len(a.strides):
            raise ValueError(f"LLVM backend: array {name!r} of rank {len(a.strides)} "
                             f"indexed with {len(index)} indices")
        return [self.offset_index(i) for i in index]

    def offset_index(self, e) -> Val:
        """``index(e)``; an int64 ``x + c`` (constant ``c``) also keeps ``(x, c)``
        (``Val.peeled``) so that :meth:`addr` forms ``x * stride + c * stride``:
        the neighbours of a stencil (``A[i - 1][j]``, ``A[i + 1][j + 1]``) then
        share ``i * N + j`` and differ by loop-invariant offsets that LLVM's
        scalar evolution sees (it does not distribute ``(i + 1) * N``).  Exact:
        int64 arithmetic wraps, so ``(x + c) * s == x * s + c * s``."""
        x, c = _split_offset(e)
        if not c or isinstance(x, ir.Const) or not -2**62 < c < 2**62:
            return self.index(e)
        v = self.index(x)
        if v.const is not None or v.dtype != "int64":
            return self.index(e)
        f = self.f
        if v.kind == "v":
            full = Val(f.op(f"add <{self.vec.w} x i64> {v.t}, splat (i64 {c})"), "int64", "v")
        else:
            full = Val(f.op(f"add i64 {v.t}, {c}"), "int64", v.kind, v.stride)
        full.peeled = (v, c)
        return full

    def addr(self, a: Arr, idx: list, inbounds: bool = True) -> str:
        """Pointer to the element at lane 0 (scalar indices, or the bases of affine
        ones); not ``inbounds`` for a masked access, whose lane 0 may lie outside."""
        f, const, acc, offs = self.f, 0, None, []
        for i, s in zip(idx, a.strides):
            if i.const is not None and isinstance(s, int):
                const += i.const * s
                continue
            if i.peeled is not None:
                i, c = i.peeled
                if isinstance(s, int):
                    const += c * s
                else:
                    offs.append(s if c == 1 else f.op(f"mul nsw i64 {s}, {c}"))
            term = i.t if s == 1 else f.op(f"mul nsw i64 {i.t}, {s}")
            acc = term if acc is None else f.op(f"add nsw i64 {acc}, {term}")
        for o in offs:
            acc = o if acc is None else f.op(f"add nsw i64 {acc}, {o}")
        const = (const + 2**63) % 2**64 - 2**63      # an i64 literal (addresses wrap)
        if acc is None:
            lin = str(const)
        else:
            lin = f.op(f"add nsw i64 {acc}, {const}") if const else acc
        return f.op(f"getelementptr {'inbounds ' if inbounds else ''}{MEMT[a.dtype]}, ptr {a.ptr}, "
                    f"i64 {lin}", "p")

    def lane_ptrs(self, a: Arr, idx: list) -> list:
        """One pointer per lane (gather / scatter).  Indices that are uniform or
        affine in the lane, along a runtime row stride, give scalar pointers
        ``p0 + k * delta`` (no 64-bit vector multiply, which AVX2 lacks)."""
        f, w = self.f, self.vec.w
        if all(i.kind in ("u", "a") for i in idx) and any(
                i.kind == "a" and not isinstance(st, int) for i, st in zip(idx, a.strides)):
            p0 = self.addr(a, idx)
            delta, dconst = None, 0
            for i, st in zip(idx, a.strides):
                if i.kind != "a":
                    continue
                if isinstance(st, int):
                    dconst += i.stride * st
                else:
                    term = f.op(f"mul nsw i64 {st}, {i.stride}")
                    delta = term if delta is None else f.op(f"add nsw i64 {delta}, {term}")
            if dconst:
                delta = str(dconst) if delta is None else f.op(f"add nsw i64 {delta}, {dconst}")
            out = [p0]
            for k in range(1, w):
                off = str(k * dconst) if delta is not None and delta == str(dconst) else \
                    (f.op(f"mul nsw i64 {delta}, {k}") if delta is not None else "0")
                out.append(f.op(f"getelementptr inbounds {MEMT[a.dtype]}, ptr {p0}, i64 {off}", "p"))
            return out
        ptrs = self.ptr_vector(a, idx)
        return [f.op(f"extractelement <{w} x ptr> {ptrs}, i64 {k}", "p") for k in range(w)]

    def ptr_vector(self, a: Arr, idx: list) -> str:
        """The lanes' addresses as one ``<w x ptr>`` (an index that varies
        across the lanes in a way no scalar pointer and stride describes)."""
        f, w = self.f, self.vec.w
        lin = None
        for i, s in zip(idx, a.strides):
            v = self.mat(i)
            if s != 1:
                sv = f"splat (i64 {s})" if isinstance(s, int) else self.mat(Val(s, "int64"))
                v = f.op(f"mul nsw <{w} x i64> {v}, {sv}")
            lin = v if lin is None else f.op(f"add nsw <{w} x i64> {lin}, {v}")
        if lin is None:
            lin = "zeroinitializer"
        return f.op(f"getelementptr inbounds {MEMT[a.dtype]}, ptr {a.ptr}, <{w} x i64> {lin}", "ptrs")

    def gathered(self, a: Arr, idx: list) -> bool:
        """Whether a load at ``idx`` is one gather instruction: an index that
        depends on data (an indirection such as ``colidx[nz]``), of an
        element type the gather intrinsic takes.  LLVM lowers
        ``llvm.masked.gather`` to the host's gather (AVX2 ``vgatherdps``,
        AVX-512's) or, where the target has none or prefers scalar loads, to
        the same scalar loads the lane-by-lane form makes."""
        affine = all(i.kind in ("u", "a") for i in idx)
        return not affine and MEMT[a.dtype] in ("float", "double", "i32", "i64")

    @staticmethod
    def contiguous(idx: list) -> bool:
        return bool(idx) and all(i.kind == "u" for i in idx[:-1]) and idx[-1].kind == "a" \
            and idx[-1].stride == 1

    def load(self, e: ir.Load) -> Val:
        if self.vec is not None and self.vec.promoted:
            held = self.vec.promoted.get((e.array, tuple(expr_key(i) for i in e.index)))
            if held is not None:
                return self.convert(held, e.dtype) if e.dtype in LLT else held
        if self.vec is None and self.spromoted:
            held = self.spromoted.get((e.array, tuple(expr_key(i) for i in e.index)))
            if held is not None:
                return self.convert(held, e.dtype) if e.dtype in LLT else held
        a = self.array(e.array)
        idx = self.indices(a, e.index, e.array)
        f, mt, al = self.f, MEMT[a.dtype], ELSIZE[a.dtype]
        if all(i.kind == "u" for i in idx):
            x = f.op(f"load {mt}, ptr {self.addr(a, idx)}, align {al}", "ld")
            r = Val(f.op(f"icmp ne i8 {x}, 0") if a.dtype == "bool" else x, a.dtype)
            return self.convert(r, e.dtype) if e.dtype in LLT else r
        w = self.vec.w
        if self.spec and ("L", e.array, tuple(expr_key(i) for i in e.index)) not in self.vec.safe:
            if not (self.masks and self.contiguous(idx)):
                raise CannotWiden(f"load of {e.array} under a lane-dependent condition")
            vty = f"<{w} x {mt}>"
            name = f"llvm.masked.load.v{w}{_SUFFIX.get(mt, mt)}.p0"
            self.m.declare(name, vty, ["ptr", f"<{w} x i1>", vty])
            x = f.op(f"call {vty} @{name}(ptr align {al} {self.addr(a, idx, False)}, <{w} x i1> "
                     f"{self.masks[-1]}, {vty} poison)", "mld")
        elif self.contiguous(idx):
            x = f.op(f"load <{w} x {mt}>, ptr {self.addr(a, idx)}, align {al}", "vld")
        elif (win := window_load(self, a, e.index, idx)) is not None:
            x = win                                  # codegen.llvm.window
        elif self.gathered(a, idx):
            vty = f"<{w} x {mt}>"
            name = f"llvm.masked.gather.v{w}{_SUFFIX.get(mt, mt)}.v{w}p0"
            self.m.declare(name, vty, [f"<{w} x ptr>", "i32", f"<{w} x i1>", vty])
            x = f.op(f"call {vty} @{name}(<{w} x ptr> {self.ptr_vector(a, idx)}, i32 {al}, "
                     f"<{w} x i1> splat (i1 true), {vty} poison)", "gather")
        else:
            x = "poison"
            for k, p in enumerate(self.lane_ptrs(a, idx)):
                s = f.op(f"load {mt}, ptr {p}, align {al}", "ld")
                x = f.op(f"insertelement <{w} x {mt}> {x}, {mt} {s}, i64 {k}", "gather")
        if a.dtype == "bool":
            x = f.op(f"icmp ne <{w} x i8> {x}, zeroinitializer")
        r = Val(x, a.dtype, "v")
        return self.convert(r, e.dtype) if e.dtype in LLT else r

    def store(self, s: ir.Store) -> None:
        a = self.array(s.array)
        if not a.writable:
            raise ValueError(f"LLVM backend: store to read-only array {s.array!r}")
        val = self.convert(self.ex(s.value), a.dtype)
        if self.vec is not None and self.vec.promoted:
            key = (s.array, tuple(expr_key(i) for i in s.index))
            if key in self.vec.promoted:
                self.vec.promoted[key] = val
                return
        if self.vec is None and self.spromoted:
            key = (s.array, tuple(expr_key(i) for i in s.index))
            if key in self.spromoted:
                self.spromoted[key] = val
                return
        idx = self.indices(a, s.index, s.array)
        f, mt, al = self.f, MEMT[a.dtype], ELSIZE[a.dtype]
        uniform = all(i.kind == "u" for i in idx)
        if self.vec is None or (uniform and val.kind == "u"):
            if self.vec is not None and s.array in self.vec.loaded:
                raise CannotWiden(f"{s.array} is read and written at one element by every lane")
            x = f.op(f"zext i1 {val.t} to i8") if a.dtype == "bool" else val.t
            f.emit(f"store {mt} {x}, ptr {self.addr(a, idx)}, align {al}")
            return
        w, x = self.vec.w, self.mat(val)
        if a.dtype == "bool":
            x = f.op(f"zext <{w} x i1> {x} to <{w} x i8>")
        if s.array in self.vec.loaded:
            varying = [i for i in idx if i.kind != "u"]
            if len(varying) != 1 or varying[0].kind != "a":
                raise CannotWiden(f"{s.array} is read and written where lanes may collide")
        if uniform:                      # sequential semantics: the last lane's value wins
            last = f.op(f"extractelement <{w} x {mt}> {x}, i64 {w - 1}")
            f.emit(f"store {mt} {last}, ptr {self.addr(a, idx)}, align {al}")
        elif self.contiguous(idx) and isinstance(s, ir.StreamStore) and w * ELSIZE[a.dtype] == 64:
            self.stream_line(f"<{w} x {mt}>", x, self.addr(a, idx), al)
        elif self.contiguous(idx):
            f.emit(f"store <{w} x {mt}> {x}, ptr {self.addr(a, idx)}, align {al}")
        else:                            # scatter, lanes in order
            for k, p in enumerate(self.lane_ptrs(a, idx)):
                xk = f.op(f"extractelement <{w} x {mt}> {x}, i64 {k}")
                f.emit(f"store {mt} {xk}, ptr {p}, align {al}")

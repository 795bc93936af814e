"""Vector math: float32 ``exp``, ``log``, ``tanh`` and ``sigmoid`` as branchless
polynomial programs that both backends emit, scalar or on ``<W x float>``.

Each function is written once, against a tiny builder (:class:`CBuilder` makes a
``static inline`` C helper that gcc vectorises inside ``omp simd`` loops and in
the explicit vector code of widened loops; :class:`LLVMBuilder` makes an
``alwaysinline`` LLVM function on ``float`` or ``<W x float>``), so both
backends compute bit-identical results up to FMA contraction.  Only
arithmetic, compares, selects and integer bit operations are used: no libm
call, no branch, no table.

Algorithms (Cephes single precision, as in Pommier's ``sse_mathfun``):

* ``exp``: ``x = n*ln2 + r`` (``n`` rounded with the ``1.5*2^23`` trick,
  ``ln2`` split in two), ``e^r`` a degree-7 polynomial, ``2^n`` applied as two
  power-of-two factors so that overflow gives ``inf`` and underflow rounds
  once into the subnormals (``x`` clamped to ``[-104, 89]`` first);
* ``log``: exponent and mantissa in ``[sqrt(1/2), sqrt(2))`` from the bits
  (subnormals scaled by ``2^23`` first), a degree-9 polynomial; ``log(0) =
  log(-0.0) = -inf``, ``log(x < 0) = NaN``, ``log(inf) = inf``;
* ``tanh``: ``x + x^3 P(x^2)`` for ``|x| <= 0.625`` (``x`` itself below
  ``1e-4``, which keeps ``-0.0``), ``sign(x) (1 - 2 / (e^(2|x|) + 1))`` above;
* ``sigmoid``: ``e = exp(-|x|)``, ``1 / (1 + e)`` for ``x >= 0`` and
  ``e / (1 + e)`` below (no overflow, exact tails down to the subnormals).

NaN in, NaN out everywhere.  Accuracy, measured against float64 NumPy over
3 million points from -110 to 95 (and the edges in ``tests/test_vecmath.py``):
exp < 1 ulp, log < 1 ulp, tanh < 1.5 ulp, sigmoid < 3 ulp (in ulps of the
float32 result; subnormal results within one subnormal step).

float64 ``exp`` (and ``sigmoid`` through it) is Cephes' double precision
``exp`` (a rational approximation, < 1 ulp measured against 120-bit mpmath);
float64 ``log`` and ``tanh`` keep libm (scalar calls, also in vector loops).
"""
from __future__ import annotations

VECMATH_FUNCS = ("exp", "log", "tanh", "sigmoid")       # float32; float64: exp, sigmoid

_EXP_P = (1.9875691500e-4, 1.3981999507e-3, 8.3334519073e-3, 4.1665795894e-2,
          1.6666665459e-1, 5.0000001201e-1)
_LOG_P = (7.0376836292e-2, -1.1514610310e-1, 1.1676998740e-1, -1.2420140846e-1,
          1.4249322787e-1, -1.6668057665e-1, 2.0000714765e-1, -2.4999993993e-1,
          3.3333331174e-1)
_TANH_P = (-5.70498872745e-3, 2.06390887954e-2, -5.37397155531e-2, 1.33314422036e-1,
           -3.33332819422e-1)
_LN2_HI, _LN2_LO = 0.693359375, -2.12194440e-4
_MAGIC = 12582912.0                     # 1.5 * 2**23: x + MAGIC rounds x to an integer
_MAGIC_BITS = 0x4B400000


def _horner(b, coeffs, x):
    p = b.f(coeffs[0])
    for c in coeffs[1:]:
        p = b.op("fadd", b.op("fmul", p, x), b.f(c))
    return p


def _exp_reduce(b, x, lo, hi, magic, magic_bits, ln2_hi, ln2_lo):
    """(n, r) with ``x = n ln2 + r`` for ``x`` clamped to ``[lo, hi]`` (NaN: 0):
    ``n`` rounded by adding ``magic`` (1.5 * 2^mantissa bits), ``ln2`` in two parts."""
    c = b.op("select", b.op("flt", x, b.f(lo)), b.f(lo), x)
    c = b.op("select", b.op("fgt", c, b.f(hi)), b.f(hi), c)
    c = b.op("select", b.op("fne", c, c), b.f(0.0), c)           # NaN: any finite value
    t = b.op("fadd", b.op("fmul", c, b.f(1.4426950408889634)), b.f(magic))
    n = b.op("isub", b.op("bits", t), b.i(magic_bits))
    nf = b.op("fsub", t, b.f(magic))
    r = b.op("fsub", c, b.op("fmul", nf, b.f(ln2_hi)))
    return n, b.op("fsub", r, b.op("fmul", nf, b.f(ln2_lo)))


def _exp_scale(b, x, p, n, bias, shift):
    """``p * 2^n`` as two power-of-two factors (one rounding into the
    subnormals, overflow to inf); NaN ``x`` gives ``x``."""
    n1 = b.op("ashr", n, b.i(1))
    n2 = b.op("isub", n, n1)
    s1 = b.op("from_bits", b.op("shl", b.op("iadd", n1, b.i(bias)), b.i(shift)))
    s2 = b.op("from_bits", b.op("shl", b.op("iadd", n2, b.i(bias)), b.i(shift)))
    y = b.op("fmul", b.op("fmul", p, s1), s2)
    return b.op("select", b.op("fne", x, x), x, y)


def exp_f32(b, x):
    n, r = _exp_reduce(b, x, -104.0, 89.0, _MAGIC, _MAGIC_BITS, _LN2_HI, _LN2_LO)
    p = _horner(b, _EXP_P, r)
    p = b.op("fadd", b.op("fadd", b.op("fmul", b.op("fmul", p, r), r), r), b.f(1.0))
    return _exp_scale(b, x, p, n, 127, 23)


def log_f32(b, x):
    sub = b.op("flt", x, b.f(1.17549435e-38))                   # subnormal (or <= 0)
    xs = b.op("select", sub, b.op("fmul", x, b.f(8388608.0)), x)
    bits = b.op("bits", xs)
    e = b.op("isub", b.op("ashr", bits, b.i(23)), b.i(126))
    e = b.op("isub", e, b.op("select", sub, b.i(23), b.i(0)))
    m = b.op("from_bits", b.op("or", b.op("and", bits, b.i(0x007FFFFF)), b.i(0x3F000000)))
    small = b.op("flt", m, b.f(0.707106781186547524))
    e = b.op("isub", e, b.op("select", small, b.i(1), b.i(0)))
    m = b.op("fsub", b.op("select", small, b.op("fadd", m, m), m), b.f(1.0))
    ef = b.op("sitofp", e)
    z = b.op("fmul", m, m)
    y = b.op("fmul", b.op("fmul", _horner(b, _LOG_P, m), m), z)
    y = b.op("fadd", y, b.op("fmul", ef, b.f(_LN2_LO)))
    y = b.op("fsub", y, b.op("fmul", z, b.f(0.5)))
    r = b.op("fadd", b.op("fadd", m, y), b.op("fmul", ef, b.f(_LN2_HI)))
    r = b.op("select", b.op("flt", x, b.f(0.0)), b.f(float("nan")), r)
    r = b.op("select", b.op("feq", x, b.f(0.0)), b.f(-float("inf")), r)
    r = b.op("select", b.op("feq", x, b.f(float("inf"))), x, r)
    return b.op("select", b.op("fne", x, x), x, r)


def _abs_sign(b, x):
    """(|x|, the sign bit of x as an int)."""
    bits = b.op("bits", x)
    top = 1 << (b.bits - 1)
    return b.op("from_bits", b.op("and", bits, b.i(top - 1))), b.op("and", bits, b.i(-top))


def tanh_f32(b, x):
    a, sign = _abs_sign(b, x)
    e = exp_f32(b, b.op("fadd", a, a))
    big = b.op("fsub", b.f(1.0), b.op("fdiv", b.f(2.0), b.op("fadd", e, b.f(1.0))))
    big = b.op("from_bits", b.op("or", b.op("bits", big), sign))
    z = b.op("fmul", x, x)
    sm = b.op("fadd", b.op("fmul", b.op("fmul", _horner(b, _TANH_P, z), z), x), x)
    sm = b.op("select", b.op("flt", a, b.f(1e-4)), x, sm)
    return b.op("select", b.op("fgt", a, b.f(0.625)), big, sm)


_EXP64_P = (1.26177193074810590878e-4, 3.02994407707441961300e-2, 9.99999999999999999910e-1)
_EXP64_Q = (3.00198505138664455042e-6, 2.52448340349684104192e-3, 2.27265548208155028766e-1,
            2.00000000000000000009e0)


def exp_f64(b, x):
    """Cephes ``exp``: ``e^r = 1 + 2 r P(r^2) / (Q(r^2) - r P(r^2))``."""
    n, r = _exp_reduce(b, x, -746.0, 710.0, 6755399441055744.0, 0x4338000000000000,
                       6.93145751953125e-1, 1.42860682030941723212e-6)
    rr = b.op("fmul", r, r)
    px = b.op("fmul", r, _horner(b, _EXP64_P, rr))
    q = b.op("fdiv", px, b.op("fsub", _horner(b, _EXP64_Q, rr), px))
    p = b.op("fadd", b.op("fadd", q, q), b.f(1.0))
    return _exp_scale(b, x, p, n, 1023, 52)


def sigmoid_f32(b, x):
    a, _ = _abs_sign(b, x)
    e = (exp_f32 if b.bits == 32 else exp_f64)(b, b.op("fsub", b.f(0.0), a))
    r = b.op("fdiv", b.f(1.0), b.op("fadd", b.f(1.0), e))
    return b.op("select", b.op("fge", x, b.f(0.0)), r, b.op("fmul", e, r))


PROGRAMS = {("exp", "float32"): exp_f32, ("log", "float32"): log_f32,
            ("tanh", "float32"): tanh_f32, ("sigmoid", "float32"): sigmoid_f32,
            ("exp", "float64"): exp_f64, ("sigmoid", "float64"): sigmoid_f32}


def supported(func: str, dtype: str) -> bool:
    """Whether ``func`` on ``dtype`` is computed here (else libm)."""
    return (func, dtype) in PROGRAMS


# ------------------------------------------------------------------ builders
_C_BIN = {"fadd": "+", "fsub": "-", "fmul": "*", "fdiv": "/", "iadd": "+", "isub": "-",
          "shl": "<<", "ashr": ">>", "and": "&", "or": "|",
          "flt": "<", "fgt": ">", "fge": ">=", "fne": "!=", "feq": "=="}


_SUF = {"float32": "f32", "float64": "f64"}
_CT = {"float32": ("float", "int32_t", "uint32_t"), "float64": ("double", "int64_t", "uint64_t")}


def c_helper(func: str, dtype: str = "float32") -> str:
    """The ``static inline T tp_<func>_<f32|f64>(T x)`` helper."""
    b = _TypedCBuilder(dtype)
    r = PROGRAMS[(func, dtype)](b, "x")
    body = "\n".join(b.lines)
    ft = _CT[dtype][0]
    return (f"static inline {ft} tp_{func}_{_SUF[dtype]}({ft} x) {{  /* codegen.vecmath */\n"
            f"{body}\n  return {r};\n}}")


def c_bits_helpers(dtype: str) -> str:
    """``tp_bits_<suf>`` / ``tp_from_bits_<suf>``: the float's bits as an int and back."""
    ft, it, _ = _CT[dtype]
    suf, n = _SUF[dtype], 4 if dtype == "float32" else 8
    return (f"static inline {it} tp_bits_{suf}({ft} x) {{ {it} b; memcpy(&b, &x, {n}); return b; }}\n"
            f"static inline {ft} tp_from_bits_{suf}({it} b) {{ {ft} x; memcpy(&x, &b, {n}); return x; }}")


class _TypedCBuilder:
    """Scalar C builder that tracks the C type of each temporary."""

    def __init__(self, dtype="float32"):
        self.dt, self.bits = dtype, 32 if dtype == "float32" else 64
        self.ft, self.it, self.ut = _CT[dtype]
        self.suf = _SUF[dtype]
        self.lines, self.n, self.types = [], 0, {"x": self.ft}

    def f(self, v: float) -> str:
        from .c.emit import c_literal
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


class LLVMBuilder:
    """LLVM instructions on ``float``/``i32`` or ``double``/``i64`` (``w`` None) or
    vectors of ``w`` of them."""

    def __init__(self, func, w, dtype="float32"):
        from .llvm.lower import lit
        self.fn, self.w, self._lit, self.dt = func, w, lit, dtype
        self.bits = 32 if dtype == "float32" else 64
        self.sft, self.sit = ("float", "i32") if self.bits == 32 else ("double", "i64")
        self.ft = self.sft if w is None else f"<{w} x {self.sft}>"
        self.it = self.sit if w is None else f"<{w} x {self.sit}>"
        self.mt = "i1" if w is None else f"<{w} x i1>"
        self.types = {}

    def _splat(self, t: str, s: str) -> str:
        return s if self.w is None else f"splat ({t} {s})"

    def f(self, v: float) -> str:
        s = self._splat(self.sft, self._lit(v, self.dt))
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
    from .llvm.lower import Func
    st, suf = ("float", "f32") if dtype == "float32" else ("double", "f64")
    t = st if w is None else f"<{w} x {st}>"
    sym = f"tp.{func}.{suf if w is None else f'v{w}{suf}'}"
    fn = Func(f"define internal {t} @\"{sym}\"({t} %x) #1")
    b = LLVMBuilder(fn, w, dtype)
    b.types["%x"] = t
    r = PROGRAMS[(func, dtype)](b, "%x")
    fn.emit(f"ret {t} {r}")
    return sym, fn.text()

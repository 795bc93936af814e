"""Vector math: float32 ``exp``, ``log``, ``tanh`` and ``sigmoid`` as branchless
polynomial programs that both backends emit, scalar or on ``<W x float>``.

Each function is written once, against a tiny builder (the C backend's
:class:`codegen.c.vecmath.CBuilder` makes a ``static inline`` C helper that gcc
vectorises inside ``omp simd`` loops and in the explicit vector code of widened
loops; the LLVM backend's :class:`codegen.llvm.vecmath.LLVMBuilder` makes an
``alwaysinline`` LLVM function on ``float`` or ``<W x float>``), so both
backends compute bit-identical results up to FMA contraction.  Only
arithmetic, compares, selects and integer bit operations are used: no libm
call, no branch, no table.  This module holds the programs only and imports
no backend.

The builder ``b`` of a program: ``b.bits`` (32 or 64: the float's width),
``b.f(v)`` a float constant, ``b.i(v)`` an integer constant of the same width,
``b.op(name, *args)`` one operation on the values it returned: float
``fadd fsub fmul fdiv``, compares ``flt fgt fge fne feq`` (a mask),
``select(mask, a, b)``, integer ``iadd isub shl ashr and or``, ``bits`` /
``from_bits`` (reinterpret float <-> integer), ``sitofp``.  A program is
``program(b, x) -> value``.

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
3 million points from -110 to 95 (and the edges in ``tests/codegen/test_vecmath.py``):
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

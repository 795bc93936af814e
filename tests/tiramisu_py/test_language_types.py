"""The DSL's typing, unit by unit: dtype promotion and weak literals, Python
floor semantics of // and %, comparisons / select / logic, casts, bool and
8-bit arrays, and the math functions.

Every program is compiled once per module and run on random inputs (NumPy
``default_rng`` with fixed seeds) against NumPy.  Integer results must match
exactly; float results to ``rtol=1e-6`` (float32: ``rtol=atol=1e-5``) unless
a test says otherwise."""
from repo_paths import ROOT
import os

os.environ.setdefault("OMP_WAIT_POLICY", "passive")

import subprocess  # noqa: E402
import sys  # noqa: E402

import numpy as np  # noqa: E402
import pytest  # noqa: E402

import tiramisu_py as tp  # noqa: E402

from lang_helpers import FLOATS, ROOT, close, rng  # noqa: E402


# ================================================================== typing
@pytest.fixture(scope="module")
def typed():
    """A function with inputs of several types, for checking Expr.dtype."""
    f = tp.Function("typed", params=["N"])
    i = f.var("i", 0, "N")
    ins = {n: f.input(n, ("N",), getattr(tp, n[1:]))
           for n in ("xfloat32", "xfloat64", "xint8", "xuint8", "xint32", "xint64", "xbool")}
    return f, i, {k[1:]: v[i] for k, v in ins.items()}


@pytest.mark.parametrize("expr,expect", [
    (lambda x, i: x["float32"] * x["int64"], tp.float32),
    (lambda x, i: x["int64"] * x["float32"], tp.float32),
    (lambda x, i: x["float32"] + x["float64"], tp.float64),
    (lambda x, i: x["int8"] + x["uint8"], tp.int32),
    (lambda x, i: x["uint8"] - x["int8"], tp.int32),
    (lambda x, i: x["int8"] + x["int8"], tp.int8),
    (lambda x, i: x["int8"] * x["int32"], tp.int32),
    (lambda x, i: x["int32"] + x["int64"], tp.int64),
    (lambda x, i: x["bool"] + x["int8"], tp.int8),
    (lambda x, i: x["float32"] * 0.5, tp.float32),          # weak literal
    (lambda x, i: 2 * x["float32"], tp.float32),
    (lambda x, i: x["int8"] * 2, tp.int8),
    (lambda x, i: x["uint8"] + 1, tp.uint8),
    (lambda x, i: i * 0.5, tp.float64),                     # int meets a float literal
    (lambda x, i: x["int8"] * 0.5, tp.float64),
    (lambda x, i: i * 2, tp.int64),
    (lambda x, i: i / 2, tp.float64),                       # true division
    (lambda x, i: x["int32"] / x["int32"], tp.float64),
    (lambda x, i: x["float32"] / 2, tp.float32),
    (lambda x, i: x["int32"] // 2, tp.int32),
    (lambda x, i: x["float32"] // 2, tp.float32),
    (lambda x, i: x["int8"] % 3, tp.int8),
    (lambda x, i: x["float32"] > 0, tp.bool),
    (lambda x, i: (x["float32"] > 0) & (i < 3), tp.bool),
    (lambda x, i: ~x["bool"], tp.bool),
    (lambda x, i: tp.select(x["bool"], x["float32"], 0.5), tp.float32),
    (lambda x, i: tp.select(x["bool"], x["int32"], 0.5), tp.float64),
    (lambda x, i: tp.select(x["bool"], x["int8"], x["float32"]), tp.float32),
    (lambda x, i: tp.exp(x["float32"]), tp.float32),
    (lambda x, i: tp.exp(x["int32"]), tp.float64),
    (lambda x, i: tp.sqrt(i), tp.float64),
    (lambda x, i: tp.abs(x["int8"]), tp.int8),
    (lambda x, i: tp.min(x["float32"], 0), tp.float32),
    (lambda x, i: tp.max(x["int8"], x["int32"]), tp.int32),
    (lambda x, i: tp.cast(tp.uint8, x["float64"]), tp.uint8),
    (lambda x, i: tp.cast("int32", i), tp.int32),
    (lambda x, i: tp.cast(np.float32, i), tp.float32),
    (lambda x, i: -x["uint8"], tp.uint8),
])
def test_expression_types(typed, expr, expect):
    f, i, x = typed
    assert expr(x, i).dtype is expect


def test_promote_table():
    from tiramisu_py.base.types import promote as P
    assert P(tp.float32, tp.int64) is tp.float32
    assert P(tp.int64, tp.float32) is tp.float32
    assert P(tp.int8, tp.uint8) is tp.int32
    assert P(tp.uint8, tp.int8) is tp.int32
    assert P(tp.int32, tp.uint8) is tp.int32
    assert P(tp.bool, tp.float32) is tp.float32
    assert P(tp.float64, tp.float32) is tp.float64


@pytest.fixture(scope="module")
def promo_kernel():
    f = tp.Function("promo", params=["N"])
    i = f.var("i", 0, "N")
    X = f.input("X", ("N",), tp.float32)
    L = f.input("L", ("N",), tp.int64)
    I8 = f.input("I8", ("N",), tp.int8)
    U8 = f.input("U8", ("N",), tp.uint8)
    P = f.input("P", ("N",), tp.int32)
    Q = f.input("Q", ("N",), tp.int32)
    f.computation("f32_i64", [i], X[i] * L[i])
    f.computation("i8_u8", [i], I8[i] + U8[i])
    f.computation("f32_half", [i], X[i] * 0.5)
    f.computation("i_half", [i], i * 0.5)
    f.computation("truediv", [i], P[i] / Q[i])
    f.computation("i8_wrap", [i], I8[i] + I8[i])
    return f.compile()


def test_promotion_at_run_time(promo_kernel):
    r = rng(1)
    n = 64
    X = r.standard_normal(n).astype(np.float32)
    L = r.integers(-1000, 1000, n)
    I8 = r.integers(-128, 128, n).astype(np.int8)
    U8 = r.integers(0, 256, n).astype(np.uint8)
    P = r.integers(-100, 100, n).astype(np.int32)
    Q = r.integers(1, 9, n).astype(np.int32) * r.choice([-1, 1], n).astype(np.int32)
    o = promo_kernel(X, L, I8, U8, P, Q)
    assert set(o) == {"f32_i64", "i8_u8", "f32_half", "i_half", "truediv", "i8_wrap"}
    assert o["f32_i64"].dtype == np.float32
    close(o["f32_i64"], X * L.astype(np.float32), np.float32)
    assert o["i8_u8"].dtype == np.int32
    np.testing.assert_array_equal(o["i8_u8"], I8.astype(np.int32) + U8.astype(np.int32))
    assert o["f32_half"].dtype == np.float32
    np.testing.assert_array_equal(o["f32_half"], X * np.float32(0.5))
    assert o["i_half"].dtype == np.float64
    np.testing.assert_array_equal(o["i_half"], np.arange(n) * 0.5)
    assert o["truediv"].dtype == np.float64
    np.testing.assert_allclose(o["truediv"], P / Q, rtol=1e-15)
    assert o["i8_wrap"].dtype == np.int8
    np.testing.assert_array_equal(o["i8_wrap"], I8 + I8)             # wraps like NumPy


def test_expression_has_no_truth_value(typed):
    f, i, x = typed
    with pytest.raises(TypeError, match="select"):
        bool(x["float32"] > 0)
    with pytest.raises(TypeError, match="select"):
        if i < 3:
            pass
    with pytest.raises(TypeError, match="str"):
        x["float32"] + "a"


# ============================================================ floor // and %
DIVMOD_TYPES = ["int8", "int32", "int64", "uint8", "float32", "float64"]


@pytest.fixture(scope="module")
def divmod_kernel():
    f = tp.Function("divmod", params=["N"])
    i = f.var("i", 0, "N")
    for dt in DIVMOD_TYPES:
        A = f.input("a_" + dt, ("N",), getattr(tp, dt))
        B = f.input("b_" + dt, ("N",), getattr(tp, dt))
        f.computation("q_" + dt, [i], A[i] // B[i])
        f.computation("r_" + dt, [i], A[i] % B[i])
    f.computation("q_lit", [i], (i - 7) // 3)               # loop var, literal divisor
    f.computation("r_lit", [i], (i - 7) % -3)
    return f.compile()


def _divmod_inputs(n=400, seed=2):
    r = rng(seed)
    args = {}
    for dt in DIVMOD_TYPES:
        if dt.startswith("float"):
            a = (r.standard_normal(n) * 20).astype(dt)
            b = (r.standard_normal(n) * 4).astype(dt)
            b[np.abs(b) < 0.05] = 1.5
        elif dt == "uint8":
            a = r.integers(0, 256, n).astype(dt)
            b = r.integers(1, 256, n).astype(dt)
        else:
            lo = -128 if dt == "int8" else -10**6
            a = r.integers(lo, -lo, n).astype(dt)
            b = r.integers(-12, 13, n).astype(dt)
            b[b == 0] = 5
            b[:4] = [-1, 1, -7, 7]                            # both signs, small divisors
        args["a_" + dt], args["b_" + dt] = a, b
    return args


@pytest.mark.parametrize("dt", DIVMOD_TYPES)
def test_floor_division_and_modulo_follow_python(divmod_kernel, dt):
    args = _divmod_inputs()
    o = divmod_kernel(**args)
    a, b = args["a_" + dt], args["b_" + dt]
    q, r = o["q_" + dt], o["r_" + dt]
    assert q.dtype == np.dtype(dt) and r.dtype == np.dtype(dt)
    if dt.startswith("float"):
        np.testing.assert_array_equal(q, np.floor_divide(a, b))
        tol = 1e-4 if dt == "float32" else 1e-10
        np.testing.assert_allclose(r, np.mod(a, b), rtol=tol, atol=tol)
        # the remainder has the sign of the divisor
        assert ((r == 0) | (np.sign(r) == np.sign(b))).all()
    else:
        with np.errstate(over="ignore"):
            np.testing.assert_array_equal(q, a // b)
            np.testing.assert_array_equal(r, a % b)
    if dt in ("int32", "int64"):
        assert (a < 0).any() and (b < 0).any()
        np.testing.assert_array_equal(q.astype(np.int64) * b + r, a)


def test_floor_division_of_loop_vars(divmod_kernel):
    o = divmod_kernel(**_divmod_inputs(n=20))
    v = np.arange(20) - 7
    np.testing.assert_array_equal(o["q_lit"], v // 3)
    np.testing.assert_array_equal(o["r_lit"], v % -3)


_DIV0 = r"""
import os, sys
import numpy as np, tiramisu_py as tp
f = tp.Function("div0", params=["N"])
i = f.var("i", 0, "N")
A = f.input("A", ("N",), tp.{dt})
B = f.input("B", ("N",), tp.{dt})
f.computation("q", [i], A[i] {op} B[i])
k = f.compile()
try:
    print(k(np.array([{a}], np.{dt}), np.array([{b}], np.{dt})))
except Exception as exc:
    print("raised", type(exc).__name__, exc)
print("survived")
"""


@pytest.mark.parametrize("dt,op,a,b", [("int32", "//", 5, 0), ("int64", "%", 5, 0),
                                       ("int32", "//", -2**31, -1)])
def test_integer_division_by_zero_does_not_crash(dt, op, a, b):
    script = _DIV0.format(dt=dt, op=op, a=a, b=b)
    r = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True,
                       timeout=120, cwd=ROOT, env=dict(os.environ))
    assert r.returncode == 0 and "survived" in r.stdout, (r.returncode, r.stdout, r.stderr[-2000:])


# ========================================== comparisons, select, logic, casts
@pytest.fixture(scope="module")
def logic_kernel():
    f = tp.Function("logicf", params=["N"])
    i = f.var("i", 0, "N")
    X = f.input("X", ("N",), tp.float64)
    Y = f.input("Y", ("N",), tp.float32)
    L = f.input("L", ("N",), tp.int64)
    M = f.input("M", ("N",), tp.bool)
    I8 = f.input("I8", ("N",), tp.int8)
    U8 = f.input("U8", ("N",), tp.uint8)
    f.computation("lt", [i], X[i] < 0)
    f.computation("le", [i], L[i] <= 3)
    f.computation("eq", [i], L[i] == 3)
    f.computation("ne", [i], L[i] != 3)
    f.computation("ge", [i], Y[i] >= X[i])
    f.computation("logic", [i], ((X[i] > 0) & ~M[i]) | (L[i] == 3))
    f.computation("notm", [i], ~M[i])
    f.computation("sel", [i], tp.select(M[i], X[i], -X[i]))
    f.computation("sel_int", [i], tp.select((L[i] % 2) == 0, L[i], 0))
    f.computation("truncated", [i], tp.cast(tp.int32, X[i]))
    f.computation("trunc64", [i], tp.cast(tp.int64, Y[i]))
    f.computation("wrap8", [i], tp.cast(tp.int8, L[i]))
    f.computation("wrapu8", [i], tp.cast(tp.uint8, L[i]))
    f.computation("tobool", [i], tp.cast(tp.bool, L[i]))
    f.computation("fromb", [i], tp.cast(tp.float32, M[i]) + 1.0)
    f.computation("mix8", [i], I8[i] + U8[i])
    f.computation("half8", [i], (I8[i] + I8[i]) // 2)
    f.computation("u8mul", [i], U8[i] * U8[i])
    f.computation("mn", [i], tp.min(X[i], tp.cast(tp.float64, L[i])))
    f.computation("mx8", [i], tp.max(I8[i], 0))
    f.computation("mx3", [i], tp.max(Y[i], -0.5, tp.cast(tp.float32, I8[i]) * 0.01))
    f.computation("mnu8", [i], tp.min(U8[i], 100))
    f.computation("clip", [i], tp.min(tp.max(L[i], -10), 10))
    return f.compile()


def test_comparisons_logic_select_casts(logic_kernel):
    r = rng(3)
    n = 300
    X = r.standard_normal(n) * 100
    Y = (r.standard_normal(n) * 100).astype(np.float32)
    L = r.integers(-1000, 1000, n)
    L[:10] = 3
    M = r.random(n) < 0.5
    I8 = r.integers(-128, 128, n).astype(np.int8)
    U8 = r.integers(0, 256, n).astype(np.uint8)
    o = logic_kernel(X, Y, L, M, I8, U8)
    for name in ("lt", "le", "eq", "ne", "ge", "logic", "notm", "tobool"):
        assert o[name].dtype == np.bool_, name
    np.testing.assert_array_equal(o["lt"], X < 0)
    np.testing.assert_array_equal(o["le"], L <= 3)
    np.testing.assert_array_equal(o["eq"], L == 3)
    np.testing.assert_array_equal(o["ne"], L != 3)
    np.testing.assert_array_equal(o["ge"], Y.astype(np.float64) >= X)
    np.testing.assert_array_equal(o["logic"], ((X > 0) & ~M) | (L == 3))
    np.testing.assert_array_equal(o["notm"], ~M)
    np.testing.assert_array_equal(o["sel"], np.where(M, X, -X))
    np.testing.assert_array_equal(o["sel_int"], np.where(L % 2 == 0, L, 0))
    assert o["truncated"].dtype == np.int32
    np.testing.assert_array_equal(o["truncated"], np.trunc(X).astype(np.int32))   # toward zero
    np.testing.assert_array_equal(o["trunc64"], np.trunc(Y).astype(np.int64))
    assert o["wrap8"].dtype == np.int8 and o["wrapu8"].dtype == np.uint8
    np.testing.assert_array_equal(o["wrap8"], L.astype(np.int8))               # wraps mod 256
    np.testing.assert_array_equal(o["wrapu8"], L.astype(np.uint8))
    np.testing.assert_array_equal(o["tobool"], L != 0)
    assert o["fromb"].dtype == np.float32
    np.testing.assert_array_equal(o["fromb"], M.astype(np.float32) + 1)
    assert o["mix8"].dtype == np.int32
    np.testing.assert_array_equal(o["mix8"], I8.astype(np.int32) + U8)
    with np.errstate(over="ignore"):
        np.testing.assert_array_equal(o["half8"], (I8 + I8) // np.int8(2))
        np.testing.assert_array_equal(o["u8mul"], U8 * U8)
    np.testing.assert_array_equal(o["mn"], np.minimum(X, L))
    assert o["mx8"].dtype == np.int8
    np.testing.assert_array_equal(o["mx8"], np.maximum(I8, 0))
    np.testing.assert_array_equal(o["mx3"], np.maximum(np.maximum(Y, np.float32(-0.5)),
                                                       I8.astype(np.float32) * np.float32(0.01)))
    assert o["mnu8"].dtype == np.uint8
    np.testing.assert_array_equal(o["mnu8"], np.minimum(U8, 100))
    np.testing.assert_array_equal(o["clip"], np.clip(L, -10, 10))


def test_comparison_with_out_of_range_literal():
    f = tp.Function("litcmp", params=["N"])
    i = f.var("i", 0, "N")
    U8 = f.input("U8", ("N",), tp.uint8)
    I8 = f.input("I8", ("N",), tp.int8)
    try:
        f.computation("ltneg", [i], U8[i] < -1)
        f.computation("gtbig", [i], U8[i] > 300)
        f.computation("eq200", [i], I8[i] == 200)
        f.computation("mx", [i], tp.max(U8[i], -1))
        k = f.compile()
    except (ValueError, OverflowError, TypeError):
        return                                     # refusing it is fine too
    u = np.array([0, 3, 44, 255], np.uint8)
    s = np.array([-56, 1, 127, -128], np.int8)
    o = k(u, s)
    assert not o["ltneg"].any() and not o["gtbig"].any() and not o["eq200"].any()
    np.testing.assert_array_equal(o["mx"], u)


def test_bool_and_8bit_arrays_in_and_out():
    f = tp.Function("bits", params=["N"])
    i = f.var("i", 0, "N")
    M = f.input("M", ("N",), tp.bool)
    U = f.input("U", ("N",), tp.uint8)
    f.computation("flip", [i], ~M[i] | (U[i] > 200))
    f.computation("u", [i], tp.select(M[i], U[i], U[i] // 2))
    k = f.compile()
    r = rng(4)
    m = r.random(50) < 0.3
    u = r.integers(0, 256, 50).astype(np.uint8)
    o = k(m, u)
    assert o["flip"].dtype == np.bool_ and o["u"].dtype == np.uint8
    np.testing.assert_array_equal(o["flip"], ~m | (u > 200))
    np.testing.assert_array_equal(o["u"], np.where(m, u, u // 2))
    with pytest.raises(TypeError, match=r"'M'.*uint8"):
        k(m.astype(np.uint8), u)


# ======================================================================= math
MATH = {"exp": np.exp, "log": np.log, "tanh": np.tanh, "sigmoid": lambda v: 1 / (1 + np.exp(-v)),
        "sqrt": np.sqrt, "abs": np.abs, "floor": np.floor, "ceil": np.ceil}
POSITIVE = ("log", "sqrt")


@pytest.fixture(scope="module")
def math_kernel():
    f = tp.Function("mathf", params=["N"])
    i = f.var("i", 0, "N")
    for dt in FLOATS:
        X = f.input("x_" + dt, ("N",), getattr(tp, dt))
        P = f.input("p_" + dt, ("N",), getattr(tp, dt))
        for fn in MATH:
            f.computation(f"{fn}_{dt}", [i], getattr(tp, fn)((P if fn in POSITIVE else X)[i]))
    L = f.input("l", ("N",), tp.int64)
    f.computation("exp_int", [i], tp.exp(tp.cast(tp.int32, L[i]) // 100))
    f.computation("abs_int", [i], tp.abs(L[i]))
    f.computation("sqrt_loop", [i], tp.sqrt(i))
    return f.compile()


def _math_inputs(n=200, seed=5):
    r = rng(seed)
    args = {}
    for dt in FLOATS:
        args["x_" + dt] = (r.standard_normal(n) * 4).astype(dt)
        args["p_" + dt] = (r.random(n) * 50 + 1e-3).astype(dt)
    args["l"] = r.integers(-500, 500, n)
    return args


@pytest.mark.parametrize("dt", FLOATS)
@pytest.mark.parametrize("fn", list(MATH))
def test_math_functions(math_kernel, fn, dt):
    args = _math_inputs()
    o = math_kernel(**args)
    x = args[("p_" if fn in POSITIVE else "x_") + dt]
    out = o[f"{fn}_{dt}"]
    assert out.dtype == np.dtype(dt)
    ref = MATH[fn](x.astype(np.float64))
    if dt == "float32":
        np.testing.assert_allclose(out, ref, rtol=2e-6, atol=1e-6)
    else:
        np.testing.assert_allclose(out, ref, rtol=1e-14, atol=1e-15)


def test_math_on_integers(math_kernel):
    args = _math_inputs()
    o = math_kernel(**args)
    L = args["l"]
    assert o["exp_int"].dtype == np.float64
    np.testing.assert_allclose(o["exp_int"], np.exp(L.astype(np.int32) // 100), rtol=1e-14)
    assert o["abs_int"].dtype == np.int64
    np.testing.assert_array_equal(o["abs_int"], np.abs(L))
    np.testing.assert_allclose(o["sqrt_loop"], np.sqrt(np.arange(len(L))), rtol=1e-15)

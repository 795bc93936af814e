"""The DSL and its typing, unit by unit: dtype promotion and weak literals,
Python floor semantics of // and %, comparisons / select / logic, math
functions, casts, bool and 8-bit arrays, min/max, reductions, fixed and
symbolic sizes, recurrences, producer/consumer chains, ``f.nest``, what a
kernel returns, errors in definitions, and the readability of the generated C.

Every program is compiled once per module and run on random inputs (NumPy
``default_rng`` with fixed seeds) against NumPy.  Integer results must match
exactly; float results to ``rtol=1e-6`` (float32: ``rtol=atol=1e-5``) unless
a test says otherwise."""
import os

os.environ.setdefault("OMP_WAIT_POLICY", "passive")

import re  # noqa: E402
import subprocess  # noqa: E402
import sys  # noqa: E402

import numpy as np  # noqa: E402
import pytest  # noqa: E402

import tiramisu_py as tp  # noqa: E402
from examples import gemm  # noqa: E402

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
INTS = ["int8", "int32", "int64"]
FLOATS = ["float32", "float64"]


def rng(seed):
    return np.random.default_rng(seed)


def close(out, ref, dtype):
    if np.dtype(dtype) == np.float32:
        np.testing.assert_allclose(out, ref, rtol=1e-5, atol=1e-5)
    else:
        np.testing.assert_allclose(out, ref, rtol=1e-6, atol=1e-12)


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
sys.path.insert(0, {root!r})
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
    script = _DIV0.format(root=ROOT, dt=dt, op=op, a=a, b=b)
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


# ================================================================ reductions
@pytest.fixture(scope="module")
def reduce_kernel():
    f = tp.Function("red", params=["N", "M"])
    i, j = f.var("i", 0, "N"), f.var("j", 0, "M")
    A = f.input("A", ("N", "M"), tp.float64)
    L = f.input("L", ("N", "M"), tp.int32)
    s = f.computation("s", [i], 0.0)
    s[i] += A[i, j]
    d = f.computation("d", [i], 1.0)
    d[i] -= A[i, j]
    p = f.computation("p", [i], 1.0)
    p[i] *= A[i, j]
    mx = f.computation("mx", [i], float("-inf"), dtype=tp.float64)
    mx[i].max(A[i, j])
    mn = f.computation("mn", [i], float("inf"), dtype=tp.float64)
    mn[i].min(A[i, j])
    imx = f.computation("imx", [j], -2**31, dtype=tp.int32)
    imx[j].max(L[i, j])
    cs = f.computation("cs", [j], 0.0)
    u = cs[j].reduce("+", A[i, j], loops=[i, j])
    rt = f.computation("rt", [i], 0.0)
    v = rt[i].reduce("+", A[i, j] * j, loops=[j, i])     # interchanged: j outside i
    two = f.computation("two", [i], 0.0)                  # two updates, in order
    two[i] += A[i, j]                                     # over (i, j)
    two[i] *= 2.0                                         # over (i) only: its loops
    k = f.compile()
    k.update_loops = {"cs": u.loops, "rt": v.loops, "s": s.update.loops}
    return k


def test_reductions(reduce_kernel):
    r = rng(6)
    a = r.uniform(0.5, 1.5, (5, 7))
    l = r.integers(-10**6, 10**6, (5, 7)).astype(np.int32)
    o = reduce_kernel(a, l)
    np.testing.assert_allclose(o["s"], a.sum(1), rtol=1e-12)
    np.testing.assert_allclose(o["d"], 1 - a.sum(1), rtol=1e-12)
    np.testing.assert_allclose(o["p"], a.prod(1), rtol=1e-12)
    np.testing.assert_array_equal(o["mx"], a.max(1))
    np.testing.assert_array_equal(o["mn"], a.min(1))
    assert o["imx"].dtype == np.int32
    np.testing.assert_array_equal(o["imx"], l.max(0))
    np.testing.assert_allclose(o["cs"], a.sum(0), rtol=1e-12)
    np.testing.assert_allclose(o["rt"], (a * np.arange(7)).sum(1), rtol=1e-12)
    # the second update uses only i, so it runs once per i, after the first
    np.testing.assert_allclose(o["two"], a.sum(1) * 2.0, rtol=1e-12)


def test_reduce_loop_order(reduce_kernel):
    assert reduce_kernel.update_loops["s"] == ["i", "j"]
    assert reduce_kernel.update_loops["cs"] == ["i", "j"]
    assert reduce_kernel.update_loops["rt"] == ["j", "i"]
    src = reduce_kernel.source
    line = next(k for k, ln in enumerate(src.splitlines()) if "rt[i] = rt[i] +" in ln)
    above = src.splitlines()[:line]
    loops = [re.search(r"for \(int64_t (\w+) ", ln).group(1) for ln in above if "for (" in ln]
    assert loops[-2:] == ["j", "i"]


def test_reduce_rejects_bad_op_and_missing_loop():
    f = tp.Function("rbad", params=["N", "M"])
    i, j = f.var("i", 0, "N"), f.var("j", 0, "M")
    A = f.input("A", ("N", "M"))
    c = f.computation("c", [i], 0.0)
    with pytest.raises(ValueError, match="op must be"):
        c[i].reduce("/", A[i, j])
    with pytest.raises(ValueError, match="'j'"):
        c[i].reduce("+", A[i, j], loops=[i])


# ================================================================ fixed sizes
@pytest.fixture(scope="module")
def fixed_kernel():
    f = tp.Function("fixed", params={"N": 8, "M": None})
    i, j = f.var("i", 0, "N"), f.var("j", 0, "M")
    A = f.input("A", ("N", "M"), tp.float32)
    f.computation("c", [i, j], A[i, j] * 2.0)
    return f.compile()


def test_fixed_params_are_constants(fixed_kernel):
    src = fixed_kernel.source
    sig = next(ln for ln in src.splitlines() if ln.startswith("int fixed("))
    assert "int64_t N" not in sig and "int64_t M" in sig
    assert re.search(r"\bN = 8\b", src) or "i < 8" in src
    a = rng(7).standard_normal((8, 5)).astype(np.float32)
    np.testing.assert_array_equal(fixed_kernel(a), a * 2)
    np.testing.assert_array_equal(fixed_kernel(a, N=8, M=5), a * 2)


def test_fixed_params_refuse_other_values(fixed_kernel):
    with pytest.raises(ValueError, match=r"'A'.*\(9, 5\)"):
        fixed_kernel(np.zeros((9, 5), np.float32))
    with pytest.raises(ValueError, match=r"'N'.*fixed.*8"):
        fixed_kernel(np.zeros((8, 5), np.float32), N=9)
    with pytest.raises(TypeError, match="'N'"):
        tp.Function("g", params={"N": 8.0})


# ============================================================ symbolic shapes
@pytest.fixture(scope="module")
def shape_kernels():
    f = tp.Function("sym", params=["N"])
    i = f.var("i", 0, "N")
    A = f.input("A", ("N + 1",), tp.float64)
    B = f.input("B", ("2 * N",), tp.float64)
    f.computation("o", [i], A[i + 1] - A[i] + B[2 * i] + B[2 * i + 1])
    k1 = f.compile()
    g = tp.Function("half", params=["N"])
    j = g.var("j", 0, "N // 2")
    C = g.input("C", ("N // 2",), tp.float64)
    g.computation("h", [j], C[j] * 3.0)
    k2 = g.compile()
    h = tp.Function("dbl", params=["N"])
    i = h.var("i", 0, "N")
    D = h.input("D", ("2 * N",), tp.float64)
    h.computation("o", [i], D[2 * i] * D[2 * i + 1])
    k3 = h.compile()
    return k1, k2, k3


def test_symbolic_shapes_and_inference(shape_kernels):
    k1, k2, k3 = shape_kernels
    r = rng(8)
    n = 7
    a, b = r.standard_normal(n + 1), r.standard_normal(2 * n)
    np.testing.assert_allclose(k1(a, b), np.diff(a) + b[0::2] + b[1::2], rtol=1e-14)
    np.testing.assert_allclose(k3(b), b[0::2] * b[1::2], rtol=1e-15)      # N from "2 * N"
    with pytest.raises(ValueError, match=r"'B'"):
        k1(a, r.standard_normal(2 * n + 2))
    with pytest.raises(ValueError, match=r"'D'.*2 \* N"):
        k3(r.standard_normal(7))                                         # odd: no integer N
    c = r.standard_normal(3)
    # N // 2 cannot be inverted: N must be passed, and must agree
    with pytest.raises(TypeError, match="'N'"):
        k2(c)
    np.testing.assert_allclose(k2(c, N=7), c * 3, rtol=1e-15)
    np.testing.assert_allclose(k2(c, N=6), c * 3, rtol=1e-15)
    with pytest.raises(ValueError, match=r"'C'"):
        k2(c, N=9)
    assert k1(np.ones(1), np.ones(0)).shape == (0,)                      # N = 0


def test_shape_strings_are_checked():
    f = tp.Function("shp", params=["N"])
    with pytest.raises(ValueError, match=r"'M'.*not a param"):
        f.input("A", ("M",))
    with pytest.raises(ValueError, match=r"'M'"):
        f.input("A2", ("N + M",))
    with pytest.raises(ValueError, match="parse"):
        f.input("A3", ("N +",))
    with pytest.raises(ValueError, match="unsupported"):
        f.input("A4", ("N ** 2",))
    with pytest.raises(TypeError, match="float"):
        f.input("A5", (2.5,))
    with pytest.raises(ValueError, match=r"'M'"):
        f.var("i", 0, "M")


# ======================================================== recurrences, chains
@pytest.fixture(scope="module")
def prefix_kernels():
    f = tp.Function("psum", params=["N"])
    i = f.var("i", 0, "N")
    A = f.input("A", ("N",), tp.int64)
    c = f.computation("c", [i], dtype=tp.int64)
    c[i] = tp.select(i > 0, c[i - 1], 0) + A[i]
    k1 = f.compile()
    g = tp.Function("psumf", params=["N"])
    i = g.var("i", 0, "N")
    X = g.input("X", ("N",), tp.float32)
    d = g.computation("d", [i], dtype=tp.float32)
    d.set_expression(tp.select(i > 0, d[i - 1], 0.0) * 0.5 + X[i])
    k2 = g.compile()
    return k1, k2


def test_prefix_sum_reads_own_earlier_values(prefix_kernels):
    k1, k2 = prefix_kernels
    a = rng(9).integers(-50, 50, 40)
    out = k1(a)
    assert out.dtype == np.int64
    np.testing.assert_array_equal(out, np.cumsum(a))
    assert k1(np.zeros(0, np.int64)).shape == (0,)
    x = rng(9).standard_normal(30).astype(np.float32)
    ref, acc = [], np.float32(0)
    for v in x:
        acc = acc * np.float32(0.5) + v
        ref.append(acc)
    np.testing.assert_allclose(k2(x), ref, rtol=1e-6, atol=1e-6)


def test_prefix_sum_without_explicit_dtype():
    f = tp.Function("psum2", params=["N"])
    i = f.var("i", 0, "N")
    A = f.input("A", ("N",), tp.int64)
    c = f.computation("c", [i])
    c[i] = tp.select(i > 0, c[i - 1], 0) + A[i]
    k = f.compile()
    a = rng(10).integers(-50, 50, 20)
    out = k(a)
    assert out.dtype == np.int64
    np.testing.assert_array_equal(out, np.cumsum(a))


def test_definition_after_declaration_rules():
    f = tp.Function("decl", params=["N"])
    i, j = f.var("i", 0, "N"), f.var("j", 0, "N")
    A = f.input("A", ("N",))
    c = f.computation("c", [i])
    with pytest.raises(ValueError, match=r"define 'c' as c\[i\]"):
        c[j] = A[j]
    c[i] = A[i]
    with pytest.raises(ValueError, match="already has an expression"):
        c[i] = A[i] * 2
    with pytest.raises(ValueError, match="already has an expression"):
        c.set_expression(A[i])


def test_producer_consumer_chain():
    f = tp.Function("chain", params=["N", "M"])
    i, j = f.var("i", 0, "N"), f.var("j", 0, "M")
    A = f.input("A", ("N", "M"), tp.float64)
    p = f.computation("p", [i, j], A[i, j] * 2.0)
    q = f.computation("q", [i], 0.0)
    q[i] += p[i, j] + 1.0
    f.computation("r", [i], tp.sqrt(q[i] * q[i]) - q[i] / 2)
    k = f.compile()
    assert [b.name for b in k.outputs] == ["r"]          # p, q are read: temporaries
    a = rng(11).standard_normal((6, 4))
    out = k(a)
    assert isinstance(out, np.ndarray)
    q_ref = (a * 2 + 1).sum(1)
    np.testing.assert_allclose(out, np.abs(q_ref) - q_ref / 2, rtol=1e-12, atol=1e-12)
    with pytest.raises(TypeError, match="'p'"):
        k(a, p=np.zeros((6, 4)))                          # temporaries are not arguments


# ===================================================================== nests
def _nest_program(nested):
    f = tp.Function("nest" + ("ed" if nested else "less"), params=["N"])
    i = f.var("i", 0, "N")
    A = f.input("A", ("N",), tp.float64)
    X = f.buffer("X", ("N",), tp.float64, output=True)
    Y = f.buffer("Y", ("N",), tp.float64, output=True)

    def body():
        f.computation("s1", [i], A[i] + tp.select(i > 0, Y[i - 1], 0.0)).store_in(X, [i])
        f.computation("s2", [i], X[i] * 2.0 + 1.0).store_in(Y, [i])
    if nested:
        with f.nest(i):
            body()
    else:
        body()
    return f.compile()


@pytest.fixture(scope="module")
def nest_kernels():
    return _nest_program(True), _nest_program(False)


def test_nest_interleaves_statements_per_iteration(nest_kernels):
    nested, flat = nest_kernels
    r = rng(12)
    a, y0 = r.standard_normal(10), r.standard_normal(10)
    # in a nest, s1 at i reads what s2 wrote at i - 1 in the same sweep
    X, Y = np.zeros(10), y0.copy()
    out = nested(a, Y=Y, X=X)
    assert out["Y"] is Y and out["X"] is X
    xr, yr = np.zeros(10), np.zeros(10)
    for k in range(10):
        xr[k] = a[k] + (yr[k - 1] if k else 0.0)
        yr[k] = xr[k] * 2 + 1
    np.testing.assert_allclose(X, xr, rtol=1e-14)
    np.testing.assert_allclose(Y, yr, rtol=1e-14)
    # outside a nest: all of s1, then all of s2 (s1 sees Y's old values)
    X, Y = np.zeros(10), y0.copy()
    flat(a, X=X, Y=Y)
    xs = a + np.concatenate([[0.0], y0[:-1]])
    np.testing.assert_allclose(X, xs, rtol=1e-14)
    np.testing.assert_allclose(Y, xs * 2 + 1, rtol=1e-14)
    assert not np.allclose(xs, xr)            # the two orders really differ here


def test_nest_source_shape(nest_kernels):
    nested, flat = nest_kernels
    assert nested.source.count("for (int64_t i = 0; i < N; i++)") == 1
    assert flat.source.count("for (int64_t i = 0; i < N; i++)") == 2


def test_nest_requires_its_loops_first():
    f = tp.Function("nbad", params=["N"])
    i, j = f.var("i", 0, "N"), f.var("j", 0, "N")
    with f.nest(i):
        with pytest.raises(ValueError, match=r"nest\(i\)"):
            f.computation("c", [j, i], 1.0)
    with pytest.raises(TypeError, match="nest"):
        with f.nest("i"):
            pass


# ============================================================ what is returned
def test_outputs_dict_or_single_and_in_place():
    f = tp.Function("outs", params=["N"])
    i = f.var("i", 1, "N - 1")
    A = f.input("A", ("N",), tp.float64)
    O = f.buffer("O", ("N",), tp.float64, output=True)
    f.computation("sm", [i], (A[i - 1] + A[i] + A[i + 1]) / 3).store_in(O, [i])
    k = f.compile()
    a = rng(13).standard_normal(9)
    ref = (a[:-2] + a[1:-1] + a[2:]) / 3
    out = k(a)                                         # one output: the array itself
    assert isinstance(out, np.ndarray) and out.shape == (9,)
    np.testing.assert_allclose(out[1:-1], ref, rtol=1e-14)
    assert out[0] == 0 and out[-1] == 0                # allocated outputs start at zero
    o = np.full(9, 42.0)
    res = k(a, O=o)                                    # passed: updated in place
    assert res is o
    np.testing.assert_allclose(o[1:-1], ref, rtol=1e-14)
    assert o[0] == 42.0 and o[-1] == 42.0              # untouched outside the domain
    g = tp.Function("outs2", params=["N"])
    i = g.var("i", 0, "N")
    A = g.input("A", ("N",), tp.float64)
    g.computation("u", [i], A[i] + 1)
    g.computation("v", [i], A[i] - 1)
    res = g.compile()(a)
    assert isinstance(res, dict) and set(res) == {"u", "v"}
    np.testing.assert_allclose(res["u"], a + 1, rtol=1e-15)
    np.testing.assert_allclose(res["v"], a - 1, rtol=1e-15)


# ====================================================== errors in definitions
def test_duplicate_names():
    f = tp.Function("dup", params=["N"])
    i = f.var("i", 0, "N")
    A = f.input("A", ("N",))
    f.computation("c", [i], A[i])
    with pytest.raises(ValueError, match="'c'.*already used"):
        f.computation("c", [i], A[i])
    with pytest.raises(ValueError, match="'A'.*already used"):
        f.computation("A", [i], 1.0)
    with pytest.raises(ValueError, match="'A'.*already used"):
        f.input("A", ("N",))
    with pytest.raises(ValueError, match="'i'"):
        f.var("i", 0, 3)
    with pytest.raises(ValueError, match="'c'.*already used"):
        f.var("c", 0, 3)
    with pytest.raises(ValueError, match="'N'.*already used"):
        f.buffer("N", (3,))
    with pytest.raises(ValueError, match="'N'.*twice"):
        tp.Function("g", params=["N", "N"])


@pytest.mark.parametrize("name", ["min", "for", "tp_x", "max", "int", "lambda", "floor", "NAN"])
def test_reserved_names(name):
    f = tp.Function("res", params=["N"])
    i = f.var("i", 0, "N")
    with pytest.raises(ValueError, match=f"'{name}'.*reserved"):
        f.computation(name, [i], 1.0)
    with pytest.raises(ValueError, match=f"'{name}'.*reserved"):
        f.var(name, 0, 3)
    with pytest.raises(ValueError, match=f"'{name}'.*reserved"):
        f.input(name, (3,))
    with pytest.raises(ValueError, match=f"'{name}'.*reserved"):
        tp.Function("g", params=[name])
    with pytest.raises(ValueError, match=f"'{name}'.*reserved"):
        tp.Function(name)


@pytest.mark.parametrize("name", ["1a", "a-b", "", "_x", "a b", 3])
def test_names_must_be_identifiers(name):
    f = tp.Function("ident", params=["N"])
    i = f.var("i", 0, "N")
    with pytest.raises(ValueError, match="identifier"):
        f.computation(name, [i], 1.0)


def test_failed_declaration_does_not_burn_the_name():
    f = tp.Function("burn", params=["N"])
    with pytest.raises(ValueError):
        f.var("z", 0, "M")                 # typo in the bound
    f.var("z", 0, "N")                     # the fixed declaration must be accepted
    with pytest.raises(ValueError):
        f.input("B", ("M",))
    f.input("B", ("N",))


@pytest.mark.parametrize("fname,bname", [("sin", "X"), ("exit", "X"), ("ok", "INT64_MAX")])
def test_names_clashing_with_c_library(fname, bname):
    try:
        f = tp.Function(fname, params=["N"])
        i = f.var("i", 0, "N")
        X = f.input(bname, ("N",), tp.float32)
        f.computation("c", [i], X[i] + 1.0)
        k = f.compile()
    except ValueError as exc:              # refused cleanly, naming it: fine
        assert fname in str(exc) or bname in str(exc)
        return
    x = np.arange(4, dtype=np.float32)
    np.testing.assert_array_equal(k(x), x + 1)


def test_vars_and_arrays_of_another_function():
    f = tp.Function("f1", params=["N"])
    g = tp.Function("f2", params=["N"])
    i = f.var("i", 0, "N")
    gi = g.var("i", 0, "N")
    GA = g.input("GA", ("N",))
    with pytest.raises(TypeError, match="vars of this function"):
        f.computation("c1", [gi], 1.0)
    with pytest.raises(ValueError, match="another function"):
        f.computation("c2", [i], gi * 1.0)
    with pytest.raises(ValueError, match="another function"):
        f.computation("c3", [i], GA[i])
    with pytest.raises(ValueError, match="another function"):
        f.var("q", 0, gi)
    with pytest.raises(TypeError, match="nest"):
        with f.nest(gi):
            pass


def test_bound_depending_on_a_non_outer_loop():
    f = tp.Function("tri", params=["N"])
    i = f.var("i", 0, "N")
    j = f.var("j", 0, i)
    k = f.var("k", 0, "N")
    with pytest.raises(ValueError, match="'j'.*'i'.*outer"):
        f.computation("bad", [j, i], 1.0)           # i inside j
    with pytest.raises(ValueError, match="'j'.*'i'.*outer"):
        f.computation("bad2", [k, j], 1.0)          # i missing
    with pytest.raises(ValueError, match="uses loop 'i', which is not one of its loops"):
        f.computation("bad3", [], i * 1.0)          # a 0-d computation reading a loop
    with pytest.raises(ValueError, match="twice"):
        f.computation("bad4", [i, i], 1.0)
    with pytest.raises(ValueError, match="only read inputs"):
        c = f.computation("cc", [i], 1.0)
        f.var("m", 0, c[i])


def test_update_before_expression():
    f = tp.Function("upd", params=["N", "M"])
    i, j = f.var("i", 0, "N"), f.var("j", 0, "M")
    A = f.input("A", ("N", "M"))
    C = f.computation("C", [i, j])
    with pytest.raises(ValueError, match="'C'.*needs an expression"):
        C[i, j] += A[i, j]
    with pytest.raises(ValueError, match="'C'.*needs an expression"):
        C[i, j].max(A[i, j])
    D = f.computation("D", [i], 0.0)
    with pytest.raises(ValueError, match="same computation"):
        C[i, j] = D[i].__iadd__(1.0)
    with pytest.raises(IndexError, match="'D'.*1 loops"):
        D[i, j]
    with pytest.raises(IndexError, match="'A'.*2 dimensions"):
        A[i]


def test_compile_errors():
    with pytest.raises(ValueError, match="no computation"):
        tp.Function("empty", params=["N"]).compile()
    f = tp.Function("tgt", params=["N"])
    i = f.var("i", 0, "N")
    A = f.input("A", ("N",))
    f.computation("c", [i], A[i])
    with pytest.raises(ValueError, match="unknown target 'tpu'"):
        f.compile(target="tpu")
    with pytest.raises(TypeError, match="foo"):
        f.compile(foo=1)
    g = tp.Function("noexpr", params=["N"])
    i = g.var("i", 0, "N")
    g.computation("c", [i])
    with pytest.raises(ValueError, match="'c' has no expression"):
        g.compile()


def test_dtype_errors():
    f = tp.Function("dty", params=["N"])
    i = f.var("i", 0, "N")
    with pytest.raises(TypeError, match="unsupported dtype"):
        f.input("A", ("N",), np.float16)
    with pytest.raises(TypeError, match="unsupported dtype"):
        tp.cast(np.complex64, i)
    with pytest.raises(TypeError, match="integer"):
        X = f.input("X", ("N",), tp.float32)
        f.var("j", 0, X[i])
    B = f.input("B", ("N",), tp.float64)
    f.computation("c", [i], B[B[i]])
    with pytest.raises(TypeError, match="'B'.*integer"):
        f.compile()


# ====================================================== generated-code style
def test_source_is_indented_and_uses_loop_names():
    f = tp.Function("style", params=["N", "M"])
    row, col = f.var("row", 0, "N"), f.var("col", 0, "M")
    A = f.input("A", ("N", "M"), tp.float32)
    f.computation("t", [row, col], A[row, col] * 3.0)
    src = f.compile().source
    assert "  for (int64_t row = 0; row < N; row++) {\n    for (int64_t col = 0; col < M; col++) {\n" \
           "      t[row][col] = A[row][col] * 3.0f;\n" in src
    body = src[src.index("{\n", src.index("int style(")):]
    for ln in body.splitlines()[1:-1]:
        if ln.strip():
            assert ln.startswith("  "), repr(ln)


def test_gemm_source_is_readable():
    src = gemm.build().compile().source
    assert "for (int64_t i = 0; i < N; i++)" in src
    assert "for (int64_t j = 0; j < M; j++)" in src
    assert "for (int64_t k = 0; k < K; k++)" in src
    assert "C[i][j] = C[i][j] + A[i][k] * B[k][j];" in src

"""Vector math (codegen.vecmath): float32 exp, log, tanh, sigmoid on both
backends, in vector loops and scalar code, against NumPy (float64 references),
at the edges: overflow, underflow into the subnormals, NaN, inf, -0.0."""
import re

import numpy as np
import pytest

import tiramisu_py as tp

FUNCS = {"exp": (tp.exp, np.exp), "log": (tp.log, np.log), "tanh": (tp.tanh, np.tanh),
         "sigmoid": (tp.sigmoid, lambda x: 1 / (1 + np.exp(-x)))}
ULP = {"exp": 1, "log": 1, "tanh": 2, "sigmoid": 3}          # documented bounds (codegen.vecmath)

EDGES = np.array([0.0, -0.0, np.nan, -np.nan, np.inf, -np.inf, 1e-45, -1e-45, 1e-40, 1e-30, 1e-5,
                  -1e-5, 0.625, -0.625, 0.6250001, 1.0, -1.0, 20.0, -20.0, 88.72, 88.73, 89.5,
                  -87.3, -88.0, -100.0, -103.9, -104.5, -200.0, 3.4e38, -3.4e38], np.float32)


def _kernel(func, vector):
    f = tp.Function(f"vm_{func}_{int(vector)}", params=["N"])
    i = f.var("i", 0, "N")
    x = f.input("x", ("N",), tp.float32)
    y = f.computation("y", [i], FUNCS[func][0](x[i]))
    if vector:
        y.vectorize(i, 8)
    return f.compile()


def _inputs():
    rng = np.random.default_rng(7)
    return np.concatenate([EDGES, rng.uniform(-110, 95, 4000), rng.uniform(-3, 3, 4000),
                           np.exp(rng.uniform(-100, 88, 2000)), rng.uniform(-1e-3, 1e-3, 500),
                           ]).astype(np.float32)


def _check(func, got, x):
    with np.errstate(all="ignore"):
        ref64 = FUNCS[func][1](x.astype(np.float64))
        ref = ref64.astype(np.float32)
    nan = np.isnan(ref)
    np.testing.assert_array_equal(np.isnan(got), nan, err_msg=f"{func}: NaN positions")
    exact = ~nan & (~np.isfinite(ref) | (ref == 0))
    np.testing.assert_array_equal(got[exact], ref[exact], err_msg=f"{func}: inf/0")
    sub = ~nan & ~exact & (np.abs(ref) < 1.2e-38)          # subnormal: one step
    np.testing.assert_allclose(got[sub], ref[sub], rtol=0, atol=1.5e-45, err_msg=f"{func}: subnormal")
    zero = exact & (ref == 0)
    np.testing.assert_array_equal(np.signbit(got[zero]), np.signbit(ref[zero]), err_msg=f"{func}: -0.0")
    rest = ~nan & ~exact & ~sub
    err = np.abs(got[rest].astype(np.float64) - ref64[rest]) / np.spacing(np.abs(ref[rest]))
    assert err.max() <= ULP[func], f"{func}: {err.max():.2f} ulp at x={x[rest][err.argmax()]!r}"


@pytest.mark.parametrize("func", sorted(FUNCS))
def test_vecmath_edges(backend, func):
    x = _inputs()
    for vector in (True, False):
        _check(func, _kernel(func, vector)(x=x), x)


def test_no_libm_in_vector_loop(backend):
    k = _kernel("exp", True)
    src = k.source
    assert "expf" not in src and "llvm.exp" not in src, "scalar libm exp in a vector loop"


@pytest.mark.parametrize("func", ["exp", "sigmoid"])
def test_vecmath_float64(backend, func):
    """float64 exp (Cephes, rational) and sigmoid through it; log and tanh keep libm."""
    f = tp.Function(f"vm64_{func}", params=["N"])
    i = f.var("i", 0, "N")
    x = f.input("x", ("N",), tp.float64)
    f.computation("y", [i], FUNCS[func][0](x[i])).vectorize(i, 4)
    k = f.compile()
    rng = np.random.default_rng(5)
    xv = np.concatenate([[0.0, -0.0, np.nan, np.inf, -np.inf, 709.7, 709.8, -708.0, -740.0, -745.2,
                          -746.0, 5e-324, 1e-300], rng.uniform(-750, 715, 3000), rng.uniform(-3, 3, 3000)])
    got = k(x=xv)
    with np.errstate(all="ignore"):
        ref = np.exp(xv) if func == "exp" else np.where(
            xv >= 0, 1 / (1 + np.exp(-xv)), np.exp(xv) / (1 + np.exp(xv)))
    np.testing.assert_array_equal(np.isnan(got), np.isnan(ref))
    np.testing.assert_array_equal(got[np.isinf(ref)], ref[np.isinf(ref)])
    tiny = np.abs(ref) < 2.3e-308                          # subnormal or 0: a step or two
    np.testing.assert_allclose(got[tiny], ref[tiny], rtol=0, atol=1e-323)
    fin = np.isfinite(ref) & ~tiny
    err = np.abs(got[fin] - ref[fin]) / np.spacing(np.abs(ref[fin]))
    assert err.max() <= (2 if func == "exp" else 4), err.max()
    assert not re.search(r"(?<![\w.])exp\(|@exp\b|@llvm\.exp", k.source), "libm exp called"

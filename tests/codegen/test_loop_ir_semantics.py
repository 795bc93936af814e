"""The loop IR's meaning, the same on every CPU backend: each test runs one
program of tests/codegen/loop_ir_cases.py through the C backend and the
LLVM backend (``backend``) and checks it against NumPy, bit for bit where
the semantics are exact (integers, casts, constants, Python's floor
division and modulo), plus the backend's own spelling of what the test is
about (a temporary on the heap, a failed allocation's status)."""
import math
import os
import shutil
import sys

import numpy as np
import pytest

from codegen import compile_c, compile_llvm, emit_c, emit_llvm
from codegen.ir import ArrayArg, Block, Call, Cast, For, If, Let, LoweredFunction, ScalarArg, \
    Select, Store, Unary, Var
from loop_ir_cases import (addr, alloc_fail_ir, b, c, elementwise_ir, gemm_ir, int_expected,
                           int_exprs, int_inputs, narrow_cases, run_elementwise, run_gemm,
                           softmax_ir)

HAVE_CC = bool(os.environ.get("TIRAMISU_PY_CC") or os.environ.get("CC")
               or shutil.which("cc") or shutil.which("gcc"))
COMPILE = {"c": compile_c, "llvm": compile_llvm}
EMIT = {"c": emit_c, "llvm": emit_llvm}


@pytest.fixture(params=["c", "llvm"])
def backend(request):
    if request.param == "c" and not HAVE_CC:
        pytest.skip("no C compiler on this machine (the LLVM backend needs none)")
    return request.param


@pytest.fixture(autouse=True)
def _cache_env(tmp_path_factory, monkeypatch):
    monkeypatch.setenv("TIRAMISU_PY_CACHE", str(tmp_path_factory.getbasetemp() / "ir_cache"))
    monkeypatch.delenv("TIRAMISU_PY_CFLAGS", raising=False)


def test_gemm_parallel_rows_vector_columns(backend):
    f = COMPILE[backend](gemm_ir())
    run_gemm(f)
    run_gemm(f, M=3, N=1, seed=1)
    run_gemm(f, M=1, N=70, seed=2)


@pytest.mark.parametrize("dtype", ["int32", "int64"])
def test_int_ops(backend, dtype):
    A, B = int_inputs(dtype)
    O = run_elementwise(COMPILE[backend], elementwise_ir(f"intops_{dtype}", dtype, dtype,
                                                         int_exprs(dtype)), A, B, dtype)
    for row, exp in zip(O, int_expected(A, B, dtype), strict=True):
        np.testing.assert_array_equal(row, exp)


def test_narrow_int_wraparound_and_casts(backend):
    for name, dtype, exprs, A, B, expected in narrow_cases():
        O = run_elementwise(COMPILE[backend], elementwise_ir(name, dtype, dtype, exprs), A, B,
                            np.dtype(dtype))
        for row, exp in zip(O, expected, strict=True):
            np.testing.assert_array_equal(row, exp)


def float_exprs(dtype):
    k = lambda v: c(v, dtype)  # noqa: E731
    call = lambda f, x: Call(f, (x,), dtype)  # noqa: E731
    return [lambda a, b_: b("div", a, b_), lambda a, b_: b("mod", a, b_),
            lambda a, b_: b("floordiv", a, b_), lambda a, b_: b("floormod", a, b_),
            lambda a, b_: call("exp", a), lambda a, b_: call("log", b("add", call("abs", a), k(0.5))),
            lambda a, b_: call("tanh", a), lambda a, b_: call("sigmoid", a),
            lambda a, b_: call("sqrt", call("abs", b_)), lambda a, b_: call("floor", a),
            lambda a, b_: call("ceil", a), lambda a, b_: b("min", a, b_), lambda a, b_: b("max", a, b_),
            lambda a, b_: Unary("neg", b("sub", a, b_), dtype),
            lambda a, b_: Select(b("ge", a, k(0.25)), b("mul", a, k(0.1)), b_, dtype),
            lambda a, b_: Cast(Cast(b("mul", a, k(3.0)), "int32"), dtype)]


@pytest.mark.parametrize("dtype", ["float32", "float64"])
def test_float_ops_and_math(backend, dtype):
    rng = np.random.default_rng(3)
    grid = np.arange(-7.5, 8.0, 0.5)
    A = np.concatenate([rng.uniform(-3, 3, 200), np.repeat(grid, 4)]).astype(dtype)
    B = np.concatenate([rng.choice([-1, 1], 200) * rng.uniform(0.5, 3, 200),
                        np.tile([2.0, -2.0, 0.5, -3.0], len(grid))]).astype(dtype)
    fn = elementwise_ir(f"floatops_{dtype}", dtype, dtype, float_exprs(dtype))
    O = run_elementwise(COMPILE[backend], fn, A, B, dtype)
    t = np.dtype(dtype).type
    with np.errstate(all="ignore"):
        fl = np.floor(A / B)
        expected = [A / B, np.fmod(A, B), fl, A - fl * B, np.exp(A), np.log(np.abs(A) + t(0.5)),
                    np.tanh(A), 1 / (1 + np.exp(-A)), np.sqrt(np.abs(B)), np.floor(A), np.ceil(A),
                    np.minimum(A, B), np.maximum(A, B), -(A - B),
                    np.where(A >= t(0.25), A * t(0.1), B), np.trunc(A * t(3.0))]
    tol = dict(rtol=3e-6, atol=1e-6) if dtype == "float32" else dict(rtol=1e-13, atol=1e-14)
    for n, (row, exp) in enumerate(zip(O, expected, strict=True)):
        np.testing.assert_allclose(row, np.asarray(exp, dtype), **tol, err_msg=f"expr {n}")
    g = slice(200, None)       # Python semantics on exact values: sign of divisor, round to -inf
    np.testing.assert_array_equal(O[2][g], np.floor_divide(A[g], B[g]))
    np.testing.assert_array_equal(O[3][g], np.mod(A[g], B[g]))
    if backend == "llvm":       # float32 widened through codegen.vecmath (no libm); float64:
        src = emit_llvm(fn)     # exp and sigmoid from vecmath, libm's tanh
        tanh = '@"tp.tanh.v' if dtype == "float32" else '@"tanh"'
        assert '@"tp.exp.v' in src and "frem <" in src and tanh in src
        assert dtype == "float64" or "tanhf" not in src


def test_constants_are_exact(backend):
    f32 = [0.1, 1 / 3, 1e-40, 3.4028234663852886e38, -0.0, math.inf, -math.inf, 1e39, 16777217.0,
           -2.5e-7, 123456789.0, 1e-45, 3.4028235e38]
    f64 = [0.1, 1 / 3, 5e-324, 1.7976931348623157e308, -0.0, math.inf, -math.inf, 2.0**-1074 * 3, 1e22]
    i64 = [2**40 + 1, -2**63, 2**63 - 1, -5, 2**31, -2**31]
    i32 = [-2**31, 2**31 - 1, 0, -1]
    u8 = [0, 255, 256 + 7, -1]
    arrays, stores = [], []
    for nm, dt, vals in (("F", "float32", f32 + [math.nan]), ("D", "float64", f64 + [math.nan]),
                         ("L", "int64", i64), ("W", "int32", i32), ("U", "uint8", u8)):
        arrays.append(ArrayArg(nm, dt, (c(len(vals)),), True))
        stores += [Store(nm, (c(k),), c(v, dt)) for k, v in enumerate(vals)]
    fn = LoweredFunction("consts", [], arrays, Block(stores))
    F, D = np.zeros(len(f32) + 1, np.float32), np.zeros(len(f64) + 1)
    L, W, U = np.zeros(len(i64), np.int64), np.zeros(len(i32), np.int32), np.zeros(4, np.uint8)
    assert COMPILE[backend](fn).call([], [addr(x) for x in (F, D, L, W, U)]) == 0
    with np.errstate(over="ignore"):
        np.testing.assert_array_equal(F[:-1].view(np.uint32), np.array(f32, np.float32).view(np.uint32))
    np.testing.assert_array_equal(D[:-1].view(np.uint64), np.array(f64).view(np.uint64))
    assert np.isnan(F[-1]) and np.isnan(D[-1])
    np.testing.assert_array_equal(L, i64)
    np.testing.assert_array_equal(W, i32)
    np.testing.assert_array_equal(U, [0, 255, 7, 255])


def test_loop_step_if_let(backend):
    j, n = Var("j"), Var("n")
    body = For("j", c(1), n, Let("t", b("mul", j, c(10)), If(
        b("lt", j, c(5)), Store("O", (j,), Var("t")),
        If(b("lt", j, c(9)), Store("O", (j,), c(-1)), Store("O", (j,), b("add", Var("t"), c(1)))))),
        step=3)
    fn = LoweredFunction("stepped", [ScalarArg("n")], [ArrayArg("O", "int64", (n,), True)], body)
    if backend == "c":
        src = emit_c(fn)
        assert "for (int64_t j = 1; j < n; j += 3) {" in src and "} else if (j < 9) {" in src
    O = np.zeros(14, np.int64)
    assert COMPILE[backend](fn).call([14], [addr(O)]) == 0
    exp = np.zeros(14, np.int64)
    for jj in range(1, 14, 3):
        exp[jj] = jj * 10 if jj < 5 else (-1 if jj < 9 else jj * 10 + 1)
    np.testing.assert_array_equal(O, exp)


def run_softmax(f, rows, cols, seed):
    A = np.random.default_rng(seed).standard_normal((rows, cols))
    O = np.zeros_like(A)
    assert f.call([rows, cols], [addr(A), addr(O)]) == 0
    e = np.exp(A)
    np.testing.assert_allclose(O, e / e.sum(1, keepdims=True) + 2 * A[::-1], rtol=1e-12)


# the temporaries of the softmax: T, H on the heap (H zeroed), S a constant-size stack array
TEMPORARIES = {
    "c": ("tp_alloc", "free(T);", "free(H);", "double S[1];"),
    "llvm": ("@aligned_alloc(i64", "@llvm.memset", "call void @free", "alloca [1 x double]"),
}
# from 4 MiB on a temporary is 2 MiB aligned and advised for transparent huge pages
HUGE_PAGES = {
    "c": ("((size_t)4 << 20) ? ((size_t)2 << 20) : 64", "madvise(p, bytes, MADV_HUGEPAGE)",
          "#include <sys/mman.h>"),
    "llvm": ("select i1 %huge", "i64 2097152, i64 64", "call i32 @madvise(ptr", "i32 14)"),
}


def test_temporaries_on_the_heap_and_the_stack(backend):
    src = EMIT[backend](softmax_ir())
    assert all(s in src for s in TEMPORARIES[backend]), src
    run_softmax(COMPILE[backend](softmax_ir()), 7, 13, seed=5)


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="madvise(MADV_HUGEPAGE) is Linux's")
def test_large_temporaries_are_huge_page_aligned(backend):
    """Fresh memory every call faults in 2 MiB at a time, not 4 KiB: the
    two-pass softmax with a 640 x 1024 float64 temporary (5 MiB) stays
    right, and a small one too."""
    assert all(s in EMIT[backend](softmax_ir()) for s in HUGE_PAGES[backend])
    f = COMPILE[backend](softmax_ir())
    for rows in (640, 3):
        run_softmax(f, rows, 1024, seed=6)


FAILED_STATUS = {"c": ("#pragma omp atomic write", "return 1;"),
                 "llvm": ("store atomic i32 1", "ret i32 1")}


def test_allocation_failure_returns_1(backend):
    f = COMPILE[backend](alloc_fail_ir())
    assert all(s in f.source for s in FAILED_STATUS[backend])
    O = np.full(9, -7, np.int64)
    assert f.call([9, 2**62], [addr(O)]) == 1            # first Y fails: nothing written
    np.testing.assert_array_equal(O, -7)
    assert f.call([9, -1], [addr(O)]) == 1
    assert f.call([9, 2**61], [addr(O)]) == 1            # 2**61 * 8 bytes overflows
    assert f.call([9, 1], [addr(O)]) == 0
    np.testing.assert_array_equal(O, [1] + [2 * k for k in range(1, 9)])

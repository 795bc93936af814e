"""The C backend: emitted source, exact semantics against NumPy, temporaries,
compile errors and the on-disk cache."""
from repo_paths import ROOT as CHECKOUT
import os

os.environ.setdefault("OMP_WAIT_POLICY", "passive")

import json
import math
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

ROOT = Path(CHECKOUT)
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

from codegen import CompileError, compile_c, emit_c, ir, toolchain  # noqa: E402
from codegen import cache  # noqa: E402
from codegen.c.syntax import c_literal  # noqa: E402
from codegen.ir import (Allocate, ArrayArg, Binary, Block, Call, Cast, Const, For,  # noqa: E402
                        If, Let, Load, LoweredFunction, ScalarArg, Select, Store, Unary, Var)


@pytest.fixture(scope="module")
def cache_root(tmp_path_factory):
    return tmp_path_factory.mktemp("tpcache")


@pytest.fixture(autouse=True)
def _cache_env(cache_root, monkeypatch):
    monkeypatch.setenv("TIRAMISU_PY_CACHE", str(cache_root))
    monkeypatch.delenv("TIRAMISU_PY_CFLAGS", raising=False)


def addr(a):
    return a.__array_interface__["data"][0]


def c(v, dtype="int64"):
    return Const(v, dtype)


def b(op, x, y):
    return ir.binary(op, x, y)


# ----------------------------------------------------------------- IR builders
def gemm_ir(name="gemm", K=37):
    i, j, k, M, N = Var("i"), Var("j"), Var("k"), Var("M"), Var("N")
    cij = Load("C", (i, j), "float32")
    acc = Store("C", (i, j), b("add", cij, b("mul", Load("A", (i, k), "float32"),
                                           Load("B", (k, j), "float32"))))
    body = For("i", c(0), M, Block([
        For("j", c(0), N, Store("C", (i, j), c(0.0, "float32")), kind="vector"),
        For("k", c(0), Var("K"), For("j", c(0), N, acc, kind="vector"),
            kind="unrolled", attrs={"unroll": 4}),
    ]), kind="parallel")
    return LoweredFunction(name, [ScalarArg("M"), ScalarArg("N")],
                           [ArrayArg("A", "float32", (M, Var("K")), False),
                            ArrayArg("B", "float32", (Var("K"), N), False),
                            ArrayArg("C", "float32", (M, N), True)], body, constants={"K": K})


def run_gemm(f, M=50, N=41, K=37, seed=0):
    rng = np.random.default_rng(seed)
    A = rng.standard_normal((M, K)).astype(np.float32)
    B = rng.standard_normal((K, N)).astype(np.float32)
    C = np.full((M, N), np.nan, np.float32)
    assert f.call([M, N], [addr(A), addr(B), addr(C)]) == 0
    np.testing.assert_allclose(C, A.astype(np.float64) @ B, rtol=1e-4, atol=1e-4)


def elementwise_ir(name, in_dtype, out_dtype, exprs):
    """O[k][i] = exprs[k](A[i], B[i]) for i < n."""
    i, n = Var("i"), Var("n")
    a, bb = Load("A", (i,), in_dtype), Load("B", (i,), in_dtype)
    stores = [Store("O", (c(k), i), Cast(f(a, bb), out_dtype)) for k, f in enumerate(exprs)]
    return LoweredFunction(name, [ScalarArg("n")],
                           [ArrayArg("A", in_dtype, (n,), False), ArrayArg("B", in_dtype, (n,), False),
                            ArrayArg("O", out_dtype, (c(len(exprs)), n), True)],
                           For("i", c(0), n, Block(stores), kind="vector"))


def run_elementwise(fn, A, B, out_dtype):
    f = compile_c(fn)
    O = np.zeros((fn.arrays[2].shape[0].value, len(A)), out_dtype)
    assert f.call([len(A)], [addr(A), addr(B), addr(O)]) == 0
    return O


# ----------------------------------------------------------------- (a) GEMM
def test_gemm_parallel_2d():
    f = compile_c(gemm_ir())
    run_gemm(f)
    run_gemm(f, M=3, N=1, seed=1)


# ----------------------------------------------------------------- (b) semantics
def int_inputs(dtype):
    """Operand pairs for the integer-semantics tests (no zero divisors)."""
    big = 2**31 - 1 if dtype == "int32" else 2**40 + 3
    vals = np.array(list(range(-7, 8)) + [big, -big, 1 - big], dtype)
    A, B = (x.ravel().astype(dtype) for x in np.meshgrid(vals, vals))
    keep = B != 0
    return A[keep], B[keep]


def int_exprs(dtype):
    """Integer IR expressions of (a, b); ``int_expected`` gives their values."""
    k = lambda v: c(v, dtype)  # noqa: E731
    exprs = [lambda a, b_: b("div", a, b_), lambda a, b_: b("mod", a, b_),
             lambda a, b_: b("floordiv", a, b_), lambda a, b_: b("floormod", a, b_),
             lambda a, b_: b("floordiv", a, k(3)), lambda a, b_: b("floormod", a, k(-3)),
             lambda a, b_: b("min", a, b_), lambda a, b_: b("max", a, b_),
             lambda a, b_: Call("abs", (a,), dtype), lambda a, b_: Unary("neg", a, dtype),
             lambda a, b_: Select(b("lt", a, b_), a, b("sub", b_, k(1)), dtype),
             lambda a, b_: b("and", b("le", a, b_), b("or", b("ne", a, k(0)), b("eq", b_, k(1)))),
             lambda a, b_: Unary("not", b("gt", a, b_), "bool"),
             lambda a, b_: b("sub", b("mul", b("mod", a, k(1000)), k(3)), b("mod", b_, k(7))),
             lambda a, b_: b("mul", b("div", a, k(-2)), b("floordiv", k(-7), k(2)))]
    if dtype == "int64":   # int64 literal arithmetic must not overflow C int
        exprs.append(lambda a, b_: b("add", b("mul", k(65536), k(65536)), b("mod", a, k(5))))
    return exprs


def int_expected(A, B, dtype):
    a, bo = A.astype(object), B.astype(object)
    tdiv = lambda x, y: abs(x) // abs(y) * (1 if (x < 0) == (y < 0) else -1)  # noqa: E731
    trunc_div = np.array([tdiv(x, y) for x, y in zip(a, bo)])
    expected = [trunc_div, a - bo * trunc_div, a // bo, a % bo, a // 3, a % -3,
                np.minimum(a, bo), np.maximum(a, bo), np.abs(a), -a, np.where(A < B, a, bo - 1),
                (A <= B) & ((A != 0) | (B == 1)), ~(A > B),
                np.fmod(A, 1000) * 3 - np.fmod(B, 7), np.array([tdiv(x, -2) * (-7 // 2) for x in a])]
    if dtype == "int64":
        expected.append(2**32 + np.fmod(A, 5))
    return [np.asarray(e).astype(dtype) for e in expected]


@pytest.mark.parametrize("dtype", ["int32", "int64"])
def test_int_ops(dtype):
    A, B = int_inputs(dtype)
    O = run_elementwise(elementwise_ir(f"intops_{dtype}", dtype, dtype, int_exprs(dtype)),
                        A, B, dtype)
    for row, exp in zip(O, int_expected(A, B, dtype)):
        np.testing.assert_array_equal(row, exp)


def narrow_cases():
    """(name, dtype, exprs, A, B, expected rows) for int8/uint8 wraparound and casts."""
    A = np.array([0, 1, 5, 200, 255, 3], np.uint8)
    B = np.array([1, 0, 3, 190, 1, 250], np.uint8)
    u = lambda v: c(v, "uint8")  # noqa: E731
    exprs = [lambda a, b_: Select(b("lt", b("sub", a, b_), u(10)), u(1), u(0), "uint8"),
             lambda a, b_: b("floordiv", b("add", a, b_), u(2)),
             lambda a, b_: Cast(Cast(b("mul", Cast(a, "int32"), c(3, "int32")), "int8"), "uint8"),
             lambda a, b_: b("mul", a, u(200)), lambda a, b_: Unary("neg", a, "uint8"),
             lambda a, b_: b("max", a, b_)]
    u8 = [((A - B) < 10).astype(np.uint8), (A + B) // 2,
          (A.astype(np.int32) * 3).astype(np.int8).astype(np.uint8), A * np.uint8(200),
          (-A.astype(np.int32)).astype(np.uint8), np.maximum(A, B)]
    i8 = np.array([-128, -100, 100, 127, -1, 7], np.int8)
    j8 = np.array([-1, -100, 100, 1, 2, -2], np.int8)
    e8 = [lambda a, b_: b("floordiv", b("add", a, b_), c(2, "int8")),
          lambda a, b_: b("floormod", a, b_), lambda a, b_: Call("abs", (a,), "int8"),
          lambda a, b_: b("div", a, b_), lambda a, b_: b("floordiv", a, b_),
          lambda a, b_: Cast(Cast(a, "float32"), "int8"), lambda a, b_: b("min", a, b_)]
    wide = lambda x: x.astype(np.int32)  # noqa: E731
    r8 = [(i8 + j8) // np.int8(2), np.mod(i8, j8), np.abs(i8),
          np.trunc(wide(i8) / wide(j8)).astype(np.int32).astype(np.int8),
          (wide(i8) // wide(j8)).astype(np.int8),           # -128 // -1 wraps
          i8, np.minimum(i8, j8)]
    return [("narrow_u8", "uint8", exprs, A, B, u8), ("narrow_i8", "int8", e8, i8, j8, r8)]


def test_narrow_int_wraparound_and_casts():
    for name, dtype, exprs, A, B, expected in narrow_cases():
        O = run_elementwise(elementwise_ir(name, dtype, dtype, exprs), A, B, np.dtype(dtype))
        for row, exp in zip(O, expected, strict=True):
            np.testing.assert_array_equal(row, exp)


@pytest.mark.parametrize("dtype", ["float32", "float64"])
def test_float_ops_and_math(dtype):
    rng = np.random.default_rng(3)
    grid = np.arange(-7.5, 8.0, 0.5)
    A = np.concatenate([rng.uniform(-3, 3, 200), np.repeat(grid, 4)]).astype(dtype)
    B = np.concatenate([rng.choice([-1, 1], 200) * rng.uniform(0.5, 3, 200),
                        np.tile([2.0, -2.0, 0.5, -3.0], len(grid))]).astype(dtype)
    k = lambda v: c(v, dtype)  # noqa: E731
    call = lambda f, x: Call(f, (x,), dtype)  # noqa: E731
    exprs = [lambda a, b_: b("div", a, b_), lambda a, b_: b("mod", a, b_),
             lambda a, b_: b("floordiv", a, b_), lambda a, b_: b("floormod", a, b_),
             lambda a, b_: call("exp", a), lambda a, b_: call("log", b("add", call("abs", a), k(0.5))),
             lambda a, b_: call("tanh", a), lambda a, b_: call("sigmoid", a),
             lambda a, b_: call("sqrt", call("abs", b_)), lambda a, b_: call("floor", a),
             lambda a, b_: call("ceil", a), lambda a, b_: b("min", a, b_), lambda a, b_: b("max", a, b_),
             lambda a, b_: Unary("neg", b("sub", a, b_), dtype),
             lambda a, b_: Select(b("ge", a, k(0.25)), b("mul", a, k(0.1)), b_, dtype),
             lambda a, b_: Cast(Cast(b("mul", a, k(3.0)), "int32"), dtype)]
    O = run_elementwise(elementwise_ir(f"floatops_{dtype}", dtype, dtype, exprs), A, B, dtype)
    with np.errstate(all="ignore"):
        fl = np.floor(A / B)
        expected = [A / B, np.fmod(A, B), fl, A - fl * B, np.exp(A), np.log(np.abs(A) + dtype_(0.5, dtype)),
                    np.tanh(A), 1 / (1 + np.exp(-A)), np.sqrt(np.abs(B)), np.floor(A), np.ceil(A),
                    np.minimum(A, B), np.maximum(A, B), -(A - B),
                    np.where(A >= dtype_(0.25, dtype), A * dtype_(0.1, dtype), B),
                    np.trunc(A * dtype_(3.0, dtype))]
    tol = dict(rtol=3e-6, atol=1e-6) if dtype == "float32" else dict(rtol=1e-13, atol=1e-14)
    for n, (row, exp) in enumerate(zip(O, expected)):
        np.testing.assert_allclose(row, np.asarray(exp, dtype), **tol, err_msg=f"expr {n}")
    # Python semantics on exact grid values: sign of the divisor, round to -inf
    g = slice(200, None)
    np.testing.assert_array_equal(O[2][g], np.floor_divide(A[g], B[g]))
    np.testing.assert_array_equal(O[3][g], np.mod(A[g], B[g]))


def dtype_(v, dtype):
    return np.dtype(dtype).type(v)


def test_constants_are_exact():
    f32 = [0.1, 1 / 3, 1e-40, 3.4028234663852886e38, -0.0, math.inf, -math.inf, 1e39, 16777217.0,
           -2.5e-7, 123456789.0, 1e-45, 3.4028235e38]
    f64 = [0.1, 1 / 3, 5e-324, 1.7976931348623157e308, -0.0, math.inf, -math.inf, 2.0**-1074 * 3, 1e22]
    i64 = [2**40 + 1, -2**63, 2**63 - 1, -5, 2**31, -2**31]
    i32 = [-2**31, 2**31 - 1, 0, -1]
    arrays, stores = [], []
    for nm, dt, vals in (("F", "float32", f32 + [math.nan]), ("D", "float64", f64 + [math.nan]),
                         ("L", "int64", i64), ("W", "int32", i32)):
        arrays.append(ArrayArg(nm, dt, (c(len(vals)),), True))
        stores += [Store(nm, (c(k),), c(v, dt)) for k, v in enumerate(vals)]
    fn = LoweredFunction("consts", [], arrays, Block(stores))
    f = compile_c(fn)
    F, D = np.zeros(len(f32) + 1, np.float32), np.zeros(len(f64) + 1)
    L, W = np.zeros(len(i64), np.int64), np.zeros(len(i32), np.int32)
    assert f.call([], [addr(F), addr(D), addr(L), addr(W)]) == 0
    with np.errstate(over="ignore"):
        np.testing.assert_array_equal(F[:-1].view(np.uint32), np.array(f32, np.float32).view(np.uint32))
    np.testing.assert_array_equal(D[:-1].view(np.uint64), np.array(f64).view(np.uint64))
    assert np.isnan(F[-1]) and np.isnan(D[-1])
    np.testing.assert_array_equal(L, i64)
    np.testing.assert_array_equal(W, i32)
    assert c_literal(0.1, "float32") == "0.1f" and c_literal(0.1, "float64") == "0.1"
    assert c_literal(2.0, "float32") == "2.0f" and c_literal(1e39, "float32") == "INFINITY"
    assert c_literal(True, "bool") == "true" and c_literal(2**40, "int64") == "1099511627776LL"


def test_loop_step_if_let():
    j, n = Var("j"), Var("n")
    body = For("j", c(1), n, Let("t", b("mul", j, c(10)), If(
        b("lt", j, c(5)), Store("O", (j,), Var("t")),
        If(b("lt", j, c(9)), Store("O", (j,), c(-1)), Store("O", (j,), b("add", Var("t"), c(1)))))),
        step=3)
    fn = LoweredFunction("stepped", [ScalarArg("n")], [ArrayArg("O", "int64", (n,), True)], body)
    src = emit_c(fn)
    assert "for (int64_t j = 1; j < n; j += 3) {" in src and "} else if (j < 9) {" in src
    O = np.zeros(14, np.int64)
    assert compile_c(fn).call([14], [addr(O)]) == 0
    exp = np.zeros(14, np.int64)
    for jj in range(1, 14, 3):
        exp[jj] = jj * 10 if jj < 5 else (-1 if jj < 9 else jj * 10 + 1)
    np.testing.assert_array_equal(O, exp)


# ----------------------------------------------------------------- (c) temporaries
def softmax_ir():
    """Per row: T = exp(A[i]); S = sum(T); O[i] = T / S (T on the heap, S on the stack)."""
    i, j, M, N = Var("i"), Var("j"), Var("M"), Var("N")
    s0 = Load("S", (), "float64")
    t = Load("T", (j,), "float64")
    row = Allocate("T", "float64", (N,), Allocate("S", "float64", (), Block([
        Store("S", (), c(0.0, "float64")),
        For("j", c(0), N, Block([Store("T", (j,), Call("exp", (Load("A", (i, j), "float64"),), "float64")),
                                 Store("S", (), b("add", s0, t))])),
        For("j", c(0), N, Store("O", (i, j), b("div", t, s0)), kind="vector")])))
    # second temporary, zero-initialised on the heap at top level: H = 2 * A, O += H[M-1-i]
    H = Allocate("H", "float64", (M, N), Block([
        For("i", c(0), M, For("j", c(0), N, Store("H", (i, j), b("add", Load("H", (i, j), "float64"),
                                                                  b("mul", c(2.0, "float64"), Load("A", (i, j), "float64")))))),
        For("i", c(0), M, row),
        For("i", c(0), M, For("j", c(0), N, Store("O", (i, j), b("add", Load("O", (i, j), "float64"),
                                                                  Load("H", (b("sub", b("sub", M, c(1)), i), j), "float64")))))]),
        zero_init=True)
    return LoweredFunction("softmax2", [ScalarArg("M"), ScalarArg("N")],
                           [ArrayArg("A", "float64", (M, N), False), ArrayArg("O", "float64", (M, N), True)], H)


def test_allocate_two_pass():
    fn = softmax_ir()
    src = emit_c(fn)
    assert "tp_alloc" in src and "free(T);" in src and "free(H);" in src and "double S[1];" in src
    A = np.random.default_rng(5).standard_normal((7, 13))
    O = np.zeros_like(A)
    assert compile_c(fn).call([7, 13], [addr(A), addr(O)]) == 0
    e = np.exp(A)
    np.testing.assert_allclose(O, e / e.sum(1, keepdims=True) + 2 * A[::-1], rtol=1e-12)


def test_large_temporaries_are_huge_page_aligned():
    """From 4 MiB on a temporary is 2 MiB aligned and marked for transparent
    huge pages (fresh memory every call faults in 2 MiB at a time); the
    two-pass softmax with a 640 x 1024 float64 temporary (5 MiB) stays right."""
    fn = softmax_ir()
    src = emit_c(fn)
    assert "((size_t)4 << 20) ? ((size_t)2 << 20) : 64" in src
    assert "madvise(p, bytes, MADV_HUGEPAGE)" in src and "#include <sys/mman.h>" in src
    A = np.random.default_rng(6).standard_normal((640, 1024))
    O = np.zeros_like(A)
    assert compile_c(fn).call([640, 1024], [addr(A), addr(O)]) == 0
    e = np.exp(A)
    np.testing.assert_allclose(O, e / e.sum(1, keepdims=True) + 2 * A[::-1], rtol=1e-12)


def alloc_fail_ir():
    """A nested heap temporary of size HUGE, outside and inside a parallel loop."""
    i, n, H = Var("i"), Var("n"), Var("HUGE")
    outer = Allocate("X", "int64", (n,), Block([
        Store("X", (c(0),), c(1)),
        Allocate("Y", "int64", (H,), Store("O", (c(0),), Load("X", (c(0),), "int64"))),
        For("i", c(1), n, Allocate("T", "int64", (H,), Block([
            Store("T", (c(0),), b("mul", i, c(2))), Store("O", (i,), Load("T", (c(0),), "int64"))])),
            kind="parallel")]), zero_init=True)
    return LoweredFunction("alloc_fail", [ScalarArg("n"), ScalarArg("HUGE")],
                           [ArrayArg("O", "int64", (n,), True)], outer)


def test_allocation_failure_returns_1():
    fn = alloc_fail_ir()
    f = compile_c(fn)
    assert "#pragma omp atomic write" in f.source and "return 1;" in f.source
    O = np.full(9, -7, np.int64)
    assert f.call([9, 2**62], [addr(O)]) == 1            # first Y fails: nothing written
    np.testing.assert_array_equal(O, -7)
    assert f.call([9, -1], [addr(O)]) == 1
    assert f.call([9, 1], [addr(O)]) == 0
    np.testing.assert_array_equal(O, [1] + [2 * k for k in range(1, 9)])


# ----------------------------------------------------------------- (d) errors
def test_compile_error_names_c_file():
    i, n = Var("i"), Var("n")
    fn = LoweredFunction("broken", [ScalarArg("n")], [ArrayArg("O", "int64", (n,), True)],
                         For("i", c(0), n, Store("O", (i,), Var("no_such_value"))))
    with pytest.raises(CompileError) as ei:
        compile_c(fn)
    msg = str(ei.value)
    assert "no_such_value" in msg and "undeclared" in msg
    assert ei.value.c_path is not None and str(ei.value.c_path) in msg
    assert Path(ei.value.c_path).read_text() == emit_c(fn)
    bad_call = LoweredFunction("bad", [ScalarArg("n")], [ArrayArg("O", "float32", (n,), True)],
                               Store("O", (c(0),), Call("erf", (c(1.0, "float32"),), "float32")))
    with pytest.raises(ValueError, match="unknown function 'erf'"):
        emit_c(bad_call)
    gpu = LoweredFunction("g", [ScalarArg("n")], [ArrayArg("O", "int64", (n,), True)],
                          For("i", c(0), n, Store("O", (i,), i), kind="gpu_block"))
    with pytest.raises(NotImplementedError, match="gpu loops"):
        emit_c(gpu)


def test_compiler_selection(monkeypatch):
    monkeypatch.setenv("TIRAMISU_PY_CC", "/nonexistent/cc-xyz")
    with pytest.raises(RuntimeError, match="no C compiler found"):
        toolchain.find_c_compiler()
    monkeypatch.setenv("TIRAMISU_PY_CC", "gcc")
    assert toolchain.find_c_compiler().argv[0].endswith("gcc")


# ----------------------------------------------------------------- (e) cache
CHILD = r"""
import json, os, sys
sys.path[:0] = [{root!r}, {tests!r}]
import numpy as np
import test_codegen_c as t
from codegen import compile_c, toolchain
out = {{"inv": [], "paths": []}}
for name in ("gemm", "gemm_trunc", "gemm_garbage"):
    f = compile_c(t.gemm_ir(name))
    t.run_gemm(f)
    out["inv"].append(toolchain.COMPILER_INVOCATIONS)
    out["paths"].append(f.path)
print(json.dumps(out))
"""


def test_cache_in_process_child_and_corruption(cache_root):
    f1 = compile_c(gemm_ir())
    before = toolchain.COMPILER_INVOCATIONS
    f2 = compile_c(gemm_ir())
    assert f2 is f1 and toolchain.COMPILER_INVOCATIONS == before
    assert Path(f1.path).exists() and Path(f1.c_path).read_text() == f1.source

    env = dict(os.environ, TIRAMISU_PY_CACHE=str(cache_root))
    code = CHILD.format(root=str(ROOT), tests=str(Path(__file__).parent))
    r = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, timeout=120)
    assert r.returncode == 0, r.stderr
    child = json.loads(r.stdout.strip().splitlines()[-1])
    assert child["inv"] == [0, 1, 2], child          # gemm: warm, nothing run
    assert child["paths"][0] == f1.path

    # truncated .so: rebuilt, never loaded (this process never loaded it)
    trunc = Path(child["paths"][1])
    trunc.write_bytes(trunc.read_bytes()[:100])
    before = toolchain.COMPILER_INVOCATIONS
    f = compile_c(gemm_ir("gemm_trunc"))
    assert toolchain.COMPILER_INVOCATIONS == before + 1
    run_gemm(f)
    assert cache.lookup(f.key) == trunc

    # garbage .so whose digest matches: dlopen fails, entry deleted and rebuilt once
    garbage = Path(child["paths"][2])
    garbage.write_bytes(b"not a shared object" * 50)
    digest = __import__("hashlib").sha256(garbage.read_bytes()).hexdigest()
    garbage.with_suffix(".sha256").write_text(digest)
    before = toolchain.COMPILER_INVOCATIONS
    f = compile_c(gemm_ir("gemm_garbage"))
    assert toolchain.COMPILER_INVOCATIONS == before + 1
    run_gemm(f)


def test_cflags_are_part_of_the_key(monkeypatch):
    fn = gemm_ir("gemm_flags")
    f1 = compile_c(fn)
    monkeypatch.setenv("TIRAMISU_PY_CFLAGS", "-DTP_TEST_FLAG=1")
    before = toolchain.COMPILER_INVOCATIONS
    f2 = compile_c(fn)
    assert f2.path != f1.path and toolchain.COMPILER_INVOCATIONS == before + 1
    run_gemm(f2)


# ----------------------------------------------------------------- (f) readability
def test_source_is_readable():
    src = emit_c(gemm_ir())
    assert "int gemm(int64_t M, int64_t N, const float* restrict A_, const float* restrict B_, " \
           "float* restrict C_)" in src
    assert "  const int64_t K = 37;" in src
    assert "  float (*restrict C)[N] = (float (*)[N])C_;" in src
    assert "  #pragma omp parallel for\n  for (int64_t i = 0; i < M; i++) {" in src
    assert "    #pragma GCC unroll 4\n    for (int64_t k = 0; k < K; k++) {" in src
    assert "        C[i][j] = C[i][j] + A[i][k] * B[k][j];" in src
    assert "tp_floordiv" not in src and "tp_alloc" not in src      # helpers only when used
    ints = emit_c(elementwise_ir("x", "int32", "int32", [lambda a, b_: b("floordiv", a, b_)]))
    assert "static inline int32_t tp_floordiv_i32(int32_t a, int32_t b)" in ints
    assert "tp_floormod" not in ints


@pytest.mark.parametrize("kind", ["vector", "parallel"])
def test_reduction_loop_respects_its_step(kind, cache_root):
    # sum of x[0], x[3], x[6], x[9]: the accumulator form must keep step 3
    zero = Const(0, "int64")
    body = Store("out", (zero,), ir.binary("add", Load("out", (zero,), "float64"),
                                        Load("x", (Var("k"),), "float64")))
    loop = For("k", Const(0, "int64"), Const(10, "int64"), body, kind=kind, step=3,
               attrs={"reduction": [("out", "add")]})
    fn = LoweredFunction(f"step_{kind}", [], [
        ArrayArg("x", "float64", (Const(10, "int64"),), False),
        ArrayArg("out", "float64", (Const(1, "int64"),), True)], loop)
    x, out = np.arange(10, dtype=np.float64), np.zeros(1)
    assert compile_c(fn).call([], [x.ctypes.data, out.ctypes.data]) == 0
    assert out[0] == x[::3].sum()


def test_the_probe_works_around_a_miscompiling_c_compiler(tmp_path):
    """gcc 12.2 at -O3 with AVX2/AVX-512 vectorised a guarded copy wrongly
    (spatial_pack's padded input: 30 of 54 values 0); the probe runs that
    copy and adds -fno-tree-loop-if-convert only where it comes out wrong:
    the flags every build uses compute it right, on any compiler."""
    from codegen import toolchain
    cc = toolchain.find_c_compiler()
    flags = toolchain.compiler_flags(cc)[len(toolchain.BASE_FLAGS):]
    assert not toolchain._miscompiles(cc, flags, tmp_path)
    base = tuple(f for f in flags if f not in toolchain.WORKAROUND_FLAGS)
    # the workaround is there exactly when the compiler needs it
    assert (toolchain._miscompiles(cc, base, tmp_path)
            == any(f in flags for f in toolchain.WORKAROUND_FLAGS))

"""Loop-IR programs and their NumPy answers, shared by the backend tests
(tests/codegen/test_loop_ir_semantics.py runs each on every CPU backend;
test_codegen_c.py and test_codegen_llvm.py use them for what is one
backend's own): a GEMM, elementwise integer/narrow/float expressions, a
two-pass softmax with heap and stack temporaries, allocations that fail."""
import numpy as np

from codegen import ir
from codegen.ir import (Allocate, ArrayArg, Block, Call, Cast, Const, For, Load,
                        LoweredFunction, ScalarArg, Select, Store, Unary, Var)


def addr(a):
    return a.__array_interface__["data"][0]


def c(v, dtype="int64"):
    return Const(v, dtype)


def b(op, x, y):
    return ir.binary(op, x, y)


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


def run_elementwise(compile_fn, fn, A, B, out_dtype):
    """Compiles ``fn`` with ``compile_fn`` (compile_c or compile_llvm), runs it
    on ``A`` and ``B``; the output rows, one per expression."""
    f = compile_fn(fn)
    O = np.zeros((fn.arrays[2].shape[0].value, len(A)), out_dtype)
    assert f.call([len(A)], [addr(A), addr(B), addr(O)]) == 0
    return O


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

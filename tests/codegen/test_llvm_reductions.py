"""The LLVM backend's reductions: reassociated vector reductions (horizontal
reduce, NaN-propagating max/min trees), narrow integers that wrap, in-order
fallbacks, and OpenMP-style parallel reductions (scalars, array sections,
nested, 1 and 3 threads, allocation failure); results against NumPy and the C
backend (the rest of the LLVM backend: tests/codegen/test_codegen_llvm.py)."""
import os

os.environ.setdefault("OMP_WAIT_POLICY", "passive")

import re  # noqa: E402
import sys  # noqa: E402
from pathlib import Path  # noqa: E402

import numpy as np  # noqa: E402
import pytest  # noqa: E402

HERE = Path(__file__).resolve().parent
if str(HERE) not in sys.path:
    sys.path.insert(0, str(HERE))

# the LLVM tests' helpers: C/LLVM parity runs, child processes, the IR builders
from test_codegen_llvm import _cache_env, _child, addr, b, c, parity  # noqa: E402
from codegen import compile_llvm, emit_llvm  # noqa: E402
from codegen.llvm import lower as llvm_lower  # noqa: E402
from codegen.ir import (Allocate, ArrayArg, Binary, Block, For, Load,  # noqa: E402
                        LoweredFunction, ScalarArg, Select, Store, Var)

pytestmark = pytest.mark.usefixtures(_cache_env.__name__)     # a fresh cache per test


# ----------------------------------------------------------------- reassociated reductions
# a horizontal reduction: llvm.vector.reduce.*, or for float max/min (which
# propagate NaN) a halving tree of shuffles
REDUCE_CALL = re.compile(r"call (reassoc )?\w+ @llvm\.vector\.reduce\.\w+\.v\d+\w+\(|"
                         r"%half\d+ = shufflevector <\d+ x (float|double)>")


def lanes_of(dtype):
    return llvm_lower.host().vector_bits // (64 if dtype in ("float64", "int64") else 32)


def dot_ir(dtype, op, kind, step=1, term=None):
    """``O[1] = O[1] op term(k)`` for k < n: the accumulator element is loop-invariant."""
    k, n = Var("k"), Var("n")
    X, Y = Load("X", (k,), dtype), Load("Y", (k,), dtype)
    if term is None:
        term = {"add": b("mul", X, Y), "sub": b("mul", X, Y), "mul": X}.get(op, b("sub", X, Y))
    body = Store("O", (c(1),), Binary(op, Load("O", (c(1),), dtype), term, dtype))
    return LoweredFunction(f"red_{kind}_{dtype}_{op}_{step}", [ScalarArg("n")],
                           [ArrayArg("X", dtype, (n,), False), ArrayArg("Y", dtype, (n,), False),
                            ArrayArg("O", dtype, (c(3),), True)],
                           For("k", c(0), n, body, kind=kind, step=step, attrs={"reduction": [("O", op)]}))


def dot_inputs(dtype, op, n, rng):
    fl = np.dtype(dtype).kind == "f"
    if op == "mul":               # near 1 (floats); +-1 with a few 2s (ints): no overflow
        if fl:
            X = 1 + rng.uniform(-0.01, 0.01, n)
        else:
            X = rng.choice([1, -1], n)
            X[rng.choice(n, min(n, 8), replace=False)] = 2
    elif op in ("add", "sub"):    # positive terms: no cancellation, tight tolerances
        X = rng.uniform(0, 1, n) if fl else rng.integers(-50, 50, n)
    else:
        X = rng.standard_normal(n) if fl else rng.integers(-10**6, 10**6, n)
    Y = (rng.uniform(0, 1, n) if op in ("add", "sub") else rng.standard_normal(n)) if fl \
        else rng.integers(-50, 50, n)
    return X.astype(dtype), Y.astype(dtype)


def check_dot(op, dtype, got, o, X, Y, step=1):
    X, Y = X[::step], Y[::step]
    fl = np.dtype(dtype).kind == "f"
    if op in ("max", "min"):                      # the terms X - Y are exact per element
        T = X - Y
        exp = o if len(T) == 0 else (max if op == "max" else min)(o, (T.max() if op == "max" else T.min()))
        assert got == exp
        return
    x, y = (X.astype(np.float64), Y.astype(np.float64)) if fl else (X.astype(np.int64), Y.astype(np.int64))
    exp = o * np.prod(x) if op == "mul" else o + (x * y).sum() if op == "add" else o - (x * y).sum()
    if not fl:
        assert int(got) == int(exp)
        return
    scale = abs(o) + (np.abs(x * y).sum() if op != "mul" else abs(exp))
    tol = 1e-5 if dtype == "float32" else 1e-13
    assert abs(float(got) - exp) <= tol * scale, (got, exp)


@pytest.mark.parametrize("dtype", ["float32", "float64", "int32"])
@pytest.mark.parametrize("op", ["add", "sub", "max", "min", "mul"])
def test_vector_reduction_accumulator(dtype, op):
    fn = dot_ir(dtype, op, "vector")
    src = emit_llvm(fn)
    assert REDUCE_CALL.search(src) and "not widened" not in src and "runs in order" not in src
    w = lanes_of(dtype)
    t = {"float32": "float", "float64": "double", "int32": "i32"}[dtype]
    assert f"phi <{w} x {t}>" in src                                # a vector accumulator
    if dtype != "int32" and op in ("add", "sub", "mul"):
        assert "call reassoc" in src
    rng = np.random.default_rng(21)
    for n in (0, 1, w - 1, w, 2 * w + 3, 1000):
        X, Y = dot_inputs(dtype, op, n, rng)
        status, (_, _, O) = parity(fn, [n], [X, Y, np.array([5, 2, 7], dtype)], rtol=1e-5)
        assert status == 0 and O[0] == 5 and O[2] == 7
        check_dot(op, dtype, O[1], 2, X, Y)


@pytest.mark.parametrize("kind", ["vector", "parallel"])
def test_reduction_narrow_ints_wrap(kind):
    rng = np.random.default_rng(27)
    for dtype, op in (("int8", "add"), ("int8", "mul"), ("uint8", "max"), ("uint8", "min")):
        fn = dot_ir(dtype, op, kind)
        assert REDUCE_CALL.search(emit_llvm(fn))
        for n in (0, 5, 100, 1000):
            X, Y = (rng.integers(0, 256, n).astype(np.uint8).view(dtype) for _ in range(2))
            status, (_, _, O) = parity(fn, [n], [X, Y, np.array([5, 2, 7], dtype)])
            assert status == 0
            if op == "add":
                exp = 2 + sum(int(x) * int(y) for x, y in zip(X, Y))
            elif op == "mul":
                exp = 2
                for x in X:
                    exp = exp * int(x) % 256
            else:
                exp = (max if op == "max" else min)([2] + [int(t) for t in X - Y])   # uint8: wraps
            wrapped = (exp + 128) % 256 - 128 if dtype == "int8" else exp % 256
            assert int(O[1]) == wrapped


def test_vector_reduction_step_fallbacks_and_in_order():
    rng = np.random.default_rng(22)
    # a step: compared with NumPy only (the C backend's accumulator loop ignores the step)
    fn = dot_ir("float64", "add", "vector", step=3)
    assert REDUCE_CALL.search(emit_llvm(fn))
    f = compile_llvm(fn)
    for n in (0, 2, 3, 25, 100):
        X, Y = dot_inputs("float64", "add", n, rng)
        O = np.array([5, 2, 7], np.float64)
        assert f.call([n], [addr(X), addr(Y), addr(O)]) == 0
        check_dot("add", "float64", O[1], 2, X, Y, step=3)
    # a term that cannot be widened (a load guarded by a lane-dependent condition): scalar
    k = Var("k")
    guarded = Select(b("gt", k, c(0)), Load("X", (b("sub", Var("n"), k),), "int64"), c(-1), "int64")
    fn = dot_ir("int64", "add", "vector", term=guarded)
    src = emit_llvm(fn)
    assert "not widened" in src and "lane-dependent condition" in src and not REDUCE_CALL.search(src)
    X = rng.integers(-99, 99, 40).astype(np.int64)
    _, (_, _, O) = parity(fn, [40], [X, X, np.array([5, 2, 7], np.int64)])
    assert O[1] == 2 - 1 + X[1:].sum()
    # the accumulator element varies with k, its lanes collide: a vector loop
    # not widened, left to LLVM (which must keep the order of each element's sum)
    n = Var("n")
    body = Store("O", (b("mod", k, c(3)),), b("add", Load("O", (b("mod", k, c(3)),), "int64"),
                                             Load("X", (k,), "int64")))
    fn = LoweredFunction("red_varying", [ScalarArg("n")],
                         [ArrayArg("X", "int64", (n,), False), ArrayArg("O", "int64", (c(3),), True)],
                         For("k", c(0), n, body, kind="vector", attrs={"reduction": [("O", "add")]}))
    src = emit_llvm(fn)
    assert "vector loop k: not widened (O is read and written where lanes may collide)" in src
    _, (_, O) = parity(fn, [40], [X, np.zeros(3, np.int64)])
    np.testing.assert_array_equal(O, [X[0::3].sum(), X[1::3].sum(), X[2::3].sum()])


def test_vector_loop_of_a_local_tile_is_widened_unless_it_reads_through_an_index():
    """A vector loop tagged as a reduction whose body has no accumulator of
    its own (each lane its slot of a local tile, as accumulate_locally makes
    it) is widened; one that reads through an index array runs in order
    (LLVM may vectorize it with its gathers)."""
    n, k = Var("n"), Var("k")
    tile = Store("T", (k,), b("add", Load("T", (k,), "float32"),
                               b("mul", Load("X", (k,), "float32"), Load("Y", (k,), "float32"))))
    arrays = [ArrayArg("X", "float32", (n,), False), ArrayArg("Y", "float32", (n,), False),
              ArrayArg("T", "float32", (n,), True)]
    fn = LoweredFunction("tile_lanes", [ScalarArg("n")], arrays,
                         For("k", c(0), n, tile, kind="vector",
                             attrs={"reduction": [("O", "add")], "vector_width": 16}))
    src = emit_llvm(fn)
    assert "vector loop k: 16 lanes" in src and "runs in order" not in src
    rng = np.random.default_rng(24)
    X, Y = (rng.standard_normal(37).astype(np.float32) for _ in range(2))
    _, (_, _, T) = parity(fn, [37], [X, Y, np.ones(37, np.float32)])
    np.testing.assert_allclose(T, 1 + X * Y, rtol=1e-6, atol=1e-6)        # (a fused multiply-add)
    idx = ArrayArg("I", "int64", (n,), False)
    gathered = Store("T", (k,), b("add", Load("T", (k,), "float32"),
                                  Load("X", (Load("I", (k,), "int64"),), "float32")))
    fn = LoweredFunction("tile_gather", [ScalarArg("n")], [arrays[0], idx, arrays[2]],
                         For("k", c(0), n, gathered, kind="vector",
                             attrs={"reduction": [("O", "add")], "vector_width": 16}))
    assert "vector reduction loop k: runs in order" in emit_llvm(fn)
    I = rng.integers(0, 37, 37).astype(np.int64)
    _, (_, _, T) = parity(fn, [37], [X, I, np.ones(37, np.float32)])
    np.testing.assert_allclose(T, 1 + X[I], rtol=1e-6)


@pytest.mark.parametrize("dtype,op", [("float64", "add"), ("float32", "max"), ("int32", "add"),
                                      ("float32", "mul"), ("int32", "min")])
def test_parallel_reduction_accumulator(dtype, op):
    fn = dot_ir(dtype, op, "parallel")
    src = emit_llvm(fn)
    assert "call void @GOMP_parallel" in src and "per-thread partials of O" in src
    assert "@omp_get_max_threads" in src and REDUCE_CALL.search(src)       # each thread: widened
    rng = np.random.default_rng(23)
    for n in (0, 1, 2, 5, 1000, 4099):
        X, Y = dot_inputs(dtype, op, n, rng)
        status, (_, _, O) = parity(fn, [n], [X, Y, np.array([5, 2, 7], dtype)], rtol=1e-5)
        assert status == 0 and O[0] == 5 and O[2] == 7
        check_dot(op, dtype, O[1], 2, X, Y)


def section_ir(dtype, op, inner_kind="vector", two=False):
    """The parallel loop k is outermost; an inner loop over i accumulates into
    out[1, i] (an array section), optionally also counting into cnt[0]."""
    k, i, n, m = Var("k"), Var("i"), Var("n"), Var("m")
    x, w = Load("x", (k,), dtype), Load("w", (k, i), dtype)
    term = {"add": b("mul", x, w), "sub": b("mul", x, w), "mul": w}.get(op, b("sub", w, x))
    acc = Load("out", (c(1), i), dtype)
    body = For("i", c(0), m, Store("out", (c(1), i), Binary(op, acc, term, dtype)), kind=inner_kind)
    red = [("out", op)]
    arrays = [ArrayArg("x", dtype, (n,), False), ArrayArg("w", dtype, (n, m), False),
              ArrayArg("out", dtype, (c(2), m), True)]
    if two:
        body = Block([body, Store("cnt", (c(0),), b("add", Load("cnt", (c(0),), "int64"), c(1)))])
        red.append(("cnt", "add"))
        arrays.append(ArrayArg("cnt", "int64", (c(1),), True))
    return LoweredFunction(f"sec_{dtype}_{op}_{inner_kind}_{int(two)}", [ScalarArg("n"), ScalarArg("m")],
                           arrays, For("k", c(0), n, body, kind="parallel", attrs={"reduction": red}))


def section_expect(op, x, w, out):
    x64, w64 = x.astype(np.float64)[:, None], w.astype(np.float64)
    out = out.astype(np.float64).copy()
    if op == "add":
        out[1] += (x64 * w64).sum(axis=0)
    elif op == "mul":
        out[1] *= w64.prod(axis=0)
    elif len(x):
        out[1] = (np.maximum if op == "max" else np.minimum)(
            out[1], (w - x[:, None]).max(axis=0) if op == "max" else (w - x[:, None]).min(axis=0))
    return out


@pytest.mark.parametrize("dtype,op,inner", [("float32", "add", "vector"), ("float64", "add", "serial"),
                                            ("int32", "max", "vector"), ("float64", "min", "serial"),
                                            ("float64", "mul", "vector")])
def test_parallel_reduction_array_sections(dtype, op, inner):
    fn = section_ir(dtype, op, inner, two=(dtype == "float64"))
    src = emit_llvm(fn)
    assert "call void @GOMP_parallel" in src and "private copies of out" in src
    assert "call ptr @malloc" in src and "call void @free" in src
    rng = np.random.default_rng(24)
    for n, m in ((0, 5), (1, 1), (7, 13), (101, 37)):          # n: not a multiple of the threads
        w = (1 + rng.uniform(-0.01, 0.01, (n, m)) if op == "mul" else
             rng.integers(-1000, 1000, (n, m)) if dtype == "int32" else rng.standard_normal((n, m)))
        x = rng.integers(-1000, 1000, n) if dtype == "int32" else rng.standard_normal(n)
        x, w = x.astype(dtype), w.astype(dtype)
        out0 = np.full((2, m), 3, dtype)
        arrays = [x, w, out0] + ([np.array([4], np.int64)] if dtype == "float64" else [])
        status, outs = parity(fn, [n, m], arrays, rtol=1e-5)
        assert status == 0
        exp = section_expect(op, x, w, out0)
        tol = 1e-4 if dtype == "float32" else 1e-12
        np.testing.assert_allclose(outs[2], exp, rtol=tol, atol=tol)
        if dtype == "float64":
            assert outs[3][0] == 4 + n


def test_parallel_reduction_nested_in_parallel_loop_runs_in_place():
    """Row sums: parallel i, and inside it a parallel reduction over k (nested:
    in place, widened)."""
    i, k, n, m = Var("i"), Var("k"), Var("n"), Var("m")
    acc = Load("O", (i,), "float64")
    inner = For("k", c(0), m, Store("O", (i,), b("add", acc, b("mul", Load("A", (i, k), "float64"),
                                                              Load("v", (k,), "float64")))),
                kind="parallel", attrs={"reduction": [("O", "add")]})
    fn = LoweredFunction("matvec_red", [ScalarArg("n"), ScalarArg("m")],
                         [ArrayArg("A", "float64", (n, m), False), ArrayArg("v", "float64", (m,), False),
                          ArrayArg("O", "float64", (n,), True)], For("i", c(0), n, inner, kind="parallel"))
    src = emit_llvm(fn)
    assert src.count("call void @GOMP_parallel") == 1 and REDUCE_CALL.search(src)
    rng = np.random.default_rng(25)
    A, v = rng.standard_normal((9, 203)), rng.standard_normal(203)
    _, (_, _, O) = parity(fn, [9, 203], [A, v, np.ones(9)], rtol=1e-12)
    np.testing.assert_allclose(O, 1 + A @ v, rtol=1e-12)


def test_parallel_reductions_with_1_and_3_threads():
    code = """
    import test_llvm_reductions as tl
    from codegen import compile_llvm
    rng = np.random.default_rng(26)
    dot = compile_llvm(tl.dot_ir("float64", "add", "parallel"))
    sec = compile_llvm(tl.section_ir("float64", "add", "vector", two=True))
    for n in (2, 5, 1000):                       # 2: fewer iterations than threads
        X, Y = tl.dot_inputs("float64", "add", n, rng)
        res = []
        for _ in range(2):
            O = np.array([5, 2, 7], np.float64)
            assert dot.call([n], [tc.addr(X), tc.addr(Y), tc.addr(O)]) == 0
            res.append(O.copy())
        tl.check_dot("add", "float64", res[0][1], 2, X, Y)
        assert (res[0] == res[1]).all()          # deterministic for a thread count
        m = 11
        x, w = rng.standard_normal(n), rng.standard_normal((n, m))
        outs = []
        for _ in range(2):
            out, cnt = np.full((2, m), 3.0), np.array([4], np.int64)
            assert sec.call([n, m], [tc.addr(x), tc.addr(w), tc.addr(out), tc.addr(cnt)]) == 0
            outs.append(out)
            assert cnt[0] == 4 + n
        np.testing.assert_allclose(outs[0], tl.section_expect("add", x, w, np.full((2, m), 3.0)),
                                   rtol=1e-12, atol=1e-12)
        assert (outs[0] == outs[1]).all()
    print("OK")
    """
    for threads in (1, 3):
        r = _child(code, dict(os.environ, OMP_NUM_THREADS=str(threads)))
        assert r.returncode == 0, r.stderr
        assert r.stdout.split()[-1] == "OK"


def test_parallel_reduction_errors_and_allocation_failure():
    k, i, n, H = Var("k"), Var("i"), Var("n"), Var("H")
    upd = lambda arr: Store(arr, (c(0), i), b("add", Load(arr, (c(0), i), "float64"),  # noqa: E731
                                              Load("x", (k,), "float64")))
    # private copies that cannot be allocated (H * H elements overflow, or H < 0): status 1
    fn = LoweredFunction("sec_fail", [ScalarArg("n"), ScalarArg("H")],
                         [ArrayArg("x", "float64", (n,), False), ArrayArg("out", "float64", (H, H), True)],
                         For("k", c(0), n, For("i", c(0), c(2), upd("out")), kind="parallel",
                             attrs={"reduction": [("out", "add")]}))
    f = compile_llvm(fn)
    x, out = np.ones(3), np.zeros(4)
    assert f.call([3, 2**33], [addr(x), addr(out)]) == 1
    assert f.call([3, -2], [addr(x), addr(out)]) == 1
    np.testing.assert_array_equal(out, 0)
    assert f.call([3, 2], [addr(x), addr(out)]) == 0
    np.testing.assert_array_equal(out, [3, 3, 0, 0])
    # a reduction into a temporary: private copies of it as of an argument
    # (tests/tiramisu_py/test_scheduling.py runs them); into an array nowhere in scope: refused
    loop = For("k", c(0), n, For("i", c(0), c(2), upd("T")), kind="parallel",
               attrs={"reduction": [("T", "add")]})
    tmp = LoweredFunction("sec_tmp", [ScalarArg("n")], [ArrayArg("x", "float64", (n,), False)],
                          Allocate("T", "float64", (c(1), c(2)), loop))
    assert "private copies of T" in emit_llvm(tmp)
    with pytest.raises(ValueError, match="'T', which is neither an argument array nor a "
                                         "temporary in scope"):
        emit_llvm(LoweredFunction("sec_none", tmp.scalars, tmp.arrays, loop))
    bad = LoweredFunction("sec_div", fn.scalars, fn.arrays, For(
        "k", c(0), n, For("i", c(0), c(2), upd("out")), kind="parallel",
        attrs={"reduction": [("out", "div")]}))
    with pytest.raises(ValueError, match="no parallel reduction for 'div'"):
        emit_llvm(bad)
    ro = LoweredFunction("sec_ro", fn.scalars, [fn.arrays[0], ArrayArg("out", "float64", (H, H), False)],
                         fn.body)
    with pytest.raises(ValueError, match="read-only array 'out'"):
        emit_llvm(ro)

"""The LLVM backend: the same loop IR as the C backend, JIT-compiled with llvmlite.
Results are checked against NumPy and (where a C compiler exists) against the C
backend; plus widening, outlining, error handling and the object cache."""
from repo_paths import ROOT as CHECKOUT
import os

os.environ.setdefault("OMP_WAIT_POLICY", "passive")

import json  # noqa: E402
import re  # noqa: E402
import shutil  # noqa: E402
import subprocess  # noqa: E402
import sys  # noqa: E402
import textwrap  # noqa: E402
from pathlib import Path  # noqa: E402

import numpy as np  # noqa: E402
import pytest  # noqa: E402

ROOT = Path(CHECKOUT)
HERE = Path(__file__).resolve().parent
for p in (str(ROOT), str(HERE)):
    if p not in sys.path:
        sys.path.insert(0, p)

import loop_ir_cases as tc  # noqa: E402  (the backends' shared IR programs)
from codegen import LLVMCompileError, compile_c, compile_llvm, emit_llvm  # noqa: E402
from codegen.llvm import backend as lb  # noqa: E402
from codegen.llvm import lower as llvm_lower  # noqa: E402
from codegen.ir import (Allocate, ArrayArg, Block, Call, Cast, For, If, Let, Load,  # noqa: E402
                        LoweredFunction, ScalarArg, Select, Store, Unary, Var)

HAVE_CC = bool(os.environ.get("TIRAMISU_PY_CC") or os.environ.get("CC")
               or shutil.which("cc") or shutil.which("gcc"))
c, b, addr = tc.c, tc.b, tc.addr


@pytest.fixture(autouse=True)
def _cache_env(tmp_path, monkeypatch):
    monkeypatch.setenv("TIRAMISU_PY_CACHE", str(tmp_path / "cache"))
    monkeypatch.delenv("TIRAMISU_PY_CFLAGS", raising=False)


def _run(compile_fn, fn, scalars, arrays):
    arrays = [a.copy() for a in arrays]
    status = compile_fn(fn).call(scalars, [addr(a) for a in arrays])
    return status, arrays


def parity(fn, scalars, arrays, rtol=None):
    """Runs ``fn`` with LLVM and, when a C compiler exists, with C; checks they
    agree (integers exactly) and returns (status, LLVM output arrays)."""
    status, out = _run(compile_llvm, fn, scalars, arrays)
    if HAVE_CC:
        status_c, out_c = _run(compile_c, fn, scalars, arrays)
        assert status == status_c
        for x, y in zip(out, out_c):
            if x.dtype.kind == "f":
                tol = rtol or (2e-6 if x.dtype == np.float32 else 1e-13)
                np.testing.assert_allclose(x, y, rtol=tol, atol=tol, equal_nan=True)
            else:
                np.testing.assert_array_equal(x, y)
    return status, out


def elementwise(name, in_dtype, out_dtype, exprs, A, B):
    fn = tc.elementwise_ir(name, in_dtype, out_dtype, exprs)
    O = np.zeros((len(exprs), len(A)), out_dtype)
    status, (_, _, O) = parity(fn, [len(A)], [A, B, O])
    assert status == 0
    return fn, O


def widths(src, t):
    return {int(w) for w in re.findall(rf"<(\d+) x {t}>", src)}


# ----------------------------------------------------------------- GEMM: parallel + vector
def test_gemm_parallel_outer_vector_inner():
    fn = tc.gemm_ir()
    f = compile_llvm(fn)
    tc.run_gemm(f)
    tc.run_gemm(f, M=3, N=1, seed=1)
    tc.run_gemm(f, M=1, N=70, seed=2)
    src = f.source
    assert "call void @GOMP_parallel(ptr @\"gemm.par0\"" in src and "ptr noalias" in src
    w = 16 if llvm_lower.host().avx512 else 8
    assert widths(src, "float") == {w, w // 2}        # then one half-width step, then scalar
    assert "then at most one step of" in src
    assert re.search(r"@llvm\.fma\.v\d+f32", src) and "llvm.loop.unroll.count\", i32 4" in src
    assert Path(f.path).exists() and Path(f.ll_path).read_text() == src
    rng = np.random.default_rng(7)
    A, B = rng.standard_normal((50, 37), np.float32), rng.standard_normal((37, 41), np.float32)
    _, (_, _, C) = parity(fn, [50, 41], [A, B, np.zeros((50, 41), np.float32)], rtol=1e-5)
    np.testing.assert_allclose(C, A.astype(np.float64) @ B, rtol=1e-4, atol=1e-4)


# ----------------------------------------------------------------- semantics (C test parity)


# ----------------------------------------------------------------- temporaries


def test_allocation_failure_inside_a_parallel_loop_sets_the_status():
    i, n, H = Var("i"), Var("n"), Var("HUGE")
    body = Block([For("i", c(1), n, Allocate("T", "int64", (H,), Block([
        Store("T", (c(0),), b("mul", i, c(2))), Store("O", (i,), Load("T", (c(0),), "int64"))])),
        kind="parallel"), Store("O", (c(0),), c(99))])
    fn = LoweredFunction("par_fail", [ScalarArg("n"), ScalarArg("HUGE")],
                         [ArrayArg("O", "int64", (n,), True)], body)
    status, (O,) = parity(fn, [9, 2**62], [np.full(9, -7, np.int64)])
    assert status == 1                              # every iteration skipped, the rest runs
    np.testing.assert_array_equal(O, [99] + [-7] * 8)
    status, (O,) = parity(fn, [9, 3], [np.full(9, -7, np.int64)])
    assert status == 0
    np.testing.assert_array_equal(O, [99] + [2 * k for k in range(1, 9)])


# ----------------------------------------------------------------- vector loops
def vector_ir(dtype="float32", width=None):
    """O[i] = A[i]*S[0] + B[2i];  P[2i+1] = A[n-1-i] - B[2i];  Q[i] = relu(A[i])."""
    i, n = Var("i"), Var("n")
    ld = lambda a, *idx: Load(a, idx, dtype)  # noqa: E731
    t = Var("t", dtype)
    body = Let("t", ld("B", b("mul", c(2), i)), Block([
        Store("O", (i,), b("add", b("mul", ld("A", i), ld("S", c(0))), t)),
        Store("P", (b("add", b("mul", i, c(2)), c(1)),), b("sub", ld("A", b("sub", b("sub", n, c(1)), i)), t)),
        Store("Q", (i,), Select(b("gt", ld("A", i), c(0.0, dtype)), ld("A", i), c(0.0, dtype), dtype))]))
    attrs = {} if width is None else {"vector_width": width}
    two_n = b("mul", c(2), n)
    return LoweredFunction(f"vec_{dtype}_{width}", [ScalarArg("n")],
                           [ArrayArg("A", dtype, (n,), False), ArrayArg("B", dtype, (two_n,), False),
                            ArrayArg("S", dtype, (c(1),), False), ArrayArg("O", dtype, (n,), True),
                            ArrayArg("P", dtype, (two_n,), True), ArrayArg("Q", dtype, (n,), True)],
                           For("i", c(0), n, body, kind="vector", attrs=attrs))


@pytest.mark.parametrize("dtype,width", [("float32", None), ("float64", None), ("float64", 4)])
def test_vector_remainder_broadcast_strided(dtype, width):
    fn = vector_ir(dtype, width)
    src = emit_llvm(fn)
    t = "float" if dtype == "float32" else "double"
    w = width or llvm_lower.host().vector_bits // (32 if dtype == "float32" else 64)
    # then one step of w/2 lanes for a remainder of at least w/2 (w >= 8), then scalar
    assert widths(src, t) == ({w, w // 2} if w >= 8 else {w}) and f"; vector loop i: {w} lanes" in src
    assert f"load <{w} x {t}>" in src and "shufflevector" in src         # unit stride, broadcast
    assert f"insertelement <{w} x {t}>" in src                           # gather B[2i], A[n-1-i]
    assert "not widened" not in src and re.search(rf"@llvm\.fma\.v{w}f", src)
    f = compile_llvm(fn)
    rng = np.random.default_rng(11)
    for n in (0, 1, w // 2, w - 1, w, w + w // 2 + 1, 2 * w + 3, 37):
        A, B = rng.standard_normal(n).astype(dtype), rng.standard_normal(2 * n).astype(dtype)
        S = np.array([1.5], dtype)
        outs = [np.full(n, 7, dtype), np.full(2 * n, 7, dtype), np.full(n, 7, dtype)]
        if n == 37:
            _, (_, _, _, O, P, Q) = parity(fn, [n], [A, B, S] + outs)
        else:
            O, P, Q = outs
            assert f.call([n], [addr(x) for x in (A, B, S, O, P, Q)]) == 0
        tol = 1e-6 if dtype == "float32" else 1e-14
        np.testing.assert_allclose(O, A * S[0] + B[::2], rtol=tol, atol=tol)
        np.testing.assert_allclose(P[1::2], A[::-1] - B[::2], rtol=tol, atol=tol)
        np.testing.assert_array_equal(P[::2], 7)
        np.testing.assert_array_equal(Q, np.maximum(A, 0))


def _fallback_cases():
    i, n = Var("i"), Var("n")
    X = lambda *idx: Load("X", idx, "int64")  # noqa: E731
    return {
        # a reduction into one element: lanes would collide
        "reduction": (Store("X", (c(0),), b("add", X(c(0)), i)), "lanes may collide",
                      lambda x, n: np.concatenate([[x[0] + sum(range(n))], x[1:]])),
        # a loop-carried dependence X[i] = X[i-1] + 1
        "carried": (Store("X", (i,), b("add", X(b("sub", i, c(1))), c(1))), "another index",
                    lambda x, n: np.concatenate([x[:1], x[0] + np.arange(1, n)])),
        # an If in the body
        "if": (If(b("lt", i, c(5)), Store("X", (i,), i)),
               "the condition of an if depends on the vector iterator i",
               lambda x, n: np.where(np.arange(n) < 5, np.arange(n), x)),
        # a lane-dependent condition guarding a gathered load that could be out of
        # bounds (a contiguous one becomes llvm.masked.load: test_guarded_load_is_masked)
        "guarded": (Store("Y", (i,), Select(b("gt", i, c(0)), X(b("sub", n, i)), c(-1), "int64")),
                    "lane-dependent condition", None),
    }


@pytest.mark.parametrize("case", ["reduction", "carried", "if", "guarded"])
def test_vector_fallback_is_scalar_and_correct(case):
    body, reason, expect = _fallback_cases()[case]
    n = Var("n")
    fn = LoweredFunction(f"fb_{case}", [ScalarArg("n")],
                         [ArrayArg("X", "int64", (n,), True), ArrayArg("Y", "int64", (n,), True)],
                         For("i", c(1) if case == "carried" else c(0), n, body, kind="vector"))
    src = emit_llvm(fn)
    assert "not widened" in src and reason in src
    assert ("llvm.loop.vectorize.enable" in src) == (case != "if")   # nested bodies: scalar
    X = np.arange(40, dtype=np.int64) * 3 + 1
    status, (Xo, Yo) = parity(fn, [40], [X, np.zeros(40, np.int64)])
    assert status == 0
    if expect is not None:
        np.testing.assert_array_equal(Xo, expect(X, 40))
    else:
        np.testing.assert_array_equal(Yo, np.concatenate([[-1], X[:0:-1]]))


@pytest.mark.parametrize("dtype,width", [("float32", 16), ("float64", 8), ("int32", 8)])
def test_guarded_load_is_masked(dtype, width):
    """Y[i] = (i > 0 && i < n - 1) ? X[i - 1] + X[i + 1] : -1: contiguous loads
    under a lane-dependent condition are widened as llvm.masked.load (the
    inactive lanes' addresses, X[-1] and X[n], are never touched); the result
    matches NumPy for trip counts with and without a remainder."""
    i, n = Var("i"), Var("n")
    X = lambda e: Load("X", (e,), dtype)  # noqa: E731
    guard = b("and", b("gt", i, c(0)), b("lt", i, b("sub", n, c(1))))
    val = Select(guard, b("add", X(b("sub", i, c(1))), X(b("add", i, c(1)))), c(-1, dtype), dtype)
    fn = LoweredFunction(f"masked_{dtype}", [ScalarArg("n")],
                         [ArrayArg("X", dtype, (n,), False), ArrayArg("Y", dtype, (n,), True)],
                         For("i", c(0), n, Store("Y", (i,), val), kind="vector",
                             attrs={"vector_width": width}))
    src = emit_llvm(fn)
    assert "llvm.masked.load" in src and "not widened" not in src
    f = compile_llvm(fn)
    for m in (1, 2, 17, 40):
        Xv = (np.arange(m) * 3 - 7).astype(dtype)
        Yv = np.zeros(m, dtype)
        assert f.call([m], [addr(Xv), addr(Yv)]) == 0
        want = np.full(m, -1, dtype)
        want[1:-1] = Xv[:-2] + Xv[2:]
        np.testing.assert_array_equal(Yv, want)


def test_parallel_outlining_captures_and_nesting():
    """A parallel loop (lo 1, step 2) inside a serial one, capturing a float and a
    bool scalar, an outer iterator and a runtime row stride; a zeroed stack
    temporary per iteration, a nested parallel loop (run serially) and a bool array."""
    t, i, j, p, n, T = (Var(x) for x in ("t", "i", "j", "p", "n", "T"))
    alpha, flag = Var("alpha", "float64"), Var("flag", "bool")
    A = lambda idx: Load("A", (idx,), "float64")  # noqa: E731
    o_ti = Load("O", (t, i), "float64")
    body = For("t", c(0), T, For("i", c(1), n, Allocate("tmp", "float64", (c(4),), Block([
        For("j", c(0), c(4), Store("tmp", (j,), b("add", Load("tmp", (j,), "float64"),
                                                  b("mul", A(i), Cast(j, "float64")))), kind="vector"),
        For("p", c(0), c(2), Store("O", (t, i), b("add", b("add", o_ti, b("mul", Load(
            "tmp", (b("add", p, c(1)),), "float64"), alpha)), Cast(t, "float64"))), kind="parallel"),
        If(flag, Store("Bm", (i,), b("gt", A(i), c(0.0, "float64"))))]), zero_init=True),
        kind="parallel", step=2))
    fn = LoweredFunction("par_caps", [ScalarArg("n"), ScalarArg("T"), ScalarArg("alpha", "float64"),
                                      ScalarArg("flag", "bool")],
                         [ArrayArg("A", "float64", (n,), False), ArrayArg("O", "float64", (T, n), True),
                          ArrayArg("Bm", "bool", (n,), True)], body)
    src = emit_llvm(fn)
    assert src.count("call void @GOMP_parallel") == 1 and "alloca [4 x double]" in src
    assert "llvm.memset" in src and "i1 zeroext" in src
    An = np.random.default_rng(2).standard_normal(11)
    for fl in (True, False):
        status, (_, O, Bm) = parity(fn, [11, 3, 0.5, fl], [An, np.ones((3, 11)), np.zeros(11, bool)])
        assert status == 0
        odd = np.arange(11) % 2 == 1
        exp = np.ones((3, 11))
        exp[:, odd] += An[odd] * 3 * 0.5 + 2 * np.arange(3)[:, None]
        np.testing.assert_allclose(O, exp, rtol=1e-14)
        np.testing.assert_array_equal(Bm, odd & (An > 0) if fl else False)


def test_vector_bool_arrays_and_uniform_conditions():
    i, n = Var("i"), Var("n")
    flag = Var("flag", "bool")
    A = lambda idx: Load("A", (idx,), "float32")  # noqa: E731
    rev = b("sub", b("sub", n, c(1)), i)
    body = Block([
        # uniform condition, loads in both branches: lazy select on vectors
        Store("M", (i,), Select(flag, b("gt", A(i), c(0.5, "float32")), Load("Bm", (rev,), "bool"), "bool")),
        # uniform short-circuit guarding a load
        Store("Q", (i,), Select(b("and", flag, b("gt", A(c(0)), c(0.0, "float32"))), A(i),
                                b("mul", A(i), c(2.0, "float32")), "float32")),
        Store("K", (i,), Unary("not", Load("Bm", (i,), "bool"), "bool"))])
    fn = LoweredFunction("vbool", [ScalarArg("n"), ScalarArg("flag", "bool")],
                         [ArrayArg("A", "float32", (n,), False), ArrayArg("Bm", "bool", (n,), False),
                          ArrayArg("M", "bool", (n,), True), ArrayArg("Q", "float32", (n,), True),
                          ArrayArg("K", "bool", (n,), True)],
                         For("i", c(0), n, body, kind="vector"))
    src = emit_llvm(fn)
    assert "not widened" not in src and re.search(r"phi <\d+ x i1>", src)
    rng = np.random.default_rng(4)
    for fl, a0 in ((True, 1.0), (True, -1.0), (False, 1.0)):
        An = rng.standard_normal(29).astype(np.float32)
        An[0] = a0
        Bm = rng.random(29) < 0.5
        _, (_, _, M, Q, K) = parity(fn, [29, fl], [An, Bm, np.zeros(29, bool), np.zeros(29, np.float32),
                                                   np.zeros(29, bool)])
        np.testing.assert_array_equal(M, An > 0.5 if fl else Bm[::-1])
        np.testing.assert_array_equal(Q, An if fl and a0 > 0 else An * 2)
        np.testing.assert_array_equal(K, ~Bm)


@pytest.mark.skipif(not os.path.isdir("/proc/self/task"), reason="needs /proc")
def test_thread_count_honours_omp_num_threads():
    code = """
    from codegen import compile_llvm
    f = compile_llvm(tc.gemm_ir())
    before = len(os.listdir("/proc/self/task"))
    tc.run_gemm(f)
    print(len(os.listdir("/proc/self/task")) - before)
    """
    for threads in (1, 3):
        r = _child(code, dict(os.environ, OMP_NUM_THREADS=str(threads)))
        assert r.returncode == 0, r.stderr
        assert int(r.stdout.split()[-1]) == threads - 1          # libgomp's worker threads


# ----------------------------------------------------------------- errors
def test_ir_errors_raise():
    i, n = Var("i"), Var("n")
    gpu = LoweredFunction("g", [ScalarArg("n")], [ArrayArg("O", "int64", (n,), True)],
                          For("i", c(0), n, Store("O", (i,), i), kind="gpu_block"))
    with pytest.raises(NotImplementedError, match="gpu loops"):
        emit_llvm(gpu)
    bad_call = LoweredFunction("bad", [ScalarArg("n")], [ArrayArg("O", "float32", (n,), True)],
                               Store("O", (c(0),), Call("erf", (c(1.0, "float32"),), "float32")))
    with pytest.raises(ValueError, match="unknown function 'erf'"):
        emit_llvm(bad_call)
    undeclared = LoweredFunction("u", [ScalarArg("n")], [ArrayArg("O", "int64", (n,), True)],
                                 For("i", c(0), n, Store("O", (i,), Var("no_such_value"))))
    with pytest.raises(ValueError, match="undeclared variable 'no_such_value'"):
        compile_llvm(undeclared)
    readonly = LoweredFunction("r", [ScalarArg("n")], [ArrayArg("O", "int64", (n,), False)],
                               Store("O", (c(0),), c(1)))
    with pytest.raises(ValueError, match="read-only"):
        emit_llvm(readonly)


def test_llvm_rejection_names_the_ll_file(monkeypatch):
    monkeypatch.setattr(lb, "emit_llvm", lambda fn: "define i32 @broken() {\n  ret i64 0\n}\n")
    with pytest.raises(LLVMCompileError) as ei:
        compile_llvm(tc.gemm_ir("broken"))
    ll = ei.value.ll_path
    assert ll is not None and str(ll) in str(ei.value) and str(ll).endswith(".ll")
    assert "ret i64 0" in Path(ll).read_text()


def test_unresolved_symbol_in_object_is_found(tmp_path):
    import llvmlite.binding as llvm
    h = llvm_lower.host()
    mod = llvm.parse_assembly(f'target triple = "{h.triple}"\ndeclare i32 @tp_missing_fn(i32)\n'
                              'define i32 @k(i32 %x) {\n  %r = call i32 @tp_missing_fn(i32 %x)\n'
                              '  ret i32 %r\n}\n')
    obj = llvm_lower.host_target_machine().emit_object(mod)
    defined, undefined = lb.elf_symbols(obj)
    assert "k" in defined and "tp_missing_fn" in undefined
    with pytest.raises(LLVMCompileError, match="tp_missing_fn.*x.ll"):
        lb.check_symbols(undefined, tmp_path / "x.ll")
    with pytest.raises(lb._BadObject):
        lb.elf_symbols(obj[:200])


PRELUDE = f"""
import json, os, sys
sys.path[:0] = [{str(ROOT)!r}, {str(HERE)!r}]
import numpy as np
import loop_ir_cases as tc
"""


def _child(code, env=None, timeout=120):
    """Runs PRELUDE + ``code`` in a fresh interpreter."""
    env = dict(os.environ if env is None else env)
    return subprocess.run([sys.executable, "-c", PRELUDE + textwrap.dedent(code)], env=env,
                          cwd=str(ROOT), capture_output=True, text=True, timeout=timeout)


def test_missing_symbol_raises_and_the_process_survives():
    code = """
    from codegen import LLVMCompileError, compile_llvm
    from codegen.llvm import lower as llvm_lower
    from codegen.ir import Call
    llvm_lower.LIBM_NAMES[("tanh", "float64")] = "tp_no_such_tanhf"
    fn = tc.elementwise_ir("uses_tanh", "float64", "float64",
                           [lambda a, b_: Call("tanh", (a,), "float64")])
    try:
        compile_llvm(fn)
        print("NO ERROR")
    except LLVMCompileError as exc:
        print("RAISED", json.dumps([str(exc), str(exc.ll_path)]))
    print("SURVIVED")
    """
    r = _child(code)
    assert r.returncode == 0, r.stderr
    lines = r.stdout.splitlines()
    assert lines[-1] == "SURVIVED"
    msg, ll = json.loads(lines[-2].split(" ", 1)[1])
    assert "tp_no_such_tanhf" in msg and ll in msg and Path(ll).exists()


def test_works_without_a_c_compiler(tmp_path):
    empty = tmp_path / "bin"
    empty.mkdir()
    env = {k: v for k, v in os.environ.items() if k not in ("CC", "TIRAMISU_PY_CC")}
    env.update(PATH=str(empty), TIRAMISU_PY_CACHE=str(tmp_path / "cache"))
    code = """
    import shutil
    assert shutil.which("cc") is None and shutil.which("gcc") is None
    from codegen import compile_llvm, toolchain
    f = compile_llvm(tc.gemm_ir())
    tc.run_gemm(f)
    f = compile_llvm(tc.softmax_ir())
    print("OK", toolchain.COMPILER_INVOCATIONS)
    """
    r = _child(code, env)
    assert r.returncode == 0, r.stderr
    assert r.stdout.split()[-2:] == ["OK", "0"]


def test_object_cache_warm_start_and_corruption(tmp_path, monkeypatch):
    cache = tmp_path / "cache"
    runs = lb.CODEGEN_RUNS
    f1 = compile_llvm(tc.gemm_ir())
    assert lb.CODEGEN_RUNS == runs + 1
    assert compile_llvm(tc.gemm_ir()) is f1 and lb.CODEGEN_RUNS == runs + 1      # in-process
    assert f1.path.endswith(".o") and Path(f1.path).parent == cache

    code = """
    from codegen import compile_llvm
    import codegen.llvm.backend as lb
    f = compile_llvm(tc.gemm_ir())
    tc.run_gemm(f)
    print(json.dumps({"runs": lb.CODEGEN_RUNS, "loads": lb.ENGINE_LOADS, "path": f.path}))
    """
    r = _child(code, dict(os.environ, TIRAMISU_PY_CACHE=str(cache)))
    assert r.returncode == 0, r.stderr
    child = json.loads(r.stdout.splitlines()[-1])
    assert child == {"runs": 0, "loads": 1, "path": f1.path}       # LLVM codegen skipped

    obj = Path(f1.path)
    for corrupt in ("truncate", "garbage"):
        monkeypatch.setattr(lb, "_loaded", {})
        if corrupt == "truncate":                  # digest mismatch: a miss
            obj.write_bytes(obj.read_bytes()[:300])
        else:                                      # digest matches but not an ELF object
            junk = b"not an object file" * 40
            obj.write_bytes(junk)
            Path(str(obj) + ".sha256").write_text(__import__("hashlib").sha256(junk).hexdigest())
        before = lb.CODEGEN_RUNS
        f = compile_llvm(tc.gemm_ir())
        assert lb.CODEGEN_RUNS == before + 1 and f is not f1
        tc.run_gemm(f)
        assert obj.read_bytes()[:4] == b"\x7fELF"


@pytest.mark.skipif(not HAVE_CC, reason="the examples are built through the C backend")
def test_examples_lowered_ir_through_llvm():
    from examples import conv2d, jacobi2d, lstm, sparse_conv, trisolv
    rng = np.random.default_rng(3)

    def swap(module):
        k = module.build().compile()
        k._compiled = compile_llvm(k.lowered)
        return k
    args = conv2d.random_inputs(2, 3, 4, 9, 7, seed=1)
    np.testing.assert_allclose(swap(conv2d)(*args), conv2d.reference(*args), rtol=1e-4, atol=1e-4)
    L, bb = trisolv.random_inputs(20, seed=2)
    np.testing.assert_allclose(swap(trisolv)(L, bb), trisolv.reference(L, bb), rtol=1e-10, atol=1e-12)
    A, B = jacobi2d.random_inputs(12, seed=3)
    ra, rb = jacobi2d.reference(A, B, 4)
    swap(jacobi2d)(A=A, B=B, T=4)
    np.testing.assert_allclose(A, ra, rtol=1e-12, atol=1e-12)
    inp, w, bias = sparse_conv.random_inputs(density=0.3, seed=rng.integers(100))
    out = sparse_conv.run(swap(sparse_conv), inp, w, bias)
    np.testing.assert_allclose(out, conv2d.reference(inp, w, bias), rtol=1e-4, atol=1e-4)
    largs = lstm.random_inputs(2, 5, 2, 8, seed=5)
    np.testing.assert_allclose(lstm.run(swap(lstm), *largs), lstm.reference(*largs), rtol=1e-4, atol=2e-5)


def test_spinning_openmp_threads_survive_interpreter_exit():
    """llvmlite dlclose()s the libraries it loaded when the process exits;
    libgomp's workers, still spinning under OMP_WAIT_POLICY=active, crashed
    in unmapped code (exit status -11).  libgomp is pinned (RTLD_NODELETE)."""
    root = CHECKOUT
    code = ("import numpy as np, tiramisu_py as tp\n"
            "f = tp.Function('spin', params={'N': 64})\n"
            "i = f.var('i', 0, 'N')\n"
            "A = f.input('A', ('N',), tp.float32)\n"
            "c = f.computation('c', [i], A[i] * 2.0)\n"
            "c.parallelize('i')\n"
            "assert f.compile('llvm')(A=np.ones(64, np.float32))[3] == 2.0\n")
    env = dict(os.environ, OMP_WAIT_POLICY="active", OMP_NUM_THREADS="2",
               PYTHONPATH=os.pathsep.join([root, os.environ.get("PYTHONPATH", "")]))
    done = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True,
                          timeout=300)
    assert done.returncode == 0, done.stderr[-2000:]

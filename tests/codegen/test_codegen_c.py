"""The C backend's own: the emitted source (readable, helpers only when
used, literals), compile errors, the compiler's selection and probe, the
on-disk cache.  What a program means is tested on both backends at once
(test_loop_ir_semantics.py)."""
import json
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from codegen import CompileError, compile_c, emit_c, ir, toolchain
from codegen import cache
from codegen.c.syntax import c_literal
from codegen.ir import ArrayArg, Call, Const, For, Load, LoweredFunction, ScalarArg, Store, Var
from loop_ir_cases import b, c, elementwise_ir, gemm_ir, run_gemm
from repo_paths import ROOT


@pytest.fixture(scope="module")
def cache_root(tmp_path_factory):
    return tmp_path_factory.mktemp("tpcache")


@pytest.fixture(autouse=True)
def _cache_env(cache_root, monkeypatch):
    monkeypatch.setenv("TIRAMISU_PY_CACHE", str(cache_root))
    monkeypatch.delenv("TIRAMISU_PY_CFLAGS", raising=False)


# ----------------------------------------------------------------- errors
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


# ----------------------------------------------------------------- cache
CHILD = r"""
import json, os, sys
sys.path[:0] = [{root!r}, {tests!r}]
import numpy as np
import loop_ir_cases as t
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


# ----------------------------------------------------------------- readability
def test_literals_are_exact_c():
    assert c_literal(0.1, "float32") == "0.1f" and c_literal(0.1, "float64") == "0.1"
    assert c_literal(2.0, "float32") == "2.0f" and c_literal(1e39, "float32") == "INFINITY"
    assert c_literal(True, "bool") == "true" and c_literal(2**40, "int64") == "1099511627776LL"


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
    """gcc 12.2 at -O3 miscompiles two shapes of loop: a guarded copy
    vectorised after if-conversion (spatial_pack's padded input: 30 of 54
    values 0), and a short inner loop peeled completely with the loop around
    it then vectorised across the dependence it carries (``A[k + 1][i + 1] =
    f(A[k][i])``: stale rows, found by the legality fuzzer).  The probe runs
    each and adds its workaround only where it comes out wrong: the flags
    every build uses compute both right, on any compiler."""
    from codegen import toolchain
    cc = toolchain.find_c_compiler()
    flags = toolchain.compiler_flags(cc)[len(toolchain.BASE_FLAGS):]
    base = tuple(f for f in flags if f not in toolchain.WORKAROUND_FLAGS)
    for src, fix in toolchain.MISCOMPILE_PROBES:
        assert not toolchain._miscompiles(cc, flags, tmp_path, src)
        # the workaround is there exactly when the compiler needs it
        assert toolchain._miscompiles(cc, base, tmp_path, src) == all(f in flags for f in fix)


@pytest.mark.parametrize("target", ["c", "llvm"])
def test_a_reordered_recurrence_computes_the_reference(target):
    """The legality fuzzer's case: ``A[k + 1][i + 1] = 1 - 0.2 A[k][i]`` with
    ``k`` outside (gcc 12.2 -O3 read stale rows, max error 0.43, before the
    probe's workaround)."""
    import tiramisu_py as tp
    f = tp.Function("recur", params={"N": 6})
    i, k = f.var("i", 0, "N - 1"), f.var("k", 0, "N - 1")
    A = f.buffer("A", ("N", "N"), tp.float64, output=True)
    with f.nest(i):
        s0 = f.computation("s0", [i, k], 1.0 + -0.2 * A[k, i]).store_in(A, [k + 1, i + 1])
    s0.reorder("k", "i")
    a = np.random.default_rng(0).standard_normal((6, 6))
    want = a.copy()
    for kk in range(5):
        for ii in range(5):
            want[kk + 1, ii + 1] = 1.0 - 0.2 * want[kk, ii]
    got = a.copy()
    f.compile(target=target)(A=got)
    np.testing.assert_allclose(got, want, rtol=1e-14, atol=1e-15)

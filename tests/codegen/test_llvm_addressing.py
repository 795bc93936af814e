"""How the LLVM backend forms addresses and tunes for the host (the scalar
nests of the parity corpus):

* an index ``x + c`` is addressed as ``x * stride + c * stride``
  (``LLVMExpr.offset_index``), so a stencil's neighbours share one linear
  index and differ by loop-invariant offsets (exact: int64 wraps);
* host tuning (``codegen.llvm.lower.tuning_features``): on AMD Zen, LLVM is
  told to prefer scalar loads over (microcoded, slow) vector gathers, as gcc's
  znver tuning does; checked on the assembly for an explicit znver4 target (so
  it runs on any x86-64 host)."""
import platform
import re

import llvmlite.binding as llvm
import numpy as np
import pytest

import tiramisu_py as tp
from codegen import emit_llvm
from codegen.llvm.lower import host, target_machine, tuning_features

X86 = pytest.mark.skipif(platform.machine() not in ("x86_64", "AMD64"),
                         reason="znver4 tuning is an x86-64 property")


def _transpose_ir():
    f = tp.Function("tr", params=["N"])
    i, j = f.var("i", 0, "N"), f.var("j", 0, "N")
    A = f.input("A", ("N", "N"), tp.float64)
    B = f.buffer("B", ("N", "N"), tp.float64, output=True)
    f.computation("s", [j, i], A[i, j] * 2.0).store_in(B, [j, i])
    return emit_llvm(f.compile(target="llvm").lowered)


def _asm(source, features):
    h = host()
    tm = target_machine(h.triple, "znver4", features)
    mod = llvm.parse_assembly(source)
    pto = llvm.create_pipeline_tuning_options(speed_level=3)
    pto.loop_vectorization = pto.slp_vectorization = True
    pb = llvm.create_pass_builder(tm, pto)
    pb.getModulePassManager().run(mod, pb)
    return tm.emit_assembly(mod)


@X86
def test_tuning_features_by_cpu():
    assert tuning_features("znver4") == "+prefer-no-gather,+prefer-no-scatter"
    assert tuning_features("znver3") == "+prefer-no-gather,+prefer-no-scatter"
    assert tuning_features("skylake-avx512") == ""
    h = host()
    assert ("+prefer-no-gather" in h.features.split(",")) == h.cpu.startswith("znver")


@X86
def test_znver_strided_loop_has_no_gather():
    src = _transpose_ir()
    assert "vgather" in _asm(src, "")                      # LLVM's default for znver4
    assert "vgather" not in _asm(src, tuning_features("znver4"))


def _stencil():
    f = tp.Function("st", params=["N", "M"])
    i, j = f.var("i", 1, "N - 1"), f.var("j", 1, "M - 1")
    A = f.input("A", ("N", "M"), tp.float64)
    B = f.buffer("B", ("N", "M"), tp.float64, output=True)
    f.computation("s", [i, j], A[i - 1, j - 1] + 2.0 * A[i, j + 1] - A[i + 1, j]
                  + 0.5 * A[i + 1, j - 1]).store_in(B, [i, j])
    return f


def test_stencil_neighbours_share_one_row_product(backend):
    f = _stencil()
    k = f.compile(target=backend)
    rng = np.random.default_rng(3)
    a = rng.standard_normal((9, 13))
    ref = np.zeros_like(a)
    ref[1:-1, 1:-1] = a[:-2, :-2] + 2.0 * a[1:-1, 2:] - a[2:, 1:-1] + 0.5 * a[2:, :-2]
    out = k(A=a, B=np.zeros_like(a))
    np.testing.assert_array_equal(out, ref)
    if backend == "llvm":
        src = emit_llvm(k.lowered)
        # every row product multiplies the iterator i itself, never i - 1 or i + 1
        rows = re.findall(r"mul nsw i64 (%[\w.]+), %s1\.M", src)
        assert rows and all(r.startswith("%i.") for r in rows), rows
        # the neighbours' constant column offsets are added to the shared index
        assert re.search(r"add nsw i64 %t\d+, -1\b", src) and re.search(r"add nsw i64 %t\d+, 1\b", src)


def _indirect_function():
    """``y[i] = sum_q v[i, q] * x[idx[i, q]]``, the ``q`` lanes vectorised:
    a load whose index is data (an indirection), as the CSR kernels read."""
    f = tp.Function("indirect", params={"N": 8, "Q": 16, "M": 40})
    i, q = f.var("i", 0, "N"), f.var("q", 0, "Q")
    x = f.input("x", ("M",), tp.float32)
    v = f.input("v", ("N", "Q"), tp.float32)
    idx = f.input("idx", ("N", "Q"), tp.int32)
    p = f.computation("p", [i, q], v[i, q] * x[idx[i, q]])
    p.vectorize("q", 16)
    return f


def test_data_dependent_index_is_one_gather_and_exact():
    f = _indirect_function()
    src = emit_llvm(f.compile(target="llvm").lowered)
    assert "@llvm.masked.gather.v16f32" in src
    rng = np.random.default_rng(3)
    x = rng.standard_normal(40).astype(np.float32)
    v = rng.standard_normal((8, 16)).astype(np.float32)
    idx = rng.integers(0, 40, (8, 16)).astype(np.int32)
    out = f.compile(target="llvm")(x=x, v=v, idx=idx)
    got = out["p"] if isinstance(out, dict) else out
    np.testing.assert_array_equal(np.asarray(got), v * x[idx])


@X86
def test_gather_is_the_hosts_instruction_unless_zen_prefers_scalar_loads():
    src = emit_llvm(_indirect_function().compile(target="llvm").lowered)
    assert "vgatherdps" in _asm(src, "+avx512f")            # AVX-512 hosts: the instruction
    assert "vgather" not in _asm(src, tuning_features("znver4"))   # Zen: scalar loads

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

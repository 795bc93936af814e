"""Host tuning of the LLVM backend (codegen.llvm_lower.tuning_features): on AMD
Zen, LLVM is told to prefer scalar loads over (microcoded, slow) vector
gathers, as gcc's znver tuning does.  Checked on the assembly LLVM emits for a
strided loop, for an explicit znver4 target (so it runs on any x86-64 host)."""
import platform

import llvmlite.binding as llvm
import pytest

import tiramisu_py as tp
from codegen import emit_llvm
from codegen.llvm_lower import host, target_machine, tuning_features

pytestmark = pytest.mark.skipif(platform.machine() not in ("x86_64", "AMD64"),
                                reason="znver4 tuning is an x86-64 property")


def _transpose_ir():
    f = tp.Function("tr", params=["N"])
    i, j = f.var("i", 0, "N"), f.var("j", 0, "N")
    A = f.buffer("A", ("N", "N"), tp.float64)
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


def test_tuning_features_by_cpu():
    assert tuning_features("znver4") == "+prefer-no-gather,+prefer-no-scatter"
    assert tuning_features("znver3") == "+prefer-no-gather,+prefer-no-scatter"
    assert tuning_features("skylake-avx512") == ""
    h = host()
    assert ("+prefer-no-gather" in h.features.split(",")) == h.cpu.startswith("znver")


def test_znver_strided_loop_has_no_gather():
    src = _transpose_ir()
    assert "vgather" in _asm(src, "")                      # LLVM's default for znver4
    assert "vgather" not in _asm(src, tuning_features("znver4"))

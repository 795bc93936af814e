"""Ordered float reductions (codegen.ordered, LLVM backend): a serial loop
accumulating ``C[i][j] += A[i][k] * B[j][k]`` in program order is vectorised by
LLVM with its products in vector registers and its adds in order; one with a strided operand (``B[k][j]`` over ``k``)
is marked not to be vectorised, with a comment naming the access."""
import llvmlite.binding as llvm
import numpy as np
import pytest

import tiramisu_py as tp
from codegen import emit_llvm
from codegen.ir import Binary, Const, For, Load, Store
from codegen.llvm import backend
from codegen.llvm.lower import host_target_machine
from codegen.ordered import strided_ordered_reduction
from ir_helpers import I64, v

F32 = "float32"


def _acc_loop(b_index, dtype=F32, step=1):
    """for k: C[i][j] = C[i][j] + A[i][k] * B[b_index]."""
    prod = Binary("mul", Load("A", (v("i"), v("k")), dtype), Load("B", b_index, dtype), dtype)
    st = Store("C", (v("i"), v("j")), Binary("add", Load("C", (v("i"), v("j")), dtype), prod, dtype))
    return For("k", Const(0, I64), v("K"), st, step=step)


DT = {"A": F32, "B": F32, "C": F32}


def test_contiguous_operands_may_be_vectorised():
    assert strided_ordered_reduction(_acc_loop((v("j"), v("k"))), DT) is None


def test_strided_operand_is_named():
    assert strided_ordered_reduction(_acc_loop((v("k"), v("j"))), DT) == "B[k][j]"
    two_k = Binary("mul", Const(2, I64), v("k"), I64)
    assert strided_ordered_reduction(_acc_loop((v("j"), two_k)), DT) == "B[j][2 * k]"


def test_not_a_float_reduction():
    ints = {"A": "int32", "B": "int32", "C": "int32"}
    assert strided_ordered_reduction(_acc_loop((v("k"), v("j")), "int32"), ints) is None
    copy = For("k", Const(0, I64), v("K"), Store("C", (v("i"), v("k")), Load("B", (v("k"), v("j")), F32)))
    assert strided_ordered_reduction(copy, DT) is None
    nested = For("i", Const(0, I64), v("K"), _acc_loop((v("k"), v("j"))))
    assert strided_ordered_reduction(nested, DT) is None        # not an innermost loop


def _build(strided: bool):
    f = tp.Function("acc_t" if strided else "acc_c", params=["N", "K"])
    i, j, k = f.var("i", 0, "N"), f.var("j", 0, "N"), f.var("k", 0, "K")
    A = f.input("A", ("N", "K"), tp.float32)
    B = f.input("B", ("K", "N") if strided else ("N", "K"), tp.float32)
    C = f.buffer("C", ("N", "N"), tp.float32, output=True)
    with f.nest(i):
        s = f.computation("scale", [i, j], C[i, j] * 0.5).store_in(C, [i, j])
        s[i, j] += A[i, k] * (B[k, j] if strided else B[j, k])
    return f


def _optimised(source: str) -> str:
    """The module as the LLVM backend optimises it."""
    backend._set_options()
    mod = llvm.parse_assembly(source)
    pto = llvm.create_pipeline_tuning_options(speed_level=3)
    pto.loop_vectorization = pto.slp_vectorization = pto.loop_unrolling = True
    pb = llvm.create_pass_builder(host_target_machine(), pto)
    pb.getModulePassManager().run(mod, pb)
    return str(mod)


def _in_order(A, B, C):
    """The scalar program's float32 sums, in k order."""
    C = (C * np.float32(0.5)).astype(np.float32)
    for k in range(A.shape[1]):
        C = (C + (A[:, k][:, None] * B[:, k][None, :]).astype(np.float32)).astype(np.float32)
    return C


def _inputs(strided, N=7, K=45):
    rng = np.random.default_rng(3)
    A = rng.standard_normal((N, K)).astype(np.float32)
    Bjk = rng.standard_normal((N, K)).astype(np.float32)
    C = rng.standard_normal((N, N)).astype(np.float32)
    return A, Bjk, (np.ascontiguousarray(Bjk.T) if strided else Bjk), C


def test_contiguous_reduction_is_vectorised_in_order():
    f = _build(strided=False)
    src = emit_llvm(f.compile(target="llvm").lowered)
    assert "vectorize.enable\", i1 false" not in src
    opt = _optimised(src)
    assert "llvm.vector.reduce.fadd" in opt                    # lanes added in order
    assert not any("reduce.fadd" in ln and "reassoc" in ln for ln in opt.splitlines())
    A, Bjk, B, C = _inputs(False)
    want = _in_order(A, Bjk, C)
    got = f.compile(target="llvm")(A=A, B=B, C=C.copy())
    got = got["C"] if isinstance(got, dict) else got
    np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-5)   # fma contraction allowed
    out_c = f.compile(target="c")(A=A, B=B, C=C.copy())
    out_c = out_c["C"] if isinstance(out_c, dict) else out_c
    np.testing.assert_allclose(out_c, want, rtol=1e-5, atol=1e-5)


def test_strided_reduction_stays_scalar():
    f = _build(strided=True)
    src = emit_llvm(f.compile(target="llvm").lowered)
    assert "ordered float reduction not vectorised (B[k][j] is not contiguous in k)" in src
    assert "!\"llvm.loop.vectorize.enable\", i1 false" in src
    assert "llvm.vector.reduce.fadd" not in _optimised(src)
    A, Bjk, B, C = _inputs(True)
    want = _in_order(A, Bjk, C)
    for target in ("llvm", "c"):
        got = f.compile(target=target)(A=A, B=B, C=C.copy())
        got = got["C"] if isinstance(got, dict) else got
        np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-5)

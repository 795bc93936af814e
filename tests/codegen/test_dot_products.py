"""Dot-product instructions (codegen.dotprod): a GEMM over bfloat16 pairs
into float32 (vdpbf16ps) and over u8 x s8 quadruples into int32 (vpdpbusd),
with the operand packed by the DSL (cache_at + store_in), on both CPU
backends; the same kernels pinned to a host without the instructions
(TIRAMISU_PY_HOST=avx512_bf16=0,avx512_vnni=0) run with conversion + fp32
FMA / int32 multiply-adds and give the same results."""
import numpy as np
import pytest

import tiramisu_py as tp
from codegen import target

torch = pytest.importorskip("torch")

BACKENDS = ("cpu", "llvm")
RNG = np.random.default_rng(7)
NONE = "avx512_bf16=0,avx512_vnni=0"
M = 32
# what the instruction looks like in each backend's source
SPELLING = {("bf16", "cpu"): "_mm512_dpbf16_ps", ("bf16", "llvm"): "avx512bf16.dpbf16ps",
            ("u8s8", "cpu"): "_mm512_dpbusd_epi32", ("u8s8", "llvm"): "avx512.vpdpbusd"}


def packed_gemm(a_t, b_t, acc_t, n):
    """C[i, j] += A[i, k] * B[k, j] with k split by ``n``, B's ``n`` values of
    a k-step packed next to each other per column (Bp[j, k % n]) by a
    cache_at at k0, j vectorised by 16 (M columns: a constant keeps the
    partial-tile code small and the test fast)."""
    f = tp.Function(f"dot_{a_t.name}_{b_t.name}", params=["N", "K"])
    i, j, k = f.var("i", 0, "N"), f.var("j", 0, M), f.var("k", 0, "K")
    a = f.input("A", ("N", "K"), a_t)
    b = f.input("B", ("K", M), b_t)
    c = f.computation("C", [i, j], 0, dtype=acc_t)
    c[i, j] += tp.cast(a[i, k], acc_t) * tp.cast(b[k, j], acc_t)
    u = c.update
    u.split(k, n)
    u.reorder("k0", "i", "j", "k1")
    bp = f.buffer("Bp", (M, n), b_t)
    copy = u.cache_at(b, "k0")
    copy.store_in(bp, [copy.vars[1], copy.vars[0] % n])
    u.vectorize("j", 16)
    u.unroll("k1")
    return f


def has(kind):
    flag = {"bf16": "avx512_bf16", "u8s8": "avx512_vnni"}[kind]
    return target.has(flag) and target.vector_bits() >= 512


@pytest.mark.parametrize("backend", BACKENDS)
def test_bf16_dot_product_kernel(backend, monkeypatch):
    a = torch.from_numpy(RNG.standard_normal((9, 70)).astype(np.float32)).bfloat16()
    b = torch.from_numpy(RNG.standard_normal((70, M)).astype(np.float32)).bfloat16()
    ref = a.double().numpy() @ b.double().numpy()
    native = packed_gemm(tp.bfloat16, tp.bfloat16, tp.float32, 2).compile(backend)
    assert (SPELLING["bf16", backend] in native.source) == has("bf16")
    monkeypatch.setenv(target.ENV, NONE)
    plain = packed_gemm(tp.bfloat16, tp.bfloat16, tp.float32, 2).compile(backend)
    assert SPELLING["bf16", backend] not in plain.source
    for k in (native, plain):
        out = k(a, b)
        assert out.dtype == torch.float32
        np.testing.assert_allclose(out.numpy(), ref, rtol=1e-2, atol=1e-2 * np.abs(ref).max())
    # the same products summed in another order: float32 rounding apart
    np.testing.assert_allclose(native(a, b).numpy(), plain(a, b).numpy(), rtol=1e-5, atol=1e-4)


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("order", [("uint8", "int8"), ("int8", "uint8")])
def test_u8s8_dot_product_kernel_is_exact(backend, order, monkeypatch):
    at, bt = (getattr(tp, t) for t in order)
    lo = {"uint8": (0, 256), "int8": (-128, 128)}
    a = RNG.integers(*lo[order[0]], (7, 37), dtype=order[0])
    b = RNG.integers(*lo[order[1]], (37, M), dtype=order[1])
    ref = a.astype(np.int32) @ b.astype(np.int32)
    native = packed_gemm(at, bt, tp.int32, 4).compile(backend)
    assert (SPELLING["u8s8", backend] in native.source) == has("u8s8")
    monkeypatch.setenv(target.ENV, NONE)
    plain = packed_gemm(at, bt, tp.int32, 4).compile(backend)
    assert SPELLING["u8s8", backend] not in plain.source
    np.testing.assert_array_equal(native(a, b), ref)
    np.testing.assert_array_equal(plain(a, b), ref)


def test_only_the_pattern_is_tagged(monkeypatch):
    """int8 x int8 (no u8 x s8 instruction), a float32 accumulation of float32
    operands and a 256-bit host keep the plain vector code."""
    monkeypatch.setenv(target.ENV, "avx512_bf16=1,avx512_vnni=1")
    s8 = packed_gemm(tp.int8, tp.int8, tp.int32, 4).compile("cpu")
    assert "dpbusd" not in s8.source
    f32 = packed_gemm(tp.float32, tp.float32, tp.float32, 2).compile("cpu")
    assert "dpbf16" not in f32.source
    monkeypatch.setenv(target.ENV, "avx512_bf16=1,vector_bits=256")
    assert "dpbf16" not in packed_gemm(tp.bfloat16, tp.bfloat16, tp.float32, 2).compile("cpu").source


def test_host_flags_pin():
    assert target.FLAGS == ("avx512_bf16", "avx512_vnni")
    with pytest.raises(ValueError, match="0 or 1"):
        import os
        old = os.environ.get(target.ENV)
        os.environ[target.ENV] = "avx512_bf16=2"
        try:
            target.pinned()
        finally:
            if old is None:
                os.environ.pop(target.ENV)
            else:
                os.environ[target.ENV] = old
    with pytest.raises(ValueError, match="unknown flag"):
        target.has("sse9")

"""Reduced precision: bfloat16 and float16 storage (conversions bit-exact
against torch / NumPy, ties to even, NaN/Inf, subnormals), promotion,
saturating casts, int8 with int32 accumulation, zero-copy arguments, the CUDA
printer's types; both CPU backends, scalar and vector loops."""
import os

import numpy as np
import pytest

import tiramisu_py as tp

torch = pytest.importorskip("torch")

BACKENDS = ("cpu", "llvm")
RNG = np.random.default_rng(31)


def special_f32():
    """float32 values that exercise rounding: specials, subnormals, exact
    ties (low 16 bits 0x8000 with an even and an odd upper half), overflow
    to infinity, and random bit patterns."""
    vals = np.array([0.0, -0.0, 1.0, -1.0, np.inf, -np.inf, np.nan, -np.nan, 1e-40, -1e-40,
                     1e-45, 6e-8, 3e-5, 65504.0, 65520.0, 70000.0, 3.4e38, -3.4e38,
                     1 + 2 ** -8, 1 + 3 * 2 ** -8, 1 + 2 ** -11, 1 + 3 * 2 ** -11],
                    dtype=np.float32)
    ties = (np.arange(64, dtype=np.uint32) << 16 | 0x3f800000 | 0x8000).view(np.float32)
    bits = RNG.integers(0, 2 ** 32, 256, dtype=np.uint64).astype(np.uint32).view(np.float32)
    return np.concatenate([vals, ties, bits])


def convert_kernel(src, dst, backend, vector, saturate=False):
    f = tp.Function(f"cv_{src.name}_{dst.name}", params=["N"])
    i = f.var("i", 0, "N")
    a = f.input("A", ("N",), src)
    c = f.computation("C", [i], tp.cast(a[i], dst, saturate=saturate))
    if vector:
        c.vectorize(i, 16)
    return f.compile(backend)


def bits16(t):
    return t.view(torch.int16).numpy().view(np.uint16)


def is_nan16(bits, fmt):
    """NaN bit patterns of a 16-bit format ("bf16": 8 exponent bits, "f16": 5)."""
    exp, man = (0x7f80, 0x007f) if fmt == "bf16" else (0x7c00, 0x03ff)
    return (bits & exp == exp) & (bits & man != 0)


def same_or_both_nan(ours, ref, fmt):
    """Bit-equal everywhere but at NaNs, which must be NaN on both sides
    (torch's CPU gives 0xffff for every NaN, ours keeps the sign: both quiet NaNs)."""
    nan = is_nan16(ref, fmt)
    np.testing.assert_array_equal(is_nan16(ours, fmt), nan)
    np.testing.assert_array_equal(ours[~nan], ref[~nan])


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("vector", [False, True])
def test_f32_to_bf16_rounds_to_nearest_even_as_torch(backend, vector):
    x = special_f32()
    out = convert_kernel(tp.float32, tp.bfloat16, backend, vector)(torch.from_numpy(x))
    assert out.dtype == torch.bfloat16
    ref = torch.from_numpy(x).to(torch.bfloat16)
    same_or_both_nan(bits16(out), bits16(ref), "bf16")
    # the NaNs stay quiet NaNs with their sign
    nan = np.isnan(x)
    signs = np.signbit(x[nan])
    got = bits16(out)[nan]
    np.testing.assert_array_equal(got >> 15 == 1, signs)
    assert np.all(got & 0x7fc0 == 0x7fc0)


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("vector", [False, True])
def test_f32_to_f16_is_ieee_as_numpy_and_torch(backend, vector):
    x = special_f32()
    with np.errstate(over="ignore"):
        ref = x.astype(np.float16)
    out = convert_kernel(tp.float32, tp.float16, backend, vector)(x)
    assert out.dtype == np.float16
    same_or_both_nan(out.view(np.uint16), ref.view(np.uint16), "f16")
    t = convert_kernel(tp.float32, tp.float16, backend, vector)(torch.from_numpy(x))
    same_or_both_nan(bits16(t), bits16(torch.from_numpy(x).to(torch.float16)), "f16")


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("vector", [False, True])
def test_widening_conversions_are_exact(backend, vector):
    every = np.arange(2 ** 16, dtype=np.uint16)         # every bit pattern
    b = torch.from_numpy(every.view(np.int16)).view(torch.bfloat16)
    got = convert_kernel(tp.bfloat16, tp.float32, backend, vector)(b)
    np.testing.assert_array_equal(got.numpy().view(np.uint32)[~torch.isnan(b).numpy()],
                                  b.float().numpy().view(np.uint32)[~torch.isnan(b).numpy()])
    assert torch.equal(torch.isnan(got), torch.isnan(b))
    h = every.view(np.float16)
    got = convert_kernel(tp.float16, tp.float64, backend, vector)(h)
    np.testing.assert_array_equal(got, h.astype(np.float64))


@pytest.mark.parametrize("backend", BACKENDS)
def test_other_types_convert_through_float32_as_torch(backend):
    x = np.concatenate([RNG.standard_normal(64) * 1e3, [1 + 2 ** -9 + 2 ** -30]])
    got = convert_kernel(tp.float64, tp.bfloat16, backend, True)(torch.from_numpy(x))
    np.testing.assert_array_equal(bits16(got), bits16(torch.from_numpy(x).to(torch.bfloat16)))
    i = RNG.integers(-2 ** 31, 2 ** 31, 64, dtype=np.int64).astype(np.int32)
    got = convert_kernel(tp.int32, tp.bfloat16, backend, False)(torch.from_numpy(i))
    np.testing.assert_array_equal(bits16(got), bits16(torch.from_numpy(i).float().bfloat16()))
    b = torch.from_numpy(RNG.standard_normal(64).astype(np.float32) * 300).bfloat16()
    got = convert_kernel(tp.bfloat16, tp.int32, backend, False)(b)
    np.testing.assert_array_equal(got.numpy(), b.float().numpy().astype(np.int32))


def test_promotion_computes_in_float32():
    f = tp.Function("prom", params=["N"])
    i = f.var("i", 0, "N")
    a = f.input("A", ("N",), tp.bfloat16)
    h = f.input("H", ("N",), tp.float16)
    d = f.input("D", ("N",), tp.float64)
    assert f.computation("s", [i], a[i] + a[i]).dtype is tp.float32
    assert f.computation("m", [i], a[i] * h[i]).dtype is tp.float32
    assert f.computation("w", [i], a[i] * 2).dtype is tp.float32
    assert f.computation("n", [i], -a[i]).dtype is tp.float32
    assert f.computation("e", [i], tp.exp(h[i])).dtype is tp.float32
    assert f.computation("x", [i], a[i] + d[i]).dtype is tp.float64
    assert f.computation("copy", [i], a[i]).dtype is tp.bfloat16
    assert f.computation("r", [i], tp.cast(a[i] + a[i], tp.bfloat16)).dtype is tp.bfloat16
    assert tp.float16.is_half and not tp.float32.is_half


@pytest.mark.parametrize("backend", BACKENDS)
def test_bf16_elementwise_equals_torch(backend):
    """An op on bf16 computed in float32 and stored as bf16: torch's value."""
    f = tp.Function("axpy16", params=["N"])
    i = f.var("i", 0, "N")
    a = f.input("A", ("N",), tp.bfloat16)
    b = f.input("B", ("N",), tp.bfloat16)
    c = f.computation("C", [i], a[i] * b[i] + a[i], dtype=tp.bfloat16)
    c.vectorize(i, 16)
    k = f.compile(backend)
    x = torch.from_numpy(RNG.standard_normal(100).astype(np.float32)).bfloat16()
    y = torch.from_numpy(RNG.standard_normal(100).astype(np.float32)).bfloat16()
    ref = (x.float() * y.float() + x.float()).bfloat16()     # one rounding, as ours
    assert torch.equal(k(x, y).view(torch.int16), ref.view(torch.int16))


@pytest.mark.parametrize("backend", BACKENDS)
def test_saturating_casts(backend):
    x = np.array([0.0, 1.9, -1.9, 127.4, 127.6, 128.0, -128.9, -129.0, 1e10, -1e10,
                  np.inf, -np.inf, np.nan, 3e9, -3e9], dtype=np.float32)
    for dst, lo, hi in ((tp.int8, -128, 127), (tp.uint8, 0, 255), (tp.int32, -2 ** 31, 2 ** 31 - 1)):
        got = convert_kernel(tp.float32, dst, backend, True, saturate=True)(x)
        with np.errstate(invalid="ignore"):
            ref = np.where(np.isnan(x), 0, np.trunc(np.clip(x.astype(np.float64), lo, hi)))
        np.testing.assert_array_equal(got.astype(np.float64), ref.astype(np.float64))
    i = np.array([-1000, -129, -128, 0, 127, 128, 70000], dtype=np.int32)
    got = convert_kernel(tp.int32, tp.int8, backend, False, saturate=True)(i)
    np.testing.assert_array_equal(got, np.clip(i, -128, 127).astype(np.int8))
    wrapped = convert_kernel(tp.int32, tp.int8, backend, False)(i)
    np.testing.assert_array_equal(wrapped, i.astype(np.int8))          # no saturate: wraps
    h = convert_kernel(tp.float32, tp.float16, backend, False, saturate=True)(x)
    with np.errstate(invalid="ignore"):
        ref = np.clip(x, -65504, 65504).astype(np.float16)
    same_or_both_nan(h.view(np.uint16), ref.view(np.uint16), "f16")
    with pytest.raises(ValueError, match="saturat"):
        tp.cast(tp.Function("z").input("A", (1,), tp.float32)[0], tp.float32, saturate=True)
    with pytest.raises(TypeError, match="saturate"):
        tp.cast(1.0, tp.int8, saturate="yes")


@pytest.mark.parametrize("backend", BACKENDS)
def test_int8_dot_accumulates_in_int32(backend):
    f = tp.Function("dot8", params=["N", "K"])
    i, k = f.var("i", 0, "N"), f.var("k", 0, "K")
    a = f.input("A", ("N", "K"), tp.int8)
    b = f.input("B", ("K",), tp.uint8)
    c = f.computation("C", [i], 0, dtype=tp.int32)
    c[i] += tp.cast(a[i, k], tp.int32) * tp.cast(b[k], tp.int32)
    kern = f.compile(backend)
    x = RNG.integers(-128, 128, (5, 300), dtype=np.int8)
    y = RNG.integers(0, 256, 300, dtype=np.uint8)
    np.testing.assert_array_equal(kern(x, y), x.astype(np.int32) @ y.astype(np.int32))


@pytest.mark.parametrize("backend", BACKENDS)
def test_low_precision_arguments_are_not_copied(backend):
    f = tp.Function("cp16", params=["N"])
    i = f.var("i", 0, "N")
    a = f.input("A", ("N",), tp.bfloat16)
    f.computation("C", [i], tp.cast(a[i], tp.float16))
    k = f.compile(backend)
    x = torch.arange(10, dtype=torch.float32).bfloat16()
    out = torch.full((10,), -1.0, dtype=torch.float16)
    res = k(x, C=out)
    assert res.data_ptr() == out.data_ptr() and torch.equal(out, x.half())
    g = tp.Function("np16", params=["N"])
    j = g.var("j", 0, "N")
    h = g.input("H", ("N",), tp.float16)
    g.computation("D", [j], h[j], dtype=tp.float16)
    hk = g.compile(backend)
    src, dst = np.linspace(-2, 2, 9).astype(np.float16), np.zeros(9, np.float16)
    assert hk(src, D=dst) is dst and np.array_equal(dst, src)
    with pytest.raises(TypeError, match="dtype"):
        hk(src.astype(np.float32))


def test_bf16_output_from_numpy_names_the_problem():
    pytest.importorskip("numpy")
    if tp.bfloat16.np is not None:
        pytest.skip("ml_dtypes is installed: NumPy has a bfloat16")
    f = tp.Function("np_bf16", params=["N"])
    i = f.var("i", 0, "N")
    a = f.input("A", ("N",), tp.float32)
    f.computation("C", [i], tp.cast(a[i], tp.bfloat16))
    with pytest.raises(TypeError, match="'C' is bfloat16.*torch"):
        f.compile()(np.ones(4, np.float32))


def _cuda_half_function():
    f = tp.Function("cvc", params=["N"])
    i = f.var("i", 0, "N")
    a = f.input("A", ("N",), tp.float32)
    h = f.input("H", ("N",), tp.float16)
    c = f.computation("C", [i], tp.cast(a[i], tp.bfloat16))
    d = f.computation("D", [i], h[i] * 2.0)
    for s in (c, d):
        s.split(i, 32)
        s.bind("i0", "block.x")
        s.bind("i1", "thread.x")
    return f


def test_cuda_printer_uses_cuda_half_types(monkeypatch):
    from codegen.cuda import nvrtc
    from tiramisu_py.driver import cuda as ck
    if nvrtc.unavailable() is None and nvrtc.half_include_dirs():
        monkeypatch.setenv("TIRAMISU_PY_CUDA_COMPILER", "nvrtc")     # the cubins are built
    else:
        monkeypatch.setattr(ck, "CUDA_ARCHS", ())                     # printed and emulated
    k = _cuda_half_function().compile("cuda")
    src = k.source
    assert "#include <cuda_bf16.h>" in src and "#include <cuda_fp16.h>" in src
    assert "__nv_bfloat16* __restrict__ C" in src and "const __half* __restrict__ H" in src
    assert "__float2bfloat16_rn(" in src and "__half2float(" in src
    if not any(os.access(os.path.join(p, c), os.X_OK) for p in os.environ["PATH"].split(":")
               for c in ("g++", "c++")):
        pytest.skip("no C++ compiler for the CUDA emulator")
    x = RNG.standard_normal(70).astype(np.float32)
    h = RNG.standard_normal(70).astype(np.float16)
    out = k.emulate(torch.from_numpy(x), torch.from_numpy(h))
    assert torch.equal(out["C"].view(torch.int16), torch.from_numpy(x).bfloat16().view(torch.int16))
    np.testing.assert_array_equal(out["D"].numpy(), h.astype(np.float32) * 2)


@pytest.mark.parametrize("backend", BACKENDS)
def test_bf16_accumulator_rounds_at_every_store(backend):
    """``c[i] += a[i, k]`` with c bfloat16: each step computed in float32 and
    stored rounded (plain, vectorised over i, accumulated locally)."""
    x = torch.from_numpy(RNG.standard_normal((20, 37)).astype(np.float32)).bfloat16()
    ref = torch.zeros(20, dtype=torch.bfloat16)
    for kk in range(37):
        ref = (ref.float() + x[:, kk].float()).bfloat16()
    for sched in range(3):
        f = tp.Function(f"accbf{sched}", params=["N", "K"])
        i, k = f.var("i", 0, "N"), f.var("k", 0, "K")
        a = f.input("A", ("N", "K"), tp.bfloat16)
        c = f.computation("c", [i], 0.0, dtype=tp.bfloat16)
        c[i] += a[i, k]
        if sched == 1:
            c.update.interchange(i, k)
            c.update.vectorize(i, 16)
        if sched == 2:
            c.update.accumulate_locally(k, allow_reassociation=True)
        assert torch.equal(f.compile(backend)(x).view(torch.int16), ref.view(torch.int16))

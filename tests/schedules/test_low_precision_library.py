"""The library in reduced precision: schedules.gemm / batched_gemm on
bfloat16 and float16 (float32 accumulation, torch's result dtype) and
schedules.gemm_int8 (torch._int_mm's contract, exact), on both CPU backends,
with and without the host's dot-product instructions."""
import numpy as np
import pytest

import schedules
from codegen import target
from schedules.blocks import dot_gemm

torch = pytest.importorskip("torch")

RNG = np.random.default_rng(3)


def close_to_fp32(out, a, b):
    """bf16/fp16 tolerance: the float32 product rounded once to the format."""
    ref = a.double() @ b.double()
    rel = 1e-2 if out.dtype == torch.bfloat16 else 2e-3
    np.testing.assert_allclose(out.double().numpy(), ref.numpy(), rtol=rel,
                               atol=rel * float(ref.abs().max()))


@pytest.mark.parametrize("dtype", ["bfloat16", "float16"])
def test_gemm_low_precision(dtype):
    t = getattr(torch, dtype)
    a = torch.from_numpy(RNG.standard_normal((21, 38)).astype(np.float32)).to(t)
    b = torch.from_numpy(RNG.standard_normal((38, 35)).astype(np.float32)).to(t)
    out = schedules.gemm(a, b)
    assert out.dtype == (a @ b).dtype == t and out.shape == (21, 35)
    close_to_fp32(out, a, b)
    a3, b3 = a[:20].reshape(2, 10, 38), torch.stack([b, b.flip(0)])
    out3 = schedules.batched_gemm(a3, b3)
    assert out3.dtype == t
    for i in range(2):
        close_to_fp32(out3[i], a3[i], b3[i])


def test_gemm_float16_numpy_and_refusals():
    h = RNG.standard_normal((9, 20)).astype(np.float16)
    g = RNG.standard_normal((20, 17)).astype(np.float16)
    out = schedules.gemm(h, g)
    assert isinstance(out, np.ndarray) and out.dtype == np.float16
    close_to_fp32(torch.from_numpy(out), torch.from_numpy(h), torch.from_numpy(g))
    with pytest.raises(TypeError, match="same dtype"):            # torch refuses it too
        schedules.gemm(torch.ones(2, 3).bfloat16(), torch.ones(3, 2).half())
    with pytest.raises(TypeError, match="a: expected .*int8"):
        schedules.gemm_int8(torch.ones(2, 3), torch.ones(3, 2))
    with pytest.raises(ValueError, match="algo='dot'|needs float32|GemmParams"):
        schedules.gemm(torch.ones(2, 3).bfloat16(), torch.ones(3, 2).bfloat16(),
                       params=schedules.gemm_params(2, 2, 3))


def test_gemm_int8_is_torch_int_mm():
    a = torch.from_numpy(RNG.integers(-128, 128, (37, 53), dtype=np.int8))
    b = torch.from_numpy(RNG.integers(-128, 128, (53, 40), dtype=np.int8))
    a[0, :] = -128                                  # the extremes, where a + 128 is 0 / 255
    b[:, 0] = -128
    a[1, :] = 127
    out = schedules.gemm_int8(a, b)
    assert out.dtype == torch.int32 and torch.equal(out, torch._int_mm(a, b))
    an, bn = a.numpy(), b.numpy()
    np.testing.assert_array_equal(schedules.gemm_int8(an, bn), an.astype(np.int32) @ bn.astype(np.int32))
    empty = schedules.gemm_int8(torch.ones(3, 0, dtype=torch.int8), torch.ones(0, 5, dtype=torch.int8))
    assert empty.shape == (3, 5) and not empty.any()


@pytest.mark.parametrize("backend", ["cpu", "llvm"])
@pytest.mark.parametrize("dtype", ["bfloat16", "int8"])
def test_dot_gemm_kernel_with_and_without_the_instruction(backend, dtype, monkeypatch):
    """The library's kernel on both backends: with the host's instruction (when
    it has it) and pinned without, the same results."""
    if dtype == "int8":
        a = torch.from_numpy(RNG.integers(-128, 128, (9, 22), dtype=np.int8))
        b = torch.from_numpy(RNG.integers(-128, 128, (22, 32), dtype=np.int8))
    else:
        a = torch.from_numpy(RNG.standard_normal((9, 22)).astype(np.float32)).bfloat16()
        b = torch.from_numpy(RNG.standard_normal((22, 32)).astype(np.float32)).bfloat16()
    flag = "avx512_vnni" if dtype == "int8" else "avx512_bf16"
    spelled = "dpbusd" if dtype == "int8" else "dpbf16"
    native = dot_gemm.function(9, 32, 22, dtype).compile(backend)
    assert (spelled in native.source) == (target.has(flag) and target.vector_bits() >= 512)
    monkeypatch.setenv(target.ENV, "avx512_bf16=0,avx512_vnni=0")
    plain = dot_gemm.function(9, 32, 22, dtype).compile(backend)
    assert "dpbusd" not in plain.source and "dpbf16" not in plain.source
    x, y = native(a, b), plain(a, b)
    if dtype == "int8":
        assert torch.equal(x, torch._int_mm(a, b)) and torch.equal(y, x)
    else:
        close_to_fp32(x, a, b)
        close_to_fp32(y, a, b)


@pytest.mark.parametrize("backend", ["cpu", "llvm"])
def test_dot_gemm_float32_io_rounds_a_and_keeps_the_sums(backend, monkeypatch):
    """float32_io (a recurrent layer's input projection): float32 A rounded
    to bfloat16 by the kernel (to nearest even: a tie and a NaN in A), the
    float32 sums returned unrounded; with and without vdpbf16ps."""
    a = RNG.standard_normal((7, 21)).astype(np.float32)
    a[0, 0] = np.float32(1 + 2 ** -8)           # a tie: rounds to 1.0 (even)
    a[0, 1] = np.float32(1 + 3 * 2 ** -8)       # a tie: rounds up to 1 + 2^-6
    a[6, 20] = np.nan                           # row 6's sums NaN, the others not
    b = torch.from_numpy(RNG.standard_normal((21, 35)).astype(np.float32)).bfloat16()
    rounded = torch.from_numpy(a).bfloat16()
    assert rounded[0, 0] == 1 and rounded[0, 1] == 1 + 2 ** -6
    ref = (rounded.double() @ b.double()).numpy()
    outs = [dot_gemm.function(7, 35, 21, "bfloat16", float32_io=True).compile(backend)(a, b)]
    monkeypatch.setenv(target.ENV, "avx512_bf16=0")
    plain = dot_gemm.function(7, 35, 21, "bfloat16", float32_io=True).compile(backend)
    assert "dpbf16" not in plain.source
    outs.append(plain(a, b))
    for out in outs:
        out = np.asarray(out)
        assert out.dtype == np.float32 and out.shape == (7, 35)
        assert np.isnan(out[6]).all() and not np.isnan(out[:6]).any()
        # float32 sums of exact products: a few float32 roundings, not bf16's
        np.testing.assert_allclose(out[:6], ref[:6], rtol=1e-5, atol=1e-5 * np.abs(ref[:6]).max())
    with pytest.raises(ValueError, match="float32_io"):
        dot_gemm.function(2, 2, 4, "int8", float32_io=True)


@pytest.mark.parametrize("dtype", ["bfloat16", "int8"])
def test_dot_gemm_blocks_with_remainders(dtype):
    """Small tiles on odd sizes: several column panels, row blocks and
    k-blocks, each with a partial last one (and a last k-step short of its
    pair / quadruple), the initial values set per block; and all of k in one
    block (bfloat16: batched)."""
    n, m, k = 13, 40, 14
    if dtype == "int8":
        a = torch.from_numpy(RNG.integers(-128, 128, (2, n, k), dtype=np.int8))
        b = torch.from_numpy(RNG.integers(-128, 128, (2, k, m), dtype=np.int8))
    else:
        a = torch.from_numpy(RNG.standard_normal((2, n, k)).astype(np.float32)).bfloat16()
        b = torch.from_numpy(RNG.standard_normal((2, k, m)).astype(np.float32)).bfloat16()
    # kc=2: several k-blocks; kc=8: all of k in one block (initial values per register block)
    for kc in (2, 8):
        tiles = dict(mr=3, nv=1, kc=kc, mc=6, nc=32)
        assert dot_gemm.tiles(m, k, dtype, **tiles)["parallel"] == "jc"
        if dtype == "int8":
            outs = [dot_gemm.function(n, m, k, dtype, **tiles).compile()(a[0], b[0])]
            pairs = [(a[0], b[0])]
        else:
            outs, pairs = dot_gemm.function(n, m, k, dtype, batch=2, **tiles).compile()(a, b), zip(a, b)
        for out, (x, y) in zip(outs, pairs):
            if dtype == "int8":
                assert torch.equal(out, torch._int_mm(x.contiguous(), y.contiguous()))
            else:
                close_to_fp32(out, x, y)


@pytest.mark.parametrize("dtype", ["bf16", "int8"])
def test_bench_gemm_dtype_smoke(dtype, tmp_path, capsys):
    """``tiramisu-py bench gemm --dtype ...`` on tiny sizes: every implementation
    runs and is checked; the header names the dot-product instructions."""
    import json

    import tiramisu_py_command as cli
    path = tmp_path / "r.json"
    assert cli.main(["bench", "gemm", "--quick", "--dtype", dtype, "--shapes", "0", "--threads",
                     "1", "--repeats", "1", "--json", str(path)]) == 0
    report = json.loads(path.read_text())
    (case,) = report["cases"]
    impls = case["impls"]
    assert "tiramisu_py" in impls and "torch" in impls
    for r in impls.values():
        assert r["1"]["failure"] is None
    if dtype == "int8":
        assert impls["tiramisu_py"]["1"]["error"] == 0
    flags = [f for f in ("avx512_bf16", "avx512_vnni") if target.has(f)]
    assert all(f in report["machine"]["simd"] for f in flags)
    assert "SIMD" in capsys.readouterr().out


@pytest.mark.parametrize("dtype", ["bfloat16", "float16"])
def test_conv2d_low_precision(dtype):
    """conv2d in bf16/fp16 (the direct solver, float32 sums, the result rounded
    once to the inputs' dtype, as torch's); the other solvers say why not."""
    F = torch.nn.functional
    t = getattr(torch, dtype)
    x = torch.from_numpy(RNG.standard_normal((2, 5, 9, 11)).astype(np.float32)).to(t)
    w = torch.from_numpy(RNG.standard_normal((7, 5, 3, 3)).astype(np.float32)).to(t)
    b = torch.from_numpy(RNG.standard_normal(7).astype(np.float32)).to(t)
    out = schedules.conv2d(x, w, b, padding=1)
    assert out.dtype == F.conv2d(x.float(), w.float()).to(t).dtype == t
    ref = F.conv2d(x.double(), w.double(), b.double(), padding=1)
    rel = 1e-2 if dtype == "bfloat16" else 2e-3
    np.testing.assert_allclose(out.double().numpy(), ref.numpy(), rtol=rel,
                               atol=rel * float(ref.abs().max()))
    xd = x[:1, :4].contiguous()
    wd = w[:4, :1].contiguous()
    out = schedules.conv2d(xd, wd, None, stride=2, groups=4)       # depthwise
    ref = F.conv2d(xd.double(), wd.double(), None, stride=2, groups=4)
    np.testing.assert_allclose(out.double().numpy(), ref.numpy(), rtol=rel,
                               atol=rel * float(ref.abs().max()))
    with pytest.raises(ValueError, match="needs float32"):
        schedules.conv2d(x, w, b, algo="spatial_pack")
    with pytest.raises(TypeError, match="same dtype"):
        schedules.conv2d(x, w.float(), b)

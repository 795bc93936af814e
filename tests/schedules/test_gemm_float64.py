"""The library GEMM in float64 (PolyBench is double precision): the same
BLIS schedule over float64 arrays (lanes and cache budgets for 8-byte
elements), checked by compile() like the float32 one; both operands of one
dtype; CUDA stays float32 and says so."""
from __future__ import annotations

import numpy as np
import pytest

import schedules
from schedules.blocks.blis import default_params
from schedules.host import host


@pytest.mark.parametrize("shape", [(37, 29, 45), (8, 8, 8), (130, 70, 300), (3, 0, 4)])
def test_gemm_float64_matches_numpy(shape):
    n, m, k = shape
    rng = np.random.default_rng(0)
    a, b = rng.standard_normal((n, k)), rng.standard_normal((k, m))
    c = schedules.gemm(a, b)
    assert c.dtype == np.float64 and c.shape == (n, m)
    np.testing.assert_allclose(c, a @ b, rtol=1e-12, atol=1e-12)


def test_batched_gemm_float64():
    rng = np.random.default_rng(1)
    a, b = rng.standard_normal((3, 5, 6)), rng.standard_normal((3, 6, 7))
    c = schedules.batched_gemm(a, b)
    assert c.dtype == np.float64
    np.testing.assert_allclose(c, a @ b, rtol=1e-12, atol=1e-12)


def test_gemm_float64_torch():
    torch = pytest.importorskip("torch", reason="torch is optional")
    a, b = torch.randn(9, 4, dtype=torch.float64), torch.randn(4, 6, dtype=torch.float64)
    c = schedules.gemm(a, b)
    assert c.dtype == torch.float64
    torch.testing.assert_close(c, a @ b)


def test_gemm_dtypes_must_agree():
    with pytest.raises(TypeError, match="b: expected float64, got float32"):
        schedules.gemm(np.ones((2, 2)), np.ones((2, 2), np.float32))
    with pytest.raises(TypeError, match="a: expected float32 or float64 or bfloat16 or float16, got int64"):
        schedules.gemm(np.ones((2, 2), np.int64), np.ones((2, 2)))


def test_float64_tiles_use_eight_byte_lanes():
    p32 = default_params(512, 512, 512, itemsize=4)
    p64 = default_params(512, 512, 512, itemsize=8)
    assert p64.vector == host().lanes(8) and p32.vector == host().lanes(4)
    assert p64.nr == p32.nr // 2

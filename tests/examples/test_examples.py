"""Every example compiles and matches an independent reference on random inputs."""
import os

import numpy as np
import pytest

from examples import conv2d, conv_relu_maxpool, gemm, jacobi2d, lstm, sparse_conv, trisolv

RNG = np.random.default_rng(1234)
pytestmark = pytest.mark.usefixtures("backend")     # every test on the C and LLVM backends


@pytest.fixture(scope="module")
def kernels():
    return {}


def kernel(kernels, module, target=None):
    target = target or os.environ["TIRAMISU_PY_TARGET"]
    if (module.__name__, target) not in kernels:
        kernels[module.__name__, target] = module.build().compile(target)
    return kernels[module.__name__, target]


@pytest.mark.parametrize("n,m,k", [(1, 1, 1), (17, 5, 33), (64, 48, 40)])
def test_gemm(kernels, n, m, k):
    a = RNG.standard_normal((n, k), dtype=np.float32)
    b = RNG.standard_normal((k, m), dtype=np.float32)
    out = kernel(kernels, gemm)(a, b)
    assert out.shape == (n, m) and out.dtype == np.float32
    np.testing.assert_allclose(out, gemm.reference(a, b), rtol=1e-4, atol=1e-4)


def test_gemm_source_is_readable(kernels):
    src = kernel(kernels, gemm, "c").source
    assert "for (int64_t k = 0; k < K; k++)" in src
    assert "C[i][j] = C[i][j] + A[i][k] * B[k][j];" in src


@pytest.mark.parametrize("shape", [(1, 1, 1, 1, 1), (2, 3, 4, 9, 7), (1, 5, 2, 4, 12)])
def test_conv2d(kernels, shape):
    n, cin, cout, h, w = shape
    args = conv2d.random_inputs(n, cin, cout, h, w, seed=shape[-1])
    out = kernel(kernels, conv2d)(*args)
    np.testing.assert_allclose(out, conv2d.reference(*args), rtol=1e-4, atol=1e-4)


@pytest.mark.parametrize("h,w", [(10, 9), (2, 2), (7, 12)])
def test_conv_relu_maxpool(kernels, h, w):
    args = conv2d.random_inputs(2, 3, 4, h, w, seed=h)
    out = kernel(kernels, conv_relu_maxpool)(*args)
    assert out.shape == (2, 4, h // 2, w // 2)
    np.testing.assert_allclose(out, conv_relu_maxpool.reference(*args), rtol=1e-4, atol=1e-4)


@pytest.mark.parametrize("n", [1, 2, 40])
def test_trisolv(kernels, n):
    L, b = trisolv.random_inputs(n, seed=n)
    out = kernel(kernels, trisolv)(L, b)
    np.testing.assert_allclose(out, trisolv.reference(L, b), rtol=1e-10, atol=1e-12)
    np.testing.assert_allclose(L @ out, b, rtol=1e-9, atol=1e-9)


def test_trisolv_loops_are_triangular(kernels):
    assert "for (int64_t j = 0; j < i; j++)" in kernel(kernels, trisolv, "c").source


@pytest.mark.parametrize("n,T", [(3, 1), (12, 5), (30, 10)])
def test_jacobi2d(kernels, n, T):
    A, B = jacobi2d.random_inputs(n, seed=n)
    ra, rb = jacobi2d.reference(A, B, T)
    out = kernel(kernels, jacobi2d)(A=A, B=B, T=T)
    assert out["A"] is A and out["B"] is B          # updated in place
    np.testing.assert_allclose(A, ra, rtol=1e-12, atol=1e-12)
    np.testing.assert_allclose(B, rb, rtol=1e-12, atol=1e-12)


@pytest.mark.parametrize("density", [0.0, 0.05, 0.3, 0.7, 1.0])
def test_sparse_conv_matches_dense(kernels, density):
    inp, weights, bias = sparse_conv.random_inputs(density=density, seed=int(density * 100))
    out = sparse_conv.run(kernel(kernels, sparse_conv), inp, weights, bias)
    np.testing.assert_allclose(out, conv2d.reference(inp, weights, bias), rtol=1e-4, atol=1e-4)


def test_sparse_conv_bound_is_data_dependent(kernels):
    src = kernel(kernels, sparse_conv, "c").source
    # the nonzero loop runs over exactly the row's range, not a guarded full range
    assert "for (int64_t j = (int64_t)rowptr[co]; j < (int64_t)rowptr[co + 1]; j++)" in src


@pytest.mark.parametrize("layers,T,B,H", [(1, 1, 1, 1), (3, 6, 2, 8), (2, 9, 3, 16)])
def test_lstm(kernels, layers, T, B, H):
    args = lstm.random_inputs(layers, T, B, H, seed=T)
    out = lstm.run(kernel(kernels, lstm), *args)
    np.testing.assert_allclose(out, lstm.reference(*args), rtol=1e-4, atol=2e-5)


def test_lstm_matches_torch(kernels):
    torch = pytest.importorskip("torch")
    layers, T, B, H = 3, 7, 2, 8
    x, W, U, bias = lstm.random_inputs(layers, T, B, H, seed=5)
    net = torch.nn.LSTM(H, H, num_layers=layers)
    with torch.no_grad():
        for l in range(layers):
            getattr(net, f"weight_ih_l{l}").copy_(torch.from_numpy(W[l]))
            getattr(net, f"weight_hh_l{l}").copy_(torch.from_numpy(U[l]))
            getattr(net, f"bias_ih_l{l}").copy_(torch.from_numpy(bias[l]))
            getattr(net, f"bias_hh_l{l}").zero_()
        ref, _ = net(torch.from_numpy(x))
    out = lstm.run(kernel(kernels, lstm), x, W, U, bias)
    np.testing.assert_allclose(out, ref.numpy(), rtol=1e-4, atol=2e-5)


def test_examples_main_run(capsys):
    for module in (gemm, conv2d, conv_relu_maxpool, trisolv, jacobi2d, sparse_conv, lstm):
        module.main() if module is not gemm else module.main(n=32)
    text = capsys.readouterr().out
    errors = [float(line.rsplit(":", 1)[1]) for line in text.splitlines() if "error vs" in line]
    assert len(errors) == 11 and max(errors) < 1e-3      # lstm prints two

"""``a^T @ b`` as sums of outer products (the weight gradients of a linear
layer and an LSTM layer): NumPy's product for every blocking case, and
``tiramisu::linear``'s backward taking it where it may run directly."""
from __future__ import annotations

import numpy as np
import pytest

from schedules.blocks import outer_gemm


# (k, m, n): one chunk; chunks of K with a remainder (kc=8); rows not a
# multiple of the row block; fewer columns than a vector; between one and two;
# one chunk of several blocks of rows and columns, the last ones partial (each
# block of C zeroed right before its sums)
@pytest.mark.parametrize("k,m,n,kc", [(5, 16, 32, 256), (19, 8, 40, 8), (7, 13, 5, 256),
                                      (3, 4, 20, 2), (1, 1, 1, 256), (2, 44, 100, 256),
                                      (4, 24, 70, 256)])
def test_outer_products_are_numpys_product(k, m, n, kc):
    rng = np.random.default_rng(k * m * n)
    a, b = rng.standard_normal((k, m), np.float32), rng.standard_normal((k, n), np.float32)
    c = outer_gemm.function(k, m, n, kc=kc).compile()(a=a, b=b)
    np.testing.assert_allclose(c, a.T.astype(np.float64) @ b, rtol=1e-5, atol=1e-5)
    np.testing.assert_allclose(outer_gemm.product(a, b), c, rtol=1e-6, atol=1e-6)


@pytest.mark.parametrize("op", ["linear", "gemm"])
def test_linear_backward_takes_it_where_it_runs_directly(monkeypatch, op):
    """``tiramisu::linear``'s weight gradient, and ``tiramisu::gemm``'s of its
    second operand (``convert``'s ``nn.Linear``: ``x @ weight.t()``)."""
    torch = pytest.importorskip("torch", reason="tiramisu::linear is a torch op")
    import schedules.torch_fused_ops  # noqa: F401  (registers torch.ops.tiramisu.linear)
    used = []
    real = outer_gemm.product
    monkeypatch.setattr(outer_gemm, "product", lambda a, b: used.append(a.shape) or real(a, b))
    g = torch.Generator().manual_seed(0)
    x, w, bias = (torch.randn(*s, generator=g) for s in ((3, 5, 12), (20, 12), (20,)))
    def call(x, w, b=None):
        if op == "linear":
            return torch.ops.tiramisu.linear(x, w, b)
        y = torch.ops.tiramisu.gemm(x.reshape(-1, x.shape[-1]), w.t()).reshape(*x.shape[:-1], -1)
        return y if b is None else y + b
    grads = []
    for linear in (call, torch.nn.functional.linear):
        xs, ws, bs = (t.clone().requires_grad_() for t in (x, w, bias))
        linear(xs, ws, bs).pow(2).sum().backward()
        grads.append((xs.grad, ws.grad, bs.grad))
    assert used == [(15, 20)]                   # the gradient's rows: 3 x 5
    for ours, want in zip(*grads):
        torch.testing.assert_close(ours, want, rtol=1e-4, atol=1e-4)
    # a gradient of the gradient: the op's backward through the GEMM op, recorded
    xs, ws = x.clone().requires_grad_(), w.clone().requires_grad_()
    gw, = torch.autograd.grad(call(xs, ws).sum(), ws, create_graph=True)
    assert used == [(15, 20)] and gw.requires_grad
    gw.sum().backward()
    assert xs.grad is not None

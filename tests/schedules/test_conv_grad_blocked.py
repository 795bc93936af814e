"""The blocked weight gradient of a dense conv (the taps' sums in registers
over every pixel, no column matrix): torch's gradient for strides, padding,
dilation, small and large kernels, and taken by the op's backward where it
applies (enough pixels, Co a multiple of a vector), the GEMMs elsewhere."""
from __future__ import annotations

import pytest

from schedules.problems.conv import ConvShape
from schedules.solvers import conv_grad

torch = pytest.importorskip("torch", reason="compares with torch's weight gradient")
import schedules.torch_ops  # noqa: E402,F401  (registers torch.ops.tiramisu)


# (n, ci, h, w, co, k, stride, padding, dilation): a 3x3 kernel (every tap in
# registers), a 7x7 stride-2 stem (a row of taps at a time), a dilated 2x2
CASES = [(2, 5, 9, 11, 16, 3, 1, 1, 1), (1, 3, 20, 18, 32, 7, 2, 3, 1),
         (3, 4, 10, 10, 8, 2, 1, 1, 2)]


@pytest.mark.parametrize("case", CASES, ids=lambda c: "x".join(map(str, c)))
def test_blocked_kernel_is_torchs_gradient(case):
    n, ci, h, w, co, k, stride, padding, dilation = case
    s = ConvShape(n, ci, h, w, co, k, k, stride, padding, dilation)
    g = torch.Generator().manual_seed(0)
    x, gy = torch.randn(n, ci, h, w, generator=g), torch.randn(n, co, s.ho, s.wo, generator=g)
    ours = conv_grad.blocked_grad_weight(s).compile()(data=x, grad=gy)
    want = torch.nn.grad.conv2d_weight(x, (co, ci, k, k), gy, stride, padding, dilation)
    torch.testing.assert_close(ours, want, rtol=1e-4, atol=1e-4)


def test_where_the_blocked_kernel_applies():
    """Enough pixels over the images (else a block sums too briefly), one
    group, Co a multiple of a vector (or of half of one, at least 8)."""
    assert conv_grad.blocked_applies(ConvShape(2, 64, 56, 56, 64, 3, 3, 1, 1))
    assert not conv_grad.blocked_applies(ConvShape(2, 512, 7, 7, 512, 3, 3, 1, 1))   # 98 px
    assert conv_grad.blocked_applies(ConvShape(16, 512, 7, 7, 512, 3, 3, 1, 1))
    assert not conv_grad.blocked_applies(ConvShape(2, 8, 16, 16, 12, 3, 3, 1, 1))   # Co 12
    assert not conv_grad.blocked_applies(ConvShape(2, 8, 16, 16, 16, 3, 3, 1, 1, 1, 2))
    with pytest.raises(ValueError, match="blocked_grad_weight: needs groups=1 and Co a multiple"):
        conv_grad.blocked_grad_weight(ConvShape(2, 8, 16, 16, 12, 3, 3, 1, 1))


def test_the_ops_backward_takes_it_and_matches_torch(monkeypatch):
    """``torch.ops.tiramisu.conv2d``'s backward builds the blocked kernel for
    a shape it applies to; the gradients (input, weight, bias) are torch's."""
    built = []
    real = conv_grad.blocked_grad_weight
    monkeypatch.setattr(conv_grad, "blocked_grad_weight", lambda s: built.append(s) or real(s))
    g = torch.Generator().manual_seed(1)
    x = torch.randn(2, 6, 24, 25, generator=g)       # 12 x 13 outputs: 312 pixels
    w, b = torch.randn(16, 6, 3, 3, generator=g), torch.randn(16, generator=g)
    grads = []
    for conv in (torch.ops.tiramisu.conv2d, torch.conv2d):
        xs, ws, bs = (t.clone().requires_grad_() for t in (x, w, b))
        y = conv(xs, ws, bs, [2, 2], [1, 1], [1, 1], 1)
        y.backward(torch.ones_like(y))
        grads.append((xs.grad, ws.grad, bs.grad))
    assert [(s.n, s.ci, s.co, s.sh) for s in built] == [(2, 6, 16, 2)]
    for ours, want in zip(*grads):
        torch.testing.assert_close(ours, want, rtol=1e-4, atol=1e-4)

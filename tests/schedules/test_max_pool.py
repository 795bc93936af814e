"""schedules.max_pool2d against torch.nn.functional.max_pool2d (windows,
ceil mode, NaN, refusals) and the converted nn.MaxPool2d (ours in an
inference forward, torch's where a gradient is recorded)."""
import copy

import numpy as np
import pytest

import schedules

torch = pytest.importorskip("torch", reason="torch is an optional extra; its tests need it")
import schedules.nn  # noqa: E402  (needs torch)
F = torch.nn.functional
nn = torch.nn

CASES = [((7, 9), 3, 2, 1, 1, False), ((7, 9), 3, 2, 1, 1, True), ((8, 8), 2, None, 0, 1, False),
         ((9, 6), (3, 2), (2, 1), (1, 0), 1, True), ((11, 11), 3, 2, 1, 2, False),
         ((11, 12), 2, 3, 1, 2, True), ((5, 5), 1, 1, 0, 1, False), ((40, 36), 3, 2, 1, 1, False),
         ((6, 7), 3, [], 0, 1, False), ((13, 13), [3], [2], [1], [1], True)]


@pytest.mark.parametrize("hw, k, s, p, d, ceil", CASES)
def test_max_pool2d_is_torchs(hw, k, s, p, d, ceil):
    x = torch.randn(2, 3, *hw)
    x[0, 0, 1, 1] = float("nan")
    x[1, 2, 0, :] = float("-inf")
    x[1, 1] = 1.0                                    # ties: torch's index is the first
    ref, ref_i = F.max_pool2d(x, k, s, p, d, ceil, return_indices=True)
    y = schedules.max_pool2d(x, k, s, p, d, ceil)
    assert y.shape == ref.shape
    torch.testing.assert_close(y, ref, rtol=0, atol=0, equal_nan=True)
    y2, y_i = schedules.max_pool2d(x, k, s, p, d, ceil, return_indices=True)
    assert y_i.dtype == torch.int64 and torch.equal(y_i, ref_i)
    torch.testing.assert_close(y2, ref, rtol=0, atol=0, equal_nan=True)
    yn = schedules.max_pool2d(x.numpy(), k, s, p, d, ceil)
    assert isinstance(yn, np.ndarray)
    np.testing.assert_array_equal(yn, ref.numpy())
    torch.testing.assert_close(schedules.max_pool2d(x[1], k, s, p, d, ceil), ref[1],
                               rtol=0, atol=0)


def test_max_pool2d_refuses_what_torch_refuses():
    x = torch.randn(1, 2, 6, 6)
    for kwargs in [dict(kernel_size=3, stride=1, padding=2),      # padding over half the window
                   dict(kernel_size=7), dict(kernel_size=3, dilation=3),   # output too small
                   dict(kernel_size=0), dict(kernel_size=3, stride=0),
                   dict(kernel_size=3, padding=-1), dict(kernel_size=(3, 3, 3))]:
        with pytest.raises((RuntimeError, ValueError)):
            F.max_pool2d(x, **kwargs)
        with pytest.raises(ValueError):
            schedules.max_pool2d(x, **kwargs)
    for bad in (torch.randn(2, 2, 2, 6, 6), torch.randn(1, 0, 6, 6), torch.randn(1, 2, 0, 6)):
        with pytest.raises(RuntimeError):
            F.max_pool2d(bad, 2)
        with pytest.raises(ValueError, match="input"):
            schedules.max_pool2d(bad, 2)
    with pytest.raises(TypeError, match="ceil_mode"):
        schedules.max_pool2d(x, 2, ceil_mode="yes")
    with pytest.raises(TypeError, match="return_indices"):
        schedules.max_pool2d(x, 2, return_indices=1)
    with pytest.raises(TypeError, match="float32"):
        schedules.max_pool2d(x.double(), 2)
    assert schedules.max_pool2d(torch.randn(0, 2, 6, 6), 2).shape == (0, 2, 3, 3)
    out, idx = schedules.max_pool2d(np.zeros((0, 2, 6, 6), np.float32), 2, return_indices=True)
    assert out.shape == idx.shape == (0, 2, 3, 3) and idx.dtype == np.int64


def _net():
    return nn.Sequential(nn.Conv2d(3, 8, 3, padding=1), nn.BatchNorm2d(8), nn.ReLU(),
                         nn.MaxPool2d(3, 2, 1), nn.Conv2d(8, 4, 1), nn.MaxPool2d(2, ceil_mode=True))


def test_converted_max_pool_runs_ours_with_torchs_gradients(monkeypatch):
    torch.manual_seed(0)
    model = _net()
    ours = schedules.nn.convert(copy.deepcopy(model))
    assert [r for r in ours.tiramisu_report.converted if r[1] == "MaxPool2d"]
    assert isinstance(ours[3], schedules.nn.MaxPool2d)
    calls = []
    real = schedules.api.max_pool2d
    monkeypatch.setattr(schedules.api, "max_pool2d", lambda *a, **k: calls.append(1) or real(*a, **k))
    x = torch.randn(2, 3, 15, 13)
    model.eval(), ours.eval()
    with torch.no_grad():
        torch.testing.assert_close(ours(x), model(x), rtol=1e-5, atol=1e-5)
    assert len(calls) == 2
    model.train(), ours.train()
    xa, xb = x.clone().requires_grad_(), x.clone().requires_grad_()
    model(xa).square().sum().backward()
    ours(xb).square().sum().backward()               # ours with indices, aten's backward
    assert len(calls) == 4
    torch.testing.assert_close(xb.grad, xa.grad, rtol=1e-4, atol=1e-4)
    ties = torch.ones(1, 2, 6, 6, requires_grad=True)           # every window tied
    pool = schedules.nn.MaxPool2d.from_torch(nn.MaxPool2d(3, 2, 1, return_indices=True))
    out, idx = pool(ties)
    out.sum().backward()
    ref = ties.detach().clone().requires_grad_()
    ref_out, ref_idx = F.max_pool2d(ref, 3, 2, 1, return_indices=True)
    ref_out.sum().backward()
    assert torch.equal(idx, ref_idx) and torch.equal(ties.grad, ref.grad)


@pytest.mark.parametrize("n", [0, 1, 3])
def test_one_kernel_serves_every_batch_size(n):
    x = torch.randn(n, 2, 9, 9)
    torch.testing.assert_close(schedules.max_pool2d(x, 3, 2, 1), F.max_pool2d(x, 3, 2, 1),
                               rtol=0, atol=0)

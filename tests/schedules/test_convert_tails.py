"""``convert``'s chains in a parent's own forward (:func:`schedules.fusion.find_tails`):
``conv -> bn -> add(shortcut) -> act`` and a chain whose activation module
is called more than once become one call of the conv (the parent's forward
rewritten, its modules and ``state_dict`` untouched): torch's values in eval
and training mode and torch's gradients, each spelling of the add, a
shortcut that broadcasts, and the forwards left as written."""
from __future__ import annotations

import copy
import io

import pytest

torch = pytest.importorskip("torch", reason="torch is an optional extra")
from torch import nn  # noqa: E402

import schedules.nn as snn  # noqa: E402
from torch_helpers import ADDS, residual_add  # noqa: E402


class Tail(nn.Module):
    def __init__(self, how, channels=8):
        super().__init__()
        self.how = how
        self.conv1 = nn.Conv2d(channels, channels, 3, padding=1, bias=False)
        self.bn1 = nn.BatchNorm2d(channels)
        self.relu = nn.ReLU(inplace=True)
        self.conv2 = nn.Conv2d(channels, channels, 3, padding=1)
        self.bn2 = nn.BatchNorm2d(channels)
        self.shift = nn.Parameter(torch.randn(1, channels, 1, 1))

    def forward(self, x):
        out = self.relu(self.bn1(self.conv1(x)))
        out = self.bn2(self.conv2(out))
        if self.how in ADDS:
            out = residual_add(self.how, out, x)
        else:                                   # a shortcut that broadcasts
            out = out + self.shift
        return self.relu(out)


def _stats(model):
    torch.manual_seed(0)
    for m in model.modules():
        if isinstance(m, nn.BatchNorm2d):
            m.running_mean.uniform_(-1, 1)
            m.running_var.uniform_(0.3, 2.0)
    return model


@pytest.mark.parametrize("how", ["iadd", "radd", "torch.add", "add_", "broadcast"])
def test_a_residual_tail_is_one_conv_call_with_torch_values_and_gradients(how):
    model = _stats(Tail(how))
    ours = snn.convert(copy.deepcopy(model))
    fused = dict(ours.tiramisu_report.fused)
    assert set(fused) == {"conv1 + bn1 + relu", "conv2 + bn2 + add + relu"}, fused
    assert list(ours.state_dict()) == list(model.state_dict())
    x = torch.randn(2, 8, 7, 7)
    for mode in ("eval", "train", "eval"):
        getattr(model, mode)(), getattr(ours, mode)()
        with torch.no_grad():
            torch.testing.assert_close(ours(x.clone()), model(x.clone()), rtol=2e-5, atol=2e-5)
    for a, b in zip(ours.state_dict().values(), model.state_dict().values()):
        torch.testing.assert_close(a, b, rtol=1e-6, atol=1e-6)     # running stats alike
    for mode in ("train", "eval"):
        getattr(model, mode)(), getattr(ours, mode)()
        model.zero_grad(), ours.zero_grad()
        model(x.clone()).square().sum().backward()
        ours(x.clone()).square().sum().backward()
        for (name, p), q in zip(model.named_parameters(), ours.parameters()):
            torch.testing.assert_close(q.grad, p.grad, rtol=1e-4, atol=1e-4, msg=name)


def test_the_rewritten_block_copies_and_pickles():
    model = _stats(Tail("iadd")).eval()
    ours = snn.convert(copy.deepcopy(model)).eval()
    x = torch.randn(1, 8, 5, 5)
    with torch.no_grad():
        want = model(x.clone())
        torch.testing.assert_close(copy.deepcopy(ours)(x.clone()), want, rtol=2e-5, atol=2e-5)
        buf = io.BytesIO()
        torch.save(ours, buf)
        buf.seek(0)
        back = torch.load(buf, weights_only=False)
        torch.testing.assert_close(back(x.clone()), want, rtol=2e-5, atol=2e-5)


class ModeDependent(Tail):
    def forward(self, x):
        out = self.bn2(self.conv2(x))
        if self.training:
            out = out * 2
        return self.relu(out + x)


class DataDependent(Tail):
    def forward(self, x):
        out = self.bn2(self.conv2(x))
        # (on the input: a training-mode BatchNorm's output sums to 0 up to rounding,
        # which decided the branch apart for two convs rounding apart)
        if x.sum() > 0:
            out = out + x
        return self.relu(out)


@pytest.mark.parametrize("kind", [ModeDependent, DataDependent])
def test_a_forward_that_depends_on_the_mode_or_the_data_stays_as_written(kind):
    model = _stats(kind("iadd"))
    ours = snn.convert(copy.deepcopy(model))
    assert "forward" not in ours.__dict__
    assert not any("add" in names for names, _ in ours.tiramisu_report.fused)
    x = torch.randn(2, 8, 6, 6)
    for mode in ("train", "eval"):
        getattr(model, mode)(), getattr(ours, mode)()
        with torch.no_grad():
            torch.testing.assert_close(ours(x.clone()), model(x.clone()), rtol=2e-5, atol=2e-5)


def test_in_eval_mode_the_shortcut_reaches_the_kernel(monkeypatch):
    """A shortcut of the result's shape goes into the conv call with the
    activation (the residual epilogue); one that broadcasts is added after
    a conv without them (each call the whole path: no layout's plan remembered)."""
    from schedules import torch_ops
    from schedules.core import call_memo
    monkeypatch.setattr(call_memo, "get", lambda key: None)
    seen, real = [], torch_ops.conv2d_then
    monkeypatch.setattr(torch_ops, "conv2d_then", lambda *a: seen.append(
        (a[0], a[9] is not None)) or real(*a))
    for how, want in (("iadd", [("relu", False), ("relu", True)]),
                      ("broadcast", [("relu", False), (None, False)])):
        seen.clear()
        ours = snn.convert(_stats(Tail(how))).eval()
        with torch.no_grad():
            ours(torch.randn(2, 8, 6, 6))
        assert seen == want, (how, seen)


def test_the_rewritten_forward_compiles_whole():
    """``torch.compile(converted, fullgraph=True)`` traces the rewritten
    forward and the tail's conv call: torch's values in both modes."""
    torch._dynamo.reset()
    model = _stats(Tail("iadd"))
    ours = snn.convert(copy.deepcopy(model))
    x = torch.randn(4, 8, 6, 6)
    for mode in ("eval", "train"):
        getattr(model, mode)(), getattr(ours, mode)()
        compiled = torch.compile(ours, fullgraph=True, backend="aot_eager")
        with torch.no_grad():
            torch.testing.assert_close(compiled(x.clone()), model(x.clone()), rtol=2e-5,
                                       atol=2e-5)
    torch._dynamo.reset()

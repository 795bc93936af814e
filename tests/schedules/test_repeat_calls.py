"""Repeated calls of one signature: a kernel's remembered checks (plans), the
conv parse remembered per call, the activation in a conv kernel's epilogue,
and a converted module's forward calling the op's implementation directly.
Each gives the checked path's results and refuses what it refuses."""
import copy

import numpy as np
import pytest

import tiramisu_py as tp
from schedules import api
from schedules.core import arrays as A
from schedules.problems import conv as conv_problem


def _scale():
    f = tp.Function("scale_rows", params=["N", "M"])
    i, j = f.var("i", 0, "N"), f.var("j", 0, "M")
    X, s = f.input("X", ("N", "M"), tp.float32), f.input("s", ("N",), tp.float32)
    f.computation("Y", [i, j], X[i, j] * s[i])
    return f.compile()


# ------------------------------------------------------------ kernel plans
def test_a_kernel_remembers_a_signature_and_still_checks_every_array():
    k = _scale()
    rng = np.random.default_rng(0)
    x, s = rng.standard_normal((3, 5), dtype=np.float32), rng.standard_normal(3, dtype=np.float32)
    for _ in range(2):
        np.testing.assert_array_equal(k(x, s), x * s[:, None])
    assert len(k._plans) == 1                        # one signature, remembered once
    x2 = rng.standard_normal((4, 6), dtype=np.float32)
    np.testing.assert_array_equal(k(X=x2, s=np.ones(4, np.float32)), x2)   # another signature
    with pytest.raises(ValueError, match="'s' has shape"):         # params from X: s must be 3
        k(x, np.ones(4, np.float32))
    with pytest.raises(ValueError, match="not C-contiguous"):
        k(np.asfortranarray(x), s)
    with pytest.raises(TypeError, match="dtype float64"):
        k(x.astype(np.float64), s)
    raw = np.zeros(x.nbytes + 1, np.uint8)[1:].view(np.float32).reshape(3, 5)   # misaligned
    raw[...] = x
    np.testing.assert_array_equal(k(raw, s), x * s[:, None])      # read from an aligned copy
    out = np.empty((3, 5), np.float32)
    k(x, s, Y=out)                                   # an output given: the checked path
    np.testing.assert_array_equal(out, x * s[:, None])
    with pytest.raises(ValueError, match="overlaps"):
        k(x, s, Y=x)


def test_a_kernel_plan_on_torch_tensors():
    torch = pytest.importorskip("torch", reason="torch is an optional extra")
    k = _scale()
    x, s = torch.randn(3, 5), torch.randn(3)
    for _ in range(2):
        y = k(x, s)
        assert isinstance(y, torch.Tensor)
        torch.testing.assert_close(y, x * s[:, None], rtol=0, atol=0)
    with pytest.raises(ValueError, match="not C-contiguous"):
        k(x.t().contiguous().t(), s)
    with pytest.raises(ValueError, match="lazy negated"):
        k(x, torch.randn(3, dtype=torch.complex64).conj().imag)


# ------------------------------------------------------------ parse memo
@pytest.mark.filterwarnings("ignore:Using padding='same'")     # (torch's, about its own copy)
def test_a_conv_call_is_parsed_once_per_signature_and_refusals_repeat():
    torch = pytest.importorskip("torch", reason="torch is an optional extra")
    F = torch.nn.functional
    conv_problem._CALLS.clear()
    x, w, b = torch.randn(2, 3, 8, 7), torch.randn(4, 3, 2, 2), torch.randn(4)
    for _ in range(2):                               # an odd "same": zeros below and right
        torch.testing.assert_close(api.conv2d(x, w, b, padding="same"),
                                   F.conv2d(x, w, b, padding="same"))
        torch.testing.assert_close(api.conv2d(x[0], w, b, 1, 1),       # unbatched
                                   F.conv2d(x[0], w, b, 1, 1))
    assert len(conv_problem._CALLS) == 2
    for _ in range(2):
        with pytest.raises(ValueError, match="stride"):
            api.conv2d(x, w, b, stride=[True, 1])
        with pytest.raises(ValueError, match="groups"):
            api.conv2d(x, w, b, groups=2)
    xn, wn = x.numpy(), w.numpy()
    for _ in range(2):                               # NumPy: its own entry, a NumPy result
        y = api.conv2d(xn, wn, None, 1, 1)
        assert isinstance(y, np.ndarray)
        np.testing.assert_allclose(y, F.conv2d(x, w, None, 1, 1).numpy(), rtol=1e-5, atol=1e-5)
    with pytest.raises(TypeError, match="NumPy arrays or all torch"):
        api.conv2d(xn, w, None, 1, 1)


# ------------------------------------------------------------ epilogue activations
@pytest.mark.parametrize("algo", ["depthwise", "direct", "spatial_pack"])
@pytest.mark.parametrize("activation", ["relu", "relu6"])
def test_conv2d_activation_in_the_epilogue_or_after_is_torchs(monkeypatch, algo, activation):
    torch = pytest.importorskip("torch", reason="torch is an optional extra")
    F = torch.nn.functional
    c = 16
    groups = c if algo == "depthwise" else 1
    x = torch.randn(2, c, 9, 9) * 4
    x[0, 0, 0, 0] = float("nan")
    w, b = torch.randn(c, c // groups, 3, 3), torch.randn(c)
    applied_after = []
    real = A.activate
    monkeypatch.setattr(A, "activate", lambda out, a: applied_after.append(a) or real(out, a))
    y = api.conv2d(x, w, b, 1, 1, 1, groups, algo=algo, activation=activation)
    ref = F.conv2d(x, w, b, 1, 1, 1, groups)
    ref = F.relu6(ref) if activation == "relu6" else F.relu(ref)
    torch.testing.assert_close(y, ref, rtol=1e-5, atol=2e-4, equal_nan=True)
    assert torch.isnan(y).any()                      # a NaN stays NaN, as torch's
    in_kernel = algo in ("depthwise", "spatial_pack")
    assert applied_after == ([] if in_kernel else [activation])
    yn = api.conv2d(x.numpy(), w.numpy(), b.numpy(), 1, 1, 1, groups, algo=algo,
                    activation=activation)
    np.testing.assert_allclose(yn, ref.numpy(), rtol=1e-5, atol=2e-4, equal_nan=True)


def test_conv2d_refuses_an_unknown_activation():
    x, w = np.ones((1, 2, 4, 4), np.float32), np.ones((2, 2, 1, 1), np.float32)
    with pytest.raises(ValueError, match="activation must be one of"):
        api.conv2d(x, w, activation="gelu")
    with pytest.raises(ValueError, match="activation must be one of"):
        api.conv2d(x, w, activation=1)


# ------------------------------------------------------------ module forwards
def test_converted_forward_runs_directly_unless_something_records():
    """Under no_grad a converted chain's forward runs the implementation (no
    op called); under a dispatch mode, and when the input requires a
    gradient, it runs the op: the same values and torch's gradients."""
    torch = pytest.importorskip("torch", reason="torch is an optional extra")
    from torch_helpers import dispatch_recorder

    import schedules.nn

    torch.manual_seed(0)
    nn = torch.nn
    model = nn.Sequential(nn.Conv2d(16, 16, 3, padding=1, groups=16), nn.BatchNorm2d(16),
                          nn.ReLU6(), nn.Conv2d(16, 8, 1), nn.ReLU()).eval()
    for p in model[1].parameters():
        nn.init.uniform_(p, 0.5, 1.5)
    ours = schedules.nn.convert(copy.deepcopy(model))
    x = torch.randn(2, 16, 7, 7) * 4
    with torch.no_grad():
        ref = model(x)
        with torch.profiler.profile() as prof:      # (records op calls, dispatches nothing)
            y = ours(x)
        assert not [e.name for e in prof.events() if e.name.startswith("tiramisu::")]
        with dispatch_recorder() as mode:
            y_op = ours(x)
    assert any("tiramisu.conv2d" in o for o in mode.ops)
    torch.testing.assert_close(y, ref, rtol=1e-5, atol=1e-5)
    torch.testing.assert_close(y_op, y, rtol=0, atol=0)
    xr = x.clone().requires_grad_()
    out = ours(xr)
    assert out.grad_fn is not None                   # recorded through the ops
    out.square().sum().backward()
    xt = x.clone().requires_grad_()
    model(xt).square().sum().backward()
    torch.testing.assert_close(xr.grad, xt.grad, rtol=1e-4, atol=1e-4)


def test_a_recorded_eager_forward_skips_the_ops_dispatch_with_the_ops_gradients():
    """Training a converted conv in plain eager code runs no tiramisu op (an
    autograd.Function with the op's backward); the gradients are torch's,
    and a double backward still exists."""
    torch = pytest.importorskip("torch", reason="torch is an optional extra")
    import schedules.nn

    torch.manual_seed(0)
    nn = torch.nn
    model = nn.Sequential(nn.Conv2d(3, 8, 3, stride=2, padding=1), nn.BatchNorm2d(8),
                          nn.ReLU6(), nn.Conv2d(8, 8, 3, padding=1, groups=8, bias=False))
    ours = schedules.nn.convert(copy.deepcopy(model)).train()
    x = torch.randn(2, 3, 11, 12)
    xa, xb = x.clone().requires_grad_(), x.clone().requires_grad_()
    model(xa).square().sum().backward()
    with torch.profiler.profile() as prof:
        ours(xb).square().sum().backward()
    assert not [e.name for e in prof.events() if e.name.startswith("tiramisu::")]
    torch.testing.assert_close(xb.grad, xa.grad, rtol=1e-4, atol=1e-5)
    for p, q in zip(ours.parameters(), model.parameters()):
        torch.testing.assert_close(p.grad, q.grad, rtol=1e-4, atol=1e-5)
    conv = schedules.nn.Conv2d.from_torch(nn.Conv2d(3, 2, 3, stride=2, padding=1).double())
    xd = torch.randn(1, 3, 6, 5, dtype=torch.float64, requires_grad=True)
    assert torch.autograd.gradgradcheck(conv, (xd,))


# ------------------------------------------------------------ the ops' plans
@pytest.fixture
def plans_made(monkeypatch, tmp_path):
    """A fresh tuning store and call memo; the list of the conv plans made
    (``(op, {types of input, weight, bias})`` each)."""
    pytest.importorskip("torch", reason="torch is an optional extra")
    import schedules.torch_ops  # noqa: F401  (registers the ops)
    from schedules import plans
    from schedules.core import call_memo
    from tiramisu_py import tuning
    monkeypatch.setenv("TIRAMISU_PY_CACHE", str(tmp_path))
    tuning.close()
    call_memo._PLANS.clear()
    made = []
    real = plans.conv
    monkeypatch.setattr(plans, "conv", lambda *a, **k: made.append(
        (a[0], {type(t) for t in a[1:4]})) or real(*a, **k))
    yield made
    tuning.close()


@pytest.mark.parametrize("op", ["conv2d", "conv_relu_maxpool"])
def test_a_repeated_op_call_runs_its_plan_with_the_same_bits(monkeypatch, plans_made, op):
    """A float32 op call of a layout planned before skips the parse, the find
    step and the kernel lookups (schedules.plans); another layout, a
    non-contiguous input, a changed environment or tuning store plans
    again; the results are the full path's bit for bit."""
    import torch
    from schedules.core import call_memo
    from tiramisu_py import tuning
    made = plans_made
    call = getattr(torch.ops.tiramisu, op)
    kw = {"pool": 2} if op == "conv_relu_maxpool" else {}
    torch.manual_seed(0)
    x, w, b = torch.randn(2, 8, 10, 10), torch.randn(8, 1, 3, 3), torch.randn(8)
    with torch.no_grad():
        first = call(x, w, b, [1, 1], [1, 1], [1, 1], 8, **kw)
        x2 = torch.randn(2, 8, 10, 10)
        for _ in range(2):
            y = call(x2, w, b, [1, 1], [1, 1], [1, 1], 8, **kw)
        assert len(made) == 1
        ref = torch.nn.functional.conv2d(x2, w, b, 1, 1, 1, 8)
        if op == "conv_relu_maxpool":
            ref = torch.nn.functional.max_pool2d(ref.relu(), 2)
        torch.testing.assert_close(y, ref, rtol=1e-5, atol=1e-5)
        torch.testing.assert_close(first, call(x, w, b, [1, 1], [1, 1], [1, 1], 8, **kw))
        call(x2.transpose(2, 3), w, b, [1, 1], [1, 1], [1, 1], 8, **kw)    # copied: no plan
        assert len(made) == 1
        call_memo._PLANS.clear()                     # the full path gives the same bits
        torch.testing.assert_close(call(x2, w, b, [1, 1], [1, 1], [1, 1], 8, **kw), y,
                                   rtol=0, atol=0)
        assert len(made) == 2
        monkeypatch.setenv("TIRAMISU_PY_TARGET", "llvm")            # the environment: a new key
        call(x2, w, b, [1, 1], [1, 1], [1, 1], 8, **kw)
        tuning.store().put("test_repeat_calls", "k", {"v": 1})      # a store written
        call(x2, w, b, [1, 1], [1, 1], [1, 1], 8, **kw)
        assert len(made) == 4
    tuning.close()


def test_a_converted_conv_under_no_grad_runs_its_plan_on_plain_tensors(plans_made):
    """A converted ``nn.Conv2d`` called again under ``torch.no_grad`` with an
    input of the same layout runs the plan made at its first call (its
    weights are Parameters that require grad: the memo had refused them, and
    every call parsed and planned again), and the implementation sees plain
    tensors (a Parameter's every method goes through torch's subclass
    dispatch); so does a training call (the forward of its
    ``autograd.Function`` runs with grad mode off); the results and
    gradients are torch's."""
    import torch
    import schedules.nn
    made = plans_made
    torch.manual_seed(0)
    conv = torch.nn.Conv2d(16, 16, 3, padding=1, groups=16)
    module = schedules.nn.Conv2d.from_torch(conv)
    assert module.weight.requires_grad
    with torch.no_grad():
        for _ in range(3):
            x = torch.randn(1, 16, 7, 7)
            torch.testing.assert_close(module(x), conv(x), rtol=1e-5, atol=1e-5)
    assert made == [("conv2d", {torch.Tensor})], made
    for _ in range(2):                  # recorded (autograd.Function): the same plan
        x = torch.randn(1, 16, 7, 7)
        module(x).square().sum().backward()
        conv(x).square().sum().backward()
        torch.testing.assert_close(module.weight.grad, conv.weight.grad, rtol=1e-4, atol=1e-4)
        module.zero_grad(), conv.zero_grad()
    assert made == [("conv2d", {torch.Tensor})], made


def test_the_op_called_with_parameters_plans_on_plain_tensors(plans_made):
    """``torch.ops.tiramisu.conv2d`` called with a module's Parameters (grad
    mode off, or below autograd in a recorded call) hands its implementation
    plain tensors over the same storage, as the eager path does: the plan is
    made for (and the kernel's fast path taken on) plain tensors; the
    results and gradients are torch's."""
    import torch
    made = plans_made
    torch.manual_seed(0)
    conv = torch.nn.Conv2d(8, 8, 3, padding=1)
    w, b = conv.weight, conv.bias
    with torch.no_grad():
        for _ in range(2):
            x = torch.randn(2, 8, 6, 6)
            torch.testing.assert_close(torch.ops.tiramisu.conv2d(x, w, b, [1, 1], [1, 1], [1, 1], 1),
                                       conv(x), rtol=1e-5, atol=1e-5)
    assert made == [("conv2d", {torch.Tensor})], made
    x = torch.randn(2, 8, 6, 6)
    out = torch.ops.tiramisu.conv2d(x, w, b, [1, 1], [1, 1], [1, 1], 1)
    gw, = torch.autograd.grad(out.square().sum(), [w])
    torch.testing.assert_close(gw, torch.autograd.grad(conv(x).square().sum(), [w])[0],
                               rtol=1e-4, atol=1e-4)

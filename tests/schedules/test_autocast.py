"""``torch.autocast("cpu")`` over the tiramisu ops and a converted model: the
ops that aten runs in the autocast dtype (gemm as mm, conv2d, lstm) run our
reduced-precision kernels; every other op runs in float32 whatever its
inputs' dtype (gru too, as aten's); outside autocast nothing changes."""
import copy

import numpy as np
import pytest

torch = pytest.importorskip("torch")

import schedules.torch_ops  # noqa: E402,F401  (registers torch.ops.tiramisu)
from schedules import api  # noqa: E402
from schedules import nn as snn  # noqa: E402

OPS = torch.ops.tiramisu


def close(out, ref, dtype):
    assert out.dtype == ref.dtype == dtype
    rel = 2 ** -7 if dtype == torch.bfloat16 else 2 ** -10
    np.testing.assert_allclose(out.detach().double().numpy(), ref.detach().double().numpy(),
                               rtol=rel, atol=rel * max(1.0, float(ref.abs().max())))


def spy(monkeypatch, name):
    """The dtypes of the first argument of each ``schedules.api.name`` call."""
    seen, real = [], getattr(api, name)

    def wrapped(*args, **kwargs):
        seen.append(args[0].dtype)
        return real(*args, **kwargs)
    monkeypatch.setattr(api, name, wrapped)
    return seen


@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16])
def test_conv2d_and_gemm_run_in_the_autocast_dtype(dtype, monkeypatch):
    torch.manual_seed(0)
    x, w, b = torch.randn(2, 3, 10, 9), torch.randn(6, 3, 3, 3), torch.randn(6)
    a, m = torch.randn(5, 7), torch.randn(7, 4)
    convs, gemms = spy(monkeypatch, "conv2d"), spy(monkeypatch, "gemm")
    with torch.autocast("cpu", dtype=dtype):
        close(OPS.conv2d(x, w, b, padding=[1, 1]),
              torch.nn.functional.conv2d(x, w, b, padding=1), dtype)
        close(OPS.conv2d(x, w, b, padding="same"),
              torch.nn.functional.conv2d(x, w, b, padding="same"), dtype)
        close(OPS.conv2d(x, w, b, stride=[2, 1]),           # not square: float32 sums
              torch.nn.functional.conv2d(x, w, b, stride=(2, 1)), dtype)
        close(OPS.gemm(a, m), torch.mm(a, m), dtype)
    assert convs and set(convs) == {dtype} and gemms == [dtype]
    assert OPS.conv2d(x, w, b).dtype == torch.float32            # outside: unchanged


@pytest.mark.parametrize("cell", ["lstm", "gru"])
def test_recurrent_ops_follow_torchs_autocast_dtype(cell):
    """The LSTM runs in bfloat16 under autocast, the GRU in float32: torch's
    own dtypes there."""
    torch.manual_seed(1)
    m = (torch.nn.LSTM if cell == "lstm" else torch.nn.GRU)(8, 12, 2)
    x = torch.randn(5, 2, 8)
    weights = [p for layer in m.all_weights for p in layer]
    with torch.no_grad(), torch.autocast("cpu", dtype=torch.bfloat16):
        y = getattr(OPS, cell)(x, weights, 2)[0]
        try:
            ref = m(x)[0]
        except RuntimeError as e:       # oneDNN's bfloat16 LSTM needs a CPU with bfloat16
            if "could not create a primitive descriptor" not in str(e):
                raise
            assert y.dtype == torch.bfloat16
            pytest.skip(f"torch's own bfloat16 {cell} (the reference) cannot run on this "
                        f"CPU: {str(e).splitlines()[0]}")
    if cell == "lstm":
        close(y, ref, torch.bfloat16)
    else:           # torch's float32 GRU uses bfloat16 products inside; ours is float32
        assert y.dtype == ref.dtype == torch.float32
        with torch.no_grad():
            np.testing.assert_allclose(y.numpy(), m(x)[0].numpy(), rtol=1e-5, atol=1e-6)


def test_other_ops_run_in_float32():
    """An op without reduced-precision kernels takes bfloat16 inputs under
    autocast (cast to float32), as aten's float32 ops."""
    torch.manual_seed(2)
    x, w = torch.randn(1, 2, 8, 8).bfloat16(), torch.randn(4, 2, 3, 3).bfloat16()
    with torch.autocast("cpu", dtype=torch.bfloat16):
        out = OPS.conv_relu_maxpool(x, w, None, padding=[1, 1], pool=2)
    assert out.dtype == torch.float32
    ref = torch.nn.functional.max_pool2d(torch.relu(torch.nn.functional.conv2d(
        x.float(), w.float(), padding=1)), 2)
    np.testing.assert_allclose(out.numpy(), ref.numpy(), rtol=1e-5, atol=1e-5)
    with pytest.raises(TypeError, match="expected float32 or float64"):
        OPS.conv_relu_maxpool(x, w, None, padding=[1, 1], pool=2)    # (outside: refused)


def test_converted_model_under_autocast_runs_our_bf16_kernels(monkeypatch):
    torch.manual_seed(3)
    model = torch.nn.Sequential(
        torch.nn.Conv2d(3, 8, 3, padding=1), torch.nn.ReLU(), torch.nn.MaxPool2d(2),
        torch.nn.Conv2d(8, 8, 3, padding=1), torch.nn.BatchNorm2d(8), torch.nn.ReLU(),
        torch.nn.Flatten(), torch.nn.Linear(8 * 4 * 4, 10)).eval()
    ours = snn.convert(copy.deepcopy(model))
    x = torch.randn(2, 3, 8, 8)
    convs, gemms = spy(monkeypatch, "conv2d"), spy(monkeypatch, "gemm")
    with torch.no_grad(), torch.autocast("cpu", dtype=torch.bfloat16):
        out, ref = ours(x), model(x)
    assert torch.bfloat16 in convs and gemms == [torch.bfloat16]
    assert out.dtype == ref.dtype == torch.bfloat16
    np.testing.assert_allclose(out.double().numpy(), ref.double().numpy(), rtol=3e-2,
                               atol=3e-2 * float(ref.abs().max()))

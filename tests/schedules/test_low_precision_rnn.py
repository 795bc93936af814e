"""schedules.lstm / gru in bfloat16 and float16: the weights stay in their
format in the packed layouts (half the bytes the recurrence reads), the sums
and states run in float32, the results are rounded once to the input's dtype
(torch's result dtype), on both CPU backends and both CPU schedules."""
import numpy as np
import pytest

import schedules
from schedules.core import prepared
from schedules.weights.rnn import RNNWeights

torch = pytest.importorskip("torch")

RNG = np.random.default_rng(11)


def module(cell, I, H, L, dtype):
    torch.manual_seed(5)
    return (torch.nn.LSTM if cell == "lstm" else torch.nn.GRU)(I, H, L).to(dtype)


def float32_reference(m, x, cell):
    """torch's float32 module on the same (rounded) weights and input: what
    our float32 sums compute before the one rounding of the result."""
    ref = (torch.nn.LSTM if cell == "lstm" else torch.nn.GRU)(m.input_size, m.hidden_size,
                                                              m.num_layers)
    ref.load_state_dict({k: v.float() for k, v in m.state_dict().items()})
    with torch.no_grad():
        return ref(x.float())


def assert_rounded(out, ref, dtype):
    """Within the format's rounding of the float32 result (bf16: 8 bits of
    mantissa, fp16: 11)."""
    assert out.dtype == dtype
    rel = 2 ** -8 if dtype == torch.bfloat16 else 2 ** -11
    np.testing.assert_allclose(out.detach().double().numpy(), ref.detach().double().numpy(),
                               rtol=rel, atol=rel)


@pytest.mark.parametrize("backend", ["cpu", "llvm"])
@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16])
@pytest.mark.parametrize("cell", ["lstm", "gru"])
@pytest.mark.parametrize("schedule", ["layer", "wavefront"])
def test_rnn_reduced_precision_matches_float32_torch(backend, dtype, cell, schedule):
    L, H, T, B = 3, 24, 6, 2
    m = module(cell, H, H, L, dtype)
    x = torch.from_numpy(RNG.standard_normal((T, B, H)).astype(np.float32)).to(dtype)
    h0 = torch.from_numpy(RNG.standard_normal((L, B, H)).astype(np.float32)).to(dtype)
    states = (h0, h0 * 0.5) if cell == "lstm" else h0
    ref = (torch.nn.LSTM if cell == "lstm" else torch.nn.GRU)(H, H, L)
    ref.load_state_dict({k: v.float() for k, v in m.state_dict().items()})
    with torch.no_grad():
        ref_y, ref_s = ref(x.float(), tuple(s.float() for s in states) if cell == "lstm"
                           else states.float())
    if cell == "lstm":
        y, (hn, cn) = schedules.lstm(x, m.all_weights, *states, schedule=schedule, target=backend)
        assert_rounded(cn, ref_s[1], dtype)
        assert_rounded(hn, ref_s[0], dtype)
    else:
        y, hn = schedules.gru(x, m.all_weights, h0, schedule=schedule, target=backend)
        assert_rounded(hn, ref_s, dtype)
    assert_rounded(y, ref_y, dtype)


def test_the_packed_weights_keep_their_format_and_are_prepared_once():
    m = module("lstm", 16, 16, 2, torch.bfloat16)
    W = RNNWeights(m.all_weights, "lstm")
    assert W.dtype == W.wdtype == "bfloat16"
    blk = W.blocking(1)
    wave = W.packed("wavefront", 1)
    assert wave["wh"].itemsize == 2 and wave["wi"].itemsize == 2
    layer = W.packed("layer", 1, blk)[0]
    # both kept in bfloat16: the projection is a product of pairs
    assert layer["w"].itemsize == 2 and layer["wiT"].itemsize == 2
    # the packed bits are the tensor's: unit 0 of gate 0, input 3 of layer 1
    bits = m.weight_hh_l1.view(torch.int16).numpy().view(np.uint16)
    assert wave["wh"][1, 0, 3, 0, 0] == bits[0, 3]
    x = torch.randn(5, 1, 16).bfloat16()
    before = prepared.PREPARATIONS["rnn"]
    y1, _ = schedules.lstm(x, m.all_weights)
    y2, _ = schedules.lstm(x, m.all_weights)
    assert prepared.PREPARATIONS["rnn"] == before + 1 and torch.equal(y1, y2)
    with torch.no_grad():
        m.weight_hh_l0.mul_(0.5)                   # seen by the next call
    y3, _ = schedules.lstm(x, m.all_weights)
    assert prepared.PREPARATIONS["rnn"] == before + 2
    assert_rounded(y3, float32_reference(m, x, "lstm")[0], torch.bfloat16)


def test_numpy_float16_gives_numpy_float16():
    m = module("gru", 8, 12, 2, torch.float16)
    weights = [[p.detach().numpy() for p in layer] for layer in m.all_weights]
    x = RNG.standard_normal((4, 3, 8)).astype(np.float16)
    y, hn = schedules.gru(x, weights)
    assert isinstance(y, np.ndarray) and y.dtype == np.float16 and hn.dtype == np.float16
    assert_rounded(torch.from_numpy(y), float32_reference(m, torch.from_numpy(x), "gru")[0],
                   torch.float16)


def test_sparse_reduced_precision_runs_in_float32():
    m = module("lstm", 16, 16, 2, torch.bfloat16)
    with torch.no_grad():
        for p in m.parameters():
            p.mul_((p.abs() > 0.1).to(p.dtype))
    x = torch.randn(5, 2, 16).bfloat16()
    W = RNNWeights(m.all_weights, "lstm", sparse=True)
    assert W.dtype == "bfloat16" and W.wdtype == "float32"
    y, _ = schedules.lstm(x, m.all_weights, sparse=True)
    assert_rounded(y, float32_reference(m, x, "lstm")[0], torch.bfloat16)


def test_mixed_dtypes_and_gradients_are_refused():
    m = module("lstm", 8, 8, 2, torch.bfloat16)
    with pytest.raises(TypeError, match=r"x: expected a bfloat16 tensor, got torch.float32"):
        schedules.lstm(torch.randn(3, 1, 8), m.all_weights)
    weights = [list(layer) for layer in m.all_weights]
    weights[1][1] = weights[1][1].float()
    with pytest.raises(TypeError, match=r"weights\[1\]\[1\] \(w_hh of layer 1\): expected "
                                        r"bfloat16, the dtype of weights\[0\]\[1\]"):
        schedules.lstm(torch.randn(3, 1, 8).bfloat16(), weights)
    h0 = torch.zeros(2, 1, 8)
    with pytest.raises(TypeError, match="h0: expected a bfloat16 tensor"):
        schedules.lstm(torch.randn(3, 1, 8).bfloat16(), m.all_weights, h0, h0)
    x = torch.randn(3, 1, 8).bfloat16().requires_grad_()
    y, _ = schedules.lstm(x, m.all_weights)
    with pytest.raises(RuntimeError, match="bfloat16/float16"):
        y.sum().backward()


@pytest.mark.parametrize("suite", ["rnn", "conv"])
def test_bench_reduced_precision_smoke(suite, tmp_path):
    """``tiramisu-py bench rnn|conv --dtype bf16`` on tiny sizes: ours in bf16,
    ours in float32 on the same values and torch's, every one checked."""
    import json

    import tiramisu_py_command as cli
    path = tmp_path / "r.json"
    assert cli.main(["bench", suite, "--quick", "--dtype", "bf16", "--shapes", "0", "--threads",
                     "1", "--repeats", "1", "--json", str(path)]) == 0
    (case,) = json.loads(path.read_text())["cases"]
    assert "bfloat16" in case["name"] or "bf16" in case["name"]
    fp32 = "tiramisu_py[float32]" if suite == "rnn" else "tiramisu_py fp32"
    assert {"tiramisu_py", fp32, "torch"} <= set(case["impls"])
    for impl, r in case["impls"].items():
        assert r["1"]["failure"] is None
        assert r["1"]["error"] < (1e-3 if "32" in impl else 5e-2), impl

"""The TIRAMISU paper's VGG and ResNet blocks as library calls
(schedules.vgg_block, schedules.resnet_block, schedules.fold_batchnorm)
against torch, dense and with magnitude-pruned CSR weights, on small sizes;
the paper suite of the benchmarks (``tiramisu-py bench paper --quick``) as a
smoke test.  Nothing is timed."""
import json
import os

os.environ.setdefault("OMP_WAIT_POLICY", "passive")

import numpy as np
import pytest

import schedules

torch = pytest.importorskip("torch", reason="the reference is torch")
F = torch.nn.functional
RNG = np.random.default_rng(16)


def rand(*shape):
    return RNG.standard_normal(shape, dtype=np.float32)


@pytest.mark.parametrize("density", [1.0, 0.1])
def test_vgg_block_matches_torch(density):
    x, w1, b1, w2, b2 = rand(2, 3, 12, 10), rand(8, 3, 3, 3), rand(8), rand(8, 8, 3, 3), rand(8)
    if density < 1:
        w1, w2 = (schedules.prune_magnitude(w, density) for w in (w1, w2))
        a, c = schedules.CSRWeights.from_dense(w1), schedules.CSRWeights.from_dense(w2)
    else:
        a, c = w1, w2
    out = schedules.vgg_block(x, a, b1, c, b2)
    t = [torch.from_numpy(v) for v in (x, w1, b1, w2, b2)]
    ref = F.max_pool2d(F.relu(F.conv2d(F.relu(F.conv2d(t[0], t[1], t[2], padding=1)), t[3], t[4],
                                       padding=1)), 2)
    np.testing.assert_allclose(out, ref.numpy(), rtol=1e-4, atol=1e-4)


@pytest.mark.parametrize("density", [1.0, 0.161])
def test_resnet_block_with_folded_batchnorm_matches_torch(density):
    c = 8
    x = torch.from_numpy(rand(2, c, 9, 11))
    block = [torch.nn.Conv2d(c, c, 3, padding=1), torch.nn.BatchNorm2d(c),
             torch.nn.Conv2d(c, c, 3, padding=1), torch.nn.BatchNorm2d(c)]
    with torch.no_grad():
        for bn in block[1::2]:
            bn.running_mean.uniform_(-1, 1)
            bn.running_var.uniform_(0.5, 2)
            bn.weight.uniform_(0.5, 1.5)
            bn.bias.uniform_(-0.5, 0.5)
        for conv in block[0::2]:
            conv.weight.copy_(schedules.prune_magnitude(conv.weight, density))
    for m in block:
        m.eval()
    with torch.no_grad():
        ref = F.relu(block[3](block[2](F.relu(block[1](block[0](x))))) + x)
    folded = [schedules.fold_batchnorm(conv.weight, conv.bias, bn.weight, bn.bias,
                                       bn.running_mean, bn.running_var, bn.eps)
              for conv, bn in (block[0:2], block[2:4])]
    if density < 1:     # the folded weights keep the pruned zeros (a per-channel scale)
        folded = [(schedules.CSRWeights.from_dense(w.numpy()), b) for w, b in folded]
        assert abs(folded[0][0].density - density) < 0.01
    out = schedules.resnet_block(x, *folded[0], *folded[1])
    assert isinstance(out, torch.Tensor)
    np.testing.assert_allclose(out.numpy(), ref.numpy(), rtol=1e-4, atol=1e-4)
    host = [(w, b.numpy()) for w, b in folded] if density < 1 else \
        [(w.numpy(), b.numpy()) for w, b in folded]
    plain = schedules.resnet_block(x.numpy(), *host[0], *host[1], residual=False)
    np.testing.assert_allclose(np.maximum(plain + x.numpy(), 0), ref.numpy(), rtol=1e-4,
                               atol=1e-4)


def test_block_arguments_are_checked():
    w = rand(4, 4, 3, 3)
    with pytest.raises(ValueError, match="gamma"):
        schedules.fold_batchnorm(w, None, rand(3), rand(4), rand(4), np.ones(4, np.float32))
    with pytest.raises(ValueError, match="var"):
        schedules.fold_batchnorm(w, None, rand(4), rand(4), rand(4), -np.ones(4, np.float32))
    with pytest.raises(ValueError, match="residual"):
        schedules.resnet_block(rand(1, 3, 6, 6), rand(4, 3, 3, 3), None, w, None)


def test_bench_paper_quick(tmp_path):
    """``tiramisu-py bench paper --quick``: every row runs and is checked
    against torch, the paper's figures stand beside ours, the break-even
    is computed; JSON written."""
    import tiramisu_py_command as cli
    path = tmp_path / "paper.json"
    assert cli.main(["bench", "paper", "--quick", "--threads", "1", "--repeats", "1",
                     "--json", str(path)]) == 0
    report = json.loads(path.read_text())
    names = [c["name"] for c in report["cases"]]
    for row in ("Conv ", "Conv-ReLU-MaxPool ", "Resize-Conv-ReLU-MaxPool ", "VGG block",
                "ResNet block", "LSTM"):
        assert any(n.startswith(row) for n in names), (row, names)
    for case in report["cases"]:
        for impl, r in case["impls"].items():
            assert r["1"]["failure"] is None, (case["name"], impl, r["1"]["failure"])
            assert r["1"]["error"] is not None and r["1"]["error"] < 1e-3, (case["name"], impl)
    rows = report["paper"]
    assert rows and all("paper" in r and "speedup_vs_torch" in r for r in rows)
    assert "break_even" in report and report["paper_break_even"] == 43.5

"""Whole models through ``schedules.nn.convert``: BatchNorm folding (exact to
rounding, training mode untouched), ReLU/ReLU6 epilogues, the report, outputs
that in-place ops may modify under autograd, ``Linear`` reading its weight
where torch stores it, and the ``models`` bench suite's smoke run."""
import copy
import types

import numpy as np
import pytest

torch = pytest.importorskip("torch")
from torch import nn  # noqa: E402

import schedules  # noqa: E402
import schedules.nn as snn  # noqa: E402
from schedules.fusion import FoldedBatchNorm2d, FusedReLU, FusedReLU6  # noqa: E402


def _random_stats(model):
    for m in model.modules():
        if isinstance(m, nn.BatchNorm2d):
            m.running_mean.uniform_(-1, 1)
            m.running_var.uniform_(0.3, 2.0)
            with torch.no_grad():
                m.weight.uniform_(0.5, 1.5)
                m.bias.uniform_(-1, 1)
    return model


class Block(nn.Module):
    """A ResNet BasicBlock: its ReLU module is called twice (not fusable by
    the whole-model chains), so convert rewrites its forward: ``conv1 ->
    bn1 -> relu`` and ``conv2 -> bn2 -> add(down(x)) -> relu`` are each one
    call of the conv (:func:`schedules.fusion.find_tails`)."""

    def __init__(self, ci, co, stride):
        super().__init__()
        self.conv1 = nn.Conv2d(ci, co, 3, stride, 1, bias=False)
        self.bn1 = nn.BatchNorm2d(co)
        self.relu = nn.ReLU(inplace=True)
        self.conv2 = nn.Conv2d(co, co, 3, 1, 1, bias=False)
        self.bn2 = nn.BatchNorm2d(co)
        self.down = nn.Sequential(nn.Conv2d(ci, co, 1, stride, bias=False), nn.BatchNorm2d(co))

    def forward(self, x):
        out = self.relu(self.bn1(self.conv1(x)))
        return self.relu(self.bn2(self.conv2(out)) + self.down(x))


def _net(dtype=torch.float32):
    torch.manual_seed(0)
    m = nn.Sequential(nn.Conv2d(3, 8, 3, padding=1), nn.BatchNorm2d(8), nn.ReLU6(),
                      nn.Conv2d(8, 8, 3, padding=1, groups=8), nn.BatchNorm2d(8), nn.ReLU(),
                      Block(8, 16, 2), nn.AdaptiveAvgPool2d(1), nn.Flatten(), nn.Linear(16, 5))
    return _random_stats(m).to(dtype)


def test_batchnorm_folding_is_exact_to_rounding_and_activations_fuse():
    for dtype, tol in ((torch.float64, 1e-12), (torch.float32, 2e-5)):
        model = _net(dtype).eval()
        ours = snn.convert(copy.deepcopy(model))
        x = torch.randn(2, 3, 10, 10, dtype=dtype)
        with torch.no_grad():
            torch.testing.assert_close(ours(x), model(x), atol=tol, rtol=tol)
        assert isinstance(ours[1], FoldedBatchNorm2d) and isinstance(ours[2], FusedReLU6)
        assert isinstance(ours[5], FusedReLU)
        # the block's chains: its forward rewritten, its modules torch's own
        assert type(ours[6].relu) is nn.ReLU and type(ours[6].bn2) is nn.BatchNorm2d
        assert "forward" in ours[6].__dict__ and "_tail" in ours[6].conv2.__dict__
    # the folded weights are the conv's scaled by gamma / sqrt(var + eps), rounded once
    conv, bn = model[0], model[1]
    group = ours[0].__dict__["_fusion"]
    w, b = group.folded(ours[0].weight, ours[0].bias)
    scale = (bn.running_var.double() + bn.eps).rsqrt() * bn.weight.double()
    expect_w = (conv.weight.double() * scale.reshape(-1, 1, 1, 1)).float()
    expect_b = ((conv.bias.double() - bn.running_mean.double()) * scale + bn.bias.double()).float()
    assert w.dtype == torch.float32 and torch.equal(w, expect_w)
    assert torch.equal(b, expect_b)


def test_training_mode_runs_apart_exactly_and_eval_folds_the_new_statistics():
    model = _net()
    ours = snn.convert(copy.deepcopy(model))
    assert list(ours.state_dict()) == list(model.state_dict())
    x = torch.randn(4, 3, 10, 10)
    model.train(), ours.train()
    torch.testing.assert_close(ours(x), model(x), atol=1e-5, rtol=1e-5)
    for a, b in zip(ours.state_dict().values(), model.state_dict().values()):
        torch.testing.assert_close(a, b, atol=1e-6, rtol=1e-6)     # running stats updated alike
    model.eval(), ours.eval()
    with torch.no_grad():
        torch.testing.assert_close(ours(x), model(x), atol=2e-5, rtol=2e-5)
        # new statistics through load_state_dict: the cached fold is refreshed
        model[1].running_mean.add_(0.5)
        ours.load_state_dict(model.state_dict())
        torch.testing.assert_close(ours(x), model(x), atol=2e-5, rtol=2e-5)
        # a write through .data (no version bump) is seen too
        for m in (model, ours):
            m[0].weight.data.mul_(-1.5)
            m[4].running_var.data.mul_(2.0)
        torch.testing.assert_close(ours(x), model(x), atol=2e-5, rtol=2e-5)
        with torch.inference_mode():
            torch.testing.assert_close(ours(x), model(x), atol=2e-5, rtol=2e-5)


def test_eval_mode_gradients_flow_through_the_fold():
    model = _net().eval()
    ours = snn.convert(copy.deepcopy(model))
    x = torch.randn(2, 3, 10, 10)
    model(x).square().sum().backward()
    ours(x).square().sum().backward()
    for (name, p), q in zip(model.named_parameters(), ours.parameters()):
        torch.testing.assert_close(q.grad, p.grad, atol=1e-4, rtol=1e-4, msg=name)


def test_report_names_what_was_converted_fused_and_left(capsys):
    model = _net().eval()
    ours = snn.convert(copy.deepcopy(model), verbose=True)
    r = ours.tiramisu_report
    assert {n for n, _, _ in r.converted} == {"0", "3", "6.conv1", "6.conv2", "6.down.0", "9"}
    fused = dict(r.fused)
    assert set(fused) == {"0 + 1 + 2", "3 + 4 + 5", "6.conv1 + 6.bn1 + 6.relu",
                          "6.conv2 + 6.bn2 + add + 6.relu", "6.down.0 + 6.down.1"}
    assert "relu6" in fused["0 + 1 + 2"] and "BatchNorm2d folded" in fused["6.down.0 + 6.down.1"]
    assert "the residual add + relu" in fused["6.conv2 + 6.bn2 + add + 6.relu"]
    assert {n for n, _, _ in r.left_to_torch} == {"7", "8"}
    assert r.how == "torch.fx" and r.functions == {}          # (the add is the conv's)
    printed = capsys.readouterr().out
    assert "5 fused" in printed and "6.relu: ReLU" not in printed
    # no fusion asked: convs converted, BatchNorms left to torch
    plain = snn.convert(copy.deepcopy(model), fuse=False).tiramisu_report
    assert not plain.fused and "1" in {n for n, _, _ in plain.left_to_torch}


def test_report_lists_each_module_once(capsys):
    """Issue 52: a converted MaxPool2d (ours subclasses torch's) was listed
    both as converted and as left to torch."""
    model = nn.Sequential(nn.Conv2d(3, 4, 3), nn.MaxPool2d(2), nn.Flatten(), nn.ReLU(),
                          nn.Sequential(nn.MaxPool2d(3, stride=1)))
    r = snn.convert(model, verbose=True).tiramisu_report
    assert [n for n, _, _ in r.converted] == ["0", "1", "4.0"]
    assert [n for n, _, _ in r.left_to_torch] == ["2", "3"]
    printed = capsys.readouterr().out
    assert "3 converted, 0 fused, 2 left to torch" in printed
    assert printed.count(" 1: MaxPool2d") == 1 and printed.count(" 4.0: MaxPool2d") == 1


def test_untraceable_model_fuses_its_sequentials():
    class Branchy(nn.Module):
        def __init__(self):
            super().__init__()
            self.body = nn.Sequential(nn.Conv2d(3, 4, 3), nn.BatchNorm2d(4), nn.ReLU())

        def forward(self, x):
            return self.body(x) if x.sum() > -1e9 else x      # data-dependent: fx fails

    model = _random_stats(Branchy()).eval()
    ours = snn.convert(copy.deepcopy(model))
    assert ours.tiramisu_report.how == "nn.Sequential order"
    assert len(ours.tiramisu_report.fused) == 1
    x = torch.randn(1, 3, 6, 6)
    with torch.no_grad():
        torch.testing.assert_close(ours(x), model(x), atol=2e-5, rtol=2e-5)


@pytest.mark.parametrize("algo", ["auto", "im2col"])
def test_inplace_relu_after_converted_convs_trains(algo):
    torch.manual_seed(0)
    model = nn.Sequential(nn.Conv2d(3, 8, 3, padding=1), nn.ReLU(inplace=True), nn.MaxPool2d(2),
                          nn.Conv2d(8, 8, 3, padding=1), nn.ReLU(inplace=True),
                          nn.Conv2d(8, 8, 3, padding=1), nn.ReLU(inplace=True), nn.MaxPool2d(2),
                          nn.Flatten(), nn.Linear(8 * 2 * 2, 10), nn.ReLU(inplace=True),
                          nn.Linear(10, 3))
    ours = snn.convert(copy.deepcopy(model), algo=algo)
    x = torch.randn(2, 3, 8, 8)
    for m in (model, ours):
        opt = torch.optim.SGD(m.parameters(), lr=0.1)
        m(x).square().mean().backward()
        opt.step()
    for p, q in zip(model.parameters(), ours.parameters()):
        torch.testing.assert_close(q.grad, p.grad, atol=1e-5, rtol=1e-4)
        torch.testing.assert_close(q, p, atol=1e-6, rtol=1e-5)


def test_every_op_output_is_its_own_tensor():
    x, w = torch.randn(2, 3, 6, 6), torch.randn(4, 3, 3, 3)
    for algo in ("direct", "im2col", "spatial_pack"):
        y = torch.ops.tiramisu.conv2d(x, w, None, [1], [1], algo=algo)
        assert y._base is None, algo
        y.relu_()                                            # allowed
    a = torch.randn(3, 3)
    assert torch.ops.tiramisu.gemm(a, torch.eye(3))._base is None


def test_linear_reads_its_weight_where_torch_stores_it(monkeypatch):
    torch.manual_seed(0)
    lin = nn.Linear(96, 40)
    ours = snn.Linear.from_torch(copy.deepcopy(lin))
    weight_storage = ours.weight.untyped_storage().data_ptr()
    copied = []
    real = torch.Tensor.contiguous

    def spy(t, *a, **k):
        if not t.is_contiguous() and t.untyped_storage().data_ptr() == weight_storage:
            copied.append(tuple(t.shape))
        return real(t, *a, **k)

    monkeypatch.setattr(torch.Tensor, "contiguous", spy)
    x = torch.randn(5, 96, requires_grad=True)
    x_ref = x.detach().clone().requires_grad_()
    for _ in range(2):
        y = ours(x)
        y.square().sum().backward()
    for _ in range(2):
        lin(x_ref).square().sum().backward()
    monkeypatch.undo()
    assert copied == []                                   # no copy of the weight, per call
    torch.testing.assert_close(y, lin(x_ref), atol=1e-5, rtol=1e-5)
    torch.testing.assert_close(x.grad, x_ref.grad, atol=1e-5, rtol=1e-5)
    torch.testing.assert_close(ours.weight.grad, lin.weight.grad, atol=1e-4, rtol=1e-5)
    torch.testing.assert_close(ours.bias.grad, lin.bias.grad, atol=1e-4, rtol=1e-5)


def test_gemm_with_a_transposed_operand():
    rng = np.random.default_rng(0)
    a = rng.standard_normal((7, 33), dtype=np.float32)
    w = rng.standard_normal((20, 33), dtype=np.float32)
    np.testing.assert_allclose(schedules.gemm(a, w.T), a @ w.T, rtol=1e-5, atol=1e-5)
    ta, tw = torch.from_numpy(a), torch.from_numpy(w)
    torch.testing.assert_close(torch.ops.tiramisu.gemm(ta, tw.t()), ta @ tw.t(),
                               atol=1e-5, rtol=1e-5)
    strided = torch.from_numpy(rng.standard_normal((33, 40), dtype=np.float32))[:, ::2]
    torch.testing.assert_close(torch.ops.tiramisu.gemm(ta, strided), ta @ strided,
                               atol=1e-5, rtol=1e-5)
    with pytest.raises(ValueError, match="inner dimensions"):
        schedules.gemm(a, w)


def test_models_suite_is_registered():
    """``tiramisu-py bench models`` parses and names the suite's cases (the
    run itself is the smoke test below: a harness run costs a subprocess)."""
    from bench import suites
    args = suites.parser("tiramisu-py bench").parse_args(["models", "--quick", "--shapes", "13"])
    (case,) = suites.cases(args.suite, args.quick, args.shapes)
    assert case.name == "seq2seq b2 train" and "models" not in suites.SUITES   # not in "all"
    from bench import harness
    assert harness.run_args(args, threads=(2,), repeats=3)["repeats"] == 3     # models' defaults
    again = suites.parser("p").parse_args(["models", "--repeats", "7", "--threads", "1"])
    assert harness.run_args(again, threads=(2,), repeats=3)["repeats"] == 7


def test_models_bench_suite_smoke():
    from bench import suite_models
    cases = suite_models.cases(quick=True)
    assert len(cases) == 20 and cases[0].name == "vgg b2 inference"
    assert cases[-1].name == "resnext_block b16 train"
    assert all(c.flops > 0 for c in cases)
    grouped = next(c for c in cases if c.name == "resnext_block b2 inference")
    assert grouped.check(grouped.setup()["tiramisu_py"]()) < 1e-4
    case = next(c for c in cases if c.name == "seq2seq b2 train")
    impls = case.setup()
    assert set(impls) == {"tiramisu_py", "torch", "tiramisu_py[compile]"}
    assert case.check(impls["tiramisu_py"]()) < 1e-4
    torch._dynamo.reset()                   # (the backend's row: the rewrite, AOTAutograd)
    assert case.check(impls["tiramisu_py[compile]"]()) < 1e-4
    torch._dynamo.reset()
    model, _ = suite_models.model("mobilenet_v2", quick=True)
    ours = snn.convert(copy.deepcopy(model).eval())
    depthwise = [m for m in ours.modules() if isinstance(m, snn.Conv2d) and m.groups > 1]
    assert depthwise and all("_fusion" in m.__dict__ for m in depthwise)


@pytest.mark.parametrize("shape", [(2, 16, 10, 9, 3, 1, 1, 1), (1, 32, 14, 11, 3, 2, 1, 1),
                                   (2, 16, 10, 10, 5, 1, 2, 2), (1, 48, 7, 7, 3, 1, 0, 1)])
def test_depthwise_solver_sums_as_direct_does(shape):
    from schedules.core import find
    from schedules.problems.conv import ConvProblem
    from schedules.registry import SOLVERS
    n, c, h, w, k, stride, padding, dilation = shape
    g = torch.Generator().manual_seed(0)
    x, wt, b = (torch.randn(*s, generator=g) for s in ((n, c, h, w), (c, 1, k, k), (c,)))
    for bias in (b, None):
        direct = schedules.conv2d(x, wt, bias, stride, padding, dilation, c, algo="direct")
        ours = schedules.conv2d(x, wt, bias, stride, padding, dilation, c, algo="depthwise")
        # the same order of sums; bit for bit unless direct's in-order
        # vectorised reduction leaves some products unfused (an 8-lane host's
        # last column of a 5-wide map): then within one rounding per tap
        scale = torch.nn.functional.conv2d(x.abs(), wt.abs(), None if bias is None else bias.abs(),
                                           stride, padding, dilation, c)      # sum of |terms|
        close = (ours - direct).abs() <= 2 * k * k * torch.finfo(torch.float32).eps * scale
        assert bool(close.all()), (ours - direct).abs().max()
        torch.testing.assert_close(ours, torch.nn.functional.conv2d(x, wt, bias, stride, padding,
                                                                    dilation, c))
    p, _ = ConvProblem.from_call("conv2d", x, wt, b, stride, padding, dilation, c)
    assert [s.name for s in find.candidates(p, SOLVERS["conv2d"])] == ["direct", "depthwise"]
    # not depthwise: refused by name
    with pytest.raises(ValueError, match="depthwise.*needs a depthwise conv"):
        schedules.conv2d(x, torch.randn(c, 2, k, k), None, groups=c // 2, algo="depthwise")


# (sizes other than 9: docs/guide/tuning.md counts the find records of h = 9 in the
# shared cache directory)
@pytest.mark.parametrize("conf", [(2, 6, 8, 10, 3, 1, 1, 1, 2), (1, 16, 16, 10, 3, 1, 1, 1, 16),
                                  (2, 3, 5, 8, 5, 1, 2, 2, 1), (1, 3, 4, 6, 3, 1, 0, 1, 1),
                                  (2, 4, 6, 11, 3, 2, 1, 1, 1), (3, 8, 12, 5, 1, 1, 0, 1, 1),
                                  (2, 4, 6, 9, 1, 2, 0, 1, 1), (1, 2, 3, 5, 1, 1, 1, 1, 1),
                                  (2, 5, 7, 6, 1, 1, 0, 1, 1), (2, 24, 24, 20, 3, 1, 2, 2, 24),
                                  (2, 6, 6, 9, 3, 2, 1, 1, 6), (2, 4, 6, 12, 5, 2, 2, 1, 2),
                                  (1, 3, 4, 10, 3, 3, 1, 1, 1), (2, 4, 6, 11, 3, 2, 2, 2, 1)])
def test_conv_backward_runs_through_the_forward_solvers(conf, monkeypatch):
    from schedules import torch_ops
    from schedules.solvers import conv_grad
    n, ci, co, h, k, stride, padding, dilation, groups = conf
    real, real_phases = torch_ops._kernel, conv_grad._phases
    used = []
    monkeypatch.setattr(torch_ops, "_kernel",
                        lambda key, build: used.append(key[0]) or real(key, build))
    monkeypatch.setattr(conv_grad, "_phases",
                        lambda *a: used.append("phases") or real_phases(*a))
    g = torch.Generator().manual_seed(1)
    x = torch.randn(n, ci, h, h, generator=g, requires_grad=True)
    w = torch.randn(co, ci // groups, k, k, generator=g, requires_grad=True)
    b = torch.randn(co, generator=g, requires_grad=True)
    y = torch.ops.tiramisu.conv2d(x, w, b, [stride], [padding], [dilation], groups)
    gy = torch.randn(y.shape, generator=g)
    y.backward(gy)
    x2, w2, b2 = (t.detach().requires_grad_() for t in (x, w, b))
    torch.nn.functional.conv2d(x2, w2, b2, stride, padding, dilation, groups).backward(gy)
    for ours, ref in ((x.grad, x2.grad), (w.grad, w2.grad), (b.grad, b2.grad)):
        torch.testing.assert_close(ours, ref, atol=1e-4, rtol=1e-4)
    # the grad input through the forward solvers (strided: the gradient
    # spread out first) unless its padding would be negative; the grad
    # weight of one group: the blocked kernel (Co a multiple of a vector,
    # enough pixels) or GEMMs (over the im2col for k > 1), a depthwise
    # conv's own kernels (channels in the lanes where a vector divides
    # them; any stride), the reference kernel for other groups
    assert ("grad_input" in used) == (padding > dilation * (k - 1))
    assert ("grad_weight" in used) == (groups != 1 and not groups == ci == co)
    lanes = bool(conv_grad.vector_of(co))
    from schedules.problems.conv import ConvShape
    shape = ConvShape(n, ci, h, h, co, k, k, stride, padding, dilation, groups)
    assert ("grad_weight_blocked" in used) == (conv_grad.blocked_applies(shape)
                                               and lanes and groups == 1)
    assert ("depthwise_grad_weight_blocked" in used) == (groups == ci == co and lanes)
    assert ("depthwise_grad_weight" in used) == (groups == ci == co and not lanes)
    # a strided, undilated conv: one convolution per phase of the input's
    # pixels (a depthwise one: the gradient spread out, bound by memory)
    assert ("phases" in used) == (stride > 1 and dilation == 1 and k > 1
                                  and padding <= dilation * (k - 1)
                                  and not groups == ci == co)


def test_small_batch_gemm_runs_one_pass_solvers():
    from schedules.core import find
    from schedules.problems.gemm import GemmProblem
    from schedules.registry import SOLVERS
    rng = np.random.default_rng(2)
    w = rng.standard_normal((37, 300), dtype=np.float32)
    from schedules.solvers.gemm_rows import max_rows_t
    for n in (1, 3, 8, 9, max_rows_t(), max_rows_t() + 1):
        a = rng.standard_normal((n, 300), dtype=np.float32)
        p, args = GemmProblem.from_call("gemm", a, w.T, None, None)
        chosen = find.find(p, SOLVERS["gemm"], args, call="gemm").name
        assert p.trans_b and chosen == ("rows_t" if n <= max_rows_t() else "blis")
        np.testing.assert_allclose(schedules.gemm(a, w.T), a @ w.T, rtol=1e-4, atol=1e-4)
    for n, expect in ((2, "rows"), (9, "blis")):     # b as stored: one pass in order, or BLIS
        a = rng.standard_normal((n, 300), dtype=np.float32)
        b = np.ascontiguousarray(w.T)
        p, args = GemmProblem.from_call("gemm", a, b, None, None)
        assert not p.trans_b and find.find(p, SOLVERS["gemm"], args, call="gemm").name == expect
        np.testing.assert_allclose(schedules.gemm(a, b), a @ b, rtol=1e-4, atol=1e-4)
    empty = np.zeros((0, 300), np.float32)
    assert schedules.gemm(empty, w.T).shape == (0, 37)


@pytest.mark.parametrize("mode", ["train", "eval"])
def test_float64_gradcheck_of_converted_blocks(mode):
    from bench.suite_models import _inverted_residual
    torch.manual_seed(3)
    for block in (Block(2, 4, 2), _inverted_residual()(4, 4, 1, 2)):
        block = _random_stats(block).double().train(mode == "train")
        ours = snn.convert(copy.deepcopy(block))
        assert ours.tiramisu_report.converted and ours.tiramisu_report.fused
        x = torch.randn(2, block.conv1.in_channels if hasattr(block, "conv1") else 4, 5, 5,
                        dtype=torch.float64, requires_grad=True)
        assert torch.autograd.gradcheck(lambda t: ours(t), (x,), eps=1e-6, atol=1e-5)
        x2 = x.detach().requires_grad_()
        block(x2).sum().backward()
        ours(x).sum().backward()
        for p, q in zip(block.parameters(), ours.parameters()):
            torch.testing.assert_close(q.grad, p.grad, atol=1e-8, rtol=1e-7)


def test_rows_t_in_chunks_of_k():
    """A product whose rows of A do not fit half of L2 runs rows_t over K in
    chunks (B's rows parallel in each): the same product."""
    from schedules.solvers import gemm_rows
    rng = np.random.default_rng(4)
    n, m, k = 5, 19, 700
    a = rng.standard_normal((n, k), dtype=np.float32)
    b = rng.standard_normal((m, k), dtype=np.float32)
    assert gemm_rows.chunk(n, k) == k                 # fits: one pass
    kern = gemm_rows.function(n, m, k, lanes=16)
    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(gemm_rows, "chunk", lambda n_, k_, lanes=None: 64)
        chunked = gemm_rows.function(n, m, k, lanes=16)
    assert "C_update.reorder(kc, j, k0, i, k1)" in chunked.schedule_commands()
    for f in (kern, chunked):
        np.testing.assert_allclose(f.compile()(A=a, B=b), a @ b.T, rtol=1e-4, atol=1e-4)


@pytest.mark.parametrize("n,m", [(8, 12), (16, 20), (6, 6), (5, 8), (3, 7)])
def test_rows_t_register_block(n, m, monkeypatch):
    """rows_t's register block: all rows of A when they fit beside the rows
    of B, else 4 (a divisor of n); 4, 2 or 1 rows of B; in chunks of K too;
    the LLVM backend widens the tile's lanes; the same product."""
    from schedules.solvers import gemm_rows
    monkeypatch.setattr(gemm_rows, "host", lambda: types.SimpleNamespace(
        vector_registers=32, l2=1 << 20, lanes=lambda size: 16))
    ib, jb = gemm_rows.block(n, m)
    assert jb == next(d for d in (4, 2, 1) if m % d == 0)
    assert ib == (n if n * jb <= 16 else max(d for d in (1, 2, 3, 4) if n % d == 0))
    rng = np.random.default_rng(6)
    cols = "j0" if jb > 1 else "j"
    order = [cols] + (["i0"] if ib < n else []) + ["k0", "i1" if ib < n else "i"] + \
        (["j1"] if jb > 1 else []) + ["k1"]
    for k in (704, 700):                # whole vectors (the tile widened), and a tail
        a = rng.standard_normal((n, k), dtype=np.float32)
        b = rng.standard_normal((m, k), dtype=np.float32)
        plain = gemm_rows.function(n, m, k)
        with pytest.MonkeyPatch.context() as mp:
            mp.setattr(gemm_rows, "chunk", lambda n_, k_, lanes=None: 64)
            chunked = gemm_rows.function(n, m, k)
        assert f"C_update.reorder({', '.join(['kc'] + order)})" in chunked.schedule_commands()
        for f in (plain, chunked):
            kern = f.compile(target="llvm")
            if k == 704 and lanes_of_this_host() == 16:
                assert "vector loop k1: 16 lanes" in kern.source
            np.testing.assert_allclose(kern(A=a, B=b), a @ b.T, rtol=1e-4, atol=1e-4)


def lanes_of_this_host():
    from schedules.host import host
    return host().lanes(4)


@pytest.mark.parametrize("n,ci,h,k,stride,per_image", [(2, 3, 32, 7, 2, True), (5, 4, 12, 3, 1, True),
                                                       (3, 16, 5, 3, 1, False)])
def test_grad_weight_per_image_products(n, ci, h, k, stride, per_image, monkeypatch):
    """Two images or more whose pixels are at least the fields (ci*k*k) take
    one batched product per image (summed, chunks of images when their
    columns exceed the workspace: COLS_BYTES made small); the others the
    products over a chunk's columns; both equal torch's weight gradient."""
    from schedules.solvers import conv_grad
    real = conv_grad._per_image
    used = []
    monkeypatch.setattr(conv_grad, "_per_image", lambda *a: used.append(a[-1]) or real(*a))
    g = torch.Generator().manual_seed(5)
    x = torch.randn(n, ci, h, h, generator=g)
    w = torch.randn(6, ci, k, k, generator=g)
    y = torch.nn.functional.conv2d(x, w, None, stride, k // 2)
    image_cols = 4 * ci * k * k * y.shape[2] * y.shape[3]
    monkeypatch.setattr(conv_grad, "COLS_BYTES", image_cols * max(1, n // 2))
    gy = torch.randn(y.shape, generator=g)
    ours = torch.ops.tiramisu.conv2d_grad_weight(gy, x, list(w.shape), [stride, stride],
                                                 [k // 2, k // 2], [1, 1], 1, bias=False)[0]
    want = torch.nn.grad.conv2d_weight(x, w.shape, gy, stride=stride, padding=k // 2)
    torch.testing.assert_close(ours, want, atol=1e-4, rtol=1e-4)
    assert bool(used) == per_image and all(c < n for c in used)

"""The ``torch.compile`` backend "tiramisu" (:mod:`schedules.dynamo`): found
by name (registered on import, and declared as a ``torch_dynamo_backends``
entry point), the bench suite's four models (``--quick`` sizes) with
``fullgraph=True`` against torch in inference (outputs) and training (loss
and every gradient), what it replaced, dynamic batch sizes recompiling as
they do without the rewrite, Inductor end to end, and its refusals.

The models' graphs go to AOTAutograd without code generation
(``options={"inner": "aot_eager"}``: the rewrite and the ops' autograd
formulas, seconds per model); one small model goes through Inductor."""
from repo_paths import ROOT as CHECKOUT
import copy
import os
import subprocess
import sys
import textwrap
import tomllib
from pathlib import Path

import pytest

torch = pytest.importorskip("torch", reason="torch is an optional extra")
from torch import nn  # noqa: E402

from bench import suite_models  # noqa: E402
from schedules import dynamo  # noqa: E402
from torch_helpers import ADDS, residual_add  # noqa: E402

ROOT = Path(CHECKOUT)
AOT = {"inner": "aot_eager"}


@pytest.fixture(autouse=True)
def _fresh_dynamo():
    """Each test compiles from scratch (Dynamo's caches hold every model
    compiled before: the shared forwards would hit the recompile limit)."""
    torch._dynamo.reset()
    dynamo.clear_reports()
    yield
    torch._dynamo.reset()


def test_the_backend_is_listed_and_found_by_name():
    assert "tiramisu" in torch._dynamo.list_backends()
    assert torch._dynamo.lookup_backend("tiramisu") is dynamo.backend


def test_the_entry_point_finds_it_without_an_import(tmp_path):
    """pyproject.toml declares the entry point; installed (a dist-info
    carrying it), torch finds the backend by name in a process that never
    imported schedules."""
    table = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["entry-points"]
    assert table["torch_dynamo_backends"] == {"tiramisu": "schedules.dynamo:backend"}
    info = tmp_path / "tiramisu_py_entry-0.0.dist-info"
    info.mkdir()
    (info / "METADATA").write_text("Metadata-Version: 2.1\nName: tiramisu_py_entry\n"
                                   "Version: 0.0\n")
    (info / "entry_points.txt").write_text("[torch_dynamo_backends]\n"
                                           "tiramisu = schedules.dynamo:backend\n")
    code = textwrap.dedent("""
        import sys
        import torch
        assert "tiramisu" in torch._dynamo.list_backends(), torch._dynamo.list_backends()
        assert "schedules.dynamo" not in sys.modules
        f = torch.compile(lambda x: x @ x + 1, backend="tiramisu", fullgraph=True,
                          options={"inner": "aot_eager"})
        x = torch.randn(4, 4)
        torch.testing.assert_close(f(x), x @ x + 1)
        import schedules.dynamo
        assert schedules.dynamo.compile_report().counts() == {"tiramisu::matmul": 1}
        print("ok")
    """)
    env = dict(os.environ, PYTHONPATH=os.pathsep.join([str(tmp_path), str(ROOT)]))
    run = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True,
                         timeout=300)
    assert run.returncode == 0 and run.stdout.strip() == "ok", run.stderr[-3000:]


def _loss(out):
    return out.float().square().mean()


def _grads(model, x, compiled=None):
    """The loss and every parameter's gradient of one training step of
    ``compiled`` (default ``model``), dropout masks from one seed."""
    model.train()
    torch.manual_seed(2)
    loss = _loss((model if compiled is None else compiled)(x))
    loss.backward()
    return loss.detach(), [p.grad for p in model.parameters()]


# (model, batch, {op: count} in inference, in training); ResNet trains at batch 8: at
# batch 2 its last BatchNorms normalise 2 values, whose gradients float32 rounding sways
MODELS = {
    "vgg": (2, {"tiramisu::conv_relu_maxpool": 5, "tiramisu::conv2d_folded": 3,
                "tiramisu::linear": 3},
            {"tiramisu::conv_relu_maxpool": 5, "tiramisu::conv2d": 3, "tiramisu::linear": 3}),
    "resnet18": (8, {"tiramisu::conv2d_folded": 20, "tiramisu::linear": 1},
                 {"tiramisu::conv2d": 20, "tiramisu::linear": 1}),
    "mobilenet_v2": (2, {"tiramisu::conv2d_folded": 16, "tiramisu::linear": 1},
                     {"tiramisu::conv2d": 16, "tiramisu::linear": 1}),
    "seq2seq": (2, {"tiramisu::lstm": 1, "tiramisu::linear": 1},
                {"tiramisu::lstm_train": 1, "tiramisu::linear": 1}),
}


@pytest.mark.parametrize("train", [False, True], ids=["inference", "training"])
@pytest.mark.parametrize("name", list(MODELS))
def test_each_model_against_torch_with_fullgraph(name, train):
    batch, infer_ops, train_ops = MODELS[name]
    model, make_input = suite_models.model(name, quick=True)
    torch.manual_seed(1)
    x = make_input(batch)
    ours = copy.deepcopy(model)
    with torch._dynamo.config.patch(allow_rnn=True):    # (Dynamo refuses nn.LSTM without it)
        compiled = torch.compile(ours, backend="tiramisu", fullgraph=True, options=AOT)
        if train:
            loss, grads = _grads(ours, x, compiled)
        else:
            ours.eval()
            with torch.no_grad():
                out = compiled(x.clone())
    if train:
        ref_loss, ref_grads = _grads(model, x)
        torch.testing.assert_close(loss, ref_loss, rtol=1e-5, atol=1e-6)
        scale = max(float(g.abs().max()) for g in ref_grads)
        for g, r in zip(grads, ref_grads):
            torch.testing.assert_close(g, r, rtol=1e-4, atol=1e-5 * scale)
    else:
        with torch.no_grad():
            ref = model.eval()(x)
        torch.testing.assert_close(out, ref, rtol=1e-4, atol=1e-5)
    report = dynamo.compile_report(ours)
    assert len(report.graphs) == 1 and report.graphs[0].training == train
    assert report.counts() == (train_ops if train else infer_ops), str(report)
    assert not report.graphs[0].kept


def test_the_report_names_what_it_replaced_and_left():
    model = nn.Sequential(nn.Conv2d(3, 8, 3, padding=1, bias=False), nn.BatchNorm2d(8),
                          nn.ReLU6(), nn.Flatten())
    model[1].running_var.uniform_(0.5, 2)
    wide = nn.Sequential(nn.Conv2d(3, 4, 3), nn.ReLU()).double()
    x = torch.randn(2, 3, 6, 6)
    for m, arg in ((model.eval(), x), (wide, x.double())):
        compiled = torch.compile(m, backend="tiramisu", options={"inner": "eager"})
        with torch.no_grad():
            torch.testing.assert_close(compiled(arg), m(arg), rtol=1e-5, atol=1e-5)
    text = str(dynamo.compile_report(model))
    assert text.startswith("backend 'tiramisu' graph (inference): 1 replaced, 0 kept"), text
    assert "conv2d + batch_norm (folded) + relu6 -> tiramisu::conv2d_folded" in text, text
    graph = dynamo.compile_report(wide).graphs[0]
    assert graph.kept and "torch.float64" in graph.kept[0][1], graph
    assert graph.left == {"conv2d": 1, "relu": 1}, graph.left
    assert dynamo.compile_report(nn.Linear(2, 2)).graphs == []
    with pytest.raises(TypeError, match="nn.Module"):
        dynamo.compile_report("model")


def test_dynamic_batch_sizes_recompile_as_without_the_rewrite():
    model = nn.Sequential(nn.Conv2d(3, 8, 3, padding=1), nn.BatchNorm2d(8), nn.ReLU(),
                          nn.MaxPool2d(2), nn.Flatten(), nn.Linear(8 * 4 * 4, 5)).eval()

    def frames(backend, options=None):
        torch._dynamo.reset()
        counter = torch._dynamo.testing.CompileCounterWithBackend(backend)
        if backend == "tiramisu":
            counter.backend = lambda gm, inputs: dynamo.backend(gm, inputs, options)
        compiled = torch.compile(copy.deepcopy(model), backend=counter, fullgraph=True)
        with torch.no_grad():
            for n in (2, 3, 4, 7, 3):
                x = torch.randn(n, 3, 8, 8)
                torch.testing.assert_close(compiled(x), model(x), rtol=1e-4, atol=1e-5)
        return counter.frame_count
    ours = frames("tiramisu", AOT)
    assert ours == frames("aot_eager") == 2          # static, then one dynamic graph
    shapes = [g for g in dynamo.compile_report().graphs]
    assert len(shapes) == 2 and all(g.counts()["tiramisu::conv2d_folded"] == 1 for g in shapes)

    def training_frames(backend, options=None):     # (the backward formulas add no guard)
        torch._dynamo.reset()
        counter = torch._dynamo.testing.CompileCounterWithBackend(backend)
        if backend == "tiramisu":
            counter.backend = lambda gm, inputs: dynamo.backend(gm, inputs, options)
        compiled = torch.compile(copy.deepcopy(model).train(), backend=counter, fullgraph=True)
        for n in (2, 3, 4, 7, 1, 3):
            compiled(torch.randn(n, 3, 8, 8)).sum().backward()
        return counter.frame_count
    assert training_frames("tiramisu", AOT) == training_frames("aot_eager")


def test_inductor_end_to_end_inference_and_training():
    """The default inner compiler: Inductor compiles the rest around the ops
    (a fused pointwise kernel for the BatchNorm and ReLU in training)."""
    torch.manual_seed(0)
    model = nn.Sequential(nn.Conv2d(3, 8, 3, padding=1), nn.BatchNorm2d(8), nn.ReLU(),
                          nn.Conv2d(8, 8, 3, padding=1), nn.ReLU(), nn.MaxPool2d(2),
                          nn.Flatten(), nn.Linear(8 * 4 * 4, 5))
    x = torch.randn(4, 3, 8, 8)
    ours = copy.deepcopy(model)
    compiled = torch.compile(ours, backend="tiramisu", fullgraph=True)
    loss, grads = _grads(ours, x, compiled)
    ref_loss, ref_grads = _grads(model, x)
    torch.testing.assert_close(loss, ref_loss, rtol=1e-5, atol=1e-6)
    for g, r in zip(grads, ref_grads):
        torch.testing.assert_close(g, r, rtol=1e-4, atol=1e-5)
    with torch.no_grad():
        torch.testing.assert_close(compiled.eval()(x), model.eval()(x), rtol=1e-4, atol=1e-5)
    counts = [g.counts() for g in dynamo.compile_report(ours).graphs]
    assert counts == [{"tiramisu::conv2d": 1, "tiramisu::conv_relu_maxpool": 1,
                       "tiramisu::linear": 1},
                      {"tiramisu::conv2d_folded": 1, "tiramisu::conv_relu_maxpool": 1,
                       "tiramisu::linear": 1}]


def test_kept_recurrent_and_refused_options():
    lstm = nn.LSTM(4, 6, bidirectional=True)
    with torch._dynamo.config.patch(allow_rnn=True):
        compiled = torch.compile(lstm, backend="tiramisu", options={"inner": "eager"})
        x = torch.randn(3, 2, 4)
        with torch.no_grad():
            torch.testing.assert_close(compiled(x)[0], lstm(x)[0])
    (where, why), = dynamo.compile_report(lstm).graphs[0].kept
    assert "bidirectional" in why
    with pytest.raises(Exception, match="options\\['inner'\\] must be one of"):
        torch.compile(nn.Linear(2, 2), backend="tiramisu",
                      options={"inner": "jit"})(torch.randn(1, 2))
    with pytest.raises(Exception, match="runs no autograd pass"):
        torch.compile(nn.Linear(2, 2), backend="tiramisu",
                      options={"inner": "eager"})(torch.randn(1, 2))


class _Residual(nn.Module):
    """A residual block's tail in four spellings of the add: ``out += x``,
    ``x + out`` (the conv's value second), ``torch.add`` and ``Tensor.add_``."""

    def __init__(self, how):
        super().__init__()
        self.how = how
        self.conv = nn.Conv2d(8, 8, 3, padding=1)
        self.bn = nn.BatchNorm2d(8)
        self.relu = nn.ReLU(inplace=True)

    def forward(self, x):
        return self.relu(residual_add(self.how, self.bn(self.conv(x)), x))


@pytest.mark.parametrize("how", ADDS)
def test_the_residual_add_runs_in_the_conv_in_inference(how):
    """conv -> batch_norm -> add(x) -> relu is one ``conv2d_folded`` with the
    residual in inference (its report names the add); in training the add
    stays the compiler's."""
    torch.manual_seed(0)
    model = _Residual(how)
    model.bn.running_var.uniform_(0.5, 2)
    x = torch.randn(2, 8, 6, 6)
    compiled = torch.compile(model.eval(), backend="tiramisu", fullgraph=True, options=AOT)
    with torch.no_grad():
        torch.testing.assert_close(compiled(x.clone()), model(x.clone()), rtol=1e-5, atol=1e-5)
    text = str(dynamo.compile_report(model))
    assert "conv2d + batch_norm (folded) + add + relu -> tiramisu::conv2d_folded" in text, text
    assert "add" not in dynamo.compile_report(model).graphs[0].left, text
    torch._dynamo.reset()
    dynamo.clear_reports()
    ours = copy.deepcopy(model).train()
    loss, grads = _grads(ours, x, torch.compile(ours, backend="tiramisu", options=AOT))
    ref_loss, ref_grads = _grads(model, x)
    torch.testing.assert_close(loss, ref_loss, rtol=1e-5, atol=1e-6)
    for g, r in zip(grads, ref_grads):
        torch.testing.assert_close(g, r, rtol=1e-4, atol=1e-5)
    assert dynamo.compile_report(ours).counts() == {"tiramisu::conv2d": 1}


def test_an_add_that_is_not_a_residual_is_left():
    """``out + out`` (the conv's value twice), an add with ``alpha`` and one
    broadcasting a bias-like tensor stay the compiler's."""
    conv = nn.Conv2d(4, 4, 3, padding=1).eval()
    shift = torch.randn(1, 4, 1, 1)
    def twice(x):
        y = conv(x)
        return y + y
    for fn in (twice,
               lambda x: torch.add(conv(x), x, alpha=2),
               lambda x: conv(x) + shift):
        torch._dynamo.reset()
        dynamo.clear_reports()
        x = torch.randn(1, 4, 5, 5)
        with torch.no_grad():
            torch.testing.assert_close(torch.compile(fn, backend="tiramisu", options=AOT)(x),
                                       fn(x), rtol=1e-5, atol=1e-5)
        text = "\n".join(map(str, dynamo.compile_report().graphs))
        assert "+ add" not in text, text


def test_freezing_takes_the_parameters_as_constants(monkeypatch):
    """``options={"freezing": True}`` (Inductor's key): in inference the
    folded weights are found by identity and version, with no bytes
    compared per call (without it: compared every call); an in-place op on
    a parameter (a new version) is still seen."""
    from schedules.core import prepared
    torch.manual_seed(0)
    model = nn.Sequential(nn.Conv2d(4, 8, 3, padding=1), nn.BatchNorm2d(8), nn.ReLU()).eval()
    model[1].running_var.uniform_(0.5, 2)
    x = torch.randn(2, 4, 6, 6)
    compared = []
    real = prepared._all_same
    monkeypatch.setattr(prepared, "_all_same", lambda pairs: (compared.append(len(pairs)),
                                                              real(pairs))[1])
    with torch.no_grad():
        plain = torch.compile(copy.deepcopy(model), backend="tiramisu", options=AOT)
        plain(x)
        compared.clear()
        plain(x)
        assert any(compared)                       # as written: the bytes compared
        frozen = torch.compile(model, backend="tiramisu", options={**AOT, "freezing": True})
        torch.testing.assert_close(frozen(x), model(x), rtol=1e-5, atol=1e-5)
        compared.clear()
        torch.testing.assert_close(frozen(x), model(x), rtol=1e-5, atol=1e-5)
        assert not any(compared), compared         # frozen: identity and version alone
        model[0].weight.mul_(2)                    # a new version: seen
        torch.testing.assert_close(frozen(x), model(x), rtol=1e-5, atol=1e-5)
    assert "conv2d_folded" in str(dynamo.compile_report(model))

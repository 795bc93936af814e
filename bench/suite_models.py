"""The ``models`` suite: whole models converted by ``schedules.nn.convert``
against the same torch model eager and under ``torch.compile``.

Models, defined here (no torchvision: its wheels can mismatch the CPU torch
build), random weights and BatchNorm statistics from a fixed seed:

* ``vgg``: VGG-11 (8 convs with ``ReLU(inplace=True)``, 5 max-pools, the
  3-layer classifier with dropout), 3x224x224 (``--quick``: channels / 16,
  3x32x32, a small classifier);
* ``resnet18``: ResNet-18 (7x7 stride-2 stem, BatchNorm, 8 BasicBlocks, 1x1
  stride-2 downsample convs, residual adds), 3x224x224;
* ``mobilenet_v2``: MobileNetV2 (inverted residuals: 1x1 expand, 3x3
  depthwise, 1x1 project; ReLU6), 3x224x224;
* ``seq2seq``: Embedding(8000, 256) -> LSTM(256, 2 layers of 256,
  batch_first) -> Linear(256, 8000) over 32 tokens;
* ``resnext_block``: two ResNeXt-50 32x4d bottlenecks (1x1, 3x3 of 32
  groups, 1x1, BatchNorm, residual adds): conv2_x's (256 channels at
  56x56, 32 groups of 4) and conv3_x's first (stride 2 to 512 channels at
  28x28, 32 groups of 8, a downsample conv), input 256x56x56
  (``--quick``: channels / 8, 16x16).

Each at batch 2 and 16, in inference (eval mode, ``torch.no_grad``) and
a training step (train mode: forward, the loss's gradients of all
parameters, and a plain SGD update of each, learning rate :data:`LR`, so
that every step runs on new weights as training does -- the library's
prepared weights are made again each step; dropout masks drawn from the
same seed for every implementation; each implementation steps a copy of
the model of its own, and its first step, from the same weights as
everyone's, is the one checked).
Implementations: ``tiramisu_py`` (``convert(copy.deepcopy(model))``: its
report is printed once per model), ``tiramisu_py[compile]`` (``torch.compile(model,
backend="tiramisu")``: the library's ops in Dynamo's graph, Inductor for the
rest; what it replaced is printed once per model and mode; ``--quick``: the
rewrite and AOTAutograd without Inductor), ``torch`` and ``torch.compile``
(``torch.compile(model)``, torch's defaults: the seq2seq's LSTM a graph
break; a model it fails on is reported with the error and left out;
``--quick`` leaves it out: its compile takes longer than the smoke test);
in inference also both compiled with ``options={"freezing": True}``
(``torch.compile[frozen]``, ``tiramisu_py[compile,frozen]``: the weights
taken as constants, Inductor's freezing and the backend's, which compares
no weight bytes per call; not with ``--quick``).
Training under Inductor draws its own dropout masks (VGG's and
MobileNet's check column shows it), as for ``torch.compile``.  The
implementations of a case are timed in rounds, one call of each per round
(the harness's ``interleave``: a slow spell of the host falls on all).
Defaults: 2 threads and 5 timed calls per implementation (``--threads`` / ``--repeats``
override; the compiled rows' compiles, one per case, are much of the
suite's ~10 minutes on 2 cores; 3 calls let one slow spell of a shared VM
decide a training row: MobileNetV2 b2 read 0.60x torch in one run of 3,
0.76x in the next of 5).  FLOP counts: 2 x the multiply-adds of the convolutions, linear
layers and LSTM gates (forward; x3 for a training step).  The check
column is the max abs difference of the output (inference) or the loss
(training) from torch eager's.
"""
from __future__ import annotations

import copy
import functools

from bench.harness import Case

BATCHES = (2, 16)
LR = 1e-3           # the training step's SGD learning rate
FROZEN = {"freezing": True}
MODELS = ("vgg", "resnet18", "mobilenet_v2", "seq2seq", "resnext_block")
_reported = set()


def cases(quick=False):
    return [_case(name, batch, train, quick) for name in MODELS for batch in BATCHES
            for train in (False, True)]


# ------------------------------------------------------------------ models
def vgg(quick=False):
    from torch import nn
    d = 16 if quick else 1
    cfg = [64, "M", 128, "M", 256, 256, "M", 512, 512, "M", 512, 512, "M"]
    layers, ci = [], 3
    for v in cfg:
        if v == "M":
            layers.append(nn.MaxPool2d(2))
        else:
            layers += [nn.Conv2d(ci, v // d, 3, padding=1), nn.ReLU(inplace=True)]
            ci = v // d
    hidden, pool = (64, 1) if quick else (4096, 7)
    return nn.Sequential(*layers, nn.AdaptiveAvgPool2d(pool), nn.Flatten(),
                         nn.Linear(ci * pool * pool, hidden), nn.ReLU(inplace=True),
                         nn.Dropout(), nn.Linear(hidden, hidden), nn.ReLU(inplace=True),
                         nn.Dropout(), nn.Linear(hidden, 10 if quick else 1000))


def _downsample(ci, co, stride):
    """A residual block's shortcut: None (the identity), or a strided 1x1
    conv and BatchNorm where the shape changes."""
    from torch import nn
    if stride == 1 and ci == co:
        return None
    return nn.Sequential(nn.Conv2d(ci, co, 1, stride, bias=False), nn.BatchNorm2d(co))


def _basic_block():
    from torch import nn

    class BasicBlock(nn.Module):
        def __init__(self, ci, co, stride):
            super().__init__()
            self.conv1 = nn.Conv2d(ci, co, 3, stride, 1, bias=False)
            self.bn1 = nn.BatchNorm2d(co)
            self.relu = nn.ReLU(inplace=True)
            self.conv2 = nn.Conv2d(co, co, 3, 1, 1, bias=False)
            self.bn2 = nn.BatchNorm2d(co)
            self.downsample = _downsample(ci, co, stride)

        def forward(self, x):
            identity = x if self.downsample is None else self.downsample(x)
            out = self.relu(self.bn1(self.conv1(x)))
            return self.relu(self.bn2(self.conv2(out)) + identity)

    return BasicBlock


def resnet18(quick=False):
    from torch import nn
    block, w = _basic_block(), (8 if quick else 64)
    layers, ci = [], w
    for k, co in enumerate((w, 2 * w, 4 * w, 8 * w)):
        for j in range(2):
            layers.append(block(ci, co, 2 if k > 0 and j == 0 else 1))
            ci = co
    return nn.Sequential(nn.Conv2d(3, w, 7, 2, 3, bias=False), nn.BatchNorm2d(w),
                         nn.ReLU(inplace=True), nn.MaxPool2d(3, 2, 1), *layers,
                         nn.AdaptiveAvgPool2d(1), nn.Flatten(), nn.Linear(ci, 10 if quick else 1000))


def _inverted_residual():
    from torch import nn

    class InvertedResidual(nn.Module):
        def __init__(self, ci, co, stride, expand):
            super().__init__()
            hidden = ci * expand
            self.use_res = stride == 1 and ci == co
            layers = []
            if expand != 1:
                layers += [nn.Conv2d(ci, hidden, 1, bias=False), nn.BatchNorm2d(hidden),
                           nn.ReLU6(inplace=True)]
            layers += [nn.Conv2d(hidden, hidden, 3, stride, 1, groups=hidden, bias=False),
                       nn.BatchNorm2d(hidden), nn.ReLU6(inplace=True),
                       nn.Conv2d(hidden, co, 1, bias=False), nn.BatchNorm2d(co)]
            self.conv = nn.Sequential(*layers)

        def forward(self, x):
            return x + self.conv(x) if self.use_res else self.conv(x)

    return InvertedResidual


def mobilenet_v2(quick=False):
    from torch import nn
    block = _inverted_residual()
    # (expansion, channels, repeats, stride)
    cfg = [(1, 16, 1, 1), (6, 24, 2, 2), (6, 32, 3, 2), (6, 64, 4, 2), (6, 96, 3, 1),
           (6, 160, 3, 2), (6, 320, 1, 1)]
    if quick:
        cfg = [(1, 8, 1, 1), (6, 8, 2, 2), (6, 16, 2, 2)]
    first, last = (8, 64) if quick else (32, 1280)
    layers, ci = [nn.Conv2d(3, first, 3, 2, 1, bias=False), nn.BatchNorm2d(first),
                  nn.ReLU6(inplace=True)], first
    for t, c, n, s in cfg:
        for j in range(n):
            layers.append(block(ci, c, s if j == 0 else 1, t))
            ci = c
    layers += [nn.Conv2d(ci, last, 1, bias=False), nn.BatchNorm2d(last), nn.ReLU6(inplace=True),
               nn.AdaptiveAvgPool2d(1), nn.Flatten(), nn.Dropout(0.2),
               nn.Linear(last, 10 if quick else 1000)]
    return nn.Sequential(*layers)


def seq2seq(quick=False):
    from torch import nn
    vocab, hidden = (50, 16) if quick else (8000, 256)

    class Seq2Seq(nn.Module):
        def __init__(self):
            super().__init__()
            self.embed = nn.Embedding(vocab, hidden)
            self.lstm = nn.LSTM(hidden, hidden, num_layers=2, batch_first=True)
            self.out = nn.Linear(hidden, vocab)

        def forward(self, tokens):
            return self.out(self.lstm(self.embed(tokens))[0])

    return Seq2Seq()


def _bottleneck():
    from torch import nn

    class Bottleneck(nn.Module):
        """ResNeXt's block: 1x1 to ``width``, 3x3 of 32 groups, 1x1 to ``co``."""

        def __init__(self, ci, width, co, stride):
            super().__init__()
            self.conv1 = nn.Conv2d(ci, width, 1, bias=False)
            self.bn1 = nn.BatchNorm2d(width)
            self.conv2 = nn.Conv2d(width, width, 3, stride, 1, groups=32, bias=False)
            self.bn2 = nn.BatchNorm2d(width)
            self.conv3 = nn.Conv2d(width, co, 1, bias=False)
            self.bn3 = nn.BatchNorm2d(co)
            self.relu = nn.ReLU(inplace=True)
            self.downsample = _downsample(ci, co, stride)

        def forward(self, x):
            identity = x if self.downsample is None else self.downsample(x)
            out = self.relu(self.bn1(self.conv1(x)))
            out = self.relu(self.bn2(self.conv2(out)))
            out = self.bn3(self.conv3(out))
            out += identity
            return self.relu(out)

    return Bottleneck


def resnext_block(quick=False):
    from torch import nn
    block, d = _bottleneck(), (8 if quick else 1)
    widths = (32, 64) if quick else (128, 256)          # (quick: 32 groups of 1 and 2)
    return nn.Sequential(block(256 // d, widths[0], 256 // d, 1),
                         block(256 // d, widths[1], 512 // d, 2))


def model(name, quick=False):
    """The torch model ``name`` (random weights and BatchNorm statistics,
    seed 0) and a function of the batch giving its input."""
    import torch
    torch.manual_seed(0)
    m = {"vgg": vgg, "resnet18": resnet18, "mobilenet_v2": mobilenet_v2,
         "seq2seq": seq2seq, "resnext_block": resnext_block}[name](quick)
    for mod in m.modules():
        if isinstance(mod, torch.nn.BatchNorm2d):
            mod.running_mean.uniform_(-0.1, 0.1)
            mod.running_var.uniform_(0.5, 1.5)
            torch.nn.init.uniform_(mod.weight, 0.5, 1.5)
    if name == "seq2seq":
        return m, lambda b: torch.randint(0, m.embed.num_embeddings, (b, 8 if quick else 32))
    if name == "resnext_block":
        channels, size = (32, 16) if quick else (256, 56)
        return m, lambda b: torch.randn(b, channels, size, size)
    size = 32 if quick else 224
    return m, lambda b: torch.randn(b, 3, size, size)


def forward_flops(name, batch, quick=False):
    """2 x the multiply-adds of the convs, linear layers and LSTMs of one
    forward of model ``name`` at ``batch`` (counted by hooks on a copy built
    on torch's meta device: shapes only, nothing computed)."""
    import torch
    from torch import nn
    with torch.device("meta"):
        m, make_input = model(name, quick)
        x = make_input(batch)
    total = [0.0]

    def count(mod, inp, out):
        y = out[0] if isinstance(out, tuple) else out
        if isinstance(mod, nn.Conv2d):
            total[0] += 2.0 * y.numel() * mod.weight[0].numel()
        elif isinstance(mod, nn.Linear):
            total[0] += 2.0 * y.numel() * mod.in_features
        elif isinstance(mod, nn.LSTM):
            tokens, h = y.numel() // mod.hidden_size, mod.hidden_size
            total[0] += 2.0 * tokens * 4 * h * ((mod.input_size + h) + 2 * h * (mod.num_layers - 1))
    hooks = [mod.register_forward_hook(count) for mod in m.modules()
             if isinstance(mod, (nn.Conv2d, nn.Linear, nn.LSTM))]
    m.eval()(x)
    for hook in hooks:
        hook.remove()
    return total[0]


# ------------------------------------------------------------------ cases
def _case(name, batch, train, quick):
    @functools.cache
    def built():
        import torch
        import schedules.nn
        m, make_input = model(name, quick)
        torch.manual_seed(1)
        x = make_input(batch)
        ours = schedules.nn.convert(copy.deepcopy(m))
        if name not in _reported:
            _reported.add(name)
            print(f"{name}: {ours.tiramisu_report}", flush=True)
        return m, ours, x

    @functools.cache
    def reference():
        m, _, x = built()
        return _step(copy.deepcopy(m), x, train)()

    def setup():
        import torch
        # Dynamo keeps every frame compiled before: the forwards models share
        # (Sequential's, the wrapper's) hit its recompile limit after a few
        # models and ran eager, both compiled rows silently (a case compiles its own)
        torch._dynamo.reset()
        m, ours, x = built()
        # (training updates the weights: each implementation steps a copy of its own, so
        # that every first call, the one checked, starts from the same weights)
        impls = {"tiramisu_py": _step(ours, x, train),
                 "torch": _step(copy.deepcopy(m) if train else m, x, train)}
        if not quick:
            compiled = functools.cache(lambda: torch.compile(copy.deepcopy(m)))
            impls["torch.compile"] = lambda: _step(compiled(), x, train)()
        backend = functools.cache(lambda: _backend(m, name, train, quick))
        impls["tiramisu_py[compile]"] = lambda: _step(backend(), x, train)()
        if not quick and not train:
            # freezing (Inductor's option, and the backend's): weights as constants
            frozen = functools.cache(lambda: torch.compile(copy.deepcopy(m), options=FROZEN))
            impls["torch.compile[frozen]"] = lambda: _step(frozen(), x, train)()
            ours_frozen = functools.cache(lambda: _backend(m, name, train, quick, FROZEN))
            impls["tiramisu_py[compile,frozen]"] = lambda: _step(ours_frozen(), x, train)()
        return impls

    def check(out):
        return float((out.double() - reference().double()).abs().max())

    mode = "train" if train else "inference"
    # timed in rounds, one call of each implementation per round: this 2-core VM's speed
    # drifts up to 2x within minutes, which back-to-back timing put into the ratios (a
    # compiled MobileNetV2 b2 read 27 ms after its converted 22; 18.7 against 18.0 in rounds)
    return Case(f"{name} b{batch} {mode}", forward_flops(name, batch, quick) * (3 if train else 1),
                setup, check, interleave=True)


def _own_forward(model):
    """``model`` (a copy) with its ``forward`` a function of its own code
    object: Dynamo marks a forward whose graph break it cannot handle (the
    seq2seq's LSTM, which torch.compile's row compiles at torch's default,
    without ``allow_rnn``) to run eager for every later compile in the
    process, and that mark is per code object -- the backend's seq2seq rows
    had measured eager (its report said nothing was replaced)."""
    import types
    fn = type(model).forward
    code = fn.__code__.replace()            # (a new code object: no mark of the class's)
    model.forward = types.MethodType(types.FunctionType(code, fn.__globals__, fn.__name__,
                                                        fn.__defaults__, fn.__closure__), model)
    return model


def _backend(m, name, train, quick, options=None):
    """A copy of ``m`` compiled with the "tiramisu" backend (``--quick``:
    AOTAutograd without Inductor's code generation), its forward a code
    object of its own (:func:`_own_forward`); the LSTM model with Dynamo's
    ``allow_rnn`` (else ``nn.LSTM`` is a graph break).  What the
    backend replaced is printed after the first call (the warm-up)."""
    import torch
    import schedules.dynamo
    compiled = torch.compile(_own_forward(copy.deepcopy(m)), backend="tiramisu",
                             options={"inner": "aot_eager"} if quick else options)

    class Compiled(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.compiled = compiled

        def forward(self, x):
            with torch._dynamo.config.patch(allow_rnn=True):
                out = self.compiled(x)
            key = (name, "backend", train, bool(options))
            if key not in _reported:
                _reported.add(key)
                counts = schedules.dynamo.compile_report(self.compiled).counts()
                print(f"{name} ({'training' if train else 'inference'}, "
                      f"tiramisu_py[compile{',frozen' if options else ''}]): "
                      f"{counts or 'NOTHING REPLACED (Dynamo ran eager?)'}",
                      flush=True)
            return out
    return Compiled()


def _step(m, x, train):
    """One timed call: the output in eval mode under no_grad, or in train
    mode a training step: gradients cleared, forward, backward and a plain
    SGD update of every parameter (:data:`LR`), so that each step's weights
    are new ones, as in training (the library's prepared weights made again
    each step); returns the loss (of the weights before the update)."""
    import torch

    def infer():
        m.eval()
        with torch.no_grad():
            return m(x)

    def step():
        m.train()
        torch.manual_seed(2)                       # the same dropout masks for everyone
        for p in m.parameters():
            p.grad = None
        loss = m(x).float().square().mean()
        loss.backward()
        with torch.no_grad():
            for p in m.parameters():
                if p.grad is not None:
                    p.add_(p.grad, alpha=-LR)
        return loss.detach()

    return step if train else infer

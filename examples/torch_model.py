"""A small VGG-style CNN built from torch modules, moved onto this compiler's
kernels with ``from_torch``, compiled with ``torch.compile(fullgraph=True)``
and trained for a few steps with the backward kernels written in the DSL.

    python3 -m examples.torch_model [--batch 16] [--steps 5]

Checks: the converted model's output equals the torch model's; the compiled
one (one graph, zero graph breaks, counted by ``torch._dynamo``) gives the
same output; the gradients of
our backward match torch's; the loss decreases.  Prints eager / compiled /
original timings (first calls compile kernels; the timings are of later
calls)."""
from __future__ import annotations

import argparse
import copy
import time

import torch
from torch import nn

import schedules.nn as tnn


def vgg(channels=(3, 16, 32, 64), classes=10, size=32):
    """Three conv-ReLU-maxpool blocks and a linear head (torch modules)."""
    blocks = []
    for ci, co in zip(channels, channels[1:]):
        blocks += [nn.Conv2d(ci, co, 3, padding=1), nn.ReLU(), nn.MaxPool2d(2)]
    side = size // 2 ** (len(channels) - 1)
    return nn.Sequential(nn.Sequential(*blocks), nn.Flatten(),
                         nn.Linear(channels[-1] * side * side, classes))


def convert(model, algo="direct"):
    """The one-line-per-layer migration, spelled out: each conv-ReLU-pool
    block becomes one fused module, the head a tiramisu Linear (these share
    the torch modules' parameters).  ``tnn.convert(model)`` does the same."""
    f = model[0]
    fused = [tnn.ConvReLUMaxPool2d.from_torch(f[k:k + 3], algo=algo) for k in range(0, len(f), 3)]
    model[0] = nn.Sequential(*fused)
    model[2] = tnn.Linear.from_torch(model[2])
    return model


def timed(fn, x, repeats=10):
    """Median seconds of ``fn(x)`` (after one warm-up call)."""
    fn(x)
    samples = []
    for _ in range(repeats):
        t0 = time.perf_counter()
        fn(x)
        samples.append(time.perf_counter() - t0)
    return sorted(samples)[len(samples) // 2]


def main(batch=16, steps=5, lr=0.05):
    torch.manual_seed(0)
    t_start = time.perf_counter()
    original = vgg()
    ours = convert(copy.deepcopy(original))
    x = torch.randn(batch, 3, 32, 32)
    y = torch.randint(0, 10, (batch,))

    ref = original(x)
    out = ours(x)
    print(f"converted model: max |ours - torch| = {(out - ref).abs().max().item():.2e}")
    torch.testing.assert_close(out, ref, atol=1e-4, rtol=1e-4)

    # one torch.compile of the training graph (forward, and backward through
    # our backward ops); fullgraph=True raises on any graph break
    counters = torch._dynamo.utils.counters
    counters.clear()
    compiled = torch.compile(ours, fullgraph=True)
    out_c = compiled(x)
    breaks = sum(counters["graph_break"].values())
    print(f"torch.compile: {counters['stats']['unique_graphs']} graph(s), {breaks} graph breaks")
    assert breaks == 0
    torch.testing.assert_close(out_c, ref, atol=1e-4, rtol=1e-4)

    # gradients of our backward kernels vs torch's, at the same weights
    loss_fn = nn.CrossEntropyLoss()
    loss_fn(original(x), y).backward()
    loss_fn(ours(x), y).backward()
    worst = max((p.grad - q.grad).abs().max().item() / (q.grad.abs().max().item() + 1e-12)
                for p, q in zip(ours.parameters(), original.parameters()))
    print(f"gradients: max relative difference to torch's = {worst:.2e}")
    assert worst < 1e-3

    opt = torch.optim.SGD(ours.parameters(), lr=lr)
    losses = []
    for _ in range(steps):
        opt.zero_grad()
        loss = loss_fn(compiled(x), y)          # compiled forward, our backward kernels
        loss.backward()
        opt.step()
        losses.append(loss.item())
    print("training loss:", " ".join(f"{v:.4f}" for v in losses))
    assert losses[-1] < losses[0]

    t_orig, t_ours, t_comp = (timed(m, x) for m in (original, ours, compiled))
    print(f"training-mode forward, batch {batch}, {torch.get_num_threads()} threads (median of 10): "
          f"torch {t_orig * 1e3:.2f} ms, ours eager {t_ours * 1e3:.2f} ms, "
          f"ours compiled {t_comp * 1e3:.2f} ms")
    print(f"total {time.perf_counter() - t_start:.1f} s (includes compiling the kernels "
          "and torch.compile)")


if __name__ == "__main__":
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--batch", type=int, default=16)
    p.add_argument("--steps", type=int, default=5)
    a = p.parse_args()
    main(a.batch, a.steps)

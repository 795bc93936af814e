"""Per-call overhead of a compiled kernel as a PyTorch op (issue 16).

    python3 -m bench.torch_overhead [--calls 2000] [--rounds 7]

Times, on tiny tensors (so that the call, not the kernel, is measured):
a plain kernel call on NumPy arrays and on torch tensors; the same kernel
through ``Kernel.torch_op`` (``torch.ops.ns.name``) in eager, under
``torch.inference_mode``, and on inputs that require grad (autograd);
``schedules.gemm`` against ``torch.ops.tiramisu.gemm``; and torch's own
``torch.add`` for scale, and the same kernel wrapped with
``torch.library.custom_op`` (the API ``Kernel.torch_op`` does not use).  Prints the median microseconds per call of
``--rounds`` rounds of ``--calls`` calls each.  Compare only numbers of one run.

Then a library conv of a MobileNet layer (960-channel 3x3 depthwise, 7x7,
batch 1: a small kernel, called ~150 times a step in such a model) the four
ways it is called -- ``schedules.conv2d``, a converted ``nn.Conv2d`` (what
``schedules.nn.convert`` runs), ``torch.ops.tiramisu.conv2d`` (what a graph
compiled with the "tiramisu" backend calls) and torch's ``F.conv2d`` -- and
the same kernel called on its own (``Kernel.__call__``, the solver the find
step chose): the difference is the library's cost above the kernel call
(whose own cost is the plain-call rows above, on a 16-element kernel).
Then that conv as the models call it, a BatchNorm folded in and the ReLU6
in the kernel: a converted chain, ``torch.ops.tiramisu.conv2d_folded`` and
torch's modules, against the same kernel's own call.
"""
from __future__ import annotations

import argparse
import copy
import time

import numpy as np


def _median_us(fn, calls, rounds):
    for _ in range(min(calls, 200)):
        fn()
    samples = []
    for _ in range(rounds):
        t0 = time.perf_counter()
        for _ in range(calls):
            fn()
        samples.append((time.perf_counter() - t0) / calls * 1e6)
    return sorted(samples)[len(samples) // 2]


def main(calls=2000, rounds=7):
    import torch

    import schedules
    import schedules.torch_ops  # noqa: F401
    import tiramisu_py as tp

    f = tp.Function("axpy_overhead", params=["N"])
    i = f.var("i", 0, "N")
    X, Y = f.input("X", ("N",), tp.float32), f.input("Y", ("N",), tp.float32)
    f.computation("Z", [i], 2.0 * X[i] + Y[i])
    k = f.compile()
    op = k.torch_op("tp_bench::axpy", backward=lambda ctx, g: (2 * g, g))
    # the same kernel through torch.library.custom_op, for comparison
    @torch.library.custom_op("tp_bench::axpy_custom_op", mutates_args=(), device_types="cpu",
                             schema="(Tensor x, Tensor y) -> Tensor")
    def custom(x, y):
        return k(x.contiguous(), y.contiguous())
    custom.register_fake(lambda x, y: torch.empty_like(x))
    custom.register_autograd(lambda ctx, g: (2 * g, g))
    xn, yn = np.ones(16, np.float32), np.ones(16, np.float32)
    xt, yt = torch.ones(16), torch.ones(16)
    xg = torch.ones(16, requires_grad=True)
    a, b = torch.ones(8, 8), torch.ones(8, 8)
    gemm_op = torch.ops.tiramisu.gemm

    def inference():
        with torch.inference_mode():
            op(xt, yt)

    rows = [("torch.add (reference)", lambda: torch.add(xt, yt)),
            ("plain kernel call, NumPy", lambda: k(xn, yn)),
            ("plain kernel call, torch", lambda: k(xt, yt)),
            ("torch.ops op, eager", lambda: op(xt, yt)),
            ("torch.ops op, inference_mode", inference),
            ("same kernel via custom_op, eager", lambda: custom(xt, yt)),
            ("torch.ops op, input requires grad", lambda: op(xg, yt)),
            ("plain call, input requires grad (via op)", lambda: k(xg, yt)),
            ("schedules.gemm 8x8", lambda: schedules.gemm(a, b)),
            ("torch.ops.tiramisu.gemm 8x8", lambda: gemm_op(a, b))]
    print(f"per-call time, median of {rounds} x {calls} calls, "
          f"{torch.get_num_threads()} torch threads")
    for name, fn in rows:
        print(f"  {name:44s} {_median_us(fn, calls, rounds):8.1f} us")
    _depthwise(torch, calls, rounds)


def _depthwise(torch, calls, rounds):
    """The depthwise conv rows (see the module)."""
    import schedules
    import schedules.nn
    from schedules.core.find import find
    from schedules.problems.conv import ConvProblem
    from schedules.registry import SOLVERS
    torch.manual_seed(0)
    x, w, b = torch.randn(1, 960, 7, 7), torch.randn(960, 1, 3, 3), torch.randn(960)
    conv = torch.nn.Conv2d(960, 960, 3, padding=1, groups=960)
    with torch.no_grad():
        conv.weight.copy_(w)
        conv.bias.copy_(b)
    module = schedules.nn.Conv2d.from_torch(conv)
    p, args = ConvProblem.from_call("conv2d", x, w, b, 1, 1, 1, 960)
    solver = find(p, SOLVERS["conv2d"], args, call="conv2d")
    run = solver.runner(p)                          # the kernel found once: then only its call
    op = torch.ops.tiramisu.conv2d
    rows = [("kernel alone (" + solver.name + ", Kernel call)", lambda: run(args)),
            ("schedules.conv2d", lambda: schedules.conv2d(x, w, b, 1, 1, 1, 960)),
            ("converted nn.Conv2d", lambda: module(x)),
            ("torch.ops.tiramisu.conv2d", lambda: op(x, w, b, [1, 1], [1, 1], [1, 1], 960)),
            ("torch F.conv2d", lambda: torch.nn.functional.conv2d(x, w, b, 1, 1, 1, 960))]
    print("depthwise conv 960 x 7x7, 3x3, batch 1 (no_grad):")
    with torch.no_grad():
        times = [(name, _median_us(fn, calls, rounds)) for name, fn in rows]
    _print(times)
    _folded(torch, calls, rounds, x, conv)


def _print(times):
    """The rows, the first the kernel's own call: the others' cost above it."""
    alone = times[0][1]
    for name, us in times:
        extra = f"  (+{us - alone:.1f} us above the kernel call)" if name.startswith(
            ("schedules", "converted", "torch.ops")) else ""
        print(f"  {name:44s} {us:8.1f} us{extra}")


def _folded(torch, calls, rounds, x, conv):
    """The same conv as the models run it: a BatchNorm folded in and a ReLU6
    applied by the kernel (the chain ``convert`` fuses, the op the backend's
    graph calls)."""
    import schedules.nn
    from schedules.core.find import find
    from schedules.problems.conv import ConvProblem
    from schedules.registry import SOLVERS
    from schedules.torch_fused_ops import folded
    nn = torch.nn
    bn = nn.BatchNorm2d(960)
    with torch.no_grad():
        bn.weight.uniform_(0.5, 1.5)
        bn.running_var.uniform_(0.5, 1.5)
        bn.running_mean.uniform_(-0.1, 0.1)
    chain = nn.Sequential(conv, bn, nn.ReLU6()).eval()
    converted = schedules.nn.convert(copy.deepcopy(chain)).eval()
    with torch.no_grad():
        fw, fb = folded(conv.weight, conv.bias, bn.weight, bn.bias, bn.running_mean,
                        bn.running_var, bn.eps)
    p, args = ConvProblem.from_call("conv2d", x, fw, fb, 1, 1, 1, 960, activation="relu6")
    solver = find(p, SOLVERS["conv2d"], args, call="conv2d")
    run = solver.runner(solver.problem_run(p))
    op = torch.ops.tiramisu.conv2d_folded
    conv_args = (x, conv.weight, conv.bias, bn.weight, bn.bias, bn.running_mean,
                 bn.running_var, bn.eps, [1, 1], [1, 1], [1, 1], 960)
    rows = [("kernel alone (" + solver.name + ", ReLU6 epilogue)", lambda: run(args)),
            ("converted conv + BatchNorm + ReLU6", lambda: converted(x)),
            ("torch.ops.tiramisu.conv2d_folded",
             lambda: op(*conv_args, activation="relu6")),
            ("torch conv + BatchNorm + ReLU6 (eval)", lambda: chain(x))]
    print("the same conv, BatchNorm folded, ReLU6 (no_grad):")
    with torch.no_grad():
        _print([(name, _median_us(fn, calls, rounds)) for name, fn in rows])


if __name__ == "__main__":
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--calls", type=int, default=2000)
    p.add_argument("--rounds", type=int, default=7)
    a = p.parse_args()
    main(a.calls, a.rounds)

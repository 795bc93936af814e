"""Benchmark suites: the operator library (``schedules``) against NumPy and PyTorch.

    tiramisu-py bench [gemm|conv|fused|sparse|rnn|polybench|paper|models|all ...]
                      [--threads 1,2] [--repeats N] [--quick] [--shapes 0,2]
                      [--dtype fp32|bf16|fp16|int8] [--impls NAME,...] [--json PATH] [--png PATH]
    (or python -m bench ... from the repository root)

gemm   square float32 C = A @ B, n = 512, 1024, 2048: tiramisu_py (schedules.gemm),
       numpy, torch (torch.mm), torch.compile.  ``--dtype bf16|fp16``: torch
       tensors of that dtype, schedules.gemm (float32 accumulation) against
       torch.mm in the same dtype (oneDNN) and our float32 GEMM on the same
       values ("tiramisu_py fp32"); ``--dtype int8``: schedules.gemm_int8
       against torch._int_mm (named "torch").  The header names the host's dot-product
       instructions (avx512_bf16: vdpbf16ps, avx512_vnni: vpdpbusd).
conv   NCHW float32, 3x3, stride 1, padding 1, with bias: tiramisu_py with each
       algorithm forced (schedules.CONV_ALGOS) and "auto", torch
       (F.conv2d), torch.compile.  Checked against torch (or, without torch,
       the float64 NumPy reference of examples/conv2d.py).
fused  the same convolutions followed by ReLU and a 2x2 max-pool:
       tiramisu_py (schedules.conv_relu_maxpool), torch eager (unfused), and
       torch.compile of the same function.
sparse CSR sparse-weight conv over a density sweep, break-even density, time vs
       density plot (bench/suite_sparse.py; not part of "all").
polybench  PolyBench/C 4.2.1's 30 kernels: speedups of the hand schedules and
       of auto_schedule() over the plain algorithm (bench/suite_polybench.py;
       --size, --kernels; 2 threads by default; not part of "all").

rnn    multilayer LSTM and GRU against torch.nn.LSTM/GRU and torch.compile, with the
       achieved weight bandwidth at batch 1 (bench/suite_rnn.py).
paper  the TIRAMISU paper's table: Conv, Conv-ReLU-MaxPool, Resize-Conv-ReLU-MaxPool,
       the VGG and ResNet blocks, the seq-to-seq LSTM, dense and sparse, against torch
       and torch.compile, with the paper's figures and the break-even density
       (bench/suite_paper.py; not part of "all").
contention  the library's calls quiet and beside 1 and 4 busy processes, against torch in
       the same conditions (bench/suite_contention.py; not part of "all").
models whole models converted by schedules.nn.convert and compiled with the "tiramisu"
       torch.compile backend (VGG-11, ResNet-18, MobileNetV2, an Embedding-LSTM-Linear
       seq2seq) against torch eager and torch.compile, inference and a training step (fwd+bwd+SGD),
       batch 2 and 16, 2 threads (bench/suite_models.py; not part of "all").
peers  auto_schedule() against Halide's three autoschedulers and TVM's MetaSchedule on seven
       kernels, each side in its own process (--peers-python: the one with halide and tvm),
       normalised by torch in each (bench/suite_peers.py; not part of "all").

FLOP counts: 2*N*M*K for GEMM, 2*N*Co*Ho*Wo*Ci*Kh*Kw for convolutions (bias,
ReLU and pooling not counted).  Inputs come from a fixed-seed RNG, are made
once per case and shared by all implementations (torch sees them through
torch.from_numpy, without copies).  ``--quick`` uses tiny sizes (for tests).
"""
from __future__ import annotations

import argparse
import functools
import json
import os

import numpy as np
from tiramisu_py.cli import Command

from bench import (harness, markdown, suite_contention, suite_models, suite_paper, suite_peers,
                   suite_polybench, suite_rnn, suite_sparse)
from bench.harness import Case

SUITES = ("gemm", "conv", "fused", "rnn")
DTYPES = {"fp32": "float32", "bf16": "bfloat16", "fp16": "float16", "int8": "int8"}
GEMM_SIZES = {False: (512, 1024, 2048), True: (48, 96)}
# (batch, in channels, out channels, height, width)
CONV_SHAPES = {False: ((8, 128, 256, 112, 112), (32, 64, 64, 56, 56),
                       (32, 512, 512, 14, 14), (32, 3, 32, 224, 224)),
               True: ((2, 8, 16, 12, 12), (1, 3, 8, 18, 18))}


def cases(suite="all", quick=False, shapes=None, dtype="fp32") -> list[Case]:
    """The cases of ``suite`` (a name or a list of names; "all": every
    suite); ``shapes``: indices of the
    sizes to keep in each suite; ``dtype``: the GEMM's (:data:`DTYPES`).
    Nothing is allocated or imported until a case's ``setup()``."""
    gemm = _gemm if dtype == "fp32" else functools.partial(_gemm_low, dtype=dtype)
    make = {"gemm": lambda: [gemm(n) for n in GEMM_SIZES[quick]],
            "conv": lambda: [_conv("conv", s) if dtype == "fp32" else _conv_low(s, dtype)
                             for s in CONV_SHAPES[quick]],
            "fused": lambda: [_conv("fused", s) for s in CONV_SHAPES[quick]],
            "rnn": lambda: suite_rnn.cases(quick, DTYPES[dtype]),
            "models": lambda: suite_models.cases(quick)}
    names = [suite] if isinstance(suite, str) else list(suite)     # a name or names
    names = [n for name in names for n in (SUITES if name == "all" else (name,))]
    return [case for name in names
            for i, case in enumerate(make[name]()) if shapes is None or i in shapes]


def _random(*shapes):
    rng = np.random.default_rng(0)
    return [rng.standard_normal(s, dtype=np.float32) for s in shapes]


def _max_abs_error(out, reference):
    return float(np.max(np.abs(np.asarray(out, np.float64) - reference)))


def _torch_impls(op, *arrays):
    """``{"torch": eager, "torch.compile": compiled}`` for ``op`` on zero-copy
    tensor views of ``arrays``; empty without torch."""
    try:
        import torch
    except ImportError:
        return {}
    F = torch.nn.functional
    fn = {"gemm": lambda a, b: torch.mm(a, b),
          "conv": lambda x, w, b: F.conv2d(x, w, b, padding=1),
          "fused": lambda x, w, b: F.max_pool2d(F.relu(F.conv2d(x, w, b, padding=1)), 2)}[op]
    # made on the first call (importing torch._dynamo alone takes seconds), compiled on the
    # first call of the result: both in the warm-up
    compiled = functools.cache(lambda: torch.compile(fn, dynamic=False))
    tensors = [torch.from_numpy(a) for a in arrays]
    return {"torch": lambda: fn(*tensors), "torch.compile": lambda: compiled()(*tensors)}


def _gemm(n):
    @functools.cache
    def inputs():
        return _random((n, n), (n, n))

    @functools.cache
    def reference():
        a, b = inputs()
        return a.astype(np.float64) @ b.astype(np.float64)

    def setup():
        import schedules
        a, b = inputs()
        # numpy last: OpenBLAS's threads spin for a while after its calls
        return {"tiramisu_py": lambda: schedules.gemm(a, b), **_torch_impls("gemm", a, b),
                "numpy": lambda: a @ b}

    return Case(f"gemm {n}", 2.0 * n ** 3, setup, lambda out: _max_abs_error(out, reference()))


def _gemm_low(n, dtype):
    """``a @ b`` in bf16/fp16 (torch tensors: NumPy has no bfloat16) or int8
    (``torch._int_mm``), checked against the float64 product of the same values."""
    @functools.cache
    def inputs():
        import torch
        if dtype == "int8":
            rng = np.random.default_rng(0)
            return [torch.from_numpy(rng.integers(-128, 128, (n, n), dtype=np.int8))
                    for _ in range(2)]
        return [torch.from_numpy(x).to(getattr(torch, DTYPES[dtype])) for x in _random((n, n), (n, n))]

    @functools.cache
    def reference():
        a, b = inputs()
        return a.double().numpy() @ b.double().numpy()

    def setup():
        import schedules
        import torch
        a, b = inputs()
        if dtype == "int8":
            return {"tiramisu_py": lambda: schedules.gemm_int8(a, b),
                    "torch": lambda: torch._int_mm(a, b)}
        a32, b32 = a.float(), b.float()
        return {"tiramisu_py": lambda: schedules.gemm(a, b), "torch": lambda: torch.mm(a, b),
                "tiramisu_py fp32": lambda: schedules.gemm(a32, b32)}

    def check(out):
        return _max_abs_error(out.double().numpy(), reference())

    # the products on the host's dot-product instruction: its measured peak
    dot = {"int8": "vnni_gops", "bfloat16": "bf16_gflops"}.get(DTYPES[dtype])
    return Case(f"gemm {dtype} {n}", 2.0 * n ** 3, setup, check,
                ceiling={impl: dot for impl in ("tiramisu_py", "torch")} if dot else {})


def _conv(op, shape):
    """A 3x3 stride-1 padding-1 convolution with bias (``op="conv"``), or that
    followed by ReLU and a 2x2 max-pool (``op="fused"``)."""
    n, ci, co, h, w = shape

    @functools.cache
    def inputs():
        x, weight, bias = _random((n, ci, h, w), (co, ci, 3, 3), (co,))
        return x, weight / np.float32(np.sqrt(ci * 9)), bias

    @functools.cache
    def reference():
        torch_impl = _torch_impls(op, *inputs()).get("torch")
        if torch_impl:
            return torch_impl().numpy()
        from examples import conv2d, conv_relu_maxpool
        return (conv2d if op == "conv" else conv_relu_maxpool).reference(*inputs())

    def setup():
        import schedules
        x, weight, bias = inputs()
        if op == "conv":
            ours = {f"tiramisu_py[{algo}]":
                    (lambda algo=algo: schedules.conv2d(x, weight, bias, padding=1, algo=algo))
                    for algo in (*schedules.CONV_ALGOS, "auto")}
        else:
            ours = {"tiramisu_py": lambda: schedules.conv_relu_maxpool(x, weight, bias, padding=1, pool=2)}
        return {**ours, **_torch_impls(op, x, weight, bias)}

    label = "conv" if op == "conv" else "conv+relu+pool"
    return Case(f"{label} {n}x{ci}x{h}x{w} -> {co}", 2.0 * n * co * h * w * ci * 9, setup,
                lambda out: _max_abs_error(out, reference()))


def _conv_low(shape, dtype):
    """The conv case in bf16/fp16 (torch tensors): ours (``algo="auto"``, float32
    sums, the result rounded once) and torch's conv2d in that dtype (oneDNN),
    and ours in float32 on the same values; checked against the float64
    convolution of those values."""
    n, ci, co, h, w = shape

    @functools.cache
    def inputs():
        import torch
        x, weight, bias = _random((n, ci, h, w), (co, ci, 3, 3), (co,))
        t = getattr(torch, DTYPES[dtype])
        return [torch.from_numpy(a).to(t) for a in (x, weight / np.float32(np.sqrt(ci * 9)), bias)]

    @functools.cache
    def reference():
        import torch
        return torch.nn.functional.conv2d(*(a.double() for a in inputs()), padding=1).numpy()

    def setup():
        import schedules
        import torch
        x, weight, bias = inputs()
        x32, w32, b32 = (a.float() for a in inputs())
        return {"tiramisu_py": lambda: schedules.conv2d(x, weight, bias, padding=1),
                "tiramisu_py fp32": lambda: schedules.conv2d(x32, w32, b32, padding=1),
                "torch": lambda: torch.nn.functional.conv2d(x, weight, bias, padding=1)}

    return Case(f"conv {dtype} {n}x{ci}x{h}x{w} -> {co}", 2.0 * n * co * h * w * ci * 9, setup,
                lambda out: _max_abs_error(out.double().numpy(), reference()))


# ------------------------------------------------------------- command line

def _indices(text):
    return [int(t) for t in text.split(",") if t.strip()]


def parser(prog: str) -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog=prog, description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("suite", nargs="*", default=["all"],
                   choices=(*SUITES, "sparse", "polybench", "paper", "models", "contention",
                            "peers", "all"),
                   help="which suites, run one after the other in this process's order "
                        "(default: all)")
    p.add_argument("--quick", action="store_true",
                   help="tiny sizes (a smoke test, not a benchmark)")
    p.add_argument("--shapes", type=_indices, metavar="0,2",
                   help="only these sizes of each suite, by index (gemm 0-2, conv/fused 0-3, "
                        "rnn 0-6: lstm/gru (a), (b), (c), sparse lstm (a); models 0-15: "
                        "vgg, resnet18, mobilenet_v2, seq2seq x batch 2, 16 x inference, "
                        "train; 16-19 resnext_block)")
    p.add_argument("--dtype", default="fp32", choices=tuple(DTYPES),
                   help="the dtype of the gemm (fp32, bf16, fp16, int8), conv and rnn suites "
                        "(fp32, bf16, fp16); the reduced ones need torch (default fp32)")
    harness.add_arguments(p)
    suite_sparse.add_arguments(p)
    suite_polybench.add_arguments(p)
    suite_contention.add_arguments(p)
    suite_peers.add_arguments(p)
    return p


QUICK_NOTE = ("--quick: a SMOKE TEST of the harness on tiny sizes, NOT A BENCHMARK: the times "
              "and ratios below are dominated by call overhead and mean nothing")


def main(args: argparse.Namespace) -> dict:
    """Runs the suites named (``args.suite``: a name or a list of names).  With
    several, each runs in turn and ``--json`` / ``--png`` get one document
    (``{suite: report}``) / one plot per suite (``NAME-SUITE.png``)."""
    names = [args.suite] if isinstance(args.suite, str) else list(args.suite)
    if len(names) == 1:
        return _main_one(argparse.Namespace(**{**vars(args), "suite": names[0]}))
    reports = {}
    for name in names:
        png = args.png and f"{args.png.rsplit('.', 1)[0]}-{name}.png"
        reports[name] = _main_one(argparse.Namespace(**{**vars(args), "suite": name,
                                                        "json": None, "png": png}))
    if args.json:
        with open(args.json, "w") as f:
            json.dump(reports, f, indent=1)
        print(f"wrote {args.json}")
    return reports


def _main_one(args: argparse.Namespace) -> dict:
    if not getattr(args, "md", None):
        return _run_one(args)
    with markdown.captured() as tee:
        report = _run_one(args)
    if args.quick:
        print("--md: not written (a --quick run is a smoke test)")
        return report
    suite = args.suite
    if suite == "contention":        # a section per wait policy and import order: runs of a kind
        suite += f" (OMP_WAIT_POLICY={os.environ.get('OMP_WAIT_POLICY') or 'unset'}"
        suite += f", {args.first} first)" if getattr(args, "first", "torch") != "torch" else ")"
    markdown.update(args.md, suite, markdown.machine_key(harness.machine_info()),
                    _command(args), tee.copy.getvalue())
    print(f"wrote the {suite} section of {args.md}")
    return report


def _command(args) -> str:
    """The command line of a run, as the page of results quotes it."""
    words = ["tiramisu-py bench", args.suite]
    for name in ("threads", "repeats", "shapes", "impls", "busy"):
        value = getattr(args, name, None)
        if name == "busy" and (args.suite != "contention" or value == list(suite_contention.BUSY)):
            continue                     # the contention suite's own option, at its default
        if value is not None and not (name == "repeats" and value == 5):
            text = ",".join(map(str, value)) if isinstance(value, (list, tuple)) else str(value)
            words.append(f"--{name} {text}")
    if getattr(args, "dtype", "fp32") != "fp32":
        words.append(f"--dtype {args.dtype}")
    if args.suite == "contention" and getattr(args, "first", "torch") != "torch":
        words.append(f"--first {args.first}")
    return " ".join(words)


def _run_one(args: argparse.Namespace) -> dict:
    if args.quick:
        print(QUICK_NOTE, flush=True)
    if args.suite == "sparse":
        return suite_sparse.main(args)
    if args.suite == "contention":
        return suite_contention.main(args)
    if args.suite == "peers":
        return suite_peers.main(args)
    if args.dtype != "fp32" and (args.suite not in ("gemm", "conv", "rnn")
                                 or args.dtype == "int8" and args.suite != "gemm"):
        raise SystemExit(f"--dtype {args.dtype}: the gemm suite has bf16, fp16 and int8, the "
                         f"conv and rnn suites bf16 and fp16")
    if args.suite == "polybench":
        return suite_polybench.main(args)
    if args.suite == "paper":
        return suite_paper.main(args)
    # models: 2 threads, 5 timed calls by default (its compiles are much of its ~10 minutes)
    defaults = dict(threads=(2,), repeats=5) if args.suite == "models" else {}
    report = harness.run(cases, dict(suite=args.suite, quick=args.quick, shapes=args.shapes,
                                     dtype=args.dtype),
                         **harness.run_args(args, **defaults))
    if args.suite in ("rnn", "all"):
        print(suite_rnn.annotate(report, cases(args.suite, args.quick, args.shapes, args.dtype)))
        if args.json:                   # again, with the bandwidths
            with open(args.json, "w") as f:
                json.dump(report, f, indent=1)
    return report


COMMAND = Command("bench", "benchmark the operator library against NumPy and PyTorch "
                           "(tiramisu-py bench --help)",
                  lambda argv, sub: main(parser("tiramisu-py bench").parse_args(argv)), raw=True)

"""tiramisu_py's CUDA operators against torch (cuBLAS / cuDNN) on a GPU.

    python -m bench.bench_cuda [--suite all|gemm,gemm16,gemmv,conv,sparse,lstm] [--quick]
                               [--sizes 512,4096] [--repeats 20] [--json PATH] [--list]
                               [--record]

The GPU GEMM of issue 53 in one run (a few minutes):
``python -m bench.bench_cuda --suite gemm,gemm16,gemmv --json gemm.json --record``.

Cases (the CPU suites' shapes, bench/suites.py, suite_sparse.py, suite_rnn.py):
gemm    n x n x n, n in 512, 1024, 2048, 4096 (``--sizes``):
        ``schedules.gemm(a, b, target="cuda")`` vs ``torch.mm`` (cuBLAS)
gemm16  bfloat16 n x n x n, n in 1024, 4096 (``--sizes``): the tensor-core
        solver (``mma.sync``, float32 sums, the result rounded to bfloat16)
        vs ``torch.mm`` of the same bfloat16 tensors (cuBLAS; its error is
        that of the rounding), and float16
gemmv   the GEMM's schedule variants at 1024 and 4096 (``--sizes``): the
        library's (warp tiles, cp.async pipeline, the device's parameters),
        the classic shared-tile schedule, 2 and 4 stages, swizzled A tiles,
        double-buffered register fragments; vs ``torch.mm``
conv    the conv suite's NCHW shapes, 3x3, stride 1, padding 1, bias:
        ``schedules.conv2d(x, w, b, stride=1, padding=1, target="cuda")`` vs
        ``F.conv2d`` (cuDNN)
sparse  the sparse suite's shapes at 1%, 10%, 50% nonzero weights:
        ``schedules.sparse_conv2d(x, csr, b, padding=1, target="cuda")`` vs
        cuDNN dense on the same (mostly zero) weights ("torch") and im2col
        (``F.unfold``) + ``torch.sparse.mm`` with a CSR weight ("torch.sparse");
        GFLOP/s are dense-equivalent
lstm    the rnn suite's LSTM sizes: ``schedules.lstm(x, weights,
        target="cuda")`` vs ``torch.nn.LSTM`` (cuDNN) with the same weights

``--record``: the fastest gemmv variant of each size that beats the
library's own by more than 3% is recorded in the tuning store for this GPU
(:func:`schedules.core.tuned.save` with the device's key), so that
``schedules.gemm`` uses it from then on.

All inputs are torch CUDA float32 tensors (gemm16: bfloat16, float16); TF32 is off for cuBLAS and cuDNN
(our kernels compute in float32).  Each implementation is called once as a
warm-up (it compiles; its result is checked against torch's: max abs error;
an exception there, e.g. a ``target="cuda"`` path not built yet, is reported
in the table and the JSON, not raised), then ``--repeats`` calls are timed
one by one with CUDA events on torch's current stream: median and minimum,
GFLOP/s from the median, the ratio to "torch" (> 1: faster).  The JSON has
the layout of bench/harness.py's reports (one "thread count": "gpu"), plus
the ptxas resources of the CUDA kernels each case compiled.

Needs a GPU, its driver, torch with CUDA and cuda-python; otherwise it says
which is missing and exits with status 2 (nothing is measured).  ``--list``
prints the case table (names, GFLOP counts) without a GPU.
"""
from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import warnings

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from bench import markdown, suite_rnn, suite_sparse, suites          # noqa: E402
from bench.harness import Case, _merge, format_table, machine_info    # noqa: E402

SUITES = ("gemm", "gemm16", "gemmv", "conv", "sparse", "lstm")
GEMM_SIZES = {False: (*suites.GEMM_SIZES[False], 4096), True: (256, 512)}
VARIANT_SIZES = {False: (1024, 4096), True: (512,)}
# label -> (schedule, parameters) of the gemmv suite ("warp": gemm_cuda_warp)
VARIANTS = {"classic": ("classic", {}), "stages=2": ("warp", {"stages": 2}),
            "stages=4": ("warp", {"stages": 4}), "swizzle": ("warp", {"swizzle": True}),
            "frag_stages=2": ("warp", {"frag_stages": 2})}
SPARSE_DENSITIES = {False: (1, 10, 50), True: (10,)}
KEY = "gpu"                     # the harness's thread-count key for GPU runs
DEVICE = "cuda"                 # where setup() puts the inputs ("cpu" in the tests)


def cases(suite="all", quick=False, sizes=None) -> list[Case]:
    """The cases of ``suite`` ("all" or a comma-separated list); nothing is
    allocated and no GPU is touched until a case's ``setup()``."""
    names = SUITES if suite == "all" else tuple(suite.split(","))
    unknown = [n for n in names if n not in SUITES]
    if unknown:
        raise ValueError(f"bench_cuda: unknown suite(s) {', '.join(unknown)}; "
                         f"choose from all, {', '.join(SUITES)}")
    make = {"gemm": lambda: [_gemm(n) for n in (sizes or GEMM_SIZES[quick])],
            "gemmv": lambda: [_gemm_variants(n, quick) for n in (sizes or VARIANT_SIZES[quick])],
            "gemm16": lambda: [_gemm16(n, dt) for n in (sizes or VARIANT_SIZES[quick])
                               for dt in ("bfloat16", "float16")[:1 if quick else 2]],
            "conv": lambda: [_conv(s) for s in suites.CONV_SHAPES[quick]],
            "sparse": lambda: [_sparse(s, d) for s in suite_sparse.SHAPES[quick]
                               for d in SPARSE_DENSITIES[quick]],
            "lstm": lambda: [_lstm(tag, *size) for tag, *size in suite_rnn.SIZES[quick]]}
    return [c for n in names for c in make[n]()]


def _checked(case: Case, setup):
    """``case`` with ``setup`` that stores torch's output as the reference of
    ``check`` (max abs error, on the GPU)."""
    state = {}

    def wrapped():
        impls, reference = setup()
        state["ref"] = reference
        return impls

    def check(out):
        ref = state["ref"]() if callable(state["ref"]) else state["ref"]
        state["ref"] = ref
        return float((out.float() - ref).abs().max())
    case.setup, case.check = wrapped, check
    return case


def _randn(torch, *shape, seed=0):
    g = torch.Generator(device=DEVICE).manual_seed(seed)
    return torch.randn(*shape, device=DEVICE, generator=g)


def _gemm(n):
    def setup():
        import torch
        import schedules
        a, b = _randn(torch, n, n), _randn(torch, n, n, seed=1)
        return ({"tiramisu_py": lambda: schedules.gemm(a, b, target="cuda"),
                 "torch": lambda: torch.mm(a, b)}, lambda: torch.mm(a, b))
    return _checked(Case(f"gemm {n}x{n}x{n}", 2.0 * n ** 3, None), setup)


def _gemm16(n, dtype):
    def setup():
        import torch
        import schedules
        t = getattr(torch, dtype)
        a, b = _randn(torch, n, n).to(t), _randn(torch, n, n, seed=1).to(t)
        return ({"tiramisu_py[mma]": lambda: schedules.gemm(a, b, target="cuda"),
                 "torch": lambda: torch.mm(a, b)}, lambda: torch.mm(a, b))
    return _checked(Case(f"gemm {dtype} {n}x{n}x{n}", 2.0 * n ** 3, None), setup)


def _gemm_variants(n, quick=False):
    def setup():
        import torch
        import schedules
        from schedules.core.kernels import cuda_device, cuda_kernel
        from schedules.blocks import gemm_cuda_warp
        from schedules.solvers import gemm_cuda
        a, b = _randn(torch, n, n), _randn(torch, n, n, seed=1)
        arch, _ = cuda_device(a)

        def variant(label, kind, values):
            def build():
                if kind == "classic":
                    return gemm_cuda.function(n, n, n)
                return gemm_cuda_warp.function(n, n, n, arch, **values)
            return lambda: cuda_kernel(("gemm_variant", n, label, arch), build)(a, b)
        impls = {"tiramisu_py": lambda: schedules.gemm(a, b, target="cuda")}
        chosen = list(VARIANTS.items())[:1 if quick else None]
        impls.update({f"tiramisu_py[{label}]": variant(label, kind, values)
                      for label, (kind, values) in chosen})
        impls["torch"] = lambda: torch.mm(a, b)
        return impls, lambda: torch.mm(a, b)
    return _checked(Case(f"gemm variants {n}x{n}x{n}", 2.0 * n ** 3, None), setup)


def record_variant(case, results) -> str:
    """Records the fastest warp-schedule variant of a gemmv case in the
    tuning store for this GPU when it beats the library's parameters by
    more than 3% (medians); returns what it did, in words."""
    from schedules.core import tuned
    from schedules.core.kernels import cuda_device
    from schedules.problems.gemm import GemmProblem
    from schedules.solvers.gemm_cuda import CudaTiled
    from tiramisu_py.tuning.confirm import Verdict
    n = int(case.name.split()[-1].split("x")[0])
    base = results.get("tiramisu_py", {}).get("median_s")
    timed = [(r["median_s"], label) for label, r in results.items()
             if r.get("median_s") and label.startswith("tiramisu_py[")
             and VARIANTS.get(label[12:-1], ("classic",))[0] == "warp"]
    if not base or not timed:
        return f"{case.name}: nothing to record"
    best_s, label = min(timed)
    values = VARIANTS[label[12:-1]][1]
    kept = best_s < 0.97 * base
    arch, name = cuda_device()              # the current device
    p = GemmProblem("gemm", n, n, n, "cuda", device="cuda")
    ratio = best_s / base
    tuned.save(CudaTiled(), p, values if kept else {},
               Verdict(base, best_s, ratio, ratio, ratio, 1, kept,
                       "kept" if kept else "not kept: within 3%"), len(timed),
               device=tuned.device_key(arch, name))
    return f"{case.name}: {values if kept else 'the defaults'} recorded for {name} ({arch})"


def _conv(shape):
    n, ci, co, h, w = shape

    def setup():
        import torch
        import schedules
        F = torch.nn.functional
        x, wt, b = _randn(torch, n, ci, h, w), _randn(torch, co, ci, 3, 3, seed=1) / 10, \
            _randn(torch, co, seed=2)
        torch_conv = lambda: F.conv2d(x, wt, b, stride=1, padding=1)       # noqa: E731
        return ({"tiramisu_py": lambda: schedules.conv2d(x, wt, b, stride=1, padding=1,
                                                         target="cuda"),
                 "torch": torch_conv}, torch_conv)
    return _checked(Case(f"conv {n}x{ci}x{h}x{w} -> {co}", 2.0 * n * co * h * w * ci * 9, None),
                    setup)


def _sparse(shape, density):
    n, ci, co, h, w = shape

    def setup():
        import numpy as np
        import torch
        import schedules
        F = torch.nn.functional
        rng = np.random.default_rng(density)
        wt = rng.standard_normal((co, ci, 3, 3), dtype=np.float32)
        wt *= rng.random(wt.shape) < density / 100
        csr = schedules.CSRWeights.from_dense(wt)
        x, b = _randn(torch, n, ci, h, w), _randn(torch, co, seed=2)
        wd = torch.from_numpy(wt).to(DEVICE)
        with warnings.catch_warnings():                 # "sparse CSR support is in beta"
            warnings.simplefilter("ignore", UserWarning)
            ws = wd.reshape(co, -1).to_sparse_csr()

        def im2col_sparse():
            cols = F.unfold(x, 3, padding=1)                    # (n, ci*9, h*w)
            cols = cols.permute(1, 0, 2).reshape(ci * 9, n * h * w)
            y = torch.sparse.mm(ws, cols).reshape(co, n, h, w).permute(1, 0, 2, 3)
            return y + b[:, None, None]
        dense = lambda: F.conv2d(x, wd, b, stride=1, padding=1)          # noqa: E731
        return ({"tiramisu_py[sparse]": lambda: schedules.sparse_conv2d(x, csr, b, padding=1,
                                                                        target="cuda"),
                 "torch": dense, "torch.sparse": im2col_sparse}, dense)
    return _checked(Case(f"sparse {n}x{ci}x{h}x{w} -> {co} @ {density}%",
                         2.0 * n * co * h * w * ci * 9, None), setup)


def _lstm(tag, L, H, I, T, B):
    def setup():
        import torch
        import schedules
        from examples import rnn
        weights = rnn.random_weights("lstm", L, I, H)
        module = torch.nn.LSTM(I, H, L).to(DEVICE)
        with torch.no_grad():
            for layer, ws in zip(module.all_weights, weights):
                for p, w in zip(layer, ws):
                    p.copy_(torch.from_numpy(w))
        tw = [[p.detach() for p in layer] for layer in module.all_weights]
        x = _randn(torch, T, B, I)

        def cudnn():
            with torch.no_grad():
                return module(x)[0]
        return ({"tiramisu_py": lambda: schedules.lstm(x, tw, target="cuda")[0],
                 "torch": cudnn}, cudnn)
    return _checked(Case(f"lstm ({tag}) {L}x{H} in {I} T={T} B={B}",
                         suite_rnn._flops("lstm", L, H, I, T, B), None), setup)


def _events_s(torch, fn, repeats):
    """Seconds per call of ``fn`` from CUDA events on the current stream."""
    fn()
    torch.cuda.synchronize()
    out = []
    for _ in range(repeats):
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        start.record()
        fn()
        end.record()
        end.synchronize()
        out.append(start.elapsed_time(end) / 1e3)
    return out


def _cuda_resources(before):
    """The ptxas resources of the library's CUDA kernels compiled since ``before``."""
    from schedules.core import kernels as runtime
    out = {}
    for key, k in runtime._KERNELS.items():
        if key not in before and key[1] == "cuda" and getattr(k, "resources", None):
            out[str(key[0])] = {arch: {name: vars(r) for name, r in rs.items()}
                                for arch, rs in k.resources.items()}
    return out


def measure(torch, case: Case, repeats: int) -> tuple:
    """({impl: {"median_s", "min_s", "error", "failure"}}, resources) of one case."""
    from schedules.core import kernels as runtime
    before = set(runtime._KERNELS)
    results = {}
    try:
        impls = case.setup()
    except Exception as e:                      # e.g. an entry point not there yet
        return {"tiramisu_py": dict(median_s=None, min_s=None, error=None,
                                    failure=f"setup: {type(e).__name__}: {e}")}, {}
    for name, fn in impls.items():
        r = results[name] = dict(median_s=None, min_s=None, error=None, failure=None)
        try:
            out = fn()
            torch.cuda.synchronize()
            r["error"] = case.check(out)
            ts = _events_s(torch, fn, repeats)
        except Exception as e:                  # reported, the other impls go on
            r["failure"] = f"{type(e).__name__}: {e}".splitlines()[0]
            continue
        r.update(median_s=statistics.median(ts), min_s=min(ts))
    return results, _cuda_resources(before)


def no_gpu_reason():
    """Why nothing can be measured here, or None."""
    try:
        import torch
    except ImportError:
        return "torch is not installed"
    if not torch.cuda.is_available():
        return "torch sees no CUDA device on this machine; nothing measured"
    from codegen.cuda.runtime import NoCudaDriverError, driver
    try:
        driver()
    except NoCudaDriverError as exc:
        return str(exc)
    return None


def _driver_version(torch) -> str:
    """The CUDA driver's version, as the driver API gives it (e.g. 13.0)."""
    try:
        from cuda.bindings import driver
        err, v = driver.cuDriverGetVersion()
        return f"{v // 1000}.{v % 1000 // 10}"
    except Exception:           # noqa: BLE001 - a header line, never a failure
        return f"(CUDA {torch.version.cuda})"


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--suite", default="all", help=f"all or a comma-separated list of "
                                                  f"{', '.join(SUITES)}")
    p.add_argument("--quick", action="store_true", help="small shapes (a smoke run)")
    p.add_argument("--sizes", default=None, help="comma-separated square GEMM sizes")
    p.add_argument("--repeats", type=int, default=20)
    p.add_argument("--json", default=None)
    p.add_argument("--md", nargs="?", const=markdown.DEFAULT, default=None, metavar="PATH",
                   help=f"put the table in PATH's section for this GPU (default {markdown.DEFAULT})")
    p.add_argument("--list", action="store_true", help="print the cases and exit (no GPU)")
    p.add_argument("--record", action="store_true",
                   help="record the fastest gemmv variant per size for this GPU")
    args = p.parse_args(argv)
    sizes = tuple(int(x) for x in args.sizes.split(",")) if args.sizes else None
    try:
        table = cases(args.suite, args.quick, sizes)
    except ValueError as exc:
        print(exc, file=sys.stderr)
        return 2
    if args.list:
        for c in table:
            print(f"{c.name:44} {c.flops / 1e9:12.3f} GFLOP")
        return 0
    reason = no_gpu_reason()
    if reason:
        print(f"bench_cuda: {reason}", file=sys.stderr)
        return 2
    import torch
    torch.backends.cuda.matmul.allow_tf32 = False
    torch.backends.cudnn.allow_tf32 = False
    device = torch.cuda.get_device_name()
    print(f"device: {device}, torch {torch.__version__}, cuDNN "
          f"{torch.backends.cudnn.version()}", flush=True)
    rows = []
    for i, case in enumerate(table):
        print(f"[{i + 1}/{len(table)}] {case.name}", file=sys.stderr, flush=True)
        results, resources = measure(torch, case, args.repeats)
        if args.record and case.name.startswith("gemm variants"):
            print(record_variant(case, results), file=sys.stderr, flush=True)
        row = _merge(case, 0, {KEY: [results]})
        row["resources"] = resources
        rows.append(row)
    report = {"machine": machine_info(), "device": device, "suite": "bench.bench_cuda",
              "arguments": {"suite": args.suite, "quick": args.quick, "sizes": sizes},
              "threads": [KEY], "repeats": args.repeats, "cases": rows}
    table = format_table(report).replace(f"{KEY} threads", "GPU, events")
    print(table)
    if args.md:
        head = (f"device: {device}, driver {_driver_version(torch)}, torch {torch.__version__}, "
                f"cuDNN {torch.backends.cudnn.version()}; host {machine_info()['cpu']}")
        markdown.update(args.md, f"cuda {args.suite}", device, "python -m bench.bench_cuda "
                        f"--suite {args.suite}" + (" --quick" if args.quick else ""),
                        head + "\n\n" + table)
        print(f"wrote the cuda section of {args.md}")
    if args.json:
        with open(args.json, "w") as fh:
            json.dump(report, fh, indent=1)
        print(f"wrote {args.json}")
    return 0


if __name__ == "__main__":
    sys.exit(main())

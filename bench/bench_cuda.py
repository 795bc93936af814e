"""tiramisu_py's CUDA GEMM against torch (cuBLAS) on a GPU.

    python -m bench.bench_cuda [--sizes 4096] [--repeats 20] [--json PATH]

For each size: ``schedules.gemm_cuda_function(n, n, n)`` compiled with
``target="cuda"``, called on torch CUDA tensors (launched on torch's current
stream), against ``torch.mm`` on the same tensors; median milliseconds from
CUDA events over ``--repeats`` calls after a warm-up, GFLOP/s, the ratio to
torch, the max abs error against torch, and the kernels' ptxas resources.
Needs a GPU, its driver, torch with CUDA and cuda-python; otherwise it says
which is missing and exits with status 2 (nothing is measured).

Not yet here (no GPU schedules for them): the conv shapes (cuDNN) and the
LSTM wavefront of issue 20.
"""
from __future__ import annotations

import argparse
import json
import os
import statistics
import sys

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def _events_ms(torch, call, repeats):
    call()
    torch.cuda.synchronize()
    out = []
    for _ in range(repeats):
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        start.record()
        call()
        end.record()
        end.synchronize()
        out.append(start.elapsed_time(end))
    return statistics.median(out)


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--sizes", default="4096", help="comma-separated square GEMM sizes")
    p.add_argument("--repeats", type=int, default=20)
    p.add_argument("--json", default=None)
    args = p.parse_args(argv)
    try:
        import torch
    except ImportError:
        print("bench_cuda: torch is not installed", file=sys.stderr)
        return 2
    if not torch.cuda.is_available():
        print("bench_cuda: torch sees no CUDA device on this machine; nothing measured",
              file=sys.stderr)
        return 2
    import schedules
    from codegen.cuda.runtime import NoCudaDriverError, driver
    try:
        driver()
    except NoCudaDriverError as exc:
        print(f"bench_cuda: {exc}", file=sys.stderr)
        return 2
    rows = []
    print(f"device: {torch.cuda.get_device_name()}")
    print(f"{'n':>6} {'impl':>12} {'ms':>9} {'GFLOP/s':>9} {'vs torch':>8}")
    for n in (int(x) for x in args.sizes.split(",")):
        g = torch.Generator(device="cuda").manual_seed(0)
        a = torch.randn(n, n, device="cuda", generator=g)
        b = torch.randn(n, n, device="cuda", generator=g)
        kern = schedules.gemm_cuda_function(n, n, n).compile(target="cuda")
        ref = torch.mm(a, b)
        err = float((kern(a, b) - ref).abs().max())
        flops = 2.0 * n ** 3
        t_ours = _events_ms(torch, lambda: kern(a, b), args.repeats)
        t_torch = _events_ms(torch, lambda: torch.mm(a, b), args.repeats)
        for impl, t in (("tiramisu_py", t_ours), ("torch", t_torch)):
            print(f"{n:>6} {impl:>12} {t:>9.3f} {flops / t / 1e6:>9.1f} {t_torch / t:>8.2f}")
        res = {arch: {k: vars(r) for k, r in rs.items()} for arch, rs in kern.resources.items()}
        print(f"       max abs error vs torch: {err:.3g}; resources: {res}")
        rows.append({"n": n, "ms": t_ours, "torch_ms": t_torch, "max_abs_error": err,
                     "resources": res})
    if args.json:
        with open(args.json, "w") as fh:
            json.dump({"device": torch.cuda.get_device_name(), "rows": rows}, fh, indent=1)
    return 0


if __name__ == "__main__":
    sys.exit(main())

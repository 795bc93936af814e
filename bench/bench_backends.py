"""C backend vs LLVM backend on the same algorithms with the same schedules.

    python -m bench.bench_backends [--repeats 10] [--json PATH]
    python -m bench.bench_backends --corpus [--quick] [--only polybench,fuzz,library,docs]
                                   [--fuzz 120] [--repeats 5] [--json PATH]

``--corpus`` runs the parity corpus instead (:mod:`bench.corpus`: the
PolyBench legality suite's legal schedules, fuzz programs at benchmark sizes,
the library's kernels, the schedules of README/docs/examples), with per-case
LLVM/C speed, GFLOP/s, which vector loops were widened (and why not), the
geomean and the worst ten; ``--quick`` uses small sizes and few repeats.

GEMM 1024^3 (float32; i-k-j order, i parallel, j vectorised by 16) and the
conv2d example (batch 4, 32 -> 32 channels, 56x56, 3x3; output channels
parallel, reduction loops outside the spatial ones, x vectorised by 16).
Each kernel is called through its normal Python entry point; the table gives
median milliseconds over ``--repeats`` calls after a warm-up, GFLOP/s and the
LLVM/C speed ratio (> 1: LLVM faster), all measured in this one process.
"""
from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import time

os.environ.setdefault("OMP_WAIT_POLICY", "passive")
# NumPy's OpenBLAS threads spin ~0.1 s after each call (2^28 cycles) and, on a
# 2-core host, halve the speed of a kernel timed right after a NumPy call:
# let them sleep at once, as our own threads do (OMP_WAIT_POLICY=passive)
os.environ.setdefault("OPENBLAS_THREAD_TIMEOUT", "4")
sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

import numpy as np  # noqa: E402

from bench.programs import conv_scheduled, gemm_scheduled  # noqa: E402
from examples import conv2d  # noqa: E402


def median_time(call, repeats):
    call()                                   # warm-up (and first-touch of outputs)
    times = []
    for _ in range(repeats):
        t0 = time.perf_counter()
        call()
        times.append(time.perf_counter() - t0)
    return statistics.median(times)


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--repeats", type=int, default=10)
    p.add_argument("--json", default=None)
    p.add_argument("--n", type=int, default=1024, help="GEMM size")
    p.add_argument("--corpus", action="store_true", help="run the parity corpus (bench.corpus)")
    p.add_argument("--quick", action="store_true", help="corpus: small sizes, 3 repeats (a smoke test, not a benchmark)")
    p.add_argument("--only", default="polybench,fuzz,library,docs", help="corpus groups")
    p.add_argument("--fuzz", type=int, default=120, help="corpus: number of fuzz programs (quick: 30 at most)")
    args = p.parse_args(argv)
    if args.corpus:
        return _corpus(args)
    rng = np.random.default_rng(0)
    n = args.n
    a = rng.standard_normal((n, n), dtype=np.float32)
    b = rng.standard_normal((n, n), dtype=np.float32)
    cargs = conv2d.random_inputs(4, 32, 32, 56, 56)
    cases = [
        (f"gemm {n}^3", gemm_scheduled, lambda k: k(a, b), lambda: a @ b, 2.0 * n ** 3),
        ("conv2d 4x32x56x56 -> 32, 3x3", conv_scheduled, lambda k: k(*cargs),
         lambda: conv2d.reference(*cargs), 2.0 * 4 * 32 * 32 * 56 * 56 * 9),
    ]
    rows = []
    print(f"{'case':32} {'C ms':>8} {'LLVM ms':>8} {'C GF/s':>7} {'LLVM GF/s':>9} {'LLVM/C speed':>12}")
    for name, build, call, ref, flops in cases:
        expect = ref()
        res = {}
        for target in ("c", "llvm"):
            k = build().compile(target)
            out = call(k)
            if not np.allclose(out, expect, rtol=1e-3, atol=1e-3):
                raise SystemExit(f"{name}: the {target} result does not match the reference")
            res[target] = median_time(lambda: call(k), args.repeats)
        ratio = res["c"] / res["llvm"]
        rows.append({"case": name, "c_ms": res["c"] * 1e3, "llvm_ms": res["llvm"] * 1e3,
                     "c_gflops": flops / res["c"] / 1e9, "llvm_gflops": flops / res["llvm"] / 1e9,
                     "llvm_over_c_speed": ratio, "repeats": args.repeats})
        print(f"{name:32} {res['c'] * 1e3:8.2f} {res['llvm'] * 1e3:8.2f} "
              f"{flops / res['c'] / 1e9:7.1f} {flops / res['llvm'] / 1e9:9.1f} {ratio:12.2f}")
    if args.json:
        with open(args.json, "w") as fh:
            json.dump({"threads": os.environ.get("OMP_NUM_THREADS", "default"), "rows": rows},
                      fh, indent=2)
    return rows


def _corpus(args):
    from bench import corpus
    print(corpus.HEADER)
    rows = corpus.run(tuple(g for g in args.only.split(",") if g), quick=args.quick,
                      repeats=3 if args.quick else args.repeats,
                      fuzz=min(args.fuzz, 30) if args.quick else args.fuzz)
    print(corpus.summary(rows))
    if args.json:
        with open(args.json, "w") as fh:
            json.dump({"threads": os.environ.get("OMP_NUM_THREADS", "default"), "quick": args.quick,
                       "rows": rows}, fh, indent=2)
    return rows


if __name__ == "__main__":
    main()

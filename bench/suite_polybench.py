"""The polybench suite: PolyBench/C 4.2.1's 30 kernels (examples/polybench),
each as (a) the plain algorithm, (b) its hand schedule, (c) the plain
algorithm after ``f.auto_schedule()``, and (d) after
``f.auto_schedule(reassociate=True)`` where that schedules it differently
(a reduction reassociated, as the hand schedules of cholesky, durbin and
trisolv do).

    tiramisu-py bench polybench [--size MINI|SMALL|MEDIUM|LARGE] [--kernels gemm,lu,...]
                                [--beyond] [--threads 2] [--repeats N] [--json PATH]

``--beyond``: instead, the six kernels outside PolyBench of
:mod:`examples.beyond_polybench` (a contraction, a naive convolution, a
9-point stencil with a time loop, a softmax, a batched matrix-vector
product, a triangular product), which have no hand schedule: (a) and (c).

All three are compiled by the default target (C at -O3 -march=native, as the
library compiles) and run with 2 threads unless ``--threads`` says otherwise.
Printed per kernel: the median time of (a), the speedups of (b) and (c) over
(a), the seconds ``auto_schedule()`` took, the largest error of each variant
against the NumPy reference (MINI, SMALL) or against (a) (MEDIUM, LARGE,
where some references are Python loops of hours); then the geometric means.
Every call runs on fresh copies of the arrays the kernel updates in place
(restored untimed before the call); the variants' calls are timed in
rounds, one of each per round (``Case.interleave``).  Where the language has no
``auto_schedule`` yet, (c) is left out with the reason.  PolyBench counts no
FLOPs: the report's GFLOP/s fields are 0.
"""
from __future__ import annotations

import io
import json
import math

import numpy as np

from bench import harness
from bench.harness import Case
from examples import beyond_polybench, polybench as pb

DEFAULT_SIZE = "SMALL"
# the NumPy references (some sequential Python loops: seidel-2d, nussinov) are
# the check at these sizes; at larger ones the plain variant's result is
# (it is checked against NumPy at MINI and SMALL by tests/examples/test_polybench.py)
REFERENCE_SIZES = ("MINI", "SMALL")
PLAIN, HAND, AUTO, AUTO_RE = "plain", "tiramisu_py[hand]", "tiramisu_py[auto]", \
    "tiramisu_py[auto+re]"
VARIANT_OF = {PLAIN: "plain", HAND: "hand", AUTO: "auto", AUTO_RE: "auto+re"}


def registry(beyond=False) -> dict:
    """PolyBench's kernels, or (``beyond``) the six outside it."""
    return beyond_polybench.KERNELS if beyond else pb.KERNELS


def kernel_names(text: str | None, beyond=False) -> list[str]:
    """The kernels named in ``text`` (comma-separated; all when empty)."""
    kernels = registry(beyond)
    if not text:
        return list(kernels)
    names = [t.strip() for t in text.split(",") if t.strip()]
    unknown = [n for n in names if n not in kernels]
    if unknown:
        raise ValueError(f"--kernels: unknown kernel {', '.join(unknown)}; "
                         f"the kernels are {', '.join(kernels)}")
    return names


def cases(size=DEFAULT_SIZE, kernels=None, seed=0, beyond=False) -> list[Case]:
    return [_case(registry(beyond)[name], size, seed) for name in kernel_names(kernels, beyond)]


def _case(kernel, size, seed):
    arrays = pb.random_inputs(kernel, size, seed)
    s = pb.sizes(kernel, size)
    expected = {}
    # one set of argument arrays for all variants (restored before each
    # call): the same code then runs on the same addresses (arrays of their
    # own gave each variant its own alignment: jacobi-1d's unscheduled
    # code, compiled three times, measured 0.5x-1.1x of itself)
    args = {n: np.array(a, copy=True) for n, a in arrays.items()}
    written = [n for n in kernel.outputs if n in args]

    def impl(f):
        compiled = f.compile()

        def call():
            returned = compiled(**args)
            if not isinstance(returned, dict):
                returned = {compiled.outputs[0].name: returned}
            return {n: args[n] if n in args else returned[n] for n in kernel.outputs}

        def restore():
            for n in written:
                np.copyto(args[n], arrays[n])
        call.prepare = restore
        return call

    def setup():
        impls = {PLAIN: impl(pb.function(kernel, size, "plain"))}
        if kernel.schedule is not None:
            impls[HAND] = impl(pb.function(kernel, size, "hand"))
        auto = pb.function(kernel, size, "auto")
        impls[AUTO] = impl(auto)
        # with reassociation only where it schedules the kernel otherwise
        reassociated = pb.function(kernel, size, "auto+re")
        if reassociated.schedule_commands() != auto.schedule_commands():
            impls[AUTO_RE] = impl(reassociated)
        if size in REFERENCE_SIZES:
            expected.update(kernel.comparable(kernel.reference(arrays, s), s))
        else:
            impls[PLAIN].prepare()
            # copies: the arrays are the variants' shared arguments
            expected.update({n: np.array(v, copy=True) for n, v in
                             kernel.comparable(impls[PLAIN](), s).items()})
        return impls

    return Case(f"{kernel.name} {size}", 0.0, setup,
                lambda out: pb.max_error(kernel.comparable(out, s), expected), interleave=True)


def auto_seconds(names, size, beyond=False) -> dict:
    """Seconds ``auto_schedule()`` takes per kernel (in this process: it is
    analysis, not timing-sensitive)."""
    kernels = registry(beyond)
    return {n: pb.auto_schedule(kernels[n].build(pb.sizes(kernels[n], size)))[1]
            for n in names}


def speedups(report: dict) -> dict:
    """``{threads: {kernel: {"plain_ms", "hand", "auto", "auto_re"}}}`` from a
    harness report (``auto_re`` None where reassociation changes nothing)."""
    out = {}
    for n in map(str, report["threads"]):
        rows = out.setdefault(n, {})
        for c in report["cases"]:
            t = {impl: per_n.get(n, {}).get("median_s") for impl, per_n in c["impls"].items()}
            base = t.get(PLAIN)
            rows[c["name"].split()[0]] = {
                "plain_ms": base * 1e3 if base else None,
                "hand": base / t[HAND] if base and t.get(HAND) else None,
                "auto": base / t[AUTO] if base and t.get(AUTO) else None,
                "auto_re": base / t[AUTO_RE] if base and t.get(AUTO_RE) else None}
    return out


def geomean(values) -> float | None:
    values = [v for v in values if v]
    return math.exp(sum(map(math.log, values)) / len(values)) if values else None


def format_speedups(report: dict, table: dict, auto_s: dict) -> str:
    def x(v):
        return f"{v:.2f}x" if v else "-"
    errors = {c["name"].split()[0]: {VARIANT_OF[i]: max((r["error"] for r in per_n.values()
                                                         if r["error"] is not None), default=None)
                                     for i, per_n in c["impls"].items()}
              for c in report["cases"]}
    lines = []
    for n, rows in table.items():
        what = "Beyond PolyBench" if report["arguments"].get("beyond") else "PolyBench"
        lines += [f"{what} {report['arguments']['size']}, {n} thread{'s' * (n != '1')}",
                  f"{'kernel':16} {'plain ms':>10} {'hand':>8} {'auto':>8} {'auto+re':>8} "
                  f"{'auto s':>7}  max err (plain, hand, auto, auto+re)"]
        for name, r in rows.items():
            e = ", ".join(f"{errors[name].get(v):.0e}" if errors[name].get(v) is not None
                          else "-" for v in ("plain", "hand", "auto", "auto+re"))
            ms = f"{r['plain_ms']:10.3f}" if r["plain_ms"] else f"{'failed':>10}"
            a = f"{auto_s[name]:7.2f}" if name in auto_s else f"{'-':>7}"
            lines.append(f"{name:16} {ms} {x(r['hand']):>8} {x(r['auto']):>8} "
                         f"{x(r.get('auto_re')):>8} {a}  {e}")
        lines.append(f"{'geomean':16} {'':10} {x(geomean(r['hand'] for r in rows.values())):>8} "
                     f"{x(geomean(r['auto'] for r in rows.values())):>8} "
                     f"{x(geomean(r.get('auto_re') or r['auto'] for r in rows.values())):>8}")
    if not auto_s:
        lines.append("auto: not run")
    failures = [f"  {c['name']} / {i}: {r['failure']}" for c in report["cases"]
                for i, per_n in c["impls"].items() for r in per_n.values() if r["failure"]]
    if failures:
        lines += ["failures:"] + failures
    against = ("the NumPy reference" if report["arguments"]["size"] in REFERENCE_SIZES
               else "the plain variant's result")
    lines.append(f"hand, auto: speedup over plain (median times, same run); auto+re: "
                 f"auto_schedule(reassociate=True) where it schedules otherwise (its geomean: "
                 f"auto elsewhere); max err: relative to {against}")
    return "\n".join(lines)


def add_arguments(p):
    p.add_argument("--size", default=DEFAULT_SIZE, choices=pb.DATASETS,
                   help=f"polybench: PolyBench's dataset (default {DEFAULT_SIZE})")
    p.add_argument("--kernels", metavar="gemm,lu,...",
                   help="polybench, peers: only these kernels (default: all: polybench's "
                        "30, peers' 6)")
    p.add_argument("--beyond", action="store_true",
                   help="polybench: the six kernels outside PolyBench (examples/"
                   "beyond_polybench.py: plain and auto_schedule, no hand schedule)")


def main(args) -> dict:
    beyond = bool(getattr(args, "beyond", False))
    names = kernel_names(args.kernels, beyond)
    size = args.size if args.size else DEFAULT_SIZE
    run = harness.run_args(args, threads=(2,))
    json_path = run.pop("json_path")
    run.pop("png_path")
    auto_s = auto_seconds(names, size, beyond)
    report = harness.run(cases, dict(size=size, kernels=",".join(names), beyond=beyond),
                         stdout=io.StringIO(), **run)
    table = speedups(report)
    print(harness.format_machine(report["machine"]))
    print(format_speedups(report, table, auto_s))
    report["speedups"], report["auto_schedule_s"] = table, auto_s
    if json_path:
        with open(json_path, "w") as f:
            json.dump(report, f, indent=1)
        print(f"wrote {json_path}")
    return report

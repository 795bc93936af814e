"""The backend parity corpus: many schedules, each on both CPU backends.

    python -m bench.bench_backends --corpus [--quick] [--repeats N] [--json PATH]
                                            [--only GROUP,...] [--fuzz N]

Groups (each case: a Function with its schedule, inputs, optional FLOP count):

* ``polybench``: every *legal* schedule of the PolyBench legality suite
  (``tests/tiramisu_py/test_legality_polybench.py``, its kernels from
  :mod:`examples.polybench` at the sizes of ``tests.auto_kernels.SUITE``) at
  those sizes scaled up (x8; x2 with ``--quick``; time steps kept); needs
  pytest importable (the suite is a test module).
* ``fuzz``: random programs of the fuzz generator's shape
  (``tests/fuzz_programs.py``: 1-3 statements, shared float64 buffers, reads
  at offsets) with random benchmark-sized schedules (tiles 8-32, vector
  widths 4-16, parallel loops), a fixed seed; illegal ones are skipped.
* ``library``: ``schedules`` GEMM, the conv algorithms and the fused block.
* ``docs``: the schedules written in README, docs/DESIGN.md, the examples
  and ``bench_backends`` (DESIGN's GEMM, README's GEMM, softmax, jacobi-2d,
  trisolv, the LSTM wavefront).

Per case: milliseconds on C and LLVM (median over ``--repeats`` calls after a
warm-up, the two kernels called in alternation within one process), GFLOP/s
where the FLOP count is known, the LLVM/C speed ratio (> 1: LLVM faster) of
the medians and of the fastest calls (robust to a loaded machine), and for every vector loop whether it is
widened and why not (:func:`codegen.report.report`).  Both backends'
outputs must agree (``rtol=1e-3``); a disagreement or a compile error is
reported as such.  The summary gives the geometric mean of LLVM/C, the ten
worst cases and every case below 0.9x (by medians or minimums) with its
vector-loop status (widened, or why not; "no vector loop" for scalar nests).
"""
from __future__ import annotations

import math
import statistics
import sys
import time
import zlib

import numpy as np

import tiramisu_py as tp
from codegen.report import report as vector_report


class Case:
    def __init__(self, group, name, build, args, flops=None):
        self.group, self.name, self.build, self.args, self.flops = group, name, build, args, flops


# ------------------------------------------------------------------ polybench
def polybench_cases(quick):
    try:
        from tests.auto_kernels import SUITE
        from tests.tiramisu_py import test_legality_polybench as T
    except ImportError as exc:          # pytest / hypothesis missing
        print(f"corpus: polybench group skipped ({exc})", file=sys.stderr)
        return []
    scale = 2 if quick else 8
    out = []
    for kernel, legal in T.LEGAL.items():
        sized = SUITE[kernel]
        sized = sized.at(**{n: v * scale for n, v in sized.sizes.items()
                            if n not in ("TSTEPS", "TMAX")})

        def args(sized=sized, kernel=kernel):
            rng = np.random.default_rng(zlib.crc32(kernel.encode()))
            return {**sized.inputs(rng), **sized.params}
        for c in legal:
            # a pytest.param carries (kernel, name, schedule, parallel)
            name, schedule = (c.values[1], c.values[2]) if hasattr(c, "marks") else (c[0], c[1])

            def build(sized=sized, schedule=schedule):
                f = sized.build()
                schedule(f)
                return f
            out.append(Case("polybench", f"{kernel}-{name}", build, args))
    return out


# ------------------------------------------------------------------ fuzz
def fuzz_cases(quick, count):
    try:
        from tests.fuzz_programs import BUFS, SPATIAL, Acc, Program, Stmt, apply_command
        from tests.fuzz_programs import build as build_program
    except ImportError as exc:
        print(f"corpus: fuzz group skipped ({exc})", file=sys.stderr)
        return []
    rng = np.random.default_rng(15)
    out = []
    for n in range(count * 3):
        if len(out) >= count:
            break
        rank = int(rng.choice([1, 2, 2, 2, 3]))
        nst = int(rng.integers(1, 3))
        bufs = BUFS[:nst + 1]
        stmts = []
        for k in range(nst):       # writes its own buffer (a permutation of its loops), reads others
            loops = tuple(str(x) for x in rng.permutation(SPATIAL[:rank]))
            order = [str(x) for x in rng.permutation(loops)]
            write = Acc(bufs[k], tuple(("v", v, 0) for v in order))
            others = [x for x in bufs if x != bufs[k]]

            def index():
                if rng.integers(0, 6):
                    return ("v", str(rng.choice(loops)), int(rng.integers(-1, 2)))
                return ("c", int(rng.integers(0, 2)))
            reads = tuple(Acc(str(rng.choice(others)), tuple(index() for _ in range(rank)))
                          for _ in range(int(rng.integers(1, 4))))
            coefs = tuple(float(rng.choice([0.3, -0.3, 0.25, -0.2])) for _ in reads)
            stmts.append(Stmt(f"s{k}", loops, write, reads, coefs))
        prog = Program(rank, bufs, None, (0, 0), tuple(stmts))
        cmds = []
        for s in stmts:
            ls = list(s.loops)
            r = rng.random()
            if len(ls) >= 2 and r < 0.4:
                cmds.append(f"{s.name}.tile({ls[0]!r}, {ls[1]!r}, {int(rng.choice([8, 16, 32]))}, "
                            f"{int(rng.choice([8, 16, 32]))})")
                ls = [ls[0] + "0", ls[1] + "0", ls[0] + "1", ls[1] + "1"] + ls[2:]
            elif len(ls) >= 2 and r < 0.6:
                cmds.append(f"{s.name}.interchange({ls[0]!r}, {ls[-1]!r})")
                ls[0], ls[-1] = ls[-1], ls[0]
            cmds.append(f"{s.name}.parallelize({ls[0]!r})")
            if rng.random() < 0.8:
                cmds.append(f"{s.name}.vectorize({ls[-1]!r}, {int(rng.choice([4, 8, 16]))})")
        N = {1: 1 << 16, 2: 96 if quick else 512, 3: 16 if quick else 64}[rank]

        def build(prog=prog, cmds=cmds):
            f, ns = build_program(prog)
            for c in cmds:
                apply_command(ns, c)
            return f

        def args(prog=prog, N=N, n=n):
            r = np.random.default_rng(n)
            return {b: r.standard_normal((N,) * prog.rank) for b in prog.bufs} | {"N": N}
        out.append(Case("fuzz", f"fuzz{n:03d}: " + "; ".join(cmds), build, args))
    return out


# ------------------------------------------------------------------ library
def library_cases(quick):
    import importlib
    G = importlib.import_module("schedules.blocks.blis")
    CO = importlib.import_module("schedules.solvers.conv_dense")
    FU = importlib.import_module("schedules.solvers.conv_fused")
    from schedules.problems.conv import ConvShape
    n = 128 if quick else 512
    rng = np.random.default_rng(0)
    out = [Case("library", f"schedules.gemm {n}^3", lambda: G.function(n, n, n),
                lambda: {"A": rng.standard_normal((n, n), dtype=np.float32),
                         "B": rng.standard_normal((n, n), dtype=np.float32)}, 2.0 * n ** 3)]
    b, ci, co, hw = (1, 8, 16, 12) if quick else (4, 32, 64, 28)
    flops = 2.0 * b * co * hw * hw * ci * 9

    def conv_args():
        w = rng.standard_normal((co, ci, 3, 3), dtype=np.float32)
        return {"data": rng.standard_normal((b, ci, hw, hw), dtype=np.float32), "weight": w,
                "w2": w.reshape(co, -1), "bias": rng.standard_normal(co, dtype=np.float32)}
    for algo in ("direct", "im2col", "spatial_pack"):
        out.append(Case("library", f"conv2d {algo} {b}x{ci}x{hw}x{hw}->{co}",
                        lambda algo=algo: CO.conv2d_function(b, ci, hw, hw, co, algo=algo),
                        conv_args, flops))
    s = ConvShape(b, ci, hw, hw, co, 3, 3, 1, 1, 1, 1)
    for algo in ("direct", "winograd"):
        out.append(Case("library", f"conv_relu_maxpool {algo} {b}x{ci}x{hw}x{hw}->{co}",
                        lambda algo=algo: FU.function(s, 2, algo=algo), conv_args, flops))
    return out


# ------------------------------------------------------------------ docs
def _gemm_design(tile=(32, 32)):
    from examples import gemm
    f = gemm.build()
    C = f.computations["C"]
    C.update.tile("i", "j", *tile)
    C.update.vectorize("j1", 16)
    C.update.parallelize("i0")
    return f


def softmax_function(name="softmax"):
    """Softmax over rows as a user schedules it: rows parallel, columns
    vectorised by 8 (the reductions with ``allow_reassociation``)."""
    f = tp.Function(name, params=["N", "M"])
    i, j = f.var("i", 0, "N"), f.var("j", 0, "M")
    x = f.input("x", ("N", "M"), tp.float32)
    with f.nest(i):
        mx = f.computation("mx", [i], -np.inf)
        mx[i].max(x[i, j])
        e = f.computation("e", [i, j], tp.exp(x[i, j] - mx[i]))
        s = f.computation("s", [i], 0.0)
        s[i] += e[i, j]
        y = f.computation("y", [i, j], e[i, j] / s[i])
    mx.update.vectorize("j", 8, allow_reassociation=True)
    e.vectorize("j", 8)
    s.update.vectorize("j", 8, allow_reassociation=True)
    y.vectorize("j", 8)
    mx.parallelize("i")
    return f


def doc_cases(quick):
    from bench import programs as BB
    from examples import conv2d, jacobi2d, lstm, trisolv
    rng = np.random.default_rng(1)
    n = 256 if quick else 1024
    ab = lambda: {"A": rng.standard_normal((n, n), dtype=np.float32),   # noqa: E731
                  "B": rng.standard_normal((n, n), dtype=np.float32)}
    flops = 2.0 * n ** 3
    rows = 200 if quick else 1000
    cin = conv2d.random_inputs(1, 8, 8, 28, 28) if quick else conv2d.random_inputs(4, 32, 32, 56, 56)
    conv_flops = 2.0 * np.prod(cin[0].shape) * cin[1].shape[0] * 9
    jac = jacobi2d.random_inputs(64 if quick else 256)
    tri = trisolv.random_inputs(200 if quick else 2000)
    lx = lstm.random_inputs(layers=2, T=4, B=2, H=32 if quick else 256)
    return [
        Case("docs", f"DESIGN.md gemm tile 32x32, vectorize j1 16, parallel i0 {n}^3", _gemm_design,
             ab, flops),
        Case("docs", f"issue gemm tile 32x64, vectorize j1 16, parallel i0 {n}^3",
             lambda: _gemm_design((32, 64)), ab, flops),
        Case("docs", f"README gemm i-k-j, parallel i, vectorize j 16 {n}^3", BB.gemm_scheduled,
             ab, flops),
        Case("docs", "bench_backends conv2d (co parallel, x vectorised)", BB.conv_scheduled,
             lambda: dict(zip(("inp", "w", "bias"), cin)), conv_flops),
        Case("docs", f"softmax {rows}x1024 (rows parallel, columns vectorised)", softmax_function,
             lambda: {"x": rng.standard_normal((rows, 1024), dtype=np.float32)}, None),
        Case("docs", "examples/jacobi2d (unscheduled)", jacobi2d.build,
             lambda: {"A": jac[0], "B": jac[1], "T": 10}, None),
        Case("docs", "examples/trisolv (unscheduled)", trisolv.build,
             lambda: dict(zip(("L", "b"), tri)), None),
        Case("docs", "examples/lstm wavefront", lambda: lstm.wavefront(lstm.build()),
             lambda: dict(zip(("x", "W", "U", "bias"), lx)), None),
    ]


# ------------------------------------------------------------------ running
def _times(calls: dict, repeats, budget=2.0, settle=0.3, most=51):
    """{name: [seconds]}: the calls interleaved (one of each per round, so load
    changes hit both alike), after a warm-up each.  At least ``repeats``
    rounds (fewer only past ``budget`` seconds), and short cases go on until
    ``settle`` seconds (at most ``most`` rounds): a kernel of a few hundred
    microseconds whose parallel regions wake sleeping threads times
    bimodally, and a median of 5 rounds could land in different modes for
    the two backends (trisolv ``column_oriented_parallelize_i`` read 0.37x
    once, 1.0x on every rerun)."""
    for c in calls.values():
        c()
    times, t0_all = {n: [] for n in calls}, time.perf_counter()
    for r in range(max(repeats, most)):
        for n, c in calls.items():
            t0 = time.perf_counter()
            c()
            times[n].append(time.perf_counter() - t0)
        spent = time.perf_counter() - t0_all
        if (spent > budget and r >= 1) or (r + 1 >= repeats and spent > settle):
            break
    return times


def _outputs(out):
    if isinstance(out, dict):
        return [np.asarray(out[k]) for k in sorted(out)]
    return [np.asarray(out)]


def _vector_status(lowered):
    lines = [ln for ln in vector_report(lowered) if ln.startswith("vector loop")]
    if not lines:
        return "-"
    bad = [ln.split(": not widened (", 1)[1].rstrip(")").split("); runs")[0]
           for ln in lines if "not widened" in ln]
    ok = len(lines) - len(bad)
    return f"{ok}/{len(lines)} widened" + (f"; not: {bad[0][:70]}" if bad else "")


def run_case(case, repeats):
    row = {"group": case.group, "case": case.name}
    try:
        args = case.args()
        ks = {t: case.build().compile(target=t) for t in ("c", "llvm")}
    except tp.IllegalScheduleError:
        return None
    except Exception as exc:            # reported, not fatal: the corpus goes on
        row["error"] = f"{type(exc).__name__}: {str(exc).splitlines()[0][:100]}"
        return row
    takes = {b.name for b in ks["c"].inputs + ks["c"].outputs} | set(ks["c"].params)
    args = {n: v for n, v in args.items() if n in takes}
    outs = {}
    try:
        for t, k in ks.items():
            a = {n: (v.copy() if isinstance(v, np.ndarray) else v) for n, v in args.items()}
            outs[t] = _outputs(k(**a))
    except Exception as exc:
        row["error"] = f"call: {type(exc).__name__}: {str(exc).splitlines()[0][:100]}"
        return row
    if any(not np.allclose(x, y, rtol=1e-3, atol=1e-3, equal_nan=True)
           for x, y in zip(outs["c"], outs["llvm"])):
        row["error"] = "C and LLVM results differ"
    # both backends are timed on the same arrays: with a copy each, where the
    # copies happened to land (4 KiB aliasing between a kernel's loads and
    # stores) made one backend 1.4-2.5x faster in some runs and not in others
    # (fuzz033, fuzz106: the C kernel, in either backend's favour by chance)
    a = {n: (v.copy() if isinstance(v, np.ndarray) else v) for n, v in args.items()}
    calls = {t: (lambda k=k: k(**a)) for t, k in ks.items()}
    times = _times(calls, repeats)
    for t in ks:
        row[f"{t}_ms"] = statistics.median(times[t]) * 1e3
        row[f"{t}_min_ms"] = min(times[t]) * 1e3
        if case.flops:
            row[f"{t}_gflops"] = case.flops / row[f"{t}_ms"] / 1e6
    row["llvm_over_c"] = row["c_ms"] / row["llvm_ms"]
    row["llvm_over_c_min"] = row["c_min_ms"] / row["llvm_min_ms"]
    row["vector"] = _vector_status(ks["c"].lowered)
    return row


def run(groups=("polybench", "fuzz", "library", "docs"), quick=False, repeats=5, fuzz=120):
    makers = {"polybench": lambda: polybench_cases(quick), "fuzz": lambda: fuzz_cases(quick, fuzz),
              "library": lambda: library_cases(quick), "docs": lambda: doc_cases(quick)}
    rows = []
    for g in groups:
        for case in makers[g]():
            r = run_case(case, repeats)
            if r is not None:
                rows.append(r)
                print(format_row(r), flush=True)
    return rows


def format_row(r):
    if "c_ms" not in r:
        return f"{r['group']:9} {r['case'][:60]:60} ERROR {r.get('error', '')}"
    gf = (f"{r['c_gflops']:6.1f} {r['llvm_gflops']:6.1f}" if "c_gflops" in r else f"{'-':>6} {'-':>6}")
    err = f"  ERROR {r['error']}" if "error" in r else ""
    return (f"{r['group']:9} {r['case'][:60]:60} {r['c_ms']:9.3f} {r['llvm_ms']:9.3f} {gf} "
            f"{r['llvm_over_c']:6.2f} {r['llvm_over_c_min']:6.2f}  {r['vector']}{err}")


HEADER = (f"{'group':9} {'case':60} {'C ms':>9} {'LLVM ms':>9} {'C GF/s':>6} {'L GF/s':>6} "
          f"{'LLVM/C':>6} {'(min)':>6}  vector loops")


def summary(rows) -> str:
    ok = [r for r in rows if "c_ms" in r and "error" not in r]
    if not ok:
        return "no case ran"
    geo = math.exp(sum(math.log(r["llvm_over_c"]) for r in ok) / len(ok))
    geo_min = math.exp(sum(math.log(r["llvm_over_c_min"]) for r in ok) / len(ok))
    worst = sorted(ok, key=lambda r: r["llvm_over_c"])[:10]
    lines = [f"{len(ok)} cases ({len(rows) - len(ok)} with errors); geomean LLVM/C speed "
             f"{geo:.2f} (medians), {geo_min:.2f} (minimums); below 0.8: "
             f"{sum(r['llvm_over_c'] < 0.8 for r in ok)}, below 0.9: "
             f"{sum(r['llvm_over_c'] < 0.9 for r in ok)} (medians)", "worst ten (medians):"]
    lines += ["  " + format_row(r) for r in worst]
    slow = sorted((r for r in ok if min(r["llvm_over_c"], r["llvm_over_c_min"]) < 0.9),
                  key=lambda r: r["llvm_over_c_min"])
    lines.append(f"below 0.9 (medians or minimums; {len(slow)}), with their vector loops:")
    lines += [f"  {r['group']:9} {r['case'][:60]:60} {r['llvm_over_c']:5.2f} {r['llvm_over_c_min']:5.2f}  "
              f"{r['vector'] if r['vector'] != '-' else 'no vector loop (scalar nest)'}" for r in slow]
    for g in sorted({r["group"] for r in ok}):
        gr = [r for r in ok if r["group"] == g]
        lines.append(f"  {g}: {len(gr)} cases, geomean "
                     f"{math.exp(sum(math.log(r['llvm_over_c']) for r in gr) / len(gr)):.2f}")
    return "\n".join(lines)

"""The library tuner: ``schedules.tune_library(ops=("gemm", "conv", "sparse",
"rnn"), budget=None, progress=True)`` times the tunable parameters of every
library solver (:meth:`schedules.core.solver.Solver.space`) on this host,
once per shape class, and records the winners in the tuning store; from
then on, in any process on this host, the solvers' ``run`` builds with them
(:mod:`schedules.core.tuned`: the record kind, the key, the lookup).

Problems (:func:`problems`): per op the bench suites' shapes (``sizes=
"bench"``: GEMM 512 / 1024 / 2048; the 4 conv suite shapes, as conv2d and
as the fused conv + ReLU + 2x2 max-pool block; sparse VGG
512->512 at 14x14, batch 8, 10% dense; LSTM and GRU 4 x 1024, T = 100,
B = 1), or small ones (``sizes="small"``, for tests and smoke runs).  For
each problem and each solver "auto" may choose
(:func:`schedules.core.find.candidates`), the search is coordinate descent
from the host defaults: each parameter of the space in turn, each of its
values timed with the best values found so far for the others (compile,
one warm-up call, the best of ``repeats`` calls), the best kept.  A
candidate that fails to build, or whose result differs from the defaults'
beyond rounding, is skipped with a note.  The search's winner, if it beat
the defaults, is timed again against them interleaved
(:func:`tiramisu_py.tuning.confirm.confirm`, the rule both tuners share: paired A/B
rounds, kept only if the upper quartile of the ratios is below 1 - margin);
an unconfirmed winner is not recorded: the record keeps the defaults (``{}``)
and the verdict.  No candidate starts once ``budget`` seconds have passed
(a search once started times the defaults, and its winner is confirmed; a
search the budget cut is recorded as it stands, marked incomplete, and the
next run times it again); a problem whose search is recorded complete on
this host is not timed again unless ``retune``; ``dry_run`` records nothing.
:data:`RUNS` counts the candidates timed in this process.

:data:`COMMAND` is ``tiramisu-py tune``: op names (or none: all) tune the
library, ``grain`` (part of ``all``) the parallel grain, an argument with ":"
(or ``-p``) is the language's FILE:FUNC form (:data:`tiramisu_py.cli.TUNE`);
``--list`` lists every tuner's records, ``--forget [WHAT]`` removes them (all,
or an op's, a solver's, a Function's).
"""
from __future__ import annotations

import argparse
import itertools
import sys
import time

import numpy as np
from tiramisu_py import cli as language_cli
from tiramisu_py.tuning.confirm import decide
from tiramisu_py.tuning.search import Bar, check_budget, check_clock, check_repeats

from .core import tuned
from .core.find import candidates
from .problems.conv import ConvProblem
from .problems.gemm import GemmProblem
from .problems.rnn import RnnProblem
from .registry import SOLVERS
from .weights.csr import CSRWeights
from .weights.prune import prune_magnitude

OPS = ("gemm", "conv", "sparse", "rnn")
RUNS = {"timed": 0, "failed": 0}          # candidates timed / skipped in this process
# (batch, in channels, out channels, height, width): bench/suites.py's CONV_SHAPES
CONV_SHAPES = {"bench": ((8, 128, 256, 112, 112), (32, 64, 64, 56, 56), (32, 512, 512, 14, 14),
                         (32, 3, 32, 224, 224)),
               "small": ((2, 8, 16, 12, 12),)}
GEMM_SIZES = {"bench": (512, 1024, 2048), "small": (48,)}
SPARSE_SHAPES = {"bench": ((8, 512, 512, 14, 14, 0.10),), "small": ((2, 8, 16, 12, 12, 0.3),)}
# (cell, layers, hidden = input, T, B): bench/suite_rnn.py's (a)
RNN_SIZES = {"bench": (("lstm", 4, 1024, 100, 1), ("gru", 4, 1024, 100, 1)),
             "small": (("lstm", 2, 32, 4, 1),)}


def _random(shape, seed=0):
    return np.random.default_rng(seed).standard_normal(shape, dtype=np.float32)


def problems(op, sizes="bench", target=None):
    """``[(label, registry op, make)]``: ``make()`` gives ``(problem, args)``
    of one representative problem of ``op``'s shape classes."""
    if op not in OPS:
        raise ValueError(f"tune_library: ops must be among {', '.join(OPS)}; got {op!r}")
    if sizes not in ("bench", "small"):
        raise ValueError(f"tune_library: sizes must be 'bench' or 'small'; got {sizes!r}")
    out = []
    if op == "gemm":
        for n in GEMM_SIZES[sizes]:
            out.append((f"gemm {n}", "gemm", lambda n=n: GemmProblem.from_call(
                "gemm", _random((n, n)), _random((n, n), 1), None, target)))
    elif op == "conv":
        for (n, ci, co, h, w), fused in itertools.product(CONV_SHAPES[sizes], (False, True)):
            def make(n=n, ci=ci, co=co, h=h, w=w, fused=fused):
                x, wt = _random((n, ci, h, w)), _random((co, ci, 3, 3), 1) / np.float32(3 * ci)
                return ConvProblem.from_call("conv_relu_maxpool" if fused else "conv2d", x, wt,
                                             _random((co,), 2), 1, 1, 1, 1, algo="auto",
                                             target=target, pool=2 if fused else 1,
                                             gpu=not fused)
            out.append((f"{'conv_relu_maxpool' if fused else 'conv'} {n}x{ci}->{co}@{h}x{w}",
                        "conv_relu_maxpool" if fused else "conv2d", make))
    elif op == "sparse":
        for n, ci, co, h, w, density in SPARSE_SHAPES[sizes]:
            def make(n=n, ci=ci, co=co, h=h, w=w, density=density):
                wt = prune_magnitude(_random((co, ci, 3, 3), 1), density)
                return ConvProblem.from_call("conv2d", _random((n, ci, h, w)),
                                             CSRWeights.from_dense(wt), _random((co,), 2), 1, 1,
                                             1, 1, algo="auto", target=target)
            out.append((f"sparse {n}x{ci}->{co}@{h}x{w} {density:.0%}", "conv2d", make))
    else:
        for cell, layers, hidden, T, B in RNN_SIZES[sizes]:
            def make(cell=cell, layers=layers, hidden=hidden, T=T, B=B):
                g = {"lstm": 4, "gru": 3}[cell]
                ws = [[_random((g * hidden, hidden), 4 * l + i) / np.float32(hidden ** 0.5)
                       for i in range(2)] + [_random((g * hidden,), 4 * l + i) for i in (2, 3)]
                      for l in range(layers)]
                c0 = np.zeros((layers, B, hidden), np.float32) if cell == "lstm" else None
                return RnnProblem.from_call(cell, _random((T, B, hidden)), ws,
                                            np.zeros((layers, B, hidden), np.float32), c0,
                                            False, target)
            out.append((f"{cell} {layers}x{hidden} T={T} B={B}", cell, make))
    return out


def _result(out):
    first = out[0] if isinstance(out, tuple) else out
    return np.asarray(first.numpy() if hasattr(first, "numpy") else first)


def _timer(solver, p, args, repeats, clock):
    def run(values):
        out = solver.result(p, args, values)       # compile + warm up
        best = float("inf")
        for _ in range(repeats):
            t0 = clock()
            solver.result(p, args, values)
            best = min(best, clock() - t0)       # noise only slows a run down
        return best, _result(out)
    return run


def _tune_one(solver, p, args, label, deadline, repeats, bar, clock, dry_run):
    """Coordinate descent over ``solver.space(p)`` from the defaults, the
    winner confirmed against them; returns the report entry (and records
    the result unless ``dry_run``)."""
    bar_label = f"{label} {solver.name}"
    space = solver.space(p)
    total = 1 + sum(len(v) for v in space.values())
    run, notes, timed, done = _timer(solver, p, args, repeats, clock), [], 0, 1
    bar.show(bar_label, 0, total, None, "defaults")
    default_t, reference = run({})
    best_t, best = default_t, {}
    seen = {repr(solver.tuned(p, {}))}
    for name, vals in space.items():
        for v in vals:
            cand = {**best, name: v}
            done += 1
            key = repr(solver.tuned(p, cand))
            if key in seen:
                continue
            seen.add(key)
            if time.perf_counter() > deadline:
                notes.append("budget spent")
                break
            bar.show(bar_label, done, total, best_t, f"{name}={v}")
            try:
                t, out = run(cand)
            except Exception as e:           # a candidate the compiler refuses: skipped
                RUNS["failed"] += 1
                notes.append(f"{cand}: {type(e).__name__}: {str(e).splitlines()[0][:120]}")
                continue
            RUNS["timed"] += 1
            timed += 1
            if out.shape != reference.shape or not np.allclose(out, reference, rtol=1e-3,
                                                               atol=1e-3, equal_nan=True):
                RUNS["failed"] += 1
                notes.append(f"{cand}: result differs from the defaults'; skipped")
                continue
            if t < best_t:
                best_t, best = t, cand
        if notes and notes[-1] == "budget spent":
            break
    if best:
        bar.show(bar_label, total, total, best_t, "A/B against the defaults")
    verdict = decide(lambda: solver.result(p, args, {}), lambda: solver.result(p, args, best),
                     default_t, best_t, clock)
    bar.show(bar_label, total, total, best_t, verdict.why)
    cut = "budget spent" in notes
    values = best if verdict.kept else {}
    if not dry_run:
        tuned.save(solver, p, values, verdict, timed, complete=not cut, candidate=best)
    return {"problem": label, "op": p.op, "solver": solver.name, "values": values,
            "candidate": best, "verdict": verdict,
            "seconds": verdict.best_s if verdict.kept else verdict.default_s,
            "default_seconds": verdict.default_s, "timed": timed, "notes": notes,
            "cached": False}


def _untimed(label, op, solver, values, notes, cached):
    """The report entry of a (problem, solver) not timed: recorded before
    (``cached``) or left out by the budget."""
    return {"problem": label, "op": op, "solver": solver, "values": values, "candidate": {},
            "verdict": None, "seconds": None, "default_seconds": None, "timed": 0,
            "notes": notes, "cached": cached}


def tune_library(ops=OPS, budget=None, progress=True, *, sizes="bench", repeats=3,
                 retune=False, target=None, dry_run=False, clock=None):
    """Tunes the library's solvers on this host for the problems of ``ops``
    (names of :data:`OPS`, or "all") and records the confirmed winners;
    returns one report entry per (problem, solver): ``{"problem", "op",
    "solver", "values" (the recorded parameters; {}: the defaults, the
    search's winner unconfirmed or none), "candidate" (the search's
    winner), "verdict" (:class:`tiramisu_py.tuning.confirm.Verdict`: default and
    best time, the A/B ratio and its quartiles, kept or why not), "seconds",
    "default_seconds", "timed" (candidates timed), "notes" (skipped
    candidates and why), "cached" (recorded before: nothing timed)}``.
    ``budget``: seconds (None: no limit) after which no candidate starts;
    ``progress``: a bar on stderr; ``sizes``: "bench" or "small";
    ``retune``: time again what is recorded; ``dry_run``: measure and
    decide, record nothing; ``clock``: the timer (default
    :func:`time.perf_counter`; tests give a fake one)."""
    if isinstance(ops, str):
        ops = (ops,)
    ops = list(dict.fromkeys(o for op in ops for o in (OPS if op == "all" else (op,))))
    check_budget("tune_library", budget, optional=True)
    check_repeats("tune_library", repeats)
    check_clock("tune_library", clock)
    clock = clock or time.perf_counter
    cases = [c for op in ops for c in problems(op, sizes, target)]
    deadline = time.perf_counter() + (float("inf") if budget is None else budget)
    bar, report = Bar(sys.stderr if progress else None), []
    for label, op, make in cases:
        if time.perf_counter() > deadline:          # not even made: its arrays cost time too
            report.append(_untimed(label, op, "-", {}, ["budget spent: not tuned"], False))
            continue
        p, args = make()
        for solver in candidates(p, SOLVERS[op]):
            if not solver.space(p):
                continue
            if not retune and tuned.has_record(solver, p):
                report.append(_untimed(label, p.op, solver.name, tuned.recorded(solver, p), [],
                                       True))
            elif time.perf_counter() > deadline:
                report.append(_untimed(label, p.op, solver.name, {},
                                       ["budget spent: not tuned"], False))
            else:
                report.append(_tune_one(solver, p, args, label, deadline, repeats, bar, clock,
                                        dry_run))
                bar.end()
    return report


def summary(report) -> str:
    """The report as lines, one per problem and solver: what was measured
    (default and best ms, the A/B ratio with its quartiles) and what was
    kept."""
    lines = []
    for r in report:
        if r["cached"]:
            how = f"recorded before: {r['values'] or 'defaults'}"
        elif r.get("verdict") is None:
            how = "; ".join(r["notes"])
        else:
            v = r["verdict"]
            tried = f" ({r['candidate']})" if r["candidate"] and not v.kept else ""
            how = f"{r['timed']} timed; {v.line()}{tried}; {r['values'] or 'defaults'}"
        lines.append(f"{r['problem']} [{r['solver']}]: {how}")
        lines += [f"    skipped {n}" for n in r["notes"] if r.get("verdict") is not None]
    return "\n".join(lines)


# ------------------------------------------------------------------ tiramisu-py tune
# every tuner's records: the library's, then the language's (--list, --forget)
RECORD_KINDS = (tuned.RECORDS,) + language_cli.RECORD_KINDS


def _parser():
    p = argparse.ArgumentParser(
        prog="tiramisu-py tune", formatter_class=argparse.RawDescriptionHelpFormatter,
        description="Time the operator library's tunable parameters on this host and record\n"
                    "the fastest (every later process on this host uses them).\n"
                    "`tiramisu-py tune FILE:FUNC` tunes a Function instead (below).",
        epilog="The FILE:FUNC form (tunes a Function; its options):\n\n"
               + language_cli.parser().commands["tune"].format_help())
    p.add_argument("ops", nargs="*", metavar="OP",
                   help=f"{', '.join(OPS)}, grain (the parallel grain: below it a parallel loop "
                        "runs on one thread) or all (default all)")
    p.add_argument("--budget", type=language_cli.positive_seconds, default=None,
                   help="seconds after which no candidate starts (default: no limit)")
    p.add_argument("--sizes", choices=("bench", "small"), default="bench",
                   help="the bench suites' shapes (default) or small ones (a smoke run)")
    p.add_argument("--repeats", type=int, default=3, help="timed calls per candidate (best of)")
    p.add_argument("--retune", action="store_true", help="time again what is recorded")
    p.add_argument("--quiet", action="store_true", help="no progress bar")
    p.add_argument("--dry-run", action="store_true",
                   help="measure and say what would be kept; record nothing")
    p.add_argument("--list", action="store_true",
                   help="list the tuning records (the library's and tiramisu_py.tune's)")
    p.add_argument("--forget", nargs="?", const=True, default=None, metavar="WHAT",
                   help="remove tuning records: those of an op, a solver or a Function "
                        "named WHAT; all without one")
    return p


def _command(argv, sub=None):
    """``tiramisu-py tune ARGV``: the language's FILE:FUNC form when an
    argument has ":" (or -p is given), else the library's op names."""
    positional = [a for a in argv if not a.startswith("-")]
    if any(":" in a for a in positional) or "-p" in argv or "--param" in argv:
        return language_cli.main(["tune", *argv], (language_cli.TUNE,))
    p = _parser()
    args = p.parse_args(argv)
    if args.forget is not None:
        language_cli.forget_tuned(args.forget, RECORD_KINDS)
    if args.list:
        language_cli.list_tuned(RECORD_KINDS)
    if args.list or args.forget is not None:
        return 0
    bad = [o for o in args.ops if o not in OPS + ("grain", "all")]
    if bad:
        p.error(f"unknown op {bad[0]!r}: choose from {', '.join(OPS)}, grain, all, or give "
                "FILE:FUNC")
    ops = args.ops or ["all"]
    if "grain" in ops or "all" in ops:
        language_cli.tune_grain(args.dry_run)
        ops = [o for o in ops if o != "grain"]
        if not ops:
            return 0
    try:
        report = tune_library(ops, budget=args.budget, progress=not args.quiet, sizes=args.sizes,
                              repeats=args.repeats, retune=args.retune, dry_run=args.dry_run)
    except ValueError as e:
        raise SystemExit(f"tiramisu-py tune: {e}") from None
    print(summary(report))
    if args.dry_run:
        print("(dry run: nothing recorded)")
    return 0


COMMAND = language_cli.Command(
    "tune", "time legal schedules of FILE:FUNC on this host and record the fastest (compile() "
            "then uses it); `tune [gemm|conv|sparse|rnn|grain|all]` tunes the operator "
            "library's parameters (`tiramisu-py tune --help`)", _command, raw=True)

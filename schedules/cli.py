"""The ``tiramisu-py`` command with the operator library: ``tiramisu_py.cli``'s
commands, and ``tiramisu-py tune [gemm|conv|sparse|rnn|grain|all] [--budget SECONDS]
[--dry-run]`` (:func:`schedules.tune_library`) beside its ``tiramisu-py tune
FILE:FUNC``; ``tiramisu-py tune --list`` lists both tuners' records,
``--forget [WHAT]`` removes them (all, or an op's, a solver's, a Function's).

One ``tune`` subcommand: an argument containing ":" is FILE:FUNC (the
language's tuner, :func:`tiramisu_py.tune`), op names (or none: all) tune
the library.  This entry lives at the top of ``schedules`` because
``tiramisu_py`` must not import ``schedules``: it extends
``tiramisu_py.cli.main`` and is what the ``tiramisu-py`` script runs
(pyproject.toml); ``python -m schedules.cli`` is the same command."""
from __future__ import annotations

import argparse
import sys

from tiramisu_py import cli as language_cli

from .core import tuned
from .tuner import OPS, summary, tune_library


def _library_tune(argv):
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
    args = p.parse_args(argv)
    if args.list or args.forget is not None:
        return _records(args.list, args.forget)
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
        report = tune_library(ops, budget=args.budget,
                              progress=not args.quiet, sizes=args.sizes, repeats=args.repeats,
                              retune=args.retune, dry_run=args.dry_run)
    except ValueError as e:
        raise SystemExit(f"tiramisu-py tune: {e}") from None
    print(summary(report))
    if args.dry_run:
        print("(dry run: nothing recorded)")
    return 0


def _records(show, what):
    """``--list``: both tuners' records; ``--forget [WHAT]``: removes them."""
    record_kinds = (tuned.RECORDS,) + language_cli.RECORD_KINDS
    if what is not None:
        language_cli.forget_tuned(what, record_kinds)
    if show:
        language_cli.list_tuned(record_kinds)
    return 0


def main(argv=None):
    argv = list(sys.argv[1:] if argv is None else argv)
    if argv[:1] == ["tune"]:
        positional = [a for a in argv[1:] if not a.startswith("-")]
        if not any(":" in a for a in positional) and "-p" not in argv and "--param" not in argv:
            return _library_tune(argv[1:])
    return language_cli.main(argv)


if __name__ == "__main__":
    sys.exit(main())

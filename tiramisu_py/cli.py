"""The command line's machinery and the language's commands.

A subcommand is a :class:`Command` (its name, help, arguments and what it
runs); :func:`main` runs a table of them.  Each floor of the house declares
its own commands beside the code they run, and the ``tiramisu-py`` script
(``tiramisu_py_command.py``, above ``bench`` and ``examples``) runs them all:
``demo``, ``example NAME`` (examples/demo.py), ``draw``, ``bench``
(bench/suites.py) and ``tune`` (the library's op names and the language's
FILE:FUNC form, schedules/tuner.py).  Nothing here imports a floor above it.

``python -m tiramisu_py`` runs the language's commands alone (:data:`COMMANDS`):

    draw FILE:CALLABLE [--params T=6,N=10] [--out PATH] [--loops t,i] [--compare]
    tune FILE:FUNC -p N=512 ... [--budget S] [--target cpu|llvm] [--retune] [--dry-run]
    tune grain [--dry-run]          the parallel grain of this host
    tune --list | --forget [NAME]   tp.tune's and the grain's records"""
from __future__ import annotations

import argparse
import math
import os
import runpy
import sys
from dataclasses import dataclass
from typing import Callable

import numpy as np

from .base.types import float32
from .driver.tune import RECORDS as TUNE_RECORDS
from .driver.tune import report as tune_report, tune as run_tune
from .function import Function
from .runtime.shapes import eval_size, shape_text
from .tuning import grain, kinds

# the language's tuning records: tp.tune's, the parallel grain's (--list, --forget)
RECORD_KINDS = (TUNE_RECORDS, grain.RECORDS)


def parse_params(items, command, option):
    """``["T=6", "N=10"]`` -> ``{"T": 6, "N": 10}`` (SystemExit naming a bad
    item, or a name given twice)."""
    out = {}
    for item in filter(None, (x.strip() for x in items)):
        name, eq, value = item.partition("=")
        if not eq or not name.strip() or not value.strip().lstrip("-").isdigit():
            raise SystemExit(f"tiramisu-py {command}: {option} item {item!r} is not NAME=INT")
        name = name.strip()
        if name in out:
            raise SystemExit(f"tiramisu-py {command}: {option} gives {name} twice "
                             f"({name}={out[name]} and {item}); give each param once")
        out[name] = int(value)
    return out


def positive_seconds(text):
    """argparse's type of a time budget: a finite number of seconds > 0."""
    try:
        value = float(text)
    except ValueError:
        value = math.nan
    if not 0 < value < math.inf:
        raise argparse.ArgumentTypeError(f"expected a finite number of seconds > 0, got {text!r}")
    return value


def writable_path(text):
    """argparse's type of an output file, checked before any work: a file
    can be written there (its folder exists and lets us; a file made by the
    check is removed again)."""
    existed = os.path.lexists(text)
    try:
        with open(text, "a"):
            pass
    except OSError as e:
        raise argparse.ArgumentTypeError(f"cannot write {text!r}: {e.strerror}") from None
    if not existed:
        os.remove(text)
    return text


def check_sizes(f, params, command, option):
    """Refuses (SystemExit naming the params) sizes at which the Function
    ``f``'s input and output arrays alone would not fit in this host's memory."""
    pages = os.sysconf("SC_PHYS_PAGES") if hasattr(os, "sysconf") else -1
    if pages <= 0:
        return
    memory = pages * os.sysconf("SC_PAGE_SIZE")
    values, total, largest = dict(f.fixed, **params), 0, (0, "")
    for b in f.buffers.values():
        if b.kind in ("input", "output"):
            try:
                shape = tuple(max(0, eval_size(s, values, b.name)) for s in b.shape)
            except ValueError:
                return                  # (tune names what is missing)
            nbytes = math.prod(shape) * (b.dtype.np.itemsize if b.dtype.np is not None else 2)
            total += nbytes
            largest = max(largest, (nbytes, f"{b.name}{shape_text(b.shape)} = {shape}"))
    if total > memory:
        given = " ".join(f"{option} {k}={v}" for k, v in params.items())
        raise SystemExit(f"tiramisu-py {command}: {given}: the arrays of {f.name!r} would take "
                         f"{total / 2 ** 30:,.1f} GiB ({largest[1]}: "
                         f"{largest[0] / 2 ** 30:,.1f} GiB), more than this host's "
                         f"{memory / 2 ** 30:,.1f} GiB of memory; give smaller sizes")


def load_function(spec, command, form="FILE:FUNC"):
    """The Function ``FILE:NAME`` names: ``NAME`` in the Python file ``FILE``,
    a Function or a callable that returns one when called without arguments."""
    path, sep, name = spec.rpartition(":")
    if not sep or not path or not name:
        raise SystemExit(f"tiramisu-py {command}: {spec!r} is not {form} (e.g. "
                         "examples/lstm.py:build)")
    if not os.path.isfile(path):
        raise SystemExit(f"tiramisu-py {command}: no file {path!r}")
    space = runpy.run_path(path, run_name=f"__tiramisu_py_{command}__")
    obj = space.get(name)
    if obj is None:
        raise SystemExit(f"tiramisu-py {command}: {path} defines no {name!r} (no callable "
                         f"{name!r})")
    if isinstance(obj, Function):
        return obj
    if not callable(obj):
        raise SystemExit(f"tiramisu-py {command}: {path}'s {name!r} is neither a Function nor "
                         "a callable returning one")
    f = obj()
    if not isinstance(f, Function):
        raise SystemExit(f"tiramisu-py {command}: {name}() returned {type(f).__name__}, not a "
                         "tiramisu_py.Function")
    return f


def draw(target, params, out, loops=None, compare=False):
    """Runs the file of ``target`` (``FILE:CALLABLE``), calls CALLABLE, draws
    the Function it returns at ``params`` to ``out``; returns the path."""
    f = load_function(target, "draw", "FILE:CALLABLE")
    try:
        f.draw(loops=loops, params=params, path=out, compare=compare)
    except (ValueError, ImportError) as e:
        raise SystemExit(f"tiramisu-py draw: {e}") from None
    return out


def list_tuned(record_kinds=RECORD_KINDS):
    """Prints the tuning records of ``record_kinds`` (:mod:`tiramisu_py.tuning.kinds`)."""
    print("\n".join(kinds.listing(record_kinds)))


def forget_tuned(what, record_kinds=RECORD_KINDS):
    """Removes the tuning records of ``record_kinds`` named ``what`` (True:
    all) and prints how many, one line per kind."""
    print("\n".join(kinds.forget(record_kinds, None if what is True else what)))


def grain_probe(n: int, value: int):
    """The parallel grain's probe (:func:`tiramisu_py.tuning.grain.tune`):
    ``grain.STEPS`` steps of a parallel, vectorised update of ``n`` floats
    (``y = 0.5 * y + x``), one barrier a step, compiled with the grain
    ``value`` (0: on the team; above ``n``: on one thread).  A zero-argument
    call."""
    f = Function("grain_probe", params={"T": grain.STEPS, "N": n})
    t, i = f.var("t", 0, "T"), f.var("i", 0, "N")
    x = f.input("x", ("N",), float32)
    y = f.buffer("y", ("N",), float32, output=True)
    with f.nest(t):
        s = f.computation("s", [t, i], y[i] * 0.5 + x[i]).store_in(y, [i])
    s.vectorize("i", 16)
    s.parallelize("i0")
    with grain.forced(value):
        k = f.compile()
    xs, ys = np.ones(n, np.float32), np.zeros(n, np.float32)
    return lambda: k(x=xs, y=ys)


def tune_grain(dry_run=False):
    """``tiramisu-py tune grain``: measures this host's parallel grain
    (:mod:`tiramisu_py.tuning.grain`) and records it when confirmed."""
    print("the parallel grain: the probe on one thread and on the team")
    r = grain.tune(grain_probe, dry_run=dry_run, log=print)
    v = r["verdict"]
    if v is None:
        print(f"grain: measured {r['measured']}, in use {r['grain']}: they agree on every "
              "size measured; nothing to record")
        return r
    what = "recorded" if r["recorded"] else "not recorded (dry run)" if dry_run and v.kept \
        else "not recorded"
    print(f"grain: measured {r['measured']}, in use {r['grain']}: {v.line()}; {what}")
    return r


def tune(args, sub=None):
    """Tunes FILE:FUNC for the sizes given (``-p N=512``) and prints what
    was measured, what was kept and its schedule; or measures the parallel
    grain (``grain``); or lists (``--list``) or removes (``--forget
    [NAME]``) the records."""
    if args.list:
        return list_tuned()
    if args.forget is not None:
        return forget_tuned(args.forget)
    if args.function is None:
        raise SystemExit("tiramisu-py tune: give FILE:FUNC or grain (or --list, --forget [NAME])")
    if args.function == "grain":
        return tune_grain(args.dry_run)
    params = parse_params(args.param, "tune", "-p")
    f = load_function(args.function, "tune")
    check_sizes(f, params, "tune", "-p")
    try:
        r = run_tune(f, budget=args.budget, params=params, target=args.target,
                     retune=args.retune, dry_run=args.dry_run)
    except ValueError as e:
        raise SystemExit(f"tiramisu-py tune: {e}")
    except MemoryError as e:
        given = " ".join(f"-p {k}={v}" for k, v in params.items())
        raise SystemExit(f"tiramisu-py tune: {given}: out of memory ({e}); give smaller "
                         "sizes") from None
    how = "recorded before" if r["cached"] else f"{r['timed']} candidates timed"
    said = "" if r["verdict"] is None else "; " + r["verdict"].line()
    use = ("compile() of this algorithm on this host uses it" if r["kept"] else
           "compile() compiles it as written")
    if not r["cached"] and not r["recorded"]:
        use = "dry run: nothing recorded"
    print(f"# {f.name}: {how}{said}; {use}")
    if r["tried"]:
        print("\n".join(f"# {line}" for line in tune_report(r).splitlines()[:-1]))
    if r["kept"]:
        print("\n".join(map(str, r["steps"])))
    elif r["candidate"]:
        print("# the search's fastest, not kept:")
        print("\n".join(f"# {s}" for s in r["candidate"]))


def _tune_arguments(t):
    t.add_argument("function", metavar="FILE:FUNC", nargs="?",
                   help="a Python file and a Function (or a function returning one) in it; "
                        "or grain: this host's parallel grain (below it a parallel loop runs "
                        "on one thread)")
    t.add_argument("-p", "--param", action="append", default=[], metavar="NAME=INT",
                   help="a size to time with (one per free param)")
    t.add_argument("--budget", type=positive_seconds, default=60.0, help="seconds (default 60)")
    t.add_argument("--target", choices=("cpu", "llvm"), default=None)
    t.add_argument("--retune", action="store_true", help="time again even if recorded")
    t.add_argument("--dry-run", action="store_true",
                   help="measure and say what would be kept; record nothing")
    t.add_argument("--list", action="store_true", help="list the tuning records")
    t.add_argument("--forget", nargs="?", const=True, default=None, metavar="NAME",
                   help="remove the records (of the Function NAME; all without one)")


def _draw_arguments(d):
    d.add_argument("target", metavar="FILE:CALLABLE")
    d.add_argument("--params", default="", help="parameter values, e.g. T=6,N=10")
    d.add_argument("--out", default=None, help="the picture's path (.png, .svg, .pdf); "
                                               "default CALLABLE.png")
    d.add_argument("--loops", default=None, help="the two loops drawn, outer first: t,i (the "
                                                 "others: one block per value)")
    d.add_argument("--compare", action="store_true", help="the program order beside it")


def _draw(args, sub):
    out = args.out or args.target.rpartition(":")[2] + ".png"
    try:
        writable_path(out)
    except argparse.ArgumentTypeError as e:
        sub.error(f"argument --out: {e}")
    loops = args.loops.split(",") if args.loops else None
    print(draw(args.target, parse_params(args.params.split(","), "draw", "--params"), out, loops,
               args.compare))


# ------------------------------------------------------------------ the machinery
@dataclass(frozen=True)
class Command:
    """A subcommand: ``run(args, sub)`` runs it (``args``: the parsed
    arguments; ``sub``: its parser, for ``sub.error``); ``arguments(sub)``
    adds its arguments.  ``raw``: it parses its own arguments (a program
    with a parser of its own): ``run(argv, sub)`` gets them as given."""
    name: str
    help: str
    run: Callable
    arguments: Callable | None = None
    raw: bool = False


DRAW = Command("draw", "draw the iteration space, dependences and schedule of the Function a "
                       "callable returns", _draw, _draw_arguments)
TUNE = Command("tune", "time legal schedules of FILE:FUNC on this host and record the fastest "
                       "(compile() then uses it); tune grain: the parallel grain", tune,
               _tune_arguments)
COMMANDS = (DRAW, TUNE)         # the language's (python -m tiramisu_py)
DESCRIPTION = ("The language's commands: pictures of a Function's schedule and its tuner.  "
               "The `tiramisu-py` command also has the demo, the examples, the benchmarks "
               "and the operator library's tuner.")


def parser(commands=COMMANDS, prog="tiramisu-py", description=None):
    """The parser of ``commands``; ``parser().commands``: its subcommands'
    parsers by name."""
    p = argparse.ArgumentParser(prog=prog, description=description or DESCRIPTION)
    sub = p.add_subparsers(dest="cmd", required=True)
    for c in commands:
        s = sub.add_parser(c.name, help=c.help, add_help=not c.raw)
        if c.arguments is not None:
            c.arguments(s)
    p.commands = sub.choices
    return p


def main(argv=None, commands=COMMANDS, prog="tiramisu-py", description=None) -> int:
    """Runs the command line ``argv`` (default ``sys.argv[1:]``) over
    ``commands``; returns the exit status."""
    p = parser(commands, prog, description)
    args, rest = p.parse_known_args(argv)
    command = next(c for c in commands if c.name == args.cmd)
    sub = p.commands[args.cmd]
    if command.raw:
        status = command.run(rest, sub)
    elif rest:
        p.error(f"unrecognized arguments: {' '.join(rest)}")
    else:
        status = command.run(args, sub)
    return status if isinstance(status, int) else 0


if __name__ == "__main__":
    sys.exit(main())

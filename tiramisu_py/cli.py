"""Command line: ``tiramisu-py demo``, ``tiramisu-py bench``, ``tiramisu-py draw FILE:CALLABLE``,
``tiramisu-py tune FILE:FUNC [--dry-run]``, ``tiramisu-py tune --list``,
``tiramisu-py tune --forget [NAME]``
(or ``python -m tiramisu_py ...``)."""
from __future__ import annotations

import argparse
import importlib
import math
import os
import runpy
import sys

import numpy as np

from .api import Function
from .base.types import float32
from .driver.tune import RECORDS as TUNE_RECORDS
from .driver.tune import tune as run_tune
from .runtime.shapes import eval_size, shape_text
from .tuning import grain, kinds

# the language's tuning records: tp.tune's, the parallel grain's (--list, --forget)
RECORD_KINDS = (TUNE_RECORDS, grain.RECORDS)


def _checkout_module(name, command):
    """A module of the repository's examples/ or bench/ package (present in a source checkout)."""
    root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    package = name.partition(".")[0]
    if not os.path.isdir(os.path.join(root, package)):
        raise SystemExit(f"tiramisu-py {command} needs the source checkout's {package}/ folder "
                         "(install with `pip install -e .` from a clone)")
    if root not in sys.path:
        sys.path.insert(0, root)
    return importlib.import_module(name)


def demo(show_source=True):
    """Runs ``examples/demo.py`` of the checkout."""
    _checkout_module("examples.demo", "demo").main(show_source)


EXAMPLES = ("gemm", "conv2d", "conv_relu_maxpool", "trisolv", "jacobi2d", "sparse_conv", "lstm")


def example(name):
    """Runs ``examples/NAME.py`` of the checkout, from any directory."""
    _checkout_module(f"examples.{name}", "example").main()


def bench(argv):
    """The benchmark suites of bench/suites.py; ``argv``: its options."""
    suites = _checkout_module("bench.suites", "bench")
    suites.main(suites.parser("tiramisu-py bench").parse_args(argv))


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


def tune(args):
    """Tunes FILE:FUNC for the sizes given (``-p N=512``) and prints what
    was measured, what was kept and its schedule; or lists (``--list``) or
    removes (``--forget [NAME]``) the records."""
    if args.list:
        return list_tuned()
    if args.forget is not None:
        return forget_tuned(args.forget)
    if args.function is None:
        raise SystemExit("tiramisu-py tune: give FILE:FUNC (or --list, --forget [NAME])")
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
    if r["kept"]:
        print("\n".join(map(str, r["steps"])))
    elif r["candidate"]:
        print("# the search's fastest, not kept:")
        print("\n".join(f"# {s}" for s in r["candidate"]))


def parser():
    """The command line's parser; ``parser().commands``: its subcommands'
    parsers by name."""
    p = argparse.ArgumentParser(prog="tiramisu-py", description=__doc__)
    sub = p.add_subparsers(dest="cmd", required=True)
    d = sub.add_parser("demo", help="an algorithm, its schedules and the legality check; the "
                                    "operator library against NumPy and PyTorch; the examples "
                                    "checked against NumPy")
    d.add_argument("--no-source", action="store_true", help="do not print generated code")
    e = sub.add_parser("example", help="run one of the examples (from any directory)")
    e.add_argument("name", choices=EXAMPLES)
    dr = sub.add_parser("draw", help="draw the iteration space, dependences and schedule of "
                                     "the Function a callable returns")
    dr.add_argument("target", metavar="FILE:CALLABLE")
    dr.add_argument("--params", default="", help="parameter values, e.g. T=6,N=10")
    dr.add_argument("--out", default=None, help="the picture's path (.png, .svg, .pdf); "
                                                "default CALLABLE.png")
    dr.add_argument("--loops", default=None, help="the two loops drawn, outer first: t,i (the "
                                                "others: one block per value)")
    dr.add_argument("--compare", action="store_true", help="the program order beside it")
    sub.add_parser("bench", add_help=False,     # its options are parsed by bench()
                   help="benchmark the operator library against NumPy and PyTorch "
                        "(tiramisu-py bench --help)")
    t = sub.add_parser("tune", help="time legal schedules of FILE:FUNC on this host and "
                                    "record the fastest (compile() then uses it); with the "
                                    "operator library, `tune [gemm|conv|sparse|rnn|all]` tunes "
                                    "its parameters (`tiramisu-py tune --help`)")
    t.add_argument("function", metavar="FILE:FUNC", nargs="?",
                   help="a Python file and a Function (or a function returning one) in it")
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
    p.commands = sub.choices
    return p


def main(argv=None):
    p = parser()
    args, rest = p.parse_known_args(argv)
    if args.cmd == "bench":
        bench(rest)
    elif rest:
        p.error(f"unrecognized arguments: {' '.join(rest)}")
    elif args.cmd == "draw":
        out = args.out or args.target.rpartition(":")[2] + ".png"
        try:
            writable_path(out)
        except argparse.ArgumentTypeError as e:
            p.commands["draw"].error(f"argument --out: {e}")
        loops = args.loops.split(",") if args.loops else None
        print(draw(args.target, parse_params(args.params.split(","), "draw", "--params"), out, loops,
                   args.compare))
    elif args.cmd == "tune":
        tune(args)
    elif args.cmd == "example":
        example(args.name)
    else:
        demo(show_source=not args.no_source)
    return 0


if __name__ == "__main__":
    sys.exit(main())

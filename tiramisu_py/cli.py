"""Command line: ``tiramisu-py demo``, ``tiramisu-py bench``, ``tiramisu-py draw FILE:CALLABLE``
(or ``python -m tiramisu_py ...``)."""
from __future__ import annotations

import argparse
import importlib
import os
import runpy
import sys

from .api import Function


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


def parse_params(text):
    """``"T=6,N=10"`` -> ``{"T": 6, "N": 10}`` (SystemExit naming a bad item)."""
    out = {}
    for item in filter(None, (x.strip() for x in (text or "").split(","))):
        name, eq, value = item.partition("=")
        try:
            out[name.strip()] = int(value)
        except ValueError:
            eq = ""
        if not eq or not name.strip():
            raise SystemExit(f"tiramisu-py draw: --params item {item!r} is not NAME=INT")
    return out


def draw(target, params, out, loops=None, compare=False):
    """Runs the file of ``target`` (``FILE:CALLABLE``), calls CALLABLE, draws
    the Function it returns at ``params`` to ``out``; returns the path."""
    path, sep, name = target.rpartition(":")
    if not sep or not path or not name:
        raise SystemExit(f"tiramisu-py draw: {target!r} must be FILE:CALLABLE (e.g. "
                         "examples/lstm.py:build)")
    if not os.path.isfile(path):
        raise SystemExit(f"tiramisu-py draw: no file {path!r}")
    namespace = runpy.run_path(path, run_name="__tiramisu_py_draw__")
    fn = namespace.get(name)
    if not callable(fn):
        raise SystemExit(f"tiramisu-py draw: {path} defines no callable {name!r}")
    f = fn()
    if not isinstance(f, Function):
        raise SystemExit(f"tiramisu-py draw: {name}() returned {type(f).__name__}, not a "
                         "tiramisu_py.Function")
    try:
        f.draw(loops=loops, params=params, path=out, compare=compare)
    except (ValueError, ImportError) as e:
        raise SystemExit(f"tiramisu-py draw: {e}") from None
    return out


def main(argv=None):
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
    dr.add_argument("--loops", default=None, help="the two loops drawn, outer first: t,i")
    dr.add_argument("--compare", action="store_true", help="the program order beside it")
    sub.add_parser("bench", add_help=False,     # its options are parsed by bench()
                   help="benchmark the operator library against NumPy and PyTorch "
                        "(tiramisu-py bench --help)")
    args, rest = p.parse_known_args(argv)
    if args.cmd == "bench":
        bench(rest)
    elif rest:
        p.error(f"unrecognized arguments: {' '.join(rest)}")
    elif args.cmd == "draw":
        out = args.out or args.target.rpartition(":")[2] + ".png"
        loops = args.loops.split(",") if args.loops else None
        print(draw(args.target, parse_params(args.params), out, loops, args.compare))
    elif args.cmd == "example":
        example(args.name)
    else:
        demo(show_source=not args.no_source)
    return 0


if __name__ == "__main__":
    sys.exit(main())

"""Command line: ``tiramisu-py demo``, ``tiramisu-py bench`` (or ``python -m tiramisu_py ...``)."""
from __future__ import annotations

import argparse
import importlib
import os
import sys


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


def main(argv=None):
    p = argparse.ArgumentParser(prog="tiramisu-py", description=__doc__)
    sub = p.add_subparsers(dest="cmd", required=True)
    d = sub.add_parser("demo", help="an algorithm, its schedules and the legality check; the "
                                    "operator library against NumPy and PyTorch; the examples "
                                    "checked against NumPy")
    d.add_argument("--no-source", action="store_true", help="do not print generated code")
    e = sub.add_parser("example", help="run one of the examples (from any directory)")
    e.add_argument("name", choices=EXAMPLES)
    sub.add_parser("bench", add_help=False,     # its options are parsed by bench()
                   help="benchmark the operator library against NumPy and PyTorch "
                        "(tiramisu-py bench --help)")
    args, rest = p.parse_known_args(argv)
    if args.cmd == "bench":
        bench(rest)
    elif rest:
        p.error(f"unrecognized arguments: {' '.join(rest)}")
    elif args.cmd == "example":
        example(args.name)
    else:
        demo(show_source=not args.no_source)
    return 0


if __name__ == "__main__":
    sys.exit(main())

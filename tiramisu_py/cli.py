"""Command line: ``tiramisu-py demo``, ``tiramisu-py bench``, ``tiramisu-py tune FILE:FUNC``
(or ``python -m tiramisu_py ...``)."""
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


def load_function(spec):
    """The Function ``FILE:FUNC`` names: ``FUNC`` in the Python file ``FILE``, a
    Function or a callable that returns one when called without arguments."""
    path, sep, name = spec.rpartition(":")
    if not sep or not path or not name:
        raise SystemExit(f"tiramisu-py tune: {spec!r} is not FILE:FUNC")
    if not os.path.isfile(path):
        raise SystemExit(f"tiramisu-py tune: no file {path!r}")
    import runpy
    from .api import Function
    space = runpy.run_path(path, run_name="__tiramisu_py_tune__")
    if name not in space:
        raise SystemExit(f"tiramisu-py tune: {path} defines no {name!r}")
    obj = space[name]
    f = obj if isinstance(obj, Function) else obj() if callable(obj) else None
    if not isinstance(f, Function):
        raise SystemExit(f"tiramisu-py tune: {spec} is not a Function nor returns one")
    return f


def tune(args):
    """Tunes FILE:FUNC for the sizes given (``-p N=512``) and prints the schedule found."""
    from .driver.tune import tune as run_tune
    params = {}
    for item in args.param:
        p, eq, v = item.partition("=")
        if not eq or not v.strip().lstrip("-").isdigit():
            raise SystemExit(f"tiramisu-py tune: -p {item!r} is not NAME=INT")
        params[p.strip()] = int(v)
    f = load_function(args.function)
    try:
        r = run_tune(f, budget=args.budget, params=params, target=args.target,
                     retune=args.retune)
    except ValueError as e:
        raise SystemExit(f"tiramisu-py tune: {e}")
    how = "recorded before" if r["cached"] else f"{r['timed']} candidates timed"
    t = "" if r["time"] is None else f", {r['time'] * 1e3:.3f} ms"
    print(f"# {f.name}: {how}{t}; compile() of this algorithm on this host uses it")
    print("\n".join(map(str, r["steps"])))


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
    t = sub.add_parser("tune", help="time legal schedules of FILE:FUNC on this host and "
                                    "record the fastest (compile() then uses it)")
    t.add_argument("function", metavar="FILE:FUNC",
                   help="a Python file and a Function (or a function returning one) in it")
    t.add_argument("-p", "--param", action="append", default=[], metavar="NAME=INT",
                   help="a size to time with (one per free param)")
    t.add_argument("--budget", type=float, default=60.0, help="seconds (default 60)")
    t.add_argument("--target", choices=("cpu", "llvm"), default=None)
    t.add_argument("--retune", action="store_true", help="time again even if recorded")
    args, rest = p.parse_known_args(argv)
    if args.cmd == "bench":
        bench(rest)
    elif rest:
        p.error(f"unrecognized arguments: {' '.join(rest)}")
    elif args.cmd == "tune":
        tune(args)
    elif args.cmd == "example":
        example(args.name)
    else:
        demo(show_source=not args.no_source)
    return 0


if __name__ == "__main__":
    sys.exit(main())

"""The ``tiramisu-py`` command: every floor's subcommands in one table, at the
top of the import order (above ``bench`` and ``examples``, which it imports
like any other module; pyproject.toml installs them beside the library so
that this works from any directory).

    tiramisu-py demo [--no-source]        examples/demo.py: the tour
    tiramisu-py example NAME              examples/NAME.py
    tiramisu-py draw FILE:CALLABLE ...    tiramisu_py/cli.py
    tiramisu-py bench [SUITE ...] ...     bench/suites.py
    tiramisu-py tune [OP ...|grain|FILE:FUNC -p N=...] [--list|--forget [WHAT]]
                                          schedules/tuner.py (the FILE:FUNC form:
                                          tiramisu_py/cli.py)

Each command is declared beside the code it runs (a
:class:`tiramisu_py.cli.Command`); :func:`tiramisu_py.cli.main` parses and
runs.  ``python -m tiramisu_py`` runs the language's commands alone (draw,
tune FILE:FUNC, tune grain); ``python -m tiramisu_py_command`` is this one."""
from __future__ import annotations

import sys

from bench.suites import COMMAND as BENCH
from examples.demo import DEMO, EXAMPLE
from schedules.tuner import COMMAND as TUNE
from tiramisu_py import cli

COMMANDS = (DEMO, EXAMPLE, cli.DRAW, BENCH, TUNE)
DESCRIPTION = ("tiramisu_py, a polyhedral compiler with a scheduling language, and its operator "
               "library: the demo, the examples, pictures of a schedule, the benchmarks and "
               "the tuners.  `tiramisu-py COMMAND --help` for a command's options.")


def main(argv=None) -> int:
    """Runs ``tiramisu-py ARGV`` (default ``sys.argv[1:]``); returns the exit status."""
    return cli.main(argv, COMMANDS, description=DESCRIPTION)


if __name__ == "__main__":
    sys.exit(main())

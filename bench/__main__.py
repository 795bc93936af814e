"""``python -m bench [suite] [options]``: see bench/suites.py, or ``--help``."""
from bench import suites

suites.main(suites.parser("python -m bench").parse_args())

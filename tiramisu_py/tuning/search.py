"""What both tuners' searches share: their arguments' checks (one message
each, naming the tuner and the argument) and the progress bar on stderr."""
from __future__ import annotations

import math


def check_budget(who, budget, optional=False):
    """A time budget: a finite number of seconds > 0 (or None if ``optional``)."""
    if optional and budget is None:
        return
    if isinstance(budget, bool) or not isinstance(budget, (int, float)) \
            or not 0 < budget < math.inf:
        raise ValueError(f"{who}: budget must be a finite positive number of seconds"
                         f"{' or None' if optional else ''}, not {budget!r}")


def check_repeats(who, repeats):
    if not isinstance(repeats, int) or isinstance(repeats, bool) or repeats < 1:
        raise ValueError(f"{who}: repeats must be a positive int, not {repeats!r}")


def check_clock(who, clock):
    if clock is not None and not callable(clock):
        raise ValueError(f"{who}: clock must be a callable giving seconds, not {clock!r}")


class Bar:
    """One line on ``file`` (None: nothing shown), rewritten in place:
    ``tune LABEL [#####...] done/total best 1.234 ms NOTE``."""

    WIDTH = 100

    def __init__(self, file):
        self.file = file

    def show(self, label, done, total, best, note=""):
        if self.file is None:
            return
        fill = int(24 * done / max(1, total))
        b = "-" if best is None else f"{best * 1e3:.3f} ms"
        self.file.write(f"\rtune {label} [{'#' * fill}{'.' * (24 - fill)}] {done}/{total} "
                        f"best {b} {note}"[:self.WIDTH].ljust(self.WIDTH))
        self.file.flush()

    def end(self):
        if self.file is not None:
            self.file.write("\n")
            self.file.flush()

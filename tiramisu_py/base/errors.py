"""Exceptions of the public API."""


class IllegalScheduleError(ValueError):
    """A schedule that would change the program's results."""

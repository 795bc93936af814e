"""Exceptions of the public API.

An :class:`IllegalScheduleError` raised by the legality check carries the
refused pair as data (:class:`Violation`), so that ``err.draw()`` can show it.
The error lives on the lowest floor and the pictures sit high above it
(:mod:`tiramisu_py.draw`, beside ``driver/``), so the error cannot import
them: the picture package registers its drawing function here, through the
explicit hook :func:`register_violation_drawer`, when it is imported (which
importing ``tiramisu_py`` always does)."""
from __future__ import annotations

from dataclasses import dataclass, field

_violation_drawer = None      # set by tiramisu_py.draw.violation


def register_violation_drawer(draw):
    """Sets the function ``draw(error, path, **options) -> Picture`` that
    :meth:`IllegalScheduleError.draw` calls (tiramisu_py.draw registers it)."""
    global _violation_drawer
    _violation_drawer = draw


@dataclass
class Violation:
    """The pair of instances a refused schedule would run in the wrong order
    (or, ``concurrent``, in different iterations of a parallel ``loop``).

    ``source``/``sink``: (statement name, instance coordinates), the
    instances the message names; ``params``: the parameter values of that
    example; ``kind``: "RAW", "WAR", "WAW" (or "dependence");
    ``function`` and ``commands``: the Function and a copy of its command log
    when it was refused (the transformed order the picture shows)."""
    function: object
    commands: list
    buffer: str
    kind: str
    source: tuple
    sink: tuple
    params: dict = field(default_factory=dict)
    concurrent: bool = False
    loop: str | None = None


class IllegalScheduleError(ValueError):
    """A schedule that would change the program's results.  ``violation``:
    the refused pair as data (a :class:`Violation`), or None when the refusal
    is not about a pair of instances (a GPU mapping, a vanished loop)."""

    def __init__(self, message="", violation: Violation | None = None):
        super().__init__(message)
        self.violation = violation

    def draw(self, path=None, **options):
        """A :class:`~tiramisu_py.Picture` of the refused pair on the
        transformed order: the two instances the message names and the
        dependence between them, highlighted (saved to ``path`` if given;
        ``options`` as :meth:`Function.draw`'s ``statement``, ``loops``,
        ``params``)."""
        if self.violation is None:
            raise ValueError("IllegalScheduleError.draw: this refusal names no pair of "
                             "instances to draw (it is not about a dependence)")
        if _violation_drawer is None:
            raise RuntimeError("IllegalScheduleError.draw: the picture package is not loaded "
                               "(import tiramisu_py)")
        return _violation_drawer(self, path, **options)

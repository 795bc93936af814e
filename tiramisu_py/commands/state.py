"""What the scheduling commands read of a Function: its program-order model
(no buffers assigned) and its schedule replayed from the command log, both
cached on the Function (``f._model_cache``, ``f._state_cache``) until it
changes, and the extent and range of one of a statement's loops."""
from __future__ import annotations

from ..lang.schedule import replay
from ..poly.footprint import loop_extent, loop_range
from ..poly.model import PolyModel


def model_of(f) -> PolyModel:
    """The polyhedral model of ``f``'s statements (domains, program order)."""
    if f._model_cache is None:
        f._model_cache = PolyModel(f)
    return f._model_cache


def state_of(f) -> dict:
    """stmt name -> StmtSchedule: the schedule after every command given."""
    if f._state_cache is None:
        f._state_cache = replay(model_of(f), f._commands)
    return f._state_cache


def extent_of(f, stmt, loop):
    """The largest extent ``loop`` of ``stmt`` has in the current schedule,
    over all param values, or None when it is unbounded."""
    return loop_extent(model_of(f), state_of(f), stmt, loop)


def range_of(f, stmt, loop):
    """``(lo, hi)``: the constant bounds of ``loop`` of ``stmt`` in the
    current schedule, or None when one changes with a param."""
    return loop_range(model_of(f), state_of(f), stmt, loop)

"""The pictures users ask for: ``f.draw()`` (:func:`draw_function`),
``tp.draw_compare(before, after)`` and ``IllegalScheduleError.draw()``
(:func:`draw_violation`, registered with the error at import: the error sits
on the lowest floor and cannot import this one, see
:mod:`tiramisu_py.base.errors`)."""
from __future__ import annotations

from ..base import errors
from .picture import Picture
from .render import render_space
from .space import SpaceData, panel

ERROR_KINDS = {"RAW": "flow", "WAR": "anti", "WAW": "output"}


def _picture(title, params, panels, path):
    pic = Picture(SpaceData(title, dict(params or {}), panels), render_space)
    if path is not None:
        pic.save(path)
    return pic


def draw_function(f, statement=None, loops=None, params=None, path=None, compare=False):
    """A :class:`Picture` of ``f``'s iteration space under its schedule (see
    :meth:`tiramisu_py.Function.draw`); ``compare``: the program order on the
    left, the schedule on the right."""
    after = panel(f, f._commands, statement, loops, params,
                  "schedule" if compare else "")
    panels = [panel(f, [], statement, loops, params, "program order"), after] if compare \
        else [after]
    return _picture(f"{f.name}{_params_text(params)}", params, panels, path)


def draw_compare(before, after, statement=None, loops=None, params=None, path=None):
    """Two functions' pictures side by side (e.g. one before a skew and one
    after it), each under its own schedule, at the same ``params``."""
    left = panel(before, before._commands, statement, loops, params, before.name)
    right = panel(after, after._commands, statement, loops, params, after.name)
    return _picture(f"{before.name} | {after.name}{_params_text(params)}", params,
                    [left, right], path)


def draw_violation(error, path=None, statement=None, loops=None, params=None):
    """The refused pair of ``error`` (an IllegalScheduleError with a
    violation) on the refused, transformed order: both instances circled and
    the dependence between them in red.  ``params`` default to those of the
    error's example (the instances must exist at the params given)."""
    v = error.violation
    params = dict(v.params if params is None else params)
    params = {p: x for p, x in params.items() if not p.startswith("tp_")}
    stmts = statement if statement is not None else list(dict.fromkeys([v.source[0], v.sink[0]]))
    p = panel(v.function, v.commands, stmts, loops, params, "refused schedule",
              locate=[v.source, v.sink])
    kind = ERROR_KINDS.get(v.kind, v.kind)
    what = "in different iterations of " + repr(v.loop) if v.concurrent else "in the wrong order"
    source, sink = (v.source[0], tuple(v.source[1])), (v.sink[0], tuple(v.sink[1]))
    p.highlight = {"source": source, "sink": sink, "kind": kind, "buffer": v.buffer,
                   "text": f"refused: {_instance(v.function, v.source)} -> "
                           f"{_instance(v.function, v.sink)}\n({kind} on {v.buffer!r}) {what}"}
    return _picture(f"{v.function.name}{_params_text(params)}", params, [p], path)


def _instance(f, inst):
    stmt, point = inst
    st = next(s for s in f.statements if s.name == stmt)
    return f"{stmt}({', '.join(f'{v.name}={x}' for v, x in zip(st.vars, point))})"


def _params_text(params):
    return f" ({', '.join(f'{k}={v}' for k, v in params.items())})" if params else ""


errors.register_violation_drawer(draw_violation)

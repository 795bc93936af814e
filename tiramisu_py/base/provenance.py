"""Where the user wrote things, for error messages.

Every declaration (loop, buffer, computation) and every scheduling command
records ``where``: the ``file:line`` of the first frame outside this package
(user code, an example, an operator of :mod:`schedules`).  A scheduling
command also records ``call``: the command as the user wrote it, with the
user's own variable names (``C.update.vectorize("k", 8)``, found among the
caller's local variables; the statement's name when none holds it), so that
a suggestion built from it (``C.update.vectorize("k", 8,
allow_reassociation=True)``) can be pasted back.  One user call may record
several commands (``vectorize`` splits first, ``cache_at`` declares a copy and
computes it at the loop): they share one call id, and ``Function.undo()``
removes them together.  Cost: one walk up the stack and one scan of the
caller's local names per call.
"""
from __future__ import annotations

import functools
import itertools
import os
import sys
import threading

_PKG = os.path.dirname(os.path.dirname(os.path.abspath(__file__))) + os.sep   # tiramisu_py/
_inside: dict = {}                  # co_filename -> inside this package
_local = threading.local()
_ids = itertools.count(1)


class Call:
    __slots__ = ("id", "text", "where")

    def __init__(self, id_, text, where_):
        self.id, self.text, self.where = id_, text, where_


def user_frame():
    """The innermost frame outside this package, or None."""
    f = sys._getframe(1)
    while f is not None:
        name = f.f_code.co_filename
        inside = _inside.get(name)
        if inside is None:
            path = os.path.abspath(name)
            inside = _inside[name] = path.startswith(_PKG)
        if not inside:
            return f
        f = f.f_back
    return None


def where(frame=None) -> str | None:
    """``file:line`` of ``frame`` (default: the user's frame), the file
    relative to the working directory when inside it."""
    frame = frame or user_frame()
    if frame is None:
        return None
    path = frame.f_code.co_filename
    if path.startswith("<"):
        return f"{path}:{frame.f_lineno}"
    try:
        rel = os.path.relpath(path)
        path = rel if not rel.startswith("..") else path
    except ValueError:
        pass
    return f"{path}:{frame.f_lineno}"


def _local_name(obj, frame):
    if frame is None:
        return None
    try:
        items = list(frame.f_locals.items())
    except Exception:       # noqa: BLE001 - a frame we cannot read: use the fallback
        return None
    for k, v in items:
        if v is obj and k.isidentifier() and not k.startswith("_"):
            return k
    return None


def ref(obj, frame=None) -> str:
    """How the user's code at ``frame`` can name ``obj``: a statement
    (``C``, ``C.update``, ``C.updates[0]``), a buffer, a loop, a Function.
    The objects are told apart by their class tag ``_tp_kind`` ("loop",
    "statement", "buffer") and ``is_update``: this module sits below the
    language's classes and imports none of them."""
    if getattr(obj, "_tp_kind", None) == "loop":
        return f'"{obj.name}"'
    name = _local_name(obj, frame)
    if name is not None:
        return name
    if getattr(obj, "is_update", False):
        parent = obj.parent
        base = _local_name(parent, frame) or parent.name
        k = next(i for i, u in enumerate(parent.updates) if u is obj)
        return f"{base}.update" if k == len(parent.updates) - 1 else f"{base}.updates[{k}]"
    return getattr(obj, "name", repr(obj))


def _arg(a, frame):
    if isinstance(a, str):
        return f'"{a}"'
    if getattr(a, "_tp_kind", None) in ("statement", "buffer", "loop"):
        return ref(a, frame)
    if isinstance(a, (tuple, list)):
        inner = ", ".join(_arg(x, frame) for x in a)
        return f"({inner},)" if isinstance(a, tuple) and len(a) == 1 else \
            (f"({inner})" if isinstance(a, tuple) else f"[{inner}]")
    return repr(a)


def command(method):
    """Decorates a scheduling command: the outermost one of a user call
    records the call (see the module's doc) for the commands it gives."""
    name = method.__name__

    @functools.wraps(method)
    def wrapper(self, *args, **kwargs):
        if getattr(_local, "call", None) is not None:
            return method(self, *args, **kwargs)
        frame = user_frame()
        parts = [_arg(a, frame) for a in args] + [f"{k}={_arg(v, frame)}" for k, v in kwargs.items()]
        _local.call = Call(next(_ids), f"{ref(self, frame)}.{name}({', '.join(parts)})", where(frame))
        try:
            return method(self, *args, **kwargs)
        finally:
            _local.call = None
    return wrapper


def current() -> Call:
    """The user call being recorded (a fresh one outside any)."""
    c = getattr(_local, "call", None)
    return c if c is not None else Call(next(_ids), None, where())


def with_kwarg(call: str, kwarg: str) -> str:
    """``call`` (``x.f(a, b)``) with one more keyword argument."""
    key = kwarg.split("=")[0] + "="
    if key in call:
        start = call.index(key)
        end = call.find(",", start)
        end = len(call) - 1 if end < 0 else end
        return call[:start] + kwarg + call[end:]
    head = call[:-1]
    return f"{head}{'' if head.endswith('(') else ', '}{kwarg})"

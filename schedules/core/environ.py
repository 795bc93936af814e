"""The environment variables a library call depends on, read cheaply enough
for every call.

``os.environ.get(name)`` encodes the name and decodes the value on each
read (about 1 us); a call that checks five variables to keep its memo
exact (:mod:`schedules.core.call_memo`, the find step's memo) spent more
time there than in its own bookkeeping.  :func:`get` and :func:`values`
look the names up, encoded once, in ``os.environ``'s own mapping: the
same answers as ``os.environ.get`` (``os.environ[...] = `` and ``del``,
``monkeypatch.setenv`` included), at a dictionary lookup each.  Where
``os.environ`` is not CPython's mapping (replaced by a test, another
interpreter) they fall back to ``os.environ.get``."""
from __future__ import annotations

import os

_ENVIRON = os.environ
_DATA = getattr(_ENVIRON, "_data", None)          # CPython's {encoded name: encoded value}
_ENCODED: dict = {}            # name (or tuple of names) -> encoded


def _fast():
    return _DATA is not None and os.environ is _ENVIRON and isinstance(_DATA, dict)


def _key(name):
    k = _ENCODED.get(name)
    if k is None:
        k = _ENCODED[name] = _ENVIRON.encodekey(name)
    return k


def get(name: str):
    """``os.environ.get(name)``."""
    if not _fast():
        return os.environ.get(name)
    value = _DATA.get(_key(name))
    return None if value is None else _ENVIRON.decodevalue(value)


def values(names) -> tuple:
    """The values of ``names`` (a tuple) as a hashable tuple, for a memo's key: equal
    tuples for equal values (encoded as the process stores them; None for
    an unset variable)."""
    if not _fast():
        return tuple(os.environ.get(n) for n in names)
    keys = _ENCODED.get(names)
    if keys is None:
        keys = _ENCODED[names] = tuple(_key(n) for n in names)
    return tuple(map(_DATA.get, keys))

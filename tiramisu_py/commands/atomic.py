"""The copy commands (``cache_at``, ``cache_shared``, ``cache_local``) change
the algorithm as well as the schedule: they declare a copy computation (and
its loops and buffer), redirect the consumer's reads to it and record its
``compute_at``.  They are atomic, and undone as a whole:

* **Refused: nothing changed.**  :func:`copy_command` snapshots the few
  mutable objects a copy command touches (the Function's own fields: its
  statement, computation, loop, buffer and name tables, the command log and
  the cached schedule state and model; every statement's fields, its
  expression and default buffer included; every buffer's and every nest's)
  and, when the command raises (any exception: a refusal after the copy was
  made, an isl failure), puts each back in place, the same container objects
  holding the same items as before the call.
* **Undone: the copy goes too.**  A successful copy command leaves a
  :class:`CopyCall` under its call id: :meth:`Function.undo` of that call
  removes the statements, computations, loops, buffers and names it added,
  gives the consumer back its expression and the command log its state
  before the call (``cache_local`` of a shared tile had retargeted that
  tile's ``compute_at``).  What was declared after the call stays; undo is
  refused (nothing changed) while such a statement reads the copy.
"""
from __future__ import annotations

import contextlib
import functools

from ..base import provenance
from ..lang.expr import accesses


def _nests(f):
    out, todo = [], [f._root]
    while todo:
        n = todo.pop()
        out.append(n)
        todo += [x for x in n.items if hasattr(x, "items")]
    return out


def snapshot(f):
    """(object, {field: (value, its items when a list/dict/set)}) for the
    Function, its statements, buffers and nests."""
    out = []
    for o in [f, *f.statements, *f.buffers.values(), *_nests(f)]:
        out.append((o, {k: (v, v.copy() if isinstance(v, (list, dict, set)) else None)
                        for k, v in vars(o).items()}))
    return out


def restore(snap):
    for o, fields in snap:
        d = vars(o)
        d.clear()
        for k, (v, items) in fields.items():
            if isinstance(v, list):
                v[:] = items
            elif items is not None:
                v.clear()
                v.update(items)
            d[k] = v


_STORAGE = ("shape", "tile", "regs", "layout", "store_index", "buffer", "_auto_buffer")


class CopyCall:
    """What one successful copy command added, for :meth:`Function.undo`."""

    def __init__(self, f, before):
        old = {id(o): fields for o, fields in before}
        ff = old[id(f)]
        had = {id(s) for s in ff["statements"][1]}
        self.statements = [s for s in f.statements if id(s) not in had]
        self.computations = [n for n in f.computations if n not in ff["computations"][1]]
        kept = {id(v) for v in ff["vars"][1]}
        self.vars = [v for v in f.vars if id(v) not in kept]
        self.buffers = [n for n in f.buffers if n not in ff["buffers"][1]]
        self.names = f._names - ff["_names"][1]
        self.values = [(s, old[id(s)]["value"][0]) for s in f.statements
                       if id(s) in old and s.value is not old[id(s)]["value"][0]]
        # storage the call changed (``pipeline``: a copy's buffer and index)
        self.storage = [(o, k, old[id(o)][k][0]) for o in [*f.statements, *f.buffers.values()]
                        if id(o) in old for k in _STORAGE
                        if k in old[id(o)] and getattr(o, k, None) is not old[id(o)][k][0]]
        self.commands = list(ff["_commands"][1])

    def _check_unread(self, f, text):
        """Refuses to undo while a statement declared after the call reads
        the copy (it would read a computation that no longer exists)."""
        gone = {id(s) for s in self.statements} | {id(s) for s, _ in self.values}
        added = set(self.computations) | set(self.buffers)
        for s in f.statements:
            if id(s) in gone:
                continue
            exprs = [s.value] + list(s.lhs if s.is_update else s.store_index or [])
            target = s.parent if s.is_update else s
            names = {a.target.name for e in exprs if e is not None for a in accesses(e)}
            if target.buffer is not None and not getattr(target, "_auto_buffer", False):
                names.add(target.buffer.name)
            used = sorted(names & added)
            if used:
                raise ValueError(f"f.undo() of {text}: {s.name} uses {', '.join(used)}, which "
                                 "that call declared; remove it first (or work on f.copy())")

    def undo(self, f, text):
        self._check_unread(f, text)
        gone = {id(s) for s in self.statements}
        f.statements[:] = [s for s in f.statements if id(s) not in gone]
        for n in _nests(f):
            n.items[:] = [x for x in n.items if id(x) not in gone]
        for n in self.computations:
            f.computations.pop(n, None)
        gone_vars = {id(v) for v in self.vars}
        f.vars[:] = [v for v in f.vars if id(v) not in gone_vars]
        for n in self.buffers:
            f.buffers.pop(n, None)
        f._names -= self.names
        for s, v in self.values:
            s.value = v
        for o, k, v in self.storage:
            setattr(o, k, v)
        f._commands[:] = self.commands
        f._state_cache = f._model_cache = None


@contextlib.contextmanager
def all_or_nothing(f):
    """On any exception inside, ``f`` is put back as it was; yields the
    snapshot taken."""
    before = snapshot(f)
    try:
        yield before
    except BaseException:
        restore(before)
        raise


@contextlib.contextmanager
def copy_command(f):
    """Runs a copy command atomically: on any exception the Function is put
    back as it was; on success the call is recorded for ``f.undo()``."""
    with all_or_nothing(f) as before:
        yield
    # a nested copy command (cache_shared's cache_at) shares the call id:
    # the outermost one, finishing last, records the whole call
    f.__dict__.setdefault("_copy_calls", {})[provenance.current().id] = CopyCall(f, before)


def all_or_nothing_call(method):
    """Decorates a scheduling command that records several commands
    (``gpu_tile``: a tile and four binds; ``parallelize(...,
    allow_reassociation=True)``: two): refused, it records none of them."""
    @functools.wraps(method)
    def wrapper(self, *args, **kwargs):
        with all_or_nothing(self.function):
            return method(self, *args, **kwargs)
    return wrapper


def atomic(method):
    """Decorates a copy command of a statement (under ``provenance.command``)."""
    @functools.wraps(method)
    def wrapper(self, *args, **kwargs):
        with copy_command(self.function):
            return method(self, *args, **kwargs)
    return wrapper

"""C backend: a select that reads memory in an arm, computed before it
chooses.  ``cond ? in[y - 1][x] : 0`` (a padded input) prints as
``tp_pick(cond, in[clamp(y - 1)][x], 0)``: each index that may leave its
extent inside the loops around it is held to the extent (the same element
wherever the program's index is in bounds, some element of the array
wherever it is not), so the load is unconditional and the select a blend of
two values, which a C compiler vectorises without masked loads.  gcc 12.2
miscompiles if-converted masked group loads (:data:`codegen.toolchain.IFCVT_GUARD`
turns if-conversion off in a kernel with a guarded access); a kernel whose
every guarded load is speculated this way keeps if-conversion, and its vector
loops.  Only arrays the kernel never stores to, of constant shape (every
extent at least 1), are read so.

A held index that moves with a vector loop's variable (the column of a
padded convolution's input, ``in[y][clamp(x + kx - 1)]``) makes the lanes'
loads a gather; such a loop is versioned (:meth:`Speculation.interior`):
where every lane's index lies inside the extent (the index at the loop's
two ends, tested before it: the interior columns) the loop reads without
holding that index, contiguous lanes, and only the border keeps the held
one.

This module imports nothing from ``tiramisu_py``."""
from __future__ import annotations

from .. import ir
from ..simplify import extremes, interval
from .syntax import P_REL


def readonly_shapes(fn: ir.LoweredFunction) -> dict:
    """name -> constant shape (every extent >= 1, over the kernel's fixed
    parameters) of each array argument the kernel never stores to."""
    stored = {x.array for x in ir.walk_stmts(fn.body) if isinstance(x, ir.Store)}
    out = {}
    for a in fn.arrays:
        dims = [ir.const_eval(d, fn.constants) for d in a.shape]
        if a.name not in stored and dims and all(d is not None and d >= 1 for d in dims):
            out[a.name] = tuple(dims)
    return out


class Speculation:
    """The speculated selects of one kernel: the read-only arrays, and per
    load in a select's arm (by identity) the indices that may leave their
    extent, from the intervals of the loops around it (a load not seen here,
    e.g. an unrolled copy, has every index held)."""

    def __init__(self, fn: ir.LoweredFunction):
        self.readonly = readonly_shapes(fn)
        self.held: dict = {}
        if self.readonly:
            self._walk(fn.body, {n: (int(v), int(v)) for n, v in fn.constants.items()})

    def _walk(self, s, ranges):
        for x in ir.stmt_exprs(s):
            for e in ir.walk_exprs(x):
                if isinstance(e, ir.Select):
                    for load in (n for arm in (e.a, e.b) for n in _loads(arm)):
                        dims = self.readonly.get(load.array)
                        if dims and len(dims) == len(load.index):
                            self.held[id(load)] = tuple(
                                not _within(interval(i, ranges), d) for i, d in zip(load.index, dims))
        if isinstance(s, ir.For):
            lo, hi = interval(s.lo, ranges)[0], interval(s.hi, ranges)[1]
            ranges = {**ranges, s.var: (lo, None if hi is None else hi - 1)}
        for c in ir.stmt_children(s):
            self._walk(c, ranges)

    def interior(self, s: ir.For):
        """The vector loop ``s``'s held indices that move with its variable,
        one way: ``(tests, lifted)``, ``tests`` [(least, greatest, extent)]
        of each such index over the loop (IR), ``lifted`` the holds without
        them ({load id: held}), to print where every test passes
        (:meth:`lifting`); None where there is none."""
        inner = {x.var for x in ir.walk_stmts(s.body) if isinstance(x, ir.For)} | \
                {x.name for x in ir.walk_stmts(s.body) if isinstance(x, ir.Let)}
        tests, lifted = [], {}
        last = ir.binary("sub", s.hi, ir.const(1))
        for x in ir.walk_stmts(s.body):
            for e in (n for y in ir.stmt_exprs(x) for n in ir.walk_exprs(y)):
                if not isinstance(e, ir.Select):
                    continue
                for load in (n for arm in (e.a, e.b) for n in _loads(arm)):
                    held = lifted.get(id(load), self.held.get(id(load)))
                    if held is None:
                        continue
                    now = list(held)
                    for d, (i, h) in enumerate(zip(load.index, held)):
                        names = ir.free_vars(i)
                        if not h or s.var not in names or names & inner:
                            continue
                        ends = extremes(i, s.var, s.lo, last)
                        if ends is not None:
                            tests.append((*ends, self.readonly[load.array][d]))
                            now[d] = False
                    if tuple(now) != held:
                        lifted[id(load)] = tuple(now)
        return (tests, lifted) if tests else None

    def lifting(self, lifted: dict):
        """Prints with the holds ``lifted`` (:meth:`interior`) until the
        returned function is called."""
        saved = {k: self.held.get(k) for k in lifted}
        self.held.update(lifted)

        def restore():
            for k, v in saved.items():
                if v is None:
                    self.held.pop(k, None)
                else:
                    self.held[k] = v
        return restore

    def arms(self, e: ir.Select):
        """``e``'s arms to print, each load at its held indices; None where
        :func:`speculated` says no."""
        return speculated(e, self.readonly, self.held)


def speculated(e: ir.Select, readonly: dict, held: dict | None = None):
    """The arms of ``e`` with their loads' indices held to their extents, when
    an arm reads memory and every array the arms read is in ``readonly``
    (:func:`readonly_shapes`); else None.  Nested selects are left to their
    own printing."""
    loads = [n for arm in (e.a, e.b) for n in _loads(arm)]
    if not loads or any(readonly.get(x.array) is None or len(x.index) != len(readonly[x.array])
                        for x in loads):
        return None
    held = {} if held is None else held
    return _clamped(e.a, readonly, held), _clamped(e.b, readonly, held)


def _within(iv, extent) -> bool:
    lo, hi = iv
    return lo is not None and hi is not None and lo >= 0 and hi <= extent - 1


def _loads(e):
    """The loads of ``e`` outside nested selects (their own indices' included)."""
    if isinstance(e, ir.Load):
        yield e
        for i in e.index:
            yield from _loads(i)
    elif not isinstance(e, ir.Select):
        for c in ir.expr_children(e):
            yield from _loads(c)


def _clamped(e, readonly, held):
    if isinstance(e, ir.Load):
        dims = readonly[e.array]
        which = held.get(id(e), (True,) * len(dims))
        index = tuple(_clamp(_clamped(i, readonly, held), d) if h else _clamped(i, readonly, held)
                      for i, d, h in zip(e.index, dims, which))
        return ir.Load(e.array, index, e.dtype)
    if isinstance(e, ir.Select):
        return e
    return ir.with_children(e, [_clamped(c, readonly, held) for c in ir.expr_children(e)])


def _clamp(i, extent):
    if isinstance(i, ir.Const):
        return ir.Const(min(max(int(i.value), 0), extent - 1), "int64")
    return ir.Binary("min", ir.Binary("max", i, ir.Const(0, "int64"), "int64"),
                     ir.Const(extent - 1, "int64"), "int64")


class InteriorMixin:
    """Needs :class:`codegen.c.emit.CPrinter` (``loop``, ``out``, ``wrap``,
    ``speculation``, ``versioning``)."""

    def interior_version(self, s: ir.For, ind: int, tests, lifted) -> None:
        """The vector loop ``s`` twice (:meth:`Speculation.interior`): where
        every lane's index lies inside its array, loads at the program's
        indices (contiguous lanes); elsewhere at indices held to the extents."""
        inside = " && ".join(f"{self.wrap(lo, P_REL + 1)} >= 0 && {self.wrap(hi, P_REL + 1)} <= {n - 1}"
                             for lo, hi, n in tests)
        self.versioning.add(id(s))
        self.out(ind, f"if ({inside}) {{  /* every lane's read inside its array */")
        restore = self.speculation.lifting(lifted)
        self.loop(s, ind + 1)
        restore()
        self.out(ind, "} else {")
        self.loop(s, ind + 1)
        self.out(ind, "}")
        self.versioning.discard(id(s))

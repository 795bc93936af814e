"""The algorithm as data: a Function holds params, loop variables, buffers and
statements (computations and their updates) in program order, and the
command log of its schedule.  The classes users get (``tp.Function``,
``tp.Computation``, ``tp.Update``) add the verbs: :mod:`tiramisu_py.function`;
a Function builds its statements through its ``_Computation`` and
``_Update`` class attributes, which ``function.Function`` sets to those."""
from __future__ import annotations

import contextlib
import keyword
import re

from codegen.c.names import reserved_c_symbol

from ..base import provenance
from ..base import types as T
from .expr import (Access, Const, Expr, ParamRef, UpdateRequest, Var, accesses, check_expr_size,
                   parse_size, strong_type, walk, wrap)

_IDENT = re.compile(r"[A-Za-z][A-Za-z0-9_]*")         # matched whole (fullmatch): no trailing newline
# words the isl parser or the C compiler would misread
_RESERVED = {"and", "or", "not", "exists", "min", "max", "floor", "ceil", "mod", "true",
             "false", "infty", "rat", "domain", "int", "float", "double", "char", "long",
             "short", "void", "for", "if", "else", "while", "do", "return", "const",
             "static", "restrict", "inline", "unsigned", "signed", "struct", "union",
             "enum", "sizeof", "switch", "case", "default", "break", "continue", "goto",
             "bool", "auto", "register", "volatile", "extern", "typedef", "NAN", "INFINITY"}


def check_name(name, what: str) -> str:
    """The one check of every name a user gives: params, loops, inputs,
    buffers, computations, the Function, and the loops that scheduling
    commands create (``split(names=)``, ``tile(names=)``, ``skew(name=)``,
    ``cache_at(name=)``).  ``what`` names what is checked, e.g. ``"loop"`` or
    ``"c.split(i, 4, names=...): loop"``.

    Refused: what is not an identifier (a letter, then letters, digits or
    ``_``), Python keywords, the words of isl's parser and C's keywords
    (:data:`_RESERVED`), and the ``tp_`` prefix (the compiler's own names); a
    Function may not take the name of a C library function (it is exported
    under its name).  C macros (``linux``, ``errno``, ``M_PI``, ``NULL``...)
    are fine: the C backend keeps every user name out of the preprocessor's
    reach (see :mod:`codegen.c.names`)."""
    if not isinstance(name, str) or not _IDENT.fullmatch(name):
        raise ValueError(f"{what} name {name!r} must be an identifier "
                         "(a letter, then letters, digits or _)")
    if name in _RESERVED or keyword.iskeyword(name) or name.startswith("tp_"):
        raise ValueError(f"{what} name {name!r} is reserved (a Python, isl or C keyword, or "
                         "the tp_ prefix of the compiler's own names); choose another")
    if what == "function" and reserved_c_symbol(name):
        raise ValueError(f"{what} name {name!r} is reserved (a C library function: the kernel "
                         "is exported under its name); choose another")
    return name


class Buffer:
    """An array: an input (read-only, passed by the caller), an output
    (returned; may be passed to update in place) or a temporary."""
    _tp_kind = "buffer"                 # how provenance tells the objects apart

    def __init__(self, function, name, shape, dtype, kind):
        self.function, self.name, self.shape = function, name, tuple(shape)
        self.dtype, self.kind = dtype, kind     # kind: "input" | "output" | "temp"
        self.where = provenance.where()

    def __getitem__(self, idx):
        idx = idx if isinstance(idx, tuple) else (idx,)
        if len(idx) != len(self.shape):
            raise IndexError(f"buffer {self.name!r} has {len(self.shape)} dimensions, "
                             f"indexed with {len(idx)}")
        return Access(self, idx)

    def __repr__(self):
        return f"Buffer({self.name}, {self.shape}, {self.dtype.name}, {self.kind})"


class Statement:
    """One polyhedral statement: ``target[store_index] (op)= value`` for every
    point of the loops ``vars``."""
    is_update = False
    _tp_kind = "statement"              # how provenance tells the objects apart

    def __init__(self, function, name, vars_, value):
        self.function, self.name, self.vars, self.value = function, name, list(vars_), value
        self.nest = function._current_nest()
        self.where = provenance.where()             # file:line of the declaration

    def __repr__(self):
        return f"{type(self).__name__}({self.name})"

    @property
    def loops(self):
        return [v.name for v in self.vars]


class Computation(Statement):
    """``name[vars] = expr``; stored by default in a buffer of its own, shaped
    like its domain's bounding box.  ``C[i, j] += e`` adds an update."""

    def __init__(self, function, name, vars_, expr, dtype):
        super().__init__(function, name, vars_, None if expr is None else wrap(expr))
        self.explicit_dtype = None if dtype is None else T.from_any(dtype)
        self.updates = []
        self.buffer = None              # set by store_in, else a default buffer at compile
        self.store_index = None         # exprs over self.vars
        if self.value is not None:
            self._check_expr(self.value, "expression")
            self._check_loops(self.value, "expression")

    # typing ---------------------------------------------------------------
    @property
    def dtype(self) -> T.DType:
        if self.explicit_dtype is not None:
            return self.explicit_dtype
        if getattr(self, "_typing", False):
            return None                 # a self-read while typing: no information
        self._typing = True
        try:
            return self._infer_dtype()
        finally:
            self._typing = False

    def _infer_dtype(self):
        if self.value is not None:
            t = strong_type(self.value)
            if t is not None:
                return t
        for u in self.updates:
            t = strong_type(u.value)
            if t is not None:
                return t
        if self.value is not None:
            return self.value.dtype
        return T.DEFAULT_FLOAT

    # definition -------------------------------------------------------------
    def __getitem__(self, idx):
        idx = idx if isinstance(idx, tuple) else (idx,)
        if len(idx) != len(self.vars):
            raise IndexError(f"computation {self.name!r} has {len(self.vars)} loops "
                             f"({', '.join(self.loops)}), indexed with {len(idx)}")
        return Access(self, idx)

    def __setitem__(self, idx, value):
        idx = idx if isinstance(idx, tuple) else (idx,)
        if isinstance(value, UpdateRequest):
            if value.access.target is not self:
                raise ValueError("an update must read and write the same computation")
            self._add_update(value.access, value.op, value.expr, None)
            return
        if self.value is not None:
            raise ValueError(f"computation {self.name!r} already has an expression; "
                             "use += (or .reduce) to add an update")
        if len(idx) != len(self.vars) or any(a is not b for a, b in zip(idx, self.vars)):
            raise ValueError(f"define {self.name!r} as {self.name}[{', '.join(self.loops)}] = ...")
        self.set_expression(value)

    def set_expression(self, expr):
        """Defines the expression of a computation declared without one (this is
        how a computation reads its own earlier values)."""
        if self.value is not None:
            raise ValueError(f"computation {self.name!r} already has an expression")
        self.value = wrap(expr)
        self._check_expr(self.value, "expression")
        self._check_loops(self.value, "expression")
        return self

    def store_in(self, buffer, index=None):
        """Stores the computation's values into ``buffer`` at ``index`` (exprs
        over the computation's loops; default: the loops themselves)."""
        if not isinstance(buffer, Buffer):
            raise TypeError(f"store_in: buffer must be a tp Buffer (from f.buffer), "
                            f"not {type(buffer).__name__}")
        if buffer.kind == "input":
            raise ValueError(f"store_in: {buffer.name!r} is an input and read-only; "
                             "declare it with f.buffer(..., output=True) to update it")
        index = list(self.vars) if index is None else [wrap(i) for i in index]
        if len(index) != len(buffer.shape):
            raise IndexError(f"store_in: buffer {buffer.name!r} has {len(buffer.shape)} "
                             f"dimensions, got {len(index)} indices")
        for e in index:
            self._check_expr(e, "store_in index")
            self._check_loops(e, "store_in index")
        # explicit from now on (a compile or analysis before this call may have
        # given it a default buffer, which the next compile would reset)
        self.buffer, self.store_index, self._auto_buffer = buffer, index, False
        return self

    @property
    def update(self):
        """The last update added (the statement to schedule)."""
        if not self.updates:
            raise AttributeError(f"computation {self.name!r} has no update")
        return self.updates[-1]

    def _add_update(self, access, op, expr, loops):
        if self.value is None:
            raise ValueError(f"computation {self.name!r} needs an expression before updates")
        f = self.function
        lhs_vars = [n for i in access.indices for n in walk(i) if isinstance(n, Var)]
        used = lhs_vars + [n for n in walk(expr) if isinstance(n, Var)]
        for a in accesses(expr):
            used += [n for n in walk(a) if isinstance(n, Var)]
        nest = [v for level in f._nest_stack for v in level]
        if loops is None:
            ordered = []

            def add(v):
                for d in v.deps:
                    add(d)
                if not any(v is o for o in ordered):
                    ordered.append(v)
            for v in nest + lhs_vars + sorted(used, key=lambda v: v.order):
                add(v)
        else:
            ordered = list(loops)
            for v in used:
                if not any(v is o for o in ordered):
                    raise ValueError(f"update of {self.name!r}: loops= misses {v.name!r}")
        name = f"{self.name}_update" + (f"{len(self.updates)}" if self.updates else "")
        u = f._Update(f, name, ordered, self, access.indices, op, expr)
        self.updates.append(u)
        f._add_statement(u)
        return u

    def _check_loops(self, e, what):
        """A computation's expression may use only its own loops (an update
        gets the loops it uses; a computation has the ones it declares)."""
        own = {id(v) for v in self.vars}
        for n in walk(e):
            if isinstance(n, Var) and n.function is self.function and id(n) not in own:
                loops = ", ".join(self.loops)
                raise ValueError(
                    f"computation {self.name!r}: its {what} uses loop {n.name!r}, which is not "
                    f"one of its loops [{loops}]; declare it over [{loops}{', ' if loops else ''}"
                    f"{n.name}] or, to sum over {n.name!r}, add it as an update: "
                    f"{self.name}[{loops}] += ...")

    def _check_expr(self, e, what):
        f = self.function
        check_expr_size(e, f"computation {self.name!r}: its {what}")
        for n in walk(e):
            if isinstance(n, Var) and n.function is not f:
                raise ValueError(f"{self.name}: {what} uses loop {n.name!r} of another function")
            if isinstance(n, Access) and n.target.function is not f:
                raise ValueError(f"{self.name}: {what} reads {n.target.name!r} of another function")


class Update(Statement):
    """``parent[lhs] = parent[lhs] op value`` over ``vars``."""
    is_update = True

    def __init__(self, function, name, vars_, parent, lhs, op, value):
        super().__init__(function, name, vars_, value)
        self.parent, self.lhs, self.op = parent, tuple(lhs), op
        parent._check_expr(value, "update")
        for e in self.lhs:
            parent._check_expr(e, "update index")

    @property
    def dtype(self):
        return self.parent.dtype


class Nest:
    """A group of statements that share the outer loops ``vars``."""

    def __init__(self, vars_):
        self.vars = list(vars_)
        self.items = []


class Table(dict):
    """A Function's declarations of one kind by name (``f.computations``,
    ``f.buffers``, ``f.params``): a missing name is a KeyError naming the
    ones there are."""

    def __init__(self, what, function):
        super().__init__()
        self.what, self.function = what, function

    def __missing__(self, key):
        have = ", ".join(map(str, self)) or "none"
        raise KeyError(f"{key!r} is not a {self.what} of {self.function.name!r}; its "
                       f"{self.what}s: {have}")


class Function:
    """A program: ``Function(name, params=["N", "M"])`` or with fixed sizes
    ``params={"N": 64}`` (constants, folded into the generated code)."""
    _Computation = Computation      # the classes of the statements it declares
    _Update = Update

    def __init__(self, name, params=()):
        self.name = check_name(name, "function")
        self.params = Table("param", self)            # name -> ParamRef
        self.fixed = {}             # name -> int
        if isinstance(params, dict):
            items = list(params.items())
        else:
            items = [(p, None) for p in params]
        for p, val in items:
            check_name(p, "param")
            if p in self.params:
                raise ValueError(f"param {p!r} declared twice")
            if val is not None:
                if isinstance(val, bool) or not isinstance(val, int):
                    raise TypeError(f"fixed value of param {p!r} must be an int")
                self.fixed[p] = val
            self.params[p] = ParamRef(p)
        self.vars = []
        self.buffers = Table("buffer", self)
        self.statements = []
        self.computations = Table("computation", self)
        self._root = Nest([])
        self._nest_stack = []
        self._names = set(self.params) | {name}
        self._commands = []             # the schedule: commands in the order given
        self._state_cache = None
        self._model_cache = None
        self._copy_calls = {}           # call id -> what a copy command added (undo)

    # declarations -----------------------------------------------------------
    def param(self, name) -> ParamRef:
        """The param ``name`` as an expression (an int64 known at call time),
        to use it in computations, conditions and bounds:
        ``x[i] / f.param("N")``, ``tp.select(i < f.param("N") - 1, ...)``
        (``f.params[name]`` is the same object).  A KeyError names the
        params when ``name`` is not one."""
        return self.params[name]

    def var(self, name, lo, hi) -> Var:
        """A loop variable over ``lo <= name < hi``."""
        check_name(name, "loop")
        if any(v.name == name for v in self.vars):
            raise ValueError(f"loop {name!r} declared twice in {self.name!r}")
        self._check_free(name, "loop")
        lo = self._bound(lo, f"lower bound of {name!r}")
        hi = self._bound(hi, f"upper bound of {name!r}")
        self._claim(name, "loop")
        v = Var(name, lo, hi, self, len(self.vars))
        self.vars.append(v)
        return v

    def input(self, name, shape, dtype=T.float32) -> Buffer:
        """An input array the caller passes (read-only)."""
        return self._buffer(name, shape, dtype, "input")

    def buffer(self, name, shape, dtype=T.float32, output=False) -> Buffer:
        """An explicit array that computations store into (``store_in``).  With
        ``output=True`` the kernel returns it; the caller may pass it to have it
        updated in place.  Otherwise it is a temporary of the kernel."""
        return self._buffer(name, shape, dtype, "output" if output else "temp")

    def computation(self, name, vars_, expr=None, dtype=None) -> Computation:
        """``name[vars] = expr``.  ``expr=None`` declares it; define it later with
        ``c[vars] = e`` or ``c.set_expression(e)`` (for recurrences)."""
        check_name(name, "computation")
        self._check_free(name, "computation")
        vars_ = list(vars_)
        for v in vars_:
            if not isinstance(v, Var) or v.function is not self:
                raise TypeError(f"computation {name!r}: loops must be vars of this "
                                f"function (from f.var), got {v!r}")
            for d in v.deps:
                pos = [k for k, w in enumerate(vars_) if w is d]
                here = next(k for k, w in enumerate(vars_) if w is v)
                if not pos or pos[0] >= here:
                    raise ValueError(f"computation {name!r}: the bounds of {v.name!r} use "
                                     f"{d.name!r}, which must be an outer loop of it")
        names = [v.name for v in vars_]
        if len(set(names)) != len(names):
            raise ValueError(f"computation {name!r}: a loop appears twice in {names}")
        c = self._Computation(self, name, vars_, expr, dtype)
        self._claim(name, "computation")
        self.computations[name] = c
        self._add_statement(c)
        return c

    @contextlib.contextmanager
    def nest(self, *vars_):
        """Statements declared inside share the loops ``vars_`` (outermost
        first) and run in the order written, inside each iteration::

            with f.nest(l, t):
                f.computation("a", [l, t, i], ...)
                f.computation("b", [l, t, i], ...)
        """
        for v in vars_:
            if not isinstance(v, Var) or v.function is not self:
                raise TypeError(f"nest: expected vars of this function, got {v!r}")
        n = Nest(vars_)
        self._current_nest().items.append(n)
        self._nest_stack.append(list(vars_))
        self._nest_objs = getattr(self, "_nest_objs", []) + [n]
        try:
            yield n
        finally:
            self._nest_stack.pop()
            self._nest_objs.pop()

    # internals --------------------------------------------------------------
    def _current_nest(self):
        objs = getattr(self, "_nest_objs", [])
        return objs[-1] if objs else self._root

    def _add_statement(self, s):
        prefix = [v for level in self._nest_stack for v in level]
        if len(s.vars) < len(prefix) or any(a is not b for a, b in zip(s.vars, prefix)):
            raise ValueError(f"{s.name!r} is declared inside f.nest("
                             f"{', '.join(v.name for v in prefix)}) so its loops must start "
                             f"with those; they are ({', '.join(s.loops)})")
        self.statements.append(s)
        self._current_nest().items.append(s)
        self._state_cache = self._model_cache = None

    def _check_free(self, name, what):
        if name == self.name:
            raise ValueError(f"{what} name {name!r} is the name of the Function itself; "
                             "choose another")
        if name in self._names:
            raise ValueError(f"{what} name {name!r} is already used in {self.name!r}")

    def _claim(self, name, what):
        self._check_free(name, what)
        self._names.add(name)

    def _buffer(self, name, shape, dtype, kind):
        check_name(name, "buffer")
        self._check_free(name, "buffer")
        if isinstance(shape, (int, str, Expr)):
            shape = (shape,)
        shape = tuple(parse_size(s, self.params, f"shape of {name!r}") for s in shape)
        for s in shape:
            check_expr_size(s, f"the shape of {name!r}")
            if any(isinstance(n, (Var, Access)) for n in walk(s)):
                raise ValueError(f"shape of {name!r} may use params only")
        b = Buffer(self, name, shape, T.from_any(dtype), kind)
        self._claim(name, "buffer")
        self.buffers[name] = b
        return b

    def _bound(self, b, what):
        e = parse_size(b, self.params, what) if not isinstance(b, Expr) else b
        check_expr_size(e, f"the {what}")
        for n in walk(e):
            if isinstance(n, Var) and n.function is not self:
                raise ValueError(f"{what} uses a loop of another function")
            if isinstance(n, Access):
                if not isinstance(n.target, Buffer) or n.target.kind != "input":
                    raise ValueError(f"{what}: a data-dependent bound may only read inputs, "
                                     f"not {n.target.name!r}")
                if not n.target.dtype.is_int:
                    raise TypeError(f"{what}: bound array {n.target.name!r} must be an "
                                    "integer array")
        return e

    # schedule -----------------------------------------------------------------
    def schedule_commands(self):
        """The scheduling commands given so far, in order."""
        return [c.text for c in self._commands]

    def undo(self):
        """Removes the last scheduling command given (all that one call
        recorded: ``vectorize`` is a split and a tag) and returns it as
        written (``'C.update.parallelize("k")'``), or None when there is
        none.  Commands are checked together at ``compile()``, so a refused
        one stays recorded until it is undone.  Undoing a copy command
        (``cache_at``, ``cache_shared``, ``cache_local``) also removes the
        copy it declared (computation, loops, buffer) and gives the consumer
        back its reads of the source (:mod:`tiramisu_py.commands.atomic`)."""
        gone = self._last_call()
        if not gone:
            return None
        last = gone[0].call_id
        copy_call = self.__dict__.setdefault("_copy_calls", {}).get(last)
        if copy_call is not None:
            copy_call.undo(self, gone[0].call or gone[0].text)
            del self._copy_calls[last]
        else:
            self._commands[:] = [c for c in self._commands if c.call_id != last]
        self._state_cache = None
        return gone[0].call or gone[0].text

    def _last_call(self) -> list:
        """The commands of the last user call (what :meth:`undo` removes):
        the latest call id, not the end of the log (a producer's loop
        command given after its compute_at is recorded before it)."""
        if not self._commands:
            return []
        last = max(c.call_id for c in self._commands)
        return [c for c in self._commands if c.call_id == last]

    def copy(self, name=None):
        """An independent copy (algorithm and schedule so far), e.g. to try
        a schedule: ``g = f.copy(); g.computations["C"].update.parallelize("k")``.
        ``name``: the copy's name (default: the same).  Its computations are
        ``g.computations[name]``, its loops ``g.loop(name)``."""
        import copy as _copy
        saved = self._state_cache, self._model_cache
        self._state_cache = self._model_cache = None
        try:
            g = _copy.deepcopy(self)
        finally:
            self._state_cache, self._model_cache = saved
        if name is not None:
            check_name(name, "function")
            g._names.discard(g.name)
            if name in g._names:
                raise ValueError(f"{self.name}.copy: name {name!r} is already used in "
                                 f"{self.name!r}; choose another")
            g.name = name
            g._names.add(name)
        return g

    def loop(self, name) -> Var:
        """The loop variable called ``name``."""
        for v in self.vars:
            if v.name == name:
                return v
        raise KeyError(f"{self.name!r} has no loop {name!r}; its loops are "
                       f"{', '.join(v.name for v in self.vars)}")

    def __repr__(self):
        return f"Function({self.name!r}, params={list(self.params)})"


def const_value(e):
    """The int value of a constant size expression, or None."""
    if isinstance(e, Const) and isinstance(e.value, int):
        return e.value
    return None

"""Expressions of the DSL: constants, params, loop variables, accesses,
arithmetic, comparisons, math functions, select and casts.

Python literals are *weakly typed*: they take the type of the operand they meet
(``x_f32 * 0.5`` stays float32).  ``/`` is true division (integers give
float64), ``//`` and ``%`` follow Python's floor semantics, comparisons give
bool.  An expression has no truth value: use ``tp.select`` for conditions.
"""
from __future__ import annotations

import ast
import builtins
import math
import operator
import re
from typing import Iterable

from ..base import provenance
from ..base import types as T


# Limits on one expression (a computation's value, an update, an index, a
# bound), checked when it is declared: deeper or bigger ones are refused with a
# ValueError naming the computation.  Nothing sensible needs more (split a long
# formula into several computations), and the compiler's passes over the loop
# IR and both backends recurse on the expression's depth.
MAX_EXPR_DEPTH = 200            # nesting levels (a leaf is level 1)
MAX_EXPR_NODES = 100_000        # nodes, a subexpression counted once per use


class Expr:
    __slots__ = ()
    __hash__ = object.__hash__          # identity: == builds an expression

    # arithmetic -------------------------------------------------------
    def __add__(self, o): return BinOp("add", self, wrap(o))
    def __radd__(self, o): return BinOp("add", wrap(o), self)
    def __sub__(self, o): return BinOp("sub", self, wrap(o))
    def __rsub__(self, o): return BinOp("sub", wrap(o), self)
    def __mul__(self, o): return BinOp("mul", self, wrap(o))
    def __rmul__(self, o): return BinOp("mul", wrap(o), self)
    def __truediv__(self, o): return BinOp("div", self, wrap(o))
    def __rtruediv__(self, o): return BinOp("div", wrap(o), self)
    def __floordiv__(self, o): return BinOp("floordiv", self, wrap(o))
    def __rfloordiv__(self, o): return BinOp("floordiv", wrap(o), self)
    def __mod__(self, o): return BinOp("floormod", self, wrap(o))
    def __rmod__(self, o): return BinOp("floormod", wrap(o), self)
    def __pow__(self, o): return power(self, o)
    def __rpow__(self, o): return _rpower(o, self)
    def __neg__(self): return UnOp("neg", self)
    def __pos__(self): return self

    # comparisons and logic --------------------------------------------
    def __lt__(self, o): return BinOp("lt", self, wrap(o))
    def __le__(self, o): return BinOp("le", self, wrap(o))
    def __gt__(self, o): return BinOp("gt", self, wrap(o))
    def __ge__(self, o): return BinOp("ge", self, wrap(o))
    def __eq__(self, o): return BinOp("eq", self, wrap(o))
    def __ne__(self, o): return BinOp("ne", self, wrap(o))
    def __and__(self, o): return BinOp("and", self, wrap(o))
    def __rand__(self, o): return BinOp("and", wrap(o), self)
    def __or__(self, o): return BinOp("or", self, wrap(o))
    def __ror__(self, o): return BinOp("or", wrap(o), self)
    def __invert__(self): return UnOp("not", self)

    def astype(self, dtype):
        """The expression converted to ``dtype`` (``numpy.ndarray.astype``)."""
        return cast(self, dtype)

    def __bool__(self):
        raise TypeError("a tiramisu_py expression has no truth value; "
                        "use tp.select(cond, a, b) or & / | to combine conditions")

    def __array_ufunc__(self, ufunc, method, *inputs, **kwargs):
        """NumPy meets an expression: ``np.float32(2) * x[i]`` is the
        expression ``2.0 * x[i]`` (a NumPy scalar counts as a Python
        number), as before NumPy asked the expression; a NumPy function
        (``np.exp(x[i])``) is a TypeError naming the tp function to use."""
        name = ufunc.__name__
        op = _UFUNC_OPERATORS.get(name)
        if op is not None and method == "__call__" and not kwargs:
            return op(*(x.item() if _is_numpy_scalar(x) else x if isinstance(x, Expr) else wrap(x)
                        for x in inputs))
        what = f"np.{name}" + ("" if method == "__call__" else f".{method}")
        tp_name = _UFUNC_TP.get(name)
        if method != "__call__":
            use = (f"{method} is NumPy's over arrays; write the loop as a computation "
                   "(a reduction as an update, C[i] += e)")
        elif tp_name:
            use = f"use tp.{tp_name}({', '.join(map(repr, inputs))})"
        else:
            use = f"tiramisu_py has no {name}; its functions are {_TP_FUNCTIONS}"
        raise TypeError(f"{what} cannot take a tiramisu_py expression ({self!r}): {use}")

    # typing -------------------------------------------------------------
    @property
    def dtype(self) -> T.DType:
        """The expression's type (weak literals resolved to their default)."""
        return weak_default(self)

    def children(self) -> tuple:
        return ()


def wrap(x) -> Expr:
    if isinstance(x, Expr):
        return x
    if isinstance(x, bool):
        return Const(x, T.bool_)
    if isinstance(x, (int, float)):
        return Const(x, None)
    if _is_numpy_scalar(x):
        return Const(x.item(), T.from_any(x.dtype))
    if isinstance(x, str):
        names = [n for n in _IDENTIFIER.findall(x) if n not in ("and", "or", "not")]
        params = ", ".join(f'f.param("{n}")' for n in names)
        say = f'f.param("{x}")' if x.isidentifier() else \
            f"the params as f.param(...) ({params})" if names else "a number, not a string"
        raise TypeError(f"cannot use str {x!r} in a tiramisu_py expression: write {say} "
                        "(a string is read as a size only as a shape or a loop bound)")
    raise TypeError(f"cannot use {type(x).__name__} {x!r} in a tiramisu_py expression")


def _is_numpy_scalar(x) -> bool:
    return hasattr(x, "dtype") and getattr(x, "shape", None) == () and hasattr(x, "item")


_IDENTIFIER = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")
# NumPy ufuncs that are a Python operator on an expression, and those that
# are a tp function (the TypeError names it)
_UFUNC_OPERATORS = {
    "add": operator.add, "subtract": operator.sub, "multiply": operator.mul,
    "divide": operator.truediv, "true_divide": operator.truediv,
    "floor_divide": operator.floordiv, "remainder": operator.mod, "power": operator.pow,
    "less": operator.lt, "less_equal": operator.le, "greater": operator.gt,
    "greater_equal": operator.ge, "equal": operator.eq, "not_equal": operator.ne,
    "bitwise_and": operator.and_, "bitwise_or": operator.or_, "logical_and": operator.and_,
    "logical_or": operator.or_, "negative": operator.neg, "positive": operator.pos,
    "invert": operator.invert, "logical_not": operator.invert}
_UFUNC_TP = {"exp": "exp", "log": "log", "tanh": "tanh", "sqrt": "sqrt", "floor": "floor",
             "ceil": "ceil", "absolute": "abs", "fabs": "abs", "maximum": "max", "fmax": "max",
             "minimum": "min", "fmin": "min"}
_TP_FUNCTIONS = ", ".join(f"tp.{n}" for n in ("exp", "log", "tanh", "sigmoid", "sqrt", "abs",
                                                "floor", "ceil", "min", "max", "select", "cast"))


class Const(Expr):
    __slots__ = ("value", "weak_dtype")

    def __init__(self, value, dtype):
        self.value = value
        self.weak_dtype = dtype        # None: a weak Python literal

    def __repr__(self):
        return repr(self.value)


class ParamRef(Expr):
    """A symbolic size of the function (int64)."""
    __slots__ = ("name",)

    def __init__(self, name: str):
        self.name = name

    def __repr__(self):
        return self.name


class BinOp(Expr):
    __slots__ = ("op", "a", "b")
    SYMBOL = {"add": "+", "sub": "-", "mul": "*", "div": "/", "floordiv": "//",
              "floormod": "%", "lt": "<", "le": "<=", "gt": ">", "ge": ">=",
              "eq": "==", "ne": "!=", "and": "&", "or": "|"}

    def __init__(self, op, a, b):
        self.op, self.a, self.b = op, a, b

    def children(self):
        return (self.a, self.b)

    def __repr__(self):
        if self.op in ("min", "max"):
            return f"{self.op}({self.a!r}, {self.b!r})"
        return f"({self.a!r} {self.SYMBOL[self.op]} {self.b!r})"


class UnOp(Expr):
    __slots__ = ("op", "a")

    def __init__(self, op, a):
        self.op, self.a = op, a

    def children(self):
        return (self.a,)

    def __repr__(self):
        return ("-" if self.op == "neg" else "~") + repr(self.a)


class Call(Expr):
    """A math function: exp, log, tanh, sigmoid, sqrt, abs, floor, ceil."""
    __slots__ = ("func", "args")

    def __init__(self, func, args):
        self.func, self.args = func, tuple(args)

    def children(self):
        return self.args

    def __repr__(self):
        return f"{self.func}({', '.join(map(repr, self.args))})"


class Select(Expr):
    __slots__ = ("cond", "a", "b")

    def __init__(self, cond, a, b):
        self.cond, self.a, self.b = cond, a, b

    def children(self):
        return (self.cond, self.a, self.b)

    def __repr__(self):
        return f"select({self.cond!r}, {self.a!r}, {self.b!r})"


class Cast(Expr):
    __slots__ = ("to", "a")

    def __init__(self, to, a):
        self.to, self.a = to, a

    def children(self):
        return (self.a,)

    def __repr__(self):
        return f"cast({self.to.name}, {self.a!r})"


class Access(Expr):
    """``target[indices]`` where target is a Buffer or a Computation.

    On the left of ``+=``, ``-=``, ``*=`` it records an update (a reduction)
    of a computation; ``.max(e)`` / ``.min(e)`` / ``.reduce(op, e)`` do the
    same for other operators."""
    __slots__ = ("target", "indices")

    def __init__(self, target, indices):
        self.target = target
        self.indices = tuple(wrap(i) for i in indices)

    def children(self):
        return self.indices

    def __repr__(self):
        return f"{self.target.name}[{', '.join(map(repr, self.indices))}]"

    def __iadd__(self, e): return UpdateRequest(self, "add", wrap(e))
    def __isub__(self, e): return UpdateRequest(self, "sub", wrap(e))
    def __imul__(self, e): return UpdateRequest(self, "mul", wrap(e))

    def reduce(self, op: str, e, loops=None):
        """Adds an update ``self = op(self, e)`` of the accessed computation
        over the loops ``loops`` (default: the index loops, then the other loops
        ``e`` uses, in declaration order).  ``op``: one of + - * max min."""
        names = {"+": "add", "-": "sub", "*": "mul", "max": "max", "min": "min",
                 "add": "add", "sub": "sub", "mul": "mul"}
        if op not in names:
            raise ValueError(f"reduce: op must be one of + - * max min, not {op!r}")
        return self.target._add_update(self, names[op], wrap(e), loops)

    def max(self, e, loops=None):
        return self.reduce("max", e, loops)

    def min(self, e, loops=None):
        return self.reduce("min", e, loops)


class Var(Expr):
    """A loop variable ``lo <= v < hi``.  Bounds are affine in params and
    earlier variables, or data-dependent (they read an input buffer)."""
    __slots__ = ("name", "lo", "hi", "function", "order", "deps", "where")
    _tp_kind = "loop"                   # how provenance tells the objects apart

    def __init__(self, name, lo, hi, function, order):
        self.name, self.lo, self.hi = name, lo, hi
        self.where = provenance.where()             # file:line of the declaration
        self.function, self.order = function, order
        # variables the bounds refer to (directly)
        self.deps = [n for b in (lo, hi) for n in walk(b) if isinstance(n, Var)]

    @property
    def data_dependent(self) -> bool:
        return bool(accesses(self.lo) or accesses(self.hi))

    def __repr__(self):
        return self.name


class UpdateRequest:
    """What ``C[i, j] += e`` hands to ``C.__setitem__``."""

    def __init__(self, access, op, expr):
        self.access, self.op, self.expr = access, op, expr


# ------------------------------------------------------------- typing rules
# Typing is computed bottom-up without recursion.  ``memo`` (a dict, kept by
# the caller for as long as the expressions are unchanged, e.g. one lowering)
# shares the results between calls: lowering asks for the type of every
# subexpression, which without it is quadratic in the expression's depth.
_CMP_OPS = ("lt", "le", "gt", "ge", "eq", "ne", "and", "or")


def _children(e):
    return e.children()


def _typing_children(e):
    if isinstance(e, UnOp):
        return () if e.op == "not" else (e.a,)
    if isinstance(e, BinOp):
        return () if e.op in _CMP_OPS else (e.a, e.b)
    if isinstance(e, Select):
        return (e.a, e.b)
    if isinstance(e, Call):
        return e.args
    return ()


def _bottom_up(e, memo, tag, children, node_value):
    """``node_value(n, memo)`` for ``e`` once it is known for the nodes
    ``children(n)`` below it, every result memoised in ``memo`` under
    ``(tag, id(n))`` (with ``n`` kept alive, so ids are not reused)."""
    key = (tag, id(e))
    if key in memo:
        return memo[key][1]
    stack = [e]
    while stack:
        n = stack[-1]
        k = (tag, id(n))
        if k in memo:
            stack.pop()
            continue
        todo = [c for c in children(n) if (tag, id(c)) not in memo]
        if todo:
            stack.extend(todo)
            continue
        stack.pop()
        memo[k] = (n, node_value(n, memo))
    return memo[key][1]


def strong_type(e: Expr, memo=None):
    """The type an expression has without context, or None if it is made of
    weak literals only."""
    return _bottom_up(e, {} if memo is None else memo, "t", _typing_children, _strong_type_node)


def _strong_type_node(e: Expr, memo):
    def strong_type(x):                 # the children's types are in memo
        return memo[("t", id(x))][1]
    if isinstance(e, Const):
        return e.weak_dtype
    if isinstance(e, ParamRef):
        return T.INDEX
    if isinstance(e, Access):
        return e.target.dtype
    if isinstance(e, Var):
        return T.INDEX
    if isinstance(e, Cast):
        return e.to
    if isinstance(e, UnOp):
        if e.op == "not":
            return T.bool_
        return None if strong_type(e.a) is None else T.arith(strong_type(e.a))
    if isinstance(e, BinOp):
        if e.op in ("lt", "le", "gt", "ge", "eq", "ne", "and", "or"):
            return T.bool_
        ta, tb = strong_type(e.a), strong_type(e.b)
        if ta is None and tb is None:
            return None
        if ta is None or tb is None:
            t = T.arith(weak_partner_type(ta or tb, e.b if ta is not None else e.a, memo))
        else:
            t = T.promote(ta, tb)
        if e.op == "div" and not t.is_float:
            return T.DEFAULT_FLOAT
        return t
    if isinstance(e, Select):
        ta, tb = strong_type(e.a), strong_type(e.b)
        if ta is None and tb is None:
            return None
        if ta is None or tb is None:
            return T.arith(weak_partner_type(ta or tb, e.b if ta is not None else e.a, memo))
        return T.promote(ta, tb)
    if isinstance(e, Call):
        ts = [strong_type(a) for a in e.args]
        if all(t is None for t in ts):
            return None
        t = T.arith(ts[0] if len(ts) == 1 else _promote_all([x for x in ts if x is not None]))
        if e.func in ("abs",) or t.is_float:
            return t
        return T.DEFAULT_FLOAT            # exp of an int is float64
    raise TypeError(f"not an expression: {e!r}")


def weak_partner_type(t: T.DType, weak: Expr, memo=None) -> T.DType:
    """The type of an operation between a typed operand (``t``) and an
    expression of weak literals: ``t``, unless the literals are floats and
    ``t`` is not (float64), or are integers ``t`` cannot hold (int64)."""
    memo = {} if memo is None else memo
    if _weak_is_float(weak, memo):
        return t if t.is_float else T.DEFAULT_FLOAT
    if t.is_int or t.is_bool:
        lo, hi = _int_range(t)
        ext = _bottom_up(weak, memo, "r", _children, _int_extremes_node)
        if ext is not None and not (lo <= ext[0] and ext[1] <= hi):
            return T.promote(t, T.int64) if t.bits < 64 or t.kind == "u" else t
    return t


def _int_extremes_node(e, memo):
    """(smallest, largest) int literal in ``e`` (every node below it), or None."""
    out = [memo[("r", id(c))][1] for c in e.children()]
    if isinstance(e, Const) and isinstance(e.value, int):
        out.append((e.value, e.value))
    out = [x for x in out if x is not None]
    if not out:
        return None
    return (builtins.min(x[0] for x in out), builtins.max(x[1] for x in out))


def _int_range(t):
    if t.is_bool:
        return (0, 1)
    if t.kind == "u":
        return (0, 2 ** t.bits - 1)
    return (-2 ** (t.bits - 1), 2 ** (t.bits - 1) - 1)


def _promote_all(ts):
    t = ts[0]
    for u in ts[1:]:
        t = T.promote(t, u)
    return t


def _weak_is_float(e: Expr, memo=None) -> bool:
    """Whether ``e`` (any node below it) holds a float literal or a ``/``."""
    return _bottom_up(e, {} if memo is None else memo, "f", _children, _weak_is_float_node)


def _weak_is_float_node(n, memo):
    if isinstance(n, Const) and isinstance(n.value, float):
        return True
    if isinstance(n, BinOp) and n.op == "div":
        return True
    return any(memo[("f", id(c))][1] for c in n.children())


def weak_default(e: Expr, memo=None) -> T.DType:
    """``e.dtype`` (``memo``: as for :func:`strong_type`)."""
    memo = {} if memo is None else memo
    t = strong_type(e, memo)
    if t is not None:
        return t
    if isinstance(e, BinOp) and e.op in ("lt", "le", "gt", "ge", "eq", "ne", "and", "or"):
        return T.bool_
    if isinstance(e, Const) and isinstance(e.value, bool):
        return T.bool_
    return T.DEFAULT_FLOAT if _weak_is_float(e, memo) else T.DEFAULT_INT


def walk(e: Expr) -> Iterable[Expr]:
    """Every node of ``e``, outer ones first (pre-order; a shared subexpression
    once per occurrence).  Iterative: linear in the size, whatever the depth."""
    stack = [e]
    while stack:
        n = stack.pop()
        yield n
        stack.extend(reversed(n.children()))


def expr_size(e: Expr) -> tuple:
    """(depth, number of nodes) of ``e`` as a tree (a shared subexpression
    counted once per use), computed on the DAG: linear in its distinct nodes."""
    return _bottom_up(e, {}, "s", _children, _size_node)


def _size_node(n, memo):
    kids = [memo[("s", id(c))][1] for c in n.children()]
    return (1 + builtins.max((k[0] for k in kids), default=0), 1 + sum(k[1] for k in kids))


def check_expr_size(e: Expr, what: str) -> None:
    """Refuses an expression deeper than :data:`MAX_EXPR_DEPTH` or bigger than
    :data:`MAX_EXPR_NODES` with a ValueError that starts with ``what``."""
    if not isinstance(e, Expr):
        return
    depth, nodes = expr_size(e)
    if depth > MAX_EXPR_DEPTH:
        raise ValueError(f"{what} is nested {depth} levels deep; the limit is "
                         f"{MAX_EXPR_DEPTH} (tiramisu_py.lang.expr.MAX_EXPR_DEPTH): split it into "
                         "several computations")
    if nodes > MAX_EXPR_NODES:
        raise ValueError(f"{what} has {nodes} nodes (a shared subexpression counts once per "
                         f"use); the limit is {MAX_EXPR_NODES} "
                         "(tiramisu_py.lang.expr.MAX_EXPR_NODES): split it into several "
                         "computations")


def accesses(e: Expr):
    """Every Access inside ``e`` (outer ones first)."""
    return [n for n in walk(e) if isinstance(n, Access)]


# ------------------------------------------------------------ public helpers
def _math(name):
    def f(x):
        return Call(name, [wrap(x)])
    f.__name__ = name
    f.__doc__ = f"Elementwise {name}."
    return f


exp, log, tanh, sigmoid, sqrt, floor, ceil = (_math(n) for n in
                                               ("exp", "log", "tanh", "sigmoid", "sqrt", "floor", "ceil"))


def abs(x):  # noqa: A001 - mirrors the math name on purpose
    """Absolute value; keeps the operand's type."""
    return Call("abs", [wrap(x)])


def min(a, b, *more):  # noqa: A001
    """Minimum of two or more expressions."""
    r = BinOp("min", wrap(a), wrap(b))
    for m in more:
        r = BinOp("min", r, wrap(m))
    return r


def max(a, b, *more):  # noqa: A001
    """Maximum of two or more expressions."""
    r = BinOp("max", wrap(a), wrap(b))
    for m in more:
        r = BinOp("max", r, wrap(m))
    return r


def select(cond, a, b):
    """``a`` where ``cond`` holds, else ``b`` (only the chosen side is evaluated)."""
    return Select(wrap(cond), wrap(a), wrap(b))


def _is_dtype(x) -> bool:
    if x is None or isinstance(x, (Expr, int, float, complex)):
        return False
    try:
        T.from_any(x)
    except TypeError:
        return False
    return True


def cast(x, dtype, saturate=False):
    """``x`` converted to ``dtype`` (C conversion rules), value first as in
    ``x.astype(dtype)`` (NumPy) and ``x.to(dtype)`` (torch).  The older
    order ``cast(dtype, x)`` is accepted too: a dtype and a value cannot be
    mistaken for each other.  To bfloat16/float16: round to nearest even,
    NaN and infinities kept.

    ``saturate=True`` clamps to the target's range first instead of wrapping
    (an integer target: its smallest and largest value, NaN to 0, floats
    truncated toward zero; a 16-bit float target: its largest finite value,
    NaN kept), as a quantising store wants."""
    if _is_dtype(x) and not _is_dtype(dtype):
        x, dtype = dtype, x
    if not _is_dtype(dtype):
        for d in (dtype, x):         # a dtype-like argument NumPy or tp does not support
            if d is not None and not isinstance(d, (Expr, int, float, complex)):
                T.from_any(d)
        raise TypeError(f"tp.cast(x, dtype): dtype must be a dtype (tp.float32, np.int64, "
                        f"'float64', ...), got {dtype!r}")
    to = T.from_any(dtype)
    if not isinstance(saturate, bool):
        raise TypeError(f"tp.cast: saturate must be True or False, got {saturate!r}")
    if saturate:
        return _saturating_cast(wrap(x), to)
    return Cast(to, wrap(x))


_HALF_MAX = {"bfloat16": 3.3895313892515355e38, "float16": 65504.0}


def _saturating_cast(x: Expr, to) -> Expr:
    """``x`` clamped into ``to``'s range (NaN: 0 for an integer target,
    kept for a float one), then converted."""
    src = strong_type(x) or weak_default(x)
    if to.is_half:
        if not (src.is_float and src.bits > 16):
            return Cast(to, x)
        hi = _HALF_MAX[to.name]
        return Cast(to, min(max(x, wrap(-hi)), wrap(hi)))
    if to.is_bool or to.is_float:
        raise ValueError(f"tp.cast(saturate=True): saturation is defined for integer and "
                         f"16-bit float targets, not {to!r}")
    lo, hi = _int_range(to)
    if src.is_float:
        # max(x, lo) is exact (lo is a power of two); x >= float(hi) is tested
        # apart because float(hi) may round up past hi (2**31 - 1 in float32)
        low = Cast(to, Select(x != x, wrap(0.0), max(x, wrap(float(lo)))))
        return Select(x >= wrap(float(hi)), Cast(to, wrap(hi)), low)
    slo, shi = _int_range(src)
    if slo >= lo and shi <= hi:
        return Cast(to, x)
    return Cast(to, min(max(x, wrap(builtins.max(lo, slo))), wrap(builtins.min(hi, shi))))


def power(x, n):
    """``x ** n`` with ``n`` a Python number, as NumPy computes it: an int
    ``n`` by multiplications (repeated squaring; ``n < 0`` is ``1 / x**-n``,
    refused for integer ``x`` as NumPy does), ``0.5`` and ``-0.5`` by sqrt,
    any other ``n`` as ``exp(n * log(x))`` (NaN for ``x < 0``, as NumPy)."""
    x = wrap(x)
    if isinstance(n, Expr) or isinstance(n, builtins.bool) or not isinstance(n, (int, float)):
        raise TypeError(f"x ** n: n must be a Python int or float, got {type(n).__name__}; "
                        "for an expression exponent write tp.exp(n * tp.log(x))")
    if isinstance(n, float) and n.is_integer() and builtins.abs(n) <= 64:
        n = int(n)
    t = strong_type(x)
    if isinstance(n, int):
        if n < 0 and t is not None and t.is_int:
            raise ValueError("x ** n: integers to negative integer powers are not allowed "
                             "(as in NumPy); cast x to a float type first")
        if n == 0:
            return Cast(t, Const(1, None)) if t is not None else Const(1, None)
        out, base, k = None, x, builtins.abs(n)
        while k:
            if k & 1:
                out = base if out is None else out * base
            k >>= 1
            if k:
                base = base * base
        return out if n > 0 else 1.0 / out
    if n == 0.5:
        return Call("sqrt", [x])
    if n == -0.5:
        return 1.0 / Call("sqrt", [x])
    return Call("exp", [Call("log", [x]) * n])


def _rpower(base, x):
    """``base ** x`` for a Python number ``base > 0``: ``exp(x * log(base))``."""
    if isinstance(base, builtins.bool) or not isinstance(base, (int, float)) or base <= 0:
        raise TypeError(f"b ** x: b must be a positive Python number, got {base!r}")
    return Call("exp", [wrap(x) * math.log(base)])


# ---------------------------------------------------------- shape parsing
def parse_size(text, params: dict, what: str) -> Expr:
    """Parses a size given as an int, a param name, an Expr, or a string such as
    ``"R + 1"`` or ``"2*N"`` over the function's params."""
    if isinstance(text, Expr):
        return text
    if isinstance(text, bool):
        raise TypeError(f"{what}: a size must be an int, a param name or an expression, not bool")
    if isinstance(text, int):
        return Const(text, None)
    if not isinstance(text, str):
        raise TypeError(f"{what}: a size must be an int, a param name or an expression, "
                        f"not {type(text).__name__}")
    try:
        tree = ast.parse(text, mode="eval").body
    except (SyntaxError, RecursionError, MemoryError):
        raise ValueError(f"{what}: cannot parse size {text!r}") from None

    def conv(n):
        if isinstance(n, ast.Constant) and isinstance(n.value, int) and not isinstance(n.value, bool):
            return Const(n.value, None)
        if isinstance(n, ast.Name):
            if n.id not in params:
                raise ValueError(f"{what}: {n.id!r} in size {text!r} is not a param of the "
                                 f"function (params: {', '.join(params) or 'none'})")
            return params[n.id]
        if isinstance(n, ast.BinOp):
            ops = {ast.Add: "add", ast.Sub: "sub", ast.Mult: "mul", ast.FloorDiv: "floordiv",
                   ast.Mod: "floormod"}
            if type(n.op) in ops:
                return BinOp(ops[type(n.op)], conv(n.left), conv(n.right))
        if isinstance(n, ast.UnaryOp) and isinstance(n.op, ast.USub):
            return UnOp("neg", conv(n.operand))
        raise ValueError(f"{what}: unsupported syntax in size {text!r} "
                         "(use ints, params, + - * // % and parentheses)")
    try:
        return conv(tree)
    except RecursionError:
        raise ValueError(f"{what}: size {text[:60]!r}... is nested too deeply (the limit "
                         f"is {MAX_EXPR_DEPTH} levels)") from None

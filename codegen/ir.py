"""The target-neutral loop IR that every backend consumes.

A kernel is a :class:`LoweredFunction`: scalar parameters, array arguments and a
statement tree.  Expressions carry their dtype (a string from :data:`DTYPES`).
Arrays are multi-dimensional; indices are per dimension and backends linearise
them row-major with the array's shape.

Integer semantics (explicit so every backend agrees):

* ``div`` / ``mod`` on integers truncate toward zero (C semantics);
  on floats ``div`` is true division and ``mod`` is ``fmod``.
* ``floordiv`` / ``floormod`` round toward minus infinity (Python semantics),
  for integers and floats alike.
* Integer division never traps (NumPy's results): ``x / 0``, ``x % 0`` and
  their floor forms give 0; ``MIN / -1`` wraps to ``MIN`` and ``MIN % -1`` is 0.
* Integer ``add``/``sub``/``mul``/``neg`` wrap at the dtype's width (C backend:
  ``-fwrapv``; LLVM: no ``nsw``/``nuw`` on values).
* Float ``min`` / ``max`` propagate NaN like ``np.minimum`` / ``np.maximum``
  (and reductions with them like ``np.min`` / ``np.max``): ``max(a, b)`` is
  ``(a > b || a != a) ? a : b``, NaN if either operand is NaN.

This module imports nothing from ``tiramisu_py``.
"""
from __future__ import annotations

import math
import struct
from dataclasses import dataclass, field
from typing import Optional, Sequence

DTYPES = ("bool", "int8", "uint8", "int32", "int64", "bfloat16", "float16", "float32", "float64")
INT_DTYPES = ("int8", "uint8", "int32", "int64")
FLOAT_DTYPES = ("float32", "float64")
# 16-bit floats are storage only: they appear as a Load's or an array's dtype,
# as a Store's value and in a Cast (to or from them), never in arithmetic,
# comparisons, calls or selects (the DSL computes on them in float32).  A Cast
# from one goes through float32, a Cast to one rounds a float32 to nearest
# even (bfloat16: NaN stays a quiet NaN with its sign; float16: IEEE).
HALF_DTYPES = ("bfloat16", "float16")
INDEX = "int64"   # dtype of loop iterators, params and indices
# bytes of one element of each dtype (bool: one byte in memory)
ELSIZE = {"bool": 1, "int8": 1, "uint8": 1, "int32": 4, "int64": 8, "bfloat16": 2, "float16": 2,
          "float32": 4, "float64": 8}

ARITH_OPS = ("add", "sub", "mul", "div", "mod", "floordiv", "floormod", "min", "max")
CMP_OPS = ("lt", "le", "gt", "ge", "eq", "ne")
LOGIC_OPS = ("and", "or")
UNARY_OPS = ("neg", "not")
MATH_FUNCS = ("exp", "log", "tanh", "sigmoid", "sqrt", "abs", "floor", "ceil")

LOOP_KINDS = ("serial", "parallel", "vector", "unrolled", "gpu_block", "gpu_thread")
GPU_KINDS = ("gpu_block", "gpu_thread")   # attrs["axis"]: "x" | "y" | "z"
GPU_AXES = ("x", "y", "z")
MEMORY_SCOPES = ("global", "shared", "thread")   # where an Allocate lives (shared: one per
#   GPU block; thread: one per GPU thread, indexed without the thread coordinates)


def is_float(dtype: str) -> bool:
    return dtype in FLOAT_DTYPES


def is_half(dtype: str) -> bool:
    """A 16-bit float storage dtype (see :data:`HALF_DTYPES`)."""
    return dtype in HALF_DTYPES


def is_int(dtype: str) -> bool:
    return dtype in INT_DTYPES


class Expr:
    dtype: str


@dataclass(frozen=True, eq=False)
class Const(Expr):
    value: object
    dtype: str


@dataclass(frozen=True, eq=False)
class Var(Expr):
    """A scalar name: loop iterator, scalar parameter or Let-bound value."""
    name: str
    dtype: str = INDEX


@dataclass(frozen=True, eq=False)
class Load(Expr):
    array: str
    index: tuple
    dtype: str


@dataclass(frozen=True, eq=False)
class Binary(Expr):
    op: str
    a: Expr
    b: Expr
    dtype: str


@dataclass(frozen=True, eq=False)
class Unary(Expr):
    op: str
    a: Expr
    dtype: str


@dataclass(frozen=True, eq=False)
class Call(Expr):
    func: str
    args: tuple
    dtype: str


@dataclass(frozen=True, eq=False)
class Select(Expr):
    cond: Expr
    a: Expr
    b: Expr
    dtype: str


@dataclass(frozen=True, eq=False)
class Cast(Expr):
    a: Expr
    dtype: str


class Stmt:
    pass


@dataclass(eq=False)
class For(Stmt):
    """``for (var = lo; var < hi; var += step) body``; ``hi`` is exclusive."""
    var: str
    lo: Expr
    hi: Expr
    body: Stmt
    kind: str = "serial"
    step: int = 1
    # backend hints, e.g. {"reduction": [("C", "add")]} or {"vector_width": 16}
    attrs: dict = field(default_factory=dict)


@dataclass(eq=False)
class If(Stmt):
    cond: Expr
    then: Stmt
    else_: Optional[Stmt] = None


@dataclass(eq=False)
class Block(Stmt):
    stmts: list


@dataclass(eq=False)
class Let(Stmt):
    """Binds a scalar ``name = value`` visible in ``body``."""
    name: str
    value: Expr
    body: Stmt


@dataclass(eq=False)
class Allocate(Stmt):
    """A temporary array visible in ``body``; freed on every path out of it."""
    array: str
    dtype: str
    shape: tuple
    body: Stmt
    zero_init: bool = False
    scope: str = "global"     # "shared": one copy per GPU block (``__shared__``);
    # "thread": one copy per GPU thread (registers), made by codegen.accumulate
    # on GPU-mapped code only: ir.for_cpu refuses it; "local": one copy per GPU
    # thread whose values never outlive one thread's use (cache_local), a
    # plain temporary on the CPU
    layout: Optional[dict] = None   # GPU storage mapping of a shared tile: {"swizzle": G,
    # "row": W}: 16-byte chunks of G elements XOR-permuted by the row of W elements (by the
    # 128-byte line when rows are shorter); the CPU ignores it


@dataclass(eq=False)
class Barrier(Stmt):
    """Every thread of a GPU block waits here until all have arrived, and
    their memory writes before it are visible after it (``__syncthreads``).
    Placed only under block-uniform control flow.  A no-op on the CPU.
    ``wait``: before it, each thread waits until at most ``wait`` of its
    groups of asynchronous copies (:class:`AsyncCopy`) are still in flight."""
    wait: Optional[int] = None


@dataclass(eq=False)
class AsyncWait(Stmt):
    """The calling thread waits until at most ``pending`` of its groups of
    asynchronous copies are in flight (no barrier).  A no-op on the CPU."""
    pending: int = 0


@dataclass(eq=False)
class AsyncCommit(Stmt):
    """Closes the calling thread's current group of asynchronous copies (the
    unit a :class:`Barrier`'s ``wait`` counts).  A no-op on the CPU."""


@dataclass(eq=False)
class Store(Stmt):
    array: str
    index: tuple
    value: Expr


@dataclass(eq=False)
class AsyncCopy(Store):
    """A Store whose value is a Load of the same dtype, issued asynchronously
    on the GPU (``cp.async``: global -> shared): its write is visible to the
    issuing thread once a later :class:`Barrier` has waited for its group,
    and to the block after that barrier.  A plain Store on the CPU."""


@dataclass(eq=False)
class StreamStore(Store):
    """A Store written past the caches (non-temporal, streaming: x86
    ``movnt*``) where a CPU backend can: for a result too large to stay in
    cache and not read again soon, it saves reading each line in before
    writing it.  The writing thread's streamed stores are fenced (``sfence``)
    before another thread or the caller may read them: at the end of each
    iteration of the parallel loop around them and at the kernel's end.
    A plain Store elsewhere (GPU, another ISA, a loop shape a backend does
    not stream)."""


def store_like(s: Store, array: str, index: tuple, value: Expr) -> Store:
    """A Store of the same kind as ``s`` (an :class:`AsyncCopy` or
    :class:`StreamStore` stays one)."""
    return type(s)(array, index, value)


@dataclass(frozen=True)
class ArrayArg:
    name: str
    dtype: str
    shape: tuple          # tuple of Expr over scalar params
    writable: bool


@dataclass(frozen=True)
class ScalarArg:
    name: str
    dtype: str = INDEX


@dataclass(eq=False)
class LoweredFunction:
    """A whole kernel.  The calling convention, in order: every scalar argument,
    then every array argument as a pointer to its first element.  The function
    returns an int status: 0 on success, 1 if a temporary could not be
    allocated."""
    name: str
    scalars: list
    arrays: list
    body: Stmt
    constants: dict = field(default_factory=dict)   # name -> int, fixed params
    # how often a call makes its team meet (codegen.regions.synchronisations;
    # set by codegen.pipeline.optimize_loops, kept by a warm start's shell)
    syncs: int = 0


# --------------------------------------------------------------------- helpers
def const(value, dtype: str = INDEX) -> Const:
    return Const(value, dtype)


def binary(op: str, a: Expr, b: Expr) -> Expr:
    """Builds a Binary with the dtype its operands imply (they must agree for
    arithmetic; comparisons and logic give bool)."""
    if op in CMP_OPS or op in LOGIC_OPS:
        return Binary(op, a, b, "bool")
    if a.dtype != b.dtype:
        raise TypeError(f"loop IR: operands of {op} differ in dtype: {a.dtype} vs {b.dtype}")
    return Binary(op, a, b, a.dtype)


def check_loop(s: "For", backend: str) -> int:
    """Validates a loop for ``backend`` ("C backend", "LLVM backend"); returns its step."""
    if s.kind in GPU_KINDS:
        raise NotImplementedError(f"{backend}: gpu loops; run the function through "
                                  "ir.for_cpu first (compile() does for CPU targets)")
    if s.kind not in LOOP_KINDS:
        raise ValueError(f"{backend}: unknown loop kind {s.kind!r}")
    step = int(s.step)
    if step <= 0:
        raise ValueError(f"{backend}: loop {s.var} has non-positive step {step}")
    return step


def check_call(e: "Call", backend: str) -> None:
    """Validates a math-function call for ``backend``."""
    if e.func not in MATH_FUNCS:
        raise ValueError(f"{backend}: unknown function {e.func!r} (known: {', '.join(MATH_FUNCS)})")
    if len(e.args) != 1:
        raise ValueError(f"{backend}: {e.func} takes 1 argument, got {len(e.args)}")


def fresh_name(base: str, taken: set) -> str:
    """``base``, or ``base1``, ``base2``...: the first not in ``taken`` (added to it)."""
    name, k = base, 1
    while name in taken:
        name, k = f"{base}{k}", k + 1
    taken.add(name)
    return name


def expr_key(e):
    """A hashable structural key of an expression (the IR classes compare by identity)."""
    if isinstance(e, Const):
        return ("C", repr(e.value), e.dtype)
    if isinstance(e, Var):
        return ("V", e.name)
    if isinstance(e, Load):
        return ("L", e.array, tuple(expr_key(i) for i in e.index))
    if isinstance(e, Binary):
        return ("B", e.op, e.dtype, expr_key(e.a), expr_key(e.b))
    if isinstance(e, Unary):
        return ("U", e.op, e.dtype, expr_key(e.a))
    if isinstance(e, Call):
        return ("F", e.func, e.dtype, tuple(expr_key(a) for a in e.args))
    if isinstance(e, Select):
        return ("S", e.dtype, expr_key(e.cond), expr_key(e.a), expr_key(e.b))
    if isinstance(e, Cast):
        return ("T", e.dtype, expr_key(e.a))
    raise TypeError(f"loop IR: not an expression: {e!r}")


# the smallest and largest value of each integer dtype
INT_LIMITS = {"int8": (-2**7, 2**7 - 1), "uint8": (0, 2**8 - 1), "int32": (-2**31, 2**31 - 1),
              "int64": (-2**63, 2**63 - 1)}
# half-open [lo, hi) ranges of the integer dtypes, for wrapping literals
INT_RANGE = {t: (lo, hi + 1) for t, (lo, hi) in INT_LIMITS.items()}


def to_f32(v: float) -> float:
    """``v`` rounded to float32 (to infinity beyond its range), as a Python float."""
    try:
        return struct.unpack("f", struct.pack("f", v))[0]
    except OverflowError:                     # beyond float32 range: rounds to infinity
        return math.copysign(math.inf, v)


def const_eval(e, consts: dict):
    """Folds an integer shape expression over ``consts``; None if not constant."""
    if isinstance(e, Const) and is_int(e.dtype):
        return int(e.value)
    if isinstance(e, Var):
        return consts.get(e.name)
    if isinstance(e, Unary) and e.op == "neg":
        a = const_eval(e.a, consts)
        return None if a is None else -a
    if isinstance(e, Binary) and e.op in ("add", "sub", "mul", "floordiv", "min", "max"):
        a, b = const_eval(e.a, consts), const_eval(e.b, consts)
        if a is None or b is None or (e.op == "floordiv" and b == 0):
            return None
        if e.op == "floordiv":
            return a // b
        return {"add": a + b, "sub": a - b, "mul": a * b, "min": min(a, b), "max": max(a, b)}[e.op]
    return None


# reduction op -> the op that combines two partial results
COMBINE = {"add": "add", "sub": "add", "mul": "mul", "max": "max", "min": "min"}


def identity(op: str, dtype: str):
    """The neutral element of the reduction ``op`` ("add", "sub", "mul", "max",
    "min") for ``dtype`` (-0.0 for float add: x + -0.0 == x for every x)."""
    if op in ("add", "sub"):
        return -0.0 if is_float(dtype) else 0
    if op == "mul":
        return 1.0 if is_float(dtype) else 1
    if is_float(dtype):
        return -float("inf") if op == "max" else float("inf")
    lo, hi = INT_LIMITS[dtype]
    return lo if op == "max" else hi


def free_vars(e: Expr) -> set:
    """The names of the scalars (Vars) ``e`` reads."""
    return {x.name for x in walk_exprs(e) if isinstance(x, Var)}


def stmt_exprs(s: Stmt) -> list:
    """The expressions ``s`` itself evaluates (not those of its children)."""
    if isinstance(s, Store):
        return [s.value, *s.index]
    if isinstance(s, For):
        return [s.lo, s.hi]
    if isinstance(s, Let):
        return [s.value]
    if isinstance(s, If):
        return [s.cond]
    if isinstance(s, Allocate):
        return list(s.shape)
    return []


def walk_exprs(e: Expr):
    """Yields ``e`` and every sub-expression (pre-order).  Iterative: linear in
    the size whatever the depth (nested generators were quadratic in depth)."""
    stack = [e]
    while stack:
        x = stack.pop()
        yield x
        stack.extend(reversed(expr_children(x)))


def expr_children(e: Expr) -> Sequence[Expr]:
    if isinstance(e, Load):
        return e.index
    if isinstance(e, Binary):
        return (e.a, e.b)
    if isinstance(e, (Unary, Cast)):
        return (e.a,)
    if isinstance(e, Call):
        return e.args
    if isinstance(e, Select):
        return (e.cond, e.a, e.b)
    return ()


def with_children(e: Expr, kids) -> Expr:
    """``e`` with its sub-expressions (in :func:`expr_children`'s order)
    replaced by ``kids``."""
    kids = tuple(kids)
    if isinstance(e, Load):
        return Load(e.array, kids, e.dtype)
    if isinstance(e, Binary):
        return Binary(e.op, kids[0], kids[1], e.dtype)
    if isinstance(e, Unary):
        return Unary(e.op, kids[0], e.dtype)
    if isinstance(e, Cast):
        return Cast(kids[0], e.dtype)
    if isinstance(e, Call):
        return Call(e.func, kids, e.dtype)
    if isinstance(e, Select):
        return Select(kids[0], kids[1], kids[2], e.dtype)
    return e


def substitute(e: Expr, env: dict) -> Expr:
    """``e`` with each variable that ``env`` names replaced by its expression."""
    if not env:
        return e
    if isinstance(e, Var):
        return env.get(e.name, e)
    kids = expr_children(e)
    return with_children(e, (substitute(c, env) for c in kids)) if kids else e


def stmt_children(s: Stmt) -> Sequence[Stmt]:
    if isinstance(s, (For, Let, Allocate)):
        return (s.body,)
    if isinstance(s, If):
        return (s.then,) if s.else_ is None else (s.then, s.else_)
    if isinstance(s, Block):
        return s.stmts
    return ()


def rebuild(s: Stmt, f, hi=None) -> Stmt:
    """``s`` with ``f`` applied to each child statement (and ``hi`` as the new
    bound when ``s`` is a loop)."""
    if isinstance(s, For):
        return For(s.var, s.lo, s.hi if hi is None else hi, f(s.body), kind=s.kind,
                  step=s.step, attrs=s.attrs)
    if isinstance(s, Let):
        return Let(s.name, s.value, f(s.body))
    if isinstance(s, If):
        return If(s.cond, f(s.then), None if s.else_ is None else f(s.else_))
    if isinstance(s, Block):
        return Block([f(x) for x in s.stmts])
    if isinstance(s, Allocate):
        return Allocate(s.array, s.dtype, s.shape, f(s.body), s.zero_init, s.scope, s.layout)
    return s


def for_cpu(s: Stmt) -> Stmt:
    """``s`` run on a CPU: GPU block and thread loops become serial loops (in
    the order of their iterations) and barriers vanish (one CPU thread runs
    the threads of a block one after another, each to completion: a schedule
    whose legality check placed the barriers gives the same results)."""
    if isinstance(s, (Barrier, AsyncCommit, AsyncWait)):
        return Block([])
    if isinstance(s, AsyncCopy):
        return Store(s.array, s.index, s.value)
    s = rebuild(s, for_cpu)
    if isinstance(s, For) and s.kind in GPU_KINDS:
        attrs = {k: v for k, v in s.attrs.items() if k not in ("axis", "extent")}
        return For(s.var, s.lo, s.hi, s.body, kind="serial", step=s.step, attrs=attrs)
    if isinstance(s, Allocate) and s.scope == "thread":
        raise ValueError(f"ir.for_cpu: {s.array!r} has one copy per GPU thread; serialising "
                         "the threads would share it (run codegen.accumulate after for_cpu)")
    if isinstance(s, Allocate) and s.scope != "global":
        return Allocate(s.array, s.dtype, s.shape, s.body, s.zero_init)
    return s


def walk_stmts(s: Stmt):
    yield s
    for child in stmt_children(s):
        yield from walk_stmts(child)

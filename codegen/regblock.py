"""Register blocking of widened vector loops: unroll-and-jam of the serial loop
around them (both backends, before emission).

A widened vector loop (:mod:`codegen.vectorize`) whose inner loop keeps
accumulators in registers (``C[i][j..j+W]`` over ``k``) does one vector FMA
per accumulator per inner iteration: it waits on the FMA latency and reloads
its other operand (``B[k][j..j+W]``) for every row ``i``.  When the serial
loop ``i`` around it (through loops, ifs and lets) runs iterations that touch
disjoint elements of every array they write -- some index dimension is
``a * i + c`` with the same ``a != 0`` and ``c`` in every access, ``c`` free of
names bound inside -- and no loop bound or if condition inside depends on
``i``, the iterations can run interleaved: ``i`` advances by ``R`` and each
statement is repeated for ``i, i+1, ..., i+R-1`` where it stands (lets that
depend on ``i`` get one copy per row, ``name__r``), followed by a loop over
the remaining ``< R`` rows.  The inner loop then holds ``R`` rows of
accumulators and loads ``B`` once for all of them (BLIS's micro-kernel,
derived by the compiler).  ``R`` (:func:`choose_rows`) gives about eight
accumulator registers, at most eight rows, four registers spare, and divides
the loop's trip count when that has a constant bound (a tile).
"""
from __future__ import annotations

from . import ir, vectorize


def register_block(fn: ir.LoweredFunction) -> ir.LoweredFunction:
    """``fn`` with :func:`jam` applied where it is legal and useful."""
    def jammed(s):
        r = _factor(s) if int(s.step) == 1 else 1
        return jam(s, r) if r > 1 else None
    return rewrite_serial_loops(fn, jammed)


def rewrite_serial_loops(fn: ir.LoweredFunction, rewrite) -> ir.LoweredFunction:
    """``fn`` with ``rewrite(loop)`` (a statement, or None to keep the loop and
    look inside) applied top-down to its serial and unrolled loops (vector
    loops are not entered); ``fn`` itself when nothing changed."""
    changed = []

    def visit(s):
        if isinstance(s, ir.For) and s.kind in ("serial", "unrolled"):
            r = rewrite(s)
            if r is not None:
                changed.append(s.var)
                return r
        if isinstance(s, ir.For) and s.kind == "vector":
            return s
        return ir.rebuild(s, visit)

    body = visit(fn.body)
    if not changed:
        return fn
    return ir.LoweredFunction(fn.name, fn.scalars, fn.arrays, body, fn.constants)


def _factor(loop: ir.For) -> int:
    vecs = [s for s in ir.walk_stmts(loop.body) if isinstance(s, ir.For) and s.kind == "vector"
            and not s.attrs.get("reduction") and vectorize.nested(s.body) and int(s.step) == 1]
    if not vecs or any(isinstance(s, ir.For) and s.kind == "parallel" or isinstance(s, ir.Allocate)
                       for s in ir.walk_stmts(loop.body)):
        return 1
    regs_per_row = 0
    for v in vecs:
        p, _ = vectorize.plan(v)
        if p is None or not p.promote:
            return 1
        bits = max(_bits(v.body), 32)
        w = int(v.attrs.get("vector_width") or vectorize.host_lanes(bits))
        lanes = vectorize.host_lanes(bits)
        per = -(-w // lanes)
        regs_per_row = max(regs_per_row, max(len(x) for x in p.promote.values()) * per)
    regs = 32 if vectorize.host_lanes(32) >= 16 else 16
    if not _independent(loop):
        return 1
    return choose_rows(regs_per_row, regs, _max_trip(loop))


#: accumulator registers a register block aims for: two FMA pipes x four cycles
#: of FMA latency (fewer leave the FMA units waiting on the dependence chains)
ACCUMULATORS = 8
#: most rows in one block: the ``R`` rows of the broadcast operand are read at
#: one row stride, often a power of two, so they can all fall into one L1 set
#: (eight ways); more rows then evict each other on every ``k``
MAX_ROWS = 8


def choose_rows(regs_per_row: int, regs: int, trip=None) -> int:
    """The register block's row count ``R`` for accumulators of
    ``regs_per_row`` registers each on a host with ``regs`` SIMD registers and
    a loop of at most ``trip`` iterations (None: unknown): among 8, 6, 4, 3, 2
    those whose accumulators fit in ``max(ACCUMULATORS, regs_per_row)`` and
    leave four registers spare; the largest that divides ``trip`` (no rows
    left to the one-row remainder loop), else the largest.  AVX-512 (32
    registers) with one register per row: 8 rows; AVX2 (16) with two: 4."""
    fits = [r for r in (8, 6, 4, 3, 2) if r <= MAX_ROWS and r * regs_per_row <= regs - 4
            and r * regs_per_row <= max(ACCUMULATORS, regs_per_row)]
    if trip is not None:
        fits = [r for r in fits if r <= trip]
        exact = [r for r in fits if trip % r == 0]
        if exact:
            return exact[0]
    return fits[0] if fits else 1


def _max_trip(loop: ir.For):
    """An upper bound on the iterations of ``loop`` when its lower bound is a
    constant and its upper bound has a constant bound (``min(31, N - ...) + 1``),
    else None."""
    if not isinstance(loop.lo, ir.Const):
        return None
    hi = _upper(loop.hi)
    return None if hi is None else max(0, hi - int(loop.lo.value))


def _upper(e):
    if isinstance(e, ir.Const):
        return int(e.value)
    if isinstance(e, ir.Binary):
        a, b = _upper(e.a), _upper(e.b)
        if e.op == "min":
            return a if b is None else b if a is None else min(a, b)
        if e.op == "add" and a is not None and b is not None:
            return a + b
        if e.op == "sub" and a is not None and isinstance(e.b, ir.Const):
            return a - int(e.b.value)
    return None


def _bits(body) -> int:
    size = {"float64": 64, "int64": 64, "float32": 32, "int32": 32}
    return max([size.get(x.dtype, 8) for st in ir.walk_stmts(body) for e in ir.stmt_exprs(st)
                for x in ir.walk_exprs(e) if isinstance(x, ir.Load)] or [32])


def _independent(loop: ir.For) -> bool:
    """Iterations of ``loop`` touch disjoint elements of every array its body
    writes, and no bound or condition inside depends on its iterator."""
    var, dep, inner = loop.var, {loop.var}, set()
    accesses, written = {}, set()
    for s in ir.walk_stmts(loop.body):
        if isinstance(s, ir.Let):
            inner.add(s.name)
            if ir.free_vars(s.value) & dep:
                dep.add(s.name)
        elif isinstance(s, ir.For):
            inner.add(s.var)
            if (ir.free_vars(s.lo) | ir.free_vars(s.hi)) & dep:
                return False
        elif isinstance(s, ir.If):
            if ir.free_vars(s.cond) & dep:
                return False
        elif isinstance(s, ir.Store):
            written.add(s.array)
            accesses.setdefault(s.array, []).append(s.index)
        for e in ir.stmt_exprs(s):
            for x in ir.walk_exprs(e):
                if isinstance(x, ir.Load):
                    accesses.setdefault(x.array, []).append(x.index)
    for name in written:
        forms = [vectorize._lane_dims(ix, var, inner) for ix in accesses[name]]
        common = set(forms[0])
        for fm in forms[1:]:
            common &= {d for d in fm if fm[d] == forms[0].get(d)}
        if not common:
            return False
    return True


def _subst(e, m: dict):
    if not m:
        return e
    if isinstance(e, ir.Var):
        return m.get(e.name, e)
    if isinstance(e, ir.Load):
        return ir.Load(e.array, tuple(_subst(i, m) for i in e.index), e.dtype)
    if isinstance(e, ir.Binary):
        return ir.Binary(e.op, _subst(e.a, m), _subst(e.b, m), e.dtype)
    if isinstance(e, ir.Unary):
        return ir.Unary(e.op, _subst(e.a, m), e.dtype)
    if isinstance(e, ir.Call):
        return ir.Call(e.func, tuple(_subst(a, m) for a in e.args), e.dtype)
    if isinstance(e, ir.Select):
        return ir.Select(_subst(e.cond, m), _subst(e.a, m), _subst(e.b, m), e.dtype)
    if isinstance(e, ir.Cast):
        return ir.Cast(_subst(e.a, m), e.dtype)
    return e


def jam(loop: ir.For, r: int) -> ir.Stmt:
    """``loop`` advanced by ``r`` with its body's statements repeated for each of
    the ``r`` rows where they stand, then the remaining rows one by one."""
    v = ir.Var(loop.var)
    maps = [{loop.var: v if k == 0 else ir.Binary("add", v, ir.Const(k, "int64"), "int64")}
            for k in range(r)]

    def body(s, maps, dep):
        if isinstance(s, ir.Block):
            return ir.Block([body(x, maps, dep) for x in s.stmts])
        if isinstance(s, ir.For):
            return ir.For(s.var, s.lo, s.hi, body(s.body, maps, dep), kind=s.kind, step=s.step,
                          attrs=s.attrs)
        if isinstance(s, ir.If):
            return ir.If(s.cond, body(s.then, maps, dep),
                         None if s.else_ is None else body(s.else_, maps, dep))
        if isinstance(s, ir.Let):
            if not ir.free_vars(s.value) & dep:
                return ir.Let(s.name, s.value, body(s.body, maps, dep))
            names = [f"{s.name}__{k}" for k in range(r)]
            new = [dict(m, **{s.name: ir.Var(n, s.value.dtype)}) for m, n in zip(maps, names)]
            inner = body(s.body, new, dep | {s.name})
            for k in reversed(range(r)):
                inner = ir.Let(names[k], _subst(s.value, maps[k]), inner)
            return inner
        if isinstance(s, ir.Store):
            return ir.Block([ir.Store(s.array, tuple(_subst(i, m) for i in s.index), _subst(s.value, m))
                             for m in maps])
        raise TypeError(f"register blocking: unexpected {type(s).__name__}")

    main_hi = ir.Binary("sub", loop.hi, ir.Const(r - 1, "int64"), "int64")
    span = ir.Binary("max", ir.Binary("sub", loop.hi, loop.lo, "int64"), ir.Const(0, "int64"), "int64")
    rest = ir.Binary("add", loop.lo, ir.Binary("mul", ir.Binary("floordiv", span, ir.Const(r, "int64"),
                                                                  "int64"), ir.Const(r, "int64"), "int64"),
                     "int64")
    attrs = dict(loop.attrs, register_block=r)
    main = ir.For(loop.var, loop.lo, main_hi, body(loop.body, maps, {loop.var}), kind="serial", step=r,
                  attrs=attrs)
    tail = ir.For(loop.var, rest, loop.hi, loop.body, kind=loop.kind, step=1, attrs=loop.attrs)
    return ir.Block([main, tail])

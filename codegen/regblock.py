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

Then the strip loop of the vector loop (``j1 = 16 * j10 + j11``, ``j11`` the
vector loop) is jammed the same way where the registers allow
(:func:`_column_block`): each row then holds two (or more) vectors, one
broadcast feeds two FMAs and the other operand is read 32 floats wide.  Its
iterations touch disjoint elements through a range argument (``0 <= j11 <
16``), and the full-tile test ``if (M - 32*j0 - 16*j10 - 1 >= 15)`` that
depends on ``j10`` is versioned: all copies full, the jammed code; else the
copies one by one.
"""
from __future__ import annotations

from . import ir
from .loops import affine, host_lanes, max_trip, nested
from .vectorize import plan


def register_block(fn: ir.LoweredFunction) -> ir.LoweredFunction:
    """``fn`` with :func:`jam` applied where it is legal and useful."""
    def jammed(s):
        r = _factor(s) if int(s.step) == 1 else 1
        return jam(s, r) if r > 1 else None
    return rewrite_serial_loops(rewrite_serial_loops(fn, jammed), _column_block)


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
            and not s.attrs.get("reduction") and nested(s.body) and int(s.step) == 1]
    if not vecs or any(isinstance(s, ir.For) and s.kind == "parallel" or isinstance(s, ir.Allocate)
                       for s in ir.walk_stmts(loop.body)):
        return 1
    regs_per_row = 0
    for v in vecs:
        p, _ = plan(v)
        if p is None or not p.promote:
            return 1
        bits = max(_bits(v.body), 32)
        w = int(v.attrs.get("vector_width") or host_lanes(bits))
        lanes = host_lanes(bits)
        per = -(-w // lanes)
        regs_per_row = max(regs_per_row, max(len(x) for x in p.promote.values()) * per)
    regs = 32 if host_lanes(32) >= 16 else 16
    if not _independent(loop):
        return 1
    return choose_rows(regs_per_row, regs, max_trip(loop))


#: most accumulator registers of a block with several vectors per row
MAX_BLOCK = 16


def _column_block(loop: ir.For):
    """The strip loop ``j0`` of a vector loop (``j = W*j0 + j1``, ``j1`` the
    vector loop) unrolled by ``n`` and jammed, when its iterations touch
    disjoint elements of every written array (:func:`_disjoint`): each row
    then holds ``n`` vectors, its broadcast is shared by ``n`` FMAs and the
    other operand is read ``n`` vectors wide.  ``n`` in 4, 3, 2 (a divisor
    of the trip count's bound first) with at most :data:`MAX_BLOCK`
    accumulators and eight registers spare; kept only if every vector loop
    inside is still widened with its accumulators promoted."""
    if int(loop.step) != 1 or not isinstance(loop.lo, ir.Const):
        return None
    vecs = [s for s in ir.walk_stmts(loop.body) if isinstance(s, ir.For) and s.kind == "vector"]
    if not vecs or any(v.attrs.get("reduction") or not nested(v.body) or int(v.step) != 1
                       for v in vecs):
        return None
    if any(isinstance(s, ir.For) and s.kind == "parallel" or isinstance(s, ir.Allocate)
           for s in ir.walk_stmts(loop.body)):
        return None
    acc = 0
    for v in vecs:
        p, _ = plan(v)
        if p is None or not p.promote:
            return None
        bits = max(_bits(v.body), 32)
        w = int(v.attrs.get("vector_width") or host_lanes(bits))
        acc = max(acc, sum(len(x) for x in p.promote.values()) * -(-w // host_lanes(bits)))
    regs = 32 if host_lanes(32) >= 16 else 16
    if not _disjoint(loop) or not _jammable(loop.body, {loop.var}):
        return None
    trip = max_trip(loop)
    fits = [n for n in (4, 3, 2) if n * acc <= min(MAX_BLOCK, regs - 8) and (trip is None or n <= trip)]
    exact = [n for n in fits if trip is not None and trip % n == 0]
    if not fits:
        return None
    out = jam(loop, (exact or fits)[0], attr="register_block_columns")
    after = [s for s in ir.walk_stmts(out) if isinstance(s, ir.For) and s.kind == "vector"]
    if any(plan(v)[0] is None or not plan(v)[0].promote for v in after):
        return None
    return out


def _jammable(s, dep) -> bool:
    """No loop bound depends on ``dep`` except inside an if whose condition
    does (which :func:`jam` versions: its copies then run one by one)."""
    if isinstance(s, ir.If) and ir.free_vars(s.cond) & dep:
        return _jammable(s.then, dep)
    if isinstance(s, ir.Let) and ir.free_vars(s.value) & dep:
        return _jammable(s.body, dep | {s.name})
    if isinstance(s, ir.For) and (ir.free_vars(s.lo) | ir.free_vars(s.hi)) & dep:
        return False
    return all(_jammable(c, dep) for c in ir.stmt_children(s))


def _disjoint(loop: ir.For, spread: bool = True) -> bool:
    """Iterations of ``loop`` touch disjoint elements of every array its body
    writes: some index dimension is the same ``a * var + b1 * u1 + ... + c`` in
    every access, the rest fixed over the loop, where (``spread``) the ``u``
    are iterators of loops inside with constant lower bounds and bounded trip
    counts ``T`` and ``sum |b| (T - 1) < |a|`` (``16 * j0 + j1`` with
    ``0 <= j1 < 16``); without ``spread`` no ``u`` at all."""
    var, trips, lets = loop.var, {}, set()
    accesses, written = {}, set()
    for s in ir.walk_stmts(loop.body):
        if isinstance(s, ir.For):
            t = max_trip(s) if spread and int(s.step) == 1 else None
            trips[s.var] = None if t is None or trips.get(s.var, 0) is None else max(t, trips.get(s.var, 0))
        elif isinstance(s, ir.Let):
            lets.add(s.name)
        elif isinstance(s, ir.Store):
            written.add(s.array)
            accesses.setdefault(s.array, []).append(s.index)
        for e in ir.stmt_exprs(s):
            for x in ir.walk_exprs(e):
                if isinstance(x, ir.Load):
                    accesses.setdefault(x.array, []).append(x.index)
    for name in written:
        ok = set(range(len(accesses[name][0])))
        forms = [[affine(e, lambda n: n not in lets) for e in ix] for ix in accesses[name]]
        for d in list(ok):
            f0 = forms[0][d]
            if f0 is None or not f0[0].get(var) or any(fm[d] is None or fm[d] != f0 for fm in forms[1:]):
                ok.discard(d)
                continue
            spread = 0
            for n, b in f0[0].items():
                if n in trips:
                    if trips[n] is None:
                        spread = None
                        break
                    spread += abs(b) * max(trips[n] - 1, 0)
            if spread is None or spread >= abs(f0[0][var]):
                ok.discard(d)
        if not ok:
            return False
    return True


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


def _bits(body) -> int:
    size = {"float64": 64, "int64": 64, "float32": 32, "int32": 32}
    return max([size.get(x.dtype, 8) for st in ir.walk_stmts(body) for e in ir.stmt_exprs(st)
                for x in ir.walk_exprs(e) if isinstance(x, ir.Load)] or [32])


def _independent(loop: ir.For) -> bool:
    """Iterations of ``loop`` touch disjoint elements of every array its body
    writes (at one index ``a * i + c``, ``c`` free of names bound inside), and
    no bound or condition inside depends on its iterator."""
    dep = {loop.var}
    for s in ir.walk_stmts(loop.body):
        if isinstance(s, ir.Let) and ir.free_vars(s.value) & dep:
            dep.add(s.name)
        elif isinstance(s, ir.For) and (ir.free_vars(s.lo) | ir.free_vars(s.hi)) & dep:
            return False
        elif isinstance(s, ir.If) and ir.free_vars(s.cond) & dep:
            return False
    return _disjoint(loop, spread=False)


def jam(loop: ir.For, r: int, attr: str = "register_block") -> ir.Stmt:
    """``loop`` advanced by ``r`` with its body's statements repeated for each of
    the ``r`` iterations where they stand, then the remaining ones one by one.
    An if whose condition depends on the iterator is versioned: when it holds
    for all ``r`` copies their then-branches are jammed, else the whole if runs
    once per copy, in order (the bounds inside it may then depend on it)."""
    v = ir.Var(loop.var)
    maps = [{loop.var: v if k == 0 else ir.Binary("add", v, ir.Const(k, "int64"), "int64")}
            for k in range(r)]

    def body(s, maps, ks, dep):
        if isinstance(s, ir.Block):
            return ir.Block([body(x, maps, ks, dep) for x in s.stmts])
        if isinstance(s, ir.For):
            lo, hi = s.lo, s.hi
            if (ir.free_vars(lo) | ir.free_vars(hi)) & dep:
                if len(maps) != 1:
                    raise ValueError(f"register blocking: the bounds of {s.var} depend on {loop.var}")
                lo, hi = ir.substitute(lo, maps[0]), ir.substitute(hi, maps[0])
            return ir.For(s.var, lo, hi, body(s.body, maps, ks, dep), kind=s.kind, step=s.step,
                          attrs=s.attrs)
        if isinstance(s, ir.If):
            if ir.free_vars(s.cond) & dep:
                if len(maps) == 1:
                    return ir.If(ir.substitute(s.cond, maps[0]), body(s.then, maps, ks, dep),
                                 None if s.else_ is None else body(s.else_, maps, ks, dep))
                every = ir.substitute(s.cond, maps[0])
                for m in maps[1:]:
                    every = ir.Binary("and", every, ir.substitute(s.cond, m), "bool")
                return ir.If(every, body(s.then, maps, ks, dep),
                             ir.Block([body(s, [m], [k], dep) for m, k in zip(maps, ks)]))
            return ir.If(s.cond, body(s.then, maps, ks, dep),
                         None if s.else_ is None else body(s.else_, maps, ks, dep))
        if isinstance(s, ir.Let):
            if not ir.free_vars(s.value) & dep:
                return ir.Let(s.name, s.value, body(s.body, maps, ks, dep))
            names = [f"{s.name}__{k}" for k in ks]
            new = [dict(m, **{s.name: ir.Var(n, s.value.dtype)}) for m, n in zip(maps, names)]
            inner = body(s.body, new, ks, dep | {s.name})
            for k in reversed(range(len(maps))):
                inner = ir.Let(names[k], ir.substitute(s.value, maps[k]), inner)
            return inner
        if isinstance(s, ir.Store):
            return ir.Block([ir.store_like(s, s.array, tuple(ir.substitute(i, m) for i in s.index),
                                           ir.substitute(s.value, m)) for m in maps])
        raise TypeError(f"register blocking: unexpected {type(s).__name__}")

    main_hi = ir.Binary("sub", loop.hi, ir.Const(r - 1, "int64"), "int64")
    span = ir.Binary("max", ir.Binary("sub", loop.hi, loop.lo, "int64"), ir.Const(0, "int64"), "int64")
    rest = ir.Binary("add", loop.lo, ir.Binary("mul", ir.Binary("floordiv", span, ir.Const(r, "int64"),
                                                                  "int64"), ir.Const(r, "int64"), "int64"),
                     "int64")
    attrs = dict(loop.attrs, **{attr: r})
    main = ir.For(loop.var, loop.lo, main_hi, body(loop.body, maps, list(range(r)), {loop.var}),
                  kind="serial", step=r, attrs=attrs)
    tail = ir.For(loop.var, rest, loop.hi, loop.body, kind=loop.kind, step=1, attrs=loop.attrs)
    return ir.Block([main, tail])

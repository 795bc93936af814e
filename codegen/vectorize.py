"""Outer-loop vectorisation: the target-neutral decision both backends follow
for a ``vector`` loop whose body contains loops or ifs.

Such a loop is *widened*: one vector iteration runs ``W`` consecutive
iterations of it in lock step.  Inner loops run once per vector iteration with
a scalar (lane-uniform) iterator; every value that depends on the vector
iterator is a ``W``-lane vector; a unit-stride access is a vector load/store,
an invariant one a scalar load (broadcast where it meets a vector), any other a
gather/scatter.  :func:`plan` decides whether that is the program's meaning,
and says why not when it is not:

* **Lanes never meet**: every array the body writes is accessed (read or
  written) only at elements that belong to one lane: some index dimension is
  ``a * v + c`` with the same ``a != 0`` and the same ``c`` in every access,
  ``c`` depending only on names fixed for the whole vector iteration (not on
  an inner loop's iterator or a value bound in the body).  Two lanes then never
  touch one element, so running them in lock step reorders nothing that
  matters.  (The schedule's legality already proved the loop carries no
  dependence; this re-proof covers reassociated reductions, whose reordering
  legality allows, and loops built by hand.)
* **Uniform control**: the bounds of inner loops and the conditions of ifs do
  not depend on the vector iterator (a triangular ``k < j`` bound would need
  masks: the loop is not widened, and the generated code and ``f.explain()``
  say so).  No temporary is allocated inside.
* **Accumulators in registers**: in an inner loop, an array accessed at a single
  element (an index free of the inner loop's own names) that the loop stores
  to unconditionally is *promoted*: loaded once before the loop, carried in a
  register (a vector for a lane-varying index), stored once after it (only
  when the loop runs at least once).  This is ``accumulate_locally`` done by
  the backend, for ``C[i][j] += A[i][k] * B[k][j]`` with ``j`` the vector loop.

A straight-line body (stores and lets only) keeps each backend's own path (LLVM:
explicit widening with its own checks; C: ``#pragma omp simd``), so the code of
kernels without nested vector loops does not change.

This module imports nothing from ``tiramisu_py``.
"""
from __future__ import annotations

from dataclasses import dataclass, field

from . import ir, target
from .ir import expr_key


@dataclass
class Plan:
    """How a nested vector loop is widened."""
    varying: set                          # names whose value differs between lanes
    promote: dict = field(default_factory=dict)   # id(inner For) -> [(array, index)]
    written: set = field(default_factory=set)


def nested(body) -> bool:
    """Whether a vector loop body contains a loop or an if (outer-loop vectorisation)."""
    return any(isinstance(s, (ir.For, ir.If)) for s in ir.walk_stmts(body))


def _affine(e, fixed_ok):
    """``e`` as ({name: coeff}, const) over names, or None; names for which
    ``fixed_ok(name)`` is false make it None unless it is the lane variable."""
    if isinstance(e, ir.Const) and ir.is_int(e.dtype):
        return {}, int(e.value)
    if isinstance(e, ir.Var):
        return ({e.name: 1}, 0) if fixed_ok(e.name) else None
    if isinstance(e, ir.Cast) and ir.is_int(e.dtype) and ir.is_int(e.a.dtype):
        return _affine(e.a, fixed_ok)
    if isinstance(e, ir.Unary) and e.op == "neg":
        a = _affine(e.a, fixed_ok)
        return None if a is None else ({n: -c for n, c in a[0].items()}, -a[1])
    if isinstance(e, ir.Binary) and e.op in ("add", "sub", "mul"):
        a, b = _affine(e.a, fixed_ok), _affine(e.b, fixed_ok)
        if a is None or b is None:
            return None
        if e.op == "mul":
            if a[0] and b[0]:
                return None
            (va, ca), k = (a, b[1]) if not b[0] else (b, a[1])
            return {n: c * k for n, c in va.items() if c * k}, ca * k
        s = 1 if e.op == "add" else -1
        v = dict(a[0])
        for n, c in b[0].items():
            v[n] = v.get(n, 0) + s * c
        return {n: c for n, c in v.items() if c}, a[1] + s * b[1]
    return None


def _lane_dims(index, var, inner):
    """{dimension: (a, key of c)} for the dimensions of ``index`` that are
    ``a * var + c`` with ``c`` over names fixed for the vector iteration."""
    out = {}
    for d, e in enumerate(index):
        f = _affine(e, lambda n: n == var or n not in inner)
        if f is None or not f[0].get(var):
            continue
        a = f[0][var]
        rest = tuple(sorted((n, c) for n, c in f[0].items() if n != var))
        out[d] = (a, rest, f[1])
    return out


def max_trip(loop: ir.For):
    """An upper bound on the iterations of ``loop`` when its lower bound is a
    constant and its upper bound has a constant bound (``min(31, N - ...) + 1``),
    else None."""
    if not isinstance(loop.lo, ir.Const):
        return None
    hi = _upper(loop.hi)
    return None if hi is None else max(0, hi - int(loop.lo.value))


def trip_bound(loop: ir.For):
    """An upper bound on the iterations of ``loop`` (unit step) when both
    bounds are clamped by constants: ``lo`` a ``max`` with a constant argument
    (``max(max(0, a), b)`` >= 0) and ``hi`` a ``min`` with one (``min(min(2,
    c), d) + 1`` <= 3); else None.  Exact: ``max(k, ...) >= k`` and ``min(k,
    ...) <= k`` hold for any values of the other arguments; the bound is
    only used for loop hints, never for correctness."""
    lo, hi = _lower(loop.lo), _upper(loop.hi)
    if lo is None or hi is None or int(loop.step) != 1:
        return None
    return max(0, hi - lo)


def _lower(e):
    return _bound(e, "max", max)


def _upper(e):
    return _bound(e, "min", min)


def _bound(e, clamp, pick):
    """A constant bound of ``e`` on one side (``clamp`` ``"max"``: below,
    ``"min"``: above) that holds whatever its variables are: constants,
    ``clamp`` with at least one bounded argument, sums of bounded terms, a
    bounded term minus a constant; else None."""
    if isinstance(e, ir.Const):
        return int(e.value)
    if isinstance(e, ir.Binary):
        a, b = _bound(e.a, clamp, pick), _bound(e.b, clamp, pick)
        if e.op == clamp:
            return a if b is None else b if a is None else pick(a, b)
        if e.op == "add" and a is not None and b is not None:
            return a + b
        if e.op == "sub" and a is not None and isinstance(e.b, ir.Const):
            return a - int(e.b.value)
    return None


def _apart(f, g, trip) -> bool:
    """Two accesses ``a*v + rest + c1`` and ``a*v + rest + c2`` (``_lane_dims``
    forms) whose elements no two different lanes share: the same ``a`` and
    ``rest``, and the same offset, or offsets that ``a * (v1 - v2)`` never
    bridges (not a multiple of ``a``, or at least ``|a| * trip`` apart for a
    loop of at most ``trip`` iterations: ``C[16*j0 + j1]`` and
    ``C[16*j0 + 16 + j1]`` with ``0 <= j1 < 16``, a register block's columns)."""
    if g is None or f[:2] != g[:2]:
        return False
    d, a = f[2] - g[2], f[0]
    return d == 0 or d % a != 0 or (trip is not None and abs(d) >= abs(a) * trip)


def plan(loop: ir.For):
    """(Plan, None) if ``loop`` (a vector loop with a nested body) can be
    widened, else (None, reason)."""
    var = loop.var
    varying, inner, written = {var}, set(), set()
    accesses = {}                       # array -> [index tuples]
    promote = {}

    def dep(e):
        return bool(ir.free_vars(e) & varying)

    def note(e):
        for x in ir.walk_exprs(e):
            if isinstance(x, ir.Load):
                accesses.setdefault(x.array, []).append(x.index)

    def walk(s):
        if isinstance(s, ir.Block):
            return next((r for r in map(walk, s.stmts) if r), None)
        if isinstance(s, ir.Store):
            written.add(s.array)
            accesses.setdefault(s.array, []).append(s.index)
            for e in (s.value, *s.index):
                note(e)
            return None
        if isinstance(s, ir.Let):
            note(s.value)
            inner.add(s.name)
            if dep(s.value):
                varying.add(s.name)
            return walk(s.body)
        if isinstance(s, ir.If):
            note(s.cond)
            if dep(s.cond):
                return f"the condition of an if depends on the vector iterator {var}"
            return walk(s.then) or (walk(s.else_) if s.else_ is not None else None)
        if isinstance(s, ir.For):
            note(s.lo)
            note(s.hi)
            if dep(s.lo) or dep(s.hi):
                return (f"the bounds of the inner loop {s.var} depend on the vector iterator "
                        f"{var} (a triangular loop would need masks)")
            inner.add(s.var)
            r = walk(s.body)
            if r is None:
                promote[id(s)] = _promotable(s)
            return r
        if isinstance(s, ir.Allocate):
            return f"a temporary ({s.array}) is allocated in the body"
        return f"a {type(s).__name__} in the body"

    reason = walk(loop.body)
    if reason:
        return None, reason
    trip = max_trip(loop)
    for name in sorted(written):
        forms = [_lane_dims(ix, var, inner) for ix in accesses[name]]
        common = set(forms[0])
        for fm in forms[1:]:
            common &= {d for d in fm if _apart(fm[d], forms[0].get(d), trip)}
        if not common:
            return None, (f"two lanes may access one element of {name} (no index of every "
                          f"access to it is the same multiple of {var} plus the same offset)")
    return Plan(varying, {k: v for k, v in promote.items() if v}, written), None


def _tops(s):
    """The statements of ``s`` that run once per run of ``s`` (through blocks and lets)."""
    if isinstance(s, ir.Block):
        for x in s.stmts:
            yield from _tops(x)
    elif isinstance(s, ir.Let):
        yield from _tops(s.body)
    else:
        yield s


def _distinct(ix1, ix2) -> bool:
    """Two index tuples that name different elements: some dimension differs by
    a nonzero constant."""
    for x, y in zip(ix1, ix2):
        fx, fy = _affine(x, lambda n: True), _affine(y, lambda n: True)
        if fx is not None and fy is not None and fx[0] == fy[0] and fx[1] != fy[1]:
            return True
    return False


def _promotable(loop: ir.For) -> list:
    """[(array, index)]: elements that ``loop`` accesses at indices free of the
    names bound inside it (no loads), stored unconditionally at its top level,
    where every access to the array in the loop is one of those elements and
    they are pairwise distinct."""
    bound, keys, stores = set(), {}, {}
    for s in ir.walk_stmts(loop):
        if isinstance(s, ir.For):
            bound.add(s.var)
        elif isinstance(s, ir.Let):
            bound.add(s.name)
        if isinstance(s, ir.Store):
            keys.setdefault(s.array, {})[tuple(expr_key(i) for i in s.index)] = s.index
            stores[s.array] = stores.get(s.array, 0) + 1
        for e in ir.stmt_exprs(s):
            for x in ir.walk_exprs(e):
                if isinstance(x, ir.Load):
                    keys.setdefault(x.array, {})[tuple(expr_key(i) for i in x.index)] = x.index
    tops = [t for t in _tops(loop.body) if isinstance(t, ir.Store)]
    out = []
    for name, ks in keys.items():
        top = {tuple(expr_key(i) for i in t.index) for t in tops if t.array == name}
        idx = list(ks.values())
        if not top or set(ks) != top or stores[name] != sum(t.array == name for t in tops):
            continue
        if any(isinstance(x, ir.Load) or (isinstance(x, ir.Var) and x.name in bound)
               for ix in idx for i in ix for x in ir.walk_exprs(i)):
            continue
        if all(_distinct(idx[p], idx[q]) for p in range(len(idx)) for q in range(p + 1, len(idx))):
            out += [(name, ix) for ix in idx]
    return out


def host_lanes(bits: int) -> int:
    """Lanes of ``bits``-wide elements in one SIMD register of this host
    (:func:`codegen.target.vector_bits`: AVX-512 512 bits, AVX 256, else 128)."""
    return max(1, target.vector_bits() // bits)


def describe(loop: ir.For, width: int) -> str:
    """One line: whether ``loop`` (a vector loop) is widened, and why not."""
    if not nested(loop.body):
        return (f"vector loop {loop.var} ({width} lanes): straight-line body, widened "
                "(LLVM: explicit vectors; C: #pragma omp simd)")
    if int(loop.step) != 1:
        return f"vector loop {loop.var}: not widened (step {loop.step})"
    p, reason = plan(loop)
    if p is None:
        return f"vector loop {loop.var}: not widened ({reason}); runs as a scalar loop"
    acc = sorted({a for v in p.promote.values() for a, _ in v})
    return (f"vector loop {loop.var} ({width} lanes): widened with the loops inside it"
            + (f"; {', '.join(acc)} accumulated in registers over the inner loop" if acc else ""))


def report(fn: ir.LoweredFunction, default_width=None) -> list:
    """``describe`` for every vector loop of ``fn`` (each loop name once)."""
    out, seen = [], set()
    for s in ir.walk_stmts(fn.body):
        if isinstance(s, ir.For) and s.kind == "vector" and not s.attrs.get("reduction"):
            w = s.attrs.get("vector_width") or default_width or "host"
            line = describe(s, w)
            if line not in seen:
                seen.add(line)
                out.append(line)
    from .regblock import register_block
    for s in ir.walk_stmts(register_block(fn).body):
        r = isinstance(s, ir.For) and s.attrs.get("register_block")
        c = isinstance(s, ir.For) and s.attrs.get("register_block_columns")
        line = (f"loop {s.var}: unrolled by {r} and jammed into the widened vector loop "
                f"(a register block of {r} rows)") if r else (
                f"loop {s.var}: unrolled by {c} and jammed into the widened vector loop "
                f"({c} vectors per row of the register block)") if c else None
        if line and line not in seen:
            seen.add(line)
            out.append(line)
    return out

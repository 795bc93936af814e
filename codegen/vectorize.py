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

from . import ir
from .ir import expr_key
from .loops import affine, max_trip


@dataclass
class Plan:
    """How a nested vector loop is widened."""
    varying: set                          # names whose value differs between lanes
    promote: dict = field(default_factory=dict)   # id(inner For) -> [(array, index)]
    written: set = field(default_factory=set)


def _lane_dims(index, var, inner):
    """{dimension: (a, key of c)} for the dimensions of ``index`` that are
    ``a * var + c`` with ``c`` over names fixed for the vector iteration."""
    out = {}
    for d, e in enumerate(index):
        f = affine(e, lambda n: n == var or n not in inner)
        if f is None or not f[0].get(var):
            continue
        a = f[0][var]
        rest = tuple(sorted((n, c) for n, c in f[0].items() if n != var))
        out[d] = (a, rest, f[1])
    return out


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
        fx, fy = affine(x, lambda n: True), affine(y, lambda n: True)
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

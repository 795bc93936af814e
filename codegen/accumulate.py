"""Local accumulation: a loop marked ``attrs["accumulate"] = [(array, op), ...]``
accumulates the updates ``array[idx] = array[idx] op e`` of its body in a small
local tile that starts at ``op``'s identity, and combines the tile into
``array`` once, after the loop::

    for kk: for jv: C[i][j + jv] = C[i][j + jv] + a * b[kk][jv]
->
    C_local[jv] = 0                                   (for jv)
    for kk: for jv: C_local[jv] = C_local[jv] + a * b[kk][jv]
    C[i][j + jv] = C[i][j + jv] + C_local[jv]         (for jv)

The tile is indexed by the loops between the marked loop and the update, so
each of their iterations has its own slot (except a loop inside the
innermost vector loop that the element's index does not use, such as a
dot product's pair loop: its iterations share the lane's slot, in program
order, :func:`_slot_path`); backends keep a small tile in
registers.  This reassociates the accumulation (the caller, the scheduling
layer, checks that the program allowed it and that one slot always holds one
element).

A loop inside the marked one may have a bound that varies with the outer
loops (a clamped partial tile, ``iu < min(5, N - 1 - i) + 1``) as long as its
extent has a constant bound: the tile takes that size and the init and combine
loops run over the same bounds.  A part of the body the transformation cannot
take as it is (an If or a temporary around the update, an unbounded inner
loop, other reads of the array) is left unchanged: that part then accumulates
into the array directly, which is the same result.

On the GPU (a ``gpu_thread`` loop between the marked loop and the update,
e.g. the block-level k-step loop of a GEMM around its thread loops, or one
around the marked loop, e.g. a thread's own loop over a CSR row), the tile
is per thread: an Allocate of scope ``"thread"`` (a local array of the
kernel, so registers once indexed by constants) indexed by the slot loops
only, without the thread loops (each thread touches only its own slots), and
the init and combine loops reopen the thread loops.  Slot loops are the
non-thread loops whose iterator the updated element's index uses; the others
(the k loop inside the k-step) all update one slot and are not repeated in
the init and combine, so their bounds may vary with the marked loop.  Each
slot loop needs a constant lower bound and a constant bound on its extent
(interval arithmetic over the enclosing loops, ``div`` by constants
included): it is marked ``attrs["full_extent"]``, and the CUDA printer runs it
that many times with its real bound as a guard, under ``#pragma unroll``, so
that every tile index is a constant and the tile lives in registers.

This module imports nothing from ``tiramisu_py``."""
from __future__ import annotations

from . import ir
from .simplify import clamped_bound, interval


def accumulate_locally(fn: ir.LoweredFunction) -> ir.LoweredFunction:
    """``fn`` with every loop marked ``accumulate`` rewritten (see the module)."""
    taken = {a.name for a in fn.arrays} | {s.array for s in ir.walk_stmts(fn.body)
                                           if isinstance(s, ir.Allocate)}

    def visit(s, threads):
        if isinstance(s, ir.For) and s.kind == "gpu_thread":
            lo, ext = s.attrs.get("min"), s.attrs.get("extent")
            rng = (None, None) if lo is None or ext is None else (int(lo), int(lo) + int(ext) - 1)
            threads = {**threads, s.var: rng}
        s = ir.rebuild(s, lambda x: visit(x, threads))
        if isinstance(s, ir.For) and s.attrs.get("accumulate"):
            s = _rewrite(s, dict(s.attrs["accumulate"]), taken, threads,
                         exact=bool(s.attrs.get("accumulate_exact")))
        return s

    fn.body = visit(fn.body, {})
    return fn


def _loads(e):
    return [x for x in ir.walk_exprs(e) if isinstance(x, ir.Load)]


def _extent(p: ir.For):
    """The largest number of iterations of ``p`` (constant ``lo``, unit step),
    or None."""
    if not isinstance(p.lo, ir.Const) or p.step != 1:
        return None
    if isinstance(p.hi, ir.Const):
        hi = int(p.hi.value)
    else:
        clamp = clamped_bound(p.hi)         # min(C, ...) + plus
        if clamp is None:
            return None
        hi = clamp[0] + clamp[2]
    return max(0, hi - int(p.lo.value))


def _sites(loop: ir.For, ops: dict, ifs=False):
    """[(store, path)] of the updates of ``ops``'s arrays in ``loop``'s body, with
    the loops and lets between ``loop`` and each; None when a store sits where
    it cannot be taken out (under an If or an Allocate; ``ifs``: an If without
    an else is on the path, for the GPU tile)."""
    out = []

    def find(s, path):
        if isinstance(s, ir.Store):
            if s.array in ops:
                out.append((s, path))
            return True
        if isinstance(s, (ir.For, ir.Let)):
            return find(s.body, path + [s])
        if ifs and isinstance(s, ir.If) and s.else_ is None:
            return find(s.then, path + [s])
        if isinstance(s, ir.Block):
            return all(find(x, path) for x in s.stmts)
        inner = [x for x in ir.walk_stmts(s) if isinstance(x, ir.Store) and x.array in ops]
        return not inner

    return out if find(loop.body, []) else None


def _takeable(loop: ir.For, store: ir.Store, path, op: str, written: set):
    """The update's right-hand side when ``store`` is ``a[idx] = a[idx] op rhs``
    with ``idx`` and every enclosing loop's bounds fixed during one execution of
    ``loop``; else None."""
    v = store.value
    if op not in ir.COMBINE or not isinstance(v, ir.Binary) or v.op != op \
            or not isinstance(v.a, ir.Load) or v.a.array != store.array:
        return None
    if ir.expr_key(v.a) != ir.expr_key(ir.Load(store.array, store.index, v.dtype)):
        return None
    if v.dtype != v.a.dtype:
        return None
    varying = {loop.var}
    for p in path:
        if isinstance(p, ir.For):
            if _extent(p) is None or ir.free_vars(p.hi) & varying \
                    or any(x.array in written for x in _loads(p.hi)):
                return None
        elif ir.free_vars(p.value) & varying or any(x.array in written for x in _loads(p.value)):
            return None
    if any(ir.free_vars(i) & varying for i in store.index):
        return None
    if any(x.array in written for i in store.index for x in _loads(i)):
        return None
    return v.b


def _wrap(path, body, keys=("vector_width", "unroll")):
    for p in reversed(path):
        if isinstance(p, ir.For):
            attrs = {k: v for k, v in p.attrs.items() if k in keys}
            body = ir.For(p.var, p.lo, p.hi, body, kind=p.kind, step=p.step, attrs=attrs)
        elif isinstance(p, ir.If):
            body = ir.If(p.cond, body)
        else:
            body = ir.Let(p.name, p.value, body)
    return body


def _slot_path(store: ir.Store, path):
    """The loops (and lets) of ``path`` that index the tile: all of them,
    except a loop inside the innermost vector loop whose iterator the updated
    element's index does not use (the pair loop ``k1`` of a dot product:
    its iterations add to the same element one after the other, so they share
    the lane's slot, as in the program).  Unchanged when a kept loop or let
    depends on a left-out iterator."""
    vectors = [n for n, p in enumerate(path) if isinstance(p, ir.For) and p.kind == "vector"]
    if not vectors:
        return path
    need = _needed(store, path)
    dropped = {p.var for n, p in enumerate(path) if n > vectors[-1] and isinstance(p, ir.For)
               and p.var not in need}
    kept = _without(path, dropped)
    return path if kept is None else kept


def _exact_path(store: ir.Store, path):
    """The loops (and lets) of ``path`` that index the tile when the program's
    order is kept: those the updated element's index uses.  A loop it does
    not use (a convolution's ``ky, kx`` between the marked ``c`` and the
    output channels and columns) runs inside as before, each of its
    iterations adding to the same slot in the program's order.  None when a
    kept loop's bounds or a kept let depend on a left-out iterator (the
    slots would not be the same set in each of its iterations)."""
    need = _needed(store, path)
    return _without(path, {p.var for p in path if isinstance(p, ir.For) and p.var not in need})


def _without(path, dropped: set):
    """``path`` less the loops ``dropped`` names, or None when a loop or let
    it keeps depends on one of them."""
    kept = [p for p in path if not (isinstance(p, ir.For) and p.var in dropped)]
    for p in kept:
        exprs = [p.value] if isinstance(p, ir.Let) else [p.lo, p.hi]
        if any(ir.free_vars(e) & dropped for e in exprs):
            return None
    return kept


def _replace(s, new, attrs=None):
    """``s`` with the statements ``new`` maps (by id) replaced, and the loops
    ``attrs`` maps given those extra attributes."""
    if id(s) in new:
        return new[id(s)]
    out = ir.rebuild(s, lambda x: _replace(x, new, attrs))
    if attrs and id(s) in attrs:
        out = ir.For(out.var, out.lo, out.hi, out.body, kind=out.kind, step=out.step,
                     attrs={**out.attrs, **attrs[id(s)]})
    return out


def _rewrite(loop: ir.For, ops: dict, taken: set, threads: dict, exact=False) -> ir.Stmt:
    """``threads``: the GPU thread loops around ``loop`` (var -> inclusive range).
    ``exact`` (no reassociation allowed): the tile starts from the output's
    elements (copied in before ``loop``) and is copied out after it, one slot
    per element (every loop between ``loop`` and the update indexes the
    element), the program's order kept; otherwise, and on the GPU, ``loop``
    is left as it is."""
    untouched = _strip(loop) if exact else loop
    gpu_sites = _sites(loop, ops, ifs=True)
    if gpu_sites and (threads or any(isinstance(p, ir.For) and p.kind == "gpu_thread"
                                     for _, path in gpu_sites for p in path)):
        return untouched if exact else _rewrite_gpu(loop, ops, taken, gpu_sites, threads)
    sites = _sites(loop, ops)
    if not sites:
        return untouched
    written = {s.array for s in ir.walk_stmts(loop.body) if isinstance(s, ir.Store)}
    self_loads = set()
    plans = []
    for store, path in sites:
        rhs = _takeable(loop, store, path, ops[store.array], written)
        slots = _exact_path(store, path) if exact else _slot_path(store, path)
        if rhs is None or slots is None:
            return untouched
        self_loads.add(id(store.value.a))
        plans.append((store, slots, rhs))
    # the arrays may be read only by the updates themselves
    for s in ir.walk_stmts(loop.body):
        for e in ir.stmt_exprs(s):
            if any(x.array in ops and id(x) not in self_loads for x in _loads(e)):
                return untouched

    new, inits, combines, tiles = {}, [], [], []
    for store, path, rhs in plans:
        dtype, op = store.value.dtype, ops[store.array]
        name = ir.fresh_name(f"{store.array}_local", taken)
        fors = [p for p in path if isinstance(p, ir.For)]
        shape = tuple(ir.Const(max(1, _extent(p)), ir.INDEX) for p in fors) \
            or (ir.Const(1, ir.INDEX),)
        tidx = tuple(ir.Var(p.var) if p.lo.value == 0 else
                     ir.Binary("sub", ir.Var(p.var), p.lo, ir.INDEX) for p in fors) \
            or (ir.Const(0, ir.INDEX),)
        tile = ir.Load(name, tidx, dtype)
        new[id(store)] = ir.Store(name, tidx, ir.Binary(store.value.op, tile, rhs, dtype))
        output = ir.Load(store.array, store.index, dtype)
        start = output if exact else ir.Const(ir.identity(op, dtype), dtype)
        inits.append(_wrap(path, ir.Store(name, tidx, start)))
        combined = tile if exact else ir.Binary(ir.COMBINE[op], output, tile, dtype)
        combines.append(_wrap(path, ir.Store(store.array, store.index, combined)))
        tiles.append((name, dtype, shape))
    body = _replace(loop.body, new)
    out = ir.Block(inits + [ir.For(loop.var, loop.lo, loop.hi, body, kind=loop.kind,
                                   step=loop.step, attrs=_plain_attrs(loop))] + combines)
    for name, dtype, shape in reversed(tiles):
        out = ir.Allocate(name, dtype, shape, out)
    return out


def _plain_attrs(loop):
    return {k: v for k, v in loop.attrs.items() if k not in ("accumulate", "accumulate_exact")}


def _strip(loop):
    return ir.For(loop.var, loop.lo, loop.hi, loop.body, kind=loop.kind, step=loop.step,
                  attrs=_plain_attrs(loop))


# ------------------------------------------------------------------ GPU: per-thread tiles
_GPU_KEYS = ("axis", "min", "extent", "full_extent", "unroll", "stride", "linear", "level",
             "slowest", "vector_width", "command")


def _needed(store: ir.Store, path) -> set:
    """The iterators and let names the updated element's index depends on."""
    need = set()
    for i in store.index:
        need |= ir.free_vars(i)
    for p in reversed(path):
        if isinstance(p, ir.Let) and p.name in need:
            need |= ir.free_vars(p.value)
    return need


def _update_parts(store: ir.Store):
    """(the update's Binary, its read of the element) of ``a[i] = a[i] op e``,
    or of a 16-bit ``a[i] = half(float(a[i]) op e)`` (sums in float32); None."""
    v, old = store.value, None
    if isinstance(v, ir.Cast) and ir.is_half(v.dtype) and isinstance(v.a, ir.Binary) \
            and isinstance(v.a.a, ir.Cast) and v.a.a.a.dtype == v.dtype:
        v, old = v.a, v.a.a.a
    elif isinstance(v, ir.Binary):
        old = v.a
        if v.dtype != getattr(old, "dtype", None):
            return None
    if not isinstance(v, ir.Binary) or not isinstance(old, ir.Load) or old.array != store.array \
            or ir.expr_key(old) != ir.expr_key(ir.Load(store.array, store.index, old.dtype)):
        return None
    return v, old


def _gpu_plan(loop: ir.For, store: ir.Store, path, op: str, written: set, threads: dict):
    """(rhs, kept path, [(slot loop, extent)]) for a per-thread tile, or None
    when the update cannot be taken (see the module); ``threads``: the ranges
    of the thread loops around ``loop``."""
    parts = _update_parts(store)
    if op not in ir.COMBINE or parts is None or parts[0].op != op:
        return None
    v = parts[0]
    need = _needed(store, path)
    if loop.var in need or any(x.array in written for i in store.index for x in _loads(i)):
        return None
    kept = [p for p in path if isinstance(p, ir.For) and (p.kind == "gpu_thread" or p.var in need)
            or isinstance(p, ir.Let) and p.name in need]
    inner = {p.var for p in path if isinstance(p, ir.For)} | \
        {p.name for p in path if isinstance(p, ir.Let)}
    names = {p.var for p in kept if isinstance(p, ir.For)} | \
        {p.name for p in kept if isinstance(p, ir.Let)}
    ifs = []
    for p in path:
        if not isinstance(p, ir.If):
            continue
        used = ir.free_vars(p.cond) & inner
        if any(x.array in written for x in _loads(p.cond)):
            return None
        if used and not used <= names:
            return None
        if used:                  # a guard on the slots (a partial tile): kept
            ifs.append(p)         # (else it only selects iterations of the loops around)
    kept = [p for p in path if p in kept or p in ifs]
    varying = {loop.var} | {p.var for p in path if isinstance(p, ir.For) and p not in kept}
    ranges, slots = dict(threads), []
    for p in kept:
        exprs = [p.value] if isinstance(p, ir.Let) else [p.cond] if isinstance(p, ir.If) \
            else [p.lo, p.hi]
        if any(ir.free_vars(e) & varying or any(x.array in written for x in _loads(e))
               for e in exprs):
            return None
        if isinstance(p, ir.Let):
            ranges.pop(p.name, None)
            continue
        if isinstance(p, ir.If):
            continue
        if p.step != 1:
            return None
        if p.kind == "gpu_thread":
            lo = int(p.attrs["min"])
            ranges[p.var] = (lo, lo + int(p.attrs["extent"]) - 1)
            continue
        if not isinstance(p.lo, ir.Const):
            return None
        lo, hi = int(p.lo.value), interval(p.hi, ranges)[1]
        if hi is None:
            return None
        slots.append((p, max(1, hi - lo)))
        ranges[p.var] = (lo, hi - 1)
    return v.b, kept, slots


def _rewrite_gpu(loop: ir.For, ops: dict, taken: set, sites, threads: dict) -> ir.Stmt:
    written = {s.array for s in ir.walk_stmts(loop.body) if isinstance(s, ir.Store)}
    plans, self_loads = [], set()
    for store, path in sites:
        got = _gpu_plan(loop, store, path, ops[store.array], written, threads)
        if got is None:
            return loop
        self_loads.add(id(_update_parts(store)[1]))
        plans.append((store, got))
    for s in ir.walk_stmts(loop.body):
        for e in ir.stmt_exprs(s):
            if any(x.array in ops and id(x) not in self_loads for x in _loads(e)):
                return loop
    new, marks, inits, combines, tiles = {}, {}, [], [], []
    for store, (rhs, kept, slots) in plans:
        binary, old = _update_parts(store)
        dtype, op = binary.dtype, ops[store.array]      # (a 16-bit element: float32 sums)
        name = ir.fresh_name(f"{store.array}_local", taken)
        for p, ext in slots:
            marks[id(p)] = {"full_extent": ext}
        shape = tuple(ir.Const(ext, ir.INDEX) for _, ext in slots) or (ir.Const(1, ir.INDEX),)
        tidx = tuple(ir.Var(p.var) if p.lo.value == 0 else
                     ir.Binary("sub", ir.Var(p.var), p.lo, ir.INDEX) for p, _ in slots) \
            or (ir.Const(0, ir.INDEX),)
        tile = ir.Load(name, tidx, dtype)
        new[id(store)] = ir.Store(name, tidx, ir.Binary(binary.op, tile, rhs, dtype))
        wrap = [ir.For(p.var, p.lo, p.hi, p.body, kind=p.kind, step=p.step,
                       attrs={**p.attrs, **marks.get(id(p), {})})
                if isinstance(p, ir.For) else p for p in kept]
        inits.append(_wrap(wrap, ir.Store(name, tidx, ir.Const(ir.identity(op, dtype), dtype)),
                           _GPU_KEYS))
        element = ir.Load(store.array, store.index, old.dtype)
        if old.dtype != dtype:
            element = ir.Cast(element, dtype)
        combined = ir.Binary(ir.COMBINE[op], element, tile, dtype)
        if old.dtype != dtype:
            combined = ir.Cast(combined, old.dtype)          # rounded once
        combines.append(_wrap(wrap, ir.Store(store.array, store.index, combined), _GPU_KEYS))
        tiles.append((name, dtype, shape))
    attrs = _plain_attrs(loop)
    body = _replace(loop.body, new, marks)
    out = ir.Block(inits + [ir.For(loop.var, loop.lo, loop.hi, body, kind=loop.kind,
                                   step=loop.step, attrs=attrs)] + combines)
    for name, dtype, shape in reversed(tiles):
        out = ir.Allocate(name, dtype, shape, out, scope="thread")
    return out

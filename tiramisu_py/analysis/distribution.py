"""Distribution over MPI ranks (``s.distribute(loop)``): which buffers are
block-distributed, the legality of running the ranks in lockstep, and the
exact messages, all from the access relations and the dependences (isl).

**The rule as built.**  Every statement is distributed, each over one of
its declared loops ``v``; the loops around ``v`` (the *outer* loops, e.g. a
time loop) are the same for every statement, and the statements are the
*phases* of one outer iteration, in program order.  Each statement writes
one buffer whose dimension ``d`` is indexed by ``v`` itself (owner
computes): instance ``x`` runs on the rank whose block of that dimension
(:func:`tiramisu_py.runtime.mpi.block_range` over its extent ``E``) holds
``v(x)``.  A buffer some access indexes with ``v`` (in a single dimension,
of extent ``E``) is block-distributed along it; the others are replicated
and must not be written.

**Execution.**  The ranks run, for each outer iteration in lexicographic
order and each phase in order, their block of that phase, then exchange
the values that phase produced and other ranks read later; before the
first phase each rank receives the initial content it reads outside its
block (its halo).  **Legality**: this order keeps every dependence whose
source's (outer iteration, phase) precedes its sink's; a dependence from a
later phase to an earlier one of the same outer iteration (statements that
share ``v``'s loop) is refused, and so is a *flow* of a value between two
instances of the same phase and outer iteration with different ``v``
(they may run on two ranks at once: no message can order them).  The
refusal names a pair of instances.  Reads of other ranks' elements that do
not carry a value (anti- and output dependences across ranks) need no
order: every rank reads its own copy of its halo.

**Messages** (:func:`messages`): for a phase ``p``, a sender ``q`` and a
receiver ``r``, the elements written by ``q``'s instances of ``p`` whose
value (isl's last-writer flow) is read by an instance on ``r``, as a map
{ outer iteration -> elements }; the initial halo: the elements that
``r``'s reads of initial content touch in ``q``'s block.  Exact for affine
accesses; an over-approximated (may) access makes them supersets."""
from __future__ import annotations

from dataclasses import dataclass, field

import islpy as isl

from ..base.errors import IllegalScheduleError
from ..lang import affine
from ..lang.affine import NonAffine
from ..poly.dataflow import initial_reads, value_flow
from ..runtime.mpi import block_range
from .legality import Dependences


@dataclass
class DistributionPlan:
    loops: dict                    # statement -> its distributed (declared) loop
    outer: list                    # names of the loops around it, outermost first
    phases: list                   # statement names, in program order
    dims: dict                     # distributed buffer -> dimension
    extent: object                 # Expr: the distributed dimension's extent
    replicated: list = field(default_factory=list)   # buffer names
    model: object = None           # the model of the user's Function

    def phase_of(self, stmt):
        return self.phases.index(stmt)


def distributed_loops(f) -> dict:
    """statement -> loop, from the ``distribute`` commands of ``f``."""
    return {c.stmt: c.args[0] for c in f._commands if c.op == "distribute"}


def plan(f, model) -> DistributionPlan:
    """The distribution of ``f`` (which has ``distribute`` commands), checked
    (``ValueError`` for what the rule does not cover, ``IllegalScheduleError``
    for a dependence the lockstep execution cannot keep)."""
    loops = distributed_loops(f)
    missing = [s.name for s in f.statements if s.name not in loops]
    if missing:
        raise ValueError(f"distribute: every statement must be distributed; "
                         f"{', '.join(missing)} {'is' if len(missing) == 1 else 'are'} not "
                         "(call .distribute(loop) on it)")
    outer = None
    for s in f.statements:
        names = [v.name for v in s.vars]
        k = names.index(loops[s.name])
        if outer is None:
            outer = names[:k]
        elif names[:k] != outer:
            raise ValueError(f"distribute: the loops around the distributed loop must be the "
                             f"same for every statement: {s.name} has ({', '.join(names[:k])}), "
                             f"{f.statements[0].name} ({', '.join(outer)})")
        v = s.vars[k]
        for b in (v.lo, v.hi):
            if any(type(n).__name__ in ("Var", "Access") for n in _walk(b)):
                raise ValueError(f"distribute: the bounds of {s.name}'s loop {v.name!r} must "
                                 "depend on params only")
    dims, extents = {}, {}
    for m in model.stmts:
        v = loops[m.name]
        for a in m.accesses:
            for d, e in enumerate(a.index):
                try:
                    form = affine.linear(e, values=f.fixed)
                except NonAffine:
                    form = {n.name: 1 for n in _walk(e) if type(n).__name__ == "Var"}
                if form.get(v, 0) == 0:
                    continue
                if dims.setdefault(a.buffer.name, d) != d:
                    raise ValueError(f"distribute: {a.buffer.name} is indexed by the "
                                     f"distributed loops in dimensions {dims[a.buffer.name]} "
                                     f"and {d}; one dimension only")
                extents[a.buffer.name] = a.buffer.shape[d]
            if a.write and not a.implicit:
                d = dims.get(a.buffer.name)
                if d is None or affine.linear(a.index[d], values=f.fixed) != {v: 1}:
                    raise ValueError(f"distribute: {m.name} writes {a.what}; one index of the "
                                     f"written buffer must be the distributed loop {v!r} "
                                     "itself (owner computes)")
    texts = {b: affine.text(e, values=f.fixed) for b, e in extents.items()}
    if len(set(texts.values())) > 1:
        raise ValueError("distribute: the distributed dimensions must have one extent; "
                         + ", ".join(f"{b}: {t}" for b, t in sorted(texts.items())))
    buffers = {a.buffer.name for m in model.stmts for a in m.accesses}
    p = DistributionPlan(loops, outer, [s.name for s in f.statements], dims,
                         next(iter(extents.values())),
                         sorted(buffers - set(dims)), model)
    check(p, model)
    return p


def _walk(e):
    from ..lang.expr import walk
    return walk(e)


# ------------------------------------------------------------------ legality
def _key_map(p, model, with_loop=False):
    """{ S[x] -> [outer..., phase(, v)] } for every statement."""
    u = None
    for m in model.stmts:
        out = list(p.outer) + [str(p.phase_of(m.name))] + ([p.loops[m.name]] if with_loop else [])
        names = ", ".join(v.name for v in m.vars)
        mp = isl.Map(f"{model.prefix()}{{ {m.name}[{names}] -> [{', '.join(out)}] : "
                     f"{' and '.join(model.domain_constraints(m)) or 'true'} }}",
                     context=model.ctx).to_union_map()
        u = mp if u is None else u.union(mp)
    return u


def check(p, model):
    deps = Dependences(model)
    key = _key_map(p, model)
    later_first = key.lex_gt_union_map(key)
    same_step = key.apply_range(key.reverse())
    keyv = _key_map(p, model, with_loop=True)
    same_rank = keyv.apply_range(keyv.reverse())
    for buf, d in sorted(deps.by_buffer.items()):
        bad = d.intersect(later_first)
        if not bad.is_empty():
            raise IllegalScheduleError(
                f"distribute: {_pair(bad)} depends through {buf} on an instance of a later "
                "phase of the same step; the ranks run each phase in turn (statements that "
                "share the distributed loop cannot be distributed so)")
    for m in model.stmts:
        for a in m.accesses:
            if a.write:
                continue
            flow = value_flow(model, a.buffer.name)
            cross = flow.intersect(same_step).subtract(same_rank)
            if not cross.is_empty():
                raise IllegalScheduleError(
                    f"distribute: {_pair(cross)}: a value of {a.buffer.name} flows between two "
                    f"instances of the same phase and step with different "
                    f"{'/'.join(sorted(set(p.loops.values())))}; they may run on two ranks at "
                    "once and no message can order them")


def _pair(umap) -> str:
    """'src -> sink (with params)' of one pair of ``umap``."""
    pt = umap.wrap().sample_point()
    text = str(pt)
    head, body = text[:text.index("{")], text[text.index("{") + 1:text.rindex("}")].strip()
    if body.startswith("[") and body.endswith("]"):
        body = body[1:-1]
    params = head.split("->")[0].strip()
    return f"{body} (params {params})" if params and params != "[]" else body


# ------------------------------------------------------------------ messages
@dataclass
class Message:
    buffer: str
    peer: int
    phase: int | None              # None: the initial halo
    region: object                 # isl Map { O[outer] -> buffer[e] } or Set (initial)


def fixed_params(model, values) -> isl.Set:
    cons = [f"{p} = {int(values[p])}" for p in model.params if p in values]
    return isl.Set(f"{model.prefix()}{{ : {' and '.join(cons) or 'true'} }}", context=model.ctx)


def _owned(p, model, stmt, lo, hi):
    m = model.by_name[stmt]
    names = ", ".join(v.name for v in m.vars)
    return isl.Set(f"{model.prefix()}{{ {stmt}[{names}] : {lo} <= {p.loops[stmt]} < {hi} }}",
                   context=model.ctx)


def _outer_map(p, model, stmt):
    m = model.by_name[stmt]
    names = ", ".join(v.name for v in m.vars)
    return isl.Map(f"{model.prefix()}{{ {stmt}[{names}] -> O[{', '.join(p.outer)}] }}",
                   context=model.ctx)


def messages(p, values, size, rank):
    """(sends, receives, (lo, hi), (off, rows)) of ``rank`` of ``size`` for
    the params ``values``: lists of :class:`Message`; its block of the
    distributed extent and the rows it stores (block plus halo)."""
    model = p.model
    ctx = fixed_params(model, values)
    extent = affine_value(p.extent, values, model)
    blocks = [block_range(extent, size, r) for r in range(size)]
    sends, recvs = [], []
    for buf in sorted(p.dims):
        flow = value_flow(model, buf).intersect_params(ctx)
        writes = _write_maps(model, buf)
        for src in p.phases:
            if src not in writes:
                continue
            for q in range(size):
                for r in range(size):
                    if q == r or rank not in (q, r):
                        continue
                    own_q = _owned(p, model, src, *blocks[q])
                    sinks = None
                    for snk in p.phases:
                        s = _owned(p, model, snk, *blocks[r]).to_union_set()
                        sinks = s if sinks is None else sinks.union(s)
                    pairs = flow.intersect_domain(own_q.to_union_set()).intersect_range(sinks)
                    if pairs.is_empty():
                        continue
                    srcs = pairs.domain().extract_set(own_q.get_space())
                    region = _outer_map(p, model, src).intersect_domain(srcs).reverse() \
                        .apply_range(writes[src]).intersect_params(ctx)
                    msg = Message(buf, r if q == rank else q, p.phase_of(src), region)
                    (sends if q == rank else recvs).append(msg)
        init = initial_reads(model, buf).intersect_params(ctx)
        mine = None
        for snk in p.phases:
            s = _owned(p, model, snk, *blocks[rank]).to_union_set()
            mine = s if mine is None else mine.union(s)
        d = p.dims[buf]
        for q in range(size):
            if q == rank:
                continue
            # what rank reads of q's block, and what q's reads need of rank's
            for reader, owner, out in ((rank, q, recvs), (q, rank, sends)):
                readers = None
                for snk in p.phases:
                    s = _owned(p, model, snk, *blocks[reader]).to_union_set()
                    readers = s if readers is None else readers.union(s)
                elems = init.intersect_domain(readers).range()
                if elems.is_empty():
                    continue
                elems = _rows(elems, buf, d, blocks[owner])
                if not elems.is_empty():
                    out.append(Message(buf, q, None, elems))
    lo, hi = blocks[rank]
    rows_lo, rows_hi = lo, hi
    for msg in recvs:
        rng = msg.region if isinstance(msg.region, isl.Set) else msg.region.range()
        a, b = _row_span(rng, p.dims[msg.buffer])
        rows_lo, rows_hi = min(rows_lo, a), max(rows_hi, b)
    return sends, recvs, (lo, hi), (rows_lo, rows_hi - rows_lo)


def boundary(p, values, size, rank, src, snk):
    """The values of the distributed loop of ``rank``'s instances of phase
    ``snk`` that read a value another rank produced in phase ``src`` (over
    all outer iterations): the rows that must wait for that exchange; the
    others may run while it is in flight."""
    model = p.model
    ctx = fixed_params(model, values)
    extent = affine_value(p.extent, values, model)
    lo, hi = block_range(extent, size, rank)
    src_stmt, snk_stmt = p.phases[src], p.phases[snk]
    others = None
    for q in range(size):
        if q != rank:
            s = _owned(p, model, src_stmt, *block_range(extent, size, q)).to_union_set()
            others = s if others is None else others.union(s)
    rows = set()
    if others is None:
        return rows
    mine = _owned(p, model, snk_stmt, lo, hi).to_union_set()
    k = [v.name for v in model.by_name[snk_stmt].vars].index(p.loops[snk_stmt])
    for buf in sorted(p.dims):
        sinks = value_flow(model, buf).intersect_params(ctx).intersect_domain(others) \
            .intersect_range(mine).range()
        if sinks.is_empty():
            continue
        one = _only_set(sinks)
        n = one.dim(isl.dim_type.set)
        one = one.project_out(isl.dim_type.set, k + 1, n - k - 1).project_out(isl.dim_type.set, 0, k)
        pts = []
        one.foreach_point(
            lambda pt: pts.append(pt.get_coordinate_val(isl.dim_type.set, 0).to_python()))
        rows.update(pts)
    return rows


def _write_maps(model, buf):
    out = {}
    for m in model.stmts:
        for a in m.accesses:
            if a.write and not a.implicit and a.buffer.name == buf:
                out[m.name] = model.access_map(m, a)[0]
    return out


def _rows(elems, buf, d, block):
    """The part of the union set ``elems`` (of ``buf``) in rows ``block``."""
    s = _only_set(elems)
    n = s.dim(isl.dim_type.set)
    outs = ", ".join(f"o{k}" for k in range(n))
    rows = isl.Set(f"{{ {buf}[{outs}] : {block[0]} <= o{d} < {block[1]} }}", context=s.get_ctx())
    rows = rows.align_params(s.get_space())
    return s.intersect(rows)


def _only_set(u):
    sets = []
    u.foreach_set(sets.append)
    if len(sets) != 1:
        raise AssertionError(f"expected one set, got {len(sets)}")
    return sets[0]


def _row_span(s, d):
    s = _only_set(s) if isinstance(s, isl.UnionSet) else s
    if s.is_empty():
        return (1 << 62), -(1 << 62)
    lo = s.dim_min_val(d).to_python()
    hi = s.dim_max_val(d).to_python()
    return lo, hi + 1


def affine_value(e, values, model):
    form = affine.linear(e, values=dict(model.f.fixed, **values))
    if not affine.is_const(form):
        raise ValueError(f"distribute: the extent {affine.to_text(form)} needs params "
                         "that were not given")
    return form.get(1, 0)

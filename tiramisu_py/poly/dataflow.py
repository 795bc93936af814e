"""Value-based flow (isl ``compute_flow``, last writers): which buffers must
start zeroed, the flows between compute_at copies (:func:`value_flow`, used
by :mod:`tiramisu_py.poly.compute_at`), and the exact order rule of the
legality check (:func:`value_violations`: a schedule may run two accesses of
one element the other way when no read and no final value changes writer).

A temporary (or an output the kernel allocates) is zero-filled only when the
program may read an element before writing it; otherwise the fill is a wasted
pass over memory (for GEMM's packed panels and output, ~4% of the run).

The question is asked of the *original* program order.  A schedule that
compiles is legal: every read sees the same write as in program order (a
reassociated reduction's updates of one element aside, whose other
dependences are all kept), so a read with no earlier write in program order
is the only kind that can see initial content.  (A compute_at copy computes
all that its consumer's iteration reads, before it, so the consumer reads no
more initial content than in program order.)

Soundness: a write is a *must* source only when its access is exact (affine
index) and its statement's domain is affine in the parameters alone (no loop
bound loaded from an array: those bounds vary per instance, which the model's
per-access parameters do not express).  Everything else is a *may* source,
and every read, exact or over-approximated, is a sink.  A read with only may
sources counts as possibly reading initial content."""
from __future__ import annotations

import islpy as isl

from ..lang import affine
from ..lang.affine import NonAffine
from ..lang.schedule import initial_state
from .order import without_common_constants


def _accesses(model, buffer):
    """(reads, must-writes, may-writes) of ``buffer``: lists of isl Maps,
    the reads without repeats."""
    reads, must, may = [], [], []
    for m in model.stmts:
        for a in m.accesses:
            if a.buffer.name != buffer:
                continue
            amap, exact = model.access_map(m, a)
            if not a.write:
                reads.append(amap)
            elif exact and not m.bound_params:
                must.append(amap)
            else:
                may.append(amap)
    return _distinct(reads), must, may


def _solve(reads, must_u, may_u, sched):
    """[(UnionFlow of one read access)] under the schedule map ``sched``."""
    sched = without_common_constants(sched)[0]          # the same order
    out = []
    for sink in reads:
        info = isl.UnionAccessInfo.from_sink(_as_union(sink))
        if must_u is not None:
            info = info.set_must_source(must_u)
        if may_u is not None:
            info = info.set_may_source(may_u)
        out.append(info.set_schedule_map(sched).compute_flow())
    return out


def _flow(model, buffer):
    """(flow, no_source, reads, must-writes) of ``buffer`` in program order,
    cached on the model: ``flow`` is the { write -> read } may-dependence and
    ``no_source`` the reads that may see initial content (both None when
    nothing reads it or nothing writes it); the other two are union maps or
    None.  Each read access is its own isl ``compute_flow`` problem (sinks
    are independent): one problem with many accesses, such as the arms of a
    select over an unrolled index, took 20x longer.  A read that names a
    computation's value (:func:`_meaning`) flows from that value's write."""
    cache = model.__dict__.setdefault("_flows", {})
    if buffer not in cache:
        reads, must, may = _accesses_of(model, buffer)
        meaning = _meaning(model, buffer)
        sinks, flow, no_source = _union(reads), None, None
        if meaning is not None:
            reads = meaning.memory_reads
        if sinks is not None and (must or may):
            sched = model.schedule_map(initial_state(model))
            results = _solve(reads, _union(must), _union(may), sched)
            flow = _union([r.get_may_dependence() for r in results] +
                          ([meaning.flow] if meaning is not None and meaning.flow else []))
            no_source = _union([r.get_may_no_source() for r in results]) \
                or isl.UnionMap("{}", context=model.ctx)
        cache[buffer] = (flow, no_source, sinks, _union(must))
    return cache[buffer]


class _Meaning:
    """What the reads of a buffer mean when some read names a computation's
    value that shares its storage: ``flow`` { write -> read } and ``events``
    { write -> [read -> element] } of those reads (the write of the value
    each one names, the last in program order), ``per_access`` the events of
    each such read access apart (one instance may name two values stored in
    one element: each access must see its own), ``memory_reads`` the other
    reads (and those naming a value that nothing computes before them: they
    read memory), as maps."""

    def __init__(self, flow, per_access, memory_reads):
        self.flow, self.per_access, self.memory_reads = flow, per_access, memory_reads
        self.events = _union(per_access)


def _meaning(model, buffer):
    """Reads of a computation ``P[..]`` mean the value of that instance of P
    (the last write of the element of P it names, in program order), not
    whatever ``P``'s storage holds when they run.  The two agree unless P's
    storage is folded (``store_in`` maps two of P's elements to one) or
    shared (another statement writes the buffer): then this is the
    :class:`_Meaning` of ``buffer``'s reads; else None (every read means its
    memory in program order).  None too when a write is not exact (indirect
    index, a loop bound loaded from an array) or a named index is not affine:
    those buffers keep every memory dependence in order."""
    cache = model.__dict__.setdefault("_meanings", {})
    if buffer not in cache:
        cache[buffer] = _find_meaning(model, buffer)
    return cache[buffer]


def _find_meaning(model, buffer):
    writes, named = [], {}
    for m in model.stmts:
        for a in m.accesses:
            if a.buffer.name != buffer:
                continue
            if a.write:
                writes.append((m, a))
            elif a.value_of is not None:
                named.setdefault(a.value_of, []).append((m, a))
    if not named or not writes:
        return None
    comps = model.f.computations
    if all(a.value_of in named and len(named) == 1 for _, a in writes) \
            and getattr(comps.get(next(iter(named))), "_auto_buffer", False):
        return None                    # a computation in a buffer of its own
    real, virtual = {}, {}
    for m, a in writes:
        amap, exact = model.access_map(m, a)
        vmap = model.value_map(m, a)
        if not exact or m.bound_params or vmap is None:
            return None
        real[id(a)], virtual[id(a)] = amap, vmap
    folded = []
    for p in named:
        group = [a for _, a in writes if a.value_of == p]
        store = _union([virtual[id(a)].reverse().apply_range(real[id(a)]) for a in group])
        if len(group) != len(writes) or store is None or not store.is_injective():
            folded.append(p)
    if not folded:
        return None
    sched = without_common_constants(model.schedule_map(initial_state(model)))[0]
    flows, events, memory = [], [], []
    for m, a in [r for rs in named.values() for r in rs]:
        amap, _ = model.access_map(m, a)
        vmap = model.value_map(m, a) if a.value_of in folded else None
        if vmap is None:
            memory.append(amap)
            continue
        sources = _union([virtual[id(w)] for _, w in writes if w.value_of == a.value_of])
        res = isl.UnionAccessInfo.from_sink(vmap.to_union_map()).set_must_source(sources) \
            .set_schedule_map(sched).compute_flow()
        dep = res.get_may_dependence()
        flows.append(dep)
        events.append(dep.apply_range(amap.domain_map().reverse().to_union_map()))
        alone = amap.to_union_map().intersect_domain(res.get_may_no_source().domain())
        if not alone.is_empty():
            memory.append(alone)
    memory += [model.access_map(m, a)[0] for m in model.stmts for a in m.accesses
               if a.buffer.name == buffer and not a.write and a.value_of is None]
    return _Meaning(_union(flows), events, _distinct(memory))


def value_flow(model, buffer) -> isl.UnionMap:
    """{ write -> read }: every read of ``buffer`` paired with the write(s)
    whose value it may see, the last ones before it in program order (writes
    that may not happen do not hide earlier ones)."""
    flow = _flow(model, buffer)[0]
    return isl.UnionMap("{}", context=model.ctx) if flow is None else flow


def initial_reads(model, buffer) -> isl.UnionMap:
    """{ read instance -> element of ``buffer`` }: the reads that may see the
    buffer's initial content (no write before them in program order)."""
    flow, no_source, sinks, _ = _flow(model, buffer)
    if sinks is None:
        return isl.UnionMap("{}", context=model.ctx)
    return sinks if flow is None else no_source


def reads_initial(model, buffer) -> bool:
    """True when some read of ``buffer`` may see its initial content."""
    flow, no_source, sinks, _ = _flow(model, buffer)
    if sinks is None:
        return False
    return flow is None or not no_source.is_empty()


def writes_all(model, buffer) -> bool:
    """True when the must-writes cover every element of ``buffer``'s shape,
    for every value of the parameters."""
    must = _flow(model, buffer.name)[3]
    box = _box(model, buffer)
    if must is None or box is None:
        return False
    return box.to_union_set().is_subset(must.range())


def needs_zero(model, buffer, output: bool) -> bool:
    """A temporary needs zeroing when it may be read before written; an
    output also when some element may never be written (it is returned)."""
    return reads_initial(model, buffer.name) or (output and not writes_all(model, buffer))


def exact_writes(model, buffer) -> bool:
    """True when every write of ``buffer`` is a must-write (exact index,
    domain affine in the params): the last writer of each element is then
    known exactly under any schedule."""
    return not _accesses_of(model, buffer)[2]


def value_violations(model, buffer, sched, broken, live_out) -> isl.UnionMap:
    """The pairs of ``broken`` (memory dependences through ``buffer``, in
    program order, that the schedule map ``sched`` runs the other way) that
    change what the program computes; empty iff ``sched`` is legal for
    ``buffer``.  Exact when :func:`exact_writes` holds (reads may be
    over-approximated: every element they may read is checked).

    ``sched`` computes the same values iff every read sees the same write as
    in program order (or, in both, none: initial content) and, when the
    buffer is ``live_out`` (the caller sees it), every element's last write
    is the same.  A broken pair that does neither (a write overwritten
    before any read, run after the write that overwrites it, or a temporary's
    value that nothing reads) changes nothing.  The pairs returned, each a
    broken memory dependence that explains the change: a flow (write ->
    read) run the other way; a read now seeing a write that came after it
    (read -> that write); a read now seeing an earlier write than its own
    (that write -> its own); a last write no longer last (the new last ->
    the old)."""
    cache = model.__dict__.setdefault("_value_events", {})
    if buffer not in cache:
        orig = model.schedule_map(initial_state(model))
        cache[buffer] = (_meant_events(model, buffer, orig), _last_writes(model, buffer, orig))
    before, last = cache[buffer]
    out = before.range_factor_domain().intersect(broken)
    lost = _events_memo(model, buffer, sched).subtract(before)
    if not lost.is_empty():
        out = out.union(lost.range_factor_domain().reverse().intersect(broken))
        out = out.union(lost.apply_range(before.reverse()).intersect(broken))
    if live_out:
        out = out.union(_last_writes(model, buffer, sched).reverse().apply_range(last)
                        .intersect(broken))
    return out


def memory_view(model, buffer):
    """What ``buffer``'s memory holds in program order, as far as the program
    can tell: (``flow`` { write -> read } of the reads that name no
    computation's value, ``unwritten`` those reads' instances that may see
    initial content, ``last`` { element -> write }: the last write of each
    element, what the caller finds after the kernel), or None when a write
    is not exact (then nothing can be compared).  Two models of one program
    whose views of a buffer are equal give its memory the same meaning: a
    ``store_in`` that moves a computation's values out of an array keeps
    every other reader and the array's final content when the views agree."""
    reads, must = [], []
    for m in model.stmts:
        for a in m.accesses:
            if a.buffer.name != buffer:
                continue
            amap, exact = model.access_map(m, a)
            if a.write:
                if not exact or m.bound_params:
                    return None
                must.append(amap)
            elif a.value_of is None:
                reads.append(amap)
    sched = model.schedule_map(initial_state(model))
    empty = isl.UnionMap("{}", context=model.ctx)
    flow = unwritten = empty
    if reads and must:
        results = _solve(_distinct(reads), _union(must), None, sched)
        flow = _union([r.get_may_dependence() for r in results])
        unwritten = _union([r.get_may_no_source() for r in results])
    elif reads:
        unwritten = _union(reads)
    last = _last_writes(model, buffer, sched) if must else empty
    return flow, unwritten.domain(), last


def _accesses_of(model, buffer):
    """:func:`_accesses`, cached on the model."""
    cache = model.__dict__.setdefault("_accesses", {})
    if buffer not in cache:
        cache[buffer] = _accesses(model, buffer)
    return cache[buffer]


def _meant_events(model, buffer, orig) -> isl.UnionMap:
    """:func:`_events` in program order (``orig``) as the program means them:
    a read that names a computation's value sees the write of that value
    (:func:`_meaning`)."""
    meaning = _meaning(model, buffer)
    if meaning is None:
        return _events(model, buffer, orig)
    out = _events(model, buffer, orig, meaning.memory_reads)
    return out if meaning.events is None else out.union(meaning.events)


def shares_named_values(model, buffer) -> bool:
    """True when a read of ``buffer`` names a computation's value that shares
    its storage (:func:`_meaning`): only such a buffer can have
    :func:`storage_violations`."""
    return _meaning(model, buffer) is not None


def storage_violations(model, buffer, sched) -> list:
    """[(bad, meant)] for each read access that names a computation's value
    and, under the schedule map ``sched``, sees another write than that
    value's (or none) somewhere: ``bad`` { the write it sees -> [read ->
    element] }, ``meant`` that access's { value's write -> [read ->
    element] }: storage that ``store_in`` folded or shared overwrites the
    value before the read.  Empty when ``buffer``'s reads mean its memory
    (:func:`_meaning`).  Per access: one instance may name two values kept
    in one element, and only one of them can be there."""
    meaning = _meaning(model, buffer)
    if meaning is None:
        return []
    now = _events_memo(model, buffer, sched)
    out = []
    for meant in meaning.per_access:
        bad = now.intersect_range(meant.range()).subtract(meant)
        if not bad.is_empty():
            out.append((bad, meant))
    return out


def _events(model, buffer, sched, reads=None) -> isl.UnionMap:
    """{ write -> [read -> element] }: the write whose value each read of
    each element sees under ``sched`` (must-writes only); ``reads``: those
    read accesses only (default: all)."""
    all_reads, must, _ = _accesses_of(model, buffer)
    reads = all_reads if reads is None else reads
    if not reads or not must:
        return isl.UnionMap("{}", context=model.ctx)
    return _union([r.get_full_may_dependence() for r in _solve(reads, _union(must), None, sched)])


def _events_memo(model, buffer, sched) -> isl.UnionMap:
    """:func:`_events`, the last few schedules' cached on the model (a refusal
    checks its schedule again to find the command to blame)."""
    memo = model.__dict__.setdefault("_value_events_memo", {})
    key = (buffer, sched.to_str())
    if key not in memo:
        if len(memo) >= 16:
            memo.pop(next(iter(memo)))
        memo[key] = _events(model, buffer, sched)
    return memo[key]


def _last_writes(model, buffer, sched) -> isl.UnionMap:
    """{ element -> write }: the last write of each element under ``sched``
    (an injective schedule map)."""
    writes = _union(_accesses_of(model, buffer)[1])
    if writes is None:
        return isl.UnionMap("{}", context=model.ctx)
    sched = without_common_constants(sched)[0]          # the same order
    latest = writes.reverse().apply_range(sched).lexmax()
    return latest.apply_range(sched.reverse()).intersect_range(writes.domain())


def _as_union(m):
    return m.to_union_map() if isinstance(m, isl.Map) else m


def _distinct(maps):
    """``maps`` without repeats (the same access written twice, in two arms
    of a select, counts once)."""
    seen, out = set(), []
    for m in maps:
        key = str(m)
        if key not in seen:
            seen.add(key)
            out.append(m)
    return out


def _union(maps):
    u = None
    for m in maps:
        m = _as_union(m)
        u = m if u is None else u.union(m)
    return u


def _box(model, buffer):
    """{ buffer[o...] : 0 <= o_k < shape_k } within the model's context, or
    None if a shape is not affine."""
    cons, outs = [], []
    for k, s in enumerate(buffer.shape):
        try:
            size = affine.text(s, values=model.f.fixed)
        except NonAffine:
            return None
        outs.append(f"o{k}")
        cons.append(f"0 <= o{k} < {size}")
    text = (f"{model.prefix()}{{ {buffer.name}[{', '.join(outs)}] : "
            f"{' and '.join(cons) or 'true'} }}")
    return isl.Set(text, context=model.ctx).intersect_params(model.context())

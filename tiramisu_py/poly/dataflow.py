"""Value-based flow in program order (isl ``compute_flow``, last writers):
which buffers must start zeroed, and the flows between compute_at copies
(:func:`value_flow`, used by :mod:`tiramisu_py.poly.compute_at`).

A temporary (or an output the kernel allocates) is zero-filled only when the
program may read an element before writing it; otherwise the fill is a wasted
pass over memory (for GEMM's packed panels and output, ~4% of the run).

The question is asked of the *original* program order.  A schedule that
compiles is legal: it keeps every memory dependence except the reduction
self-dependences it may reassociate, so every read sees the same write as in
program order, and a read with no earlier write in program order is the only
kind that can see initial content.  (A compute_at copy computes all that its
consumer's iteration reads, before it, so the consumer reads no more initial
content than in program order.)

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


def _flow(model, buffer):
    """(flow, no_source, reads, must-writes) of ``buffer`` in program order,
    cached on the model: ``flow`` is the { write -> read } may-dependence and
    ``no_source`` the reads that may see initial content (both None when
    nothing reads it or nothing writes it); the other two are union maps or
    None.  Each read access is its own isl ``compute_flow`` problem (sinks
    are independent): one problem with many accesses, such as the arms of a
    select over an unrolled index, took 20x longer."""
    cache = model.__dict__.setdefault("_flows", {})
    if buffer not in cache:
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
        reads = _distinct(reads)
        sinks, flow, no_source = _union(reads), None, None
        if sinks is not None and (must or may):
            sched = model.schedule_map(initial_state(model))
            must_u, may_u = _union(must), _union(may)
            flows, missing = [], []
            for sink in reads:
                info = isl.UnionAccessInfo.from_sink(_as_union(sink))
                if must_u is not None:
                    info = info.set_must_source(must_u)
                if may_u is not None:
                    info = info.set_may_source(may_u)
                result = info.set_schedule_map(sched).compute_flow()
                flows.append(result.get_may_dependence())
                missing.append(result.get_may_no_source())
            flow, no_source = _union(flows), _union(missing)
        cache[buffer] = (flow, no_source, sinks, _union(must))
    return cache[buffer]


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

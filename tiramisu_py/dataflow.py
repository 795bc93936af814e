"""Which buffers must start zeroed: value-based flow in program order.

A temporary (or an output the kernel allocates) is zero-filled only when the
program may read an element before writing it; otherwise the fill is a wasted
pass over memory (for GEMM's packed panels and output, ~4% of the run).

The question is asked of the *original* program order.  A schedule that
compiles is legal: it keeps every memory dependence except the reduction
self-dependences it may reassociate, so every read sees the same write as in
program order, and a read with no earlier write in program order is the only
kind that can see initial content.

Soundness: a write is a *must* source only when its access is exact (affine
index) and its statement's domain is affine in the parameters alone (no loop
bound loaded from an array: those bounds vary per instance, which the model's
per-access parameters do not express).  Everything else is a *may* source,
and every read, exact or over-approximated, is a sink.  A read with only may
sources counts as possibly reading initial content."""
from __future__ import annotations

import islpy as isl

from . import affine
from .affine import NonAffine
from .schedule import initial_state


def value_flow(model, buffer) -> isl.UnionMap:
    """{ write -> read }: every read of ``buffer`` paired with the write(s)
    whose value it may see, the last ones before it in program order (writes
    that may not happen do not hide earlier ones).  Cached on the model."""
    cache = model.__dict__.setdefault("_value_flow", {})
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
        sinks = _union(reads)
        if sinks is None or (not must and not may):
            cache[buffer] = isl.UnionMap("{}", context=model.ctx)
        else:
            info = isl.UnionAccessInfo.from_sink(sinks)
            if must:
                info = info.set_must_source(_union(must))
            if may:
                info = info.set_may_source(_union(may))
            flow = info.set_schedule_map(model.schedule_map(initial_state(model))).compute_flow()
            cache[buffer] = flow.get_may_dependence()
    return cache[buffer]


def _union(maps):
    u = None
    for m in maps:
        m = m.to_union_map() if isinstance(m, isl.Map) else m
        u = m if u is None else u.union(m)
    return u


class InitialReads:
    """Per buffer: may the program read an element it has not written, and
    does it write every element of its shape."""

    def __init__(self, model, deps):
        self.model, self.deps = model, deps
        self._schedule = model.schedule_map(initial_state(model))
        self._reads, self._must, self._may = {}, {}, {}
        for m in model.stmts:
            for k, a in enumerate(m.accesses):
                amap = deps.maps[(m.name, k)]
                name = a.buffer.name
                if not a.write:
                    self._reads.setdefault(name, []).append(amap)
                elif deps.exact.get((m.name, k), False) and not m.bound_params:
                    self._must.setdefault(name, []).append(amap)
                else:
                    self._may.setdefault(name, []).append(amap)

    def reads_initial(self, name) -> bool:
        """True when some read of ``name`` may see the buffer's initial content."""
        sinks = _union(self._reads.get(name, []))
        if sinks is None:
            return False
        must, may = _union(self._must.get(name, [])), _union(self._may.get(name, []))
        if must is None:
            return True
        info = isl.UnionAccessInfo.from_sink(sinks).set_must_source(must)
        if may is not None:
            info = info.set_may_source(may)
        flow = info.set_schedule_map(self._schedule).compute_flow()
        return not flow.get_may_no_source().is_empty()

    def writes_all(self, buffer) -> bool:
        """True when the must-writes cover every element of ``buffer``'s
        shape, for every value of the parameters."""
        must = _union(self._must.get(buffer.name, []))
        if must is None:
            return False
        written = must.range()
        box = _box(self.model, buffer)
        if box is None:
            return False
        return box.to_union_set().is_subset(written)

    def needs_zero(self, buffer, output: bool) -> bool:
        """A temporary needs zeroing when it may be read before written; an
        output also when some element may never be written (it is returned)."""
        if self.reads_initial(buffer.name):
            return True
        return output and not self.writes_all(buffer)


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

"""Reads guarded by their own bounds: ``select(0 <= iy < H & ..., A[.., iy, ix], 0)``,
the zero padding of a convolution or a stencil written as a condition.  A
copy of ``A`` that extends past its edges and holds the constant there
reads the same values without the condition (``cache_at``'s padded copy):
this module proves the condition is exactly the bounds (isl, over the
statement's iterations) and measures how far the reads reach past each edge."""
from __future__ import annotations

from dataclasses import dataclass

import islpy as isl

from ..lang import affine
from ..lang.affine import NonAffine
from ..lang.expr import Access, Const, Select, walk
from .footprint import constant_value
from .model import build_model, condition_text


@dataclass
class Padding:
    guards: list        # the Select nodes whose condition is their read's bounds
    pads: list          # per dimension (below 0, past the last index): constants >= 0
    fill: object        # the constant the guards give outside


def same_access(a, b) -> bool:
    """``a`` and ``b`` read the same target with the same index expressions."""
    return a.target is b.target and list(map(repr, a.indices)) == list(map(repr, b.indices))


def padded_reads(f, stmt, source, only=None):
    """The :class:`Padding` of ``stmt``'s reads of the buffer ``source``
    (``only``: those written as that access) when at least one is guarded
    by its own bounds, all such guards give the same constant, and how far
    every read reaches past each edge is a constant; else None."""
    def reads(a):
        return a.target is source and (only is None or same_access(a, only))
    selects = [n for n in walk(stmt.value) if isinstance(n, Select) and isinstance(n.a, Access)
               and reads(n.a) and isinstance(n.b, Const)]
    if not selects:
        return None
    model = build_model(f)
    m = model.by_name[stmt.name]
    values = dict(f.fixed)
    dom = model.domain(m).intersect_params(model.context())
    head = f"{model.prefix()}{{ {m.name}[{', '.join(v.name for v in m.vars)}]"

    def text(e):
        return affine.text(e, values=values)
    guards, fills = [], set()
    try:
        shape = [text(s) for s in source.shape]
        for n in selects:
            idx = [text(i) for i in n.a.indices]
            inside = " and ".join(f"0 <= {i} < {s}" for i, s in zip(idx, shape))
            cond = isl.Set(f"{head} : {condition_text(n.cond, True, values)} }}", context=model.ctx)
            bounds = isl.Set(f"{head} : {inside} }}", context=model.ctx)
            if cond.intersect(dom).is_equal(bounds.intersect(dom)):
                guards.append(n)
                fills.add(n.b.value)
        if not guards or len(fills) != 1:
            return None
        pads = []
        every = [n for n in walk(stmt.value) if isinstance(n, Access) and reads(n)]
        for d, size in enumerate(shape):
            below = past = 0
            for a in every:
                i = text(a.indices[d])
                low = constant_value(_image(head, f"{i}", dom, model).dim_min(0))
                high = constant_value(_image(head, f"{i} - ({size})", dom, model).dim_max(0))
                if low is None or high is None:
                    return None
                below, past = max(below, -low), max(past, high + 1)
            pads.append((below, past))
    except (NonAffine, isl.Error):
        return None
    return Padding(guards, pads, fills.pop())


def _image(head, expr, dom, model):
    return isl.Map(f"{head} -> [{expr}] }}", context=model.ctx).intersect_domain(dom).range()

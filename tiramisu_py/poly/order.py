"""Schedule maps reduced to the order they define.

A position of a schedule that every statement fixes to one same constant
orders nothing: any two instances compare the same without it, and isl
generates no loop for it.  A 2d+1 schedule's positions are mostly such
constants; isl's AST generation, dataflow and lexicographic orders take
about half the time without them."""
from __future__ import annotations

import islpy as isl


def common_constants(maps) -> list:
    """The output positions that each of the isl Maps ``maps`` (one schedule
    space's width) fixes to one same constant, as far as their constraints
    show it plainly."""
    if not maps:
        return []
    out = []
    for p in range(maps[0].dim(isl.dim_type.out)):
        value = None
        for mp in maps:
            v = mp.plain_get_val_if_fixed(isl.dim_type.out, p)
            if v.is_nan() or value is not None and not v.eq(value):
                break
            value = v
        else:
            out.append(p)
    return out


def without_positions(mp, positions):
    """The isl Map ``mp`` without the output ``positions`` (ascending)."""
    for p in reversed(positions):
        mp = mp.project_out(isl.dim_type.out, p, 1)
    return mp


def without_common_constants(sched):
    """(the union schedule map ``sched`` without its :func:`common_constants`,
    the positions kept) or (``sched``, None) when there are none."""
    maps = []
    sched.foreach_map(maps.append)
    common = common_constants(maps)
    if not common:
        return sched, None
    out = None
    for mp in maps:
        u = without_positions(mp, common).to_union_map()
        out = u if out is None else out.union(u)
    return out, [p for p in range(maps[0].dim(isl.dim_type.out)) if p not in common]

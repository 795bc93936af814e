"""Warp-level tiling: kernels whose threads are one linear index.

``bind(loop, "warp.x" | "warp.y" | "lane.x" | "lane.y")`` puts a level
between the block and the thread: the lane loops of a statement split one
warp's 32 threads (their extents multiply to 32 exactly), the warp loops
split the block's warps.  A kernel with such a loop is *linear*: its block is
one-dimensional (``blockDim = (T, 1, 1)``) and every statement's thread loops
decompose ``threadIdx.x``, the fastest first:

* warp-tiled statements: ``lane.x``, ``lane.y``, ``warp.x``, ``warp.y``
  (so ``threadIdx.x / 32`` is the warp and ``threadIdx.x % 32`` the lane);
* the other statements of the kernel (e.g. the cooperative copies of
  ``cache_shared``): ``thread.x``, ``thread.y``, ``thread.z``;

with strides the product of the extents before it: ``v = min + (tid /
stride) % extent`` (no ``%`` on the slowest).  A statement's extents are its
own (the copies of A and B may shape the same threads differently); loops
shared by fused statements must agree.  T is the largest product; threads
beyond a statement's product skip it.

The legality check compares the linear index (an affine expression of the
loop values: ``tid = sum (v - min) * stride``), so barriers are derived and
races refused exactly as for x/y/z blocks.
"""
from __future__ import annotations

from ..base.errors import IllegalScheduleError
from ..lang.schedule import gpu_tags

XYZ = ("x", "y", "z")
WARP_LEVEL = ("lane.x", "lane.y", "warp.x", "warp.y")   # fastest first
WARP = 32


def is_warp_axis(axis) -> bool:
    return axis in WARP_LEVEL


def linear_kernel(state, stmts) -> bool:
    """True when a statement of the kernel binds a warp or lane loop."""
    return any(is_warp_axis(axis) for s in stmts for _, level, axis, _ in gpu_tags(state[s])
               if level == "thread")


def layout(k, state, commands, ranges):
    """Checks a linear kernel ``k`` (``ranges``: stmt -> {axis: (lo, hi)} of its
    thread loops) and records ``k.linear`` (threads per block) and
    ``k.stmt_threads``: stmt -> {axis: (min, extent, stride)}."""
    k.stmt_threads = {}
    total = 1
    for s in k.stmts:
        st = state[s]
        tags = [(j, axis, tag) for j, level, axis, tag in gpu_tags(st) if level == "thread"]
        axes = [a for _, a, _ in tags]
        warp = [a for a in axes if is_warp_axis(a)]
        if warp and len(warp) != len(axes):
            tag = next(t for _, a, t in tags if not is_warp_axis(a))
            raise IllegalScheduleError(
                f"{commands[tag.command].text}: {s} binds warp/lane loops and thread.x/y/z "
                "loops; a statement's threads are either a warp tile (warp.* and lane.*) or "
                "x/y/z, not both")
        order = WARP_LEVEL if warp else XYZ
        if warp:
            lanes = [a for a in axes if a.startswith("lane.")]
            n = 1
            for a in lanes:
                lo, hi = ranges[s][a]
                n *= hi - lo + 1
            if n != WARP:
                tag = tags[-1][2]
                raise IllegalScheduleError(
                    f"{commands[tag.command].text}: the lane loops of {s} "
                    f"({', '.join(st.loops[j].name for j, a, _ in tags if a.startswith('lane.')) or 'none'}) "
                    f"have {n} threads; a warp tile's lane loops cover one warp: their extents "
                    f"multiply to {WARP}")
        info, stride = {}, 1
        for a in order:
            if a in ranges.get(s, {}):
                lo, hi = ranges[s][a]
                info[a] = (lo, hi - lo + 1, stride)
                stride *= hi - lo + 1
        k.stmt_threads[s] = info
        total = max(total, stride)
    k.linear = total
    # loops shared by fused statements decompose the index the same way
    seen = {}
    for s in k.stmts:
        st = state[s]
        for j, level, axis, tag in gpu_tags(st):
            if level != "thread":
                continue
            key = (tuple(st.consts[:j + 1]), j)
            got = k.stmt_threads[s][axis]
            if key in seen and seen[key][1] != got:
                raise IllegalScheduleError(
                    f"{commands[tag.command].text}: thread loop {st.loops[j].name!r} is shared by "
                    f"{seen[key][0]} and {s}, whose thread loops decompose the thread index "
                    "differently (extents or strides); give them the same thread loops")
            seen.setdefault(key, (s, got))
    return total


def linear_tid(k, stmt, var, pos_of):
    """The linear thread index of ``stmt``'s instance, as isl text over the
    schedule variables ``{var}{p}``."""
    parts = []
    for axis, (lo, _, stride) in k.stmt_threads[stmt].items():
        p = pos_of[stmt][axis]
        term = f"({var}{p} - {lo})" if lo else f"{var}{p}"
        parts.append(term if stride == 1 else f"{stride}*{term}")
    return " + ".join(parts) or "0"

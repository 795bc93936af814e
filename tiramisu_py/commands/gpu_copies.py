"""The GPU copy commands: ``cache_shared(src, at_loop)`` (a tile per block in
shared memory, copied by the block's threads; see its docstring below) and
``cache_local(src, at_loop)``: per-thread copies (register fragments), whose
rule the GPU legality check applies (:mod:`tiramisu_py.analysis.gpu_plan`).

The command is a ``cache_at`` whose copy is made by one thread for itself:

* ``at_loop`` is the innermost thread loop of the consumer or a serial loop
  inside it (a thread's own loop, e.g. the ``k1`` step of a micro-tile).
  One iteration of such a loop belongs to exactly one thread, so the
  footprint it reads is that thread's (the 4 A and 4 B values a 4 x 4
  micro-tile reads per k step).  A block-level loop would give the whole
  block's footprint, which is :meth:`cache_shared`'s job (a cooperative copy
  into one tile per block).
* The copy (a compute_at copy, so an isl map of the consumer's schedule like
  ``cache_at``) is stored in a local array, one per thread (``Buffer.memory
  = "local"``), shaped by the exact footprint of one iteration: per
  dimension the bounding box of the footprint (isl, the largest width over
  iterations and param values) compressed by its stride (isl's stride of the
  footprint with the outer loops as parameters), indexed ``(v // stride) %
  count`` (injective inside one iteration: ``v = offset + stride * r``).
  A footprint without a constant bound, or of more than
  :data:`MAX_LOCAL_ELEMENTS` elements, is refused (registers).
* ``src`` must not be written inside ``at_loop`` (the copy made at the start
  of an iteration would be stale).  Writers outside it (a shared tile's
  cooperative copy) are ordered by the GPU check like any other dependence:
  a barrier where the copy's read of another thread's write is carried
  outside the thread loops, a refusal inside them.
* ``src`` may be a copy already computed at the consumer (``A_shared``
  after ``cache_shared``): a computed-at copy has one reader, so its
  compute_at is retargeted to the new per-thread copy, at the same loop (a
  nested compute_at), and moved after that copy's own compute_at.

The rule (:func:`tiramisu_py.analysis.gpu_plan.check_local`, at
``compile()``): every value read from a local array was written by the same
thread of the same block of the same launch (exact last-writer flow,
:func:`tiramisu_py.poly.dataflow.value_flow`), and no read sees its initial
content.  Then each thread's private array holds what
the one serial array holds on the CPU, its storage conflicts between
threads and blocks are no dependences (the GPU check skips the array), and
no barrier is placed for it.
"""
from __future__ import annotations

import dataclasses
import math

from ..analysis.gpu_plan import AXES
from ..analysis.gpu_threads import is_warp_axis
from ..lang.expr import wrap
from ..lang.program import Buffer, Computation, check_name
from ..lang.schedule import attaching_command, bound_to
from ..poly.footprint import footprint_strides, footprint_widths
from .copies import make_copy
from .state import extent_of, state_of

MAX_LOCAL_ELEMENTS = 256           # elements of one per-thread copy (registers)


def cache_local(stmt, source, loop, name):
    f = stmt.function
    text = f"{stmt.name}.cache_local({getattr(source, 'name', source)}, {loop})"
    if not isinstance(source, (Buffer, Computation)):
        raise TypeError(f"{text}: source must be a buffer or computation")
    if name is not None:
        check_name(name, f"{text}: name=: computation")
    state = state_of(f)
    st = state[stmt.name]
    st.find(loop, text, stmt.name)
    names = [lp.name for lp in st.loops]
    k = names.index(loop)
    tags = {n: t for n, t in st.tags.items() if t.kind in ("gpu_block", "gpu_thread")}
    threads = [j for j, n in enumerate(names) if n in tags and tags[n].kind == "gpu_thread"]
    if not threads:
        raise ValueError(f"{text}: {stmt.name} has no thread loop; cache_local makes a per-thread "
                         "copy on the GPU: bind the thread loops first (bind / gpu_tile), or use "
                         "cache_at on the CPU")
    if k < threads[-1]:
        raise ValueError(f"{text}: {loop!r} is outside the thread loop {names[threads[-1]]!r}; "
                         "a per-thread copy is made at the innermost thread loop or a serial "
                         "loop inside it (one thread's footprint); for a copy shared by the "
                         "block's threads use cache_shared")
    writers = [w.name for w in f.statements if w.name in state and _writes(w, source)
               and state[w.name].consts[:k + 1] == st.consts[:k + 1]
               and len(state[w.name].loops) > k]       # shares the loops up to ``loop``
    if writers:
        raise ValueError(f"{text}: {', '.join(writers)} writes {source.name!r} inside {loop!r}, "
                         "so a copy made at the start of each iteration would be stale")
    at = getattr(state.get(source.name), "at", None) if isinstance(source, Computation) else None
    copy_ = make_copy(stmt, source, loop, name or f"{source.name}_local")
    if at is not None and at[1] == stmt.name:
        # ``source`` is itself a copy computed at ``stmt`` (a shared tile):
        # its one reader is now the per-thread copy, so it is computed at that
        # copy, at the same loop (a nested compute_at)
        _retarget(f, source, copy_)
    widths = footprint_widths(f, copy_.name)
    if None in widths:
        raise ValueError(f"{text}: the part of {source.name!r} one thread reads in one iteration "
                         f"of {loop!r} is not of constant size; tile the loops that index it")
    strides = footprint_strides(f, copy_.name)
    counts = [max(1, (w - 1) // s + 1) for w, s in zip(widths, strides)]
    if math.prod(counts) > MAX_LOCAL_ELEMENTS:
        raise ValueError(f"{text}: one thread's part of {source.name!r} has "
                         f"{' x '.join(map(str, counts))} = {math.prod(counts)} elements, beyond "
                         f"{MAX_LOCAL_ELEMENTS} "
                         "(tiramisu_py.commands.gpu_copies.MAX_LOCAL_ELEMENTS; "
                         "registers); use a smaller micro-tile or an inner loop")
    buf = f.buffer(f"{copy_.name}_regs", tuple(counts), source.dtype)
    buf.memory = "local"
    buf.local_command = text
    store_regs(copy_, buf, counts, strides, [1] * len(counts))
    # a strided dimension is split by its stride: the outer part runs the
    # ``count`` slots (v // stride = lo + slot), the inner one is fixed
    for v, st_ in zip(copy_.vars, strides):
        if st_ > 1:
            copy_.split(v.name, st_)
    # the copy runs in the consumer's blocks and threads
    for n in names[:k + 1]:
        if n in tags:
            copy_._command("tag", n, tags[n].kind, tags[n].arg,
                           text=f"{copy_.name}.bind({n}, '{bound_to(tags[n].kind, tags[n].arg)}')")
    return copy_


def store_regs(copy_, buf, counts, strides, slots):
    """Stores a per-thread copy into its array: ``counts`` elements per
    dimension, indexed ``(v // stride) % (count * slots)`` (``slots``: the
    stages of a pipelined dimension, 1 elsewhere)."""
    dims = [c * n for c, n in zip(counts, slots)]
    buf.shape = tuple(wrap(d) for d in dims)
    buf.regs = {"counts": list(counts), "strides": list(strides)}
    copy_.store_in(buf, [_slotted(v // s if s > 1 else v, c, n)
                         for v, s, c, n in zip(copy_.vars, strides, counts, slots)])


def _slotted(v, width, stages):
    """``v``'s place in a dimension of ``width`` elements per stage: ``v %
    width``, in slot ``(v // width) % stages`` (consecutive aligned windows of
    ``width`` go to consecutive slots: the pipeline's buffers)."""
    if stages == 1:
        return v % width
    return ((v // width) % stages) * width + v % width


def _retarget(f, producer, consumer):
    """Makes the compute_at of ``producer`` (and the commands given after it
    for its group: binds) act on ``consumer`` instead, after ``consumer``'s
    own compute_at: ``producer.compute_at(consumer, <same loop>)``."""
    cmds = f._commands
    i = attaching_command(cmds, producer.name)
    c = cmds[i]
    group = {c.stmt, *c.args[2]}
    new = dataclasses.replace(c, args=(consumer.name,) + tuple(c.args[1:]),
                              text=f"{c.stmt}.compute_at({consumer.name}, {c.args[1]})")
    later = cmds[i + 1:]
    cmds[:] = cmds[:i] + [x for x in later if x.stmt not in group] + [new] + \
        [x for x in later if x.stmt in group]
    f._state_cache = None
    state_of(f)            # replayed now: an error names the commands


def _writes(s, source):
    """True when statement ``s`` writes ``source`` (a buffer or computation)."""
    target = s.parent if s.is_update else s
    return (isinstance(source, Buffer) and target.buffer is source) or target is source


def cache_shared(stmt, source, loop, name, order=None, pad=0, swizzle=False, vector=None):
    f = stmt.function
    text = f"{stmt.name}.cache_shared({getattr(source, 'name', source)}, {loop})"
    if not isinstance(source, (Buffer, Computation)):
        raise TypeError(f"{text}: source must be a buffer or computation, not "
                        f"{type(source).__name__}")
    st = state_of(f)[stmt.name]
    st.find(loop, text, stmt.name)
    names = [lp.name for lp in st.loops]
    k = names.index(loop)
    tags = {n: t for n, t in st.tags.items() if t.kind in ("gpu_block", "gpu_thread")}
    if any(tags.get(n) is not None and tags[n].kind == "gpu_thread" for n in names[:k + 1]):
        raise ValueError(f"{text}: {loop!r} is a thread loop or inside one; the tile is copied "
                         "once per block iteration, so give a block loop or a serial loop "
                         "outside the thread loops")
    # a compute_at copy (a cache_local copy) shares its thread loops with its consumer
    owner = stmt.name
    while state_of(f)[owner].at is not None:
        owner = state_of(f)[owner].at[1]
    threads = {t.arg: extent_of(f, owner, n) for n, t in tags.items() if t.kind == "gpu_thread"}
    if not threads:
        raise ValueError(f"{text}: {stmt.name} has no thread loop; bind its thread loops "
                         "(bind / gpu_tile) before cache_shared")
    ndim = len(source.shape) if isinstance(source, Buffer) else len(source.vars)
    order, pad, vector = _check_layout(text, source, ndim, order, pad, swizzle, vector)
    copy_ = stmt.cache_at(source, loop, name=name or f"{source.name}_shared")
    widths = footprint_widths(f, copy_.name)
    if None in widths:
        raise ValueError(f"{text}: the part of {source.name!r} one iteration of {loop!r} reads "
                         "is unbounded; tile the loops that index it")
    widths = [max(w, 1) for w in widths]
    buf = f.buffer(f"{copy_.name}_tile", tuple(widths), source.dtype)
    buf.memory = "shared"
    layout = {"widths": widths, "order": order, "pad": pad, "swizzle": bool(swizzle),
              "stages": 1, "moving": [False] * ndim, "command": text}
    store_tile(copy_, buf, layout, text)
    # the block's loops, as the consumer binds them
    for n in names[:k + 1]:
        if n in tags:
            copy_._command("tag", n, tags[n].kind, tags[n].arg,
                           text=f"{copy_.name}.bind({n}, '{bound_to(tags[n].kind, tags[n].arg)}')")
    own = [v.name for v in copy_.vars]
    lanes = None
    if vector is not None:
        if widths[-1] % vector:
            raise ValueError(f"{text}: vector={vector} does not divide the tile's innermost "
                             f"width {widths[-1]} along {source.name!r}'s last dimension")
        last = own[-1]
        copy_.split(last, vector, names=(last + "q", last + "v"))
        own[-1], lanes = last + "q", last + "v"
        widths = widths[:-1] + [widths[-1] // vector]
    # own dims: the innermost on thread.x, then y, z; each split by min(width, threads)
    if any(is_warp_axis(a) for a in threads):
        # a warp-tiled consumer: the block's threads are one linear index
        total, avail = math.prod(threads.values()), {}
        for axis, w in zip(AXES, reversed(widths)):
            if total <= 1:
                break
            avail[axis] = min(w, total)
            total //= avail[axis]
        threads = avail
    axes = [a for a in AXES if a in threads]
    mapped = list(zip(reversed(own), axes))
    outer, inner = [], []
    for v, axis in mapped:
        factor = min(widths[own.index(v)], threads[axis] or 1)
        copy_.split(v, factor)
        outer.append(v + "0")
        inner.append((v + "1", axis))
    rest = [v for v in own if v not in dict(mapped)]
    order = rest + list(reversed(outer)) + [v for v, _ in reversed(inner)]
    copy_.reorder(*(order + ([lanes] if lanes else [])))
    for v, axis in inner:
        copy_._command("tag", v, "gpu_thread", axis,
                       text=f"{copy_.name}.bind({v}, 'thread.{axis}')")
    if lanes:
        copy_._command("tag", lanes, "vector", vector,
                       text=f"{copy_.name}.vectorize({lanes}, {vector})")
    return copy_


def _check_layout(text, source, ndim, order, pad, swizzle, vector):
    """The layout arguments of ``cache_shared``, checked: (order, pad, vector)."""
    if order is None:
        order = tuple(range(ndim))
    if not isinstance(order, (tuple, list)) or sorted(order) != list(range(ndim)) \
            or any(isinstance(o, bool) for o in order):
        raise ValueError(f"{text}: order must be a permutation of the {ndim} dimensions of "
                         f"{source.name!r} (0 .. {ndim - 1}), not {order!r}")
    if not isinstance(pad, int) or isinstance(pad, bool) or pad < 0:
        raise ValueError(f"{text}: pad must be an int >= 0 (elements added to each row of the "
                         f"tile), not {pad!r}")
    if not isinstance(swizzle, bool):
        raise ValueError(f"{text}: swizzle must be a bool, not {swizzle!r}")
    if swizzle and pad:
        raise ValueError(f"{text}: give pad or swizzle, not both (two ways of avoiding bank "
                         "conflicts)")
    size = max(1, source.dtype.bits // 8)
    if vector is not None:
        if not isinstance(vector, int) or isinstance(vector, bool) or vector < 1 \
                or vector & (vector - 1) or vector * size > 16:
            raise ValueError(f"{text}: vector must be a power of 2 with vector x "
                             f"{size} bytes <= 16 (one 128-bit access), not {vector!r}")
        if vector == 1:
            vector = None
    return tuple(order), pad, vector


def store_tile(copy_, buf, layout, text):
    """Stores ``copy_`` into its shared tile ``buf`` with ``layout`` (the
    footprint's ``widths``, storage ``order``, ``pad`` per row, ``swizzle``,
    ``stages`` slots along the ``moving`` dimensions: index ``v % (stages *
    width)`` there, ``v % width`` elsewhere)."""
    widths, order, stages = layout["widths"], layout["order"], layout["stages"]
    dims = [w * (stages if mv else 1) for w, mv in zip(widths, layout["moving"])]
    index = [_slotted(v, w, stages if mv else 1)
             for v, w, mv in zip(copy_.vars, widths, layout["moving"])]
    shape = [dims[o] for o in order]
    shape[-1] += layout["pad"]
    if layout["swizzle"]:
        chunk = 16 // max(1, buf.dtype.bits // 8)
        if shape[-1] % chunk or math.prod(shape) % (8 * chunk):
            raise ValueError(f"{text}: swizzle permutes 16-byte chunks ({chunk} elements) "
                             f"within 128-byte lines: the tile's rows ({shape[-1]}) must be a "
                             f"multiple of {chunk} elements and its size "
                             f"({' x '.join(map(str, shape))}) a multiple of {8 * chunk}")
        buf.layout = {"swizzle": chunk, "row": shape[-1]}
    buf.shape = tuple(wrap(n) for n in shape)
    buf.tile = layout
    copy_.store_in(buf, [index[o] for o in order])

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
from ..lang.program import Buffer, Computation, check_name
from ..lang.schedule import attaching_command
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
    copy_.store_in(buf, [(v // s) % c if s > 1 else v % c
                         for v, s, c in zip(copy_.vars, strides, counts)])
    # a strided dimension is split by its stride: the outer part runs the
    # ``count`` slots (v // stride = lo + slot), the inner one is fixed
    for v, st_ in zip(copy_.vars, strides):
        if st_ > 1:
            copy_.split(v.name, st_)
    # the copy runs in the consumer's blocks and threads
    for n in names[:k + 1]:
        if n in tags:
            copy_._command("tag", n, tags[n].kind, tags[n].arg,
                           text=f"{copy_.name}.bind({n}, '{tags[n].kind[4:]}.{tags[n].arg}')")
    return copy_


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


def cache_shared(stmt, source, loop, name):
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
    copy_ = stmt.cache_at(source, loop, name=name or f"{source.name}_shared")
    widths = footprint_widths(f, copy_.name)
    if None in widths:
        raise ValueError(f"{text}: the part of {source.name!r} one iteration of {loop!r} reads "
                         "is unbounded; tile the loops that index it")
    widths = [max(w, 1) for w in widths]
    buf = f.buffer(f"{copy_.name}_tile", tuple(widths), source.dtype)
    buf.memory = "shared"
    copy_.store_in(buf, [v % w for v, w in zip(copy_.vars, widths)])
    # the block's loops, as the consumer binds them
    for n in names[:k + 1]:
        if n in tags:
            copy_._command("tag", n, tags[n].kind, tags[n].arg,
                           text=f"{copy_.name}.bind({n}, '{tags[n].kind[4:]}.{tags[n].arg}')")
    # own dims: the innermost on thread.x, then y, z; each split by min(width, threads)
    axes = [a for a in AXES if a in threads]
    own = [v.name for v in copy_.vars]
    mapped = list(zip(reversed(own), axes))
    outer, inner = [], []
    for v, axis in mapped:
        factor = min(widths[own.index(v)], threads[axis] or 1)
        copy_.split(v, factor)
        outer.append(v + "0")
        inner.append((v + "1", axis))
    rest = [v for v in own if v not in dict(mapped)]
    order = rest + list(reversed(outer)) + [v for v, _ in reversed(inner)]
    copy_.reorder(*order)
    for v, axis in inner:
        copy_._command("tag", v, "gpu_thread", axis,
                       text=f"{copy_.name}.bind({v}, 'thread.{axis}')")
    return copy_

"""GPU mapping: the legality of ``bind`` / ``gpu_tile`` schedules, checked
exactly on the dependences, and the plan the lowering follows (which loops are
blocks and threads, the thread index ranges, where barriers go).

The mapping rules (each refused with an :class:`IllegalScheduleError` that
names the command and, for dependences, two instances):

* Shape: a mapped statement's loops are block loops (outermost, at least
  one), then serial loops run by the whole block, then thread loops
  (contiguous), then serial loops each thread runs.  The statements of one
  kernel (those fused in its outermost loop) all share its block loops.
* Block loops carry no dependence: blocks run in any order, concurrently;
  they communicate only across kernel launches (separate top-level nests).
* Two instances of one block in different threads that depend on each other
  must be separated by a barrier (a reassociated reduction's updates of one
  element count: no atomics).  Where their schedule times first differ
  decides: a sequence or a serial loop outside the thread loops gets a
  barrier there (between the sequenced children; at the end of each
  iteration of the loop); a thread loop, or anything inside the thread
  loops, cannot hold a barrier that all threads reach, so the schedule is
  refused (a race).
* A thread loop has a constant lower bound and a bounded extent; a block's
  threads (product over x, y, z of the largest extent of that axis in the
  kernel) are at most :data:`MAX_THREADS`.
* A statement under no thread loop of an axis runs in thread 0 of that
  axis only (the printer guards it); the check uses the same convention.
* ``accumulate_locally(loop)`` (register tiles): ``loop`` is a serial loop,
  inside the block loops, the whole block runs (the tile is per thread and
  lives across its iterations) or inside the thread loops; never a block,
  thread or host loop (a tile is private to one thread and one launch).
  The CPU rule (``legality._check_accumulate``) applies as well.
* Per-thread arrays (``cache_local``, :mod:`tiramisu_py.commands.gpu_copies`): every
  value read from one was written by the same thread; their storage
  conflicts between threads and blocks are then no dependences (skipped).

Values never flow between threads through registers: statements communicate
only through arrays (loads and stores are the only cross-statement channel
in the loop IR), and temporaries a thread keeps in registers are private.
"""
from __future__ import annotations

from dataclasses import dataclass, field

import islpy as isl

from ..base.errors import IllegalScheduleError
from ..lang.program import const_value
from ..lang.schedule import bound_to, gpu_tags, is_mapped
from . import gpu_threads
from .gpu_async import plan_async
from .gpu_mma import check_mma
from .legality import describe, privatisable, schedule_depth

MAX_THREADS = 1024                 # threads per block (every CUDA GPU since sm_20)
MAX_SHARED_BYTES = 48 * 1024       # static shared memory per block without opt-in
MAX_BLOCK_DIM = {"x": 1024, "y": 1024, "z": 64}    # threads per block along each axis
AXES = ("x", "y", "z")
LEVELS = ("block", "thread")


@dataclass
class KernelGroup:
    """One GPU kernel: the statements fused in one outermost block loop."""
    stmts: list
    block_axes: list                      # axis of each block loop, outermost first
    host: int = 0                         # serial loops around it on the host (launch loops)
    thread_range: dict = field(default_factory=dict)   # axis -> (min, max) of its loop values
    linear: int = 0                       # warp-tiled: threads of its 1-D block (gpu_threads)
    stmt_threads: dict = field(default_factory=dict)   # linear: stmt -> {axis: (min, ext, stride)}

    @property
    def threads(self) -> dict:
        if self.linear:
            return {"x": self.linear}
        return {a: hi - lo + 1 for a, (lo, hi) in self.thread_range.items()}

    def thread_attrs(self, stmt, axis) -> dict:
        """The lowering's attributes of ``stmt``'s thread loop on ``axis``."""
        if self.linear:
            lo, ext, stride = self.stmt_threads[stmt][axis]
            slowest = max(st * e for _, e, st in self.stmt_threads[stmt].values())
            return {"min": lo, "extent": ext, "stride": stride, "linear": self.linear,
                    "level": axis, "slowest": stride * ext == slowest}
        lo, hi = self.thread_range[axis]
        return {"min": lo, "extent": hi - lo + 1}


@dataclass
class GpuPlan:
    kernels: list                                      # KernelGroup
    loop_barriers: set = field(default_factory=set)     # (stmt, schedule position)
    seq_barriers: set = field(default_factory=set)      # (src stmt, dst stmt, position)
    by_stmt: dict = field(default_factory=dict)         # stmt -> KernelGroup
    async_stmts: set = field(default_factory=set)       # pipelined copies run as cp.async
    async_waits: dict = field(default_factory=dict)     # (stmt, position) -> groups left pending
    mma: dict = field(default_factory=dict)             # tensor-core stmt -> operand tiles

    def kernel_of(self, stmt):
        return self.by_stmt.get(stmt)


def _shape(stmt, st, commands):
    """(number of host loops, number of block loops, index of the first thread
    loop or None) after checking the loop-kind order of a mapped statement."""
    tags = gpu_tags(st)
    kinds = {k: level for k, level, _, _ in tags}
    text = commands[tags[0][3].command].text
    blocks = [k for k, level, _, _ in tags if level == "block"]
    if not blocks:
        raise IllegalScheduleError(
            f"{text}: {stmt} has thread loops but no block loop; bind an outer loop to "
            "'block.x': a GPU kernel starts with its grid")
    nh = blocks[0]                     # serial loops outside the kernel: host loops
    if any(kinds.get(k) for k in range(nh)):
        raise IllegalScheduleError(
            f"{text}: {stmt}'s loop {st.loops[tags[0][0]].name!r} is a thread loop outside "
            "its block loops; block loops come first")
    nb = 0
    while kinds.get(nh + nb) == "block":
        nb += 1
    threads = [k for k, level, _, _ in tags if level == "thread"]
    for k, level, _, tag in tags:
        if level == "block" and k >= nh + nb:
            raise IllegalScheduleError(
                f"{commands[tag.command].text}: block loop {st.loops[k].name!r} of {stmt} is "
                "inside a loop that is not a block loop; the block loops of a kernel are "
                "nested directly in one another")
    if threads and threads != list(range(threads[0], threads[0] + len(threads))):
        raise IllegalScheduleError(
            f"{text}: the thread loops of {stmt} "
            f"({', '.join(st.loops[k].name for k in threads)}) must be nested directly in "
            "one another")
    seen = {}
    for k, level, axis, tag in tags:
        if (level, axis) in seen:
            raise IllegalScheduleError(
                f"{commands[tag.command].text}: {stmt} already binds loop "
                f"{seen[(level, axis)]!r} to {level}.{axis}")
        seen[(level, axis)] = st.loops[k].name
    return nh, nb, (threads[0] if threads else None)


def _check_fused(state, commands):
    """Statements fused in a loop (one loop of the generated code) map it the
    same way."""
    seen = {}
    for stmt, st in state.items():
        for k, lp in enumerate(st.loops):
            tag = st.tags.get(lp.name)
            gpu = (tag.kind, tag.arg) if tag is not None and tag.kind.startswith("gpu_") else None
            key = (tuple(st.consts[:k + 1]), k)
            if key not in seen:
                seen[key] = (stmt, gpu, tag)
                continue
            other, g, t = seen[key]
            if g != gpu:
                cmd = commands[(tag or t).command].text
                raise IllegalScheduleError(
                    f"{cmd}: loop {lp.name!r} is shared by {other} and {stmt} but mapped "
                    f"differently ({_mapping(g)} vs {_mapping(gpu)}); bind it the same way in "
                    "both, or separate them (after)")


def _mapping(g):
    return "not mapped" if g is None else f"{g[0][4:]}.{g[1]}"


def _per_stmt(umap):
    out = {}
    umap.foreach_map(lambda m: out.__setitem__(m.get_tuple_name(isl.dim_type.in_), m))
    return out


def plan(model, deps, state, commands) -> GpuPlan | None:
    """Checks the GPU mapping of ``state``; None when nothing is mapped."""
    if not is_mapped(state):
        return None
    depth = schedule_depth(model, state)
    shapes = {}
    for stmt, st in state.items():
        if gpu_tags(st):
            shapes[stmt] = _shape(stmt, st, commands)
    _check_fused(state, commands)
    for stmt, st in state.items():
        if stmt in shapes:
            _check_accumulate(stmt, st, shapes[stmt], commands)
    # kernels: statements fused in the first block loop (inside the same host loops)
    groups = {}
    for stmt, st in state.items():
        nh = shapes[stmt][0] if stmt in shapes else 0
        groups.setdefault((nh, tuple(st.consts[:nh + 1])), []).append(stmt)
    kernels, by_stmt = [], {}
    for (nh, _), stmts in sorted(groups.items()):
        mapped = [s for s in stmts if s in shapes]
        if not mapped:
            continue
        lead = mapped[0]
        text = commands[gpu_tags(state[lead])[0][3].command].text
        unmapped = [s for s in stmts if s not in shapes]
        if unmapped:
            raise IllegalScheduleError(
                f"{text}: {', '.join(unmapped)} shares the outermost loop of {lead}, a GPU "
                "kernel, but is not mapped to it; bind its loops too")
        nb = shapes[lead][1]
        axes = [tag.arg for _, level, _, tag in gpu_tags(state[lead]) if level == "block"]
        for s in mapped[1:]:
            st = state[s]
            b = [tag.arg for _, level, _, tag in gpu_tags(st) if level == "block"]
            if shapes[s][1] != nb or b != axes or st.consts[:nh + nb] != state[lead].consts[:nh + nb]:
                raise IllegalScheduleError(
                    f"{text}: {s} and {lead} are in one kernel but do not share all its "
                    f"block loops ({', '.join(lp.name for lp in state[lead].loops[nh:nh + nb])})")
        k = KernelGroup(mapped, axes, host=nh)
        kernels.append(k)
        for s in mapped:
            by_stmt[s] = k
    out = GpuPlan(kernels, by_stmt=by_stmt)

    sched = _per_stmt(deps.schedule(state).intersect_domain(model.union_domain(state)))
    pos_of = {}          # stmt -> {axis: schedule position of its thread loop}
    for k in kernels:
        ranges = {}
        for s in k.stmts:
            st, pos_of[s] = state[s], {}
            for j, level, axis, tag in gpu_tags(st):
                if level != "thread":
                    continue
                p = 2 * j + 1
                pos_of[s][axis] = p
                if s not in sched:
                    continue              # no instance (e.g. an empty fixed-size range)
                rng = sched[s].range()
                lo, hi = _param_bound(rng, p, "min"), _param_bound(rng, p, "max")
                if lo is None or hi is None:
                    continue              # no instance
                if lo == "unbounded" or hi == "unbounded":
                    raise IllegalScheduleError(
                        f"{commands[tag.command].text}: the thread loop {st.loops[j].name!r} of "
                        f"{s} has no constant bound on its extent; split it and bind the inner "
                        "loop")
                old = k.thread_range.get(axis)
                k.thread_range[axis] = (lo, hi) if old is None else (min(old[0], lo), max(old[1], hi))
                ranges.setdefault(s, {})[axis] = (lo, hi)
        if gpu_threads.linear_kernel(state, k.stmts):
            gpu_threads.layout(k, state, commands, ranges)
        for axis, v in k.threads.items():
            if v > MAX_BLOCK_DIM[axis] and not k.linear:
                s = next(x for x in k.stmts if axis in pos_of[x])
                tag = next(t for _, level, a, t in gpu_tags(state[s]) if level == "thread" and a == axis)
                raise IllegalScheduleError(
                    f"{commands[tag.command].text}: the kernel of {', '.join(k.stmts)} has {v} "
                    f"threads along thread.{axis}, beyond CUDA's limit of {MAX_BLOCK_DIM[axis]} "
                    "(tiramisu_py.analysis.gpu_plan.MAX_BLOCK_DIM); bind a shorter loop to it, "
                    "or use the x or y axis")
        n = 1
        for v in k.threads.values():
            n *= v
        if n > MAX_THREADS:
            s = k.stmts[0]
            raise IllegalScheduleError(
                f"{commands[gpu_tags(state[s])[0][3].command].text}: the kernel of "
                f"{', '.join(k.stmts)} has {' x '.join(str(v) for v in k.threads.values())} = {n} "
                f"threads per block, beyond the limit of {MAX_THREADS} "
                "(tiramisu_py.analysis.gpu_plan.MAX_THREADS); use smaller thread tiles")

    # dependences between instances of one block
    def coord(stmt, var, axis):
        k = by_stmt[stmt]
        if k.linear:                  # warp-tiled: one linear thread index
            return gpu_threads.linear_tid(k, stmt, var, pos_of)
        p = pos_of[stmt].get(axis)
        return f"{var}{p}" if p is not None else str(k.thread_range[axis][0])

    def thread_axes(k):
        return ("x",) if k.linear else tuple(k.thread_range)

    def same_thread(s, t):
        k = by_stmt[s]
        nh, nb = k.host, len(k.block_axes)
        cons = [f"a{i} = b{i}" for i in range(2 * nh + 1)]
        cons += [f"a{2 * j + 1} = b{2 * j + 1}" for j in range(nh, nh + nb)]
        cons += [f"{coord(s, 'a', x)} = {coord(t, 'b', x)}" for x in thread_axes(k)]
        return " and ".join(cons)

    # per-thread arrays (cache_local): no value crosses threads, so their
    # storage conflicts between threads are none (each has its own copy)
    gdeps = _gpu_dependences(deps, state, by_stmt)
    check_local(model, deps, state, by_stmt, sched, same_thread, gdeps)
    mma_ops = check_mma(model, state, commands, out, sched)
    out.mma = mma_ops
    plan_async(model, state, commands, out, sched, gdeps, depth)
    local = local_buffers(model)
    for buf, (d, conflicts) in gdeps.items():
        if buf in local:
            continue
        if conflicts is not None:
            d = d.union(conflicts).union(conflicts.reverse())
        pieces = []
        d.foreach_map(pieces.append)
        for m in pieces:
            s, t = m.get_tuple_name(isl.dim_type.in_), m.get_tuple_name(isl.dim_type.out)
            if s not in by_stmt or t not in by_stmt or by_stmt[s] is not by_stmt[t]:
                continue                     # different kernels: ordered by the launches
            k = by_stmt[s]
            nb, nh = len(k.block_axes), k.host
            a = [f"a{i}" for i in range(depth)]
            b = [f"b{i}" for i in range(depth)]

            def rel(cons):
                text = f"{{ [{', '.join(a)}] -> [{', '.join(b)}] : {' and '.join(cons) or 'true'} }}"
                r = model.parse(isl.Map, text)
                return m.intersect(sched[s].apply_range(r).apply_range(sched[t].reverse()))

            # one launch: the same host iterations (launches are ordered)
            launch = [f"a{i} = b{i}" for i in range(2 * nh + 1)]
            same_block = launch + [f"a{2 * j + 1} = b{2 * j + 1}" for j in range(nh, nh + nb)]
            for j in range(nh, nh + nb):
                if _per_block(model, deps, state, s, state[s].loops[j].name, buf):
                    continue          # each block has its own copy; no value crosses blocks
                bad = rel(launch + [f"a{2 * i + 1} = b{2 * i + 1}" for i in range(nh, j)]
                          + [f"a{2 * j + 1} != b{2 * j + 1}"])
                if not bad.is_empty():
                    tag = state[s].tags[state[s].loops[j].name]
                    raise IllegalScheduleError(
                        f"{commands[tag.command].text} is illegal: block loop "
                        f"{state[s].loops[j].name!r} carries a dependence (blocks run "
                        "concurrently and communicate only across kernel launches): "
                        + describe(model, deps, buf, bad.to_union_map(), state, True))
            axes = thread_axes(k)
            if not axes:
                continue
            diff = "(" + " or ".join(f"{coord(s, 'a', x)} != {coord(t, 'b', x)}" for x in axes) + ")"
            if buf in mma_ops.get(s, ()) or buf in mma_ops.get(t, ()):
                diff = "true"         # ldmatrix reads a tile row in another lane (gpu_mma)
            for q in range(2 * (nh + nb), depth):
                equal = same_block + [f"a{i} = b{i}" for i in range(2 * (nh + nb), q)]
                # the pairs that first differ at q or later: none (most pieces, or
                # past the last position that needs a barrier), none at q either
                if rel(equal + [diff]).is_empty():
                    break
                bad = rel(equal + [f"a{q} != b{q}", diff])
                if bad.is_empty():
                    continue
                first_thread = min(shapes[x][2] if shapes[x][2] is not None else 10 ** 9
                                   for x in (s, t))
                level = q // 2               # loops enclosing position q
                if q % 2 == 1 and level >= first_thread or q % 2 == 0 and level > first_thread:
                    j = (q - 1) // 2 if q % 2 else level - 1
                    loop = state[s].loops[min(j, len(state[s].loops) - 1)].name
                    tag = state[s].tags.get(loop)
                    cmd = commands[tag.command].text if tag is not None and tag.kind == "gpu_thread" \
                        else commands[gpu_tags(state[s])[-1][3].command].text
                    raise IllegalScheduleError(
                        f"{cmd} is illegal: two threads of one block depend on each other "
                        f"inside thread loop {loop!r}, where no barrier can separate them "
                        "(a barrier must be reached by every thread of the block): "
                        + describe(model, deps, buf, bad.to_union_map(), state, True))
                if q % 2 == 1:
                    out.loop_barriers.add((s, q))
                else:
                    out.seq_barriers.add((s, t, q))
    return out


def _gpu_dependences(deps, state, by_stmt):
    """buffer -> (dependences, conflicts) as for the CPU, plus the reduction
    self-dependences that ``allow_reassociation`` dropped, as conflicts: a
    reassociated reduction may run in any order, but two threads (or blocks)
    updating one element at the same time lose updates (no atomics)."""
    out = dict(deps.with_conflicts(state))
    for stmt, (buf, red) in deps.reductions_in(state).items():
        if stmt not in by_stmt or not state[stmt].reassociate or red.is_empty():
            continue
        d, c = out.get(buf, (red, None))
        out[buf] = (d, red if c is None else c.union(red))
    return out


def _check_accumulate(stmt, st, shape, commands):
    """``accumulate_locally(loop)`` of a mapped statement: ``loop`` is a serial
    loop the whole block runs (the tile is per thread and lives across its
    iterations; the thread loops inside close and reopen) or a serial loop
    inside the thread loops; never a block, thread or host loop."""
    names = [lp.name for lp in st.loops]
    nh, nb, first = shape
    for loop, index in st.accumulate.items():
        if loop not in names:
            continue                       # the CPU rule reports it
        k, tag = names.index(loop), st.tags.get(loop)
        text = commands[index].text
        if tag is not None and tag.kind in ("gpu_block", "gpu_thread"):
            level = tag.kind[4:]
            raise IllegalScheduleError(
                f"{text} is illegal on the GPU: {loop!r} is a {level} loop of {stmt} "
                f"({bound_to(tag.kind, tag.arg)}); a local tile is private to one thread, so it can "
                f"accumulate only over a serial loop (e.g. the k-step loop between the block "
                "and the thread loops), not combine partial results of different "
                f"{level}s")
        if k < nh:
            raise IllegalScheduleError(
                f"{text} is illegal on the GPU: {loop!r} is a host loop of {stmt} (one kernel "
                "launch per iteration) and a thread's local tile does not outlive a launch; "
                "accumulate over a serial loop inside the block loops")


def _per_block(model, deps, state, stmt, loop, buf):
    """True when ``buf`` lives in shared memory (one copy per block) and every
    value read from it was written in the same iteration of block loop
    ``loop`` (the rule that lets a parallel loop privatise a temporary)."""
    b = next((a.buffer for m in model.stmts for a in m.accesses if a.buffer.name == buf), None)
    if getattr(b, "memory", "global") != "shared":
        return False
    return privatisable(model, deps, state, stmt, loop, buf)


def _param_bound(rng, p, which):
    """The constant bound over all param values of position ``p``, None when
    there is no instance, or "unbounded"."""
    pw = rng.dim_min(p) if which == "min" else rng.dim_max(p)
    if pw.n_piece() == 0:
        return None
    v = pw.min_val() if which == "min" else pw.max_val()
    if not v.is_int():
        return "unbounded"
    return int(v.to_python())


# ------------------------------------------------------- per-thread arrays
def local_buffers(model) -> dict:
    """name -> Buffer of the per-thread (``memory == "local"``) arrays."""
    out = {}
    for m in model.stmts:
        for a in m.accesses:
            if getattr(a.buffer, "memory", "global") == "local":
                out[a.buffer.name] = a.buffer
    return out


def check_local(model, deps, state, by_stmt, sched, same_thread, gdeps):
    """Refuses a per-thread array one of whose reads may see a value another
    thread (block, launch) wrote.  ``gdeps``: buffer -> (dependences,
    conflicts) of the GPU check, over the copies' instances; the write ->
    read pairs of a local array are its value flow (a compute_at copy feeds
    the reads of its own iteration only).  ``same_thread(s, t)``: isl
    constraints on the schedule times (a, b) of one thread of one launch."""
    for name, buf in local_buffers(model).items():
        cmd = getattr(buf, "local_command", f"the per-thread array {name!r}")
        writers = {m.name for m in model.stmts
                   if any(a.write and a.buffer.name == name for a in m.accesses)}
        d = gdeps.get(name, (None, None))[0]
        if d is None:
            continue
        pieces = []
        d.foreach_map(pieces.append)
        for m in pieces:
            s, t = m.get_tuple_name(isl.dim_type.in_), m.get_tuple_name(isl.dim_type.out)
            if s not in writers or t in writers:
                continue                  # storage order only: each thread has its own copy
            if s not in by_stmt or t not in by_stmt or by_stmt[s] is not by_stmt[t]:
                bad = m
            else:
                depth = sched[s].dim(isl.dim_type.out)
                a = [f"a{i}" for i in range(depth)]
                b = [f"b{i}" for i in range(depth)]
                same = isl.Map(f"{{ [{', '.join(a)}] -> [{', '.join(b)}] : "
                               f"{same_thread(s, t)} }}", context=model.ctx)
                other = isl.Map.universe(same.get_space()).subtract(same)
                bad = m.intersect(sched[s].apply_range(other).apply_range(sched[t].reverse()))
            if not bad.is_empty():
                raise IllegalScheduleError(
                    f"{cmd} is illegal: a value flows between threads through the per-thread "
                    f"array {name!r} (values never flow between threads through registers): "
                    + describe(model, deps, name, bad.to_union_map(), state, True))


# ------------------------------------------------------------ shared memory
def check_shared(model, plan):
    """Each kernel's shared tiles fit in :data:`MAX_SHARED_BYTES`."""
    for k in plan.kernels:
        bufs = {}
        for s in k.stmts:
            for a in model.by_name[s].accesses:
                if getattr(a.buffer, "memory", "global") == "shared":
                    bufs[a.buffer.name] = a.buffer
        sizes = {}
        for name, b in bufs.items():
            dims = [const_value(d) for d in b.shape]
            if None in dims:
                raise IllegalScheduleError(f"shared tile {name!r} has a shape that is not "
                                           "constant; tile the loops that index it")
            n = max(1, b.dtype.bits // 8)          # (bfloat16 has no NumPy dtype)
            for d in dims:
                n *= d
            sizes[name] = n
        total = sum(sizes.values())
        if total > MAX_SHARED_BYTES:
            parts = ", ".join(f"{n} {tuple(const_value(d) for d in bufs[n].shape)} = {v} bytes"
                              for n, v in sizes.items())
            raise IllegalScheduleError(
                f"the kernel of {', '.join(k.stmts)} needs {total} bytes of shared memory per "
                f"block ({parts}), beyond the limit of {MAX_SHARED_BYTES} "
                "(tiramisu_py.analysis.gpu_plan.MAX_SHARED_BYTES); use smaller tiles in "
                "cache_shared")

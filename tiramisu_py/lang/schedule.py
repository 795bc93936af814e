"""Schedules: each statement's schedule is a list of dimensions in 2d+1 form
``[c0, l1, c1, l2, ..., ln, cn]``: ``ck`` are constants that order statements
(sequence), ``lk`` are named loops, each an affine (quasi-affine) isl
expression over the statement's own loop variables.  Commands transform these
lists; they are recorded in the function's command log, so the schedule can be
replayed up to any command (to name the command that broke legality).

Commands never use numeric levels: loops are named, and new loops get
predictable names (``split(i)`` -> ``i0``, ``i1``).

The tag rules (one mapping per loop, one loop per GPU axis: :func:`check_tag`)
and the queries of a statement's GPU mapping (:func:`gpu_tags`,
:func:`is_mapped`) are facts of the schedule and live here too.  The
commands users call are in :mod:`tiramisu_py.commands.schedulable`."""
from __future__ import annotations

from dataclasses import dataclass, field

from .expr import Var

# Limits on unrolling, checked when the command is given (ValueError naming
# it).  Unrolling copies the body in the generated code: the C and LLVM
# compilers' time grows with the copies (LLVM: 0.5 s at 256, 4.7 s at 1024,
# minutes at 10,000) and so much straight-line code is never faster.
MAX_UNROLL = 256            # the factor of one unroll (or the extent unrolled whole)
MAX_UNROLL_TOTAL = 1024     # copies of one statement: the product over its unrolled loops

# How ``parallelize(loop, schedule=...)`` deals iterations to threads (OpenMP's
# schedule kinds); the tag's arg is ``(schedule, chunk)`` or None (the default).
OMP_SCHEDULES = ("static", "dynamic", "guided")


@dataclass
class Loop:
    name: str
    expr: str                 # isl affine text over the statement's loop variables
    parts: tuple = ()         # a collapsed loop: the loops it was made of, outermost first


@dataclass
class Tag:
    kind: str                 # "parallel" | "vector" | "unrolled" | "gpu_block" | "gpu_thread"
    arg: object               # vector width / unroll factor / GPU axis / (schedule, chunk)
    command: int              # index in the command log
    reductions: list = field(default_factory=list)   # (buffer, op) carried, reassociated
    private: list = field(default_factory=list)      # temporaries each thread gets a copy of


@dataclass
class StmtSchedule:
    consts: list              # n+1 ints
    loops: list               # n Loops
    tags: dict = field(default_factory=dict)      # loop name -> Tag
    reassociate: bool = False                     # reduction deps may be reordered
    accumulate: dict = field(default_factory=dict)  # loop name -> command index
    at: tuple | None = None       # (producer, consumer, depth) after compute_at
    distributed: str | None = None  # the declared loop distributed over MPI ranks
    pipelines: dict = field(default_factory=dict)   # loop -> (stages, copies, command index)
    tensor_core: tuple | None = None    # (k loop, i loop, j loop, command index): mma.sync
    nontemporal: bool = False     # its stores bypass the caches (store_nontemporal)

    def find(self, name, command, stmt):
        for k, lp in enumerate(self.loops):
            if lp.name == name:
                return k
        raise ValueError(f"{command}: {stmt} has no loop {name!r}; its loops are "
                         f"{', '.join(lp.name for lp in self.loops) or 'none'}")

    def dims(self):
        """The flat schedule: constants and loop expressions interleaved."""
        out = [str(self.consts[0])]
        for k, lp in enumerate(self.loops):
            out += [lp.expr, str(self.consts[k + 1])]
        return out

    def dim_names(self):
        out = [None]
        for lp in self.loops:
            out += [lp.name, None]
        return out


@dataclass
class Command:
    stmt: str
    op: str
    args: tuple
    kwargs: dict
    text: str                 # canonical: statement and loop names (``C_update.split(k, 8)``)
    call: str | None = None   # as the user wrote it (``C.update.vectorize("k", 8)``)
    where: str | None = None  # ``file:line`` of the user's call
    call_id: int = 0          # the commands of one user call share it (undo)

    def given(self) -> str:
        """``C.update.parallelize("k") at gemm.py:12``, for error messages."""
        return " at ".join(x for x in (self.call or self.text, self.where) if x)


def initial_state(model):
    """The program-order schedule of every statement."""
    state = {}
    for m in model.stmts:
        consts, loops = [], []
        for d in m.schedule:
            if isinstance(d, int):
                consts.append(d)
            else:
                loops.append(Loop(d.name, d.name))
        if len(consts) == len(loops):
            consts.append(0)
        state[m.name] = StmtSchedule(consts, loops)
    return state


def replay(model, commands, upto=None):
    state = initial_state(model)
    for k, c in enumerate(commands[:upto]):
        apply(state, c, k)
    return state


# --------------------------------------------------------------- the commands
def apply(state, c: Command, index: int):
    s = state[c.stmt]
    if s.at is not None and c.op not in TAG_OPS:
        raise ValueError(f"{c.text}: {c.stmt} is computed at {s.at[1]} (compute_at); give its "
                         "own loop transformations before compute_at")
    fn = _OPS[c.op]
    fn(state, s, c, index, *c.args, **c.kwargs)


def _new_names(s, names, c):
    taken = {lp.name for lp in s.loops}
    for n in names:
        if n in taken:
            raise ValueError(f"{c.text}: {c.stmt} already has a loop named {n!r}; "
                             "pass other names")


def _split(state, s, c, index, loop, factor, names):
    if not isinstance(factor, int) or isinstance(factor, bool) or factor < 1:
        raise ValueError(f"{c.text}: the factor must be a positive int, not {factor!r}")
    k = s.find(loop, c.text, c.stmt)
    outer, inner = names
    _new_names(s, [n for n in names if n != loop], c)
    e = s.loops[k].expr
    s.loops[k:k + 1] = [Loop(outer, f"floor(({e})/{factor})"),
                        Loop(inner, f"(({e}) mod {factor})")]
    s.consts[k + 1:k + 1] = [0]


def _interchange(state, s, c, index, a, b):
    ka, kb = s.find(a, c.text, c.stmt), s.find(b, c.text, c.stmt)
    s.loops[ka], s.loops[kb] = s.loops[kb], s.loops[ka]


def _reorder(state, s, c, index, *names):
    ks = [s.find(n, c.text, c.stmt) for n in names]
    if len(set(ks)) != len(ks):
        raise ValueError(f"{c.text}: a loop is named twice")
    loops = [s.loops[k] for k in ks]
    for pos, lp in zip(sorted(ks), loops):
        s.loops[pos] = lp


def _tile(state, s, c, index, loops, factors, names):
    ks = [s.find(n, c.text, c.stmt) for n in loops]
    if ks != list(range(ks[0], ks[0] + len(ks))):
        raise ValueError(f"{c.text}: tiled loops must be nested directly in this order "
                         f"({', '.join(lp.name for lp in s.loops)})")
    for lp, f, nm in zip(loops, factors, names):
        _split(state, s, c, index, lp, f, nm)
    order = [nm[0] for nm in names] + [nm[1] for nm in names]
    _reorder(state, s, c, index, *order)


def _tile_band(state, s, c, index, loops, factors, names):
    """``tile`` of one statement of a band (:mod:`tiramisu_py.commands.band`):
    the tile loops and the point loops share the sequence positions of the
    loops they come from, so the statements of the band stay in one nest."""
    k0 = s.find(loops[0], c.text, c.stmt)
    old = list(s.consts)
    _tile(state, s, c, index, loops, factors, names)
    s.consts = old[:k0 + 1] + [0] * len(loops) + old[k0 + 1:]


def _collapse(state, s, c, index, outer, inner, name, lo, extent):
    """``outer`` and ``inner`` (nested directly in it, taking the values
    ``lo .. lo + extent - 1``) as one loop ``name``: ``outer * extent +
    inner - lo``, the same iterations in the same order.  Refused when
    another statement runs inside ``outer`` (its loop would be compared with
    the collapsed one) or a tag is on either loop."""
    ko, ki = s.find(outer, c.text, c.stmt), s.find(inner, c.text, c.stmt)
    if ki != ko + 1:
        raise ValueError(f"{c.text}: {inner!r} must be the loop nested directly in {outer!r} "
                         f"({c.stmt}'s loops: {', '.join(lp.name for lp in s.loops)})")
    if name not in (outer, inner):
        _new_names(s, [name], c)
    marked = [n for n in (outer, inner) if n in s.tags or n in s.accumulate]
    if marked:
        raise ValueError(f"{c.text}: loop {marked[0]!r} is already tagged; collapse the loops "
                         "first, then tag the collapsed loop")
    others = [n for n, r in state.items() if r is not s and len(r.loops) > ko
              and r.consts[:ko + 1] == s.consts[:ko + 1]]
    if others:
        raise ValueError(f"{c.text}: {', '.join(others)} also run(s) inside loop {outer!r}; "
                         f"only a loop that holds {c.stmt} alone can be collapsed")
    e_o, e_i = s.loops[ko].expr, s.loops[ki].expr
    s.loops[ko:ki + 1] = [Loop(name, f"({e_o})*{extent} + ({e_i}) + ({-lo})",
                               (s.loops[ko], s.loops[ki]))]
    del s.consts[ko + 1]


def _skew(state, s, c, index, outer, inner, factor, name):
    if not isinstance(factor, int) or isinstance(factor, bool):
        raise ValueError(f"{c.text}: the skew factor must be an int")
    ko, ki = s.find(outer, c.text, c.stmt), s.find(inner, c.text, c.stmt)
    if ko == ki:
        raise ValueError(f"{c.text}: skew needs two different loops")
    if name != inner:
        _new_names(s, [name], c)
    lp = s.loops[ki]
    s.loops[ki] = Loop(name, f"({lp.expr}) + {factor}*({s.loops[ko].expr})")


def _shift(state, s, c, index, loop, amount):
    if not isinstance(amount, int) or isinstance(amount, bool):
        raise ValueError(f"{c.text}: the shift must be an int")
    k = s.find(loop, c.text, c.stmt)
    s.loops[k] = Loop(loop, f"({s.loops[k].expr}) + {amount}")


def _reverse(state, s, c, index, loop):
    k = s.find(loop, c.text, c.stmt)
    s.loops[k] = Loop(loop, f"-({s.loops[k].expr})")


def _tag(state, s, c, index, loop, kind, arg):
    s.find(loop, c.text, c.stmt)
    if s.at is not None and [lp.name for lp in s.loops].count(loop) > 1:
        raise ValueError(f"{c.text}: {c.stmt} has two loops named {loop!r} since "
                         f"{s.at[0]}.compute_at({s.at[1]}, ...): {s.at[1]}'s, which it runs in, "
                         f"and its own; {_ONE_NAME}")
    check_tag(s, loop, kind, arg, c.text)
    if kind == "unrolled":
        check_unroll(s, loop, arg, c.text)
    s.tags[loop] = Tag(kind, arg, index)


def _distribute(state, s, c, index, loop, declared):
    """Records the distributed loop (a declared loop of the statement); the
    schedule map is unchanged: ranks run blocks of it (analysis.distribution)."""
    if loop not in declared:
        raise ValueError(f"{c.text}: {c.stmt} has no declared loop {loop!r}; distribute takes "
                         f"one of {', '.join(declared) or 'none'}")
    if s.distributed not in (None, loop):
        raise ValueError(f"{c.text}: {c.stmt} is already distributed over {s.distributed!r}")
    s.distributed = loop


def _pipeline(state, s, c, index, loop, stages, copies):
    """Software pipelining (``commands.gpu_pipeline``): each copy computed at
    ``loop`` of ``c.stmt`` runs ``stages - 1`` iterations of it ahead of the
    iteration that reads it (its schedule shifted; its storage, given more
    slots by the command, is the legality check's to prove)."""
    k = s.find(loop, c.text, c.stmt)
    for name in copies:
        x = state.get(name)
        if x is None or x.at is None or len(x.loops) <= k or x.loops[k].name != loop:
            raise ValueError(f"{c.text}: {name} is not computed at {c.stmt}'s loop {loop!r}")
        x.loops[k] = Loop(loop, f"({x.loops[k].expr}) - {stages - 1}")
    s.pipelines[loop] = (stages, tuple(copies), index)


def _tensor_core(state, s, c, index, k, i, j):
    """Marks the loops ``k`` (16), ``i`` (2: rows + 8) and ``j`` (2: the
    column pair) of a lane-mapped update as one ``mma.sync`` per warp
    (:mod:`tiramisu_py.analysis.gpu_mma` checks it at compile)."""
    for n in (k, i, j):
        s.find(n, c.text, c.stmt)
    if len({k, i, j}) != 3:
        raise ValueError(f"{c.text}: name three different loops")
    s.tensor_core = (k, i, j, index)


def _restricted(state, s, c, index, text):
    """No schedule change: records the restriction of a rank's part of a
    distributed Function (driver.distributed) in its log, hence in its warm
    key (``text`` is the constraints)."""


def check_unroll(s, loop, factor, text):
    """Refuses an unroll beyond :data:`MAX_UNROLL`, or one that makes the
    statement's unrolled loops copy it more than :data:`MAX_UNROLL_TOTAL` times."""
    if factor is not None and factor > MAX_UNROLL:
        raise ValueError(f"{text}: the unroll factor {factor} is beyond the limit of {MAX_UNROLL} "
                         "(tiramisu_py.lang.schedule.MAX_UNROLL): so many copies of the body make "
                         "compiling slow and the code no faster; unroll a split inner loop")
    names = {lp.name for lp in s.loops}
    others = [(n, t.arg) for n, t in s.tags.items()
              if t.kind == "unrolled" and n != loop and n in names and t.arg]
    total = (factor or 1)
    for _, a in others:
        total *= a
    if others and total > MAX_UNROLL_TOTAL:
        prod = " x ".join(str(a) for a in [a for _, a in others] + [factor])
        raise ValueError(f"{text}: with the unrolled loop(s) {', '.join(n for n, _ in others)} "
                         f"this makes {prod} = {total} copies of the statement, beyond the limit "
                         f"of {MAX_UNROLL_TOTAL} (tiramisu_py.lang.schedule.MAX_UNROLL_TOTAL)")


def _accumulate(state, s, c, index, loop):
    s.find(loop, c.text, c.stmt)
    s.accumulate[loop] = index


def _reassociate(state, s, c, index):
    s.reassociate = True


def _nontemporal(state, s, c, index):
    s.nontemporal = True


def _after(state, s, c, index, other, loop):
    """Moves ``c.stmt`` right after ``other``, sharing ``other``'s loops up to
    and including ``loop`` (None: no shared loop)."""
    t = state[other]
    depth = 0 if loop is None else t.find(loop, c.text, other) + 1
    if len(s.loops) < depth:
        raise ValueError(f"{c.text}: {c.stmt} has {len(s.loops)} loops; it cannot share "
                         f"{depth} loops with {other}")
    prefix = t.consts[:depth]
    pos = t.consts[depth]
    for name, r in state.items():
        if r is s or len(r.consts) <= depth or r.consts[:depth] != prefix:
            continue
        if r.consts[depth] > pos:
            r.consts[depth] += 1
    s.consts[:depth] = list(prefix)
    s.consts[depth] = pos + 1


def _compute_at(state, s, c, index, consumer, loop, group):
    """Moves the producer's group inside ``consumer``'s loops up to ``loop``,
    right before ``consumer``; the copies' outer loops are tp_o0, tp_o1, ...
    The consumer may itself be computed at another statement (nested
    compute_at): its loops then start with that statement's, which the
    producer's copies share too."""
    if consumer in group:
        raise ValueError(f"{c.text}: a computation cannot be computed at itself")
    cs = state[consumer]
    inner = [n for n, r in state.items() if r.at is not None and r.at[1] in group]
    if inner:
        raise ValueError(f"{c.text}: {inner[0]} is already computed at {c.stmt}; apply "
                         "compute_at from the outermost consumer inwards")
    depth = cs.find(loop, c.text, consumer) + 1
    prefix, pos = cs.consts[:depth], cs.consts[depth]
    firsts = sorted({state[g].consts[0] for g in group})
    for name, r in state.items():
        if name in group or len(r.consts) <= depth or r.consts[:depth] != prefix:
            continue
        if r.consts[depth] >= pos:
            r.consts[depth] += len(firsts)
    shared = [lp.name for lp in cs.loops[:depth]]
    for g in group:
        x = state[g]
        own = {lp.name for lp in x.loops}
        marked = [n for n in (*x.tags, *x.accumulate) if n in shared and n in own]
        if marked:
            raise ValueError(f"{c.text}: {g}'s loop {marked[0]!r} is tagged and {consumer}'s "
                             f"loop {marked[0]!r}, which {g} would run in, has the same name; "
                             f"{_ONE_NAME}")
    for g in group:
        x = state[g]
        x.consts = list(prefix) + [pos + firsts.index(x.consts[0])] + x.consts[1:]
        x.loops = [Loop(cs.loops[k].name, f"tp_o{k}") for k in range(depth)] + x.loops
        x.at = (c.stmt, consumer, depth)


_OPS = {"split": _split, "interchange": _interchange, "reorder": _reorder, "tile": _tile,
        "tile_band": _tile_band, "collapse": _collapse, "skew": _skew, "shift": _shift, "reverse": _reverse, "tag": _tag,
        "allow_reassociation": _reassociate, "accumulate": _accumulate, "after": _after,
        "nontemporal": _nontemporal,
        "compute_at": _compute_at, "distribute": _distribute,
        "restricted": _restricted, "pipeline": _pipeline, "tensor_core": _tensor_core}


TAG_OPS = ("tag", "allow_reassociation", "accumulate", "tensor_core", "nontemporal")
_ONE_NAME = ("a tag names one loop: split the statement's own loop first (its parts get "
             "names of their own) or declare it under another name")



def loop_name(x):
    if isinstance(x, Var):
        return x.name
    if isinstance(x, str):
        return x
    raise TypeError(f"a loop is named by a var or a string, not {type(x).__name__}")


def attaching_command(commands, stmt):
    """Index of the compute_at command that attached ``stmt`` (or its group)."""
    for k in range(len(commands) - 1, -1, -1):
        c = commands[k]
        if c.op == "compute_at" and stmt in (c.stmt, *c.args[2]):
            return k
    return None



# ------------------------------------------------------------- the tag rules
def check_tag(s, loop, kind, arg, text):
    """The checks of tagging ``loop`` of the statement schedule ``s`` (a
    ``bind``, ``parallelize``, ``vectorize`` or ``unroll``), when the command
    is given: one mapping per loop, one loop per GPU axis."""
    _check_retag(s, loop, kind, arg, text)
    if kind in ("gpu_block", "gpu_thread"):
        _check_bind(s, loop, kind, arg, text)


_TAG_WORDS = {"parallel": "parallelized", "vector": "vectorized", "unrolled": "unrolled"}


def _check_retag(s, loop, kind, arg, text):
    """A loop bound to the GPU keeps its binding: binding it again to another
    axis, or parallelizing, vectorizing or unrolling it (which would replace
    the binding), is refused, and so is binding a parallel, vector or
    unrolled loop (it would silently drop that tag)."""
    old = s.tags.get(loop)
    if old is None or (old.kind, old.arg) == (kind, arg):
        return
    gpu = ("gpu_block", "gpu_thread")
    if old.kind in gpu:
        now = bound_to(old.kind, old.arg)
        raise ValueError(f"{text}: loop {loop!r} is already bound to {now}; a loop has one "
                         "mapping (split it to give its parts different ones)")
    if kind in gpu:
        raise ValueError(f"{text}: loop {loop!r} is {_TAG_WORDS.get(old.kind, old.kind)} "
                         "(a CPU mapping); a GPU loop cannot be parallelized, vectorized or "
                         "unrolled as well: undo that command, or bind another loop")


def _check_bind(s, loop, kind, axis, text):
    for other, t in s.tags.items():
        if other != loop and t.kind == kind and t.arg == axis and other in {lp.name for lp in s.loops}:
            raise ValueError(f"{text}: loop {other!r} of this statement is already bound to "
                             f"{bound_to(kind, axis)}")


def bound_to(kind, arg) -> str:
    """A GPU tag as ``bind`` takes it: "block.x", "thread.y", "warp.x", "lane.y"."""
    return arg if "." in str(arg) else f"{kind[4:]}.{arg}"


def gpu_tags(st):
    """[(loop index, level, axis, tag)] of a statement's mapped loops."""
    names = [lp.name for lp in st.loops]
    out = []
    for loop, tag in st.tags.items():
        if tag.kind in ("gpu_block", "gpu_thread") and loop in names:
            out.append((names.index(loop), tag.kind[4:], tag.arg, tag))
    return sorted(out, key=lambda x: x[0])


def is_mapped(state) -> bool:
    return any(gpu_tags(st) for st in state.values())

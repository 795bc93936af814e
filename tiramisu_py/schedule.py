"""Schedules: each statement's schedule is a list of dimensions in 2d+1 form
``[c0, l1, c1, l2, ..., ln, cn]``: ``ck`` are constants that order statements
(sequence), ``lk`` are named loops, each an affine (quasi-affine) isl
expression over the statement's own loop variables.  Commands transform these
lists; they are recorded in the function's command log, so the schedule can be
replayed up to any command (to name the command that broke legality).

Commands never use numeric levels: loops are named, and new loops get
predictable names (``split(i)`` -> ``i0``, ``i1``)."""
from __future__ import annotations

import copy
from dataclasses import dataclass, field

from . import provenance
from .atomic import all_or_nothing_call, atomic

# Limits on unrolling, checked when the command is given (ValueError naming
# it).  Unrolling copies the body in the generated code: the C and LLVM
# compilers' time grows with the copies (LLVM: 0.5 s at 256, 4.7 s at 1024,
# minutes at 10,000) and so much straight-line code is never faster.
MAX_UNROLL = 256            # the factor of one unroll (or the extent unrolled whole)
MAX_UNROLL_TOTAL = 1024     # copies of one statement: the product over its unrolled loops


@dataclass
class Loop:
    name: str
    expr: str                 # isl affine text over the statement's loop variables


@dataclass
class Tag:
    kind: str                 # "parallel" | "vector" | "unrolled"
    arg: int | None           # vector width / unroll factor
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
    if s.at is not None and c.op not in _TAG_OPS:
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
    from .gpu import check_tag
    s.find(loop, c.text, c.stmt)
    check_tag(s, loop, kind, arg, c.text)
    if kind == "unrolled":
        _check_unroll(s, loop, arg, c.text)
    s.tags[loop] = Tag(kind, arg, index)


def _check_unroll(s, loop, factor, text):
    """Refuses an unroll beyond :data:`MAX_UNROLL`, or one that makes the
    statement's unrolled loops copy it more than :data:`MAX_UNROLL_TOTAL` times."""
    if factor is not None and factor > MAX_UNROLL:
        raise ValueError(f"{text}: the unroll factor {factor} is beyond the limit of {MAX_UNROLL} "
                         "(tiramisu_py.schedule.MAX_UNROLL): so many copies of the body make "
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
                         f"of {MAX_UNROLL_TOTAL} (tiramisu_py.schedule.MAX_UNROLL_TOTAL)")


def _accumulate(state, s, c, index, loop):
    s.find(loop, c.text, c.stmt)
    s.accumulate[loop] = index


def _reassociate(state, s, c, index):
    s.reassociate = True


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
    for g in group:
        x = state[g]
        x.consts = list(prefix) + [pos + firsts.index(x.consts[0])] + x.consts[1:]
        x.loops = [Loop(cs.loops[k].name, f"tp_o{k}") for k in range(depth)] + x.loops
        x.at = (c.stmt, consumer, depth)


_OPS = {"split": _split, "interchange": _interchange, "reorder": _reorder, "tile": _tile,
        "skew": _skew, "shift": _shift, "reverse": _reverse, "tag": _tag,
        "allow_reassociation": _reassociate, "accumulate": _accumulate, "after": _after,
        "compute_at": _compute_at}


def _root_item(f, stmt):
    """The top-level item (statement or nest) of ``f`` that contains ``stmt``."""
    def contains(item):
        if item is stmt:
            return True
        return any(contains(x) for x in getattr(item, "items", []))
    return next(x for x in f._root.items if contains(x))


def _writers_in_root_item(f, stmt, source):
    from .function import Buffer
    item = _root_item(f, stmt)
    stmts = []

    def walk_items(x):
        if hasattr(x, "items"):
            for y in x.items:
                walk_items(y)
        else:
            stmts.append(x)
    walk_items(item)
    out = []
    for s in stmts:
        target = s.parent if s.is_update else s
        buf = target.buffer
        if (isinstance(source, Buffer) and buf is source) or target is source:
            out.append(s.name)
    return out


def _redirect(e, source, copy_):
    """``e`` with every read of ``source`` turned into a read of ``copy_``."""
    from .expr import Access, BinOp, Call, Cast, Select, UnOp
    if isinstance(e, Access):
        idx = [_redirect(i, source, copy_) for i in e.indices]
        return Access(copy_ if e.target is source else e.target, idx)
    if isinstance(e, BinOp):
        return BinOp(e.op, _redirect(e.a, source, copy_), _redirect(e.b, source, copy_))
    if isinstance(e, UnOp):
        return UnOp(e.op, _redirect(e.a, source, copy_))
    if isinstance(e, Call):
        return Call(e.func, [_redirect(a, source, copy_) for a in e.args])
    if isinstance(e, Select):
        return Select(*(_redirect(x, source, copy_) for x in (e.cond, e.a, e.b)))
    if isinstance(e, Cast):
        return Cast(e.to, _redirect(e.a, source, copy_))
    return e


def loop_name(x):
    from .expr import Var
    if isinstance(x, Var):
        return x.name
    if isinstance(x, str):
        return x
    raise TypeError(f"a loop is named by a var or a string, not {type(x).__name__}")


_TAG_OPS = ("tag", "allow_reassociation", "accumulate")


def _new_loop_names(names, count, text, arg):
    """Checks the loop names a command creates (``names=``/``name=``), with the
    same rule as every declared name (:func:`function.check_name`)."""
    from .function import check_name
    if isinstance(names, str) or not isinstance(names, (tuple, list)) or len(names) != count:
        raise ValueError(f"{text}: {arg} must be {count} loop names, not {names!r}")
    for n in names:
        check_name(n, f"{text}: {arg}: loop")
    return tuple(names)


def _attaching_command(commands, stmt):
    """Index of the compute_at command that attached ``stmt`` (or its group)."""
    for k in range(len(commands) - 1, -1, -1):
        c = commands[k]
        if c.op == "compute_at" and stmt in (c.stmt, *c.args[2]):
            return k
    return None


class Schedulable:
    """Scheduling commands, mixed into statements (computations and updates)."""

    def _command(self, op, *args, text, **kwargs):
        f = self.function
        call = provenance.current()
        cmd = Command(self.name, op, args, kwargs, text, call.text, call.where, call.id)
        state = f._schedule_state()
        at = _attaching_command(f._commands, self.name) \
            if state[self.name].at is not None and op not in _TAG_OPS else None
        if at is not None:
            # a loop transformation of a computed-at producer (e.g. a cache_at
            # copy) acts on its own loops: it takes effect before the compute_at
            commands = f._commands[:at] + [cmd] + f._commands[at:]
            trial = replay(f._model(), commands)     # validate now: errors name the call
            f._commands[:] = commands
        else:
            trial = copy.deepcopy(state)
            apply(trial, cmd, len(f._commands))        # validate now: errors name the call
            f._commands.append(cmd)
        f._state_cache = trial
        f._compiled = None
        return self

    @provenance.command
    def split(self, loop, factor, names=None):
        """Splits ``loop`` into ``loop0`` (outer, ``loop // factor``) and
        ``loop1`` (inner, ``loop % factor``); partial last tiles are fine."""
        n = loop_name(loop)
        text = f"{self.name}.split({n}, {factor})"
        names = _new_loop_names(names, 2, text, "names=") if names is not None \
            else (n + "0", n + "1")
        return self._command("split", n, factor, names, text=text)

    @provenance.command
    def tile(self, *args, names=None):
        """``tile(i, j, fi, fj)`` or ``tile(i, j, k, fi, fj, fk)``: loops
        ``i0, j0[, k0], i1, j1[, k1]``.  The loops must be nested in that order."""
        if len(args) not in (4, 6):
            raise TypeError("tile takes 2 or 3 loops followed by as many factors")
        d = len(args) // 2
        loops = [loop_name(x) for x in args[:d]]
        factors = args[d:]
        text = f"{self.name}.tile({', '.join(loops)}, {', '.join(map(str, factors))})"
        if names is None:
            names = [(n + "0", n + "1") for n in loops]
        else:
            if isinstance(names, str) or not isinstance(names, (tuple, list)) \
                    or len(names) != d:
                raise ValueError(f"{text}: names= must be {d} pairs of loop names, "
                                 f"not {names!r}")
            names = [_new_loop_names(p, 2, text, "names=") for p in names]
        return self._command("tile", loops, factors, names, text=text)

    @provenance.command
    def interchange(self, a, b):
        a, b = loop_name(a), loop_name(b)
        return self._command("interchange", a, b, text=f"{self.name}.interchange({a}, {b})")

    @provenance.command
    def reorder(self, *loops):
        """Puts the named loops, in the given order, at the positions they
        occupy together."""
        names = [loop_name(x) for x in loops]
        return self._command("reorder", *names, text=f"{self.name}.reorder({', '.join(names)})")

    @provenance.command
    def skew(self, outer, inner, factor=1, name=None):
        """``inner' = inner + factor * outer`` (unimodular, no interchange)."""
        o, i = loop_name(outer), loop_name(inner)
        text = f"{self.name}.skew({o}, {i}, {factor})"
        if name is not None:
            name = _new_loop_names((name,), 1, text, "name=")[0]
        return self._command("skew", o, i, factor, name or i, text=text)

    @provenance.command
    def shift(self, loop, amount):
        n = loop_name(loop)
        return self._command("shift", n, amount, text=f"{self.name}.shift({n}, {amount})")

    @provenance.command
    def reverse(self, loop):
        n = loop_name(loop)
        return self._command("reverse", n, text=f"{self.name}.reverse({n})")

    @provenance.command
    @all_or_nothing_call
    def parallelize(self, loop, allow_reassociation=False):
        """Runs ``loop``'s iterations in parallel (OpenMP); legal when it
        carries no dependence in the final schedule."""
        n = loop_name(loop)
        if allow_reassociation:
            self.allow_reassociation()
        return self._command("tag", n, "parallel", None, text=f"{self.name}.parallelize({n})")

    @provenance.command
    @all_or_nothing_call
    def vectorize(self, loop, width, allow_reassociation=False):
        """Runs ``loop`` as SIMD lanes of ``width``; strip-mines it first
        (``loop0``, ``loop1``) unless its extent is at most ``width``."""
        n = loop_name(loop)
        if allow_reassociation:
            self.allow_reassociation()
        if not isinstance(width, int) or width < 1:
            raise ValueError(f"{self.name}.vectorize({n}, {width}): width must be a positive int")
        ext = self.function._loop_extent(self.name, n)
        if ext is None or ext > width:
            self.split(n, width)
            n = n + "1"
        return self._command("tag", n, "vector", width,
                             text=f"{self.name}.vectorize({n}, {width})")

    @provenance.command
    @all_or_nothing_call
    def unroll(self, loop, factor=None):
        """Unrolls ``loop`` in the generated source; with ``factor``, strip-mines
        it first unless its extent is at most ``factor``.  The factor (or the
        extent, without one) is at most :data:`MAX_UNROLL`, and the unrolled
        loops of a statement copy it at most :data:`MAX_UNROLL_TOTAL` times."""
        n = loop_name(loop)
        if factor is not None and (not isinstance(factor, int) or isinstance(factor, bool)
                                   or factor < 1):
            raise ValueError(f"{self.name}.unroll({n}, {factor!r}): the factor must be a "
                             "positive int")
        ext = self.function._loop_extent(self.name, n)
        if factor is None:
            if ext is None:
                raise ValueError(f"{self.name}.unroll({n}): the loop's extent is not a "
                                 "constant; give a factor")
            if ext > MAX_UNROLL:
                raise ValueError(f"{self.name}.unroll({n}): the loop's extent {ext} is beyond "
                                 f"the unroll limit of {MAX_UNROLL} "
                                 "(tiramisu_py.schedule.MAX_UNROLL); give a factor")
            factor = ext
        # refuse before the split is recorded: a refused command leaves no trace
        _check_unroll(self.function._schedule_state()[self.name], n, factor,
                      f"{self.name}.unroll({n}, {factor})")
        if ext is None or ext > factor:
            self.split(n, factor)
            n = n + "1"
        return self._command("tag", n, "unrolled", factor,
                             text=f"{self.name}.unroll({n}, {factor})")

    @provenance.command
    def bind(self, loop, to):
        """Maps ``loop`` to a GPU grid or block index: ``to`` is "block.x",
        "block.y", "block.z", "thread.x", "thread.y" or "thread.z".  Block
        loops are the outermost and carry no dependence; a dependence between
        threads of one block gets a barrier where it is carried (a serial loop
        or a sequence outside the thread loops), and is refused inside the
        thread loops (:mod:`tiramisu_py.gpu`, checked by ``compile()``)."""
        n = loop_name(loop)
        text = f"{self.name}.bind({n}, {to!r})"
        level, _, axis = to.partition(".") if isinstance(to, str) else ("", "", "")
        if level not in ("block", "thread") or axis not in ("x", "y", "z"):
            raise ValueError(f"{text}: to must be one of 'block.x', 'block.y', 'block.z', "
                             f"'thread.x', 'thread.y', 'thread.z', not {to!r}")
        return self._command("tag", n, "gpu_" + level, axis, text=text)

    @provenance.command
    @all_or_nothing_call
    def gpu_tile(self, i, j, ti, tj, names=None):
        """``tile(i, j, ti, tj)`` and maps the tile loops to the GPU: ``i0`` to
        block.y, ``j0`` to block.x, ``i1`` to thread.y, ``j1`` to thread.x
        (the inner loop ``j`` on x, for coalesced accesses).  A block has
        ``ti * tj`` threads (at most 1024)."""
        a, b = loop_name(i), loop_name(j)
        for f in (ti, tj):
            if not isinstance(f, int) or isinstance(f, bool) or f < 1:
                raise ValueError(f"{self.name}.gpu_tile({a}, {b}, {ti}, {tj}): the tile sizes "
                                 "must be positive ints")
        if ti * tj > 1024:
            raise ValueError(f"{self.name}.gpu_tile({a}, {b}, {ti}, {tj}): {ti} x {tj} = "
                             f"{ti * tj} threads per block, beyond the limit of 1024")
        self.tile(a, b, ti, tj, names=names)
        (i0, i1), (j0, j1) = names if names is not None else ((a + "0", a + "1"), (b + "0", b + "1"))
        self.bind(i0, "block.y").bind(j0, "block.x")
        return self.bind(i1, "thread.y").bind(j1, "thread.x")

    @provenance.command
    @all_or_nothing_call
    def accumulate_locally(self, loop, allow_reassociation=False):
        """Accumulates this reduction over ``loop`` (and the loops inside it) in
        a small local tile that starts at the reduction's identity, one slot
        per iteration of the loops inside ``loop``, and combines the tile into
        the output once after each run of ``loop`` (a register block that
        never loads the output inside the loop: BLIS's micro-kernel).  It
        reassociates the reduction, so it needs ``allow_reassociation``;
        ``compile()`` checks that no other statement in ``loop`` accesses the
        output and that the element updated does not change with ``loop``."""
        n = loop_name(loop)
        if not getattr(self, "is_update", False):
            raise ValueError(f"{self.name}.accumulate_locally({n}): applies to updates "
                             "(reductions)")
        if allow_reassociation:
            self.allow_reassociation()
        return self._command("accumulate", n, text=f"{self.name}.accumulate_locally({n})")

    @provenance.command
    def allow_reassociation(self):
        """Lets this reduction's iterations be reordered, parallelised or
        vectorised (floating-point results may change in the last bits)."""
        if not getattr(self, "is_update", False):
            raise ValueError(f"{self.name}: allow_reassociation applies to updates (reductions)")
        return self._command("allow_reassociation", text=f"{self.name}.allow_reassociation()")

    @provenance.command
    def after(self, other, loop=None):
        """Runs this statement right after ``other``, inside ``other``'s loops up
        to and including ``loop`` (``None``: after it, sharing no loop)."""
        n = None if loop is None else loop_name(loop)
        return self._command("after", other.name, n,
                             text=f"{self.name}.after({other.name}, {n})")

    @provenance.command
    def compute_at(self, consumer, loop):
        """Computes this computation (and its updates) inside ``consumer``'s
        loops up to and including ``loop``, just before ``consumer``, for the
        region one iteration of those loops reads (overlaps are recomputed).
        The producer's own loop transformations may come before or after this
        command: given after, they are recorded before it (they act on the
        producer's own loops, inside the consumer's)."""
        from .function import Computation
        if not isinstance(self, Computation):
            raise ValueError(f"{self.name}.compute_at: apply it to the computation, not an update")
        n = loop_name(loop)
        group = [self.name] + [u.name for u in self.updates]
        return self._command("compute_at", consumer.name, n, group,
                             text=f"{self.name}.compute_at({consumer.name}, {n})")

    @provenance.command
    @atomic
    def cache_at(self, source, loop, name=None):
        """Array packing: a copy of the part of ``source`` (an input, a buffer
        or a computation) that one iteration of this statement's ``loop``
        reads, made just before it, inside that loop; this statement then reads
        the copy.  Returns the copy (a computation): ``store_in`` it to choose
        its layout (e.g. a small contiguous tile buffer, reused per iteration).
        ``source`` must not be written inside the loop nest of this statement.
        Like ``cache_shared`` and ``cache_local``, atomic: refused, it leaves
        the Function unchanged; ``f.undo()`` removes the copy too
        (:mod:`tiramisu_py.atomic`)."""
        from .function import Buffer, Computation
        f = self.function
        if not isinstance(source, (Buffer, Computation)):
            raise TypeError(f"{self.name}.cache_at: source must be a buffer or computation")
        if name is not None:
            from .function import check_name
            check_name(name, f"{self.name}.cache_at({source.name}): name=: computation")
        name = name or f"{source.name}_cache"
        writers = _writers_in_root_item(f, self, source)
        if writers:
            raise ValueError(f"{self.name}.cache_at({source.name}): {', '.join(writers)} writes "
                             f"{source.name!r} in the same loop nest, so a copy made before it "
                             "would be stale")
        return _make_copy(self, source, loop, name)

    @provenance.command
    @atomic
    def cache_local(self, source, loop, name=None):
        """A :meth:`cache_at` into per-thread registers on the GPU: the part
        of ``source`` that ONE thread reads in one iteration of ``loop`` (a
        thread loop or a serial loop inside the thread loops) is copied by
        that thread into a local array (the classic register fragments: the
        A and B values of a micro-tile per k step); this statement then reads
        the copy.  The array is shaped by that footprint (isl: per dimension
        the bounding box, compressed by its stride), at most
        :data:`tiramisu_py.gpu_local.MAX_LOCAL_ELEMENTS` elements.  No
        barrier is needed; ``compile()`` checks that every value read from
        the copy was written by the same thread.  ``source`` (an input, a
        temporary or a shared tile such as ``A_shared``) must not be written
        inside ``loop``."""
        from . import gpu_local
        return gpu_local.cache_local(self, source, loop_name(loop), name)

    @provenance.command
    @atomic
    def cache_shared(self, source, loop, name=None):
        """A :meth:`cache_at` into GPU shared memory: the part of ``source``
        one iteration of ``loop`` reads is copied, cooperatively by the
        block's threads, into a ``__shared__`` tile shaped like that
        footprint's bounding box (computed exactly with isl) and indexed
        ``v % extent``; this statement then reads the tile.  ``loop`` is a
        block or a block-level serial loop of this statement, whose thread
        loops (bound before this call) give the copy's threads.  The
        barriers the copy needs (after it; before the next copy overwrites
        the tile) are placed by the GPU legality check, and the tiles of a
        block must fit in shared memory (checked by ``compile``)."""
        from . import gpu
        return gpu.cache_shared(self, source, loop_name(loop), name)

    @provenance.command
    def then(self, other, loop=None):
        """``a.then(b, loop)`` is ``b.after(a, loop)``; returns ``b`` to chain."""
        other.after(self, loop)
        return other


def _make_copy(stmt, source, loop, name):
    """The copy of ``cache_at``: a computation reading ``source`` over its
    whole domain, computed at ``stmt``'s ``loop``; ``stmt`` reads the copy."""
    from .expr import Access, walk
    from .function import Computation
    f = stmt.function
    reads = [n.target for n in walk(stmt.value) if isinstance(n, Access)]
    if not any(t is source for t in reads):
        names = sorted({t.name for t in reads})
        raise ValueError(f"{stmt.name}: cannot copy {source.name!r} for it at "
                         f"{loop_name(loop)!r}: "
                         f"{stmt.name} does not read {source.name!r} (it reads "
                         f"{', '.join(names) or 'nothing'}; a source already copied is read "
                         "through its copy)")
    if isinstance(source, Computation):
        vars_ = list(source.vars)
    else:
        vars_ = [f.var(f"{name}_{k}", 0, dim) for k, dim in enumerate(source.shape)]
    # declare the copy right before the consumer's outermost loop nest
    saved_stack, saved_objs = f._nest_stack, getattr(f, "_nest_objs", [])
    f._nest_stack, f._nest_objs = [], []
    try:
        copy_ = f.computation(name, vars_, source[tuple(vars_)], dtype=source.dtype)
    finally:
        f._nest_stack, f._nest_objs = saved_stack, saved_objs
    root = f._root.items
    root.remove(copy_)
    root.insert(root.index(_root_item(f, stmt)), copy_)
    stmt.value = _redirect(stmt.value, source, copy_)
    copy_.compute_at(stmt, loop)
    return copy_

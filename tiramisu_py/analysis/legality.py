"""Dependences and legality.

Dependences are memory-based (every pair of accesses to one element, at least
one a write, in program order): RAW, WAR and WAW together.  Indirect and
data-dependent accesses enter as their sound over-approximations, so nothing is
ever accepted on the strength of a value the compiler cannot know.

A schedule is legal iff every dependence it runs the other way changes no
value, and no loop tagged parallel or vector carries a dependence.  Running a
pair the other way changes a value when it changes which write a read sees,
or (for an array the caller sees: not a temporary) which write is an
element's last; a write that is overwritten before any read, or a
temporary's value that nothing reads, orders nothing
(:func:`tiramisu_py.poly.dataflow.value_violations`, exact).  That rule
applies to a buffer whose writes are all exact (affine, in affine domains),
that no compute_at copy touches and that no reassociated reduction updates;
any other buffer keeps every memory dependence in order.  A tagged loop must
carry no memory dependence at all (two iterations touching one element, one
a write, would race), privatised temporaries aside.
An update whose statement opted in with ``allow_reassociation`` drops its
reduction self-dependences (through its accumulator) from both checks.
A read that names a computation sees the write of the value it names, in
program order as under the schedule: storage that ``store_in`` folds or
shares is refused where a write reaches the element in between
(:func:`_check_storage`)."""
from __future__ import annotations

import islpy as isl

from ..poly.dataflow import (exact_writes, reads_initial, shares_named_values,
                             storage_violations, value_flow, value_violations)
from ..base import provenance
from ..base.errors import IllegalScheduleError, Violation
from ..poly.model import build_model
from ..poly.order import common_constants, without_positions
from ..lang.schedule import initial_state, replay

def analyse(f):
    """The model, dependences and (unchecked) schedule of ``f``."""
    model = build_model(f)
    return model, Dependences(model), replay(model, f._commands)


KIND = {(True, False): "RAW", (False, True): "WAR", (True, True): "WAW"}


class Dependences:
    def __init__(self, model):
        self.model = model
        self._lex_cache = {}           # (statement pair, their schedules) -> lex_lt map
        orig_state = initial_state(model)
        orig = model.schedule_map(orig_state)
        self.maps = {}                 # (stmt, access index) -> isl.Map
        by_buf = {}
        for m in model.stmts:
            for k, a in enumerate(m.accesses):
                amap, _ = model.access_map(m, a)
                self.maps[(m.name, k)] = amap
                w, al = by_buf.get(a.buffer.name, (None, None))
                um = amap.to_union_map()
                al = um if al is None else al.union(um)
                if a.write:
                    w = um if w is None else w.union(um)
                by_buf[a.buffer.name] = (w, al)
        self.by_buffer = {}
        for name, (w, al) in by_buf.items():
            if w is None:
                continue                 # read-only: no dependence
            pairs = w.apply_range(al.reverse()).union(al.apply_range(w.reverse()))
            d = self.ordered(pairs, orig_state, orig)
            if not d.is_empty():
                self.by_buffer[name] = d
        self.reductions = self._reductions()

    def _reductions(self):
        """Self-dependences of each update through its accumulator element."""
        out = {}
        for m in self.model.stmts:
            s = m.stmt
            if not s.is_update:
                continue
            target = [k for k, a in enumerate(m.accesses) if a.write][0]
            tbuf = m.accesses[target].buffer.name
            others = [k for k, a in enumerate(m.accesses)
                      if a.buffer.name == tbuf and k != target and not a.implicit]
            if others:
                continue                   # reads the accumulator's array itself: not a reduction
            acc = self.maps[(m.name, target)].to_union_map()
            out[m.name] = (tbuf, acc.apply_range(acc.reverse()))
        return out

    def ordered(self, pairs, state, sched=None):
        """The pairs ``x -> y`` of the union map ``pairs`` where ``x`` runs
        before ``y`` under ``state`` (``sched``: its union schedule map).
        Computed per statement pair present in ``pairs``, each pair's lex
        order cached by the two schedules: a ``lex_lt_union_map`` of the whole
        schedule is quadratic in the number of statements (64 skewed
        statements: 0.16 s per check, and refusing a command replays a check
        per prefix of the command log)."""
        maps = []
        pairs.foreach_map(maps.append)
        if not maps:
            return pairs

        def split():
            per_stmt = {}

            def keep(m):
                per_stmt[m.get_tuple_name(isl.dim_type.in_)] = m
            (self.schedule(state) if sched is None else sched).foreach_map(keep)
            return per_stmt, schedule_depth(self.model, state)
        per_stmt, depth = split() if sched is not None else self._memo(state, "per_stmt", split)
        out = None
        for m in maps:
            s, t = m.get_tuple_name(isl.dim_type.in_), m.get_tuple_name(isl.dim_type.out)
            key = (s, t, _sched_key(state, s), _sched_key(state, t), depth)
            lt = self._lex_cache.get(key)
            if lt is None:
                a, b = per_stmt[s], per_stmt[t]
                common = common_constants([a, b])         # the same order without them
                lt = self._lex_cache[key] = without_positions(a, common).lex_lt_map(
                    without_positions(b, common))
            r = m.intersect(lt).to_union_map()
            out = r if out is None else out.union(r)
        return out

    def value_rule_applies(self, state, name):
        """True when the value rule orders buffer ``name`` under ``state``
        (see the module's doc): its writes are exact, no compute_at copy
        touches it and no reassociated reduction updates it."""
        ats = self.model.compute_ats(state)
        return not (name in {a.buffer.name for n in ats for a in self.model.by_name[n].accesses}
                    or any(buf == name and state[stmt].reassociate
                           for stmt, (buf, _) in self.reductions.items())
                    or not exact_writes(self.model, name))

    def harmful(self, state, name, broken):
        """The pairs of ``broken`` (dependences through buffer ``name`` that
        ``state`` runs the other way) that change a value: exactly those of
        :func:`~tiramisu_py.poly.dataflow.value_violations` where that rule
        applies (see the module's doc), else all of them."""
        if not self.value_rule_applies(state, name):
            return broken
        live_out = next(a.buffer.kind != "temp" for m in self.model.stmts for a in m.accesses
                        if a.buffer.name == name)
        return value_violations(self.model, name, self.schedule(state), broken, live_out)

    def _memo(self, state, key, compute):
        """``compute()`` once per schedule state (a replayed state is a new dict,
        never changed afterwards), so per-loop checks share the work."""
        if getattr(self, "_memo_state", None) is not state:
            self._memo_state, self._memo_values = state, {}
        if key not in self._memo_values:
            self._memo_values[key] = compute()
        return self._memo_values[key]

    def schedule(self, state):
        """The union schedule map of ``state``."""
        return self._memo(state, "schedule", lambda: self.model.schedule_map(state))

    def relevant(self, state):
        """Ordering dependences per buffer under ``state``: without the
        reductions it lets reassociate, carried over to compute_at copies."""
        return {name: d for name, (d, _) in self.with_conflicts(state).items()}

    def with_conflicts(self, state):
        """buffer -> (ordering dependences, conflicts that only forbid running
        in parallel: copies of a compute_at producer in different iterations)."""
        return self._memo(state, "with_conflicts", lambda: self._with_conflicts(state))

    def _with_conflicts(self, state):
        ats = list({id(a): a for a in self.model.compute_ats(state).values()}.values())
        out = {}
        for name, d in self.by_buffer.items():
            for stmt, (buf, red) in self.reductions.items():
                if buf == name and state[stmt].reassociate:
                    d = d.subtract(red)
            if d.is_empty():
                continue
            conflicts = None
            for at in ats:
                d, more = _transform(d, at, name)
                if more is not None:
                    conflicts = more if conflicts is None else conflicts.union(more)
            out[name] = (d, conflicts)
        return out

    def reductions_in(self, state):
        """Reduction self-dependences, carried over to compute_at copies."""
        return self._memo(state, "reductions_in", lambda: self._reductions_in(state))

    def _reductions_in(self, state):
        ats = list({id(a): a for a in self.model.compute_ats(state).values()}.values())
        out = {}
        for stmt, (buf, red) in self.reductions.items():
            for at in ats:
                red, _ = _transform(red, at, buf)
            out[stmt] = (buf, red)
        return out


def _transform(d, at, buffer):
    maps = []
    d.foreach_map(lambda m: maps.append(m))
    if not maps:                # no dependence (an empty domain): nothing to carry over
        return d, None
    order, conflicts = None, None
    for m in maps:
        o, c = at.transform(m, buffer)
        order = o if order is None else order.union(o)
        if c is not None:
            conflicts = c if conflicts is None else conflicts.union(c)
    return order, conflicts


def check(model, deps, commands, order=True):
    """Raises IllegalScheduleError if the final schedule (all ``commands``)
    breaks a dependence or a tagged loop carries one.  ``order=False`` skips
    the first test, for a caller that knows the commands added since a legal
    schedule keep the order of every pair of instances (splits and tags:
    the auto-scheduler's point-loop steps)."""
    state = replay(model, commands)
    bad = _first_violation(model, deps, state) if order else None
    if bad is not None:
        buf, viol = bad
        k = _blame(model, deps, commands)
        cmd = commands[k].text if k is not None else "the schedule"
        text, pair = _describe_pair(model, deps, buf, viol, state, commands)
        raise IllegalScheduleError(f"{cmd} is illegal: " + text
                                   + (_given(commands[k]) if k is not None else ""), pair)
    _check_storage(model, deps, state)
    for stmt, s in state.items():
        for loop, tag in s.tags.items():
            if loop not in [lp.name for lp in s.loops]:
                raise IllegalScheduleError(
                    f"{commands[tag.command].text}: loop {loop!r} of {stmt} no longer exists "
                    "after later commands" + _given(commands[tag.command]))
            if tag.kind in ("gpu_block", "gpu_thread"):
                continue                     # tiramisu_py.analysis.gpu_plan checks the mapping
            carried = carried_by(model, deps, state, stmt, loop)
            tag.private = []
            while tag.kind == "parallel" and carried is not None \
                    and privatisable(model, deps, state, stmt, loop, carried[0]):
                tag.private.append(carried[0])
                carried = carried_by(model, deps, state, stmt, loop, private=tag.private)
            if tag.kind in ("parallel", "vector"):
                tag.reductions = [r for r in reductions_carried(model, deps, state, stmt, loop)
                                  if r[0] not in tag.private]
            if carried is not None:
                buf, viol = carried
                what = {"parallel": "parallelised", "vector": "vectorised",
                        "unrolled": None}[tag.kind]
                if what is None:
                    continue
                hint = ""
                red = deps.reductions.get(stmt)
                cmd = commands[tag.command]
                if red and red[0] == buf and not s.reassociate and s.tags:
                    fix = provenance.with_kwarg(cmd.call, "allow_reassociation=True") if cmd.call \
                        else f"{cmd.text[:-1]}, allow_reassociation=True)"
                    hint = f" It is a reduction: {fix} permits reordering it."
                text, pair = _describe_pair(model, deps, buf, viol, state, commands, loop)
                raise IllegalScheduleError(
                    f"{cmd.text} is illegal: loop {loop!r} cannot be {what}, "
                    f"it carries a dependence: " + text + hint + _given(cmd), pair)
        for loop, k in s.accumulate.items():
            _check_accumulate(model, deps, state, stmt, loop, commands[k])
    return state


def _check_storage(model, deps, state):
    """Refuses a ``store_in`` whose folded or shared storage lets a write
    overwrite a computation's value before a read that names it, under the
    final schedule (:func:`~tiramisu_py.poly.dataflow.storage_violations`)."""
    for name in sorted({a.buffer.name for m in model.stmts for a in m.accesses}):
        if not shares_named_values(model, name) or not deps.value_rule_applies(state, name):
            continue
        for bad, meant in storage_violations(model, name, deps.schedule(state)):
            # { [read -> element] -> [the write it sees -> the value it names] }
            found = _sample_storage(model, bad.reverse().range_product(meant.reverse()))
            if found is None:
                continue
            (t, dst), (s, src), (v, value), params = found
            owner = model.by_name[v].stmt
            owner = owner.parent if owner.is_update else owner
            where = ", ".join(repr(e) for e in owner.store_index)
            shown = _shown(params)
            raise IllegalScheduleError(
                f"{owner.name}.store_in({name}, [{where}]) is illegal under this schedule: "
                f"{_instance(model, t, dst)} reads {_instance(model, v, value)} from {name!r}, "
                f"but {_instance(model, s, src)} overwrites that element before the read"
                + (f", e.g. with {shown}" if shown else "")
                + f". Give {owner.name} more storage, or schedule each read of a value before "
                "the next write to its element (e.g. with after).")


def _sample_storage(model, both):
    """((read stmt, point), (seen write's stmt, point), (value's stmt,
    point), params) of one point of ``both`` ({ [read -> element] -> [seen
    -> value] }) with small param values, or None."""
    for mm, pt, params in _small_points(model, both):
        read, pair = mm.domain().unwrap(), mm.range().unwrap()
        coords = [pt.get_coordinate_val(isl.dim_type.set, i).to_python()
                  for i in range(mm.wrap().dim(isl.dim_type.set))]
        n_r, n_e = read.dim(isl.dim_type.in_), read.dim(isl.dim_type.out)
        n_s = pair.dim(isl.dim_type.in_)
        rest = coords[n_r + n_e:]
        return ((read.get_tuple_name(isl.dim_type.in_), coords[:n_r]),
                (pair.get_tuple_name(isl.dim_type.in_), rest[:n_s]),
                (pair.get_tuple_name(isl.dim_type.out), rest[n_s:]), params)
    return None


def _given(cmd) -> str:
    """The line that says where the command was given, as written."""
    return f"\n  given: {cmd.given()}" if (cmd.call or cmd.where) else ""


def _check_accumulate(model, deps, state, stmt, loop, cmd):
    try:
        _check_accumulate_text(model, deps, state, stmt, loop, cmd.text,
                               provenance.with_kwarg(cmd.call, "allow_reassociation=True")
                               if cmd.call else None)
    except IllegalScheduleError as e:
        raise IllegalScheduleError(str(e) + _given(cmd)) from None


def _check_accumulate_text(model, deps, state, stmt, loop, text, fix):
    """``accumulate_locally(loop)``: the statement is a reduction (without
    ``allow_reassociation`` its tile is copied in and out: the program's
    order), no other statement in ``loop`` touches its output, and the element it
    updates is fixed by the loops outside and inside ``loop`` (so one slot of
    the local tile holds one element)."""
    s = state[stmt]
    names = [lp.name for lp in s.loops]
    if loop not in names:
        raise IllegalScheduleError(f"{text}: loop {loop!r} of {stmt} no longer exists after "
                                   "later commands")
    if stmt not in deps.reductions:
        raise IllegalScheduleError(f"{text} is illegal: {stmt} is not a reduction (it reads "
                                   "its own output array elsewhere than the updated element)")
    if s.at is not None:
        raise IllegalScheduleError(f"{text}: {stmt} is computed at {s.at[1]}; local "
                                   "accumulation of a compute_at copy is not supported")
    k = names.index(loop)
    m = model.by_name[stmt]
    target = [j for j, a in enumerate(m.accesses) if a.write][0]
    buf = m.accesses[target].buffer.name
    others = [n for n, o in state.items()
              if n != stmt and _inside(o, s, k)
              and any(a.buffer.name == buf for a in model.by_name[n].accesses)]
    if others:
        raise IllegalScheduleError(f"{text} is illegal: loop {loop!r} also runs "
                                   f"{', '.join(others)}, which accesses {buf!r} and would not "
                                   "see the partial results")
    w = deps.maps[(stmt, target)]
    sched = deps.schedule(state).intersect_domain(model.domain(m).to_union_set())
    depth, pos = schedule_depth(model, state), 2 * k + 1
    a = [f"a{i}" for i in range(depth)]
    b = [a[i] if i != pos else f"b{i}" for i in range(depth)]
    other_iter = isl.Map(f"{{ [{', '.join(a)}] -> [{', '.join(b)}] }}", context=model.ctx)
    pairs = sched.apply_range(other_iter.to_union_map()).apply_range(sched.reverse())
    moved = pairs.subtract(w.apply_range(w.reverse()).to_union_map())
    if not moved.is_empty():
        ex = small_pair(model, moved)
        eg = f": e.g. {_instance(model, ex[0], ex[1])} and {_instance(model, ex[2], ex[3])}" \
            if ex else ""
        raise IllegalScheduleError(
            f"{text} is illegal: the element of {buf!r} that {stmt} "
            f"updates changes with loop {loop!r}, so a slot of the local tile would mix "
            f"elements{eg}")


def _sched_key(state, stmt):
    """What a statement's schedule map is made of (its dims and instance tuple)."""
    st = state[stmt]
    return tuple(st.dims()), (st.at[2] if st.at is not None else 0)


def _first_violation(model, deps, state):
    for name, d in deps.relevant(state).items():
        v = d.subtract(deps.ordered(d, state))
        if not v.is_empty():
            v = deps.harmful(state, name, v)
        if not v.is_empty():
            return name, v
    return None


def _blame(model, deps, commands):
    """The command after which the schedule became, and stayed, illegal: the
    one after the last legal prefix of the log, searched from the end (the
    culprit is usually the last command, so this is usually one check)."""
    for k in range(len(commands), -1, -1):
        if _first_violation(model, deps, replay(model, commands, k)) is None:
            return k if k < len(commands) else None
    return -1


def carried_by(model, deps, state, stmt, loop, private=()):
    """(buffer, pairs) of a dependence carried by ``loop`` of ``stmt`` in the
    schedule ``state``, or None.  ``private``: buffers each iteration gets its
    own copy of (:func:`privatisable` proved that no value flows between
    iterations through them: what the loop carries is storage reuse only)."""
    rel = _same_loop(model, deps, state, stmt, loop)
    for name, (d, conflicts) in deps.with_conflicts(state).items():
        if name in private:
            continue
        if conflicts is not None:
            d = d.union(conflicts).union(conflicts.reverse())
        carried = d.intersect(rel)
        if not carried.is_empty():
            return name, carried
    return None


def _same_loop(model, deps, state, stmt, loop):
    """:func:`_same_loop_relation`, memoised per schedule state."""
    return deps._memo(state, ("same_loop", stmt, loop),
                      lambda: _same_loop_relation(model, deps, state, stmt, loop))


def _same_loop_relation(model, deps, state, stmt, loop):
    """Pairs of statement instances in one instance of the loop's
    surroundings but in different iterations of it (every statement fused
    into the loop included)."""
    sched = deps.schedule(state)
    same_loop = _same_loop_times(model, state, stmt, loop)
    return sched.apply_range(same_loop.to_union_map()).apply_range(sched.reverse())


def _same_loop_times(model, state, stmt, loop):
    """The same pairs as schedule times: { t -> t' } inside the loop, equal
    outside it, different in it."""
    s = state[stmt]
    k = [lp.name for lp in s.loops].index(loop)
    pos = 2 * k + 1
    depth = schedule_depth(model, state)
    space = isl.Set(f"{{ [{', '.join(f'd{i}' for i in range(depth))}] }}", context=model.ctx)
    eq = isl.Map.universe(isl.Space.map_from_set(space.get_space()))
    for i in range(pos):
        eq = eq.equate(isl.dim_type.in_, i, isl.dim_type.out, i)
    diff = isl.Map(f"{{ [{', '.join(f'a{i}' for i in range(depth))}] -> "
                   f"[{', '.join(f'b{i}' for i in range(depth))}] : b{pos} != a{pos} }}",
                   context=model.ctx)
    # only instances inside this loop: the sequence constants before it are the statement's
    inside = isl.Set(f"{{ [{', '.join(f'd{i}' for i in range(depth))}] : "
                     + " and ".join([f"d{2 * m} = {c}" for m, c in enumerate(s.consts[:k + 1])])
                     + " }", context=model.ctx)
    return eq.intersect(diff).intersect_domain(inside).intersect_range(inside)


def _inside(o, s, k):
    """True when statement schedule ``o`` runs inside loop ``k`` of ``s`` (the
    same sequence positions up to that loop)."""
    return len(o.loops) > k and o.consts[:k + 1] == s.consts[:k + 1]


def privatisable(model, deps, state, stmt, loop, buf):
    """True when a parallel ``loop`` can give each thread its own copy of the
    temporary ``buf``: every statement that touches it runs inside the loop,
    and the loop carries only storage conflicts through it, no flow of
    values.  Either the only conflicts are those of compute_at copies of
    different iterations reusing one buffer, or (statements stored into a
    buffer that lacks the loop's index, none of them a compute_at copy) every
    read sees a value written in its own iteration of the loop: exact
    last-writer flow (:mod:`tiramisu_py.poly.dataflow`), and no read of initial
    content."""
    users = [m for m in model.stmts if any(a.buffer.name == buf for a in m.accesses)]
    kinds = {a.buffer.kind for m in users for a in m.accesses if a.buffer.name == buf}
    if kinds != {"temp"}:
        return False
    s = state[stmt]
    k = [lp.name for lp in s.loops].index(loop)
    if not all(_inside(state[m.name], s, k) for m in users):
        return False
    if all(state[m.name].at is None for m in users):
        if reads_initial(model, buf):
            return False
        # the flow's pairs in schedule time, in different iterations of the loop
        sched = deps.schedule(state)
        timed = value_flow(model, buf).apply_domain(sched).apply_range(sched)
        return timed.intersect(_same_loop_times(model, state, stmt, loop).to_union_map()).is_empty()
    rel = _same_loop(model, deps, state, stmt, loop)
    order = deps.relevant(state).get(buf)
    return order is None or order.intersect(rel).is_empty()


def reductions_carried(model, deps, state, stmt, loop):
    """(buffer, op) of the reassociated reductions whose self-dependences the
    loop carries: the backend must privatise and combine them."""
    out = []
    rel = _same_loop(model, deps, state, stmt, loop)
    for name, (buf, red) in deps.reductions_in(state).items():
        if state[name].reassociate and not red.intersect(rel).is_empty():
            item = (buf, model.by_name[name].stmt.op)
            if item not in out:
                out.append(item)
    return out


def schedule_depth(model, state):
    return max(2 * len(s.loops) + 1 for s in state.values())


# ------------------------------------------------------------------ messages
def _small_points(model, v):
    """(map, point of it as a wrapped set, params) of the maps of the union
    map ``v``, each with the smallest param values that give one, the
    smaller bounds first."""
    maps = []
    v.foreach_map(maps.append)
    for bound in (1, 2, 3, 4, 6, 8, 16, 64, 1024):
        cons = [f"0 <= {p} <= {bound}" for p in model.params]
        box = isl.Set(f"{model.prefix()}{{ : {' and '.join(cons) or 'true'} }}", context=model.ctx)
        for m in maps:
            mm = m.intersect_params(box)
            if mm.is_empty():
                continue
            pt = mm.wrap().sample_point()
            yield mm, pt, {mm.get_dim_name(isl.dim_type.param, i):
                           pt.get_coordinate_val(isl.dim_type.param, i).to_python()
                           for i in range(mm.dim(isl.dim_type.param))}


def _shown(params) -> str:
    """The user's params of a sampled pair, as a message names them."""
    return ", ".join(f"{k}={v}" for k, v in params.items() if not k.startswith("tp_"))


def small_pair(model, v):
    """One concrete (src, dst, params) pair of ``v`` with small param values."""
    for mm, pt, params in _small_points(model, v):
        n_in = mm.dim(isl.dim_type.in_)
        src = [pt.get_coordinate_val(isl.dim_type.set, i).to_python() for i in range(n_in)]
        dst = [pt.get_coordinate_val(isl.dim_type.set, n_in + i).to_python()
               for i in range(mm.dim(isl.dim_type.out))]
        return (mm.get_tuple_name(isl.dim_type.in_), src,
                mm.get_tuple_name(isl.dim_type.out), dst, params)
    return None


def _instance(model, stmt, point):
    m = model.by_name[stmt]
    names = [v.name for v in m.vars]
    extra = len(point) - len(names)            # a compute_at copy: consumer loops first
    names = [f"at{k}" for k in range(extra)] + names
    return f"{stmt}({', '.join(f'{n}={x}' for n, x in zip(names, point))})"


def _describe_pair(model, deps, buf, viol, state, commands, loop=None):
    """The words of :func:`describe` and the pair they name as data (a
    :class:`Violation`, which ``IllegalScheduleError.draw`` pictures), or None
    when no pair could be sampled.  ``loop``: the parallel loop that carries
    the dependence (its two instances would run concurrently)."""
    pair = small_pair(model, viol)
    text = describe(model, deps, buf, viol, state, loop is not None, pair)
    if pair is None:
        return text, None
    s, src, t, dst, params = pair
    kind = _accesses_at(model, deps, s, src, t, dst, buf, params)[0]
    return text, Violation(model.f, list(commands), buf, kind, (s, tuple(src)), (t, tuple(dst)),
                           dict(params), loop is not None, loop)


def describe(model, deps, buf, viol, state, concurrent=False, pair=None):
    pair = small_pair(model, viol) if pair is None else pair
    if pair is None:
        return f"a dependence through {buf!r} would be broken"
    s, src, t, dst, params = pair
    acc = _accesses_at(model, deps, s, src, t, dst, buf, params)
    ps = _shown(params)
    first = _instance(model, s, src)
    second = _instance(model, t, dst)
    kind, verb_s, verb_t, elem = acc
    order = (f"{first} and {second} would run in different iterations of it, in any order"
             if concurrent else f"{second} would no longer run after {first}")
    return (f"{order} ({kind} on {buf!r}: {first} {verb_s} "
            f"{elem}, which {second} {verb_t})" + (f", e.g. with {ps}" if ps else "") + ".")


def _accesses_at(model, deps, s, src, t, dst, buf, params):
    ms, mt = model.by_name[s], model.by_name[t]
    pfx = " and ".join(f"{p} = {v}" for p, v in params.items()) or "true"

    def element(m, k, point):
        amap = deps.maps[(m.name, k)]
        point = point[len(point) - len(m.vars):]      # drop compute_at coordinates
        dom = isl.Set(f"{model.prefix()}{{ {m.name}[{', '.join(map(str, point))}] : {pfx} }}",
                      context=model.ctx)
        return amap.intersect_domain(dom).range()
    for ka, a in enumerate(ms.accesses):
        if a.buffer.name != buf:
            continue
        ea = element(ms, ka, src)
        for kb, b in enumerate(mt.accesses):
            if b.buffer.name != buf or not (a.write or b.write):
                continue
            common = ea.intersect(element(mt, kb, dst))
            if common.is_empty():
                continue
            pt = common.sample_point()
            idx = [pt.get_coordinate_val(isl.dim_type.set, i).to_python()
                   for i in range(common.dim(isl.dim_type.set))]
            elem = f"{buf}[{', '.join(map(str, idx))}]"
            kind = KIND[(a.write, b.write)] if (a.write, b.write) in KIND else "RAW"
            return (kind, "writes" if a.write else "reads",
                    "writes" if b.write else "reads", elem)
    return ("dependence", "accesses", "accesses", buf)


# ------------------------------------------------------------------- explain
def explain(model, deps, state) -> str:
    lines = ["Dependences (program order; memory-based, indirect accesses over-approximated; "
             "a schedule may run a pair the other way when no read and no final value of an "
             "array the caller sees changes writer):"]
    rel = deps.relevant(state)
    if not rel:
        lines.append("  none")
    for buf, d in rel.items():
        pairs = []
        d.foreach_map(lambda m: pairs.append(m))
        for m in pairs:
            s, t = m.get_tuple_name(isl.dim_type.in_), m.get_tuple_name(isl.dim_type.out)
            ex = small_pair(model, m.to_union_map())
            e = ""
            if ex:
                e = f", e.g. {_instance(model, ex[0], ex[1])} -> {_instance(model, ex[2], ex[3])}"
            lines.append(f"  {t} depends on {s} through {buf!r}{e}")
    for name, (buf, _) in deps.reductions.items():
        lines.append(f"  {name} is a reduction into {buf!r}"
                     + (" (reassociation allowed)" if state[name].reassociate else
                        " (order kept; allow_reassociation() to reorder it)"))
    lines.append("Loops (final schedule):")
    for stmt, s in state.items():
        for lp in s.loops:
            c = carried_by(model, deps, state, stmt, lp.name)
            tag = s.tags.get(lp.name)
            tagged = f" [{tag.kind}{'' if tag.arg is None else ' ' + str(tag.arg)}]" if tag else ""
            if c is None:
                lines.append(f"  {stmt} loop {lp.name}{tagged}: parallel")
            else:
                ex = small_pair(model, c[1])
                why = f" (e.g. {_instance(model, ex[0], ex[1])} -> {_instance(model, ex[2], ex[3])})" if ex else ""
                lines.append(f"  {stmt} loop {lp.name}{tagged}: not parallel, carries a "
                             f"dependence through {c[0]!r}{why}")
    return "\n".join(lines)

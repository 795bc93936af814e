"""The data of a picture of an iteration space (no drawing here; matplotlib
is not imported): every instance of the drawn statements at concrete, small
parameter values, computed exactly with isl from the model, its dependences
and a schedule (a command log replayed).  The rules (docs/internals/draw.md):

* **Axes**: the statement's loops in the schedule, outer first, except that
  the two loops a ``split``/``tile`` made of one loop are one axis again, the
  loop before the split (its expression then: a skewed loop stays skewed).
  A point's coordinates are the values of the two chosen axes' expressions,
  so a skew shows as a slanted space; ``loops=(outer, inner)`` puts the outer
  axis on y and the inner on x.  Other loops are projected away: a point
  stands for every instance with its two coordinates.
* **Time**: the rank of the point's first instance in the schedule's order
  (0 runs first), over all drawn points.
* **Step** (the wavefront): instances that differ only in the loops from the
  outermost parallel loop inward run in one step.  That loop is the
  outermost one tagged parallel, vector or GPU; when no drawn statement has
  such a tag, the outermost loop that carries no dependence (one that could
  be parallel).  Step = the rank of the schedule's prefix before that loop.
* **Tile**: the values of the outer loops of the splits of the two axes.
* **Arrows**: the memory dependences of the program order between drawn
  instances, by kind: flow (a write, then a read of the element), anti (a
  read, then a write), output (two writes).  Of each pair of accesses, only
  the latest source of each sink is kept (the others follow by transitivity),
  and an arrow that projects onto one point of one statement is dropped (it
  is carried by a loop not shown).
"""
from __future__ import annotations

import re
from dataclasses import dataclass, field

import islpy as isl

from ..analysis import legality
from ..lang.schedule import initial_state, replay

MAX_INSTANCES = 20000          # per statement: pictures are of small spaces
KINDS = {(True, False): "flow", (False, True): "anti", (True, True): "output"}
PARALLEL_TAGS = ("parallel", "vector", "gpu_block", "gpu_thread")


@dataclass(frozen=True)
class Point:
    stmt: str
    xy: tuple                  # (x, y): the inner and the outer axis' values
    time: int                  # rank of its first instance in the schedule's order
    step: int                  # rank of its parallel step (wavefront)
    tile: tuple | None         # the tile loops' values, None when not tiled
    instances: int = 1         # how many instances project onto it


@dataclass(frozen=True)
class Arrow:
    kind: str                  # "flow" | "anti" | "output"
    buffer: str
    src: tuple                 # (statement, (x, y))
    dst: tuple


@dataclass
class SpaceData:
    """What a picture of iteration spaces draws: one panel, or two side by
    side (before/after)."""
    title: str
    params: dict
    panels: list


@dataclass
class Panel:
    """One iteration-space picture: what ``Picture.data.panels[k]`` holds."""
    title: str
    axes: tuple                # (x name, y name)
    points: list
    arrows: list
    marks: dict                # statement -> {loop: "parallel" | "vector 8" | ...}
    step_loops: dict           # statement -> (loop the steps are taken before, tagged?)
    highlight: dict | None = None
    statements: list = field(default_factory=list)
    located: dict = field(default_factory=dict)   # (stmt, instance) asked for -> (stmt, xy)


def _axes(model, commands, state, stmt):
    """[(axis name, isl expression)] of ``stmt`` in ``state`` and
    {tile loop name: axis name} (see the module's rules)."""
    origin = {}
    for k, c in enumerate(commands):
        if c.stmt != stmt or c.op not in ("split", "tile"):
            continue
        before = replay(model, commands, k)[stmt]
        loops = [c.args[0]] if c.op == "split" else list(c.args[0])
        names = [c.args[2]] if c.op == "split" else list(c.args[2])
        for loop, (outer, inner) in zip(loops, names):
            root = origin.get(loop)
            if root is None:
                root = (loop, before.loops[before.find(loop, c.text, stmt)].expr)
            origin[outer], origin[inner] = root + ("outer",), root + ("inner",)
    axes, tiles = [], {}
    for lp in state[stmt].loops:
        name, expr, role = origin.get(lp.name, (lp.name, lp.expr, None))
        if name not in [a for a, _ in axes]:
            axes.append((name, expr))
        if role == "outer":
            tiles[lp.name] = name
    return axes, tiles


def _params_set(model, params):
    missing = [p for p in model.params if p not in params and not p.startswith("tp_")]
    if missing:
        raise ValueError(f"draw: params= must give a value to {', '.join(missing)} "
                         f"(e.g. params={{{', '.join(repr(p) + ': 4' for p in missing)}}})")
    unknown = [p for p in params if p not in model.params]
    if unknown:
        raise ValueError(f"draw: params= names {', '.join(map(repr, unknown))}, not a parameter "
                         f"of {model.f.name!r} (its parameters: "
                         f"{', '.join(p for p in model.params if not p.startswith('tp_')) or 'none'})")
    for p, v in params.items():
        if isinstance(v, bool) or not isinstance(v, int):
            raise ValueError(f"draw: params={p!r} must be an int, not {v!r}")
    # the placeholders of data-dependent bounds (tp_*) bound only statements that are
    # not drawn: fixed to 0 so that every drawn set is finite
    fixed = dict(params, **{p: 0 for p in model.params if p.startswith("tp_")})
    cons = " and ".join(f"{p} = {v}" for p, v in fixed.items()) or "true"
    return isl.Set(f"{model.prefix()}{{ : {cons} }}", context=model.ctx)


def _points_of(mp):
    """The integer points of the finite map ``mp`` as (inputs, outputs) tuples."""
    n_in, n_out = mp.dim(isl.dim_type.in_), mp.dim(isl.dim_type.out)
    out = []

    def add(pt):
        v = [pt.get_coordinate_val(isl.dim_type.set, i).to_python() for i in range(n_in + n_out)]
        out.append((tuple(v[:n_in]), tuple(v[n_in:])))
    mp.wrap().foreach_point(add)
    return out


def _stmt_map(model, m, outputs, pset):
    """``m``'s instances at the params ``pset`` -> [outputs] (isl expressions)."""
    text = (f"{model.prefix()}{{ {m.name}[{', '.join(v.name for v in m.vars)}] -> "
            f"[{', '.join(outputs)}] }}")
    return isl.Map(text, context=model.ctx).intersect_domain(model.domain(m)).intersect_params(pset)


def panel(f, commands, statement=None, loops=None, params=None, title="", locate=()):
    """The :class:`Panel` of ``f`` under the schedule of ``commands``;
    ``locate``: (statement, instance) pairs whose drawn point it records."""
    model, deps, _ = legality.analyse(f)
    state = replay(model, commands)
    pset = _params_set(model, dict(params or {}))
    stmts = _statements(model, state, statement)
    geo = {s: _axes(model, commands, state, s) for s in stmts}
    names = _axis_names(geo, stmts, loops)
    stmts = [s for s in stmts if names[0] in dict(geo[s][0])
             and (len(names) < 2 or names[1] in dict(geo[s][0]))]
    cut = _step_cuts(model, deps, state, stmts)
    inst = {}                                  # (stmt, instance) -> (sched, xy, tile)
    for s in stmts:
        inst.update(_instances(model, state, s, geo[s], names, pset, params))
    points = _points(inst, cut)
    arrows = _arrows(model, deps, stmts, pset, inst)
    marks = {s: {lp: _mark(t) for lp, t in state[s].tags.items()} for s in stmts}
    shown = {n: _readable(e) for s in stmts for n, e in geo[s][0] if n in names}
    axes = tuple(n if shown[n] == n else f"{n} = {shown[n]}" for n in reversed(names))
    axes = axes if len(names) == 2 else (axes[0], "")
    located = {}
    for s, x in locate:
        if (s, tuple(x)) not in inst:
            raise ValueError(f"draw: the instance {s}{list(x)} is not drawn (not an instance at "
                             f"params {params}, or its statement is not shown)")
        located[(s, tuple(x))] = (s, inst[(s, tuple(x))][1])
    return Panel(title, axes, points, arrows, marks,
                 {s: (cut[s][1], cut[s][2]) for s in stmts}, None, stmts, located)


def _instances(model, state, s, geo, names, pset, params):
    """{(s, instance): (schedule vector, (x, y), tile or None)} at ``pset``."""
    m = model.by_name[s]
    axes, tiles = geo
    expr = dict(axes)
    depth = legality.schedule_depth(model, state)
    dims = state[s].dims() + ["0"] * (depth - len(state[s].dims()))
    coords = [expr[names[-1]], expr[names[0]]] if len(names) == 2 else [expr[names[0]], "0"]
    tile_loops = [lp for lp in state[s].loops if tiles.get(lp.name) in names]
    mp = _stmt_map(model, m, dims + coords + [lp.expr for lp in tile_loops], pset)
    if not mp.domain().is_bounded():
        raise ValueError(f"draw: {s} has unbounded instances at params {params}")
    if mp.domain().count_val().to_python() > MAX_INSTANCES:
        raise ValueError(f"draw: {s} has more than {MAX_INSTANCES} instances at params "
                         f"{params}; draw it at smaller values")
    return {(s, x): (out[:depth], out[depth:depth + 2], out[depth + 2:] if tile_loops else None)
            for x, out in _points_of(mp)}


def _statements(model, state, statement):
    names = [m.name for m in model.stmts]
    if statement is None:
        chosen = names
    else:
        given = [statement] if isinstance(statement, str) or hasattr(statement, "name") \
            else list(statement)
        chosen = [getattr(s, "name", s) for s in given]
        bad = [s for s in chosen if s not in names]
        if bad:
            raise ValueError(f"draw: statement={bad[0]!r} is not a statement of "
                             f"{model.f.name!r} (its statements: {', '.join(names)})")
    drawable = [s for s in chosen if state[s].at is None and not model.by_name[s].bound_params]
    if statement is not None and drawable != chosen:
        s = next(s for s in chosen if s not in drawable)
        why = (f"is computed at {state[s].at[1]} (compute_at copies are not drawn)"
               if state[s].at is not None else
               "has data-dependent loop bounds (its instances are not known before run time)")
        raise ValueError(f"draw: statement {s} {why}")
    return drawable


def _axis_names(geo, stmts, loops):
    """The one or two axis names drawn (outer first)."""
    if loops is None:
        best = max(stmts, key=lambda s: len(geo[s][0])) if stmts else None
        if best is None or not geo[best][0]:
            raise ValueError("draw: nothing to draw (no statement with a loop)")
        return [a for a, _ in geo[best][0][:2]]
    loops = [loops] if isinstance(loops, str) else [getattr(x, "name", x) for x in loops]
    if len(loops) not in (1, 2):
        raise ValueError(f"draw: loops= must name one or two loops (outer, inner), not {loops!r}")
    out = []
    for name in loops:
        owner = [s for s in stmts if name in dict(geo[s][0]) or name in geo[s][1]]
        if not owner:
            known = sorted({a for s in stmts for a, _ in geo[s][0]})
            raise ValueError(f"draw: loops= names {name!r}, not a loop of the drawn statements "
                             f"(their loops: {', '.join(known)})")
        out.append(geo[owner[0]][1].get(name, name))
    return out


def _step_cuts(model, deps, state, stmts):
    """stmt -> (prefix length of its schedule before its step loop, that loop, tagged?)."""
    tagged = any(t.kind in PARALLEL_TAGS for s in stmts for t in state[s].tags.values())
    out = {}
    for s in stmts:
        st = state[s]
        k = None
        for n, lp in enumerate(st.loops):
            tag = st.tags.get(lp.name)
            if (tag is not None and tag.kind in PARALLEL_TAGS) if tagged else \
                    legality.carried_by(model, deps, state, s, lp.name) is None:
                k = n
                break
        out[s] = (2 * k + 1, st.loops[k].name, tagged) if k is not None else (None, None, tagged)
    return out


def _rank(values):
    order = {v: r for r, v in enumerate(sorted(set(values)))}
    return [order[v] for v in values]


def _points(inst, cut):
    first = {}
    count = {}
    for (s, _x), (sched, xy, tile) in inst.items():
        key = (s, xy)
        count[key] = count.get(key, 0) + 1
        if key not in first or sched < first[key][0]:
            first[key] = (sched, tile)
    keys = sorted(first, key=lambda k: first[k][0])
    times = _rank([first[k][0] for k in keys])
    steps = _rank([first[k][0][:cut[k[0]][0]] for k in keys])
    return [Point(k[0], k[1], t, st, first[k][1], count[k])
            for k, t, st in zip(keys, times, steps)]


def _arrows(model, deps, stmts, pset, inst):
    orig = initial_state(model)
    sched = {}
    depth = legality.schedule_depth(model, orig)
    for s in stmts:
        m = model.by_name[s]
        dims = orig[s].dims() + ["0"] * (depth - len(orig[s].dims()))
        sched[s] = _stmt_map(model, m, dims, pset)
    accesses = [(s, k, a) for s in stmts for k, a in enumerate(model.by_name[s].accesses)]
    out = set()
    for s, k, a in accesses:
        for t, j, b in accesses:
            if a.buffer.name != b.buffer.name or not (a.write or b.write):
                continue
            rel = deps.maps[(s, k)].apply_range(deps.maps[(t, j)].reverse()).intersect_params(pset)
            lt = sched[s].lex_lt_map(sched[t])            # s-instance runs before t-instance
            rel = rel.intersect(lt)
            if rel.is_empty():
                continue
            latest = rel.reverse().apply_range(sched[s]).lexmax().apply_range(sched[s].reverse())
            for dst, src in _points_of(latest):
                p, q = inst.get((s, src)), inst.get((t, dst))
                if p is None or q is None or (s == t and p[1] == q[1]):
                    continue
                out.add(Arrow(KINDS[(a.write, b.write)], a.buffer.name, (s, p[1]), (t, q[1])))
    return sorted(out, key=lambda r: (r.kind, r.src, r.dst, r.buffer))


def _readable(expr):
    """An axis' isl expression as people write it: ``(i) + 1*(t)`` -> ``i + t``."""
    expr = re.sub(r"\((\w+)\)", r"\1", expr)
    return re.sub(r"(?<![\w)])1\*", "", expr)


def _mark(tag):
    if tag.kind.startswith("gpu_"):
        return f"{tag.kind.replace('_', ' ')}.{tag.arg}"
    return tag.kind + ("" if tag.arg is None else f" {tag.arg}")

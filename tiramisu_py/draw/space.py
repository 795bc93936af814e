"""The data of a picture of an iteration space (no drawing here; matplotlib
is not imported): every instance of the drawn statements at concrete, small
parameter values, computed exactly with isl from the model, its dependences
and a schedule (a command log replayed).  The rules (docs/internals/draw.md):

* **Points**: one per instance.  Its coordinates are the values of the
  statement's axes (:mod:`.axes`: a tiled loop is one axis, its tile loops
  give the instance's tile), so a skew shows as a slanted space.  The two
  innermost axes of the statement with the most axes (or ``loops=(outer,
  inner)``) are y and x; each value of the other axes is a **block** of its
  own (small multiples, outer first; a statement without one of them has
  None there).  Statements without the two drawn axes are not drawn: they
  are listed in ``Panel.omitted``.
* **Time**: the rank of the instance in the schedule's order (0 runs
  first), over all drawn instances.
* **Step** (the wavefront): instances that differ only in the loops from the
  outermost parallel loop inward run in one step.  That loop is the
  outermost one tagged parallel, vector or GPU; when no drawn statement has
  such a tag, the outermost loop that carries no dependence (one that could
  be parallel).  Step = the rank of the schedule's prefix before that loop.
* **Tile**: the values of the statement's tile loops; ``Panel.tiles`` has
  the box around each tile's instances in each block.
* **Arrows**: the memory dependences of the program order between drawn
  instances, by kind: flow (a write, then a read of the element), anti (a
  read, then a write), output (two writes).  Of each pair of accesses, only
  the latest source of each sink is kept (the others follow by transitivity).
"""
from __future__ import annotations

from dataclasses import dataclass, field

import islpy as isl

from ..analysis import legality
from ..lang.schedule import initial_state, replay
from .axes import geometry, label, pretty

MAX_INSTANCES = 20000          # per statement: pictures are of small spaces
KINDS = {(True, False): "flow", (False, True): "anti", (True, True): "output"}
PARALLEL_TAGS = ("parallel", "vector", "gpu_block", "gpu_thread")


@dataclass(frozen=True)
class Point:
    """One instance of a drawn statement."""
    stmt: str
    instance: tuple            # its iteration vector (the statement's own variables)
    xy: tuple                  # (x, y): the inner and the outer drawn axis' values
    block: tuple               # the other axes' values, outer first (None: not its loop)
    time: int                  # its rank in the schedule's order (0 runs first)
    step: int                  # rank of its parallel step (wavefront)
    tile: tuple | None         # the values of its tile loops, None when not tiled


@dataclass(frozen=True)
class Arrow:
    kind: str                  # "flow" | "anti" | "output"
    buffer: str
    src: tuple                 # (statement, instance)
    dst: tuple


@dataclass(frozen=True)
class Tile:
    """A tile's box in one block: the least box around its instances' (x, y)."""
    tile: tuple                # the tile loops' values
    block: tuple
    box: tuple                 # (x0, y0, x1, y1), ends included
    instances: int             # how many drawn instances it holds


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
    axes: tuple                # (x label, y label): the inner and the outer drawn axis
    points: list               # one per instance, in the schedule's order
    arrows: list
    marks: dict                # statement -> {loop: "parallel" | "vector 8" | ...}
    step_loops: dict           # statement -> (loop the steps are taken before, tagged?)
    highlight: dict | None = None
    statements: list = field(default_factory=list)
    blocks: tuple = ()         # labels of the other axes (one block per value), outer first
    block_axes: tuple = ()     # their names
    tiles: list = field(default_factory=list)     # Tile boxes
    exprs: dict = field(default_factory=dict)     # axis name -> {statement: its expression}
    omitted: dict = field(default_factory=dict)   # statement not drawn -> why


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
    ``locate``: (statement, instance) pairs that must be drawn."""
    model, deps, _ = legality.analyse(f)
    state = replay(model, commands)
    pset = _params_set(model, dict(params or {}))
    stmts = _statements(model, state, statement)
    geo = {s: geometry(model, commands, state, s) for s in stmts}
    drawn, blocks = _axis_names(geo, stmts, loops, [s for s, _ in locate])
    omitted = {s: f"has no loop {', '.join(a for a in drawn if a not in _names(geo[s]))} "
                  f"(the loops drawn: {', '.join(drawn)})"
               for s in stmts if not set(drawn) <= _names(geo[s])}
    if statement is not None and omitted:
        s = next(iter(omitted))
        raise ValueError(f"draw: statement {s} {omitted[s]}; draw it on its own "
                         f"(statement={s!r}) or on loops= it has")
    stmts = [s for s in stmts if s not in omitted]
    cut = _step_cuts(model, deps, state, stmts)
    inst = {}                      # (stmt, instance) -> (sched, xy, block, tile)
    for s in stmts:
        inst.update(_instances(model, state, s, geo[s], drawn, blocks, pset, params))
    points = _points(inst, cut)
    arrows = _arrows(model, deps, stmts, pset, inst)
    marks = {s: {lp: _mark(t) for lp, t in state[s].tags.items()} for s in stmts}
    exprs = {a: {s: pretty(model, model.by_name[s], a, dict(geo[s].axes)[a]) for s in stmts
                 if a in _names(geo[s])} for a in blocks + drawn}
    labels = {a: label(a, exprs[a]) for a in exprs}
    axes = (labels[drawn[-1]], labels[drawn[0]] if len(drawn) == 2 else "")
    for s, x in locate:
        if (s, tuple(x)) not in inst:
            raise ValueError(f"draw: the instance {s}{list(x)} is not drawn (not an instance at "
                             f"params {params}, or its statement is not shown)")
    return Panel(title, axes, points, arrows, marks,
                 {s: (cut[s][1], cut[s][2]) for s in stmts}, None, stmts,
                 tuple(labels[a] for a in blocks), tuple(blocks), _tiles(points), exprs, omitted)


def _names(geo):
    return {a for a, _ in geo.axes}


def _instances(model, state, s, geo, drawn, blocks, pset, params):
    """{(s, instance): (schedule vector, (x, y), block, tile or None)}; a
    block axis the statement lacks has the value None."""
    m = model.by_name[s]
    expr = dict(geo.axes)
    depth = legality.schedule_depth(model, state)
    dims = state[s].dims() + ["0"] * (depth - len(state[s].dims()))
    own = [a for a in blocks if a in expr]
    tile_exprs = [lp.expr for lp in state[s].loops if lp.name in geo.tile_loops]
    mp = _stmt_map(model, m, dims + [expr[a] for a in drawn + own] + tile_exprs, pset)
    if not mp.domain().is_bounded():
        raise ValueError(f"draw: {s} has unbounded instances at params {params}")
    if mp.domain().count_val().to_python() > MAX_INSTANCES:
        raise ValueError(f"draw: {s} has more than {MAX_INSTANCES} instances at params "
                         f"{params}; draw it at smaller values")
    out = {}
    n, k = depth + len(drawn), depth + len(drawn) + len(own)
    for x, v in _points_of(mp):
        xy = (v[n - 1], v[depth]) if len(drawn) == 2 else (v[depth], 0)
        value = dict(zip(own, v[n:k]))
        out[(s, x)] = (v[:depth], xy, tuple(value.get(a) for a in blocks),
                       v[k:] if tile_exprs else None)
    return out


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


def _axis_names(geo, stmts, loops, located=()):
    """The drawn axes (outer first: y then x, or x alone) and the block axes
    (outer first); ``located``: statements that must be drawn (the axes
    drawn by default are then two they share)."""
    if loops is None:
        best = max(stmts, key=lambda s: len(geo[s].axes)) if stmts else None
        if best is None or not geo[best].axes:
            raise ValueError("draw: nothing to draw (no statement with a loop)")
        if located:
            first = list(dict.fromkeys(located))
            shared = [a for a, _ in geo[first[0]].axes
                      if all(a in _names(geo[s]) for s in first)]
            if not shared:
                raise ValueError(f"draw: {' and '.join(first)} share no loop; draw them "
                                 "one by one (statement=...)")
            drawn = shared[-2:]
        else:
            drawn = [a for a, _ in geo[best].axes][-2:]
    else:
        drawn = _named_axes(geo, stmts, loops)
    have = sorted([s for s in stmts if set(drawn) <= _names(geo[s])],
                  key=lambda s: -len(geo[s].axes))
    blocks = list(dict.fromkeys(a for s in have for a, _ in geo[s].axes if a not in drawn))
    return drawn, blocks


def _named_axes(geo, stmts, loops):
    loops = [loops] if isinstance(loops, str) else [getattr(x, "name", x) for x in loops]
    if len(loops) not in (1, 2):
        raise ValueError(f"draw: loops= must name one or two loops (outer, inner), not {loops!r}")
    names = []
    for name in loops:
        owner = [s for s in stmts if name in geo[s].loop_axis or name in _names(geo[s])]
        if not owner:
            known = sorted({a for s in stmts for a, _ in geo[s].axes})
            raise ValueError(f"draw: loops= names {name!r}, not a loop of the drawn statements "
                             f"(their loops: {', '.join(known)})")
        names.append(geo[owner[0]].loop_axis.get(name, name))
    if len(set(names)) != len(names):
        raise ValueError(f"draw: loops= names one axis twice ({loops!r}: the loops a split or "
                         "tile made of one loop are one axis)")
    return names


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
    keys = sorted(inst, key=lambda k: inst[k][0])
    times = _rank([inst[k][0] for k in keys])
    steps = _rank([inst[k][0][:cut[k[0]][0]] for k in keys])
    return [Point(k[0], k[1], inst[k][1], inst[k][2], t, st, inst[k][3])
            for k, t, st in zip(keys, times, steps)]


def _tiles(points):
    """A :class:`Tile` per tile and block, around its points."""
    cells = {}
    for pt in points:
        if pt.tile is not None:
            cells.setdefault((pt.tile, pt.block), []).append(pt.xy)
    out = []
    order = lambda kv: (kv[0][0], tuple((v is not None, v or 0) for v in kv[0][1]))  # noqa
    for (tile, block), xys in sorted(cells.items(), key=order):
        xs, ys = [x for x, _ in xys], [y for _, y in xys]
        out.append(Tile(tile, block, (min(xs), min(ys), max(xs), max(ys)), len(xys)))
    return out


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
                if (s, src) in inst and (t, dst) in inst:
                    out.add(Arrow(KINDS[(a.write, b.write)], a.buffer.name, (s, src), (t, dst)))
    return sorted(out, key=lambda r: (r.kind, r.src, r.dst, r.buffer))


def _mark(tag):
    if tag.kind.startswith("gpu_"):
        return f"{tag.kind.replace('_', ' ')}.{tag.arg}"
    return tag.kind + ("" if tag.arg is None else f" {tag.arg}")

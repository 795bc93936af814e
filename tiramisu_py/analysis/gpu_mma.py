"""``s.tensor_core(k, i, j)``: a lane-mapped update run as ``mma.sync``,
checked exactly on its access functions.

``mma.sync.m16n8k16`` (bfloat16 or float16 inputs, float32 sums) computes
one 16 x 8 tile of ``C`` per warp from a 16 x 16 tile of ``A`` and a 16 x 8
tile of ``B``; lane ``g * 4 + t`` holds the sums of rows ``g`` and ``g + 8``,
columns ``2t`` and ``2t + 1``.  The command is legal when the update,
scheduled as ordinary SIMT code, already gives each lane exactly those sums
and the instruction only reorders each lane's additions:

* the update is ``C[m, n] += A[.] * B[.]`` (a product of two reads), its
  reduction reassociated (``allow_reassociation``), the reads of one 16-bit
  float type (bfloat16 or float16; the instruction multiplies exactly and
  sums in float32), ``C`` float32, or 16-bit with its sums in float32
  registers (``accumulate_locally``: rounded once, when combined);
* its lane loops are ``lane.y`` (8) and ``lane.x`` (4), the marked loops
  its three innermost loops, of 16 (``k``), 2 (``i``) and 2 (``j``)
  iterations, and stepping each of them by one moves the elements by
  (isl deltas over the schedule, exact): ``lane.y`` C (+1, 0), ``i`` C (+8,
  0), ``lane.x`` C (0, +2), ``j`` C (0, +1), ``k`` C (0, 0); A and B move
  along ``m`` / ``n`` with C and by +1 along their other index with ``k``,
  and not with the loops of the other operand;
* both operands are shared tiles (``ldmatrix`` reads shared memory).

Then each lane's registers hold its own sums, so the SIMT view the legality
check already proved (each ``C`` element updated by one lane; the sum over
``k`` in one thread) is the instruction's.  What the SIMT view does not
show is that ``ldmatrix`` reads each tile row in another lane than the one
that uses it: every dependence through an operand tile into or out of the
statement is therefore counted as one between two threads (a barrier where
it is carried outside the thread loops, a refusal inside them), whoever the
SIMT view says reads the element.  The printer (:mod:`codegen.cuda.mma`)
refuses an ``mma`` under a guard that may exclude lanes (a partial tile).
"""
from __future__ import annotations

import islpy as isl

from ..base.errors import IllegalScheduleError
from ..lang import affine
from ..lang.expr import Access, BinOp, Cast
from ..poly.model import resolve

HALVES = ("bfloat16", "float16")
EXTENTS = {"k": 16, "i": 2, "j": 2}


def check_mma(model, state, commands, plan, sched) -> dict:
    """{stmt: names of its operand buffers} of the tensor-core statements,
    after checking each (IllegalScheduleError naming the command)."""
    out = {}
    for stmt, st in state.items():
        if st.tensor_core is None:
            continue
        k, i, j, index = st.tensor_core
        text = commands[index].text
        out[stmt] = _check(model, state, plan, sched, stmt, st, (k, i, j), text)
    return out


def _refuse(text, why):
    raise IllegalScheduleError(f"{text} is illegal: {why}")


def _check(model, state, plan, sched, stmt, st, loops, text):
    m = model.by_name[stmt]
    s = m.stmt
    if not getattr(s, "is_update", False) or s.op != "add":
        _refuse(text, f"{stmt} is not a sum (an update `+=`)")
    if not st.reassociate:
        _refuse(text, f"the tensor cores sum in their own order: {stmt} must allow it "
                      "(allow_reassociation(), or accumulate_locally(..., "
                      "allow_reassociation=True))")
    k = plan.by_stmt.get(stmt)
    if k is None or not k.linear:
        _refuse(text, f"{stmt} is not warp-tiled: bind its lanes to 'lane.y' (8) and "
                      "'lane.x' (4)")
    lanes = k.stmt_threads[stmt]
    if {a: lanes.get(a, (0, 0, 0))[1] for a in ("lane.y", "lane.x")} != {"lane.y": 8, "lane.x": 4}:
        _refuse(text, f"{stmt}'s lanes must be lane.y (8 rows) x lane.x (4 column pairs), the "
                      "mma's layout of its sums")
    names = [lp.name for lp in st.loops]
    if set(names[-3:]) != set(loops):
        _refuse(text, f"{', '.join(loops)} must be {stmt}'s three innermost loops (they are "
                      f"{', '.join(names[-3:])})")
    reads = _operands(s, text, stmt)
    out_dtype = resolve(Access(s.parent, s.lhs))[0].dtype.name
    if out_dtype not in ("float32", *HALVES) or out_dtype != "float32" and not st.accumulate:
        _refuse(text, f"the sums are float32 on the tensor cores; {stmt} accumulates into "
                      f"{out_dtype} (a 16-bit result takes float32 sums in registers: "
                      "accumulate_locally)")
    # the element deltas of one step of each loop, exact over the schedule
    tags = {t.arg: n for n, t in st.tags.items() if t.kind == "gpu_thread"}
    steps = {"ly": tags["lane.y"], "lx": tags["lane.x"], "k": loops[0], "i": loops[1],
             "j": loops[2]}
    pos = {key: 2 * names.index(n) + 1 for key, n in steps.items()}
    c_map = _index_map(model, m, list(s.lhs))
    a_map, b_map = (_index_map(model, m, list(r.indices)) for r in reads)
    for key, p in pos.items():
        pairs = _next_pairs(model, sched[stmt], p)
        if key in EXTENTS:
            n = _extent(sched[stmt], p)
            if n != EXTENTS[key]:
                _refuse(text, f"loop {steps[key]!r} has {n} iterations; the mma's {key} loop has "
                              f"{EXTENTS[key]}")
        want = {"ly": (1, 0), "i": (8, 0), "lx": (0, 2), "j": (0, 1), "k": (0, 0)}[key]
        got = _delta(pairs, c_map)
        if got != want:
            _refuse(text, f"one step of {steps[key]!r} moves {stmt}'s element by {got}, the "
                          f"mma's layout needs {want} (row = 8 * {loops[1]} + lane.y, column = "
                          f"2 * lane.x + {loops[2]} within a 16 x 8 tile)")
    # A moves with the rows and k, B with the columns and k
    for name, mp, follow, still in (("A", a_map, ("ly", "i"), ("lx", "j")),
                                    ("B", b_map, ("lx", "j"), ("ly", "i"))):
        for key in still:
            if _delta(_next_pairs(model, sched[stmt], pos[key]), mp) != (0, 0):
                _refuse(text, f"the {name} operand changes with {steps[key]!r}")
        ks = _delta(_next_pairs(model, sched[stmt], pos["k"]), mp)
        if ks not in ((1, 0), (0, 1)):
            _refuse(text, f"one step of {steps['k']!r} moves the {name} operand by {ks}, not "
                          "one element along the sum")
        for key in follow:
            d = _delta(_next_pairs(model, sched[stmt], pos[key]), mp)
            if d is None or sorted(d) != sorted((0, {"ly": 1, "i": 8, "lx": 2, "j": 1}[key])) \
                    or d == ks or (ks[0] and d[0]) or (ks[1] and d[1]):
                _refuse(text, f"the {name} operand does not follow {stmt}'s "
                              f"{'rows' if name == 'A' else 'columns'} along {steps[key]!r}")
    ops = set()
    for r in reads:
        buf = resolve(r)[0]
        if getattr(buf, "memory", "global") != "shared":
            _refuse(text, f"{r.target.name} is read from {getattr(buf, 'memory', 'global')} "
                          "memory; ldmatrix reads shared tiles: cache_shared it first")
        ops.add(buf.name)
    return ops


def _operands(s, text, stmt):
    """The two reads of ``A[.] * B[.]`` (casts allowed), A the first."""
    v = s.value
    while isinstance(v, Cast):
        v = v.a
    if not isinstance(v, BinOp) or v.op != "mul":
        _refuse(text, f"{stmt} adds {v!r}, not a product of two reads")
    reads = []
    for side in (v.a, v.b):
        while isinstance(side, Cast):
            side = side.a
        if not isinstance(side, Access):
            _refuse(text, f"{stmt}'s product has {side!r}, not a read")
        reads.append(side)
    dts = {resolve(r)[0].dtype.name for r in reads}
    if len(dts) != 1 or dts.pop() not in HALVES:
        _refuse(text, f"the tensor cores multiply bfloat16 or float16 here; {stmt} reads "
                      f"{' and '.join(resolve(r)[0].dtype.name for r in reads)}")
    return reads


def _index_map(model, m, index):
    """{ S[vars] -> [index] } of logical (pre-storage) indices."""
    vs = ", ".join(v.name for v in m.vars)
    outs = ", ".join(affine.text(e, values=model.f.fixed) for e in index)
    return isl.Map(f"{model.prefix()}{{ {m.name}[{vs}] -> [{outs}] }}", context=model.ctx)


def _next_pairs(model, sched, p):
    """{ S[d] -> S[d'] }: d' one step of the loop at schedule position ``p``
    after d, everything else equal."""
    n = sched.dim(isl.dim_type.out)
    a = [f"a{x}" for x in range(n)]
    b = [f"b{x}" for x in range(n)]
    cons = [f"b{x} = a{x}" + (" + 1" if x == p else "") for x in range(n)]
    step = isl.Map(f"{{ [{', '.join(a)}] -> [{', '.join(b)}] : {' and '.join(cons)} }}",
                   context=model.ctx)
    return sched.apply_range(step).apply_range(sched.reverse())


def _delta(pairs, index_map):
    """The one delta of the indices over ``pairs``, a tuple; None when there
    are several (or none)."""
    d = pairs.apply_domain(index_map).apply_range(index_map).deltas()
    if d.is_empty() or not d.is_singleton():
        return None
    pt = d.sample_point()
    return tuple(int(pt.get_coordinate_val(isl.dim_type.set, x).to_python())
                 for x in range(d.dim(isl.dim_type.set)))


def _extent(sched, p):
    rng = sched.range()
    ext = rng.dim_max(p).sub(rng.dim_min(p))
    v = ext.max_val() if ext.n_piece() else None
    return None if v is None or not v.is_int() else int(v.to_python()) + 1

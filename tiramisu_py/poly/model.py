"""The polyhedral model of a Function: iteration domains (isl sets), access
relations (isl maps; indirect or data-dependent ones as sound *may*
over-approximations) and the program-order schedule (an isl map per statement
with named loop dimensions)."""
from __future__ import annotations

import re
from dataclasses import dataclass, field

import islpy as isl

from ..lang import affine
from ..lang.affine import NonAffine
from ..lang.expr import Access, BinOp, Call, Cast, Const, ParamRef, Select, UnOp, Var, walk
from ..lang.program import Buffer, Computation, Nest
from .compute_at import ComputeAt


_PARAM_NAME = re.compile(r"\b[A-Za-z_]\w*\b")


def substitute(e, mapping):
    """A copy of ``e`` with loop variables replaced (``mapping``: id(Var) -> Expr)."""
    if isinstance(e, Var):
        return mapping.get(id(e), e)
    if isinstance(e, (Const, ParamRef)):
        return e
    if isinstance(e, Access):
        return Access(e.target, [substitute(i, mapping) for i in e.indices])
    if isinstance(e, BinOp):
        return BinOp(e.op, substitute(e.a, mapping), substitute(e.b, mapping))
    if isinstance(e, UnOp):
        return UnOp(e.op, substitute(e.a, mapping))
    if isinstance(e, Call):
        return Call(e.func, [substitute(a, mapping) for a in e.args])
    if isinstance(e, Select):
        return Select(*(substitute(x, mapping) for x in (e.cond, e.a, e.b)))
    if isinstance(e, Cast):
        return Cast(e.to, substitute(e.a, mapping))
    raise TypeError(f"cannot substitute in {e!r}")


def resolve(access: Access):
    """(buffer, index exprs) that an Access reads: a buffer directly, or the
    buffer a computation stores into at its store index."""
    t = access.target
    if isinstance(t, Buffer):
        return t, list(access.indices)
    mapping = {id(v): i for v, i in zip(t.vars, access.indices)}
    return t.buffer, [substitute(e, mapping) for e in t.store_index]


@dataclass
class AccessInfo:
    buffer: Buffer
    index: list               # Exprs over the statement's loops
    write: bool
    what: str                 # readable form, for messages
    guards: tuple = ()        # (condition Expr, polarity): the access runs only then
    implicit: bool = False    # an update's read of its own accumulator (old value)
    # the computation whose value the access names, at ``value_index`` (its own
    # loops' coordinates): a write of a computation or update, a read of a
    # computation reference; None for a buffer access (its meaning is memory)
    value_of: str | None = None
    value_index: tuple = ()


def bound_terms(b, op) -> list:
    """The affine terms of a loop bound: a lower bound ``max(a, b, ..)`` is
    ``a`` and ``b`` and .. (each a constraint ``a <= v``), an upper bound
    ``min(a, b, ..)`` likewise (``v < a``); any other bound is one term."""
    if isinstance(b, BinOp) and b.op == op:
        return bound_terms(b.a, op) + bound_terms(b.b, op)
    return [b]


@dataclass
class StmtModel:
    stmt: object
    name: str
    vars: list
    bound_params: dict = field(default_factory=dict)   # placeholder -> Access (bounds)
    bounds: dict = field(default_factory=dict)         # var name -> (lo, hi, load subst)
    accesses: list = field(default_factory=list)
    schedule: list = field(default_factory=list)       # ints and Vars, program order


class PolyModel:
    def __init__(self, f):
        self.f = f
        self.ctx = isl.Context()
        self._bcount = 0                  # bound placeholders made so far
        self._parsed = {}                 # (isl class, text) -> object: each text parsed once
        self.stmts = [self._stmt_model(s) for s in f.statements]
        self.by_name = {m.name: m for m in self.stmts}
        self.has_accesses = False
        self._program_order()
        self.bound_params = [p for m in self.stmts for p in m.bound_params]
        self.params = [p for p in f.params if p not in f.fixed] + self.bound_params

    # ---------------------------------------------------------------- text
    def prefix(self, extra=()):
        return "[" + ", ".join(list(self.params) + list(extra)) + "] -> "

    def domain_constraints(self, m: StmtModel, values=None) -> list:
        values = dict(self.f.fixed, **(values or {}))
        out = [c for v in m.vars for c in self.loop_constraints(m, v.name, values)]
        # a rank's part of a distributed Function (driver.distributed): the
        # phase, block and step its kernel runs, constraints over dist_ params
        for c in getattr(self.f, "_restrict", {}).get(m.name, ()):
            out.append(_PARAM_NAME.sub(lambda t: str(values.get(t.group(0), t.group(0))), c))
        return out

    def loop_constraints(self, m: StmtModel, name, values) -> list:
        """The constraints of loop ``name``'s bounds: one per term of a
        ``max`` below and of a ``min`` above (:func:`bound_terms`)."""
        lo, hi, subst = m.bounds[name]
        return ([f"{affine.text(b, subst=subst, values=values)} <= {name}"
                 for b in bound_terms(lo, "max")]
                + [f"{name} < {affine.text(b, subst=subst, values=values)}"
                   for b in bound_terms(hi, "min")])

    def domain_text(self, m: StmtModel) -> str:
        cons = " and ".join(self.domain_constraints(m)) or "true"
        return f"{self.prefix()}{{ {m.name}[{', '.join(v.name for v in m.vars)}] : {cons} }}"

    def domain(self, m: StmtModel) -> isl.Set:
        return self.parse(isl.Set, self.domain_text(m))

    def parse(self, kind, text):
        """``kind(text)`` in the model's context, parsed once per text (isl
        objects are values: no operation changes one in place).  The analyses
        ask for the same access relations and schedules many times."""
        key = (kind, text)
        obj = self._parsed.get(key)
        if obj is None:
            obj = self._parsed[key] = kind(text, context=self.ctx)
        return obj

    def union_domain(self, state=None) -> isl.UnionSet:
        ats = self.compute_ats(state) if state else {}
        u = None
        for m in self.stmts:
            d = ats[m.name].member_domain(m.name) if m.name in ats else self.domain(m)
            s = d.to_union_set()
            u = s if u is None else u.union(s)
        return u

    def compute_ats(self, state) -> dict:
        """member name -> ComputeAt, for the statements moved by compute_at,
        outer ones first (a nested compute_at's consumer is a member of an
        outer one, whose copies it reads)."""
        out, made = {}, {}

        def make(name):
            producer, consumer, depth = state[name].at
            if producer not in made:
                outer = make(consumer) if state[consumer].at is not None else None
                made[producer] = ComputeAt(self, state, producer, consumer, depth, outer)
            return made[producer]

        for name, st in state.items():
            if st.at is not None:
                make(name)
        for at in made.values():
            for name in at.group:
                out[name] = at
        return out

    def tuple_vars(self, m, state=None) -> list:
        """The names of a statement's instance coordinates in ``state``:
        its loops, after the consumer's outer loops if computed at one."""
        names = [v.name for v in m.vars]
        st = state.get(m.name) if state else None
        if st is not None and st.at is not None:
            names = [f"tp_o{k}" for k in range(st.at[2])] + names
        return names

    def schedule_map(self, state) -> isl.UnionMap:
        """The union of every statement's schedule in ``state`` (a dict name ->
        StmtSchedule), padded with zeros to one common length."""
        depth = max(2 * len(st.loops) + 1 for st in state.values())
        u = None
        for m in self.stmts:
            dims = state[m.name].dims()
            dims += ["0"] * (depth - len(dims))
            text = (f"{self.prefix()}{{ {m.name}[{', '.join(self.tuple_vars(m, state))}]"
                    f" -> [{', '.join(dims)}] }}")
            smap = self.parse(isl.UnionMap, text)
            u = smap if u is None else u.union(smap)
        return u

    def context(self) -> isl.Set:
        """What is known of the params: every buffer extent is >= 0."""
        cons = []
        for b in self.f.buffers.values():
            for s in b.shape:
                try:
                    form = affine.linear(s, values=self.f.fixed)
                except NonAffine:
                    continue
                if not affine.is_const(form):
                    cons.append(f"{affine.to_text(form)} >= 0")
        return self.parse(isl.Set, f"{self.prefix()}{{ : {' and '.join(cons) or 'true'} }}")

    def access_map(self, m: StmtModel, a: AccessInfo):
        """The access relation of ``a`` as an isl Map, and whether it is exact.
        A dimension whose index is not affine (indirect, or a product of a
        param and a loop) becomes the buffer's whole extent: a sound *may*
        access."""
        cons, exact = [], True
        for k, e in enumerate(a.index):
            o = f"o{k}"
            try:
                cons.append(f"{o} = {affine.text(e, values=self.f.fixed)}")
            except NonAffine:
                exact = False
                size = affine.text(a.buffer.shape[k], values=self.f.fixed)
                cons.append(f"0 <= {o} < {size}")
        return self._relation(m, a, a.buffer.name, len(a.index), cons), exact

    def value_map(self, m: StmtModel, a: AccessInfo):
        """The access ``a`` as it names a computation's value: { S[..] ->
        tp_value_P[index] } in P's own coordinates (the instance of P, or the
        element an update of P accumulates into), whatever P's storage; None
        for a buffer access or a non-affine index."""
        if a.value_of is None:
            return None
        try:
            cons = [f"o{k} = {affine.text(e, values=self.f.fixed)}"
                    for k, e in enumerate(a.value_index)]
        except NonAffine:
            return None
        return self._relation(m, a, f"tp_value_{a.value_of}", len(a.value_index), cons)

    def _relation(self, m: StmtModel, a: AccessInfo, target: str, rank: int,
                  cons: list) -> isl.Map:
        """{ S[loops] -> target[o0, .., o(rank - 1)] } over ``m``'s domain where
        ``a``'s guards hold, under the constraints ``cons`` on the ``o``s."""
        outs = ", ".join(f"o{k}" for k in range(rank))
        dom = " and ".join(self.domain_constraints(m) + self.guard_constraints(a) + cons) or "true"
        return self.parse(isl.Map, f"{self.prefix()}{{ {m.name}[{', '.join(v.name for v in m.vars)}]"
                                   f" -> {target}[{outs}] : {dom} }}")

    # ------------------------------------------------------------ building
    def _stmt_model(self, s) -> StmtModel:
        m = StmtModel(s, s.name, list(s.vars))
        for v in s.vars:
            subst = {}
            for side, b in (("lo", v.lo), ("hi", v.hi)):
                for ld in [n for n in _walk(b) if isinstance(n, Access)]:
                    p = f"tp_b{self._bcount}"
                    self._bcount += 1
                    subst[id(ld)] = p
                    m.bound_params[p] = ld
                    m.accesses.append(AccessInfo(ld.target, list(ld.indices), False,
                                                 f"{ld!r} (bound of {v.name})"))
                try:
                    for term in bound_terms(b, "max" if side == "lo" else "min"):
                        affine.linear(term, subst=subst, values=s.function.fixed)
                except NonAffine as exc:
                    raise ValueError(f"{s.name}: the {side} bound of loop {v.name!r} ({b!r}) "
                                     f"is not affine in params and outer loops, nor a "
                                     f"{'max' if side == 'lo' else 'min'} of affine terms "
                                     f"({exc})") from None
            m.bounds[v.name] = (v.lo, v.hi, subst)
        return m

    def build_accesses(self):
        """Records every statement's write and reads (needs the buffers of all
        computations assigned)."""
        for m in self.stmts:
            self._stmt_accesses(m, m.stmt)
        self.has_accesses = True

    def _stmt_accesses(self, m, s):
        if isinstance(s, Computation):
            buf, idx = s.buffer, list(s.store_index)
            target = Access(s, s.vars)
        else:
            buf, idx = resolve(Access(s.parent, s.lhs))
            target = Access(s.parent, s.lhs)
            m.accesses.append(AccessInfo(buf, idx, False, repr(target), implicit=True,
                                         value_of=target.target.name,
                                         value_index=tuple(target.indices)))
        for e in idx:
            self._reads(m, e, ())
        m.accesses.append(AccessInfo(buf, idx, True, repr(target), value_of=target.target.name,
                                     value_index=tuple(target.indices)))
        self._reads(m, s.value, ())

    def _reads(self, m, e, guards):
        """Records the reads of ``e``; those inside a branch of a select run
        only when its condition holds (C's ?: evaluates one side)."""
        if isinstance(e, Select):
            self._reads(m, e.cond, guards)
            self._reads(m, e.a, guards + ((e.cond, True),))
            self._reads(m, e.b, guards + ((e.cond, False),))
            return
        if isinstance(e, Access):
            self._add_read(m, e, guards)
        for c in e.children():
            self._reads(m, c, guards)

    def guard_constraints(self, a: AccessInfo, values=None) -> list:
        """isl constraints of the affine select conditions guarding ``a``;
        non-affine conditions are dropped (sound: the access may happen)."""
        out = []
        for cond, polarity in a.guards:
            try:
                out.append(condition_text(cond, polarity, dict(self.f.fixed, **(values or {}))))
            except NonAffine:
                pass
        return out

    def _add_read(self, m, ld, guards=()):
        buf, idx = resolve(ld)
        for e in idx:
            for inner in [n for n in _walk(e) if isinstance(n, Access)]:
                if not (isinstance(inner.target, Buffer) and inner.target.kind == "input"):
                    raise ValueError(f"{m.name}: the index of {ld!r} loads {inner!r}; indirect "
                                     "indices may only load input arrays")
                if not inner.target.dtype.is_int:
                    raise TypeError(f"{m.name}: index array {inner.target.name!r} must have an "
                                    "integer dtype")
        named = ld.target.name if isinstance(ld.target, Computation) else None
        m.accesses.append(AccessInfo(buf, idx, False, repr(ld), tuple(guards), value_of=named,
                                     value_index=tuple(ld.indices) if named else ()))

    def _program_order(self):
        """Schedule of each statement in program order, 2d+1 form:
        [position, loop, position, loop, ..., position]."""
        def visit(nest, prefix_sched, depth_vars):
            for pos, item in enumerate(nest.items):
                if isinstance(item, Nest):
                    sched = prefix_sched + [pos]
                    for k, v in enumerate(item.vars):
                        sched += ([0] if k else []) + [v]
                    visit(item, sched, depth_vars + len(item.vars))
                else:
                    m = self.by_name[item.name]
                    sched = prefix_sched + [pos]
                    for k, v in enumerate(item.vars[depth_vars:]):
                        sched += ([0] if k else []) + [v]
                    if len(item.vars) > depth_vars:
                        sched.append(0)
                    m.schedule = sched
        visit(self.f._root, [], 0)

    # ------------------------------------------------------- bounding boxes
    def bounding_box(self, m: StmtModel):
        """(minimum, extent) of each loop of ``m`` as DSL expressions over the
        params (minimum None when it is 0); raises ValueError when the box
        has no single closed form.

        An empty domain (a zero extent, ``[0, N)`` with ``N`` fixed to 0) has
        no bounds of its own; each loop then gets the extent of its own
        interval, as NumPy shapes do: ``[0, 0) x [0, 4)`` is ``(0, 4)``.  A
        loop whose bounds involve other loops gets 0 there."""
        dom = self.domain(m)
        empty = dom.is_empty()
        build = isl.AstBuild.from_context(self.context())
        out = []
        for k, v in enumerate(m.vars):
            if empty:
                dom = self._own_interval(m, k)
            lo, hi = dom.dim_min(k), dom.dim_max(k)
            ext = hi.sub(lo).add_constant_val(isl.Val.one(self.ctx))
            exprs = []
            for what, pw in (("minimum", lo), ("extent", ext)):
                if pw.n_piece() == 0:
                    exprs.append(Const(0, None))
                    continue
                pw = pw.coalesce()
                if pw.n_piece() > 1 or any(n.startswith("tp_") for n in _param_names(pw)):
                    raise ValueError(f"cannot size the default buffer of {m.name!r}: the "
                                     f"{what} of loop {v.name!r} is {pw}; store it with "
                                     "f.buffer + store_in")
                exprs.append(_ast_to_expr(build.expr_from_pw_aff(pw), self.f, m, v))
            lo_e = None if isinstance(exprs[0], Const) and exprs[0].value == 0 else exprs[0]
            out.append((lo_e, exprs[1]))
        return out

    def _own_interval(self, m: StmtModel, k: int) -> isl.Set:
        """``m``'s loops with only loop ``k``'s own bounds: its interval when
        they are params and constants; empty when they involve other loops
        (an empty domain gives such a loop no extent)."""
        names = [v.name for v in m.vars]
        cons = " and ".join(self.loop_constraints(m, names[k], self.f.fixed))
        dom = isl.Set(f"{self.prefix()}{{ {m.name}[{', '.join(names)}] : {cons} }}",
                      context=self.ctx)
        others = [i for i in range(len(names)) if i != k]
        if any(dom.involves_dims(isl.dim_type.set, i, 1) for i in others):
            return dom.empty(dom.get_space())
        return dom


def build_model(f) -> PolyModel:
    """The full model of ``f``, the one way every phase builds it (compile,
    analysis, the copy commands' footprints, a warm kernel's checks): checks
    that every computation has an expression, gives every computation
    without ``store_in`` a buffer of its own and records the accesses.
    ``model.inputs``, ``model.outputs``, ``model.temps``: the buffers by kind.

    It writes the user's computations: a default buffer is set as
    ``c.buffer``/``c.store_index`` with the flag ``c._auto_buffer``, which the
    next build resets (``store_in`` clears the flag)."""
    _prepare(f)
    model = PolyModel(f)
    model.inputs, model.outputs, model.temps = _assign_buffers(f, model)
    model.build_accesses()
    return model


def _prepare(f):
    if not f.statements:
        raise ValueError(f"function {f.name!r} has no computation")
    for c in f.computations.values():
        if c.value is None:
            raise ValueError(f"computation {c.name!r} has no expression; define it with "
                             f"{c.name}[{', '.join(c.loops)}] = ... or set_expression")
        if getattr(c, "_auto_buffer", False):
            c.buffer, c.store_index, c._auto_buffer = None, None, False


def _assign_buffers(f, model):
    """Gives every computation without ``store_in`` a buffer of its own, shaped
    like its domain's bounding box; decides which buffers are outputs."""
    read_by = {c.name: set() for c in f.computations.values()}
    for s in f.statements:
        owner = s.parent.name if s.is_update else s.name
        exprs = [s.value] + [e for v in s.vars for e in (v.lo, v.hi)]
        exprs += list(s.lhs) if s.is_update else list(s.store_index or [])
        for e in exprs:
            for n in walk(e):
                if isinstance(n, Access) and isinstance(n.target, Computation):
                    if n.target.name != owner:
                        read_by[n.target.name].add(owner)
    explicit_outputs = any(b.kind == "output" for b in f.buffers.values())
    default_outputs, default_temps = [], []
    for c in f.computations.values():
        if c.buffer is not None:
            continue
        box = model.bounding_box(model.by_name[c.name])
        shape = tuple(ext for _, ext in box)
        kind = "temp" if (explicit_outputs or read_by[c.name]) else "output"
        b = Buffer(f, c.name, shape, c.dtype, kind)
        c.buffer = b
        c.store_index = [v if lo is None else v - lo for v, (lo, _) in zip(c.vars, box)]
        c._auto_buffer = True
        (default_outputs if kind == "output" else default_temps).append(b)
    declared = list(f.buffers.values())
    inputs = [b for b in declared if b.kind == "input"]
    outputs = [b for b in declared if b.kind == "output"] + default_outputs
    temps = [b for b in declared if b.kind == "temp"] + default_temps
    if not outputs:
        raise ValueError(f"function {f.name!r} has no output: every computation is read by "
                         "another; mark a buffer with f.buffer(..., output=True)")
    return inputs, outputs, temps


def _param_names(pw):
    """Names of the params ``pw`` really depends on."""
    return [pw.get_dim_name(isl.dim_type.param, i) for i in range(pw.dim(isl.dim_type.param))
            if pw.involves_dims(isl.dim_type.param, i, 1)]


def _ast_to_expr(e, f, m, v):
    """An isl AST expression over params as a DSL expression."""
    t = e.get_type()
    if t == isl.ast_expr_type.int:
        return Const(e.get_val().to_python(), None)
    if t == isl.ast_expr_type.id:
        return f.params[e.get_id().get_name()]
    op = e.get_op_type()
    args = [_ast_to_expr(e.get_op_arg(i), f, m, v) for i in range(e.get_op_n_arg())]
    o = isl.ast_expr_op_type
    table = {o.add: "add", o.sub: "sub", o.mul: "mul", o.fdiv_q: "floordiv",
             o.pdiv_q: "floordiv", o.pdiv_r: "floormod", o.min: "min", o.max: "max"}
    if op == o.minus:
        return UnOp("neg", args[0])
    if op not in table:
        raise ValueError(f"cannot size the default buffer of {m.name!r}: the range of loop "
                         f"{v.name!r} is {e.to_C_str()}; store it with f.buffer + store_in")
    out = args[0]
    for a in args[1:]:
        out = BinOp(table[op], out, a)
    return out


_CMP_TEXT = {"lt": "<", "le": "<=", "gt": ">", "ge": ">=", "eq": "=", "ne": "!="}
_NEG = {"lt": "ge", "le": "gt", "gt": "le", "ge": "lt", "eq": "ne", "ne": "eq"}


def condition_text(e, polarity, values):
    """An affine condition (comparisons combined with & | ~) as isl text,
    negated when ``polarity`` is False; raises NonAffine otherwise."""
    if isinstance(e, UnOp) and e.op == "not":
        return condition_text(e.a, not polarity, values)
    if isinstance(e, BinOp) and e.op in ("and", "or"):
        op = e.op if polarity else ("or" if e.op == "and" else "and")
        a = condition_text(e.a, polarity, values)
        b = condition_text(e.b, polarity, values)
        return f"(({a}) {op} ({b}))"
    if isinstance(e, BinOp) and e.op in _CMP_TEXT:
        op = e.op if polarity else _NEG[e.op]
        a = affine.text(e.a, values=values)
        b = affine.text(e.b, values=values)
        if op == "ne":
            return f"({a} < {b} or {a} > {b})"
        return f"{a} {_CMP_TEXT[op]} {b}"
    raise NonAffine(repr(e))


def _walk(e):
    return walk(e)



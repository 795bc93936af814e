"""Lowering: the isl AST of the schedule, translated into codegen's loop IR.

Loops are named after the user's loops (the schedule dimension's name, shared
by every statement under the loop).  Statement leaves substitute the AST's
iterator expressions into the statement's expression, TIRAMISU style.
Data-dependent bounds are placeholder params in the isl model; here they are
replaced by the real loads (``rowptr[co]``), so the generated loop runs over
exactly the data-dependent range."""
from __future__ import annotations

import islpy as isl

from codegen import ir

from ..base import types as T
from ..lang.expr import Access, Var, walk
from ..lang.program import Computation
from ..lang.schedule import gpu_tags
from ..poly.model import resolve
from ..poly.order import without_common_constants
from .collapsed import expand
from .expr import ExprLowering, LoweringError, cast

_ISL_OPS = {
    isl.ast_expr_op_type.add: "add", isl.ast_expr_op_type.sub: "sub",
    isl.ast_expr_op_type.mul: "mul", isl.ast_expr_op_type.min: "min",
    isl.ast_expr_op_type.max: "max", isl.ast_expr_op_type.lt: "lt",
    isl.ast_expr_op_type.le: "le", isl.ast_expr_op_type.gt: "gt",
    isl.ast_expr_op_type.ge: "ge", isl.ast_expr_op_type.eq: "eq",
    isl.ast_expr_op_type.and_: "and", isl.ast_expr_op_type.or_: "or",
    isl.ast_expr_op_type.and_then: "and", isl.ast_expr_op_type.or_else: "or",
    isl.ast_expr_op_type.fdiv_q: "floordiv", isl.ast_expr_op_type.pdiv_q: "div",
    isl.ast_expr_op_type.pdiv_r: "mod", isl.ast_expr_op_type.zdiv_r: "mod",
    isl.ast_expr_op_type.div: "div",
}


# ----------------------------------------------------------------- the AST
class AstLowering:
    def __init__(self, model, state, reserved_names, gpu=None):
        self.gpu = gpu                  # analysis.gpu_plan.GpuPlan: barriers, thread ranges
        self.dims = []                  # schedule positions of the enclosing loops
        self.model = model
        # collapsed loops given to isl as the loops they were made of (lower.collapsed)
        self.state, self.chains = (state, {}) if gpu is not None else expand(state)
        self.ex = ExprLowering(model.f.fixed)
        self.reserved = set(reserved_names)
        self.params = set(model.f.params)
        self.bound_owner = {p: m for m in model.stmts for p in m.bound_params}

    def run(self) -> ir.Stmt:
        m = self.model
        build = isl.AstBuild.from_context(m.context())
        sched = m.schedule_map(self.state).intersect_domain(m.union_domain(self.state))
        if self.gpu is not None:
            sched = self.with_gpu_values(sched)
        sched, kept = without_common_constants(sched)
        if kept is not None:            # the loops keep their positions' names (c<p>)
            ids = isl.IdList.alloc(m.ctx, len(kept))
            for p in kept:
                ids = ids.add(isl.Id(f"c{p}", context=m.ctx))
            build = build.set_iterators(ids)
        root = build.node_from_schedule_map(sched)
        return self.node(root, {}, [])

    # GPU loops of one iteration ---------------------------------------------------
    def gpu_positions(self, stmt_name):
        """Schedule positions of a statement's block and thread loops."""
        return [2 * j + 1 for j, _, _, _ in gpu_tags(self.state[stmt_name])]

    def with_gpu_values(self, sched):
        """``sched`` with each statement's instance tuple extended by the values
        of its GPU-mapped schedule dimensions (``S[i, j] -> S[i, j, i0, j0]``):
        isl eliminates a loop of one iteration and substitutes its value into
        the call arguments, so these extra arguments give the value of every
        GPU dimension, as an expression of the outer loops, even where the loop
        is gone (:meth:`degenerate`)."""
        out = []

        def extend(mp):
            name = mp.get_tuple_name(isl.dim_type.in_)
            keep = self.gpu_positions(name)
            if not keep:
                out.append(mp)
                return
            vals = mp.copy()
            for p in reversed(range(mp.dim(isl.dim_type.out))):
                if p not in keep:
                    vals = vals.project_out(isl.dim_type.out, p, 1)
            ident = isl.Map.identity(mp.get_space().domain().map_from_set())
            ext = ident.flat_range_product(vals).set_tuple_name(isl.dim_type.out, name)
            out.append(ext.reverse().apply_range(mp))
        sched.foreach_map(extend)
        res = isl.UnionMap.empty(sched.get_space())
        for mp in out:
            res = res.union(mp.to_union_map())
        return res

    def missing_dim(self, n):
        """(position, loop prefix) of the outermost GPU loop that every statement
        under AST node ``n`` shares, that encloses ``n`` in the schedule, and that
        isl eliminated (one iteration), or None."""
        if self.gpu is None:
            return None
        last = self.dims[-1] if self.dims else -1
        own = self.for_dim(n)
        stmts = self.leaves(n)
        p = next((p for p in self.gpu_positions(stmts[0]) if p > last
                  and (own is None or p < own)), None) if stmts else None
        if p is None:
            return None
        j = (p - 1) // 2
        key = tuple(self.state[stmts[0]].consts[:j + 1])
        if not all(p in self.gpu_positions(s) and tuple(self.state[s].consts[:j + 1]) == key
                   for s in stmts[1:]):
            return None
        found = []

        def cb(x):
            if self.for_dim(x) == p:
                found.append(x)
            return not found
        n.foreach_descendant_top_down(cb)
        return None if found else (p, key)     # a loop at p in n: not eliminated for all of n

    @staticmethod
    def for_dim(n):
        if n.get_type() != isl.ast_node_type.for_:
            return None
        return int(n.for_get_iterator().get_id().get_name()[1:])

    def degenerate(self, key, kids, scope, loops):
        """The GPU loop at schedule position ``key[0]`` that isl eliminated
        around the AST nodes ``kids``: a loop of the right kind running exactly
        its one value (for a thread loop, the thread the legality check assumed),
        placed where the loop would have been."""
        p = key[0]
        stmts = []
        for k in kids:
            stmts += [s for s in self.leaves(k) if s not in stmts]
        m = self.model.by_name[stmts[0]]
        call = self.first_call(kids[0], m.name)
        arg = len(self.model.tuple_vars(m, self.state)) + 1 + self.gpu_positions(m.name).index(p)
        lo = self.aexpr(call.get_op_arg(arg), scope, kids[0])
        name = self.loop_name(stmts, p, scope)
        inner = dict(scope)
        inner[f"c{p}"] = name
        self.dims.append(p)
        body = self.node(kids[0], inner, loops + [name]) if len(kids) == 1 \
            else ir.Block(self.sequence(kids, inner, loops + [name]))
        self.dims.pop()
        kind, attrs = self.loop_kind(stmts, p)
        return ir.For(name, lo, _plus_one(lo), body, kind=kind, attrs=attrs)

    # nodes ------------------------------------------------------------------
    def node(self, n, scope, loops):
        key = self.missing_dim(n)
        if key is not None:
            return self.degenerate(key, [n], scope, loops)
        t = n.get_type()
        if t == isl.ast_node_type.for_:
            return self.for_node(n, scope, loops)
        if t == isl.ast_node_type.if_:
            cond = self.aexpr(n.if_get_cond(), scope, n)
            then = self.node(n.if_get_then_node(), scope, loops)
            els = self.node(n.if_get_else_node(), scope, loops) if n.if_has_else_node() else None
            return ir.If(cond, then, els)
        if t == isl.ast_node_type.block:
            return ir.Block(self.sequence(_block_children(n), scope, loops))
        if t == isl.ast_node_type.user:
            return self.user(n, scope)
        if t == isl.ast_node_type.mark:
            return self.node(n.mark_get_node(), scope, loops)
        raise LoweringError(f"unexpected isl AST node {t}")

    def for_node(self, n, scope, loops):
        it = n.for_get_iterator().get_id().get_name()
        dim = int(it[1:])
        stmts = self.leaves(n)                  # the statements this loop holds
        chain = self.chain_at(stmts, dim)
        if chain is not None:
            joined = self.collapsed_loop(n, chain, stmts, scope, loops)
            if joined is not None:
                return joined
        name = self.loop_name(stmts, dim, scope)
        lo = self.aexpr(n.for_get_init(), scope, n)
        cond = n.for_get_cond()
        op = _ISL_OPS.get(cond.get_op_type())
        arg0 = cond.get_op_arg(0)
        if op not in ("le", "lt") or arg0.get_type() != isl.ast_expr_type.id \
                or arg0.get_id().get_name() != it:
            raise LoweringError(f"unexpected loop condition {cond.to_C_str()}")
        hi = self.aexpr(cond.get_op_arg(1), scope, n)
        if op == "le":
            hi = _plus_one(hi)
        step = n.for_get_inc().get_val().to_python()
        inner = dict(scope)
        inner[it] = name
        self.dims.append(dim)
        body = self.node(n.for_get_body(), inner, loops + [name])
        self.dims.pop()
        kind, attrs = self.loop_kind(stmts, dim, chain[0] if chain else None)
        waits = [self.gpu.async_waits[(x, dim)] for x in stmts
                 if self.gpu is not None and (x, dim) in self.gpu.async_waits]
        barrier = self.gpu is not None and any((x, dim) in self.gpu.loop_barriers for x in stmts)
        if waits:
            # a pipelined loop's cp.async: one group per iteration, waited for at
            # its end; after the loop all of them, and a barrier (isl may have
            # split the loop, e.g. the copies of a short one before the reads)
            n = min(waits)
            end = ir.Barrier(wait=n) if barrier else ir.AsyncWait(n)
            loop = ir.For(name, lo, hi, ir.Block([body, ir.AsyncCommit(), end]), kind=kind,
                          step=step, attrs=attrs)
            return ir.Block([loop, ir.Barrier(wait=0)])
        if barrier:
            body = ir.Block([body, ir.Barrier()])     # threads of a block meet per iteration
        return ir.For(name, lo, hi, body, kind=kind, step=step, attrs=attrs)

    def chain_at(self, stmts, dim):
        """``(collapsed loop's name, positions)`` when the loop at ``dim`` is
        the outermost of a collapsed loop's loops that isl generated (those
        outside it had one iteration), its statement alone under it; else None."""
        if len(stmts) != 1:
            return None
        for name, dims in self.chains.get(stmts[0], ()):
            if dim in dims and not any(d in self.dims for d in dims):
                return name, dims[dims.index(dim):]
        return None

    def collapsed_loop(self, n, chain, stmts, scope, loops):
        """The loops of a collapsed loop (``chain``: its name and their
        positions, ``n`` the outermost) as the one loop ``f`` they were
        collapsed into, their values ``f / (inner extents) % extent + low``
        bound once per iteration; None when isl did not generate them as a
        perfect nest whose inner loops have constant bounds (they are then
        lowered as they are, the outermost with the collapsed loop's tag)."""
        name, dims = chain
        nodes, cur = [], n
        for d in dims:
            while cur.get_type() == isl.ast_node_type.mark:
                cur = cur.mark_get_node()
            if self.for_dim(cur) != d:
                break                                # one of one iteration: no loop
            nodes.append(cur)
            cur = cur.for_get_body()
        if len(nodes) < 2:
            return None
        bounds = []                     # (low, high) of each: ints, the outermost's IR
        for k, x in enumerate(nodes):
            it = x.for_get_iterator().get_id().get_name()
            cond = x.for_get_cond()
            op = _ISL_OPS.get(cond.get_op_type())
            lo, hi = x.for_get_init(), cond.get_op_arg(1)
            if x.for_get_inc().get_val().to_python() != 1 or op not in ("le", "lt") \
                    or cond.get_op_arg(0).get_type() != isl.ast_expr_type.id \
                    or cond.get_op_arg(0).get_id().get_name() != it:
                return None
            if k == 0:                  # evaluated once, before the joined loop
                top = self.aexpr(hi, scope, x)
                bounds.append((self.aexpr(lo, scope, x), _plus_one(top) if op == "le" else top))
            elif lo.get_type() == hi.get_type() == isl.ast_expr_type.int:
                bounds.append((lo.get_val().to_python(), hi.get_val().to_python() + (op == "le")))
            else:
                return None             # an inner extent that changes: not one loop
        var = self.unique(name, scope)
        inner, names = {**scope, "": var}, []
        for x in nodes:
            names.append(self.loop_name(stmts, self.for_dim(x), inner))
            inner[x.for_get_iterator().get_id().get_name()] = names[-1]
        del inner[""]
        self.dims += [self.for_dim(x) for x in nodes]
        body = self.node(cur, inner, loops + [var])
        del self.dims[-len(nodes):]
        stride = 1
        for k in range(len(nodes) - 1, -1, -1):
            lo, hi = bounds[k]
            v = ir.binary("div", ir.Var(var), ir.Const(stride, "int64")) if stride > 1 \
                else ir.Var(var)
            if k:
                v = ir.binary("mod", v, ir.Const(hi - lo, "int64"))
                v = ir.binary("add", v, ir.Const(lo, "int64")) if lo else v
                stride *= hi - lo
            elif not (isinstance(lo, ir.Const) and lo.value == 0):
                v = ir.binary("add", v, lo)
            body = ir.Let(names[k], v, body)
        lo, hi = bounds[0]
        span = hi if isinstance(lo, ir.Const) and lo.value == 0 else ir.binary("sub", hi, lo)
        total = ir.Const(span.value * stride, "int64") if isinstance(span, ir.Const) \
            else ir.binary("mul", span, ir.Const(stride, "int64"))
        kind, attrs = self.loop_kind(stmts, dims[0], name)
        return ir.For(var, ir.Const(0, "int64"), total, body, kind=kind, attrs=attrs)

    def loop_kind(self, stmts, dim, name=None):
        """The loop's kind from the tags of the statements under it (those
        of the loop ``name`` when given: a collapsed loop's)."""
        kind, attrs = "serial", {}
        for stmt_name in stmts:
            st = self.state[stmt_name]
            names = st.dim_names()
            nm = name or (names[dim] if dim < len(names) else None)
            if self.gpu is not None and dim < 2 * getattr(self.gpu.kernel_of(stmt_name), "host", 0):
                attrs["host"] = True          # one kernel launch per iteration (CUDA printer)
            if st.tensor_core is not None and nm == st.tensor_core[0] and self.gpu is not None:
                k, i, j, index = st.tensor_core
                lanes = {t.arg: n for n, t in st.tags.items() if t.kind == "gpu_thread"}
                attrs["mma"] = {"i": i, "j": j, "ly": lanes.get("lane.y"),
                                "lx": lanes.get("lane.x"),
                                "command": self.model.f._commands[index].text}
            if nm in st.accumulate:
                red = self.model.by_name[stmt_name].stmt
                attrs["accumulate"] = [(resolve(Access(red.parent, red.lhs))[0].name, red.op)]
                if not st.reassociate:          # copied in and out: the program's order
                    attrs["accumulate_exact"] = True
            tag = st.tags.get(nm) if nm else None
            if tag is None:
                continue
            kind = tag.kind
            if tag.reductions:
                attrs.setdefault("reduction", [])
                attrs["reduction"] += [r for r in tag.reductions if r not in attrs["reduction"]]
            for b in tag.private:
                attrs.setdefault("private", [])
                if b not in attrs["private"]:
                    attrs["private"].append(b)
            if tag.kind == "vector":
                attrs["vector_width"] = tag.arg
                if self.gpu is not None:          # the CUDA printer's refusals name it
                    attrs["command"] = self.model.f._commands[tag.command].text
            elif tag.kind == "unrolled":
                attrs["unroll"] = tag.arg
            elif tag.kind == "parallel" and tag.arg is not None:
                attrs["omp_schedule"] = tag.arg       # (kind, chunk or None)
            elif tag.kind in ir.GPU_KINDS:
                attrs["axis"] = tag.arg
                if tag.kind == "gpu_thread":      # value = threadIdx + min, < min + extent
                    attrs.update(self.gpu.kernel_of(stmt_name).thread_attrs(stmt_name, tag.arg))
                    if "linear" in attrs:         # warp-tiled: decomposes threadIdx.x
                        attrs["axis"] = "x"
        return kind, attrs

    def sequence(self, kids, scope, loops):
        """The children of a sequence; consecutive children under one eliminated
        GPU loop (the same loop: same sequence constants before it) in one
        loop of one iteration (:meth:`degenerate`)."""
        groups = []
        for k in kids:
            key = self.missing_dim(k)
            if key is not None and groups and groups[-1][0] == key:
                groups[-1][1].append(k)
            else:
                groups.append((key, [k]))
        out, leaves = [], []
        for key, members in groups:
            if key is None:
                out.append(self.node(members[0], scope, loops))
            else:
                out.append(self.degenerate(key, members, scope, loops))
            leaves.append({s for k in members for s in self.leaves(k)})
        if self.gpu is not None and self.gpu.seq_barriers:
            out = self.sequence_barriers(leaves, out)
        return out

    def sequence_barriers(self, leaves, out):
        """Barriers between the children of a sequence at the schedule position
        the plan names: one before a child that reads (or overwrites) what an
        earlier child wrote in another thread, unless one already separates
        them (fewest barriers: intervals by their right end).  The sequence's
        schedule position is where the two statements' sequence constants
        first differ, not the innermost enclosing loop's + 1: isl drops the
        loops of one iteration and merges the sequences around them into one
        block (the barrier would otherwise be lost).  ``leaves``: the statements
        under each child."""
        need = []
        for s, t, pos in self.gpu.seq_barriers:
            a, b = self.state[s].consts, self.state[t].consts
            if pos != 2 * next((k for k, (x, y) in enumerate(zip(a, b)) if x != y), len(a)):
                continue
            i = next((k for k, lv in enumerate(leaves) if s in lv), None)
            j = next((k for k, lv in enumerate(leaves) if t in lv), None)
            if i is not None and j is not None and i < j:
                need.append((j, i))
        before = set()
        for j, i in sorted(need):
            if not any(i < b <= j for b in before):
                before.add(j)
        res = []
        for k, x in enumerate(out):
            if k in before:
                res.append(ir.Barrier())
            res.append(x)
        return res

    def loop_name(self, stmts, dim, scope):
        names = []
        for stmt_name in stmts:
            dims = self.state[stmt_name].dim_names()
            nm = dims[dim] if dim < len(dims) else None
            if nm and nm not in names:
                names.append(nm)
        return self.unique("_".join(names) or f"c{dim}", scope)

    def unique(self, base, scope):
        """``base``, or ``base_2``, ... : a name no enclosing loop nor array has."""
        name, k = base, 1
        taken = set(scope.values()) | self.reserved
        while name in taken or (name != base and name in self.reserved):
            k += 1
            name = f"{base}_{k}"
        return name

    def leaves(self, n):
        out = []

        def cb(x):
            if x.get_type() == isl.ast_node_type.user:
                nm = x.user_get_expr().get_op_arg(0).get_id().get_name()
                if nm not in out:
                    out.append(nm)
            return True
        n.foreach_descendant_top_down(cb)
        return out

    def first_call(self, n, stmt_name):
        found = []

        def cb(x):
            if not found and x.get_type() == isl.ast_node_type.user:
                e = x.user_get_expr()
                if e.get_op_arg(0).get_id().get_name() == stmt_name:
                    found.append(e)
            return not found
        n.foreach_descendant_top_down(cb)
        return found[0] if found else None

    def skip(self, m):
        """Leading call arguments of a compute_at copy: the consumer's loops."""
        st = self.state[m.name]
        return st.at[2] if st.at is not None else 0

    def stmt_env(self, m, call, scope, at):
        env, d = {}, self.skip(m)
        for k, v in enumerate(m.vars):
            env[id(v)] = self.aexpr(call.get_op_arg(d + k + 1), scope, at)
        return env

    def user(self, n, scope):
        call = n.user_get_expr()
        m = self.model.by_name[call.get_op_arg(0).get_id().get_name()]
        env = self.stmt_env(m, call, scope, n)
        s, store = m.stmt, ir.Store
        if isinstance(s, Computation):
            buf, idx = resolve(Access(s, s.vars))
            value = cast(self.ex.expr(s.value, env, s.dtype), s.dtype)
            if self.gpu is not None and m.name in self.gpu.async_stmts:
                return ir.AsyncCopy(buf.name, tuple(self.ex.index(i, env) for i in idx), value)
            if self.gpu is None and self.state[m.name].nontemporal:
                store = ir.StreamStore
        else:
            buf, idx = resolve(Access(s.parent, s.lhs))
            dt = T.arith(s.parent.dtype)      # a 16-bit float accumulates in float32
            old = ir.Load(buf.name, tuple(self.ex.index(i, env) for i in idx), buf.dtype.name)
            rhs = cast(self.ex.expr(s.value, env, dt), dt)
            value = ir.Binary(s.op, cast(old, dt), rhs, dt.name)
        value = cast(value, buf.dtype)
        return store(buf.name, tuple(self.ex.index(i, env) for i in idx), value)

    # isl expressions -------------------------------------------------------------
    def aexpr(self, e, scope, at) -> ir.Expr:
        t = e.get_type()
        if t == isl.ast_expr_type.int:
            return ir.Const(e.get_val().to_python(), "int64")
        if t == isl.ast_expr_type.id:
            name = e.get_id().get_name()
            if name in scope:
                return ir.Var(scope[name])
            if name in self.bound_owner:
                return self.bound_load(name, scope, at)
            if name in self.params:
                return ir.Var(name)
            raise LoweringError(f"unknown name {name!r} in the isl AST")
        op = e.get_op_type()
        args = [self.aexpr(e.get_op_arg(i), scope, at) for i in range(e.get_op_n_arg())]
        if op == isl.ast_expr_op_type.minus:
            return ir.Unary("neg", args[0], args[0].dtype)
        if op in (isl.ast_expr_op_type.select, isl.ast_expr_op_type.cond):
            return ir.Select(args[0], args[1], args[2], args[1].dtype)
        name = _ISL_OPS.get(op)
        if name is None:
            raise LoweringError(f"unsupported isl AST operation {op}")
        out = args[0]
        for a in args[1:]:
            out = ir.binary(name, out, a)
        return out

    def bound_load(self, p, scope, at):
        """The real value of a data-dependent bound placeholder at AST node
        ``at``: its load, with the statement's loops as seen there."""
        m = self.bound_owner[p]
        call = self.first_call(at, m.name)
        if call is None:
            raise LoweringError(f"cannot place the data-dependent bound {m.bound_params[p]!r} "
                                f"of {m.name!r}")
        ld = m.bound_params[p]
        needed = {id(v) for v in _vars_in(ld)}
        env = {}
        for k, v in enumerate(m.vars):
            if id(v) in needed:
                try:
                    env[id(v)] = self.aexpr(call.get_op_arg(self.skip(m) + k + 1), scope, at)
                except LoweringError:
                    raise LoweringError(
                        f"{m.name}: the data-dependent bound {ld!r} reads loop {v.name!r}, so "
                        f"{v.name!r} must stay outside the loop it bounds; the schedule "
                        f"({'; '.join(self.model.f.schedule_commands()) or 'program order'}) "
                        "moves it inside") from None
        return self.ex.index(ld, env)


def _block_children(n):
    """The children of an isl block node, nested blocks (isl nests a long
    sequence as blocks of two) flattened: one sequence level."""
    kids = n.block_get_children()
    out = []
    for i in range(kids.n_ast_node()):
        k = kids.get_at(i)
        out += _block_children(k) if k.get_type() == isl.ast_node_type.block else [k]
    return out


def _vars_in(e):
    return [n for n in walk(e) if isinstance(n, Var)]


def _plus_one(x):
    if isinstance(x, ir.Const):
        return ir.Const(x.value + 1, x.dtype)
    if isinstance(x, ir.Binary) and x.op == "sub" and isinstance(x.b, ir.Const) and x.b.value == 1:
        return x.a
    return ir.Binary("add", x, ir.Const(1, "int64"), "int64")

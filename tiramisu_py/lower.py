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

from . import types as T
from .expr import (Access, BinOp, Call, Cast, Const, ParamRef, Select, UnOp, _weak_default,
                   strong_type, weak_partner_type)
from .function import Computation, Var
from .poly import resolve

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
_CMP = ("lt", "le", "gt", "ge", "eq", "ne", "and", "or")


class LoweringError(ValueError):
    """A schedule the code generator cannot express (e.g. a data-dependent
    loop moved outside the loops its bounds read)."""


# ----------------------------------------------------------- DSL expressions
class ExprLowering:
    """DSL Expr -> ir.Expr under an environment id(Var) -> ir.Expr."""

    def __init__(self, fixed):
        self.fixed = fixed
        # types of the subexpressions, shared by every call (expressions do not
        # change while one function is lowered): keeps lowering linear in depth
        self.memo = {}

    def index(self, e, env):
        return cast(self.expr(e, env, T.INDEX), T.INDEX)

    def expr(self, e, env, want=None) -> ir.Expr:
        t = strong_type(e, self.memo) or want or _weak_default(e, self.memo)
        if isinstance(e, Const):
            v = e.value
            v = bool(v) if t.is_bool else (int(v) if t.is_int else float(v))
            return ir.Const(v, t.name)
        if isinstance(e, ParamRef):
            x = ir.Const(self.fixed[e.name], "int64") if e.name in self.fixed else ir.Var(e.name)
            return cast(x, t)
        if isinstance(e, Var):
            if id(e) not in env:
                raise LoweringError(f"loop {e.name!r} is not defined here")
            return cast(env[id(e)], t)
        if isinstance(e, Access):
            buf, idx = resolve(e)
            return cast(ir.Load(buf.name, tuple(self.index(i, env) for i in idx),
                                buf.dtype.name), t)
        if isinstance(e, Cast):
            return cast(self.expr(e.a, env), e.to)
        if isinstance(e, UnOp):
            if e.op == "not":
                return ir.Unary("not", cast(self.expr(e.a, env, T.bool_), T.bool_), "bool")
            return ir.Unary("neg", cast(self.expr(e.a, env, t), t), t.name)
        if isinstance(e, BinOp):
            if e.op in ("and", "or"):
                a, b = (cast(self.expr(x, env, T.bool_), T.bool_) for x in (e.a, e.b))
                return ir.Binary(e.op, a, b, "bool")
            if e.op in _CMP:
                ot = operand_type(e.a, e.b, self.memo)
                a, b = (cast(self.expr(x, env, ot), ot) for x in (e.a, e.b))
                return ir.Binary(e.op, a, b, "bool")
            a, b = (cast(self.expr(x, env, t), t) for x in (e.a, e.b))
            return ir.Binary(e.op, a, b, t.name)
        if isinstance(e, Call):
            args = [cast(self.expr(a, env, t), t) for a in e.args]
            return ir.Call(e.func, tuple(args), t.name)
        if isinstance(e, Select):
            c = cast(self.expr(e.cond, env, T.bool_), T.bool_)
            a, b = (cast(self.expr(x, env, t), t) for x in (e.a, e.b))
            return ir.Select(c, a, b, t.name)
        raise LoweringError(f"cannot lower {e!r}")


def operand_type(a, b, memo=None) -> T.DType:
    memo = {} if memo is None else memo
    ta, tb = strong_type(a, memo), strong_type(b, memo)
    if ta and tb:
        return T.promote(ta, tb)
    if ta or tb:
        return weak_partner_type(ta or tb, b if ta else a, memo)
    return T.promote(_weak_default(a, memo), _weak_default(b, memo))


def cast(x: ir.Expr, t: T.DType) -> ir.Expr:
    if x.dtype == t.name:
        return x
    if isinstance(x, ir.Const) and not t.is_bool:
        return ir.Const(int(x.value) if t.is_int else float(x.value), t.name)
    return ir.Cast(x, t.name)


# ----------------------------------------------------------------- the AST
class AstLowering:
    def __init__(self, model, state, reserved_names, gpu=None):
        self.gpu = gpu                  # tiramisu_py.gpu.GpuPlan: barriers, thread ranges
        self.dims = []                  # schedule positions of the enclosing loops
        self.in_kernel = False          # inside a GPU kernel's block loops
        self.model = model
        self.state = state
        self.ex = ExprLowering(model.f.fixed)
        self.reserved = set(reserved_names)
        self.params = set(model.f.params)
        self.bound_owner = {p: m for m in model.stmts for p in m.bound_params}

    def run(self) -> ir.Stmt:
        m = self.model
        build = isl.AstBuild.from_context(m.context())
        sched = m.schedule_map(self.state).intersect_domain(m.union_domain(self.state))
        root = build.node_from_schedule_map(sched)
        return self.node(root, {}, [])

    # nodes ------------------------------------------------------------------
    def node(self, n, scope, loops):
        if self.gpu is not None and not self.in_kernel:
            k = self.degenerate_kernel(n)
            if k is not None:
                return self.one_block(k, lambda: self._node(n, scope, loops))
        return self._node(n, scope, loops)

    def degenerate_kernel(self, n):
        """The kernel ``n`` belongs to, outside any kernel, when isl dropped
        all its block loops (one iteration each: a GEMM no larger than a tile)
        so that ``n`` holds no loop at a host or block position; else None."""
        ks = {id(self.gpu.kernel_of(s)): self.gpu.kernel_of(s) for s in self.leaves(n)}
        if len(ks) != 1 or None in ks.values():
            return None
        k = next(iter(ks.values()))
        limit = 2 * (k.host + len(k.block_axes))
        found = []

        def cb(x):
            if x.get_type() == isl.ast_node_type.for_:
                found.append(int(x.for_get_iterator().get_id().get_name()[1:]))
            return True
        n.foreach_descendant_top_down(cb)
        return None if any(d < limit for d in found) else k

    def one_block(self, k, build):
        """``build()`` (the kernel's statements) in one-iteration block loops,
        named as the kernel's, so that the CUDA printer sees one kernel."""
        self.in_kernel = True
        try:
            body = build()
        finally:
            self.in_kernel = False
        st = self.state[k.stmts[0]]
        for j in reversed(range(len(k.block_axes))):
            body = ir.For(st.loops[k.host + j].name, ir.const(0), ir.const(1), body,
                          kind="gpu_block", attrs={"axis": k.block_axes[j]})
        return body

    def _node(self, n, scope, loops):
        t = n.get_type()
        if t == isl.ast_node_type.for_:
            return self.for_node(n, scope, loops)
        if t == isl.ast_node_type.if_:
            cond = self.aexpr(n.if_get_cond(), scope, n)
            then = self.node(n.if_get_then_node(), scope, loops)
            els = self.node(n.if_get_else_node(), scope, loops) if n.if_has_else_node() else None
            return ir.If(cond, then, els)
        if t == isl.ast_node_type.block:
            kids = _block_children(n)
            if self.gpu is not None and not self.in_kernel:
                return ir.Block(self.kernel_groups(kids, scope, loops))
            out = [self.node(k, scope, loops) for k in kids]
            if self.gpu is not None and self.gpu.seq_barriers:
                out = self.sequence_barriers(kids, out)
            return ir.Block(out)
        if t == isl.ast_node_type.user:
            return self.user(n, scope)
        if t == isl.ast_node_type.mark:
            return self.node(n.mark_get_node(), scope, loops)
        raise LoweringError(f"unexpected isl AST node {t}")

    def for_node(self, n, scope, loops):
        it = n.for_get_iterator().get_id().get_name()
        dim = int(it[1:])
        stmts = self.leaves(n)                  # the statements this loop holds
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
        k = self.gpu.kernel_of(stmts[0]) if self.gpu is not None else None
        enter = k is not None and not self.in_kernel and dim > 2 * k.host
        self.in_kernel |= enter                # a block loop: the kernel starts here
        try:
            body = self.node(n.for_get_body(), inner, loops + [name])
        finally:
            self.in_kernel = self.in_kernel and not enter
        self.dims.pop()
        kind, attrs = self.loop_kind(stmts, dim)
        if self.gpu is not None and any((x, dim) in self.gpu.loop_barriers for x in stmts):
            body = ir.Block([body, ir.Barrier()])     # threads of a block meet per iteration
        return ir.For(name, lo, hi, body, kind=kind, step=step, attrs=attrs)

    def loop_kind(self, stmts, dim):
        """The loop's kind from the tags of the statements under it."""
        kind, attrs = "serial", {}
        for stmt_name in stmts:
            st = self.state[stmt_name]
            names = st.dim_names()
            nm = names[dim] if dim < len(names) else None
            if self.gpu is not None and dim < 2 * getattr(self.gpu.kernel_of(stmt_name), "host", 0):
                attrs["host"] = True          # one kernel launch per iteration (CUDA printer)
            if nm in st.accumulate:
                red = self.model.by_name[stmt_name].stmt
                attrs["accumulate"] = [(resolve(Access(red.parent, red.lhs))[0].name, red.op)]
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
            elif tag.kind == "unrolled":
                attrs["unroll"] = tag.arg
            elif tag.kind in ir.GPU_KINDS:
                attrs["axis"] = tag.arg
                if tag.kind == "gpu_thread":      # value = threadIdx + min, < min + extent
                    lo, hi = self.gpu.kernel_of(stmt_name).thread_range[tag.arg]
                    attrs["min"], attrs["extent"] = lo, hi - lo + 1
        return kind, attrs

    def kernel_groups(self, kids, scope, loops):
        """A sequence outside the kernels: consecutive children that are parts
        of one kernel whose block loops isl dropped become one kernel."""
        groups = []
        for kid in kids:
            k = self.degenerate_kernel(kid)
            if k is not None and groups and groups[-1][0] is k:
                groups[-1][1].append(kid)
            else:
                groups.append((k, [kid]))
        out = []
        for k, part in groups:
            if k is None:
                out += [self.node(x, scope, loops) for x in part]
                continue

            def build(part=part):
                res = [self._node(x, scope, loops) for x in part]
                return ir.Block(self.sequence_barriers(part, res) if self.gpu.seq_barriers
                                else res)
            out.append(self.one_block(k, build))
        return out

    def sequence_barriers(self, kids, out):
        """Barriers between the children of a sequence at the schedule position
        the plan names: one before a child that reads (or overwrites) what an
        earlier child wrote in another thread, unless one already separates
        them (fewest barriers: intervals by their right end).  The sequence's
        schedule position is where the two statements' sequence constants
        first differ, not the innermost enclosing loop's + 1: isl drops the
        loops of one iteration and merges the sequences around them into one
        block (the barrier would otherwise be lost)."""
        leaves = [set(self.leaves(k)) for k in kids]
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
        base = "_".join(names) or f"c{dim}"
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
        s = m.stmt
        if isinstance(s, Computation):
            buf, idx = resolve(Access(s, s.vars))
            value = cast(self.ex.expr(s.value, env, s.dtype), s.dtype)
        else:
            buf, idx = resolve(Access(s.parent, s.lhs))
            dt = s.parent.dtype
            old = ir.Load(buf.name, tuple(self.ex.index(i, env) for i in idx), buf.dtype.name)
            rhs = cast(self.ex.expr(s.value, env, dt), dt)
            value = ir.Binary(s.op, cast(old, dt), rhs, dt.name)
        value = cast(value, buf.dtype)
        return ir.Store(buf.name, tuple(self.ex.index(i, env) for i in idx), value)

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
    from .expr import walk
    return [n for n in walk(e) if isinstance(n, Var)]


def _plus_one(x):
    if isinstance(x, ir.Const):
        return ir.Const(x.value + 1, x.dtype)
    if isinstance(x, ir.Binary) and x.op == "sub" and isinstance(x.b, ir.Const) and x.b.value == 1:
        return x.a
    return ir.Binary("add", x, ir.Const(1, "int64"), "int64")


def vector_report(f) -> str:
    """For ``f.explain()``: each vector loop of the compiled kernel, widened or
    not and why (:func:`codegen.vectorize.report`; the same decision in both
    backends).  Empty when the function does not compile."""
    from codegen.vectorize import report
    try:
        lowered = f.compile().lowered
    except Exception:           # explain() must work on a schedule that does not compile
        return ""
    lines = report(lowered)
    return "\nVector loops:\n" + "\n".join("  " + x for x in lines) if lines else ""

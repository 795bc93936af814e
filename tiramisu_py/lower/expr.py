"""Lowering of the DSL's expressions into codegen's loop IR expressions, with
the types the DSL's rules give them (weak literals, promotion)."""
from __future__ import annotations

from codegen import ir

from ..base import types as T
from ..lang.expr import (Access, BinOp, Call, Cast, Const, ParamRef, Select, UnOp, Var,
                         weak_default, strong_type, weak_partner_type)
from ..poly.model import resolve

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
        t = strong_type(e, self.memo) or want or weak_default(e, self.memo)
        if isinstance(e, Const):
            v = e.value
            v = bool(v) if t.is_bool else (int(v) if t.is_int else float(v))
            if t.is_half:              # no 16-bit literals: a float32 one, converted
                return ir.Cast(ir.Const(v, "float32"), t.name)
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
    return T.promote(weak_default(a, memo), weak_default(b, memo))


def cast(x: ir.Expr, t: T.DType) -> ir.Expr:
    if x.dtype == t.name:
        return x
    if isinstance(x, ir.Const) and not t.is_bool and not t.is_half:
        return ir.Const(int(x.value) if t.is_int else float(x.value), t.name)
    return ir.Cast(x, t.name)

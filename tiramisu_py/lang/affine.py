"""Affine forms of DSL expressions, printed as isl text.

``linear(e, ...)`` turns an expression into ``{atom: coefficient}`` where an
atom is 1 (the constant), a loop/param name, or an isl sub-term such as
``floor((i)/4)``.  Loads can be replaced by placeholder params (``subst``);
params with known values are folded in (``values``)."""
from __future__ import annotations

from .expr import Access, BinOp, Cast, Const, ParamRef, UnOp, Var


class NonAffine(Exception):
    """The expression is not affine in the loop variables."""


def linear(e, subst=None, values=None, rename=None) -> dict:
    subst = subst or {}
    values = values or {}
    rename = rename or {}

    def lin(e):
        if isinstance(e, Const):
            if isinstance(e.value, bool) or not isinstance(e.value, int):
                raise NonAffine(f"non-integer constant {e.value!r}")
            return {1: e.value}
        if isinstance(e, ParamRef):
            if e.name in values:
                return {1: values[e.name]}
            return {e.name: 1}
        if isinstance(e, Var):
            return {rename.get(e.name, e.name): 1}
        if isinstance(e, Access):
            if id(e) in subst:
                return {subst[id(e)]: 1}
            raise NonAffine(f"load {e!r}")
        if isinstance(e, Cast):
            if not e.to.is_int:
                raise NonAffine(f"cast to {e.to.name}")
            return lin(e.a)
        if isinstance(e, UnOp) and e.op == "neg":
            return scale(lin(e.a), -1)
        if isinstance(e, BinOp):
            if e.op in ("add", "sub"):
                a, b = lin(e.a), lin(e.b)
                return add(a, scale(b, 1 if e.op == "add" else -1))
            if e.op == "mul":
                a, b = lin(e.a), lin(e.b)
                if is_const(a):
                    return scale(b, a.get(1, 0))
                if is_const(b):
                    return scale(a, b.get(1, 0))
                raise NonAffine(f"product {e!r}")
            if e.op in ("floordiv", "floormod"):
                a, b = lin(e.a), lin(e.b)
                if not is_const(b) or b.get(1, 0) <= 0:
                    raise NonAffine(f"{e!r}: divisor must be a positive constant")
                d = b.get(1, 0)
                if is_const(a):
                    v = a.get(1, 0)
                    return {1: v // d if e.op == "floordiv" else v % d}
                if d == 1:
                    return a if e.op == "floordiv" else {}
                text = to_text(a)
                atom = f"floor(({text})/{d})" if e.op == "floordiv" else f"(({text}) mod {d})"
                return {atom: 1}
        raise NonAffine(repr(e))
    return lin(e)


def is_const(form) -> bool:
    return all(k == 1 for k, v in form.items() if v != 0)


def scale(form, k):
    return {a: c * k for a, c in form.items() if c * k != 0}


def add(a, b):
    out = dict(a)
    for k, v in b.items():
        out[k] = out.get(k, 0) + v
        if out[k] == 0:
            del out[k]
    return out


def to_text(form) -> str:
    parts = []
    for atom, c in form.items():
        if c == 0:
            continue
        if atom == 1:
            parts.append(str(c))
        elif c == 1:
            parts.append(str(atom))
        else:
            parts.append(f"{c}*{atom}")
    return " + ".join(parts).replace("+ -", "- ") if parts else "0"


def text(e, **kw) -> str:
    return to_text(linear(e, **kw))

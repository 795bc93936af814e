"""The shapes of a kernel's arrays: expressions in the params, evaluated
for a call's param values (the Kernel's checks and the torch bridge's
fake tensors use them)."""
from __future__ import annotations

from ..lang import affine
from ..lang.affine import NonAffine
from ..lang.expr import ParamRef, walk


def names_in(e) -> set:
    """The names of the params a shape expression uses."""
    return {n.name for n in walk(e) if isinstance(n, ParamRef)}


def eval_size(e, values, name) -> int:
    """The value of the shape expression ``e`` of array ``name`` for the
    param ``values``; ValueError when it cannot be evaluated."""
    try:
        form = affine.linear(e, values=values)
    except NonAffine:
        raise ValueError(f"cannot evaluate the shape {e!r} of {name!r}") from None
    if any(a != 1 for a in form):
        raise ValueError(f"shape {e!r} of {name!r} depends on unknown params")
    return form.get(1, 0)


def shape_text(shape) -> str:
    """A shape as Python writes a tuple: ``(N,)``, ``(N, M)``."""
    return "(" + ", ".join(repr(s) for s in shape) + ("," if len(shape) == 1 else "") + ")"


def may_be_negative(e, fixed) -> bool:
    """Whether the shape expression ``e`` may be below 0 for some
    non-negative values of the params not in ``fixed`` (name -> int):
    unless it is a sum of such params with non-negative coefficients and a
    non-negative constant, it is taken to (``N - 2``, ``N // 2``: yes)."""
    try:
        form = affine.linear(e, values=fixed)
    except NonAffine:
        return True
    return any(c < 0 or not (a == 1 or str(a).isidentifier()) for a, c in form.items())

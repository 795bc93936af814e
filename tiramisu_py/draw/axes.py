"""The axes of a picture (no drawing here): which of a statement's schedule
loops make one axis, which are tile loops, the axes' order and their short
labels.  The rules (docs/internals/draw.md):

* the two loops a ``split``, ``tile`` or ``tile_band`` made of one loop are
  one axis again, named and valued as the loop before the split (its
  expression then, so a loop skewed before being tiled stays skewed); the
  outer loops of such splits are the statement's **tile loops**, whatever
  the commands after the split do to them (a skew of the tile loops, the
  wavefront over tiles of an auto-schedule, or a reorder);
* the axes are ordered as their innermost loops are (the point loops, the
  order inside a tile);
* a label is the axis' name, with its expression when that is not the
  plain variable (``i = i + 2t``), as long as it is short and affine;
  otherwise ``i (transformed)`` (the expressions are in ``Panel.exprs``).
"""
from __future__ import annotations

import re
from dataclasses import dataclass

import islpy as isl

from ..lang.schedule import replay

MAX_LABEL = 32                 # characters of an axis label
SPLITS = ("split", "tile", "tile_band")


@dataclass
class Geometry:
    """A statement's axes under a schedule."""
    axes: list                 # [(axis name, isl expression over its variables)], in order
    loop_axis: dict            # schedule loop name -> axis name
    tile_loops: list           # the tile loops' names, in the schedule's order


def geometry(model, commands, state, stmt) -> Geometry:
    """The :class:`Geometry` of ``stmt`` in ``state`` (``commands`` replayed)."""
    origin = {}                # loop name -> (axis name, its expression before the split, tile?)
    for k, c in enumerate(commands):
        if c.stmt != stmt:
            continue
        if c.op in SPLITS:
            before = replay(model, commands, k)[stmt]
            loops = [c.args[0]] if c.op == "split" else list(c.args[0])
            names = [c.args[2]] if c.op == "split" else list(c.args[2])
            for loop, (outer, inner) in zip(loops, names):
                axis, expr, tile = origin.get(loop) or \
                    (loop, before.loops[before.find(loop, c.text, stmt)].expr, False)
                # the outer loop is a tile loop; the inner one is one if its loop was
                origin[outer], origin[inner] = (axis, expr, True), (axis, expr, tile)
        elif c.op == "skew" and c.args[3] != c.args[1] and c.args[1] in origin:
            origin[c.args[3]] = origin.pop(c.args[1])          # a skew that renames its loop
    last, exprs, loop_axis = {}, {}, {}
    for n, lp in enumerate(state[stmt].loops):
        axis, expr, _ = origin.get(lp.name, (lp.name, lp.expr, False))
        loop_axis[lp.name] = axis
        last[axis] = n
        exprs.setdefault(axis, expr)
    tiles = [lp.name for lp in state[stmt].loops if lp.name in origin and origin[lp.name][2]]
    return Geometry([(a, exprs[a]) for a in sorted(last, key=last.get)], loop_axis, tiles)


def pretty(model, m, axis, expr):
    """``expr`` (isl text over ``m``'s variables) as people write it, the
    axis' own variable first: ``(i) + 2*(t)`` -> ``i + 2t``."""
    names = [v.name for v in m.vars]
    pa = isl.PwAff(f"{model.prefix()}{{ {m.name}[{', '.join(names)}] -> [({expr})] }}",
                   context=model.ctx)
    pieces = pa.get_pieces()
    if len(pieces) != 1 or pieces[0][1].dim(isl.dim_type.div):
        return readable(expr)                  # floor or mod: as written
    aff = pieces[0][1]
    terms = [(aff.get_coefficient_val(isl.dim_type.in_, k).to_python(), n)
             for k, n in enumerate(names)]
    terms += [(aff.get_coefficient_val(isl.dim_type.param, k).to_python(),
               aff.get_dim_name(isl.dim_type.param, k))
              for k in range(aff.dim(isl.dim_type.param))]
    terms = sorted([t for t in terms if t[0]], key=lambda t: t[1] != axis)
    terms.append((aff.get_constant_val().to_python(), ""))
    text = ""
    for c, n in terms:
        if c == 0 and n == "":
            continue
        mag = str(abs(c)) if abs(c) != 1 or not n else ""
        sign = ("-" if c < 0 else "") if not text else (" - " if c < 0 else " + ")
        text += sign + mag + n
    return text or "0"


def label(axis, texts):
    """The label of ``axis`` given its expression per drawn statement (as
    :func:`pretty` writes them); at most :data:`MAX_LABEL` characters."""
    uniq = list(dict.fromkeys(texts.values()))
    if uniq in ([axis], []):
        return axis
    text = f"{axis} = {uniq[0]}" if len(uniq) == 1 else \
        f"{axis}: " + "; ".join(f"{s} {t}" for s, t in texts.items())
    if len(text) > MAX_LABEL or re.search(r"floor|mod|/", text):
        return f"{axis} (transformed)"
    return text


def readable(expr):
    """An isl expression with fewer parentheses: ``(i) + 1*(t)`` -> ``i + t``."""
    expr = re.sub(r"\((\w+)\)", r"\1", expr)
    return re.sub(r"(?<![\w)])1\*", "", expr)

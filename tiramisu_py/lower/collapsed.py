"""Collapsed loops (``collapse``) for the AST: the schedule isl generates
code from has each collapsed loop replaced by the loops it was made of (the
same iterations in the same order), and the lowering joins their loops back
into one (:meth:`tiramisu_py.lower.ast.AstLowering.collapsed_loop`).

Why: given the collapsed dimension itself (``3 * floor(i/60) + floor(j/64)``),
isl recovers the statement's indices from it and the point loops by one
division of all of them together (``j = 189 - (128 c0 + 160 c2 + 184 c4 +
191 c5 + 189) % 192``): a division per vector lane in the innermost loop
(2mm's register block ran 26x slower).  From the loops it was made of, the
indices are the split's plain sums (``j = 64 j0 + 32 j10 + 8 j110 +
j111``), and the joined loop computes ``i0 = f / 3, j0 = f % 3`` once per
iteration.

A collapsed loop is expanded only where the statement runs in it alone and
the names of its loops are free in the statement (else isl gets it as it
is: right, only slower)."""
from __future__ import annotations

import copy


def leaves(loop) -> list:
    """The loops a collapsed loop was made of, collapsed ones expanded."""
    return [x for part in loop.parts for x in (leaves(part) if part.parts else [part])]


def expand(state):
    """``(ast_state, chains)``: ``state`` with the collapsed loops expanded
    (module doc); ``chains[stmt]``: ``[(collapsed loop's name, the schedule
    positions of its loops)]``.  The tags stay under the collapsed names."""
    out = copy.copy(state)
    chains = {}
    for name, st in state.items():
        if not any(lp.parts for lp in st.loops):
            continue
        new = copy.copy(st)
        new.loops, new.consts = list(st.loops), list(st.consts)
        k = 0
        while k < len(new.loops):
            lp = new.loops[k]
            parts = leaves(lp) if lp.parts else []
            names = {x.name for x in new.loops if x is not lp}
            if not parts or _shared(state, name, new.consts, k) \
                    or any(p.name in names for p in parts) or len({p.name for p in parts}) < len(parts):
                k += 1
                continue
            new.loops[k:k + 1] = parts
            new.consts[k + 1:k + 1] = [0] * (len(parts) - 1)
            chains.setdefault(name, []).append(
                (lp.name, [2 * (k + j) + 1 for j in range(len(parts))]))
            k += len(parts)
        out[name] = new
    return out, chains


def _shared(state, name, consts, k):
    """True when another statement runs inside loop ``k`` of ``name``."""
    return any(other != name and len(r.loops) > k and r.consts[:k + 1] == consts[:k + 1]
               for other, r in state.items())

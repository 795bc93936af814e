"""``f.tile_band(statements, loops, sizes)``: tiles several statements of a
nest as one band.

Each statement must have the named loops nested directly in that order, at
the same depth, and the statements listed must be exactly those that run
inside the band's outermost loop (no statement of that loop is left out, so
none is cut from the loops the band makes).  Every statement is tiled as by
``tile`` (loops ``i0, j0, ..., i1, j1, ...``); then the tile loops and the
point loops down to where the statements' loops parted before share one
schedule: a statement that ran after another inside the band's loop ``j``
runs after it inside ``j1``.  So a 2-statement stencil ``t { i { S1 } i { S2 } }``
becomes ``t0 { i0 { t1 { i1 { S1 } i1 { S2 } } } }``.

Legality: the command records one ``tile_band`` command per statement (one
call: all or nothing, undone together); the band is legal iff it is
permutable for every dependence among its statements, which the exact
legality check decides on the final schedule as for every command (a
stencil usually needs a ``skew`` of each statement first)."""
from __future__ import annotations

from ..lang.schedule import loop_name
from .atomic import all_or_nothing
from .state import state_of


def tile_band(f, statements, loops, sizes, names=None):
    """Records the band tiling (see the module's doc); returns ``f``."""
    if isinstance(statements, (str, bytes)) or not hasattr(statements, "__iter__"):
        raise TypeError("tile_band: statements must be a list of computations or updates")
    statements = list(statements)
    loops = [loop_name(x) for x in (loops if isinstance(loops, (list, tuple)) else [loops])]
    sizes = list(sizes) if isinstance(sizes, (list, tuple)) else [sizes]
    text = (f"{f.name}.tile_band([{', '.join(getattr(s, 'name', '?') for s in statements)}], "
            f"{loops}, {sizes})")
    if not statements:
        raise ValueError(f"{text}: statements is empty")
    for s in statements:
        if getattr(s, "function", None) is not f or not hasattr(s, "_command"):
            raise TypeError(f"{text}: {s!r} is not a computation or update of {f.name!r}")
    if len({s.name for s in statements}) != len(statements):
        raise ValueError(f"{text}: a statement is listed twice")
    if not loops or len(loops) != len(sizes):
        raise ValueError(f"{text}: give one size per loop (loops {loops}, sizes {sizes})")
    for z in sizes:
        if not isinstance(z, int) or isinstance(z, bool) or z < 1:
            raise ValueError(f"{text}: the sizes must be positive ints, not {z!r}")
    if len(set(loops)) != len(loops):
        raise ValueError(f"{text}: a loop is named twice")
    state = state_of(f)
    first = state[statements[0].name]
    k0 = first.find(loops[0], text, statements[0].name)
    for s in statements:
        st = state[s.name]
        ks = [st.find(n, text, s.name) for n in loops]
        if ks != list(range(k0, k0 + len(loops))):
            raise ValueError(f"{text}: in {s.name} the loops {', '.join(loops)} must be nested "
                             f"directly in this order at depth {k0} (its loops: "
                             f"{', '.join(lp.name for lp in st.loops)})")
        if st.consts[:k0 + 1] != first.consts[:k0 + 1]:
            raise ValueError(f"{text}: {s.name} does not share loop {loops[0]!r} with "
                             f"{statements[0].name} (fuse them first with after)")
    listed = {s.name for s in statements}
    left = [n for n, st in state.items() if n not in listed and len(st.loops) > k0
            and st.consts[:k0 + 1] == first.consts[:k0 + 1]]
    if left:
        raise ValueError(f"{text}: {', '.join(left)} also run(s) inside loop {loops[0]!r}; "
                         "list every statement of the band's outermost loop")
    if names is None:
        names = [(n + "0", n + "1") for n in loops]
    shown = ", ".join(map(repr, loops)) + ", " + ", ".join(map(str, sizes))
    with all_or_nothing(f):
        for s in statements:
            s._command("tile_band", loops, sizes, names,
                       text=f"{s.name}.tile_band({shown})")
    return f


"""Pictures (tiramisu_py.draw): the DATA drawn is checked exactly (points,
arrows by kind, tile ids, steps, the highlighted pair of a refused schedule),
never pixels; rendering runs headless (matplotlib's object API, Agg) when
matplotlib is installed; its absence gives a message naming the extra."""
import re
import sys

import numpy as np
import pytest

import tiramisu_py as tp
from examples import jacobi1d, jacobi2d
from tiramisu_py import cli
from tiramisu_py.draw.axes import MAX_LABEL
from tiramisu_py.draw.render import ORDER_FONT

try:
    import matplotlib
    matplotlib.use("Agg")
    HAS_MPL = True
except ImportError:
    HAS_MPL = False
needs_mpl = pytest.mark.skipif(not HAS_MPL, reason="matplotlib is not installed "
                                                   "(pip install tiramisu_py[draw])")


def jacobi_1d():
    """examples/jacobi1d.py: A[(t+1)%2, i] = mean of A[t%2, i-1..i+1]."""
    f = jacobi1d.build()
    return f, f.statements[0]


def recurrence():
    """An LSTM-like recurrence over layers x time: z reads the layer below at
    the same step and its own layer at the step before; h_step stores it."""
    f = tp.Function("rnn", params=["NL", "T"])
    l, t = f.var("l", 0, "NL"), f.var("t", 0, "T")
    x = f.input("x", ("T",), tp.float32)
    h = f.buffer("h", ("NL + 1", "T + 1"), tp.float32, output=True)
    zb = f.buffer("zb", ("NL",), tp.float32)
    f.computation("copy_x", [t], x[t]).store_in(h, [0, t + 1])
    with f.nest(l, t):
        z = f.computation("z", [l, t], h[l, t + 1] + h[l + 1, t]).store_in(zb, [l])
        f.computation("h_step", [l, t], tp.tanh(z[l, t])).store_in(h, [l + 1, t + 1])
    return f


def wavefront(f):
    for s in f.statements:
        if [v.name for v in s.vars] == ["l", "t"]:
            s.skew("l", "t", 1)
            s.interchange("l", "t")
            s.parallelize("l")
    return f


def arrows(panel):
    return {(a.kind, a.src, a.dst) for a in panel.arrows}


def test_jacobi_skewed_and_tiled_data():
    f = jacobi1d.skewed_tiled(jacobi1d.build(), 2, 4)
    T, N = 4, 6
    p = f.draw(params={"T": T, "N": N}).data.panels[0]
    assert p.axes == ("i = i + t", "t") and p.statements == ["S"]
    sk = lambda t, i: (i + t, t)                                   # noqa: E731 the skewed point
    inst = [(t, i) for t in range(T) for i in range(1, N - 1)]
    pts = {pt.xy: pt for pt in p.points}
    assert set(pts) == {sk(t, i) for t, i in inst} and len(p.points) == len(inst)
    assert all(pt.xy == sk(*pt.instance) and pt.block == () for pt in p.points)
    # tiles: floor(t / 2), floor((i + t) / 4); one step per (tile, t mod 2): the inner
    # skewed loop i1 carries no dependence
    assert {xy: pt.tile for xy, pt in pts.items()} == \
        {sk(t, i): (t // 2, (i + t) // 4) for t, i in inst}
    order = sorted(inst, key=lambda ti: (ti[0] // 2, (ti[1] + ti[0]) // 4, ti[0] % 2,
                                         (ti[1] + ti[0]) % 4))
    assert [pts[sk(t, i)].time for t, i in order] == list(range(len(inst)))
    prefixes = sorted({(t // 2, (i + t) // 4, t % 2) for t, i in inst})
    assert {xy: pt.step for xy, pt in pts.items()} == \
        {sk(t, i): prefixes.index((t // 2, (i + t) // 4, t % 2)) for t, i in inst}
    assert p.step_loops == {"S": ("i1", False)}
    ok = lambda t, i: 0 <= t < T and 1 <= i < N - 1                # noqa: E731
    want = set()
    for t, i in inst:
        for d in (-1, 0, 1):
            if ok(t + 1, i + d):       # flow: S(t,i) writes A[(t+1)%2, i], S(t+1,i+d) reads it
                want.add(("flow", ("S", (t, i)), ("S", (t + 1, i + d))))
            if ok(t + 1, i + d):       # anti: S(t,i) reads A[t%2, i+d], S(t+1, i+d) writes it
                want.add(("anti", ("S", (t, i)), ("S", (t + 1, i + d))))
        if ok(t + 2, i):               # output: the same element two steps later
            want.add(("output", ("S", (t, i)), ("S", (t + 2, i))))
    assert arrows(p) == want


def tiled_square(size):
    """S(i, j) on an N x N space, tiled size x size."""
    f = tp.Function("square", params=["N"])
    i, j = f.var("i", 0, "N"), f.var("j", 0, "N")
    A = f.buffer("A", ("N", "N"), tp.float32, output=True)
    f.computation("S", [i, j], i + j).store_in(A, [i, j]).tile("i", "j", size, size)
    return f


def check_picture(p):
    """Every drawn instance once; each tile's box holds its instances and no
    other tile's; labels short, no isl expression."""
    assert len({(pt.stmt, pt.instance) for pt in p.points}) == len(p.points)
    assert len({(pt.stmt, pt.xy, pt.block) for pt in p.points}) == len(p.points)
    assert sorted(pt.time for pt in p.points) == list(range(len(p.points)))
    boxes = {(t.tile, t.block): t for t in p.tiles}
    tiled = [pt for pt in p.points if pt.tile is not None]
    assert sum(t.instances for t in p.tiles) == len(tiled)
    inside = lambda box, xy: box[0] <= xy[0] <= box[2] and box[1] <= xy[1] <= box[3]  # noqa
    for pt in tiled:
        assert inside(boxes[(pt.tile, pt.block)].box, pt.xy)
        assert not any(inside(t.box, pt.xy) for t in p.tiles
                       if t.block == pt.block and t.tile != pt.tile)
    for name in p.axes + p.blocks:
        assert len(name) <= MAX_LABEL and not re.search(r"floor|mod|\(\(", name), name


def test_tiled_square_draws_every_instance_in_tile_order():
    p = tiled_square(4).draw(params={"N": 8}).data.panels[0]
    check_picture(p)
    assert p.axes == ("j", "i") and p.blocks == ()
    assert len(p.points) == 64 and all(pt.xy == pt.instance[::-1] for pt in p.points)
    assert {t.tile: t.box for t in p.tiles} == \
        {(a, b): (4 * b, 4 * a, 4 * b + 3, 4 * a + 3) for a in range(2) for b in range(2)}
    order = sorted(((i, j) for i in range(8) for j in range(8)),
                   key=lambda ij: (ij[0] // 4, ij[1] // 4, ij[0] % 4, ij[1] % 4))
    assert [pt.instance for pt in sorted(p.points, key=lambda pt: pt.time)] == order


def test_a_tile_larger_than_the_space_is_one_box_around_every_instance():
    p = tiled_square(128).draw(params={"N": 8}).data.panels[0]
    check_picture(p)
    assert p.axes == ("j", "i") and len({pt.xy for pt in p.points}) == 64
    assert [(t.tile, t.box, t.instances) for t in p.tiles] == [((0, 0), (0, 0, 7, 7), 64)]
    assert [pt.instance for pt in sorted(p.points, key=lambda pt: pt.time)] == \
        [(i, j) for i in range(8) for j in range(8)]


def test_time_tiled_jacobi2d_draws_instances_not_tiles():
    f = jacobi2d.time_tiled(jacobi2d.build())
    T, N = 3, 6
    p = f.draw(params={"T": T, "N": N}).data.panels[0]
    check_picture(p)
    inst = [(s, (t, i, j)) for s in ("sB", "sA") for t in range(T)
            for i in range(1, N - 1) for j in range(1, N - 1)]
    assert len(inst) == 96 and sorted((pt.stmt, pt.instance) for pt in p.points) == sorted(inst)
    assert p.blocks == ("t",)                       # one block per t, (j, i) skewed in each
    assert p.axes == ("j: sB j + 2t; sA j + 2t + 1", "i: sB i + 2t; sA i + 2t + 1")
    shift = {"sB": 0, "sA": 1}
    for pt in p.points:
        t, i, j = pt.instance
        d = shift[pt.stmt]
        assert pt.block == (t,) and pt.xy == (j + 2 * t + d, i + 2 * t + d)

    def key(stmt, t, i, j):                         # the schedule, written out
        d = shift[stmt]
        ii, jj = i + 2 * t + d, j + 2 * t + d
        t0, i0, j0 = t // 2, ii // 4, jj // 4
        return (j0 + t0 + i0, t0, i0, t % 2, d, ii % 4, jj % 4)
    assert [(pt.stmt, pt.instance) for pt in sorted(p.points, key=lambda pt: pt.time)] == \
        sorted(inst, key=lambda x: key(x[0], *x[1]))
    for pt in p.points:                             # the tile loops' values, schedule order
        t, i, j = pt.instance
        d = shift[pt.stmt]
        t0, i0, j0 = t // 2, (i + 2 * t + d) // 4, (j + 2 * t + d) // 4
        assert pt.tile == (j0 + t0 + i0, t0, i0)


def test_auto_scheduled_stencils_draw_every_instance():
    for module, dims in ((jacobi1d, 1), (jacobi2d, 2)):       # space dims beside t
        f = module.build()
        n = {s.name: 0 for s in f.statements}
        f.auto_schedule()                          # tile sizes from this host's caches
        p = f.draw(params={"T": 3, "N": 6}).data.panels[0]
        check_picture(p)
        for pt in p.points:
            n[pt.stmt] += 1
        assert n == {s: 3 * 4 ** dims for s in n}
        assert p.tiles and all(pt.tile is not None for pt in p.points)


def matmul():
    f = tp.Function("mm", params=["N"])
    i, j, k = f.var("i", 0, "N"), f.var("j", 0, "N"), f.var("k", 0, "N")
    A = f.input("A", ("N", "N"), tp.float32)
    C = f.computation("C", [i, j], 0.0)
    C[i, j] += A[i, k] * A[k, j]
    return f, C


def test_statements_without_the_drawn_loops_are_named_not_drawn():
    f, C = matmul()
    p = f.draw(params={"N": 2}).data.panels[0]              # on (j, k): C has no k
    assert p.statements == ["C_update"] and p.omitted == {"C": "has no loop k (the loops "
                                                               "drawn: j, k)"}
    assert p.blocks == ("i",) and p.axes == ("k", "j") and len(p.points) == 8
    with pytest.raises(ValueError, match="statement C has no loop k"):
        f.draw(params={"N": 2}, statement=["C", "C_update"])
    q = f.draw(params={"N": 2}, statement="C").data.panels[0]
    assert q.axes == ("j", "i") and len(q.points) == 4
    # on (i, j) both are drawn, C in a block of its own: it has no k
    p = f.draw(params={"N": 2}, loops=("i", "j")).data.panels[0]
    assert p.statements == ["C", "C_update"] and p.block_axes == ("k",) and not p.omitted
    assert {(pt.stmt, pt.block) for pt in p.points} == \
        {("C", (None,)), ("C_update", (0,)), ("C_update", (1,))}
    assert len(p.points) == 4 + 8
    check_picture(p)


def test_a_refused_pair_of_an_init_and_its_update_is_drawn():
    f, C = matmul()
    C.after(C.update, None)                 # the init after the update: refused
    with pytest.raises(tp.IllegalScheduleError) as info:
        f.compile()
    p = info.value.draw(params={"N": 3}).data.panels[0]
    assert (p.highlight["source"], p.highlight["sink"]) == (("C", (0, 0)), ("C_update", (0, 0, 0)))
    assert p.axes == ("j", "i") and p.block_axes == ("k",)       # the loops the two share
    assert len(p.points) == 9 + 27
    times = {(pt.stmt, pt.instance): pt.time for pt in p.points}
    assert times[("C", (0, 0))] > times[("C_update", (0, 0, 0))]


def test_loops_names_a_tile_or_point_loop_for_its_axis():
    f = jacobi1d.skewed_tiled(jacobi1d.build(), 2, 4)
    for loops in (("t0", "i1"), ("t1", "i0"), ("t", "i")):
        p = f.draw(params={"T": 4, "N": 6}, loops=loops).data.panels[0]
        assert p.axes == ("i = i + t", "t")
    p = f.draw(params={"T": 4, "N": 6}, loops=("i0", "t1")).data.panels[0]
    assert p.axes == ("t", "i = i + t")
    with pytest.raises(ValueError, match="one axis twice"):
        f.draw(params={"T": 4, "N": 6}, loops=("i0", "i1"))


def test_lstm_wavefront_data():
    f = wavefront(recurrence())
    NL, T = 3, 4
    p = f.draw(params={"NL": NL, "T": T}).data.panels[0]
    assert p.statements == ["z", "h_step"]            # copy_x has no l loop: not drawn
    assert p.axes == ("l", "t = t + l")
    c = lambda l, t: (l, t + l)                                    # noqa: E731
    inst = [(l, t) for l in range(NL) for t in range(T)]
    pts = {(pt.stmt, pt.xy): pt for pt in p.points}
    assert set(pts) == {(s, c(l, t)) for s in ("z", "h_step") for l, t in inst}
    # one wavefront per anti-diagonal t + l: both statements of all its layers
    assert {k: pt.step for k, pt in pts.items()} == \
        {(s, c(l, t)): t + l for s in ("z", "h_step") for l, t in inst}
    order = sorted(((t + l, l, k, s) for l, t in inst for k, s in enumerate(("z", "h_step"))))
    assert [pts[(s, (l, d))].time for d, l, _, s in order] == list(range(2 * len(inst)))
    assert p.marks == {"z": {"l": "parallel"}, "h_step": {"l": "parallel"}}
    assert p.step_loops == {"z": ("l", True), "h_step": ("l", True)}
    assert all(pt.tile is None for pt in p.points)
    want = set()
    for l, t in inst:
        want.add(("flow", ("z", (l, t)), ("h_step", (l, t))))          # through zb[l]
        if l + 1 < NL:                                                 # the layer above
            want.add(("flow", ("h_step", (l, t)), ("z", (l + 1, t))))
        if t + 1 < T:                                                  # the next step
            want.add(("flow", ("h_step", (l, t)), ("z", (l, t + 1))))
            want.add(("anti", ("h_step", (l, t)), ("z", (l, t + 1))))  # zb[l] reused
            want.add(("output", ("z", (l, t)), ("z", (l, t + 1))))
    assert arrows(p) == want
    # every arrow points forward in time after the skew: the wavefront
    t_of = {(pt.stmt, pt.instance): pt.time for pt in p.points}
    assert all(t_of[a.src] < t_of[a.dst] for a in p.arrows)


def test_compare_shows_program_order_beside_the_schedule():
    f = wavefront(recurrence())
    pic = f.draw(params={"NL": 2, "T": 3}, compare=True)
    before, after = pic.data.panels
    assert (before.title, after.title) == ("program order", "schedule")
    assert before.axes == ("t", "l") and {pt.xy for pt in before.points} == \
        {(t, l) for l in range(2) for t in range(3)}
    g = recurrence()
    both = tp.draw_compare(g, f, params={"NL": 2, "T": 3}).data.panels
    assert arrows(both[0]) == arrows(before) and arrows(both[1]) == arrows(after)


def test_refused_interchange_is_drawn_with_the_pair_it_names():
    f, S = jacobi_1d()
    S.interchange("t", "i")
    with pytest.raises(tp.IllegalScheduleError) as info:
        f.compile()
    err = info.value
    named = re.findall(r"S\(t=(\d+), i=(\d+)\)", str(err))[:2]
    sink, source = [("S", (int(a), int(b))) for a, b in named]   # "sink ... after source"
    v = err.violation
    assert (v.source, v.sink, v.kind, v.buffer) == (source, sink, "RAW", "A")
    p = err.draw().data.panels[0]
    h = p.highlight
    assert (h["source"], h["sink"]) == (source, sink)
    assert h["kind"] == "flow" and h["buffer"] == "A"
    # on the interchanged order: i outside (y), t inside (x)
    assert p.axes == ("t", "i")
    times = {(pt.stmt, pt.instance): pt.time for pt in p.points}
    assert times[source] > times[sink]                           # the wrong order, shown
    assert ("flow", source, sink) in arrows(p)
    # at larger params the same two instances are circled
    big = err.draw(params={"T": 4, "N": 6}).data.panels[0].highlight
    assert (big["source"], big["sink"]) == (source, sink)
    with pytest.raises(ValueError, match="not drawn"):
        err.draw(params={"T": 1, "N": 4})


def test_bad_arguments_are_named():
    f, S = jacobi_1d()
    with pytest.raises(ValueError, match="params= must give a value to T, N"):
        f.draw()
    with pytest.raises(ValueError, match="'M', not a parameter"):
        f.draw(params={"T": 2, "N": 4, "M": 1})
    with pytest.raises(ValueError, match="loops= names 'k'"):
        f.draw(params={"T": 2, "N": 4}, loops=("t", "k"))
    with pytest.raises(ValueError, match="statement='Q'"):
        f.draw(params={"T": 2, "N": 4}, statement="Q")
    with pytest.raises(ValueError, match="must be an int"):
        f.draw(params={"T": 2, "N": 4.5})
    with pytest.raises(ValueError, match="names no pair"):
        tp.IllegalScheduleError("no pair").draw()


def test_data_dependent_loops_are_not_drawn():
    f = tp.Function("spmv", params=["R", "C", "NNZ"])
    rowptr = f.input("rowptr", "R + 1", tp.int32)
    val, x = f.input("val", "NNZ", tp.float32), f.input("x", "C", tp.float32)
    r = f.var("r", 0, "R")
    j = f.var("j", rowptr[r], rowptr[r + 1])
    y = f.computation("y", [r], 0.0)
    y[r] += val[j] * x[j]
    p = f.draw(params={"R": 3, "C": 4, "NNZ": 5}).data.panels[0]
    assert p.statements == ["y"] and [pt.xy for pt in p.points] == [(0, 0), (1, 0), (2, 0)]
    with pytest.raises(ValueError, match="y_update has data-dependent loop bounds"):
        f.draw(statement="y_update", params={"R": 3, "C": 4, "NNZ": 5})


def three_statement_nest():
    """a, b, c in one (t, i) nest, a reading c of the step before: i split in
    2 tiles, 3 time steps."""
    f = tp.Function("three", params=["T", "N"])
    t, i = f.var("t", 0, "T"), f.var("i", 0, "N")
    X = f.input("X", ("N",), tp.float32)
    cb = f.buffer("cb", ("T + 1", "N"), tp.float32, output=True)
    with f.nest(t, i):
        a = f.computation("a", [t, i], cb[t, i] + X[i])
        b = f.computation("b", [t, i], a[t, i] * 2)
        f.computation("c", [t, i], b[t, i] + 1).store_in(cb, [t + 1, i])
    for s in f.statements:
        s.split("i", 4)
        s.parallelize("i0")
    return f


def test_three_statement_nest_data():
    p = three_statement_nest().draw(params={"T": 3, "N": 8}).data.panels[0]
    assert {pt.tile for pt in p.points} == {(0,), (1,)}
    assert {pt.step for pt in p.points} == {0, 1, 2}
    assert all(pt.step == pt.xy[1] for pt in p.points)


def rendered_texts(pic):
    """The figure and its visible texts with their boxes on the canvas."""
    fig = pic.figure()
    from matplotlib.backends.backend_agg import FigureCanvasAgg
    canvas = FigureCanvasAgg(fig)
    canvas.draw()
    renderer = canvas.get_renderer()
    texts = [t for t in fig.findobj(matplotlib.text.Text)
             if t.get_visible() and t.get_text().strip() and t.figure is not None]
    boxes = [(t.get_text(), t.get_window_extent(renderer)) for t in texts]
    overlaps = [(a[0], b[0]) for k, a in enumerate(boxes) for b in boxes[k + 1:]
                if a[1].overlaps(b[1])]
    return fig, texts, overlaps


@needs_mpl
def test_three_statement_nest_renders_readably(tmp_path):
    fig, texts, overlaps = rendered_texts(three_statement_nest().draw(params={"T": 3, "N": 8}))
    assert fig.legends and {t.get_text() for t in fig.legends[0].get_texts()} >= \
        {"statement a", "statement b", "statement c", "flow dependence", "tile"}
    assert sorted(int(t.get_text()) for t in texts if t.get_fontsize() == ORDER_FONT) == \
        list(range(3 * 3 * 8))                                      # the order labels
    assert not overlaps, overlaps


@needs_mpl
def test_blocks_render_readably():
    pic = jacobi2d.time_tiled(jacobi2d.build()).draw(params={"T": 3, "N": 5})
    fig, texts, overlaps = rendered_texts(pic)
    assert not overlaps, overlaps
    words = [t.get_text() for t in texts]
    assert {"t = 0", "t = 1", "t = 2"} <= set(words)                # the blocks' captions
    assert sorted(int(t.get_text()) for t in texts if t.get_fontsize() == ORDER_FONT) == \
        list(range(54))                                             # every instance's order
    assert fig.axes[0].get_xlabel() == "j: sB j + 2t; sA j + 2t + 1"
    assert any("dependences between blocks (not drawn)" in w for w in words)


@needs_mpl
def test_render_png_svg_pdf(tmp_path):
    f, S = jacobi_1d()
    S.skew("t", "i", 1)
    pic = f.draw(params={"T": 3, "N": 5}, compare=True)
    for suffix, head in ((".png", b"\x89PNG"), (".svg", b"<?xml"), (".pdf", b"%PDF")):
        path = pic.save(tmp_path / f"j{suffix}")
        assert path.read_bytes().startswith(head)
    assert pic._repr_png_().startswith(b"\x89PNG") and "<svg" in pic._repr_svg_()
    with pytest.raises(ValueError, match="must end in .png"):
        pic.save(tmp_path / "j.gif")
    g, S2 = jacobi_1d()
    S2.interchange("t", "i")
    with pytest.raises(tp.IllegalScheduleError) as info:
        g.compile()
    info.value.draw(tmp_path / "refused.png")
    assert (tmp_path / "refused.png").stat().st_size > 0


@needs_mpl
def test_csr_weights_draw(tmp_path):
    from schedules import CSRWeights
    w = np.zeros((4, 2, 3, 3), np.float32)
    w[0, 0, 1, 1] = w[3, 1, 2, 0] = w[2, 0, 0, 0] = 1.0
    pic = CSRWeights.from_dense(w).draw(tmp_path / "w.png")
    assert pic.data.nonzeros == [(0, 4), (2, 0), (3, 15)] and pic.data.shape == (4, 18)
    assert pic.data.groups == 9 and (tmp_path / "w.png").stat().st_size > 0


def test_missing_matplotlib_names_the_extra(monkeypatch):
    f, S = jacobi_1d()
    pic = f.draw(params={"T": 2, "N": 4})                # the data needs no matplotlib
    assert pic.data.panels[0].points
    for name in [m for m in sys.modules if m == "matplotlib" or m.startswith("matplotlib.")]:
        monkeypatch.delitem(sys.modules, name)
    monkeypatch.setitem(sys.modules, "matplotlib", None)
    with pytest.raises(ImportError, match=re.escape("pip install tiramisu_py[draw]")):
        pic.save("never.png")


CLI_FILE = '''
import tiramisu_py as tp

def build():
    f = tp.Function("stencil", params=["T", "N"])
    t, i = f.var("t", 0, "T"), f.var("i", 1, "N - 1")
    A = f.buffer("A", ("N",), tp.float32, output=True)
    S = f.computation("S", [t, i], (A[i - 1] + A[i + 1]) / 2).store_in(A, [i])
    S.skew("t", "i", 1)
    return f

def not_a_function():
    return 3
'''


@needs_mpl
def test_cli_draw(tmp_path, capsys):
    src = tmp_path / "prog.py"
    src.write_text(CLI_FILE)
    out = tmp_path / "x.svg"
    assert cli.main(["draw", f"{src}:build", "--params", "T=3,N=6", "--out", str(out)]) == 0
    assert out.read_text().lstrip().startswith("<?xml") and str(out) in capsys.readouterr().out
    with pytest.raises(SystemExit, match="no callable 'nope'"):
        cli.main(["draw", f"{src}:nope", "--params", "T=3,N=6"])
    with pytest.raises(SystemExit, match="returned int, not a tiramisu_py.Function"):
        cli.main(["draw", f"{src}:not_a_function"])
    with pytest.raises(SystemExit, match="is not NAME=INT"):
        cli.main(["draw", f"{src}:build", "--params", "T=x"])
    with pytest.raises(SystemExit, match="params= must give a value to N"):
        cli.main(["draw", f"{src}:build", "--params", "T=3", "--out", str(out)])
    with pytest.raises(SystemExit, match="FILE:CALLABLE"):
        cli.main(["draw", str(src)])


def test_the_drawn_jacobi_schedule_computes_the_stencil():
    """The skewed, tiled schedules the pictures show are the ones that run."""
    A = np.random.default_rng(1).standard_normal((2, 12)).astype(np.float32)
    out = jacobi1d.skewed_tiled(jacobi1d.build()).compile()(A=A.copy(), T=5)
    assert np.array_equal(out, jacobi1d.reference(A, 5))
    A, B = jacobi2d.random_inputs(n=9, seed=2)
    out = jacobi2d.time_tiled(jacobi2d.build()).compile()(A=A.copy(), B=B.copy(), T=5)
    want = jacobi2d.reference(A, B, 5)
    assert np.allclose(out["A"], want[0]) and np.allclose(out["B"], want[1])

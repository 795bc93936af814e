"""``cache_at`` of reads guarded by their own bounds (zero padding written as
a select): the padded copy (tiramisu_py/poly/padding.py), and
``cache_at(tile=True)``'s footprint-sized buffer."""
import numpy as np
import pytest

import tiramisu_py as tp


def blur(n=37, guard=None, fill=0.0):
    """out[i] = A[i - 1] + A[i] + A[i + 1], A zero outside [0, N)."""
    f = tp.Function("pblur", params={"N": n})
    i = f.var("i", 0, "N")
    A = f.input("A", ("N",), tp.float64)
    N = f.param("N")
    left = (guard or (lambda i, N: (i - 1 >= 0) & (i - 1 < N)))(i, N)
    f.computation("out", [i], tp.select(left, A[i - 1], fill) + A[i]
                  + tp.select((i + 1 >= 0) & (i + 1 < N), A[i + 1], 0.0))
    return f


def blur_reference(a, fill=0.0):
    p = np.concatenate([[fill], a, [0.0]])
    return p[:-2] + p[1:-1] + p[2:]


def test_a_guarded_read_is_copied_with_its_padding():
    """The copy reaches one element past each edge and holds 0 there; the
    consumer reads it without a select; the result is the padded blur's on
    both backends."""
    f = blur()
    out = f.computations["out"]
    copy = out.cache_at(f.buffers["A"], "i", name="Ap")
    assert [(repr(v.lo), repr(v.hi)) for v in copy.vars] == [("-1", "(N + 1)")]
    assert "select" not in repr(out.value) and "Ap[" in repr(out.value)
    a = np.random.default_rng(0).standard_normal(37)
    for target in ("c", "llvm"):
        np.testing.assert_allclose(f.compile(target)(A=a), blur_reference(a), rtol=1e-15)


def test_one_guarded_access_named_pads_that_read_only():
    f = blur()
    out = f.computations["out"]
    i = out.vars[0]
    copy = out.cache_at(f.buffers["A"][i + 1], "i", name="Ap")
    assert [(repr(v.lo), repr(v.hi)) for v in copy.vars] == [("0", "(N + 1)")]
    text = repr(out.value)
    assert "Ap[(i + 1)]" in text and "A[(i - 1)]" in text and "A[i]" in text, text
    a = np.random.default_rng(1).standard_normal(37)
    np.testing.assert_allclose(f.compile()(A=a), blur_reference(a), rtol=1e-15)


@pytest.mark.parametrize("stricter, fill", [
    (True, 0.0),               # i - 1 >= 1: not the bounds, so not padding
    (False, 2.0),              # two guards giving different constants
])
def test_a_guard_that_is_not_the_bounds_keeps_the_plain_copy(stricter, fill):
    f = blur(guard=(lambda i, N: (i - 1 >= 1) & (i - 1 < N)) if stricter else None, fill=fill)
    out = f.computations["out"]
    i = out.vars[0]
    # the stricter guard's read alone; both reads when their constants differ
    copy = out.cache_at(f.buffers["A"][i - 1] if stricter else f.buffers["A"], "i", name="Ap")
    assert [(repr(v.lo), repr(v.hi)) for v in copy.vars] == [("0", "N")]
    assert repr(out.value).count("select") == 2
    a = np.random.default_rng(2).standard_normal(37)
    want = blur_reference(a, fill)
    if stricter:
        want[1] -= a[0]
    np.testing.assert_allclose(f.compile()(A=a), want, rtol=1e-15)


def conv(n=2, c=3, h=9, w=11):
    """A zero-padded 3x3 convolution of c channels into one, float64."""
    f = tp.Function("pconv", params=dict(N=n, C=c, H=h, W=w))
    b, ch = f.var("n", 0, "N"), f.var("c", 0, "C")
    y, x = f.var("y", 0, "H"), f.var("x", 0, "W")
    ky, kx = f.var("ky", 0, 3), f.var("kx", 0, 3)
    inp = f.input("inp", ("N", "C", "H", "W"), tp.float64)
    wt = f.input("w", ("C", 3, 3), tp.float64)
    iy, ix = y + ky - 1, x + kx - 1
    inside = (iy >= 0) & (iy < f.param("H")) & (ix >= 0) & (ix < f.param("W"))
    out = f.computation("out", [b, y, x], 0.0, dtype=tp.float64)
    out[b, y, x] += wt[ch, ky, kx] * tp.select(inside, inp[b, ch, iy, ix], 0.0)
    return f


def conv_reference(a, w):
    p = np.pad(a, ((0, 0), (0, 0), (1, 1), (1, 1)))
    h, wd = a.shape[2:]
    return sum(np.einsum("c,ncyx->nyx", w[:, i, j], p[:, :, i:i + h, j:j + wd])
               for i in range(3) for j in range(3))


def test_tile_true_stores_one_iterations_footprint_reused_by_each():
    """At the row loop ``y`` of a 2-D convolution: 3 padded rows of every
    channel of one image, the rows indexed modulo 3, the columns (covered
    whole, from -1) from their lower bound; undo removes the copy and its
    buffer; the result is the padded convolution's on both backends."""
    f = conv()
    upd = f.computations["out"].update
    with pytest.raises(TypeError, match="tile must be a bool"):
        upd.cache_at("inp[n, c, ((y + ky) - 1), ((x + kx) - 1)]", "y", tile="yes")
    copy = upd.cache_at("inp[n, c, ((y + ky) - 1), ((x + kx) - 1)]", "y", name="ip", tile=True)
    tile = f.buffers["ip_tile"]
    assert [int(s.value) for s in tile.shape] == [1, 3, 3, 13]
    assert [repr(e) for e in copy.store_index] == ["0", "ip_1", "(ip_2 % 3)", "(ip_3 + 1)"]
    rng = np.random.default_rng(3)
    a, w = rng.standard_normal((2, 3, 9, 11)), rng.standard_normal((3, 3, 3))
    for target in ("c", "llvm"):
        np.testing.assert_allclose(f.compile(target)(inp=a, w=w), conv_reference(a, w), rtol=1e-12)
    reads = [ln for ln in f.compile("c").source.splitlines() if "ip_tile[" in ln and "w[" in ln]
    assert reads and not any("tp_pick" in ln for ln in reads), reads     # no guard left
    f.undo()
    assert "ip" not in f.computations and "ip_tile" not in f.buffers


# ---------------------------------------------------------------- random stencils
from hypothesis import HealthCheck, given, settings, strategies as st  # noqa: E402


def stencil(n, m, taps, fill):
    """out[i, j] = sum of c * select(inside, A[i + di, j + dj], fill) over ``taps``."""
    f = tp.Function("pst", params={"N": n, "M": m})
    i, j = f.var("i", 0, "N"), f.var("j", 0, "M")
    A = f.input("A", ("N", "M"), tp.float64)
    N, M = f.param("N"), f.param("M")
    e = 0.0
    for di, dj, c in taps:
        inside = (i + di >= 0) & (i + di < N) & (j + dj >= 0) & (j + dj < M)
        e = e + c * tp.select(inside, A[i + di, j + dj], fill)
    f.computation("out", [i, j], e, dtype=tp.float64)
    return f


def stencil_reference(a, taps, fill):
    n, m = a.shape
    p = np.full((n + 6, m + 6), fill)
    p[3:-3, 3:-3] = a
    return sum(c * p[3 + di:3 + di + n, 3 + dj:3 + dj + m] for di, dj, c in taps)


@settings(max_examples=25, deadline=None, derandomize=True, database=None,
          suppress_health_check=list(HealthCheck))
@given(n=st.integers(3, 8), m=st.integers(3, 8),
       taps=st.lists(st.tuples(st.integers(-2, 2), st.integers(-2, 2),
                               st.sampled_from([1.0, -0.5, 2.0])), min_size=1, max_size=3),
       fill=st.sampled_from([0.0, 1.5]), split=st.sampled_from([None, 2, 3]),
       one=st.booleans(), tile=st.booleans(), target=st.sampled_from(["c", "llvm"]))
def test_random_padded_copies_equal_numpy(n, m, taps, fill, split, one, tile, target):
    """Stencils whose reads are guarded by their bounds, a copy of one read
    or of the whole input at a random loop (``tile`` or not), on either
    backend: always the padded stencil's values."""
    f = stencil(n, m, taps, fill)
    out = f.computations["out"]
    loop = "i"
    if split:
        out.split("i", split)
        loop = "i0"
    reads = [a for a in _accesses(out.value) if a.target.name == "A"]
    source = repr(reads[0]) if one else f.buffers["A"]
    out.cache_at(source, loop, name="Ap", tile=tile)
    a = np.random.default_rng(n * 10 + m).standard_normal((n, m))
    np.testing.assert_allclose(f.compile(target)(A=a), stencil_reference(a, taps, fill),
                               rtol=1e-13, atol=1e-13)


def _accesses(e):
    from tiramisu_py.lang.expr import Access, walk
    return [x for x in walk(e) if isinstance(x, Access)]

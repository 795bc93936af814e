"""codegen.simplify: index simplification from loop ranges, and full-tile
versioning of unrolled/vector loops.  Each rewrite is checked for exactness by
evaluating the expression before and after over every point of the loops."""
import itertools
import os

os.environ.setdefault("OMP_WAIT_POLICY", "passive")

import numpy as np
import pytest

from examples import gemm
from codegen import emit_c, ir
from codegen.ir import ArrayArg, Binary, Block, Const, For, LoweredFunction, Store, Unary, Var
from codegen.simplify import simplify_indices, version_full_tiles


def c(v):
    return Const(v, "int64")


def b(op, x, y):
    return Binary(op, x, y, "int64")


def evaluate(e, env):
    if isinstance(e, Const):
        return e.value
    if isinstance(e, Var):
        return env[e.name]
    if isinstance(e, Unary):
        return -evaluate(e.a, env)
    x, y = evaluate(e.a, env), evaluate(e.b, env)
    ops = {"add": lambda: x + y, "sub": lambda: x - y, "mul": lambda: x * y,
           "floordiv": lambda: x // y, "floormod": lambda: x % y,
           "min": lambda: min(x, y), "max": lambda: max(x, y)}
    return ops[e.op]()


def nest(loops, index):
    """``for`` loops [(var, lo, hi)] around one store ``X[index] = 0``."""
    body = Store("X", (index,), Const(0.0, "float32"))
    for var, lo, hi in reversed(loops):
        body = For(var, lo, hi, body)
    fn = LoweredFunction("f", [], [ArrayArg("X", "float32", (c(10 ** 6),), True)], body)
    return fn


def simplified_index(loops, index):
    fn = simplify_indices(nest(loops, index))
    s = fn.body
    while isinstance(s, For):
        s = s.body
    return s.index[0]


def points(loops):
    """Every iteration of the (possibly non-rectangular) loops."""
    def rec(k, env):
        if k == len(loops):
            yield dict(env)
            return
        var, lo, hi = loops[k]
        for v in range(evaluate(lo, env), evaluate(hi, env)):
            env[var] = v
            yield from rec(k + 1, env)
    return list(rec(0, {}))


def assert_exact(loops, before, after):
    for env in points(loops):
        assert evaluate(before, env) == evaluate(after, env), env


def test_packed_index_becomes_the_tile_loops():
    loops = [("jr", c(0), c(8)), ("jv", c(0), c(4))]
    x = b("add", b("mul", c(4), Var("jr")), Var("jv"))
    div = b("floordiv", b("floormod", x, c(32)), c(4))
    mod = b("floormod", x, c(4))
    got_div, got_mod = simplified_index(loops, div), simplified_index(loops, mod)
    assert isinstance(got_div, Var) and got_div.name == "jr"
    assert isinstance(got_mod, Var) and got_mod.name == "jv"
    assert_exact(loops, div, got_div)
    assert_exact(loops, mod, got_mod)


def test_offset_loops_drop_the_modulo():
    # for (p = 16 * kc; p < 16 * kc + 16; p++) ... p % 16  ->  p - 16 * kc
    loops = [("kc", c(0), c(5)),
             ("p", b("mul", c(16), Var("kc")), b("add", b("mul", c(16), Var("kc")), c(16)))]
    e = b("floormod", Var("p"), c(16))
    got = simplified_index(loops, e)
    assert not any(isinstance(x, Binary) and x.op == "floormod" for x in ir.walk_exprs(got))
    assert_exact(loops, e, got)
    q = b("floordiv", Var("p"), c(16))
    got_q = simplified_index(loops, q)
    assert isinstance(got_q, Var) and got_q.name == "kc"


def test_clamped_loops_still_give_a_range():
    # for (jv = 0; jv < min(3, 10 - 4 * jr) + 1; ...): jv <= 3 is enough
    loops = [("jr", c(0), c(3)),
             ("jv", c(0), b("add", b("min", c(3), b("sub", c(10), b("mul", c(4), Var("jr")))), c(1)))]
    e = b("floormod", b("add", b("mul", c(4), Var("jr")), Var("jv")), c(4))
    got = simplified_index(loops, e)
    assert isinstance(got, Var) and got.name == "jv"
    assert_exact(loops, e, got)


@pytest.mark.parametrize("stride", [2, 3])
def test_multiples_of_the_divisor_leave_the_division(stride):
    # a strided read 2 * x + kx of a copy stored de-interleaved ([.. % 2][.. // 2]):
    # kx spans more than the divisor, so no range proof; the multiple of it
    # leaves: floordiv -> x + floordiv(kx, 2) (x contiguous), floormod -> floormod(kx, 2)
    loops = [("x", c(-3), c(6)), ("kx", c(0), c(stride + 1))]
    e = b("add", b("mul", c(stride), Var("x")), Var("kx"))
    div, mod = b("floordiv", e, c(stride)), b("floormod", e, c(stride))
    got_div, got_mod = simplified_index(loops, div), simplified_index(loops, mod)
    assert repr(got_div) == repr(b("add", Var("x"), b("floordiv", Var("kx"), c(stride))))
    assert repr(got_mod) == repr(b("floormod", Var("kx"), c(stride)))
    assert_exact(loops, div, got_div)
    assert_exact(loops, mod, got_mod)


@pytest.mark.parametrize("m", [3, 4, 7])
def test_unproven_ranges_are_left_alone(m):
    # jv spans 5 values: p % m is not jv for m < 5; nothing may be rewritten wrongly
    loops = [("jr", c(0), c(4)), ("jv", c(0), c(5))]
    e = b("floormod", b("add", b("mul", c(5), Var("jr")), Var("jv")), c(m))
    got = simplified_index(loops, e)
    assert_exact(loops, e, got)
    assert any(isinstance(x, Binary) and x.op == "floormod" for x in ir.walk_exprs(got))


def test_unbounded_names_are_left_alone():
    loops = [("i", c(0), Var("N"))]
    e = b("floormod", Var("i"), c(4))
    got = simplified_index(loops, e)
    assert isinstance(got, Binary) and got.op == "floormod"


def test_random_affine_rewrites_are_exact():
    rng = np.random.default_rng(1)
    for _ in range(200):
        e0, e1 = (int(x) for x in rng.integers(1, 6, 2))
        loops = [("a", c(0), c(e0)), ("d", c(0), c(e1))]
        ca, cd, k = (int(x) for x in rng.integers(-9, 10, 3))
        m = int(rng.integers(1, 12))
        x = b("add", b("add", b("mul", c(ca), Var("a")), b("mul", c(cd), Var("d"))), c(k))
        for op in ("floordiv", "floormod"):
            e = b(op, x, c(m))
            assert_exact(loops, e, simplified_index(loops, e))


def test_constant_sums_are_folded():
    loops = [("i", c(0), c(4))]
    e = b("add", b("add", Var("i"), c(127)), c(1))
    got = simplified_index(loops, e)
    assert emit_c(nest(loops, got)).count("i + 128") == 1


def test_versioning_gives_full_tiles_constant_bounds():
    clamp = b("add", b("min", c(7), b("sub", c(19), b("mul", c(8), Var("i0")))), c(1))
    inner = For("i1", c(0), clamp,
                Store("X", (b("add", b("mul", c(8), Var("i0")), Var("i1")),), Const(1.0, "float32")),
                kind="vector", attrs={"vector_width": 8})
    fn = LoweredFunction("f", [], [ArrayArg("X", "float32", (c(20),), True)],
                         For("i0", c(0), c(3), Block([inner])))
    out = version_full_tiles(fn)
    src = emit_c(out)
    assert "if (" in src and "i1 < 8" in src and "tp_min_i64(7" in src


def test_versioned_unrolled_and_vector_tiles_stay_correct(backend):
    f = gemm.build()
    u = f.computations["C"].update
    u.tile("i", "j", 4, 16)
    u.reorder("i0", "j0", "k", "i1", "j1")
    u.unroll("i1")
    u.vectorize("j1", 16)
    kern = f.compile(target=backend)
    rng = np.random.default_rng(0)
    for n, m, kk in itertools.product((1, 5, 8), (3, 16, 37), (2, 9)):
        a = rng.standard_normal((n, kk), dtype=np.float32)
        bb = rng.standard_normal((kk, m), dtype=np.float32)
        np.testing.assert_allclose(kern(a, bb), a @ bb, rtol=1e-5, atol=1e-5)


def _stencil(n, width):
    """A 5-point stencil over 1 .. N - 1, vectorised as a new user would."""
    import tiramisu_py as tp
    f = tp.Function("st", params={"N": n})
    i, j = f.var("i", 1, "N-1"), f.var("j", 1, "N-1")
    A = f.input("A", ("N", "N"), tp.float32)
    B = f.computation("B", [i, j], 0.2 * (A[i, j] + A[i - 1, j] + A[i + 1, j]
                                          + A[i, j - 1] + A[i, j + 1]))
    B.vectorize("j", width)
    return f


def test_boundary_tiles_are_peeled_off_the_full_ones():
    # j = 8 * j0 + j1 over 1 .. 254: j0 = 0 starts inside its tile, j0 = 31
    # ends inside; the 30 tiles between run 0 .. 8 with no test, and the two
    # boundary tiles, one iteration each, are pinned: constant bounds too
    src = _stencil(256, 8).compile().source
    assert "for (int64_t j0 = 0; j0 < 1; j0++)" in src
    assert "for (int64_t j0 = 1; j0 < 31; j0++)" in src
    assert "for (int64_t j0 = 31; j0 < 32; j0++)" in src
    assert "for (int64_t j1 = 0; j1 < 8; j1++)" in src
    assert "for (int64_t j1 = 1; j1 < 8; j1++)" in src
    assert "for (int64_t j1 = 0; j1 < 7; j1++)" in src
    assert "tp_max_i64" not in src


def test_lower_clamps_are_versioned_inside_parallel_loops():
    clamp = b("max", c(0), b("sub", c(3), b("mul", c(8), Var("i0"))))
    inner = For("i1", clamp, c(8),
                Store("X", (b("add", b("mul", c(8), Var("i0")), Var("i1")),), Const(1.0, "float32")),
                kind="vector", attrs={"vector_width": 8})
    fn = LoweredFunction("f", [], [ArrayArg("X", "float32", (c(24),), True)],
                         For("i0", c(0), c(3), Block([inner]), kind="parallel"))
    src = emit_c(version_full_tiles(fn))
    # a parallel loop is not cut in three (three fork/joins): its body is versioned
    assert "if (3 - 8 * i0 <= 0)" in src and "i1 = 0; i1 < 8" in src


@pytest.mark.parametrize("n", [3, 7, 9, 18, 35])
def test_peeled_stencils_stay_correct(backend, n):
    rng = np.random.default_rng(n)
    a = rng.standard_normal((n, n), dtype=np.float32)
    ref = 0.2 * (a[1:-1, 1:-1] + a[:-2, 1:-1] + a[2:, 1:-1] + a[1:-1, :-2] + a[1:-1, 2:])
    for width in (4, 8):
        got = _stencil(n, width).compile(target=backend)(a)
        np.testing.assert_allclose(got, ref, rtol=1e-5, atol=1e-6)


def _lower_triangle_product(n, k):
    """syrk's C[i][j] += A[i][k] A[j][k] over j <= i, in 6 x 16 register blocks
    (i unrolled, j in vectors of 8), A[j][k] packed into a panel per column
    block: the blocks' bounds are floor divisions by the lanes."""
    import tiramisu_py as tp
    f = tp.Function("tri", params={"N": n, "K": k})
    i, kk = f.var("i", 0, "N"), f.var("k", 0, "K")
    j = f.var("j", 0, i + 1)
    A = f.input("A", ("N", "K"), tp.float32)
    C = f.computation("C", [i, j], 0.0)
    C[i, j].reduce("+", A[i, kk] * A[j, kk], loops=[i, j, kk])
    u = C.update
    u.split("i", 6, names=("ir", "iu")).split("j", 16, names=("jr", "jv"))
    u.reorder("ir", "jr", "k", "iu", "jv")
    u.unroll("iu", 6)
    u.vectorize("jv", 8)
    u.accumulate_locally("k", allow_reassociation=True)
    return f


def test_triangular_register_blocks_below_the_diagonal_get_constant_bounds():
    src = _lower_triangle_product(50, 7).compile().source
    # the block wholly below the diagonal: its two vectors and 8 lanes constant
    assert "jv0 < 2; jv0++" in src and "jv1 < 8; jv1++" in src
    # the test is taken at the block's worst row (iu = 0) and folded
    assert "- 0" not in src


@pytest.mark.parametrize("n", [1, 6, 17, 40])
def test_triangular_register_blocks_stay_correct(backend, n):
    rng = np.random.default_rng(n)
    a = rng.standard_normal((n, 5), dtype=np.float32)
    out = _lower_triangle_product(n, 5).compile(target=backend)(a)
    low = np.tril_indices(n)
    np.testing.assert_allclose(out[low], (a @ a.T)[low], rtol=1e-5, atol=1e-5)


def _clipped_taps(n, xb):
    """A 3-tap window over x in register tiles of ``xb`` (x1 unrolled) with
    the taps outside the array skipped (``k`` from ``max(0, 1 - x)``): the
    serial tap loop lies between the tiles (x0) and the tile's columns (x1),
    as in the NCHWc convolution's block."""
    import tiramisu_py as tp
    f = tp.Function("taps", params={"N": n})
    x = f.var("x", 0, "N")
    k = f.var("k", tp.max(0, 1 - x), tp.min(3, f.param("N") + 1 - x))
    A = f.input("A", ("N",), tp.float32)
    W = f.input("W", (3,), tp.float32)
    out = f.computation("out", [x], 0.0)
    out[x] += W[k] * A[x + k - 1]
    u = out.update
    u.split("x", xb, names=("x0", "x1"))
    u.reorder("x0", "k", "x1")
    u.unroll("x1", xb)
    return f


def test_border_tiles_of_clipped_taps_are_peeled_and_pinned():
    # x0 = 0 and x0 = 3 are the border tiles (taken over the taps' worst
    # value), one iteration each, so their taps are peeled again with the
    # tile's columns constant: x1 from 1 at k = 0, below 7 at k = 2
    src = _clipped_taps(32, 8).compile(target="c").source
    assert "for (int64_t x0 = 0; x0 < 1; x0++)" in src
    assert "for (int64_t x0 = 1; x0 < 3; x0++)" in src
    assert "for (int64_t x0 = 3; x0 < 4; x0++)" in src
    assert "for (int64_t x1 = 1; x1 < 8; x1++)" in src
    assert "for (int64_t x1 = 0; x1 < 7; x1++)" in src
    assert "x1 = tp_max_i64" not in src and "if (" not in src.split("x0 = 0;")[1]


@pytest.mark.parametrize("n", [1, 2, 5, 8, 13, 32, 35])
def test_clipped_taps_stay_correct(backend, n):
    rng = np.random.default_rng(n)
    a, w = rng.standard_normal(n, dtype=np.float32), rng.standard_normal(3, dtype=np.float32)
    want = [sum(float(w[t]) * float(a[x + t - 1]) for t in range(3) if 0 <= x + t - 1 < n)
            for x in range(n)]
    for xb in (4, 8):
        got = _clipped_taps(n, xb).compile(target=backend)(a, w)
        np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-6)

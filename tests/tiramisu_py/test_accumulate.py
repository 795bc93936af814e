"""accumulate_locally(loop): a reduction accumulates over a loop in a local
tile, written to its output once after the loop: reassociated (from zero,
combined once) or, without allow_reassociation, copied in and out (the
program's order, bit for bit).  Both
sides: legal uses give the reference result on both backends (random inputs,
partial tiles, every reduction op), illegal ones are refused with the reason."""
import re

import numpy as np
import pytest

import tiramisu_py as tp
from codegen import loops
from codegen import ir
from codegen.accumulate import accumulate_locally


def gemm(n="N", m="M", k="K", init=0.0):
    f = tp.Function("gemm", params=["N", "M", "K"])
    i, j, kk = f.var("i", 0, n), f.var("j", 0, m), f.var("k", 0, k)
    A = f.input("A", ("N", "K"), tp.float32)
    B = f.input("B", ("K", "M"), tp.float32)
    C = f.computation("C", [i, j], init)
    C[i, j] += A[i, kk] * B[kk, j]
    return f, C


def register_block(C, mr=4, nr=16):
    u = C.update
    u.tile("i", "j", mr, nr)
    u.reorder("i0", "j0", "k", "i1", "j1")
    u.unroll("i1", mr)
    u.vectorize("j1", nr)
    u.accumulate_locally("k", allow_reassociation=True)


@pytest.mark.parametrize("shape", [(37, 45, 29), (8, 32, 64), (1, 1, 1), (5, 17, 3)])
def test_register_block_matches_numpy(backend, shape):
    n, m, k = shape
    f, C = gemm()
    register_block(C)
    kern = f.compile()
    rng = np.random.default_rng(n * m + k)
    a = rng.standard_normal((n, k)).astype(np.float32)
    b = rng.standard_normal((k, m)).astype(np.float32)
    np.testing.assert_allclose(kern(a, b), a @ b, rtol=1e-4, atol=1e-4)


def test_generated_code_accumulates_in_a_tile():
    f, C = gemm()
    register_block(C)
    src = f.compile(target="c").source
    # the full tile's 4 rows (unrolled): named vector variables, 16 lanes a
    # row (codegen.c.regtile), summed over k and added to C after it
    regs = 4 * -(-16 // loops.host_lanes(32))
    assert f"/* C_local[4][16]: {regs} registers, named (codegen.c.regtile) */" in src
    sums = re.findall(r"(C_local__v\d+) = \(\1 \+ \(\(float\)\(A\[4 \* i0 \+ i1\]\[k\]\) \* tp_vld_f32x", src)
    assert len(set(sums)) == regs, src
    assert re.search(r"tp_vst_f32x\d+\(&C\[4 \* i0 \+ i1\]\[16 \* j0 \+ j1\], \(tp_vld_f32x\d+\("
                     r"&C\[4 \* i0 \+ i1\]\[16 \* j0 \+ j1\]\) \+ C_local__v0\)\);", src), src
    # the partial tiles (clamped bounds, versioned apart) accumulate in tiles
    # of the full size too, over the clamped loops: C is never updated per k
    assert "C[4 * i0 + i1][16 * j0 + j1] = C[4 * i0 + i1][16 * j0 + j1] + A[" not in src
    # the partial rows' tile is named too (its copies guarded, each index
    # known); the partial columns' tiles (a clamped vector loop) are arrays
    assert src.count(f"[4][16]: {regs} registers, named (codegen.c.regtile) */") == 2
    assert re.search(r"if \(1 < tp_min_i64\(3, N - 4 \* i0 - 1\) \+ 1\) \{ /\* i1 = 1 \*/", src), src
    assert src.count("[4][16];") == 2
    assert "for (int64_t j1 = 0; j1 < tp_min_i64(15, M - 16 * j0 - 1) + 1; j1++) {\n" \
           "                C_local3[i1][j1] = -0.0f;" in src


@pytest.mark.parametrize("op", ["add", "sub", "mul", "max", "min"])
def test_every_reduction_op(backend, op):
    f = tp.Function("red", params=["N", "K"])
    i, k = f.var("i", 0, "N"), f.var("k", 0, "K")
    X = f.input("X", ("N", "K"), tp.float64)
    R = f.computation("R", [i], 1.5)
    x = X[i, k]
    if op == "add":
        R[i] += x
    elif op == "sub":
        R[i] -= x
    elif op == "mul":
        R[i] *= x
    elif op == "max":
        R[i].max(x)
    else:
        R[i].min(x)
    R.update.split("i", 8)
    R.update.reorder("i0", "k", "i1")
    R.update.vectorize("i1", 8)
    R.update.accumulate_locally("k", allow_reassociation=True)
    rng = np.random.default_rng(3)
    xs = rng.uniform(0.5, 1.5, (19, 7))
    ref = {"add": 1.5 + xs.sum(1), "sub": 1.5 - xs.sum(1), "mul": 1.5 * xs.prod(1),
           "max": np.maximum(1.5, xs.max(1)), "min": np.minimum(1.5, xs.min(1))}[op]
    np.testing.assert_allclose(f.compile()(xs), ref, rtol=1e-12)


def test_integer_max_starts_at_the_lowest_value(backend):
    f = tp.Function("imax", params=["N", "K"])
    i, k = f.var("i", 0, "N"), f.var("k", 0, "K")
    X = f.input("X", ("N", "K"), tp.int32)
    R = f.computation("R", [i], -2**31, dtype=tp.int32)
    R[i].max(X[i, k])
    R.update.split("i", 4)
    R.update.reorder("i0", "k", "i1")
    R.update.accumulate_locally("k", allow_reassociation=True)
    xs = np.random.default_rng(1).integers(-2**31, -2**31 + 5, (9, 6)).astype(np.int32)
    np.testing.assert_array_equal(f.compile()(xs), xs.max(1))


# ------------------------------------------------------------------ refusals
@pytest.mark.parametrize("target", ["c", "llvm"])
def test_without_reassociation_the_tile_is_copied_in_and_out_bit_for_bit(target):
    """No allow_reassociation: the tile starts from C's values (the init
    C = 0.5 + ..., not zero) and the additions run in the program's order, so
    the result is the same loops' without the tile bit for bit (float32,
    random inputs, partial tiles)."""
    def build():
        return gemm(init=0.5)

    def block(u):
        u.tile("i", "j", 4, 16)
        u.reorder("i0", "j0", "k", "i1", "j1")
        u.unroll("i1", 4)
        u.vectorize("j1", 16)

    rng = np.random.default_rng(5)
    a = rng.standard_normal((7, 37)).astype(np.float32)
    b = rng.standard_normal((37, 19)).astype(np.float32)
    f0, C0 = build()
    block(C0.update)                    # the same loops, C updated in memory
    want = f0.compile(target)(A=a, B=b, N=7, M=19, K=37)
    np.testing.assert_allclose(want, 0.5 + a.astype(np.float64) @ b, rtol=1e-5, atol=1e-5)
    f, C = build()
    block(C.update)
    C.update.accumulate_locally("k")
    k = f.compile(target)
    assert np.array_equal(k(A=a, B=b, N=7, M=19, K=37), want)
    lowered = accumulate_locally(f.compile("c").lowered)
    tiles = [s for s in ir.walk_stmts(lowered.body) if isinstance(s, ir.Allocate)
             and s.array.startswith("C_local")]
    assert tiles, "no local tile"


def conv(pad):
    """A 3x3 convolution, 2 x 5 channels -> 6 x 7 x 8, float32; ``pad``: zero
    padding as a guarded read (the select), else a valid convolution."""
    f = tp.Function("conv", params={"N": 2, "CI": 5, "CO": 6, "H": 7, "W": 8})
    n, o, y, x = f.var("n", 0, "N"), f.var("o", 0, "CO"), f.var("y", 0, "H"), f.var("x", 0, "W")
    c, ky, kx = f.var("c", 0, "CI"), f.var("ky", 0, 3), f.var("kx", 0, 3)
    h, w = (7, 8) if pad else (9, 10)
    inp = f.input("inp", ("N", "CI", h, w), tp.float32)
    wt = f.input("w", ("CO", "CI", 3, 3), tp.float32)
    if pad:
        iy, ix = y + ky - 1, x + kx - 1
        inside = (iy >= 0) & (iy < 7) & (ix >= 0) & (ix < 8)
        read = tp.select(inside, inp[n, c, iy, ix], 0.0)
    else:
        read = inp[n, c, y + ky, x + kx]
    out = f.computation("out", [n, o, y, x], 0.25)
    out[n, o, y, x] += wt[o, c, ky, kx] * read
    return f, out


@pytest.mark.parametrize("target", ["c", "llvm"])
@pytest.mark.parametrize("pad", [True, False])
def test_the_tile_lives_across_loops_the_element_does_not_use(target, pad, monkeypatch):
    """A convolution's register block (2 output channels by the columns in
    vectors) accumulated at ``c`` with ``ky, kx`` inside it: the tile has a
    slot per element (the loops ``o1, x1``; ``ky, kx`` add to the same
    slot, in the program's order), is copied in once before ``c`` and out
    once after it, and the result is the plain loops' bit for bit (on C
    with ``-ffp-contract=off``: gcc fuses a multiply and an add into an FMA
    or not by the shape of the code around them, which the tile changes)."""
    monkeypatch.setenv("TIRAMISU_PY_CFLAGS", "-ffp-contract=off")
    def block(u):
        u.split("o", 2, names=("o0", "o1"))
        u.reorder("n", "o0", "y", "c", "ky", "kx", "o1", "x")
        u.unroll("o1")
        u.vectorize("x", 4)
    rng = np.random.default_rng(8)
    shape = (2, 5, 7, 8) if pad else (2, 5, 9, 10)
    args = dict(inp=rng.standard_normal(shape).astype(np.float32),
                w=rng.standard_normal((6, 5, 3, 3)).astype(np.float32))
    f0, out0 = conv(pad)
    block(out0.update)
    want = f0.compile(target)(**args)
    f, out = conv(pad)
    block(out.update)
    out.update.accumulate_locally("c")
    k = f.compile(target)
    assert np.array_equal(k(**args), want)
    lowered = accumulate_locally(f.compile("c").lowered)
    tiles = [s for s in ir.walk_stmts(lowered.body) if isinstance(s, ir.Allocate)
             and s.array.startswith("out_local")]
    assert [tuple(d.value for d in t.shape) for t in tiles] == [(2, 2, 4)]


def test_refused_when_the_element_changes_with_the_loop():
    f, C = gemm()
    C.update.accumulate_locally("j", allow_reassociation=True)
    with pytest.raises(tp.IllegalScheduleError, match="changes with loop 'j'"):
        f.compile()


def test_refused_when_the_element_is_not_fixed_by_the_inner_loops():
    # skewing k into j: with j fixed, different k update different elements
    f, C = gemm()
    C.update.interchange("j", "k")
    C.update.skew("k", "j", 1)
    C.update.accumulate_locally("k", allow_reassociation=True)
    with pytest.raises(tp.IllegalScheduleError, match="changes with loop 'k'"):
        f.compile()


def test_refused_when_another_statement_in_the_loop_reads_the_sums():
    # running sums: S reads R after every step of k, so R must hold them
    f = tp.Function("prefix", params=["N", "K"])
    i, k = f.var("i", 0, "N"), f.var("k", 0, "K")
    X = f.input("X", ("N", "K"), tp.float32)
    R = f.computation("R", [i], 0.0)
    with f.nest(i, k):
        R[i] += X[i, k]
        S = f.computation("S", [i, k], R[i] * 2.0)
    R.update.accumulate_locally("k", allow_reassociation=True)
    with pytest.raises(tp.IllegalScheduleError, match="also runs S, which accesses 'R'"):
        f.compile()


def test_another_statement_in_the_loop_not_touching_the_output(backend):
    f = tp.Function("fused", params=["N", "K"])
    i, k = f.var("i", 0, "N"), f.var("k", 0, "K")
    X = f.input("X", ("N", "K"), tp.float32)
    R = f.computation("R", [i], 0.0)
    R[i] += X[i, k]
    S = f.computation("S", [i, k], X[i, k] * 2.0)
    S.after(R.update, "k")
    R.update.accumulate_locally("k", allow_reassociation=True)
    xs = np.random.default_rng(2).standard_normal((6, 11)).astype(np.float32)
    out = f.compile()(xs)
    np.testing.assert_allclose(out["R"], xs.sum(1), rtol=1e-5, atol=1e-5)
    np.testing.assert_allclose(out["S"], 2 * xs, rtol=1e-6)


def test_refused_on_a_computation():
    f, C = gemm()
    with pytest.raises(ValueError, match="applies to updates"):
        C.accumulate_locally("i")


def test_unknown_loop_named():
    f, C = gemm()
    with pytest.raises(ValueError, match="no loop 'q'"):
        C.update.accumulate_locally("q", allow_reassociation=True)


# ------------------------------------------------------ the codegen transform
def _loop(body, attrs):
    return ir.For("k", ir.const(0), ir.Var("K"), body, attrs=attrs)


def test_transform_leaves_a_loop_it_cannot_take():
    # the array is read elsewhere in the loop: the loop is left as it is
    load = ir.Load("C", (ir.const(0),), "float32")
    body = ir.Block([
        ir.Store("C", (ir.const(0),), ir.Binary("add", load, ir.Const(1.0, "float32"), "float32")),
        ir.Store("D", (ir.Var("k"),), ir.Load("C", (ir.const(0),), "float32")),
    ])
    loop = _loop(body, {"accumulate": [("C", "add")]})
    fn = ir.LoweredFunction("t", [ir.ScalarArg("K")],
                            [ir.ArrayArg("C", "float32", (ir.const(1),), True),
                             ir.ArrayArg("D", "float32", (ir.Var("K"),), True)], loop)
    out = accumulate_locally(fn).body
    assert isinstance(out, ir.For) and out.body.stmts[0].array == "C"
    assert not any(isinstance(x, ir.Allocate) for x in ir.walk_stmts(out))


def test_transform_scalar_accumulator():
    load = ir.Load("C", (ir.const(2),), "float32")
    body = ir.Store("C", (ir.const(2),),
                    ir.Binary("add", load, ir.Load("X", (ir.Var("k"),), "float32"), "float32"))
    fn = ir.LoweredFunction("t", [ir.ScalarArg("K")],
                            [ir.ArrayArg("C", "float32", (ir.const(3),), True),
                             ir.ArrayArg("X", "float32", (ir.Var("K"),), False)],
                            _loop(body, {"accumulate": [("C", "add")]}))
    out = accumulate_locally(fn).body
    assert isinstance(out, ir.Allocate) and out.array == "C_local"
    init, loop, combine = out.body.stmts
    assert init.array == "C_local" and init.value.value == 0.0
    assert "accumulate" not in loop.attrs and loop.body.array == "C_local"
    assert combine.array == "C" and combine.value.b.array == "C_local"


def _inner_loop_fn(hi):
    """for k: for j < hi: C[j] += X[k]"""
    j = ir.Var("j")
    load = ir.Load("C", (j,), "float32")
    inner = ir.For("j", ir.const(0), hi, ir.Store(
        "C", (j,), ir.Binary("add", load, ir.Load("X", (ir.Var("k"),), "float32"), "float32")))
    return ir.LoweredFunction("t", [ir.ScalarArg("K"), ir.ScalarArg("M")],
                              [ir.ArrayArg("C", "float32", (ir.Var("M"),), True),
                               ir.ArrayArg("X", "float32", (ir.Var("K"),), False)],
                              _loop(inner, {"accumulate": [("C", "add")]}))


def test_transform_bounded_inner_loop_gets_a_tile_of_its_largest_extent():
    hi = ir.Binary("min", ir.const(4), ir.Var("M"), ir.INDEX)
    out = accumulate_locally(_inner_loop_fn(hi)).body
    assert isinstance(out, ir.Allocate) and [d.value for d in out.shape] == [4]
    init, loop, combine = out.body.stmts
    assert init.hi is hi and combine.hi is hi          # init and combine over the same bounds
    assert loop.body.hi is hi and loop.body.body.array == "C_local"


@pytest.mark.parametrize("hi", [ir.Var("M"),                                   # no bound
                                ir.Binary("min", ir.const(4), ir.Var("k"), ir.INDEX)])  # varies with k
def test_transform_leaves_unbounded_or_varying_inner_loops(hi):
    out = accumulate_locally(_inner_loop_fn(hi)).body
    assert isinstance(out, ir.For) and not any(isinstance(x, ir.Allocate) for x in ir.walk_stmts(out))

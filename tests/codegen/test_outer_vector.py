"""Vector loops with loops inside (outer-loop vectorisation, codegen.vectorize):
widened in both backends, checked against NumPy; loops that must not be
widened stay scalar and say why (in the code and in f.explain())."""
import numpy as np
import pytest

import tiramisu_py as tp
from codegen import compile_c
from codegen.c.emit import emit_c
from codegen.ir import (ArrayArg, Binary, Block, Const, For, LoweredFunction, Load, ScalarArg,
                        Store, Var)
from codegen.llvm.stmt import emit_llvm

RNG = np.random.default_rng(3)


def _gemm(name, tile=(32, 32), width=16, n=(37, 45, 29)):
    f = tp.Function(name, params=["N", "M", "K"])
    i, j, k = f.var("i", 0, "N"), f.var("j", 0, "M"), f.var("k", 0, "K")
    A = f.input("A", ("N", "K"), tp.float32)
    B = f.input("B", ("K", "M"), tp.float32)
    C = f.computation("C", [i, j], 0.0)
    C[i, j] += A[i, k] * B[k, j]
    C.update.tile(i, j, *tile)
    C.update.vectorize("j1", width)
    C.update.parallelize("i0")
    return f


def _run_gemm(f, N, K, M):
    """f compiled and run on random (N, K) x (K, M) inputs, checked against NumPy."""
    kern = f.compile()
    a = RNG.standard_normal((N, K), dtype=np.float32)
    b = RNG.standard_normal((K, M), dtype=np.float32)
    np.testing.assert_allclose(kern(A=a, B=b), a.astype(np.float64) @ b, rtol=1e-4, atol=1e-4)
    return kern


@pytest.mark.parametrize("shape", [(37, 45, 29), (64, 64, 16), (5, 3, 7)])
def test_reduction_inside_vector_loop(backend, shape):
    """DESIGN.md's GEMM schedule: the vector loop j11 contains the k loop."""
    N, M, K = shape
    f = _gemm(f"ov_gemm_{N}_{M}_{K}")
    src = _run_gemm(f, N, K, M).source
    assert ("tp_vld_f32x" in src) if backend == "c" else ("inner loops run once per vector" in src)
    assert "held in registers" in src
    text = f.explain(file=open("/dev/null", "w"))
    assert "vector loop j11 (16 lanes): widened with the loops inside it" in text
    assert "C accumulated in registers" in text


def test_triangular_inner_bound_not_widened(backend):
    """k < j + 1 depends on the vector iterator: scalar, with the reason."""
    f = tp.Function("ov_tri", params=["N"])
    i, j = f.var("i", 0, "N"), f.var("j", 0, "N")
    k = f.var("k", 0, j + 1)
    A = f.input("A", ("N", "N"), tp.float64)
    S = f.computation("S", [i, j], 0.0)
    S[i, j] += A[i, k]
    S.update.vectorize("j", 4)
    kern = f.compile()
    a = RNG.standard_normal((19, 19))
    np.testing.assert_allclose(kern(A=a), np.cumsum(a, axis=1), rtol=1e-12)
    assert "not widened (the bounds of the inner loop k depend on the vector iterator" in kern.source
    assert "triangular" in f.explain(file=open("/dev/null", "w"))


def test_gather_inside_vector_loop(backend):
    """y[i, j] += w[k] * x[k, perm[j]]: an indirect (gathered) load in the inner loop."""
    f = tp.Function("ov_gather", params=["N", "M", "K"])
    i, j, k = f.var("i", 0, "N"), f.var("j", 0, "M"), f.var("k", 0, "K")
    w = f.input("w", ("N", "K"), tp.float32)
    x = f.input("x", ("K", "M"), tp.float32)
    perm = f.input("perm", ("M",), tp.int64)
    y = f.computation("y", [i, j], 0.0)
    y[i, j] += w[i, k] * x[k, perm[j]]
    y.update.vectorize("j", 8)
    kern = f.compile()
    N, M, K = 3, 21, 6
    wv = RNG.standard_normal((N, K), dtype=np.float32)
    xv = RNG.standard_normal((K, M), dtype=np.float32)
    pv = RNG.permutation(M).astype(np.int64)
    np.testing.assert_allclose(kern(w=wv, x=xv, perm=pv), wv.astype(np.float64) @ xv[:, pv],
                               rtol=1e-5, atol=1e-5)
    assert "widened with the loops inside it" in f.explain(file=open("/dev/null", "w"))


def _conflict_ir():
    """for j (vector): for k: X[idx[j]] = X[idx[j]] + k -- lanes may hit one element."""
    n, j, kk = Var("n"), Var("j"), Var("k")
    idx = Load("idx", (j,), "int64")
    body = For("k", Const(0, "int64"), Const(3, "int64"),
               Store("X", (idx,), Binary("add", Load("X", (idx,), "int64"), kk, "int64")))
    return LoweredFunction("ov_conflict", [ScalarArg("n")],
                           [ArrayArg("idx", "int64", (n,), False), ArrayArg("X", "int64", (n,), True)],
                           For("j", Const(0, "int64"), n, Block([body]), kind="vector",
                               attrs={"vector_width": 8}))


def test_store_that_may_conflict_is_left_scalar():
    fn = _conflict_ir()
    idx = np.array([1, 1, 0, 1, 2, 2, 1, 0, 3, 1, 1], np.int64)
    want = np.zeros(11, np.int64)
    for v in idx:
        want[v] += 0 + 1 + 2
    for emit, compile_ in ((emit_c, compile_c), (emit_llvm, None)):
        src = emit(fn)
        assert "not widened (two lanes may access one element of X" in src
        if compile_ is None:
            from codegen import compile_llvm as compile_
        X = np.zeros(11, np.int64)
        cf = compile_(fn)
        assert cf.call([11], [idx.ctypes.data, X.ctypes.data]) == 0
        np.testing.assert_array_equal(X, want)


def test_register_block_and_remainder_rows(backend):
    """Rows unrolled and jammed by the register block, with a remainder of rows."""
    f = _gemm("ov_rb", tile=(8, 16), width=8)
    kern = f.compile()
    a = RNG.standard_normal((11, 9), dtype=np.float32)       # 11 rows: 8 + 3, then 3 = 2 + 1
    b = RNG.standard_normal((9, 20), dtype=np.float32)
    np.testing.assert_allclose(kern(A=a, B=b), a.astype(np.float64) @ b, rtol=1e-4, atol=1e-4)
    assert "unrolled by" in f.explain(file=open("/dev/null", "w"))


def test_int_accumulator_and_select_lane_by_lane(backend):
    """An int32 reduction held in registers, with a lane-dependent select inside
    (evaluated lane by lane in C), widened in both backends."""
    f = tp.Function("ov_int", params=["N", "M", "K"])
    i, j, k = f.var("i", 0, "N"), f.var("j", 0, "M"), f.var("k", 0, "K")
    a = f.input("a", ("K", "M"), tp.int32)
    s = f.computation("s", [i, j], 0, dtype=tp.int32)
    s[i, j] += tp.select(a[k, j] > 0, a[k, j], -a[k, j]) * (i + 1)
    s.update.vectorize("j", 8)
    kern = f.compile()
    av = RNG.integers(-50, 50, (7, 19)).astype(np.int32)
    want = (np.abs(av).sum(0)[None, :] * np.arange(1, 4)[:, None]).astype(np.int32)
    np.testing.assert_array_equal(kern(a=av, N=3), want)
    assert "widened with the loops inside it" in f.explain(file=open("/dev/null", "w"))


def test_softmax_vector_reductions_across_strips(backend):
    """Row max and sum vectorised by 8 (strip-mined j0, j1): the partial
    results stay in an 8-slot tile across j0 (codegen.vreduce); NaN rows stay NaN."""
    from bench.corpus import softmax_function
    f = softmax_function("ov_softmax")
    kern = f.compile()
    xv = RNG.standard_normal((6, 37), dtype=np.float32) * 4
    xv[2, 30] = np.nan
    ref = np.exp(xv.astype(np.float64) - xv.max(1, keepdims=True))
    ref /= ref.sum(1, keepdims=True)
    np.testing.assert_allclose(kern(x=xv), ref, rtol=2e-6, atol=1e-7)
    assert "mx_vacc" in kern.source and "s_vacc" in kern.source


def test_register_block_rows_rule():
    """R: about eight accumulator registers, at most eight rows, four registers
    spare, a divisor of a tile's trip count when there is one."""
    from codegen.regblock import choose_rows
    assert choose_rows(1, 32) == 8            # AVX-512, W = 16 float32: one zmm per row
    assert choose_rows(2, 32) == 4            # AVX-512, W = 32: two per row
    assert choose_rows(2, 16) == 4            # AVX2, W = 16: two ymm per row (as before)
    assert choose_rows(4, 16) == 2
    assert choose_rows(1, 32, trip=32) == 8
    assert choose_rows(1, 32, trip=30) == 6   # divides the tile: no one-row remainder
    assert choose_rows(1, 32, trip=5) == 4    # none divides 5: the largest that fits
    assert choose_rows(1, 32, trip=1) == 1
    assert choose_rows(12, 16) == 1           # accumulators do not fit twice


def test_register_block_rows_from_host_and_tile(backend):
    """DESIGN.md's GEMM schedule: the rows of the register block come from the
    host's registers and the tile's bound (i1 < min(31, ...) + 1: 32 rows), the
    result matches NumPy with full blocks, a partial tile and remainder rows."""
    from codegen import loops
    from codegen.regblock import choose_rows
    f = _gemm("ov_rb_rows")
    per = -(-16 // loops.host_lanes(32))
    regs = 32 if loops.host_lanes(32) >= 16 else 16
    r = choose_rows(per, regs, 32)
    assert f"loop i1: unrolled by {r} and jammed" in f.explain(file=open("/dev/null", "w"))
    kern = _run_gemm(f, 70, 33, 50)                          # tiles of 32, 32 and 6 rows
    if backend == "c":
        assert kern.source.count(f"(i1 + {r - 1})") > 0 and f"(i1 + {r})" not in kern.source


@pytest.mark.parametrize("shape", [(70, 33, 50), (40, 64, 61), (9, 5, 16)])
def test_register_block_columns(backend, shape):
    """The strip loop j10 of the vector loop (j1 = 16*j10 + j11) is jammed too
    where the registers allow (AVX-512: 8 rows x 2 vectors): full tiles take
    the jammed version, partial tiles (j10 bound or vector epilogue) run the
    copies one by one; the result matches NumPy either way.  On AVX2 the block
    of 4 rows x 2 ymm already holds its 8 accumulators: j10 stays unjammed
    inside it (only the one-row remainder loop, 2 ymm a row, may jam it)."""
    from codegen import ir, loops
    from codegen.regblock import choose_rows, register_block
    N, K, M = shape
    f = _gemm(f"ov_rb_cols_{N}_{K}_{M}")
    kern = _run_gemm(f, N, K, M)
    text = f.explain(file=open("/dev/null", "w"))
    blocked = register_block(kern.lowered).body
    row_blocks = [s for s in ir.walk_stmts(blocked) if isinstance(s, ir.For)
                  and s.attrs.get("register_block")]
    cols_in_block = [s for b in row_blocks for s in ir.walk_stmts(b.body)
                     if isinstance(s, ir.For) and s.attrs.get("register_block_columns")]
    assert row_blocks
    if loops.host_lanes(32) >= 16:          # one zmm per row: room for two vectors
        assert "loop j10: unrolled by 2 and jammed into the widened vector loop" in text
        assert [s.attrs["register_block_columns"] for s in cols_in_block] == [2]
        if backend == "c":
            assert "16 * (j10 + 1) + j11" in kern.source and "tp_acc16_0" in kern.source
    else:                                       # AVX2: 4 rows x 2 ymm already fill 8 registers
        r = choose_rows(-(-16 // loops.host_lanes(32)), 16, 32)
        assert f"loop i1: unrolled by {r} and jammed" in text
        assert cols_in_block == []


def _two_streams_ir(offset):
    """for j in [0, 16) (vector): for k in [0, 3): X[j] += 1; X[j + offset] += 2."""
    j = Var("j")
    at = Binary("add", j, Const(offset, "int64"), "int64")
    body = For("k", Const(0, "int64"), Const(3, "int64"), Block([
        Store("X", (j,), Binary("add", Load("X", (j,), "int64"), Const(1, "int64"), "int64")),
        Store("X", (at,), Binary("add", Load("X", (at,), "int64"), Const(2, "int64"), "int64"))]))
    return LoweredFunction(f"ov_streams{offset}", [ScalarArg("n")],
                           [ArrayArg("X", "int64", (Var("n"),), True)],
                           For("j", Const(0, "int64"), Const(16, "int64"), Block([body]),
                               kind="vector", attrs={"vector_width": 8}))


@pytest.mark.parametrize("offset,widened", [(16, True), (20, True), (8, False), (3, False)])
def test_two_offsets_of_one_array_in_a_vector_loop(offset, widened):
    """X[j] and X[j + d] in one vector loop of 16 iterations: widened only when
    no two iterations share an element (d >= 16); X[j] and X[j + 8] overlap
    between iterations j and j + 8 and stay scalar, with the reason.  Both
    backends agree with the scalar loop."""
    from codegen.vectorize import plan
    fn = _two_streams_ir(offset)
    p, reason = plan(fn.body)
    assert (p is not None) == widened, reason
    want = np.zeros(16 + offset, np.int64)
    for j in range(16):
        for _ in range(3):
            want[j] += 1
            want[j + offset] += 2
    for emit, compile_ in ((emit_c, compile_c), (emit_llvm, None)):
        src = emit(fn)
        assert ("two lanes may access one element of X" in src) != widened
        if compile_ is None:
            from codegen import compile_llvm as compile_
        X = np.zeros(16 + offset, np.int64)
        assert compile_(fn).call([16 + offset], [X.ctypes.data]) == 0
        np.testing.assert_array_equal(X, want)


@pytest.mark.parametrize("trips,disjoint", [((16, 16), True), ((32, 16), False), ((16, 32), False),
                                            ((16, 8), True)])
def test_strip_loop_disjointness_by_ranges(trips, disjoint):
    """for j0: {for u < T1: X[16*j0 + u] = 1; for u < T2: X[16*j0 + u] = 2}:
    iterations of j0 touch disjoint elements only if every u stays below 16
    (two loops of one name: the wider range counts)."""
    from codegen.regblock import _disjoint
    j0 = Var("j0")
    at = Binary("add", Binary("mul", Const(16, "int64"), j0, "int64"), Var("u"), "int64")
    inner = [For("u", Const(0, "int64"), Const(t, "int64"), Store("X", (at,), Const(v, "int64")))
             for v, t in enumerate(trips)]
    assert _disjoint(For("j0", Const(0, "int64"), Const(4, "int64"), Block(inner))) == disjoint

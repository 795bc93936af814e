"""Scheduling commands: each one transforms the schedule, keeps results, and
shows up in the generated code; illegal uses are refused with a teaching
error.  Required cases: LSTM wavefront, CSR sparse conv."""

import numpy as np
import pytest

import tiramisu_py as tp
from codegen import ir
from examples import conv2d, gemm, lstm, sparse_conv

RNG = np.random.default_rng(7)


def gemm_args(n=37, m=29, k=53):
    return (RNG.standard_normal((n, k), dtype=np.float32),
            RNG.standard_normal((k, m), dtype=np.float32))


def check_gemm(f, n=37, m=29, k=53):
    kernel = f.compile()
    a, b = gemm_args(n, m, k)
    np.testing.assert_allclose(kernel(a, b), a @ b, rtol=1e-4, atol=1e-4)
    return kernel


def update(f):
    return f.computations["C"].update


# ------------------------------------------------------------ each command
def test_split_names_and_partial_tiles():
    f = gemm.build()
    update(f).split("i", 8)
    k = check_gemm(f)
    assert [lp.name for lp in k.schedule["C_update"].loops] == ["i0", "i1", "j", "k"]
    assert "for (int64_t i0 = 0;" in k.source and "for (int64_t i1 = 0;" in k.source


def test_tile_2d_and_3d_partial():
    f = gemm.build()
    update(f).tile("i", "j", 8, 16)
    k = check_gemm(f)
    assert [lp.name for lp in k.schedule["C_update"].loops] == ["i0", "j0", "i1", "j1", "k"]
    f = gemm.build()
    update(f).tile("i", "j", "k", 4, 8, 16)
    k = check_gemm(f)
    assert [lp.name for lp in k.schedule["C_update"].loops] == \
        ["i0", "j0", "k0", "i1", "j1", "k1"]


def test_tile_needs_directly_nested_loops():
    f = gemm.build()
    with pytest.raises(ValueError, match="nested directly"):
        update(f).tile("i", "k", 4, 4)


def test_interchange_reorder_and_names():
    f = gemm.build()
    update(f).interchange("i", "k")
    k = check_gemm(f)
    assert [lp.name for lp in k.schedule["C_update"].loops] == ["k", "j", "i"]
    f = gemm.build()
    update(f).reorder("k", "i", "j")
    k = check_gemm(f)
    src = k.source
    assert src.index("for (int64_t k = 0") < src.rindex("for (int64_t i = 0") < src.rindex("for (int64_t j = 0")


def test_unknown_loop_is_an_error_naming_it():
    f = gemm.build()
    with pytest.raises(ValueError, match="no loop 'q'"):
        update(f).split("q", 4)


def test_shift_skew_reverse_keep_results():
    f = gemm.build()
    u = update(f)
    u.shift("i", 3)
    u.skew("i", "j", 2)
    u.reverse("j")
    check_gemm(f)


def test_unroll_is_in_the_source():
    f = gemm.build()
    update(f).unroll("k", 4)
    k = check_gemm(f, k=10)                      # 10 = two full tiles + a partial one
    assert "/* k1 = 0 + 3 */" in k.source or "/* k1 = 3 */" in k.source
    assert "#pragma GCC unroll" not in k.source


def test_vectorize_strip_mines_and_emits_simd():
    f = gemm.build()
    u = update(f)
    u.interchange("j", "k")
    u.vectorize("j", 16)
    k = check_gemm(f, m=45)
    assert [lp.name for lp in k.schedule["C_update"].loops] == ["i", "k", "j0", "j1"]
    assert "#pragma omp simd\n" in k.source


def test_vectorize_exact_extent_does_not_split():
    f = gemm.build()
    u = update(f)
    u.split("j", 8)
    u.vectorize("j1", 8)
    k = check_gemm(f)
    assert [lp.name for lp in k.schedule["C_update"].loops] == ["i", "j0", "j1", "k"]


def test_parallel_pragma_and_result():
    f = gemm.build()
    update(f).parallelize("i")
    f.computations["C"].parallelize("i")
    k = check_gemm(f)
    # the two adjacent parallel loops (C's zeroing, its update) share one region
    assert k.source.count("#pragma omp parallel\n") == 1
    assert k.source.count("#pragma omp for\n") == 2


def test_adjacent_parallel_statements_share_one_region(backend):
    # a layer norm, each statement parallel as a new user writes it: one
    # fork/join for the five loops in C (an omp for each, barriers between)
    n, m = 37, 50
    f = tp.Function("ln", params={"N": n, "M": m})
    i, j = f.var("i", 0, "N"), f.var("j", 0, "M")
    X = f.input("X", ("N", "M"), tp.float32)
    mean = f.computation("mean", [i], 0.0)
    mean[i] += X[i, j] / float(m)
    var = f.computation("var", [i], 0.0)
    var[i] += (X[i, j] - mean[i]) * (X[i, j] - mean[i]) / float(m)
    Y = f.computation("Y", [i, j], (X[i, j] - mean[i]) / tp.sqrt(var[i] + 1e-5))
    for c in (mean, mean.update, var, var.update, Y):
        c.parallelize("i")
    k = f.compile(target=backend)
    if backend == "cpu":
        assert k.source.count("#pragma omp parallel\n") == 1
        assert k.source.count("#pragma omp for\n") == 5
    x = np.random.default_rng(0).standard_normal((n, m), dtype=np.float32)
    mu = x.mean(1, keepdims=True)
    ref = (x - mu) / np.sqrt(((x - mu) ** 2).mean(1, keepdims=True) + 1e-5)
    np.testing.assert_allclose(k(x), ref, rtol=1e-4, atol=1e-5)


def test_tag_on_a_loop_that_a_later_command_removes():
    f = gemm.build()
    u = update(f)
    u.parallelize("i")
    u.split("i", 4)
    with pytest.raises(tp.IllegalScheduleError, match="no longer exists"):
        f.compile()


# ------------------------------------------------------------ reductions
def test_reduction_needs_opt_in():
    for cmd in (lambda u: u.parallelize("k"), lambda u: u.vectorize("k", 8),
                lambda u: u.reverse("k")):
        f = gemm.build()
        cmd(update(f))
        with pytest.raises(tp.IllegalScheduleError):
            f.compile()


@pytest.mark.parametrize("how", ["parallel_k", "vector_k", "reverse_k", "parallel_k_outer"])
def test_reduction_with_opt_in_is_correct(how):
    f = gemm.build()
    u = update(f)
    if how == "parallel_k":
        u.parallelize("k", allow_reassociation=True)
    elif how == "vector_k":
        u.vectorize("k", 8, allow_reassociation=True)
    elif how == "reverse_k":
        u.allow_reassociation()
        u.reverse("k")
    else:                               # k outermost: array-section privatisation
        u.reorder("k", "i", "j")
        u.parallelize("k", allow_reassociation=True)
    k = check_gemm(f)
    if how == "parallel_k_outer":
        assert "reduction(+: C_[0:" in k.source
    if how in ("parallel_k", "vector_k"):
        assert "reduction(+: tp_acc_k" in k.source


def test_max_reduction_parallel():
    f = tp.Function("rowmax", params=["N", "M"])
    i, j = f.var("i", 0, "N"), f.var("j", 0, "M")
    A = f.input("A", ("N", "M"), tp.float32)
    r = f.computation("r", [i], float("-inf"), dtype=tp.float32)
    r[i].max(A[i, j])
    r.update.parallelize("j", allow_reassociation=True)
    a = RNG.standard_normal((9, 301), dtype=np.float32)
    np.testing.assert_array_equal(f.compile()(a), a.max(axis=1))


@pytest.mark.parametrize("rank", [0, 1, 2])
def test_parallel_reduction_into_a_temporary(backend, rank):
    # a sum into a temporary read by a later statement, the summed loop
    # outermost and parallel: each thread reduces into its own copy of the
    # temporary (it was NotImplementedError "... not an argument array")
    f = tp.Function("tsum", params=["N", "R", "Q"])
    i, r, q = f.var("i", 0, "N"), f.var("r", 0, "R"), f.var("q", 0, "Q")
    A = f.input("A", ("N", "R", "Q"), tp.float64)
    loops = [[], [r], [r, q]][rank]
    S = f.computation("S1", loops, 0.0)
    S[tuple(loops)] += A[i, r, q]
    f.computation("out", [r, q], S[tuple(loops)] * 2.0)
    S.update.reorder("i", "r", "q")
    S.update.parallelize("i", allow_reassociation=True)
    a = RNG.random((23, 5, 3))
    want = [np.full((5, 3), a.sum()), np.repeat(a.sum(axis=(0, 2))[:, None], 3, 1), a.sum(axis=0)][rank]
    k = f.compile()
    np.testing.assert_allclose(k(a), 2 * want, rtol=1e-12)
    if backend == "c":
        assert ("reduction(+: tp_red_S1[0:(R) * (Q)])" if rank == 2 else "reduction(+: S1[0:") \
            in k.source


# ------------------------------------------------------------ ordering
def test_after_fuses_and_then_chains():
    f = gemm.build()
    C = f.computations["C"]
    C.update.after(C, "j")                    # init and update share loops i, j
    k = check_gemm(f)
    body = k.source[k.source.index("for (int64_t i = 0"):]
    assert body.count("for (int64_t i = 0") == 1 and body.count("for (int64_t j = 0") == 1


def test_illegal_after_names_everything():
    f = gemm.build()
    C = f.computations["C"]
    C.after(C.update, None)                   # init after the whole update: wrong
    with pytest.raises(tp.IllegalScheduleError) as e:
        f.compile()
    msg = str(e.value)
    assert "C.after(C_update, None)" in msg
    assert "C_update(" in msg and "C(" in msg and "'C'" in msg


# ------------------------------------------------------------ headline cases
def test_lstm_wavefront_is_accepted_correct_and_parallel():
    f = lstm.wavefront(lstm.build())
    kernel = f.compile()
    # the wavefront's time loop around its parallel loop over layers: one
    # region (codegen.regions), l shared among the threads at every step
    assert "#pragma omp for nowait\n        for (int64_t l = " in kernel.source
    args = lstm.random_inputs(3, 9, 2, 8, seed=3)
    np.testing.assert_allclose(lstm.run(kernel, *args), lstm.reference(*args),
                               rtol=1e-4, atol=2e-5)
    print("LSTM wavefront analysis + AST ms:",
          round((kernel.timings["analysis"] + kernel.timings["ast"]) * 1e3, 1))


def test_lstm_parallel_layers_without_skew_is_rejected():
    f = lstm.build()
    for s in f.statements:
        if [v.name for v in s.vars[:2]] == ["l", "t"]:
            s.parallelize("l")
    with pytest.raises(tp.IllegalScheduleError, match="cannot be parallelised"):
        f.compile()


def test_lstm_time_reversal_is_rejected():
    f = lstm.build()
    for s in f.statements:
        if [v.name for v in s.vars[:2]] == ["l", "t"]:
            s.reverse("t")
    with pytest.raises(tp.IllegalScheduleError, match=r"reverse\(t\)"):
        f.compile()


def sparse_args(density=0.4):
    args = sparse_conv.random_inputs(density=density, seed=11)
    return args, conv2d.reference(*args)


def test_csr_parallel_output_channels_accepted():
    f = sparse_conv.build()
    out = f.computations["out"]
    out.parallelize("co")
    out.update.parallelize("co")
    kernel = f.compile()
    args, ref = sparse_args()
    np.testing.assert_allclose(sparse_conv.run(kernel, *args), ref, rtol=1e-4, atol=1e-4)


def test_csr_parallel_nonzeros_rejected_without_opt_in():
    f = sparse_conv.build()
    f.computations["out"].update.parallelize("j")
    with pytest.raises(tp.IllegalScheduleError, match="reduction"):
        f.compile()


def test_csr_parallel_nonzeros_with_opt_in_is_correct():
    f = sparse_conv.build()
    f.computations["out"].update.parallelize("j", allow_reassociation=True)
    kernel = f.compile()
    args, ref = sparse_args(0.7)
    np.testing.assert_allclose(sparse_conv.run(kernel, *args), ref, rtol=1e-4, atol=1e-4)


def test_csr_data_dependent_loop_cannot_leave_its_row():
    f = sparse_conv.build()
    f.computations["out"].update.interchange("co", "j")
    with pytest.raises(ValueError, match="must stay outside"):
        f.compile()


# ------------------------------------------------------------ explain
def test_explain_lists_dependences_and_parallel_loops(capsys):
    f = gemm.build()
    text = f.explain()
    assert "C_update depends on C through 'C'" in text
    assert "C_update is a reduction into 'C'" in text
    assert "C_update loop i: parallel" in text
    assert "C_update loop k: not parallel" in text
    assert capsys.readouterr().out.strip() == text.strip()


# ------------------------------------------------------------ compute_at / cache_at
def blur():
    f = tp.Function("blur", params=["H", "W"])
    y, x = f.var("y", 0, "H"), f.var("x", 0, "W")
    y2 = f.var("y2", 0, "H + 2")
    inp = f.input("inp", ("H + 2", "W + 2"), tp.float64)
    bx = f.computation("bx", [y2, x], (inp[y2, x] + inp[y2, x + 1] + inp[y2, x + 2]) / 3.0)
    by = f.computation("by", [y, x], (bx[y, x] + bx[y + 1, x] + bx[y + 2, x]) / 3.0)
    return f, bx, by


def blur_ref(a):
    bx = (a[:, :-2] + a[:, 1:-1] + a[:, 2:]) / 3
    return (bx[:-2] + bx[1:-1] + bx[2:]) / 3


@pytest.mark.parametrize("split", [None, 4])
def test_compute_at_recomputes_the_needed_region(split):
    f, bx, by = blur()
    loop = "y"
    if split:
        by.split("y", split)
        loop = "y0"
    bx.compute_at(by, loop)
    k = f.compile()
    a = RNG.random((13, 9))
    np.testing.assert_allclose(k(a), blur_ref(a), rtol=1e-12)
    src = k.source
    # the producer's loop sits inside the consumer's, over a window of rows
    assert src.index(f"for (int64_t {loop} = 0") < src.index("for (int64_t y2 = ")
    assert src.count("for (int64_t y2 = ") == 1


@pytest.mark.parametrize("target", ["c", "llvm"])
def test_compute_at_in_a_parallel_loop_privatises_the_buffer(target):
    # the copies of bx in different y0 tiles reuse one buffer: a storage
    # conflict, not a flow of values, so each thread gets its own bx
    f, bx, by = blur()
    by.split("y", 4)
    bx.compute_at(by, "y0")
    by.parallelize("y0")
    k = f.compile(target=target)
    loops = [s for s in ir.walk_stmts(k.lowered.body) if isinstance(s, ir.For)]
    par = [s for s in loops if s.kind == "parallel"]
    assert len(par) == 1 and par[0].attrs["private"] == ["bx"]
    assert isinstance(par[0].body, ir.Allocate) and par[0].body.array == "bx"
    a = RNG.random((23, 9))
    np.testing.assert_allclose(k(a), blur_ref(a), rtol=1e-12)


@pytest.mark.parametrize("target", ["c", "llvm"])
def test_privatised_reduction_in_a_folded_buffer(target):
    # a reduction computed per tile into a buffer folded to the tile (y % 2):
    # tile t + 1's update touches the element tile t's update wrote, but it
    # reads the value its own init wrote first, so no value flows between
    # tiles (value-based flow) and the parallel tile loop privatises T
    f = tp.Function("tiles", params=["H", "W", "K"])
    y, x, k = f.var("y", 0, "H"), f.var("x", 0, "W"), f.var("k", 0, "K")
    A = f.input("A", ("H + K", "W"), tp.float64)
    with f.nest(y, x):          # each element is initialised, then accumulated
        P = f.computation("P", [y, x], 0.0)
        P[y, x] += A[y + k, x]
    C = f.computation("C", [y, x], P[y, x] * 2.0)
    C.split("y", 2, names=("y0", "y1"))
    P.store_in(f.buffer("T", (2, "W"), tp.float64), [y % 2, x])
    P.compute_at(C, "y0")
    C.parallelize("y0")
    kern = f.compile(target=target)
    par = [s for s in ir.walk_stmts(kern.lowered.body) if isinstance(s, ir.For) and s.kind == "parallel"]
    assert len(par) == 1 and par[0].attrs["private"] == ["T"]
    a = RNG.random((9 + 3, 5))
    ref = 2 * np.array([[a[yy:yy + 3, xx].sum() for xx in range(5)] for yy in range(9)])
    np.testing.assert_allclose(kern(A=a, H=9, W=5, K=3), ref, rtol=1e-12)


def row_scratch():
    """Per row r of A: the row + 1 goes into a one-row scratch buffer S (no
    r index), then ``out[r] = 2 * S`` reversed."""
    f = tp.Function("scratch", params=["H", "W"])
    r, x = f.var("r", 0, "H"), f.var("x", 0, "W")
    A = f.input("A", ("H", "W"), tp.float64)
    with f.nest(r):
        s = f.computation("s", [r, x], A[r, x] + 1.0)
        s.store_in(f.buffer("S", ("W",), tp.float64), [x])
        x2 = f.var("x2", 0, "W")
        out = f.computation("out", [r, x2], s[r, x2 * -1 + f.param("W") - 1] * 2.0)
    return f, s, out


@pytest.mark.parametrize("target", ["c", "llvm"])
def test_scratch_buffer_of_a_nest_is_privatised_by_its_parallel_loop(target):
    # S lacks the row index: rows conflict on its storage, but each row reads
    # only what it wrote itself (exact last-writer flow), so the parallel row
    # loop gives every thread its own S
    f, s, out = row_scratch()
    out.parallelize("r")
    k = f.compile(target=target)
    par = [x for x in ir.walk_stmts(k.lowered.body) if isinstance(x, ir.For) and x.kind == "parallel"]
    assert len(par) == 1 and par[0].var == "r" and par[0].attrs["private"] == ["S"]
    a = RNG.random((37, 6))
    np.testing.assert_allclose(k(A=a, H=37, W=6), 2 * (a[:, ::-1] + 1), rtol=1e-12)


def test_scratch_buffer_read_before_it_is_written_is_not_privatised():
    # each row reads S before writing it: row r sees row r - 1's values (a
    # flow between iterations), row 0 the initial content
    f = tp.Function("early", params=["H", "W"])
    r, x = f.var("r", 0, "H"), f.var("x", 0, "W")
    A = f.input("A", ("H", "W"), tp.float64)
    S = f.buffer("S", ("W",), tp.float64)
    with f.nest(r):
        x1 = f.var("x1", 0, "W")
        out = f.computation("out", [r, x1])
        s = f.computation("s", [r, x], A[r, x] * 3.0)
        s.store_in(S, [x])
    out.set_expression(A[r, x1] + s[r - 1, x1])
    out.parallelize("r")
    with pytest.raises(tp.IllegalScheduleError, match="cannot be parallelised.* on 'S'"):
        f.compile()


def test_privatisation_refused_when_the_buffer_is_read_outside_the_loop():
    f, bx, by = blur()
    by.split("y", 4)
    bx.compute_at(by, "y0")
    by.parallelize("y0")
    y, x = f.var("yy", 0, "H"), f.var("xx", 0, "W")
    f.computation("late", [y, x], bx[y, x] * 2.0)       # bx read after the loop nest
    with pytest.raises(tp.IllegalScheduleError, match="y0"):
        f.compile()


def test_compute_at_that_reads_overwritten_data_is_rejected():
    f = tp.Function("inplace", params=["N"])
    i, i2 = f.var("i", 0, "N - 1"), f.var("i2", 0, "N")
    A = f.buffer("A", ("N",), tp.float64, output=True)
    P = f.computation("P", [i2], A[i2] * 2.0)
    C = f.computation("C", [i], P[i] + P[i + 1]).store_in(A, [i + 1])
    P.compute_at(C, "i")
    with pytest.raises(tp.IllegalScheduleError, match=r"compute_at\(C, i\)"):
        f.compile()


def test_compute_at_producer_with_reduction():
    # conv rows computed per output row of a vertical 2-tap sum
    f = tp.Function("rows", params=["H", "W", "K"])
    y, x, k = f.var("y", 0, "H"), f.var("x", 0, "W"), f.var("k", 0, "K")
    y2 = f.var("y2", 0, "H + 1")
    A = f.input("A", ("H + 1", "W", "K"), tp.float64)
    s = f.computation("s", [y2, x], 0.0)
    s[y2, x] += A[y2, x, k]
    out = f.computation("out", [y, x], s[y, x] + s[y + 1, x])
    s.compute_at(out, "y")
    kern = f.compile()
    a = RNG.random((8, 5, 3))
    sums = a.sum(axis=2)
    np.testing.assert_allclose(kern(a), sums[:-1] + sums[1:], rtol=1e-12)


def test_producer_loop_commands_after_compute_at_act_before_it():
    f, bx, by = blur()
    bx.compute_at(by, "y")
    bx.split("x", 4)                     # the producer's own loop, given afterwards
    bx.vectorize("x1", 4)
    assert f.schedule_commands() == ["bx.split(x, 4)", "bx.compute_at(by, y)",
                                     "bx.vectorize(x1, 4)"]
    k = f.compile()
    a = RNG.random((13, 9))
    np.testing.assert_allclose(k(a), blur_ref(a), rtol=1e-12)
    with pytest.raises(ValueError, match="no loop"):
        bx.split("q", 2)                 # validated like any command
    assert len(f.schedule_commands()) == 3


def test_compute_at_rules():
    f2, bx2, by2 = blur()
    with pytest.raises(ValueError, match="no loop"):
        bx2.compute_at(by2, "q")


def blur_tiles(rows=4):
    """``out = 2 * by`` in tiles of ``rows`` rows, ``by`` computed per tile."""
    f, bx, by = blur()
    y, x = f.var("oy", 0, "H"), f.var("ox", 0, "W")
    out = f.computation("out", [y, x], by[y, x] * 2.0)
    out.split("oy", rows, names=("y0", "y1"))
    by.compute_at(out, "y0")
    return f, bx, by, out


@pytest.mark.parametrize("target", ["c", "llvm"])
@pytest.mark.parametrize("loop", ["y0", "y"])
def test_nested_compute_at(target, loop):
    # bx is computed at by, which is itself computed at out: per tile of out
    # (at y0: the tile's rows + 2, once) or per row of by (at y: 3 rows each)
    f, bx, by, out = blur_tiles()
    bx.compute_at(by, loop)
    k = f.compile(target=target)
    a = RNG.random((14, 9))
    np.testing.assert_allclose(k(a), 2 * blur_ref(a), rtol=1e-12)
    if target == "c":
        src = k.source
        y0, y2, y = (src.index(f"for (int64_t {v} = ") for v in ("y0", "y2", "y"))
        assert (y0 < y2 < y) if loop == "y0" else (y0 < y < y2)
        assert src.count("for (int64_t y2 = ") == 1
        assert f.schedule_commands()[-1] == f"bx.compute_at(by, {loop})"


@pytest.mark.parametrize("target", ["c", "llvm"])
def test_nested_compute_at_in_a_parallel_loop_privatises_the_shared_buffer(target):
    # tiles recompute 2 rows of bx that the next tile also computes (a storage
    # conflict: privatised); each tile writes its own rows of by (no conflict)
    f, bx, by, out = blur_tiles()
    bx.compute_at(by, "y0")
    out.parallelize("y0")
    k = f.compile(target=target)
    par = [s for s in ir.walk_stmts(k.lowered.body) if isinstance(s, ir.For) and s.kind == "parallel"]
    assert len(par) == 1 and par[0].attrs["private"] == ["bx"]
    a = RNG.random((23, 9))
    np.testing.assert_allclose(k(a), 2 * blur_ref(a), rtol=1e-12)


def test_nested_compute_at_must_go_from_the_outermost_consumer_inwards():
    f, bx, by = blur()
    y, x = f.var("oy", 0, "H"), f.var("ox", 0, "W")
    out = f.computation("out", [y, x], by[y, x] * 2.0)
    bx.compute_at(by, "y")
    with pytest.raises(ValueError, match="outermost consumer inwards"):
        by.compute_at(out, "oy")


def test_nested_compute_at_with_storage_folded_too_tightly_is_rejected():
    # one tile of 4 rows of by needs 6 rows of bx, only 3 stored
    f, bx, by, out = blur_tiles()
    bx.store_in(f.buffer("rows", (3, "W"), tp.float64), [bx.vars[0] % 3, bx.vars[1]])
    bx.compute_at(by, "y0")
    with pytest.raises(tp.IllegalScheduleError, match="folded too tightly"):
        f.compile()


def test_nested_compute_at_with_storage_folded_to_the_tile_is_legal():
    f, bx, by, out = blur_tiles()
    bx.store_in(f.buffer("rows", (6, "W"), tp.float64), [bx.vars[0] % 6, bx.vars[1]])
    bx.compute_at(by, "y0")
    out.parallelize("y0")
    k = f.compile()
    par = [s for s in ir.walk_stmts(k.lowered.body) if isinstance(s, ir.For) and s.kind == "parallel"]
    assert par[0].attrs["private"] == ["rows"]
    a = RNG.random((15, 7))
    np.testing.assert_allclose(k(a), 2 * blur_ref(a), rtol=1e-12)


def test_cache_at_packs_a_panel_and_stays_correct():
    f = gemm.build()
    B = f.buffers["B"]
    U = f.computations["C"].update
    U.tile("i", "j", 8, 16)
    Bp = U.cache_at(B, "j0", name="Bp")
    Bp.store_in(f.buffer("Bpk", ("K", 16), tp.float32), [Bp.vars[0], Bp.vars[1] % 16])
    k = check_gemm(f, n=37, m=45, k=53)
    assert "Bpk[" in k.source and "* Bpk[k]" in k.source


def _gram_lower(n=23, m=9):
    """C[i][j] = sum_k A[i][k] A[j][k] over j <= i: A read twice."""
    f = tp.Function("gram", params={"N": n, "M": m})
    i, kk = f.var("i", 0, "N"), f.var("k", 0, "M")
    j = f.var("j", 0, i + 1)
    A = f.input("A", ("N", "M"), tp.float64)
    C = f.computation("C", [i, j], 0.0, dtype=tp.float64)
    C[i, j].reduce("+", A[i, kk] * A[j, kk], loops=[i, j, kk])
    return f, A


@pytest.mark.parametrize("as_text", [False, True])
def test_cache_at_of_one_access_packs_that_operand_only(as_text):
    f, A = _gram_lower()
    U = f.computations["C"].update
    i, j, kk = U.vars
    U.split("j", 8, names=("j0", "j1"))
    U.reorder("i", "j0", "k", "j1")
    Ap = U.cache_at("A[j,k]" if as_text else A[j, kk], "j0", name="Ap")
    Ap.store_in(f.buffer("Apanel", (8, "M"), tp.float64), [Ap.vars[0] % 8, Ap.vars[1]])
    k = f.compile()
    # A[i][k] is still read in place, A[j][k] from the panel
    assert "A[i][k] * Apanel[" in k.source
    a = RNG.random((23, 9))
    low = np.tril_indices(23)
    np.testing.assert_allclose(k(a)[low], (a @ a.T)[low], rtol=1e-12)
    # the printed command names the access
    written = '"A[j,k]"' if as_text else "A[j, k]"
    assert any(c.call == f'U.cache_at({written}, "j0", name="Ap")' for c in f._commands)


def test_cache_at_of_an_access_the_statement_does_not_read_is_refused():
    f, A = _gram_lower()
    U = f.computations["C"].update
    i, j, kk = U.vars
    with pytest.raises(ValueError, match=r"does not read A\[k, j\].*A\[i, k\], A\[j, k\]"):
        U.cache_at(A[kk, j], "i")
    with pytest.raises(ValueError, match=r"does not read B\[j, k\].*reads A\[i, k\], A\[j, k\]"):
        U.cache_at("B[j, k]", "i")


def test_cache_at_refuses_a_source_written_in_the_nest():
    f = tp.Function("f", params=["N"])
    t, i = f.var("t", 0, 3), f.var("i", 0, "N")
    A = f.buffer("A", ("N",), tp.float64, output=True)
    with f.nest(t):
        w = f.computation("w", [t, i], A[i] + 1.0).store_in(A, [i])
        r = f.computation("r", [t, i], A[i] * 2.0)
    with pytest.raises(ValueError, match="stale"):
        r.cache_at(A, "t")
    assert w is not None


def recurrence(reverse):
    f = tp.Function("rec", params=["N"])
    i, i2 = f.var("i", 0, "N"), f.var("i2", 0, "N")
    A = f.input("A", ("N",), tp.float64)
    P = f.computation("P", [i2], dtype=tp.float64)
    P[i2] = tp.select(i2 > 0, P[i2 - 1], 0.0) + A[i2]          # prefix sum
    n = f.param("N")
    C = f.computation("C", [i], (P[n - 1 - i] if reverse else P[i]) * 2.0)
    P.compute_at(C, "i")
    return f


def test_compute_at_of_a_recurrence_forward_is_legal():
    a = RNG.random(9)
    np.testing.assert_allclose(recurrence(False).compile()(a), 2 * np.cumsum(a), rtol=1e-12)


def test_compute_at_of_a_recurrence_read_backwards_is_rejected():
    # each copy would read a prefix that only a later iteration computes
    with pytest.raises(tp.IllegalScheduleError, match=r"RAW on 'P'"):
        recurrence(True).compile()


def test_compute_at_with_storage_folded_too_tightly_is_rejected():
    f, bx, by = blur()
    bx.store_in(f.buffer("rows", (2, "W"), tp.float64), [bx.vars[0] % 2, bx.vars[1]])
    bx.compute_at(by, "y")                  # needs 3 rows per iteration, only 2 stored
    with pytest.raises(tp.IllegalScheduleError, match="folded too tightly"):
        f.compile()


def test_compute_at_with_storage_folded_to_the_window_is_legal():
    f, bx, by = blur()
    bx.store_in(f.buffer("rows", (3, "W"), tp.float64), [bx.vars[0] % 3, bx.vars[1]])
    bx.compute_at(by, "y")
    a = RNG.random((11, 7))
    np.testing.assert_allclose(f.compile()(a), blur_ref(a), rtol=1e-12)

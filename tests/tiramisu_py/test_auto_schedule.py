"""f.auto_schedule(): every schedule it finds is legal (compile() checks it)
and gives the NumPy reference's result on random inputs; the commands it
returns, printed and replayed with exec on a fresh Function, give the same
schedule; it finds the parallel tiled GEMM, the skewed and tiled wavefronts of
jacobi-1d and seidel-2d and the fused softmax rows; a partial schedule is
kept.  No timing is asserted."""
from __future__ import annotations

import numpy as np
import pytest

from tests.auto_kernels import KERNELS, SUITE, build_mm


def run(case, f, target="cpu"):
    inputs = case.inputs(np.random.default_rng(1))
    out = case.run(f.compile(target), inputs)
    for name, want in case.reference(inputs).items():
        np.testing.assert_allclose(np.asarray(out[name]), want, rtol=1e-9, atol=1e-9,
                                   err_msg=f"{case.name}: {name}")
    return inputs


def polybench_auto(name, size):
    """The printed steps of ``auto_schedule()`` on PolyBench's ``name`` at
    ``size``, after checking the scheduled kernel against the NumPy reference."""
    import examples.polybench as pb
    k = pb.KERNELS[name]
    f = pb.function(k, size, "plain")
    steps = [str(s) for s in f.auto_schedule()]
    arrays = pb.random_inputs(k, size)
    pb.assert_close(pb.run(k, f.compile(), arrays), k.reference(arrays, pb.sizes(k, size)),
                    f"{name} auto")
    return steps


@pytest.mark.parametrize("name", sorted(KERNELS))
def test_auto_schedule_is_legal_correct_and_replayable(name):
    case = KERNELS[name]
    f = case.build()
    steps = f.auto_schedule()
    assert steps, f"{name}: nothing scheduled"
    assert f.schedule_commands(), name
    run(case, f)                               # compile() proves legality; results match
    text = "\n".join(map(str, steps))
    assert all(line.startswith("f.") for line in text.splitlines())
    g = case.build()
    exec(text, {"f": g})                       # the printed schedule, pasted
    assert g.schedule_commands() == f.schedule_commands()


def verbs(steps):
    return [s.verb for s in steps]


def test_gemm_is_parallel_tiled_and_vectorised():
    steps = KERNELS["gemm"].build().auto_schedule()
    v = verbs(steps)
    assert "tile_band" in v or "tile" in v
    assert any(s.verb == "parallelize" and s.args[0] == "i0" for s in steps)
    assert "vectorize" in v


def test_plain_gemm_update_tiles_its_three_loops():
    f = build_mm()
    text = [str(s) for s in f.auto_schedule()]
    assert any(t.startswith("f.computations['C'].update.tile('i', 'j', 'k',") for t in text)
    assert "f.computations['C'].update.parallelize('i0')" in text
    a, b = np.random.rand(7, 5), np.random.rand(5, 9)
    np.testing.assert_allclose(f.compile()(A=a, B=b), a @ b)


@pytest.mark.parametrize("name,band", [("jacobi-1d", "tile_band"), ("seidel-2d", "tile")])
def test_stencils_are_skewed_then_tiled_as_a_wavefront(name, band):
    steps = KERNELS[name].build().auto_schedule()
    v = verbs(steps)
    assert "skew" in v and band in v
    assert v.index("skew") < v.index(band)
    after = v[v.index(band) + 1:]
    assert "skew" in after and "reorder" in after and "parallelize" in after   # wavefront


def test_softmax_rows_are_fused_and_parallel():
    f = KERNELS["softmax"].build()
    steps = f.auto_schedule()
    fused = [s for s in steps if s.verb == "after" and s.args[-1] == "i"]
    assert len(fused) == 5                     # six statements in one loop over the rows
    # then the rows' reductions (max, sum) 8 rows at a time: blocks of rows
    assert any(s.verb == "after" and s.args[-1] == "i0" for s in steps)
    assert {s.stmt for s in steps if s.verb == "parallelize"} >= {"mx", "e", "s", "out"}
    run(KERNELS["softmax"], f)


def test_partial_schedule_is_kept_and_completed():
    case = KERNELS["trmm"]
    f = case.build()
    f.computations["C"].update.tile("i", "j", 4, 4)
    before = f.schedule_commands()
    steps = f.auto_schedule()
    assert f.schedule_commands()[:len(before)] == before
    assert all(s.verb in ("parallelize", "vectorize", "unroll") for s in steps
               if s.stmt == "C_update")
    run(case, f)


def test_budget_and_target_arguments():
    f = KERNELS["gemm"].build()
    with pytest.raises(ValueError, match="budget"):
        f.auto_schedule(budget=-1)
    with pytest.raises(ValueError, match="target"):
        f.auto_schedule(target="cuda")
    case = KERNELS["jacobi-2d"]
    g = case.build()
    g.auto_schedule(budget=1e-9)               # out of time at once: what is applied is legal
    run(case, g)
    h = case.build()
    h.auto_schedule(target="llvm")
    run(case, h, "llvm")


def test_data_dependent_loops_stay_in_place():
    """The CSR convolution's nonzero loop (bounds from rowptr) is never tiled
    nor moved: the band stops before it, and the result is the dense conv's."""
    from examples import conv2d, sparse_conv
    f = sparse_conv.build()
    steps = f.auto_schedule()
    assert not any(s.verb == "tile" and "j" in s.args for s in steps)
    kernel = f.compile()
    inp, weights, bias = sparse_conv.random_inputs(density=0.4)
    out = sparse_conv.run(kernel, inp, weights, bias)
    np.testing.assert_allclose(out, conv2d.reference(inp, weights, bias), rtol=1e-4, atol=1e-4)


def test_known_small_sizes_are_not_time_tiled_nor_parallel():
    """Sizes fixed at declaration: the whole row fits in cache and one time
    step is too little work for a parallel region, so the stencil stays a
    plain (vectorised) nest; the same algorithm with free sizes is tiled."""
    case = SUITE["jacobi-1d"]
    f = case.build("TSTEPS", "N")
    v = verbs(f.auto_schedule())
    assert "tile_band" not in v and "parallelize" not in v
    inputs = case.inputs(np.random.default_rng(2))
    out = f.compile()(**{k: a.copy() for k, a in inputs.items()})
    ref = case.reference(inputs)
    for k in ref:
        np.testing.assert_allclose(out[k], ref[k])


def test_fused_reduction_gets_its_stride_one_loop_innermost():
    """2mm: an initialisation and its reduction fused in ``i, j``: the
    reduction, deeper than the loops they share, gets a nest of its own
    (``after(init, None)``), tiled over ``i, j, k`` with the reduction loop;
    in a tile a register block of 6 rows (unrolled) by 4 vectors (unrolled,
    the stride-1 loop innermost, vectorised) runs inside the reduction's
    point loop, over a local accumulator; the printed steps replay and the
    result is right (the replay is checked above)."""
    case = KERNELS["2mm"]
    f = case.build()
    text = [str(s) for s in f.auto_schedule()]
    upd = "f.computations['tmp_init'].update"
    assert f"{upd}.after(f.computations['tmp_init'], None)" in text
    assert any(t.startswith(f"{upd}.tile('i', 'j', 'k',") for t in text)
    assert f"{upd}.reorder('i10', 'j10', 'k1', 'i11', 'j110', 'j111')" in text
    assert f"{upd}.split('i1', 6)" in text
    assert f"{upd}.unroll('i11')" in text and f"{upd}.unroll('j110')" in text
    assert any(t.startswith(f"{upd}.vectorize('j111',") for t in text)
    assert f"{upd}.accumulate_locally('k1')" in text
    run(case, f)


def test_register_block_follows_the_host(monkeypatch):
    """The register block takes 3/4 of the host's vector registers: 6 rows
    by 4 vectors with 32, 6 by 2 with 16 (AVX2: 4 float64 lanes, 8 columns);
    the tile sizes hold whole blocks; results stay right."""
    from codegen import target
    monkeypatch.setattr(target, "vector_registers", lambda: 16)
    monkeypatch.setattr(target, "vector_bits", lambda: 256)
    case = KERNELS["2mm"]
    f = case.build()
    text = [str(s) for s in f.auto_schedule()]
    upd = "f.computations['tmp_init'].update"
    assert f"{upd}.split('j1', 8)" in text and f"{upd}.split('j11', 4)" in text
    assert f"{upd}.split('i1', 6)" in text
    tile = next(t for t in text if t.startswith(f"{upd}.tile("))
    sizes = [int(x) for x in tile.rstrip(")").split(",")[3:]]
    assert sizes[0] % 6 == 0 and sizes[1] % 8 == 0, tile
    run(case, f)


def test_triangular_parallel_loop_deals_rows_round_robin(monkeypatch):
    """A loop whose inner extent changes with it (syrk's j <= i) is dealt one
    iteration at a time on the C target (a static split in halves gives one
    thread 3/4 of the work); the LLVM backend's static halves are kept; a
    rectangular loop, tiled with a clamped last tile, gets the default."""
    import tiramisu_py as tp
    from examples.polybench import blas
    from tiramisu_py.poly import footprint
    from tiramisu_py.commands.state import state_of
    from tiramisu_py.poly.model import build_model

    SIZE = {"M": 120, "N": 150}          # enough work per row to run in parallel

    def syrk():
        return blas._build_rank_update("syrk", SIZE, False)
    steps = [str(s) for s in syrk().auto_schedule()]
    assert "f.computations['scale'].parallelize('i', schedule='static', chunk=1)" in steps
    assert not any("chunk" in s for s in map(str, syrk().auto_schedule(target="llvm")))
    monkeypatch.setenv("TIRAMISU_PY_TARGET", "llvm")     # compile()'s default target
    assert not any("chunk" in s for s in map(str, syrk().auto_schedule()))
    monkeypatch.delenv("TIRAMISU_PY_TARGET")
    f = syrk()
    model, state = build_model(f), state_of(f)
    assert footprint.extent_varies_with(model, state, "scale_update", "i", "j")
    assert not footprint.extent_varies_with(model, state, "scale_update", "i", "k")
    g = tp.Function("rect", params={"N": 37})
    i, j = g.var("i", 0, "N"), g.var("j", 0, "N")
    c = g.computation("C", [i, j], 1.0)
    c.tile("i", "j", 8, 8)
    assert not footprint.extent_varies_with(build_model(g), state_of(g), "C", "i0", "j1")
    assert footprint.extent_varies_with(build_model(g), state_of(g), "C", "j0", "j1") is False
    inputs = {"A": np.random.default_rng(0).standard_normal((150, 120)),
              "C": np.random.default_rng(1).standard_normal((150, 150))}
    f = syrk()
    f.auto_schedule()
    out = f.compile()(A=inputs["A"], C=inputs["C"].copy())
    want = blas._rank_ref(False)(inputs, SIZE)["C"]
    np.testing.assert_allclose(out, want, rtol=1e-12, atol=1e-12)


def test_reduction_leaves_its_fused_nest_for_a_stride_one_inner_loop():
    """correlation's Gram matrix: the reduction over k sits inside its
    initialisation's and mirror's (a, c) nest; at MINI sizes its data fits
    in cache (no tiles, so no nest of its own): the auto-scheduler
    distributes it at a (the initialisation before, the mirror after) to make
    c, the stride-1 loop, innermost and vectorised."""
    from examples.polybench import datamining
    f = datamining.build_correlation(datamining.SIZES["MINI"])
    steps = [str(s) for s in f.auto_schedule()]
    upd = "f.computations['g0'].update"
    for want in (f"{upd}.after(f.computations['g0'], 'a')",
                 f"{upd}.reorder('k', 'c')",
                 f"f.computations['g3'].after({upd}, 'a')"):
        assert want in steps
    assert any(s.startswith(f"{upd}.vectorize('c',") for s in steps)
    rng = np.random.default_rng(4)
    data = rng.standard_normal((32, 28))
    out = f.compile()(data=data.copy())
    want = datamining.ref_correlation({"data": data.copy()}, datamining.SIZES["MINI"])
    got = out["corr"] if isinstance(out, dict) else out
    np.testing.assert_allclose(np.asarray(got), want["corr"], rtol=1e-10, atol=1e-10)


def test_group_parallel_by_its_largest_statement_and_shared_loop_not_split():
    """mvt's x1: an initialisation (one loop of N) fused with its reduction
    (N x N): the group has the work for a parallel loop though its first
    statement alone has not; the initialisation's loop, shared with the
    reduction's outer loop, is not strip-mined for vectors."""
    import examples.polybench as pb
    from tiramisu_py.driver.auto_schedule import auto_schedule
    f = pb.function(pb.KERNELS["mvt"], "LARGE", "plain")
    # unroll=False: no rows jammed (test_dot_product_rows_run_jammed), the
    # initialisation stays fused with the reduction in i
    steps = [str(s) for s in auto_schedule(f, options={"unroll": False})]
    assert "f.computations['x1_0'].update.parallelize('i')" in steps
    assert not any(s.startswith("f.computations['x1_0'].vectorize(") for s in steps)
    jammed = [str(s) for s in pb.function(pb.KERNELS["mvt"], "LARGE", "plain").auto_schedule()]
    assert "f.computations['x1_0'].update.parallelize('i0')" in jammed


def test_serial_stride_one_loop_left_to_the_c_compiler():
    """jacobi-1d at a size whose band fits in cache: no tiling, no parallel
    loop; on the C target its stride-1 loops are left to gcc's vectoriser
    (faster than omp simd over strip-mined blocks), the LLVM target
    vectorises them."""
    import examples.polybench as pb
    k = pb.KERNELS["jacobi-1d"]

    def steps(target):
        return [str(s) for s in pb.function(k, "MEDIUM", "plain").auto_schedule(target=target)]
    assert not any(".vectorize(" in s or ".parallelize(" in s for s in steps("cpu"))
    assert any(s.startswith("f.computations['sB'].vectorize('i',") for s in steps("llvm"))


def test_statements_parallel_each_when_no_shared_loop_is():
    """fdtd-2d: four statements share only the time loop, which carries the
    updates; each then runs its own outer loop in parallel and its
    stride-1 loop vectorised (the parallel region hides the arrays from
    gcc's vectoriser); the result is the NumPy reference's (MEDIUM: enough work per loop)."""
    steps = polybench_auto("fdtd-2d", "MEDIUM")
    for name, outer, inner in (("s1", "ei", "ej"), ("s2", "xi", "xj"), ("s3", "hi", "hj")):
        assert f"f.computations['{name}'].parallelize('{outer}')" in steps
        assert any(s.startswith(f"f.computations['{name}'].vectorize('{inner}',") for s in steps)


def test_lu_right_looking_and_upper_row_blocks_in_parallel():
    """LU: the row update ``A[i][j] -= A[i][k] * A[k][j]`` gets its stride-1
    loop innermost by going after the division at ``k`` (right-looking,
    ``after(L2, 'j')``); the upper row, whose loop around the stride-1 one
    carries a dependence, runs blocks of 8 vectors in parallel with that
    loop inside; the result is the NumPy reference's."""
    steps = polybench_auto("lu", "MEDIUM")
    assert "f.computations['L1'].reorder('k', 'j')" in steps
    assert "f.computations['L1'].after(f.computations['L2'], 'j')" in steps
    assert "f.computations['U1'].reorder('ju0', 'ku', 'ju1')" in steps
    assert "f.computations['U1'].parallelize('ju0')" in steps


def test_untiled_band_whose_loops_all_carry_runs_as_a_wavefront():
    """nussinov: each cell reads cells left of and below it, so both band
    loops carry; each cell runs a loop of its own (a max over k), so the
    anti-diagonals of the untiled band run as a wavefront (j skewed by r,
    moved outermost, r parallel); the result is the NumPy reference's."""
    steps = polybench_auto("nussinov", "SMALL")
    for name in ("s1", "s2", "s3", "s4"):
        assert f"f.computations['{name}'].skew('r', 'j', 1)" in steps
        assert f"f.computations['{name}'].reorder('j', 'r')" in steps
        assert any(s.startswith(f"f.computations['{name}'].parallelize('r'") for s in steps)


def test_time_band_with_small_space_tiles_is_not_time_tiled():
    """heat-3d at LARGE: a tile's footprint grows as T^3 in its 3-D arrays,
    so the tiles that fit the cache (16^3) leave no room for the skewed time
    tiles' halo: each time step's space loops run in parallel instead, the
    stride-1 one vectorised; GEMM's 2-D arrays keep T^2 tiles."""
    import examples.polybench as pb
    steps = [str(s) for s in pb.function(pb.KERNELS["heat-3d"], "LARGE", "plain").auto_schedule()]
    assert not any("tile" in s or "skew" in s for s in steps), steps
    assert "f.computations['sB'].parallelize('i')" in steps
    gemm = [str(s) for s in pb.function(pb.KERNELS["gemm"], "LARGE", "plain").auto_schedule()]
    tile = next(s for s in gemm if ".tile(" in s)
    assert all(int(x) >= 32 for x in tile.rstrip(")").split(",")[3:]), tile


def test_dot_product_rows_run_jammed():
    """bicg's ``q[i] += A[i][j] * p[j]``: a dot product per row, not
    vectorised (that would reassociate it): 8 rows unrolled inside ``j``,
    8 independent chains, each in the program's order; the group split by
    the same blocks of rows, its statements one after the other in a
    block; the result is the NumPy reference's, bit for bit in q's order."""
    steps = polybench_auto("bicg", "SMALL")
    upd = "f.computations['q0'].update"
    assert f"{upd}.split('i', 8)" in steps
    assert f"{upd}.reorder('j', 'i1')" in steps and f"{upd}.unroll('i1')" in steps
    assert f"{upd}.accumulate_locally('j')" in steps


def test_float32_row_max_runs_in_the_lanes_on_c(monkeypatch):
    """Softmax in float32 on an AVX2 host: its row max (``mx[i] = max(mx[i],
    X[i][j])``) takes the rows in the lanes (8 rows a vector, ``X``'s 8 x 8
    tile copied transposed per ``j0``: each lane a row's maximum in the
    program's order, no select per row left scalar); the sum, which reads
    the exponentials' block, stays jammed; the result equals the jammed
    schedule's bit for bit, and the printed steps replay."""
    from codegen import target
    from examples.beyond_polybench import build_softmax
    from tiramisu_py.driver import auto_point_loops as apl
    import tiramisu_py as tp
    monkeypatch.setattr(target, "vector_bits", lambda: 256)
    sizes = {"N": 40, "M": 24}
    f = build_softmax(sizes, tp.float32)
    steps = [str(x) for x in f.auto_schedule(target="c")]
    upd = "f.computations['mx'].update"
    assert f"{upd}.cache_at('X[i, j]', 'j0', name='mx_update_X_t')" in steps, steps
    assert f"{upd}.vectorize('i1', 8)" in steps and f"{upd}.unroll('j1')" in steps
    assert "f.computations['s'].update.reorder('j', 'i1')" in steps
    x = np.random.default_rng(3).standard_normal((40, 24)).astype(np.float32)
    x[5, 7] = 40.0                                    # a row's max away from its start
    got = f.compile("c")(X=x)
    monkeypatch.setattr(apl.PointLoops, "jam_lanes", lambda self, *a: {})
    g = build_softmax(sizes, tp.float32)
    assert not any("mx_update_X_t" in str(x) for x in g.auto_schedule(target="c"))
    np.testing.assert_array_equal(got, g.compile("c")(X=x))
    h = build_softmax(sizes, tp.float32)
    exec("\n".join(steps), {"f": h})
    np.testing.assert_array_equal(got, h.compile("c")(X=x))


def test_reduction_between_its_start_and_finish_gets_a_nest_and_register_block():
    """covariance's Gram matrix: the update (a, c, k) sits between its zeros
    and its finish, fused in (a, c): it gets a nest of its own, the zeros
    before it, the finish and the mirror after it (fused in a, c as they
    were), and there the tiled register block over its triangle (c >= a):
    the band is permutable by its own dependences, not by another nest's."""
    steps = polybench_auto("covariance", "MEDIUM")
    upd = "f.computations['g0'].update"
    for want in (f"{upd}.after(f.computations['g0'], None)",
                 f"f.computations['g2'].after({upd}, None)",
                 "f.computations['g3'].after(f.computations['g2'], 'c')",
                 f"{upd}.unroll('a11')", f"{upd}.accumulate_locally('k1')"):
        assert want in steps
    assert any(s.startswith(f"{upd}.tile('a', 'c', 'k',") for s in steps)


def test_operand_read_along_the_other_index_is_packed_for_the_register_block():
    """syr2k: C[i][j] += A[j][k] B[i][k] + B[j][k] A[i][k] over j <= i reads
    A[j][k] and B[j][k] strided along j, the register block's vector loop:
    each is copied per column tile (cache_at of that access at j0) into a
    [k][j] tile (store_in), and the block then runs on the copies; the
    printed steps, replayed on a fresh Function, give the same code."""
    import examples.polybench as pb
    steps = polybench_auto("syr2k", "MEDIUM")
    upd = "f.computations['scale'].update"
    for buf in ("A", "B"):
        assert f"{upd}.cache_at('{buf}[j, k]', 'j0', name='scale_update_{buf}_packed')" in steps
        assert any(s.startswith(f"f.computations['scale_update_{buf}_packed'].store_in(")
                   for s in steps)
    assert f"{upd}.unroll('i11')" in steps and f"{upd}.accumulate_locally('k1')" in steps
    k = pb.KERNELS["syr2k"]
    f, g = (pb.function(k, "MEDIUM", "plain") for _ in range(2))
    f.auto_schedule()
    for s in steps:
        exec(s, {"f": g})
    assert f.compile().source == g.compile().source


def test_reuse_that_fits_in_cache_untiled_is_not_tiled():
    """A batched matrix-vector product reuses x[b, j] across i: one row of x
    between two uses.  With its sizes known and that row within a quarter of
    the L2 the reuse needs no tiles, however large x is (512 rows of 256
    float32: 512 KB), the band stays whole (rows streamed), b parallel, and
    its rows run as a dot product's, each in the program's order: on C in
    the lanes, 4 vectors of them at once, the tile of A copied transposed
    (``transposed_rows``); on
    LLVM 8 jammed inside j.  With a row beyond a quarter of the L2 it is
    tiled."""
    from examples.beyond_polybench import KERNELS
    from codegen import target
    k = KERNELS["batched_mv"]
    l2 = target.cache_sizes().get((2, "Unified"), 1 << 20)
    upd = "f.computations['y'].update"
    lanes = target.vector_bits() // 64
    # (4 vectors of rows at once: 256 rows are a multiple of 4 lanes' worth)
    wants = {"c": (f"{upd}.split('i', {4 * lanes})", f"{upd}.split('j', {lanes})",
                   f"{upd}.split('i1', {lanes})", f"{upd}.reorder('i0', 'j0', 'j1', 'i10', 'i11')",
                   f"{upd}.cache_at('A[b, i, j]', 'j0', name='y_update_A_t')",
                   f"{upd}.vectorize('i11', {lanes})", f"{upd}.unroll('j1')",
                   f"{upd}.unroll('i10')"),
             "llvm": (f"{upd}.split('i', 8)", f"{upd}.reorder('j', 'i1')", f"{upd}.unroll('i1')")}
    for small in (dict(NB=32, N=256, M=l2 // 4 // 8 // 32), dict(NB=512, N=256, M=256)):
        for tgt, want in wants.items():
            steps = [str(s) for s in k.build(small).auto_schedule(target=tgt)]
            assert not any(".tile(" in s for s in steps), steps
            for w in (f"{upd}.parallelize('b')", *want):
                assert w in steps, (tgt, w, steps)
    steps = [str(s) for s in k.build(dict(NB=32, N=256, M=l2 // 8)).auto_schedule()]
    assert any(".tile(" in s for s in steps), steps


def test_dot_product_rows_in_the_lanes_give_the_reference(monkeypatch):
    """``transposed_rows`` on C: the batched matrix-vector product's rows in
    the lanes, A's tiles copied transposed through registers; NumPy's result
    (float64, the program's order per row), on sizes where it applies."""
    from examples.beyond_polybench import KERNELS
    k = KERNELS["batched_mv"]
    sizes = dict(NB=3, N=32, M=24)
    f = k.build(sizes)
    steps = [str(s) for s in f.auto_schedule(target="c")]
    assert any("cache_at('A[b, i, j]', 'j0'" in s for s in steps), steps
    kern = f.compile("c")
    from codegen import loops
    # the printer moves the tile through registers where a register holds 4 lanes or more
    assert ("copy transposed through registers" in kern.source) == (loops.host_lanes(64) >= 4)
    rng = np.random.default_rng(2)
    A, x = rng.standard_normal((3, 32, 24)), rng.standard_normal((3, 24))
    np.testing.assert_allclose(np.asarray(kern(A=A, x=x)), np.einsum("bij,bj->bi", A, x),
                               rtol=1e-12, atol=1e-12)


def batched_conv(N=2, CO=16, CI=16, H=32, W=32, padded=False):
    """A 3x3 convolution over a batch of N images, sizes fixed, float64
    (``padded``: zero padding 1, written as a select)."""
    import tiramisu_py as tp
    f = tp.Function("bconv", params=dict(N=N, CO=CO, CI=CI, H=H, W=W))
    n, o, c = f.var("n", 0, "N"), f.var("o", 0, "CO"), f.var("c", 0, "CI")
    y, x = f.var("y", 0, "H" if padded else "H - 2"), f.var("x", 0, "W" if padded else "W - 2")
    ky, kx = f.var("ky", 0, 3), f.var("kx", 0, 3)
    inp = f.input("inp", ("N", "CI", "H", "W"), tp.float64)
    w = f.input("w", ("CO", "CI", 3, 3), tp.float64)
    out = f.computation("out", [n, o, y, x], 0.0, dtype=tp.float64)
    if padded:
        iy, ix = y + ky - 1, x + kx - 1
        inside = (iy >= 0) & (iy < f.param("H")) & (ix >= 0) & (ix < f.param("W"))
        out[n, o, y, x] += w[o, c, ky, kx] * tp.select(inside, inp[n, c, iy, ix], 0.0)
    else:
        out[n, o, y, x] += w[o, c, ky, kx] * inp[n, c, y + ky, x + kx]
    return f


def test_a_convolution_gets_a_register_block_of_output_channels(monkeypatch):
    """The register block of a convolution: its rows are output channels
    (``o``: the weights broadcast, each input vector serving every row; not
    ``y``, which the input reads with ``x``), 4 of them (half the vector
    registers for 4 vectors of columns: a reduction with loops outside the
    band), inside all three reduction loops, accumulated locally over
    ``c`` (``ky, kx`` adding to the same registers), the 3 taps of ``kx``
    unrolled around it; the result is right."""
    from codegen import target
    monkeypatch.setattr(target, "cores", lambda: 2)
    monkeypatch.setattr(target, "vector_bits", lambda: 512)
    monkeypatch.setattr(target, "cache_sizes", lambda: {(2, "Unified"): 1 << 20})
    f = batched_conv()
    text = [str(s) for s in f.auto_schedule()]
    upd = "f.computations['out'].update"
    block = [f"{upd}.split('o1', 4)",
             f"{upd}.reorder('o10', 'x10', 'c', 'ky', 'kx', 'o11', 'x110', 'x111')",
             f"{upd}.unroll('o11')", f"{upd}.unroll('x110')", f"{upd}.vectorize('x111', 8)",
             f"{upd}.accumulate_locally('c')", f"{upd}.unroll('kx')"]
    assert text[-len(block):] == block, text
    rng = np.random.default_rng(1)
    inp, w = rng.standard_normal((2, 16, 32, 32)), rng.standard_normal((16, 16, 3, 3))
    want = sum(np.einsum("oc,ncyx->noyx", w[:, :, a, b], inp[:, :, a:a + 30, b:b + 30])
               for a in range(3) for b in range(3))
    for backend in ("c", "llvm"):
        np.testing.assert_allclose(f.compile(backend)(inp=inp, w=w), want, rtol=1e-12, atol=1e-12)


def test_parallel_loop_holds_iterations_for_every_core(monkeypatch):
    """A batch of 2 tiled by 8 (the input, 256 KB, exceeds a quarter of the
    L2; the columns by 32, whole register blocks of 4 vectors) leaves its
    tile loop one iteration: the parallel loop is never that one, but the
    tile loops inside it collapsed (``collapse``) until they hold 4
    iterations per core (2 cores: 8: 2 x 4 tiles of 8 channels by 8 rows);
    the printed schedule replays to the same code, and so do the steps as a
    tuning record; the result is right."""
    from codegen import target
    from tiramisu_py.commands.state import extent_of
    monkeypatch.setattr(target, "cores", lambda: 2)
    monkeypatch.setattr(target, "vector_bits", lambda: 512)
    monkeypatch.setattr(target, "cache_sizes", lambda: {(2, "Unified"): 1 << 20})
    f = batched_conv()
    steps = f.auto_schedule()
    text = [str(s) for s in steps]
    upd = "f.computations['out'].update"
    assert f"{upd}.tile('n', 'o', 'y', 'x', 8, 8, 8, 32)" in text
    assert text[text.index(f"{upd}.collapse('o0', 'y0')") + 1] == \
        f"{upd}.parallelize('o0_y0')"
    for s in steps:
        if s.verb == "parallelize":
            assert extent_of(f, s.stmt, s.args[0]) >= 8, s
    rng = np.random.default_rng(0)
    inp, w = rng.standard_normal((2, 16, 32, 32)), rng.standard_normal((16, 16, 3, 3))
    want = sum(np.einsum("oc,ncyx->noyx", w[:, :, a, b], inp[:, :, a:a + 30, b:b + 30])
               for a in range(3) for b in range(3))
    np.testing.assert_allclose(f.compile()(inp=inp, w=w), want, rtol=1e-12, atol=1e-12)
    g = batched_conv()
    exec("\n".join(text), {"f": g})
    assert g.compile().source == f.compile().source
    from tiramisu_py.driver import tune            # tune's records hold the steps as data
    h = batched_conv()
    tune.apply_record(h, {"steps": [{"stmt": s.stmt, "verb": s.verb, "args": list(s.args),
                                     "kwargs": s.kwargs} for s in steps]})
    assert h.schedule_commands() == f.schedule_commands()


def test_zero_padding_is_copied_per_tile_and_the_block_loses_its_guard(monkeypatch):
    """A convolution whose padding is a select: the register block takes 4
    rows (as unguarded) and the guarded input is copied with its padding
    (``cache_at(..., tile=True)``: a tile buffer, its rows vectorised) at
    the outermost loop inside the parallel one whose footprint fits half of
    L2; the consumer reads it unguarded; the printed steps replay, also as
    a tuning record; the result is the padded convolution's."""
    from codegen import target
    from tiramisu_py.driver import tune
    monkeypatch.setattr(target, "cores", lambda: 2)
    monkeypatch.setattr(target, "vector_bits", lambda: 512)
    monkeypatch.setattr(target, "cache_sizes", lambda: {(2, "Unified"): 1 << 20})
    f = batched_conv(padded=True)
    steps = f.auto_schedule()
    text = [str(s) for s in steps]
    upd, copy = "f.computations['out'].update", "f.computations['out_update_inp_padded']"
    assert f"{upd}.split('o1', 4)" in text
    assert text[-3:] == [f"{upd}.cache_at('inp[n, c, ((y + ky) - 1), ((x + kx) - 1)]', 'x0', "
                         "name='out_update_inp_padded', tile=True)",
                         f"{copy}.vectorize('out_update_inp_padded_3', 8)", f"{upd}.unroll('kx')"], text
    assert [int(d.value) for d in f.buffers["out_update_inp_padded_tile"].shape] == [2, 16, 10, 34]
    assert "select" not in repr(f.computations["out"].update.value)
    rng = np.random.default_rng(4)
    inp, w = rng.standard_normal((2, 16, 32, 32)), rng.standard_normal((16, 16, 3, 3))
    p = np.pad(inp, ((0, 0), (0, 0), (1, 1), (1, 1)))
    want = sum(np.einsum("oc,ncyx->noyx", w[:, :, a, b], p[:, :, a:a + 32, b:b + 32])
               for a in range(3) for b in range(3))
    for backend in ("c", "llvm"):
        np.testing.assert_allclose(f.compile(backend)(inp=inp, w=w), want, rtol=1e-12, atol=1e-12)
    g = batched_conv(padded=True)
    exec("\n".join(text), {"f": g})
    assert g.compile().source == f.compile().source
    h = batched_conv(padded=True)
    tune.apply_record(h, {"steps": [{"stmt": s.stmt, "verb": s.verb, "args": list(s.args),
                                     "kwargs": s.kwargs} for s in steps]})
    assert h.schedule_commands() == f.schedule_commands()


def test_reassociation_allowed_vectorises_the_reductions_and_keeps_fusion():
    """``reassociate=True``: a reduction whose innermost loop is one of its
    reduction loops, read contiguously along it, is vectorised with partial
    sums in the lanes, four vectors' worth where the loop is long enough (a
    batched matrix-vector product's ``j``; softmax's row max and row sum)
    instead of running as jammed rows; softmax's nests stay fused in ``i``.  ``allow_reassociation()`` given to a reduction
    before gives it the same and leaves its group to the search.  Results
    equal NumPy's within float rounding; the printed commands replay."""
    from examples.beyond_polybench import build_batched_mv, build_softmax
    s = dict(NB=4, N=32, M=64)
    steps = [str(x) for x in build_batched_mv(s).auto_schedule(reassociate=True)]
    upd = "f.computations['y'].update"
    from codegen import loops
    lanes = loops.host_lanes(64)
    assert steps[-1] == f"{upd}.vectorize('j', {4 * lanes}, allow_reassociation=True)", steps
    assert not any(f"{upd}.split('i', 8)" == x for x in steps)        # not jammed
    given = build_batched_mv(s)
    given.computations["y"].update.allow_reassociation()
    assert [str(x) for x in given.auto_schedule()] == steps
    rng = np.random.default_rng(0)
    A, x = rng.standard_normal((4, 32, 64)), rng.standard_normal((4, 64))
    np.testing.assert_allclose(given.compile()(A=A, x=x), np.einsum("bij,bj->bi", A, x),
                               rtol=1e-12, atol=1e-12)
    replay = build_batched_mv(s)
    for cmd in steps:
        exec(cmd, {"f": replay})
    auto = build_batched_mv(s)
    auto.auto_schedule(reassociate=True)
    assert replay.compile().source == auto.compile().source
    f = build_softmax(dict(N=16, M=64))
    steps = [str(x) for x in f.auto_schedule(reassociate=True)]
    for stmt in ("mx", "s"):
        assert any(x.startswith(f"f.computations['{stmt}'].update.vectorize('j")
                   and x.endswith("allow_reassociation=True)") for x in steps), steps
    assert "f.computations['out'].after(f.computations['s'].update, 'i')" in steps
    X = rng.standard_normal((16, 64))
    e = np.exp(X - X.max(1, keepdims=True))
    np.testing.assert_allclose(f.compile()(X=X), e / e.sum(1, keepdims=True), rtol=1e-12)
    with pytest.raises(TypeError, match="reassociate must be True or False"):
        build_softmax(dict(N=16, M=64)).auto_schedule(reassociate="yes")


def nine_point(N=134):
    import tiramisu_py as tp
    f = tp.Function("nine", params={"N": N})
    i, j = f.var("i", 0, "N - 2"), f.var("j", 0, "N - 2")
    A = f.input("A", ("N", "N"), tp.float32)
    f.computation("out", [i, j], sum((A[i + di, j + dj] for di in range(3) for dj in range(3)),
                                     0.0) / 9.0)
    return f


@pytest.mark.parametrize("target", ["c", "llvm"])
def test_stencil_rows_are_computed_together_per_vector_strip(monkeypatch, target):
    """A 9-point stencil's rows overlap (row ``i + 1`` of one output row is
    row ``i`` of the next): the rows split by 4 before the parallel loop,
    and, once ``j`` has its vectors, those 4 rows moved inside the strip loop
    and unrolled (``i0, j0, i1, j1``); the result is NumPy's in the
    program's order of additions, bit for bit."""
    from codegen import target as host
    from tiramisu_py.analysis import schedule_space as space
    monkeypatch.setattr(host, "cores", lambda: 2)
    f = nine_point()
    text = [str(s) for s in f.auto_schedule(target=target)]
    out = "f.computations['out']"
    assert text == [f"{out}.split('i', 4)", f"{out}.parallelize('i0')",
                    f"{out}.vectorize('j', {host.vector_bits() // 32})",
                    f"{out}.interchange('i1', 'j0')", f"{out}.unroll('i1')"], text
    A = np.random.default_rng(0).random((134, 134), dtype=np.float32)
    want = np.float32(0.0)
    for di in range(3):
        for dj in range(3):
            want = want + A[di:di + 132, dj:dj + 132]
    got = f.compile(target)(A=A)
    np.testing.assert_array_equal(np.asarray(got), want / np.float32(9.0))
    from tiramisu_py.analysis import legality
    model, _, _ = legality.analyse(nine_point())
    assert space.rows_read_again(model, "out", "i")       # what it keys on


def test_a_statement_without_overlapping_rows_keeps_its_rows(monkeypatch):
    """Rows not read again (``A[i][j] + A[i][j + 1]``): no split of ``i``."""
    import tiramisu_py as tp
    from codegen import target as host
    from tiramisu_py.analysis import legality, schedule_space as space
    monkeypatch.setattr(host, "cores", lambda: 2)
    f = tp.Function("pairs", params={"N": 134})
    i, j = f.var("i", 0, "N"), f.var("j", 0, "N - 1")
    A = f.input("A", ("N", "N"), tp.float32)
    f.computation("out", [i, j], A[i, j] + A[i, j + 1])
    model, _, _ = legality.analyse(f)
    assert space.rows_read_again(model, "out", "j") and not space.rows_read_again(model, "out", "i")
    assert not any(s.verb == "split" and s.args[0] == "i" for s in f.auto_schedule())


def test_random_stencils_with_jammed_rows_equal_the_unscheduled_kernel(monkeypatch):
    """Random stencils (2-5 reads at random offsets of one or two arrays, rows
    of A read again; sizes where the rows are jammed or not): the
    auto-scheduled kernel gives the unscheduled one's result bit for bit, on
    both backends in turns."""
    from hypothesis import given, settings, strategies as st
    import tiramisu_py as tp
    from codegen import target as host
    monkeypatch.setattr(host, "cores", lambda: 2)
    offsets = st.tuples(st.integers(0, 2), st.integers(0, 2), st.booleans())

    @settings(max_examples=10, deadline=None, derandomize=True)
    @given(reads=st.lists(offsets, min_size=0, max_size=3), dy=st.integers(1, 2),
           dx=st.integers(0, 2), n=st.integers(100, 180), llvm=st.booleans())
    def check(reads, dy, dx, n, llvm):
        reads = [(0, 0, False), (dy, dx, False), *reads]      # rows of A read again
        def build():
            f = tp.Function("rnd", params={"N": n})
            i, j = f.var("i", 0, "N - 2"), f.var("j", 0, "N - 2")
            X = [f.input(x, ("N", "N"), tp.float32) for x in "AB"]
            # sums only: a product and a sum may contract to an FMA in one
            # loop and not in another (both backends allow it)
            terms = [X[b][i + di, j + dj] for di, dj, b in reads]
            f.computation("out", [i, j], sum(terms[1:], terms[0]))
            return f
        rng = np.random.default_rng(n)
        arrays = {x: rng.random((n, n), dtype=np.float32) for x in "AB"}
        target = "llvm" if llvm else "c"
        f = build()
        f.auto_schedule(target=target)
        np.testing.assert_array_equal(np.asarray(f.compile(target)(**arrays)),
                                      np.asarray(build().compile(target)(**arrays)))
    check()

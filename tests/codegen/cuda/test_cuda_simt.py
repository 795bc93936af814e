"""The GPU's vendor-speed commands, tested without a GPU: warp-level tiles
(``bind(..., "warp.x" | "lane.x")``), 128-bit vector accesses, shared-tile
layouts (order, pad, swizzle), software pipelining with ``cp.async``
(``pipeline``), and the library's warp-tiled GEMM that uses them all.
Each is emulated in the three thread orders against NumPy, run on the CPU,
refused by name where it cannot hold; a removed barrier or wait is caught
by the emulator.  The SASS checks are in tests/codegen/cuda/test_cuda_sass.py."""
import functools

import numpy as np
import pytest

import tiramisu_py as tp
from codegen import ir
from codegen.cuda.emulator import EmulatorError
from codegen.cuda.printer import CudaPrintError
from schedules.blocks.blis import algorithm
from schedules.blocks import gemm_cuda_warp as warp
from tests.codegen.cuda.test_cuda import (ORDERS, emulate_source, emulation_cubins, lowered_gpu,
                             needs_cxx, reverse_in_block)

RNG = np.random.default_rng(53)


def gemm_args(n, m, k):
    return (RNG.standard_normal((n, k), dtype=np.float32),
            RNG.standard_normal((k, m), dtype=np.float32))


@functools.lru_cache(maxsize=None)
def compiled(build, *args):
    with emulation_cubins():
        return build(*args).compile(target="cuda")


def small_warp(n=128, m=64, k=48, **values):
    """The library's warp-tiled GEMM with the 64 x 64 block (4 warps)."""
    return warp.function(n, m, k, **dict(warp.SMALL, **values))


def three_stage():
    return small_warp(stages=3)


def two_stage_frags():
    return small_warp(stages=2, frag_stages=2)


def no_pipeline_swizzled():
    return small_warp(stages=1, swizzle=True)


def partial_tiles():
    return warp.function(70, 92, 36, **dict(warp.SMALL, stages=2))


def check_emulated(k, n, m, kk, seed=5):
    a, b = gemm_args(n, m, kk)
    for order in ORDERS:
        np.testing.assert_allclose(k.emulate(a, b, order=order, seed=seed), a @ b,
                                   rtol=1e-4, atol=1e-4)


# ----------------------------------------------------------------- warp tiles
@needs_cxx
@pytest.mark.parametrize("build,shape", [(three_stage, (128, 64, 48)),
                                         (two_stage_frags, (128, 64, 48)),
                                         (no_pipeline_swizzled, (128, 64, 48)),
                                         (partial_tiles, (70, 92, 36))])
def test_warp_gemm_emulated_in_every_order(build, shape):
    check_emulated(compiled(build), *shape)


def test_warp_gemm_on_the_cpu():
    a, b = gemm_args(70, 92, 36)
    for target in ("cpu", "llvm"):
        np.testing.assert_allclose(partial_tiles().compile(target=target)(a, b), a @ b,
                                   rtol=1e-4, atol=1e-4)


def test_warp_tiles_decompose_one_linear_thread_index():
    k = compiled(three_stage)
    assert k.launch_plan.kernels[1].block == (128, 1, 1)      # 4 warps, one dimension
    src = k.source
    assert "const int64_t i_w = ((int64_t)threadIdx.x / 64);" in src
    assert "const int64_t j_w = ((int64_t)threadIdx.x / 32) % 2;" in src
    assert "const int64_t i_l = ((int64_t)threadIdx.x / 4) % 8;" in src
    assert "const int64_t j_l = (int64_t)threadIdx.x % 4;" in src
    # the copies of the same kernel decompose the same index their own way
    assert "const int64_t A_shared_01 = ((int64_t)threadIdx.x / 2);" in src


def lanes_gemm(lanes_i, lanes_j):
    f = algorithm(64, 64, 16)
    u = f.computations["C"].update
    f.computations["C"].gpu_tile("i", "j", 8, 8)
    u.tile("i", "j", 32, 32)
    u.split("i1", lanes_i, names=("i_w", "i_l")).split("j1", lanes_j, names=("j_w", "j_l"))
    u.reorder("i0", "j0", "i_w", "j_w", "i_l", "j_l", "k")
    u.bind("i0", "block.y").bind("j0", "block.x")
    u.bind("i_w", "warp.y").bind("j_w", "warp.x").bind("i_l", "lane.y").bind("j_l", "lane.x")
    return f


def test_lanes_must_cover_one_warp():
    with pytest.raises(tp.IllegalScheduleError,
                       match=r"C_update.bind\(j_l, 'lane.x'\): the lane loops of C_update "
                             r"\(i_l, j_l\) have 16 threads; .* multiply to 32"):
        lanes_gemm(4, 4).compile(target="cuda")
    k = lanes_gemm(4, 8).compile(target="cpu")
    a, b = gemm_args(64, 64, 16)
    np.testing.assert_allclose(k(a, b), a @ b, rtol=1e-4, atol=1e-4)


def test_warp_and_xyz_binds_not_mixed_in_one_statement():
    f = algorithm(64, 64, 16)
    u = f.computations["C"].update
    f.computations["C"].gpu_tile("i", "j", 8, 8)
    u.tile("i", "j", 32, 32)
    u.bind("i0", "block.y").bind("j0", "block.x").bind("i1", "thread.y").bind("j1", "lane.x")
    with pytest.raises(tp.IllegalScheduleError, match="either a warp tile .* or x/y/z"):
        f.compile(target="cuda")


def reverse_in_warp():
    """B written by one lane is read by the mirror lane (of the other warp):
    a barrier (derived)."""
    def bind(s, j):
        s.split(j, 32, names=("jw", "jl"))
        s.bind("jw", "warp.x").bind("jl", "lane.x")
    return reverse_in_block(4, 64, bind, name="revw")


@needs_cxx
def test_barrier_between_warps_derived_and_needed():
    plan, body = lowered_gpu(reverse_in_warp())
    assert plan.seq_barriers and sum(isinstance(s, ir.Barrier) for s in ir.walk_stmts(body)) == 1
    k = compiled(reverse_in_warp)
    a = RNG.standard_normal((4, 64), dtype=np.float32)
    want = a[:, ::-1] * 2 + 1
    for order in ORDERS:
        np.testing.assert_allclose(k.emulate(a, order=order), want, rtol=1e-6)
    src = k.source.replace("__syncthreads();", "")
    assert max(np.abs(emulate_source(k, src, a, order=o) - want).max() for o in ORDERS) > 0.1


def test_dependence_between_lanes_in_one_loop_refused():
    f = tp.Function("scanw", params={"N": 2})
    i, j = f.var("i", 0, "N"), f.var("j", 1, 33)
    a = f.buffer("A", ("N", 33), tp.float32, output=True)
    s = f.computation("S", [i, j], dtype=tp.float32)
    s.store_in(a, [i, j])
    s.set_expression(a[i, j - 1] + a[i, j])
    s.bind(i, "block.x").bind(j, "lane.x")
    with pytest.raises(tp.IllegalScheduleError, match="multiply to 32|two threads of one block"):
        f.compile(target="cuda")


# ------------------------------------------------------------ vector accesses
def test_vector_accesses_printed():
    k = compiled(three_stage)
    src = k.source
    # B: one 16-byte cp.async per thread; A (transposed tile): 4-byte copies
    assert src.count("tpy_cp_async<16>(&B_shared_tile[") == 1
    assert src.count("tpy_cp_async<4>(&A_shared_tile[") == 4
    # fragments: 16-byte shared loads; C: 16-byte loads and stores
    assert "TPY_VMOVE(16, tpy_v" in src and "&A_shared_tile[" in src
    assert src.count("TPY_VMOVE(16, &C[") == 1
    assert k.launch_plan.aligned == {"A": 16, "B": 16, "C": 16}
    assert "__shared__ __align__(16) float A_shared_tile" in src


def vector_k(kk):
    f = algorithm(16, 16, kk)
    c, u = f.computations["C"], f.computations["C"].update
    c.gpu_tile("i", "j", 4, 4)
    u.gpu_tile("i", "j", 4, 4)
    u.split("k", 4)
    u.reorder("i0", "j0", "k0", "i1", "j1", "k1")
    u.cache_shared(f.buffers["A"], "k0", vector=4)
    return f


def test_unaligned_vector_access_refused_by_name():
    """Rows of 6 floats: the second row's 16-byte load would start at 24 bytes."""
    with pytest.raises(CudaPrintError, match=r"A_shared.vectorize\(A_shared_1v, 4\) cannot run "
                                             r"on the GPU as 4-lane vector accesses: A\[\.\.\.\] "
                                             r"is contiguous .* not provably aligned"):
        vector_k(6).compile(target="cuda")
    k = compiled(vector_k, 8)
    a, b = gemm_args(16, 16, 8)
    np.testing.assert_allclose(k.emulate(a, b), a @ b, rtol=1e-5, atol=1e-5)


@needs_cxx
def test_misaligned_argument_refused():
    k = compiled(three_stage)
    a, b = gemm_args(128, 64, 48)
    raw = np.zeros(a.size + 1, np.float32)
    view = raw[1:].reshape(a.shape)
    view[...] = a
    with pytest.raises(ValueError, match=r"argument 'A': the kernel accesses it 16 bytes at a "
                                         r"time and its address .* is not a multiple of 16"):
        k.emulate(view, b)


# ---------------------------------------------------------------- layouts
def test_layout_arguments_checked():
    f = algorithm(16, 16, 16)
    u = f.computations["C"].update
    u.gpu_tile("i", "j", 4, 4)
    A = f.buffers["A"]
    for kw, msg in ((dict(order=(0, 0)), "order must be a permutation"),
                    (dict(pad=-1), "pad must be an int >= 0"),
                    (dict(pad=4, swizzle=True), "pad or swizzle, not both"),
                    (dict(vector=8), r"vector x 4 bytes <= 16"),
                    (dict(vector=3), "power of 2")):
        with pytest.raises(ValueError, match=msg):
            u.cache_shared(A, "j0", **kw)
    assert "A_shared" not in f.computations          # refused: nothing changed


def test_tile_layouts_in_the_source():
    src = compiled(three_stage).source
    # A transposed, rows padded to 64 + 4, three stages of 8 rows each
    assert "__shared__ __align__(16) float A_shared_tile[1632];" in src
    swz = compiled(no_pipeline_swizzled).source
    assert "A_shared_tile[tpy_swizzle(" in swz and "int64_t tpy_swizzle(" in swz


# ------------------------------------------------------------------ pipeline
def test_pipeline_one_barrier_per_step_and_waits_derived():
    plan, body = lowered_gpu(three_stage())
    waits = [s.wait for s in ir.walk_stmts(body) if isinstance(s, ir.Barrier)]
    assert waits == [1, 0]     # per step: stages - 2 groups may stay in flight; after: none
    assert set(plan.async_stmts) == {"A_shared", "B_shared"}
    src = compiled(three_stage).source
    assert "for (int64_t k0 = -2; k0 < 6; k0++) {" in src
    assert "tpy_cp_async_commit();\n" in src and "tpy_cp_async_wait<1>();" in src
    assert "tpy_cp_async_wait<0>();" in src             # all of them after the loop
    assert src.count("__syncthreads();") == 2


@needs_cxx
@pytest.mark.parametrize("edit", ["lax wait", "no wait", "no barrier"])
def test_emulator_catches_a_removed_wait_or_barrier(edit):
    k = compiled(three_stage)
    src = {"lax wait": k.source.replace("tpy_cp_async_wait<1>();", "tpy_cp_async_wait<2>();"),
           "no wait": k.source.replace("tpy_cp_async_wait<1>();", ""),
           "no barrier": k.source.replace("__syncthreads();", "")}[edit]
    assert src != k.source
    a, b = gemm_args(128, 64, 48)
    errs = [np.abs(emulate_source(k, src, a, b, order=o, seed=3) - a @ b).max() for o in ORDERS]
    assert max(errs) > 1e-2


def pipelined_plain(stages=2):
    """The classic shared-tile GEMM, pipelined: x/y threads, no vectors."""
    from schedules.solvers import gemm_cuda
    f = gemm_cuda.function(64, 48, 64, tile=32, tk=8, micro=4)
    f.computations["C"].update.pipeline("k0", stages=stages)
    return f


@needs_cxx
def test_pipeline_of_the_classic_gemm():
    k = compiled(pipelined_plain)
    a, b = gemm_args(64, 48, 64)
    for order in ORDERS:
        np.testing.assert_allclose(k.emulate(a, b, order=order, seed=2), a @ b,
                                   rtol=1e-4, atol=1e-4)
    np.testing.assert_allclose(pipelined_plain().compile()(a, b), a @ b, rtol=1e-4, atol=1e-4)
    assert k.source.count("__syncthreads();") == 2       # one per k step, one after
    assert "tpy_cp_async<4>(" in k.source and "tpy_cp_async_wait<0>();" in k.source


def test_pipeline_refusals():
    f = pipelined_plain.__wrapped__() if hasattr(pipelined_plain, "__wrapped__") else None
    from schedules.solvers import gemm_cuda
    f = gemm_cuda.function(64, 48, 64, tile=32, tk=8, micro=4)
    u = f.computations["C"].update
    with pytest.raises(ValueError, match="stages must be an int from 2 to 8"):
        u.pipeline("k0", stages=1)
    with pytest.raises(ValueError, match="no copy is computed at 'k1'"):
        u.pipeline("k1", stages=2)
    with pytest.raises(ValueError, match="bound to the GPU"):
        u.pipeline("i0", stages=2)
    commands = list(f._commands)
    u.pipeline("k0", stages=2)
    with pytest.raises(ValueError, match="already pipelined"):
        u.pipeline("k0", stages=3)
    f.undo()
    assert f._commands == commands and f.buffers["A_shared_tile"].tile["stages"] == 1


def test_pipeline_without_the_slots_is_refused_by_the_dependences():
    """The storage is the legality check's to prove: with one slot (the
    tile put back as it was), the copy running ahead overwrites what the
    iteration before still reads."""
    from schedules.solvers import gemm_cuda
    from tiramisu_py.commands.gpu_copies import store_tile
    f = gemm_cuda.function(64, 48, 64, tile=32, tk=8, micro=4)
    f.computations["C"].update.pipeline("k0", stages=2)
    buf = f.buffers["A_shared_tile"]
    store_tile(f.computations["A_shared"], buf, dict(buf.tile, stages=1), "test")
    f._state_cache = f._model_cache = None
    with pytest.raises(tp.IllegalScheduleError, match=r"C_update.pipeline\(k0, stages=2\) is "
                                                      r"illegal"):
        f.compile(target="cuda")


def short_pipeline():
    """Three stages over three k steps: isl splits the k loop (the copies'
    iterations, then the reads'); the barrier after it orders them."""
    return small_warp(64, 64, 24, stages=3)


@needs_cxx
def test_short_pipeline_split_by_isl():
    k = compiled(short_pipeline)
    assert k.source.count("for (int64_t k0 =") == 2
    check_emulated(k, 64, 64, 24)


# ------------------------------------------------------------- the library
def test_solver_function_per_size_and_device():
    from schedules.solvers import gemm_cuda
    cmds = gemm_cuda.solver_function(256, 256, 64, "sm_90").schedule_commands()
    assert "C_update.pipeline(k0, stages=4)" in cmds and "C_update.bind(i_w, 'warp.y')" in cmds
    assert "C_update.pipeline(k0, stages=3)" in \
        gemm_cuda.solver_function(256, 256, 64, "sm_80").schedule_commands()
    assert not any("pipeline" in c for c in gemm_cuda.solver_function(64, 64, 8)
                   .schedule_commands())                   # one k step: nothing to pipeline
    assert not any("warp" in c for c in gemm_cuda.solver_function(16, 40, 8)
                   .schedule_commands())                   # below a warp tile: the classic
    assert warp.params(1024, 1024, 1022)["vector"] == 1     # rows of 1022: scalar accesses
    with pytest.raises(ValueError, match="has 64 threads, not 32"):
        warp.function(128, 128, 32, tm=2)
    with pytest.raises(TypeError, match="unknown parameter"):
        warp.function(128, 128, 32, tiles=4)


def test_device_records_in_the_tuning_store(tmp_path, monkeypatch):
    from schedules.core import tuned
    from schedules.problems.gemm import GemmProblem
    from schedules.solvers.gemm_cuda import CudaTiled
    from tiramisu_py.tuning.confirm import Verdict
    monkeypatch.setenv("TIRAMISU_PY_CACHE", str(tmp_path))
    solver, p = CudaTiled(), GemmProblem("gemm", 2048, 2048, 2048, "cuda", device="cuda")
    h200 = tuned.device_key("sm_90", "NVIDIA H200")
    assert tuned.recorded(solver, p, h200) == {} and tuned.recorded(solver, p) == {}
    kept = Verdict(2.0, 1.0, 0.5, 0.5, 0.5, 12, True, "kept")
    tuned.save(solver, p, {"stages": 2}, kept, 3, device=h200)
    assert tuned.recorded(solver, p, h200) == {"stages": 2}
    assert tuned.recorded(solver, p, tuned.device_key("sm_80", "NVIDIA A100")) == {}
    key = tuned.record_key(solver, p, h200)
    assert '"device": {"arch": "sm_90"' in key and '"host"' not in key
    assert "on NVIDIA H200 (sm_90)" in tuned.describe(key, tuned.records()[key])


@needs_cxx
def test_library_gemm_on_the_gpu_path_emulated(monkeypatch):
    import schedules
    from tiramisu_py.runtime.cuda_kernel import CudaKernel
    monkeypatch.setattr(CudaKernel, "__call__",
                        lambda self, *a, **kw: self.emulate(*a, order="reverse", **kw))
    a, b = gemm_args(96, 64, 40)
    np.testing.assert_allclose(schedules.gemm(a, b, target="cuda"), a @ b, rtol=1e-4, atol=1e-4)


def test_renamed_keeps_the_memory_scope_and_layout():
    """codegen.c.names.renamed (C keywords as names) rebuilt an Allocate as a
    global one: a shared tile would have become a per-thread array."""
    from codegen.c.names import renamed
    body = ir.Allocate("int", "float32", (ir.const(4),), ir.Block([]), scope="shared",
                       layout={"swizzle": 4, "row": 4})
    fn = ir.LoweredFunction("f", [], [], body)
    out = renamed(fn, {"int": "tp_int", "f": "f"}).body
    assert (out.array, out.scope, out.layout) == ("tp_int", "shared", {"swizzle": 4, "row": 4})

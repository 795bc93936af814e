"""Register tiles on the GPU: ``accumulate_locally`` over the block-level k
loop gives each thread a local tile that lives across the k-steps (Allocate
scope ``thread``), and the library's GEMM with shared tiles and a 4 x 4
micro-tile per thread.  Legality (accepted and refused, with the instances
named), the printed per-thread tile, emulation == NumPy in three thread
orders, a removed barrier caught, CPU runs == NumPy, cubins without spills
(skipped without nvcc)."""
import numpy as np
import pytest

import tiramisu_py as tp
from codegen import ir
from codegen.accumulate import accumulate_locally
from codegen.simplify import interval
from schedules.solvers import gemm_cuda as gpu_gemm
from schedules.blocks.blis import algorithm
from tests.codegen.cuda.test_cuda import (ORDERS, cuda_kernel, emulate_source, lowered_gpu, needs_cxx,
                             needs_nvcc)

RNG = np.random.default_rng(2020)
SMALL = (37, 29, 53)          # odd: partial block tiles, partial micro-tiles, partial k-steps


def gemm_args(n, m, k):
    return (RNG.standard_normal((n, k), dtype=np.float32),
            RNG.standard_normal((k, m), dtype=np.float32))


def small_regtile():
    """32 x 32 of C per block, 8 x 8 threads, 4 x 4 per thread, k-steps of 8."""
    return gpu_gemm.function(*SMALL, tile=32, tk=8, micro=4)


def library_gemm():
    """The library's defaults (64 x 64, 16 x 16 threads, 4 x 4, tk 16) on odd sizes."""
    return gpu_gemm.function(70, 90, 37)


def mapped(n=8, m=8, k=8):
    """GEMM update with i, j on blocks (tiles of 4) and threads, k split."""
    f = algorithm(n, m, k)
    c = f.computations["C"]
    c.gpu_tile("i", "j", 4, 4)
    return f, c.update


# ------------------------------------------------------------------ legality
def test_library_gemm_plan_and_per_thread_tile_in_source():
    plan, body = lowered_gpu(small_regtile())
    assert sum(isinstance(s, ir.Barrier) for s in ir.walk_stmts(body)) == 2
    k = cuda_kernel(small_regtile)
    src = k.source
    assert "float C_local[16];  /* per-thread tile (registers) */" in src
    assert "__launch_bounds__(64, 1)" in src
    # inside the k-step loop the update reads and writes the tile, never C
    kloop = src[src.index("for (int64_t k0"):src.rindex("__syncthreads();")]
    assert "C_local[i_reg * 4 + j_reg] = C_local[i_reg * 4 + j_reg] + A_shared_tile" in kloop
    assert "C[" not in kloop
    # the slot loops run a constant 4 times (unrolled), their bound a guard
    assert src.count("for (int64_t i_reg = 0; i_reg < 4; i_reg++)") == 3
    assert src.count("#pragma unroll") == 6
    # combined into C once per thread, after the k loop
    tail = src[src.rindex("__syncthreads();"):]
    assert "= C[" in tail and "+ C_local[i_reg * 4 + j_reg];" in tail


def test_accumulate_on_a_thread_loop_refused():
    f, u = mapped()
    u.tile("i", "j", 4, 4)
    u.split("k", 4)
    u.reorder("i0", "j0", "k0", "i1", "k1", "j1")
    u.bind("i0", "block.y").bind("j0", "block.x").bind("i1", "thread.y").bind("k1", "thread.x")
    u.accumulate_locally("k1", allow_reassociation=True)
    with pytest.raises(tp.IllegalScheduleError,
                       match=r"C_update\.accumulate_locally\(k1\) is illegal on the GPU: 'k1' is "
                             r"a thread loop of C_update \(thread\.x\).*not combine partial "
                             r"results of different threads"):
        f.compile(target="cuda")


def test_accumulate_on_a_block_loop_refused():
    f, u = mapped()
    u.tile("i", "j", 4, 4)
    u.split("k", 4)
    u.reorder("k0", "i0", "j0", "i1", "j1", "k1")
    u.bind("k0", "block.z").bind("i0", "block.y").bind("j0", "block.x")
    u.bind("i1", "thread.y").bind("j1", "thread.x")
    u.accumulate_locally("k0", allow_reassociation=True)
    with pytest.raises(tp.IllegalScheduleError,
                       match=r"accumulate_locally\(k0\) is illegal on the GPU: 'k0' is a block "
                             r"loop of C_update \(block\.z\)"):
        f.compile(target="cuda")


def test_accumulate_on_a_host_loop_refused():
    f, u = mapped()
    u.tile("i", "j", 4, 4)
    u.split("k", 4)
    u.reorder("k0", "i0", "j0", "i1", "j1", "k1")
    u.bind("i0", "block.y").bind("j0", "block.x").bind("i1", "thread.y").bind("j1", "thread.x")
    u.accumulate_locally("k0", allow_reassociation=True)
    with pytest.raises(tp.IllegalScheduleError,
                       match=r"'k0' is a host loop of C_update \(one kernel launch per "
                             r"iteration\)"):
        f.compile(target="cuda")


def test_cpu_rules_apply_on_the_gpu_too():
    # without allow_reassociation: legal (the tile copied in and out, the
    # program's order; codegen.accumulate leaves a GPU loop in memory)
    f = gpu_gemm.schedule(algorithm(*SMALL), 32, 8, 1)
    f.computations["C"].update.accumulate_locally("k0")
    _, body = lowered_gpu(f)
    marked = [s for s in ir.walk_stmts(body) if isinstance(s, ir.For) and s.attrs.get("accumulate")]
    assert marked and all(s.attrs.get("accumulate_exact") for s in marked)
    # the element changes with the loop: names two instances
    f = gpu_gemm.schedule(algorithm(*SMALL), 32, 8, 4)
    f.computations["C"].update.accumulate_locally("i_reg", allow_reassociation=True)
    with pytest.raises(tp.IllegalScheduleError,
                       match=r"the element of 'C' that C_update updates changes with loop "
                             r"'i_reg'.*e\.g\. C_update\(.*\) and C_update\(.*\)"):
        f.compile(target="cuda")


def test_threads_sharing_an_element_refused_as_a_race():
    """k on threads: threads of one block update one C element; a local tile
    per thread would hide it, but the mapping is refused before."""
    f, u = mapped()
    u.tile("i", "j", 4, 4)
    u.split("k", 4)
    u.reorder("i0", "j0", "k0", "i1", "k1", "j1")
    u.bind("i0", "block.y").bind("j0", "block.x").bind("k1", "thread.y").bind("j1", "thread.x")
    u.accumulate_locally("k0", allow_reassociation=True)
    with pytest.raises(tp.IllegalScheduleError,
                       match=r"two threads of one block depend on each other.*C_update\("):
        f.compile(target="cuda")


def test_gpu_gemm_argument_checks():
    with pytest.raises(ValueError, match=r"gpu_gemm: micro must be a positive int, got 0"):
        gpu_gemm.function(8, 8, 8, micro=0)
    with pytest.raises(ValueError, match=r"tile \(64\) must be a multiple of micro \(3\)"):
        gpu_gemm.function(8, 8, 8, micro=3)
    with pytest.raises(ValueError, match=r"64 x 64 threads per block, beyond the limit"):
        gpu_gemm.function(8, 8, 8, tile=128, micro=2)


# ------------------------------------------------------------------ loop IR pass
def test_interval_knows_division_by_constants():
    def b(op, x, y):
        return ir.Binary(op, x, y, ir.INDEX)
    j, neg = ir.Var("j", ir.INDEX), (lambda x: ir.Unary("neg", x, ir.INDEX))
    e = b("add", neg(b("div", b("add", j, ir.const(3)), ir.const(8))), ir.const(4))
    assert interval(e, {"j": (0, 7)}) == (3, 4)
    assert interval(b("floordiv", neg(j), ir.const(4)), {"j": (0, 7)}) == (-2, 0)
    assert interval(b("div", neg(j), ir.const(4)), {"j": (0, 7)}) == (-1, 0)
    assert interval(b("div", j, ir.Var("n", ir.INDEX)), {"j": (0, 7)}) == (None, None)


def test_thread_tile_is_gpu_only():
    plan, body = lowered_gpu(small_regtile())
    fn = ir.LoweredFunction("g", [], [ir.ArrayArg(n, "float32", (ir.const(a), ir.const(b)), n == "C")
                                      for n, a, b in (("A", 37, 53), ("B", 53, 29), ("C", 37, 29))],
                            body, {})
    body = accumulate_locally(fn).body
    tiles = [s for s in ir.walk_stmts(body) if isinstance(s, ir.Allocate)]
    assert [(t.array, t.scope, tuple(int(d.value) for d in t.shape)) for t in tiles] == \
        [("C_local", "thread", (4, 4))]
    with pytest.raises(ValueError, match=r"'C_local' has one copy per GPU thread"):
        ir.for_cpu(body)


# ------------------------------------------------------------------ results
def test_cpu_runs_match_numpy():
    for build, shape in ((small_regtile, SMALL), (library_gemm, (70, 90, 37))):
        a, b = gemm_args(*shape)
        for target in ("cpu", "llvm"):
            np.testing.assert_allclose(build().compile(target=target)(a, b), a @ b,
                                       rtol=1e-4, atol=1e-4)


@needs_cxx
@pytest.mark.parametrize("build,shape", [(small_regtile, SMALL), (library_gemm, (70, 90, 37))])
def test_emulated_matches_numpy_in_every_order(build, shape):
    k = cuda_kernel(build)
    a, b = gemm_args(*shape)
    for order in ORDERS:
        np.testing.assert_allclose(k.emulate(a, b, order=order, seed=5), a @ b,
                                   rtol=1e-4, atol=1e-4)


@needs_cxx
def test_per_thread_serial_loop_accumulation_emulated():
    """accumulate_locally over a serial loop inside the thread loops (each
    thread's k loop): a one-slot tile, no thread loops in between."""
    def build():
        f, u = mapped(9, 7, 11)
        u.gpu_tile("i", "j", 4, 4)
        u.accumulate_locally("k", allow_reassociation=True)
        return f
    k = cuda_kernel(build)
    assert "float C_local[1];" in k.source
    a, b = gemm_args(9, 7, 11)
    for order in ORDERS:
        np.testing.assert_allclose(k.emulate(a, b, order=order), a @ b, rtol=1e-4, atol=1e-4)


@needs_cxx
@pytest.mark.parametrize("which", [0, 1])
def test_emulator_catches_each_removed_barrier(which):
    k = cuda_kernel(small_regtile)
    parts = k.source.split("__syncthreads();")
    assert len(parts) == 3
    keep = ["/* removed */", "__syncthreads();"] if which == 0 else \
        ["__syncthreads();", "/* removed */"]
    src = parts[0] + keep[0] + parts[1] + keep[1] + parts[2]
    a, b = gemm_args(*SMALL)
    errs = [np.abs(emulate_source(k, src, a, b, order=o, seed=1) - a @ b).max() for o in ORDERS]
    assert max(errs) > 1e-2


# ------------------------------------------------------------------ cubins
@needs_nvcc
@pytest.mark.parametrize("build,threads,registers", [
    (library_gemm, 256, (64, 128)),
    (lambda: gpu_gemm.function(4096, 4096, 4096), 256, (32, 96))])
def test_cubins_without_spills_and_resources_recorded(build, threads, registers):
    k = build().compile(target="cuda")
    assert set(k.cubins) == {"sm_80", "sm_90"}
    assert k.launch_plan.kernels[1].block == (16, 16, 1)
    for arch, res in k.resources.items():
        r = res["gemm_k1"]
        assert r.spill_stores == r.spill_loads == 0
        assert r.stack_bytes == 0                 # the tile is in registers, not local memory
        assert r.shared_bytes == 2 * 64 * 16 * 4 and r.barriers == 1
        assert registers[0] <= r.registers <= registers[1]


@needs_cxx
def test_micro_1_is_the_plain_shared_tile_gemm():
    def build():
        return gpu_gemm.function(*SMALL, tile=16, tk=16, micro=1)
    k = cuda_kernel(build, cubins=True)
    assert "C_local" not in k.source and k.launch_plan.kernels[1].block == (16, 16, 1)
    a, b = gemm_args(*SMALL)
    for order in ORDERS:
        np.testing.assert_allclose(k.emulate(a, b, order=order), a @ b, rtol=1e-4, atol=1e-4)
    for arch, res in k.resources.items():
        r = res["gemm_k1"]
        # no per-thread tile: the register floor of the launch bounds, not 255
        from codegen.cuda.printer import REGISTER_FLOOR
        assert r.spill_stores == 0 and r.shared_bytes == 2 * 16 * 16 * 4
        assert r.registers <= REGISTER_FLOOR


@needs_cxx
@pytest.mark.parametrize("shape,barriers", [((1, 1, 1), 0), ((5, 3, 2), 1), ((64, 64, 16), 1),
                                            ((3, 130, 7), 1)])
def test_one_iteration_block_and_k_loops(shape, barriers):
    """isl drops loops with one iteration: a GEMM within one tile has no block
    loop left (one kernel, one block), a single k-step has no k0 loop (the
    copy -> compute barrier stays, placed where the statements part)."""
    k = gpu_gemm.function(*shape).compile(target="cuda")
    assert len(k.launch_plan.kernels) == 2
    assert k.source.count("__syncthreads();") == barriers
    a, b = gemm_args(*shape)
    for order in ORDERS:
        np.testing.assert_allclose(k.emulate(a, b, order=order, seed=7), a @ b,
                                   rtol=1e-4, atol=1e-4)
    np.testing.assert_allclose(gpu_gemm.function(*shape).compile()(a, b), a @ b,
                               rtol=1e-4, atol=1e-4)

"""``cache_local(src, at_loop)``: per-thread copies (register fragments) on
the GPU.  A 3-point stencil (each thread copies its 3 inputs) and the
library GEMM with ``fragments=True`` (per k step, the 4 A and 4 B values of a
4 x 4 micro-tile): the printed per-thread arrays, no barrier derived for
them, emulation == NumPy in three thread orders, CPU runs (C, LLVM) ==
NumPy, cubins without spills or stack frame (skipped without nvcc), and the
refused cases with their messages."""
import numpy as np
import pytest

import tiramisu_py as tp
from codegen import ir
from schedules.solvers import gemm_cuda as gpu_gemm
from tests.codegen.cuda.test_cuda import ORDERS, cuda_kernel, lowered_gpu, needs_cxx, needs_nvcc

RNG = np.random.default_rng(2021)
SMALL = (37, 29, 53)          # odd: partial block tiles, micro-tiles and k-steps
N = 200


def stencil(n=N, cache=True):
    """Y[i] = X[i] + 2 X[i+1] + X[i+2]; blocks of 32 threads, one Y each; each
    thread copies its 3 values of X into registers at its thread loop."""
    f = tp.Function("stencil3", params={"N": n})
    i = f.var("i", 0, n)
    x = f.input("X", (n + 2,), tp.float32)
    y = f.computation("Y", [i], x[i] + 2.0 * x[i + 1] + x[i + 2])
    y.split(i, 32)
    y.bind("i0", "block.x").bind("i1", "thread.x")
    if cache:
        y.cache_local(x, "i1")
    return f


def stencil_ref(x):
    return x[:-2] + 2.0 * x[1:-1] + x[2:]


def gemm_args(n, m, k):
    return (RNG.standard_normal((n, k), dtype=np.float32),
            RNG.standard_normal((k, m), dtype=np.float32))


def small_fragments():
    return gpu_gemm.function(*SMALL, tile=32, tk=8, micro=4, fragments=True)


def library_fragments():
    return gpu_gemm.function(70, 90, 37, fragments=True)


# ------------------------------------------------------------------ source, plan
def test_stencil_per_thread_copy_and_no_barrier():
    plan, body = lowered_gpu(stencil())
    assert not any(isinstance(s, ir.Barrier) for s in ir.walk_stmts(body))
    src = cuda_kernel(stencil).source
    assert "float X_local_regs[3];  /* per-thread copy (registers) */" in src
    assert "X_local_regs[" in src[src.index("Y["):]          # Y reads the copy, not X
    body = src[src.index("Y["):]
    assert "= X_local_regs[" in body and " X[" not in body.split(";")[0]


def test_gemm_fragments_in_source_and_same_barriers():
    plan, body = lowered_gpu(small_fragments())
    assert sum(isinstance(s, ir.Barrier) for s in ir.walk_stmts(body)) == 2
    assert "float A_local_regs[4];" in cuda_kernel(small_fragments).source
    src = cuda_kernel(library_fragments).source       # 64 x 64 tiles, 16 x 16 threads
    assert "float A_local_regs[4];  /* per-thread copy (registers) */" in src
    assert "float B_local_regs[4];  /* per-thread copy (registers) */" in src
    # filled from the shared tiles at each k1 step, slot index without div/mod
    assert "A_local_regs[(A_local_00 - 4 * i0) * 1 + 0] = A_shared_tile[" in src
    assert "B_local_regs[(int64_t)0 * 4 + (B_local_10 - 4 * j0)] = B_shared_tile[" in src
    # the micro-kernel reads registers only
    assert ("C_local[i_reg * 4 + j_reg] = C_local[i_reg * 4 + j_reg] + A_local_regs[i_reg * 1 + 0]"
            " * B_local_regs[(int64_t)0 * 4 + j_reg];") in src
    assert src.count("__syncthreads();") == 2


def test_footprint_shape_is_stride_compressed():
    f = small_fragments()
    assert [int(d.value) for d in f.buffers["A_local_regs"].shape] == [4, 1]   # 4 rows 8 apart
    assert [int(d.value) for d in f.buffers["B_local_regs"].shape] == [1, 4]
    assert f.buffers["A_local_regs"].memory == "local"


# ------------------------------------------------------------------ results
@needs_cxx
@pytest.mark.parametrize("build,shape", [(small_fragments, SMALL),
                                         (library_fragments, (70, 90, 37))])
def test_gemm_fragments_emulated_and_cpu_match_numpy(build, shape):
    a, b = gemm_args(*shape)
    k = cuda_kernel(build)
    for order in ORDERS:
        np.testing.assert_allclose(k.emulate(a, b, order=order), a @ b, rtol=1e-4, atol=1e-4)
    for target in ("c", "llvm"):
        np.testing.assert_allclose(build().compile(target=target)(a, b), a @ b,
                                   rtol=1e-4, atol=1e-4)


@needs_cxx
def test_stencil_emulated_and_cpu_match_numpy():
    x = RNG.standard_normal(N + 2, dtype=np.float32)
    k = cuda_kernel(stencil)
    for order in ORDERS:
        np.testing.assert_allclose(k.emulate(x, order=order), stencil_ref(x), rtol=1e-5)
    for target in ("c", "llvm"):
        np.testing.assert_allclose(stencil().compile(target=target)(x), stencil_ref(x),
                                   rtol=1e-5)


# ------------------------------------------------------------------ cubins
@needs_nvcc
@pytest.mark.parametrize("build,kernel,stack", [
    (library_fragments, "gemm_k1", 0),
    (lambda: gpu_gemm.function(4096, 4096, 4096, fragments=True), "gemm_k1", 0),
    # a sliding window: slot (32*i0 + i1 + c) % 3 is not a constant after
    # unrolling, so ptxas keeps the 3 floats in local memory (no spill)
    (stencil, "stencil3_k0", 16)])
def test_cubins_without_spills_resources_recorded(build, kernel, stack):
    k = build().compile(target="cuda")
    assert set(k.cubins) == {"sm_80", "sm_90"}
    for arch, res in k.resources.items():
        r = res[kernel]
        assert r.spill_stores == r.spill_loads == 0
        assert r.stack_bytes <= stack        # 0: the copies are registers, not local memory
        assert 0 < r.registers <= 255


def test_parse_ptxas_with_a_stack_frame():
    """ptxas puts "cumulative stack size" between barriers and smem when a
    kernel has a stack frame (a local array indexed at run time); the smem
    must still be read (it was reported as 0 before)."""
    from codegen.cuda.toolchain import parse_ptxas
    log = ("ptxas info    : Compiling entry function 'k' for 'sm_80'\n"
           "ptxas info    : Function properties for k\n"
           "    16 bytes stack frame, 0 bytes spill stores, 0 bytes spill loads\n"
           "ptxas info    : Used 32 registers, used 1 barriers, 16 bytes cumulative stack size, "
           "1024 bytes smem, 364 bytes cmem[0]\n")
    r = parse_ptxas(log)["k"]
    assert (r.registers, r.barriers, r.stack_bytes, r.shared_bytes) == (32, 1, 16, 1024)


# ------------------------------------------------------------------ refused
def test_unmapped_statement_refused():
    f2 = tp.Function("plain", params={"N": 8})
    i = f2.var("i", 0, 8)
    x = f2.input("X", (10,), tp.float32)
    y = f2.computation("Y", [i], x[i] + x[i + 2])
    with pytest.raises(ValueError, match=r"Y\.cache_local\(X, i\): Y has no thread loop.*"
                                         r"bind the thread loops first"):
        y.cache_local(x, "i")


def test_block_level_loop_refused():
    f = gpu_gemm.function(*SMALL, tile=32, tk=8, micro=4)
    u = f.computations["C"].update
    with pytest.raises(ValueError, match=r"cache_local\(A_shared, k0\): 'k0' is outside the "
                                         r"thread loop 'j_th'.*use cache_shared"):
        u.cache_local(f.computations["A_shared"], "k0")


def shared_then_local():
    """The library schedule, then per-thread copies of its shared tiles: the
    tiles are retargeted to be computed at the copies (nested compute_at)."""
    f = gpu_gemm.function(*SMALL, tile=32, tk=8, micro=4)
    u = f.computations["C"].update
    u.cache_local(f.computations["A_shared"], "k1")
    u.cache_local(f.computations["B_shared"], "k1")
    return f


@needs_cxx
def test_copy_of_a_shared_tile_after_cache_shared():
    f = shared_then_local()
    cmds = f.schedule_commands()
    assert "A_shared.compute_at(A_shared_local, k0)" in cmds
    assert "A_shared.compute_at(C_update, k0)" not in cmds
    assert cmds.index("A_shared_local.compute_at(C_update, k1)") < \
        cmds.index("A_shared.compute_at(A_shared_local, k0)")
    plan, body = lowered_gpu(shared_then_local())
    assert sum(isinstance(s, ir.Barrier) for s in ir.walk_stmts(body)) == 2
    k = cuda_kernel(shared_then_local)
    assert "float A_shared_local_regs[4];  /* per-thread copy (registers) */" in k.source
    assert "= A_shared_local_regs[" not in k.source      # read by the micro-kernel only
    assert "* B_shared_local_regs[" in k.source
    a, b = gemm_args(*SMALL)
    for order in ORDERS:
        np.testing.assert_allclose(k.emulate(a, b, order=order), a @ b, rtol=1e-4, atol=1e-4)
    np.testing.assert_allclose(shared_then_local().compile(target="c")(a, b), a @ b,
                               rtol=1e-4, atol=1e-4)


def test_non_constant_footprint_refused():
    """A thread of Y[i, j] = 2 X[j] reads all of X: N elements, N a param."""
    f = tp.Function("bcast", params=["N"])
    i, j = f.var("i", 0, 64), f.var("j", 0, "N")
    x = f.input("X", ("N",), tp.float32)
    y = f.computation("Y", [i, j], x[j] * 2.0)
    y.split(i, 16)
    y.bind("i0", "block.x").bind("i1", "thread.x")
    with pytest.raises(ValueError, match=r"Y\.cache_local\(X, i1\): the part of 'X' one thread "
                                         r"reads in one iteration of 'i1' is not of constant size"):
        y.cache_local(x, "i1")


def test_copy_reading_another_threads_write_refused():
    """T is written at the thread loop; Y's copy at its inner loop r reads
    T[i + r], written by the next thread in the same iteration: no barrier
    can be placed inside the thread loops, so compile() refuses it."""
    f = tp.Function("nbr", params={"N": 64})
    k, i, r = f.var("k", 0, 66), f.var("i", 0, 64), f.var("r", 0, 2)
    x = f.input("X", (66,), tp.float32)
    t = f.computation("T", [k], x[k] * 2.0)
    y = f.computation("Y", [i, r], t[i + r] + 1.0)
    t.split(k, 16)
    t.bind("k0", "block.x").bind("k1", "thread.x")
    y.split(i, 16)
    y.bind("i0", "block.x").bind("i1", "thread.x")
    y.after(t, "k1")
    y.cache_local(t, "r")
    with pytest.raises(tp.IllegalScheduleError, match=r"is illegal: .*T\(k=\d+\).*T_local"):
        f.compile(target="cuda")


def test_too_big_footprint_refused():
    f = tp.Function("rows", params={"N": 64})
    i, j = f.var("i", 0, 64), f.var("j", 0, 300)
    x = f.input("X", (64, 300), tp.float32)
    y = f.computation("Y", [i, j], x[i, j] * 2.0)
    y.split(i, 16)
    y.bind("i0", "block.x").bind("i1", "thread.x")
    with pytest.raises(ValueError, match=r"Y\.cache_local\(X, i1\): one thread's part of 'X' "
                                         r"has 1 x 300 = 300 elements, beyond 256"):
        y.cache_local(x, "i1")


def test_source_written_inside_the_loop_refused():
    f = tp.Function("two", params={"N": 64})
    i = f.var("i", 0, 64)
    x = f.input("X", (64,), tp.float32)
    t = f.computation("T", [i], x[i] * 2.0)
    y = f.computation("Y", [i], t[i] + 1.0)
    for s in (t, y):
        s.split(i, 16)
        s.bind("i0", "block.x").bind("i1", "thread.x")
    y.after(t, "i1")
    with pytest.raises(ValueError, match=r"Y\.cache_local\(T, i1\): T writes 'T' inside 'i1', "
                                         r"so a copy made at the start of each iteration "
                                         r"would be stale"):
        y.cache_local(t, "i1")


def test_flow_between_threads_through_a_local_array_refused():
    """The rule itself (no public command builds such a schedule): B, read
    by C in another thread of the block, marked per-thread by hand."""
    from tests.codegen.cuda.test_cuda import reverse_in_block
    f = reverse_in_block(64)
    buf = f.buffer("B_regs", (64, 32), tp.float32)
    buf.memory = "local"
    f.computations["B"].store_in(buf)
    with pytest.raises(tp.IllegalScheduleError,
                       match=r"is illegal: a value flows between threads through the per-thread "
                             r"array 'B_regs'.*B\(i=\d+, j=\d+\).*C\(i=\d+, j=\d+\)"):
        f.compile(target="cuda")

"""GPU loops of one iteration (fixed sizes, one block per axis, a statement
fixed at one thread): isl's AST generator eliminates such loops and
substitutes their value, and the lowering must put them back as block /
thread loops of extent 1 running exactly that value (tiramisu_py/lower/ast.py,
``AstLowering.degenerate``).  Each kernel compiles for target="cuda",
emulates equal to NumPy in three thread orders, runs on the CPU equal to
NumPy, and prints the expected blockIdx / threadIdx guards."""
import functools
import shutil

import numpy as np
import pytest

import schedules
import tiramisu_py as tp
from codegen.cuda.printer import evaluate
from schedules.solvers import conv_cuda as gpu_conv
from schedules.problems.conv import ConvShape
from tests.codegen.cuda.test_cuda import reverse_in_block

needs_nvcc = pytest.mark.skipif(shutil.which("nvcc") is None, reason="nvcc is not installed")
needs_cxx = pytest.mark.skipif(not any(shutil.which(c) for c in ("g++", "c++", "clang++")),
                               reason="no C++ compiler for the CUDA emulator")
ORDERS = ("forward", "reverse", "shuffle")
RNG = np.random.default_rng(31)


@functools.lru_cache(maxsize=None)
def cuda_kernel(build, *args, cubins=False):
    """``build(*args)`` compiled for CUDA once per session; printed and
    emulated only unless ``cubins`` (nvcc or NVRTC for sm_80/sm_90)."""
    if cubins:
        return build(*args).compile(target="cuda")
    from tests.codegen.cuda.test_cuda import emulation_cubins
    with emulation_cubins():
        return build(*args).compile(target="cuda")


def grids(k):
    return [tuple(evaluate(g, {}) for g in kl.grid) for kl in k.launch_plan.kernels]


def check_everywhere(build, args, want, *build_args, tol=1e-4, **kw):
    """CPU (C backend) and the emulated CUDA in three orders equal ``want``."""
    np.testing.assert_allclose(build(*build_args).compile(target="c")(*args, **kw), want,
                               rtol=tol, atol=tol)
    k = cuda_kernel(build, *build_args)
    for order in ORDERS:
        np.testing.assert_allclose(k.emulate(*args, order=order, seed=7, **kw), want,
                                   rtol=tol, atol=tol)
    return k


# ------------------------------------------------------------ GEMM
@needs_cxx
def test_shared_gemm_16_one_block():
    k = cuda_kernel(schedules.gemm_cuda_function, 16, 16, 16, cubins=True)
    src = k.source
    # the block loops of one iteration are back, as blocks: one block, 16 x 16 threads
    assert "const int64_t i0 = (int64_t)blockIdx.y;" in src and "if (i0 < 1) {" in src
    assert "const int64_t j0 = (int64_t)blockIdx.x;" in src and "if (j0 < 1) {" in src
    assert grids(k) == [(1, 1, 1), (1, 1, 1)]
    assert k.launch_plan.kernels[1].block == (16, 16, 1)
    # one k-step: the copies -> product barrier stays, the end-of-step one has no next step
    assert src.count("__syncthreads();") == 1
    a = RNG.standard_normal((16, 16), dtype=np.float32)
    b = RNG.standard_normal((16, 16), dtype=np.float32)
    np.testing.assert_allclose(schedules.gemm_cuda_function(16, 16, 16).compile(target="c")(a, b),
                               a @ b, rtol=1e-4, atol=1e-4)
    for order in ORDERS:
        np.testing.assert_allclose(k.emulate(a, b, order=order), a @ b, rtol=1e-4, atol=1e-4)
    if shutil.which("nvcc") or k.cubins:
        assert set(k.cubins) == {"sm_80", "sm_90"}
        for res in k.resources.values():
            r = res["gemm_k1"]
            assert r.spill_stores == r.spill_loads == 0 and r.barriers == 1


def gemm_tiled(n, m, k, ti=8, tj=16):
    """gpu_tile GEMM with fixed sizes (init and update fused in the thread loops)."""
    f = tp.Function("gemmt", params={"N": n, "M": m, "K": k})
    i, j, kk = f.var("i", 0, "N"), f.var("j", 0, "M"), f.var("k", 0, "K")
    a = f.input("A", ("N", "K"), tp.float32)
    b = f.input("B", ("K", "M"), tp.float32)
    c = f.computation("C", [i, j], 0.0)
    c[i, j] += a[i, kk] * b[kk, j]
    c.gpu_tile("i", "j", ti, tj)
    c.update.gpu_tile("i", "j", ti, tj)
    c.update.after(c, "j1")
    return f


@needs_cxx
@pytest.mark.parametrize("shape", [(8, 16, 5), (1, 16, 5), (1, 1, 3)])
def test_gpu_tile_gemm_one_block_per_axis(shape):
    """One block per axis; (1, 16, 5): the thread.y loop has one iteration too;
    (1, 1, 3): every GPU loop has one iteration (one thread)."""
    n, m, kk = shape
    a = RNG.standard_normal((n, kk), dtype=np.float32)
    b = RNG.standard_normal((kk, m), dtype=np.float32)
    k = check_everywhere(gemm_tiled, (a, b), a @ b, n, m, kk)
    src = k.source
    assert grids(k) == [(1, 1, 1)]
    assert k.launch_plan.kernels[0].block == (m, n, 1)
    for loop, idx, hi in (("i0", "blockIdx.y", 1), ("j0", "blockIdx.x", 1),
                          ("i1", "threadIdx.y", n), ("j1", "threadIdx.x", m)):
        assert f"const int64_t {loop} = (int64_t){idx};" in src
        assert f"if ({loop} < {hi}) {{" in src
    assert "threadIdx.y == 0" not in src and "threadIdx.x == 0" not in src


# ------------------------------------------------------------ a thread loop of one iteration
def fused_in_block(first, second, threads):
    """Loop i of both on block.x, the loops ``threads`` (None: none) on
    thread.x, ``second`` after ``first`` in i."""
    for s, t in zip((first, second), threads):
        s.bind("i", "block.x")
        if t is not None:
            s.bind(t, "thread.x")
    second.after(first, "i")


def one_thread(lo=3):
    """S runs in thread ``lo`` only (its thread loop has one value); C, fused
    with it in the block loop, runs 32 threads and reads what S wrote: a
    barrier between them."""
    f = tp.Function("onet", params=["N"])
    i, z, j = f.var("i", 0, "N"), f.var("z", lo, lo + 1), f.var("j", 0, 32)
    a = f.input("A", ("N", 32), tp.float32)
    s = f.computation("S", [i, z], a[i, z] * 2.0)
    c = f.computation("C", [i, j], a[i, j] + s[i, lo])
    fused_in_block(s, c, ("z", "j"))
    return f


def one_thread_on_the_diagonal():
    """As :func:`one_thread`, S skewed so that block i runs it in thread i: a
    thread loop of one iteration whose value depends on the block loop."""
    f = tp.Function("diag", params={"N": 4})
    i, z, j = f.var("i", 0, "N"), f.var("z", 0, 1), f.var("j", 0, 8)
    a = f.input("A", ("N", 8), tp.float32)
    s = f.computation("S", [i, z], a[i, i] * 2.0)
    c = f.computation("C", [i, j], a[i, j] + s[i, 0])
    s.skew("i", "z", 1)
    fused_in_block(s, c, ("z", "j"))
    return f


@needs_cxx
def test_thread_loop_of_one_iteration_runs_its_thread():
    a = RNG.standard_normal((3, 32), dtype=np.float32)
    k = check_everywhere(one_thread, (a,), a + 2 * a[:, 3:4])
    src = k.source
    # S in thread 3 only (the value the legality check assumed), then a barrier
    assert "const int64_t z = (int64_t)threadIdx.x;" in src
    assert "if (3 <= z && z < 4) {" in src
    assert src.count("__syncthreads();") == 1
    assert src.index("if (3 <= z") < src.index("__syncthreads();") < src.index("j < 32")
    assert k.launch_plan.kernels[0].block == (32, 1, 1)
    # the barrier is needed: without it, in forward order, threads 0-2 read S
    # before thread 3 writes it (S's memory holds no earlier value of these
    # inputs: fresh ones)
    from codegen.cuda.emulator import EmulatedFunction
    saved = k._emulated
    k._emulated = EmulatedFunction(src.replace("__syncthreads();", "/* removed */"),
                                   k.launch_plan)
    a = RNG.standard_normal((3, 32), dtype=np.float32)
    try:
        out = k.emulate(a, order="forward")
    finally:
        k._emulated = saved
    want = a + 2 * a[:, 3:4]
    assert not np.allclose(out[:, :3], want[:, :3])
    np.testing.assert_allclose(out[:, 3:], want[:, 3:], rtol=1e-6)


@needs_cxx
def test_thread_loop_of_one_iteration_valued_by_the_block_loop():
    a = RNG.standard_normal((4, 8), dtype=np.float32)
    k = check_everywhere(one_thread_on_the_diagonal, (a,), a + 2 * np.diag(a)[:, None])
    src = k.source
    assert "if (i <= z && z < i + 1) {" in src          # block i: thread i
    assert src.count("__syncthreads();") == 1
    assert grids(k) == [(4, 1, 1)] and k.launch_plan.kernels[0].block == (8, 1, 1)


def block_statement_first():
    """T has a block loop and no thread loop (thread 0 runs it); C, after it
    in the block, runs 32 threads and reads it."""
    f = tp.Function("blk", params=["N"])
    i, j = f.var("i", 0, "N"), f.var("j", 0, 32)
    a = f.input("A", ("N", 32), tp.float32)
    t = f.computation("T", [i], a[i, 0] + 1.0)
    c = f.computation("C", [i, j], a[i, j] * t[i])
    fused_in_block(t, c, (None, "j"))
    return f


@needs_cxx
def test_store_before_the_first_thread_loop_is_guarded():
    """The printer knows the block's threads before it prints the first
    store: a block-level store printed before any thread loop runs in thread 0
    only (as the legality check assumed)."""
    a = RNG.standard_normal((2, 32), dtype=np.float32)
    k = check_everywhere(block_statement_first, (a,), a * (a[:, :1] + 1))
    line = next(ln for ln in k.source.splitlines() if "T[" in ln and "=" in ln and "C[" not in ln)
    assert "if (threadIdx.x == 0) T[" in line
    assert k.source.count("__syncthreads();") == 1


# ------------------------------------------------------------ fixed-size reversal and conv
@needs_cxx
def test_fixed_reversal_one_block():
    """tests/codegen/cuda/test_cuda.py's in-block reversal with N fixed to 1: one block."""
    a = RNG.standard_normal((1, 32), dtype=np.float32)
    k = check_everywhere(reverse_in_block, (a,), a[:, ::-1] * 2 + 1, 1)
    assert "const int64_t i = (int64_t)blockIdx.x;" in k.source and "if (i < 1) {" in k.source
    assert k.source.count("__syncthreads();") == 1
    assert grids(k) == [(1, 1, 1)]


def conv_reference(x, w, b, pad):
    n, _, h, wd = x.shape
    co, _, kh, kw = w.shape
    oh, ow = h + 2 * pad - kh + 1, wd + 2 * pad - kw + 1
    xp = np.pad(x.astype(np.float64), ((0, 0), (0, 0), (pad, pad), (pad, pad)))
    out = np.zeros((n, co, oh, ow)) + b[None, :, None, None]
    for ky in range(kh):
        for kx in range(kw):
            out += np.einsum("nchw,oc->nohw", xp[:, :, ky:ky + oh, kx:kx + ow], w[:, :, ky, kx])
    return out.astype(np.float32)


CONV_ONE_BLOCK = ConvShape(1, 2, 4, 4, 2, 3, 3, padding=1)


def conv_one_ci_step(s):
    """The library's conv with all input channels in one step (the default
    TCI takes at most half of them)."""
    return gpu_conv.function(s, tile_ci=s.ci)


@needs_cxx
def test_fixed_conv_one_block():
    """One image, one channel block, one 4x4 pixel tile, one ci step: the
    conv kernel's three block loops and its ci0 loop have one iteration."""
    s = CONV_ONE_BLOCK
    x = RNG.standard_normal((s.n, s.ci, s.h, s.w), dtype=np.float32)
    w = RNG.standard_normal((s.co, s.ci, s.kh, s.kw), dtype=np.float32)
    b = RNG.standard_normal((s.co,), dtype=np.float32)
    k = check_everywhere(conv_one_ci_step, (), conv_reference(x, w, b, 1), s,
                         data=x, weight=w, bias=b)
    src = k.source
    assert grids(k)[1] == (1, 1, 1)
    for loop, idx in (("co0", "blockIdx.z"), ("y0", "blockIdx.y"), ("x0", "blockIdx.x")):
        assert f"const int64_t {loop} = (int64_t){idx};" in src and f"if ({loop} < 1) {{" in src
    assert "__syncthreads();" in src                     # after the shared copies
    assert "for (int64_t ci0" not in src                 # one ci step


# ------------------------------------------------------------ CPU backends keep the serial form
def test_cpu_targets_see_serial_loops_of_one_iteration():
    from codegen import ir
    k = gemm_tiled(1, 16, 5).compile(target="c")
    loops = {s.var: s for s in ir.walk_stmts(k.lowered.body) if isinstance(s, ir.For)}
    assert all(s.kind == "serial" for s in loops.values())
    assert {"i0", "j0", "i1"} <= set(loops)
    a = RNG.standard_normal((1, 5), dtype=np.float32)
    b = RNG.standard_normal((5, 16), dtype=np.float32)
    np.testing.assert_allclose(gemm_tiled(1, 16, 5).compile(target="llvm")(a, b), a @ b,
                               rtol=1e-4, atol=1e-4)


# ------------------------------------------------------------ fuzz: tiny fixed sizes
def test_fuzz_tiny_fixed_sizes_race_free(monkeypatch):
    """tests/codegen/cuda/test_cuda_fuzz.py's random fused programs with N fixed to 1, 2
    or 3: block and thread loops of one iteration (or none) everywhere.
    Every accepted mapping compiles and its emulation equals the
    program-order interpreter in three orders."""
    import dataclasses

    from tests.fuzz_oracle import interpret, random_arrays
    from tests.fuzz_programs import build
    from tests.codegen.cuda.test_cuda_fuzz import random_program
    from tiramisu_py.driver import cuda as ck
    if not any(shutil.which(c) for c in ("g++", "c++", "clang++")):
        pytest.skip("no C++ compiler for the CUDA emulator")
    monkeypatch.setattr(ck, "CUDA_ARCHS", ())
    rng = np.random.default_rng(77)
    accepted = one_block = 0
    for case in range(40):
        n = int(rng.integers(1, 4))
        p = dataclasses.replace(random_program(rng), fixed_n=n)
        f, ns = build(p)
        for s in p.stmts:
            ns[s.name].bind("i", "block.x")
            if rng.integers(0, 4):
                ns[s.name].bind("j", "thread.x")
        try:
            k = f.compile(target="cuda")
        except tp.IllegalScheduleError:
            continue
        accepted += 1
        one_block += (1, 1, 1) in grids(k)
        arrays = random_arrays(p, n, case)
        want = interpret(p, {"N": n}, arrays)
        for order in ORDERS:
            got = {b: a.copy() for b, a in arrays.items()}
            k.emulate(order=order, seed=case, **got)
            for b in p.bufs:
                np.testing.assert_allclose(got[b], want[b], rtol=1e-12, atol=1e-12,
                                           err_msg=f"case {case}, order {order}:\n{k.source}")
    assert accepted >= 20 and one_block >= 5

"""The CUDA backend, tested without a GPU: the GPU mapping's legality (exact,
explained), GPU-mapped functions run on the CPU (blocks and threads as serial
loops) against NumPy, the generated CUDA compiled to cubins with nvcc (skipped
without it), and the generated CUDA run by the fiber emulator in several
thread orders (a missing barrier shows up as a difference)."""
from repo_paths import ROOT
import contextlib
import functools
import os
import shutil

import numpy as np
import pytest

import tiramisu_py as tp
from codegen import ir
from examples import gemm
from tiramisu_py.commands.state import state_of
from tests.auto_kernels import SUITE

RNG = np.random.default_rng(20)


def gemm_gpu(ti=8, tj=16):
    f = gemm.build()
    c = f.computations["C"]
    u = c.update
    c.gpu_tile("i", "j", ti, tj)
    u.gpu_tile("i", "j", ti, tj)
    u.after(c, "j1")
    return f


def gemm_args(n=37, m=29, k=53):
    return (RNG.standard_normal((n, k), dtype=np.float32),
            RNG.standard_normal((k, m), dtype=np.float32))


def reverse_in_block(n=None, width=32, bind=None, name="rev"):
    """B in one thread is read by C in another thread of the same block: the
    compiler must put a barrier between the two statements.  ``n``: N fixed
    to that size; ``bind(s, j)`` maps ``j`` to the threads (thread.x)."""
    f = tp.Function(name, params=["N"] if n is None else {"N": n})
    i, j = f.var("i", 0, "N"), f.var("j", 0, width)
    a = f.input("A", ("N", width), tp.float32)
    b = f.computation("B", [i, j], a[i, j] * 2.0)
    c = f.computation("C", [i, j], b[i, width - 1 - j] + 1.0)
    for s in (b, c):
        s.bind(i, "block.x")
        if bind is None:
            s.bind(j, "thread.x")
        else:
            bind(s, j)
    c.after(b, i)
    return f


def gemm_shared(t=16, tk=16):
    """Shared-memory tiles of A and B per k-step, copied by the block's threads."""
    from schedules.solvers import gemm_cuda as gpu_gemm
    return gpu_gemm.schedule(gemm.build(), t, tk)


@contextlib.contextmanager
def emulation_cubins():
    """Around a compile for CUDA in a test that emulates or prints: the
    cubins are still built for sm_80 and sm_90 when NVRTC is there (tens of
    ms a kernel; a spill fails the build, so every GPU kernel of the suite is
    checked to build without spills), and skipped otherwise (nvcc takes
    about a second a kernel; the tests that check cubins use it)."""
    from codegen.cuda import nvrtc
    from codegen.cuda.toolchain import COMPILER_ENV
    from tiramisu_py.driver import cuda as ck
    if nvrtc.unavailable() is None:
        old = os.environ.get(COMPILER_ENV)
        os.environ[COMPILER_ENV] = "nvrtc"
        try:
            yield
        finally:
            if old is None:
                os.environ.pop(COMPILER_ENV, None)
            else:
                os.environ[COMPILER_ENV] = old
    else:
        saved, ck.CUDA_ARCHS = ck.CUDA_ARCHS, ()
        try:
            yield
        finally:
            ck.CUDA_ARCHS = saved


@functools.lru_cache(maxsize=None)
def cuda_kernel(build, cubins=False):
    """The CUDA kernel of ``build()``, compiled once per session; with
    ``cubins`` also built by nvcc for sm_80/sm_90 (~1.5 s per arch), else
    printed and emulated only."""
    if cubins:
        return build().compile(target="cuda")
    with emulation_cubins():
        return build().compile(target="cuda")


def emulate_source(k, source, *args, **kwargs):
    """Runs ``k`` through the emulator with an edited CUDA ``source``."""
    from codegen.cuda.emulator import EmulatedFunction
    saved = k._emulated
    k._emulated = EmulatedFunction(source, k.launch_plan)
    try:
        return k.emulate(*args, **kwargs)
    finally:
        k._emulated = saved


def rev_reference(a):
    return a[:, ::-1] * 2 + 1


def lowered_gpu(f):
    from tiramisu_py.analysis import gpu_plan, legality
    from tiramisu_py.lower.ast import AstLowering
    model, deps, _ = legality.analyse(f)
    state = legality.check(model, deps, f._commands)
    plan = gpu_plan.plan(model, deps, state, f._commands)
    return plan, AstLowering(model, state, set(), gpu=plan).run()


# ------------------------------------------------------------ loop IR
def test_for_cpu_serialises_gpu_loops_and_drops_barriers():
    body = ir.For("b", ir.const(0), ir.const(4), ir.Block([
        ir.For("t", ir.const(0), ir.const(8), ir.Block([]), kind="gpu_thread",
               attrs={"axis": "x", "min": 0, "extent": 8}),
        ir.Barrier()]), kind="gpu_block", attrs={"axis": "x"})
    out = ir.for_cpu(body)
    kinds = [s.kind for s in ir.walk_stmts(out) if isinstance(s, ir.For)]
    assert kinds == ["serial", "serial"]
    assert not any(isinstance(s, ir.Barrier) for s in ir.walk_stmts(out))


# ------------------------------------------------------------ mapping commands
def test_gpu_tile_names_and_binds():
    f = gemm_gpu()
    st = state_of(f)["C_update"]
    assert [lp.name for lp in st.loops] == ["i0", "j0", "i1", "j1", "k"]
    assert {n: (t.kind, t.arg) for n, t in st.tags.items()} == {
        "i0": ("gpu_block", "y"), "j0": ("gpu_block", "x"),
        "i1": ("gpu_thread", "y"), "j1": ("gpu_thread", "x")}


def test_gpu_mapped_gemm_runs_on_cpu():
    a, b = gemm_args()
    for target in ("cpu", "llvm"):
        out = gemm_gpu().compile(target=target)(a, b)
        np.testing.assert_allclose(out, a @ b, rtol=1e-4, atol=1e-4)


def test_barrier_placed_between_sequenced_statements():
    plan, body = lowered_gpu(reverse_in_block())
    assert plan.seq_barriers and not plan.loop_barriers
    assert sum(isinstance(s, ir.Barrier) for s in ir.walk_stmts(body)) == 1
    a = RNG.standard_normal((5, 32), dtype=np.float32)
    np.testing.assert_allclose(reverse_in_block().compile()(a), rev_reference(a), rtol=1e-6)


def test_no_barrier_when_each_thread_reads_its_own_value():
    plan, body = lowered_gpu(gemm_gpu())
    assert not plan.seq_barriers and not plan.loop_barriers
    assert not any(isinstance(s, ir.Barrier) for s in ir.walk_stmts(body))


def test_bind_bad_target():
    f = gemm.build()
    with pytest.raises(ValueError, match="block.x"):
        f.computations["C"].bind("i", "warp.z")
    with pytest.raises(ValueError, match="1024"):
        f.computations["C"].gpu_tile("i", "j", 64, 32)


def test_block_loop_carrying_a_dependence_refused():
    f = tp.Function("scan", params=["N"])
    i = f.var("i", 1, "N")
    a = f.buffer("A", ("N",), tp.float32, output=True)
    s = f.computation("S", [i], dtype=tp.float32)
    s.store_in(a, [i])
    s.set_expression(a[i - 1] + 1.0)
    s.bind(i, "block.x")
    with pytest.raises(tp.IllegalScheduleError, match=r"block loop 'i' carries a dependence.*S\(i="):
        f.compile()


def test_dependence_inside_thread_loop_refused():
    """A prefix sum along a thread loop needs a barrier between every two
    threads' steps: no barrier inside a thread loop can do that."""
    f = tp.Function("pre", params=["N"])
    i, j = f.var("i", 0, "N"), f.var("j", 1, 32)
    a = f.buffer("A", ("N", 32), tp.float32, output=True)
    s = f.computation("S", [i, j], dtype=tp.float32)
    s.store_in(a, [i, j])
    s.set_expression(a[i, j - 1] + a[i, j])
    s.bind(i, "block.x")
    s.bind(j, "thread.x")
    with pytest.raises(tp.IllegalScheduleError,
                       match=r"S.bind\(j, 'thread.x'\) is illegal: two threads of one block.*"
                             r"thread loop 'j'.*S\(i=\d+, j=\d+\) and S\(i=\d+, j=\d+\)"):
        f.compile()


def test_too_many_threads_refused_at_compile():
    f = gemm.build()
    c = f.computations["C"]
    c.tile("i", "j", 64, 32)
    c.bind("i0", "block.x")
    c.bind("i1", "thread.y")
    c.bind("j1", "thread.x")
    c.update.gpu_tile("i", "j", 8, 8)
    with pytest.raises(tp.IllegalScheduleError, match="64 x 32 = 2048 threads.*1024"):
        f.compile()


def test_thread_loop_outside_block_loops_refused():
    f = gemm.build()
    c = f.computations["C"]
    c.bind("i", "thread.x")
    c.bind("j", "block.x")
    c.update.gpu_tile("i", "j", 8, 8)
    with pytest.raises(tp.IllegalScheduleError, match="thread loop outside its block loops"):
        f.compile()


# ------------------------------------------------------------ CUDA printer, cubins, emulator
needs_nvcc = pytest.mark.skipif(shutil.which("nvcc") is None, reason="nvcc is not installed")
needs_cxx = pytest.mark.skipif(not any(shutil.which(c) for c in ("g++", "c++", "clang++")),
                               reason="no C++ compiler for the CUDA emulator")
ORDERS = ("forward", "reverse", "shuffle")


@needs_cxx
def test_emulated_barrier_kernel_matches_numpy_in_every_order():
    k = cuda_kernel(reverse_in_block, cubins=True)
    assert k.source.count("__syncthreads();") == 1
    a = RNG.standard_normal((5, 32), dtype=np.float32)
    for order in ORDERS:
        np.testing.assert_array_equal(k.emulate(a, order=order), rev_reference(a))


@needs_cxx
def test_emulator_catches_a_removed_barrier():
    k = cuda_kernel(reverse_in_block, cubins=True)
    a = RNG.standard_normal((5, 32), dtype=np.float32)
    src = k.source.replace("__syncthreads();", "/* removed */")
    results = [emulate_source(k, src, a, order=o, seed=3) for o in ORDERS]
    assert any(not np.array_equal(r, rev_reference(a)) for r in results)
    assert not np.array_equal(results[0], results[1])


@needs_cxx
def test_emulator_reports_a_barrier_not_reached_by_all_threads():
    from codegen.cuda.emulator import EmulatorError
    k = cuda_kernel(reverse_in_block, cubins=True)
    bad = k.source.replace("__syncthreads();", "if (threadIdx.x < 7) __syncthreads();")
    with pytest.raises(EmulatorError, match="barrier was not reached"):
        emulate_source(k, bad, RNG.standard_normal((2, 32), dtype=np.float32))


@needs_cxx
def test_emulated_gemm_matches_numpy():
    k = cuda_kernel(gemm_gpu)
    a, b = gemm_args(19, 21, 7)
    for order in ORDERS:
        np.testing.assert_allclose(k.emulate(a, b, order=order), a @ b, rtol=1e-5, atol=1e-5)
    assert k.launch_plan.kernels[0].block == (16, 8, 1)


@needs_nvcc
def test_cubins_and_resources():
    k = cuda_kernel(reverse_in_block, cubins=True)
    assert set(k.cubins) == {"sm_80", "sm_90"}
    for arch, res in k.resources.items():
        r = res["rev_k0"]
        assert k.cubins[arch][:4] == b"\x7fELF"
        assert r.spill_stores == r.spill_loads == 0 and 0 < r.registers <= 255
        assert r.barriers == 1


def test_parse_ptxas_report():
    from codegen.cuda import parse_ptxas
    log = ("ptxas info    : Compiling entry function 'f_k0' for 'sm_90'\n"
           "ptxas info    : Function properties for f_k0\n"
           "    8 bytes stack frame, 4 bytes spill stores, 4 bytes spill loads\n"
           "ptxas info    : Used 40 registers, used 1 barriers, 2048 bytes smem, 380 bytes cmem[0]\n")
    r = parse_ptxas(log)["f_k0"]
    assert (r.registers, r.barriers, r.shared_bytes, r.spill_stores, r.stack_bytes) == \
        (40, 1, 2048, 4, 8)


class _FakeDeviceArray:
    """Looks like a device array (``__cuda_array_interface__``), holds nothing."""

    def __init__(self, shape, typestr="<f4"):
        self.__cuda_array_interface__ = {"shape": shape, "typestr": typestr,
                                         "data": (0, False), "strides": None, "version": 3}


@pytest.mark.parametrize("device", [False, True])
def test_launch_without_driver_is_one_clear_error(device):
    from codegen.cuda.runtime import NoCudaDriverError, driver
    try:
        driver()
    except NoCudaDriverError:
        pass
    else:
        pytest.skip("a CUDA driver is present")
    k = cuda_kernel(reverse_in_block, cubins=True)
    arg = _FakeDeviceArray((2, 32)) if device else RNG.standard_normal((2, 32), dtype=np.float32)
    with pytest.raises(NoCudaDriverError, match="no CUDA driver on this machine"):
        k(arg)


def test_unmapped_statement_refused_for_cuda():
    with pytest.raises(ValueError, match="C_update is not mapped to the GPU"):
        f = gemm.build()
        f.computations["C"].gpu_tile("i", "j", 8, 8)
        f.compile(target="cuda")


def test_import_does_not_load_cuda_python():
    import subprocess
    import sys
    code = ("import sys, tiramisu_py, schedules, codegen.cuda; "
            "print(any(m == 'cuda' or m.startswith('cuda.') for m in sys.modules))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "False"


# ------------------------------------------------------------ cache_shared
def test_cache_shared_gemm_barriers_cpu_and_emulated():
    plan, body = lowered_gpu(gemm_shared())
    # one barrier after the copies (RAW), one at the end of each k0 step (WAR on the tiles)
    assert len(plan.seq_barriers) > 0 and len(plan.loop_barriers) > 0
    assert sum(isinstance(s, ir.Barrier) for s in ir.walk_stmts(body)) == 2
    a, b = gemm_args(37, 29, 53)
    np.testing.assert_allclose(gemm_shared().compile()(a, b), a @ b, rtol=1e-4, atol=1e-4)
    if not any(shutil.which(c) for c in ("g++", "c++", "clang++")):
        pytest.skip("no C++ compiler for the CUDA emulator")
    k = cuda_kernel(gemm_shared, cubins=True)
    assert "__shared__ float A_shared_tile[256];" in k.source
    for order in ORDERS:
        np.testing.assert_allclose(k.emulate(a, b, order=order), a @ b, rtol=1e-4, atol=1e-4)
    for arch, res in k.resources.items():
        r = res["gemm_k1"]
        assert r.shared_bytes == 2 * 16 * 16 * 4 and r.spill_stores == 0 and r.barriers == 1


@needs_cxx
@pytest.mark.parametrize("which", [0, 1])
def test_emulator_catches_each_removed_gemm_barrier(which):
    k = cuda_kernel(gemm_shared, cubins=True)
    parts = k.source.split("__syncthreads();")
    assert len(parts) == 3
    src = parts[0] + ("/* removed */" if which == 0 else "__syncthreads();") + parts[1] \
        + ("__syncthreads();" if which == 0 else "/* removed */") + parts[2]
    a, b = gemm_args(32, 32, 48)
    errs = [np.abs(emulate_source(k, src, a, b, order=o, seed=1) - a @ b).max() for o in ORDERS]
    assert max(errs) > 1e-2


def test_shared_memory_limit_refused():
    f = gemm_shared(t=32, tk=256)
    with pytest.raises(tp.IllegalScheduleError,
                       match=r"65536 bytes of shared memory per block.*A_shared_tile \(32, 256\)"
                             r".*beyond the limit of 49152"):
        f.compile(target="cuda")


def test_gpu_gemm_schedule_runs_on_cpu():
    import schedules
    a, b = gemm_args(40, 24, 36)
    out = schedules.gemm_cuda_function(40, 24, 36).compile()(a, b)
    np.testing.assert_allclose(out, a @ b, rtol=1e-4, atol=1e-4)


def test_bench_cuda_without_gpu_exits_cleanly():
    import subprocess
    import sys
    import os
    root = ROOT
    r = subprocess.run([sys.executable, "-m", "bench.bench_cuda", "--sizes", "64"],
                       capture_output=True, text=True, cwd=root)
    if r.returncode == 0:
        pytest.skip("a GPU is present: the benchmark ran")
    assert r.returncode == 2 and "bench_cuda:" in r.stderr


# ------------------------------------------------------------ host loops: one launch per step
def jacobi1d_gpu(time_on_blocks=False):
    f = SUITE["jacobi-1d"].build()
    sb, sa = f.computations["sB"], f.computations["sA"]
    for s in (sb, sa):
        s.split("i", 8)
        if time_on_blocks:
            s.bind("t", "block.y")
        s.bind("i0", "block.x")
        s.bind("i1", "thread.x")
    return f


@needs_cxx
def test_time_loop_launches_a_kernel_per_step():
    k = cuda_kernel(jacobi1d_gpu)
    steps = k.launch_plan.steps
    assert len(steps) == 1 and steps[0].var == "t" and len(steps[0].steps) == 2
    assert k.launch_plan.kernels[0].host_vars == ("t",)
    case = SUITE["jacobi-1d"].at(N=29, TSTEPS=5)
    args = case.inputs(np.random.default_rng(1))
    want = case.reference(args)
    for order in ORDERS:
        got = {n: a.copy() for n, a in args.items()}
        k.emulate(TSTEPS=5, order=order, **got)
        for n in got:
            np.testing.assert_allclose(got[n], want[n], rtol=1e-12)
    got = {n: a.copy() for n, a in args.items()}
    jacobi1d_gpu().compile()(TSTEPS=5, **got)
    np.testing.assert_allclose(got["A"], want["A"], rtol=1e-12)


def test_time_steps_on_blocks_refused():
    """The time loop stays a host loop (one launch per step); on blocks, sB and
    sA would share a kernel without sharing its block loops."""
    with pytest.raises(tp.IllegalScheduleError,
                       match=r"sA and sB are in one kernel but do not share all its block loops"):
        jacobi1d_gpu(time_on_blocks=True).compile()


def test_fused_loop_bound_differently_refused():
    f = SUITE["jacobi-1d"].build()
    sb, sa = f.computations["sB"], f.computations["sA"]
    sb.bind("t", "block.x")
    sa.bind("i", "block.x")
    with pytest.raises(tp.IllegalScheduleError,
                       match=r"loop 't' is shared by sB and sA but mapped differently"):
        f.compile()


# ------------------------------------------------------------ LSTM wavefront on the GPU
LSTM_SIZES = {"NL": 3, "T": 5, "B": 2, "H": 8}


def lstm_gpu():
    from examples import lstm
    return lstm.wavefront_gpu(lstm.build(LSTM_SIZES))


@needs_cxx
def test_lstm_wavefront_one_launch_per_antidiagonal():
    from examples import lstm
    args = lstm.random_inputs(layers=3, T=5, B=2, H=8)
    want = lstm.reference(*args)
    np.testing.assert_allclose(lstm.run(lstm_gpu().compile(), *args), want, atol=1e-5)
    k = cuda_kernel(lstm_gpu, cubins=True)
    host = [s for s in k.launch_plan.steps if not hasattr(s, "block")]
    assert len(host) == 1 and host[0].var == "t"          # the anti-diagonals, on the host
    step = host[0].steps[0]
    assert step.host_vars == ("t",) and step.block == (32, 2, 1)
    assert k.source.count("__syncthreads();") == 1          # gates -> cell update
    for order in ORDERS:
        out = lstm.run(lambda **kw: k.emulate(order=order, **kw), *args)
        np.testing.assert_allclose(out, want, atol=1e-5)
    for res in k.resources.values():
        assert all(r.spill_stores == 0 and r.spill_loads == 0 for r in res.values())


# ------------------------------------------------------------ conv2d (direct) on the GPU
def conv2d_gpu():
    """One launch per image (n on the host), output channels and 8x8 pixel
    tiles on blocks, pixels on threads, the reduction serial per thread."""
    from examples import conv2d
    f = conv2d.build()
    out = f.computations["out"]
    for s in (out, out.update):
        s.tile("y", "x", 8, 8)
        s.bind("co", "block.z")
        s.bind("y0", "block.y")
        s.bind("x0", "block.x")
        s.bind("y1", "thread.y")
        s.bind("x1", "thread.x")
    out.update.after(out, "x1")
    return f


@needs_cxx
def test_conv2d_direct_on_gpu():
    from examples import conv2d
    args = conv2d.random_inputs(n=2, cin=3, cout=4, h=9, w=7)
    want = conv2d.reference(*args)
    np.testing.assert_allclose(conv2d_gpu().compile()(*args), want, rtol=1e-4, atol=1e-4)
    k = cuda_kernel(conv2d_gpu)
    assert [type(s).__name__ for s in k.launch_plan.steps] == ["HostLoop"]
    assert "__syncthreads" not in k.source                 # each thread owns its pixel
    out = k.emulate(*args, order="reverse")
    np.testing.assert_allclose(out, want, rtol=1e-4, atol=1e-4)

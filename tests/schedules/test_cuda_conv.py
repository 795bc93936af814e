"""conv2d and the CSR sparse conv on the GPU (schedules/gpu_conv.py,
schedules/gpu_sparse.py, schedules/gpu_ops.py), tested without a GPU: the
GPU-mapped Functions run on the CPU against a NumPy conv2d, the generated
CUDA runs in the fiber emulator in three thread orders, cubins build for
sm_80/sm_90 without spills (nvcc), and ``target="cuda"`` / device arrays
take the CUDA path (``NoCudaDriverError`` here)."""
import functools
import shutil

import numpy as np
import pytest

import schedules
import tiramisu_py as tp
from schedules.core import kernels as runtime
from schedules.solvers import conv_cuda as gpu_conv
from schedules.solvers import conv_sparse_cuda as gpu_sparse
from schedules.problems.conv import ConvShape
from schedules.problems.conv import conv_shape
from schedules.weights.csr import CSRWeights
from tests.schedules.test_sparse import ref_conv

try:                                    # optional: only the routing tests need it
    import torch
except ImportError:
    torch = None
needs_torch = pytest.mark.skipif(torch is None, reason="torch is not installed")

needs_nvcc = pytest.mark.skipif(shutil.which("nvcc") is None, reason="nvcc is not installed")
HAVE_CXX = any(shutil.which(c) for c in ("g++", "c++", "clang++"))
needs_cxx = pytest.mark.skipif(not HAVE_CXX, reason="no C++ compiler for the CUDA emulator")
ORDERS = ("forward", "reverse", "shuffle")


def no_driver():
    from codegen.cuda.runtime import NoCudaDriverError, driver
    try:
        driver()
    except NoCudaDriverError:
        return True
    return False


def reference(x, w, b, stride=1, padding=0, dilation=1):
    """torch.nn.functional.conv2d's result, in NumPy (float64)."""
    return ref_conv(x, w, b, stride=stride, padding=padding, dilation=dilation)


def conv_inputs(s, seed=0, density=1.0, empty_rows=()):
    rng = np.random.default_rng(seed)
    x = rng.standard_normal((s.n, s.ci, s.h, s.w), dtype=np.float32)
    w = rng.standard_normal((s.co, s.ci, s.kh, s.kw), dtype=np.float32)
    w[rng.random(w.shape) >= density] = 0
    for r in empty_rows:
        w[r] = 0
    return x, w, rng.standard_normal((s.co,), dtype=np.float32)


@functools.lru_cache(maxsize=None)
def emulated(build, *args):
    """``build(*args)`` compiled for CUDA once per session, printed and
    emulated only (no cubins)."""
    from tests.codegen.cuda.test_cuda import emulation_cubins
    with emulation_cubins():
        return build(*args).compile(target="cuda")


# ------------------------------------------------------------------ dense conv2d
# (shape, tiles (tile_co, tile_y, tile_x, tile_ci) or None for the defaults[, micro (co, x)])
CONV_CASES = {
    # stride 2, padding 1, odd sizes; partial tiles on co, y, x and ci
    "stride2_partial": (ConvShape(2, 3, 9, 11, 5, 3, 3, stride=2, padding=1), (4, 4, 4, 2)),
    # per-axis stride, padding and dilation, default tiles
    "dilated_pairs": (ConvShape(1, 4, 8, 7, 3, 3, 2, stride=(1, 2), padding=(2, 1),
                                dilation=(2, 1)), None),
    # no padding, a 1x3 kernel
    "unpadded": (ConvShape(2, 2, 7, 6, 4, 1, 3), (2, 4, 4, None)),
    # 2 x 2 outputs per thread: partial micro-tiles on co (7 = 4 + 3) and x (13 = 8 + 5)
    "micro2x2": (ConvShape(2, 5, 9, 13, 7, 3, 3, padding=1), (4, 4, 8, 2), (2, 2)),
    # all input channels in one step: isl drops ci0, the tile spans ci1
    "one_ci_step": (ConvShape(1, 4, 8, 7, 3, 3, 2, stride=(1, 2), padding=(2, 1),
                              dilation=(2, 1)), (None, None, None, 4)),
    # one output per thread, accumulated in global memory (no per-thread tile)
    "one_per_thread": (ConvShape(2, 3, 9, 11, 5, 3, 3, stride=2, padding=1), (4, 4, 4, 2), (1, 1)),
}


def conv_function(case):
    s, t, *m = CONV_CASES[case]
    kw = dict(zip(("tile_co", "tile_y", "tile_x", "tile_ci"), t)) if t else {}
    if m:
        kw.update(micro_co=m[0][0], micro_x=m[0][1])
    return gpu_conv.function(s, **kw)


def has_tile(case):
    s, t, *m = CONV_CASES[case]
    return not m or m[0] != (1, 1)


def kernel_source(k, name):
    """The printed ``__global__`` function ``name`` (without the emulator's glue)."""
    src = k.source[k.source.index(name + "("):]
    return src[:src.index("#ifdef TPY_EMULATE")] if "#ifdef TPY_EMULATE" in src else src


def stores_to(src, array):
    return [ln.strip() for ln in src.splitlines() if ln.strip().startswith(array + "[")]


def conv_want(s, x, w, b):
    return reference(x, w, b, stride=s.stride, padding=s.padding, dilation=s.dilation)


@pytest.mark.parametrize("case", sorted(CONV_CASES)[::2])
def test_conv_gpu_schedule_runs_on_cpu(case):
    """Every other mapping compiled for the CPU (blocks and threads as
    serial loops; every mapping's values are checked in the emulator)."""
    s = CONV_CASES[case][0]
    x, w, b = conv_inputs(s)
    out = conv_function(case).compile(target="llvm")(data=x, weight=w, bias=b)
    np.testing.assert_allclose(out, conv_want(s, x, w, b), rtol=1e-4, atol=1e-4)


@needs_cxx
@pytest.mark.parametrize("case", sorted(CONV_CASES))
def test_conv_emulated_matches_reference_in_every_order(case):
    s = CONV_CASES[case][0]
    k = emulated(conv_function, case)
    assert len(k.launch_plan.kernels) == 2          # the input tiles first, then the conv
    # the tiles are shared; the barriers come from the legality check
    assert "__shared__ float weight_shared_tile[" in k.source
    assert "__shared__ float x_tiles_shared_tile[" in k.source
    # the inner loop indexes the shared input tile without a modulo
    inner = next(ln for ln in k.source.splitlines() if "+ weight_shared_tile" in ln)
    assert "floormod" not in inner and "floordiv" not in inner
    conv = kernel_source(k, "conv2d_cuda_k1")
    if has_tile(case):
        # a per-thread tile over the reduction: out (= bias) is stored twice,
        # the init and, after the reduction loop, the tile added once
        assert "float out_local[" in conv and "/* per-thread tile (registers) */" in conv
        assert inner.strip().startswith("out_local[")
        init, combine = stores_to(conv, "out")
        assert "= bias[" in init and "+ out_local[" in combine
        assert conv.index(inner.strip()) < conv.index(combine)
        # one ci step: no ci0 loop, the tile over the thread's ci1 loop
        assert ("for (int64_t ci0" in conv) == (case != "one_ci_step")
        if "for (int64_t ci0" in conv:        # no global out inside the ci0 loop
            assert "out[" not in conv[conv.index("for (int64_t ci0"):conv.index(combine)]
    else:
        assert inner.strip().startswith("out[") and "out_local" not in conv
    tiles = CONV_CASES[case][1] or ()
    micro = dict(zip(("micro_co", "micro_x"), CONV_CASES[case][2])) if len(CONV_CASES[case]) > 2 else {}
    tci = gpu_conv.tiles(s, *tiles, **micro)[3]
    assert k.gpu_plan.seq_barriers                  # RAW: after the copies
    # WAR: before the next step's copies, when there is a next step (n or ci0)
    assert bool(k.gpu_plan.loop_barriers) == (s.n * -(-s.ci // tci) > 1)
    x, w, b = conv_inputs(s, seed=1)
    want = conv_want(s, x, w, b)
    for order in ORDERS:
        np.testing.assert_allclose(k.emulate(data=x, weight=w, bias=b, order=order, seed=5),
                                   want, rtol=1e-4, atol=1e-4)


def test_conv_tile_shapes_and_threads():
    s, _ = CONV_CASES["stride2_partial"]
    k = emulated(conv_function, "stride2_partial")
    conv = k.launch_plan.kernels[-1]
    # x, y, z = tile_x, tile_y, tile_co / micro_co (= 4) threads
    assert conv.block == (4, 4, 1)
    assert emulated(conv_function, "one_per_thread").launch_plan.kernels[-1].block == (4, 4, 4)
    assert emulated(conv_function, "micro2x2").launch_plan.kernels[-1].block == (4, 4, 2)
    # input tile: 2 channels x ((4-1)*2 + 3) rows x ((4-1)*2 + 3) columns; weights 4 x 2 x 3 x 3
    assert conv.shared_bytes == 4 * (2 * 9 * 9 + 4 * 2 * 3 * 3)
    tco, ty, tx, tci = gpu_conv.tiles(ConvShape(8, 64, 56, 56, 64, 3, 3, padding=1))
    assert (tco // gpu_conv.MICRO_CO) * ty * (tx // gpu_conv.MICRO_X) == gpu_conv.THREADS
    assert tci >= 1
    # a given tile takes the largest micro-tile up to the default that divides it
    assert gpu_conv.tiles(s, tile_co=6)[0] == 6
    assert gpu_conv._micro(6, None, 4) == 3 and gpu_conv._micro(6, 1, 4) == 1
    with pytest.raises(ValueError, match=r"tile_co \(6\) must be a multiple of micro_co \(4\)"):
        gpu_conv.tiles(s, tile_co=6, micro_co=4)
    with pytest.raises(ValueError, match="micro_x must be a positive int, got 0"):
        gpu_conv.function(s, micro_x=0)


@needs_cxx
def test_emulator_catches_the_removed_conv_barrier():
    """Without the barrier after the copies, threads read tiles others have
    not written yet: some thread order gives a wrong result."""
    from codegen.cuda.emulator import EmulatedFunction
    k = emulated(conv_function, "stride2_partial")
    s = CONV_CASES["stride2_partial"][0]
    x, w, b = conv_inputs(s, seed=2)
    conv_src = k.source.index("conv2d_cuda_k1(")
    head, tail = k.source[:conv_src], k.source[conv_src:]
    broken = head + tail.replace("__syncthreads();", "/* removed */", 1)
    emu = EmulatedFunction(broken, k.launch_plan)
    saved, k._emulated = k._emulated, emu
    try:
        errs = [np.abs(k.emulate(data=x, weight=w, bias=b, order=o, seed=3)
                       - conv_want(s, x, w, b)).max() for o in ORDERS]
    finally:
        k._emulated = saved
    assert max(errs) > 1e-2


def test_conv_groups_on_cuda_run_per_group():
    """The CUDA schedule is of one group (its function refuses more); the
    solvers run it per group, so they apply to any groups (run on a GPU in
    test_grouped_unbatched_same_on_a_real_gpu)."""
    with pytest.raises(ValueError, match="target='cuda' supports groups=1 only, got groups=2"):
        gpu_conv.function(ConvShape(1, 4, 6, 6, 4, 3, 3, groups=2))
    from schedules.problems.conv import ConvProblem
    from schedules.registry import SOLVERS
    x = np.zeros((1, 4, 6, 6), np.float32)
    for w in (np.zeros((4, 2, 3, 3), np.float32), CSRWeights.from_dense(np.ones((4, 2, 3, 3),
                                                                                np.float32))):
        p, _ = ConvProblem.from_call("conv2d", x, w, None, 1, 1, 1, 2, target="cuda")
        assert sum(s.applicable(p) is True for s in SOLVERS["conv2d"] if s.target == "cuda") == 1
    with pytest.raises(ValueError, match="algo 'im2col' has no CUDA schedule"):
        schedules.conv2d(x, np.zeros((4, 4, 3, 3), np.float32), algo="im2col", target="cuda")
    with pytest.raises(ValueError, match="tile_co must be a positive int"):
        gpu_conv.function(ConvShape(1, 4, 6, 6, 4, 3, 3), tile_co=0)


# ------------------------------------------------------------------ sparse conv
SPARSE_SHAPE = conv_shape((2, 3, 9, 11), (5, 3, 3, 3), stride=2, padding=1, dilation=(1, 2))


def sparse_args(s, density, seed=0, empty_rows=(1,)):
    x, w, b = conv_inputs(s, seed, density, empty_rows)
    csr = CSRWeights.from_dense(w)
    rowptr, colidx, val = csr.conv_layout(s.kh, s.kw, s.hp, s.wp, s.dh, s.dw)
    args = dict(data=x, rowptr=rowptr, colidx=colidx, val=val, bias=b)
    want = reference(x, w, b, stride=(s.sh, s.sw), padding=(s.ph, s.pw), dilation=(s.dh, s.dw))
    return args, want, csr


@pytest.mark.parametrize("density", [0.0, 0.1, 0.5, 1.0])
def test_sparse_gpu_schedule_runs_on_cpu(density):
    args, want, csr = sparse_args(SPARSE_SHAPE, density)
    assert csr.rowptr[1] == csr.rowptr[2]                  # row 1 is empty: out = bias
    out = gpu_sparse.function(SPARSE_SHAPE).compile(target="llvm")(**args)
    np.testing.assert_allclose(out, want, rtol=1e-4, atol=1e-4)


@needs_cxx
@pytest.mark.parametrize("density", [0.0, 0.1, 0.5, 1.0])
def test_sparse_emulated_matches_reference_in_every_order(density):
    k = emulated(gpu_sparse.function, SPARSE_SHAPE)
    conv = k.launch_plan.kernels[-1]
    # 25 pixels: 32 threads of 2 pixels cover them, so one pixel per thread
    assert conv.block == (SPARSE_SHAPE.ho * SPARSE_SHAPE.wo, 1, 1)
    assert "__syncthreads" not in k.source and "__shared__" not in k.source
    # the data-dependent bounds: loads of rowptr, inside the thread loop
    loop = "for (int64_t j = (int64_t)rowptr[co]; j < (int64_t)rowptr[co + 1]; j++) {"
    assert loop in k.source
    assert_sum_in_registers(kernel_source(k, "sparse_conv2d_cuda_k1"), loop)
    args, want, _ = sparse_args(SPARSE_SHAPE, density, seed=3)
    for order in ORDERS:
        np.testing.assert_allclose(k.emulate(order=order, seed=7, **args), want,
                                   rtol=1e-4, atol=1e-4)


def assert_sum_in_registers(src, loop):
    """The sum over a CSR row is a per-thread tile: zeroed before the ``j``
    loop, no global ``out`` inside it, added to ``out`` (= bias) after it."""
    assert "/* per-thread tile (registers) */" in src
    init, combine = stores_to(src, "out")
    assert "= bias[co]" in init and "+ out_local[" in combine
    body = src[src.index(loop):src.index(combine)]
    assert "out_local[" in body and "out[" not in body
    assert src.index(init) < src.index("out_local") < src.index(loop)


def test_sparse_partial_pixel_blocks():
    """More pixels than a block covers: the last block of each row is
    partial, and so is the last thread's pair of pixels."""
    s = conv_shape((1, 2, 7, 9), (3, 2, 3, 3), stride=1, padding=1, dilation=1)
    args, want, _ = sparse_args(s, 0.4, seed=4, empty_rows=(2,))
    for kw, grid in (({"threads": 16}, (2, 3, 1)), ({"threads": 32, "micro": 1}, (2, 3, 1)),
                     ({"threads": 8, "micro": 3}, (3, 3, 1))):
        f = gpu_sparse.function(s, **kw)              # 63 pixels: blocks of 32 or 24
        np.testing.assert_allclose(f.compile(target="llvm")(**args), want, rtol=1e-4, atol=1e-4)
        if not HAVE_CXX:
            continue
        k = emulated(functools.partial(gpu_sparse.function, **kw), s)
        assert [evaluate_grid(k)] == [grid]
        src = kernel_source(k, "sparse_conv2d_cuda_k1")
        if kw.get("micro", gpu_sparse.MICRO) > 1:
            # the thread's pixels are the unrolled slots of its tile
            assert "#pragma unroll" in src and f"float out_local[{kw.get('micro', 2)}];" in src
        assert_sum_in_registers(src, "j < (int64_t)rowptr[co + 1]; j++) {")
        for order in ORDERS:
            np.testing.assert_allclose(k.emulate(order=order, seed=2, **args), want,
                                       rtol=1e-4, atol=1e-4)
    if not HAVE_CXX:
        pytest.skip("no C++ compiler for the CUDA emulator")
    with pytest.raises(ValueError, match="micro must be a positive int, got 0"):
        gpu_sparse.function(s, micro=0)


def evaluate_grid(k):
    from codegen.cuda.printer import evaluate
    return tuple(evaluate(g, {}) for g in k.launch_plan.kernels[-1].grid)


def test_data_dependent_loop_on_a_thread_axis_refused():
    f = gpu_sparse.function(conv_shape((1, 2, 6, 6), (3, 2, 3, 3), 1, 1, 1))
    u = f.computations["acc"].update
    u.bind("j", "thread.y")
    # with the schedule's register tile over j, that tile is refused first
    with pytest.raises(tp.IllegalScheduleError,
                       match=r"acc_update\.accumulate_locally\(j\) is illegal on the GPU: 'j' is "
                             r"a thread loop of acc_update \(thread\.y\)"):
        f.compile()
    f.undo()
    f.undo()                                       # the bind, then accumulate_locally(j)
    u.bind("j", "thread.y")
    with pytest.raises(tp.IllegalScheduleError,
                       match=r"thread loop 'j' of acc_update has no constant bound"):
        f.compile()


# ------------------------------------------------------------------ cubins (one shape per op)
CUBIN_CONV = ConvShape(2, 16, 28, 28, 32, 3, 3, stride=1, padding=1)
CUBIN_SPARSE = conv_shape((2, 16, 28, 28), (32, 16, 3, 3), 1, 1, 1)


def library_conv_kernel():
    return runtime.cuda_kernel(("conv2d", "cuda", CUBIN_CONV, True),
                               lambda: gpu_conv.function(CUBIN_CONV, bias=True))


def library_sparse_kernel():
    return runtime.cuda_kernel(("sparse_conv2d", "cuda", CUBIN_SPARSE, True),
                               lambda: gpu_sparse.function(CUBIN_SPARSE, bias=True))


@needs_nvcc
def test_conv_cubins_no_spills_and_resources():
    k = library_conv_kernel()
    assert set(k.cubins) == {"sm_80", "sm_90"}
    tco, ty, tx, tci = gpu_conv.tiles(CUBIN_CONV)
    tile_bytes = 4 * (tci * (ty + 2) * (tx + 2) + tco * tci * 9)
    for arch, res in k.resources.items():
        assert k.cubins[arch][:4] == b"\x7fELF"
        assert set(res) == {"conv2d_cuda_k0", "conv2d_cuda_k1"}
        for r in res.values():
            assert r.spill_stores == r.spill_loads == 0 and 0 < r.registers <= 255
        conv = res["conv2d_cuda_k1"]
        assert conv.shared_bytes == tile_bytes and conv.barriers == 1
        assert res["conv2d_cuda_k0"].shared_bytes == 0
        # the per-thread tile lives in registers: no stack frame (local memory)
        assert conv.stack_bytes == 0 and conv.registers <= 128
    assert "float out_local[4];  /* per-thread tile (registers) */" in k.source


@needs_nvcc
def test_sparse_cubins_no_spills_and_resources():
    k = library_sparse_kernel()
    assert set(k.cubins) == {"sm_80", "sm_90"}
    for arch, res in k.resources.items():
        assert set(res) == {"sparse_conv2d_cuda_k0", "sparse_conv2d_cuda_k1"}
        for r in res.values():
            assert r.spill_stores == r.spill_loads == 0 and 0 < r.registers <= 255
            assert r.shared_bytes == 0 and r.barriers == 0 and r.stack_bytes == 0
    assert f"float out_local[{gpu_sparse.MICRO}];  /* per-thread tile (registers) */" in k.source


def assert_cubins_without_spills(k):
    from tiramisu_py.driver import cuda as ck
    assert set(k.cubins) == set(ck.CUDA_ARCHS) == {"sm_80", "sm_90"}
    for res in k.resources.values():
        for r in res.values():
            assert r.spill_stores == r.spill_loads == 0 and r.stack_bytes == 0, r


@needs_nvcc
@pytest.mark.parametrize("case", sorted(CONV_CASES))
def test_conv_odd_sizes_build_cubins_without_spills(case):
    """Partial block tiles, partial micro-tiles (guarded unrolled slots) and
    one-step reductions: cubins for sm_80/sm_90, no spills, no stack frame."""
    assert_cubins_without_spills(conv_function(case).compile(target="cuda"))


@needs_nvcc
@pytest.mark.parametrize("kw", [{"threads": 16}, {"threads": 8, "micro": 3}])
def test_sparse_odd_sizes_build_cubins_without_spills(kw):
    s = conv_shape((1, 2, 7, 9), (3, 2, 3, 3), stride=1, padding=1, dilation=1)
    assert_cubins_without_spills(gpu_sparse.function(s, **kw).compile(target="cuda"))


# ------------------------------------------------------------------ entry points
def cuda_call(op, *args, **kwargs):
    """Runs ``op``; returns its result (a GPU is present) or None after the
    expected NoCudaDriverError."""
    from codegen.cuda.runtime import NoCudaDriverError
    try:
        return op(*args, **kwargs)
    except NoCudaDriverError as e:
        assert "no CUDA driver on this machine" in str(e)
        return None


def test_conv2d_target_cuda_takes_the_gpu_schedule():
    x, w, b = conv_inputs(CUBIN_CONV, seed=5)
    want = conv_want(CUBIN_CONV, x, w, b)
    got = cuda_call(schedules.conv2d, x, w, b, padding=1, target="cuda")
    assert (got is None) == no_driver()
    k = library_conv_kernel()            # the kernel the call compiled (once per process)
    assert type(k).__name__ == "CudaKernel" and k.name == "conv2d_cuda"
    # the CPU path is unchanged
    cpu = schedules.conv2d(x, w, b, padding=1, algo="direct")
    assert isinstance(cpu, np.ndarray)
    np.testing.assert_allclose(cpu, want, rtol=1e-4, atol=1e-4)
    if got is None:
        assert no_driver()
        if not HAVE_CXX:
            pytest.skip("no C++ compiler to emulate the kernel the call compiled")
        got = k.emulate(data=x, weight=w, bias=b, order="shuffle", seed=1)
    np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-4)


def test_sparse_conv2d_target_cuda_takes_the_gpu_schedule():
    x, w, b = conv_inputs(CUBIN_CONV, seed=6, density=0.2, empty_rows=(3,))
    csr = CSRWeights.from_dense(w)
    want = reference(x, w, b, padding=1)
    got = cuda_call(schedules.sparse_conv2d, x, csr, b, padding=1, target="cuda")
    assert (got is None) == no_driver()
    k = library_sparse_kernel()
    assert type(k).__name__ == "CudaKernel" and k.name == "sparse_conv2d_cuda"
    # conv2d with a sparse weight (or algo="sparse") takes the same kernel on the GPU
    before = len(runtime._KERNELS)
    for kw in ({}, {"algo": "sparse"}):
        got2 = cuda_call(schedules.conv2d, x, csr, b, padding=1, target="cuda", **kw)
        assert (got2 is None) == no_driver()
        if got2 is not None:
            np.testing.assert_allclose(got2, want, rtol=1e-4, atol=1e-4)
    assert len(runtime._KERNELS) == before
    if got is None:
        assert no_driver()
        if not HAVE_CXX:
            pytest.skip("no C++ compiler to emulate the kernel the call compiled")
        rowptr, colidx, val = csr.conv_layout(3, 3, 30, 30)
        got = k.emulate(data=x, rowptr=rowptr, colidx=colidx, val=val, bias=b, order="reverse")
    np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-4)


@needs_torch
@pytest.mark.filterwarnings("ignore:Sparse CSR tensor support is in beta")
def test_torch_sparse_weight_routes_by_target():
    """A torch sparse-CSR weight: target="cuda" takes the GPU path, no target
    stays on the CPU (torch in, torch out)."""
    x, w, b = conv_inputs(CUBIN_CONV, seed=7, density=0.2)
    ws = torch.from_numpy(w.reshape(w.shape[0], -1)).to_sparse_csr()
    xt, bt = torch.from_numpy(x), torch.from_numpy(b)
    want = reference(x, w, b, padding=1)
    cpu = schedules.sparse_conv2d(xt, ws, bt, padding=1)
    assert isinstance(cpu, torch.Tensor)
    np.testing.assert_allclose(cpu.numpy(), want, rtol=1e-4, atol=1e-4)
    got = cuda_call(schedules.sparse_conv2d, xt, ws, bt, padding=1, target="cuda")
    assert (got is None) == no_driver()          # the CUDA path was taken
    if got is not None:
        np.testing.assert_allclose(got.numpy(), want, rtol=1e-4, atol=1e-4)


class FakeDeviceArray:
    """Looks like a device array (``__cuda_array_interface__``), holds nothing."""

    def __init__(self, shape, typestr="<f4"):
        self.shape = shape
        self.__cuda_array_interface__ = {"shape": shape, "typestr": typestr,
                                         "data": (0, False), "strides": None, "version": 3}


def test_device_arrays_route_to_the_gpu():
    """A device array with no target takes the CUDA path (which takes torch
    CUDA tensors: other device arrays are refused, naming what to pass); a
    CPU target with a device array is refused."""
    xd, wd = FakeDeviceArray((1, 2, 5, 5)), FakeDeviceArray((3, 2, 3, 3))
    with pytest.raises(TypeError, match="takes torch CUDA tensors.*FakeDeviceArray"):
        schedules.conv2d(xd, wd)
    with pytest.raises(TypeError, match="takes torch CUDA tensors"):
        schedules.sparse_conv2d(xd, CSRWeights.from_dense(np.ones((3, 2, 3, 3), np.float32)))
    with pytest.raises(ValueError, match=r"target='llvm' runs on the CPU, but input is a device "
                                         r"array \(FakeDeviceArray\)"):
        schedules.conv2d(xd, wd, target="llvm")


def test_degenerate_shapes_on_cuda_need_no_launch():
    b = np.arange(3, dtype=np.float32)
    out = schedules.conv2d(np.zeros((0, 2, 5, 5), np.float32), np.zeros((3, 2, 3, 3), np.float32),
                           b, target="cuda")
    assert out.shape == (0, 3, 3, 3)
    out = schedules.conv2d(np.zeros((2, 0, 5, 5), np.float32), np.zeros((3, 0, 3, 3), np.float32),
                           b, target="cuda")      # no input channel: none out, as in torch
    assert out.shape == (2, 0, 3, 3)


@pytest.mark.gpu
def test_torch_cuda_tensors_on_a_real_gpu():
    x, w, b = conv_inputs(CUBIN_CONV, seed=8, density=0.3)
    want = reference(x, w, b, padding=1)
    dev = lambda a: torch.from_numpy(a).cuda()             # noqa: E731
    out = schedules.conv2d(dev(x), dev(w), dev(b), padding=1)
    assert out.is_cuda
    np.testing.assert_allclose(out.cpu().numpy(), want, rtol=1e-4, atol=1e-4)
    out = schedules.sparse_conv2d(dev(x), CSRWeights.from_dense(w), dev(b), padding=1)
    np.testing.assert_allclose(out.cpu().numpy(), want, rtol=1e-4, atol=1e-4)


@pytest.mark.gpu
def test_grouped_unbatched_same_on_a_real_gpu():
    """torch's conv2d on the GPU paths: groups (per group), an unbatched
    input and an odd "same" padding (torch's extra zeros below and right)."""
    import torch.nn.functional as F
    rng = np.random.default_rng(3)
    for xs, ws, kw in (((2, 6, 7, 9), (6, 2, 3, 3), dict(padding=1, groups=3)),
                       ((4, 7, 6), (6, 4, 2, 3), dict(padding="same")),
                       ((4, 7, 6), (4, 2, 2, 2), dict(padding="same", groups=2))):
        x, w = (rng.standard_normal(s).astype(np.float32) for s in (xs, ws))
        w[np.abs(w) < 0.5] = 0
        want = F.conv2d(torch.from_numpy(x), torch.from_numpy(w), **kw)
        out = schedules.conv2d(torch.from_numpy(x).cuda(), torch.from_numpy(w).cuda(), **kw)
        assert out.is_cuda and out.shape == want.shape
        torch.testing.assert_close(out.cpu(), want, rtol=1e-4, atol=1e-4)
        out = schedules.sparse_conv2d(torch.from_numpy(x).cuda(), CSRWeights.from_dense(w), **kw)
        torch.testing.assert_close(out.cpu(), want, rtol=1e-4, atol=1e-4)


# ------------------------------------------------------------------ a lowering fix found here
def reverse_under_a_loop_of_one_iteration():
    """As tests/codegen/cuda/test_cuda.py's in-block reversal, inside a block-level serial
    loop ``k`` of one iteration: isl drops that loop and merges the sequence
    around it, and the barrier must still be placed (it was lost before)."""
    f = tp.Function("rev1", params=["N"])
    i, k, j = f.var("i", 0, "N"), f.var("k", 0, 1), f.var("j", 0, 32)
    a = f.input("A", ("N", 32), tp.float32)
    b = f.computation("B", [i, k, j], a[i, j] * 2.0)
    c = f.computation("C", [i, k, j], b[i, k, 31 - j] + 1.0)
    for s in (b, c):
        s.bind(i, "block.x")
        s.bind(j, "thread.x")
    c.after(b, k)
    return f


@needs_cxx
def test_barrier_kept_when_enclosing_loops_have_one_iteration():
    k = emulated(reverse_under_a_loop_of_one_iteration)
    assert "for (int64_t k" not in k.source                 # the loop is gone...
    assert k.source.count("__syncthreads();") == 1          # ...the barrier is not
    a = np.random.default_rng(9).standard_normal((3, 32), dtype=np.float32)
    want = (a[:, ::-1] * 2 + 1).reshape(3, 1, 32)
    for order in ORDERS:
        np.testing.assert_array_equal(k.emulate(a, order=order), want)

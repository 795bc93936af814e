"""The GPU mapping API under hostile use (issue 20 sweep): each refusal is a
clear Python exception naming the argument or loop, raised when the command
or call is given (before anything runs), and what a refused command leaves
behind still compiles and matches NumPy.  No GPU needed: schedules run on the
CPU (blocks and threads as serial loops) and, where a C++ compiler exists,
through the CUDA emulator."""
import shutil

import numpy as np
import pytest

import schedules
import tiramisu_py as tp
from examples import gemm
from schedules.solvers import conv_cuda as gpu_conv
from schedules.solvers import conv_sparse_cuda as gpu_sparse
from schedules.solvers import gemm_cuda as gpu_gemm
from schedules.solvers import rnn_cuda as gpu_rnn
from schedules.problems.conv import ConvShape
from tests.codegen.cuda.test_cuda import cuda_kernel, emulation_cubins
from tiramisu_py.commands.state import state_of

RNG = np.random.default_rng(44)
HAVE_CXX = any(shutil.which(c) for c in ("g++", "c++", "clang++"))


def gemm_parts():
    f = gemm.build()
    c = f.computations["C"]
    return f, c, c.update


def gemm_args(n=19, m=23, k=7):
    return (RNG.standard_normal((n, k), dtype=np.float32),
            RNG.standard_normal((k, m), dtype=np.float32))


def assert_gemm_runs(f):
    a, b = gemm_args()
    np.testing.assert_allclose(f.compile()(a, b), a @ b, rtol=1e-4, atol=1e-4)


def tiled():
    f, c, u = gemm_parts()
    c.gpu_tile("i", "j", 4, 4)
    u.gpu_tile("i", "j", 4, 4)
    return f, c, u


# ------------------------------------------------------------ one mapping per loop
@pytest.mark.parametrize("command, message", [
    (lambda c: c.bind("i0", "thread.x"), r"C.bind\(i0, 'thread.x'\): loop 'i0' is already bound "
                                         r"to block.y"),
    (lambda c: c.parallelize("i0"), r"C.parallelize\(i0\): loop 'i0' is already bound to block.y"),
    (lambda c: c.vectorize("j1", 4), r"C.vectorize\(j1, 4\): loop 'j1' is already bound to "
                                     r"thread.x"),
    (lambda c: c.unroll("j1"), r"C.unroll\(j1, 4\): loop 'j1' is already bound to thread.x"),
])
def test_a_bound_loop_keeps_its_binding(command, message):
    """Before: the later command silently replaced the binding (the block or
    thread loop became a CPU-parallel, vector or unrolled serial loop)."""
    f, c, u = tiled()
    with pytest.raises(ValueError, match=message):
        command(c)
    st = state_of(f)["C"]
    assert {n: (t.kind, t.arg) for n, t in st.tags.items()} == {
        "i0": ("gpu_block", "y"), "j0": ("gpu_block", "x"),
        "i1": ("gpu_thread", "y"), "j1": ("gpu_thread", "x")}
    assert_gemm_runs(f)


@pytest.mark.parametrize("command, word", [
    (lambda c: c.parallelize("i"), "parallelized"),
    (lambda c: c.unroll("j", 4), "unrolled"),
])
def test_binding_a_cpu_mapped_loop_refused(command, word):
    f, c, u = gemm_parts()
    command(c)
    loop = "i" if word == "parallelized" else "j1"
    with pytest.raises(ValueError, match=rf"C.bind\({loop}, 'block.x'\): loop '{loop}' is {word}"):
        c.bind(loop, "block.x")


def test_binding_a_loop_again_to_its_axis_is_harmless():
    f, c, u = gemm_parts()
    for s in (c, u):
        s.bind("i", "block.x")
        s.bind("i", "block.x")
    assert_gemm_runs(f)


# ------------------------------------------------------------ CUDA's per-axis limits
def thread_z(extent):
    f, c, u = gemm_parts()
    for s in (c, u):
        s.split("i", extent)
        s.bind("i0", "block.x")
        s.bind("i1", "thread.z")
    return f


def test_more_than_64_threads_along_z_refused():
    """Before: 128 threads on thread.z (1 x 1 x 128, under 1024 in all) were
    accepted, printed and emulated; a GPU refuses the launch (blockDim.z <= 64)."""
    with pytest.raises(tp.IllegalScheduleError,
                       match=r"C.bind\(i1, 'thread.z'\): the kernel of C has 128 threads along "
                             r"thread.z, beyond CUDA's limit of 64"):
        thread_z(128).compile()
    a, b = gemm_args(67, 5, 3)
    np.testing.assert_allclose(thread_z(64).compile()(a, b), a @ b, rtol=1e-4, atol=1e-4)


def one_thread_tiles():
    f, c, u = gemm_parts()
    c.gpu_tile("i", "j", 1, 1)
    u.gpu_tile("i", "j", 1, 1)
    u.after(c, "j1")
    return f


def test_grid_beyond_65535_blocks_along_y_refused_at_the_call():
    """gpu_tile puts the rows on block.y, which holds at most 65535 blocks:
    70000 rows of one-thread tiles were emulated (and would have failed in
    cuLaunchKernel); now every call (launch or emulation) refuses before
    running anything, naming the kernel, the axis and the grid."""
    from codegen.cuda.printer import CudaPrintError
    with emulation_cubins():
        k = one_thread_tiles().compile(target="cuda")
    a, b = np.ones((70000, 1), np.float32), np.ones((1, 2), np.float32)
    msg = r"gemm_k0: 70000 blocks along block.y \(grid \(2, 70000, 1\)\), beyond CUDA's limit of 65535"
    with pytest.raises(CudaPrintError, match=msg):
        k(a, b)                                    # before the driver is looked for
    if HAVE_CXX:
        with pytest.raises(CudaPrintError, match=msg):
            k.emulate(a, b)
        a, b = gemm_args(5, 3, 2)
        np.testing.assert_allclose(k.emulate(a, b), a @ b, rtol=1e-5, atol=1e-5)


# ------------------------------------------------------------ cache_shared / cache_local sources
def shared_ready():
    f, c, u = tiled()
    u.split("k", 4)
    u.reorder("k0", "i1", "j1", "k1")
    return f, c, u


@pytest.mark.parametrize("src", ["A", None, 3])
def test_cache_shared_source_type_refused(src):
    """Before: AttributeError ('str' object has no attribute 'name')."""
    f, c, u = shared_ready()
    with pytest.raises(TypeError, match=r"C_update.cache_shared\(.*, k0\): source must be a buffer "
                                        r"or computation"):
        u.cache_shared(src, "k0")


def test_copying_a_source_the_statement_does_not_read_refused():
    """Before: 'compute_at: C_update does not read A_shared' (a copy the user
    never named) for a source cached twice, and likewise for one never read."""
    f, c, u = shared_ready()
    u.cache_shared(f.buffers["A"], "k0")
    n = len(f._commands)
    for copy in (u.cache_shared, u.cache_local, u.cache_at):
        with pytest.raises(ValueError, match=r"C_update: cannot copy 'A' for it at 'k\w': "
                                             r"C_update does not read 'A' \(it reads A_shared, B"):
            copy(f.buffers["A"], "k1" if copy == u.cache_local else "k0")
    assert len(f._commands) == n                     # refused: nothing recorded
    with pytest.raises(ValueError, match=r"C does not read 'B' \(it reads nothing"):
        c.cache_shared(f.buffers["B"], "i0")
    assert_gemm_runs(f)


# ------------------------------------------------------------ emulate's arguments
@pytest.mark.skipif(not HAVE_CXX, reason="no C++ compiler for the CUDA emulator")
@pytest.mark.parametrize("seed", ["x", -1, 2 ** 64, 1.5, True])
def test_emulate_seed_checked(seed):
    """Before: 'x' gave int()'s "invalid literal" and -1 an OverflowError
    from cffi, neither naming the argument."""
    k = cuda_kernel(one_thread_tiles)
    a, b = gemm_args(3, 2, 2)
    with pytest.raises(ValueError, match=r"emulate: seed must be an int in \[0, 2\*\*64\)"):
        k.emulate(a, b, order="shuffle", seed=seed)
    np.testing.assert_allclose(k.emulate(a, b, order="shuffle", seed=np.int64(7)), a @ b,
                               rtol=1e-5, atol=1e-5)


# ------------------------------------------------------------ the library's GPU entry points
def test_gemm_cuda_empty_product():
    """Before: an empty matrix with target='cuda' reported "the part of 'A'
    one iteration of 'k0' reads is unbounded" from inside the schedule."""
    for (n, k, m) in ((0, 7, 3), (5, 0, 3), (5, 7, 0)):
        a = np.ones((n, k), np.float32)
        b = np.ones((k, m), np.float32)
        out = schedules.gemm(a, b, target="cuda")
        assert isinstance(out, np.ndarray) and out.dtype == np.float32
        np.testing.assert_array_equal(out, a @ b)
    torch = pytest.importorskip("torch")
    out = schedules.gemm(torch.ones(4, 0), torch.ones(0, 2), target="cuda")
    assert isinstance(out, torch.Tensor) and out.shape == (4, 2) and not out.any()


def test_gemm_cuda_refuses_mixed_numpy_and_torch():
    torch = pytest.importorskip("torch")
    with pytest.raises(TypeError, match="a, b: pass all NumPy arrays or all torch tensors"):
        schedules.gemm(torch.ones(3, 4), np.ones((4, 2), np.float32), target="cuda")


@pytest.mark.parametrize("target", [3, 1.0, b"cuda", ["cuda"]])
def test_library_target_type_refused(target):
    """Before: target=3 gave AttributeError ('int' object has no attribute
    'encode') from the warm-start cache."""
    a, b = gemm_args(3, 2, 2)
    with pytest.raises(TypeError, match="target must be a string"):
        schedules.gemm(a, b, target=target)


@pytest.mark.parametrize("kw, name", [({"n": 0}, "n"), ({"m": -1}, "m"), ({"k": 2.0}, "k"),
                                      ({"n": "N"}, "n")])
def test_gpu_gemm_function_sizes_checked(kw, name):
    sizes = {**dict(n=5, m=7, k=3), **kw}
    with pytest.raises(ValueError, match=rf"gpu_gemm: {name} must be a positive int"):
        gpu_gemm.function(**sizes)


@pytest.mark.parametrize("kw, name", [({"hc": 0}, "hc"), ({"hc": "3"}, "hc"),
                                      ({"bc": 2.5}, "bc"), ({"bc": -1}, "bc")])
def test_gpu_rnn_chunks_checked(kw, name):
    """Before: hc='3' was a TypeError from min(), bc=2.5 ran as 2, hc=0 named
    an internal split (h_init.split(j, 0))."""
    with pytest.raises(ValueError, match=rf"gpu_rnn: {name} must be a positive int"):
        gpu_rnn.function(1, 2, 2, 3, 4, **kw)


def test_gpu_rnn_batch_chunk_beyond_z_limit_refused():
    with pytest.raises(tp.IllegalScheduleError, match="threads along thread.z, beyond CUDA's "
                                                      "limit of 64"):
        gpu_rnn.function(1, 2, 100, 3, 4, bc=100).compile()


SHAPE = ConvShape(1, 2, 7, 9, 3, 3, 3, padding=(1, 1))


@pytest.mark.parametrize("build", [gpu_conv.function, gpu_sparse.function])
def test_gpu_conv_functions_check_shape_and_bias(build):
    """Before: a tuple or None for the shape was an AttributeError; bias='yes'
    or None were taken as true / false."""
    with pytest.raises(TypeError, match="shape must be a schedules.problems.conv.ConvShape, not tuple"):
        build((1, 2, 7, 9))
    for bias in ("yes", None, 1):
        with pytest.raises(TypeError, match="bias must be a bool"):
            build(SHAPE, bias=bias)


def test_gpu_sparse_zero_threads_refused():
    """Before: threads=0 silently took the default."""
    with pytest.raises(ValueError, match=r"threads must be an int in \[1, 1024\], got 0"):
        gpu_sparse.function(SHAPE, threads=0)


def test_non_rectangular_grid_names_the_block_loop():
    """A block loop whose extent depends on another block loop (the partial
    last tile of a split between them) runs on the CPU; for CUDA the error
    named only the axis ('block loop on axis y'), now the kernel and loop."""
    from codegen.cuda.printer import CudaPrintError
    f, c, u = gemm_parts()
    c.split("i", 8)
    c.gpu_tile("i1", "j", 4, 4)
    c.bind("i0", "block.z")
    u.gpu_tile("i", "j", 4, 4)
    assert_gemm_runs(f)
    with pytest.raises(CudaPrintError, match=r"kernel gemm_k0: the extent of block loop 'i10' "
                                             r"\(block.y\) depends on i0"):
        with emulation_cubins():
            f.compile(target="cuda")


# ------------------------------------------------------------ device arguments (launch recorded)
class CaiArray:
    """A device array known only by its ``__cuda_array_interface__``."""

    def __init__(self, **cai):
        self.__cuda_array_interface__ = cai


def cai(shape, data=(4096, False), **kw):
    return CaiArray(**{"shape": shape, "typestr": "<f4", "data": data, "strides": None,
                       "version": 3, **kw})


@pytest.fixture
def recorded(monkeypatch):
    """A CUDA kernel whose launches are recorded (the driver check passes)."""
    from codegen.cuda import runtime
    calls = []
    monkeypatch.setattr(runtime, "driver", lambda: None)
    monkeypatch.setattr(runtime.DeviceFunction, "launch",
                        lambda self, scalars, pointers, *a, **kw: calls.append(list(scalars)))
    return cuda_kernel(one_thread_tiles), calls


@pytest.mark.parametrize("bad", [
    dict(shape=None), dict(data=None), dict(data=(1, 2, 3)), dict(strides=(4,)),
    dict(strides="ab"), dict(stream="x"), dict(typestr=None, shape=(3, 4)),
])
def test_malformed_cuda_array_interface_is_one_clear_error(recorded, bad):
    """Before: TypeError ("'NoneType' object is not iterable", "... not
    subscriptable") from deep inside, or (strides of the wrong length) the
    array was taken as contiguous."""
    k, calls = recorded
    a = cai(**{"shape": (3, 4), **bad})
    if bad.get("typestr", "<f4") is None:
        del a.__cuda_array_interface__["typestr"]
    with pytest.raises(TypeError, match=r"argument 'A': malformed __cuda_array_interface__"):
        k(a, cai((4, 5), data=(8192, False)), C=cai((3, 5), data=(16384, False)))
    assert not calls


def test_negative_extent_in_cuda_array_interface_refused(recorded):
    k, calls = recorded
    with pytest.raises(ValueError, match=r"'A': __cuda_array_interface__ shape \(-3, 4\) has a "
                                         "negative extent"):
        k(cai((-3, 4)), cai((4, 5), data=(8192, False)), C=cai((3, 5), data=(16384, False)))
    assert not calls


def test_input_shapes_checked_before_the_output_is_asked_for(recorded):
    """Before: mismatched inputs were answered with 'pass the output C by
    name' (from the output allocation, which came first)."""
    k, calls = recorded
    with pytest.raises(ValueError, match=r"argument 'B' has shape \(6, 5\), expected \(4, 5\)"):
        k(cai((3, 4)), cai((6, 5), data=(8192, False)))
    k(cai((3, 4)), cai((4, 5), data=(8192, False)), C=cai((3, 5), data=(16384, False)))
    assert calls == [[3, 5, 4]]


# ------------------------------------------------------------ refused calls record nothing
def test_refused_gpu_tile_records_nothing():
    """Before: gpu_tile's tile and first three binds stayed recorded when its
    last bind was refused (thread.x already taken by 'k')."""
    f, c, u = gemm_parts()
    u.bind("k", "thread.x")
    with pytest.raises(ValueError, match=r"C_update.bind\(j1, 'thread.x'\): loop 'k' of this "
                                         r"statement is already bound to thread.x"):
        u.gpu_tile("i", "j", 4, 4)
    assert [cmd.text for cmd in f._commands] == ["C_update.bind(k, 'thread.x')"]
    assert [lp.name for lp in state_of(f)["C_update"].loops] == ["i", "j", "k"]


@pytest.mark.parametrize("refused", [
    lambda u: u.accumulate_locally("zz", allow_reassociation=True),
    lambda u: u.parallelize("zz", allow_reassociation=True),
    lambda u: u.vectorize("k", 0, allow_reassociation=True),
])
def test_refused_command_leaves_no_allow_reassociation(refused):
    """Before: the allow_reassociation() these calls record first stayed, so
    a later accumulate_locally without it reassociated the sums."""
    f, c, u = shared_ready()
    before = list(f._commands)
    with pytest.raises(ValueError):
        refused(u)
    assert f._commands == before
    assert not state_of(f)["C_update"].reassociate     # nothing left to reorder the sums


def _nvrtc_reason():
    from codegen.cuda import nvrtc
    return nvrtc.unavailable()


@pytest.mark.skipif(_nvrtc_reason() is not None, reason=f"NVRTC cannot be used: {_nvrtc_reason()}")
def test_a_spilling_register_tile_says_so_first(monkeypatch):
    """256 accumulators a thread (micro=16) spill; the build fails under
    -Werror, and the error began with NVRTC's log of unused-variable
    warnings, the spill at its very end. Now its first line names it."""
    from codegen.toolchain import CompileError
    from tiramisu_py.driver import cuda as ck
    monkeypatch.setenv("TIRAMISU_PY_CUDA_COMPILER", "nvrtc")
    monkeypatch.setattr(ck, "CUDA_ARCHS", ("sm_80",))
    f = gpu_gemm.function(128, 128, 64, tile=128, tk=8, micro=16)
    with pytest.raises(CompileError) as info:
        f.compile(target="cuda")
    first = str(info.value).splitlines()[0]
    assert first.startswith("CUDA backend: ptxas spilled registers for sm_80 in gemm_k1 (")
    assert first.endswith("; use smaller register tiles")

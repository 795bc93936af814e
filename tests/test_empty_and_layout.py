"""Empty inputs and memory layout at call time (issue 17).

* Zero extents: every operator and compiled kernel returns NumPy's / torch's
  shape for empty inputs (batch 0, channels 0, K = 0 in GEMM, N = 0 / M = 0,
  a fixed param 0 in a user's Function) and its values: zeros for an empty
  reduction, the bias for a convolution with no input channel.  Compared
  with NumPy, and with torch where it is installed and defines the result
  (torch's conv2d gives shape ``(n, 0, h, w)`` for Ci = 0, which is not the
  sum over no channels plus the bias; NumPy's reference is used there).
* Misaligned NumPy arrays (``np.frombuffer(..., offset=1)``): an input is read
  from an aligned copy, an output is refused as "misaligned".
* Writability is the memory's, not a flag's: see also
  ``test_bad_inputs.test_read_only_torch_output_is_refused_not_a_segfault``.

Inputs are random (``default_rng`` with fixed seeds); float32 tolerances
``rtol=atol=1e-4``."""
import mmap
import os

os.environ.setdefault("OMP_WAIT_POLICY", "passive")

import ctypes  # noqa: E402

import numpy as np  # noqa: E402
import pytest  # noqa: E402

import schedules  # noqa: E402
import tiramisu_py as tp  # noqa: E402
from tiramisu_py.runtime import memory as checks  # noqa: E402
from test_schedules_conv import ref_block, ref_conv  # noqa: E402

try:
    import torch
    import torch.nn.functional as F
except ImportError:      # pragma: no cover - torch is optional
    torch = F = None

RNG = np.random.default_rng(17)
TARGETS = ["c", "llvm"]


def rand(*shape):
    return RNG.standard_normal(shape, dtype=np.float32)


def misaligned(shape, fill=None):
    """A C-contiguous, writable float32 array at an odd address."""
    n = int(np.prod(shape))
    a = np.frombuffer(bytearray(4 * n + 1), np.float32, count=n, offset=1).reshape(shape)
    assert not a.flags.aligned and a.flags.c_contiguous and a.flags.writeable
    if fill is not None:
        a[...] = fill
    return a


def need_torch():
    if torch is None:
        pytest.skip("torch is not installed")


# ------------------------------------------------------------ user Functions
@pytest.mark.parametrize("target", TARGETS)
def test_fixed_zero_param_keeps_the_other_extents(target):
    """[0, N) x [0, 4) with N fixed to 0 is (0, 4), not (0, 0); a constant
    empty loop and an empty interval that does not start at 0 too."""
    f = tp.Function("zero_rows", params={"N": 0})
    i, j = f.var("i", 0, "N"), f.var("j", 0, 4)
    f.computation("C", [i, j], 1.0)
    assert f.compile(target=target)().shape == (0, 4)

    f = tp.Function("zero_const", params={})
    i, j, k = f.var("i", 0, 3), f.var("j", 0, 0), f.var("k", 2, 7)
    f.computation("C", [i, j, k], 1.0)
    assert f.compile(target=target)().shape == (3, 0, 5)

    f = tp.Function("zero_offset", params={"N": 0})
    i, j = f.var("i", 1, "N"), f.var("j", 0, 4)
    f.computation("C", [i, j], 1.0)
    assert f.compile(target=target)().shape == (0, 4)


def test_domain_shaped_output_is_empty_not_negative():
    """X over the triangle 0 <= j < i < N is shaped (N - 1, N - 1); at N = 0
    that is an empty domain, (0, 0), not a negative-extent error."""
    f = tp.Function("triangle", params=["N"])
    i = f.var("i", 0, "N")
    j = f.var("j", 0, i)
    A = f.input("A", ("N",), tp.float32)
    f.computation("X", [i, j], A[i])
    k = f.compile()
    a = rand(3)
    assert k(a).shape == (2, 2)
    assert k(np.zeros(1, np.float32)).shape == (0, 0)
    assert k(np.zeros(0, np.float32)).shape == (0, 0)


def _matmul_function(params):
    f = tp.Function("mm_empty", params=params)
    i, j, k = f.var("i", 0, "N"), f.var("j", 0, "M"), f.var("k", 0, "K")
    A = f.input("A", ("N", "K"), tp.float32)
    B = f.input("B", ("K", "M"), tp.float32)
    C = f.computation("C", [i, j], 0.0)
    C[i, j] += A[i, k] * B[k, j]
    C.update.split("j", 4, names=("j0", "j1"))
    C.update.vectorize("j1", 4)
    C.parallelize("i")
    C.update.parallelize("i")
    return f


@pytest.mark.parametrize("target", TARGETS)
@pytest.mark.parametrize("n,k,m", [(3, 0, 4), (0, 5, 4), (3, 5, 0), (0, 0, 0)])
def test_user_reduction_over_empty_extents(target, n, k, m):
    """Fixed sizes (compiled with the zero in) and free params (zero at call
    time) give NumPy's result: zeros (n, m) for an empty sum.  A fixed
    empty domain used to crash the legality check (AttributeError
    'intersect')."""
    a, b = rand(n, k), rand(k, m)
    fixed = _matmul_function({"N": n, "M": m, "K": k}).compile(target=target)
    free = _matmul_function(["N", "M", "K"]).compile(target=target)
    for kern in (fixed, free):
        out = kern(a, b)
        assert out.shape == (n, m)
        np.testing.assert_array_equal(out, a @ b)
        # an output passed in is overwritten by the init, even when K = 0
        c = np.full((n, m), 7.0, np.float32)
        kern(a, b, C=c)
        np.testing.assert_array_equal(c, a @ b)


# ------------------------------------------------------------------ GEMM
GEMM_EMPTY = [(3, 0, 4), (0, 5, 4), (3, 5, 0), (0, 0, 0), (0, 0, 4), (1, 0, 1)]


@pytest.mark.parametrize("n,k,m", GEMM_EMPTY)
def test_gemm_of_empty_matrices(n, k, m):
    a, b = rand(n, k), rand(k, m)
    out = schedules.gemm(a, b)
    assert isinstance(out, np.ndarray) and out.dtype == np.float32
    assert out.shape == (n, m)
    np.testing.assert_array_equal(out, np.matmul(a, b))
    if torch is not None:
        t = schedules.gemm(torch.from_numpy(a), torch.from_numpy(b))
        ref = torch.from_numpy(a) @ torch.from_numpy(b)
        assert isinstance(t, torch.Tensor) and t.shape == ref.shape
        assert torch.equal(t, ref)


@pytest.mark.parametrize("nb,n,k,m", [(0, 3, 5, 4), (2, 3, 0, 4), (2, 0, 5, 4), (2, 3, 5, 0)])
def test_batched_gemm_of_empty_matrices(nb, n, k, m):
    a, b = rand(nb, n, k), rand(nb, k, m)
    out = schedules.batched_gemm(a, b)
    assert out.shape == (nb, n, m)
    np.testing.assert_array_equal(out, np.matmul(a, b))
    if torch is not None:
        ref = torch.bmm(torch.from_numpy(a), torch.from_numpy(b))
        assert torch.equal(schedules.batched_gemm(torch.from_numpy(a), torch.from_numpy(b)), ref)


def test_gemm_params_for_empty_sizes_are_valid():
    for n, m, k in [(0, 0, 0), (3, 4, 0), (0, 4, 5), (3, 0, 5)]:
        p = schedules.gemm_params(n, m, k)
        assert min(p.mr, p.nr, p.kc, p.mc, p.nc, p.vector) >= 1


# ------------------------------------------------------------------ conv2d
CONV_EMPTY = [  # n, ci, h, w, co, k, stride, padding, dilation, groups, bias
    (0, 3, 8, 8, 4, 3, 1, 1, 1, 1, True),      # batch 0: torch gives (0, 4, 8, 8)
    (0, 3, 8, 8, 4, 3, 1, 1, 1, 1, False),
    (0, 4, 9, 7, 6, 3, 2, 1, 1, 2, True),      # batch 0, grouped, stride 2
    (2, 0, 8, 8, 4, 3, 1, 1, 1, 1, True),      # no input channel: the bias
    (2, 0, 8, 8, 4, 3, 1, 1, 1, 1, False),     # ... or zeros
    (2, 0, 6, 5, 4, 3, 1, 1, 1, 2, True),      # ... grouped
    (2, 3, 8, 8, 0, 3, 1, 1, 1, 1, True),      # no output channel
    (2, 3, 0, 5, 4, 1, 1, 1, 1, 1, True),      # empty rows, all padding: the bias
    (0, 0, 8, 8, 0, 3, 1, 1, 1, 1, False),
]


@pytest.mark.parametrize("case", CONV_EMPTY, ids=lambda c: "x".join(map(str, c)))
@pytest.mark.parametrize("algo", ("auto",) + schedules.CONV_ALGOS)
def test_conv2d_of_empty_inputs(algo, case):
    n, ci, h, w, co, k, stride, padding, dilation, groups, bias = case
    if groups != 1 and algo in ("im2col", "spatial_pack"):
        pytest.skip("needs groups=1")
    x, wt = rand(n, ci, h, w), rand(co, ci // groups, k, k)
    b = rand(co) if bias else None
    ref = ref_conv(x, wt, b, stride, padding, dilation, groups)
    out = schedules.conv2d(x, wt, b, stride, padding, dilation, groups, algo=algo)
    assert out.shape == ref.shape
    np.testing.assert_allclose(out, ref, rtol=1e-4, atol=1e-4)
    if torch is not None and n == 0 and ci > 0 and co > 0:       # torch defines these
        t = F.conv2d(torch.from_numpy(x), torch.from_numpy(wt),
                     None if b is None else torch.from_numpy(b), stride, padding, dilation, groups)
        got = schedules.conv2d(torch.from_numpy(x), torch.from_numpy(wt),
                               None if b is None else torch.from_numpy(b),
                               stride, padding, dilation, groups, algo=algo)
        assert isinstance(got, torch.Tensor) and got.shape == t.shape


def test_conv2d_with_no_input_channel_is_the_bias_torch_tensors():
    """Torch in, torch out; the value is the bias broadcast (F.linear's
    answer for an empty sum; torch's conv2d answers with 0 channels)."""
    need_torch()
    x, wt, b = torch.zeros(2, 0, 5, 6), torch.zeros(3, 0, 3, 3), torch.arange(3.0)
    out = schedules.conv2d(x, wt, b, padding=1, algo="direct")
    assert isinstance(out, torch.Tensor) and out.shape == (2, 3, 5, 6)
    assert torch.equal(out, b[None, :, None, None].expand(2, 3, 5, 6))


def test_conv2d_refuses_an_empty_kernel():
    with pytest.raises(ValueError, match="kernel is 0x3"):
        schedules.conv2d(rand(1, 3, 8, 8), rand(4, 3, 0, 3), algo="direct")


@pytest.mark.parametrize("shape", [(0, 3, 8, 8, 4), (2, 0, 8, 8, 4), (2, 3, 8, 8, 0),
                                   (0, 0, 6, 6, 4)])
@pytest.mark.parametrize("algo", ("auto",) + schedules.FUSED_ALGOS)
def test_conv_relu_maxpool_of_empty_inputs_has_one_shape_for_every_algorithm(shape, algo):
    n, ci, h, w, co = shape
    x, wt, b = rand(n, ci, h, w), rand(co, ci, 3, 3), rand(co)
    ref = ref_block(x, wt, b, 2)
    out = schedules.conv_relu_maxpool(x, wt, b, padding=1, pool=2, algo=algo)
    assert out.shape == ref.shape == (n, co, h // 2, w // 2)
    np.testing.assert_allclose(out, ref, rtol=1e-4, atol=1e-4)
    if torch is not None and n == 0 and ci > 0 and co > 0:
        t = F.max_pool2d(F.relu(F.conv2d(torch.from_numpy(x), torch.from_numpy(wt),
                                         torch.from_numpy(b), padding=1)), 2)
        assert out.shape == tuple(t.shape)


# ------------------------------------------------------------------ misaligned
@pytest.fixture(scope="module")
def matmul():
    return _matmul_function(["N", "M", "K"]).compile()


def test_misaligned_inputs_are_read_from_a_copy(matmul):
    a, b = rand(5, 6), rand(6, 7)
    ma, mb = misaligned(a.shape, a), misaligned(b.shape, b)
    before = ma.copy()
    out = matmul(ma, mb)
    np.testing.assert_allclose(out, a @ b, rtol=1e-4, atol=1e-4)
    np.testing.assert_array_equal(ma, before)
    np.testing.assert_allclose(schedules.gemm(ma, mb), a @ b, rtol=1e-4, atol=1e-4)
    if torch is not None:
        t = matmul(torch.from_numpy(ma), torch.from_numpy(mb))
        np.testing.assert_allclose(t.numpy(), a @ b, rtol=1e-4, atol=1e-4)


def test_misaligned_output_is_refused_as_misaligned(matmul):
    a, b = rand(5, 6), rand(6, 7)
    c = misaligned((5, 7), 3.0)
    with pytest.raises(ValueError, match=r"'C' is misaligned") as exc:
        matmul(a, b, C=c)
    assert "C-contiguous" not in str(exc.value)
    np.testing.assert_array_equal(c, 3.0)
    if torch is not None:
        with pytest.raises(ValueError, match=r"'C' is misaligned"):
            matmul(torch.from_numpy(a), torch.from_numpy(b), C=torch.from_numpy(c))
    # a strided array is still "not C-contiguous"
    with pytest.raises(ValueError, match="'A' is not C-contiguous"):
        matmul(rand(6, 5).T, b)


# ------------------------------------------------------------------ writability
PAGE = mmap.PAGESIZE


@pytest.fixture
def two_pages():
    """An anonymous mapping of two pages, the second one read-only."""
    m = mmap.mmap(-1, 2 * PAGE)
    holder = ctypes.c_char.from_buffer(m)
    addr = ctypes.addressof(holder)
    libc = ctypes.CDLL(None, use_errno=True)
    libc.mprotect.argtypes = [ctypes.c_void_p, ctypes.c_size_t, ctypes.c_int]
    assert libc.mprotect(addr + PAGE, PAGE, mmap.PROT_READ) == 0
    yield addr
    libc.mprotect(addr + PAGE, PAGE, mmap.PROT_READ | mmap.PROT_WRITE)
    del holder
    m.close()


@pytest.mark.parametrize("via", ["ioctl", "text"])
def test_memory_writable_follows_the_page_permissions(two_pages, via, monkeypatch):
    if via == "text":
        monkeypatch.setitem(checks._maps, "ioctl", False)
    addr = two_pages
    if checks.memory_writable(addr, 4) is None:
        pytest.skip("no /proc/self/maps here")
    assert checks.memory_writable(addr, PAGE) is True
    assert checks.memory_writable(addr, 0) is True
    assert checks.memory_writable(addr + PAGE - 4, 8) is False       # spans both
    assert checks.memory_writable(addr + PAGE, 4) is False
    assert checks.memory_writable(8, 4) is False                     # not mapped
    heap = np.zeros(1 << 16, np.float32)
    assert checks.memory_writable(heap.ctypes.data, heap.nbytes) is True


def test_writable_outputs_of_every_origin_are_accepted(matmul, tmp_path):
    """Memory that may be written is not refused: NumPy's and torch's own,
    a read-write or copy-on-write mapping, torch.from_numpy of a writable
    array, a NumPy view of a torch tensor."""
    a, b = rand(3, 4), rand(4, 5)
    path = tmp_path / "c.bin"
    np.zeros(15, np.float32).tofile(path)
    outs = [np.zeros((3, 5), np.float32),
            np.memmap(path, np.float32, mode="r+", shape=(3, 5)),
            np.memmap(path, np.float32, mode="c", shape=(3, 5))]
    if torch is not None:
        outs += [torch.zeros(3, 5), torch.from_numpy(np.zeros((3, 5), np.float32)),
                 torch.zeros(3, 5).numpy(),
                 torch.from_numpy(np.memmap(path, np.float32, mode="r+", shape=(3, 5)))]
    for c in outs:
        if torch is not None and isinstance(c, torch.Tensor):
            matmul(torch.from_numpy(a), torch.from_numpy(b), C=c)
            got = c.numpy()
        else:
            matmul(a, b, C=c)
            got = np.asarray(c)
        np.testing.assert_allclose(got, a @ b, rtol=1e-4, atol=1e-4)


def test_read_only_numpy_view_of_a_torch_tensor_is_refused(matmul, tmp_path):
    """``tensor.numpy()`` says writeable even over read-only pages."""
    need_torch()
    import warnings
    path = tmp_path / "ro.bin"
    np.zeros(15, np.float32).tofile(path)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")       # torch: "the given NumPy array is not writable"
        t = torch.from_numpy(np.memmap(path, np.float32, mode="r", shape=(3, 5)))
    view = t.numpy()
    assert view.flags.writeable
    with pytest.raises(ValueError, match="'C' is read-only"):
        matmul(rand(3, 4), rand(4, 5), C=view)
    with pytest.raises(ValueError, match="'C' is read-only"):
        matmul(torch.from_numpy(rand(3, 4)), torch.from_numpy(rand(4, 5)), C=t)

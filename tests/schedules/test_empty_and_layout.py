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
import sys

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


@pytest.mark.parametrize("target", TARGETS)
def test_domain_shaped_temporary_of_an_empty_domain_is_empty_not_negative(target):
    """S0 over 1 <= i < N - 1 is a temporary of N - 2 elements; at N = 1 its
    domain is empty: the call goes on (it was refused: "param(s) N=1 make
    buffer 'S0' have a negative extent") and leaves the output as the
    program does.  An output the caller sees, or a temporary the user
    shaped, with a negative extent stays refused."""
    def build(out_shape, temp=None):
        f = tp.Function("inner", params=["N"])
        i = f.var("i", 1, "N - 1")
        A = f.input("A", ("N",), tp.float32)
        B = f.buffer("B", (out_shape,), tp.float32, output=True)
        S0 = f.computation("S0", [i], A[i] * 2.0)
        if temp is not None:
            S0.store_in(f.buffer("T", (temp,), tp.float32), [i - 1])
        f.computation("C", [i], S0[i] + 1.0).store_in(B, [i])
        return f.compile(target=target)

    k = build("N")
    for n in (1, 2, 5):
        a, b = rand(n), np.full(n, 7.0, np.float32)
        want = b.copy()
        want[1:n - 1] = a[1:n - 1] * 2 + 1
        np.testing.assert_array_equal(k(a, B=b), want)
    with pytest.raises(ValueError, match=r"param\(s\) N=1 make buffer 'B' have a negative "
                                         r"extent \(\(N - 2\) = -1\)"):
        build("N - 2")(rand(1))
    with pytest.raises(ValueError, match="make buffer 'T' have a negative extent"):
        build("N", temp="N - 2")(rand(1))


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
CONV_EMPTY = [  # n, ci, h, w, co, k, stride, padding, dilation, groups, bias, torch's answer
    (0, 3, 8, 8, 4, 3, 1, 1, 1, 1, True, (0, 4, 8, 8)),       # batch 0: an empty result
    (0, 3, 8, 8, 4, 3, 1, 1, 1, 1, False, (0, 4, 8, 8)),
    (0, 4, 9, 7, 6, 3, 2, 1, 1, 2, True, (0, 6, 5, 4)),       # batch 0, grouped, stride 2
    (2, 0, 8, 8, 4, 3, 1, 1, 1, 1, True, (2, 0, 8, 8)),       # no input channel: no output
    (2, 0, 8, 8, 4, 3, 1, 1, 1, 1, False, (2, 0, 8, 8)),      # channel either (not the bias)
    (2, 0, 6, 5, 4, 3, 1, 1, 1, 2, True, (2, 0, 6, 5)),       # ... grouped
    (0, 3, 0, 5, 4, 1, 1, 1, 1, 1, True, (0, 4, 2, 7)),       # empty rows, no image: taken
    (2, 3, 8, 8, 0, 3, 1, 1, 1, 1, True, "needs at least 1"),  # no output channel: refused
    (2, 3, 0, 5, 4, 1, 1, 1, 1, 1, True, "is empty"),          # empty rows of images: refused
    (0, 0, 8, 8, 0, 3, 1, 1, 1, 1, False, "needs at least 1"),
]


@pytest.mark.parametrize("case", CONV_EMPTY, ids=lambda c: "x".join(map(str, c[:11])))
@pytest.mark.parametrize("algo", ("auto",) + schedules.CONV_ALGOS)
def test_conv2d_of_empty_inputs(algo, case):
    """torch's answer on every algorithm: its result (shape and values) or
    its refusal (torch refuses too)."""
    n, ci, h, w, co, k, stride, padding, dilation, groups, bias, want = case
    x, wt = rand(n, ci, h, w), rand(co, ci // groups, k, k)
    b = rand(co) if bias else None
    args = (stride, padding, dilation, groups)
    if isinstance(want, str):
        with pytest.raises(ValueError, match=want):
            schedules.conv2d(x, wt, b, *args, algo=algo)
        if torch is not None:
            with pytest.raises(RuntimeError):
                F.conv2d(torch.from_numpy(x), torch.from_numpy(wt),
                         None if b is None else torch.from_numpy(b), *args)
        return
    out = schedules.conv2d(x, wt, b, *args, algo=algo)
    assert out.shape == want
    np.testing.assert_array_equal(out, np.zeros(want, np.float32))
    if torch is not None:
        tb = None if b is None else torch.from_numpy(b)
        t = F.conv2d(torch.from_numpy(x), torch.from_numpy(wt), tb, *args)
        got = schedules.conv2d(torch.from_numpy(x), torch.from_numpy(wt), tb, *args, algo=algo)
        assert isinstance(got, torch.Tensor) and got.shape == t.shape == want


def test_conv2d_with_no_input_channel_has_no_output_channel_torch_tensors():
    """Torch in, torch out, torch's answer: an input of 0 channels gives a
    result of 0 channels (aten's conv2d), not the bias broadcast."""
    need_torch()
    x, wt, b = torch.zeros(2, 0, 5, 6), torch.zeros(3, 0, 3, 3), torch.arange(3.0)
    out = schedules.conv2d(x, wt, b, padding=1, algo="direct")
    ref = F.conv2d(x, wt, b, padding=1)
    assert isinstance(out, torch.Tensor) and out.shape == ref.shape == (2, 0, 5, 6)


def test_conv2d_refuses_an_empty_kernel():
    with pytest.raises(ValueError, match="kernel is 0x3"):
        schedules.conv2d(rand(1, 3, 8, 8), rand(4, 3, 0, 3), algo="direct")


@pytest.mark.parametrize("shape", [(0, 3, 8, 8, 4), (2, 0, 8, 8, 4), (2, 3, 8, 8, 0),
                                   (0, 0, 6, 6, 4)])
@pytest.mark.parametrize("algo", ("auto",) + schedules.FUSED_ALGOS)
def test_conv_relu_maxpool_of_empty_inputs_has_one_shape_for_every_algorithm(shape, algo):
    """No image: an empty result; no input or output channel: refused, as
    torch's composition refuses it (conv2d refuses 0 output channels, its
    result of 0 channels max_pool2d refuses)."""
    n, ci, h, w, co = shape
    x, wt, b = rand(n, ci, h, w), rand(co, ci, 3, 3), rand(co)
    torch_refuses = ci == 0 or co == 0
    if torch is not None:
        def ref():
            return F.max_pool2d(F.relu(F.conv2d(torch.from_numpy(x), torch.from_numpy(wt),
                                                torch.from_numpy(b), padding=1)), 2)
        if torch_refuses:
            with pytest.raises(RuntimeError):
                ref()
    if torch_refuses:
        with pytest.raises(ValueError, match="no channel|needs at least 1"):
            schedules.conv_relu_maxpool(x, wt, b, padding=1, pool=2, algo=algo)
        return
    out = schedules.conv_relu_maxpool(x, wt, b, padding=1, pool=2, algo=algo)
    assert out.shape == ref_block(x, wt, b, 2).shape == (n, co, h // 2, w // 2)
    if torch is not None:
        assert out.shape == tuple(ref().shape)


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


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="madvise(MADV_HUGEPAGE) is Linux's")
def test_large_torch_outputs_are_advised_huge_pages():
    """A kernel's torch output is allocated by torch and, from two whole
    2 MiB pages on, advised for transparent huge pages before its first
    touch (torch's allocator does not; NumPy does): the advice covers only
    the whole pages inside the tensor, and nothing is advised for less."""
    torch = pytest.importorskip("torch")
    assert checks.advise_huge_pages(4096, 3 << 20) is False         # no two whole pages
    big = np.empty(6 << 20, np.uint8)
    assert checks.advise_huge_pages(big.ctypes.data, big.nbytes) is True
    out = checks.torch_output((3, 1 << 20), torch.float32, zero=True)
    assert out.dtype == torch.float32 and out.shape == (3, 1 << 20) and not out.any()
    assert checks.torch_output((2, 5), torch.int32, zero=False).shape == (2, 5)
    # through a kernel: a 16 MiB output of torch inputs is a fresh, right tensor
    x = torch.arange(1 << 22, dtype=torch.float32)
    f = tp.Function("twice", params={"N": 1 << 22})
    i = f.var("i", 0, "N")
    a = f.input("a", ("N",), tp.float32)
    f.computation("y", [i], 2.0 * a[i]).vectorize("i", 16)
    y = f.compile()(x)
    assert isinstance(y, torch.Tensor) and torch.equal(y, 2 * x)

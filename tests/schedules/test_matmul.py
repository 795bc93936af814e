"""``schedules.matmul`` and ``torch.ops.tiramisu.matmul``: ``torch.matmul``'s
semantics (1-D operands, 2-D, broadcast batch dimensions, N-D), its
refusals, float32 and float64, autograd; ``schedules.batched_gemm``
broadcasting a batch of 1 (issue 30, A2)."""
import numpy as np
import pytest

import schedules

# (a's shape, b's shape): every case of torch.matmul's rule, empty sizes included
SHAPES = [((3,), (3,)), ((3,), (3, 4)), ((2, 3), (3,)), ((2, 3), (3, 4)), ((5, 2, 3), (3,)),
          ((3,), (5, 3, 4)), ((5, 2, 3), (3, 4)), ((2, 3), (5, 3, 4)), ((1, 2, 3), (5, 3, 4)),
          ((4, 1, 2, 3), (5, 3, 4)), ((2, 1, 2, 3), (1, 3, 3, 4)), ((0, 2, 3), (3, 4)),
          ((2, 0), (0, 4)), ((2, 5, 0, 3), (3, 2)), ((3, 0, 2, 3), (1, 3, 4))]
IDS = [f"{a}@{b}" for a, b in SHAPES]

# (a's shape, b's shape, what the message says): torch refuses each of them too
INVALID = [((), (3,), "at least 1 dimension"), ((3,), (), "at least 1 dimension"),
           ((2, 3), (4, 5), r"inner sizes differ \(3 and 4\)"),
           ((3,), (4,), r"inner sizes differ \(3 and 4\)"),
           ((2, 2, 3), (3, 3, 4), "do not broadcast")]


def _rand(shape, seed=0):
    return np.random.default_rng(seed).standard_normal(shape).astype(np.float32)


@pytest.mark.parametrize("sa,sb", SHAPES, ids=IDS)
def test_matmul_is_numpy_matmul(sa, sb):
    a, b = _rand(sa), _rand(sb, 1)
    out = schedules.matmul(a, b)
    want = np.matmul(a, b)
    assert isinstance(out, np.ndarray) and out.shape == want.shape and out.dtype == np.float32
    np.testing.assert_allclose(out, want, rtol=1e-4, atol=1e-4)


@pytest.mark.parametrize("sa,sb,match", INVALID)
def test_matmul_refuses_what_torch_refuses(sa, sb, match):
    torch = pytest.importorskip("torch", reason="torch is an optional extra; its tests need it")
    with pytest.raises(RuntimeError):
        torch.matmul(torch.zeros(sa), torch.zeros(sb))
    with pytest.raises(ValueError, match=f"matmul: .*{match}"):
        schedules.matmul(np.zeros(sa, np.float32), np.zeros(sb, np.float32))


def test_matmul_names_bad_arguments():
    with pytest.raises(TypeError, match="b: expected float32"):
        schedules.matmul(np.zeros((2, 3), np.float32), np.zeros((3,), np.float64))
    with pytest.raises(TypeError, match="a: expected a NumPy"):
        schedules.matmul([[1.0]], np.zeros((1, 1), np.float32))


def test_batched_gemm_broadcasts_a_batch_of_one():
    a, b = _rand((1, 4, 3)), _rand((5, 3, 2), 1)
    np.testing.assert_allclose(schedules.batched_gemm(a, b), a @ b, rtol=1e-4, atol=1e-4)
    np.testing.assert_allclose(schedules.batched_gemm(b.transpose(0, 2, 1).copy(), a.transpose(
        0, 2, 1).copy()), b.transpose(0, 2, 1) @ a.transpose(0, 2, 1), rtol=1e-4, atol=1e-4)
    with pytest.raises(ValueError, match="a holds 2 matrices but b holds 3"):
        schedules.batched_gemm(_rand((2, 4, 3)), _rand((3, 3, 2)))


def test_batched_products_refuse_the_gpu_by_name():
    """batched_gemm has no CUDA solver: target='cuda' is refused, named
    (it was a compile error about unmapped loops)."""
    a, b = _rand((2, 4, 3)), _rand((2, 3, 2), 1)
    with pytest.raises(ValueError, match="batched_gemm: runs on the CPU only"):
        schedules.batched_gemm(a, b, target="cuda")
    with pytest.raises(ValueError, match="batched_gemm: runs on the CPU only"):
        schedules.matmul(a, b, target="cuda")


# ------------------------------------------------------------------ the torch op
@pytest.fixture(scope="module")
def torch():
    torch = pytest.importorskip("torch", reason="torch is an optional extra; its tests need it")
    import schedules.torch_ops  # noqa: F401
    return torch


@pytest.mark.parametrize("sa,sb", SHAPES, ids=IDS)
@pytest.mark.parametrize("dtype", ["float32", "float64"])
def test_torch_op_is_torch_matmul_with_its_gradients(torch, sa, sb, dtype):
    dt = getattr(torch, dtype)
    g = torch.Generator().manual_seed(0)
    a = torch.randn(sa, dtype=dt, generator=g, requires_grad=True)
    b = torch.randn(sb, dtype=dt, generator=g, requires_grad=True)
    out, want = torch.ops.tiramisu.matmul(a, b), torch.matmul(a, b)
    assert out.shape == want.shape and out.dtype == want.dtype
    torch.testing.assert_close(out, want)
    grad = torch.randn(want.shape, dtype=dt, generator=g)
    for mine, theirs in zip(torch.autograd.grad(out, (a, b), grad),
                            torch.autograd.grad(want, (a, b), grad)):
        torch.testing.assert_close(mine, theirs)


def test_torch_op_gradcheck_opcheck_and_compile(torch):
    ops = torch.ops.tiramisu
    g = torch.Generator().manual_seed(0)
    def d(*shape):
        return torch.randn(shape, dtype=torch.float64, generator=g, requires_grad=True)

    for a, b in [(d(3), d(3)), (d(3), d(2, 3, 4)), (d(2, 1, 2, 3), d(3, 3, 2)), (d(2, 3), d(3))]:
        assert torch.autograd.gradcheck(ops.matmul, (a, b))
        torch.library.opcheck(ops.matmul.default, (a, b))
    # non-contiguous operands (transposed views) and torch.compile without a graph break
    a, b = torch.randn(4, 3, 2).transpose(1, 2), torch.randn(3, 5)
    torch.testing.assert_close(ops.matmul(a, b), a @ b)
    f = torch.compile(lambda a, b: ops.matmul(a, b) + 1, fullgraph=True)
    torch.testing.assert_close(f(a, b), a @ b + 1)


@pytest.mark.parametrize("sa,sb,match", INVALID)
def test_torch_op_refuses_what_torch_refuses(torch, sa, sb, match):
    with pytest.raises(RuntimeError, match=f"tiramisu::matmul: .*{match}"):
        torch.ops.tiramisu.matmul(torch.zeros(sa), torch.zeros(sb))


def test_schedules_matmul_never_drops_autograd(torch):
    a = torch.randn(2, 3, requires_grad=True)
    with pytest.raises(RuntimeError, match="torch.ops.tiramisu.matmul"):
        schedules.matmul(a, torch.randn(3))
    with torch.no_grad():
        torch.testing.assert_close(schedules.matmul(a, torch.ones(3)), a.sum(1))


def test_torch_op_refuses_mixed_and_integer_dtypes(torch):
    with pytest.raises(RuntimeError):
        torch.matmul(torch.zeros(2, 3), torch.zeros(3, dtype=torch.float64))
    with pytest.raises(TypeError, match="tiramisu::matmul: expected float32 or float64"):
        torch.ops.tiramisu.matmul(torch.zeros(2, 3), torch.zeros(3, dtype=torch.float64))
    with pytest.raises(TypeError, match="tiramisu::matmul: expected float32 or float64"):
        torch.ops.tiramisu.matmul(torch.zeros(2, 3, dtype=torch.int64),
                                  torch.zeros(3, dtype=torch.int64))

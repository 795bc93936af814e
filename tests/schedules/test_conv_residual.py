"""A convolution's residual (``schedules.conv2d(..., residual=r)``:
``act(conv2d(x, w, b) + r)``, a residual block's tail): in the epilogue of
the solvers that have one (spatial_pack, pointwise), added after the kernel
by the others, the same bits either way (one float32 sum, then max/min);
the plan of a repeated op call; ``tiramisu::conv2d_folded(residual=...)``;
the residual checked by name."""
from __future__ import annotations

import numpy as np
import pytest

import schedules
from schedules.problems.conv import ConvProblem
from schedules.registry import SOLVERS

torch = pytest.importorskip("torch", reason="compares with torch's conv2d")
F = torch.nn.functional
ALGOS = ("auto", "direct", "spatial_pack", "pointwise", "im2col", "depthwise")

# (n, ci, co, h, k, stride, padding, groups): a 3x3, a 1x1 (pointwise), strided,
# grouped (spatial_pack run per group), depthwise
SHAPES = [(2, 16, 32, 9, 3, 1, 1, 1), (2, 16, 24, 7, 1, 1, 0, 1), (1, 8, 8, 5, 3, 2, 1, 1),
          (2, 8, 8, 6, 3, 1, 1, 2), (2, 8, 8, 6, 3, 1, 1, 8)]


def _then(out, r, activation):
    out = out + r
    return out.relu() if activation == "relu" else out.clamp(0, 6) if activation else out


@pytest.mark.parametrize("shape", SHAPES, ids=lambda s: "x".join(map(str, s)))
def test_every_solver_gives_the_bits_of_the_conv_plus_the_residual(shape):
    n, ci, co, h, k, stride, pad, groups = shape
    g = torch.Generator().manual_seed(0)
    x, w = torch.randn(n, ci, h, h, generator=g), torch.randn(co, ci // groups, k, k, generator=g)
    b = torch.randn(co, generator=g)
    ref = F.conv2d(x, w, b, stride, pad, 1, groups)
    r = torch.randn(ref.shape, generator=g)
    ran = 0
    for algo in ALGOS:
        for activation in (None, "relu", "relu6"):
            p, _ = ConvProblem.from_call("conv2d", x, w, b, stride, pad, 1, groups, algo=algo,
                                         activation=activation, residual=r)
            solver = next((s for s in SOLVERS["conv2d"] if s.name == algo), None)
            if solver is not None and solver.applicable(p) is not True:
                continue
            out = schedules.conv2d(x, w, b, stride, pad, 1, groups, algo=algo,
                                   activation=activation, residual=r)
            plain = schedules.conv2d(x, w, b, stride, pad, 1, groups, algo=algo)
            assert torch.equal(out, _then(plain, r, activation)), (algo, activation)
            torch.testing.assert_close(out, _then(ref, r, activation), rtol=1e-4, atol=1e-4)
            ran += 1
    assert ran >= 9


@pytest.mark.parametrize("algo", ["spatial_pack", "pointwise"])
def test_the_residual_is_in_the_kernel_of_the_solvers_with_an_epilogue(algo):
    """spatial_pack's and pointwise's kernels take the residual (no add
    after them); direct's problem is run without its epilogue."""
    x, w = torch.randn(2, 8, 6, 6), torch.randn(16, 8, 1, 1)
    r = torch.randn(2, 16, 6, 6)
    p, _ = ConvProblem.from_call("conv2d", x, w, None, 1, 0, 1, 1, activation="relu", residual=r)
    solver = next(s for s in SOLVERS["conv2d"] if s.name == algo)
    direct = next(s for s in SOLVERS["conv2d"] if s.name == "direct")
    assert solver.residual and solver.problem_run(p) is p
    assert not direct.residual and direct.problem_run(p) == p.plain()
    assert p.key()["residual"] is True and "residual" not in p.plain().key()
    fn = schedules.solvers.conv_pointwise.function(p.shape, bias=False, residual=True) \
        if algo == "pointwise" else schedules.solvers.conv_dense.spatial_pack(
            p.shape, bias=False, residual=True)
    assert fn.buffers["residual"].kind == "input"


def test_numpy_unbatched_and_a_repeated_op_call():
    x = np.random.default_rng(0).random((8, 5, 5), dtype=np.float32)
    w = np.random.default_rng(1).random((4, 8, 3, 3), dtype=np.float32)
    r = np.random.default_rng(2).random((4, 3, 3), dtype=np.float32)
    out = schedules.conv2d(x, w, residual=r, activation="relu", algo="spatial_pack")
    plain = schedules.conv2d(x, w, algo="spatial_pack")
    assert out.shape == (4, 3, 3) and np.array_equal(out, np.maximum(plain + r, 0))
    # the op's direct call (conv2d_then) plans once and runs the plan after
    from schedules import torch_ops
    xt, wt, bt = (torch.randn(2, 16, 8, 8), torch.randn(16, 16, 3, 3), torch.randn(16))
    rt = torch.randn(2, 16, 8, 8)
    with torch.no_grad():
        first = torch_ops.conv2d_then("relu", xt, wt, bt, [1, 1], [1, 1], [1, 1], 1, "auto", rt)
        again = torch_ops.conv2d_then("relu", xt, wt, bt, [1, 1], [1, 1], [1, 1], 1, "auto", rt)
    assert torch.equal(first, again)
    torch.testing.assert_close(first, (F.conv2d(xt, wt, bt, 1, 1) + rt).relu(), rtol=1e-4,
                               atol=1e-4)


def test_conv2d_folded_takes_a_residual():
    import schedules.torch_fused_ops  # noqa: F401  (registers the op)
    g = torch.Generator().manual_seed(3)
    x, w, b = (torch.randn(2, 16, 7, 7, generator=g), torch.randn(16, 16, 3, 3, generator=g),
               torch.randn(16, generator=g))
    gamma, beta = torch.rand(16, generator=g) + 0.5, torch.randn(16, generator=g)
    mean, var = torch.randn(16, generator=g), torch.rand(16, generator=g) + 0.5
    r = torch.randn(2, 16, 7, 7, generator=g)
    ref = (F.batch_norm(F.conv2d(x, w, b, 1, 1), mean, var, gamma, beta, False, 0.1, 1e-5)
           + r).relu()
    for grad in (False, True):
        with torch.set_grad_enabled(grad):
            out = torch.ops.tiramisu.conv2d_folded(x, w, b, gamma, beta, mean, var, 1e-5, [1, 1],
                                                   [1, 1], [1, 1], 1, residual=r,
                                                   activation="relu")
        torch.testing.assert_close(out, ref, rtol=1e-4, atol=1e-4)
    with pytest.raises(RuntimeError, match="residual must be a torch.float32 tensor of the "
                                           r"result's shape \(2, 16, 7, 7\)"):
        torch.ops.tiramisu.conv2d_folded(x, w, b, gamma, beta, mean, var, 1e-5, [1, 1], [1, 1],
                                         [1, 1], 1, residual=r[:, :8])


def test_a_bad_residual_is_refused_by_name():
    x, w = np.ones((1, 4, 5, 5), np.float32), np.ones((2, 4, 3, 3), np.float32)
    with pytest.raises(ValueError, match=r"conv2d: residual must have the result's shape "
                                         r"\(1, 2, 3, 3\), got \(1, 2, 3, 4\)"):
        schedules.conv2d(x, w, residual=np.ones((1, 2, 3, 4), np.float32))
    with pytest.raises(TypeError, match="conv2d: residual must be of the input's kind"):
        schedules.conv2d(x, w, residual=torch.ones(1, 2, 3, 3))
    with pytest.raises(TypeError, match="residual: expected float32, got float64"):
        schedules.conv2d(x, w, residual=np.ones((1, 2, 3, 3)))
    with pytest.raises(TypeError, match="residual"):
        schedules.conv_relu_maxpool(x, w, residual=np.ones((1, 2, 1, 1), np.float32))

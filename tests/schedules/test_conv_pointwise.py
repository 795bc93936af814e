"""The pointwise conv2d solver (1x1 kernel, stride 1, no padding, one group):
direct's bits on every path (a partial tile of pixels, channels not a
multiple of the register block, each parallel loop, the activations), torch's
layouts and values, and the problems it does not take refused by name."""
from __future__ import annotations

import numpy as np
import pytest

import schedules
from schedules.core import find
from schedules.problems.conv import ConvProblem
from schedules.registry import SOLVERS
from schedules.solvers.conv_pointwise import Pointwise, function

torch = pytest.importorskip("torch", reason="compares with torch's conv2d")
F = torch.nn.functional
SOLVER = next(s for s in SOLVERS["conv2d"] if isinstance(s, Pointwise))
DIRECT = next(s for s in SOLVERS["conv2d"] if s.name == "direct")


def _problem(n, ci, co, h, w, bias=True, activation=None, seed=0):
    g = torch.Generator().manual_seed(seed)
    x, wt = torch.randn(n, ci, h, w, generator=g), torch.randn(co, ci, 1, 1, generator=g)
    b = torch.randn(co, generator=g) if bias else None
    p, _ = ConvProblem.from_call("conv2d", x, wt, b, 1, 0, 1, 1, activation=activation)
    return p, (x, wt, b)


# (n, ci, co, h, w): 5x7 = 35 pixels = two 16-pixel vectors + a tail of 3;
# 20 output channels = two blocks of 8 + 4; one image; three images
SHAPES = [(2, 5, 20, 5, 7), (1, 9, 3, 4, 4), (3, 16, 24, 6, 6)]


@pytest.mark.parametrize("shape", SHAPES, ids=lambda s: "x".join(map(str, s)))
def test_bits_equal_direct_on_every_parallel_loop_and_tile(shape):
    """Bias first, then the Ci products in order: direct's sum bit for bit,
    whatever the tile of pixels (with and without a partial one), the
    register block or the parallel loop; torch's values within rounding."""
    for bias in (True, False) if shape == SHAPES[0] else (True,):
        p, (x, wt, b) = _problem(*shape, bias=bias)
        _, args = ConvProblem.from_call("conv2d", x, wt, b, 1, 0, 1, 1)
        want = DIRECT.run(p, args)
        torch.testing.assert_close(want, F.conv2d(x, wt, b))
        space = SOLVER.space(p)
        for values in ({}, {"parallel": "n"}, {"parallel": "p"}, {"pb": space["pb"][0], "cob": 2},
                       {"pb": space["pb"][-1], "cob": 6}):
            assert torch.equal(SOLVER.run(p, args, values), want), values


@pytest.mark.parametrize("activation", ["relu", "relu6"])
def test_activation_in_the_epilogue_as_torch(activation):
    """The activation applied as each tile is written (the kernel's own
    epilogue, no second pass), NaN kept as torch's relu keeps it."""
    p, (x, wt, b) = _problem(2, 6, 10, 3, 11, activation=activation)
    x[0, 0, 1, 2] = float("nan")
    _, args = ConvProblem.from_call("conv2d", x, wt, b, 1, 0, 1, 1, activation=activation)
    assert activation in SOLVER.activations
    out = SOLVER.solve(p, args)
    act = F.relu if activation == "relu" else F.relu6
    torch.testing.assert_close(out, act(F.conv2d(x, wt, b)), equal_nan=True)
    assert torch.isnan(out[0, :, 1, 2]).all()


@pytest.mark.parametrize("target", ["cpu", "llvm"])
def test_both_backends_equal_direct(target):
    """The C backend's kernel (``target="cpu"``) and LLVM's, each direct's
    bits on the same backend."""
    x, wt, b = torch.randn(2, 6, 5, 7), torch.randn(11, 6, 1, 1), torch.randn(11)
    ours = schedules.conv2d(x, wt, b, algo="pointwise", target=target)
    assert torch.equal(ours, schedules.conv2d(x, wt, b, algo="direct", target=target))
    torch.testing.assert_close(ours, F.conv2d(x, wt, b))


def test_the_public_call_layouts_and_auto():
    """``algo="pointwise"`` from NumPy arrays, an unbatched input and a
    channels-last tensor (not contiguous NCHW) all give torch's result; "auto"
    offers it next to direct and spatial_pack for a 1x1 stride-1 conv."""
    g = torch.Generator().manual_seed(1)
    x, wt, b = torch.randn(2, 7, 5, 6, generator=g), torch.randn(9, 7, 1, 1, generator=g), \
        torch.randn(9, generator=g)
    want = F.conv2d(x, wt, b)
    out = schedules.conv2d(x.numpy(), wt.numpy(), b.numpy(), algo="pointwise")
    assert isinstance(out, np.ndarray) and out.shape == tuple(want.shape)
    np.testing.assert_allclose(out, want.numpy(), rtol=1e-5, atol=1e-5)
    torch.testing.assert_close(schedules.conv2d(x[0], wt, b, algo="pointwise"), want[0])
    last = x.contiguous(memory_format=torch.channels_last)
    torch.testing.assert_close(schedules.conv2d(last, wt, b, algo="pointwise"), want)
    p, _ = ConvProblem.from_call("conv2d", x, wt, b, 1, 0, 1, 1)
    assert [s.name for s in find.candidates(p, SOLVERS["conv2d"])] == \
        ["direct", "pointwise", "spatial_pack"]
    torch.testing.assert_close(schedules.conv2d(x, wt, b), want)


@pytest.mark.parametrize("conf,why", [
    (dict(k=3, padding=1), r"needs a 1x1 kernel, stride 1, no padding and groups=1 \(got 3x3"),
    (dict(stride=2), r"stride \(2, 2\)"),
    (dict(padding=1), r"padding \(1, 1\)"),
    (dict(groups=2), "groups=2"),
], ids=["3x3", "stride", "padding", "groups"])
def test_other_convolutions_are_refused_by_name(conf, why):
    k, groups = conf.get("k", 1), conf.get("groups", 1)
    x, wt = torch.randn(1, 4, 6, 6), torch.randn(4, 4 // groups, k, k)
    with pytest.raises(ValueError, match="pointwise.*" + why):
        schedules.conv2d(x, wt, None, conf.get("stride", 1), conf.get("padding", 0), 1, groups,
                         algo="pointwise")
    p, _ = ConvProblem.from_call("conv2d", x, wt, None, conf.get("stride", 1),
                                 conf.get("padding", 0), 1, groups)
    assert "pointwise" not in [s.name for s in find.candidates(p, SOLVERS["conv2d"])]


def test_low_precision_and_bad_parameters_refused():
    x, wt = torch.randn(1, 4, 3, 3, dtype=torch.bfloat16), torch.randn(4, 4, 1, 1,
                                                                       dtype=torch.bfloat16)
    with pytest.raises(ValueError, match="pointwise.*needs float32 .*bfloat16"):
        schedules.conv2d(x, wt, algo="pointwise")
    p, _ = _problem(1, 4, 4, 3, 3)
    with pytest.raises(ValueError, match="pointwise: parallel must be one of n, p, got 'co'"):
        function(p.shape, parallel="co")
    s3 = ConvProblem.from_call("conv2d", torch.randn(1, 4, 6, 6), torch.randn(4, 4, 3, 3), None,
                               1, 1, 1, 1)[0].shape
    with pytest.raises(ValueError, match="pointwise: needs a 1x1 kernel"):
        function(s3)

"""Grouped convolutions on the NCHWc kernel (ResNeXt's 32 groups): where a
block of output channels fits in a group (``nchwc.group_vectors``),
spatial_pack runs one kernel of every group, each block reading its group's
input channels -- direct's bits (so "auto" offers it), with the epilogues;
other groupings keep the per-group runs "auto" does not offer."""
from __future__ import annotations

import pytest

import schedules
from schedules.blocks.nchwc import group_vectors
from schedules.core.find import candidates
from schedules.host import host
from schedules.problems.conv import ConvProblem
from schedules.registry import SOLVERS

torch = pytest.importorskip("torch", reason="compares with torch's conv2d")

# (n, ci, co, h, groups, stride): 8, 16, 32 and 64 output channels a group;
# strided; more input than output channels a group
SHAPES = [(2, 64, 64, 9, 8, 1), (2, 64, 64, 9, 4, 2), (1, 256, 256, 7, 32, 1),
          (2, 128, 256, 8, 16, 2), (3, 96, 64, 6, 2, 1)]


@pytest.mark.parametrize("shape", SHAPES, ids=lambda s: "x".join(map(str, s)))
def test_one_grouped_kernel_gives_direct_bits(shape):
    n, ci, co, h, groups, stride = shape
    g = torch.Generator().manual_seed(1)
    x, w = torch.randn(n, ci, h, h, generator=g), torch.randn(co, ci // groups, 3, 3, generator=g)
    b, r = torch.randn(co, generator=g), None
    p, _ = ConvProblem.from_call("conv2d", x, w, b, stride, 1, 1, groups)
    assert group_vectors(p.shape)
    assert [s.name for s in candidates(p, SOLVERS["conv2d"])] == ["direct", "spatial_pack"]
    for activation in (None, "relu"):
        direct = schedules.conv2d(x, w, b, stride, 1, 1, groups, algo="direct",
                                  activation=activation)
        r = torch.randn(direct.shape, generator=g)
        ours = schedules.conv2d(x, w, b, stride, 1, 1, groups, algo="spatial_pack",
                                activation=activation)
        assert torch.equal(ours, direct)
        with_r = schedules.conv2d(x, w, b, stride, 1, 1, groups, algo="spatial_pack",
                                  activation=activation, residual=r)
        plain = schedules.conv2d(x, w, b, stride, 1, 1, groups, algo="direct")
        want = (plain + r).relu() if activation else plain + r
        assert torch.equal(with_r, want)
        torch.testing.assert_close(direct, torch.conv2d(x, w, b, stride, 1, 1, groups).relu()
                                   if activation else torch.conv2d(x, w, b, stride, 1, 1, groups),
                                   rtol=1e-4, atol=1e-4)
    for vb in group_vectors(p.shape):                # every block the space offers
        params = {"vb": vb}
        solver = next(s for s in SOLVERS["conv2d"] if s.name == "spatial_pack")
        assert vb in solver.space(p)["vb"]
        assert torch.equal(solver.run(p, ConvProblem.from_call(
            "conv2d", x, w, b, stride, 1, 1, groups)[1], params), plain)


def test_groups_smaller_than_a_block_run_per_group_and_auto_keeps_direct():
    """4 output channels a group (ResNeXt's first stage), a depthwise conv:
    no block fits a group; spatial_pack still runs (per group) when named."""
    half = host().lanes(4) // 2
    x = torch.randn(1, 32, 6, 6)
    for groups in (32 // (half // 2), 32):
        w = torch.randn(32, 32 // groups, 3, 3)
        p, _ = ConvProblem.from_call("conv2d", x, w, None, 1, 1, 1, groups)
        assert not group_vectors(p.shape)
        assert "spatial_pack" not in [s.name for s in candidates(p, SOLVERS["conv2d"])]
        torch.testing.assert_close(
            schedules.conv2d(x, w, None, 1, 1, 1, groups, algo="spatial_pack"),
            torch.conv2d(x, w, None, 1, 1, 1, groups), rtol=1e-4, atol=1e-4)

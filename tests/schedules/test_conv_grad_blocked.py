"""The blocked weight gradients (the taps' sums in registers over every
pixel, channels in the lanes): of a dense conv (no column matrix) and of a
depthwise one (no lanes summed, vector loads at any stride); torch's
gradient for strides, padding, dilation, small and large kernels, and taken
by the op's backward where they apply, the other kernels elsewhere."""
from __future__ import annotations

import pytest

from schedules.problems.conv import ConvShape
from schedules.solvers import conv_grad

torch = pytest.importorskip("torch", reason="compares with torch's weight gradient")
import schedules.torch_ops  # noqa: E402,F401  (registers torch.ops.tiramisu)


# (n, ci, h, w, co, k, stride, padding, dilation, groups): a 3x3 kernel (every tap in
# registers), a 7x7 stride-2 stem (a row of taps at a time), a dilated 2x2
# (3 input channels a block), a 1x1 (12 a block) and a 1x1 of 14 (7 a block);
# grouped: ResNeXt's 32 groups of 4 and of 8 channels (strided), 2 groups of 3 -> 16
CASES = [(2, 5, 9, 11, 16, 3, 1, 1, 1, 1), (1, 3, 20, 18, 32, 7, 2, 3, 1, 1),
         (3, 6, 10, 10, 8, 2, 1, 1, 2, 1), (2, 24, 7, 9, 16, 1, 1, 0, 1, 1),
         (1, 14, 6, 6, 16, 1, 2, 0, 1, 1), (2, 128, 9, 9, 128, 3, 1, 1, 1, 32),
         (1, 256, 10, 11, 256, 3, 2, 1, 1, 32), (2, 6, 8, 8, 32, 3, 1, 1, 1, 2)]


@pytest.mark.parametrize("case", CASES, ids=lambda c: "x".join(map(str, c)))
def test_blocked_kernel_is_torchs_gradient(case):
    n, ci, h, w, co, k, stride, padding, dilation, groups = case
    s = ConvShape(n, ci, h, w, co, k, k, stride, padding, dilation, groups)
    g = torch.Generator().manual_seed(0)
    x, gy = torch.randn(n, ci, h, w, generator=g), torch.randn(n, co, s.ho, s.wo, generator=g)
    ours = conv_grad.blocked_grad_weight(s).compile()(data=x, grad=gy)
    want = torch.nn.grad.conv2d_weight(x, (co, ci // groups, k, k), gy, stride, padding,
                                       dilation, groups)
    torch.testing.assert_close(ours, want, rtol=1e-4, atol=1e-4)


# two blocks of output channels summed at once (conv_grad.out_pairs): a 3x3 of two
# blocks, strided and dilated, and grouped with two blocks in each of two groups
PAIRED = [(2, 5, 9, 11, 32, 3, 1, 1, 1, 1), (1, 8, 13, 12, 64, 3, 2, 1, 1, 2),
          (2, 4, 10, 10, 32, 3, 1, 2, 2, 1)]


@pytest.mark.parametrize("case", PAIRED, ids=lambda c: "x".join(map(str, c)))
def test_paired_blocks_are_torchs_gradient(case):
    n, ci, h, w, co, k, stride, padding, dilation, groups = case
    s = ConvShape(n, ci, h, w, co, k, k, stride, padding, dilation, groups)
    assert conv_grad.out_pairs(s, conv_grad.group_vector(s))
    g = torch.Generator().manual_seed(1)
    x, gy = torch.randn(n, ci, h, w, generator=g), torch.randn(n, co, s.ho, s.wo, generator=g)
    want = torch.nn.grad.conv2d_weight(x, (co, ci // groups, k, k), gy, stride, padding,
                                       dilation, groups)
    for pair in (True, False):
        ours = conv_grad.blocked_grad_weight(s, pair=pair).compile()(data=x, grad=gy)
        torch.testing.assert_close(ours, want, rtol=1e-4, atol=1e-4)


def test_which_kernels_pair_blocks():
    """Kernels of 7 to 12 taps, an even count of blocks in each group."""
    assert conv_grad.out_pairs(ConvShape(2, 64, 56, 56, 64, 3, 3, 1, 1), 16)
    assert not conv_grad.out_pairs(ConvShape(2, 64, 56, 56, 48, 3, 3, 1, 1), 16)   # 3 blocks
    assert not conv_grad.out_pairs(ConvShape(2, 3, 224, 224, 64, 7, 7, 2, 3), 16)  # 49 taps
    assert not conv_grad.out_pairs(ConvShape(2, 64, 28, 28, 64, 1, 1, 1, 0), 16)   # 1 tap
    assert not conv_grad.out_pairs(ConvShape(2, 128, 56, 56, 128, 3, 3, 1, 1, 1, 32), 4)


def test_where_the_blocked_kernel_applies(monkeypatch):
    """Enough pixels over the images (else a block sums too briefly), a
    group's Co a multiple of a vector (or of half of one, at least 8;
    grouped, of a quarter, at least 4); a block of input channels' padded
    images in half of L2 (pinned: 144 -> 24 at 56x56 makes 294 KiB blocks)."""
    assert conv_grad.blocked_applies(ConvShape(2, 64, 56, 56, 64, 3, 3, 1, 1))
    assert not conv_grad.blocked_applies(ConvShape(2, 512, 7, 7, 512, 3, 3, 1, 1))   # 98 px
    assert conv_grad.blocked_applies(ConvShape(16, 512, 7, 7, 512, 3, 3, 1, 1))
    assert not conv_grad.blocked_applies(ConvShape(2, 8, 16, 16, 12, 3, 3, 1, 1))   # Co 12
    assert conv_grad.blocked_applies(ConvShape(2, 8, 16, 16, 16, 3, 3, 1, 1, 1, 2))
    assert conv_grad.blocked_applies(ConvShape(2, 128, 56, 56, 128, 3, 3, 1, 1, 1, 32))
    assert not conv_grad.blocked_applies(ConvShape(2, 64, 16, 16, 64, 3, 3, 1, 1, 1, 32))
    # a block of input channels whose padded images overflow half of L2
    assert conv_grad.channel_block(ConvShape(2, 16, 112, 112, 96, 1, 1, 1, 0)) == 8
    assert not conv_grad.blocked_applies(ConvShape(2, 16, 112, 112, 96, 1, 1, 1, 0))
    with monkeypatch.context() as mp:
        mp.setenv("TIRAMISU_PY_HOST", "l2=1048576")      # half: 512 KiB
        assert conv_grad.blocked_applies(ConvShape(2, 144, 56, 56, 24, 1, 1, 1, 0))
        mp.setenv("TIRAMISU_PY_HOST", "l2=524288")       # half: 256 KiB (Zen 3)
        assert not conv_grad.blocked_applies(ConvShape(2, 144, 56, 56, 24, 1, 1, 1, 0))
    # a pointwise conv's GEMMs where each of many blocks of output channels would
    # make a block of input images in fresh memory, or the weight is large
    assert not conv_grad.blocked_applies(ConvShape(2, 32, 56, 56, 192, 1, 1, 1, 0))
    assert conv_grad.blocked_applies(ConvShape(2, 32, 28, 28, 192, 1, 1, 1, 0))
    assert not conv_grad.blocked_applies(ConvShape(2, 256, 28, 28, 512, 1, 1, 1, 0))
    assert not conv_grad.blocked_applies(ConvShape(2, 256, 56, 56, 512, 1, 1, 2, 0))
    assert conv_grad.blocked_applies(ConvShape(2, 64, 56, 56, 128, 1, 1, 2, 0))
    with pytest.raises(ValueError, match="blocked_grad_weight: needs a group's Co a multiple"):
        conv_grad.blocked_grad_weight(ConvShape(2, 8, 16, 16, 12, 3, 3, 1, 1))


def test_the_ops_backward_takes_it_and_matches_torch(monkeypatch):
    """``torch.ops.tiramisu.conv2d``'s backward builds the blocked kernel for
    a shape it applies to; the gradients (input, weight, bias) are torch's."""
    built = []
    real = conv_grad.blocked_grad_weight
    monkeypatch.setattr(conv_grad, "blocked_grad_weight", lambda s: built.append(s) or real(s))
    g = torch.Generator().manual_seed(1)
    x = torch.randn(2, 6, 24, 25, generator=g)       # 12 x 13 outputs: 312 pixels
    w, b = torch.randn(16, 6, 3, 3, generator=g), torch.randn(16, generator=g)
    grads = []
    for conv in (torch.ops.tiramisu.conv2d, torch.conv2d):
        xs, ws, bs = (t.clone().requires_grad_() for t in (x, w, b))
        y = conv(xs, ws, bs, [2, 2], [1, 1], [1, 1], 1)
        y.backward(torch.ones_like(y))
        grads.append((xs.grad, ws.grad, bs.grad))
    assert [(s.n, s.ci, s.co, s.sh) for s in built] == [(2, 6, 16, 2)]
    for ours, want in zip(*grads):
        torch.testing.assert_close(ours, want, rtol=1e-4, atol=1e-4)


# (n, c, h, w, k, stride, padding): MobileNet's 3x3 at stride 1 and 2, a
# 5x5 kernel (a row of taps at a time), 8 channels (half a 512-bit vector)
DEPTHWISE = [(2, 32, 9, 10, 3, 1, 1), (1, 16, 11, 8, 3, 2, 1), (2, 16, 9, 9, 5, 1, 2),
             (3, 8, 7, 7, 3, 2, 0)]


@pytest.mark.parametrize("case", DEPTHWISE, ids=lambda c: "x".join(map(str, c)))
def test_blocked_depthwise_kernel_is_torchs_gradient(case):
    n, c, h, w, k, stride, padding = case
    s = ConvShape(n, c, h, w, c, k, k, stride, padding, 1, c)
    g = torch.Generator().manual_seed(2)
    x, gy = torch.randn(n, c, h, w, generator=g), torch.randn(n, c, s.ho, s.wo, generator=g)
    ours = conv_grad.blocked_depthwise_grad_weight(s).compile()(data=x, grad=gy)
    want = torch.nn.grad.conv2d_weight(x, (c, 1, k, k), gy, stride, padding, 1, c)
    torch.testing.assert_close(ours.reshape(want.shape), want, rtol=1e-4, atol=1e-4)


def test_the_ops_backward_takes_the_depthwise_kernel_by_channels(monkeypatch):
    """A depthwise conv of 16 channels takes the blocked kernel, one of 12
    (no vector divides it) the columns-in-vectors one; both torch's."""
    built = []
    real = conv_grad.blocked_depthwise_grad_weight
    monkeypatch.setattr(conv_grad, "blocked_depthwise_grad_weight",
                        lambda s: built.append(s.co) or real(s))
    assert conv_grad.vector_of(16) and not conv_grad.vector_of(12)
    g = torch.Generator().manual_seed(3)
    for c in (16, 12):
        torch.testing.assert_close(*_strided_depthwise_grads(c, (2, c, 10, 9), g, "weight"),
                                   rtol=1e-4, atol=1e-4)
    assert built == [16]


def _strided_depthwise_grads(c, shape, g, wrt):
    """The gradient (of the input or of the weight, ``wrt``) of a 3x3
    stride-2 depthwise conv of ``c`` channels by ``tiramisu::conv2d`` and by
    torch."""
    x, w = torch.randn(*shape, generator=g), torch.randn(c, 1, 3, 3, generator=g)
    grads = []
    for conv in (torch.ops.tiramisu.conv2d, torch.conv2d):
        xs, ws = x.clone().requires_grad_(wrt == "input"), w.clone().requires_grad_(wrt == "weight")
        y = conv(xs, ws, None, [2, 2], [1, 1], [1, 1], c)
        y.backward(torch.ones_like(y))
        grads.append(xs.grad if wrt == "input" else ws.grad)
    return grads


# (n, c, h, w, k, stride, padding): MobileNet's 3x3 stride 2 (even and odd maps),
# a 5x5 of padding 2, stride 3 (a phase of one tap), a 2x2 (a phase no tap reaches)
DEPTHWISE_INPUT = [(2, 16, 12, 12, 3, 2, 1), (1, 32, 9, 11, 3, 2, 1), (2, 16, 10, 10, 5, 2, 2),
                   (1, 16, 8, 7, 3, 3, 1), (1, 16, 7, 7, 1, 2, 0)]


@pytest.mark.parametrize("case", DEPTHWISE_INPUT, ids=lambda c: "x".join(map(str, c)))
def test_blocked_depthwise_input_gradient_is_torchs(case):
    n, c, h, w, k, stride, padding = case
    s = ConvShape(n, c, h, w, c, k, k, stride, padding, 1, c)
    g = torch.Generator().manual_seed(4)
    wt, gy = torch.randn(c, 1, k, k, generator=g), torch.randn(n, c, s.ho, s.wo, generator=g)
    ours = conv_grad.blocked_depthwise_grad_input(s).compile()(grad=gy, weight=wt)
    want = torch.nn.grad.conv2d_input((n, c, h, w), wt, gy, stride, padding, 1, c)
    torch.testing.assert_close(ours, want, rtol=1e-5, atol=1e-5)
    with pytest.raises(ValueError, match="blocked_depthwise_grad_input: needs a strided"):
        conv_grad.blocked_depthwise_grad_input(ConvShape(n, c, h, w, c, k, k, 1, padding, 1, c))


def test_the_ops_backward_takes_the_depthwise_input_kernel(monkeypatch):
    """A strided depthwise conv of 16 channels: its input's gradient by the
    blocked kernel; of 12 channels, the spread-out gradient convolved."""
    built = []
    real = conv_grad.blocked_depthwise_grad_input
    monkeypatch.setattr(conv_grad, "blocked_depthwise_grad_input",
                        lambda s: built.append(s.ci) or real(s))
    g = torch.Generator().manual_seed(5)
    for c in (16, 12):
        torch.testing.assert_close(*_strided_depthwise_grads(c, (2, c, 11, 10), g, "input"),
                                   rtol=1e-5, atol=1e-5)
    assert built == [16]


def _made(kind, f):
    """``f()`` and the values of ``kind`` the prepared-weights cache made in it."""
    from schedules.core import prepared as P
    before = P.PREPARATIONS[kind]
    return f(), P.PREPARATIONS[kind] - before


def test_the_input_gradient_packs_its_flipped_weight_in_one_pass(monkeypatch):
    """Where spatial_pack runs a one-group conv's input gradient, the calls of
    a layout after its first flip and pack the weight in one pass (no flipped
    weight made: ``schedules.plans.flipped_conv``): the first call's bits,
    torch's gradient, and a weight written through ``.data`` seen."""
    from schedules import plans
    from schedules.core import call_memo
    from schedules.solvers.conv_dense import SpatialPack
    monkeypatch.setattr(call_memo, "_PLANS", {})                 # (no plan from another test)
    monkeypatch.setattr(plans, "find", lambda *a, **k: SpatialPack())
    torch.manual_seed(5)
    w, g, size = torch.randn(32, 16, 3, 3), torch.randn(2, 32, 11, 11), [2, 16, 11, 11]

    def call():
        return torch.ops.tiramisu.conv2d_grad_input(g, w, size, [1, 1], [1, 1], [1, 1], 1)

    first, flips = _made("flipped_weight", call)
    (second, packs), flips_after = _made("flipped_weight", lambda: _made("flipped_nchwc_weight",
                                                                        call))
    assert (flips, packs, flips_after) == (1, 1, 0)
    assert torch.equal(first, second)
    want = torch.nn.grad.conv2d_input(size, w, g, 1, 1)
    torch.testing.assert_close(second, want, rtol=1e-4, atol=1e-4)
    w.data.mul_(-0.5)                                # (no version bump: compared and seen)
    torch.testing.assert_close(call(), torch.nn.grad.conv2d_input(size, w, g, 1, 1),
                               rtol=1e-4, atol=1e-4)


@pytest.mark.parametrize("k,stride,padding", [(3, 2, 1), (5, 3, 2), (2, 2, 0)])
def test_a_strided_input_gradient_packs_each_phase_in_one_pass(k, stride, padding,
                                                               monkeypatch):
    """A strided conv's input gradient by phases (one stride-1 conv per phase
    of the input's pixels with that phase's taps): after a layout's first
    call, each phase's sub-kernel is flipped and packed in one pass from the
    weight (no sub-kernel made), the first call's bits and torch's
    gradient; a ``.data`` write is seen."""
    from schedules import plans
    from schedules.core import call_memo
    from schedules.solvers.conv_dense import SpatialPack
    monkeypatch.setattr(call_memo, "_PLANS", {})
    monkeypatch.setattr(plans, "find", lambda *a, **k: SpatialPack())
    torch.manual_seed(6)
    s = ConvShape(2, 24, 13, 12, 32, k, k, stride, padding)
    w, g = torch.randn(32, 24, k, k), torch.randn(2, 32, s.ho, s.wo)
    size = [2, 24, 13, 12]

    def call():
        return torch.ops.tiramisu.conv2d_grad_input(g, w, size, [stride] * 2, [padding] * 2,
                                                    [1, 1], 1)

    first, subs = _made("phase_weight", call)
    (second, packs), subs_after = _made("phase_weight", lambda: _made("flipped_nchwc_weight",
                                                                     call))
    phases = sum(1 for th, tw in conv_grad.phase_taps(s) if th and tw)
    assert (subs, packs, subs_after) == (phases, phases, 0)
    assert torch.equal(first, second)
    want = torch.nn.grad.conv2d_input(size, w, g, stride, padding)
    torch.testing.assert_close(second, want, rtol=1e-4, atol=1e-4)
    w.data.mul_(-0.5)
    torch.testing.assert_close(call(), torch.nn.grad.conv2d_input(size, w, g, stride, padding),
                               rtol=1e-4, atol=1e-4)


@pytest.mark.parametrize("k,groups", [(1, 1), (3, 16)])
def test_the_input_gradient_runs_the_convs_plan_elsewhere(k, groups, monkeypatch):
    """Where another solver than spatial_pack runs the input gradient's conv
    (a pointwise one, a depthwise one), the calls of a layout after its
    first run the conv's plan on the flipped weight: no library call (no
    parse or find), the first call's bits, torch's gradient, a ``.data``
    write seen."""
    from schedules import api
    from schedules.core import call_memo
    monkeypatch.setattr(call_memo, "_PLANS", {})
    calls, real = [], api.conv2d
    monkeypatch.setattr(api, "conv2d", lambda *a, **kw: calls.append(1) or real(*a, **kw))
    torch.manual_seed(7)
    w = torch.randn(16, 16 // groups, k, k)
    g, size = torch.randn(2, 16, 9, 9), [2, 16, 9, 9]

    def call():
        return torch.ops.tiramisu.conv2d_grad_input(g, w, size, [1, 1], [k // 2] * 2, [1, 1],
                                                    groups)
    first = call()
    assert len(calls) == 1
    second = call()
    assert len(calls) == 1 and torch.equal(first, second)
    want = torch.nn.grad.conv2d_input(size, w, g, 1, k // 2, 1, groups)
    torch.testing.assert_close(second, want, rtol=1e-4, atol=1e-4)
    w.data.mul_(-0.5)
    torch.testing.assert_close(call(), torch.nn.grad.conv2d_input(size, w, g, 1, k // 2, 1,
                                                                  groups),
                               rtol=1e-4, atol=1e-4)

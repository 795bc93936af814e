"""Convolutions as torch computes them, on every path (issue 30, item A2):
unbatched (C, H, W) inputs, ``padding="same"`` with an odd total (torch's
extra zeros below and right, dilation included) and "valid", ``groups`` on
every algorithm, the modules' ``padding_mode``, and empty shapes (torch's
result or torch's refusal).  Each case is compared with
``torch.nn.functional.conv2d`` / ``nn.Conv2d``: ``schedules.conv2d`` and the
fused block on both CPU backends (``target="cpu"``, C, and ``"llvm"``),
``torch.ops.tiramisu.*`` and the ``schedules.nn`` modules with their
gradients.  Tiny shapes, shared between tests so kernels compile once.
"""
from __future__ import annotations

import numpy as np
import pytest

import schedules

torch = pytest.importorskip("torch", reason="the conformance suite compares with torch")
F = torch.nn.functional
import schedules.torch_ops  # noqa: E402,F401  (registers torch.ops.tiramisu)

TARGETS = ("cpu", "llvm")
TOL = dict(rtol=1e-4, atol=1e-4)

CASES = [  # id, input shape, weight shape, conv2d's keywords
    ("unbatched", (3, 7, 6), (4, 3, 3, 3), dict(padding=1)),
    ("same-odd-total", (2, 3, 7, 6), (4, 3, 2, 3), dict(padding="same")),
    ("same-dilated-grouped-unbatched", (4, 7, 6), (4, 2, 3, 2),
     dict(padding="same", dilation=(2, 3), groups=2)),
    ("valid-grouped", (2, 6, 6, 5), (6, 2, 3, 3), dict(padding="valid", groups=3)),
    ("depthwise-strided", (1, 4, 7, 6), (8, 1, 3, 3), dict(padding=(1, 0), stride=2, groups=4)),
]
IDS = [c[0] for c in CASES]


def rand(*shape, seed=0):
    return np.random.default_rng(seed + sum(shape)).standard_normal(shape).astype(np.float32)


def torch_conv(x, w, b, **kw):
    return F.conv2d(torch.from_numpy(x), torch.from_numpy(w),
                    None if b is None else torch.from_numpy(b), **kw).numpy()


# ------------------------------------------------------------------ schedules.*
@pytest.mark.parametrize("target", TARGETS)
@pytest.mark.parametrize("algo", ("auto",) + schedules.CONV_ALGOS + ("sparse",))
@pytest.mark.parametrize("case", CASES, ids=IDS)
def test_conv2d_matches_torch(case, algo, target):
    _, xs, ws, kw = case
    x, w, b = rand(*xs), rand(*ws), rand(ws[0])
    out = schedules.conv2d(x, w, b, algo=algo, target=target, **kw)
    want = torch_conv(x, w, b, **kw)
    assert out.shape == want.shape
    np.testing.assert_allclose(out, want, **TOL)


@pytest.mark.parametrize("case", CASES, ids=IDS)
def test_auto_is_direct_bit_for_bit_and_torch_in_torch_out(case):
    """"auto" gives direct's bits for every case (grouped ones included),
    and torch tensors in give a torch tensor of torch's shape."""
    _, xs, ws, kw = case
    x, w = rand(*xs), rand(*ws)
    auto = schedules.conv2d(x, w, **kw)
    np.testing.assert_array_equal(auto, schedules.conv2d(x, w, algo="direct", **kw))
    t = schedules.conv2d(torch.from_numpy(x), torch.from_numpy(w), **kw)
    assert isinstance(t, torch.Tensor) and t.shape == F.conv2d(torch.from_numpy(x),
                                                               torch.from_numpy(w), **kw).shape


@pytest.mark.parametrize("case", CASES, ids=IDS)
def test_sparse_conv2d_matches_torch(case):
    """The CSR path with a sparse weight (grouped: each group its rows)."""
    _, xs, ws, kw = case
    x, w, b = rand(*xs), rand(*ws), rand(ws[0])
    w[np.abs(w) < 0.6] = 0
    out = schedules.sparse_conv2d(x, schedules.CSRWeights.from_dense(w), b, **kw)
    np.testing.assert_allclose(out, torch_conv(x, w, b, **kw), **TOL)


BLOCKS = [  # id, input shape, weight shape, keywords (3x3 kernels, stride 1: Winograd's too)
    ("unbatched", (3, 8, 7), (4, 3, 3, 3), dict(padding=1)),
    ("groups", (2, 4, 6, 8), (6, 2, 3, 3), dict(padding=1, groups=2)),
    ("same-odd-total", (1, 3, 7, 6), (4, 3, 2, 2), dict(padding="same")),
]


@pytest.mark.parametrize("target", TARGETS)
@pytest.mark.parametrize("algo", schedules.FUSED_ALGOS + ("sparse",))
@pytest.mark.parametrize("case", BLOCKS, ids=[c[0] for c in BLOCKS])
def test_fused_block_matches_torch(case, algo, target):
    _, xs, ws, kw = case
    if algo == "winograd" and ws[2:] != (3, 3):
        pytest.skip("Winograd F(2x2, 3x3) takes 3x3 kernels (its applicable says so)")
    x, w, b = rand(*xs), rand(*ws), rand(ws[0])
    out = schedules.conv_relu_maxpool(x, w, b, pool=2, algo=algo, target=target, **kw)
    want = F.max_pool2d(F.relu(torch.from_numpy(torch_conv(x, w, b, **kw))), 2).numpy()
    assert out.shape == want.shape
    np.testing.assert_allclose(out, want, **TOL)


# ------------------------------------------------------------------ empty shapes
EMPTY = [  # input shape, weight shape, keywords: torch's result shape or refusal
    ((0, 3, 5, 5), (4, 3, 3, 3), dict(padding=1)),
    ((2, 0, 5, 5), (4, 0, 3, 3), dict(stride=2)),             # no input channel: (2, 0, 2, 2)
    ((0, 5, 5), (4, 0, 3, 3), dict(padding="same")),          # unbatched, no channel
    ((0, 3, 0, 4), (4, 3, 1, 1), dict(padding=1)),            # no image: empty rows taken
    ((2, 3, 5, 5), (0, 3, 3, 3), {}),                         # no output channel: refused
    ((2, 4, 5, 5), (1, 2, 3, 3), dict(groups=2)),             # fewer outputs than groups
    ((2, 3, 0, 5), (4, 3, 1, 1), dict(padding=1)),            # empty rows of images: refused
    ((1, 3, 2, 2), (4, 3, 3, 3), {}),                         # the kernel does not fit
]


@pytest.mark.parametrize("target", TARGETS)
@pytest.mark.parametrize("xs,ws,kw", EMPTY, ids=lambda v: "x".join(map(str, v))
                         if isinstance(v, tuple) else None)
def test_empty_shapes_as_torch(xs, ws, kw, target):
    x, w = rand(*xs), rand(*ws)
    try:
        want = torch_conv(x, w, None, **kw)
    except RuntimeError:
        with pytest.raises(ValueError):
            schedules.conv2d(x, w, target=target, **kw)
        with pytest.raises(RuntimeError):
            torch.ops.tiramisu.conv2d(torch.from_numpy(x), torch.from_numpy(w), **_listed(kw))
        return
    for algo in ("auto",) + schedules.CONV_ALGOS:
        out = schedules.conv2d(x, w, algo=algo, target=target, **kw)
        assert out.shape == want.shape
    got = torch.ops.tiramisu.conv2d(torch.from_numpy(x), torch.from_numpy(w), **_listed(kw))
    assert got.shape == want.shape


def _listed(kw):
    """conv2d's keywords as aten's schema takes them (int lists, a padding
    string, an int groups)."""
    return {k: v if isinstance(v, str) or k == "groups" else
            (list(v) if isinstance(v, tuple) else [v, v]) for k, v in kw.items()}


def test_refusals_as_torch():
    with pytest.raises(ValueError, match=r"input must be 3-D \(C, H, W"):
        schedules.conv2d(rand(5, 5), rand(4, 1, 3, 3))
    with pytest.raises(RuntimeError, match="input must be 3-D"):
        torch.ops.tiramisu.conv2d(torch.zeros(5, 5), torch.zeros(4, 1, 3, 3))
    with pytest.raises(ValueError, match="no channel"):          # torch's max_pool2d refuses
        schedules.conv_relu_maxpool(rand(2, 0, 6, 6), rand(4, 0, 3, 3), padding=1)
    with pytest.raises(ValueError, match="strided"):
        schedules.conv2d(rand(1, 3, 6, 6), rand(4, 3, 2, 2), stride=2, padding="same")


# ------------------------------------------------------------------ torch ops: grads
def _inputs(xs, ws, dtype, seed=0):
    g = torch.Generator().manual_seed(seed)
    x = torch.randn(xs, generator=g, dtype=dtype, requires_grad=True)
    w = torch.randn(ws, generator=g, dtype=dtype, requires_grad=True)
    b = torch.randn(ws[0], generator=g, dtype=dtype, requires_grad=True)
    return x, w, b


def _grads(out, inputs):
    g = torch.Generator().manual_seed(9)
    return torch.autograd.grad(out, inputs, torch.randn(out.shape, generator=g, dtype=out.dtype))


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
@pytest.mark.parametrize("case", CASES + [("no-input-channel", (2, 0, 5, 5), (4, 0, 3, 3),
                                           dict(padding=1))], ids=IDS + ["no-input-channel"])
def test_torch_op_and_its_gradients_match_torch(case, dtype):
    _, xs, ws, kw = case
    x, w, b = _inputs(xs, ws, dtype)
    ours = torch.ops.tiramisu.conv2d(x, w, b, **_listed(kw))
    ref = F.conv2d(x, w, b, **kw)
    tol = dict(rtol=1e-4, atol=1e-4) if dtype == torch.float32 else {}
    torch.testing.assert_close(ours, ref, **tol)
    if ref.numel():
        for a, r in zip(_grads(ours, (x, w, b)), _grads(ref, (x, w, b))):
            torch.testing.assert_close(a, r, **tol)


@pytest.mark.parametrize("case", CASES, ids=IDS)
def test_sparse_op_and_its_gradients_match_torch(case):
    """``tiramisu::sparse_conv2d`` (and ``.padding``): the CSR weight's
    values get the dense gradient at the nonzeros."""
    _, xs, ws, kw = case
    x, w, b = _inputs(xs, ws, torch.float32)
    dense = w.detach() * (w.detach().abs() > 0.6)
    csr = schedules.CSRWeights.from_dense(dense.numpy())
    values = torch.tensor(csr.values, requires_grad=True)
    ours = torch.ops.tiramisu.sparse_conv2d(
        x, torch.as_tensor(np.array(csr.rowptr), dtype=torch.int64),
        torch.as_tensor(np.array(csr.colidx), dtype=torch.int64), values, list(ws), b,
        **_listed(kw))
    wref = dense.clone().requires_grad_(True)
    ref = F.conv2d(x, wref, b, **kw)
    torch.testing.assert_close(ours, ref, rtol=1e-4, atol=1e-4)
    gx, gv, gb = _grads(ours, (x, values, b))
    rx, rw, rb = _grads(ref, (x, wref, b))
    torch.testing.assert_close(gx, rx, rtol=1e-4, atol=1e-4)
    torch.testing.assert_close(gb, rb, rtol=1e-4, atol=1e-4)
    torch.testing.assert_close(gv, rw[dense != 0], rtol=1e-4, atol=1e-4)


def test_torch_op_gradcheck_uneven_same_unbatched_grouped():
    x, w, b = _inputs((4, 5, 6), (4, 2, 2, 3), torch.float64)
    torch.autograd.gradcheck(lambda x, w, b: torch.ops.tiramisu.conv2d(
        x, w, b, padding="same", groups=2), (x, w, b))
    torch.autograd.gradcheck(lambda x, w, b: torch.ops.tiramisu.conv_relu_maxpool(
        x, w, b, padding="same", groups=2, pool=2), (x, w, b))


@pytest.mark.parametrize("case", BLOCKS, ids=[c[0] for c in BLOCKS])
def test_fused_op_and_gradients_match_torch(case):
    _, xs, ws, kw = case
    x, w, b = _inputs(xs, ws, torch.float32)
    ours = torch.ops.tiramisu.conv_relu_maxpool(x, w, b, **_listed(kw), pool=2)
    ref = F.max_pool2d(F.relu(F.conv2d(x, w, b, **kw)), 2)
    torch.testing.assert_close(ours, ref, rtol=1e-4, atol=1e-4)
    for a, r in zip(_grads(ours, (x, w, b)), _grads(ref, (x, w, b))):
        torch.testing.assert_close(a, r, rtol=1e-4, atol=1e-4)


# ------------------------------------------------------------------ modules, convert
MODULES = [  # nn.Conv2d's keywords (in 4 channels, out 6, kernel (2, 3)), the input's shape
    (dict(padding="same", padding_mode="reflect", dilation=(1, 2)), (2, 4, 7, 8)),
    (dict(padding=(1, 2), padding_mode="circular", groups=2), (4, 7, 8)),
    (dict(padding=1, padding_mode="replicate", stride=2), (4, 7, 8)),
]


@pytest.mark.parametrize("kw,shape", MODULES,
                         ids=lambda v: "-".join(f"{k}={u}" for k, u in v.items())
                         if isinstance(v, dict) else "x".join(map(str, v)))
def test_modules_match_torch_with_their_gradients(kw, shape):
    import schedules.nn as tnn
    torch.manual_seed(0)
    m = torch.nn.Conv2d(4, 6, (2, 3), **kw)
    ours = (tnn.Conv2d.from_torch(m), tnn.SparseConv2d.from_torch(m),
            tnn.ConvReLUMaxPool2d.from_torch(m, pool=2))
    x = torch.randn(shape, requires_grad=True)
    for mod, ref in zip(ours, (m(x), m(x), F.max_pool2d(m(x).relu(), 2))):
        y = mod(x)
        torch.testing.assert_close(y, ref, rtol=1e-4, atol=1e-4)
        params = (x, m.weight) if mod is not ours[1] else (x,)
        for a, r in zip(_grads(y, params), _grads(ref, params)):
            torch.testing.assert_close(a, r, rtol=1e-4, atol=1e-4)


def test_convert_keeps_padding_mode_groups_and_unbatched_inputs():
    import schedules.nn as tnn
    torch.manual_seed(0)
    model = torch.nn.Sequential(
        torch.nn.Conv2d(4, 8, 3, padding=1, padding_mode="reflect", groups=2), torch.nn.ReLU(),
        torch.nn.MaxPool2d(2),
        torch.nn.Conv2d(8, 4, 2, padding="same", padding_mode="circular"))
    x = torch.randn(4, 9, 10)
    want = model(x)
    tnn.convert(model)
    assert isinstance(model[0], tnn.ConvReLUMaxPool2d) and isinstance(model[1], tnn.Conv2d)
    torch.testing.assert_close(model(x), want, rtol=1e-4, atol=1e-4)
    with pytest.raises(RuntimeError, match="[Pp]adding"):      # torch's own refusal (F.pad)
        model(torch.randn(4, 1, 1))

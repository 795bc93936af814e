"""schedules.resize_conv_relu_maxpool (the TIRAMISU paper's
Resize-Conv-ReLU-MaxPool block) against torch's
``max_pool2d(relu(conv2d(interpolate(x, size, mode, align_corners=False))))``:
both modes, odd sizes, up- and down-scaling, stride and padding, dense and
CSR weights, both CPU backends; torch's coordinate rules on many sizes; the
resized image never in memory (the kernels' buffers); the torch op and the
module (forward, fake shapes, backward refused); bad arguments refused with
the argument named; schedules.prune_magnitude.  Nothing is timed."""
import os
import re

os.environ.setdefault("OMP_WAIT_POLICY", "passive")

import numpy as np
import pytest

import schedules
from schedules.blocks import resize
from schedules.problems.conv import ConvShape

torch = pytest.importorskip("torch", reason="the reference is torch's interpolate")
F = torch.nn.functional
RNG = np.random.default_rng(34)

# (N, Ci, H, W) -> size, Co, stride, padding: up odd, down odd, one axis each way + stride 2
CASES = [((2, 3, 7, 9), (13, 11), 5, 1, 1),
         ((1, 3, 17, 15), (9, 8), 4, 1, 0),
         ((2, 2, 6, 21), (11, 10), 8, 2, 1)]


def reference(x, size, w, b, pool, mode, stride, padding):
    kw = {} if mode == "nearest" else {"align_corners": False}
    y = F.interpolate(torch.as_tensor(x), size=size, mode=mode, **kw)
    y = F.conv2d(y, torch.as_tensor(w), None if b is None else torch.as_tensor(b), stride,
                 padding)
    return F.max_pool2d(F.relu(y), pool).numpy()


def data(xs, co, density=1.0):
    x = RNG.standard_normal(xs, dtype=np.float32)
    w = RNG.standard_normal((co, xs[1], 3, 3), dtype=np.float32)
    if density < 1:
        w = schedules.prune_magnitude(w, density)
    return x, w, RNG.standard_normal(co, dtype=np.float32)


@pytest.mark.parametrize("target", ["c", "llvm"])
@pytest.mark.parametrize("mode", ["bilinear", "nearest"])
@pytest.mark.parametrize("case", CASES, ids=["up", "down", "mixed-stride2"])
def test_dense_block_matches_torch(case, mode, target):
    xs, size, co, stride, padding = case
    x, w, b = data(xs, co)
    out = schedules.resize_conv_relu_maxpool(x, size, w, b, mode=mode, stride=stride,
                                             padding=padding, target=target)
    np.testing.assert_allclose(out, reference(x, size, w, b, 2, mode, stride, padding),
                               rtol=1e-4, atol=1e-4)


@pytest.mark.parametrize("target", ["c", "llvm"])
@pytest.mark.parametrize("mode", ["bilinear", "nearest"])
@pytest.mark.parametrize("case", CASES[:2], ids=["up", "down"])
def test_sparse_block_matches_torch(case, mode, target):
    xs, size, co, stride, padding = case
    x, w, b = data(xs, co, density=0.3)
    csr = schedules.CSRWeights.from_dense(w)
    out = schedules.resize_conv_relu_maxpool(x, size, csr, b, mode=mode, stride=stride,
                                             padding=padding, target=target)
    np.testing.assert_allclose(out, reference(x, size, w, b, 2, mode, stride, padding),
                               rtol=1e-4, atol=1e-4)


def test_torch_tensors_pool_3_and_no_bias():
    x, w, _ = data((1, 3, 10, 12), 6)
    out = schedules.resize_conv_relu_maxpool(torch.from_numpy(x), 16, torch.from_numpy(w),
                                             pool=3, padding=1)
    assert isinstance(out, torch.Tensor)
    np.testing.assert_allclose(out.numpy(), reference(x, (16, 16), w, None, 3, "bilinear", 1, 1),
                               rtol=1e-4, atol=1e-4)


@pytest.mark.parametrize("n_in, n_out", [(7, 13), (13, 7), (5, 5), (4, 8), (224, 224),
                                         (300, 224), (97, 224), (3, 100), (100, 3), (1, 6)])
def test_the_coordinates_are_torchs(n_in, n_out):
    """Resizing a ramp (the value of row i is i) gives the source index
    (nearest) or the weighted pair (bilinear) exactly as torch's tables."""
    ramp = torch.arange(n_in, dtype=torch.float32).reshape(1, 1, n_in, 1)
    near = F.interpolate(ramp, size=(n_out, 1), mode="nearest").reshape(-1).numpy()
    np.testing.assert_array_equal(resize.nearest_table(n_in, n_out), near.astype(np.int32))
    lin = F.interpolate(ramp, size=(n_out, 1), mode="bilinear",
                        align_corners=False).reshape(-1).numpy()
    i0, i1, l0, l1 = resize.linear_table(n_in, n_out)
    assert ((0 <= i0) & (i0 <= i1) & (i1 < n_in)).all()
    np.testing.assert_allclose(i0 * l0 + i1 * l1, lin, rtol=1e-6, atol=1e-5)


def _allocations(source):
    """{buffer: number of floats} of every array the generated C allocates."""
    out = {}
    for name, dims in re.findall(r"float \(\*restrict (\w+)\)[^=]*= tp_alloc\(\(const int64_t\[\]\)"
                                 r"\{([0-9, ]+)\}", source):
        out[name] = int(np.prod([int(d) for d in dims.split(",")]))
    for name, dims in re.findall(r"float (\w+)((?:\[\d+\])+)\s*(?:__attribute__[^;]*)?;", source):
        out[name] = int(np.prod([int(d) for d in re.findall(r"\d+", dims)]))
    return out


@pytest.mark.parametrize("parallel", ["n", "c"])
def test_the_dense_block_never_holds_a_resized_image(parallel):
    """Only a band of resized rows per tile exists: every buffer of the
    kernel is smaller than one resized image (Ci x H x W), and the band is
    the rows one tile reads (pool * rows + 2 halo rows of a 3x3 kernel)."""
    s = ConvShape(2, 3, 24, 22, 16, 3, 3, 1, 1)
    f = schedules.resize_conv_relu_maxpool_function(s, (17, 19), "bilinear", pool=2, rows=2,
                                                    parallel=parallel)
    source = f.compile(target="c").source
    sizes = _allocations(source)
    image = s.ci * s.h * s.w
    assert "x_band" in source and "x_image" not in source
    assert all(v < image for k, v in sizes.items()), sizes
    assert re.search(r"x_band\)?\[\d+\]\[6\]\[24\]", source) or "{1, 6, 24, 3}" in source


def test_the_sparse_block_writes_the_resize_into_its_own_padded_image():
    """CSR: the resized values go straight into the sparse kernel's flat
    padded image of one image (its input layout), never a batch of resized
    images nor a second copy."""
    s = ConvShape(4, 3, 24, 22, 8, 3, 3, 1, 1)
    f = schedules.resize_conv_relu_maxpool_function(s, (17, 19), "nearest", sparse=True)
    source = f.compile(target="c").source
    sizes = _allocations(source)
    assert sizes and all(v < 2 * s.ci * s.hp * s.wp for v in sizes.values()), sizes
    assert "data[" in source and len(re.findall(r"x_image\[[^]]+\] = ", source)) >= 1


def test_torch_op_and_module():
    import schedules.nn as snn
    x, w, b = data((2, 3, 9, 11), 8)
    xt, wt, bt = map(torch.from_numpy, (x, w, b))
    out = torch.ops.tiramisu.resize_conv_relu_maxpool(xt, [14, 12], wt, bt, 2, mode="nearest",
                                                      padding=[1])
    np.testing.assert_allclose(out.numpy(), reference(x, (14, 12), w, b, 2, "nearest", 1, 1),
                               rtol=1e-4, atol=1e-4)
    from torch._subclasses.fake_tensor import FakeTensorMode
    with FakeTensorMode() as mode:
        fake = torch.ops.tiramisu.resize_conv_relu_maxpool(
            mode.from_tensor(xt), [14, 12], mode.from_tensor(wt), None, 2, padding=[1])
    assert tuple(fake.shape) == (2, 8, 7, 6)
    m = snn.ResizeConvReLUMaxPool2d(3, 8, (14, 12), padding=1)
    with torch.no_grad():
        m.weight.copy_(wt)
        m.bias.copy_(bt)
        got = m(xt)
    np.testing.assert_allclose(got.numpy(), reference(x, (14, 12), w, b, 2, "bilinear", 1, 1),
                               rtol=1e-4, atol=1e-4)
    assert "size=(14, 12)" in repr(m)
    sparse = snn.ResizeConvReLUMaxPool2d(3, 8, 14, padding=1, algo="sparse")
    with torch.no_grad():
        sparse.weight.copy_(schedules.prune_magnitude(wt, 0.2))
        got = sparse(xt)
    ref = reference(x, (14, 14), sparse.weight.detach().numpy(), sparse.bias.detach().numpy(), 2,
                    "bilinear", 1, 1)
    np.testing.assert_allclose(got.detach().numpy(), ref, rtol=1e-4, atol=1e-4)
    y = m(xt)                       # forward only: the gradient is refused, by name
    with pytest.raises(RuntimeError, match="resize_conv_relu_maxpool has no backward"):
        y.sum().backward()
    with pytest.raises(RuntimeError, match="resize_conv_relu_maxpool has no backward"):
        schedules.resize_conv_relu_maxpool(xt, 12, wt.requires_grad_(), bt).sum().backward()


@pytest.mark.parametrize("kwargs, named", [
    (dict(mode="bicubic"), "mode"),
    (dict(size=0), "size"),
    (dict(size=(4, 5, 6)), "size"),
    (dict(size=2.5), "size"),
    (dict(pool=11), "pool"),
    (dict(target="cuda"), "target"),
    (dict(stride=0), "stride"),
    (dict(padding=-1), "padding"),
    (dict(w=np.zeros((4, 2, 3, 3), np.float32)), "weight"),
    (dict(x=np.zeros((3, 9, 9), np.float32)), "x"),
    (dict(x=np.zeros((1, 3, 9, 9), np.float64)), "x"),
    (dict(b=np.zeros(5, np.float32)), "bias"),
    (dict(x=[[1.0]]), "x"),
    (dict(x=np.zeros((1, 3, 0, 9), np.float32)), "x"),
])
def test_bad_arguments_are_refused_naming_them(kwargs, named):
    args = dict(x=np.zeros((1, 3, 9, 9), np.float32), size=12,
                w=np.zeros((4, 3, 3, 3), np.float32), b=None)
    args.update({k: kwargs.pop(k) for k in ("x", "size", "w", "b") if k in kwargs})
    with pytest.raises((ValueError, TypeError), match=named):
        schedules.resize_conv_relu_maxpool(args["x"], args["size"], args["w"], args["b"],
                                           **kwargs)


def test_torch_op_refuses_what_torch_refuses():
    import schedules.torch_fused_ops  # noqa: F401  (registers the op: not another test's import)
    x, w = torch.zeros(1, 3, 9, 9), torch.zeros(4, 3, 3, 3)
    with pytest.raises(RuntimeError, match="mode"):
        torch.ops.tiramisu.resize_conv_relu_maxpool(x, [12, 12], w, mode="area")
    with pytest.raises(RuntimeError, match="size"):
        torch.ops.tiramisu.resize_conv_relu_maxpool(x, [0, 12], w)
    with pytest.raises(TypeError, match="float32"):
        torch.ops.tiramisu.resize_conv_relu_maxpool(x.double(), [12, 12], w.double())


def test_prune_magnitude_keeps_the_largest_entries():
    w = RNG.standard_normal((16, 8, 3, 3), dtype=np.float32)
    for density in (0.01, 0.161, 0.2, 1.0, 0.0):
        p = schedules.prune_magnitude(w, density)
        keep = int(round(density * w.size))
        assert p.dtype == w.dtype and p.shape == w.shape
        assert np.count_nonzero(p) == keep
        if 0 < keep < w.size:
            assert np.abs(w[p == 0]).max() <= np.abs(p[p != 0]).min()
    t = schedules.prune_magnitude(torch.from_numpy(w), 0.5)
    assert isinstance(t, torch.Tensor) and int((t != 0).sum()) == w.size // 2
    for bad in (1.5, -0.1, "half", True):
        with pytest.raises(ValueError, match="density"):
            schedules.prune_magnitude(w, bad)

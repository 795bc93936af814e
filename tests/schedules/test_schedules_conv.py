"""schedules.conv2d (direct, im2col, spatial_pack, auto + find step) and the
fused conv_relu_maxpool: correctness against a NumPy reference at small sizes
(stride, padding, dilation, groups incl. depthwise, odd sizes), the on-disk
find record, the tile-sized fused buffer, clear errors.  Nothing is timed."""
import json
import os

os.environ.setdefault("OMP_WAIT_POLICY", "passive")

from types import SimpleNamespace

import numpy as np
import pytest

import schedules
from schedules.core import find
from tiramisu_py import tuning
from schedules.problems.conv import ConvProblem, ConvShape
from schedules.registry import SOLVERS

RNG = np.random.default_rng(3)


def ref_conv(x, w, b, stride, padding, dilation, groups):
    n, ci, h, wd = x.shape
    co, cig, kh, kw = w.shape
    xp = np.pad(x.astype(np.float64), ((0, 0), (0, 0), (padding, padding), (padding, padding)))
    ho = (h + 2 * padding - dilation * (kh - 1) - 1) // stride + 1
    wo = (wd + 2 * padding - dilation * (kw - 1) - 1) // stride + 1
    out = np.zeros((n, co, ho, wo))
    cog = co // groups
    for g in range(groups):
        xs = xp[:, g * cig:(g + 1) * cig]
        ws = w[g * cog:(g + 1) * cog].astype(np.float64)
        for ky in range(kh):
            for kx in range(kw):
                patch = xs[:, :, ky * dilation: ky * dilation + stride * (ho - 1) + 1: stride,
                           kx * dilation: kx * dilation + stride * (wo - 1) + 1: stride]
                out[:, g * cog:(g + 1) * cog] += np.einsum("nchw,oc->nohw", patch, ws[:, :, ky, kx])
    if b is not None:
        out += b[None, :, None, None]
    return out


def ref_block(x, w, b, pool):
    c = np.maximum(ref_conv(x, w, b, 1, 1, 1, 1), 0)
    n, co, h, wd = c.shape
    ph, pw = h // pool, wd // pool
    return c[:, :, :ph * pool, :pw * pool].reshape(n, co, ph, pool, pw, pool).max(axis=(3, 5))


def rand(*shape):
    return RNG.standard_normal(shape, dtype=np.float32)


CASES = [  # n, ci, h, w, co, k, stride, padding, dilation, groups, bias
    (2, 5, 9, 11, 7, 3, 1, 1, 1, 1, True),
    (1, 4, 10, 12, 6, 3, 2, 1, 2, 1, True),
    (2, 3, 8, 9, 16, 3, 1, 0, 1, 1, False),
    (1, 16, 6, 7, 32, 1, 1, 0, 1, 1, True),
    (1, 6, 8, 8, 6, 3, 1, 1, 1, 3, True),        # grouped
    (2, 8, 7, 9, 8, 3, 2, 1, 1, 8, True),        # depthwise, stride 2
]


@pytest.mark.parametrize("case", CASES, ids=lambda c: "x".join(map(str, c)))
@pytest.mark.parametrize("algo", schedules.CONV_ALGOS)
def test_conv2d_algorithms_match_numpy(algo, case):
    n, ci, h, wd, co, k, stride, padding, dilation, groups, bias = case
    x, w = rand(n, ci, h, wd), rand(co, ci // groups, k, k)
    b = rand(co) if bias else None
    expected = ref_conv(x, w, b, stride, padding, dilation, groups)
    out = schedules.conv2d(x, w, b, stride, padding, dilation, groups, algo=algo)
    assert out.shape == expected.shape
    np.testing.assert_allclose(out, expected, rtol=1e-4, atol=1e-4)


def _dims(key):
    """n, ci, h, w, co of a find record's key."""
    shape = json.loads(key).get("shape")          # (other operators' records have none)
    return shape and [shape[f] for f in ("n", "ci", "h", "w", "co")]


def test_find_step_times_once_and_remembers(monkeypatch, find_timed):
    x, w, b = rand(1, 4, 6, 6), rand(8, 4, 3, 3), rand(8)
    out = schedules.conv2d(x, w, b, padding=1, algo="auto")
    np.testing.assert_allclose(out, ref_conv(x, w, b, 1, 1, 1, 1), rtol=1e-4, atol=1e-4)
    record = find.records()
    (key, entry), = [(k, v) for k, v in record.items()
                     if _dims(k) == [1, 4, 6, 6, 8]]
    # the candidates give the same bits (im2col rounds apart: forced only)
    assert entry["algo"] in ("direct", "spatial_pack")
    assert set(entry["seconds"]) == {"direct", "spatial_pack"}
    # the record is what later calls use: no timing happens again
    entry["algo"] = "spatial_pack"
    tuning.put(find.KIND, key, entry)
    # find's own clock only (the runtime times every call for its team)
    monkeypatch.setattr(find, "time", SimpleNamespace(
        perf_counter=lambda: pytest.fail("timed again")))
    p, args = ConvProblem.from_call("conv2d", x, w, b, 1, 1, 1, 1)
    assert p.shape == ConvShape(1, 4, 6, 6, 8, 3, 3, 1, 1, 1, 1)
    assert find.find(p, SOLVERS["conv2d"], args, call="conv2d").name == "spatial_pack"
    np.testing.assert_allclose(schedules.conv2d(x, w, b, padding=1), out, rtol=1e-5, atol=1e-5)


def test_find_step_skips_inapplicable_algorithms():
    x, w = rand(1, 4, 5, 5), rand(4, 1, 3, 3)
    out = schedules.conv2d(x, w, None, padding=1, groups=4)
    np.testing.assert_allclose(out, ref_conv(x, w, None, 1, 1, 1, 4), rtol=1e-4, atol=1e-4)
    # every CPU solver runs groups (im2col and spatial_pack per group), but
    # "auto" offers only direct: the others round apart (per-group kernels)
    from schedules.registry import SOLVERS
    from schedules.problems.conv import ConvProblem
    p, _ = ConvProblem.from_call("conv2d", x, w, None, 1, 1, 1, 4)
    by_name = {s.name: s for s in SOLVERS["conv2d"] if s.target == "cpu"}
    assert all(by_name[n].applicable(p) is True for n in ("direct", "im2col", "spatial_pack"))
    assert [s.name for s in find.candidates(p, SOLVERS["conv2d"])] == ["direct"]
    assert not [k for k in find.records() if _dims(k) == [1, 4, 5, 5, 4]]


@pytest.mark.parametrize("shape,pool", [((2, 5, 9, 11, 7), 2), ((1, 16, 12, 12, 32), 2),
                                        ((1, 3, 10, 9, 16), 3)])
def test_conv_relu_maxpool_matches_numpy(shape, pool):
    n, ci, h, wd, co = shape
    x, w, b = rand(n, ci, h, wd), rand(co, ci, 3, 3), rand(co)
    out = schedules.conv_relu_maxpool(x, w, b, padding=1, pool=pool)
    np.testing.assert_allclose(out, ref_block(x, w, b, pool), rtol=1e-4, atol=1e-4)


WINOGRAD_CASES = [  # n, ci, h, w, co: odd sizes (a last row / column no window covers),
    (2, 5, 9, 11, 7),   # Co not a multiple of the SIMD width,
    (1, 20, 6, 8, 32),  # two SIMD vectors of channels, Ci not a multiple of 16
    (3, 16, 7, 5, 16),  # more images than cores: the image loop runs in parallel
]


@pytest.mark.parametrize("target, case", [("c", WINOGRAD_CASES[0]), ("llvm", WINOGRAD_CASES[1]),
                                          ("c", WINOGRAD_CASES[2]), ("llvm", WINOGRAD_CASES[2])],
                         ids=lambda c: "x".join(map(str, c)) if isinstance(c, tuple) else c)
def test_winograd_fused_block_matches_numpy(case, target):
    """Each odd shape on one backend, the parallel image loop on both."""
    n, ci, h, wd, co = case
    x, w, b = rand(n, ci, h, wd), rand(co, ci, 3, 3), rand(co)
    out = schedules.conv_relu_maxpool(x, w, b, padding=1, pool=2, algo="winograd", target=target)
    np.testing.assert_allclose(out, ref_block(x, w, b, 2), rtol=1e-4, atol=1e-4)


def test_winograd_fused_block_keeps_every_intermediate_per_image():
    from codegen import ir
    s = ConvShape(4, 16, 6, 6, 16, 3, 3, 1, 1)
    kern = schedules.conv_relu_maxpool_function(s, pool=2, algo="winograd").compile()
    par = [x for x in ir.walk_stmts(kern.lowered.body) if isinstance(x, ir.For) and x.kind == "parallel"]
    image = [x for x in par if x.var == "n"]
    # the packed input, its transformed tiles and their products with the
    # transformed filters: one image each, private to the thread
    assert len(image) == 1 and image[0].attrs["private"] == ["x_image", "v_image", "m_image"]
    sizes = {a.array: [d.value for d in a.shape] for a in ir.walk_stmts(kern.lowered.body)
             if isinstance(a, ir.Allocate)}
    assert sizes["v_image"] == [4, 4, 3, 3, 16] and sizes["m_image"] == [4, 4, 1, 3, 3, 16]
    assert sizes["u"] == [4, 4, 1, 16, 16]      # the transformed filters, once per call
    x, w, b = rand(4, 16, 6, 6), rand(16, 16, 3, 3), rand(16)
    np.testing.assert_allclose(kern(data=x, weight=w, bias=b), ref_block(x, w, b, 2),
                               rtol=1e-4, atol=1e-4)


def test_fused_find_step_never_offers_winograd():
    """Winograd rounds (and overflows) apart from the direct convolution, so
    "auto" runs direct only: nothing to time, no record, for any pool."""
    x, w, b = rand(1, 4, 6, 6), rand(8, 4, 3, 3), rand(8)
    out = schedules.conv_relu_maxpool(x, w, b, padding=1)
    np.testing.assert_allclose(out, ref_block(x, w, b, 2), rtol=1e-4, atol=1e-4)
    np.testing.assert_array_equal(out, schedules.conv_relu_maxpool(x, w, b, padding=1,
                                                                   algo="direct"))
    assert not [k for k in find.records()
                if json.loads(k)["op"] == "conv_relu_maxpool" and _dims(k) == [1, 4, 6, 6, 8]]
    schedules.conv_relu_maxpool(x, w, b, padding=1, pool=3)
    assert not [k for k in find.records()
                if (json.loads(k)["op"], json.loads(k).get("pool")) == ("conv_relu_maxpool", 3)]


def test_winograd_refuses_what_it_cannot_compute():
    x, w, b = rand(1, 4, 6, 6), rand(8, 4, 3, 3), rand(8)
    with pytest.raises(ValueError,
                       match=r"algo 'winograd' needs a 3x3 kernel, stride=1, .* \(got pool=3\)"):
        schedules.conv_relu_maxpool(x, w, b, padding=1, pool=3, algo="winograd")
    with pytest.raises(ValueError, match="algo must be 'auto' or one of direct, winograd"):
        schedules.conv_relu_maxpool(x, w, b, padding=1, algo="fft")
    s = ConvShape(1, 4, 6, 6, 8, 3, 3, 1, 1)
    with pytest.raises(ValueError, match="rows do not apply to algo 'winograd'"):
        schedules.conv_relu_maxpool_function(s, algo="winograd", rows=2)
    with pytest.raises(ValueError, match="vb=16 must divide the 8 output channels"):
        schedules.conv_relu_maxpool_function(s, algo="winograd", vb=16)


@pytest.mark.parametrize("parallel", ["c", "n"])
def test_fused_block_keeps_only_a_tile_of_the_conv(parallel):
    """One tile of conv rows, shared by the threads (channels in parallel)
    or one per thread (images in parallel: a small one on its stack)."""
    s = ConvShape(2, 8, 12, 10, 32, 3, 3, 1, 1)
    f = schedules.conv_relu_maxpool_function(s, pool=2, rows=2, parallel=parallel)
    kern = f.compile(target="c")
    lines = kern.source.splitlines()
    allocs = [line for line in lines if "tp_alloc((" in line or "float conv_tile[" in line]
    tile = [line for line in allocs if "conv_tile" in line]
    from schedules.blocks.nchwc import register_tile
    vb = register_tile(s)[0]                    # 32 with AVX-512, 16 with AVX2
    # 2 pooled rows = 4 conv rows (all channel blocks), not the whole image
    dims = (f"{{{32 // vb}, 4, 10, {vb}}}" if parallel == "c"
            else f"conv_tile[{32 // vb}][4][10][{vb}]")
    assert tile and dims in tile[0], allocs
    assert not any("out_blocked" in line for line in lines if "tp_alloc((" in line)
    x, w, b = rand(2, 8, 12, 10), rand(32, 8, 3, 3), rand(32)
    np.testing.assert_allclose(kern(data=x, weight=w, bias=b), ref_block(x, w, b, 2),
                               rtol=1e-4, atol=1e-4)


def test_the_default_register_tile_streams_big_weights_in_fewer_passes(monkeypatch):
    """Two vectors of channels by default; one where the two vectors'
    weights overflow half of L2 and one vector covers a row in fewer column
    blocks (each block streams those weights again)."""
    from schedules.blocks.nchwc import register_tile
    monkeypatch.setenv("TIRAMISU_PY_HOST", "vector_bits=512,vector_registers=32,l2=1048576")
    assert register_tile(ConvShape(32, 512, 14, 14, 512, 3, 3, 1, 1)) == (16, 14)
    assert register_tile(ConvShape(32, 256, 14, 14, 256, 3, 3, 1, 1)) == (32, 7)   # 295 KB
    assert register_tile(ConvShape(32, 512, 7, 7, 512, 3, 3, 1, 1)) == (32, 7)     # one pass each
    assert register_tile(ConvShape(32, 64, 56, 56, 64, 3, 3, 1, 1)) == (32, 7)
    assert register_tile(ConvShape(2, 8, 9, 9, 24, 3, 3, 1, 1)) == (24, 3)   # no vector divides Co
    monkeypatch.setenv("TIRAMISU_PY_HOST", "vector_bits=512,vector_registers=32,l2=2097152")
    assert register_tile(ConvShape(32, 512, 14, 14, 512, 3, 3, 1, 1)) == (32, 7)   # fits: 2 MB L2


@pytest.mark.parametrize("stride", [1, 2])
def test_clipped_taps_keep_every_column_block_in_registers(stride):
    """The taps on the padding are skipped (rows always, columns at stride
    1): each border block of columns is peeled with constant bounds, never
    a run-time start inside the register block (which would take its
    accumulators out of registers)."""
    s = ConvShape.make((2, 16, 20, 20), (32, 16, 3, 3), stride, 1, 1, 1)
    src = schedules.conv2d_function(2, 16, 20, 20, 32, stride=stride, padding=1,
                                    algo="spatial_pack").compile(target="c").source
    assert "x1 = tp_max" not in src and "x1 < tp_min" not in src
    x, w = rand(2, 16, 20, 20), rand(32, 16, 3, 3)
    np.testing.assert_allclose(schedules.conv2d(x, w, stride=stride, padding=1,
                                                algo="spatial_pack"),
                               ref_conv(x, w, None, stride, 1, 1, 1), rtol=1e-4, atol=1e-4)
    assert s.wo == (20 if stride == 1 else 10)


@pytest.mark.parametrize("per_image", [True, False])
def test_fused_block_runs_whole_images_per_thread_when_there_are_enough(per_image):
    from codegen import ir
    from schedules.host import host
    n = 2 * host().cores if per_image else 1
    s = ConvShape(n, 8, 8, 6, 32, 3, 3, 1, 1)
    kern = schedules.conv_relu_maxpool_function(s, pool=2, rows=2).compile()
    par = [x for x in ir.walk_stmts(kern.lowered.body) if isinstance(x, ir.For) and x.kind == "parallel"]
    image = [x for x in par if x.var == "pn_"]
    if per_image:      # one parallel image loop, each thread with its own conv tile
        # and its own packed input image (nested compute_at: x_packed at the
        # conv, which is computed at the pooling), no full-size packed copy
        assert len(image) == 1 and image[0].attrs["private"] == ["x_image", "conv_tile"]
    else:
        assert not image and any(x.var == "c" for x in par)
    x, w, b = rand(n, 8, 8, 6), rand(32, 8, 3, 3), rand(32)
    np.testing.assert_allclose(kern(data=x, weight=w, bias=b), ref_block(x, w, b, 2),
                               rtol=1e-4, atol=1e-4)


def test_spatial_pack_packs_each_image_into_a_private_buffer():
    from schedules.solvers.conv_dense import spatial_pack
    s = ConvShape(4, 5, 9, 7, 16, 3, 3, 1, 1)
    # images in parallel, named: the host's default is channels where it has
    # more cores than images (a 16-core host chose "c" for these 4 images)
    kern = spatial_pack(s, parallel="n").compile(target="c")
    src = kern.source
    # the padded, packed input of one image, declared inside the parallel image loop
    assert "x_image" in src and "xp[" not in src
    assert src.index("for (int64_t pn_ = ") < src.index("x_image[")
    x, w, b = rand(4, 5, 9, 7), rand(16, 5, 3, 3), rand(16)
    np.testing.assert_allclose(kern(data=x, weight=w, bias=b), ref_conv(x, w, b, 1, 1, 1, 1),
                               rtol=1e-4, atol=1e-4)
    with pytest.raises(ValueError, match="parallel must be"):
        spatial_pack(s, parallel="y")


@pytest.mark.parametrize("parallel,rows,pack", [("n", 4, None), ("c", 4, None), ("c", 9, True),
                                                ("n", 2, False)])
@pytest.mark.parametrize("target", ["c", "llvm"])
def test_spatial_pack_computes_the_blocked_output_per_tile_of_rows(parallel, rows, pack, target):
    # the NCHWc output exists only as one tile of rows (Ho = 9: a partial last
    # tile when rows = 4), unpacked to NCHW right after it is computed
    from codegen import ir
    from schedules.solvers.conv_dense import spatial_pack
    from schedules.blocks.nchwc import tiled_block
    s = ConvShape(3, 5, 9, 7, 16, 3, 3, 1, 1)
    if pack is None:
        f = spatial_pack(s, parallel=parallel, rows=rows)
    else:
        from schedules.blocks.conv_common import conv_inputs as _function
        f, X, Wt, B = _function("sp", s, True)
        tiled_block(f, X, Wt, B, s, parallel=parallel, rows=rows, pack_per_image=pack)
    kern = f.compile(target=target)
    sizes = {a.array: a.shape for a in ir.walk_stmts(kern.lowered.body) if isinstance(a, ir.Allocate)}
    assert sizes["conv_tile"][1].value == rows and "out_blocked" not in sizes
    per_image = pack if pack is not None else parallel == "n"
    assert ("x_image" in sizes) == per_image and ("x_packed" in sizes) != per_image
    par = [x.var for x in ir.walk_stmts(kern.lowered.body) if isinstance(x, ir.For) and x.kind == "parallel"]
    assert ("pn_" in par) == (parallel == "n") and ("c" in par) == (parallel == "c")
    x, w, b = rand(3, 5, 9, 7), rand(16, 5, 3, 3), rand(16)
    np.testing.assert_allclose(kern(data=x, weight=w, bias=b), ref_conv(x, w, b, 1, 1, 1, 1),
                               rtol=1e-4, atol=1e-4)


def test_torch_tensors_in_and_out():
    torch = pytest.importorskip("torch")
    x, w, b = torch.randn(1, 4, 7, 7), torch.randn(8, 4, 3, 3), torch.randn(8)
    out = schedules.conv2d(x, w, b, padding=1, algo="im2col")
    assert isinstance(out, torch.Tensor)
    torch.testing.assert_close(out, torch.nn.functional.conv2d(x, w, b, padding=1),
                               rtol=1e-4, atol=1e-4)
    blk = schedules.conv_relu_maxpool(x, w, b, padding=1)
    ref = torch.nn.functional.max_pool2d(torch.relu(torch.nn.functional.conv2d(x, w, b, padding=1)), 2)
    torch.testing.assert_close(blk, ref, rtol=1e-4, atol=1e-4)


@pytest.mark.parametrize("call,match", [
    (lambda: schedules.conv2d(rand(1, 4, 5, 5), rand(8, 3, 3, 3)), r"weight has 3 input channels"),
    (lambda: schedules.conv2d(rand(1, 4, 5, 5), rand(8, 4, 3, 3), stride=0), r"stride must be"),
    (lambda: schedules.conv2d(rand(1, 4, 5, 5), rand(8, 4, 3, 3), rand(7)), r"bias has 7"),
    (lambda: schedules.conv2d(rand(1, 4, 5, 5), rand(8, 4, 3, 3), algo="winograd"), r"algo must"),
    (lambda: schedules.conv2d(rand(1, 4, 2, 2), rand(8, 4, 5, 5), padding=0), r"does not fit"),
    (lambda: schedules.conv2d(rand(5, 5), rand(8, 4, 3, 3)), r"input must be 3-D \(C, H, W"),
    (lambda: schedules.conv2d(rand(1, 6, 5, 5), rand(8, 2, 3, 3), groups=4), r"groups=4 must divide"),
    (lambda: schedules.conv_relu_maxpool(rand(1, 4, 5, 5), rand(8, 4, 3, 3), rand(8), padding=1, pool=0),
     r"pool must be"),
])
def test_bad_arguments_are_named(call, match):
    with pytest.raises((TypeError, ValueError), match=match):
        call()


# ------------------------------------------------------------------ torch's conventions (issue 14.11)
def ref_conv_hw(x, w, b, stride, padding, dilation):
    """ref_conv with (height, width) pairs, by NumPy."""
    (sh, sw), (ph, pw), (dh, dw) = stride, padding, dilation
    n, ci, h, wd = x.shape
    co, _, kh, kw = w.shape
    xp = np.pad(x.astype(np.float64), ((0, 0), (0, 0), (ph, ph), (pw, pw)))
    ho, wo = (h + 2 * ph - dh * (kh - 1) - 1) // sh + 1, (wd + 2 * pw - dw * (kw - 1) - 1) // sw + 1
    out = np.zeros((n, co, ho, wo))
    for ky in range(kh):
        for kx in range(kw):
            patch = xp[:, :, ky * dh:ky * dh + sh * (ho - 1) + 1:sh, kx * dw:kx * dw + sw * (wo - 1) + 1:sw]
            out += np.einsum("nchw,oc->nohw", patch, w[:, :, ky, kx].astype(np.float64))
    return out + (b[None, :, None, None] if b is not None else 0)


def test_conv2d_defaults_are_torchs():
    """padding=0 by default; bias optional; positional order input, weight,
    bias, stride, padding, dilation, groups."""
    import inspect
    sig = inspect.signature(schedules.conv2d)
    assert list(sig.parameters)[:7] == ["input", "weight", "bias", "stride", "padding", "dilation",
                                        "groups"]
    assert [sig.parameters[p].default for p in ("bias", "stride", "padding", "dilation", "groups")] \
        == [None, 1, 0, 1, 1]
    x, w = rand(1, 3, 7, 6), rand(4, 3, 3, 3)
    out = schedules.conv2d(x, w, algo="direct")
    assert out.shape == (1, 4, 5, 4)
    np.testing.assert_allclose(out, ref_conv(x, w, None, 1, 0, 1, 1), rtol=1e-4, atol=1e-4)


@pytest.mark.parametrize("algo", schedules.CONV_ALGOS)
def test_conv2d_takes_height_width_pairs(algo):
    x, w, b = rand(2, 3, 9, 11), rand(5, 3, 3, 2), rand(5)
    out = schedules.conv2d(x, w, b, stride=(2, 1), padding=(1, 2), dilation=(1, 2), algo=algo)
    np.testing.assert_allclose(out, ref_conv_hw(x, w, b, (2, 1), (1, 2), (1, 2)), rtol=1e-4, atol=1e-4)
    # equal pairs are the int
    np.testing.assert_allclose(schedules.conv2d(x, w, b, (1, 1), [1, 1], algo=algo),
                               schedules.conv2d(x, w, b, 1, 1, algo=algo), rtol=0, atol=0)


def test_conv2d_padding_same_and_valid():
    x, w = rand(1, 2, 6, 7), rand(3, 2, 3, 5)
    same = schedules.conv2d(x, w, padding="same", algo="direct")
    assert same.shape == (1, 3, 6, 7)
    np.testing.assert_allclose(same, ref_conv_hw(x, w, None, (1, 1), (1, 2), (1, 1)), rtol=1e-4, atol=1e-4)
    assert schedules.conv2d(x, w, padding="valid", algo="direct").shape == (1, 3, 4, 3)
    with pytest.raises(ValueError, match="padding='same' is not supported for strided"):
        schedules.conv2d(x, w, stride=2, padding="same")
    w2 = rand(3, 2, 2, 2)        # an odd total: torch's extra zeros below and right
    np.testing.assert_allclose(schedules.conv2d(x, w2, padding="same", algo="direct"),
                               ref_conv_hw(np.pad(x, ((0, 0), (0, 0), (0, 1), (0, 1))), w2, None,
                                           (1, 1), (0, 0), (1, 1)), rtol=1e-4, atol=1e-4)
    with pytest.raises(ValueError, match="pads unevenly: torch adds 1 row"):
        schedules.conv2d_function(1, 2, 6, 7, 3, 2, 2, padding="same")
    for bad, name in (((1, 2, 3), "stride"), ((0, 1), "stride"), ((), "stride"), ("full", "padding"),
                      ((-1, 0), "padding"), (1.5, "dilation")):
        with pytest.raises(ValueError, match=f"{name} must be"):
            schedules.conv2d(x, w, **{name: bad})
    # a 1-element list is both sides, as aten takes it (torch.nn.functional.conv2d(stride=[2]))
    np.testing.assert_allclose(schedules.conv2d(x, w, stride=(2,), algo="direct"),
                               ref_conv_hw(x, w, None, (2, 2), (0, 0), (1, 1)), rtol=1e-4, atol=1e-4)


@pytest.mark.parametrize("algo", schedules.FUSED_ALGOS)
def test_conv_relu_maxpool_follows_conv2d(algo):
    """conv2d's arguments and defaults (padding 0, bias optional), pool a keyword."""
    x, w, b = rand(1, 4, 10, 9), rand(8, 4, 3, 3), rand(8)

    def ref(bias, padding):
        c = np.maximum(ref_conv(x, w, bias, 1, padding, 1, 1), 0)
        ph, pw = c.shape[2] // 2, c.shape[3] // 2
        return c[:, :, :2 * ph, :2 * pw].reshape(1, 8, ph, 2, pw, 2).max(axis=(3, 5))
    np.testing.assert_allclose(schedules.conv_relu_maxpool(x, w, algo=algo), ref(None, 0),
                               rtol=1e-4, atol=1e-4)
    np.testing.assert_allclose(schedules.conv_relu_maxpool(x, w, b, padding=1, algo=algo),
                               ref(b, 1), rtol=1e-4, atol=1e-4)
    w2 = rand(8, 2, 3, 3)        # groups: each group's block, as torch's composition
    c = np.maximum(ref_conv(x, w2, b, 1, 1, 1, 2), 0)[:, :, :10, :8]
    np.testing.assert_allclose(schedules.conv_relu_maxpool(x, w2, b, padding=1, groups=2,
                                                           algo=algo),
                               c.reshape(1, 8, 5, 2, 4, 2).max(axis=(3, 5)), rtol=1e-4, atol=1e-4)


def test_forced_algo_that_does_not_apply_lists_every_solver_and_why():
    """One error, generated from the solvers' ``applicable``: the forced
    one's reason first, then every solver of the operator and why it does
    (not) apply."""
    from schedules.registry import SOLVERS
    x, w = rand(1, 4, 5, 5), schedules.CSRWeights.from_dense(rand(4, 2, 3, 3))
    with pytest.raises(ValueError) as e:
        schedules.conv2d(x, w, padding=1, groups=2, algo="im2col")
    msg = str(e.value)
    assert msg.startswith("conv2d: algo 'im2col' needs a dense w")
    for s in SOLVERS["conv2d"]:
        assert f"{s!r}: " in msg, s
    assert "sparse (cpu): applies" in msg and "spatial_pack (cpu): needs a dense w" in msg
    assert "direct (cuda): runs with target='cuda'" in msg
    with pytest.raises(ValueError, match=r"winograd \(cpu\): needs a 3x3 kernel.*"
                                         r"sparse \(cpu\): needs a sparse w"):
        schedules.conv_relu_maxpool(rand(1, 2, 6, 6), rand(4, 2, 5, 5), algo="winograd")


def test_solver_modules_do_not_import_each_other():
    import import_graph as ig
    graph = ig.imports(ig.modules())
    arrows = sorted((m, t) for m, edges in graph.items() if m.startswith("schedules.solvers.")
                    for t, _ in edges if t.startswith("schedules.solvers.") and t != m)
    assert not arrows, arrows

"""schedules.weights.csr: CSRWeights (construction checks, conversions) and the CSR
sparse-weight convolution and fused block against a float64 NumPy reference
(dense weight with the same zeros) on both CPU backends: densities 0, 1%,
30%, 100%, odd sizes, stride 2, padding 0 and 2, batch 1, both loop orders;
torch and scipy forms where installed; bad input.  Nothing is timed."""
import json
import os

os.environ.setdefault("OMP_WAIT_POLICY", "passive")

import numpy as np
import pytest

import schedules
from schedules.solvers import conv_sparse as sparse
from schedules.problems.conv import pair
from schedules.problems.conv import conv_shape
from schedules.host import host
from schedules.weights.csr import CSRWeights

RNG = np.random.default_rng(18)


def pruned(co, ci, k, density, kw=None):
    w = RNG.standard_normal((co, ci, k, kw or k), dtype=np.float32)
    return (w * (RNG.random(w.shape) < density)).astype(np.float32)


def ref_conv(x, w, b, stride=1, padding=0, dilation=1):
    (sh, sw), (ph, pw), (dh, dw) = (np.broadcast_to(pair(v, "v", 0), 2)
                                    for v in (stride, padding, dilation))
    n, ci, h, wd = x.shape
    co, _, kh, kw = w.shape
    xp = np.pad(x.astype(np.float64), ((0, 0), (0, 0), (ph, ph), (pw, pw)))
    ho = (h + 2 * ph - dh * (kh - 1) - 1) // sh + 1
    wo = (wd + 2 * pw - dw * (kw - 1) - 1) // sw + 1
    out = np.zeros((n, co, ho, wo))
    for ky in range(kh):
        for kx in range(kw):
            patch = xp[:, :, ky * dh: ky * dh + sh * (ho - 1) + 1: sh,
                       kx * dw: kx * dw + sw * (wo - 1) + 1: sw]
            out += np.einsum("nchw,oc->nohw", patch, w[:, :, ky, kx].astype(np.float64))
    if b is not None:
        out += b[None, :, None, None]
    return out


def ref_pool(y, pool):
    n, c, h, w = y.shape
    ph, pw = h // pool, w // pool
    y = np.maximum(y, 0)[:, :, :ph * pool, :pw * pool]
    return y.reshape(n, c, ph, pool, pw, pool).max(axis=(3, 5))


# ------------------------------------------------------------------ CSRWeights
def test_csr_roundtrip_and_attributes():
    w = pruned(5, 3, 3, 0.3)
    c = CSRWeights.from_dense(w)
    assert c.shape == (5, 3, 3, 3) and c.nnz == np.count_nonzero(w)
    assert c.density == pytest.approx(c.nnz / w.size)
    assert c.rowptr.dtype == np.int32 and c.values.dtype == np.float32
    np.testing.assert_array_equal(c.to_dense(), w)
    w2 = RNG.standard_normal((4, 6), dtype=np.float32)
    c2 = CSRWeights.from_dense(w2, threshold=0.5)
    np.testing.assert_array_equal(c2.to_dense(), np.where(np.abs(w2) > 0.5, w2, 0))
    c3 = CSRWeights(c2.rowptr.astype(np.int64), c2.colidx.astype(np.int64), c2.values, (4, 6))
    assert c3.nnz == c2.nnz and CSRWeights.from_dense(np.zeros((0, 3), np.float32)).density == 0.0
    # flat offsets: cached, ci*Hp*Wp + ky*Wp + kx
    off = c.conv_offsets(3, 3, 10, 12)
    assert off is c.conv_offsets(3, 3, 10, 12)
    ci, ky, kx = np.nonzero(w[0])
    np.testing.assert_array_equal(off[:c.rowptr[1]], ci * 120 + ky * 12 + kx)


@pytest.mark.parametrize("rowptr,colidx,nvals,match", [
    ([0, 2, 1, 3], [0, 1, 2], 3, "rowptr must be non-decreasing"),
    ([0, 1, 2, 3], [0, 1, 9], 3, "colidx holds 9, out of range"),
    ([0, 1, 2, 3], [0, -1, 2], 3, "colidx holds -1"),
    ([0, 1, 2, 4], [0, 1, 2], 3, "nnz mismatch: rowptr ends at 4, colidx"),
    ([0, 1, 2, 3], [0, 1, 2], 2, "nnz mismatch: rowptr ends at 3, values"),
    ([0, 1, 2], [0, 1], 2, "rowptr has 3 entries; 3 rows need 4"),
    ([1, 1, 2, 3], [0, 1], 2, "rowptr must start at 0"),
])
def test_csr_bad_structure(rowptr, colidx, nvals, match):
    with pytest.raises(ValueError, match=match):
        CSRWeights(np.array(rowptr, np.int32), np.array(colidx, np.int32),
                   np.ones(nvals, np.float32), (3, 4))


def test_csr_bad_types():
    with pytest.raises(ValueError, match="rowptr must be a 1-D int32 or int64"):
        CSRWeights(np.array([0, 1.0]), np.array([0], np.int32), np.ones(1, np.float32), (1, 2))
    with pytest.raises(ValueError, match="values must be a 1-D float32"):
        CSRWeights(np.array([0, 1], np.int32), np.array([0], np.int32), np.ones(1), (1, 2))
    with pytest.raises(ValueError, match="shape must be 2 or 4"):
        CSRWeights(np.array([0, 1], np.int32), np.array([0], np.int32), np.ones(1, np.float32), (1, 2, 3))


# ------------------------------------------------------------------ convolution
@pytest.mark.usefixtures("backend")
@pytest.mark.parametrize("density", [0.0, 0.01, 0.3, 1.0])
def test_sparse_conv_densities(density):
    x = RNG.standard_normal((1, 5, 7, 9), dtype=np.float32)      # batch 1, odd sizes
    w, b = pruned(6, 5, 3, density), RNG.standard_normal(6, dtype=np.float32)
    out = schedules.sparse_conv2d(x, CSRWeights.from_dense(w), b, stride=1, padding=1)
    np.testing.assert_allclose(out, ref_conv(x, w, b, 1, 1), rtol=1e-4, atol=1e-4)


@pytest.mark.usefixtures("backend")
@pytest.mark.parametrize("n,ci,h,w,co,k,stride,padding,dilation", [
    (2, 3, 9, 11, 4, 3, 2, 0, 1),          # stride 2, padding 0
    (1, 4, 6, 5, 3, 3, 1, 2, 1),           # padding 2
    (3, 2, 11, 10, 5, 5, (2, 1), (1, 2), 1),   # unequal strides and paddings
    (2, 3, 9, 9, 2, 3, 1, 2, 2),           # dilation
    (2, 3, 5, 6, 4, 1, 1, 0, 1),           # 1x1
])
def test_sparse_conv_shapes(n, ci, h, w, co, k, stride, padding, dilation):
    x = RNG.standard_normal((n, ci, h, w), dtype=np.float32)
    wt = pruned(co, ci, k, 0.4)
    out = schedules.sparse_conv2d(x, wt, None, stride=stride, padding=padding, dilation=dilation)
    np.testing.assert_allclose(out, ref_conv(x, wt, None, stride, padding, dilation),
                               rtol=1e-4, atol=1e-4)


@pytest.mark.usefixtures("backend")
@pytest.mark.parametrize("rows_outer,parallel,cb", [(True, "n", 2), (True, "co", 1),
                                                     (True, "n", None), (False, "co", None)])
def test_sparse_conv_schedules(rows_outer, parallel, cb):
    """Both loop orders, both parallel loops and channel blocks (2 of 2 and
    1 channel, 3 of 1 channel) give the same result (the tile count is forced
    up with a small register tile); the CSR's columns need not be sorted."""
    s = conv_shape((2, 3, 8, 7), (5, 3, 3, 3), 1, 1, 1)
    x = RNG.standard_normal((2, 3, 8, 7), dtype=np.float32)
    w, b = pruned(5, 3, 3, 0.5), RNG.standard_normal(5, dtype=np.float32)
    c = CSRWeights.from_dense(w)
    rev = np.concatenate([np.arange(c.rowptr[r], c.rowptr[r + 1])[::-1] for r in range(5)])
    c = CSRWeights(c.rowptr, c.colidx[rev], c.values[rev], c.shape)     # columns descending
    rowptr, colidx, val = c.conv_layout(3, 3, s.hp, s.wp, cb=cb)
    k = sparse.function(s, vectors=2, rows_outer=rows_outer, parallel=parallel,
                        channel_block=cb).compile(target=os.environ["TIRAMISU_PY_TARGET"])
    out = k(data=x, rowptr=rowptr, colidx=colidx, val=val, bias=b)
    np.testing.assert_allclose(out, ref_conv(x, w, b, 1, 1), rtol=1e-4, atol=1e-4)


@pytest.mark.usefixtures("backend")
@pytest.mark.parametrize("shape,padding,dilation,rows_outer,cb,pool", [
    ((2, 3, 8, 7, 5, 3), 1, 1, True, 2, 1), ((2, 3, 9, 11, 4, 3), 1, 1, False, None, 1),
    ((1, 4, 10, 13, 3, 5), 2, 1, True, None, 2), ((2, 2, 12, 12, 3, 3), 0, 2, True, 1, 2)])
def test_sparse_conv_aligned_layout(shape, padding, dilation, rows_outer, cb, pool):
    """The aligned layout (the row pitch rounded up to whole vectors, one
    shifted copy of the padded image per kernel column, ``colidx`` into the
    copies) gives the unaligned result, with the copies' unread columns
    zeroed (no garbage reaches a used position)."""
    n, ci, h, w, co, k = shape
    s = conv_shape((n, ci, h, w), (co, ci, k, k), 1, padding, dilation)
    x = RNG.standard_normal((n, ci, h, w), dtype=np.float32)
    wt, b = pruned(co, ci, k, 0.5), RNG.standard_normal(co, dtype=np.float32)
    plan = sparse.plan(s, vectors=2, rows_outer=rows_outer, channel_block=cb, aligned=True)
    assert plan["aligned"] and plan["copies"] == k and plan["pitch"] % host().lanes(4) == 0
    rowptr, colidx, val = CSRWeights.from_dense(wt).conv_layout(**sparse.layout(s, plan))
    kern = sparse.function(s, vectors=2, rows_outer=rows_outer, channel_block=cb, aligned=True,
                           pool=pool, relu=pool > 1).compile(
        target=os.environ["TIRAMISU_PY_TARGET"])
    out = kern(data=x, rowptr=rowptr, colidx=colidx, val=val, bias=b)
    ref = ref_conv(x, wt, b, 1, padding, dilation)
    np.testing.assert_allclose(out, ref_pool(ref, pool) if pool > 1 else ref, rtol=1e-4,
                               atol=1e-4)
    assert not sparse.plan(conv_shape((1, 2, 8, 8), (2, 2, 3, 3), 2, 1, 1),
                           aligned=True)["aligned"]      # stride 2: never


@pytest.mark.usefixtures("backend")
@pytest.mark.parametrize("density,pool", [(0.01, 2), (0.3, 2), (0.3, 3)])
def test_sparse_conv_relu_maxpool(density, pool):
    x = RNG.standard_normal((2, 4, 9, 8), dtype=np.float32)
    w, b = pruned(6, 4, 3, density), RNG.standard_normal(6, dtype=np.float32)
    out = schedules.sparse_conv_relu_maxpool(x, CSRWeights.from_dense(w), b, pool=pool, padding=1)
    np.testing.assert_allclose(out, ref_pool(ref_conv(x, w, b, 1, 1), pool), rtol=1e-4, atol=1e-4)


def test_generated_loop_order(monkeypatch):
    """Channels outer: the nonzero loop runs inside the output tile loop, over
    exactly the CSR row; the tile is accumulated locally (not in the output
    row).  Asked for explicitly (any host), and the default with 512-bit
    vectors (pinned, only generated): an aligned pitch of 16 would double the
    padded width 8, so unaligned, channels outer.  With 256-bit vectors the
    default is the aligned layout (pitch 8, one vector), rows outer."""
    def loop_order(**schedule):
        src = schedules.sparse_conv2d_function(1, 4, 6, 6, 3, padding=1, **schedule) \
            .compile(target="c").source
        j = src.index("for (int64_t j = (int64_t)rowptr[co]; j < (int64_t)rowptr[co + 1]; j++)")
        assert src.index("for (int64_t q0 = ") < j and "acc_row_local" in src

    loop_order(rows_outer=False)
    monkeypatch.setenv("TIRAMISU_PY_HOST", "vector_bits=512,vector_registers=32")
    loop_order()


# ------------------------------------------------------------------ weight forms
@pytest.mark.filterwarnings("ignore:Sparse CSR tensor support is in beta")
def test_torch_forms():
    torch = pytest.importorskip("torch")
    x = torch.randn(2, 3, 6, 7)
    w = torch.from_numpy(pruned(4, 3, 3, 0.3))
    b = torch.randn(4)
    ref = torch.nn.functional.conv2d(x, w, b, stride=1, padding=1)
    for wf in (w, w.reshape(4, -1).to_sparse_csr()):
        out = schedules.sparse_conv2d(x, wf, b, stride=1, padding=1)
        assert isinstance(out, torch.Tensor)
        torch.testing.assert_close(out, ref, rtol=1e-4, atol=1e-4)


def test_scipy_form():
    sps = pytest.importorskip("scipy.sparse")
    x = RNG.standard_normal((1, 3, 5, 5), dtype=np.float32)
    w = pruned(4, 3, 3, 0.3)
    out = schedules.sparse_conv2d(x, sps.csr_matrix(w.reshape(4, -1)), None, stride=1, padding=1)
    np.testing.assert_allclose(out, ref_conv(x, w, None, 1, 1), rtol=1e-4, atol=1e-4)


# ------------------------------------------------------------------ the shape (ConvShape)
def test_shape_is_conv_shape_and_keys_distinguish_axes():
    """The sparse ops' shape is ConvShape: per-axis fields, padded sizes and
    the pitch; shapes differing in one axis of one field differ (as kernel
    keys), equal pairs equal the int."""
    from schedules.problems.conv import ConvShape
    s = conv_shape((2, 3, 9, 11), (5, 3, 3, 3), stride=(2, 1), padding=(1, 0), dilation=(1, 2))
    assert isinstance(s, ConvShape)
    assert (s.sh, s.sw, s.ph, s.pw, s.dh, s.dw) == (2, 1, 1, 0, 1, 2)
    assert (s.hp, s.wp, s.ho, s.wo) == (11, 11, 5, 7)
    assert sparse.pitch(s) == s.wo                          # strides differ: Wo
    same = conv_shape((2, 3, 9, 11), (5, 3, 3, 3), 2, 1, 1)
    assert sparse.pitch(same) == same.wp == 13
    assert conv_shape((1, 2, 6, 6), (3, 2, 3, 3), (1, 1), [1, 1], (1, 1)) == \
        conv_shape((1, 2, 6, 6), (3, 2, 3, 3), 1, 1, 1)
    variants = [conv_shape((1, 2, 8, 8), (3, 2, 3, 3), st, pd, dl)
                for st in (1, (1, 2), (2, 1)) for pd in (0, (0, 1), (1, 0))
                for dl in (1, (1, 2), (2, 1))]
    assert len(set(variants)) == len(variants) == 27
    assert len({repr(v) for v in variants}) == 27          # the warm-start key is the repr


def test_padding_same_and_valid():
    x = RNG.standard_normal((1, 3, 6, 7), dtype=np.float32)
    w = pruned(4, 3, 3, 0.5)
    c = CSRWeights.from_dense(w)
    for padding, ref_padding in (("same", 1), ("valid", 0)):
        np.testing.assert_allclose(schedules.sparse_conv2d(x, c, padding=padding),
                                   ref_conv(x, w, None, 1, ref_padding), rtol=1e-4, atol=1e-4)


def test_shape_errors_name_the_op():
    x = RNG.standard_normal((1, 3, 5, 5), dtype=np.float32)
    c = CSRWeights.from_dense(pruned(4, 3, 3, 0.5))
    with pytest.raises(ValueError, match="^sparse_conv_relu_maxpool: stride must be"):
        schedules.sparse_conv_relu_maxpool(x, c, stride=0)
    with pytest.raises(ValueError, match="^sparse_conv2d: padding must be a non-negative int"):
        schedules.sparse_conv2d(x, c, padding=-1)
    with pytest.raises(ValueError, match="^sparse_conv2d: padding='same' is not supported"):
        schedules.sparse_conv2d(x, c, stride=2, padding="same")
    with pytest.raises(ValueError, match="^sparse_conv2d_function: the 3x3 kernel .* does not fit"):
        schedules.sparse_conv2d_function(1, 3, 2, 2, 4)
    with pytest.raises(ValueError, match="^conv2d_function: groups must be a positive int"):
        schedules.conv2d_function(1, 4, 6, 6, 4, groups=0)


# ------------------------------------------------------------------ bad input
def test_bad_calls():
    x = RNG.standard_normal((1, 3, 5, 5), dtype=np.float32)
    c = CSRWeights.from_dense(pruned(4, 3, 3, 0.5))
    with pytest.raises(ValueError, match="w has 2 input channels, x has 3"):
        schedules.sparse_conv2d(x, CSRWeights.from_dense(pruned(4, 2, 3, 0.5)), stride=1, padding=1)
    with pytest.raises(ValueError, match="w: a 2-D sparse weight must have Cin"):
        schedules.sparse_conv2d(x, CSRWeights(c.rowptr, c.colidx, c.values, (4, 30)), stride=1,
                                padding=1)
    with pytest.raises(ValueError, match="bias has 3 values for 4 output channels"):
        schedules.sparse_conv2d(x, c, np.ones(3, np.float32), stride=1, padding=1)
    with pytest.raises(ValueError, match="stride must be a positive int"):
        schedules.sparse_conv2d(x, c, stride=0, padding=1)
    with pytest.raises(ValueError, match="does not fit"):
        schedules.sparse_conv2d(x, CSRWeights.from_dense(pruned(4, 3, 7, 0.5)), stride=1, padding=0)
    with pytest.raises(ValueError, match="groups=3 must divide"):
        schedules.sparse_conv2d(x, c, stride=1, padding=1, groups=3)
    with pytest.raises(TypeError, match="x: expected float32"):
        schedules.sparse_conv2d(x.astype(np.float64), c, stride=1, padding=1)
    with pytest.raises(ValueError, match="pool must be an int"):
        schedules.sparse_conv_relu_maxpool(x, c, np.ones(4, np.float32), pool=9)


def test_kernel_refuses_bad_offsets():
    """The compiled kernel itself proves every gather in range: a colidx
    pointing outside the padded image is refused before native code runs."""
    s = conv_shape((1, 2, 4, 4), (2, 2, 3, 3), 1, 1, 1)
    k = sparse.function(s).compile(target="c")
    x = RNG.standard_normal((1, 2, 4, 4), dtype=np.float32)
    with pytest.raises(ValueError, match="colidx"):
        k(data=x, rowptr=np.array([0, 1, 2], np.int32), colidx=np.array([0, 10 ** 6], np.int32),
          val=np.ones(2, np.float32), bias=np.zeros(2, np.float32))
    with pytest.raises(ValueError, match="rowptr"):
        k(data=x, rowptr=np.array([0, 2, 1], np.int32), colidx=np.array([0, 1], np.int32),
          val=np.ones(2, np.float32), bias=np.zeros(2, np.float32))


# ------------------------------------------------------------------ find step
def test_conv2d_algo_sparse_and_auto(monkeypatch, tmp_path, find_timed):
    """``algo="sparse"`` forces it (dense or sparse ``w``); "auto" runs a
    sparse ``w`` sparse (the only candidate: nothing timed, no record) and a
    dense ``w`` dense however many zeros it holds (the sparse solver skips
    zeros: 0 * inf would never be computed); a sparse ``w`` refuses dense algos."""
    from schedules.core import find
    from tiramisu_py import tuning
    monkeypatch.setenv("TIRAMISU_PY_CACHE", str(tmp_path))
    tuning.close()
    x = RNG.standard_normal((2, 8, 6, 6), dtype=np.float32)
    b = RNG.standard_normal(8, dtype=np.float32)
    for density in (1.0, 0.05):
        w = pruned(8, 8, 3, density)
        c = CSRWeights.from_dense(w)
        ref = ref_conv(x, w, b, 1, 1)
        for wf, algo in ((w, "sparse"), (c, "sparse"), (w, "auto"), (c, "auto")):
            out = schedules.conv2d(x, wf, b, stride=1, padding=1, algo=algo)
            np.testing.assert_allclose(out, ref, rtol=1e-4, atol=1e-4)
    np.testing.assert_array_equal(schedules.conv2d(x, c, b, padding=1),
                                  schedules.conv2d(x, c, b, padding=1, algo="sparse"))
    fused = schedules.conv_relu_maxpool(x, CSRWeights.from_dense(w), b, padding=1, pool=3,
                                        algo="auto")
    np.testing.assert_allclose(fused, ref_pool(ref, 3), rtol=1e-4, atol=1e-4)
    records = [json.loads(k) for k in find.records()]
    assert records and all(k["weight"] == "dense" and k["density<="] is None for k in records)
    assert all(set(v["seconds"]) == {"direct", "spatial_pack"} for v in find.records().values())
    with pytest.raises(ValueError, match="algo 'im2col' needs a dense w"):
        schedules.conv2d(x, CSRWeights.from_dense(pruned(8, 8, 3, 0.1)), b, stride=1, padding=1,
                         algo="im2col")


def test_bench_sparse_quick(tmp_path, capsys):
    """``tiramisu-py bench sparse --quick``: every implementation runs and
    agrees with torch; the break-even line and the JSON record are written."""
    pytest.importorskip("torch")
    import tiramisu_py_command as cli
    path = tmp_path / "sparse.json"
    assert cli.main(["bench", "sparse", "--quick", "--threads", "1", "--repeats", "1",
                     "--densities", "1,50", "--impls", "tiramisu_py[sparse],tiramisu_py[fused],torch",
                     "--json", str(path)]) == 0
    report = json.loads(path.read_text())
    assert "break_even" in report and len(report["cases"]) == 3
    for case in report["cases"]:
        for r in case["impls"].values():
            assert r["1"]["failure"] is None and r["1"]["error"] < 1e-3
    assert "break-even density" in capsys.readouterr().out


# ------------------------------------------------------------------ legality, two-sided
def test_nonzero_loop_legality():
    """The schedule's freedoms come from the compiler's proofs: the nonzero
    loop is a reduction (parallel only with reassociation allowed; locally
    accumulated exactly without it) and must stay inside the channel loop whose row
    it reads; the register-tiled order is accepted and correct."""
    import tiramisu_py as tp
    from examples import sparse_conv

    def update():
        f = sparse_conv.build()
        return f, f.computations["out"].update
    f, u = update()
    u.parallelize("j")
    with pytest.raises(tp.IllegalScheduleError, match="allow_reassociation"):
        f.compile(target="c")
    f, u = update()
    u.accumulate_locally("j")                   # copied in and out: the program's order
    inp, w, b = sparse_conv.random_inputs(density=0.4)
    np.testing.assert_allclose(sparse_conv.run(f.compile(target="c"), inp, w, b),
                               ref_conv(inp, w, b, 1, 1), rtol=1e-4, atol=1e-4)
    f, u = update()
    u.interchange("co", "j")
    with pytest.raises(ValueError, match="j"):
        f.compile(target="c")
    f, u = update()          # Park et al.'s order: the tile of x inside j, accumulated locally
    u.split("x", 4, names=("x0", "x1"))
    u.reorder("n", "co", "y", "x0", "j", "x1")
    u.accumulate_locally("j", allow_reassociation=True)
    u.parallelize("co")
    inp, w, b = sparse_conv.random_inputs(density=0.4)
    out = sparse_conv.run(f.compile(target="c"), inp, w, b)
    np.testing.assert_allclose(out, ref_conv(inp, w, b, 1, 1), rtol=1e-4, atol=1e-4)

"""The find step never changes the answer (issue 30, item 8): "auto" offers
only solvers whose results are the same bit for bit
(:func:`schedules.core.find.candidates`).  A dense weight full of zeros is
never run by the sparse solver (which skips zeros, so ``0 * inf`` would
never give torch's NaN), nor by im2col or Winograd (which round apart);
a forged tuning record naming any of them is ignored and timed again.
Both CPU backends."""
import importlib
import itertools
import json
import os

os.environ.setdefault("OMP_WAIT_POLICY", "passive")

import numpy as np
import pytest

import schedules
from schedules.core import find
from schedules.problems.conv import ConvProblem
from schedules.registry import SOLVERS
from tiramisu_py import tuning

torch = pytest.importorskip("torch")
F = torch.nn.functional
pytestmark = pytest.mark.usefixtures("find_timed")      # the find step as users have it
RNG = np.random.default_rng(30)
TARGETS = ["llvm", "c"]


@pytest.fixture(autouse=True)
def cache(monkeypatch, tmp_path):
    """A fresh tuning store: every find step of a test times from scratch."""
    monkeypatch.setenv("TIRAMISU_PY_CACHE", str(tmp_path))
    tuning.close()
    yield
    tuning.close()


def hostile():
    """An input with inf, -inf and NaN, and a weight with >70% zeros (every
    zero meets an inf of the input somewhere: torch gives NaN there)."""
    x = RNG.standard_normal((2, 8, 10, 10), dtype=np.float32)
    x[0, 1, 3, 4], x[1, 2, 5, 5], x[0, 3, 7, 2] = np.inf, np.nan, -np.inf
    w = RNG.standard_normal((8, 8, 3, 3), dtype=np.float32)
    w *= RNG.random(w.shape) < 0.2
    assert np.count_nonzero(w) < 0.3 * w.size
    return x, w, RNG.standard_normal(8, dtype=np.float32)


def torch_conv(x, w, b, pool=None):
    y = F.conv2d(torch.from_numpy(x), torch.from_numpy(w), torch.from_numpy(b), padding=1)
    return (y if pool is None else F.max_pool2d(torch.relu(y), pool)).numpy()


def same_as_torch(out, ref):
    """torch's NaN and inf pattern exactly; the finite values to rounding."""
    np.testing.assert_array_equal(np.isnan(out), np.isnan(ref))
    np.testing.assert_array_equal(np.isinf(out), np.isinf(ref))
    np.testing.assert_array_equal(out[np.isinf(out)], ref[np.isinf(ref)])
    np.testing.assert_allclose(out[np.isfinite(out)], ref[np.isfinite(ref)], rtol=1e-4, atol=1e-4)


@pytest.mark.parametrize("target", TARGETS)
def test_auto_gives_torchs_nan_for_a_dense_weight_of_zeros(target):
    x, w, b = hostile()
    ref = torch_conv(x, w, b)
    assert np.isnan(ref).sum() > 100          # the zeros' 0 * inf, which sparse skips
    same_as_torch(schedules.conv2d(x, w, b, padding=1, target=target), ref)
    same_as_torch(schedules.conv_relu_maxpool(x, w, b, padding=1, pool=2, target=target),
                  torch_conv(x, w, b, pool=2))
    for key, rec in find.records().items():
        assert json.loads(key)["weight"] == "dense"
        assert set(rec["seconds"]) == {"direct", "spatial_pack"}, rec
    # the sparse solver differs, which is why "auto" never offers it for this weight
    sparse = schedules.conv2d(x, w, b, padding=1, algo="sparse", target=target)
    assert np.isnan(sparse).sum() < np.isnan(ref).sum()


def test_a_sparse_weight_runs_sparse_only():
    """A CSR weight's rule is "structural zeros are absent" (torch.sparse's):
    "auto" runs the sparse solver, never a dense one on a densified copy."""
    x, w, b = hostile()
    csr = schedules.CSRWeights.from_dense(w)
    p, _ = ConvProblem.from_call("conv2d", x, csr, b, 1, 1, 1, 1)
    assert [s.name for s in find.candidates(p, SOLVERS["conv2d"])] == ["sparse"]
    np.testing.assert_array_equal(schedules.conv2d(x, csr, b, padding=1),
                                  schedules.conv2d(x, csr, b, padding=1, algo="sparse"))
    assert not find.records()


def forge(op, x, w, b, algo, target, pool=1):
    """A record naming ``algo`` under the key the find step reads."""
    p, _ = ConvProblem.from_call(op, x, w, b, 1, 1, 1, 1, target=target, pool=pool)
    k = find.key(p, find.candidates(p, SOLVERS[op]))
    tuning.put(find.KIND, k, {"algo": algo, "seconds": {algo: 0.0}})
    return k


@pytest.mark.parametrize("target", TARGETS)
def test_a_forged_record_chooses_only_among_the_candidates(target):
    x, w, b = hostile()
    for forged in ("sparse", "im2col"):
        k = forge("conv2d", x, w, b, forged, target)
        same_as_torch(schedules.conv2d(x, w, b, padding=1, target=target), torch_conv(x, w, b))
        assert find.load(k)["algo"] in ("direct", "spatial_pack")      # timed again, replaced
    k = forge("conv_relu_maxpool", x, w, b, "winograd", target, pool=2)
    out = schedules.conv_relu_maxpool(x, w, b, padding=1, pool=2, target=target)
    np.testing.assert_array_equal(out, schedules.conv_relu_maxpool(x, w, b, padding=1, pool=2,
                                                                   algo="direct", target=target))
    # one candidate (direct): the forged record is never read, so it stays unused
    assert find.load(k)["algo"] == "winograd"


@pytest.mark.parametrize("target", TARGETS)
def test_the_candidates_agree_bit_for_bit(target):
    """direct and spatial_pack (the dense candidates) give the same bits,
    also where im2col (blocks of the reduction summed apart) does not."""
    for (n, ci, h, co, stride, dil) in [(1, 200, 12, 16, 1, 1), (2, 13, 11, 8, 2, 2)]:
        x = RNG.standard_normal((n, ci, h, h), dtype=np.float32)
        w = RNG.standard_normal((co, ci, 3, 3), dtype=np.float32)
        b = RNG.standard_normal(co, dtype=np.float32)
        d = schedules.conv2d(x, w, b, stride, 1, dil, algo="direct", target=target)
        sp = schedules.conv2d(x, w, b, stride, 1, dil, algo="spatial_pack", target=target)
        np.testing.assert_array_equal(d.view(np.int32), sp.view(np.int32))


def _inside_taps_reference(x, w, groups=1):
    """conv2d, padding 1, summed over the taps that read the input only."""
    n, ci, h, wd = x.shape
    co, cig = w.shape[0], w.shape[1]
    out = np.zeros((n, co, h, wd), np.float64)
    for c in range(co):
        g = c // (co // groups)
        for y, xx, ky, kx in itertools.product(range(h), range(wd), range(3), range(3)):
            iy, ix = y + ky - 1, xx + kx - 1
            if 0 <= iy < h and 0 <= ix < wd:
                out[:, c, y, xx] += (w[c, :, ky, kx].astype(np.float64)
                                     * x[:, g * cig:(g + 1) * cig, iy, ix]).sum(axis=1)
    return out.astype(np.float32)


@pytest.mark.parametrize("target", TARGETS)
def test_taps_on_the_padding_are_skipped_in_every_dense_solver(target):
    """A weight of -inf on the corner tap: the first row and column of the
    output read that tap on the zero padding, which is skipped (as torch's
    oneDNN convolution does), so they stay finite instead of 0 * -inf =
    NaN -- in direct, spatial_pack, depthwise, the fused block and the
    float64 kernel of the torch op alike."""
    x = np.ones((2, 16, 6, 6), np.float32)
    w = np.ones((16, 16, 3, 3), np.float32)
    w[:, :, 0, 0] = -np.inf
    want = _inside_taps_reference(x, w)
    assert np.isfinite(want[:, :, 0, :]).all() and np.isneginf(want[:, :, 1:, 1:]).all()
    for algo in ("auto", "direct", "spatial_pack"):
        np.testing.assert_array_equal(schedules.conv2d(x, w, padding=1, algo=algo,
                                                       target=target), want)
    np.testing.assert_array_equal(
        schedules.conv2d(x, w, padding=1, target=target).view(np.int32),
        F.conv2d(torch.from_numpy(x), torch.from_numpy(w), padding=1).numpy().view(np.int32))
    wd = np.ones((16, 1, 3, 3), np.float32)
    wd[:, :, 0, 0] = -np.inf
    for algo in ("depthwise", "direct"):
        np.testing.assert_array_equal(schedules.conv2d(x, wd, padding=1, groups=16, algo=algo,
                                                       target=target),
                                      _inside_taps_reference(x, wd, groups=16))
    pooled = F.max_pool2d(torch.relu(torch.from_numpy(want)), 2).numpy()
    np.testing.assert_array_equal(schedules.conv_relu_maxpool(x, w, padding=1, pool=2,
                                                              target=target), pooled)
    importlib.import_module("schedules.torch_ops")         # registers torch.ops.tiramisu
    wide = torch.ops.tiramisu.conv2d(torch.from_numpy(x).double(), torch.from_numpy(w).double(),
                                     None, [1, 1], [1, 1], [1, 1], 1)
    np.testing.assert_array_equal(wide.numpy(), want.astype(np.float64))


def test_winograd_is_not_ieee_equal_so_it_is_forced_only():
    """Why "auto" never offers Winograd: its input transform adds inputs
    before the products, so finite inputs overflow to inf - inf = NaN where
    the direct convolution, like torch's, gives inf."""
    x = np.full((1, 4, 6, 6), 3e38, np.float32)
    x[0, :, ::2, :] = -3e38
    w = np.zeros((4, 4, 3, 3), np.float32)
    w[:, :, 1, 1] = 1.0
    b = np.zeros(4, np.float32)
    ref = torch_conv(x, w, b, pool=2)
    direct = schedules.conv_relu_maxpool(x, w, b, padding=1)
    np.testing.assert_array_equal(direct, ref)
    wino = schedules.conv_relu_maxpool(x, w, b, padding=1, algo="winograd")
    assert np.isnan(wino).any() and not np.isnan(ref).any()


@pytest.mark.parametrize("cell", ["lstm", "gru"])
def test_rnn_candidates_agree_bit_for_bit(cell):
    torch.manual_seed(0)
    m = getattr(torch.nn, cell.upper())(48, 48, num_layers=2)
    x = torch.randn(5, 3, 48)
    run = getattr(schedules, cell)
    with torch.no_grad():                # forward only (no backward kernel yet)
        first = [torch.as_tensor(np.asarray(r)) for r in _flat(run(x, m.all_weights,
                                                                    schedule="layer"))]
        other = [torch.as_tensor(np.asarray(r)) for r in _flat(run(x, m.all_weights,
                                                                    schedule="wavefront"))]
    assert all(torch.equal(a, c) for a, c in zip(first, other))


def _flat(result):
    if isinstance(result, (tuple, list)):
        return [r for item in result for r in _flat(item)]
    return [result]


def test_auto_choice_is_remembered_until_this_process_changes_a_store(monkeypatch, tmp_path):
    """A model's layers do not read the store on every call: "auto" is
    remembered per solvers, problem and environment; a record this process
    writes (here a forged one) is read again at once; another cache
    directory is another store."""
    x = RNG.standard_normal((1, 4, 7, 7), dtype=np.float32)
    w = RNG.standard_normal((6, 4, 3, 3), dtype=np.float32)
    p, args = ConvProblem.from_call("conv2d", x, w, None, 1, 1, 1, 1)
    first = find.find(p, SOLVERS["conv2d"], args, call="conv2d").name
    reads = []
    monkeypatch.setattr(find, "load", lambda k: reads.append(k) or tuning.get(find.KIND, k))
    for _ in range(3):
        assert find.find(p, SOLVERS["conv2d"], args, call="conv2d").name == first
    assert reads == []
    other = next(s.name for s in find.candidates(p, SOLVERS["conv2d"]) if s.name != first)
    k = find.key(p, find.candidates(p, SOLVERS["conv2d"]))
    tuning.put(find.KIND, k, {"algo": other, "seconds": {other: 0.0}})
    assert find.find(p, SOLVERS["conv2d"], args, call="conv2d").name == other
    assert reads == [k]
    monkeypatch.setenv("TIRAMISU_PY_CACHE", str(tmp_path / "elsewhere"))
    find.find(p, SOLVERS["conv2d"], args, call="conv2d")
    assert reads == [k, k]                    # the new directory's store was asked


def test_find_first_takes_the_preferred_candidate_untimed(monkeypatch):
    """``TIRAMISU_PY_FIND=first`` (as ``torch.backends.cudnn.benchmark =
    False``): "auto" runs the first candidate in order of preference without
    timing the others or writing a record; the same bits as naming it; a
    value other than first/timed is refused by name."""
    x, w, b = hostile()
    monkeypatch.setenv("TIRAMISU_PY_FIND", "first")
    before = dict(find.records())
    runs = []
    real = find.choose
    monkeypatch.setattr(find, "choose", lambda *a, **k: runs.append(a) or real(*a, **k))
    out = schedules.conv2d(x, w, b, padding=1)
    assert runs == [] and find.records() == before           # nothing timed, nothing recorded
    np.testing.assert_array_equal(out, schedules.conv2d(x, w, b, padding=1, algo="direct"))
    monkeypatch.setenv("TIRAMISU_PY_FIND", "fastest")
    with pytest.raises(ValueError, match="TIRAMISU_PY_FIND must be 'timed'.*got 'fastest'"):
        schedules.conv2d(x[:, :, :5], w, b, padding=1)

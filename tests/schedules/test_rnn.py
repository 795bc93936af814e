"""schedules.lstm / schedules.gru: torch.nn.LSTM/GRU semantics on both CPU
backends (against a float64 NumPy reference, and against torch where it is
installed), every schedule, CSR weights, the find step and clear errors."""
import types

import numpy as np
import pytest

import schedules
from examples import rnn as ref
from schedules.core import find
from schedules.problems.rnn import RnnProblem
from schedules.host import host
from schedules.registry import SOLVERS
from schedules.solvers import rnn_cpu
from schedules.weights import rnn
from schedules.weights.window import SLICE, WINDOW, windowed
from tiramisu_py import tuning

RTOL, ATOL = 1e-4, 1e-5

# (layers, T, B, I, H): I != H with odd H; T = 1 and B = 1 with I == H (a
# wavefront over every layer); one layer (layer-major only)
CONFIGS = [(3, 4, 2, 5, 7), (2, 1, 1, 9, 9), (1, 3, 2, 4, 6)]


def _inputs(cell, L, T, B, I, H, bias=True, states=True, density=1.0, seed=0):
    rng = np.random.default_rng(seed + 7)
    x = rng.standard_normal((T, B, I)).astype(np.float32)
    weights = ref.random_weights(cell, L, I, H, bias=bias, density=density, seed=seed)
    h0 = rng.standard_normal((L, B, H)).astype(np.float32) if states else None
    c0 = rng.standard_normal((L, B, H)).astype(np.float32) if states else None
    return x, weights, h0, c0


def _call(cell, x, weights, h0, c0, **kw):
    """(y, h_n, c_n or None)."""
    if cell == "lstm":
        y, (hn, cn) = schedules.lstm(x, weights, h0, c0, **kw)
        return y, hn, cn
    y, hn = schedules.gru(x, weights, h0, **kw)
    return y, hn, None


def _check(got, want):
    for g, w in zip(got, want):
        if w is not None:
            np.testing.assert_allclose(np.asarray(g), w, rtol=RTOL, atol=ATOL)


@pytest.mark.parametrize("cell", ["lstm", "gru"])
@pytest.mark.parametrize("config", CONFIGS)
def test_matches_numpy(backend, cell, config):
    """Every schedule, both backends; biases and initial states absent in
    the second configuration only."""
    full = config != CONFIGS[1]
    x, weights, h0, c0 = _inputs(cell, *config, bias=full, states=full)
    want = ref.reference(cell, x, weights, h0, c0)
    for schedule in schedules.RNN_SCHEDULES[:1 if config[0] == 1 else 2]:
        got = _call(cell, x, weights, h0, c0, schedule=schedule, target=backend)
        assert got[0].shape == want[0].shape and got[1].shape == want[1].shape
        _check(got, want)


@pytest.mark.parametrize("cell", ["lstm", "gru"])
def test_sparse_csr(backend, cell):
    """sparse=True on dense (mostly zero) weights, and CSR objects given
    directly (duck-typed like schedules.CSRWeights)."""
    L, T, B, I, H = 2, 3, 2, 6, 5
    x, weights, h0, c0 = _inputs(cell, L, T, B, I, H, density=0.3)
    want = ref.reference(cell, x, weights, h0, c0)
    _check(_call(cell, x, weights, h0, c0, sparse=True, target=backend), want)
    csr = [[_csr(m) for m in layer[:2]] + layer[2:] for layer in weights]
    _check(_call(cell, x, csr, h0, c0, target=backend), want)


def _csr(dense):
    rowptr, colidx, values = rnn._csr_arrays(dense)
    return types.SimpleNamespace(rowptr=rowptr, colidx=colidx, values=values, shape=dense.shape,
                                 nnz=len(values), density=len(values) / dense.size)


@pytest.mark.parametrize("cell", ["lstm", "gru"])
def test_sparse_windows(backend, cell):
    """A hidden size of two 32-column windows: on AVX-512 hosts the
    recurrent product reads its weights in windows (a permute of y's window
    a slot, schedules.weights.window), elsewhere CSR; the same numbers."""
    L, T, B, I, H = 2, 3, 2, 6, 64
    x, weights, h0, c0 = _inputs(cell, L, T, B, I, H, density=0.2)
    want = ref.reference(cell, x, weights, h0, c0)
    _check(_call(cell, x, weights, h0, c0, sparse=True, target=backend), want)
    blk = rnn.blocking(rnn.GATES[cell], B)
    form = rnn_cpu.sparse_form(blk, H)
    assert form == ("window" if host().lanes(4) == 16 and blk.hb % 16 == 0 else "csr")
    if form == "window" and backend == "llvm":
        kern = rnn_cpu._layer_kernel(cell, T, B, H, H, blk, form, backend)
        assert "llvm.x86.avx512.vpermi2var.ps.512" in kern.source


def test_windowed_layout():
    """Every nonzero lands in its slice's window at one slot, the padding
    is zero, and each window has as many slots as its fullest row."""
    rng = np.random.default_rng(1)
    rows, cols = 32, 70
    dense = (rng.standard_normal((rows, cols)) * (rng.random((rows, cols)) < 0.25)).astype(
        np.float32)
    dense[5] = 0
    rowptr, colidx, values = rnn._csr_arrays(dense)
    wptr, wval, widx = windowed(rowptr, colidx, values, rows, cols)
    nw = -(-cols // WINDOW)
    assert wptr.shape == (rows // SLICE * nw + 1,) and wptr[0] == 0
    back = np.zeros_like(dense)
    for sl in range(rows // SLICE):
        for w in range(nw):
            lo, hi = wptr[sl * nw + w], wptr[sl * nw + w + 1]
            part = dense[sl * SLICE:(sl + 1) * SLICE, w * WINDOW:(w + 1) * WINDOW]
            assert hi - lo == (part != 0).sum(axis=1).max()
            for slot in range(lo, hi):
                for lane in range(SLICE):
                    back[sl * SLICE + lane, w * WINDOW + widx[slot * SLICE + lane]] += \
                        wval[slot * SLICE + lane]
    np.testing.assert_array_equal(back, dense)
    with pytest.raises(ValueError, match="multiple of 16"):
        windowed(rowptr[:8], colidx, values, 7, cols)


def test_column_blocked_projection():
    """The sparse input projection reads w_ih's nonzeros in blocks of
    columns (rnn.column_blocked): each block's nonzeros in its columns, in
    row order, all of them once; the kernel's sums equal the dense product
    for several blocks, an empty row and an empty block; an LSTM whose input
    spans several of this host's blocks matches the reference."""
    rng = np.random.default_rng(2)
    R, I, M = 48, 40, 32
    dense = (rng.standard_normal((R, I)) * (rng.random((R, I)) < 0.3)).astype(np.float32)
    dense[7] = 0
    dense[:, 16:24] = 0                                   # block 2 of width 8 is empty
    rowptr, colidx, values = rnn._csr_arrays(dense)
    ptr, cols, vals = rnn.column_blocked(rowptr, colidx, values, I, 8)
    assert ptr.shape == (5 * R + 1,) and ptr[-1] == len(values)
    back = np.zeros_like(dense)
    for kb in range(5):
        for r in range(R):
            seg = slice(ptr[kb * R + r], ptr[kb * R + r + 1])
            assert np.all(cols[seg] // 8 == kb) and np.all(np.diff(cols[seg]) > 0)
            back[r, cols[seg]] = vals[seg]
    np.testing.assert_array_equal(back, dense)
    x = rng.standard_normal((I, M)).astype(np.float32)
    got = rnn_cpu._projection_kernel(M, R, I, 5, "c")(x=x, rowptr=ptr, colidx=cols, values=vals)
    np.testing.assert_allclose(got, dense @ x, rtol=1e-5, atol=1e-5)
    L, T, B, H = 2, 3, 2, 16
    I = 3 * rnn.projection_block(rnn.blocking(4, B).lanes)
    x, weights, h0, c0 = _inputs("lstm", L, T, B, I, H, density=0.2)
    _check(_call("lstm", x, weights, h0, c0, sparse=True), ref.reference("lstm", x, weights, h0, c0))


def test_csr_arrays_round_trip():
    rng = np.random.default_rng(0)
    dense = (rng.standard_normal((7, 5)) * (rng.random((7, 5)) < 0.4)).astype(np.float32)
    dense[3] = 0                                        # an empty row
    np.testing.assert_array_equal(rnn._csr_to_dense(_csr(dense)), dense)


@pytest.mark.parametrize("cell", ["lstm", "gru"])
def test_matches_torch(backend, cell):
    """torch.nn.LSTM/GRU's own weights (module.all_weights, parameters) and
    torch tensors in and out."""
    torch = pytest.importorskip("torch", reason="torch is not installed")
    L, T, B, I, H = CONFIGS[0]                # the kernels of test_matches_numpy
    torch.manual_seed(0)
    module = (torch.nn.LSTM if cell == "lstm" else torch.nn.GRU)(I, H, L)
    x, h0, c0 = torch.randn(T, B, I), torch.randn(L, B, H), torch.randn(L, B, H)
    with torch.no_grad():
        want = module(x, (h0, c0)) if cell == "lstm" else module(x, h0)
    want_y, want_h = want[0], want[1][0] if cell == "lstm" else want[1]
    for schedule in schedules.RNN_SCHEDULES:
        got = _call(cell, x, module.all_weights, h0, c0, schedule=schedule, target=backend)
        assert all(isinstance(g, torch.Tensor) for g in got if g is not None)
        torch.testing.assert_close(got[0], want_y, rtol=RTOL, atol=ATOL)
        torch.testing.assert_close(got[1], want_h, rtol=RTOL, atol=ATOL)
        if cell == "lstm":
            torch.testing.assert_close(got[2], want[1][1], rtol=RTOL, atol=ATOL)


def test_packed_weights_reused():
    x, weights, h0, c0 = _inputs("lstm", 2, 3, 1, 4, 4)
    packed = schedules.RNNWeights(weights, "lstm")
    want = ref.reference("lstm", x, weights, h0, c0)
    for _ in range(2):
        _check(_call("lstm", x, packed, h0, c0, schedule="layer"), want)
    assert len(packed._packed) == 1


def test_find_step_records_choice(find_timed):
    x, weights, h0, c0 = _inputs("gru", 3, 2, 1, 4, 4, seed=3)
    W = schedules.RNNWeights(weights, "gru")
    p, args = RnnProblem.from_call("gru", x, W, h0, None, False, None)
    choice = find.find(p, SOLVERS["gru"], args, call="gru", repeats=2).name
    assert choice in schedules.RNN_SCHEDULES
    cands = [s for s in SOLVERS["gru"] if s.applicable(p) is True]
    key = find.key(p, cands)
    record = tuning.get(find.KIND, key)
    assert record["algo"] == choice and set(record["seconds"]) == {"layer", "wavefront"}
    tuning.put(find.KIND, key, {"algo": "wavefront", "seconds": {}})
    assert find.find(p, SOLVERS["gru"], args, call="gru").name == "wavefront"   # remembered
    _check(_call("gru", x, W, h0, None), ref.reference("gru", x, weights, h0))


def _bad(cell, **change):
    x, weights, h0, c0 = _inputs(cell, 2, 3, 2, 4, 5)
    args = dict(x=x, weights=weights, h0=h0, c0=c0)
    for k, v in change.items():
        if callable(v):
            v(args)
        else:
            args[k] = v
    if cell == "gru":
        args.pop("c0")
    return (schedules.lstm if cell == "lstm" else schedules.gru)(**args)


@pytest.mark.parametrize("change, error, message", [
    (dict(x=np.zeros((3, 2, 4, 1), np.float32)), ValueError, r"x: expected \(T, B, I\)"),
    (dict(x=np.zeros((3, 2), np.float32)), ValueError,      # unbatched x takes (L, H) states
     r"h0: for unbatched 2-D input x, h0 should be 2-D \(\(layers, H\)\), got shape \(2, 2, 5\)"),
    (dict(x=np.zeros((3, 2, 4))), TypeError,                # float64 runs, in one dtype
     r"weights\[0\]\[0\] \(w_ih of layer 0\): expected float64 \(x is float64"),
    (dict(x=np.zeros((0, 2, 4), np.float32)), ValueError, "at least 1"),
    (dict(x=np.zeros((3, 2, 6), np.float32)), ValueError,
     r"x: input size 6 \(its last dimension\), but weights\[0\]\[0\] \(w_ih of layer 0\) "
     r"expects 4: pass x of shape \(T, B, 4\)"),
    (dict(weights=lambda a: a["weights"][1].__setitem__(1, np.zeros((20, 4), np.float32))),
     ValueError, r"weights\[1\]\[1\] \(w_hh of layer 1\): expected shape \(20, 5\)"),
    (dict(weights=lambda a: a["weights"][1].__setitem__(3, np.zeros(19, np.float32))),
     ValueError, r"weights\[1\]\[3\] \(b_hh of layer 1\)"),
    (dict(weights=lambda a: a["weights"][1].__setitem__(0, np.zeros((20, 5)))),
     TypeError, r"weights\[1\]\[0\] \(w_ih of layer 1\): expected float32"),
    (dict(weights=lambda a: a["weights"][1].pop()), ValueError, r"weights\[1\]: expected"),
    (dict(weights=lambda a: a["weights"].__setitem__(1, a["weights"][1][:2])), ValueError,
     "layer 1 lacks biases"),
    (dict(weights=[]), TypeError, "weights: expected a non-empty list"),
    (dict(h0=np.zeros((1, 2, 5), np.float32)), ValueError, r"h0: expected shape \(2, 2, 5\)"),
    (dict(c0=np.zeros((2, 2, 4), np.float32)), ValueError, r"c0: expected shape \(2, 2, 5\)"),
])
def test_bad_arguments(change, error, message):
    with pytest.raises(error, match=message):
        _bad("lstm", **change)


def test_bad_csr_weights():
    x, weights, h0, c0 = _inputs("lstm", 1, 2, 1, 3, 4)
    bad = _csr(weights[0][1])
    bad.colidx = bad.colidx.copy()
    bad.colidx[0] = 4
    with pytest.raises(ValueError, match=r"weights\[0\]\[1\] \(w_hh of layer 0\): invalid CSR "
                                         r"matrix: colidx must lie in \[0, 4\)"):
        schedules.lstm(x, [[weights[0][0], bad]])
    bad = _csr(weights[0][0])
    bad.rowptr = bad.rowptr[::-1].copy()
    with pytest.raises(ValueError, match=r"weights\[0\]\[0\].*rowptr must start at 0"):
        schedules.lstm(x, [[bad, weights[0][1]]])


def test_bad_arguments_gru_and_schedule():
    with pytest.raises(ValueError, match=r"weights\[0\]\[1\] \(w_hh of layer 0\): expected "
                                         r"shape \(15, 5\)"):
        _bad("gru", weights=lambda a: a["weights"][0].__setitem__(
            1, np.zeros((20, 5), np.float32)))
    with pytest.raises(ValueError, match="schedule must be"):
        _bad("gru", schedule="diagonal")
    x, weights, h0, _ = _inputs("gru", 1, 2, 1, 3, 4)
    with pytest.raises(ValueError, match="'wavefront' needs at least two stacked layers"):
        schedules.gru(x, weights, h0, schedule="wavefront")
    with pytest.raises(ValueError, match="weights: packed for 'lstm'"):
        schedules.gru(x, schedules.RNNWeights(ref.random_weights("lstm", 1, 3, 4), "lstm"))


def test_bench_rnn_quick(tmp_path):
    """The rnn suite's tiny LSTM (a) and sparse cases through ``tiramisu-py
    bench``: every implementation runs and is checked; the batch-1
    bandwidths and the host's are in the JSON."""
    import json

    import tiramisu_py_command as cli
    path = tmp_path / "rnn.json"
    assert cli.main(["bench", "rnn", "--quick", "--shapes", "0,6", "--threads", "1",
                     "--repeats", "1", "--impls", "tiramisu_py,torch", "--json", str(path)]) == 0
    report = json.loads(path.read_text())
    assert [c["name"].split()[:2] for c in report["cases"]] == [["lstm", "(a)"], ["lstm", "(a)"]]
    assert "tiramisu_py[csr]" in report["cases"][1]["impls"]
    for case in report["cases"]:
        for r in case["impls"].values():
            assert r["1"]["failure"] is None and r["1"]["error"] < 1e-3
            assert "bandwidth_GBps" not in r["1"] or r["1"]["bandwidth_GBps"] > 0
    assert report["host_bandwidth"]["copy_GBps"] > 0
    assert report["cases"][0]["impls"]["tiramisu_py[layer]"]["1"]["bandwidth_GBps"] > 0

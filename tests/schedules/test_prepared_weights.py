"""schedules.core.prepared: weights prepared once per weight and never stale.
For every operator that caches a prepared weight (lstm/gru with a weight list,
nn.LSTM/GRU, sparse_conv2d with a dense, torch sparse-CSR or scipy weight,
torch.ops.tiramisu.sparse_conv2d / nn.SparseConv2d): a second call with the
same weights prepares nothing (counted), and a weight changed in place (by
an in-place op, through ``.data``, through a NumPy write) is seen by the next
call, whose result equals an uncached reference bit for bit.  The LRU bounds;
CSRWeights copies what it is given and sums duplicate columns.  Nothing is
timed."""
from repo_paths import ROOT
import os

os.environ.setdefault("OMP_WAIT_POLICY", "passive")

import numpy as np
import pytest

import schedules
from schedules.core import prepared as P
from schedules.core import sparse_copy as SC
from schedules.weights.csr import CSRWeights

RNG = np.random.default_rng(30)


def made(kind, f):
    """(f()'s result, how many values of ``kind`` it prepared)."""
    before = P.PREPARATIONS[kind]
    out = f()
    return out, P.PREPARATIONS[kind] - before


def _pruned(co=6, ci=4, k=3, density=0.3):
    w = RNG.standard_normal((co, ci, k, k)).astype(np.float32)
    return (w * (RNG.random(w.shape) < density)).astype(np.float32)


# ------------------------------------------------------------------ the cache itself
def test_same_values_hit_changed_values_miss():
    a = RNG.standard_normal(10).astype(np.float32)
    v1, n1 = made("t", lambda: P.prepared("t", [a], lambda c: c[0].sum()))
    v2, n2 = made("t", lambda: P.prepared("t", [a], lambda c: c[0].sum()))
    assert (n1, n2) == (1, 0) and v1 == v2
    a[3] = 100.0                                      # a NumPy write: no version to see
    v3, n3 = made("t", lambda: P.prepared("t", [a], lambda c: c[0].sum()))
    assert n3 == 1 and v3 == np.float32(a.sum())


def test_a_lookups_bytes_are_compared_in_runs_over_threads(monkeypatch):
    """Above SPLIT_BYTES a lookup's sources are compared in runs of equal
    bytes, one per thread, cut across the sources: a change in any byte
    of any source (a run's first, its last, one that straddles two runs)
    is still a miss; a strided source is compared apart."""
    monkeypatch.setattr(P, "SPLIT_BYTES", 64)
    monkeypatch.setattr(P, "COMPARE_THREADS", 3)
    arrays = [RNG.standard_normal(n).astype(np.float32) for n in (37, 100, 5, 64)]
    strided = RNG.standard_normal((8, 6)).astype(np.float32)[:, ::2]
    sources = arrays + [strided]

    def call():
        return P.prepared("t_runs", sources, lambda c: sum(float(a.sum()) for a in c))
    assert made("t_runs", call)[1] == 1 and made("t_runs", call)[1] == 0
    total = sum(a.size for a in arrays)
    for flat in (0, 36, 37, 69, 70, 136, 141, total - 1):
        for a in arrays:
            if flat < a.size:
                break
            flat -= a.size
        a[flat] += 1.0
        value, n = made("t_runs", call)
        assert n == 1 and value == pytest.approx(sum(float(b.sum()) for b in sources))
        assert made("t_runs", call)[1] == 0
    strided[3, 1] = -7.0
    assert made("t_runs", call)[1] == 1


def _mostly_zero(n, density=0.15, seed=3):
    """float32 with ``density`` nonzeros, pruned as ``w * mask`` (so about half
    of the zeros are -0.0) and a NaN."""
    rng = np.random.default_rng(seed)
    w = rng.standard_normal(n).astype(np.float32) * (rng.random(n) < density)
    w[7] = np.nan
    return w


@pytest.mark.parametrize("n", [16 * 40 + 5, 16 * 64])
def test_sparse_copy_compares_every_bit_in_both_loops(monkeypatch, n):
    """The sparse copy (two bits a word + the nonzero words) differs from a
    source exactly where the bits differ: a nonzero changed, a zero made
    nonzero, 0.0 <-> -0.0, a value made zero; in any chunk range, by the
    host's vector loop and by the portable loop."""
    monkeypatch.setattr(SC, "MIN_BYTES", 0)
    monkeypatch.setattr(SC, "CHUNK_BLOCKS", 4)
    if SC.helper() is None:
        pytest.skip("no C compiler builds the sparse copy's helper")
    w = _mostly_zero(n)
    copy = SC.SparseCopy(w.view(np.uint32).copy())
    assert copy.nbytes < w.nbytes / 2
    address = w.ctypes.data
    ranges = [(c, c + 1) for c in range(copy.chunks)] + [(0, copy.chunks)]
    for vector in (True, False):
        assert not any(copy.differs(address, c0, c1, vector) for c0, c1 in ranges)
    nonzero = int(np.flatnonzero(w.view(np.uint32) & 0x7FFFFFFF)[3])
    zero = int(np.flatnonzero(w == 0)[5])
    for at in sorted({0, 15, 16, zero, nonzero, n // 2, n - 1}):
        old = w[at].copy()
        for new in (1.5, 0.0, -0.0, np.nan, -3.0):
            w[at] = new
            changed = w[at].view(np.uint32) != old.view(np.uint32)
            for vector in (True, False):
                assert copy.differs(address, 0, copy.chunks, vector) == changed, (at, new, vector)
                hit = [c0 for c0, c1 in ranges[:-1] if copy.differs(address, c0, c1, vector)]
                assert hit == ([at // (16 * SC.CHUNK_BLOCKS)] if changed else [])
        w[at] = old


def test_mostly_zero_sources_keep_a_sparse_copy_and_stay_exact(monkeypatch):
    """A large pruned source is compared against a sparse copy (a fraction of
    its bytes kept), split over threads between chunks; any changed bit of
    it, or of a dense source beside it, is a miss."""
    if SC.helper() is None:
        pytest.skip("no C compiler builds the sparse copy's helper")
    monkeypatch.setattr(SC, "MIN_BYTES", 1024)
    monkeypatch.setattr(SC, "CHUNK_BLOCKS", 2)
    monkeypatch.setattr(SC, "vector", lambda: True)    # (the portable loop where no AVX-512)
    monkeypatch.setattr(P, "SPLIT_BYTES", 64)
    monkeypatch.setattr(P, "COMPARE_THREADS", 3)
    sparse = [_mostly_zero(16 * 37 + 3, seed=s) for s in range(2)]
    dense = RNG.standard_normal(300).astype(np.float32)
    sources = [sparse[0], dense, sparse[1]]

    def call():
        return P.prepared("t_sparse", sources, lambda c: [a.copy() for a in c])
    made_once = made("t_sparse", call)
    assert made_once[1] == 1 and made("t_sparse", call)[1] == 0
    assert all(np.array_equal(a.view(np.uint32), b.view(np.uint32))
               for a, b in zip(made_once[0], sources))
    copies = P._entries[next(k for k in P._entries if k[0] == "t_sparse")][0]
    assert [c.sparse is not None for c in copies] == [True, False, True]
    assert copies[0].nbytes < sparse[0].nbytes / 2 and copies[0].array is None
    for i, at in ((0, 0), (0, 300), (1, 299), (2, 16 * 37 + 2)):
        a = sources[i]
        old = a[at].copy()
        a[at] = -0.0 if old.view(np.uint32) == 0 else 0.0
        value, n = made("t_sparse", call)
        assert n == 1 and np.array_equal(value[i].view(np.uint32), a.view(np.uint32))
        a[at] = old
        assert made("t_sparse", call)[1] == 1 and made("t_sparse", call)[1] == 0


def test_a_weight_updated_at_every_call_is_made_not_kept_then_cached_again():
    """A torch weight that a new version reaches at every lookup (an
    optimizer's step) has its value made each time from read-only views and
    not kept (no copy, no entry) from its second change in a row on, but at
    every REPROBE-th; each value is the fresh make's; once the weight stops
    changing it is cached again within REPROBE lookups."""
    torch = pytest.importorskip("torch", reason="torch is not installed")
    w = torch.from_numpy(RNG.standard_normal(64).astype(np.float32))
    seen = []

    def call():
        return P.prepared("t_volatile", [w], lambda c: (seen.append(c[0].flags.writeable),
                                                        c[0].sum())[1])
    kept = lambda: sum(k[0] == "t_volatile" for k in P._entries)      # noqa: E731
    for step in range(2 * P.REPROBE):
        with torch.no_grad():
            w.add_(0.5)                              # a new version, new values
        value, n = made("t_volatile", call)
        assert n == 1 and value == w.numpy().sum()
        volatile = step >= P.VOLATILE and step % P.REPROBE
        assert kept() == (0 if volatile else 1)
    assert not any(seen)                             # read-only copies or views only
    ns = [made("t_volatile", call)[1] for _ in range(P.REPROBE + 1)]
    assert sum(ns) <= P.REPROBE and ns[-1] == 0 and kept() == 1
    with torch.no_grad():
        w.data.mul_(2)                               # a write no version sees: still compared
    value, n = made("t_volatile", call)
    assert n == 1 and value == w.numpy().sum()


def test_only_later_versions_of_the_same_tensors_count_as_a_training_step():
    """A lookup counts toward the made-not-kept rule only where its sources
    are the last lookup's in later versions: another tensor that took the
    same place (a lower version, another owner) or a NumPy array (no
    version) starts again, so its first value is kept."""
    place = (1024, (20, 5, 3, 3), (45, 9, 3, 1), "float32")
    key = lambda *ids: ("k", (), ids)                  # noqa: E731
    assert P._later(key(place + (4,)), key(place + (3,)))
    assert not P._later(key(place + (0,)), key(place + (3,)))         # another tensor there
    assert not P._later(key(place + (3,)), key(place + (3,)))
    assert not P._later(key(place + (4, 2)), key(place + (3, 1)))     # another owner
    array = (2048, (4,), (4,), "<f4")                  # a NumPy array's identity: no version
    assert P._later(key(array, place + (4,)), key(array, place + (3,)))
    assert not P._later(key(array, place + (3,)), key(array, place + (3,)))
    assert P._later(key(None, place + (4,)), key(None, place + (3,)))


def test_the_entries_made_from_an_owned_array_go_with_it():
    """An owned source's entries (found by identity alone) are dropped after
    it dies (at the next lookup): no lookup can find them any more."""
    a = RNG.standard_normal(32).astype(np.float32)
    P.own(a)
    P.prepared("t_owned", [a], lambda c: 1)
    assert any(k[0] == "t_owned" for k in P._entries)
    del a
    P.prepared("t_next", [np.zeros(2, np.float32)], lambda c: 1)     # (dropped at a lookup)
    assert not any(k[0] == "t_owned" for k in P._entries)


def test_make_gets_read_only_copies():
    a = np.arange(4, dtype=np.float32)
    got = P.prepared("t_copy", [a], lambda c: c)
    assert not got[0].flags.writeable and not np.shares_memory(got[0], a)


def test_nan_and_negative_zero_compare_by_bits():
    a = np.array([np.nan, 0.0], np.float32)
    _, n = made("t_bits", lambda: [P.prepared("t_bits", [a], lambda c: 1) for _ in range(2)])
    assert n == 1                                     # NaN equals itself bit for bit
    a[1] = -0.0
    _, n = made("t_bits", lambda: P.prepared("t_bits", [a], lambda c: 1))
    assert n == 1                                     # -0.0 is another weight


def test_lru_evicts_by_entries_and_bytes(monkeypatch):
    P.clear()
    monkeypatch.setattr(P, "LIMIT_ENTRIES", 3)
    arrays = [np.full(8, i, np.float32) for i in range(5)]
    for a in arrays:
        P.prepared("t_lru", [a], lambda c: 0)
    assert len(P._entries) == 3
    _, n = made("t_lru", lambda: P.prepared("t_lru", [arrays[0]], lambda c: 0))
    assert n == 1                                     # the oldest was evicted
    _, n = made("t_lru", lambda: P.prepared("t_lru", [arrays[4]], lambda c: 0))
    assert n == 0                                     # the newest kept
    monkeypatch.setattr(P, "LIMIT_BYTES", 100)
    big = np.zeros(1000, np.float32)                  # 4000 bytes: made, used, not kept
    assert P.prepared("t_lru", [big], lambda c: 7) == 7
    assert P.cached_bytes() <= 100
    P.clear()


def test_the_memory_bound_variable_is_read_at_a_lookup_and_named(monkeypatch):
    """Issue 52: ``TIRAMISU_PY_PREPARED_MB=abc`` (or nan, inf) broke ``import
    schedules`` with float()'s message; now the import works and a lookup
    raises a ValueError naming the variable and what it takes."""
    import subprocess
    import sys
    root = ROOT
    r = subprocess.run([sys.executable, "-c", "import schedules"], capture_output=True, text=True,
                       timeout=120, cwd=root, env=dict(os.environ, TIRAMISU_PY_PREPARED_MB="abc"))
    assert r.returncode == 0, r.stderr[-2000:]
    a = np.ones(4, np.float32)
    for bad in ("abc", "nan", "inf", "-1"):
        monkeypatch.setenv("TIRAMISU_PY_PREPARED_MB", bad)
        with pytest.raises(ValueError, match=rf"^\$TIRAMISU_PY_PREPARED_MB='{bad}': expected .* "
                                             r"in MiB, a finite number >= 0 \(default 1024"):
            P.prepared("t_env", [a], lambda c: 0)
    for text, limit in (("0.5", 1 << 19), (" ", 1 << 30)):
        monkeypatch.setenv("TIRAMISU_PY_PREPARED_MB", text)
        assert P.prepared("t_env", [a], lambda c: 1) == 1 and P.limit_bytes() == limit
    monkeypatch.delenv("TIRAMISU_PY_PREPARED_MB")
    assert P.limit_bytes() == 1 << 30


def test_gpu_or_odd_sources_are_made_every_call():
    _, n = made("t_odd", lambda: [P.prepared("t_odd", [[1.0, 2.0]], lambda c: 0)
                                  for _ in range(2)])
    assert n == 2


# ------------------------------------------------------------------ LSTM / GRU
torch = pytest.importorskip("torch")
import schedules.nn  # noqa: E402  (registers torch.ops.tiramisu)


def _uncached(cell, x, module, schedule):
    """The result with freshly packed weights (no cache)."""
    W = schedules.RNNWeights([[t.detach().clone() for t in layer] for layer in module.all_weights],
                             cell)
    call = schedules.lstm if cell == "lstm" else schedules.gru
    return call(x, W, schedule=schedule)[0]


@pytest.mark.parametrize("cell", ["lstm", "gru"])
def test_rnn_weight_list_packed_once_and_never_stale(cell):
    torch.manual_seed(1)
    m = (torch.nn.LSTM if cell == "lstm" else torch.nn.GRU)(6, 8, num_layers=2)
    call = schedules.lstm if cell == "lstm" else schedules.gru
    x = torch.randn(4, 2, 6)
    run = lambda: call(x, m.all_weights, schedule="layer")[0]  # noqa: E731
    y1, n1 = made("rnn", run)
    y2, n2 = made("rnn", run)
    assert n1 == 1 and n2 == 0 and torch.equal(y1, y2)
    changes = [lambda: m.weight_hh_l0.data.mul_(0.5),            # .data: no version bump
               lambda: m.weight_ih_l1.detach().mul_(0),          # shares the version
               lambda: m.bias_hh_l1.detach().numpy().__imul__(2)]
    for change in changes:
        change()
        y, n = made("rnn", run)
        assert n == 1
        assert torch.equal(y, _uncached(cell, x, m, "layer"))
        with torch.no_grad():
            torch.testing.assert_close(y, m(x)[0], rtol=1e-4, atol=1e-5)


def test_rnn_numpy_weights_written_after_a_call():
    torch.manual_seed(2)
    m = torch.nn.LSTM(5, 5, num_layers=2)
    weights = [[t.detach().numpy().copy() for t in layer] for layer in m.all_weights]
    x = RNG.standard_normal((3, 1, 5)).astype(np.float32)
    y1, n1 = made("rnn", lambda: schedules.lstm(x, weights, schedule="layer")[0])
    weights[1][1][:] *= -1.0
    y2, n2 = made("rnn", lambda: schedules.lstm(x, weights, schedule="layer")[0])
    want = schedules.lstm(x, schedules.RNNWeights([[a.copy() for a in layer] for layer in weights],
                                                  "lstm"), schedule="layer")[0]
    assert (n1, n2) == (1, 1) and np.array_equal(y2, want) and not np.array_equal(y1, y2)


@pytest.mark.parametrize("cell", ["lstm", "gru"])
def test_nn_modules_pack_once_and_see_changes(cell):
    torch.manual_seed(3)
    tm = (torch.nn.LSTM if cell == "lstm" else torch.nn.GRU)(4, 6, num_layers=2)
    ours = (schedules.nn.LSTM if cell == "lstm" else schedules.nn.GRU).from_torch(tm)
    x = torch.randn(3, 2, 4)
    with torch.no_grad():
        made("rnn", lambda: ours(x))
        _, n = made("rnn", lambda: ours(x))
        assert n == 0
        tm.weight_hh_l1.mul_(0.5)                     # the same Parameter objects
        y, n = made("rnn", lambda: ours(x)[0])
        assert n == 1
        torch.testing.assert_close(y, tm(x)[0], rtol=1e-4, atol=1e-5)


# ------------------------------------------------------------------ sparse convolution
def test_sparse_conv2d_dense_weight_converted_once_never_stale():
    x = RNG.standard_normal((1, 4, 7, 7)).astype(np.float32)
    w = _pruned()
    conv = lambda: schedules.sparse_conv2d(x, w, padding=1)  # noqa: E731
    y1, n1 = made("csr_from_dense", conv)
    y2, n2 = made("csr_from_dense", conv)
    assert (n1, n2) == (1, 0) and np.array_equal(y1, y2)
    w[0] = 0.0                                        # a NumPy write after a call
    y3, n3 = made("csr_from_dense", conv)
    want = schedules.sparse_conv2d(x, CSRWeights.from_dense(w.copy()), padding=1)
    assert n3 == 1 and np.array_equal(y3, want) and not y3[:, 0].any()


def test_sparse_conv2d_torch_weight_mul_zero_seen():
    x = torch.randn(1, 4, 6, 6)
    w = torch.from_numpy(_pruned())
    y1, n1 = made("csr_from_dense", lambda: schedules.sparse_conv2d(x, w))
    _, n2 = made("csr_from_dense", lambda: schedules.sparse_conv2d(x, w))
    w.mul_(0)
    y3, n3 = made("csr_from_dense", lambda: schedules.sparse_conv2d(x, w))
    assert (n1, n2, n3) == (1, 0, 1) and y1.abs().sum() > 0 and not y3.any()


def test_sparse_conv2d_pruned_weight_kept_as_a_sparse_copy_sees_data_writes(monkeypatch):
    """A pruned weight large enough for a sparse copy (the threshold lowered
    here), changed through ``.data`` (which torch's version does not see): a
    pruned zero made nonzero, and a 0.0 made -0.0, are each a new CSR; the
    results equal an uncached conversion's."""
    if SC.helper() is None:
        pytest.skip("no C compiler builds the sparse copy's helper")
    monkeypatch.setattr(SC, "MIN_BYTES", 0)
    monkeypatch.setattr(SC, "vector", lambda: True)    # (the portable loop where no AVX-512)
    x = torch.randn(1, 4, 6, 6)
    w = torch.from_numpy(_pruned(co=8, ci=4, density=0.2))
    schedules.sparse_conv2d(x, w)
    entry = next(e for k, e in reversed(P._entries.items()) if k[0] == "csr_from_dense")
    assert entry[0][0].sparse is not None             # compared against a sparse copy
    _, n = made("csr_from_dense", lambda: schedules.sparse_conv2d(x, w))
    assert n == 0
    zero = tuple(int(i) for i in np.argwhere(w.numpy() == 0)[0])
    w.data[zero] = 2.5                                # a pruned tap brought back
    y, n = made("csr_from_dense", lambda: schedules.sparse_conv2d(x, w))
    want = schedules.sparse_conv2d(x, CSRWeights.from_dense(w.numpy().copy()))
    assert n == 1 and torch.equal(y, want)
    w.data[zero] = 0.0
    schedules.sparse_conv2d(x, w)
    w.data[zero] = -0.0                               # the same values but one bit
    _, n = made("csr_from_dense", lambda: schedules.sparse_conv2d(x, w))
    assert n == 1


def test_torch_and_scipy_sparse_weights_converted_once():
    x = RNG.standard_normal((1, 4, 6, 6)).astype(np.float32)
    w = _pruned()
    ts = torch.from_numpy(w.reshape(6, -1).copy()).to_sparse_csr()
    xt = torch.from_numpy(x)
    made("csr", lambda: schedules.sparse_conv2d(xt, ts))
    y, n = made("csr", lambda: schedules.sparse_conv2d(xt, ts))
    assert n == 0
    np.testing.assert_allclose(y.numpy(), schedules.sparse_conv2d(x, CSRWeights.from_dense(w)),
                               rtol=1e-6, atol=1e-6)
    ts.values().mul_(2.0)                             # the values changed in place
    y2, n = made("csr", lambda: schedules.sparse_conv2d(xt, ts))
    assert n == 1
    np.testing.assert_allclose(y2.numpy(), 2 * y.numpy(), rtol=1e-6, atol=1e-6)
    sp = pytest.importorskip("scipy.sparse")
    m = sp.csr_matrix(w.reshape(6, -1))
    made("csr", lambda: schedules.sparse_conv2d(x, m))
    _, n = made("csr", lambda: schedules.sparse_conv2d(x, m))
    assert n == 0
    m.data[:] = 0
    y3, n = made("csr", lambda: schedules.sparse_conv2d(x, m))
    assert n == 1 and not y3.any()


def test_nn_sparse_conv2d_builds_its_csr_once():
    conv = torch.nn.Conv2d(4, 6, 3, padding=1)
    with torch.no_grad():
        conv.weight.copy_(torch.from_numpy(_pruned()))
    layer = schedules.nn.SparseConv2d.from_torch(conv)
    x = torch.randn(1, 4, 5, 5)
    with torch.no_grad():
        made("csr", lambda: layer(x))
        y1, n = made("csr", lambda: layer(x))
        assert n == 0
        layer.values.data.mul_(0.5)                   # .data: no version bump
        y2, n = made("csr", lambda: layer(x))
        assert n == 1
        want = torch.ops.tiramisu.sparse_conv2d(
            x, layer.rowptr.clone(), layer.colidx.clone(), layer.values.detach().clone(),
            layer.weight_size, layer.bias.detach().clone(), layer.stride, layer.padding,
            layer.dilation)
        assert torch.equal(y2, want)
        torch.testing.assert_close(y2 - layer.bias.view(1, -1, 1, 1),
                                   0.5 * (y1 - layer.bias.view(1, -1, 1, 1)),
                                   rtol=1e-5, atol=1e-5)


# ------------------------------------------------------------------ CSRWeights
def test_csr_weights_copy_what_they_are_given():
    w = _pruned()
    ref = CSRWeights.from_dense(w)
    rowptr, colidx, values = ref.rowptr.copy(), ref.colidx.copy(), ref.values.copy()
    csr = CSRWeights(rowptr, colidx, values, w.shape)
    x = RNG.standard_normal((1, 4, 6, 6)).astype(np.float32)
    y1 = schedules.sparse_conv2d(x, csr)              # derives and caches its layout
    values[:] = 7.0
    colidx[:] = 0
    rowptr[1:] = rowptr[-1]
    assert np.array_equal(csr.to_dense(), w)
    assert np.array_equal(schedules.sparse_conv2d(x, csr), y1)
    for a in (csr.rowptr, csr.colidx, csr.values):
        assert not a.flags.writeable


def test_csr_duplicate_columns_are_summed():
    csr = CSRWeights(np.array([0, 3, 4]), np.array([1, 1, 0, 2]),
                     np.array([1.0, 2.0, 5.0, 4.0], np.float32), (2, 1, 1, 3))
    dense = csr.to_dense()
    assert dense.reshape(2, 3).tolist() == [[5.0, 3.0, 0.0], [0.0, 0.0, 4.0]]
    x = RNG.standard_normal((1, 1, 4, 4)).astype(np.float32)
    got = schedules.sparse_conv2d(x, csr)
    want = schedules.sparse_conv2d(x, CSRWeights.from_dense(dense))
    np.testing.assert_allclose(got, want, rtol=1e-6, atol=1e-6)
    sp = pytest.importorskip("scipy.sparse")
    m = sp.csr_matrix((csr.values, csr.colidx, csr.rowptr), shape=(2, 3))
    assert np.array_equal(m.toarray(), dense.reshape(2, 3))


@pytest.mark.parametrize("threshold", [0.0, 0.5])
def test_from_dense_matches_nonzero(threshold):
    w = RNG.standard_normal((7, 3, 2, 3)).astype(np.float32)
    w[RNG.random(w.shape) < 0.6] = 0
    w[1, 0, 0, 0], w[2, 1, 1, 1], w[3] = np.nan, -0.0, 0.0
    csr = CSRWeights.from_dense(w, threshold)
    flat = w.reshape(7, -1)
    keep = ~(np.abs(flat) <= threshold)
    rows, cols = np.nonzero(keep)
    assert csr.rowptr.tolist() == [0] + np.cumsum(keep.sum(1)).tolist()
    assert csr.colidx.tolist() == cols.tolist()
    assert np.array_equal(csr.values, flat[rows, cols], equal_nan=True)


# ------------------------------------------------------------------ dense conv weights
def _conv_ref(x, w, b, pool=1, relu=False):
    y = torch.nn.functional.conv2d(x, w, b, padding=1)
    y = y.relu() if relu else y
    return torch.nn.functional.max_pool2d(y, pool) if pool > 1 else y


@pytest.mark.parametrize("op", ["conv2d", "conv_relu_maxpool"])
def test_dense_conv_weight_packed_once_and_never_stale(op):
    """spatial_pack and the fused block's direct solver take the NCHWc
    packed weight made once per weight: an in-place change (through torch,
    through ``.data``, through a NumPy view) is seen by the next call."""
    x, w, b = torch.randn(2, 5, 6, 6), torch.randn(20, 5, 3, 3), torch.randn(20)
    if op == "conv2d":
        call = lambda: schedules.conv2d(x, w, b, padding=1, algo="spatial_pack")  # noqa: E731
        ref = lambda: _conv_ref(x, w, b)                                          # noqa: E731
    else:
        call = lambda: schedules.conv_relu_maxpool(x, w, b, padding=1, pool=2,    # noqa: E731
                                                   algo="direct")
        ref = lambda: _conv_ref(x, w, b, pool=2, relu=True)                       # noqa: E731
    y1, n1 = made("nchwc_weight", call)
    y2, n2 = made("nchwc_weight", call)
    assert (n1, n2) == (1, 0) and torch.equal(y1, y2)
    torch.testing.assert_close(y1, ref(), rtol=1e-4, atol=1e-4)
    for change in (lambda: w.mul_(0.5), lambda: w.data.add_(1.0),
                   lambda: w.numpy().__setitem__((3, 2, 1, 1), 7.0)):
        change()
        y, n = made("nchwc_weight", call)
        assert n == 1
        torch.testing.assert_close(y, ref(), rtol=1e-4, atol=1e-4)


def test_owned_sources_are_found_by_identity_and_never_reused_for_another():
    """A value the cache made and registered (own) is found by identity: no
    copy kept, no comparison; a new array owned at the same address later
    is another source (its own entry), never the old one's."""
    compared = []
    real_same = P._all_same
    try:
        P._all_same = lambda pairs: compared.extend(p.nbytes for p, _ in pairs) or real_same(pairs)
        for value in (1.0, 2.0, 3.0):
            a = torch.full((64, 64), value)
            P.own(a)
            got, n = made("t_owned", lambda: P.prepared("t_owned", [a], lambda c: float(c[0][0, 0])))
            again, m = made("t_owned", lambda: P.prepared("t_owned", [a], lambda c: -1.0))
            assert (got, again, n, m) == (value, value, 1, 0)
            a = None                # its address is free: the next one may get it
        assert compared == []
        b = torch.full((64, 64), 4.0)                  # not owned: compared with its copy
        for _ in range(2):
            P.prepared("t_owned", [b], lambda c: 0)
        assert compared == [b.numel() * 4]
    finally:
        P._all_same = real_same


def test_folded_batchnorm_conv_packs_each_fold_once_and_sees_changes():
    """A converted Conv2d + BatchNorm2d + ReLU in eval mode (spatial_pack's
    kernel, which packs its weight): the fold is compared with the module's
    tensors, the packed weight made from the folded one (owned by the
    cache) is found by identity; a BatchNorm statistic written through
    ``.data`` is seen, every time (the new folded weight is a new source,
    even at the old one's address)."""
    import schedules.nn
    m = torch.nn.Sequential(torch.nn.Conv2d(4, 16, 3, padding=1), torch.nn.BatchNorm2d(16),
                            torch.nn.ReLU()).eval()
    ours = schedules.nn.convert(__import__("copy").deepcopy(m), algo="spatial_pack").eval()
    x = torch.randn(2, 4, 8, 8)
    with torch.no_grad():
        for step in range(4):
            _, n = made("nchwc_weight", lambda: ours(x))
            y, n2 = made("nchwc_weight", lambda: ours(x))
            assert (n, n2) == (1, 0)
            torch.testing.assert_close(y, m(x), rtol=1e-4, atol=1e-4)
            for mod in (m, ours):
                mod[1].running_mean.data.add_(0.25)


# ------------------------------------------------------------------ inference tensors
def _inference_cases():
    """(name, prepared kind, call(), torch's result(), an in-place change of
    a weight), all weights made under ``torch.inference_mode()``."""
    torch.manual_seed(5)
    with torch.inference_mode():
        lstm, gru = torch.nn.LSTM(5, 6, num_layers=2), torch.nn.GRU(5, 6)
        x = torch.randn(3, 2, 5)
        w = torch.randn(8, 4, 3, 3)
        w = w * (torch.rand_like(w) < 0.3)
        xc = torch.randn(2, 4, 6, 6)
    ours = schedules.nn.LSTM.from_torch(lstm)
    conv = lambda: torch.nn.functional.conv2d(xc, w, padding=1)  # noqa: E731
    cases = []
    for sparse in (False, True):
        cases += [
            (f"lstm sparse={sparse}", "rnn",
             lambda s=sparse: schedules.lstm(x, lstm.all_weights, sparse=s, schedule="layer")[0],
             lambda: lstm(x)[0], lambda: lstm.weight_hh_l1.mul_(0.5)),
            (f"gru sparse={sparse}", "rnn",
             lambda s=sparse: schedules.gru(x, gru.all_weights, sparse=s, schedule="layer")[0],
             lambda: gru(x)[0], lambda: gru.weight_ih_l0[2].zero_())]
    return cases + [
        ("nn.LSTM", "rnn", lambda: ours(x)[0], lambda: lstm(x)[0],
         lambda: lstm.bias_ih_l0.add_(0.25)),
        ("sparse_conv2d", "csr_from_dense", lambda: schedules.sparse_conv2d(xc, w, padding=1),
         conv, lambda: w[1, 2].fill_(0.75)),
        ("conv2d spatial_pack", "nchwc_weight",
         lambda: schedules.conv2d(xc, w, padding=1, algo="spatial_pack"), conv,
         lambda: w.mul_(-2.0))]


@pytest.mark.parametrize("case", range(7))
def test_inference_mode_weights_are_cached_and_never_stale(case):
    """Weights made under ``torch.inference_mode()`` have no version counter
    (reading it raises): every operator that prepares a weight takes them,
    inside and outside inference mode, prepares once, and follows a write
    made in place inside inference mode (the comparison sees it)."""
    name, kind, call, ref, change = _inference_cases()[case]
    with torch.inference_mode():
        y, n = made(kind, call)
        assert n == 1, name
        torch.testing.assert_close(y, ref(), rtol=1e-4, atol=1e-4)
        change()
        y, n = made(kind, call)
        assert n == 1, name
        torch.testing.assert_close(y, ref(), rtol=1e-4, atol=1e-4)
    again, n = made(kind, call)                       # outside inference mode too
    assert n == 0 and torch.equal(again, y), name


def test_inference_tensors_are_never_owned():
    """``own`` of an inference tensor registers nothing: it is compared on
    every lookup, so a write inside inference mode is seen."""
    with torch.inference_mode():
        a = torch.full((8, 8), 1.0)
    P.own(a)
    assert P.prepared("t_inf", [a], lambda c: float(c[0].sum())) == 64.0
    with torch.inference_mode():
        a.add_(1.0)
    assert P.prepared("t_inf", [a], lambda c: float(c[0].sum())) == 128.0

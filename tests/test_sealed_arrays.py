"""Sealed index arrays (:func:`tiramisu_py.runtime.memory.seal`): copies over
immutable bytes that cannot be made writable, their checked facts (range,
row pointers non-decreasing) remembered so that a kernel reads them once,
not on every call; a writable copy is an ordinary array, checked in full.
The sparse RNN weights' packed CSR is sealed (and gives the same results
call after call)."""
import os

os.environ.setdefault("OMP_WAIT_POLICY", "passive")

import numpy as np  # noqa: E402
import pytest  # noqa: E402

from examples import conv2d, sparse_conv  # noqa: E402
from tiramisu_py.runtime import memory  # noqa: E402


@pytest.fixture(scope="module")
def case():
    k = sparse_conv.build().compile()
    inp, w, bias = sparse_conv.random_inputs(n=2, cin=3, cout=5, h=6, w=5, density=0.3, seed=7)
    h, wd = inp.shape[2:]
    rowptr, colidx, val = sparse_conv.to_csr(w)(h, wd)
    args = dict(inp=sparse_conv.pad_flat(inp), rowptr=rowptr, colidx=colidx, val=val,
                bias=bias, H=h, W=wd)
    return k, args, conv2d.reference(inp, w, bias)


def test_sealed_arrays_are_copies_that_cannot_be_made_writable():
    base = np.arange(10, dtype=np.int32).reshape(2, 5)
    sealed = memory.seal(base)
    base[0, 3] = -7                               # the source stays writable, the copy unchanged
    assert sealed.shape == (2, 5) and sealed[0, 3] == 3 and not sealed.flags.writeable
    with pytest.raises(ValueError, match="read-only"):
        sealed[0, 0] = 1
    with pytest.raises(ValueError):
        sealed.flags.writeable = True
    assert memory.seal(np.zeros((0, 3), np.int32)).shape == (0, 3)


def test_a_kernel_checks_a_sealed_array_once(case, monkeypatch):
    k, args, ref = case
    sealed = dict(args, rowptr=memory.seal(args["rowptr"]), colidx=memory.seal(args["colidx"]))
    out = k(**sealed)
    np.testing.assert_allclose(out, ref, rtol=1e-4, atol=1e-4)
    assert memory._facts(sealed["colidx"])["range"] == (int(args["colidx"].min()),
                                                        int(args["colidx"].max()))
    assert memory._facts(sealed["rowptr"])["monotone"] is True
    read = []
    monkeypatch.setattr(np, "diff", lambda *a, **kw: read.append("diff") or np.subtract(
        a[0][1:], a[0][:-1]))
    np.testing.assert_array_equal(k(**sealed), out)
    assert "diff" not in read                      # the row pointers were not read again
    np.testing.assert_array_equal(k(**args), out)  # unsealed arrays: checked in full
    assert "diff" in read


def test_a_writable_copy_is_checked_in_full(case):
    k, args, ref = case
    colidx = memory.seal(args["colidx"])
    rowptr = memory.seal(args["rowptr"])
    k(**dict(args, colidx=colidx, rowptr=rowptr))
    bad = colidx.copy()                            # an ordinary array: no facts
    assert memory._facts(bad) is None
    bad[3] = 10**6
    with pytest.raises(ValueError, match="'colidx'"):
        k(**dict(args, colidx=bad, rowptr=rowptr))
    badptr = rowptr.copy()
    badptr[2], badptr[3] = badptr[3] + 1, badptr[2]
    with pytest.raises(ValueError, match="non-decreasing"):
        k(**dict(args, rowptr=badptr))
    np.testing.assert_allclose(k(**dict(args, colidx=colidx, rowptr=rowptr)), ref,
                               rtol=1e-4, atol=1e-4)


def test_the_facts_leave_with_the_array():
    a = memory.seal(np.arange(5, dtype=np.int32))
    key = id(a)
    assert memory.value_range(a) == (0, 4) and key in memory._SEALED
    del a
    assert key not in memory._SEALED


def test_sparse_rnn_weights_are_sealed_and_stay_right():
    torch = pytest.importorskip("torch", reason="torch is an optional extra")
    import schedules
    torch.manual_seed(0)
    m = torch.nn.LSTM(32, 32, 2)
    with torch.no_grad():
        for w in m.parameters():
            w.mul_(torch.rand_like(w) < 0.2)
        x = torch.randn(5, 2, 32)
        want = m(x)[0]
        first = schedules.lstm(x, m.all_weights, sparse=True)[0]
        again = schedules.lstm(x, m.all_weights, sparse=True)[0]
    torch.testing.assert_close(first, want, rtol=1e-4, atol=1e-5)
    torch.testing.assert_close(again, first, rtol=0, atol=0)
    W = schedules.RNNWeights(m.all_weights, "lstm", sparse=True)
    schedules.lstm(x.numpy(), W)
    layers = [v for v in W._packed.values()][0]
    arrays = [a for layer in layers for a in (*layer["wi"], *layer["wh"])]
    assert arrays and all(memory._facts(a) is not None for a in arrays)

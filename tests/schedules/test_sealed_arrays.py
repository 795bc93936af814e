"""Sealed index arrays (:func:`tiramisu_py.runtime.memory.seal`): copies over
immutable bytes that NumPy cannot make writable; torch.from_numpy writes
them all the same, so every call reads them in full (nothing remembered):
an out-of-range index written through torch is a clear ValueError at the
next call, never an out-of-bounds read (run in a child process).  The
index reads (:mod:`tiramisu_py.runtime.index_scan`, C) equal NumPy's for
every dtype and layout.  The sparse RNN weights' packed CSR is sealed (and
gives the same results call after call)."""
from repo_paths import ROOT
import os
import subprocess
import sys

os.environ.setdefault("OMP_WAIT_POLICY", "passive")

import numpy as np  # noqa: E402
import pytest  # noqa: E402

from examples import conv2d, sparse_conv  # noqa: E402
from tiramisu_py.runtime import index_scan, memory  # noqa: E402



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


def test_a_writable_copy_is_checked_in_full(case):
    k, args, ref = case
    colidx = memory.seal(args["colidx"])
    rowptr = memory.seal(args["rowptr"])
    k(**dict(args, colidx=colidx, rowptr=rowptr))
    bad = colidx.copy()                            # an ordinary, writable array
    bad[3] = 10**6
    with pytest.raises(ValueError, match="'colidx'"):
        k(**dict(args, colidx=bad, rowptr=rowptr))
    badptr = rowptr.copy()
    badptr[2], badptr[3] = badptr[3] + 1, badptr[2]
    with pytest.raises(ValueError, match="non-decreasing"):
        k(**dict(args, rowptr=badptr))
    np.testing.assert_allclose(k(**dict(args, colidx=colidx, rowptr=rowptr)), ref,
                               rtol=1e-4, atol=1e-4)


@pytest.mark.parametrize("dtype", ["int8", "int16", "int32", "int64", "uint8", "uint16",
                                   "uint32", "uint64", ">i4"])
def test_index_reads_equal_numpys(dtype):
    """Range and first decrease, by the C helper (or NumPy for uint64 and a
    non-native byte order), for contiguous, strided and empty arrays; a
    decrease at a block's first, last and straddling positions is found."""
    rng = np.random.default_rng(4)
    dt = np.dtype(dtype)
    info = np.iinfo(dt)
    n = 3 * index_scan.BLOCK + 7
    a = rng.integers(info.min, info.max, n, dtype=dt.newbyteorder("="), endpoint=True).astype(dt)
    a[100], a[2000] = info.min, info.max
    for v in (a, a[::3], a[:1], a[:0], a[:n - n % 7].reshape(-1, 7)[:, :5]):
        assert index_scan.value_range(v) == ((int(v.min()), int(v.max())) if v.size else None)
    rows = np.sort(rng.integers(info.min + 1, info.max - 1, n, dtype=dt.newbyteorder("="))
                   ).astype(dt)
    assert index_scan.first_descent(rows) is None and index_scan.first_descent(rows[:1]) is None
    for k in (0, index_scan.BLOCK - 1, index_scan.BLOCK, index_scan.BLOCK + 1, n - 2):
        bad = rows.copy()
        bad[k] = info.max                           # above its successor, not its predecessor
        assert index_scan.first_descent(bad) == k
        assert index_scan.first_descent(bad[::2]) == (k // 2 if k % 2 == 0 else None)


WRITE_THROUGH_CHILD = """
import sys, warnings
import numpy as np
import torch
import schedules
from examples import sparse_conv
from tiramisu_py.runtime import memory

def write(array, k, value):           # NumPy refuses; torch writes through (it warns)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        torch.from_numpy(array)[k] = value

def call(f):
    try:
        f()
    except ValueError as exc:
        print("refused:", str(exc).splitlines()[0][:200])
    else:
        print("accepted")

# a kernel given sealed CSR arrays, then the same arrays written through torch
k = sparse_conv.build().compile()
inp, w, bias = sparse_conv.random_inputs(n=1, cin=3, cout=4, h=6, w=5, density=0.4, seed=3)
rowptr, colidx, val = sparse_conv.to_csr(w)(6, 5)
args = dict(inp=sparse_conv.pad_flat(inp), rowptr=memory.seal(rowptr),
            colidx=memory.seal(colidx), val=val, bias=bias, H=6, W=5)
k(**args)
write(args["colidx"], 0, 10**8)
call(lambda: k(**args))
write(args["colidx"], 0, int(colidx[0]))
write(args["rowptr"], 1, 10**6)
call(lambda: k(**args))

# the sparse LSTM's own sealed index arrays (private state, reached on purpose)
torch.manual_seed(0)
m = torch.nn.LSTM(16, 16, 2)
with torch.no_grad():
    for p in m.parameters():
        p.mul_(torch.rand_like(p) < 0.3)
    x = torch.randn(4, 2, 16)
    W = schedules.RNNWeights(m.all_weights, "lstm", sparse=True)
    schedules.lstm(x, W, schedule="layer")
    layer = list(W._packed.values())[0][0]
    index = [a for a in (*layer["wi"], *layer["wh"]) if a.dtype.kind in "iu"]
    assert index and not any(a.flags.writeable for a in index)
    for a in index:
        old = int(a[-1])
        write(a, -1, 10**8)
        call(lambda: schedules.lstm(x, W, schedule="layer"))
        write(a, -1, old)
    y = schedules.lstm(x, W, schedule="layer")[0]
    torch.testing.assert_close(y, m(x)[0], rtol=1e-4, atol=1e-5)
print("survived", len(index))
"""


def test_a_sealed_array_written_through_torch_is_refused_not_read_out_of_bounds():
    """Issue 52: ``torch.from_numpy`` ignores a sealed array's read-only flag;
    an index written out of range through it was trusted (its range was
    remembered) and the next call read out of bounds (SIGSEGV).  In a child:
    each such call must raise a ValueError, and the restored arrays compute
    torch's result again."""
    pytest.importorskip("torch", reason="torch is an optional extra")
    env = dict(os.environ)
    env.setdefault("OMP_WAIT_POLICY", "passive")
    r = subprocess.run([sys.executable, "-c", WRITE_THROUGH_CHILD],
                       capture_output=True, text=True, timeout=300, env=env, cwd=ROOT)
    assert r.returncode == 0, f"child died with {r.returncode}:\n{r.stdout}\n{r.stderr[-3000:]}"
    lines = r.stdout.splitlines()
    assert lines[-1].startswith("survived") and "accepted" not in lines, r.stdout
    refused = [line for line in lines if line.startswith("refused:")]
    assert len(refused) == 2 + int(lines[-1].split()[1]), r.stdout
    assert "'colidx'" in refused[0] and "'rowptr'" in refused[1], r.stdout


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
    assert arrays and not any(a.flags.writeable for a in arrays)

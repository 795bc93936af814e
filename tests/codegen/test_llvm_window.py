"""A vector load whose lanes read one 32-element window of a row,
``X[r, x + d % 32]`` (``x`` the same in every lane), lowered by the LLVM
backend to the window's two vectors and one permute (``vpermi2ps`` /
``vpermi2d``) on AVX-512 hosts instead of a gather (codegen.llvm.window):
results equal NumPy's on both backends, windows that run past the row's
end included (the lanes past it are masked, never read)."""
import numpy as np
import pytest

import tiramisu_py as tp
from codegen import emit_llvm
from codegen.llvm.lower import host

AVX512 = host().avx512
L = 16


def _lookup(rows, cols, nw, dtype=tp.float32, shift=0, lane_base=False):
    """``out[s, l] = sum_nz v[nz, l] * X[s % rows, 32 w + shift + (k[nz, l] % 32)]``
    over the slots ``nz`` of window ``w`` (``ptr``)."""
    f = tp.Function("lookup", params={"S": 4, "NW": nw, "R": rows, "C": cols, "NS": None})
    ptr = f.input("ptr", ("S * NW + 1",), tp.int32)
    v = f.input("v", ("NS * 16",), dtype)
    k = f.input("k", ("NS * 16",), tp.uint8)
    X = f.input("X", ("R", "C"), dtype)
    s, l, w = f.var("s", 0, "S"), f.var("l", 0, L), f.var("w", 0, "NW")
    nz = f.var("nz", ptr[s * nw + w], ptr[s * nw + w + 1])
    out = f.computation("out", [s, l], 0, dtype=dtype)
    col = 32 * w + shift + k[nz * L + l] % 32 + (l if lane_base else 0)
    out[s, l].reduce("+", v[nz * L + l] * X[s % rows, col], loops=[s, w, nz, l])
    out.update.vectorize("l", L)
    out.update.accumulate_locally("nz", allow_reassociation=True)
    return f


def _data(rows, cols, nw, np_dtype, shift=0, lane_base=False, krange=(0, 32), seed=0):
    """Slots whose columns (``k`` in ``krange``) stay inside the row, as the
    compiler's check of the index arrays' ranges wants."""
    rng = np.random.default_rng(seed)
    counts = rng.integers(0, 4, 4 * nw)
    ptr = np.concatenate([[0], np.cumsum(counts)]).astype(np.int32)
    ns = int(ptr[-1])
    k = rng.integers(*krange, (ns, L)).astype(np.uint8)
    if np.issubdtype(np_dtype, np.integer):
        v, X = rng.integers(-9, 10, (ns, L)), rng.integers(-9, 10, (rows, cols))
    else:
        v, X = rng.standard_normal((ns, L)) * 4, rng.standard_normal((rows, cols)) * 4
    v, X = v.astype(np_dtype), X.astype(np_dtype)
    want = np.zeros((4, L), np.float64)
    for s in range(4):
        for w in range(nw):
            for slot in range(ptr[s * nw + w], ptr[s * nw + w + 1]):
                for lane in range(L):
                    c = 32 * w + shift + int(k[slot, lane]) + (lane if lane_base else 0)
                    want[s, lane] += float(v[slot, lane]) * float(X[s % rows, c])
    return dict(ptr=ptr, v=v.ravel(), k=k.ravel(), X=X), want


@pytest.mark.parametrize("cols, krange", [(64, (0, 32)),
                                          (40, (0, 8))])  # the second window runs past the row
def test_window_lookup_matches_numpy(backend, cols, krange):
    f = _lookup(3, cols, 2)
    args, want = _data(3, cols, 2, np.float32, krange=krange)
    kern = f.compile(target=backend)
    np.testing.assert_allclose(kern(**args), want, rtol=1e-5, atol=1e-4)
    if backend == "llvm":
        src = emit_llvm(kern.lowered)
        assert ("llvm.x86.avx512.vpermi2var.ps.512" in src) == AVX512


def test_window_lookup_int32_starting_before_the_row(backend):
    """Integer tables use ``vpermi2d``; windows starting 8 columns before
    their part of the row (the first one before column 0: those lanes masked)."""
    f = _lookup(2, 56, 2, dtype=tp.int32, shift=-8)
    args, want = _data(2, 56, 2, np.int32, shift=-8, krange=(8, 32), seed=1)
    kern = f.compile(target=backend)
    np.testing.assert_array_equal(kern(**args), want.astype(np.int32))
    if backend == "llvm":
        assert ("llvm.x86.avx512.vpermi2var.d.512" in emit_llvm(kern.lowered)) == AVX512


def test_lane_dependent_base_stays_a_gather():
    """``x + l + d % 32``: the window moves with the lane, so it is no window
    of the row: a gather, with the same results."""
    f = _lookup(2, 80, 2, lane_base=True)
    args, want = _data(2, 80, 2, np.float32, lane_base=True, krange=(0, 16), seed=2)
    kern = f.compile(target="llvm")
    np.testing.assert_allclose(kern(**args), want, rtol=1e-5, atol=1e-4)
    assert "vpermi2var" not in emit_llvm(kern.lowered)

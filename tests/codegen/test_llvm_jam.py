"""Unroll-and-jam of column walks (codegen.jam, codegen.llvm.jam): a serial
nest ``for j: for i: B[i][j] = f(A[i][j], A[i+1][j], ...)`` is unrolled by
4 in ``j`` and jammed into one ``i`` loop (plus a remainder) when the jam
provably keeps the program's meaning; the results match NumPy on both
backends (sizes with and without a remainder) and LLVM prints no warning."""
import numpy as np

import tiramisu_py as tp
from codegen import emit_llvm
from codegen.ir import Binary, Block, For, If, Load, Store
from codegen.jam import JAM, jam_count

from ir_helpers import F64, I64, add, c, v


def A(i, j, arr="A"):
    return Load(arr, (i, j), F64)


def _nest(store, lo=c(1), hi=v("N")):
    """for j: for i in [lo, hi): store."""
    return For("j", c(1), v("N"), For("i", lo, hi, store))


def _stencil(dst="B", src="A"):
    s = Binary("add", A(v("i"), v("j"), src), A(add(v("i"), c(1)), v("j"), src), F64)
    return Store(dst, (v("i"), v("j")), Binary("add", s, A(v("i"), add(v("j"), c(1)), src), F64))


def test_column_walk_is_jammed():
    assert jam_count(_nest(_stencil())) == JAM
    assert jam_count(For("j", c(1), v("N"), Block([For("i", c(1), v("N"), _stencil())]))) == JAM


def test_row_walk_is_not_jammed():
    row = Store("B", (v("j"), v("i")), A(v("j"), v("i")))
    assert jam_count(_nest(row)) == 0


def test_in_place_update_is_not_jammed():
    # A stored at [i][j] and read at [i+1][j]: iterations of neighbouring j would be reordered
    assert jam_count(_nest(_stencil(dst="A", src="A"))) == 0


def test_accumulation_is_not_jammed():
    acc = Store("B", (v("i"), c(0)), Binary("add", A(v("i"), c(0), "B"), A(v("i"), v("j")), F64))
    assert jam_count(_nest(acc)) == 0              # B[i][0] is touched by every j


def test_triangular_if_and_invariant_loads_are_not_jammed():
    assert jam_count(_nest(_stencil(), hi=v("j"))) == 0
    assert jam_count(_nest(If(Binary("lt", v("i"), v("j"), "bool"), _stencil()))) == 0
    inv = Store("B", (v("i"), v("j")), Binary("add", A(v("i"), v("j")), A(c(0), c(0)), F64))
    assert jam_count(_nest(inv)) == 0              # LICM would put A[0][0] in the outer body
    contiguous = Store("B", (v("i"), v("j")), A(v("j"), v("i")))
    assert jam_count(_nest(contiguous)) == 0       # A[j][i]: the vectorizer takes the inner loop


def _column_stencil(in_place: bool):
    f = tp.Function("colwalk_ip" if in_place else "colwalk", params=["N"])
    j, i = f.var("j", 1, "N"), f.var("i", 1, "N - 1")
    A = f.input("A", ("N", "N"), tp.float64) if not in_place else f.buffer("A", ("N", "N"), tp.float64, output=True)
    B = f.buffer("B", ("N", "N"), tp.float64, output=True) if not in_place else None
    val = 0.25 * (A[i, j] + A[i - 1, j] + A[i + 1, j] + A[i, j - 1])
    f.computation("s", [j, i], val).store_in(A if in_place else B, [i, j])
    return f


def _reference(A, in_place):
    A = A.copy()
    N = A.shape[0]
    out = A if in_place else np.zeros_like(A)
    for j in range(1, N):
        for i in range(1, N - 1):
            out[i, j] = 0.25 * (A[i, j] + A[i - 1, j] + A[i + 1, j] + A[i, j - 1])
    return out


def _call(k, A, in_place):
    args = {"A": A.copy()}
    if not in_place:
        args["B"] = np.zeros_like(A)
    out = k(**args)
    if isinstance(out, dict):
        out = out["A" if in_place else "B"]
    return out


def test_jammed_stencil_matches_numpy(capfd):
    for n, in_place in ((23, False), (6, False), (3, False), (23, True)):   # 22, 5, 2 columns
        A = np.random.default_rng(n).standard_normal((n, n))
        f = _column_stencil(in_place)
        src = emit_llvm(f.compile(target="llvm").lowered)
        assert ("unroll-and-jam 4 into loop i" in src) == (not in_place)
        want = _reference(A, in_place)
        for target in ("llvm", "c"):
            got = _call(f.compile(target=target), A, in_place)
            mask = np.ones_like(A, bool) if in_place else np.zeros_like(A, bool)
            mask[1:-1, 1:] = True
            np.testing.assert_allclose(got[mask], want[mask], rtol=1e-12, atol=1e-12)
    assert "not unroll-and-jammed" not in capfd.readouterr().err

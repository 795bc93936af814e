"""Vector loops whose asked width is no hardware width, and the partial tiles of
full-tile versioning (LLVM backend, issue 15 parity round 2): checked against
NumPy on both backends; the LLVM IR uses power-of-two vectors only and does
not unroll the scalar epilogue."""
import re

import numpy as np
import pytest

import tiramisu_py as tp

RNG = np.random.default_rng(5)


def _widths(src, t):
    return {int(w) for w in re.findall(rf"<(\d+) x {t}>", src)}


def _axpy(name, width):
    f = tp.Function(name, params=["N"])
    i = f.var("i", 0, "N")
    A = f.input("A", ("N",), tp.float32)
    B = f.input("B", ("N",), tp.float32)
    C = f.computation("C", [i], A[i] * 2.0 + B[i])
    C.vectorize("i", width)
    return f


@pytest.mark.parametrize("width", [26, 12])
def test_odd_width_straight_line(backend, width):
    """vectorize(i, 26) runs 16-lane groups, one 8-lane step, then scalar: no
    <26 x float> (LLVM split it lane by lane through the stack)."""
    f = _axpy(f"vw_axpy_{width}", width)
    for n in (width, 2 * width + 3, 5, 100):
        a = RNG.standard_normal(n, dtype=np.float32)
        b = RNG.standard_normal(n, dtype=np.float32)
        kern = f.compile()
        np.testing.assert_allclose(kern(A=a, B=b), a * 2.0 + b, rtol=1e-6, atol=1e-6)
    if backend == "llvm":
        w = 1 << (width.bit_length() - 1)
        src = kern.source
        assert width not in _widths(src, "float")
        assert {w, w // 2} <= _widths(src, "float")
        assert f"{width} lanes asked, {w} used" in src


def test_odd_width_with_a_reduction_inside(backend):
    """A vector loop of width 12 holding the k loop: 8-lane groups with the
    accumulator in registers, one 4-lane step, then scalar."""
    f = tp.Function("vw_gemm12", params=["N", "M", "K"])
    i, j, k = f.var("i", 0, "N"), f.var("j", 0, "M"), f.var("k", 0, "K")
    A = f.input("A", ("N", "K"), tp.float32)
    B = f.input("B", ("K", "M"), tp.float32)
    C = f.computation("C", [i, j], 0.0)
    C[i, j] += A[i, k] * B[k, j]
    C.update.vectorize("j", 12)
    kern = f.compile()
    for (n, m, kk) in ((7, 12, 5), (9, 31, 13), (3, 4, 2)):
        a = RNG.standard_normal((n, kk), dtype=np.float32)
        b = RNG.standard_normal((kk, m), dtype=np.float32)
        np.testing.assert_allclose(kern(A=a, B=b), a.astype(np.float64) @ b, rtol=1e-4, atol=1e-4)
    if backend == "llvm":
        src = kern.source
        assert 12 not in _widths(src, "float") and {8, 4} <= _widths(src, "float")
        assert "inner loops run once per vector iteration" in src and "held in registers" in src


def test_partial_tiles_epilogue_not_unrolled(backend):
    """tile + vectorize on a size that leaves partial tiles: full tiles and the
    partial ones agree with NumPy; the LLVM scalar epilogue (fewer than W
    iterations) and the loop around the versioned body carry
    llvm.loop.unroll.disable."""
    f = tp.Function("vw_tiles", params=["N"])
    i, j = f.var("i", 0, "N"), f.var("j", 0, "N")
    A = f.input("A", ("N", "N"), tp.float64)
    B = f.input("B", ("N", "N"), tp.float64)
    C = f.computation("C", [i, j], 1.0 - 0.2 * B[j, i] + 0.25 * A[i, j])
    C.tile(i, j, 8, 8)
    C.parallelize("i0")
    C.vectorize("j1", 4)
    kern = f.compile()
    for n in (8, 21, 35):
        a, b = RNG.standard_normal((n, n)), RNG.standard_normal((n, n))
        np.testing.assert_allclose(kern(A=a, B=b), 1.0 - 0.2 * b.T + 0.25 * a, rtol=1e-13, atol=1e-13)
    if backend == "llvm":
        src = kern.source
        epilogues = re.findall(r"^(!\d+) = distinct !\{!\d+, (!\d+), (!\d+), (!\d+)\}", src, re.M)
        props = {m: src.split(f"\n{m} = ", 1)[1].split("\n", 1)[0] for e in epilogues for m in e[1:]}
        assert '!{!"llvm.loop.unroll.disable"}' in props.values()
        assert '!{!"llvm.loop.vectorize.width", i32 1}' in props.values()
        # the tile loop holding the versioned body (full tile / partial tile) is not unrolled
        alone = re.findall(r"^!\d+ = distinct !\{!\d+, (!\d+)\}", src, re.M)
        assert any(re.search(rf"^{m} = !{{!\"llvm.loop.unroll.disable\"}}", src, re.M) for m in alone)

"""Latency-bound add chains in the LLVM backend (``codegen.llvm.promote``,
``_latency_chain``): the adds onto at most two floats held in registers over
an innermost serial loop lose ``contract``, so ``acc - a*b`` is a multiply
and a subtract, never an FMA on the chain.  Results are checked bit for bit
against a Python reference that rounds the product and the difference
separately (what the program says), on both backends."""
import re

import numpy as np
import pytest

import tiramisu_py as tp
from examples import trisolv


def _trisolv_reference(L, b):
    """Python floats: each product and each difference rounded on its own."""
    n = len(b)
    x = [0.0] * n
    for i in range(n):
        acc = float(b[i])
        for j in range(i):
            acc = acc - float(L[i, j]) * x[j]
        x[i] = acc / float(L[i, i])
    return np.array(x)


@pytest.mark.parametrize("target", ["c", "llvm"])
def test_trisolv_chain_rounds_like_the_program(target):
    L, b = trisolv.random_inputs(70, seed=4)
    k = trisolv.build().compile(target=target)
    want = _trisolv_reference(L, b)
    got = k(L, b)
    if target == "llvm":
        np.testing.assert_array_equal(got, want)        # no FMA: bit for bit
        body = k.source[k.source.index("held in registers over loop j"):]
        body = body[:body.index("\nendfor")]
        assert re.search(r"= fsub double %acc", body), body   # the chain's sub, not contractable
        assert "fsub contract" not in body
    else:                                               # gcc may contract: close only
        np.testing.assert_allclose(got, want, rtol=1e-12)


def _dot_rows(dtype):
    """out[i] = sum_k A[i, k] * B[k] (k innermost: one accumulator per i)."""
    f = tp.Function("dot_rows", params=["N", "K"])
    i, k = f.var("i", 0, "N"), f.var("k", 0, "K")
    A = f.input("A", ("N", "K"), dtype)
    B = f.input("B", ("K",), dtype)
    out = f.computation("out", [i], 0.0)
    out[i] += A[i, k] * B[k]
    return f, out


@pytest.mark.parametrize("dtype", [tp.float32, tp.float64])
def test_dot_rows_chain_bit_for_bit(dtype):
    rng = np.random.default_rng(1)
    npt = np.float32 if dtype == tp.float32 else np.float64
    a = rng.standard_normal((9, 37)).astype(npt)
    b = rng.standard_normal(37).astype(npt)
    k = _dot_rows(dtype)[0].compile(target="llvm")
    want = np.zeros(9, npt)
    for r in range(9):
        acc = npt(0)
        for q in range(37):
            acc = npt(acc + npt(a[r, q] * b[q]))
        want[r] = acc
    np.testing.assert_array_equal(k(a, b), want)
    assert "fadd contract" not in k.source[k.source.index("held in registers over loop k"):]


def test_vector_loops_keep_their_fmas():
    """A widened loop (many independent lanes, throughput-bound) keeps
    ``llvm.fma``: the rule is for scalar chains only."""
    f, out = _dot_rows(tp.float32)
    out.update.interchange("i", "k")
    out.update.vectorize("i", 8)
    k = f.compile(target="llvm")
    assert "@llvm.fma" in k.source
    rng = np.random.default_rng(2)
    a = rng.standard_normal((32, 16)).astype(np.float32)
    b = rng.standard_normal(16).astype(np.float32)
    np.testing.assert_allclose(k(a, b), a @ b, rtol=1e-5, atol=1e-5)

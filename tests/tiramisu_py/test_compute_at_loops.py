"""Loop commands on a computed-at producer (issue 52, item 6): after
``P.compute_at(C, loop)`` P runs inside C's loops; ``vectorize``/``unroll``
act on P's own loops (C's are C's to tag), and a tag never names two loops."""
import re

import numpy as np
import pytest

import tiramisu_py as tp

RNG = np.random.default_rng(52)


def shifted_pair():
    """P[j] = 2 A[j] over N + 1 points, C[i] = P[i] + P[i + 1] over N."""
    f = tp.Function("pair", params=["N"])
    i, j = f.var("i", 0, "N"), f.var("j", 0, "N + 1")
    A = f.input("A", ("N + 1",), tp.float32)
    P = f.computation("P", [j], A[j] * 2.0)
    C = f.computation("C", [i], P[i] + P[i + 1])
    return f, P, C


def test_a_consumer_loop_of_a_computed_at_producer_is_not_its_to_vectorize():
    # P runs inside C's loop i: that loop is C's to tag, and has no extent of
    # P's own (it was a raw isl error: isl_set_dim_max failed: unbounded optimum)
    f, P, C = shifted_pair()
    P.compute_at(C, "i")
    for call, text in ((lambda: P.vectorize("i", 4), "P.vectorize(i, 4)"),
                       (lambda: P.unroll("i", 2), "P.unroll(i, 2)"), (lambda: P.unroll("i"), "P.unroll(i)")):
        with pytest.raises(ValueError, match=re.escape(
                f"{text}: loop 'i' is C's loop, which P runs in since P.compute_at(C, i); "
                "P's own loops are j: ")):
            call()
    assert f.schedule_commands() == ["P.compute_at(C, i)"]
    P.vectorize("j", 4)                  # its own loop: the recomputed region
    a = RNG.standard_normal(41).astype(np.float32)
    np.testing.assert_allclose(f.compile()(a), (a[:-1] + a[1:]) * 2, rtol=1e-6)


def prefix_sums():
    """C[i] = sum over k <= i of P[i - k], P[i] = 2 A[i]: P and C share loop i."""
    f = tp.Function("prefix", params=["N"])
    i = f.var("i", 0, "N")
    k = f.var("k", 0, i + 1)
    A = f.input("A", ("N",), tp.float32)
    P = f.computation("P", [i], A[i] * 2.0)
    C = f.computation("C", [i], 0.0)
    C[i] += P[i - k]
    return f, P, C


def test_vectorize_a_computed_at_producers_own_loop_named_like_the_consumers(backend):
    # after compute_at, P has C's loop i and its own loop i: vectorize means its
    # own (C's cannot be), split first so that the tag names one loop
    f, P, C = prefix_sums()
    P.compute_at(C.update, "i")
    P.vectorize("i", 4)
    assert f.schedule_commands() == ["P.split(i, 4)", "P.compute_at(C_update, i)",
                                     "P.vectorize(i1, 4)"]
    k = f.compile()
    a = RNG.standard_normal(11).astype(np.float32)
    np.testing.assert_allclose(k(a), np.cumsum(a) * 2, rtol=1e-5, atol=1e-5)
    if backend == "c":
        assert "#pragma omp simd\n        for (int64_t i1 = 0;" in k.source
    # a tag on a name two of its loops have is refused: it would tag both
    f, P, C = prefix_sums()
    P.compute_at(C.update, "i")
    with pytest.raises(ValueError, match=r"P.parallelize\(i\): P has two loops named 'i' since "
                                         r"P.compute_at\(C_update, ...\): C_update's, which it "
                                         r"runs in, and its own; a tag names one loop"):
        P.parallelize("i")
    g, P, C = prefix_sums()
    P.parallelize("i")
    with pytest.raises(ValueError, match=r"P.compute_at\(C_update, i\): P's loop 'i' is tagged "
                                         r"and C_update's loop 'i', which P would run in, has "
                                         r"the same name"):
        P.compute_at(C.update, "i")
    assert g.schedule_commands() == ["P.parallelize(i)"]

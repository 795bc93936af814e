"""Zero-filling of temporaries and outputs only where the program may read
initial content (tiramisu_py/poly/dataflow.py): the decision, and the results."""
import importlib

import numpy as np
import pytest

import tiramisu_py as tp
from codegen import ir

TARGETS = ["c", "llvm"]


def allocations(kernel):
    """name -> zero_init of every Allocate in the lowered code."""
    out = {}

    def visit(s):
        if isinstance(s, ir.Allocate):
            out[s.array] = s.zero_init
        return ir.rebuild(s, visit)

    visit(kernel.lowered.body)
    return out


@pytest.mark.parametrize("target", TARGETS)
def test_fully_written_output_and_temporary_are_not_zeroed(target):
    f = tp.Function("full", params={"N": 37})
    i = f.var("i", 0, "N")
    A = f.input("A", ("N",), tp.float32)
    t = f.computation("t", [i], A[i] * 2.0)
    f.computation("o", [i], t[i] + 1.0)
    k = f.compile(target=target)
    assert allocations(k) == {"t": False}
    assert k.zeroed_outputs == set()
    a = np.arange(37, dtype=np.float32)
    np.testing.assert_array_equal(k(a), a * 2 + 1)


@pytest.mark.parametrize("target", TARGETS)
def test_partly_written_output_is_zeroed(target):
    f = tp.Function("part", params={"N": 9})
    i = f.var("i", 1, "N")
    A = f.input("A", ("N",), tp.float32)
    O = f.buffer("O", ("N",), tp.float32, output=True)
    f.computation("s", [i], A[i] + 1.0).store_in(O, [i])
    k = f.compile(target=target)
    assert k.zeroed_outputs == {"O"}
    out = k(np.ones(9, np.float32))
    assert out[0] == 0 and (out[1:] == 2).all()


@pytest.mark.parametrize("target", TARGETS)
def test_temporary_read_before_written_is_zeroed(target):
    # s2 reads T[i], which s1 writes only at i < N - 1: the last read sees
    # initial content, which must be zero
    f = tp.Function("early", params={"N": 6})
    i, j = f.var("i", 0, "N"), f.var("j", 0, "N - 1")
    A = f.input("A", ("N",), tp.float32)
    T = f.buffer("T", ("N",), tp.float32)
    f.computation("s1", [j], A[j] * 3.0).store_in(T, [j])
    f.computation("s2", [i], T[i] + 0.0)
    k = f.compile(target=target)
    assert allocations(k) == {"T": True}
    a = np.arange(1, 7, dtype=np.float32)
    np.testing.assert_array_equal(k(a), [3, 6, 9, 12, 15, 0])


@pytest.mark.parametrize("target", TARGETS)
def test_reduction_output_is_not_zeroed_but_starts_at_its_init(target):
    f = tp.Function("rowsum", params={"N": 5, "M": 7})
    i, j = f.var("i", 0, "N"), f.var("j", 0, "M")
    A = f.input("A", ("N", "M"), tp.float32)
    s = f.computation("s", [i], 0.0)
    s[i] += A[i, j]
    k = f.compile(target=target)
    assert k.zeroed_outputs == set()
    a = np.random.rand(5, 7).astype(np.float32)
    for _ in range(3):   # reused (uninitialised) allocations give the same result
        np.testing.assert_allclose(k(a), a.sum(1), rtol=1e-5)


@pytest.mark.parametrize("target", TARGETS)
def test_update_over_a_wider_domain_than_its_init_is_zeroed(target):
    f = tp.Function("wide", params={"N": 6})
    i, h = f.var("i", 0, "N"), f.var("h", 0, 3)
    A = f.input("A", ("N",), tp.float32)
    O = f.buffer("O", ("N",), tp.float32, output=True)
    c = f.computation("c", [h], 1.0).store_in(O, [h])
    c[i] += A[i]
    k = f.compile(target=target)
    assert k.zeroed_outputs == {"O"}
    a = np.arange(6, dtype=np.float32)
    np.testing.assert_array_equal(k(a), [1, 2, 3, 3, 4, 5])


def test_indirect_write_is_only_a_may_write():
    f = tp.Function("scatter", params={"N": 4})
    i = f.var("i", 0, "N")
    P = f.input("P", ("N",), tp.int32)
    A = f.input("A", ("N",), tp.float32)
    O = f.buffer("O", ("N",), tp.float32, output=True)
    f.computation("s", [i], A[i]).store_in(O, [P[i]])
    k = f.compile()
    assert k.zeroed_outputs == {"O"}
    out = k(np.array([0, 0, 2, 2], np.int32), np.ones(4, np.float32))
    np.testing.assert_array_equal(out, [1, 0, 1, 0])


def test_data_dependent_bounds_make_writes_may_writes():
    # a loop bound loaded from an array: the writes cannot be proven to cover
    f = tp.Function("ragged", params={"N": 4})
    i = f.var("i", 0, "N")
    L = f.input("L", ("N",), tp.int32)
    j = f.var("j", 0, L[i])
    O = f.buffer("O", ("N", "N"), tp.float32, output=True)
    f.computation("s", [i, j], 1.0).store_in(O, [i, j])
    k = f.compile()
    assert k.zeroed_outputs == {"O"}
    out = k(np.array([4, 1, 0, 2], np.int32))
    np.testing.assert_array_equal(out.sum(1), [4, 1, 0, 2])


@pytest.mark.parametrize("target", TARGETS)
def test_gemm_packed_panels_and_output_are_not_zeroed(target):
    G = importlib.import_module("schedules.blocks.blis")   # the package's gemm is the function
    p = G.GemmParams(mr=4, nr=16, kc=8, mc=8, nc=32, vector=8)
    k = G.function(19, 37, 21, params=p).compile(target=target)
    allocs = allocations(k)
    assert allocs and not any(allocs.values()), allocs
    assert k.zeroed_outputs == set()
    a = np.random.rand(19, 21).astype(np.float32)
    b = np.random.rand(21, 37).astype(np.float32)
    np.testing.assert_allclose(k(a, b), a @ b, rtol=1e-5, atol=1e-5)

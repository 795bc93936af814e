"""Scalar promotion over serial loops (codegen.promote, used by the LLVM
backend): an element updated at a loop-invariant index stays in a register
when every other access to its array in the loop provably names another
element (constant offsets, or the signs that loop bounds fix)."""
import numpy as np
import pytest

from codegen import ir
from codegen.ir import Binary, Block, For, If, Load, Store
from codegen.promote import promotable
from ir_helpers import F64, I64, add, c, sub, v
from tests.auto_kernels import SUITE


def A(*ix):
    return Load("A", tuple(ix), F64)


def _k1_loop(hi, store_wrap=lambda s: s, name="k1"):
    """for k1 < hi: A[i][j] = A[i][j] - A[i][4*k0 + k1] * A[j][4*k0 + k1]."""
    col = add(Binary("mul", c(4), v("k0"), I64), v(name))
    upd = Store("A", (v("i"), v("j")),
                Binary("sub", A(v("i"), v("j")),
                       Binary("mul", A(v("i"), col), A(v("j"), col), F64), F64))
    return For(name, c(0), hi, store_wrap(upd))


def _split_hi(extra=0):
    """min(3, j - 4*k0 - 1 + extra) + 1"""
    return add(Binary("min", c(3), sub(sub(v("j"), Binary("mul", c(4), v("k0"), I64)),
                                           c(1 - extra)), I64), c(1))


def test_bounds_prove_the_other_columns_differ():
    loop = _k1_loop(_split_hi())
    held = promotable(loop, threads=False)
    assert [(a, tuple(ir.expr_key(i) for i in ix)) for a, ix in held] == \
        [("A", (ir.expr_key(v("i")), ir.expr_key(v("j"))))]


def test_a_bound_that_reaches_the_element_is_not_promoted():
    assert promotable(_k1_loop(_split_hi(extra=1)), threads=False) == []   # k1 may reach j - 4*k0


def test_conditional_store_array_in_bounds_and_rebound_names_are_not_promoted():
    guarded = _k1_loop(_split_hi(), lambda s: If(Binary("lt", v("k1"), c(2), "bool"), s))
    assert promotable(guarded, threads=False) == []

    def counter(hi):          # for x < hi: B[1] = B[1] + 1
        return For("x", c(0), hi, Store("B", (c(1),), add(Load("B", (c(1),), I64), c(1))))
    assert [a for a, _ in promotable(counter(c(5)), threads=False)] == ["B"]
    assert promotable(counter(Load("B", (c(0),), I64)), threads=False) == []   # bound reads B
    twice = For("k0", c(0), c(3), Block([_k1_loop(_split_hi()), _k1_loop(c(100))]))
    assert promotable(twice, threads=False) == []     # two loops k1: neither's bounds count


def test_store_only_in_an_inner_loop_needs_a_single_thread():
    outer = For("k0", c(0), add(Binary("floordiv", sub(v("j"), c(1)), c(4), I64), c(1)),
                _k1_loop(_split_hi()))
    assert [a for a, _ in promotable(outer, threads=False)] == ["A"]
    assert promotable(outer, threads=True) == []      # a write-back the program might not do


def _cholesky(split):
    case = SUITE["cholesky"].at(N=23)
    f = case.build()
    if split:        # A[i][j] -= A[i][k] * A[j][k], k in steps of 4
        next(s for s in f.statements if s.name == "C0_update").split("k", 4)
    return case, f


@pytest.mark.parametrize("split", [True, False])
def test_cholesky_holds_the_updated_element_and_matches_numpy(backend, split):
    case, f = _cholesky(split)
    k = f.compile(target=backend)
    args = case.inputs(np.random.default_rng(5))
    ref = case.reference(args)
    out = k(**{n: x.copy() for n, x in args.items()})
    np.testing.assert_allclose(out, ref["A"], rtol=1e-12, atol=1e-12)
    if backend == "llvm":
        from codegen import emit_llvm
        src = emit_llvm(k.lowered)
        assert "held in registers over loop k" in src
        if split:
            assert "held in registers over loop k0" in src and "held in registers over loop k1" in src

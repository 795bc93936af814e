"""Index-set splitting (codegen.isplit, used by the LLVM backend): an innermost
serial loop that reads ``X[p]`` (``p`` invariant) and stores to ``X`` where a
dimension is ``+-i + g`` runs as three parts around the one iteration that can
write ``X[p]``, the two others with ``X[p]`` loaded once.  Checked against a
Python reference on both backends (NaN-propagating min included), and the
shapes the rule must leave alone."""
import numpy as np
import pytest

import codegen
from codegen import ir, isplit
from codegen.ir import ArrayArg, Binary, Block, For, If, Let, Load, LoweredFunction, ScalarArg, Select, Store
from ir_helpers import F64, I64, add, c, sub, v
from tests.auto_kernels import SUITE


def _held(s):
    return [x.name for x in ir.walk_stmts(s) if isinstance(x, Let) and x.name.startswith("A_held")]


def _fw_program(row, lo, hi, wrap=lambda s: s):
    """for k < R: for j < M: for i in [lo, hi):
           A[row(i)][j] = min(A[row(i)][j], A[row(i)][k] + A[k][j])"""
    r = row(v("i"))
    upd = Store("A", (r, v("j")), Binary("min", Load("A", (r, v("j")), F64),
                                         Binary("add", Load("A", (r, v("k")), F64),
                                                Load("A", (v("k"), v("j")), F64), F64), F64))
    body = For("k", c(0), v("R"), For("j", c(0), v("M"), For("i", lo, hi, wrap(upd))))
    return LoweredFunction("fw_split", [ScalarArg("R"), ScalarArg("M"), ScalarArg("off"),
                                        ScalarArg("lo"), ScalarArg("hi")],
                           [ArrayArg("A", F64, (v("R"), v("M")), True)], body)


def _fmin(a, b):
    return a if (a < b or a != a) else b


def _reference(A, row, lo, hi):
    A = A.copy()
    R, M = A.shape
    for k in range(R):
        for j in range(M):
            for i in range(lo, hi):
                r = row(i)
                A[r, j] = _fmin(A[r, j], A[r, k] + A[k, j])
    return A


ROWS = {   # name: (IR row, Python row, i range for R rows, off)
    "plus_off": (lambda i: add(i, v("off")), lambda i, off=3: i + off, (-3, 17), 3),
    "identity": (lambda i: i, lambda i: i, (0, 20), 0),
    "i0_below_range": (lambda i: add(i, v("off")), lambda i, off=-5: i - 5, (5, 25), -5),
    "reversed": (lambda i: sub(sub(v("R"), c(1)), i), lambda i: 19 - i, (2, 18), 0),
}


@pytest.mark.parametrize("compile_fn", [codegen.compile_c, codegen.compile_llvm], ids=["c", "llvm"])
@pytest.mark.parametrize("case", sorted(ROWS))
def test_split_loops_match_the_reference_with_nans(compile_fn, case):
    row_ir, row_py, (lo, hi), off = ROWS[case]
    fn = _fw_program(row_ir, v("lo"), v("hi"))
    assert _held(isplit.split_invariant_loads(fn.body)) == ["A_held", "A_held"]   # the two outer parts
    rng = np.random.default_rng(11)
    A = rng.uniform(1.0, 20.0, (20, 20))
    np.fill_diagonal(A, -0.5)          # A[k][k] < 0: the iteration i0 changes the held A[k][j]
    A[19, 19] = np.nan                 # row and column 19 only (NaN-propagating min)
    ref = _reference(A, row_py, lo, hi)
    assert np.isnan(ref).any() and np.isfinite(ref).sum() > 100
    out = A.copy()
    assert compile_fn(fn).call([20, 20, off, lo, hi], [out.ctypes.data]) == 0
    np.testing.assert_array_equal(np.isnan(out), np.isnan(ref))
    np.testing.assert_allclose(out, ref, rtol=0, atol=0, equal_nan=True)


def test_split_parts_order_and_bounds():
    fn = _fw_program(lambda i: add(i, v("off")), v("lo"), v("hi"))
    out = isplit.split_invariant_loads(fn.body)
    inner = out.body.body                      # the j loop's body: the three parts
    low, rest = inner.stmts
    assert isinstance(low, If) and isinstance(low.then, Let) and isinstance(low.then.body, For)
    assert ir.expr_key(low.then.value) == ir.expr_key(Load("A", (v("k"), v("j")), F64))
    mid, high = rest.then.stmts
    assert isinstance(mid.then, Let) and mid.then.name == "i"          # the one iteration i0 = k - off
    assert ir.expr_key(mid.then.value) == ir.expr_key(sub(v("k"), v("off")))
    assert isinstance(high.then.body, For) and "A_held" in repr(high.then.body.body)


@pytest.mark.parametrize("why, fn", [
    ("short constant loop (LLVM unrolls it)",
     _fw_program(lambda i: i, c(0), Binary("add", Binary("min", c(2), v("hi"), I64), c(1), I64))),
    ("the load is under an if",
     _fw_program(lambda i: i, v("lo"), v("hi"), lambda s: If(Binary("lt", v("i"), v("off"), "bool"), s))),
    ("the row is i * 2, no single iteration", _fw_program(lambda i: Binary("mul", i, c(2), I64), v("lo"), v("hi"))),
    ("the bound reads A", _fw_program(lambda i: i, v("lo"), ir.Cast(Load("A", (c(0), c(0)), F64), I64))),
])
def test_shapes_left_alone(why, fn):
    assert _held(isplit.split_invariant_loads(fn.body)) == [], why


def test_two_stores_with_different_split_points_are_left_alone():
    st = lambda r: Store("A", (r, v("j")), Load("A", (v("k"), v("j")), F64))
    loop = For("i", v("lo"), v("hi"), Block([st(v("i")), st(add(v("i"), c(1)))]))
    assert _held(isplit.split_invariant_loads(loop)) == []
    same = For("i", v("lo"), v("hi"), Block([st(v("i")), st(add(v("i"), c(0)))]))
    assert _held(isplit.split_invariant_loads(same)) == ["A_held", "A_held"]


def test_a_load_under_a_select_is_not_hoisted():
    sel = Select(Binary("lt", v("i"), c(3), "bool"), Load("A", (v("k"), v("j")), F64), ir.Const(0.0, F64), F64)
    loop = For("i", v("lo"), v("hi"), Store("A", (v("i"), v("j")), sel))
    assert _held(isplit.split_invariant_loads(loop)) == []


@pytest.mark.parametrize("schedule", ["interchange_ij", "none"])
def test_floyd_warshall_matches_numpy(backend, schedule):
    case = SUITE["floyd-warshall"].at(N=29)
    f = case.build()
    if schedule == "interchange_ij":
        next(s for s in f.statements if s.name == "relax").interchange("i", "j")
    k = f.compile(target=backend)
    args = case.inputs(np.random.default_rng(3))
    args["path"][5, 7] = np.nan                  # NaN-propagating min through the held value
    ref = _reference(args["path"], lambda i: i, 0, 29)   # the (legal) k, j, i order
    out = k(**{n: x.copy() for n, x in args.items()})
    np.testing.assert_allclose(out, ref, rtol=0, atol=0, equal_nan=True)
    if schedule == "interchange_ij":
        assert _held_any(isplit.split_invariant_loads(k.lowered.body))


def _held_any(s):
    return any(isinstance(x, Let) and x.name == "path_held" for x in ir.walk_stmts(s))

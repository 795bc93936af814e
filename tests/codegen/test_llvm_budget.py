"""The LLVM build's work is bounded (codegen/budget.py): LLVM runs in this
process, so a Function whose unrolling would make a module too large to
optimise in reasonable time is refused before LLVM sees it, naming the loop."""
import time

import numpy as np
import pytest

import tiramisu_py as tp
from codegen import budget


def unrolled_sum(terms, unroll, name="big"):
    f = tp.Function(f"{name}{terms}_{unroll}", params={"N": unroll})
    i = f.var("i", 0, "N")
    A = f.input("A", ("N",), tp.float32)
    xs = [A[i] * (1.0 + k * 1e-4) for k in range(terms)]
    while len(xs) > 1:                       # a balanced sum: depth ~log2(terms)
        xs = [xs[j] + xs[j + 1] if j + 1 < len(xs) else xs[j] for j in range(0, len(xs), 2)]
    c = f.computation("B", [i], xs[0])
    c.unroll("i", unroll)
    return f


def test_a_runaway_unroll_is_refused_before_llvm_runs():
    f = unrolled_sum(1500, 256)              # ran > 15 min at 1.8 GB before
    t0 = time.perf_counter()
    with pytest.raises(budget.BuildBudgetError,
                       match=r"'big1500_256' would hold about .* operations after unrolling, "
                             r"beyond the build budget of 200,000 .*loop 'i' is unrolled 256x"):
        f.compile(target="llvm")
    assert time.perf_counter() - t0 < 30     # refused from the loop IR, not after a build


def test_the_limit_is_configurable_and_checked(monkeypatch):
    f = unrolled_sum(40, 8, name="small")
    a = np.arange(8, dtype=np.float32)
    want = a * sum(np.float32(1.0 + k * 1e-4) for k in range(40))
    size, worst = budget.unrolled_size(_lowered(f))
    assert worst[0].var == "i" and worst[1] == 8 and size > 8 * 40
    monkeypatch.setenv(budget.ENV, str(size - 1))
    with pytest.raises(budget.BuildBudgetError, match="unroll it less"):
        unrolled_sum(40, 8, name="small").compile(target="llvm")
    monkeypatch.setenv(budget.ENV, str(size))
    k = unrolled_sum(40, 8, name="small").compile(target="llvm")
    np.testing.assert_allclose(k(a), want, rtol=1e-5)
    monkeypatch.setenv(budget.ENV, "lots")
    with pytest.raises(ValueError, match=r"\$TIRAMISU_PY_LLVM_MAX_NODES='lots' must be"):
        budget.limit()


def test_an_unroll_count_beyond_the_trip_count_counts_the_trips():
    from codegen import ir
    body = ir.Store("B", [ir.Var("i")], ir.const(1.0, "float32"))
    loop = ir.For("i", ir.const(0), ir.const(4), body, kind="unrolled", attrs={"unroll": 256})
    assert budget.unroll_factor(loop) == 4
    assert budget.unroll_factor(ir.For("i", ir.const(0), ir.Var("N"), body, kind="unrolled",
                                       attrs={"unroll": 256})) == 256


def _lowered(f):
    return f.compile(target="c").lowered.body

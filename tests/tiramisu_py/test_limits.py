"""Bounds on work (issue 17, item 9): what cannot be sensible is refused early
with a message naming the limit; what is allowed compiles in time linear in
its size (checked structurally, never by timing), and a slow compile says so."""
import logging

import numpy as np
import pytest

import tiramisu_py as tp
from codegen import ir
from tiramisu_py.lang import expr as tpe
from tiramisu_py.lang import schedule as tps
from tiramisu_py.lower.expr import ExprLowering


# ------------------------------------------------------------------ unroll
def _vector_fn(name, n):
    f = tp.Function(name, params={"N": n})
    i = f.var("i", 0, "N")
    A = f.input("A", ("N",), tp.float32)
    c = f.computation("out", [i], A[i] * 2.0 + 1.0)
    return f, c


@pytest.mark.parametrize("factor", [tps.MAX_UNROLL + 1, 10_000, 100_000])
def test_unroll_factor_beyond_limit_is_refused(factor):
    f, c = _vector_fn("unroll_big", 200_000)
    with pytest.raises(ValueError, match=rf"unroll.*{factor}.*{tps.MAX_UNROLL}"):
        c.unroll("i", factor)
    assert f.schedule_commands() == []          # nothing recorded, nothing split


def test_unroll_whole_loop_beyond_limit_is_refused():
    f, c = _vector_fn("unroll_whole", 10_000)
    with pytest.raises(ValueError, match=rf"extent 10000.*{tps.MAX_UNROLL}"):
        c.unroll("i")                          # no factor: the whole extent


def test_nested_unroll_total_beyond_limit_is_refused():
    f = tp.Function("unroll_nest", params={"N": 64, "M": 64})
    i, j = f.var("i", 0, "N"), f.var("j", 0, "M")
    A = f.input("A", ("N", "M"), tp.float32)
    c = f.computation("out", [i, j], A[i, j] + 1.0)
    c.unroll("i", 64)
    with pytest.raises(ValueError, match=rf"64 x 64 = 4096.*{tps.MAX_UNROLL_TOTAL}"):
        c.unroll("j", 64)


def test_unroll_at_the_limit_compiles(backend):
    f, c = _vector_fn("unroll_ok", 300)
    c.unroll("i", tps.MAX_UNROLL)
    a = np.random.default_rng(0).standard_normal(300).astype(np.float32)
    np.testing.assert_allclose(f.compile()(A=a), a * 2 + 1, rtol=1e-6)


# ------------------------------------------------------------------ depth
def _chain(kind, x, depth):
    """An expression of exactly ``depth`` levels over the leaf ``x`` (each
    step adds one level)."""
    e = x
    for k in range(depth - _depth(x)):
        if kind == "select" and k == 0:
            e = -e          # select(x > 0.0, e, .) adds one level once e is as deep as x > 0.0
        elif kind == "add":
            e = e + 1.0 if k % 2 else e * 0.5
        elif kind == "neg":
            e = -e
        elif kind == "call":
            e = tp.abs(e) if k % 2 else tp.floor(e)
        elif kind == "cast":
            e = tp.cast(tp.float64 if k % 2 else tp.float32, e)
        elif kind == "minmax":
            e = tp.min(e, 3.0) if k % 2 else tp.max(e, -3.0)
        elif kind == "select":
            e = tp.select(x > 0.0, e, 0.5)    # (e used once: a shared e doubles per level)
    assert _depth(e) == depth
    return e


def _depth(e):
    return tpe.expr_size(e)[0]


KINDS = ["add", "neg", "call", "cast", "minmax", "select"]


@pytest.mark.parametrize("kind", KINDS)
def test_expression_at_the_depth_limit_compiles(backend, kind):
    if backend == "c" and kind == "minmax":
        # gcc -O3 takes ~35 s on 200 nested NaN-propagating tp_max_f32/tp_min_f32
        # calls; the C emitter recurses on min/max as on "add" (covered above)
        pytest.skip("gcc time on deeply nested min/max helpers, not a recursion question")
    f = tp.Function(f"deep_{kind}", params={"N": 8})
    i = f.var("i", 0, "N")
    A = f.input("A", ("N",), tp.float32)
    e = _chain(kind, A[i], tpe.MAX_EXPR_DEPTH)
    f.computation("out", [i], e, dtype=tp.float32)
    a = np.random.default_rng(1).standard_normal(8).astype(np.float32)
    out = f.compile()(A=a)
    assert out.shape == (8,) and np.isfinite(out).all()


def test_deep_index_and_bound_at_the_limit_compile(backend):
    f = tp.Function("deep_index", params={"N": 8})
    hi = tpe.wrap(1)
    for k in range(tpe.MAX_EXPR_DEPTH - 1):
        hi = hi + 1 if k % 2 == 0 else hi - 1      # 2, as a 200-level sum
    i = f.var("i", 0, "N")
    j = f.var("j", 0, hi)
    ix = i * 1
    for k in range(tpe.MAX_EXPR_DEPTH - 4):
        ix = ix + 1 if k % 2 == 0 else ix - 1      # i, as a 198-level sum
    A = f.input("A", ("N",), tp.float32)
    value = A[ix] * 2.0
    assert _depth(hi) == _depth(value) == tpe.MAX_EXPR_DEPTH
    f.computation("out", [i, j], value)
    a = np.random.default_rng(2).standard_normal(8).astype(np.float32)
    np.testing.assert_allclose(f.compile()(A=a), np.stack([a * 2, a * 2], 1), rtol=1e-6)


@pytest.mark.parametrize("depth", [tpe.MAX_EXPR_DEPTH + 1, 400, 2000])
def test_expression_beyond_the_depth_limit_is_refused_naming_it(depth):
    f = tp.Function("too_deep", params={"N": 8})
    i = f.var("i", 0, "N")
    A = f.input("A", ("N",), tp.float32)
    e = _chain("add", A[i], depth)
    with pytest.raises(ValueError, match=rf"computation 'out'.* {depth} levels.*limit is "
                                         rf"{tpe.MAX_EXPR_DEPTH}"):
        f.computation("out", [i], e)


def test_too_deep_update_store_index_and_bound_are_refused():
    f = tp.Function("too_deep2", params={"N": 8})
    i, k = f.var("i", 0, "N"), f.var("k", 0, "N")
    A = f.input("A", ("N",), tp.float32)
    deep = _chain("add", A[k], 400)
    C = f.computation("C", [i], 0.0)
    with pytest.raises(ValueError, match=r"computation 'C': its update is nested 400"):
        C[i] += deep
    ix = i
    for _ in range(400):
        ix = ix + 0
    with pytest.raises(ValueError, match=r"computation 'C': its store_in index is nested"):
        C.store_in(f.buffer("buf", ("N",), output=True), [ix])
    with pytest.raises(ValueError, match=r"upper bound of 'j' is nested"):
        f.var("j", 0, ix)
    with pytest.raises(ValueError, match=r"shape of 'B'"):
        f.input("B", ("+".join(["N"] * 3000),))


def test_shared_subexpression_blowup_is_refused():
    """``e = e + e`` forty times: depth 41, but 2**41 nodes as a tree."""
    f = tp.Function("blowup", params={"N": 8})
    i = f.var("i", 0, "N")
    A = f.input("A", ("N",), tp.float32)
    e = A[i]
    for _ in range(40):
        e = e + e
    with pytest.raises(ValueError, match=rf"computation 'out'.*nodes.*{tpe.MAX_EXPR_NODES}"):
        f.computation("out", [i], e)


def test_typing_is_linear_in_depth():
    """The types of all subexpressions of a depth-d chain are found with O(d)
    node visits (was O(d^2): every level re-typed its subtree)."""
    f = tp.Function("typing", params={"N": 8})
    i = f.var("i", 0, "N")
    A = f.input("A", ("N",), tp.float32)
    calls = []
    orig = tpe._strong_type_node

    def counting(e, memo):
        calls.append(e)
        return orig(e, memo)
    for d in (100, 200):
        e = _chain("add", A[i], d)
        calls.clear()
        tpe._strong_type_node, saved = counting, tpe._strong_type_node
        try:
            ExprLowering({}).expr(e, {id(i): ir.Var("i")})
        finally:
            tpe._strong_type_node = saved
        assert len(calls) <= 3 * d, (d, len(calls))


# ------------------------------------------------------------------ legality
def _skewed(n, illegal_first=False):
    f = tp.Function(f"skew{n}", params={"T": 8, "N": 16})
    t, i = f.var("t", 1, "T"), f.var("i", 1, "N - 1")
    cs, prev = [], None
    for k in range(n):
        B = f.buffer(f"B{k}", ("T", "N"), tp.float32, output=True)
        P = prev if prev is not None else B
        c = f.computation(f"s{k}", [t, i], (P[t, i - 1] + B[t - 1, i] + B[t - 1, i + 1]) * 0.5)
        c.store_in(B, [t, i])
        cs.append(c)
        prev = B
    bad = cs[n // 2]
    if illegal_first:
        bad.reverse("t")
    for c in cs:
        c.skew("t", "i", 1)
    if not illegal_first:
        bad.reverse("t")
    return f


@pytest.mark.parametrize("illegal_first", [False, True])
def test_illegal_command_among_64_skewed_statements_is_named(illegal_first):
    f = _skewed(64, illegal_first)
    with pytest.raises(tp.IllegalScheduleError, match=r"^s32\.reverse\(t\) is illegal: "
                                                      r"s32\(t=\d+, i=\d+\)"):
        f.compile()


def test_legality_checks_per_statement_pair(monkeypatch):
    """The lex order is built per dependent statement pair, never for every
    pair of the schedule (quadratic in statements: 20 s for 64)."""
    import islpy as isl
    monkeypatch.setattr(isl.UnionMap, "lex_lt_union_map",
                        lambda *a: pytest.fail("whole-schedule order"))
    with pytest.raises(tp.IllegalScheduleError):
        _skewed(8).compile()


# ------------------------------------------------------------------ progress
def test_slow_compile_is_reported(monkeypatch, caplog):
    from tiramisu_py.driver import compile as compiler
    monkeypatch.setattr(compiler, "SLOW_COMPILE_S", 0.0)
    f, _ = _vector_fn("reported", 16)
    with caplog.at_level(logging.INFO, logger="tiramisu_py"):
        f.compile()
    msgs = [r.getMessage() for r in caplog.records if r.name == "tiramisu_py"]
    assert any(m.startswith("tiramisu_py: compiled 'reported' in ") and "analysis" in m
               and "backend" in m for m in msgs), msgs


def test_slow_compile_without_logging_goes_to_stderr(monkeypatch, capsys):
    from tiramisu_py.driver import compile as compiler
    monkeypatch.setattr(compiler, "SLOW_COMPILE_S", 0.0)
    monkeypatch.setattr(compiler._log, "hasHandlers", lambda: False)
    f, _ = _vector_fn("to_stderr", 16)
    f.compile()
    err = capsys.readouterr().err.splitlines()
    assert err[-1].startswith("tiramisu_py: compiled 'to_stderr' in ")
    assert any(x.startswith("tiramisu_py: compiling 'to_stderr': analysis") for x in err)


def test_reporting_can_be_turned_off(monkeypatch, caplog, capsys):
    from tiramisu_py.driver import compile as compiler
    monkeypatch.setattr(compiler, "SLOW_COMPILE_S", None)
    f, _ = _vector_fn("quiet", 16)
    with caplog.at_level(logging.INFO, logger="tiramisu_py"):
        f.compile()
    assert not [r for r in caplog.records if r.name == "tiramisu_py"]
    assert "tiramisu_py:" not in capsys.readouterr().err


def test_no_bare_recursion_error_from_compile(monkeypatch):
    """A safety net: should some pass still recurse too deeply, compile raises
    a ValueError naming the function, never a bare RecursionError."""
    from tiramisu_py.driver import compile as compiler

    def boom(*a, **k):
        raise RecursionError("maximum recursion depth exceeded")
    monkeypatch.setattr(compiler, "optimize_loops", boom)
    f, _ = _vector_fn("recurses", 16)
    with pytest.raises(ValueError, match=r"compiling 'recurses'.*too deeply"):
        f.compile()

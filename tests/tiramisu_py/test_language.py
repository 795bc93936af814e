"""The DSL, unit by unit: reductions, fixed and symbolic sizes, recurrences,
producer/consumer chains, ``f.nest``, what a kernel returns, errors in
definitions, and the readability of the generated C (typing and math:
tests/tiramisu_py/test_language_types.py).

Every program is compiled once per module and run on random inputs (NumPy
``default_rng`` with fixed seeds) against NumPy.  Integer results must match
exactly; float results to ``rtol=1e-6`` (float32: ``rtol=atol=1e-5``) unless
a test says otherwise."""
import os

os.environ.setdefault("OMP_WAIT_POLICY", "passive")

import re  # noqa: E402

import numpy as np  # noqa: E402
import pytest  # noqa: E402

import tiramisu_py as tp  # noqa: E402
from examples import gemm  # noqa: E402

from lang_helpers import rng  # noqa: E402


# ================================================================ reductions
@pytest.fixture(scope="module")
def reduce_kernel():
    f = tp.Function("red", params=["N", "M"])
    i, j = f.var("i", 0, "N"), f.var("j", 0, "M")
    A = f.input("A", ("N", "M"), tp.float64)
    L = f.input("L", ("N", "M"), tp.int32)
    s = f.computation("s", [i], 0.0)
    s[i] += A[i, j]
    d = f.computation("d", [i], 1.0)
    d[i] -= A[i, j]
    p = f.computation("p", [i], 1.0)
    p[i] *= A[i, j]
    mx = f.computation("mx", [i], float("-inf"), dtype=tp.float64)
    mx[i].max(A[i, j])
    mn = f.computation("mn", [i], float("inf"), dtype=tp.float64)
    mn[i].min(A[i, j])
    imx = f.computation("imx", [j], -2**31, dtype=tp.int32)
    imx[j].max(L[i, j])
    cs = f.computation("cs", [j], 0.0)
    u = cs[j].reduce("+", A[i, j], loops=[i, j])
    rt = f.computation("rt", [i], 0.0)
    v = rt[i].reduce("+", A[i, j] * j, loops=[j, i])     # interchanged: j outside i
    two = f.computation("two", [i], 0.0)                  # two updates, in order
    two[i] += A[i, j]                                     # over (i, j)
    two[i] *= 2.0                                         # over (i) only: its loops
    k = f.compile()
    k.update_loops = {"cs": u.loops, "rt": v.loops, "s": s.update.loops}
    return k


def test_reductions(reduce_kernel):
    r = rng(6)
    a = r.uniform(0.5, 1.5, (5, 7))
    l = r.integers(-10**6, 10**6, (5, 7)).astype(np.int32)
    o = reduce_kernel(a, l)
    np.testing.assert_allclose(o["s"], a.sum(1), rtol=1e-12)
    np.testing.assert_allclose(o["d"], 1 - a.sum(1), rtol=1e-12)
    np.testing.assert_allclose(o["p"], a.prod(1), rtol=1e-12)
    np.testing.assert_array_equal(o["mx"], a.max(1))
    np.testing.assert_array_equal(o["mn"], a.min(1))
    assert o["imx"].dtype == np.int32
    np.testing.assert_array_equal(o["imx"], l.max(0))
    np.testing.assert_allclose(o["cs"], a.sum(0), rtol=1e-12)
    np.testing.assert_allclose(o["rt"], (a * np.arange(7)).sum(1), rtol=1e-12)
    # the second update uses only i, so it runs once per i, after the first
    np.testing.assert_allclose(o["two"], a.sum(1) * 2.0, rtol=1e-12)


def test_reduce_loop_order(reduce_kernel):
    assert reduce_kernel.update_loops["s"] == ["i", "j"]
    assert reduce_kernel.update_loops["cs"] == ["i", "j"]
    assert reduce_kernel.update_loops["rt"] == ["j", "i"]
    src = reduce_kernel.source
    line = next(k for k, ln in enumerate(src.splitlines()) if "rt[i] = rt[i] +" in ln)
    above = src.splitlines()[:line]
    loops = [re.search(r"for \(int64_t (\w+) ", ln).group(1) for ln in above if "for (" in ln]
    assert loops[-2:] == ["j", "i"]


def test_reduce_rejects_bad_op_and_missing_loop():
    f = tp.Function("rbad", params=["N", "M"])
    i, j = f.var("i", 0, "N"), f.var("j", 0, "M")
    A = f.input("A", ("N", "M"))
    c = f.computation("c", [i], 0.0)
    with pytest.raises(ValueError, match="op must be"):
        c[i].reduce("/", A[i, j])
    with pytest.raises(ValueError, match="'j'"):
        c[i].reduce("+", A[i, j], loops=[i])


# ================================================================ fixed sizes
@pytest.fixture(scope="module")
def fixed_kernel():
    f = tp.Function("fixed", params={"N": 8, "M": None})
    i, j = f.var("i", 0, "N"), f.var("j", 0, "M")
    A = f.input("A", ("N", "M"), tp.float32)
    f.computation("c", [i, j], A[i, j] * 2.0)
    return f.compile()


def test_fixed_params_are_constants(fixed_kernel):
    src = fixed_kernel.source
    sig = next(ln for ln in src.splitlines() if ln.startswith("int fixed("))
    assert "int64_t N" not in sig and "int64_t M" in sig
    assert re.search(r"\bN = 8\b", src) or "i < 8" in src
    a = rng(7).standard_normal((8, 5)).astype(np.float32)
    np.testing.assert_array_equal(fixed_kernel(a), a * 2)
    np.testing.assert_array_equal(fixed_kernel(a, N=8, M=5), a * 2)


def test_fixed_params_refuse_other_values(fixed_kernel):
    with pytest.raises(ValueError, match=r"'A'.*\(9, 5\)"):
        fixed_kernel(np.zeros((9, 5), np.float32))
    with pytest.raises(ValueError, match=r"'N'.*fixed.*8"):
        fixed_kernel(np.zeros((8, 5), np.float32), N=9)
    with pytest.raises(TypeError, match="'N'"):
        tp.Function("g", params={"N": 8.0})


# ============================================================ symbolic shapes
@pytest.fixture(scope="module")
def shape_kernels():
    f = tp.Function("sym", params=["N"])
    i = f.var("i", 0, "N")
    A = f.input("A", ("N + 1",), tp.float64)
    B = f.input("B", ("2 * N",), tp.float64)
    f.computation("o", [i], A[i + 1] - A[i] + B[2 * i] + B[2 * i + 1])
    k1 = f.compile()
    g = tp.Function("half", params=["N"])
    j = g.var("j", 0, "N // 2")
    C = g.input("C", ("N // 2",), tp.float64)
    g.computation("h", [j], C[j] * 3.0)
    k2 = g.compile()
    h = tp.Function("dbl", params=["N"])
    i = h.var("i", 0, "N")
    D = h.input("D", ("2 * N",), tp.float64)
    h.computation("o", [i], D[2 * i] * D[2 * i + 1])
    k3 = h.compile()
    return k1, k2, k3


def test_symbolic_shapes_and_inference(shape_kernels):
    k1, k2, k3 = shape_kernels
    r = rng(8)
    n = 7
    a, b = r.standard_normal(n + 1), r.standard_normal(2 * n)
    np.testing.assert_allclose(k1(a, b), np.diff(a) + b[0::2] + b[1::2], rtol=1e-14)
    np.testing.assert_allclose(k3(b), b[0::2] * b[1::2], rtol=1e-15)      # N from "2 * N"
    with pytest.raises(ValueError, match=r"'B'"):
        k1(a, r.standard_normal(2 * n + 2))
    with pytest.raises(ValueError, match=r"'D'.*2 \* N"):
        k3(r.standard_normal(7))                                         # odd: no integer N
    c = r.standard_normal(3)
    # N // 2 cannot be inverted: N must be passed, and must agree
    with pytest.raises(TypeError, match="'N'"):
        k2(c)
    np.testing.assert_allclose(k2(c, N=7), c * 3, rtol=1e-15)
    np.testing.assert_allclose(k2(c, N=6), c * 3, rtol=1e-15)
    with pytest.raises(ValueError, match=r"'C'"):
        k2(c, N=9)
    assert k1(np.ones(1), np.ones(0)).shape == (0,)                      # N = 0


def test_shape_strings_are_checked():
    f = tp.Function("shp", params=["N"])
    with pytest.raises(ValueError, match=r"'M'.*not a param"):
        f.input("A", ("M",))
    with pytest.raises(ValueError, match=r"'M'"):
        f.input("A2", ("N + M",))
    with pytest.raises(ValueError, match="parse"):
        f.input("A3", ("N +",))
    with pytest.raises(ValueError, match="unsupported"):
        f.input("A4", ("N ** 2",))
    with pytest.raises(TypeError, match="float"):
        f.input("A5", (2.5,))
    with pytest.raises(ValueError, match=r"'M'"):
        f.var("i", 0, "M")


# ======================================================== recurrences, chains
@pytest.fixture(scope="module")
def prefix_kernels():
    f = tp.Function("psum", params=["N"])
    i = f.var("i", 0, "N")
    A = f.input("A", ("N",), tp.int64)
    c = f.computation("c", [i], dtype=tp.int64)
    c[i] = tp.select(i > 0, c[i - 1], 0) + A[i]
    k1 = f.compile()
    g = tp.Function("psumf", params=["N"])
    i = g.var("i", 0, "N")
    X = g.input("X", ("N",), tp.float32)
    d = g.computation("d", [i], dtype=tp.float32)
    d.set_expression(tp.select(i > 0, d[i - 1], 0.0) * 0.5 + X[i])
    k2 = g.compile()
    return k1, k2


def test_prefix_sum_reads_own_earlier_values(prefix_kernels):
    k1, k2 = prefix_kernels
    a = rng(9).integers(-50, 50, 40)
    out = k1(a)
    assert out.dtype == np.int64
    np.testing.assert_array_equal(out, np.cumsum(a))
    assert k1(np.zeros(0, np.int64)).shape == (0,)
    x = rng(9).standard_normal(30).astype(np.float32)
    ref, acc = [], np.float32(0)
    for v in x:
        acc = acc * np.float32(0.5) + v
        ref.append(acc)
    np.testing.assert_allclose(k2(x), ref, rtol=1e-6, atol=1e-6)


def test_prefix_sum_without_explicit_dtype():
    f = tp.Function("psum2", params=["N"])
    i = f.var("i", 0, "N")
    A = f.input("A", ("N",), tp.int64)
    c = f.computation("c", [i])
    c[i] = tp.select(i > 0, c[i - 1], 0) + A[i]
    k = f.compile()
    a = rng(10).integers(-50, 50, 20)
    out = k(a)
    assert out.dtype == np.int64
    np.testing.assert_array_equal(out, np.cumsum(a))


def test_definition_after_declaration_rules():
    f = tp.Function("decl", params=["N"])
    i, j = f.var("i", 0, "N"), f.var("j", 0, "N")
    A = f.input("A", ("N",))
    c = f.computation("c", [i])
    with pytest.raises(ValueError, match=r"define 'c' as c\[i\]"):
        c[j] = A[j]
    c[i] = A[i]
    with pytest.raises(ValueError, match="already has an expression"):
        c[i] = A[i] * 2
    with pytest.raises(ValueError, match="already has an expression"):
        c.set_expression(A[i])


def test_producer_consumer_chain():
    f = tp.Function("chain", params=["N", "M"])
    i, j = f.var("i", 0, "N"), f.var("j", 0, "M")
    A = f.input("A", ("N", "M"), tp.float64)
    p = f.computation("p", [i, j], A[i, j] * 2.0)
    q = f.computation("q", [i], 0.0)
    q[i] += p[i, j] + 1.0
    f.computation("r", [i], tp.sqrt(q[i] * q[i]) - q[i] / 2)
    k = f.compile()
    assert [b.name for b in k.outputs] == ["r"]          # p, q are read: temporaries
    a = rng(11).standard_normal((6, 4))
    out = k(a)
    assert isinstance(out, np.ndarray)
    q_ref = (a * 2 + 1).sum(1)
    np.testing.assert_allclose(out, np.abs(q_ref) - q_ref / 2, rtol=1e-12, atol=1e-12)
    with pytest.raises(TypeError, match="'p'"):
        k(a, p=np.zeros((6, 4)))                          # temporaries are not arguments


# ===================================================================== nests
def _nest_program(nested):
    f = tp.Function("nest" + ("ed" if nested else "less"), params=["N"])
    i = f.var("i", 0, "N")
    A = f.input("A", ("N",), tp.float64)
    X = f.buffer("X", ("N",), tp.float64, output=True)
    Y = f.buffer("Y", ("N",), tp.float64, output=True)

    def body():
        f.computation("s1", [i], A[i] + tp.select(i > 0, Y[i - 1], 0.0)).store_in(X, [i])
        f.computation("s2", [i], X[i] * 2.0 + 1.0).store_in(Y, [i])
    if nested:
        with f.nest(i):
            body()
    else:
        body()
    return f.compile()


@pytest.fixture(scope="module")
def nest_kernels():
    return _nest_program(True), _nest_program(False)


def test_nest_interleaves_statements_per_iteration(nest_kernels):
    nested, flat = nest_kernels
    r = rng(12)
    a, y0 = r.standard_normal(10), r.standard_normal(10)
    # in a nest, s1 at i reads what s2 wrote at i - 1 in the same sweep
    X, Y = np.zeros(10), y0.copy()
    out = nested(a, Y=Y, X=X)
    assert out["Y"] is Y and out["X"] is X
    xr, yr = np.zeros(10), np.zeros(10)
    for k in range(10):
        xr[k] = a[k] + (yr[k - 1] if k else 0.0)
        yr[k] = xr[k] * 2 + 1
    np.testing.assert_allclose(X, xr, rtol=1e-14)
    np.testing.assert_allclose(Y, yr, rtol=1e-14)
    # outside a nest: all of s1, then all of s2 (s1 sees Y's old values)
    X, Y = np.zeros(10), y0.copy()
    flat(a, X=X, Y=Y)
    xs = a + np.concatenate([[0.0], y0[:-1]])
    np.testing.assert_allclose(X, xs, rtol=1e-14)
    np.testing.assert_allclose(Y, xs * 2 + 1, rtol=1e-14)
    assert not np.allclose(xs, xr)            # the two orders really differ here


def test_nest_source_shape(nest_kernels):
    nested, flat = nest_kernels
    assert nested.source.count("for (int64_t i = 0; i < N; i++)") == 1
    assert flat.source.count("for (int64_t i = 0; i < N; i++)") == 2


def test_nest_requires_its_loops_first():
    f = tp.Function("nbad", params=["N"])
    i, j = f.var("i", 0, "N"), f.var("j", 0, "N")
    with f.nest(i):
        with pytest.raises(ValueError, match=r"nest\(i\)"):
            f.computation("c", [j, i], 1.0)
    with pytest.raises(TypeError, match="nest"):
        with f.nest("i"):
            pass


# ============================================================ what is returned
def test_outputs_dict_or_single_and_in_place():
    f = tp.Function("outs", params=["N"])
    i = f.var("i", 1, "N - 1")
    A = f.input("A", ("N",), tp.float64)
    O = f.buffer("O", ("N",), tp.float64, output=True)
    f.computation("sm", [i], (A[i - 1] + A[i] + A[i + 1]) / 3).store_in(O, [i])
    k = f.compile()
    a = rng(13).standard_normal(9)
    ref = (a[:-2] + a[1:-1] + a[2:]) / 3
    out = k(a)                                         # one output: the array itself
    assert isinstance(out, np.ndarray) and out.shape == (9,)
    np.testing.assert_allclose(out[1:-1], ref, rtol=1e-14)
    assert out[0] == 0 and out[-1] == 0                # allocated outputs start at zero
    o = np.full(9, 42.0)
    res = k(a, O=o)                                    # passed: updated in place
    assert res is o
    np.testing.assert_allclose(o[1:-1], ref, rtol=1e-14)
    assert o[0] == 42.0 and o[-1] == 42.0              # untouched outside the domain
    g = tp.Function("outs2", params=["N"])
    i = g.var("i", 0, "N")
    A = g.input("A", ("N",), tp.float64)
    g.computation("u", [i], A[i] + 1)
    g.computation("v", [i], A[i] - 1)
    res = g.compile()(a)
    assert isinstance(res, dict) and set(res) == {"u", "v"}
    np.testing.assert_allclose(res["u"], a + 1, rtol=1e-15)
    np.testing.assert_allclose(res["v"], a - 1, rtol=1e-15)


# ====================================================== errors in definitions
def test_duplicate_names():
    f = tp.Function("dup", params=["N"])
    i = f.var("i", 0, "N")
    A = f.input("A", ("N",))
    f.computation("c", [i], A[i])
    with pytest.raises(ValueError, match="'c'.*already used"):
        f.computation("c", [i], A[i])
    with pytest.raises(ValueError, match="'A'.*already used"):
        f.computation("A", [i], 1.0)
    with pytest.raises(ValueError, match="'A'.*already used"):
        f.input("A", ("N",))
    with pytest.raises(ValueError, match="'i'"):
        f.var("i", 0, 3)
    with pytest.raises(ValueError, match="'c'.*already used"):
        f.var("c", 0, 3)
    with pytest.raises(ValueError, match="'N'.*already used"):
        f.buffer("N", (3,))
    with pytest.raises(ValueError, match="'N'.*twice"):
        tp.Function("g", params=["N", "N"])


@pytest.mark.parametrize("name", ["min", "for", "tp_x", "max", "int", "lambda", "floor", "NAN"])
def test_reserved_names(name):
    f = tp.Function("res", params=["N"])
    i = f.var("i", 0, "N")
    with pytest.raises(ValueError, match=f"'{name}'.*reserved"):
        f.computation(name, [i], 1.0)
    with pytest.raises(ValueError, match=f"'{name}'.*reserved"):
        f.var(name, 0, 3)
    with pytest.raises(ValueError, match=f"'{name}'.*reserved"):
        f.input(name, (3,))
    with pytest.raises(ValueError, match=f"'{name}'.*reserved"):
        tp.Function("g", params=[name])
    with pytest.raises(ValueError, match=f"'{name}'.*reserved"):
        tp.Function(name)


@pytest.mark.parametrize("name", ["1a", "a-b", "", "_x", "a b", 3, "i\n", "C\t", "x\r", "A\n\n"])
def test_names_must_be_identifiers(name):
    f = tp.Function("ident", params=["N"])
    i = f.var("i", 0, "N")
    with pytest.raises(ValueError, match="identifier"):
        f.computation(name, [i], 1.0)


@pytest.mark.parametrize("kind", ["function", "param", "var", "input", "buffer", "computation",
                                  "split"])
def test_a_trailing_newline_is_refused_everywhere(kind):
    """``re.match`` with ``$`` accepted ``"i\n"``: two loops ``i`` and
    ``i\n`` merged inside isl, and a GEMM computed only its diagonal."""
    bad = "i\n"
    with pytest.raises(ValueError, match="identifier"):
        if kind == "function":
            tp.Function(bad)
        elif kind == "param":
            tp.Function("nl", params=[bad])
        f = tp.Function("nl", params=["N"])
        i = f.var("i" if kind != "var" else bad, 0, "N")
        if kind == "input":
            f.input(bad, ("N",), tp.float32)
        elif kind == "buffer":
            f.buffer(bad, ("N",), tp.float32)
        elif kind == "computation":
            f.computation(bad, [i], 1.0)
        elif kind == "split":
            c = f.computation("c", [i], 1.0)
            c.split("i", 4, names=("i0", bad))


def test_failed_declaration_does_not_burn_the_name():
    f = tp.Function("burn", params=["N"])
    with pytest.raises(ValueError):
        f.var("z", 0, "M")                 # typo in the bound
    f.var("z", 0, "N")                     # the fixed declaration must be accepted
    with pytest.raises(ValueError):
        f.input("B", ("M",))
    f.input("B", ("N",))


@pytest.mark.parametrize("fname,bname", [("sin", "X"), ("exit", "X"), ("ok", "INT64_MAX")])
def test_names_clashing_with_c_library(fname, bname):
    try:
        f = tp.Function(fname, params=["N"])
        i = f.var("i", 0, "N")
        X = f.input(bname, ("N",), tp.float32)
        f.computation("c", [i], X[i] + 1.0)
        k = f.compile()
    except ValueError as exc:              # refused cleanly, naming it: fine
        assert fname in str(exc) or bname in str(exc)
        return
    x = np.arange(4, dtype=np.float32)
    np.testing.assert_array_equal(k(x), x + 1)


def test_vars_and_arrays_of_another_function():
    f = tp.Function("f1", params=["N"])
    g = tp.Function("f2", params=["N"])
    i = f.var("i", 0, "N")
    gi = g.var("i", 0, "N")
    GA = g.input("GA", ("N",))
    with pytest.raises(TypeError, match="vars of this function"):
        f.computation("c1", [gi], 1.0)
    with pytest.raises(ValueError, match="another function"):
        f.computation("c2", [i], gi * 1.0)
    with pytest.raises(ValueError, match="another function"):
        f.computation("c3", [i], GA[i])
    with pytest.raises(ValueError, match="another function"):
        f.var("q", 0, gi)
    with pytest.raises(TypeError, match="nest"):
        with f.nest(gi):
            pass


def test_bound_depending_on_a_non_outer_loop():
    f = tp.Function("tri", params=["N"])
    i = f.var("i", 0, "N")
    j = f.var("j", 0, i)
    k = f.var("k", 0, "N")
    with pytest.raises(ValueError, match="'j'.*'i'.*outer"):
        f.computation("bad", [j, i], 1.0)           # i inside j
    with pytest.raises(ValueError, match="'j'.*'i'.*outer"):
        f.computation("bad2", [k, j], 1.0)          # i missing
    with pytest.raises(ValueError, match="uses loop 'i', which is not one of its loops"):
        f.computation("bad3", [], i * 1.0)          # a 0-d computation reading a loop
    with pytest.raises(ValueError, match="twice"):
        f.computation("bad4", [i, i], 1.0)
    with pytest.raises(ValueError, match="only read inputs"):
        c = f.computation("cc", [i], 1.0)
        f.var("m", 0, c[i])


def test_bounds_may_be_a_max_below_and_a_min_above():
    """A lower bound ``max(a, b)`` is ``a <= v`` and ``b <= v``, an upper
    ``min(a, b)`` is ``v < a`` and ``v < b``: a 3-tap window clipped to the
    array (the taps on the outside skipped, not read), any other nesting of
    them refused by name."""
    f = tp.Function("clip", params=["N"])
    i = f.var("i", 0, "N")
    k = f.var("k", tp.max(0, 1 - i), tp.min(3, f.param("N") + 1 - i))
    A = f.input("A", ("N",))
    s = f.computation("s", [i], 0.0)
    s[i] += A[i + k - 1] * (k + 1)
    a = rng(3).standard_normal(9).astype(np.float32)
    want = [sum(a[x + t - 1] * (t + 1) for t in range(3) if 0 <= x + t - 1 < 9) for x in range(9)]
    np.testing.assert_allclose(f.compile()(a, N=9), want, rtol=1e-6)
    g = tp.Function("bad_bounds", params=["N"])
    gi = g.var("i", 0, "N")
    gk = g.var("k", tp.min(0, 1 - gi), 3)              # a min below: not a set of constraints
    c = g.computation("c", [gi], 0.0)
    c[gi] += gk * 1.0
    with pytest.raises(ValueError, match="lo bound of loop 'k'.*nor a max of affine terms"):
        g.compile()


def test_update_before_expression():
    f = tp.Function("upd", params=["N", "M"])
    i, j = f.var("i", 0, "N"), f.var("j", 0, "M")
    A = f.input("A", ("N", "M"))
    C = f.computation("C", [i, j])
    with pytest.raises(ValueError, match="'C'.*needs an expression"):
        C[i, j] += A[i, j]
    with pytest.raises(ValueError, match="'C'.*needs an expression"):
        C[i, j].max(A[i, j])
    D = f.computation("D", [i], 0.0)
    with pytest.raises(ValueError, match="same computation"):
        C[i, j] = D[i].__iadd__(1.0)
    with pytest.raises(IndexError, match="'D'.*1 loops"):
        D[i, j]
    with pytest.raises(IndexError, match="'A'.*2 dimensions"):
        A[i]


def test_compile_errors():
    with pytest.raises(ValueError, match="no computation"):
        tp.Function("empty", params=["N"]).compile()
    f = tp.Function("tgt", params=["N"])
    i = f.var("i", 0, "N")
    A = f.input("A", ("N",))
    f.computation("c", [i], A[i])
    with pytest.raises(ValueError, match="unknown target 'tpu'"):
        f.compile(target="tpu")
    with pytest.raises(TypeError, match="foo"):
        f.compile(foo=1)
    g = tp.Function("noexpr", params=["N"])
    i = g.var("i", 0, "N")
    g.computation("c", [i])
    with pytest.raises(ValueError, match="'c' has no expression"):
        g.compile()


def test_dtype_errors():
    f = tp.Function("dty", params=["N"])
    i = f.var("i", 0, "N")
    with pytest.raises(TypeError, match="unsupported dtype"):
        f.input("A", ("N",), np.uint16)         # (float16 is a storage type since issue 31)
    with pytest.raises(TypeError, match="unsupported dtype"):
        tp.cast(np.complex64, i)
    with pytest.raises(TypeError, match="integer"):
        X = f.input("X", ("N",), tp.float32)
        f.var("j", 0, X[i])
    B = f.input("B", ("N",), tp.float64)
    f.computation("c", [i], B[B[i]])
    with pytest.raises(TypeError, match="'B'.*integer"):
        f.compile()


# ====================================================== generated-code style
def test_source_is_indented_and_uses_loop_names():
    f = tp.Function("style", params=["N", "M"])
    row, col = f.var("row", 0, "N"), f.var("col", 0, "M")
    A = f.input("A", ("N", "M"), tp.float32)
    f.computation("t", [row, col], A[row, col] * 3.0)
    src = f.compile().source
    assert "  for (int64_t row = 0; row < N; row++) {\n    for (int64_t col = 0; col < M; col++) {\n" \
           "      t[row][col] = A[row][col] * 3.0f;\n" in src
    body = src[src.index("{\n", src.index("int style(")):]
    for ln in body.splitlines()[1:-1]:
        if ln.strip():
            assert ln.startswith("  "), repr(ln)


def test_gemm_source_is_readable():
    src = gemm.build().compile().source
    assert "for (int64_t i = 0; i < N; i++)" in src
    assert "for (int64_t j = 0; j < M; j++)" in src
    assert "for (int64_t k = 0; k < K; k++)" in src
    assert "C[i][j] = C[i][j] + A[i][k] * B[k][j];" in src

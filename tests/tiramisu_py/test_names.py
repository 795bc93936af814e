"""Names (issue 17, item 12): every user-given name is validated by one
function (``function.check_name``), scheduling commands' ``names=``/``name=``
included, and names that C headers or the compiler define as macros (or
declare) compile and run on both backends."""
import numpy as np
import pytest

import tiramisu_py as tp
from codegen.c.names import c_names

# predefined by gcc in GNU mode, or macros of the headers the kernel includes
# (stdin is stdio's, which is not included: it must work all the same)
MACROS = ["linux", "unix", "INT32_MAX", "M_PI", "math_errhandling", "errno", "stdin", "NULL",
          "i386"]


def _kernel(r, skew_name=None):
    """A kernel whose names are ``r``: function, param, input, two loops,
    a temporary, the output and the two loops of a split."""
    f = tp.Function(r[0], params=[r[1]])
    i, j = f.var(r[3], 0, r[1]), f.var(r[4], 0, 8)
    X = f.input(r[2], (r[1], 8), tp.float32)
    T = f.computation(r[5], [i, j], X[i, j] * 2.0)
    O = f.computation(r[6], [i, j], T[i, j] + 1.0)
    O.split(r[4], 4, names=(r[7], r[8]))
    if skew_name is not None:
        T.skew(r[3], r[4], 1, name=skew_name)
    return f


@pytest.mark.parametrize("shift", range(len(MACROS)))
def test_macro_names_in_every_role_compile_and_run(backend, shift):
    r = MACROS[shift:] + MACROS[:shift]
    f = _kernel(r, skew_name=r[7] + "s")
    k = f.compile()
    x = np.random.default_rng(shift).standard_normal((5, 8)).astype(np.float32)
    np.testing.assert_allclose(k(**{r[2]: x}), x * 2 + 1, rtol=1e-6)
    np.testing.assert_allclose(k(x), x * 2 + 1, rtol=1e-6)


@pytest.mark.parametrize("r", [
    ["y0", "rand", "exp", "isnan", "EOF", "size_t", "uint64_t", "A_", "main"],
    ["kern", "size_t", "A_", "main", "rand", "exp", "isnan", "EOF", "uint64_t"]])
def test_library_names_compile_and_run(backend, r):
    """Names the headers declare (y0, rand), that the generated code uses
    itself (exp, size_t, uint64_t, main), a function-like macro (isnan) and a
    name shaped like the backend's raw-pointer names (A_)."""
    f = _kernel(r)
    x = np.random.default_rng(7).standard_normal((3, 8)).astype(np.float32)
    np.testing.assert_allclose(f.compile()(x), x * 2 + 1, rtol=1e-6)


def test_generated_c_keeps_names_and_undefines_them():
    f = _kernel(["kern", "N", "NULL", "linux", "j", "errno", "out", "M_PI", "j1"])
    src = f.compile(target="c").source
    assert "#undef linux" in src and "#undef errno" in src and "#undef M_PI" in src
    assert "for (int64_t linux = 0; linux < N; linux++)" in src       # readable, as named
    assert "NULL_" in src and "const float* restrict NULL__" in src     # NULL is the code's own
    assert "int kern(" in src and "__asm__" not in src
    assert src.index("#define kern tp_hidden_kern") < src.index("#include")


def test_kernel_named_null_keeps_its_symbol():
    f = _kernel(["NULL", "N", "X", "i", "j", "T", "O", "j0", "j1"])
    k = f.compile(target="c")
    assert 'int NULL_(' in k.source and '__asm__("NULL")' in k.source
    x = np.ones((2, 8), np.float32)
    np.testing.assert_allclose(k(x), x * 2 + 1)


def test_c_names_rule():
    from codegen import ir
    fn = ir.LoweredFunction(
        "k", [ir.ScalarArg("NULL")],
        [ir.ArrayArg("A", "float32", (ir.Var("NULL"), ir.Const(4, "int64")), True),
         ir.ArrayArg("A_", "float32", (ir.Const(4, "int64"),), False)],
        ir.Block([]))
    names = c_names(fn)
    assert names["k"] == "k" and names["A"] == "A"
    assert names["NULL"] == "NULL_"
    assert names["A_"] not in ("A_", "A", "NULL_")      # A's raw pointer is A_
    assert len(set(names.values())) == len(names)


@pytest.mark.parametrize("name", ["__STDC__", "_x", "1a", "a-b", ""])
def test_names_that_are_not_identifiers_are_refused(name):
    with pytest.raises(ValueError, match="must be an identifier"):
        tp.Function(name)
    f = tp.Function("ok")
    with pytest.raises(ValueError, match="must be an identifier"):
        f.var(name, 0, 4)


@pytest.mark.parametrize("name", ["exp", "malloc", "free", "main", "sin", "omp_get_num_threads",
                                  "GOMP_parallel"])
def test_function_named_like_a_library_function_is_refused(name):
    with pytest.raises(ValueError, match=rf"function name '{name}' is reserved.*C library"):
        tp.Function(name)
    f = tp.Function("ok")                  # as a loop it is fine (renamed in C)
    f.var(name, 0, 4)


def _stmt():
    f = tp.Function("sched", params={"N": 16})
    i, j = f.var("i", 0, "N"), f.var("j", 0, "N")
    A = f.input("A", ("N", "N"), tp.float32)
    c = f.computation("c", [i, j], A[i, j] + 1.0)
    return f, c, A


@pytest.mark.parametrize("names,msg", [
    (("1a", "b"), "names=: loop name '1a' must be an identifier"),
    (("a", "for"), "names=: loop name 'for' is reserved"),
    (("tp_a", "b"), "names=: loop name 'tp_a' is reserved"),
    (("a b", "c"), "must be an identifier"),
    (("a",), r"names= must be 2 loop names"),
    ("ab", r"names= must be 2 loop names"),
    (("a", 3), "names=: loop name 3 must be an identifier"),
])
def test_split_names_are_validated(names, msg):
    f, c, _ = _stmt()
    with pytest.raises(ValueError, match=rf"c\.split\(i, 4\): .*{msg}"):
        c.split("i", 4, names=names)
    assert f.schedule_commands() == []


@pytest.mark.parametrize("name,msg", [("a-b", "must be an identifier"), ("int", "reserved"),
                                      ("tp_q", "reserved"), ("", "must be an identifier"),
                                      (("a",), "must be an identifier")])
def test_skew_name_is_validated(name, msg):
    f, c, _ = _stmt()
    with pytest.raises(ValueError, match=rf"c\.skew\(i, j, 1\): name=: loop name .*{msg}"):
        c.skew("i", "j", 1, name=name)
    assert f.schedule_commands() == []


def test_tile_and_cache_at_names_are_validated():
    f, c, A = _stmt()
    with pytest.raises(ValueError, match=r"c\.tile\(i, j, 4, 4\): names=: loop name '0x'"):
        c.tile("i", "j", 4, 4, names=[("i0", "i1"), ("0x", "j1")])
    with pytest.raises(ValueError, match=r"c\.tile\(i, j, 4, 4\): names= must be 2 pairs"):
        c.tile("i", "j", 4, 4, names=[("i0", "i1")])
    with pytest.raises(ValueError, match=r"cache_at\(A\): name=: computation name 'x y'"):
        c.cache_at(A, "i", name="x y")
    c.split("i", 4, names=("linux", "unix"))        # macro names are fine
    c.skew("linux", "j", 1, name="errno")
    assert f.schedule_commands() == ["c.split(i, 4)", "c.skew(linux, j, 1)"]

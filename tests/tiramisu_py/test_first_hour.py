"""What a new user hits in the first hour (issue 14): errors at declaration
instead of isl's, undo, pasteable hints, the user's file:line in errors,
index checks naming the real element, 0-d computations, ``**``, cast order."""
from repo_paths import ROOT
import inspect
import os
import re

import numpy as np
import pytest

import tiramisu_py as tp
from examples import gemm


def _gemm():
    f = gemm.build()
    return f, f.computations["C"]


def _line_of_in(code, text):
    """The line of the first line of ``code`` (a function or a frame) holding ``text``."""
    src, start = inspect.getsourcelines(code)
    return start + next(n for n, line in enumerate(src) if text in line)


def _line_of(text):
    return _line_of_in(inspect.currentframe().f_back, text)


AB = (np.arange(12, dtype=np.float32).reshape(3, 4), np.ones((4, 5), np.float32))


# ------------------------------------------------------------------ 4
def test_a_loop_that_is_not_the_computations_is_refused_when_declared():
    f = tp.Function("f4", params=["N"])
    i, j = f.var("i", 0, "N"), f.var("j", 0, "N")
    X = f.input("X", ("N", "N"))
    with pytest.raises(ValueError, match=r"computation 'c': its expression uses loop 'j', which "
                                         r"is not one of its loops \[i\].*c\[i\] \+= "):
        f.computation("c", [i], X[i, j])
    c = f.computation("d", [i], X[i, i])
    with pytest.raises(ValueError, match="store_in index uses loop 'j'"):
        c.store_in(f.buffer("buf", ("N",), output=True), [j])


def test_a_name_equal_to_the_functions_own_says_so():
    f = tp.Function("same", params=["N"])
    i = f.var("i", 0, "N")
    with pytest.raises(ValueError, match="is the name of the Function itself"):
        f.computation("same", [i], 1.0)


# ------------------------------------------------------------------ 5, 6, 7
def test_a_refused_command_can_be_undone_and_its_hint_pasted():
    f, C = _gemm()
    C.update.interchange("j", "k")
    C.update.parallelize("i")
    C.update.vectorize("k", 4)                             # a reduction: refused
    line = _line_of('C.update.vectorize("k", 4)  ')
    with pytest.raises(tp.IllegalScheduleError) as e:
        f.compile()
    msg = str(e.value)
    here = os.path.basename(__file__)
    assert f'given: C.update.vectorize("k", 4) at ' in msg and f"{here}:{line}" in msg
    assert "C_update is declared at examples/gemm.py:" in msg.replace(os.sep, "/")
    assert "f.undo() removes the last one" in msg
    hint = 'C.update.vectorize("k", 4, allow_reassociation=True)'
    assert hint in msg
    with pytest.raises(tp.IllegalScheduleError):           # still recorded
        f.compile()
    assert f.undo() == 'C.update.vectorize("k", 4)'        # the split and the tag
    assert f.schedule_commands() == ["C_update.interchange(j, k)", "C_update.parallelize(i)"]
    np.testing.assert_allclose(f.compile()(*AB), AB[0] @ AB[1])
    exec(hint, {"C": C})                                    # the hint, pasted
    np.testing.assert_allclose(f.compile()(*AB), AB[0] @ AB[1])


def _two_stage():
    f = tp.Function("two", params=["T", "N"])
    t, i = f.var("t", 0, "T"), f.var("i", 0, "N")
    X = f.input("X", ("T", "N"), tp.float64)
    f.computation("sA", [t, i], X[t, i] * 0.5)
    sB = f.computation("sB", [t, i], None)
    sB[t, i] = f.computations["sA"][t, i] + sB[t - 1, i]      # carried by t
    return f


@pytest.mark.parametrize("order", [("sA", "sB"), ("sB", "sA")])
def test_a_command_given_in_a_loop_names_its_own_statement(order):
    # one line gives the command to both statements, through one variable:
    # the refusal (sB's) named the declaration of the statement given last,
    # and the undo hint did not say which statement its command was on
    f = _two_stage()
    for s in [f.computations[n] for n in order]:
        s.parallelize("t")
    line = _line_of('s.parallelize("t")')
    with pytest.raises(tp.IllegalScheduleError) as e:
        f.compile()
    msg = str(e.value)
    here = os.path.basename(__file__)
    assert msg.startswith("sB.parallelize(t) is illegal")
    declared = _line_of_in(_two_stage, 'f.computation("sB"')
    assert re.search(rf"\n  sB is declared at \S*{here}:{declared}\n", msg)
    last = order[-1]
    assert re.search(rf"f\.undo\(\) removes the last one \({last}\.parallelize\(t\), given as "
                     rf"s\.parallelize\(\"t\"\) at \S*{here}:{line}\)", msg)
    f.undo()
    assert f.schedule_commands() == [f"{order[0]}.parallelize(t)"]


def test_the_undo_hint_names_what_undo_removes():
    # a producer's loop command given after its compute_at is recorded before
    # it: the hint named the compute_at, the end of the log, not what undo removes
    f = _two_stage()
    sa, sb = f.computations["sA"], f.computations["sB"]
    sb.parallelize("t")                                      # refused at compile
    sa.compute_at(sb, "i")
    sa.split("i", 2)
    assert f.schedule_commands()[-2:] == ["sA.split(i, 2)", "sA.compute_at(sB, i)"]
    with pytest.raises(tp.IllegalScheduleError) as e:
        f.compile()
    assert 'f.undo() removes the last one (sa.split("i", 2)), ' in str(e.value)
    assert f.undo() == 'sa.split("i", 2)'


def test_reset_schedule_and_copy():
    f, C = _gemm()
    C.update.parallelize("k")
    g = f.copy()
    f.reset_schedule()
    assert f.schedule_commands() == [] and g.schedule_commands() == ["C_update.parallelize(k)"]
    np.testing.assert_allclose(f.compile()(*AB), AB[0] @ AB[1])
    with pytest.raises(tp.IllegalScheduleError):
        g.compile()
    g.reset_schedule()
    g.computations["C"].update.vectorize(g.loop("j"), 4)
    assert f.schedule_commands() == []
    np.testing.assert_allclose(g.compile()(*AB), AB[0] @ AB[1])
    assert f.undo() is None


def test_reassociation_hint_is_the_call_as_written():
    f, C = _gemm()
    u = C.update
    u.parallelize("k")
    with pytest.raises(tp.IllegalScheduleError,
                       match=r'u\.parallelize\("k", allow_reassociation=True\) permits'):
        f.compile()


# ------------------------------------------------------------------ 8
def test_index_check_names_the_element_the_array_holds():
    f = tp.Function("spmv", params=["R", "NNZ", "NC"])
    r = f.var("r", 0, "R")
    rowptr = f.input("rowptr", ("R + 1",), tp.int32)
    colidx = f.input("colidx", ("NNZ",), tp.int32)
    val = f.input("val", ("NNZ",), tp.float32)
    x = f.input("x", ("NC",), tp.float32)
    j = f.var("j", rowptr[r], rowptr[r + 1])
    y = f.computation("y", [r], 0.0)
    y[r] += val[j] * x[colidx[j]]
    k = f.compile()
    ptr = np.array([0, 3, 6, 8], np.int32)
    cols = np.array([0, 2, 4, 1, 3, 5, 1, 9], np.int32)          # 9 >= NC = 6
    with pytest.raises(ValueError, match=r"y_update\(r=2, j=7\) reads x\[colidx\[j\]\] = x\[9\].*"
                                         r"\(colidx\[7\] = 9\)"):
        k(ptr, cols, np.ones(8, np.float32), np.ones(6, np.float32))
    cols[7] = 5
    np.testing.assert_allclose(k(ptr, cols, np.ones(8, np.float32), np.ones(6, np.float32)),
                               [3, 3, 2])


# ------------------------------------------------------------------ issue 52, item 12
def test_numpy_functions_strings_and_unknown_names_say_what_to_write():
    f = tp.Function("msgs", params=["N"])
    i = f.var("i", 0, "N")
    x = f.input("x", ("N",), tp.float32)
    # a NumPy function of an expression was NumPy's "loop of ufunc does not support
    # argument 0 of type Access which has no callable exp method"
    with pytest.raises(TypeError, match=r"np\.exp cannot take a tiramisu_py expression "
                                        r"\(x\[i\]\): use tp\.exp\(x\[i\]\)$"):
        np.exp(x[i])
    with pytest.raises(TypeError, match=r"use tp\.max\(x\[i\], 0\.0\)"):
        np.maximum(x[i], 0.0)
    with pytest.raises(TypeError, match=r"np\.sin .*tiramisu_py has no sin; its functions are "
                                        r"tp\.exp, tp\.log"):
        np.sin(x[i])
    # NumPy scalars in arithmetic stay Python numbers (weak literals), as before
    assert repr(np.float32(2) * x[i]) == "(2.0 * x[i])"
    assert (np.float64(2) * x[i]).dtype == tp.float32
    assert repr(np.float64(2) < x[i]) == "(x[i] > 2.0)"
    # a param written as a string: f.param, which is documented
    with pytest.raises(TypeError, match=r"cannot use str 'N' in a tiramisu_py expression: "
                                        r'write f\.param\("N"\)'):
        x[i] / "N"
    with pytest.raises(TypeError, match=r"'N - 1'.*f\.param\(\.\.\.\) \(f\.param\(\"N\"\)\)"):
        x[i] * "N - 1"
    assert "x[i] / f.param(\"N\")" in tp.Function.param.__doc__
    assert repr(x[i] / f.param("N")) == "(x[i] / N)"
    # an unknown name: a KeyError naming the known ones (it was a bare KeyError: 'Z')
    f.computation("y", [i], x[i] * 2.0)
    with pytest.raises(KeyError, match=r"'Z' is not a computation of 'msgs'; its computations: y"):
        f.computations["Z"]
    with pytest.raises(KeyError, match=r"'Q' is not a param of 'msgs'; its params: N"):
        f.param("Q")
    with pytest.raises(KeyError, match=r"'w' is not a buffer of 'msgs'; its buffers: x"):
        f.buffers["w"]
    g = f.copy("msgs2")                     # a copy under another name (it was refused)
    assert g.name == "msgs2" and list(g.computations) == ["y"]
    with pytest.raises(KeyError, match=r"'Z' is not a computation of 'msgs2'"):
        g.computations["Z"]


# ------------------------------------------------------------------ 9
@pytest.mark.parametrize("target", ["c", "llvm"])
def test_scalar_computations(target):
    f = tp.Function("norms", params=["N"])
    i = f.var("i", 0, "N")
    x = f.input("x", ("N",), tp.float32)
    y = f.input("y", ("N",), tp.float32)
    dot = f.computation("dot", [], 0.0)
    dot[()] += x[i] * y[i]
    ss = f.computation("ss", [], 0.0)
    ss[()] += x[i] ** 2
    nrm = f.computation("nrm", [], ss[()] ** 0.5)
    f.buffer("unused", (1,))          # noqa - a declared temporary is fine
    k = f.compile(target=target)
    a = np.linspace(-1, 2, 50, dtype=np.float32)
    b = np.cos(a)
    out = k(a, b)
    assert out["dot"].shape == () and out["nrm"].shape == ()
    np.testing.assert_allclose(out["dot"], a @ b, rtol=1e-5)
    np.testing.assert_allclose(out["nrm"], np.linalg.norm(a), rtol=1e-5)


def test_power_and_cast_follow_numpy():
    f = tp.Function("pw", params=["N"])
    i = f.var("i", 0, "N")
    x = f.input("x", ("N",), tp.float32)
    n = f.input("n", ("N",), tp.int32)
    f.computation("p", [i], x[i] ** 2 + x[i] ** 3 + x[i] ** -1 + x[i] ** -0.5 + x[i] ** 1.5
                  + x[i] ** 0 + 2 ** x[i])
    f.computation("q", [i], n[i] ** 3)
    f.computation("c", [i], tp.cast(x[i], tp.int32) + x[i].astype("int32")
                  + tp.cast(tp.int32, x[i]))
    k = f.compile()
    v = np.linspace(0.25, 3, 9, dtype=np.float32)
    m = np.arange(-4, 5, dtype=np.int32)
    out = k(v, m)
    np.testing.assert_allclose(out["p"], v ** 2 + v ** 3 + v ** -1.0 + v ** -0.5 + v ** 1.5 + 1
                               + 2 ** v, rtol=1e-5)
    np.testing.assert_array_equal(out["q"], m ** 3)
    assert out["c"].dtype == np.int32
    np.testing.assert_array_equal(out["c"], 3 * v.astype(np.int32))
    with pytest.raises(ValueError, match="negative integer powers"):
        n[i] ** -1
    with pytest.raises(TypeError, match="must be a Python int or float"):
        x[i] ** x[i]
    with pytest.raises(TypeError, match=r"tp.cast\(x, dtype\): dtype must be a dtype"):
        tp.cast(x[i], 3)


# ------------------------------------------------------------------ 1, 12
def test_demo_shows_the_legality_explanation_and_the_library(monkeypatch, capsys):
    from examples import demo
    monkeypatch.setattr(demo, "GEMM_N", 48)
    assert demo.gemm_part(None)
    out = capsys.readouterr().out
    assert "IllegalScheduleError: C_update.parallelize(k) is illegal" in out
    assert 'C.update.parallelize("k", allow_reassociation=True) permits' in out
    assert 'given: C.update.parallelize("k") at ' in out and "demo.py:" in out
    assert "f.undo()" in out and "schedules.gemm" in out and "NumPy a @ b" in out
    x = np.random.default_rng(0).standard_normal((2, 3, 7, 6), dtype=np.float32)
    w = np.random.default_rng(1).standard_normal((4, 3, 3, 3), dtype=np.float32)
    b = np.arange(4, dtype=np.float32)
    from examples import conv2d
    np.testing.assert_allclose(demo._numpy_conv(x, w, b), conv2d.reference(x, w, b),
                               rtol=1e-4, atol=1e-4)


def test_an_example_runs_from_any_directory(tmp_path):
    import subprocess
    import sys
    root = ROOT
    env = dict(os.environ, PYTHONPATH=root, OMP_WAIT_POLICY="passive")
    r = subprocess.run([sys.executable, "-m", "tiramisu_py_command", "example", "trisolv"], cwd=tmp_path,
                       env=env, capture_output=True, text=True, timeout=300)
    assert r.returncode == 0, r.stderr
    assert "max abs error vs NumPy" in r.stdout


def test_bench_quick_says_it_is_a_smoke_test():
    from bench import suites
    assert "SMOKE TEST" in suites.QUICK_NOTE and "NOT A BENCHMARK" in suites.QUICK_NOTE

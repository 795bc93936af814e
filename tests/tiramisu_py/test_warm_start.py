"""Warm start (issue 14.10): a compile result is kept in the cache keyed by
algorithm + schedule + target; a fresh process compiles from it without any
isl work (islpy's entry points patched to raise), and the kernels agree with
NumPy.  Timings are measured by ``python -m bench.bench_compile --warm``."""
from repo_paths import ROOT
import os
import subprocess
import sys
import textwrap

import numpy as np
import pytest

import tiramisu_py as tp
from tiramisu_py.driver import warm


USER = textwrap.dedent('''
    import numpy as np, sys
    import tiramisu_py as tp, schedules
    f = tp.Function("wgemm", params=["N", "M", "K"])
    i, j, k = f.var("i", 0, "N"), f.var("j", 0, "M"), f.var("k", 0, "K")
    A = f.input("A", ("N", "K"), tp.float32); B = f.input("B", ("K", "M"), tp.float32)
    C = f.computation("C", [i, j], 0.0)
    C[i, j] += A[i, k] * B[k, j]
    C.update.interchange("j", "k"); C.update.parallelize("i"); C.update.vectorize("j", 8)
    if sys.argv[1] == "warm":       # from here on, any isl call raises
        import islpy
        def refuse(*a, **k):
            raise AssertionError("isl used in a warm process")
        for name in ("Set", "Map", "UnionSet", "UnionMap", "BasicSet", "BasicMap", "Context",
                     "Space", "Aff", "PwAff", "AstBuild", "Val"):
            setattr(islpy, name, refuse)
    g = f.compile()
    a = np.arange(12, dtype=np.float32).reshape(3, 4); b = np.ones((4, 5), np.float32)
    assert np.allclose(g(a, b), a @ b)
    x = np.random.default_rng(0).standard_normal((1, 3, 6, 6), dtype=np.float32)
    w = np.ones((4, 3, 3, 3), np.float32)
    y = schedules.conv2d(x, w, padding=1, algo="direct")
    xp = np.pad(x, ((0, 0), (0, 0), (1, 1), (1, 1)))
    ref = sum(xp[:, :, dy:dy + 6, dx:dx + 6].sum(axis=1, keepdims=True)
              for dy in range(3) for dx in range(3))
    assert np.allclose(y, np.repeat(ref, 4, axis=1), rtol=1e-4, atol=1e-4)
    print(type(g).__name__)
''')


def _run(mode, cache):
    env = dict(os.environ, TIRAMISU_PY_CACHE=str(cache), PYTHONPATH=ROOT, OMP_WAIT_POLICY="passive")
    env.pop("TIRAMISU_PY_WARM_START", None)
    return subprocess.run([sys.executable, "-c", USER, mode], env=env, cwd=ROOT,
                          capture_output=True, text=True, timeout=300)


def test_a_warm_process_does_no_isl_work(tmp_path):
    cold = _run("cold", tmp_path)
    assert cold.returncode == 0, cold.stderr
    assert cold.stdout.split()[-1] == "Kernel"
    hot = _run("warm", tmp_path)
    assert hot.returncode == 0, hot.stderr
    assert hot.stdout.split()[-1] == "WarmKernel"


def _saxpy(name="saxpy", factor=2.0):
    f = tp.Function(name, params=["N"])
    i = f.var("i", 0, "N")
    x = f.input("x", ("N",), tp.float32)
    y = f.computation("y", [i], x[i] * factor + 1.0)
    return f, y


def test_the_key_is_algorithm_schedule_and_target():
    f, y = _saxpy()
    k0 = warm.key(f, "c")
    assert warm.key(_saxpy()[0], "c") == k0              # the same program, rebuilt
    assert warm.key(f, "llvm") != k0                      # the target
    assert warm.key(_saxpy(factor=3.0)[0], "c") != k0     # the algorithm
    assert warm.key(_saxpy("other")[0], "c") != k0        # the name
    y.vectorize("i", 8)
    assert warm.key(f, "c") != k0                         # the schedule
    f.undo()
    assert warm.key(f, "c") == k0


def test_a_second_compile_is_warm_and_agrees():
    f, y = _saxpy("saxpy_warm")
    y.parallelize("i")
    k1 = f.compile()
    f2, y2 = _saxpy("saxpy_warm")
    y2.parallelize("i")
    k2 = f2.compile()
    assert type(k2).__name__ == "WarmKernel" and k2.source == k1.source
    x = np.linspace(-1, 1, 100, dtype=np.float32)
    np.testing.assert_array_equal(k2(x), x * 2 + 1)
    assert k2.lowered is not None and k2.lowered.name == "saxpy_warm"    # read lazily
    assert [lp.name for lp in k2.schedule["y"].loops] == ["i"]         # analysed lazily


def test_a_damaged_entry_is_compiled_again(tmp_path, monkeypatch):
    monkeypatch.setenv("TIRAMISU_PY_CACHE", str(tmp_path))
    f, _ = _saxpy("saxpy_damaged")
    f.compile()
    for p in tmp_path.glob("*.warm"):
        p.write_bytes(b"not a pickle")
    k = _saxpy("saxpy_damaged")[0].compile()
    assert type(k).__name__ == "Kernel"
    x = np.ones(4, np.float32)
    np.testing.assert_array_equal(k(x), x * 2 + 1)


@pytest.mark.parametrize("target", ["c", "llvm"])
def test_a_swapped_entry_is_a_miss_not_another_kernel(tmp_path, monkeypatch, target):
    """Two intact warm entries, one moved over the other's name: an entry
    names its key, so the moved one is a miss and the program is compiled
    again (before, ``x * 3 + 1`` ran for ``x * 2 + 1``)."""
    monkeypatch.setenv("TIRAMISU_PY_CACHE", str(tmp_path))
    two, three = _saxpy("saxpy_swap", 2.0)[0], _saxpy("saxpy_swap", 3.0)[0]
    k2, k3 = warm.key(two, target), warm.key(three, target)
    two.compile(target=target)
    three.compile(target=target)
    for suffix in (".warm", ".warm-ir"):
        (tmp_path / f"{k2}{suffix}").write_bytes((tmp_path / f"{k3}{suffix}").read_bytes())
    k = _saxpy("saxpy_swap", 2.0)[0].compile(target=target)
    assert type(k).__name__ == "Kernel"                   # compiled, not loaded
    x = np.ones(4, np.float32)
    np.testing.assert_array_equal(k(x), x * 2 + 1)


def test_index_arrays_are_still_checked_after_a_warm_start():
    def build():
        f = tp.Function("gather_warm", params=["N", "M"])
        i = f.var("i", 0, "N")
        idx = f.input("idx", ("N",), tp.int32)
        x = f.input("x", ("M",), tp.float32)
        f.computation("y", [i], x[idx[i]])
        return f
    build().compile()
    k = build().compile()
    assert type(k).__name__ == "WarmKernel"
    x = np.arange(5, dtype=np.float32)
    np.testing.assert_array_equal(k(np.array([4, 0], np.int32), x), [4, 0])
    with pytest.raises(ValueError, match=r"idx\[1\] = 5"):
        k(np.array([1, 5], np.int32), x)


def test_code_version_covers_the_backend_subpackages(tmp_path, monkeypatch):
    """An edit to a backend's subpackage (codegen/c/, codegen/llvm/,
    codegen/cuda/) invalidates warm-start entries like one at codegen/'s top."""
    for rel in ("tiramisu_py/driver/warm.py", "codegen/ir.py", "codegen/c/emit.py",
                "codegen/c/__pycache__/emit.py"):
        (tmp_path / rel).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / rel).write_text("x = 1\n")
    monkeypatch.setattr(warm, "__file__", str(tmp_path / "tiramisu_py" / "driver" / "warm.py"))
    monkeypatch.setattr(warm, "_code", {})
    before = warm._code_version(("codegen",))
    os.utime(tmp_path / "codegen/c/__pycache__/emit.py", ns=(1, 1))          # not source: ignored
    warm._code.clear()
    assert warm._code_version(("codegen",)) == before
    (tmp_path / "codegen/c/emit.py").write_text("x = 22\n")
    warm._code.clear()
    assert warm._code_version(("codegen",)) != before

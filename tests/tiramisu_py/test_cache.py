"""The compile cache: a fresh process compiling the same function does not run
the C compiler; a corrupt entry is rebuilt, never loaded."""
from repo_paths import ROOT
import os
import subprocess
import sys
import textwrap

import numpy as np


CHILD = textwrap.dedent("""
    import numpy as np
    import codegen.toolchain as tc
    from examples import gemm
    k = gemm.build().compile()
    a = np.ones((3, 4), np.float32); b = np.ones((4, 5), np.float32)
    assert (k(a, b) == 4).all()
    print("INVOCATIONS", tc.COMPILER_INVOCATIONS)
""")


def run_child(cache):
    env = dict(os.environ, TIRAMISU_PY_CACHE=str(cache), PYTHONPATH=ROOT)
    out = subprocess.run([sys.executable, "-c", CHILD], env=env, capture_output=True,
                         text=True, timeout=120, cwd=ROOT)
    assert out.returncode == 0, out.stderr
    line = [x for x in out.stdout.splitlines() if x.startswith("INVOCATIONS")][0]
    return int(line.split()[1])


def test_warm_cache_fresh_process_runs_no_compiler(tmp_path):
    assert run_child(tmp_path) >= 1          # cold: probe + build
    assert run_child(tmp_path) == 0          # warm, new process: no compiler at all


def test_corrupt_entry_is_rebuilt(tmp_path):
    run_child(tmp_path)
    for so in tmp_path.rglob("*.so"):
        so.write_bytes(so.read_bytes()[:100])        # truncate every library
    assert run_child(tmp_path) == 1                  # rebuilt once, result still right


def test_same_process_second_compile_is_free(tmp_path, monkeypatch):
    import codegen.toolchain as tc
    from examples import gemm
    monkeypatch.setenv("TIRAMISU_PY_CACHE", str(tmp_path))
    k1 = gemm.build().compile()
    before = tc.COMPILER_INVOCATIONS
    k2 = gemm.build().compile()
    assert tc.COMPILER_INVOCATIONS == before
    a = np.ones((2, 2), np.float32)
    assert (k1(a, a) == k2(a, a)).all()


NO_CC_CHILD = textwrap.dedent("""
    import shutil
    import numpy as np
    import codegen.toolchain as tc
    assert shutil.which("cc") is None and shutil.which("gcc") is None
    from examples import gemm, lstm
    f = gemm.build()
    u = f.computations["C"].update
    u.interchange("j", "k"); u.parallelize("i"); u.vectorize("j", 16)
    k = f.compile(target="llvm")
    a = np.random.rand(9, 7).astype(np.float32); b = np.random.rand(7, 5).astype(np.float32)
    assert np.allclose(k(a, b), a @ b, atol=1e-5)
    args = lstm.random_inputs()
    w = lstm.wavefront(lstm.build()).compile(target="llvm")
    assert np.allclose(lstm.run(w, *args), lstm.reference(*args), atol=2e-5)
    print("OK", tc.COMPILER_INVOCATIONS)
""")


def test_llvm_kernel_needs_no_c_compiler(tmp_path):
    empty = tmp_path / "bin"
    empty.mkdir()
    env = {k: v for k, v in os.environ.items() if k not in ("CC", "TIRAMISU_PY_CC")}
    env.update(PATH=str(empty), TIRAMISU_PY_CACHE=str(tmp_path / "cache"), PYTHONPATH=ROOT)
    out = subprocess.run([sys.executable, "-c", NO_CC_CHILD], env=env, capture_output=True,
                         text=True, timeout=300, cwd=ROOT)
    assert out.returncode == 0, out.stderr
    assert out.stdout.split()[-2:] == ["OK", "0"]


def test_relative_and_home_cache_paths_are_made_absolute(tmp_path, monkeypatch):
    """A relative ``$TIRAMISU_PY_CACHE`` named another place once the compiler
    ran inside the cache directory (every C compile failed); ``~`` was taken
    literally.  Both are made absolute, and a C kernel builds and runs."""
    from codegen import cache
    from examples import gemm
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("HOME", str(tmp_path / "home"))
    a = np.ones((2, 3), np.float32)
    for value, want in (("rel/cache", tmp_path / "rel" / "cache"),
                        ("~/tp-cache", tmp_path / "home" / "tp-cache")):
        monkeypatch.setenv("TIRAMISU_PY_CACHE", value)
        assert cache.cache_dir() == want
        f = gemm.build()
        f.computations["C"].update.interchange("j", "k")    # a source of its own: a real build
        assert (f.compile(target="c")(a, np.ones((3, 2), np.float32)) == 3).all()
        assert any(want.rglob("*.so"))


def test_unparsable_compiler_variables_are_named(monkeypatch):
    import pytest
    from codegen import toolchain
    monkeypatch.setenv("TIRAMISU_PY_CFLAGS", "-O2 '-DX=1")
    with pytest.raises(ValueError, match=r"\$TIRAMISU_PY_CFLAGS=.*quoting"):
        toolchain.extra_flags()
    monkeypatch.delenv("TIRAMISU_PY_CFLAGS")
    monkeypatch.setenv("TIRAMISU_PY_CC", 'gcc "-m64')
    with pytest.raises(ValueError, match=r"\$TIRAMISU_PY_CC=.*quoting"):
        toolchain.find_c_compiler()


def test_a_full_disk_for_the_source_copy_warns_and_the_build_goes_on(tmp_path, monkeypatch):
    """The ``.ll`` beside an in-memory LLVM build is for the reader: with no
    space left for it the build warns and goes on (it failed before)."""
    import errno
    import pytest
    from codegen import cache
    from examples import gemm
    monkeypatch.setenv("TIRAMISU_PY_CACHE", str(tmp_path))
    real = cache.atomic_write

    def full(path, data):
        if str(path).endswith((".ll", ".c")):
            raise OSError(errno.ENOSPC, "No space left on device")
        return real(path, data)
    monkeypatch.setattr(cache, "atomic_write", full)
    f = gemm.build()
    f.computations["C"].update.interchange("j", "k")
    with pytest.warns(RuntimeWarning, match="no space to keep the source copy"):
        k = f.compile(target="llvm")
    a = np.ones((2, 3), np.float32)
    assert (k(a, np.ones((3, 4), np.float32)) == 3).all()

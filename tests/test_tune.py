"""tiramisu_py.tune: legal candidates timed, illegal ones rejected by the
legality check, a progress bar on stderr, the winner recorded in the tuning
store and used by a later compile() of the same algorithm; a second process
finds the record and times nothing (counted); ``tiramisu-py tune FILE:FUNC``.
No timing is asserted."""
from __future__ import annotations

import os
import subprocess
import sys
import textwrap

import numpy as np
import pytest

import tiramisu_py as tp
from auto_kernels import MM_SOURCE, build_mm as mm
from tiramisu_py.driver import tune as tune_mod

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
SIZES = {"N": 24, "M": 20, "K": 16}

MM = MM_SOURCE


@pytest.fixture
def store_dir(tmp_path, monkeypatch):
    monkeypatch.setenv("TIRAMISU_PY_CACHE", str(tmp_path / "cache"))
    return tmp_path


def illegal(g):
    g.computations["C"].update.parallelize("k")        # a reduction loop: refused at compile


def test_tune_records_the_winner_and_compile_uses_it(store_dir, capsys):
    f = mm()
    r = tp.tune(f, space=[{}, {"tile": 8}, illegal], budget=30, params=SIZES, repeats=1)
    assert not r["cached"] and r["timed"] == 2
    assert len(r["rejected"]) == 1 and "candidate 2" in r["rejected"][0]
    assert "tune mm_tuned [" in capsys.readouterr().err        # the progress bar
    assert f.schedule_commands() == []                          # the user's Function as written
    k = f.compile()
    assert "#pragma omp parallel" in k.source                  # the recorded schedule
    assert "#pragma omp parallel" not in f.compile(tuned=False).source
    a, b = np.random.rand(9, 5), np.random.rand(5, 7)
    np.testing.assert_allclose(k(A=a, B=b), a @ b)
    again = tp.tune(mm(), params=SIZES)                          # same algorithm: the record
    assert again["cached"] and again["timed"] == 0
    assert [str(s) for s in again["steps"]] == [str(s) for s in r["steps"]]


def test_tune_arguments(store_dir):
    f = mm()
    with pytest.raises(ValueError, match="params= must give the sizes.*K"):
        tp.tune(f, params={"N": 4, "M": 4})
    with pytest.raises(ValueError, match="budget"):
        tp.tune(f, params=SIZES, budget=0)
    with pytest.raises(ValueError, match="not a free param"):
        tp.tune(f, params={**SIZES, "Q": 3})
    with pytest.raises(ValueError, match="no legal candidate"):
        tp.tune(f, params=SIZES, space=[illegal], progress=False)
    f.computations["C"].parallelize("i")
    with pytest.raises(ValueError, match="already has scheduling commands"):
        tp.tune(f, params=SIZES)


def test_second_process_reuses_the_record(tmp_path):
    src = tmp_path / "kernels.py"
    src.write_text(MM)
    env = dict(os.environ, TIRAMISU_PY_CACHE=str(tmp_path / "cache"), PYTHONPATH=ROOT,
               OMP_WAIT_POLICY="passive")
    cli = subprocess.run([sys.executable, "-m", "tiramisu_py", "tune", f"{src}:mm",
                          "-p", "N=24", "-p", "M=20", "-p", "K=16", "--budget", "20"],
                         capture_output=True, text=True, env=env, timeout=300)
    assert cli.returncode == 0, cli.stderr
    assert "candidates timed" in cli.stdout
    assert "f.computations['C'].update.parallelize(" in cli.stdout
    second = textwrap.dedent(f"""
        import sys, numpy as np
        sys.path.insert(0, {str(tmp_path)!r})
        import tiramisu_py as tp
        from tiramisu_py.driver import tune
        from kernels import mm
        r = tp.tune(mm(), params={SIZES!r})
        k = mm().compile()
        a, b = np.random.rand(6, 4), np.random.rand(4, 5)
        assert np.allclose(k(A=a, B=b), a @ b)
        print("timed", tune.RUNS["timed"], "cached", r["cached"],
              "parallel", "omp parallel" in k.source)
    """)
    out = subprocess.run([sys.executable, "-c", second], capture_output=True, text=True,
                         env=env, timeout=300)
    assert out.returncode == 0, out.stderr
    assert out.stdout.split() == ["timed", "0", "cached", "True", "parallel", "True"]


def test_cli_refuses_bad_specs(tmp_path):
    with pytest.raises(SystemExit, match="not FILE:FUNC"):
        tp_cli().main(["tune", "nofunc"])
    with pytest.raises(SystemExit, match="no file"):
        tp_cli().main(["tune", str(tmp_path / "missing.py") + ":mm"])
    src = tmp_path / "k.py"
    src.write_text(MM)
    with pytest.raises(SystemExit, match="defines no 'other'"):
        tp_cli().main(["tune", f"{src}:other"])
    with pytest.raises(SystemExit, match="is not NAME=INT"):
        tp_cli().main(["tune", f"{src}:mm", "-p", "N"])


def tp_cli():
    from tiramisu_py import cli
    return cli


def test_record_key_parts():
    f = mm()
    k1 = tune_mod.record_key(f, "cpu", SIZES)
    assert k1 == tune_mod.record_key(mm(), "cpu", SIZES)
    assert k1 != tune_mod.record_key(f, "llvm", SIZES)
    assert k1 != tune_mod.record_key(f, "cpu", {**SIZES, "N": 4 * SIZES["N"]})
    assert k1 == tune_mod.record_key(f, "cpu", {**SIZES, "N": SIZES["N"] + 1})  # same class

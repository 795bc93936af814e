"""tiramisu_py.tune: legal candidates timed, illegal ones rejected by the
legality check, a progress bar on stderr, the winner confirmed against the
Function as written (interleaved A/B) before it is recorded and used by a
later compile() of the same algorithm (``kernel.tuned`` says so;
``compile(tuned=False)`` ignores it); a dry run records nothing; a second
process finds the record and times nothing (counted); ``tiramisu-py tune
FILE:FUNC``, ``--list``, ``--forget``.  Timing decisions use a fake clock;
no timing is asserted."""
from __future__ import annotations

import os
import subprocess
import sys
import textwrap

import numpy as np
import pytest

import tiramisu_py as tp
from auto_kernels import MM_SOURCE, build_mm as mm
from tiramisu_py import tuning
from tiramisu_py.driver import tune as tune_mod
from tuning_fakes import FakeClock, fast_once, steady

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
SIZES = {"N": 24, "M": 20, "K": 16}

MM = MM_SOURCE


@pytest.fixture
def store_dir(tmp_path, monkeypatch):
    monkeypatch.setenv("TIRAMISU_PY_CACHE", str(tmp_path / "cache"))
    return tmp_path


def illegal(g):
    g.computations["C"].update.parallelize("k")        # a reduction loop: refused at compile


def par_i(g):
    g.computations["C"].update.parallelize("i")


def par_j(g):
    g.computations["C"].update.parallelize("j")


@pytest.fixture
def fake(monkeypatch):
    """Compiles for real (the legality check), but the kernels the tuner
    times cost what ``profiles`` says on a fake clock: by the first
    schedule command ("as written": none)."""
    clock, profiles = FakeClock(), {}
    real = tune_mod.compile_function

    def compile_function(g, target):
        real(g, target)
        label = (g.schedule_commands() or ["as written"])[0]
        return clock.kernel(profiles[label], label)
    monkeypatch.setattr(tune_mod, "compile_function", compile_function)
    clock.profiles = profiles
    return clock


def test_a_confirmed_win_is_recorded_and_compile_uses_it(store_dir, capsys, fake):
    fake.profiles.update({"as written": steady(2e-3, 0.03), "C_update.parallelize(i)":
                          steady(1e-3, 0.03, seed=1), "C_update.parallelize(j)":
                          steady(3e-3, 0.03, seed=2)})
    f = mm()
    r = tp.tune(f, space=[par_j, par_i, illegal], budget=30, params=SIZES, repeats=1,
                clock=fake)
    assert not r["cached"] and r["timed"] == 2 and r["kept"] and r["recorded"]
    assert [str(s) for s in r["steps"]] == [str(s) for s in r["candidate"]]
    assert "parallelize('i')" in str(r["steps"][0])
    assert r["verdict"].why == "kept" and r["verdict"].high < 1
    assert len(r["rejected"]) == 1 and "candidate 2" in r["rejected"][0]
    err = capsys.readouterr().err
    assert "tune mm_tuned [" in err and "kept" in err          # the progress bar
    assert f.schedule_commands() == []                          # the user's Function as written
    k = f.compile()
    assert "#pragma omp parallel" in k.source                  # the recorded schedule
    assert k.tuned.startswith("tiramisu_py.tune record of 'mm_tuned' (cpu, K~2^4,M~2^4,N~2^5;")
    assert "kept" in k.tuned and "parallelize('i')" in k.tuned
    assert k.source.startswith("// tiramisu_py.tune record of 'mm_tuned'")
    untuned = f.compile(tuned=False)                            # the baseline: as written
    assert "#pragma omp parallel" not in untuned.source and untuned.tuned is None
    assert f.compile("llvm").tuned is None                     # tuned for "cpu" only
    a, b = np.random.rand(9, 5), np.random.rand(5, 7)
    np.testing.assert_allclose(k(A=a, B=b), a @ b)
    again = tp.tune(mm(), params=SIZES)                          # same algorithm: the record
    assert again["cached"] and again["timed"] == 0 and again["kept"]
    assert [str(s) for s in again["steps"]] == [str(s) for s in r["steps"]]
    assert again["verdict"] == r["verdict"]


def test_a_candidate_fast_once_in_the_search_is_not_recorded(store_dir, fake):
    """The search's one timed call of par_i is fast (call 1: after the
    warm-up); under the interleaved A/B it ties with the Function as
    written: nothing is kept, compile() compiles as written."""
    fake.profiles.update({"as written": steady(2e-3, 0.03),
                          "C_update.parallelize(i)": fast_once(2e-3, 1, 1e-3, 0.03, seed=1),
                          "C_update.parallelize(j)": steady(2.2e-3, seed=2)})
    f = mm()
    r = tp.tune(f, space=[par_i, par_j], params=SIZES, repeats=1, progress=False,
                clock=fake)
    assert "parallelize('i')" in str(r["candidate"][0])       # looked fastest in the search
    assert not r["kept"] and r["steps"] == [] and r["verdict"].why == "not kept: within noise"
    assert 0.9 < r["verdict"].ratio < 1.1
    k = f.compile()
    assert k.tuned is None and "#pragma omp parallel" not in k.source
    again = tp.tune(mm(), params=SIZES)            # recorded: not timed again unless retune
    assert again["cached"] and not again["kept"] and again["steps"] == []
    # one that is slower under the A/B is not recorded either
    fake.profiles["C_update.parallelize(i)"] = fast_once(2e-3 * 1.3, 1, 1e-3, seed=3)
    r = tp.tune(mm(), space=[par_i], params=SIZES, repeats=1, progress=False, clock=fake,
                retune=True)
    assert not r["kept"] and r["verdict"].why == "not kept: slower"
    # and one slower in the search is not even timed against the defaults
    fake.profiles["C_update.parallelize(i)"] = steady(3e-3)
    fake.calls.clear()
    r = tp.tune(mm(), space=[par_i], params=SIZES, repeats=1, progress=False, clock=fake,
                retune=True)
    assert not r["kept"] and r["verdict"].rounds == 0 and len(fake.calls) == 4
    assert mm().compile().tuned is None


def test_a_dry_run_records_nothing(store_dir, fake):
    fake.profiles.update({"as written": steady(2e-3), "C_update.parallelize(i)": steady(1e-3)})
    r = tp.tune(mm(), space=[par_i], params=SIZES, repeats=1, progress=False, clock=fake,
                dry_run=True)
    assert r["kept"] and not r["recorded"]
    assert tuning.store().records(tune_mod.KIND) == {}
    assert mm().compile().tuned is None
    assert not tp.tune(mm(), space=[par_i], params=SIZES, progress=False, clock=fake,
                       dry_run=True)["cached"]


def test_records_are_listed_and_forgotten(store_dir, fake, capsys):
    from tiramisu_py import cli
    fake.profiles.update({"as written": steady(2e-3), "C_update.parallelize(i)": steady(1e-3)})
    tp.tune(mm(), space=[par_i], params=SIZES, repeats=1, progress=False, clock=fake)
    tp.tune(mm(), space=[par_i], params={**SIZES, "N": 256}, repeats=1, progress=False,
            clock=fake)
    assert len(tune_mod.RECORDS.records()) == 2
    cli.main(["tune", "--list"])
    out = capsys.readouterr().out
    assert out.startswith("tiramisu_py.tune records (2):")
    assert out.count("tiramisu_py.tune record of 'mm_tuned'") == 2 and "N~2^8" in out
    cli.main(["tune", "--forget", "other"])
    assert "forgot 0 " in capsys.readouterr().out and len(tune_mod.RECORDS.records()) == 2
    cli.main(["tune", "--forget", "mm_tuned"])
    assert "forgot 2 " in capsys.readouterr().out
    assert tune_mod.RECORDS.records() == [] and mm().compile().tuned is None
    tp.tune(mm(), space=[par_i], params=SIZES, repeats=1, progress=False, clock=fake)
    cli.main(["tune", "--forget"])                                # all
    assert "forgot 1 " in capsys.readouterr().out and tune_mod.RECORDS.records() == []


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
    first = cli.stdout.splitlines()[0]
    assert first.startswith("# mm_tuned: ") and "candidates timed; default " in first
    assert "kept" in first                        # "kept" or "not kept: ..." (host timing)
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
        assert ("omp parallel" in k.source) == r["kept"] == (k.tuned is not None), r
        print("timed", tune.RUNS["timed"], "cached", r["cached"])
    """)
    out = subprocess.run([sys.executable, "-c", second], capture_output=True, text=True,
                         env=env, timeout=300)
    assert out.returncode == 0, out.stderr
    assert out.stdout.split() == ["timed", "0", "cached", "True"]


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

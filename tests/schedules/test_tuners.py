"""The two tuners on the tuning store (tiramisu_py.tuning):

* ``tiramisu_py.tune`` (the language's): legal candidates timed, illegal ones
  rejected by the legality check, a progress bar on stderr, the winner
  confirmed against the Function as written (interleaved A/B) before it is
  recorded and used by a later compile() of the same algorithm
  (``kernel.tuned`` says so; ``compile(tuned=False)`` ignores it); a dry run
  records nothing; a second process finds the record and times nothing
  (counted); ``tiramisu-py tune FILE:FUNC``, ``--list``, ``--forget``.
* ``schedules.tune_library`` (the library's parameters, issue 27 item 2):
  winners recorded per host and shape class, only once an interleaved A/B
  against the defaults confirms them (issue 51); a second process reuses
  them without timing anything; other hosts' records, damaged, foreign and
  unconfirmed ones are ignored; tuned parameters give the defaults' results;
  the CLI's op-name form, ``--dry-run``, ``--list``, ``--forget``.
* the records' keys, as both tuners always wrote them.

Timing decisions use a fake clock (tests/tuning_fakes.py); no timing is
asserted."""
from __future__ import annotations

from repo_paths import ROOT
import collections
import json
import os
import subprocess
import sys
import textwrap
import warnings

import numpy as np
import pytest

import schedules
import tiramisu_py as tp
import tiramisu_py_command as cli
from schedules import tuner
from schedules.core import tuned
from schedules.core.kernels import target_of
from schedules.problems.conv import ConvProblem
from schedules.problems.gemm import GemmProblem
from schedules.registry import SOLVERS
from tests.auto_kernels import MM_SOURCE, build_mm as mm
from tiramisu_py import cli as language_cli
from tiramisu_py import tuning
from tiramisu_py.driver import tune as tune_mod
from tiramisu_py.tuning import keys
from tiramisu_py.tuning.confirm import Verdict
from tuning_fakes import FakeClock, fast_once, steady



@pytest.fixture
def store(tmp_path, monkeypatch):
    """A fresh tuning store (its cache directory) for this test and its children."""
    monkeypatch.setenv("TIRAMISU_PY_CACHE", str(tmp_path / "cache"))
    monkeypatch.delenv("TIRAMISU_PY_HOST", raising=False)
    tuned.forget()
    yield tmp_path
    tuned.forget()


# ------------------------------------------------------------------ tiramisu_py.tune
SIZES = {"N": 24, "M": 20, "K": 16}

MM = MM_SOURCE


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


def test_a_confirmed_win_is_recorded_and_compile_uses_it(store, capsys, fake):
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


def test_tune_a_candidate_fast_once_in_the_search_is_not_recorded(store, fake):
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


def test_tune_a_dry_run_records_nothing(store, fake):
    fake.profiles.update({"as written": steady(2e-3), "C_update.parallelize(i)": steady(1e-3)})
    r = tp.tune(mm(), space=[par_i], params=SIZES, repeats=1, progress=False, clock=fake,
                dry_run=True)
    assert r["kept"] and not r["recorded"]
    assert tuning.store().records(tune_mod.KIND) == {}
    assert mm().compile().tuned is None
    assert not tp.tune(mm(), space=[par_i], params=SIZES, progress=False, clock=fake,
                       dry_run=True)["cached"]


def test_tune_records_are_listed_and_forgotten(store, fake, capsys):
    fake.profiles.update({"as written": steady(2e-3), "C_update.parallelize(i)": steady(1e-3)})
    tp.tune(mm(), space=[par_i], params=SIZES, repeats=1, progress=False, clock=fake)
    tp.tune(mm(), space=[par_i], params={**SIZES, "N": 256}, repeats=1, progress=False,
            clock=fake)
    assert len(tune_mod.RECORDS.records()) == 2
    language_cli.main(["tune", "--list"])
    out = capsys.readouterr().out
    assert out.startswith("tiramisu_py.tune records (2):")
    assert out.count("tiramisu_py.tune record of 'mm_tuned'") == 2 and "N~2^8" in out
    language_cli.main(["tune", "--forget", "other"])
    assert "forgot 0 " in capsys.readouterr().out and len(tune_mod.RECORDS.records()) == 2
    language_cli.main(["tune", "--forget", "mm_tuned"])
    assert "forgot 2 " in capsys.readouterr().out
    assert tune_mod.RECORDS.records() == [] and mm().compile().tuned is None
    tp.tune(mm(), space=[par_i], params=SIZES, repeats=1, progress=False, clock=fake)
    language_cli.main(["tune", "--forget"])                                # all
    assert "forgot 1 " in capsys.readouterr().out and tune_mod.RECORDS.records() == []


def test_tune_arguments(store):
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


def test_tune_second_process_reuses_the_record(tmp_path):
    src = tmp_path / "kernels.py"
    src.write_text(MM)
    env = dict(os.environ, TIRAMISU_PY_CACHE=str(tmp_path / "cache"), PYTHONPATH=ROOT,
               OMP_WAIT_POLICY="passive")
    r = subprocess.run([sys.executable, "-m", "tiramisu_py", "tune", f"{src}:mm",
                        "-p", "N=24", "-p", "M=20", "-p", "K=16", "--budget", "6"],
                       capture_output=True, text=True, env=env, timeout=300)
    assert r.returncode == 0, r.stderr
    first = r.stdout.splitlines()[0]
    assert first.startswith("# mm_tuned: ") and "candidates timed; default " in first
    assert "kept" in first                        # "kept" or "not kept: ..." (host timing)
    assert "f.computations['C'].update.parallelize(" in r.stdout
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


def test_tune_cli_refuses_bad_specs(tmp_path):
    with pytest.raises(SystemExit, match="not FILE:FUNC"):
        language_cli.main(["tune", "nofunc"])
    with pytest.raises(SystemExit, match="no file"):
        language_cli.main(["tune", str(tmp_path / "missing.py") + ":mm"])
    src = tmp_path / "k.py"
    src.write_text(MM)
    with pytest.raises(SystemExit, match="defines no 'other'"):
        language_cli.main(["tune", f"{src}:other"])
    with pytest.raises(SystemExit, match="is not NAME=INT"):
        language_cli.main(["tune", f"{src}:mm", "-p", "N"])


def test_record_key_parts():
    f = mm()
    k1 = tune_mod.record_key(f, "cpu", SIZES)
    assert k1 == tune_mod.record_key(mm(), "cpu", SIZES)
    assert k1 != tune_mod.record_key(f, "llvm", SIZES)
    assert k1 != tune_mod.record_key(f, "cpu", {**SIZES, "N": 4 * SIZES["N"]})
    assert k1 == tune_mod.record_key(f, "cpu", {**SIZES, "N": SIZES["N"] + 1})  # same class


def test_a_record_tuned_under_other_rules_is_not_used(store, fake, monkeypatch):
    """The key holds a hash of the auto-scheduler's source (the candidates'
    rules): after a change to them, compile() no longer uses the record
    tuned before it, and tune() times its candidates again (the new
    automatic schedule among them) instead of returning the old record."""
    assert tune_mod.rules_fingerprint() == tune_mod.rules_fingerprint()
    assert len(tune_mod.rules_fingerprint()) == 16
    fake.profiles.update({"as written": steady(2e-3, 0.03),
                          "C_update.parallelize(i)": steady(1e-3, 0.03, seed=1)})
    r = tp.tune(mm(), space=[par_i], params=SIZES, repeats=1, progress=False, clock=fake)
    assert r["recorded"] and mm().compile().tuned is not None
    k1 = tune_mod.record_key(mm(), "cpu", SIZES)
    monkeypatch.setattr(tune_mod, "rules_fingerprint", lambda: "0" * 16)
    assert tune_mod.record_key(mm(), "cpu", SIZES) != k1
    assert mm().compile().tuned is None
    again = tp.tune(mm(), space=[par_i], params=SIZES, repeats=1, progress=False, clock=fake)
    assert not again["cached"] and again["timed"] == 1 and again["recorded"]
    assert mm().compile().tuned is not None


# ------------------------------------------------------------------ schedules.tune_library
def _child(code, **env):
    e = {**os.environ, "PYTHONPATH": ROOT, "OMP_WAIT_POLICY": "passive", **env}
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=e,
                       cwd=ROOT, timeout=300)
    assert r.returncode == 0, r.stderr[-3000:]
    return r.stdout


KEPT = Verdict(2.0, 1.0, 0.5, 0.5, 0.5, 12, True, "kept")


def _gemm(n=48):
    rng = np.random.default_rng(0)
    a, b = (rng.standard_normal((n, n), dtype=np.float32) for _ in range(2))
    return GemmProblem.from_call("gemm", a, b, None, None) + (a, b)


def test_library_records_and_a_second_process_reuses_the_records(store):
    report = schedules.tune_library("gemm", budget=4, progress=False, sizes="small", repeats=1)
    (entry,) = report
    assert entry["solver"] == "blis" and not entry["cached"] and entry["seconds"] > 0
    recs = tuned.records()
    assert len(recs) == 1
    key, rec = next(iter(recs.items()))
    assert json.loads(key)["host"]["cpu"] == keys.cpu_model()
    assert rec["values"] == entry["values"]
    # a known, non-default winner, so that the child's kernel shows which params it ran
    blis = next(s for s in SOLVERS["gemm"] if s.name == "blis")
    p, args, a, b = _gemm()
    chosen = {"mr": 4, "pack_a": True, "micro": "jr"}
    tuned.save(blis, p, chosen, KEPT, 3)
    out = _child(
        "import numpy as np, schedules\n"
        "from schedules import tuner\n"
        "from schedules.core import kernels, tuned\n"
        "r = schedules.tune_library('gemm', budget=4, progress=False, sizes='small')\n"
        "assert tuner.RUNS['timed'] == 0 and r[0]['cached'], (tuner.RUNS, r)\n"
        "rng = np.random.default_rng(0)\n"
        "a, b = (rng.standard_normal((48, 48), dtype=np.float32) for _ in range(2))\n"
        "c = schedules.gemm(a, b); schedules.gemm(a, b)\n"
        "assert np.allclose(c, a @ b, rtol=1e-4, atol=1e-4)\n"
        "ps = [k[0][4] for k in kernels._KERNELS if k[0][0] == 'gemm']\n"
        "print(tuner.RUNS['timed'], tuned.LOOKUPS['store'], ps[0].mr, ps[0].pack_a, ps[0].micro)\n")
    assert out.split() == ["0", "1", "4", "True", "jr"]


def test_records_of_another_host_are_not_used(store, monkeypatch):
    blis = next(s for s in SOLVERS["gemm"] if s.name == "blis")
    p, args, a, b = _gemm()
    tuned.save(blis, p, {"mr": 4}, KEPT, 1)
    assert tuned.recorded(blis, p) == {"mr": 4}
    real = schedules.host()
    other_isa = ("vector_registers=32,vector_bits=512" if real.vector_bits == 256
                 else "vector_registers=16,vector_bits=256")      # not this host's ISA
    other_cores = f"cores={real.cores + 5}"
    for pin in (other_cores, other_isa):
        monkeypatch.setenv("TIRAMISU_PY_HOST", pin)
        assert tuned.recorded(blis, p) == {}, pin
        assert json.loads(tuned.record_key(blis, p))["host"] != \
            json.loads(next(iter(tuned.records())))["host"]
    monkeypatch.delenv("TIRAMISU_PY_HOST")
    assert tuned.recorded(blis, p) == {"mr": 4}
    # another backend is another key too
    q = GemmProblem.from_call("gemm", a, b, None, "c")[0]
    assert tuned.recorded(blis, q) == {}


def test_damaged_and_foreign_records_are_ignored(store):
    blis = next(s for s in SOLVERS["gemm"] if s.name == "blis")
    p, args, a, b = _gemm()
    key = tuned.record_key(blis, p)
    default = blis.tuned(p)
    for bad in ("not a record", {"values": {"mr": 999}}, {"values": {"no_such": 1}},
                {"values": [1, 2]}, {"seconds": 1},
                {"values": {"mr": 4}, "seconds": 1.0, "default_seconds": 2.0}):  # unconfirmed
        tuned.forget()
        tuning.store().put(tuned.KIND, key, bad)
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            assert tuned.recorded(blis, p) == {}, bad
            assert blis.tuned(p) == default
            assert np.allclose(blis.run(p, args), a @ b, rtol=1e-4, atol=1e-4)
    # a search the budget cut is used, but the next tuning run times it again
    tuned.save(blis, p, {"mr": 4}, KEPT, 1, complete=False)
    assert tuned.recorded(blis, p) == {"mr": 4} and not tuned.has_record(blis, p)
    # a caller's own tiles win over any record
    tuned.save(blis, p, {"mr": 4}, KEPT, 1)
    assert tuned.has_record(blis, p)
    mine = schedules.gemm_params(48, 48, 48)
    q = GemmProblem.from_call("gemm", a, b, mine, None)[0]
    assert blis.tuned(q)["params"] == mine


def test_tuned_parameters_give_the_defaults_results(store):
    blis = next(s for s in SOLVERS["gemm"] if s.name == "blis")
    p, args, a, b = _gemm()
    ref = blis.run(p, args, {})
    for values in ({"mr": 4, "kc": 24}, {"pack_a": True, "micro": "jr", "parallel": "jc"}):
        assert tuned.fits(blis, p, values), values
        np.testing.assert_allclose(blis.run(p, args, values), ref, rtol=1e-5, atol=1e-5)
    rng = np.random.default_rng(1)
    x, w = rng.standard_normal((2, 8, 12, 12), dtype=np.float32), \
        rng.standard_normal((16, 8, 3, 3), dtype=np.float32)
    cp, cargs = ConvProblem.from_call("conv2d", x, w, None, 1, 1, 1, 1, algo="auto", target=None)
    by_name = {s.name: s for s in SOLVERS["conv2d"] if s.target == "cpu"}
    direct, spatial = by_name["direct"], by_name["spatial_pack"]
    ref = direct.run(cp, cargs, {})
    lanes = schedules.host().lanes(4)
    # the same products summed in the same order: equal bit for bit
    for solver, values in ((direct, {"cob": 2, "parallel": "n"}), (direct, {"xb": lanes}),
                           (spatial, {"vb": lanes, "rows": 2}), (spatial, {"parallel": "n"})):
        assert tuned.fits(solver, cp, values), (solver, values)
        np.testing.assert_array_equal(solver.run(cp, cargs, values), ref)
    # the RNN's hidden-block split and the wavefront's chunk
    (_, _, make), = tuner.problems("rnn", "small")
    rp, rargs = make()
    layer, wave = (next(s for s in SOLVERS["lstm"] if s.name == n) for n in ("layer", "wavefront"))
    ref = layer.run(rp, rargs, {})
    assert layer.params(rp)["hb"] == 2 * lanes and wave.params(rp)["chunk"] == 4
    assert wave.build(rp, {}).fixed["TC"] == 4
    assert wave.build(rp, {"chunk": 2}).fixed["TC"] == 2
    assert layer.build(rp, {"hb": lanes}).fixed["HB"] == lanes
    for solver, values in ((layer, {"hb": lanes}), (wave, {"chunk": 2}), (wave, {"hb": lanes})):
        assert tuned.fits(solver, rp, values), (solver, values)
        for got, want in zip(solver.run(rp, rargs, values), ref):
            np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-6)


def test_a_find_choice_made_before_tuning_is_made_again(store):
    from schedules.core import find
    rng = np.random.default_rng(1)
    x, w = rng.standard_normal((1, 4, 9, 9), dtype=np.float32), \
        rng.standard_normal((8, 4, 3, 3), dtype=np.float32)
    cp, _ = ConvProblem.from_call("conv2d", x, w, None, 1, 1, 1, 1, algo="auto", target=None)
    cands = find.candidates(cp, SOLVERS["conv2d"])
    before = find.key(cp, cands)
    tuned.save(cands[0], cp, {"parallel": "n"}, KEPT, 1)
    after = json.loads(find.key(cp, cands))
    assert after["tuned"] == {cands[0].name: {"parallel": "n"}}
    tuned.forget()
    assert find.key(cp, cands) == before


def test_the_default_micro_kernel_follows_the_isa(monkeypatch):
    """AVX2 (16 registers, 256 bits) and AVX-512 (32, 512) get different
    register blocks from the same rule (vector_registers, vector_bits)."""
    shapes = {}
    for pin in ("vector_bits=256,vector_registers=16", "vector_bits=512,vector_registers=32"):
        monkeypatch.setenv("TIRAMISU_PY_HOST", pin)
        g = schedules.gemm_params(1024, 1024, 1024)
        shapes[pin] = (g.mr, g.nr, g.vector)
        assert g.mr * g.nr // g.vector <= 3 * schedules.host().vector_registers // 4
    assert shapes["vector_bits=256,vector_registers=16"] == (6, 16, 8)
    assert shapes["vector_bits=512,vector_registers=32"] == (6, 64, 16)


def test_library_bad_arguments_are_refused(store):
    with pytest.raises(ValueError, match="ops must be among"):
        schedules.tune_library("fft")
    with pytest.raises(ValueError, match="budget"):
        schedules.tune_library("gemm", budget=0)
    with pytest.raises(ValueError, match="sizes"):
        schedules.tune_library("gemm", sizes="huge")


def test_the_cli_op_name_form(store):
    e = {**os.environ, "PYTHONPATH": ROOT, "OMP_WAIT_POLICY": "passive"}
    r = subprocess.run([sys.executable, "-m", "tiramisu_py_command", "tune", "sparse", "--sizes",
                        "small", "--budget", "2", "--repeats", "1"], capture_output=True,
                       text=True, env=e, cwd=ROOT, timeout=300)
    assert r.returncode == 0, r.stderr[-3000:]
    assert "[sparse]" in r.stdout and "tune sparse" in r.stderr      # the progress bar
    assert any(json.loads(k)["solver"] == "sparse" for k in tuned.records())
    r = subprocess.run([sys.executable, "-m", "tiramisu_py_command", "tune", "fft"], capture_output=True,
                       text=True, env=e, cwd=ROOT, timeout=300)
    assert r.returncode == 2 and "unknown op 'fft'" in r.stderr
    # an argument with ':' is the language's FILE:FUNC form
    with pytest.raises(SystemExit, match="no file"):
        cli.main(["tune", "no_such_file.py:build"])
    assert target_of(None) in json.loads(next(iter(tuned.records())))["host"]["backend"]
    assert tuner.OPS == ("gemm", "conv", "sparse", "rnn")


def _fake_blis(monkeypatch, cost):
    """The small GEMM problem's blis solver, whose ``run`` costs
    ``cost(values, n)`` on a fake clock (``n``: the call with these values,
    from 0) and gives the defaults' result."""
    clock = FakeClock()
    blis = next(s for s in SOLVERS["gemm"] if s.name == "blis")
    (_, _, make), = tuner.problems("gemm", "small")
    p, args = make()
    ref, counts = blis.run(p, args, {}), collections.Counter()

    def run(p, args, values=None):
        key = repr(sorted((values or {}).items()))
        clock.now += cost(values or {}, counts[key])
        counts[key] += 1
        return ref
    monkeypatch.setattr(blis, "run", run)
    return clock, blis, p


def _tune(clock, **kw):
    (entry,) = schedules.tune_library("gemm", progress=False, sizes="small", repeats=1,
                                      clock=clock, **kw)
    return entry


def test_library_a_candidate_fast_once_in_the_search_is_not_recorded(store, monkeypatch):
    """mr=2 looks fast on its one timed call of the search (call 1: after
    the warm-up), and ties with the defaults under the A/B: the record
    keeps the defaults; a slower one is never kept."""
    once, tie = fast_once(1e-3, 1, 0.5e-3, 0.03, seed=1), steady(1e-3, 0.03, seed=2)
    clock, blis, p = _fake_blis(monkeypatch, lambda v, n: once(n) if v == {"mr": 2} else tie(n))
    entry = _tune(clock)
    assert entry["candidate"] == {"mr": 2} and entry["values"] == {}
    assert entry["verdict"].why == "not kept: within noise"
    rec = next(iter(tuned.records().values()))
    assert rec["values"] == {} and rec["candidate"] == {"mr": 2}
    assert rec["verdict"]["why"] == "not kept: within noise"
    assert tuned.recorded(blis, p) == {} and tuned.has_record(blis, p)   # not timed again
    line = tuner.summary([entry])
    assert line.startswith("gemm 48 [blis]: ") and "over 12 A/B rounds: not kept: within " \
        "noise ({'mr': 2}); defaults" in line
    slow = fast_once(1.3e-3, 1, 0.5e-3)
    clock, blis, p = _fake_blis(monkeypatch, lambda v, n: slow(n) if v == {"mr": 2} else 1e-3)
    entry = _tune(clock, retune=True)
    assert entry["values"] == {} and entry["verdict"].why == "not kept: slower"
    assert tuned.recorded(blis, p) == {}


def test_library_a_confirmed_win_is_recorded_and_a_dry_run_records_nothing(store, monkeypatch):
    clock, blis, p = _fake_blis(monkeypatch,
                                lambda v, n: 0.6e-3 if v.get("micro") == "jr" else 1e-3)
    entry = _tune(clock, dry_run=True)
    assert entry["values"] == {"micro": "jr"} and entry["verdict"].kept
    assert tuned.records() == {} and tuned.recorded(blis, p) == {}
    entry = _tune(clock)
    assert entry["values"] == {"micro": "jr"} and entry["verdict"].why == "kept"
    assert entry["seconds"] == pytest.approx(0.6e-3) and entry["default_seconds"] == \
        pytest.approx(1e-3)
    assert tuned.recorded(blis, p) == {"micro": "jr"}


def test_library_records_are_listed_and_forgotten(store, capsys):
    blis = next(s for s in SOLVERS["gemm"] if s.name == "blis")
    p = _gemm()[0]
    tuned.save(blis, p, {"mr": 4}, KEPT, 3)
    x, w = np.ones((1, 4, 9, 9), np.float32), np.ones((8, 4, 3, 3), np.float32)
    cp, _ = ConvProblem.from_call("conv2d", x, w, None, 1, 1, 1, 1, algo="auto", target=None)
    direct = next(s for s in SOLVERS["conv2d"] if s.name == "direct")
    tuned.save(direct, cp, {}, KEPT, 1)
    assert cli.main(["tune", "--list"]) == 0
    out = capsys.readouterr().out
    assert "library parameter records (2):" in out and "tiramisu_py.tune records (0):" in out
    assert "gemm [blis] " in out and ": {'mr': 4}; default 2000.000 ms" in out
    assert "conv2d [direct]" in out and ": defaults; " in out
    cli.main(["tune", "--forget", "gemm"])
    assert "forgot 1 library parameter record(s)" in capsys.readouterr().out
    assert tuned.recorded(blis, p) == {} and len(tuned.records()) == 1
    cli.main(["tune", "--forget", "direct"])                   # by solver name
    assert tuned.records() == {}
    tuned.save(blis, p, {"mr": 4}, KEPT, 3)
    cli.main(["tune", "--forget"])
    assert "forgot 1 library" in capsys.readouterr().out and tuned.records() == {}


# ------------------------------------------------------------------ the keys
def test_the_keys_are_those_the_tuners_always_wrote():
    """The host parts and size classes, now in tiramisu_py.tuning.keys, give
    the text each tuner wrote before (records made before are found)."""
    from codegen import target
    cpu, bits, cores = target.cpu_model(), target.vector_bits(), target.cores()
    caches = ",".join(sorted(f"L{lv}{k[0]}={v}" for (lv, k), v in target.cache_sizes().items()))
    assert keys.schedule_host() == f"{cpu}|{bits}|{caches}|{cores}"
    assert keys.grain_host() == f"{cpu}|cores={cores}|simd={bits}"
    h = schedules.host()
    assert tuned.host_key("llvm") == {
        "cpu": cpu, "isa": [f for f in keys.ISA_FLAGS if f in target.cpu_flags()],
        "vector_bits": h.vector_bits, "vector_registers": h.vector_registers,
        "cores": h.cores, "l1d": h.l1d, "l2": h.l2, "l3": h.l3, "backend": "llvm",
        "library": tp.__version__}
    assert keys.size_class({"N": 1000, "M": 24, "K": 0}) == "K~2^0,M~2^5,N~2^10"
    assert keys.shape_class({"n": 1000, "groups": 1, "shape": {"h": 1, "w": 56}, "k": True,
                             "dtype": "float32"}, ("n", "h", "w", "k")) == \
        {"n": "~2^10", "groups": 1, "shape": {"h": 1, "w": "~2^6"}, "k": True,
         "dtype": "float32"}

"""The library's tuned parameters (issue 27 item 2): schedules.tune_library
records winners per host and shape class, only once an interleaved A/B
against the defaults confirms them (issue 51: decided on a fake clock); a
second process reuses them without timing anything; other hosts' records,
damaged, foreign and unconfirmed ones are ignored; tuned parameters give
the defaults' results; the CLI's op-name form, ``--dry-run``, ``--list``,
``--forget``.  No timing is asserted."""
import collections
import json
import os
import subprocess
import sys
import warnings

import numpy as np
import pytest

import schedules
import tiramisu_py_command as cli
from schedules import tuner
from schedules.core import tuned
from schedules.core.kernels import target_of
from schedules.problems.conv import ConvProblem
from schedules.problems.gemm import GemmProblem
from schedules.registry import SOLVERS
from tiramisu_py import tuning
from tiramisu_py.tuning import keys
from tiramisu_py.tuning.confirm import Verdict
from tuning_fakes import FakeClock, fast_once, steady

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


@pytest.fixture
def cache(tmp_path, monkeypatch):
    """A fresh cache directory (tuning store) for this test and its children."""
    monkeypatch.setenv("TIRAMISU_PY_CACHE", str(tmp_path))
    monkeypatch.delenv("TIRAMISU_PY_HOST", raising=False)
    tuned.forget()
    yield tmp_path
    tuned.forget()


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


def test_tuner_records_and_a_second_process_reuses_the_records(cache):
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


def test_records_of_another_host_are_not_used(cache, monkeypatch):
    blis = next(s for s in SOLVERS["gemm"] if s.name == "blis")
    p, args, a, b = _gemm()
    tuned.save(blis, p, {"mr": 4}, KEPT, 1)
    assert tuned.recorded(blis, p) == {"mr": 4}
    for pin in ("cores=7", "vector_registers=16,vector_bits=256"):
        monkeypatch.setenv("TIRAMISU_PY_HOST", pin)
        assert tuned.recorded(blis, p) == {}, pin
        assert json.loads(tuned.record_key(blis, p))["host"] != \
            json.loads(next(iter(tuned.records())))["host"]
    monkeypatch.delenv("TIRAMISU_PY_HOST")
    assert tuned.recorded(blis, p) == {"mr": 4}
    # another backend is another key too
    q = GemmProblem.from_call("gemm", a, b, None, "c")[0]
    assert tuned.recorded(blis, q) == {}


def test_damaged_and_foreign_records_are_ignored(cache):
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


def test_tuned_parameters_give_the_defaults_results(cache):
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


def test_a_find_choice_made_before_tuning_is_made_again(cache):
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


def test_bad_arguments_are_refused(cache):
    with pytest.raises(ValueError, match="ops must be among"):
        schedules.tune_library("fft")
    with pytest.raises(ValueError, match="budget"):
        schedules.tune_library("gemm", budget=0)
    with pytest.raises(ValueError, match="sizes"):
        schedules.tune_library("gemm", sizes="huge")


def test_the_cli_op_name_form(cache):
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


def test_a_candidate_fast_once_in_the_search_is_not_recorded(cache, monkeypatch):
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


def test_a_confirmed_win_is_recorded_and_a_dry_run_records_nothing(cache, monkeypatch):
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


def test_cli_lists_and_forgets_records(cache, capsys):
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

"""The benchmark harness (bench/harness.py) and ``tiramisu-py bench``: structure
of the JSON report, the table, the optional chart.  No timing is asserted."""
from repo_paths import ROOT
import importlib.util
import io
import json
import os
import subprocess
import sys

import numpy as np
import pytest

from bench import harness
from bench.harness import Case
import tiramisu_py_command as cli

os.environ.setdefault("OMP_WAIT_POLICY", "passive")
HAS_MATPLOTLIB = importlib.util.find_spec("matplotlib") is not None


def synthetic(n=24):
    """NumPy matmul variants standing in for tiramisu_py, plus one that fails."""
    def setup():
        rng = np.random.default_rng(0)
        a, b = rng.standard_normal((n, n)), rng.standard_normal((n, n))
        return {"tiramisu_py[dot]": lambda: np.dot(a, b),
                "tiramisu_py[einsum]": lambda: np.einsum("ik,kj->ij", a, b),
                "tiramisu_py[broken]": lambda: 1 / 0,
                "numpy": lambda: a @ b}
    return [Case(f"matmul {n}", 2.0 * n ** 3, setup, check=lambda out: 0.0),
            Case("no check", 1.0, lambda: {"numpy": lambda: None})]


def check_report(report, threads, impls_of_case):
    assert set(report) >= {"machine", "threads", "repeats", "cases", "ceilings"}
    for n in threads:                    # the host's measured FMA peak and triad bandwidth
        c = report["ceilings"][str(n)]
        assert c["fma_gflops"] > 0 and c["bandwidth_gbs"] > 0
    assert set(report["machine"]) >= {"cpu", "logical_cores", "caches", "simd", "os", "python",
                                      "versions", "gcc"}
    assert report["threads"] == threads
    for case in report["cases"]:
        assert case["flops"] > 0 and list(case["impls"]) == impls_of_case[case["name"]]
        for impl, per_thread in case["impls"].items():
            assert list(per_thread) == [str(n) for n in threads]
            for n, r in zip(threads, per_thread.values()):
                assert set(r) == {"median_s", "min_s", "gflops", "ratio", "error", "failure",
                                  "of_peak"}
                if r["failure"] is None:
                    assert 0 < r["min_s"] <= r["median_s"] and r["gflops"] > 0
                    peak = report["ceilings"][str(n)]["fma_gflops"]
                    assert r["of_peak"] == pytest.approx(r["gflops"] / peak)


def test_synthetic_suite(tmp_path, capsys):
    out = io.StringIO()
    json_path, png_path = tmp_path / "r.json", tmp_path / "r.png"
    report = harness.run(synthetic, {"n": 24}, threads=[1, 2], repeats=3,
                         json_path=str(json_path), png_path=str(png_path), stdout=out)
    names = ["tiramisu_py[dot]", "tiramisu_py[einsum]", "tiramisu_py[broken]", "numpy"]
    check_report(report, [1, 2], {"matmul 24": names, "no check": ["numpy"]})
    assert json.loads(json_path.read_text()) == report
    matmul = report["cases"][0]
    assert matmul["baseline"] == "numpy" and matmul["impls"]["numpy"]["1"]["ratio"] == 1.0
    assert matmul["impls"]["tiramisu_py[dot]"]["2"]["error"] == 0.0
    assert matmul["impls"]["tiramisu_py[broken]"]["1"]["failure"].startswith("ZeroDivisionError")
    assert matmul["best_tiramisu_py"]["1"] in names[:2]
    table = out.getvalue()
    assert "machine:" in table and "1 thread" in table and "2 threads" in table
    assert "measured: 1 thread: FMA peak" in table and "triad" in table
    assert "vs numpy" in table and "failed" in table and "ZeroDivisionError" in table
    assert table.count("*") >= 2                     # the best variant at each thread count
    if HAS_MATPLOTLIB:
        assert png_path.stat().st_size > 0
    else:
        assert not png_path.exists() and "matplotlib is not installed" in capsys.readouterr().err


def test_cli_bench_quick_gemm(tmp_path, capsys):
    """The real gemm suite, tiny sizes, through ``tiramisu-py bench`` (torch.compile left
    out: compiling it takes longer than the whole suite)."""
    json_path = tmp_path / "gemm.json"
    assert cli.main(["bench", "gemm", "--quick", "--threads", "1", "--repeats", "2",
                     "--impls", "tiramisu_py,numpy,torch", "--json", str(json_path)]) == 0
    report = json.loads(json_path.read_text())
    impls = ["tiramisu_py"] + ["torch"] * (importlib.util.find_spec("torch") is not None) + ["numpy"]
    check_report(report, [1], {f"gemm {n}": impls for n in (48, 96)})
    for case in report["cases"]:
        for r in case["impls"].values():
            assert r["1"]["failure"] is None and r["1"]["error"] < 1e-3
    assert "gemm 96" in capsys.readouterr().out


def test_cli_bench_quick_conv_and_fused(tmp_path):
    """One tiny shape of the conv and fused suites in one run (several suites:
    one JSON document, a report per suite): every algorithm runs and is checked."""
    json_path = tmp_path / "conv.json"
    assert cli.main(["bench", "conv", "fused", "--quick", "--shapes", "0", "--threads", "1",
                     "--repeats", "1", "--impls", "tiramisu_py", "--json", str(json_path)]) == 0
    reports = json.loads(json_path.read_text())
    assert sorted(reports) == ["conv", "fused"]
    for suite, name in (("conv", "conv "), ("fused", "conv+relu+pool ")):
        (case,) = reports[suite]["cases"]
        assert case["name"].startswith(name)
        assert case["impls"] and all(impl.startswith("tiramisu_py") for impl in case["impls"])
        for r in case["impls"].values():
            assert r["1"]["failure"] is None and r["1"]["error"] < 1e-3


def test_bench_module_help():
    root = ROOT
    done = subprocess.run([sys.executable, "-m", "bench", "--help"], cwd=root,
                          capture_output=True, text=True)
    assert done.returncode == 0 and "--threads" in done.stdout and "fused" in done.stdout


def test_short_calls_are_timed_more_often(monkeypatch):
    """``repeats`` calls at least; a call far shorter than MIN_TIMED_S is
    repeated until the timed calls add up to it (MAX_CALLS at most); a long
    one gets ``repeats``."""
    import time as _time
    monkeypatch.setattr(harness, "SETTLE_S", 0.0)
    monkeypatch.setattr(harness, "WARM_S", 0.0)
    monkeypatch.setattr(harness, "MIN_TIMED_S", 0.05)
    calls = {"short": 0, "long": 0}

    def setup():
        def short():
            calls["short"] += 1

        def long():
            calls["long"] += 1
            _time.sleep(0.02)
        return {"short": short, "long": long}
    harness.measure(Case("calls", 1.0, setup), 3, 1, harness.Progress(1, 0, io.StringIO()))
    assert calls["short"] - 2 == harness.MAX_CALLS          # warm-up and one untimed call
    assert calls["long"] - 2 == 3


def test_interleaved_case_times_one_call_of_each_per_round(monkeypatch):
    """``Case.interleave``: after the warm calls, the timed calls alternate
    between the implementations, one of each per round, each getting its
    ``repeats`` (a long one no more)."""
    import time as _time
    monkeypatch.setattr(harness, "SETTLE_S", 0.0)
    monkeypatch.setattr(harness, "WARM_S", 0.0)
    monkeypatch.setattr(harness, "MIN_TIMED_S", 0.03)
    order = []

    def setup():
        def a():
            order.append("a")
            _time.sleep(0.002)

        def b():
            order.append("b")
            _time.sleep(0.02)
        return {"a": a, "b": b}
    res = harness.measure(Case("pair", 1.0, setup, interleave=True), 3, 1,
                          harness.Progress(1, 0, io.StringIO()))
    timed = order[4:]                          # the warm-up and one warm call of each
    assert timed[:6] == ["a", "b"] * 3         # alternating while both need calls
    assert timed.count("b") == 3 and timed.count("a") >= 3
    assert all(r["median_s"] > 0 for r in res.values())


def test_peak_column_uses_the_named_ceiling():
    """An int8/bf16 product's "peak" is over the dot-product instruction's
    measured peak (``Case.ceiling``), the other rows over the FMA peak."""
    case = Case("gemm int8 8", 1e9, lambda: {}, ceiling={"ours": "vnni_gops"})
    runs = {1: [{impl: {"median_s": 0.01, "min_s": 0.01, "error": None, "failure": None}
                 for impl in ("ours", "other")}]}
    ceilings = {"1": {"fma_gflops": 50.0, "vnni_gops": 200.0}}
    impls = harness._merge(case, 0, runs, ceilings)["impls"]
    assert impls["ours"]["1"]["of_peak"] == pytest.approx(100.0 / 200.0)
    assert impls["other"]["1"]["of_peak"] == pytest.approx(100.0 / 50.0)
    # a host without the instruction: no peak column rather than a wrong one
    impls = harness._merge(case, 0, runs, {"1": {"fma_gflops": 50.0, "vnni_gops": None}})["impls"]
    assert impls["ours"]["1"]["of_peak"] is None


def test_dot_product_peaks_measured_where_the_host_has_them():
    from bench import peak
    from codegen import target
    has = {"avx512_vnni", "avx512_bf16"} <= set(target.cpu_flags())
    for kind in ("vnni", "bf16"):
        got = peak.dot_gops(1, kind)
        assert (got is not None and got > 0) if has else got is None
    text = peak.format_ceilings(peak.ceilings((1,)))
    assert ("vpdpbusd" in text and "vdpbf16ps" in text) == has


def test_ceilings_keep_the_higher_of_two_measurements_and_say_when_they_differ():
    """The FMA peak is measured before and after the cases: two threads that
    shared one core for a while measure as one, so the higher is kept and
    the lower named in the header."""
    from bench import peak
    first = {"fma_gflops": 116.0, "bandwidth_gbs": 30.0, "vnni_gops": None}
    second = {"fma_gflops": 233.0, "bandwidth_gbs": 28.0, "vnni_gops": None}
    both = peak.best_of(first, second)
    assert both["fma_gflops"] == 233.0 and both["bandwidth_gbs"] == 30.0
    assert both["fma_gflops_low"] == 116.0
    assert "FMA peak 233 GFLOP/s (one of its two measurements" in peak.format_ceilings({2: both})
    steady = peak.best_of(second, dict(second, fma_gflops=226.0))
    assert steady["fma_gflops"] == 233.0 and "fma_gflops_low" not in steady


def test_cli_bench_quick_peers_without_the_peers(tmp_path, monkeypatch):
    """``tiramisu-py bench peers --quick`` where the peers' Python has neither
    halide nor tvm (stand-ins that fail to import, first on its path): both
    workers run, ours are checked (the layer norm's hand schedule too, and
    compared with its auto schedule), every peer is skipped with its note;
    without ``--repeats``, its documented 5 rounds."""
    hidden = tmp_path / "hidden"
    for mod in ("halide", "tvm"):
        (hidden / mod).mkdir(parents=True)
        (hidden / mod / "__init__.py").write_text(f"raise ImportError('{mod} hidden', "
                                                  f"name='{mod}')\n")
    monkeypatch.setenv("PYTHONPATH", str(hidden))
    monkeypatch.setenv("TIRAMISU_PY_CACHE", str(tmp_path / "cache"))    # tp.tune's record
    json_path = tmp_path / "peers.json"
    assert cli.main(["bench", "peers", "--quick", "--kernels", "gemm,layernorm",
                     "--threads", "1", "--peers-python", sys.executable,
                     "--json", str(json_path)]) == 0
    report = json.loads(json_path.read_text())
    k, norm = report["kernels"]
    assert k["name"] == "gemm 64" and report["threads"] == 1 and report["rounds"] == 5
    assert set(report["processes"]) == {"ours", "peers"}
    assert "apache-tvm" in report["processes"]["peers"]["versions"]
    ours = {"tiramisu_py", "tiramisu_py[auto]", "tiramisu_py[tuned]", "tiramisu_py[library]"}
    assert ours <= set(k["impls"])
    for impl in ours:
        assert k["impls"][impl]["error"] < 1e-5 and k["impls"][impl]["median_s"] > 0
    assert set(k["skipped"]) >= {"halide[Mullapudi2016]", "halide[Adams2019]",
                                 "halide[Li2018]", "tvm[MetaSchedule]"}
    assert k["skipped"]["halide[Li2018]"].startswith("halide is not installed")
    assert k["skipped"]["tvm[MetaSchedule]"].startswith("tvm is not installed")
    assert "auto_vs_best_peer" not in k
    # the layer norm: its hand schedule beside auto_schedule(reassociate=True), compared
    assert norm["name"] == "layernorm 64x48"
    for impl in ("tiramisu_py[auto+re]", "tiramisu_py[hand]"):
        assert norm["impls"][impl]["error"] < 1e-5 and norm["impls"][impl]["median_s"] > 0
    assert norm["reassociated_vs_hand"] > 0


def test_children_bound_the_openmp_wait_whatever_the_shell_set(monkeypatch):
    """A measuring child's every OpenMP pool waits passively after a bounded
    spin (tiramisu_py's), with each library's thread count: not what the
    calling shell or an import happened to set."""
    from codegen.team import SPINCOUNT
    monkeypatch.setenv("OMP_WAIT_POLICY", "active")
    monkeypatch.setenv("GOMP_SPINCOUNT", "infinite")
    env = harness._child_env(3)
    assert env["OMP_WAIT_POLICY"] == "passive" and env["GOMP_SPINCOUNT"] == str(SPINCOUNT)
    assert all(env[v] == "3" for v in ("OMP_NUM_THREADS", "OPENBLAS_NUM_THREADS",
                                       "MKL_NUM_THREADS"))

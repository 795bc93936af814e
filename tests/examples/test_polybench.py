"""PolyBench/C 4.2.1 in tiramisu_py (examples/polybench) and its bench suite.

- every kernel's plain algorithm (a) and hand schedule (b) match an
  independent NumPy reference at MINI, on random inputs, on the C backend; a
  sample on the LLVM backend;
- the inputs are random enough that order matters: for several kernels a
  Function with a deliberately wrong loop order gives a different answer, so
  the checks above would catch a schedule that breaks a dependence;
- (c), ``auto_schedule()``, where the language has it (skipped otherwise);
- a smoke run of ``tiramisu-py bench polybench`` at MINI on three kernels,
  with ``auto_schedule(reassociate=True)`` where it differs (no timing is
  asserted)."""
import io
import os

import numpy as np
import pytest

import tiramisu_py as tp
from examples import polybench as pb
from examples.polybench import medley, solvers, stencils
from examples.polybench.common import F64

os.environ.setdefault("OMP_WAIT_POLICY", "passive")
NAMES = list(pb.KERNELS)
LLVM_SAMPLE = ["gemm", "atax", "lu", "deriche", "jacobi-2d", "seidel-2d"]


def check(name, variant, dataset="MINI"):
    k = pb.KERNELS[name]
    arrays = pb.random_inputs(k, dataset)
    s = pb.sizes(k, dataset)
    f = pb.function(k, dataset, variant)
    if variant == "hand":       # an empty hand schedule says why in the kernel's gaps
        assert f.schedule_commands() or k.gaps, f"{name}: no hand schedule and no reason"
    out = pb.run(k, f.compile(), arrays)
    pb.assert_close(k.comparable(out, s), k.comparable(k.reference(arrays, s), s),
                    f"{name} ({variant})")


def test_all_30_kernels():
    assert len(NAMES) == 30 and set(NAMES) == {
        "correlation", "covariance", "gemm", "gemver", "gesummv", "symm", "syr2k", "syrk",
        "trmm", "2mm", "3mm", "atax", "bicg", "doitgen", "mvt", "cholesky", "durbin",
        "gramschmidt", "lu", "ludcmp", "trisolv", "deriche", "floyd-warshall", "nussinov",
        "adi", "fdtd-2d", "heat-3d", "jacobi-1d", "jacobi-2d", "seidel-2d"}
    for k in pb.KERNELS.values():
        assert list(k.sizes) == list(pb.DATASETS), k.name


@pytest.mark.parametrize("name", NAMES)
def test_plain_and_hand_c(name, monkeypatch):
    monkeypatch.setenv("TIRAMISU_PY_TARGET", "c")
    check(name, "plain")
    check(name, "hand")


@pytest.mark.parametrize("name", LLVM_SAMPLE)
def test_plain_and_hand_llvm(name, monkeypatch):
    monkeypatch.setenv("TIRAMISU_PY_TARGET", "llvm")
    check(name, "plain")
    check(name, "hand")


@pytest.mark.parametrize("name", NAMES)
def test_auto_schedule(name):
    check(name, "auto")


# ------------------------------------------- a wrong order gives another answer
def wrong_seidel(s):
    """The rows swept bottom-up: the in-place update reads other neighbours' values."""
    n = s["N"]
    f = tp.Function("seidel_wrong", params=s)
    t, r, j = f.var("t", 0, "TSTEPS"), f.var("r", 1, "N - 1"), f.var("j", 1, "N - 1")
    i = n - 1 - r
    A = f.buffer("A", ("N", "N"), F64, output=True)
    f.computation("S", [t, r, j], (A[i - 1, j - 1] + A[i - 1, j] + A[i - 1, j + 1]
                                   + A[i, j - 1] + A[i, j] + A[i, j + 1] + A[i + 1, j - 1]
                                   + A[i + 1, j] + A[i + 1, j + 1]) / 9.0).store_in(A, [i, j])
    return f


@pytest.mark.parametrize("name, wrong", [
    ("floyd-warshall", lambda s: medley.build_floyd_warshall(s, order="ijk")),  # k innermost
    ("seidel-2d", wrong_seidel),
    ("lu", lambda s: solvers.build_lu(s, upper_first=True)),
    ("jacobi-1d", lambda s: stencils.build_jacobi1d(s, through="A"))])   # Gauss-Seidel
def test_wrong_order_is_caught(name, wrong, monkeypatch):
    monkeypatch.setenv("TIRAMISU_PY_TARGET", "c")
    k = pb.KERNELS[name]
    s = pb.sizes(k, "MINI")
    arrays = pb.random_inputs(k, "MINI")
    expected = k.reference(arrays, s)
    right = pb.run(k, k.build(s).compile(), arrays)
    pb.assert_close(right, expected, name)
    bad = pb.run(k, wrong(s).compile(), arrays)
    assert pb.max_error(bad, expected) > 1e-3, f"{name}: a wrong order gives the same answer"
    with pytest.raises(AssertionError):
        pb.assert_close(bad, expected, name)


def test_bad_arguments():
    with pytest.raises(ValueError, match="dataset must be one of MINI, SMALL, MEDIUM, LARGE"):
        pb.sizes(pb.KERNELS["gemm"], "HUGE")
    with pytest.raises(ValueError, match="variant must be one of"):
        pb.function(pb.KERNELS["gemm"], "MINI", "fast")


# ---------------------------------------------------------------- bench suite
def test_bench_polybench_smoke(tmp_path, capsys):
    from bench import suite_polybench, suites
    with pytest.raises(ValueError, match="--kernels: unknown kernel nope"):
        suite_polybench.kernel_names("gemm,nope")
    path = tmp_path / "r.json"
    args = suites.parser("tiramisu-py bench").parse_args(
        ["polybench", "--size", "MINI", "--kernels", "gemm,trisolv,jacobi-2d", "--repeats", "2",
         "--json", str(path)])
    report = suites.main(args)
    out = capsys.readouterr().out
    assert report["threads"] == [2] and "PolyBench MINI, 2 threads" in out
    rows = report["speedups"]["2"]
    assert list(rows) == ["gemm", "trisolv", "jacobi-2d"]
    for name, r in rows.items():
        assert r["plain_ms"] > 0 and r["hand"] > 0, name
        assert f"\n{name} " in out
    assert "geomean" in out and path.exists()
    for case in report["cases"]:
        for impl, per_n in case["impls"].items():
            assert per_n["2"]["failure"] is None, (case["name"], impl)
            assert per_n["2"]["error"] < 1e-9, (case["name"], impl)
    assert report["auto_schedule_s"] and all(r["auto"] for r in rows.values())
    # auto+re where reassociation schedules it otherwise: trisolv's dot products
    assert rows["trisolv"]["auto_re"] > 0 and rows["jacobi-2d"]["auto_re"] is None, rows
    assert "auto+re" in out


def test_bench_beyond_polybench_smoke(capsys):
    """``--beyond``: the six kernels outside PolyBench, plain and auto (no
    hand schedule: its column is empty), checked against NumPy at MINI."""
    from bench import suite_polybench, suites
    args = suites.parser("tiramisu-py bench").parse_args(
        ["polybench", "--beyond", "--size", "MINI", "--kernels", "softmax,trmm",
         "--repeats", "2"])
    report = suites.main(args)
    out = capsys.readouterr().out
    assert "Beyond PolyBench MINI, 2 threads" in out
    rows = report["speedups"]["2"]
    assert list(rows) == ["softmax", "trmm"]
    for name, r in rows.items():
        assert r["plain_ms"] > 0 and r["auto"] > 0 and r["hand"] is None, name
    for case in report["cases"]:
        assert suite_polybench.HAND not in case["impls"]
        for impl, per_n in case["impls"].items():
            assert per_n["2"]["failure"] is None and per_n["2"]["error"] < 1e-9, impl
    with pytest.raises(ValueError, match="has no hand schedule"):
        pb.function(suite_polybench.registry(True)["conv"], "MINI", "hand")


def test_speedup_table_from_a_report():
    from bench import suite_polybench as sp
    report = {"threads": [2], "arguments": {"size": "MINI"}, "cases": [
        {"name": "gemm MINI", "impls": {
            sp.PLAIN: {"2": {"median_s": 4e-3, "error": 0.0, "failure": None}},
            sp.HAND: {"2": {"median_s": 1e-3, "error": 1e-16, "failure": None}}}},
        {"name": "lu MINI", "impls": {
            sp.PLAIN: {"2": {"median_s": 2e-3, "error": 0.0, "failure": None}},
            sp.HAND: {"2": {"median_s": 2e-3, "error": 0.0, "failure": None}}}}]}
    table = sp.speedups(report)
    assert table["2"]["gemm"] == {"plain_ms": 4.0, "hand": 4.0, "auto": None, "auto_re": None}
    assert sp.geomean(r["hand"] for r in table["2"].values()) == pytest.approx(2.0)
    text = sp.format_speedups(report, table, {})
    assert "gemm                  4.000    4.00x        -" in text
    assert "geomean" in text and "2.00x" in text and "auto: not run" in text
    assert np.isclose(sp.geomean([2.0, 8.0]), 4.0) and sp.geomean([None]) is None


def test_bench_restores_arrays_and_checks_against_plain_above_small():
    from bench import suite_polybench as sp
    (case,) = sp.cases("MEDIUM", "jacobi-1d")
    impls = case.setup()
    assert list(impls)[:2] == [sp.PLAIN, sp.HAND]
    for fn in impls.values():
        fn.prepare()
        assert case.check(fn()) < 1e-12           # against the plain variant's result
    # without prepare the kernel runs again on its own output: another answer
    assert case.check(impls[sp.HAND]()) > 1e-6

"""The parity corpus (bench/corpus.py): its summary (the acceptance asks to
list every case below 0.9x LLVM/C with the reason, its vector-loop status)
and its polybench group."""
import numpy as np

from bench.corpus import polybench_cases, summary
from tests.auto_kernels import SUITE
from tests.tiramisu_py import test_legality_polybench as legality


def _row(case, ratio, ratio_min, vector):
    return dict(group="polybench", case=case, c_ms=1.0, llvm_ms=1.0 / ratio, c_min_ms=1.0,
                llvm_min_ms=1.0 / ratio_min, llvm_over_c=ratio, llvm_over_c_min=ratio_min,
                vector=vector)


def test_summary_lists_cases_below_0_9_with_vector_status():
    rows = [_row("fast", 1.2, 1.1, "1/1 widened"),
            _row("slow-scalar", 0.6, 0.7, "-"),
            _row("slow-min-only", 0.95, 0.85, "0/1 widened; not: a triangular bound"),
            {"group": "fuzz", "case": "broken", "error": "C and LLVM results differ"}]
    text = summary(rows)
    below = text.split("below 0.9 (medians or minimums; ", 1)[1]
    assert below.startswith("2)")
    listed = below.splitlines()[1:3]
    assert "slow-scalar" in listed[0] and "no vector loop (scalar nest)" in listed[0]
    assert "slow-min-only" in listed[1] and "not: a triangular bound" in listed[1]
    assert "fast" not in below.split("\n  polybench:")[0].split("with their vector loops:")[1]
    assert text.startswith("3 cases (1 with errors)")


def test_polybench_group_is_the_legality_suite_scaled_up():
    """The polybench group: every legal schedule of the legality suite (a
    test module), on the examples' kernels at the suite's sizes x2 (--quick),
    time steps kept; a case's schedule compiles and gives the reference."""
    cases = {c.name: c for c in polybench_cases(quick=True)}
    assert len(cases) == sum(map(len, legality.LEGAL.values()))
    case = cases["jacobi-1d-skew2_shift1_tile"]
    args = case.args()
    assert args["A"].shape == (2 * 23,) and args["TSTEPS"] == 5
    arrays = {n: v for n, v in args.items() if isinstance(v, np.ndarray)}
    out = case.build().compile()(**{n: a.copy() for n, a in arrays.items()}, TSTEPS=5)
    for name, want in SUITE["jacobi-1d"].at(N=2 * 23).reference(arrays).items():
        np.testing.assert_allclose(out[name], want, rtol=1e-12)

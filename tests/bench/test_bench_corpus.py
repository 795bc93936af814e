"""The parity corpus's summary (bench/corpus.py): the acceptance asks to list
every case below 0.9x LLVM/C with the reason (its vector-loop status)."""
from bench.corpus import summary


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

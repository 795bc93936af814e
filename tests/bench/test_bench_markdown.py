"""docs/performance.md's sections (bench.markdown): a run replaces the
section of its suite and machine and keeps the others."""
from bench import markdown


def test_a_run_replaces_its_own_section_and_keeps_the_others(tmp_path):
    page = tmp_path / "performance.md"
    markdown.update(str(page), "gemm", "CPU A, 2 cores", "tiramisu-py bench gemm", "old table")
    markdown.update(str(page), "conv", "CPU A, 2 cores", "tiramisu-py bench conv", "conv table")
    markdown.update(str(page), "gemm", "GPU B", "python -m bench.bench_cuda", "gpu table")
    markdown.update(str(page), "gemm", "CPU A, 2 cores", "tiramisu-py bench gemm", "new table")
    text = page.read_text()
    assert text.startswith("# Performance")
    assert markdown.sections(str(page)) == ["gemm | CPU A, 2 cores", "conv | CPU A, 2 cores",
                                            "gemm | GPU B"]
    assert "new table" in text and "old table" not in text
    assert "conv table" in text and "gpu table" in text


def test_what_a_suite_prints_is_kept(capsys):
    with markdown.captured() as tee:
        print("a table")
    assert tee.copy.getvalue() == "a table\n" and capsys.readouterr().out == "a table\n"


def test_the_recorded_command_line_names_only_what_was_given():
    """The page quotes each run's command: the contention suite's --busy only
    for that suite, and only when it is not the default."""
    import argparse
    from bench import suites

    def command(*argv):
        args = suites.parser("tiramisu-py bench").parse_args(list(argv))
        return suites._command(argparse.Namespace(**{**vars(args), "suite": argv[0]}))
    assert command("peers", "--threads", "2") == "tiramisu-py bench peers --threads 2"
    assert command("contention") == "tiramisu-py bench contention"
    assert command("contention", "--busy", "2") == "tiramisu-py bench contention --busy 2"
    assert command("contention", "--first", "tiramisu_py") == \
        "tiramisu-py bench contention --first tiramisu_py"
    assert command("contention", "--first", "torch") == "tiramisu-py bench contention"

"""The command line refuses bad arguments clearly and early (issue 52): a
time budget that is not a finite number > 0, sizes whose arrays cannot fit
in memory, a param given twice, an output path that cannot be written (all
checked before any work, exit status 2 where argparse's rules apply), and
``tune --help`` shows the ``FILE:FUNC`` form's options too.  Each through
``main(argv)``, as the ``tiramisu-py`` script calls it; nothing is timed."""
from repo_paths import ROOT
import math
import os

import pytest

import schedules
import tiramisu_py as tp
import tiramisu_py_command as cli
from tiramisu_py import cli as language_cli

GEMM = os.path.join(ROOT, "examples", "gemm.py") + ":build"
JACOBI = os.path.join(ROOT, "examples", "jacobi1d.py") + ":build"


def _exit(argv, capsys):
    """(exit status, stderr) of ``tiramisu-py ARGV`` that exits."""
    with pytest.raises(SystemExit) as e:
        cli.main(argv)
    code = e.value.code
    err = capsys.readouterr().err
    return (code, err) if isinstance(code, int) else (1, err + str(code))


@pytest.mark.parametrize("budget", ["nan", "inf", "-inf", "0", "-3", "soon"])
@pytest.mark.parametrize("form", [[], [GEMM, "-p", "N=4", "-p", "M=4", "-p", "K=4"]])
def test_a_budget_must_be_finite_and_positive(budget, form, capsys):
    code, err = _exit(["tune", *form, f"--budget={budget}"], capsys)
    assert code == 2 and f"argument --budget: expected a finite number of seconds > 0, got " \
        f"'{budget}'" in err


def test_the_tuning_functions_refuse_such_budgets_too():
    f = tp.Function("f", params=["N"])
    for budget in (math.nan, math.inf):
        with pytest.raises(ValueError, match="budget must be a finite positive number"):
            tp.tune(f, budget=budget, params={"N": 4})
        with pytest.raises(ValueError, match="budget must be a finite positive number"):
            schedules.tune_library("gemm", budget=budget)


def test_sizes_beyond_memory_are_refused_naming_the_params(capsys):
    code, err = _exit(["tune", GEMM, "-p", "N=100000000000", "-p", "M=4", "-p", "K=4"], capsys)
    assert code == 1
    assert "tiramisu-py tune: -p N=100000000000 -p M=4 -p K=4: the arrays of 'gemm' would take" \
        in err and "A(N, K) = (100000000000, 4)" in err and "give smaller sizes" in err


@pytest.mark.parametrize("argv", [["draw", JACOBI, "--params", "T=2,T=3"],
                                  ["tune", GEMM, "-p", "N=4", "-p", "N=5"]])
def test_a_param_given_twice_is_refused_naming_it(argv, capsys):
    code, err = _exit(argv, capsys)
    option = "--params" if argv[0] == "draw" else "-p"
    assert code == 1 and f"{option} gives {'T' if argv[0] == 'draw' else 'N'} twice" in err


def test_draw_into_a_missing_folder_is_a_usage_error(tmp_path, capsys):
    out = tmp_path / "missing" / "x.png"
    code, err = _exit(["draw", JACOBI, "--params", "T=2,N=6", "--out", str(out)], capsys)
    assert code == 2 and f"argument --out: cannot write '{out}': No such file or directory" \
        in err and "Traceback" not in err


def test_bench_checks_its_output_paths_before_the_run(tmp_path, capsys, monkeypatch):
    from bench import harness
    monkeypatch.setattr(harness, "run", lambda *a, **k: pytest.fail("the run started"))
    for option in ("--json", "--png"):
        path = tmp_path / "missing" / "out"
        code, err = _exit(["bench", "gemm", "--quick", option, str(path)], capsys)
        assert code == 2 and f"argument {option}: cannot write '{path}'" in err
    assert language_cli.writable_path(str(tmp_path / "ok.json")) and not os.listdir(tmp_path)


def test_tune_help_shows_both_forms(capsys):
    with pytest.raises(SystemExit) as e:
        cli.main(["tune", "--help"])
    out = capsys.readouterr().out
    assert e.value.code == 0
    assert "--sizes" in out and "FILE:FUNC" in out and "-p NAME=INT, --param NAME=INT" in out \
        and "--target {cpu,llvm}" in out


def test_one_command_table_and_the_language_alone():
    """``tiramisu-py`` runs every floor's commands from the one module at the
    top (tiramisu_py_command); ``python -m tiramisu_py`` runs the language's
    alone and imports nothing above it (no schedules, bench or examples)."""
    import subprocess
    import sys
    assert [c.name for c in cli.COMMANDS] == ["demo", "example", "draw", "bench", "tune"]
    assert [c.name for c in language_cli.COMMANDS] == ["draw", "tune"]
    code = ("import sys\n"
            "from tiramisu_py import cli\n"
            "cli.main(['tune', '--list'])\n"
            "print('above:', sorted({m.split('.')[0] for m in sys.modules} & "
            "{'schedules', 'bench', 'examples', 'tiramisu_py_command'}))\n")
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=ROOT,
                       env={**os.environ, "PYTHONPATH": ROOT}, timeout=120)
    assert r.returncode == 0, r.stderr
    assert "tiramisu_py.tune records (" in r.stdout and "library parameter" not in r.stdout
    assert r.stdout.rstrip().endswith("above: []")
    r = subprocess.run([sys.executable, "-m", "tiramisu_py", "demo"], capture_output=True,
                       text=True, cwd=ROOT, env={**os.environ, "PYTHONPATH": ROOT}, timeout=120)
    assert r.returncode == 2 and "invalid choice: 'demo'" in r.stderr


def test_tune_grain_goes_to_the_grain_in_both_command_lines(monkeypatch):
    """``tune grain`` measures the parallel grain through ``tiramisu-py``
    (the library's op names) and ``python -m tiramisu_py`` (the language's
    form) alike; ``tune all`` includes it."""
    calls = []
    monkeypatch.setattr(language_cli, "tune_grain", lambda dry_run=False: calls.append(dry_run))
    assert cli.main(["tune", "grain", "--dry-run"]) == 0
    assert language_cli.main(["tune", "grain", "--dry-run"]) == 0
    assert language_cli.main(["tune", "grain"]) == 0
    assert calls == [True, True, False]

"""The API reference (``docs/api``: autodoc of the public names of
``tiramisu_py`` and ``schedules``, and the user guide through myst-parser)
builds with warnings as errors: a docstring whose markup breaks, a guide link
to a missing page or a public name that no longer imports fails here.  And
docs/DESIGN.md stays a design of at most 600 lines."""
from repo_paths import ROOT as CHECKOUT
import importlib.util
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(CHECKOUT)


@pytest.mark.skipif(importlib.util.find_spec("sphinx") is None
                    or importlib.util.find_spec("myst_parser") is None,
                    reason="sphinx and myst-parser are not installed (pip install -e '.[docs]')")
def test_api_reference_builds_without_warnings(tmp_path):
    env = dict(os.environ, PYTHONPATH=os.pathsep.join(
        [str(ROOT)] + [p for p in os.environ.get("PYTHONPATH", "").split(os.pathsep) if p]))
    r = subprocess.run([sys.executable, "-m", "sphinx", "-W", "--keep-going", "-q", "-b", "html",
                        "-d", str(tmp_path / "doctrees"), str(ROOT / "docs" / "api"),
                        str(tmp_path / "html")],
                       capture_output=True, text=True, env=env, timeout=600)
    assert r.returncode == 0, r.stdout + r.stderr
    index = (tmp_path / "html" / "index.html").read_text()
    for anchor in ("tiramisu_py.Function.compile", "tiramisu_py.Computation.parallelize",
                   "tiramisu_py.Kernel", "schedules.conv2d", "schedules.CSRWeights"):
        assert f'id="{anchor}"' in index, anchor
    assert (tmp_path / "html" / "guide" / "first-kernel.html").exists()


DESIGN_MAX_LINES = 600


def test_design_stays_a_design():
    """docs/DESIGN.md is the design (what is, and why), at most 600 lines:
    the rules as built go to docs/internals/, measurements to
    docs/performance.md, history to CHANGELOG.md.  Every docs/internals/
    page it points at exists."""
    text = (ROOT / "docs" / "DESIGN.md").read_text()
    lines = text.count("\n")
    assert lines <= DESIGN_MAX_LINES, (
        f"docs/DESIGN.md has {lines} lines (at most {DESIGN_MAX_LINES}): move the detail "
        f"to the matching docs/internals/ page and point there")
    pages = set(re.findall(r"docs/internals/([\w-]+\.md)", text))
    assert pages, "DESIGN.md points at no docs/internals/ page"
    missing = sorted(p for p in pages if not (ROOT / "docs" / "internals" / p).exists())
    assert not missing, f"docs/DESIGN.md points at missing pages: {missing}"

"""Every ```python block of the user guide (``docs/guide/*.md``) runs here.

One test per block, named ``page.md:N`` (N counts the page's python blocks
from 1).  The blocks of a page run in order in one namespace, as a reader
would type them; asking for block N runs the blocks before it first.  A
block whose first line is ``# needs: torch`` (or ``cuda-device``, ``matplotlib``,
``mpi4py``, or
several: ``# needs: torch, schedules.nn``) is skipped with the reason where
a need is not met; the guide keeps the
blocks that do not need it independent of it.  Each block runs with the
process environment restored afterwards (a block that sets
``TIRAMISU_PY_HOST`` affects only itself), in the session's fresh compile
cache (conftest.py).
"""
from repo_paths import ROOT
import importlib.util
import os
import re
import sys
import types
from pathlib import Path

import pytest

GUIDE = Path(ROOT) / "docs" / "guide"
pytestmark = pytest.mark.usefixtures("find_timed")      # the library as a reader runs it
FENCE = re.compile(r"^```python[ \t]*\n(.*?)^```[ \t]*$", re.M | re.S)
NEEDS = re.compile(r"\A#\s*needs:\s*(.+?)\s*$", re.M)
KNOWN_NEEDS = ("torch", "cuda-device", "schedules.nn", "matplotlib", "mpi4py")


def blocks(page: Path):
    """[(line, code, needs)] of the page's python blocks."""
    text = page.read_text()
    out = []
    for m in FENCE.finditer(text):
        code = m.group(1)
        first = NEEDS.match(code)
        needs = tuple(n.strip() for n in first.group(1).split(",")) if first else ()
        out.append((text.count("\n", 0, m.start(1)) + 1, code, needs))
    return out


def _has_cuda_device():
    if importlib.util.find_spec("cuda") is None:
        return False
    from codegen.cuda.runtime import NoCudaDriverError, driver
    try:
        driver()
    except NoCudaDriverError:
        return False
    return True


def missing(need):
    """Why ``need`` is not met here, or None."""
    if need == "torch":
        return None if importlib.util.find_spec("torch") else "torch is not installed"
    if need == "cuda-device":
        return None if _has_cuda_device() else "no CUDA device (driver and cuda-python)"
    if need == "matplotlib":
        return None if importlib.util.find_spec("matplotlib") else \
            "matplotlib is not installed (pip install tiramisu_py[draw])"
    if need == "mpi4py":
        return None if importlib.util.find_spec("mpi4py") else \
            "mpi4py is not installed (pip install tiramisu_py[mpi])"
    if need == "schedules.nn":
        return None if importlib.util.find_spec("schedules.nn") else \
            "schedules.nn is not importable"
    raise ValueError(f"unknown '# needs:' {need!r}; known: {', '.join(KNOWN_NEEDS)}")


PAGES = sorted(GUIDE.glob("*.md"))
CASES = [(page, k) for page in PAGES for k in range(len(blocks(page)))]


class _Page:
    """A page's namespace and how far it has run."""

    def __init__(self, page):
        self.page, self.blocks = page, blocks(page)
        # a real module in sys.modules, as a reader's script would be: torch.compile
        # (dynamo, torch 2.11) imports a function's module by name to read its globals
        self.module = types.ModuleType(f"guide_{page.stem.replace('-', '_')}")
        self.namespace = self.module.__dict__
        self.done = 0               # blocks run (or skipped) so far
        self.failed = None          # the first block that failed

    def run(self, k):
        """Runs blocks ``done .. k``; returns the skip reason of block k, or None."""
        if self.failed is not None and self.failed < k:
            pytest.fail(f"{self.page.name}: block {self.failed + 1} failed before this one")
        reason = None
        while self.done <= k:
            line, code, needs = self.blocks[self.done]
            reasons = [r for r in map(missing, needs) if r]
            reason = reasons[0] if reasons else None
            if reason is None:
                sys.modules[self.module.__name__] = self.module
                env = dict(os.environ)
                cwd = os.getcwd()
                try:
                    exec(compile(code, f"{self.page}:{line}", "exec"), self.namespace)
                except BaseException:
                    self.failed = self.done
                    self.done += 1
                    raise
                finally:
                    os.environ.clear()
                    os.environ.update(env)
                    os.chdir(cwd)
            self.done += 1
        return reason


_STATE: dict = {}


@pytest.mark.parametrize("page,k", CASES, ids=[f"{p.name}:{k + 1}" for p, k in CASES])
def test_guide_block(page, k):
    state = _STATE.get(page)
    if state is None or k < state.done:     # (or already run for a later block, e.g. under -k)
        state = _STATE[page] = _Page(page)
    reason = state.run(k)
    if reason:
        pytest.skip(reason)


def test_the_guide_has_its_pages():
    names = {p.name for p in PAGES}
    for name in ("index.md", "first-kernel.md", "scheduling.md", "library.md", "torch.md",
                 "sparse.md", "rnn.md", "cuda.md", "tuning.md", "mpi.md"):
        assert name in names, name
    for page in PAGES:
        for line, code, needs in blocks(page):
            for need in needs:
                assert need in KNOWN_NEEDS, f"{page.name}:{line}: unknown need {need!r}"


def test_the_index_links_every_page():
    index = (GUIDE / "index.md").read_text()
    for page in PAGES:
        if page.name != "index.md":
            assert f"({page.name})" in index, page.name

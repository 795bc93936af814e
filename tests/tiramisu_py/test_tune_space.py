"""The tuner's default space (tiramisu_py/driver/tune_space.py): the knobs
the auto-scheduler consulted, varied around its values and ranked by the
cost model; the options that set them; ``tune``'s report of what it tried."""
from __future__ import annotations

import numpy as np
import pytest

import tiramisu_py as tp
from codegen import target as host
from tests.auto_kernels import build_mm
from tiramisu_py.driver import tune as tune_mod, tune_space
from tiramisu_py.driver.auto_schedule import AutoScheduler

F32 = tp.float32


def gemm(n=1024):
    f = tp.Function(f"gemm{n}", params={"N": n})
    i, j, k = (f.var(v, 0, "N") for v in "ijk")
    A, B = f.input("A", ("N", "N"), F32), f.input("B", ("N", "N"), F32)
    C = f.computation("C", [i, j], 0.0, dtype=F32)
    C[i, j] += A[i, k] * B[k, j]
    return f


def conv(co=64, w=56):
    f = tp.Function("conv", params={"N": 2, "CI": 16, "CO": co, "H": 8, "W": w})
    n, o, y, x = f.var("n", 0, "N"), f.var("o", 0, "CO"), f.var("y", 0, "H"), f.var("x", 0, "W")
    c, ky, kx = f.var("c", 0, "CI"), f.var("ky", 0, 3), f.var("kx", 0, 3)
    inp = f.input("inp", ("N", "CI", "H + 2", "W + 2"), F32)
    wt = f.input("w", ("CO", "CI", 3, 3), F32)
    out = f.computation("out", [n, o, y, x], 0.0, dtype=F32)
    out[n, o, y, x] += wt[o, c, ky, kx] * inp[n, c, y + ky, x + kx]
    return f


def test_probe_names_the_knobs_the_rules_consulted():
    used = tune_space.probe(gemm(), "c")
    assert {"tile", "mr", "nv"} <= set(used) and "time_tile" not in used
    assert used["extents"] == (1024, 1024)
    dot = tp.Function("dot", params={"N": 512})
    i, j = f_vars = dot.var("i", 0, "N"), dot.var("j", 0, "N")
    A, x = dot.input("A", ("N", "N"), F32), dot.input("x", ("N",), F32)
    y = dot.computation("y", [i], 0.0, dtype=F32)
    y[i] += A[i, j] * x[j]
    assert "mr" not in tune_space.probe(dot, "c") and len(f_vars) == 2


def test_candidates_vary_the_consulted_knobs_ranked_by_the_model():
    ranked = tune_space.candidates(gemm(), "c")
    assert ranked[0] == ({}, 1.0)                       # the auto schedule first
    opts = [o for o, _ in ranked]
    assert len(opts) == len({tuple(sorted(o.items())) for o in opts})     # no twice
    preds = [p for _, p in ranked[1:]]
    assert preds == sorted(preds)
    regs = host.vector_registers()
    blocks = [(o["mr"], o["nv"]) for o in opts if "mr" in o]
    assert blocks and all(mr * nv + nv + 1 <= regs for mr, nv in blocks)
    assert any("tile" in o and "mr" not in o for o in opts)
    assert {"vectorize": False} in opts and {"schedule": "dynamic"} in opts
    assert {"schedule": "dynamic"} not in [o for o, _ in tune_space.candidates(gemm(), "llvm")]
    # the model: a block that spills predicts slower; a tile far past the L2 too
    used = tune_space.probe(gemm(), "c")
    assert tune_space.predicted({"mr": 8, "nv": 4}, used) > 1.5
    assert tune_space.predicted({"tile": 4096}, used) > tune_space.predicted({"tile": 64}, used)


@pytest.mark.parametrize("pin", ["", "vector_bits=512,vector_registers=32"])
def test_a_block_leaving_remainders_in_a_short_loop_is_not_a_candidate(pin, monkeypatch):
    """64 output channels: rows of 7 or 12 would leave a partial block in
    every tile (7 MB of C for one of them); rows that divide 64 stay.  On
    this host and on one of 32 registers (pinned: only scheduled, nothing
    compiled), where other blocks fit (16 registers hold no block of
    ``BLOCKS`` but the auto schedule's 4 x 2 and 2 x 4)."""
    monkeypatch.setenv("TIRAMISU_PY_HOST", pin)
    used = tune_space.probe(conv(), "c")
    assert used["extents"] == (64, 56)
    rows = {o["mr"] for o, _ in tune_space.candidates(conv(), "c") if "mr" in o}
    assert all(64 % r == 0 or 64 >= 16 * r for r in rows)
    assert not rows & {5, 7, 12, 14}
    if host.vector_registers() >= 32:
        assert rows


def test_register_block_options_set_the_block_and_stay_exact(uncontracted):
    f = gemm(512)                   # tiled (its arrays exceed the L2): register-blocked
    steps = [str(s) for s in AutoScheduler(f, "c", None, {"mr": 4, "nv": 2}).run()]
    lanes = host.vector_bits() // 32
    assert f"f.computations['C'].update.split('j1', {2 * lanes})" in steps
    assert "f.computations['C'].update.split('i1', 4)" in steps
    rng = np.random.default_rng(0)
    A, B = (rng.standard_normal((512, 512)).astype(np.float32) for _ in range(2))
    got = f.compile("c")(A=A, B=B)
    np.testing.assert_array_equal(got, gemm(512).compile("c", tuned=False)(A=A, B=B))


def test_unknown_auto_schedule_options_are_refused_by_name():
    with pytest.raises(ValueError, match="unknown option.*rows"):
        AutoScheduler(gemm(), "c", None, {"rows": 4})


def test_tune_reports_every_candidate_tried_or_not(tmp_path, monkeypatch):
    monkeypatch.setenv("TIRAMISU_PY_CACHE", str(tmp_path / "cache"))
    sizes = {"N": 40, "M": 36, "K": 20}
    ranked = tune_space.candidates(build_mm(), "c")
    r = tp.tune(build_mm(), params=sizes, budget=1e-6, repeats=1, progress=False,
                dry_run=True, target="c")
    tried = r["tried"]
    assert tried[0]["candidate"] == "auto_schedule's own"
    assert len(tried) == len(ranked) and [t["predicted"] for t in tried] == [p for _, p in ranked]
    assert tried[0]["ms"] > 0 and tried[0]["note"] == "timed"       # the first always runs
    assert all(t["note"] == "not tried (budget spent)" and t["ms"] is None for t in tried[1:])
    text = tune_mod.report(r)
    assert text.count("\n") == len(tried) + 1 and "predicted" in text.splitlines()[0]
    # a longer budget: each timed, the same schedule named, or refused with why
    r = tp.tune(build_mm(), params=sizes, budget=60, repeats=1, progress=False, dry_run=True,
                target="c", space=[{}, {"tile": 8}, {"tile": 8}, {"fuse": False}])
    notes = [t["note"] for t in r["tried"]]
    assert notes[2] == "the same schedule as candidate 1" and r["tried"][2]["ms"] is None
    assert all(t["predicted"] is None for t in r["tried"])           # a space given: no model
    assert sum(n.startswith("finalist") for n in notes) >= 2          # timed again in turns


def test_tune_copies_only_what_the_kernel_reads_and_writes(tmp_path, monkeypatch):
    """A timed call copies only the arrays the kernel writes and also reads
    (an output updated in place): an input is read as given (bmv's 134 MB
    matrix had been most of what was timed), and so is an output only
    written (GEMM's ``C``, which its initialisation writes before the
    update reads it; a stencil's 64 MB output copied per call had been half
    of what was timed)."""
    monkeypatch.setenv("TIRAMISU_PY_CACHE", str(tmp_path / "cache"))
    seen = []
    monkeypatch.setattr(tune_mod, "compile_function", lambda g, target: (
        lambda **kw: seen.append(kw)))
    sizes = {"N": 8, "M": 6, "K": 4}
    A, B, C = np.ones((8, 4)), np.ones((4, 6)), np.zeros((8, 6))
    tp.tune(build_mm(), params=sizes, inputs={"A": A, "B": B, "C": C}, space=[{}], budget=5,
            repeats=1, progress=False, dry_run=True, target="c")
    assert seen and all(kw["A"] is A and kw["B"] is B and kw["C"] is C for kw in seen)
    f = tp.Function("twice", params={"N": 8})
    i = f.var("i", 0, "N")
    X = f.buffer("X", ("N",), tp.float64, output=True)
    f.computation("s", [i], X[i] * 2.0).store_in(X, [i])
    seen.clear()
    X_ = np.ones(8)
    tp.tune(f, inputs={"X": X_}, space=[{}], budget=5, repeats=1, progress=False,
            dry_run=True, target="c")
    assert seen and all(kw["X"] is not X_ for kw in seen)

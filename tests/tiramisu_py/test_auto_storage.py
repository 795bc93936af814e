"""``auto_schedule`` stores a temporary that its group writes and reads in
one iteration of the loops they share in a buffer of one iteration's
elements (softmax's exponentials, 8 rows at a time: ``e_block``), only where
the whole array would not stay in the L2: the result is bit for bit the
unscheduled kernel's, the printed steps (and a tuning record of them) replay
to the same code, and a temporary read outside its group, or one that fits
in the cache, keeps its array.  No timing is asserted."""
from __future__ import annotations

import json

import numpy as np
import pytest

from examples.beyond_polybench import build_softmax, softmax_reference
from tiramisu_py.driver import tune

SIZES = dict(N=64, M=128)                     # e: 64 KiB of float64


@pytest.fixture
def small_l2(monkeypatch):
    """A host whose L2 (16 KiB) the exponentials exceed, 8 lanes, 2 cores."""
    from codegen import target
    monkeypatch.setattr(target, "cores", lambda: 2)
    monkeypatch.setattr(target, "vector_bits", lambda: 512)
    monkeypatch.setattr(target, "cache_sizes", lambda: {(2, "Unified"): 16 << 10})


def test_softmax_exponentials_live_in_a_block_of_rows(small_l2):
    f = build_softmax(SIZES)
    steps = f.auto_schedule()
    text = [str(s) for s in steps]
    e = "f.computations['e']"
    assert f"{e}.store_in(f.buffer('e_block', (8, 128), {e}.dtype), " \
           f"[{e}.vars[0] % 8, {e}.vars[1]])" in text
    plain = build_softmax(SIZES).compile()
    k = f.compile()
    assert "e_block" in k.source and "(*restrict e)" not in k.source
    X = np.random.default_rng(0).standard_normal((SIZES["N"], SIZES["M"]))
    out = k(X=X)
    np.testing.assert_array_equal(out, plain(X=X))         # the program's order, bit for bit
    np.testing.assert_allclose(out, softmax_reference({"X": X})["out"], rtol=1e-12)
    g = build_softmax(SIZES)
    exec("\n".join(text), {"f": g})                          # the printed schedule, pasted
    assert g.compile().source == k.source
    record = json.loads(json.dumps({"steps": tune.encoded(steps)}))   # as the store keeps it
    assert "f.buffer" not in json.dumps(record)                        # data, not code
    h = build_softmax(SIZES)
    tune.apply_record(h, record)
    assert h.schedule_commands() == f.schedule_commands()


@pytest.mark.parametrize("code", [
    {"buffer": "e_block", "shape": [8, "__import__('os')"], "dtype_of": ["computations", "e"]},
    {"buffer": "x); import os; (", "shape": [8], "dtype_of": ["computations", "e"]},
    {"buffer": "b", "shape": [8], "dtype_of": ["globals", "e"]},
    {"index_of": "e", "terms": [[0, "+", 1]]},
    {"index_of": "e", "terms": [[0, "%", True]]},
    {"index_of": "e", "terms": ["f.computations['e'].vars[0]"]},
    "f.buffer('e_block', (8,), f.computations['e'].dtype)"])
def test_a_damaged_record_of_a_buffer_or_index_is_refused(code):
    f = build_softmax(SIZES)
    with pytest.raises(ValueError, match="not"):
        tune.apply_record(f, {"steps": [{"stmt": "e", "verb": "store_in",
                                         "args": [{"code": code}], "kwargs": {}}]})


def test_a_temporary_that_fits_in_the_cache_keeps_its_array(small_l2):
    f = build_softmax(dict(N=16, M=64))                      # e: 8 KiB
    assert not [s for s in f.auto_schedule() if s.verb == "store_in" and "'e'" in str(s)]


def test_a_temporary_read_by_a_later_nest_keeps_its_array(small_l2):
    """``e`` read again by a statement after the row loop (its own nest): a
    block of rows would no longer hold what that statement reads."""
    import tiramisu_py as tp
    f = build_softmax(SIZES)
    i, j = f.var("i2", 0, "N"), f.var("j2", 0, "M")
    e = f.computations["e"]
    total = f.computation("total", [], 0.0, dtype=tp.float64)
    total[()] += e[i, j]
    assert not [s for s in f.auto_schedule() if s.verb == "store_in" and s.stmt == "e"]
    X = np.random.default_rng(1).standard_normal((SIZES["N"], SIZES["M"]))
    got = f.compile()(X=X)
    ex = np.exp(X - X.max(axis=1, keepdims=True))
    np.testing.assert_allclose(got["total"], ex.sum(), rtol=1e-12)


def test_tune_times_and_records_a_candidate_with_a_block(small_l2, tmp_path, monkeypatch):
    """``tp.tune`` takes the auto-scheduler's candidate with its block (no
    longer refused as code to evaluate), and its record replays it."""
    monkeypatch.setenv("TIRAMISU_PY_CACHE", str(tmp_path / "cache"))
    f = build_softmax(SIZES)
    out = tune.tune(f, space=[{}], budget=30, repeats=1, progress=False, dry_run=True)
    assert not out["rejected"], out["rejected"]
    assert any(s.verb == "store_in" and s.stmt == "e" for s in out["candidate"])
    record = json.loads(json.dumps({"steps": tune.encoded(out["candidate"])}))
    g = build_softmax(SIZES)
    tune.apply_record(g, record)
    X = np.random.default_rng(2).standard_normal((SIZES["N"], SIZES["M"]))
    np.testing.assert_array_equal(g.compile()(X=X), build_softmax(SIZES).compile()(X=X))


@pytest.fixture
def small_llc(monkeypatch):
    """A host whose last-level cache (64 KiB) a 128 KiB output exceeds."""
    from codegen import target
    monkeypatch.setattr(target, "cores", lambda: 2)
    monkeypatch.setattr(target, "vector_bits", lambda: 512)
    monkeypatch.setattr(target, "cache_sizes", lambda: {(2, "Unified"): 16 << 10,
                                                        (3, "Unified"): 64 << 10})


def _scaled(n=128, m=256, read_again=False):
    import tiramisu_py as tp
    f = tp.Function("scaled", params={"N": n, "M": m})
    i, j = f.var("i", 0, "N"), f.var("j", 0, "M")
    A = f.input("A", ("N", "M"), tp.float32)
    f.computation("out", [i, j], A[i, j] * 2 + 1)
    if read_again:
        i2, j2 = f.var("i2", 0, "N"), f.var("j2", 0, "M")
        total = f.computation("total", [], 0.0, dtype=tp.float32)
        total[()] += f.computations["out"][i2, j2]
    return f


@pytest.mark.parametrize("target", ["c", "llvm"])
def test_a_large_output_written_once_is_streamed_past_the_caches(small_llc, target):
    f = _scaled()
    steps = f.auto_schedule(target=target)
    text = [str(s) for s in steps]
    assert "f.computations['out'].store_nontemporal()" in text
    A = np.random.default_rng(3).standard_normal((128, 256)).astype(np.float32)
    k = f.compile(target=target)
    np.testing.assert_array_equal(k(A=A), _scaled().compile(target=target)(A=A))
    g = _scaled()
    exec("\n".join(text), {"f": g})                          # the printed schedule, pasted
    assert g.compile(target=target).source == k.source
    record = json.loads(json.dumps({"steps": tune.encoded(steps)}))   # as the store keeps it
    r = _scaled()
    tune.apply_record(r, record)                              # (the verb had been refused)
    assert r.schedule_commands() == f.schedule_commands()
    from tiramisu_py.driver import tune_space
    assert ({"stream": False}, tune_space.SWITCH_COST["stream"]) in \
        tune_space.candidates(_scaled(), target)
    from tiramisu_py.driver.auto_schedule import auto_schedule
    h = _scaled()
    auto_schedule(h, target=target, options={"stream": False})    # what tune varies
    assert "store_nontemporal" not in " ".join(h.schedule_commands())


def test_half_line_vectors_stream_on_llvm_only(small_llc, monkeypatch):
    """With 256-bit vectors (AVX2: half a cache line of float32) the C
    target's streamed rows are assembled line by line, slower than cached
    stores (a stencil's output on Zen 3: 9.6 vs 3.7 ms): C does not stream
    there, LLVM (3.8 ms streamed) does."""
    from codegen import target
    monkeypatch.setattr(target, "vector_bits", lambda: 256)
    for tgt, streamed in (("c", False), ("llvm", True)):
        steps = [str(s) for s in _scaled().auto_schedule(target=tgt)]
        assert ("f.computations['out'].store_nontemporal()" in steps) == streamed, (tgt, steps)


def test_an_output_read_again_or_in_cache_is_not_streamed(small_llc):
    for f in (_scaled(read_again=True), _scaled(n=16, m=64)):
        assert not [s for s in f.auto_schedule() if s.verb == "store_nontemporal"]
    from tiramisu_py.driver import tune_space
    assert ({"stream": False}, tune_space.SWITCH_COST["stream"]) not in \
        tune_space.candidates(_scaled(n=16, m=64), "c")


def test_a_stencil_output_from_an_offset_domain_is_streamed(small_llc):
    """The 5-point stencil's default buffer, its domain from 1: written at
    ``[i - 1, j - 1]``, each element once."""
    import tiramisu_py as tp

    def stencil():
        f = tp.Function("st", params={"N": 130, "M": 200})
        i, j = f.var("i", 1, "N - 1"), f.var("j", 1, "M - 1")
        A = f.input("A", ("N", "M"), tp.float32)
        f.computation("out", [i, j], (A[i - 1, j] + A[i + 1, j] + A[i, j - 1] + A[i, j + 1]
                                      + A[i, j]) / 5)
        return f
    f = stencil()
    assert "f.computations['out'].store_nontemporal()" in [str(s) for s in f.auto_schedule()]
    A = np.random.default_rng(4).standard_normal((130, 200)).astype(np.float32)
    np.testing.assert_array_equal(f.compile()(A=A), stencil().compile()(A=A))


def test_a_users_candidate_that_streams_is_recorded(tmp_path, monkeypatch):
    monkeypatch.setenv("TIRAMISU_PY_CACHE", str(tmp_path / "cache"))

    def streamed(g):
        out = g.computations["out"]
        out.vectorize("j", 16)
        out.store_nontemporal()
    r = tune.tune(_scaled(n=16, m=64), space=[streamed], budget=5, repeats=1, progress=False,
                  dry_run=True, target="c")
    assert "f.computations['out'].store_nontemporal()" in [str(s) for s in r["candidate"]]

"""The tuning store (tiramisu_py.tuning.database) and the conv find step on it: no
record is lost by concurrent processes or threads, no reader sees a partial
value, a damaged store is reported once and repaired, a read-only directory
gives an in-memory store; no user call raises.  Timing is simulated (the
real ``schedules.core.find.choose`` with a no-op run), except one real
``conv2d(algo="auto")`` per child in the first round."""
from repo_paths import ROOT
import json
import os
import random
import sqlite3
import subprocess
import sys
import textwrap
import threading
import warnings
from pathlib import Path

import pytest

from schedules.core import find
from schedules.problems.conv import ConvProblem, ConvShape
from tiramisu_py import tuning

PROCS, KEYS, ROUNDS, THREADS = 8, 2, 5, 8
CANDIDATES = ["direct", "im2col", "spatial_pack"]
TIMED = [a for a in CANDIDATES for _ in (0, 1)]     # warm-up + one timed run each


@pytest.fixture
def cache(tmp_path, monkeypatch):
    """A fresh cache directory for the default store, closed afterwards."""
    d = tmp_path / "cache"
    d.mkdir()
    monkeypatch.setenv("TIRAMISU_PY_CACHE", str(d))
    yield d
    tuning.close()


def conv_key(tag, j):
    """A real conv2d find key, distinct per (tag, j)."""
    return find.key(ConvProblem("conv2d", ConvShape(1, 1 + tag, 4, 4, 1 + j, 3, 3, 1, 1, 1, 1),
                                False, "llvm"))


def choose(key, calls=None):
    """The find step with a simulated run (counted in ``calls``)."""
    def run(algo):
        if calls is not None:
            calls.append(algo)
    return find.choose(key, CANDIDATES, run, 1)


def store_warnings(record):
    return [w for w in record if issubclass(w.category, tuning.TuningStoreWarning)]


# ------------------------------------------------------------------ concurrency
CHILD = textwrap.dedent("""
    import json, os, sys, time, warnings
    warnings.simplefilter("always")
    i, procs, rounds, base = int(sys.argv[1]), int(sys.argv[2]), int(sys.argv[3]), sys.argv[4]
    import numpy as np
    import schedules
    from schedules.core import find
    from schedules.problems.conv import ConvProblem, ConvShape
    from tiramisu_py import tuning

    def barrier(name):
        open(os.path.join(base, f"{name}-{i}"), "w").close()
        deadline = time.time() + 60
        while sum(f.startswith(name + "-") for f in os.listdir(base)) < procs:
            assert time.time() < deadline, "barrier timeout"
            time.sleep(0.01)

    chosen = []
    with warnings.catch_warnings(record=True) as caught:
        for r in range(rounds):
            os.environ["TIRAMISU_PY_CACHE"] = os.path.join(base, f"round{r}")
            barrier(f"go{r}")
            for j in range(2):
                s = ConvShape(1, 1 + i, 4, 4, 1 + j, 3, 3, 1, 1, 1, 1)
                key = find.key(ConvProblem("conv2d", s, False, "llvm"))
                algo = find.choose(key, ["direct", "im2col", "spatial_pack"], lambda a: None, 1)
                chosen.append([r, key, algo])
                tuning.put("test", f"{i}-{j}", {"i": i, "j": j, "pad": "x" * (100 * i)})
                for other in range(procs):       # others' records: absent or whole
                    v = tuning.get("test", f"{other}-{j}")
                    assert v is None or v == {"i": other, "j": j, "pad": "x" * (100 * other)}, v
                    k = find.key(ConvProblem(
                        "conv2d", ConvShape(1, 1 + other, 4, 4, 1 + j, 3, 3, 1, 1, 1, 1), False,
                        "llvm"))
                    rec = find.load(k)
                    assert rec is None or rec["algo"] in rec["seconds"], rec
            if r == 0 and i < 2:                 # one real find step (compile + time)
                x = np.ones((1, 2 + i, 5, 5), np.float32)
                w = np.ones((3, 2 + i, 3, 3), np.float32)
                out = schedules.conv2d(x, w, padding=1, algo="auto")
                assert out.shape == (1, 3, 5, 5) and out[0, 0, 2, 2] == 9 * (2 + i)
                rec = next(v for k, v in find.records().items()
                           if json.loads(k)["shape"]["h"] == 5)     # the real one (h 5, not 4)
                assert set(rec["seconds"]) == {"direct", "spatial_pack"}, rec
        bad = [str(w.message) for w in caught if issubclass(w.category, tuning.TuningStoreWarning)]
        assert not bad, bad
    print("CHOSEN", json.dumps(chosen))
""")


def test_processes_keep_every_record(tmp_path, find_timed):
    """8 processes, 2 conv find records + 2 store records each, started
    together (a barrier) on a fresh store, 5 times: all 16 + 16 kept."""
    env = dict(os.environ, PYTHONPATH=ROOT, OMP_NUM_THREADS="1")
    env.pop("TIRAMISU_PY_CACHE", None)
    procs = [subprocess.Popen([sys.executable, "-c", CHILD, str(i), str(PROCS), str(ROUNDS),
                               str(tmp_path)], env=env, cwd=ROOT, text=True,
                              stdout=subprocess.PIPE, stderr=subprocess.PIPE)
             for i in range(PROCS)]
    chosen = []
    for p in procs:
        out, err = p.communicate(timeout=120)
        assert p.returncode == 0, err
        chosen += json.loads(out.split("CHOSEN", 1)[1])
    for r in range(ROUNDS):
        s = tuning.Store(tmp_path / f"round{r}")
        try:
            finds = s.records(find.KIND)
            expected = {key: algo for rr, key, algo in chosen if rr == r}
            assert len(expected) == PROCS * KEYS
            assert {k: finds[k]["algo"] for k in expected if k in finds} == expected
            assert len(s.records("test")) == PROCS * KEYS
            assert not s.in_memory
        finally:
            s.close()
        assert not list((tmp_path / f"round{r}").glob("*.corrupt-*"))


@pytest.mark.parametrize("round_", range(ROUNDS))
def test_threads_write_and_read_concurrently(cache, round_):
    """8 threads of one process: find steps and direct records, readers in
    between; nothing raises, nothing partial is read, everything is kept."""
    errors, chosen = [], {}
    start = threading.Barrier(THREADS)

    def worker(t):
        rng = random.Random(t + 100 * round_)
        try:
            start.wait()
            for j in range(10):
                key = conv_key(t, j)
                chosen[key] = choose(key)
                tuning.put("test", f"{t}-{j}", {"t": t, "j": j, "data": list(range(t * j))})
                for _ in range(3):
                    o, k = rng.randrange(THREADS), rng.randrange(10)
                    v = tuning.get("test", f"{o}-{k}")
                    assert v is None or v == {"t": o, "j": k, "data": list(range(o * k))}, v
                    rec = find.load(conv_key(o, k))
                    assert rec is None or rec["algo"] in CANDIDATES, rec
        except BaseException as exc:            # noqa: BLE001 - reported below
            errors.append(exc)

    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        threads = [threading.Thread(target=worker, args=(t,)) for t in range(THREADS)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
    assert not errors, errors
    assert not store_warnings(caught)
    records = find.records()
    assert len(chosen) == THREADS * 10
    assert {k: records[k]["algo"] for k in chosen} == chosen
    assert len(tuning.records("test")) == THREADS * 10


def test_forked_child_uses_its_own_connection(cache):
    if not hasattr(os, "fork"):
        pytest.skip("no fork")
    tuning.put("test", "parent", 1)
    pid = os.fork()
    if pid == 0:                                 # pragma: no cover - child
        try:
            tuning.put("test", "child", 2)
            os._exit(0 if tuning.get("test", "parent") == 1 else 1)
        except BaseException:
            os._exit(2)
    assert os.waitpid(pid, 0)[1] == 0
    assert tuning.records("test") == {"parent": 1, "child": 2}


# ------------------------------------------------------------------ damage
def damage_whole(path):
    path.write_bytes(os.urandom(3 * 4096))


def damage_pages(path):
    """A valid header, garbage after it (the records' pages)."""
    data = bytearray(path.read_bytes())
    data[4096:] = os.urandom(len(data) - 4096)
    path.write_bytes(bytes(data))


def damage_schema(path):
    path.unlink()
    db = sqlite3.connect(str(path))
    db.execute("CREATE TABLE records (a, b)")
    db.commit()
    db.close()


def damage_foreign(path):
    path.unlink()
    db = sqlite3.connect(str(path))
    db.execute("CREATE TABLE something (x)")
    db.commit()
    db.close()


@pytest.mark.parametrize("damage", [damage_whole, damage_pages, damage_schema, damage_foreign])
def test_damaged_database_is_reported_once_and_repaired(cache, damage):
    keys = [conv_key(50, j) for j in range(2)]
    for key in keys:
        choose(key)
    for j in range(200):                         # more than one page of records
        tuning.put("test", f"k{j}", {"v": "x" * 50})
    tuning.close()
    db = cache / tuning.DB_FILE
    assert db.exists() and not Path(str(db) + "-wal").exists()
    damage(db)
    damaged = db.read_bytes()
    calls = []
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        for key in keys:                         # re-timed, no exception
            choose(key, calls)
            choose(key, calls)                   # then remembered
        tuning.put("test", "after", 1)
        assert tuning.get("test", "after") == 1
    ws = store_warnings(caught)
    assert len(ws) == 1 and str(db) in str(ws[0].message) and "moved aside" in str(ws[0].message)
    assert calls == TIMED * 2
    aside = [p for p in cache.glob(tuning.DB_FILE + ".corrupt-*")
             if not p.name.endswith(("-wal", "-shm"))]        # (moved along with it)
    assert len(aside) == 1 and aside[0].read_bytes() == damaged
    assert set(find.records()) == set(keys)
    tuning.close()                               # a later process sees the new records
    assert set(find.records()) == set(keys)


BAD_VALUES = ["direct", 3, None, [1, 2], {"algo": 3, "seconds": {}}, {"algo": "direct"},
              {"algo": "direct", "seconds": {"direct": "fast"}}]


def test_record_of_wrong_type_is_ignored_and_retimed(cache):
    keys = [conv_key(60, j) for j in range(len(BAD_VALUES) + 1)]
    for key, value in zip(keys, BAD_VALUES):
        tuning.put(find.KIND, key, value)
    db = sqlite3.connect(str(cache / tuning.DB_FILE))          # not JSON at all
    db.execute("INSERT INTO records VALUES (?, ?, ?, 0, '{}')",
               (find.KIND, keys[-1], '{"algo": "dir'))
    db.commit()
    db.close()
    calls = []
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        for key in keys:
            assert choose(key, calls) in CANDIDATES
        assert len(calls) == len(keys) * len(TIMED)       # each one timed
        for key in keys:
            choose(key, calls)                                   # and now remembered
        assert len(calls) == len(keys) * len(TIMED)
    ws = store_warnings(caught)
    assert len(ws) == 1 and "damaged record" in str(ws[0].message)
    assert set(find.records()) == set(keys)


def test_readonly_directory_works_in_memory(tmp_path, monkeypatch):
    ro = tmp_path / "ro"
    ro.mkdir()
    ro.chmod(0o555)
    try:
        (ro / "probe").touch()                  # root ignores the mode bits
        (ro / "probe").unlink()
        ro = Path("/proc/self")                 # a directory nobody can create files in
        if not ro.is_dir():
            pytest.skip("running as root and no /proc")
    except OSError:
        pass
    import codegen.cache
    monkeypatch.setattr(codegen.cache, "cache_dir", lambda: ro)
    try:
        calls = []
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            key = conv_key(70, 0)
            algo = choose(key, calls)
            assert choose(key, calls) == algo and calls == TIMED   # remembered in memory
            tuning.put("test", "a", [1])
            assert tuning.get("test", "a") == [1]
        ws = store_warnings(caught)
        assert len(ws) == 1 and "in memory" in str(ws[0].message)
        assert tuning.store().in_memory
    finally:
        tuning.close()
        (tmp_path / "ro").chmod(0o755)


def test_unopenable_database_and_no_cache_directory_work_in_memory(tmp_path, monkeypatch):
    (tmp_path / tuning.DB_FILE).mkdir()          # the db's name is taken by a directory
    s = tuning.Store(tmp_path)
    with pytest.warns(tuning.TuningStoreWarning, match="in memory"):
        s.put("test", "a", 1)
    assert s.get("test", "a") == 1 and s.in_memory

    import codegen.cache

    def no_dir():
        raise OSError("no cache here")
    monkeypatch.setattr(codegen.cache, "cache_dir", no_dir)
    monkeypatch.setattr(tuning.database, "_WARNED", set())
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        calls = []
        key = conv_key(71, 0)
        choose(key, calls)
        choose(key, calls)
        assert calls == TIMED
    assert len(store_warnings(caught)) == 1


def test_warnings_as_errors_still_never_raise(cache):
    tuning.put(find.KIND, conv_key(80, 0), "not a record")
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        assert choose(conv_key(80, 0)) in CANDIDATES


def test_newer_schema_is_left_alone(cache):
    tuning.put("test", "a", 1)
    tuning.close()
    db = sqlite3.connect(str(cache / tuning.DB_FILE))
    db.execute(f"PRAGMA user_version = {tuning.SCHEMA_VERSION + 1}")
    db.commit()
    db.close()
    with pytest.warns(tuning.TuningStoreWarning, match="newer"):
        assert tuning.get("test", "a") is None
    tuning.put("test", "b", 2)
    assert tuning.get("test", "b") == 2
    assert not list(cache.glob("*.corrupt-*"))


# ------------------------------------------------------------------ migration
def test_former_find_records_are_retired(cache):
    """The former kinds ("conv_find", "rnn_find", keyed by position) are
    retired: removed from the store on first use, never read; the legacy
    ``conv_find.json`` is not imported; the problem is timed again."""
    old = json.dumps([[1, 1, 4, 4, 1, 3, 3, 1, 1, 1, 1], False, "llvm", 256, 4, "0.1"])
    for kind in find.RETIRED:
        tuning.put(kind, old, {"algo": "im2col", "seconds": {"im2col": 1.0}})
    (cache / "conv_find.json").write_text(json.dumps({conv_key(90, 0): {
        "algo": "im2col", "seconds": {"direct": 2.0, "im2col": 1.0}}}))
    tuning.close()
    find._retired.clear()
    assert find.records() == {}
    assert all(tuning.records(kind) == {} for kind in find.RETIRED)
    assert choose(conv_key(90, 0), calls := []) in CANDIDATES and calls    # timed again
    assert set(find.records()) == {conv_key(90, 0)}


def test_garbage_legacy_json_is_ignored(cache):
    (cache / "conv_find.json").write_bytes(b"\x00garbage{")
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        assert choose(conv_key(91, 0)) in CANDIDATES
    assert not store_warnings(caught)


def test_a_key_that_is_not_a_str_is_refused_and_the_store_stays_usable(cache):
    tuning.put("t_keys", "k", 1)
    for call in (lambda: tuning.get("t_keys", {"k": 1}), lambda: tuning.forget("t_keys", {"k": 1}),
                 lambda: tuning.put("t_keys", {"k": 1}, 2)):
        with pytest.raises(TypeError, match="key must be str"):
            call()
    with warnings.catch_warnings():
        warnings.simplefilter("error")          # (a binding error would read as a broken store)
        assert tuning.get("t_keys", "k") == 1
        tuning.forget("t_keys", "k")
        assert tuning.get("t_keys", "k") is None

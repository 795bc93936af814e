"""The compile cache under hostile or broken conditions (issue 17, items 8, 10, 11):
a cache directory others can write is refused; planted, foreign, symlinked,
FIFO, oversized or directory entries are misses (never loaded, never hang);
the compiler probe accepts only the project's own flags and is re-run when a
stale one breaks a build; a compiler timeout or Ctrl-C kills the compiler's
whole process group; temporaries of a killed process are cleaned up; a
read-only cache still works.  Everything that could hang or run planted code
runs in a child process with a timeout."""
from repo_paths import ROOT
import json
import os
import shutil
import signal
import stat
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest

from codegen import cache, toolchain

GCC = shutil.which("gcc") or shutil.which("cc")
IS_ROOT = os.getuid() == 0
OTHER_UID = 65534
needs_gcc = pytest.mark.skipif(GCC is None, reason="needs a C compiler")
needs_root = pytest.mark.skipif(not IS_ROOT, reason="chown to another uid needs root")

PRELUDE = textwrap.dedent("""
    import json, os, sys, warnings
    import numpy as np
    import tiramisu_py as tp
    import codegen.toolchain as tc
    TARGET = os.environ.get("TP_TARGET", "c")

    def tiny(c=2.0):
        f = tp.Function("tpsec", params=["N"])
        i = f.var("i", 0, "N")
        A = f.input("A", ("N",), tp.float32)
        f.computation("B", [i], A[i] * c)
        return f

    def run(c=2.0):
        k = tiny(c).compile(target=TARGET)
        a = np.arange(5, dtype=np.float32)
        assert np.array_equal(k(a), a * np.float32(c)), (k(a), c)
        return k

    def counter():
        if TARGET == "llvm":
            import codegen.llvm.backend as lb
            return lb.CODEGEN_RUNS
        return tc.COMPILER_INVOCATIONS
""")


def child(code, cache_dir, timeout=120, env=None, argv_prefix=()):
    e = dict(os.environ, TIRAMISU_PY_CACHE=str(cache_dir), PYTHONPATH=ROOT)
    e.update(env or {})
    return subprocess.run([*argv_prefix, sys.executable, "-c", PRELUDE + textwrap.dedent(code)],
                          env=e, capture_output=True, text=True, timeout=timeout, cwd=ROOT)


def child_json(code, cache_dir, **kw):
    r = child(code, cache_dir, **kw)
    assert r.returncode == 0, r.stderr
    return json.loads(r.stdout.strip().splitlines()[-1])


def private(p: Path) -> Path:
    p.mkdir(parents=True, exist_ok=True)
    p.chmod(0o700)
    return p


def gone(pid: int) -> bool:
    """No such process, or a zombie waiting for init."""
    try:
        text = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return True
    return text.rsplit(")", 1)[1].split()[0] == "Z"


def wait_for(pred, timeout=30.0):
    end = time.time() + timeout
    while time.time() < end:
        if pred():
            return True
        time.sleep(0.05)
    return pred()


# ------------------------------------------------------------ item 8: the directory
def test_cache_dir_and_missing_parents_are_created_private(tmp_path, monkeypatch):
    target = tmp_path / "a" / "b" / "c"
    monkeypatch.setenv("TIRAMISU_PY_CACHE", str(target))
    old = os.umask(0)                       # even with a permissive umask
    try:
        assert cache.cache_dir() == target
    finally:
        os.umask(old)
    for d in (tmp_path / "a", tmp_path / "a" / "b", target):
        assert stat.S_IMODE(d.stat().st_mode) == 0o700, d


@pytest.mark.parametrize("mode", [0o770, 0o720, 0o707, 0o777, 0o1777])
def test_group_or_other_writable_cache_dir_is_refused(tmp_path, monkeypatch, mode):
    d = private(tmp_path / "c")
    d.chmod(mode)
    monkeypatch.setenv("TIRAMISU_PY_CACHE", str(d))
    with pytest.raises(cache.UnsafeCacheError) as ei:
        cache.cache_dir()
    msg = str(ei.value)
    assert str(d) in msg and "TIRAMISU_PY_CACHE" in msg
    assert ("sticky" in msg) if mode & 0o1000 else (f"chmod 700 {d}" in msg)
    assert isinstance(ei.value, RuntimeError) and ei.value.path == str(d)


@pytest.mark.parametrize("mode", [0o700, 0o750, 0o755, 0o500])
def test_private_or_read_only_cache_dir_is_accepted(tmp_path, monkeypatch, mode):
    d = private(tmp_path / "c")
    d.chmod(mode)
    monkeypatch.setenv("TIRAMISU_PY_CACHE", str(d))
    try:
        assert cache.cache_dir() == d
    finally:
        d.chmod(0o700)


def test_tmp_itself_is_refused(monkeypatch):
    monkeypatch.setenv("TIRAMISU_PY_CACHE", "/tmp")
    with pytest.raises(cache.UnsafeCacheError, match="sticky"):
        cache.cache_dir()


@needs_root
def test_foreign_owned_cache_dir_is_refused(tmp_path, monkeypatch):
    d = private(tmp_path / "c")
    os.chown(d, OTHER_UID, OTHER_UID)
    link = tmp_path / "link"
    link.symlink_to(d)                      # a symlink to it is judged by its target
    for p in (d, link):
        monkeypatch.setenv("TIRAMISU_PY_CACHE", str(p))
        with pytest.raises(cache.UnsafeCacheError, match=f"owned by uid {OTHER_UID}"):
            cache.cache_dir()


def test_compile_refuses_an_unsafe_cache_dir(tmp_path, monkeypatch):
    import numpy as np
    import tiramisu_py as tp
    d = private(tmp_path / "c")
    d.chmod(0o777)
    monkeypatch.setenv("TIRAMISU_PY_CACHE", str(d))
    f = tp.Function("tpsec_unsafe", params=["N"])
    i = f.var("i", 0, "N")
    A = f.input("A", ("N",), tp.float32)
    f.computation("B", [i], A[i] + np.float32(1))
    for target in ("c", "llvm"):
        with pytest.raises(cache.UnsafeCacheError):
            f.compile(target=target)
    assert list(d.iterdir()) == []          # nothing written


def test_unusable_cache_location_is_one_clear_error(tmp_path, monkeypatch):
    afile = tmp_path / "file"
    afile.write_text("x")
    for p in (afile, afile / "sub"):        # a file; a path through a file
        monkeypatch.setenv("TIRAMISU_PY_CACHE", str(p))
        with pytest.raises(cache.CacheLocationError) as ei:
            cache.cache_dir()
        assert str(p) in str(ei.value) and "TIRAMISU_PY_CACHE" in str(ei.value)


# ------------------------------------------------------------ item 8: planted entries
EVIL_C = r"""
#include <fcntl.h>
#include <unistd.h>
__attribute__((constructor)) static void tp_evil(void) {
  int fd = open(MARKER, O_CREAT | O_WRONLY, 0600);
  if (fd >= 0) close(fd);
}
"""


@needs_gcc
@pytest.mark.parametrize("how", ["foreign_owner", "group_writable", "other_writable", "own"])
def test_planted_library_is_not_loaded(tmp_path, how):
    if how == "foreign_owner" and not IS_ROOT:
        pytest.skip("needs root")
    d = private(tmp_path / "cache")
    so = Path(child_json("print(json.dumps(run().library_path))", d))
    marker = tmp_path / "marker"
    src = tmp_path / "evil.c"
    src.write_text(EVIL_C)
    evil = tmp_path / "evil.so"
    subprocess.run([GCC, "-shared", "-fPIC", f'-DMARKER="{marker}"', "-o", str(evil), str(src)],
                   check=True, timeout=120)
    data = evil.read_bytes()
    dg = so.with_suffix(".sha256")
    so.write_bytes(data)
    dg.write_text(cache.entry_digest(so.stem, data) + "\n")
    if how == "foreign_owner":
        os.chown(so, OTHER_UID, OTHER_UID)
        os.chown(dg, OTHER_UID, OTHER_UID)
    elif how == "group_writable":
        so.chmod(0o660)
    elif how == "other_writable":
        dg.chmod(0o602)
    out = child_json("""
        before = counter(); run(); print(json.dumps(counter() - before))""", d)
    if how == "own":
        # the trust boundary is the uid: a file of our own is loaded (and,
        # lacking the kernel's symbol, rebuilt)
        assert marker.exists() and out == 1
        return
    assert not marker.exists(), "planted library was loaded"
    assert out == 1                                     # a miss: rebuilt
    st = so.stat()
    assert st.st_uid == os.getuid() and not st.st_mode & 0o022 and so.read_bytes() != data


@needs_gcc
@pytest.mark.parametrize("target", ["c", "llvm"])
def test_a_swapped_entry_is_rebuilt_not_run(tmp_path, target):
    """Two intact entries with their digests, one moved over the other's
    name: each digest covers its key, so the moved one fails the check and is
    rebuilt (before, the kernel computing ``A * 3`` ran for ``A * 2``)."""
    d = private(tmp_path / "cache")
    env = {"TP_TARGET": target}
    two, three = child_json("print(json.dumps([run(2.0).library_path, run(3.0).library_path]))",
                            d, env=env)
    digest = lambda p: Path(p + ".sha256") if target == "llvm" else Path(p).with_suffix(".sha256")  # noqa: E731
    for p in (two, three):
        assert Path(p).exists() and digest(p).exists()
    Path(two).write_bytes(Path(three).read_bytes())
    digest(two).write_bytes(digest(three).read_bytes())
    # run() asserts the values: the swapped kernel would give A * 3
    assert child_json("before = counter(); run(2.0); print(json.dumps(counter() - before))",
                      d, env=env) == 1


@needs_gcc
def test_planted_probe_flags_are_never_used(tmp_path):
    d = private(tmp_path / "cache")
    marker = tmp_path / "marker"
    wrapper = tmp_path / "evil.sh"
    wrapper.write_text(f'#!/bin/sh\ntouch "{marker}"\nexec "$@"\n')
    wrapper.chmod(0o755)
    info = child_json("""
        cc = tc.find_c_compiler()
        print(json.dumps([cc.identity, str(tc.probe_path(cc))]))""", d)
    identity, probe = info[0], Path(info[1])
    probe.write_text(json.dumps({"identity": identity, "flags": ["-wrapper", f"{wrapper},"]}))
    probe.chmod(0o600)
    r = child_json("run(); print(json.dumps(tc.COMPILER_INVOCATIONS))", d)
    assert not marker.exists(), "planted -wrapper ran"
    assert r >= 2                                        # re-probed, then built
    flags = json.loads(probe.read_text())["flags"]
    assert set(flags) <= set(toolchain.OPTIONAL_FLAGS + toolchain.WORKAROUND_FLAGS)


@needs_root
@needs_gcc
def test_foreign_probe_file_is_ignored(tmp_path):
    d = private(tmp_path / "cache")
    child_json("run(); print(1)", d)
    probe = next(d.glob("probe-*.json"))
    record = json.loads(probe.read_text())
    record["flags"] = []                                 # valid content, foreign owner
    probe.write_text(json.dumps(record))
    os.chown(probe, OTHER_UID, OTHER_UID)
    r = child_json("print(json.dumps(tc.compiler_flags(tc.find_c_compiler())))", d)
    assert probe.stat().st_uid == os.getuid()           # re-probed and replaced
    assert set(json.loads(probe.read_text())["flags"]) <= set(r)


# ------------------------------------------------------------ item 11: robustness
REJECTED = "-Werror=implicit-function-declaration"


@needs_gcc
def test_stale_probe_is_reprobed_when_a_build_fails(tmp_path):
    d = private(tmp_path / "cache")
    fake = tmp_path / "fakecc"
    fake.write_text(f'#!/bin/sh\nfor a in "$@"; do [ "$a" = "{REJECTED}" ] && '
                    f'{{ echo "fakecc: unsupported {REJECTED}" >&2; exit 1; }}; done\n'
                    f'exec {GCC} "$@"\n')
    fake.chmod(0o755)
    env = {"TIRAMISU_PY_CC": str(fake)}
    info = child_json("""
        cc = tc.find_c_compiler()
        print(json.dumps([cc.identity, str(tc.probe_path(cc))]))""", d, env=env)
    probe = Path(info[1])
    # a probe of an earlier process that is no longer true (the flags are the
    # project's own, so the file is accepted as such)
    probe.write_text(json.dumps({"identity": info[0], "flags": list(toolchain.OPTIONAL_FLAGS)}))
    probe.chmod(0o600)
    code = "run(); print(json.dumps(tc.compiler_flags(tc.find_c_compiler())))"
    flags = child_json(code, d, env=env)
    assert REJECTED not in flags
    assert REJECTED not in json.loads(probe.read_text())["flags"]
    assert child_json(code, d, env=env) == flags        # and the next process just uses it


DAMAGES = ["digest_devzero", "digest_fifo", "digest_huge", "digest_dir", "digest_not_hex",
           "artefact_dir", "artefact_fifo", "artefact_symlink", "artefact_devzero"]


def damage(kind, artefact: Path, digest: Path, spare: Path):
    victim = digest if kind.startswith("digest") else artefact
    good = victim.read_bytes()
    victim.unlink()
    if kind.endswith("devzero"):
        victim.symlink_to("/dev/zero")
    elif kind.endswith("fifo"):
        os.mkfifo(victim, 0o600)
    elif kind.endswith("huge"):
        victim.write_bytes(good.strip() + b" " * 2048)
    elif kind.endswith("dir"):
        victim.mkdir(0o700)
        (victim / "inside").write_text("x")
    elif kind.endswith("not_hex"):
        victim.write_bytes(b"z" * 64)
    elif kind.endswith("symlink"):
        spare.write_bytes(good)               # an intact copy, but reached by a link
        victim.symlink_to(spare)


@needs_gcc
@pytest.mark.parametrize("target", ["c", "llvm"])
def test_damaged_entries_are_misses_and_replaced(tmp_path, target):
    d = private(tmp_path / "cache")
    env = {"TP_TARGET": target}
    consts = list(range(3, 3 + len(DAMAGES)))
    paths = child_json(f"print(json.dumps([run(c).library_path for c in {consts}]))", d, env=env)
    for kind, p in zip(DAMAGES, paths):
        artefact = Path(p)
        digest = Path(p + ".sha256") if target == "llvm" else artefact.with_suffix(".sha256")
        damage(kind, artefact, digest, tmp_path / f"spare-{kind}")
    deltas = child_json(f"""
        out = []
        for c in {consts}:
            before = counter(); run(c); out.append(counter() - before)
        print(json.dumps(out))""", d, env=env, timeout=120)
    assert deltas == [1] * len(DAMAGES), dict(zip(DAMAGES, deltas))
    for p in paths:                          # rebuilt entries are plain files again
        artefact = Path(p)
        digest = Path(p + ".sha256") if target == "llvm" else artefact.with_suffix(".sha256")
        for q in (artefact, digest):
            assert stat.S_ISREG(os.lstat(q).st_mode), q
    assert child_json(f"""
        before = counter()
        for c in {consts}:
            run(c)
        print(json.dumps(counter() - before))""", d, env=env) == 0


def test_lookup_of_untrusted_files_in_process(tmp_path):
    """read_trusted never opens a FIFO or follows a link; safe to run here
    because each case is bounded (lstat first)."""
    d = private(tmp_path / "c")
    key = "ab" * 32
    so, dg, _ = cache.paths(key, d)
    tmp = cache.temp_path(key, ".so", d)
    tmp.write_bytes(b"\x7fELF" + b"\0" * 100)
    cache.install(key, tmp, d)
    assert cache.lookup(key, d) == so
    so.chmod(0o620)
    assert cache.lookup(key, d) is None
    so.chmod(0o600)
    dg.chmod(0o666)
    assert cache.lookup(key, d) is None
    dg.chmod(0o600)
    assert cache.lookup(key, d) == so
    assert cache.read_trusted(dg, 10) is None                # over the size limit


# ------------------------------------------------------------ read-only cache
def _read_only_prefix(d: Path):
    """A command prefix running its argument with ``d`` read-only, or None."""
    if not IS_ROOT:
        return ("chmod",)
    unshare = shutil.which("unshare")
    if unshare is None:
        return None
    probe = subprocess.run([unshare, "-m", "sh", "-c", f"mount --bind -o ro '{d}' '{d}'"],
                           capture_output=True, timeout=30)
    if probe.returncode != 0:
        return None
    return (unshare, "-m", "sh", "-c", f"mount --bind -o ro '{d}' '{d}' && exec \"$@\"", "sh")


@needs_gcc
@pytest.mark.parametrize("target", ["c", "llvm"])
def test_read_only_cache_warm_and_cold(tmp_path, target):
    d = private(tmp_path / "cache")
    env = {"TP_TARGET": target}
    paths = child_json("print(json.dumps([run().library_path]))", d, env=env)
    for src in list(d.glob("*.c")) + list(d.glob("*.ll")):
        src.unlink()                         # the optional source copy is missing
    prefix = _read_only_prefix(d)
    if prefix is None:
        pytest.skip("cannot make a read-only directory here")
    if prefix == ("chmod",):
        d.chmod(0o500)
        prefix = ()
    before = sorted(os.listdir(d))
    try:
        out = child_json("""
            warnings.simplefilter("always")
            b = counter(); k = run(); warm = counter() - b
            b = counter(); k2 = run(7.0); cold = counter() - b
            k3 = run(7.0)                    # in-process memo of the cold build
            print(json.dumps([warm, cold, k.library_path, k2.library_path]))""",
            d, env=env, argv_prefix=prefix, timeout=180)
    finally:
        d.chmod(0o700)
    warm, cold, warm_path, cold_path = out
    assert warm == 0 and warm_path == paths[0]
    assert cold == 1 and not cold_path.startswith(str(d))
    assert not Path(cold_path).exists()      # the private build dir is removed at exit
    assert sorted(os.listdir(d)) == before   # nothing written


# ------------------------------------------------------------ item 10: processes, temps
HANG_CC = """#!/bin/sh
case "$*" in *tp-probe-*) exec {gcc} "$@";; esac
echo $$ > "{dir}/cc.pid"
sleep 300 &
echo $! > "{dir}/child.pid"
wait
"""


def _hang_cc(tmp_path):
    fake = tmp_path / "hangcc"
    fake.write_text(HANG_CC.format(gcc=GCC, dir=tmp_path))
    fake.chmod(0o755)
    return {"TIRAMISU_PY_CC": str(fake)}


def _pids(tmp_path):
    return [int((tmp_path / n).read_text()) for n in ("cc.pid", "child.pid")]


def _temps(d: Path):
    return [p.name for p in d.iterdir() if p.name.startswith(".")]


@needs_gcc
def test_compiler_timeout_kills_its_process_group(tmp_path):
    d = private(tmp_path / "cache")
    out = child_json("""
        cc = tc.find_c_compiler()
        tc.compiler_flags(cc)                # probe first, with the normal timeout
        tc.BUILD_TIMEOUT_S = 1.5
        try:
            run()
        except tc.CompileError as exc:
            print(json.dumps(str(exc)))
        else:
            print(json.dumps("no error"))""", d, env=_hang_cc(tmp_path), timeout=60)
    assert "timed out" in out
    for pid in _pids(tmp_path):
        assert wait_for(lambda: gone(pid), 10), f"compiler process {pid} survived"
    assert _temps(d) == []


@needs_gcc
def test_keyboard_interrupt_kills_the_compiler(tmp_path):
    d = private(tmp_path / "cache")
    e = dict(os.environ, TIRAMISU_PY_CACHE=str(d), PYTHONPATH=ROOT, **_hang_cc(tmp_path))
    # Ctrl-C as at a terminal: the child's SIGINT raises KeyboardInterrupt, whatever
    # disposition or mask this worker passes on (a full run once handed it on ignored
    # or blocked: 30 s later the child still waited in communicate()); SIGUSR1 makes
    # it print where each of its threads is (a hang's diagnosis)
    dump = ("import faulthandler, signal\n"
            "signal.signal(signal.SIGINT, signal.default_int_handler)\n"
            "signal.pthread_sigmask(signal.SIG_UNBLOCK, {signal.SIGINT})\n"
            "faulthandler.register(signal.SIGUSR1, all_threads=True)\n")
    p = subprocess.Popen([sys.executable, "-c", dump + PRELUDE + "run()\n"], env=e, cwd=ROOT,
                         stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        assert wait_for(lambda: (tmp_path / "child.pid").exists() and
                        (tmp_path / "child.pid").read_text().strip(), 60), "compiler never started"
        os.kill(p.pid, signal.SIGINT)        # Ctrl-C that reaches Python only
        try:
            _, err = p.communicate(timeout=30)
        except subprocess.TimeoutExpired:
            os.kill(p.pid, signal.SIGUSR1)
            time.sleep(1)
            p.kill()
            _, err = p.communicate()
            raise AssertionError(
                f"still running 30 s after SIGINT (this worker's SIGINT: "
                f"{signal.getsignal(signal.SIGINT)}, blocked: "
                f"{signal.SIGINT in signal.pthread_sigmask(signal.SIG_BLOCK, [])}); "
                f"its threads:\n{err[-4000:]}")
    finally:
        if p.poll() is None:
            p.kill()
            p.wait()
    assert "KeyboardInterrupt" in err
    for pid in _pids(tmp_path):
        assert wait_for(lambda: gone(pid), 10), f"compiler process {pid} survived"
    assert _temps(d) == []


@needs_gcc
def test_temporaries_of_a_killed_process_are_removed_by_the_next_build(tmp_path):
    d = private(tmp_path / "cache")
    e = dict(os.environ, TIRAMISU_PY_CACHE=str(d), PYTHONPATH=ROOT, **_hang_cc(tmp_path))
    p = subprocess.Popen([sys.executable, "-c", PRELUDE + "run()\n"], env=e, cwd=ROOT,
                         stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        assert wait_for(lambda: (tmp_path / "child.pid").exists() and
                        (tmp_path / "child.pid").read_text().strip(), 60), "compiler never started"
        p.kill()                             # SIGKILL: no cleanup in Python
        p.wait()
    finally:
        if p.poll() is None:
            p.kill()
            p.wait()
        cc_pid = int((tmp_path / "cc.pid").read_text())
        try:
            os.killpg(cc_pid, signal.SIGKILL)    # the orphaned compiler we started
        except OSError:
            pass
    left = _temps(d)
    assert left and all(f".tp{p.pid}@" in n for n in left), left
    child_json("run(); print(1)", d)           # any build in this directory
    assert _temps(d) == []


def test_stale_temp_rules(tmp_path):
    d = private(tmp_path / "c")
    mine_fresh = Path(cache.temp_path("ab" * 32, ".so", d))       # live pid (this one), new
    mine_old = Path(cache.temp_path("cd" * 32, ".so", d))         # live pid, 2 h old
    old_format = d / f".{'ef' * 32}.abc123_x.so"                   # an earlier version's name
    old_format.write_bytes(b"")
    other_host = d / f".{'12' * 32}.so.tp1@00000000.abcdefgh.tmp"  # another host: age only
    other_host.write_bytes(b"")
    unrelated = d / ".something.tmp"
    unrelated.write_bytes(b"")
    two_hours = time.time() - 2 * 3600
    for p in (mine_old, old_format):
        os.utime(p, (two_hours, two_hours))
    removed = cache.clean_stale_temps(d)
    assert sorted(removed) == sorted([mine_old.name, old_format.name])
    assert mine_fresh.exists() and other_host.exists() and unrelated.exists()

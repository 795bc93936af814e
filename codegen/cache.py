"""On-disk cache of compiled shared libraries.

Directory: ``$TIRAMISU_PY_CACHE``, else ``$XDG_CACHE_HOME/tiramisu_py``, else
``~/.cache/tiramisu_py`` (``~`` and a relative path made absolute).  An entry
is ``<key>.so`` plus ``<key>.sha256`` (the sha256 of the key and the .so bytes,
:func:`entry_digest`: an entry moved under another key's name fails it); the generated ``<key>.c`` is kept beside them (an
optional copy for reading: never needed to load an entry).  Every write goes
to a temporary file in the same directory and is renamed into place
(``os.replace``), the .so before its digest, so a concurrent reader sees either
no entry, a complete one, or a digest that does not match (treated as a miss).

Trust (what is loaded is run, so the cache is treated like ``~/.ssh``):

- The directory is created mode 0700, and so is every missing parent created
  with it.  It is used only if it is a directory (symlinks followed) owned by
  the current uid (``os.getuid()``, root included) and not writable by group
  or others; otherwise :class:`UnsafeCacheError` names the path and the fix.
  A shared sticky directory such as ``/tmp`` is world-writable, so it is never
  accepted as the cache directory itself (a private subdirectory of it is).
  A location that is not a directory, or cannot be created, raises
  :class:`CacheLocationError`.  Both are :class:`CacheError` (a RuntimeError).
- Every cache file read (``.so``, ``.o``, digests, the compiler probe) goes
  through :func:`read_trusted`: it must be a regular file (no symlink, FIFO,
  device or directory: ``lstat``, then ``open`` with ``O_NOFOLLOW|O_NONBLOCK``
  and ``fstat`` of the same inode), owned by the current uid, not writable by
  group or others, and at most :data:`DIGEST_MAX` (digest),
  :data:`PROBE_MAX` (probe) or :data:`ARTEFACT_MAX` (library, object) bytes.
  A file failing any of these is a miss: the entry is rebuilt and replaced (a
  directory in its place is removed first).  The probe's content is checked
  too (toolchain: only flags from ``OPTIONAL_FLAGS``).
- Read-only cache directory (``os.access`` says not writable): a warm entry
  is loaded as usual (the optional source copy is skipped); a miss is built in
  a private per-process temporary directory (``tempfile.mkdtemp``, 0700,
  removed at exit) with a RuntimeWarning, so compiling works but nothing is
  cached across processes.
- Temporary files are named ``.<name>.tp<pid>@<host>.<random>.tmp``.  When a
  build starts (:func:`build_directory`, at most every
  :data:`CLEAN_INTERVAL_S` per directory and process), temporaries left by a
  killed process are removed: those whose creating pid is dead on this host,
  and any older than :data:`STALE_TEMP_S` (builds are bounded by the
  compiler timeout, so such a file is abandoned).
"""
from __future__ import annotations

import atexit
import errno
import hashlib
import os
import re
import shutil
import socket
import stat
import tempfile
import time
import warnings
from pathlib import Path
from typing import Optional

FORMAT_VERSION = "tiramisu_py-c-1"

DIGEST_MAX = 1024                   # bytes of a .sha256 file
PROBE_MAX = 64 * 1024               # bytes of a probe-*.json file
ARTEFACT_MAX = 1 << 30              # bytes of a .so / .o
STALE_TEMP_S = 3600                 # a temporary file older than this is abandoned
CLEAN_INTERVAL_S = 300              # stale temporaries looked for at most this often


class CacheError(RuntimeError):
    """The cache directory cannot be used; ``path`` is the directory."""

    def __init__(self, message: str, path=None):
        super().__init__(message)
        self.path = path


class CacheLocationError(CacheError):
    """The cache location is not a directory or cannot be created."""


class UnsafeCacheError(CacheError):
    """The cache directory could be written by another user (foreign owner,
    or writable by group/others): its contents would be run, so it is refused."""


def _configured() -> str:
    """The cache directory as configured, absolute: ``~`` expanded and a
    relative path taken from the working directory (the compilers run in the
    cache directory, where a relative path would name another place)."""
    d = os.environ.get("TIRAMISU_PY_CACHE")
    if not d:
        xdg = os.environ.get("XDG_CACHE_HOME")
        d = os.path.join(xdg, "tiramisu_py") if xdg else os.path.join(
            os.path.expanduser("~"), ".cache", "tiramisu_py")
    return os.path.abspath(os.path.expanduser(d))


def _advice(p) -> str:
    return f"set TIRAMISU_PY_CACHE to a private directory of your own (e.g. mkdir -m 700 {p}-private)"


def _make_private_dirs(p: str) -> None:
    """Creates ``p`` and its missing parents, each mode 0700."""
    missing = []
    q = os.path.abspath(p)
    while not os.path.lexists(q):
        missing.append(q)
        parent = os.path.dirname(q)
        if parent == q:
            break
        q = parent
    for d in reversed(missing):
        try:
            os.mkdir(d, 0o700)
        except FileExistsError:
            continue
        os.chmod(d, 0o700)              # whatever the umask


def check_directory(p) -> os.stat_result:
    """Raises UnsafeCacheError unless ``p`` is a directory owned by the current
    uid and not writable by group or others (symlinks followed)."""
    try:
        st = os.stat(p)
    except OSError as exc:
        raise CacheLocationError(f"cache directory {p} cannot be used: {exc}; {_advice(p)}", p) from exc
    if not stat.S_ISDIR(st.st_mode):
        raise CacheLocationError(f"cache location {p} is not a directory; remove it or {_advice(p)}", p)
    real = os.path.realpath(p)
    shown = p if str(real) == str(p) else f"{p} (-> {real})"
    if st.st_uid != os.getuid():
        raise UnsafeCacheError(
            f"refusing cache directory {shown}: it is owned by uid {st.st_uid}, not by you "
            f"(uid {os.getuid()}), and compiled code from it would be run; {_advice(p)}", p)
    if st.st_mode & 0o022:
        mode = oct(stat.S_IMODE(st.st_mode))
        if st.st_mode & stat.S_ISVTX:
            raise UnsafeCacheError(
                f"refusing cache directory {shown}: it is a shared sticky directory (mode {mode}) "
                f"where others can plant files; set TIRAMISU_PY_CACHE to a private subdirectory "
                f"(e.g. mkdir -m 700 {os.path.join(str(p), f'tiramisu_py-{os.getuid()}')})", p)
        raise UnsafeCacheError(
            f"refusing cache directory {shown}: it is writable by group or others (mode {mode}), "
            f"who could plant code that you would run; fix it with `chmod 700 {real}` "
            f"(or `chmod go-w {real}`), or {_advice(p)}", p)
    return st


def cache_dir() -> Path:
    """The cache directory, created private if missing and checked (see the
    module docstring); raises CacheError if it cannot or must not be used."""
    d = _configured()
    try:
        os.stat(d)
    except FileNotFoundError:
        try:
            _make_private_dirs(d)
        except OSError as exc:
            raise CacheLocationError(f"cache directory {d} cannot be created: {exc}; "
                                     f"{_advice(d)}", d) from exc
    except OSError:
        pass                            # reported by check_directory
    check_directory(d)
    return Path(d)


def make_key(source: str, identity: str, flags) -> str:
    h = hashlib.sha256()
    for part in (FORMAT_VERSION, identity, "\0".join(flags), source):
        h.update(part.encode())
        h.update(b"\0\1\0")
    return h.hexdigest()


def paths(key: str, directory: Optional[Path] = None) -> tuple:
    """(``<key>.so``, ``<key>.sha256``, ``<key>.c``)."""
    d = directory or cache_dir()
    return d / f"{key}.so", d / f"{key}.sha256", d / f"{key}.c"


# ------------------------------------------------------------ trusted reading
def trusted_stat(st: os.stat_result) -> bool:
    """A regular file owned by the current uid, not writable by group/others."""
    return (stat.S_ISREG(st.st_mode) and st.st_uid == os.getuid()
            and not st.st_mode & 0o022)


def _open_trusted(path, limit: int) -> Optional[int]:
    """A read descriptor of ``path`` if it passes :func:`trusted_stat` and has
    at most ``limit`` bytes, else None."""
    try:
        st = os.lstat(path)
        if not trusted_stat(st) or st.st_size > limit:
            return None                 # not opened at all: no FIFO, device or link
        fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC)
    except OSError:
        return None
    try:
        st2 = os.fstat(fd)
        if (st2.st_dev, st2.st_ino) == (st.st_dev, st.st_ino) and trusted_stat(st2) \
                and st2.st_size <= limit:
            return fd
    except OSError:
        pass
    os.close(fd)
    return None


def _chunks(fd: int, limit: int):
    """The bytes of ``fd`` in chunks; raises OSError past ``limit``."""
    total = 0
    while True:
        b = os.read(fd, 1 << 20)
        if not b:
            return
        total += len(b)
        if total > limit:
            raise OSError(f"file grew past {limit} bytes")
        yield b


def read_trusted(path, limit: int) -> Optional[bytes]:
    """The bytes of ``path`` if it is a trusted regular file of at most
    ``limit`` bytes (see the module docstring), else None."""
    fd = _open_trusted(path, limit)
    if fd is None:
        return None
    try:
        return b"".join(_chunks(fd, limit))
    except OSError:
        return None
    finally:
        os.close(fd)


def _entry_hash(key: str):
    """A sha256 started with the entry's key: an entry's digest covers the key
    it was built for, so an artefact moved under another key's name (a swapped
    entry) fails its check and is rebuilt, never run."""
    return hashlib.sha256(f"tiramisu_py entry {key}\0".encode())


def _trusted_digest(path, key: str, limit: int = ARTEFACT_MAX) -> Optional[str]:
    fd = _open_trusted(path, limit)
    if fd is None:
        return None
    try:
        h = _entry_hash(key)
        for b in _chunks(fd, limit):
            h.update(b)
        return h.hexdigest()
    except OSError:
        return None
    finally:
        os.close(fd)


_HEX64 = re.compile(r"[0-9a-f]{64}")


def _read_digest(path) -> Optional[str]:
    data = read_trusted(path, DIGEST_MAX)
    if data is None:
        return None
    text = data.decode("ascii", "replace").strip()
    return text if _HEX64.fullmatch(text) else None


def _digest(path: Path, key: str) -> str:
    """The keyed sha256 of a file this process just wrote."""
    h = _entry_hash(key)
    with open(path, "rb") as f:
        for b in iter(lambda: f.read(1 << 20), b""):
            h.update(b)
    return h.hexdigest()


def lookup(key: str, directory: Optional[Path] = None) -> Optional[Path]:
    """The .so of ``key`` if it is present, trusted and intact, else None."""
    so, dg, _ = paths(key, directory)
    expected = _read_digest(dg)
    if expected is None:
        return None
    return so if _trusted_digest(so, key) == expected else None


# ------------------------------------------------------------ writing
_HOST = hashlib.sha256(socket.gethostname().encode()).hexdigest()[:8]
_TEMP_RE = re.compile(r"\..+\.tp(\d+)@([0-9a-f]{8})\.[A-Za-z0-9_]+\.tmp")
# temporaries of earlier versions: ``.<key>.<random>.so``, ``.<name>.<random>.tmp``
_OLD_TEMP_RE = re.compile(r"\.(?:[0-9a-f]{64}|probe-[0-9a-f]{32}).*\.(?:tmp|so)")


def _temp_prefix(name: str) -> str:
    return f".{name}.tp{os.getpid()}@{_HOST}."


def _remove(p) -> None:
    """Removes a file, link or (a damaged entry) directory; ignores errors."""
    try:
        if stat.S_ISDIR(os.lstat(p).st_mode):
            shutil.rmtree(p, ignore_errors=True)
        else:
            os.unlink(p)
    except OSError:
        pass


def _replace(src, dst) -> None:
    """``os.replace``, first removing a directory that took the entry's name."""
    try:
        os.replace(src, dst)
    except IsADirectoryError:
        _remove(dst)
        os.replace(src, dst)


def atomic_write(path: Path, data: bytes) -> None:
    path = Path(path)
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=_temp_prefix(path.name), suffix=".tmp")
    try:
        with os.fdopen(fd, "wb") as f:
            f.write(data)
        _replace(tmp, path)
    except BaseException:
        unlink_quietly(tmp)
        raise


def keep_copy(path: Path, text: str, replace: bool = False) -> bool:
    """Writes ``text`` (a kernel's source, kept beside its build for the
    reader and for error messages) to ``path`` unless it is there (or always,
    ``replace=True``); whether it is there now.  Optional: a read-only cache
    goes without it silently, a full disk (or quota) with a warning, and the
    build goes on either way."""
    if replace or not Path(path).exists():
        try:
            atomic_write(path, text.encode())
        except OSError as exc:
            if exc.errno in (errno.ENOSPC, errno.EDQUOT):
                warnings.warn(f"tiramisu_py: no space to keep the source copy {path} ({exc}); "
                              "the build goes on without it", RuntimeWarning, stacklevel=2)
            return False
    return True


def temp_path(key: str, suffix: str, directory: Optional[Path] = None) -> Path:
    """A fresh path in the cache directory for a build output."""
    d = directory or cache_dir()
    fd, tmp = tempfile.mkstemp(dir=d, prefix=_temp_prefix(key + suffix), suffix=".tmp")
    os.close(fd)
    return Path(tmp)


def fresh_copy(path) -> Path:
    """A copy of ``path`` under a fresh temporary name beside it."""
    p = Path(path)
    fd, tmp = tempfile.mkstemp(dir=p.parent, prefix=_temp_prefix(p.name), suffix=".tmp")
    try:
        with os.fdopen(fd, "wb") as out, open(p, "rb") as src:
            shutil.copyfileobj(src, out)
    except BaseException:
        unlink_quietly(tmp)
        raise
    return Path(tmp)


def _pid_alive(pid: int) -> bool:
    if pid == os.getpid():
        return True
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except OSError:
        pass
    return True


def clean_stale_temps(directory: Path, now: Optional[float] = None) -> list:
    """Removes abandoned temporary files of ``directory`` (see the module
    docstring); returns their names."""
    now = time.time() if now is None else now
    removed = []
    try:
        entries = list(os.scandir(directory))
    except OSError:
        return removed
    for e in entries:
        if not e.name.startswith("."):
            continue
        m = _TEMP_RE.fullmatch(e.name)
        if m is None and not _OLD_TEMP_RE.fullmatch(e.name):
            continue
        try:
            st = e.stat(follow_symlinks=False)
        except OSError:
            continue
        if stat.S_ISDIR(st.st_mode) or st.st_uid != os.getuid():
            continue
        dead = m is not None and m.group(2) == _HOST and not _pid_alive(int(m.group(1)))
        if dead or now - st.st_mtime > STALE_TEMP_S:
            try:
                os.unlink(e.path)
                removed.append(e.name)
            except OSError:
                pass
    return removed


_last_clean: dict = {}              # directory -> time of the last clean_stale_temps
_fallback: list = []                # this process's private build directory, if needed


def writable(directory) -> bool:
    return os.access(directory, os.W_OK | os.X_OK)


def build_directory(directory: Path) -> Path:
    """Where a build starting now writes: ``directory`` (after removing its
    stale temporaries, at most every CLEAN_INTERVAL_S), or, if it is not
    writable, a private temporary directory of this process (RuntimeWarning)."""
    if writable(directory):
        now = time.time()
        if now - _last_clean.get(str(directory), float("-inf")) >= CLEAN_INTERVAL_S:
            _last_clean[str(directory)] = now
            clean_stale_temps(directory, now)
        return directory
    if not _fallback:
        d = Path(tempfile.mkdtemp(prefix="tiramisu_py-"))
        atexit.register(shutil.rmtree, d, True)
        _fallback.append(d)
        warnings.warn(f"tiramisu_py: cache directory {directory} is not writable; compiling into "
                      f"the private temporary directory {d} (nothing is cached across processes; "
                      "set TIRAMISU_PY_CACHE to a writable private directory)",
                      RuntimeWarning, stacklevel=3)
    return _fallback[0]


def install(key: str, built_so: Path, directory: Optional[Path] = None) -> Path:
    """Moves a freshly built .so into place, then writes its digest."""
    so, dg, _ = paths(key, directory)
    mode = stat.S_IMODE(os.stat(built_so).st_mode)
    if mode & 0o022:                    # the linker created it with the umask's mode
        os.chmod(built_so, mode & ~0o022)
    digest = _digest(built_so, key)
    _replace(built_so, so)
    atomic_write(dg, (digest + "\n").encode())
    return so


def invalidate(key: str, directory: Optional[Path] = None) -> None:
    """Removes the entry (digest first, so no reader trusts a half-removed one)."""
    so, dg, _ = paths(key, directory)
    _remove(dg)
    _remove(so)


def unlink_quietly(p) -> None:
    """Removes the file ``p`` if it is there (a missing file, or one that
    cannot be removed, is left to the next cleanup)."""
    try:
        os.unlink(p)
    except OSError:
        pass


# ------------------------------------------------ object files (LLVM backend)
# ``<key>.o`` plus ``<key>.o.sha256``, the generated ``<key>.ll`` beside them;
# written and checked exactly like the shared libraries above.
def object_paths(key: str, directory: Optional[Path] = None) -> tuple:
    """(``<key>.o``, ``<key>.o.sha256``, ``<key>.ll``)."""
    d = directory or cache_dir()
    return d / f"{key}.o", d / f"{key}.o.sha256", d / f"{key}.ll"


def lookup_object(key: str, directory: Optional[Path] = None) -> Optional[bytes]:
    """The bytes of ``<key>.o`` if present, trusted and matching its digest, else None."""
    obj, dg, _ = object_paths(key, directory)
    expected = _read_digest(dg)
    if expected is None:
        return None
    data = read_trusted(obj, ARTEFACT_MAX)
    if data is None:
        return None
    return data if entry_digest(key, data) == expected else None


def entry_digest(key: str, data: bytes) -> str:
    """What ``<key>.sha256`` (or ``<key>.o.sha256``) holds for an artefact ``data``."""
    h = _entry_hash(key)
    h.update(data)
    return h.hexdigest()


def install_object(key: str, data: bytes, directory: Optional[Path] = None) -> Path:
    """Writes the object, then its digest (both atomically)."""
    obj, dg, _ = object_paths(key, directory)
    atomic_write(obj, data)
    atomic_write(dg, (entry_digest(key, data) + "\n").encode())
    return obj


def invalidate_object(key: str, directory: Optional[Path] = None) -> None:
    obj, dg, _ = object_paths(key, directory)
    _remove(dg)
    _remove(obj)


def load_or_build(lookup, build, load, invalidate, bad_load, fail):
    """The cache policy both backends follow.  ``lookup()`` gives the cached
    artefact or None; ``build()`` makes (and installs) one; ``load(artefact)``
    loads it, raising one of ``bad_load`` when it is unusable.  A hit is
    loaded; a miss is built; a hit that fails to load is invalidated and
    rebuilt once (never trusted); a fresh build that fails to load raises
    ``fail(what, artefact, exc)`` with ``what`` "built" or "rebuilt".
    Returns (artefact, loaded)."""
    artefact = lookup()
    fresh = artefact is None
    if fresh:
        artefact = build()
    try:
        return artefact, load(artefact)
    except bad_load as exc:
        invalidate()
        if fresh:
            raise fail("built", artefact, exc) from exc
    artefact = build()                   # a bad hit: rebuild once
    try:
        return artefact, load(artefact)
    except bad_load as exc:
        invalidate()
        raise fail("rebuilt", artefact, exc) from exc

"""On-disk cache of compiled shared libraries.

Directory: ``$TIRAMISU_PY_CACHE``, else ``$XDG_CACHE_HOME/tiramisu_py``, else
``~/.cache/tiramisu_py``.  An entry is ``<key>.so`` plus ``<key>.sha256`` (the
sha256 of the .so bytes); the generated ``<key>.c`` is kept beside them.  Every
write goes to a temporary file in the same directory and is renamed into place
(``os.replace``), the .so before its digest, so a concurrent reader sees either
no entry, a complete one, or a digest that does not match (treated as a miss).
"""
from __future__ import annotations

import hashlib
import os
import tempfile
from pathlib import Path
from typing import Optional

FORMAT_VERSION = "tiramisu_py-c-1"


def cache_dir() -> Path:
    d = os.environ.get("TIRAMISU_PY_CACHE")
    if not d:
        xdg = os.environ.get("XDG_CACHE_HOME")
        d = os.path.join(xdg, "tiramisu_py") if xdg else os.path.join(
            os.path.expanduser("~"), ".cache", "tiramisu_py")
    p = Path(d)
    p.mkdir(parents=True, exist_ok=True)
    return p


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


def _digest(path: Path) -> str:
    with open(path, "rb") as f:
        return hashlib.sha256(f.read()).hexdigest()


def lookup(key: str, directory: Optional[Path] = None) -> Optional[Path]:
    """The .so of ``key`` if it is present and intact, else None."""
    so, dg, _ = paths(key, directory)
    try:
        expected = dg.read_text().strip()
        return so if expected and _digest(so) == expected else None
    except OSError:
        return None


def atomic_write(path: Path, data: bytes) -> None:
    path = Path(path)
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
    try:
        with os.fdopen(fd, "wb") as f:
            f.write(data)
        os.replace(tmp, path)
    except BaseException:
        _unlink(tmp)
        raise


def temp_path(key: str, suffix: str, directory: Optional[Path] = None) -> Path:
    """A fresh path in the cache directory for a build output."""
    d = directory or cache_dir()
    fd, tmp = tempfile.mkstemp(dir=d, prefix=f".{key}.", suffix=suffix)
    os.close(fd)
    return Path(tmp)


def install(key: str, built_so: Path, directory: Optional[Path] = None) -> Path:
    """Moves a freshly built .so into place, then writes its digest."""
    so, dg, _ = paths(key, directory)
    digest = _digest(built_so)
    os.replace(built_so, so)
    atomic_write(dg, (digest + "\n").encode())
    return so


def invalidate(key: str, directory: Optional[Path] = None) -> None:
    """Removes the entry (digest first, so no reader trusts a half-removed one)."""
    so, dg, _ = paths(key, directory)
    _unlink(dg)
    _unlink(so)


def _unlink(p) -> None:
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
    """The bytes of ``<key>.o`` if present and matching its digest, else None."""
    obj, dg, _ = object_paths(key, directory)
    try:
        expected = dg.read_text().strip()
        data = obj.read_bytes()
    except OSError:
        return None
    return data if expected and hashlib.sha256(data).hexdigest() == expected else None


def install_object(key: str, data: bytes, directory: Optional[Path] = None) -> Path:
    """Writes the object, then its digest (both atomically)."""
    obj, dg, _ = object_paths(key, directory)
    atomic_write(obj, data)
    atomic_write(dg, (hashlib.sha256(data).hexdigest() + "\n").encode())
    return obj


def invalidate_object(key: str, directory: Optional[Path] = None) -> None:
    obj, dg, _ = object_paths(key, directory)
    _unlink(dg)
    _unlink(obj)


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

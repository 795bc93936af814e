"""The tuning store: one SQLite database that every operator's find step and
both tuners record their measurements in (``tiramisu_py.tuning`` re-exports
its module-level calls: ``tuning.get``, ``tuning.put``, ``tuning.store()``, ...).

File: ``<cache>/tuning.db`` (``codegen.cache.cache_dir()``), WAL mode.  Schema
(``PRAGMA application_id`` = ``APPLICATION_ID``, ``user_version`` =
``SCHEMA_VERSION``)::

    records(kind TEXT, key TEXT, value TEXT,   -- value: JSON
            created REAL,                      -- time.time() of the write
            meta TEXT,                         -- JSON object
            PRIMARY KEY (kind, key))
    meta(name TEXT PRIMARY KEY, value TEXT)    -- store bookkeeping (migrations)

``kind`` names who owns a record ("conv_find"); ``key`` is its text.  A write
is one ``INSERT OR REPLACE`` of one record (no read-modify-write of the
store), so records of concurrent processes and threads never overwrite each
other; a busy timeout makes concurrent writers wait.  One connection per
process and store, used under a lock (the find step is rare and short),
closed before a fork() and reopened on the next call.

Nothing here raises from a user's call: a damaged database (not SQLite, a
foreign or wrong schema, a malformed page) is reported once
(``TuningStoreWarning`` naming the path), moved aside to
``tuning.db.corrupt-<timestamp>`` and replaced by a fresh one; a record whose
value is not JSON or fails the caller's ``valid`` check is reported once and
read as missing (the caller re-measures and overwrites it); a directory
where no database can be opened or written gives a per-process in-memory
store, with one warning.  The caller's arguments are not checked: a value
that is not JSON-serialisable is a TypeError as for ``json.dumps``.
"""
from __future__ import annotations

import json
import logging
import os
import sqlite3
import sys
import threading
import time
import warnings
import weakref
from pathlib import Path

try:                                   # cross-process lock while opening/repairing
    import fcntl
except ImportError:                    # pragma: no cover - not POSIX
    fcntl = None

DB_FILE = "tuning.db"
SCHEMA_VERSION = 1
APPLICATION_ID = 0x54505455            # "TPTU"
BUSY_TIMEOUT = 60.0                    # seconds a writer waits for another one

_COLUMNS = {"records": ["kind", "key", "value", "created", "meta"], "meta": ["name", "value"]}
_SCHEMA = (
    "CREATE TABLE records (kind TEXT NOT NULL, key TEXT NOT NULL, value TEXT NOT NULL, "
    "created REAL NOT NULL, meta TEXT NOT NULL DEFAULT '{}', PRIMARY KEY (kind, key))",
    "CREATE TABLE meta (name TEXT PRIMARY KEY, value TEXT NOT NULL)",
    f"PRAGMA application_id = {APPLICATION_ID}",
    f"PRAGMA user_version = {SCHEMA_VERSION}",
)


class TuningStoreWarning(RuntimeWarning):
    """A damaged or unusable tuning store (it has been repaired or replaced
    by an in-memory one; nothing was raised)."""


class _Damaged(Exception):
    """The file is not a usable tuning database (reason in the message)."""


class _Newer(Exception):
    """The database was written by a newer schema: left alone."""


_ERRORS = (sqlite3.Error, OSError, _Damaged, _Newer)
_log = logging.getLogger(__name__)
_WARNED: set = set()
_WARNED_LOCK = threading.Lock()


def _warn_once(tag, message):
    with _WARNED_LOCK:
        if tag in _WARNED:
            return
        _WARNED.add(tag)
    level, frame = 2, sys._getframe(1)          # attributed to the first caller outside
    while frame is not None and frame.f_code.co_filename == __file__:
        level, frame = level + 1, frame.f_back
    try:
        warnings.warn(message, TuningStoreWarning, stacklevel=level)
    except Exception:                  # warnings turned into errors: still never raise
        _log.warning(message)


def _is_damage(exc):
    if isinstance(exc, _Damaged):
        return True
    if not isinstance(exc, sqlite3.DatabaseError):
        return False
    code = getattr(exc, "sqlite_errorcode", None)           # Python >= 3.11
    if code is not None:
        return code & 0xFF in (11, 26)                      # SQLITE_CORRUPT, SQLITE_NOTADB
    msg = str(exc)
    return "not a database" in msg or "malformed" in msg


class _FileLock:
    """An exclusive flock on ``path`` (and nothing where flock is missing)."""

    def __init__(self, path):
        self.path, self.fd = path, None

    def __enter__(self):
        if fcntl is not None:
            self.fd = os.open(self.path, os.O_RDWR | os.O_CREAT, 0o600)
            try:
                fcntl.flock(self.fd, fcntl.LOCK_EX)
            except BaseException:
                os.close(self.fd)
                raise
        return self

    def __exit__(self, *exc):
        if self.fd is not None:
            os.close(self.fd)          # releases the lock
            self.fd = None


_ALL_STORES: "weakref.WeakSet[Store]" = weakref.WeakSet()
_GENERATION = [0]                      # bumped by every change this process makes to a store


def generation() -> int:
    """A number that changes whenever this process writes, removes, repairs,
    closes or moves to memory any store: a reader may keep what it read
    while the number holds (the find step's per-process memo).  Writes by
    other processes do not change it: records are measurements, and a
    process keeps using what it read until it writes or closes."""
    return _GENERATION[0]


def _changed():
    _GENERATION[0] += 1


def _check_names(kind, key):
    """A record's kind and key are str (anything else would reach the
    database as a binding error, which reads as a broken store)."""
    if not isinstance(kind, str) or not isinstance(key, str):
        raise TypeError(f"tuning: kind and key must be str, got {type(kind).__name__}, "
                        f"{type(key).__name__}")


class Store:
    """The records of one database file, or of this process only
    (``directory=None``).  Thread-safe; every method is a no-raise call
    except for arguments that cannot be stored."""

    def __init__(self, directory=None):
        self.directory = None if directory is None else Path(directory)
        self.path = None if directory is None else self.directory / DB_FILE
        self._lock = threading.RLock()
        self._conn = None
        self._conn_id = None           # (pid, st_dev, st_ino) of the open file
        self._memory = {} if directory is None else None
        self._migrated: set = set()
        self._abandoned: list = []     # connections to a replaced file: never closed
        _ALL_STORES.add(self)

    # ------------------------------------------------------------ public API
    @property
    def in_memory(self) -> bool:
        """True when records live only in this process (no usable database)."""
        return self._memory is not None

    def get(self, kind: str, key: str, valid=None, default=None):
        """The recorded value of (kind, key), or ``default`` when there is
        none or it is damaged (not JSON, or ``valid(value)`` is false)."""
        _check_names(kind, key)

        def on_db(conn):
            row = conn.execute("SELECT value FROM records WHERE kind = ? AND key = ?",
                               (kind, key)).fetchone()
            return None if row is None else row[0]
        text = self._do(on_db, lambda mem: mem.get((kind, key), (None,))[0])
        if text is None:
            return default
        value = self._decode(kind, key, text, valid)
        return default if value is _BAD else value

    def put(self, kind: str, key: str, value, meta=None) -> None:
        """Records ``value`` (JSON-serialisable) for (kind, key), replacing
        any earlier record; ``meta``: a JSON object kept beside it."""
        _check_names(kind, key)
        text = json.dumps(value, sort_keys=True, allow_nan=False)
        meta_text = json.dumps(dict(meta or {}), sort_keys=True)
        now = time.time()

        def on_db(conn):
            conn.execute("INSERT OR REPLACE INTO records (kind, key, value, created, meta) "
                         "VALUES (?, ?, ?, ?, ?)", (kind, key, text, now, meta_text))

        def on_memory(mem):
            mem[(kind, key)] = (text, now, meta_text)
        _changed()
        self._do(on_db, on_memory)

    def records(self, kind: str, valid=None) -> dict:
        """{key: value} of every intact record of ``kind``."""
        def on_db(conn):
            return conn.execute("SELECT key, value FROM records WHERE kind = ?", (kind,)).fetchall()
        rows = self._do(on_db, lambda mem: [(k, v[0]) for (kd, k), v in mem.items() if kd == kind])
        out = {}
        for key, text in rows or ():
            value = self._decode(kind, key, text, valid)
            if value is not _BAD:
                out[key] = value
        return out

    def info(self, kind: str, key: str):
        """``{"created": time, "meta": {...}}`` of a record, or None."""
        def on_db(conn):
            return conn.execute("SELECT created, meta FROM records WHERE kind = ? AND key = ?",
                                (kind, key)).fetchone()
        row = self._do(on_db, lambda mem: (mem[(kind, key)][1:] if (kind, key) in mem else None))
        if row is None:
            return None
        try:
            meta = json.loads(row[1])
        except (TypeError, ValueError):
            meta = {}
        return {"created": row[0], "meta": meta}

    def forget(self, kind: str, key=None) -> None:
        """Removes the record (kind, key), or every record of ``kind``."""
        _check_names(kind, "" if key is None else key)

        def on_db(conn):
            if key is None:
                conn.execute("DELETE FROM records WHERE kind = ?", (kind,))
            else:
                conn.execute("DELETE FROM records WHERE kind = ? AND key = ?", (kind, key))

        def on_memory(mem):
            for k in [k for k in mem if k[0] == kind and (key is None or k[1] == key)]:
                del mem[k]
        _changed()
        self._do(on_db, on_memory)

    def migrate_json(self, kind: str, filename: str, valid=None) -> int:
        """Imports the records of a legacy JSON file (``{key: value}``, in
        this store's directory) as ``kind`` once per database: records
        already present win, invalid ones and a file that is not such a
        mapping are ignored.  Returns how many were imported."""
        tag = (kind, filename)
        with self._lock:
            if tag in self._migrated or self.directory is None:
                return 0
            self._migrated.add(tag)
        try:
            with open(self.directory / filename, encoding="utf-8") as fh:
                data = json.load(fh)
        except (OSError, ValueError, RecursionError):
            return 0
        if not isinstance(data, dict):
            return 0
        rows = []
        for key, value in data.items():
            try:
                if valid is None or valid(value):
                    rows.append((kind, key, json.dumps(value, sort_keys=True, allow_nan=False),
                                 time.time(), json.dumps({"migrated_from": filename})))
            except Exception:
                continue
        marker = f"migrated:{kind}:{filename}"

        def on_db(conn):
            conn.execute("BEGIN IMMEDIATE")
            try:
                done = conn.execute("INSERT OR IGNORE INTO meta (name, value) VALUES (?, ?)",
                                    (marker, str(time.time()))).rowcount == 0
                if not done:
                    conn.executemany("INSERT OR IGNORE INTO records (kind, key, value, created, "
                                     "meta) VALUES (?, ?, ?, ?, ?)", rows)
                conn.execute("COMMIT")
            except BaseException:
                conn.execute("ROLLBACK")
                raise
            return 0 if done else len(rows)

        def on_memory(mem):
            for kd, key, text, created, meta in rows:
                mem.setdefault((kd, key), (text, created, meta))
            return len(rows)
        _changed()
        return self._do(on_db, on_memory) or 0

    def close(self) -> None:
        """Closes the database connection (the next call opens it again)."""
        _changed()
        with self._lock:
            self._release()

    # ------------------------------------------------------------ internals
    def _decode(self, kind, key, text, valid):
        try:
            value = json.loads(text)
            ok = valid is None or bool(valid(value))
        except Exception:
            ok = False
        if ok:
            return value
        _warn_once((str(self.path), "record", kind),
                   f"tuning store {self.path or '(in memory)'}: ignoring damaged record(s) of "
                   f"{kind!r} (first: {key!r} = {str(text)[:80]!r}); they are measured again "
                   f"and overwritten")
        return _BAD

    def _do(self, on_db, on_memory):
        """``on_db(connection)`` under the lock; the damaged database is
        repaired and the call retried once; any other failure moves this
        store to memory for the rest of the process."""
        with self._lock:
            for attempt in (0, 1):
                if self._memory is not None:
                    return on_memory(self._memory)
                try:
                    return on_db(self._connection())
                except _ERRORS as exc:
                    problem = exc
                if attempt == 0 and _is_damage(problem):
                    try:
                        self._repair(problem)
                        continue
                    except _ERRORS as exc:
                        problem = exc
                if isinstance(problem, _Newer):
                    self._to_memory(f"it was written by a newer tiramisu_py ({problem}); "
                                    f"left as it is")
                else:
                    self._to_memory(f"it cannot be used ({type(problem).__name__}: {problem})")
            return on_memory(self._memory)

    def _to_memory(self, why):
        _changed()
        self._release()
        self._memory = {}
        _warn_once((str(self.path), "memory"),
                   f"tuning store {self.path}: {why}; records are kept in memory for this "
                   f"process only")

    def _file_id(self):
        st = os.stat(self.path)
        return (os.getpid(), st.st_dev, st.st_ino)

    def _connection(self):
        if self._conn is not None:
            try:
                same = self._file_id() == self._conn_id
            except OSError:
                same = False
            if same:
                return self._conn
            self._drop()               # replaced, removed or forked: reopen
        with _FileLock(self._lock_path()):
            self._conn = self._open(check=False)
            self._conn_id = self._file_id()
        return self._conn

    def _release(self):
        """Closes the connection if its file is still at its name, else
        forgets it (see :meth:`_drop`).  Under the file lock where there is
        one, so that no other process moves the file aside meanwhile."""
        if self._conn is None:
            return
        try:
            lock = _FileLock(self._lock_path()).__enter__()
        except OSError:
            lock = None
        try:
            try:
                same = self._file_id() == self._conn_id
            except OSError:
                same = False
            try:
                self._drop(close=same)
            except sqlite3.Error:
                self._conn = self._conn_id = None
        finally:
            if lock is not None:
                lock.__exit__()

    def _lock_path(self):
        return self.path.with_name(self.path.name + ".lock")

    def _drop(self, close=False):
        """Forgets the connection.  One to a file that was replaced (or of a
        parent process) is kept open: closing it would let SQLite checkpoint
        and delete the ``-wal`` file by name, which is now the new file's."""
        if self._conn is not None:
            if close:
                self._conn.close()
            else:
                self._abandoned.append(self._conn)
        self._conn = self._conn_id = None

    def _open(self, check):
        """A connection to a valid store (created if the file is new), under
        the file lock.  Raises _Damaged / sqlite3 errors / _Newer / OSError."""
        if not self.path.exists():     # private like the cache (-wal/-shm copy the mode)
            os.close(os.open(self.path, os.O_RDWR | os.O_CREAT, 0o600))
        conn = sqlite3.connect(str(self.path), timeout=BUSY_TIMEOUT, isolation_level=None,
                               check_same_thread=False)
        try:
            app = conn.execute("PRAGMA application_id").fetchone()[0]   # reads the header
            version = conn.execute("PRAGMA user_version").fetchone()[0]
            tables = [r[0] for r in conn.execute("SELECT name FROM sqlite_master")]
            if not tables and app == 0 and version == 0:
                conn.execute("BEGIN IMMEDIATE")
                try:
                    for stmt in _SCHEMA:
                        conn.execute(stmt)
                    conn.execute("COMMIT")
                except BaseException:
                    conn.execute("ROLLBACK")
                    raise
            else:
                if app != APPLICATION_ID:
                    raise _Damaged(f"not a tiramisu_py tuning database (application_id {app})")
                if version > SCHEMA_VERSION:
                    raise _Newer(f"schema version {version} > {SCHEMA_VERSION}")
                for table, columns in _COLUMNS.items():
                    found = [r[1] for r in conn.execute(f"PRAGMA table_info({table})")]
                    if found != columns or version != SCHEMA_VERSION:
                        raise _Damaged(f"wrong schema (version {version}, table {table}: "
                                       f"{found or 'missing'})")
            conn.execute("PRAGMA journal_mode = WAL").fetchone()    # a foreign file: untouched
            conn.execute("PRAGMA synchronous = NORMAL")
            if check:
                result = conn.execute("PRAGMA quick_check").fetchall()
                if result != [("ok",)]:
                    raise _Damaged(f"quick_check: {result[:3]}")
            return conn
        except BaseException:
            conn.close()               # the file is still at its name: safe
            raise

    def _repair(self, exc):
        """Moves a damaged database aside and starts a fresh one, unless
        another thread or process has done so already (checked again under
        the file lock)."""
        _changed()
        self._release()
        with _FileLock(self._lock_path()):
            try:
                self._conn = self._open(check=True)
                self._conn_id = self._file_id()
                return                 # repaired meanwhile, or a transient error
            except _Newer:
                raise
            except (sqlite3.Error, _Damaged) as again:
                if not _is_damage(again):
                    raise
                exc = again
            stamp = time.strftime("%Y%m%dT%H%M%S") + f".{time.time_ns() % 10**9:09d}"
            aside = self.path.with_name(f"{self.path.name}.corrupt-{stamp}")
            os.replace(self.path, aside)
            for suffix in ("-wal", "-shm", "-journal"):
                side = self.path.with_name(self.path.name + suffix)
                if side.exists():
                    os.replace(side, aside.with_name(aside.name + suffix))
            self._conn = self._open(check=False)
            self._conn_id = self._file_id()
        _warn_once((str(self.path), "damaged", stamp),
                   f"tuning store {self.path} was damaged ({type(exc).__name__}: {exc}); "
                   f"moved aside to {aside.name} and started afresh (its records are "
                   f"measured again)")


_BAD = object()


# SQLite connections must not cross fork(), and a new one in the child would
# share the parent's lock bookkeeping of the file: the parent closes them
# before forking (reopened on its next call), under every store's lock.
_FORK_HELD: list = []


def _before_fork():
    for s in list(_ALL_STORES):
        s._lock.acquire()
        _FORK_HELD.append(s)
        s.close()


def _after_fork_in_parent():
    while _FORK_HELD:
        _FORK_HELD.pop()._lock.release()


def _after_fork_in_child():            # a lock held by another thread of the parent
    global _WARNED_LOCK, _STORES_LOCK
    _WARNED_LOCK, _STORES_LOCK = threading.Lock(), threading.Lock()
    _FORK_HELD.clear()
    for s in list(_ALL_STORES):
        s._lock = threading.RLock()
        if s._conn is not None:
            s._abandoned.append(s._conn)
        s._conn = s._conn_id = None


if hasattr(os, "register_at_fork"):
    os.register_at_fork(before=_before_fork, after_in_parent=_after_fork_in_parent,
                        after_in_child=_after_fork_in_child)


# ------------------------------------------------------------ module level
_STORES: dict = {}
_STORES_LOCK = threading.Lock()
_MEMORY = Store(None)


def store(directory=None) -> Store:
    """The store of ``directory`` (default: the compile cache directory);
    one object per directory and process.  Where the cache directory cannot
    be had, an in-memory store (one warning)."""
    if directory is None:
        try:
            from codegen.cache import cache_dir
            directory = cache_dir()
        except Exception as exc:
            _warn_once(("cache_dir", "memory"),
                       f"tuning store: no cache directory ({type(exc).__name__}: {exc}); "
                       f"records are kept in memory for this process only")
            return _MEMORY
    directory = str(directory)
    with _STORES_LOCK:
        s = _STORES.get(directory)
        if s is None:
            s = _STORES[directory] = Store(directory)
        return s


def close(directory=None) -> None:
    """Closes and forgets the stores (all, or that of ``directory``); the
    next call opens the file again.  For tests, and for a process that wants
    its file handles back."""
    _changed()
    with _STORES_LOCK:
        stores = [_STORES.pop(k) for k in (list(_STORES) if directory is None else [str(directory)])
                  if k in _STORES]
    for s in stores:
        s.close()


def get(kind, key, valid=None, default=None):
    """``store().get(...)``: the record of (kind, key) in the cache directory's store."""
    return store().get(kind, key, valid=valid, default=default)


def put(kind, key, value, meta=None):
    """``store().put(...)``."""
    store().put(kind, key, value, meta=meta)


def records(kind, valid=None):
    """``store().records(...)``."""
    return store().records(kind, valid=valid)


def forget(kind, key=None):
    """``store().forget(...)``."""
    store().forget(kind, key)

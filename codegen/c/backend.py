"""The C backend's driver: ``compile_c(fn)`` emits C for a
:class:`~codegen.ir.LoweredFunction` (:func:`codegen.c.emit.emit_c`), builds it
with the system C compiler (or takes it from the on-disk cache) and loads it
with cffi in ABI mode.  Array arguments are passed as raw integer addresses."""
from __future__ import annotations

import threading
import types

import cffi

from .. import cache, ir, team, toolchain
from ..toolchain import CompileError
from .emit import cffi_declaration, emit_c

__all__ = ["compile_c", "compile_c_source", "CompiledFunction"]


class CompiledFunction:
    """A loaded kernel.  ``call(scalars, addresses)`` runs it and returns its
    status (0 success, 1 a temporary could not be allocated); its parallel
    loops run with the team :mod:`codegen.team` gives the call (one thread in
    a forked child, the free cores on a busy machine).
    ``func`` is the raw cffi function, ``func(*scalars, *addresses)``, without
    that rule: it may hang in a forked child."""

    def __init__(self, name, source, path, c_path, key, ffi, lib):
        self.name = name
        self.source = source
        self.path = str(path)
        self.c_path = str(c_path)
        self.key = key
        self.ffi = ffi          # keep the FFI and library alive with the function
        self.lib = lib
        self.func = getattr(lib, name)
        self.timing = team.Timing()
        self.syncs = 0                  # the team's meetings a call (codegen.team)

    def call(self, scalars, addresses) -> int:
        return team.call(self.func, (*scalars, *addresses), self.timing, self.syncs)

    def __repr__(self):
        return f"<CompiledFunction {self.name} {self.path}>"


_loaded: dict = {}                 # (cache dir, key) -> CompiledFunction
_lock = threading.RLock()


_opened: set = set()               # paths dlopened by this process (never unmapped)


def _load(fn: ir.LoweredFunction, path, declaration=None):
    ffi = cffi.FFI()
    ffi.cdef(declaration or cffi_declaration(fn))
    path = str(path)
    # dlopen returns an already loaded library of the same name: a library
    # rebuilt at a path this process loaded before (a bad hit) is opened
    # through a fresh copy.
    alias = cache.fresh_copy(path) if path in _opened else None
    try:
        # RTLD_NODELETE: never unmap the library (and so libgomp) while OpenMP
        # worker threads may still sit in it, e.g. at interpreter exit.
        lib = ffi.dlopen(str(alias or path), ffi.RTLD_NOW | ffi.RTLD_NODELETE)
    finally:
        if alias is not None:
            cache.unlink_quietly(alias)
    _opened.add(path)
    getattr(lib, fn.name)          # fail here, not at the first call, if the symbol is missing
    return ffi, lib


def _build(cc, flags, source: str, key: str, directory):
    """Builds into ``directory`` (or, if it is read-only, a private temporary
    one: :func:`cache.build_directory`); returns the installed .so."""
    directory = cache.build_directory(directory)
    so, _, c_path = cache.paths(key, directory)
    cache.atomic_write(c_path, source.encode())
    tmp = cache.temp_path(key, ".so", directory)
    try:
        toolchain.build_shared(cc, flags, c_path, tmp)
        return cache.install(key, tmp, directory)
    finally:
        cache.unlink_quietly(tmp)


def compile_c(fn: ir.LoweredFunction, source=None, declaration=None) -> CompiledFunction:
    """Emits, compiles (or fetches from the cache) and loads ``fn``.  If the
    build fails with compiler flags probed by an earlier process, the probe is
    re-run once and, when the flags change, the build is retried with them.
    ``source`` and ``declaration`` (the cffi cdef): what ``emit_c`` and
    :func:`cffi_declaration` gave for ``fn`` before, to skip them (a warm
    start; ``fn`` then needs only its name, scalars and arrays)."""
    source = emit_c(fn) if source is None else source
    cc = toolchain.find_c_compiler()
    try:
        return _compile_c(fn, source, cc, declaration)
    except CompileError:
        if not toolchain.reprobe(cc):
            raise
    return _compile_c(fn, source, cc, declaration)


def compile_c_source(name: str, source: str, declaration: str) -> CompiledFunction:
    """Builds (or takes from the on-disk cache) and loads hand-written C
    ``source`` that defines the function ``name``, declared to cffi by
    ``declaration``: a runtime helper of the library, not a kernel of loop IR.
    The same compiler, flags (``-march=native`` where accepted: a helper may
    test ``__AVX512F__``), cache and errors as :func:`compile_c`."""
    return compile_c(types.SimpleNamespace(name=name), source, declaration)


def _compile_c(fn: ir.LoweredFunction, source: str, cc, declaration=None) -> CompiledFunction:
    flags = toolchain.compiler_flags(cc)
    directory = cache.cache_dir()
    key = cache.make_key(source, cc.identity, flags)
    with _lock:
        hit = _loaded.get((str(directory), key))
        if hit is not None:
            return hit
        _, _, c_path = cache.paths(key, directory)

        def lookup():
            path = cache.lookup(key, directory)
            if path is not None:
                cache.keep_copy(c_path, source)
            return path

        path, (ffi, lib) = cache.load_or_build(
            lookup, lambda: _build(cc, flags, source, key, directory), lambda p: _load(fn, p, declaration),
            lambda: cache.invalidate(key, directory), (OSError, AttributeError),
            lambda what, p, exc: CompileError(f"{what} {p} but could not load it: {exc}",
                                              cache.paths(key, p.parent)[2]))
        cf = CompiledFunction(fn.name, source, path, cache.paths(key, path.parent)[2], key, ffi, lib)
        cf.syncs = getattr(fn, "syncs", 0)
        _loaded[(str(directory), key)] = cf
        return cf

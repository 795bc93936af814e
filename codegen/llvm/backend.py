"""LLVM backend: the loop IR JIT-compiled in-process with llvmlite (no C compiler).

``compile_llvm(fn)`` emits LLVM IR (:func:`emit_llvm`, see :mod:`codegen.llvm.lower`
and :mod:`codegen.llvm.stmt`), optimises it with the new pass manager at speed
level 3 for the host CPU (name and features, ``prefer-vector-width=512`` on
AVX-512, no gathers/scatters on AMD Zen: :func:`codegen.llvm.lower.tuning_features`), emits an object file with ``TargetMachine.emit_object`` and loads it
into its own MCJIT engine with ``add_object_file``.  The calling convention is the
C backend's: every scalar, then every array as a raw address; it returns 0, or 1
if a temporary could not be allocated.

Cache: the object is stored in the C backend's on-disk cache as ``<key>.o`` (+
``<key>.o.sha256``; the IR text as ``<key>.ll``), key = sha256 of the IR text,
the LLVM and llvmlite versions, the triple, host CPU name and features and
:data:`FORMAT_VERSION`.  A warm start (another process) reads the object and
skips parsing, optimisation and codegen (:data:`CODEGEN_RUNS` counts those).
A corrupt entry (digest mismatch, or not a well-formed ELF object defining the
function) is rebuilt, never loaded; entries are read and written under the
cache's trust rules (:mod:`codegen.cache`: foreign, group/other-writable or
non-regular files are misses; a read-only cache builds into a private
temporary directory).

LLVM aborts the process on an unresolved symbol at link time, so every
undefined symbol of the object (read from its ELF symbol table) and every
declared function of the module is looked up with ``llvm.address_of_symbol``
first; a missing one raises :class:`LLVMCompileError` naming it and the ``.ll``
file.  ``libgomp.so.1`` is loaded (``llvm.load_library_permanently``, and
pinned with ``RTLD_NODELETE`` so that llvmlite's ``dlclose`` at exit never
unmaps it under libgomp's spinning threads) when the code uses OpenMP.
"""
from __future__ import annotations

import ctypes
import hashlib
import os
import struct
import threading

import cffi
import llvmlite
import llvmlite.binding as llvm

from .. import budget, cache, ir, team
from .lower import host, host_target_machine, target_machine
from .stmt import emit_llvm

__all__ = ["emit_llvm", "compile_llvm", "LLVMCompileError", "LLVMCompiledFunction", "CODEGEN_RUNS"]

FORMAT_VERSION = "tiramisu_py-llvm-1|O3|speed3|ordered-reductions|2"
CODEGEN_RUNS = 0            # LLVM parse + optimisation + object emissions in this process
ENGINE_LOADS = 0            # objects loaded into an MCJIT engine in this process
_CFFI_TYPES = {"float32": "float", "float64": "double", "int8": "int8_t", "uint8": "uint8_t",
               "int32": "int32_t", "int64": "int64_t", "bool": "_Bool", "bfloat16": "uint16_t",
               "float16": "uint16_t"}
_LIBGOMP = "libgomp.so.1"
_LIBM = "libm.so.6"


class LLVMCompileError(RuntimeError):
    """LLVM rejected the generated module, or it needs a symbol this process lacks.
    ``ll_path`` is the IR file kept in the cache directory."""

    def __init__(self, message: str, ll_path=None):
        super().__init__(message)
        self.ll_path = ll_path


class LLVMCompiledFunction:
    """A loaded kernel with the interface of the C backend's CompiledFunction:
    ``call(scalars, addresses)`` returns the status (with the team
    :mod:`codegen.team` gives the call); ``func(*scalars, *addresses)`` is the raw cffi
    function pointer.  Keeps its engine (and target machine) alive."""

    def __init__(self, name, source, path, ll_path, key, engine, tm, address, ctype):
        self.name = name
        self.source = source
        self.path = str(path)
        self.ll_path = str(ll_path)
        self.key = key
        self.engine = engine
        self._tm = tm
        self.address = address
        self.func = _ffi.cast(ctype, address)
        self.timing = team.Timing()
        self.syncs = 0                  # the team's meetings a call (codegen.team)

    def call(self, scalars, addresses) -> int:
        return team.call(self.func, (*scalars, *addresses), self.timing, self.syncs)

    def __repr__(self):
        return f"<LLVMCompiledFunction {self.name} {self.path}>"


_ffi = cffi.FFI()
_loaded: dict = {}                 # (cache dir, key) -> LLVMCompiledFunction
_lock = threading.RLock()
_libraries: dict = {}              # name -> None or the error text
_pinned: list = []                 # handles of the libraries kept mapped until the process ends


class _BadObject(Exception):
    pass


def make_key(source: str) -> str:
    h = host()
    hs = hashlib.sha256()
    for part in (FORMAT_VERSION, llvmlite.__version__, h.llvm_version, h.triple, h.cpu,
                 h.features, *_OPTIONS, source):
        hs.update(part.encode())
        hs.update(b"\0\1\0")
    return hs.hexdigest()


def _ctype(fn: ir.LoweredFunction) -> str:
    args = [_CFFI_TYPES[s.dtype] for s in fn.scalars] + ["intptr_t"] * len(fn.arrays)
    return f"int(*)({', '.join(args) or 'void'})"


# ------------------------------------------------------------------ symbols
def elf_symbols(data: bytes) -> tuple:
    """(defined, undefined) global symbol names of an ELF64 relocatable object;
    raises _BadObject if it is not a well-formed one."""
    if len(data) < 64 or data[:4] != b"\x7fELF" or data[4] != 2 or data[5] != 1:
        raise _BadObject("not a little-endian ELF64 object")
    hdr = struct.unpack_from("<16sHHIQQQIHHHHHH", data, 0)
    shoff, shentsize, shnum = hdr[6], hdr[11], hdr[12]
    if shentsize != 64 or shnum == 0 or shoff + 64 * shnum > len(data):
        raise _BadObject("bad section header table")
    secs = [struct.unpack_from("<IIQQQQIIQQ", data, shoff + 64 * k) for k in range(shnum)]
    for s in secs:
        if s[1] != 8 and s[4] + s[5] > len(data):          # SHT_NOBITS has no file data
            raise _BadObject("section beyond the end of the file")
    tabs = [s for s in secs if s[1] == 2]                  # SHT_SYMTAB
    if len(tabs) != 1 or tabs[0][6] >= shnum:
        raise _BadObject("no symbol table")
    tab = tabs[0]
    stroff, strsize = secs[tab[6]][4], secs[tab[6]][5]
    defined, undefined = set(), set()
    for k in range(tab[5] // 24):
        name_off, info, _, shndx, _, _ = struct.unpack_from("<IBBHQQ", data, tab[4] + 24 * k)
        if name_off >= strsize:
            raise _BadObject("bad symbol name")
        end = data.find(b"\0", stroff + name_off, stroff + strsize)
        if end < 0:
            raise _BadObject("bad symbol name")
        name = data[stroff + name_off:end].decode("utf-8", "replace")
        bind = info >> 4
        if name and bind in (1, 2):                         # GLOBAL, WEAK
            if shndx != 0:
                defined.add(name)
            elif bind == 1:                                 # a missing weak one resolves to 0
                undefined.add(name)
    return defined, undefined


def _load_library(name: str):
    if name not in _libraries:
        try:
            _pin(name)
            llvm.load_library_permanently(name)
            _libraries[name] = None
        except (RuntimeError, OSError) as exc:
            _libraries[name] = str(exc).strip() or "not found"
    return _libraries[name]


def _pin(name: str) -> None:
    """Loads ``name`` so that it is never unmapped (``RTLD_NODELETE``, a
    handle never closed): at exit llvmlite's destructor ``dlclose`` closes the
    libraries it loaded, and libgomp's worker threads, still spinning
    (``OMP_WAIT_POLICY=active``), would run unmapped code (a segfault at
    interpreter exit)."""
    mode = os.RTLD_GLOBAL | getattr(os, "RTLD_NODELETE", 0)
    _pinned.append(ctypes.CDLL(name, mode=mode))


def check_symbols(names, ll_path) -> None:
    """Raises LLVMCompileError unless every symbol in ``names`` resolves in this process."""
    names = sorted(set(names))
    notes = []
    if any(n.startswith(("GOMP_", "omp_")) for n in names):
        err = _load_library(_LIBGOMP)
        if err:
            notes.append(f"{_LIBGOMP} could not be loaded: {err}")
    _load_library(_LIBM)
    missing = [n for n in names if not llvm.address_of_symbol(n)]
    if missing:
        raise LLVMCompileError(
            f"LLVM backend: unresolved external symbol(s) {', '.join(map(repr, missing))} needed by "
            f"the generated code in {ll_path}" + "".join(f"; {n}" for n in notes), ll_path)


# ------------------------------------------------------------------ build and load
# process-wide LLVM options: in-order float reductions (codegen.ordered); the
# full unroller's simulation of a loop's iterations (which loops fold away
# once unrolled) only for loops of at most 6 iterations -- LLVM's 10 spent 5 s
# of a 5.3 s build simulating the 8 x 8 tiles of a Winograd block, again after
# each unrolling exposed the next loop (0.26 s at 6; the library's GEMM,
# convolutions and the auto-scheduled kernels ran as fast, A/B interleaved)
_OPTIONS = ("-force-ordered-reductions", "-unroll-max-iteration-count-to-analyze=6")
_options_set = False


def _set_options() -> None:
    """Sets :data:`_OPTIONS` once: in-order float reductions may be vectorised
    (the products in vector registers, the adds in program order; the loops where
    that does not pay carry ``llvm.loop.vectorize.enable false``); the full
    unroller's analysis bounded."""
    global _options_set
    if not _options_set:
        for o in _OPTIONS:
            llvm.set_option("tiramisu_py", o)
        _options_set = True


def _build(source: str, key: str, directory, ll_path) -> bytes:
    """Parses, verifies, optimises and compiles ``source``; stores the object."""
    global CODEGEN_RUNS
    cache.keep_copy(ll_path, source, replace=True)     # for the reader; the build is in memory
    try:
        mod = llvm.parse_assembly(source)
        mod.verify()
    except RuntimeError as exc:
        raise LLVMCompileError(f"LLVM rejected the generated module {ll_path}: {exc}", ll_path) from exc
    check_symbols([f.name for f in mod.functions
                   if f.is_declaration and not f.name.startswith("llvm.")], ll_path)
    tm = host_target_machine()
    _set_options()
    pto = llvm.create_pipeline_tuning_options(speed_level=3)
    pto.loop_vectorization = pto.slp_vectorization = pto.loop_unrolling = True
    pb = llvm.create_pass_builder(tm, pto)
    try:
        pb.getModulePassManager().run(mod, pb)
        data = tm.emit_object(mod)
    except RuntimeError as exc:
        raise LLVMCompileError(f"LLVM could not compile {ll_path}: {exc}", ll_path) from exc
    CODEGEN_RUNS += 1
    cache.install_object(key, data, directory)
    return data


def _load(name: str, data: bytes, ll_path) -> tuple:
    """(engine, target machine, address) of ``name`` in the object ``data``."""
    global ENGINE_LOADS
    defined, undefined = elf_symbols(data)
    if name not in defined:
        raise _BadObject(f"the object does not define {name!r}")
    check_symbols(undefined, ll_path)
    h = host()
    tm = target_machine(h.triple, h.cpu, h.features)      # owned by the engine: one each
    empty = llvm.parse_assembly("")
    empty.triple, empty.data_layout = h.triple, h.datalayout
    engine = llvm.create_mcjit_compiler(empty, tm)
    engine.add_object_file(llvm.ObjectFileRef.from_data(data))
    engine.finalize_object()
    address = engine.get_function_address(name)
    if not address:
        raise _BadObject(f"{name!r} has no address after loading")
    ENGINE_LOADS += 1
    return engine, tm, address


def compile_llvm(fn: ir.LoweredFunction, source=None) -> LLVMCompiledFunction:
    """Emits, compiles (or fetches from the cache) and loads ``fn``.
    ``source``: what ``emit_llvm(fn)`` gave before, to skip it (a warm
    start; ``fn`` then needs only its name, scalars and arrays)."""
    if source is None:
        budget.check(fn)                 # LLVM runs in this process: bound its unrolling
        source = emit_llvm(fn)
    key = make_key(source)
    directory = cache.cache_dir()
    with _lock:
        hit = _loaded.get((str(directory), key))
        if hit is not None:
            return hit
        where = [directory]        # the cache, or a private build directory if it is read-only

        def lookup():
            data = cache.lookup_object(key, directory)
            if data is not None:
                cache.keep_copy(cache.object_paths(key, directory)[2], source)
            return data

        def build():
            where[0] = cache.build_directory(directory)
            return _build(source, key, where[0], cache.object_paths(key, where[0])[2])

        def fail(what, _data, exc):
            obj, _, ll = cache.object_paths(key, where[0])
            return LLVMCompileError(f"{what} {obj} from {ll} but could not load it: {exc}", ll)

        _, loaded = cache.load_or_build(
            lookup, build, lambda data: _load(fn.name, data, cache.object_paths(key, where[0])[2]),
            lambda: cache.invalidate_object(key, where[0]), _BadObject, fail)
        obj_path, _, ll_path = cache.object_paths(key, where[0])
        cf = LLVMCompiledFunction(fn.name, source, obj_path, ll_path, key, *loaded, _ctype(fn))
        cf.syncs = getattr(fn, "syncs", 0)
        _loaded[(str(directory), key)] = cf
        return cf

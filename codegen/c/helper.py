"""Small hand-written C helpers of the runtime and the library (an index
array's range, a comparison, a transpose), each built once per host on
first use through :func:`codegen.c.backend.compile_c_source` (the host's
compiler and flags, the on-disk cache; cffi releases the GIL during a
call)."""
from __future__ import annotations

import threading

from ..toolchain import CompileError
from .backend import compile_c_source


class CHelper:
    """The library of one C ``source`` declaring ``declaration`` (cffi's
    cdef), built on the first :meth:`lib` call; None where no C compiler
    builds it (the caller's fallback runs then).  :meth:`ffi`: its cffi
    ``FFI`` (``from_buffer``, ``new``), once :meth:`lib` built it."""

    def __init__(self, name: str, source: str, declaration: str):
        self.name, self.source, self.declaration = name, source, declaration
        self._built = None          # the CompiledFunction, False: none can be built here
        self._lock = threading.Lock()

    def lib(self):
        with self._lock:
            if self._built is None:
                try:
                    self._built = compile_c_source(self.name, self.source, self.declaration)
                except (CompileError, OSError, ImportError):
                    self._built = False
        return self._built.lib if self._built else None

    def ffi(self):
        return self._built.ffi if self._built else None

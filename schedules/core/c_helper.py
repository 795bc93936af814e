"""Small C helpers of the library (a comparison, a transpose), each built
once per host on first use through :func:`codegen.compile_c_source` (the
host's compiler and flags; cffi releases the GIL during a call)."""
from __future__ import annotations

import threading


class CHelper:
    """The library of one C ``source`` declaring ``declaration`` (cffi's
    cdef), built on the first :meth:`lib` call; None where no C compiler
    builds it (the caller's fallback runs then)."""

    def __init__(self, name: str, source: str, declaration: str):
        self.name, self.source, self.declaration = name, source, declaration
        self._lib = None            # the loaded library, False: none can be built here
        self._lock = threading.Lock()

    def lib(self):
        with self._lock:
            if self._lib is None:
                try:
                    from codegen import CompileError, compile_c_source
                    self._lib = compile_c_source(self.name, self.source, self.declaration).lib
                except (CompileError, OSError, ImportError):
                    self._lib = False
        return self._lib or None

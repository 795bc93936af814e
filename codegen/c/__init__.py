"""The C backend (C99 + OpenMP, loaded with cffi): :mod:`codegen.c.emit`
prints the loop IR as C (the printer :class:`~codegen.c.emit.CPrinter`,
:func:`emit_c`, :func:`cffi_declaration`), :mod:`codegen.c.widen` its explicit
vector code (GCC/Clang vector extensions), :mod:`codegen.c.backend` builds,
caches and loads it (:func:`compile_c`; hand-written runtime helpers:
:func:`compile_c_source`, built once per host by :class:`CHelper`).  The C family's spelling, which the
CUDA printer shares: :mod:`codegen.c.syntax` (types, literals, precedence),
:mod:`codegen.c.names` (reserved names, C identifiers), :mod:`codegen.c.helpers`
(the ``tp_*`` helpers), :mod:`codegen.c.vecmath` (vector math as C)."""
from .backend import CompiledFunction, compile_c, compile_c_source
from .emit import cffi_declaration, emit_c
from .helper import CHelper

__all__ = ["emit_c", "cffi_declaration", "compile_c", "compile_c_source", "CompiledFunction",
           "CHelper"]

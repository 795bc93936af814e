"""Code generation: the target-neutral loop IR (:mod:`codegen.ir`), the passes
and services shared by the backends (:mod:`codegen.loops`, :mod:`codegen.simplify`,
:mod:`codegen.vectorize`, :mod:`codegen.regblock`, :mod:`codegen.vreduce`,
:mod:`codegen.accumulate`, their order :mod:`codegen.pipeline`, the explain
lines :mod:`codegen.report`, :mod:`codegen.vecmath`, :mod:`codegen.toolchain`,
:mod:`codegen.cache`) and the three backends, one subpackage each: C + OpenMP
(:mod:`codegen.c`), LLVM (:mod:`codegen.llvm`), CUDA (:mod:`codegen.cuda`).
A backend imports the top-level modules and the C family (:mod:`codegen.c`);
nothing in codegen imports a backend but this file.

``compile_c(fn)`` (:mod:`codegen.c`) emits C for a :class:`ir.LoweredFunction`,
builds it with the system C compiler (or takes it from the on-disk cache) and
loads it with cffi in ABI mode.  Array arguments are passed as raw integer addresses.

``compile_llvm(fn)`` (:mod:`codegen.llvm`, imported on first use so that
``import codegen`` does not load llvmlite) JIT-compiles the same IR in-process
with llvmlite and returns an object with the same interface; no C compiler needed.
"""
from __future__ import annotations

from . import cache, ir, toolchain
from .c import CHelper, CompiledFunction, cffi_declaration, compile_c, compile_c_source, emit_c
from .toolchain import CompileError

__all__ = ["ir", "emit_c", "compile_c", "compile_c_source", "CHelper", "CompileError",
           "CompiledFunction",
           "emit_llvm", "compile_llvm", "LLVMCompileError"]

_LLVM_EXPORTS = ("emit_llvm", "compile_llvm", "LLVMCompileError", "LLVMCompiledFunction")


def __getattr__(name):          # the LLVM backend, imported lazily
    if name in _LLVM_EXPORTS:
        from .llvm import backend
        return getattr(backend, name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")

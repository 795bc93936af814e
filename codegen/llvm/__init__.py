"""The LLVM backend (llvmlite, in-process JIT): :mod:`codegen.llvm.lower`
(types, values, the module context), :mod:`codegen.llvm.expr` (expressions),
:mod:`codegen.llvm.stmt` (statements, loops, :func:`emit_llvm`),
:mod:`codegen.llvm.reduce` (reduction loops), :mod:`codegen.llvm.vecmath`
(vector math as LLVM functions), :mod:`codegen.llvm.backend`
(:func:`compile_llvm`: optimise, compile, cache, load; its counter
:data:`codegen.llvm.backend.CODEGEN_RUNS`).  Importing this package
loads llvmlite; ``import codegen`` does not (its LLVM names load it lazily)."""
from .backend import LLVMCompiledFunction, LLVMCompileError, compile_llvm, emit_llvm

__all__ = ["emit_llvm", "compile_llvm", "LLVMCompileError", "LLVMCompiledFunction"]

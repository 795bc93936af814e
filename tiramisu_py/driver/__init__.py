"""``compile()``: the target table (C, LLVM, CUDA), the warm start cache, and
``explain()``'s text."""

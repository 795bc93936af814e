"""The target-neutral passes on the loop IR, in their one order.

Two stages, each a tuple of passes ``LoweredFunction -> LoweredFunction`` run
first to last:

* :data:`LOOP_PASSES`, run once by the compiler on the function it lowered for
  a CPU target (:func:`optimize_loops`; these passes rewrite ``fn`` in place
  and return it, so the kernel keeps the optimised loop IR): parallel loops
  with too little work made serial (:func:`codegen.regions.run_small_serially`,
  given the host's parallel grain), index
  simplification from the loop ranges, full-tile versioning, accumulators of
  ``accumulate_locally`` in local temporaries;
* :data:`PRINT_PASSES`, run by each CPU backend (:func:`codegen.c.emit.emit_c`,
  :func:`codegen.llvm.stmt.emit_llvm`) on the function it is asked to print
  (:func:`prepare_for_printing`; a new function, ``fn`` unchanged): vector
  reductions hoisted across the serial loops around them, then register
  blocking of widened vector loops, then the vector loops that are dot
  products of bfloat16 pairs or u8 x s8 quadruples tagged for the host's
  dot-product instruction (:mod:`codegen.dotprod`).

The CUDA path runs its own pair (``simplify_indices``, ``accumulate_locally``:
no full-tile versioning, no CPU vector passes).

This module imports nothing from ``tiramisu_py``.
"""
from __future__ import annotations

from . import ir
from .accumulate import accumulate_locally
from .dotprod import mark_dot_products
from .regblock import register_block
from .regions import run_small_serially, synchronisations
from .simplify import simplify_indices, version_full_tiles
from .vreduce import hoist_vector_reductions

LOOP_PASSES = (simplify_indices, version_full_tiles, accumulate_locally)
PRINT_PASSES = (hoist_vector_reductions, register_block, mark_dot_products)


def run_passes(passes, fn: ir.LoweredFunction) -> ir.LoweredFunction:
    """``fn`` through ``passes``, first to last."""
    for p in passes:
        fn = p(fn)
    return fn


def optimize_loops(fn: ir.LoweredFunction, parallel_grain: int = 0) -> ir.LoweredFunction:
    """:data:`LOOP_PASSES` on ``fn`` (in place; ``fn`` returned), after
    :func:`codegen.regions.run_small_serially` with ``parallel_grain`` (0:
    every parallel loop stays parallel); then records the function's
    synchronisations a call (``fn.syncs``)."""
    fn = run_passes(LOOP_PASSES, run_small_serially(fn, parallel_grain))
    fn.syncs = synchronisations(fn)
    return fn


def prepare_for_printing(fn: ir.LoweredFunction) -> ir.LoweredFunction:
    """:data:`PRINT_PASSES` on ``fn``: the function a CPU backend prints."""
    return run_passes(PRINT_PASSES, fn)

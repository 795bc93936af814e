"""The PolyBench kernel record and what every kernel shares: dataset sizes,
building the three variants, running a compiled kernel, checking results.

Each kernel of PolyBench/C 4.2.1 is a :class:`Kernel`:

- ``build(sizes)``: the plain algorithm (a), PolyBench's loops and statements in
  PolyBench's order, float64, with the dataset's sizes fixed as the Function's
  params (PolyBench compiles its sizes in as macros);
- ``schedule(f, sizes)``: the hand schedule (b), language commands applied to a
  freshly built Function (``compile()`` proves it legal);
- ``inputs(rng, sizes)``: random arrays (structured only where the algorithm
  needs it: positive definite, diagonally dominant...), the in/out arrays'
  initial content included; random rather than PolyBench's stock
  initialisations, several of which are fixed points or symmetric, so that a
  schedule that breaks a dependence gives a different answer;
- ``reference(arrays, sizes)``: an independent NumPy computation of the outputs.

The automatic variant (c) is the plain Function plus ``f.auto_schedule()``
(:func:`auto_schedule`).
"""
from __future__ import annotations

import dataclasses
import time
from dataclasses import dataclass
from typing import Callable

import numpy as np

import tiramisu_py as tp
from codegen.target import vector_bits
from schedules.blocks.blis import blis, default_params

F64 = tp.float64
DATASETS = ("MINI", "SMALL", "MEDIUM", "LARGE")
VARIANTS = ("plain", "hand", "auto", "auto+re")
RTOL, ATOL = 1e-9, 1e-9


def lanes() -> int:
    """float64 SIMD lanes of this host (4 with AVX2, 8 with AVX-512)."""
    return max(2, vector_bits() // 64)


def blis_float64(update, i, j, k, extents, packed=None, **params):
    """The operator library's Goto/BLIS schedule (register block accumulated
    locally, tiles for the caches, a parallel block loop) on ``update``, a
    float64 ``+=`` of ``a[i, k] * b[k, j]`` over ``extents`` = (i, j, k) sizes.
    ``packed``: the reads of B to copy into panels (a list of accesses
    ``B[k, j]``, or ``B[j, k]`` of a transposed operand), else B is read in
    place.  The tile sizes are the library's
    (:func:`schedules.blocks.blis.default_params`) for 8-byte elements;
    ``params`` replace some."""
    p = default_params(*extents, itemsize=8)
    p = dataclasses.replace(p, **params)
    # B[j, k] is read transposed, B[k, j] as it is
    transposed = bool(packed) and repr(packed[0].indices[-1]) == k
    blis(update, None, packed, i, j, k, p, depth=extents[2], b_transposed=transposed)


@dataclass(frozen=True)
class Kernel:
    name: str
    category: str
    sizes: dict                    # dataset -> {param: value}, PolyBench's values
    build: Callable                # (sizes) -> tp.Function: the plain algorithm (a)
    schedule: Callable | None      # (f, sizes) -> None: the hand schedule (b); None: none
    inputs: Callable               # (rng, sizes) -> {array: ndarray}
    reference: Callable            # (arrays, sizes) -> {output: ndarray}
    outputs: tuple                 # names of the arrays the kernel writes
    gaps: str = ""                 # language features the hand schedule missed
    # (outputs, sizes) -> the parts compared with the reference, where the rest
    # is rounding noise amplified (gramschmidt's columns beyond rank M)
    compared: Callable | None = None

    def comparable(self, outputs: dict, sizes_: dict) -> dict:
        return self.compared(outputs, sizes_) if self.compared else outputs


def sizes(kernel: Kernel, dataset: str) -> dict:
    if dataset not in kernel.sizes:
        raise ValueError(f"dataset must be one of {', '.join(DATASETS)}, not {dataset!r}")
    return dict(kernel.sizes[dataset])


def auto_schedule(f: tp.Function, reassociate=False):
    """Applies ``f.auto_schedule(reassociate=...)``: returns (the commands it
    applied, seconds)."""
    t0 = time.perf_counter()
    commands = f.auto_schedule(reassociate=reassociate)
    return commands, time.perf_counter() - t0


def function(kernel: Kernel, dataset: str, variant: str) -> tp.Function:
    """The Function of ``variant`` at ``dataset``: "plain", "hand", "auto" or
    "auto+re" (``auto_schedule(reassociate=True)``)."""
    if variant not in VARIANTS:
        raise ValueError(f"variant must be one of {', '.join(VARIANTS)}, not {variant!r}")
    s = sizes(kernel, dataset)
    f = kernel.build(s)
    if variant == "hand":
        if kernel.schedule is None:
            raise ValueError(f"{kernel.name} has no hand schedule")
        kernel.schedule(f, s)
    elif variant in ("auto", "auto+re"):
        auto_schedule(f, reassociate=variant == "auto+re")
    return f


def random_inputs(kernel: Kernel, dataset: str, seed: int = 0) -> dict:
    return kernel.inputs(np.random.default_rng(seed), sizes(kernel, dataset))


def run(kernel: Kernel, compiled, arrays: dict) -> dict:
    """Calls ``compiled`` on copies of ``arrays`` (outputs are updated in place)
    and returns the outputs by name."""
    args = {n: np.array(a, copy=True) for n, a in arrays.items()}
    returned = compiled(**args)
    if not isinstance(returned, dict):
        returned = {compiled.outputs[0].name: returned}
    return {n: args[n] if n in args else returned[n] for n in kernel.outputs}


def max_error(out: dict, ref: dict) -> float:
    """The largest error relative to each output's scale."""
    return max(float(np.max(np.abs(out[n] - r)) / max(1.0, float(np.max(np.abs(r)))))
               for n, r in ref.items())


def assert_close(out: dict, ref: dict, what: str, rtol=RTOL, atol=ATOL):
    for n, r in ref.items():
        np.testing.assert_allclose(out[n], r, rtol=rtol, atol=atol * max(1.0, np.max(np.abs(r))),
                                   err_msg=f"{what}: output {n!r}")


def each(statements, command, *args, **kwargs):
    """The same command on several statements."""
    for s in statements:
        getattr(s, command)(*args, **kwargs)


def stmt(f: tp.Function, name: str):
    """A statement of ``f`` by name."""
    for s in f.statements:
        if s.name == name:
            return s
    raise KeyError(f"{f.name} has no statement {name!r}: {[s.name for s in f.statements]}")


def rows_of_8(f, statements, dots, parallel=False):
    """``statements`` (sharing loop i) in blocks of 8 rows, one after the
    other in a block; each of ``dots`` (``x[i] += A[i][j] * y[j]``) with
    its 8 rows unrolled inside j, accumulated locally; ``parallel``: the
    blocks in parallel."""
    each(statements, "split", "i", 8)
    for prev, st in zip(statements, statements[1:]):
        st.after(prev, "i0")
    for d in dots:
        d.reorder("j", "i1")
        d.unroll("i1")
        d.accumulate_locally("j")
    if parallel:
        each(statements, "parallelize", "i0")

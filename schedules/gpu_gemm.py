"""GEMM on a GPU: the same algorithm as :mod:`schedules.gemm` with a CUDA
schedule, written in the public language only.

    i0, j0  -> blockIdx.y, blockIdx.x        (a TILE x TILE block of C)
    k0      serial, the whole block           (steps of TK along k)
      A_shared, B_shared                      (cache_shared: TILE x TK and TK x TILE
                                               tiles copied by the block's threads)
      barrier                                 (placed by the legality check: RAW)
      i1, j1 -> threadIdx.y, threadIdx.x      (one element of C per thread)
        k1  serial                            (C += A_tile * B_tile)
      barrier                                 (WAR: the next copy overwrites the tiles)

The barriers are not written by the schedule: the GPU legality check derives
them from the dependences through the shared tiles.  C's initialisation is a
kernel of its own (launched first).  Not yet: register blocking (a micro-tile
of C per thread, accumulated in registers), double buffering, vector loads.
"""
from __future__ import annotations

from .gemm import algorithm

TILE = 16        # C tile per block (TILE x TILE threads)
TK = 16          # k step of the shared tiles


def function(n, m, k, tile=TILE, tk=TK):
    """``C = A @ B`` (float32, shapes fixed) scheduled for CUDA; compile it
    with ``.compile(target="cuda")`` (or for the CPU, where blocks and threads
    run as loops)."""
    return schedule(algorithm(n, m, k), tile, tk)


def schedule(f, tile=TILE, tk=TK):
    """Applies the CUDA GEMM schedule to a GEMM Function ``f`` (computation
    ``C`` over ``i, j`` with its update over ``k``, inputs ``A`` and ``B``)."""
    c = f.computations["C"]
    u = c.update
    c.gpu_tile("i", "j", tile, tile)
    u.gpu_tile("i", "j", tile, tile)
    u.split("k", tk)
    u.reorder("k0", "i1", "j1", "k1")
    u.cache_shared(f.buffers["A"], "k0")
    u.cache_shared(f.buffers["B"], "k0")
    return f

"""GEMM on a GPU: the same algorithm as :mod:`schedules.blocks.blis` with a CUDA
schedule, written in the public language only.

With register blocking (``micro > 1``, the default: 64 x 64 C tile per
block, 16 x 16 threads, a 4 x 4 micro-tile of C per thread)::

    i0, j0    -> blockIdx.y, blockIdx.x      (a TILE x TILE tile of C)
    C_local   per-thread tile (registers)    (accumulate_locally(k0): set to 0)
    k0        serial, the whole block         (steps of TK along k)
      A_shared, B_shared                      (cache_shared: TILE x TK and TK x TILE
                                               tiles copied by the block's threads)
      barrier                                 (placed by the legality check: RAW)
      i_th, j_th -> threadIdx.y, threadIdx.x  (TILE/MICRO threads per axis)
        k1    serial
          i_reg, j_reg  (MICRO x MICRO, unrolled)   C_local += A_tile * B_tile
      barrier                                 (WAR: the next copy overwrites the tiles)
    C += C_local                              (once per thread, after the k loop)

A thread owns rows ``i0*TILE + i_reg*(TILE/MICRO) + i_th`` (and likewise
columns): neighbouring threads read neighbouring B_shared words and store
neighbouring C words (no bank conflicts, coalesced stores).  ``micro=1`` is
the plain shared-tile GEMM (one element of C per thread, accumulated in
global memory).

The barriers are not written by the schedule: the GPU legality check derives
them from the dependences through the shared tiles; the per-thread tile is
``accumulate_locally`` over the block-level k loop (its legality: a
reassociated reduction whose element does not change with k0, on a serial
loop the whole block runs).  C's initialisation is a kernel of its own
(launched first).  ``fragments=True`` adds per-thread copies of the ``micro`` A
and ``micro`` B values of each k1 step (``cache_local``); off by default (no
register gain measured, see docs/internals/cuda.md).  The library runs this
schedule only for products smaller than a warp tile; otherwise the warp-tiled,
pipelined one of :mod:`schedules.blocks.gemm_cuda_warp` (128-bit accesses,
cp.async), or for bfloat16/float16 :mod:`schedules.solvers.gemm_cuda_mma`
(tensor cores).
"""
from __future__ import annotations

from ..blocks.blis import algorithm
from ..core import tuned
from ..core.arrays import positive_int, zeros
from ..core.kernels import cuda_device, cuda_kernel
from ..core.solver import Solver
from ..blocks import gemm_cuda_warp as warp

TILE = 64        # C tile per block
TK = 16          # k step of the shared tiles
MICRO = 4        # C micro-tile per thread (MICRO x MICRO registers)


def function(n, m, k, tile=TILE, tk=TK, micro=MICRO, fragments=False):
    """``C = A @ B`` (float32, shapes fixed) scheduled for CUDA; compile it
    with ``.compile(target="cuda")`` (or for the CPU, where blocks and threads
    run as loops).  ``fragments``: see :func:`schedule`.  The sizes are
    positive (an empty product has no kernel; :func:`schedules.gemm` returns
    it without one)."""
    for name, v in (("n", n), ("m", m), ("k", k)):
        _check(name, v)
    return schedule(algorithm(n, m, k), tile, tk, micro, fragments)


def solver_function(n, m, k, arch=None, **values):
    """The Function ``schedules.gemm(..., target="cuda")`` runs for ``n x k
    @ k x m`` on ``arch`` ("sm_80", "sm_90", None): the warp-tiled schedule
    (:func:`schedules.blocks.gemm_cuda_warp.function`, ``values`` override
    its parameters) when its warp tiles fit, else :func:`function`."""
    for name, v in (("n", n), ("m", m), ("k", k)):
        _check(name, v)
    if warp.fits(n, m, k, warp.params(n, m, k, arch, values)):
        return warp.function(n, m, k, arch, **values)
    return function(n, m, k)


def _check(name, v):
    positive_int("gpu_gemm", name, v)


def schedule(f, tile=TILE, tk=TK, micro=MICRO, fragments=False):
    """Applies the CUDA GEMM schedule to a GEMM Function ``f`` (computation
    ``C`` over ``i, j`` with its update over ``k``, inputs ``A`` and ``B``):
    ``tile`` x ``tile`` of C per block, ``tk`` the k step of the shared
    tiles, ``micro`` x ``micro`` elements of C per thread in registers.
    ``fragments=True`` (with ``micro > 1``) also copies, per k step, the
    ``micro`` A and ``micro`` B values a thread reads into per-thread
    arrays (``cache_local`` at ``k1``; the shared tiles are then made for
    those copies).  Off by default: see docs/internals/cuda.md for the measured
    resources."""
    if not isinstance(fragments, bool):
        raise ValueError(f"gpu_gemm: fragments must be a bool, got {fragments!r}")
    for name, v in (("tile", tile), ("tk", tk), ("micro", micro)):
        _check(name, v)
    if tile % micro:
        raise ValueError(f"gpu_gemm: tile ({tile}) must be a multiple of micro ({micro})")
    threads = tile // micro
    if threads * threads > 1024:
        raise ValueError(f"gpu_gemm: tile // micro = {threads}: {threads} x {threads} threads "
                         "per block, beyond the limit of 1024; raise micro or lower tile")
    c = f.computations["C"]
    u = c.update
    c.gpu_tile("i", "j", min(threads, 16), min(threads, 16))
    if micro == 1:
        u.gpu_tile("i", "j", tile, tile)
        u.split("k", tk)
        u.reorder("k0", "i1", "j1", "k1")
    else:
        u.tile("i", "j", tile, tile)
        u.split("i1", threads, names=("i_reg", "i_th"))
        u.split("j1", threads, names=("j_reg", "j_th"))
        u.split("k", tk)
        u.reorder("i0", "j0", "k0", "i_th", "j_th", "k1", "i_reg", "j_reg")
        u.bind("i0", "block.y").bind("j0", "block.x")
        u.bind("i_th", "thread.y").bind("j_th", "thread.x")
    if micro > 1 and fragments:
        # register fragments at k1, each filled from its shared tile at k0
        u.cache_local(f.buffers["A"], "k1").cache_shared(f.buffers["A"], "k0")
        u.cache_local(f.buffers["B"], "k1").cache_shared(f.buffers["B"], "k0")
    else:
        u.cache_shared(f.buffers["A"], "k0")
        u.cache_shared(f.buffers["B"], "k0")
    if micro > 1:
        u.accumulate_locally("k0", allow_reassociation=True)
    return f


class CudaTiled(Solver):
    """``a @ b`` on the GPU: the warp-tiled, pipelined schedule of
    :mod:`schedules.blocks.gemm_cuda_warp` with the parameters of the
    device the arrays are on (its architecture's defaults, updated by a
    tuning record of that device, :func:`schedules.core.tuned.recorded`),
    or the classic one of :func:`schedule` (shared tiles, register
    micro-tiles) for products smaller than a warp tile; the result
    allocated by torch on the inputs' device."""
    op = "gemm"
    name = "cuda_tiled"
    target = "cuda"
    version = 2                 # 2: the warp-tiled schedule

    def applicable(self, p):
        why = super().applicable(p)
        if why is True and p.dtype != "float32":
            return f"needs float32 (got {p.dtype})"
        if why is True and p.params is not None:
            return ("takes no params: GemmParams are the CPU schedule's tiles; the CUDA GEMM "
                    "(target='cuda' or device arrays) takes none")
        return why

    def space(self, p):
        return {"stages": [1, 2, 3, 4], "frag_stages": [1, 2], "swizzle": [False, True]}

    def build(self, p, params):
        """The Function for ``p``: ``params`` are tuned values (names of
        :meth:`space`) and the device's ``arch``."""
        values = dict(params)
        return solver_function(p.n, p.m, p.k, values.pop("arch", None), **values)

    def run(self, p, args, values=None):
        if p.degenerate:               # an empty product: no kernel to launch
            return zeros(args[0], (p.n, p.m))
        arch, name = cuda_device(*args)
        if values is None:
            values = tuned.recorded(self, p, tuned.device_key(arch, name)) if arch else {}
        key = ("gemm_cuda", p.n, p.m, p.k, arch, tuple(sorted(values.items())))
        return cuda_kernel(key, lambda: self.build(p, dict(values, arch=arch)))(*args)

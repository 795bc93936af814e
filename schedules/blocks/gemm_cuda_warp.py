"""GEMM on a GPU, float32 on the CUDA cores (SIMT), written in the public
language only: warp tiles, 128-bit accesses, a multi-stage ``cp.async``
pipeline and conflict-free shared tiles (the classic shared-tile schedule
is :mod:`schedules.solvers.gemm_cuda`)::

    i0, j0        -> blockIdx.y, blockIdx.x     (a BM x BN tile of C)
    C_local       per-thread tile (registers)   (accumulate_locally(k0))
    k0            serial, pipelined             (steps of BK; pipeline(k0, stages))
      A_shared    cp.async, [BK][BM + pad]      (A transposed: its rows are k;
                                                 4-byte copies, vector loads of A)
      B_shared    cp.async, [BK][BN]            (16-byte copies)
      i_w, j_w    -> warp.y, warp.x             (a WM x WN tile per warp)
      i_l, j_l    -> lane.y, lane.x             (WM/TM x WN/TN = 32 lanes)
        k1        serial (unrolled)
          A_local, B_local  (TM and TN values, LDS.128 from the tiles)
          i_r, j_r  (TM x TN, unrolled)  C_local += A_local * B_local
      barrier + wait                            (placed by the legality check)
    C += C_local                                (STG.128)

A thread owns ``TM`` consecutive rows and ``TN`` consecutive columns of its
warp's tile: its fragments are ``TM / 4 + TN / 4`` 128-bit shared loads per
k step for ``TM * TN`` FMAs, and a quarter warp (8 lanes: 2 rows x 4
columns of lanes) reads at most 4 distinct 16-byte words per tile, so the
fragment loads have no bank conflict; the transposed A tile's rows are
padded by ``pad`` words so the copy's 4-byte stores (threads along k) fall
in distinct banks too.  Every barrier, wait and the legality of the
pipeline, the vector accesses and the warp tiles are the compiler's
(derived from the dependences, refused by name where they cannot hold).

Parameters (``DEFAULTS``, per device ``DEVICE_DEFAULTS``, recorded tuning in
the store's shape :func:`params`): ``bm, bn`` the block tile, ``bk`` the k
step, ``wm, wn`` the warp tile, ``tm, tn`` the thread tile, ``stages`` the
pipeline depth (1: no pipeline), ``frag_stages`` 2 double-buffers the
register fragments over k1, ``pad`` / ``swizzle`` the A tile's layout,
``vector`` the access width (1 where the sizes are not multiples of 4).
"""
from __future__ import annotations

from .blis import algorithm
from ..core.arrays import positive_int

WARP = 32
DEFAULTS = {"bm": 128, "bn": 128, "bk": 8, "wm": 64, "wn": 32, "tm": 8, "tn": 8,
            "stages": 3, "frag_stages": 1, "pad": 4, "swizzle": False, "vector": 4}
# per architecture (the tuning store's "values" shape; measured values win,
# see bench/bench_cuda.py): A100 (sm_80) and H100/H200 (sm_90) both take the
# 128 x 128 x 8 tile with 8 warps; Hopper's larger shared memory and L2
# favour a deeper pipeline
DEVICE_DEFAULTS = {"sm_80": dict(DEFAULTS, stages=3), "sm_90": dict(DEFAULTS, stages=4)}
SMALL = {"bm": 64, "bn": 64, "bk": 8, "wm": 32, "wn": 32, "tm": 4, "tn": 8}


def params(n, m, k, arch=None, values=None) -> dict:
    """The parameters for an ``n x k @ k x m`` product on ``arch`` ("sm_80",
    "sm_90", None: the generic defaults), updated by ``values`` (a tuning
    record's); small products take the 64 x 64 tile (more blocks), sizes
    that are not multiples of 4 scalar accesses, a single k step no
    pipeline."""
    p = dict(DEVICE_DEFAULTS.get(arch, DEFAULTS))
    if n * m <= 512 * 512:
        p.update(SMALL)
    if k % 4 or m % 4:
        p["vector"] = 1
    if k <= p["bk"]:
        p["stages"] = 1
    p.update(values or {})
    return p


def fits(n, m, k, p) -> bool:
    """Whether the warp tiles fit the product: each warp's lanes all have a
    row and a column (``n >= wm``, ``m >= wn``); smaller products run the
    classic schedule."""
    return n >= p["wm"] and m >= p["wn"]


def check(p) -> None:
    """Refuses parameters that do not make a warp-tiled block, naming them."""
    for name in ("bm", "bn", "bk", "wm", "wn", "tm", "tn", "stages", "frag_stages", "vector"):
        positive_int("gemm_cuda_warp", name, p[name])
    if not isinstance(p["pad"], int) or isinstance(p["pad"], bool) or p["pad"] < 0:
        raise ValueError(f"gemm_cuda_warp: pad must be an int >= 0, not {p['pad']!r}")
    for big, small in (("bm", "wm"), ("bn", "wn"), ("wm", "tm"), ("wn", "tn")):
        if p[big] % p[small]:
            raise ValueError(f"gemm_cuda_warp: {big} ({p[big]}) must be a multiple of "
                             f"{small} ({p[small]})")
    lanes = (p["wm"] // p["tm"]) * (p["wn"] // p["tn"])
    if lanes != WARP:
        raise ValueError(f"gemm_cuda_warp: a warp tile of {p['wm']} x {p['wn']} with "
                         f"{p['tm']} x {p['tn']} per thread has {lanes} threads, not {WARP}")
    threads = (p["bm"] // p["wm"]) * (p["bn"] // p["wn"]) * WARP
    if threads > 1024:
        raise ValueError(f"gemm_cuda_warp: {threads} threads per block, beyond 1024")
    v = p["vector"]
    if v > 1 and (p["bk"] % v or p["tm"] % v or p["tn"] % v or p["bn"] % v):
        raise ValueError(f"gemm_cuda_warp: vector={v} must divide bk, tm, tn and bn")


def function(n, m, k, arch=None, **values):
    """``C = A @ B`` (float32, sizes fixed) with the warp-tiled schedule for
    ``arch`` (:data:`DEVICE_DEFAULTS`); ``values`` override :func:`params`'
    (e.g. ``stages=2``)."""
    for name, v in (("n", n), ("m", m), ("k", k)):
        positive_int("gemm_cuda_warp", name, v)
    unknown = set(values) - set(DEFAULTS)
    if unknown:
        raise TypeError(f"gemm_cuda_warp: unknown parameter(s) {', '.join(sorted(unknown))}; "
                        f"known: {', '.join(DEFAULTS)}")
    return schedule(algorithm(n, m, k), params(n, m, k, arch, values))


def schedule(f, p):
    """Applies the warp-tiled schedule with parameters ``p`` to a GEMM
    Function (computation ``C`` over ``i, j``, its update over ``k``)."""
    check(p)
    c = f.computations["C"]
    u = c.update
    A, B = f.buffers["A"], f.buffers["B"]
    c.gpu_tile("i", "j", 16, 16)
    u.tile("i", "j", p["bm"], p["bn"])
    u.split("i1", p["wm"], names=("i_w", "i_in")).split("i_in", p["tm"], names=("i_l", "i_r"))
    u.split("j1", p["wn"], names=("j_w", "j_in")).split("j_in", p["tn"], names=("j_l", "j_r"))
    u.split("k", p["bk"])
    u.reorder("i0", "j0", "k0", "i_w", "j_w", "i_l", "j_l", "k1", "i_r", "j_r")
    u.bind("i0", "block.y").bind("j0", "block.x")
    u.bind("i_w", "warp.y").bind("j_w", "warp.x").bind("i_l", "lane.y").bind("j_l", "lane.x")
    v = p["vector"] if p["vector"] > 1 else None
    a_local = u.cache_local(A, "k1")
    a_local.cache_shared(A, "k0", order=(1, 0), pad=0 if p["swizzle"] else p["pad"],
                         swizzle=p["swizzle"], vector=v)
    b_local = u.cache_local(B, "k1")
    b_local.cache_shared(B, "k0", vector=v)
    if v:
        a_local.vectorize("A_local_0", v)
        b_local.vectorize("B_local_1", v)
        u.vectorize("j_r", v)
    if p["stages"] > 1:
        u.pipeline("k0", stages=p["stages"])
    if p["frag_stages"] > 1:
        u.pipeline("k1", stages=p["frag_stages"])
    u.unroll("k1")
    u.accumulate_locally("k0", allow_reassociation=True)
    return f

"""GEMM on the tensor cores: bfloat16 or float16 ``A`` and ``B``, float32
``C`` (sums in float32), written in the public language only::

    i0, j0        -> blockIdx.y, blockIdx.x      (a BM x BN tile of C)
    C_local       per-thread sums (registers)    (accumulate_locally(k0))
    k0            serial, pipelined              (steps of BK; cp.async, 16 bytes)
      A_shared    [BM][BK], swizzled             (k contiguous: ldmatrix.x4)
      B_shared    [BK][BN], swizzled             (columns contiguous: ldmatrix.x2.trans)
      i_w, j_w    -> warp.y, warp.x              (a WM x WN tile per warp)
      ly, lx      -> lane.y (8), lane.x (4)      (the mma's layout of its sums)
        k_m, i_m, j_m   serial (unrolled)         (BK/16 x WM/16 x WN/8 instructions)
          k16, i_h, j_p  tensor_core: one mma.sync.m16n8k16 per warp
    C += C_local

Row ``i = ... + 16 i_m + 8 i_h + ly`` and column ``j = ... + 8 j_m + 2 lx +
j_p``: as SIMT code each lane computes exactly the sums the instruction
leaves in its registers, which is what ``tensor_core`` checks (and that the
reduction may be reassociated); the barriers, the waits of the pipeline
and the copies' legality are the compiler's as for the float32 schedule.
Products must be whole tiles (``n % bm``, ``m % bn``, ``k % bk`` zero): the
instruction needs all 32 lanes (a partial tile is refused by the printer).
"""
from __future__ import annotations

import tiramisu_py as tp

from ..core.arrays import positive_int, zeros
from ..core.kernels import cuda_kernel
from ..core.solver import Solver

DTYPES = {"bfloat16": tp.bfloat16, "float16": tp.float16}
DEFAULTS = {"bm": 128, "bn": 128, "bk": 32, "wm": 64, "wn": 32, "stages": 3, "swizzle": True}
SMALL = {"bm": 64, "bn": 64, "wm": 32, "wn": 32}


def algorithm(n, m, k, dtype="bfloat16", out="float32"):
    """``C = A @ B``: ``A`` (n x k) and ``B`` (k x m) of ``dtype``, ``C`` of
    ``out`` (float32, or ``dtype``: float32 sums rounded once, as torch)."""
    if dtype not in DTYPES:
        raise ValueError(f"gemm_cuda_mma: dtype must be one of {', '.join(DTYPES)}, not "
                         f"{dtype!r}")
    if out not in ("float32", dtype):
        raise ValueError(f"gemm_cuda_mma: out must be float32 or {dtype}, not {out!r}")
    f = tp.Function("gemm_mma", params={"N": n, "M": m, "K": k})
    i, j, kk = f.var("i", 0, "N"), f.var("j", 0, "M"), f.var("k", 0, "K")
    A = f.input("A", ("N", "K"), DTYPES[dtype])
    B = f.input("B", ("K", "M"), DTYPES[dtype])
    C = f.computation("C", [i, j], 0.0, dtype=DTYPES.get(out, tp.float32))
    C[i, j] += A[i, kk] * B[kk, j]
    return f


def params(n, m, k, values=None) -> dict:
    p = dict(DEFAULTS)
    if n * m <= 512 * 512:
        p.update(SMALL)
    if k <= p["bk"]:
        p["stages"] = 1
    p.update(values or {})
    return p


def check(n, m, k, p) -> None:
    for name in ("bm", "bn", "bk", "wm", "wn", "stages"):
        positive_int("gemm_cuda_mma", name, p[name])
    for big, small in (("bm", "wm"), ("bn", "wn")):
        if p[big] % p[small]:
            raise ValueError(f"gemm_cuda_mma: {big} ({p[big]}) must be a multiple of {small} "
                             f"({p[small]})")
    for name, unit in (("wm", 16), ("wn", 8), ("bk", 16)):
        if p[name] % unit:
            raise ValueError(f"gemm_cuda_mma: {name} ({p[name]}) must be a multiple of {unit} "
                             "(the m16n8k16 instruction)")
    for name, size, tile in (("n", n, "bm"), ("m", m, "bn"), ("k", k, "bk")):
        if size % p[tile]:
            raise ValueError(f"gemm_cuda_mma: {name} = {size} is not a multiple of {tile} = "
                             f"{p[tile]}; the tensor cores need whole tiles")


def function(n, m, k, dtype="bfloat16", out="float32", **values):
    """The scheduled Function for an ``n x k @ k x m`` product (whole tiles)."""
    for name, v in (("n", n), ("m", m), ("k", k)):
        positive_int("gemm_cuda_mma", name, v)
    unknown = set(values) - set(DEFAULTS)
    if unknown:
        raise TypeError(f"gemm_cuda_mma: unknown parameter(s) {', '.join(sorted(unknown))}")
    p = params(n, m, k, values)
    check(n, m, k, p)
    return schedule(algorithm(n, m, k, dtype, out), p)


def fits(n, m, k) -> str | None:
    """None when the defaults' tiles divide the product, else why not."""
    try:
        check(n, m, k, params(n, m, k))
    except ValueError as e:
        return str(e).split(": ", 1)[1]
    return None


class CudaTensorCore(Solver):
    """``a @ b`` of bfloat16 or float16 device arrays on the tensor cores
    (:func:`function`: float32 sums, the result rounded once to the
    operands' dtype, as torch's), whole tiles only."""
    op = "gemm"
    name = "cuda_mma"
    target = "cuda"
    numerics = "tensor_core"      # the instruction's order of the float32 sums

    def applicable(self, p):
        why = super().applicable(p)
        if why is True and p.dtype not in DTYPES:
            return f"needs bfloat16 or float16 (got {p.dtype})"
        if why is True and p.params is not None:
            return "takes no params (GemmParams are the CPU schedule's tiles)"
        if why is True and not p.degenerate:
            reason = fits(p.n, p.m, p.k)
            if reason:
                return f"needs whole tiles ({reason})"
        return why

    def build(self, p, params):
        return function(p.n, p.m, p.k, p.dtype, p.dtype, **params)

    def run(self, p, args, values=None):
        if p.degenerate:
            return zeros(args[0], (p.n, p.m), dtype=p.dtype)
        key = ("gemm_cuda_mma", p.dtype, p.n, p.m, p.k)
        return cuda_kernel(key, lambda: self.build(p, {}))(*args)


def schedule(f, p):
    c = f.computations["C"]
    u = c.update
    A, B = f.buffers["A"], f.buffers["B"]
    c.gpu_tile("i", "j", 16, 16)
    u.tile("i", "j", p["bm"], p["bn"])
    u.split("i1", p["wm"], names=("i_w", "i_in")).split("i_in", 16, names=("i_m", "i_16"))
    u.split("i_16", 8, names=("i_h", "ly"))
    u.split("j1", p["wn"], names=("j_w", "j_in")).split("j_in", 8, names=("j_m", "j_8"))
    u.split("j_8", 2, names=("lx", "j_p"))
    u.split("k", p["bk"]).split("k1", 16, names=("k_m", "k16"))
    u.reorder("i0", "j0", "k0", "i_w", "j_w", "ly", "lx", "k_m", "i_m", "j_m", "k16", "i_h",
              "j_p")
    u.bind("i0", "block.y").bind("j0", "block.x")
    u.bind("i_w", "warp.y").bind("j_w", "warp.x").bind("ly", "lane.y").bind("lx", "lane.x")
    u.cache_shared(A, "k0", vector=8, swizzle=p["swizzle"])
    u.cache_shared(B, "k0", vector=8, swizzle=p["swizzle"])
    if p["stages"] > 1:
        u.pipeline("k0", stages=p["stages"])
    u.tensor_core("k16", "i_h", "j_p")
    u.accumulate_locally("k0", allow_reassociation=True)
    return f

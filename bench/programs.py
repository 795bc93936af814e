"""The scheduled example programs that several benchmarks time: the README's
GEMM schedule and the conv2d example's (bench_backends times them on both
backends; the parity corpus counts them among the documented schedules)."""
from __future__ import annotations

from examples import conv2d, gemm


def gemm_scheduled():
    """GEMM in i-k-j order, i parallel, j vectorised by 16 (the README's)."""
    f = gemm.build()
    C = f.computations["C"]
    C.parallelize("i")
    C.update.interchange("j", "k")
    C.update.parallelize("i")
    C.update.vectorize("j", 16)
    return f


def conv_scheduled():
    """The conv2d example: output channels parallel, the reduction loops
    outside the spatial ones, x vectorised by 16."""
    f = conv2d.build()
    out = f.computations["out"]
    out.parallelize("co")
    u = out.update
    u.reorder("ci", "ky", "kx", "y", "x")     # n, co, ci, ky, kx, y, x
    u.parallelize("co")
    u.vectorize("x", 16)
    return f

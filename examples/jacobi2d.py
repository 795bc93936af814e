"""Jacobi 2-D stencil (PolyBench): a time loop around two statements that
update A and B in place."""
import numpy as np

import tiramisu_py as tp


def build():
    f = tp.Function("jacobi2d", params=["T", "N"])
    t = f.var("t", 0, "T")
    i, j = f.var("i", 1, "N - 1"), f.var("j", 1, "N - 1")
    A = f.buffer("A", ("N", "N"), tp.float64, output=True)    # in-out
    B = f.buffer("B", ("N", "N"), tp.float64, output=True)    # in-out
    with f.nest(t):
        f.computation("sB", [t, i, j], 0.2 * (A[i, j] + A[i, j - 1] + A[i, j + 1]
                                              + A[i + 1, j] + A[i - 1, j])).store_in(B, [i, j])
        f.computation("sA", [t, i, j], 0.2 * (B[i, j] + B[i, j - 1] + B[i, j + 1]
                                              + B[i + 1, j] + B[i - 1, j])).store_in(A, [i, j])
    return f


def time_tiled(f, tt=2, ts=4):
    """What ``f.auto_schedule()`` does (at tiles of the host's cache sizes):
    sA shifted by one in i and j, both statements skewed by 2t in i and j so
    that every dependence points forward, the (t, i, j) band tiled tt x ts x
    ts, the tiles skewed into a wavefront (j0 + t0 + i0), its tiles of one
    wavefront in parallel (the picture of docs/guide/pictures.md)."""
    sB, sA = f.statements
    sA.shift("i", 1)
    sA.shift("j", 1)
    for s in (sB, sA):
        s.skew("t", "i", 2)
        s.skew("t", "j", 2)
    f.tile_band([sB, sA], ["t", "i", "j"], [tt, ts, ts])
    for s in (sB, sA):
        s.skew("t0", "j0", 1)
        s.skew("i0", "j0", 1)
        s.reorder("j0", "t0", "i0")
        s.parallelize("t0")
    return f


def reference(A, B, T):
    A, B = A.copy(), B.copy()
    for _ in range(T):
        B[1:-1, 1:-1] = 0.2 * (A[1:-1, 1:-1] + A[1:-1, :-2] + A[1:-1, 2:] + A[2:, 1:-1] + A[:-2, 1:-1])
        A[1:-1, 1:-1] = 0.2 * (B[1:-1, 1:-1] + B[1:-1, :-2] + B[1:-1, 2:] + B[2:, 1:-1] + B[:-2, 1:-1])
    return A, B


def random_inputs(n=30, seed=0):
    rng = np.random.default_rng(seed)      # random, not PolyBench's smooth init
    return rng.standard_normal((n, n)), rng.standard_normal((n, n))


def main(T=10):
    A, B = random_inputs()
    ra, rb = reference(A, B, T)
    out = build().compile()(A=A, B=B, T=T)          # A and B are updated in place
    print("max abs error vs NumPy:", float(max(np.abs(out["A"] - ra).max(),
                                               np.abs(out["B"] - rb).max())))


if __name__ == "__main__":
    main()

"""Jacobi 1-D stencil with two time rows: ``A[(t+1) % 2, i]`` is the mean of
``A[t % 2, i-1..i+1]``.  Its time loop carries dependences both ways along
``i``; skewing ``i`` by ``t`` turns them all forward, and the skewed space
tiles (the picture of docs/guide/pictures.md)."""
import numpy as np

import tiramisu_py as tp


def build():
    f = tp.Function("jacobi1d", params=["T", "N"])
    t, i = f.var("t", 0, "T"), f.var("i", 1, "N - 1")
    A = f.buffer("A", (2, "N"), tp.float32, output=True)      # in-out: rows t even, t odd
    f.computation("S", [t, i], (A[t % 2, i - 1] + A[t % 2, i] + A[t % 2, i + 1]) / 3) \
        .store_in(A, [(t + 1) % 2, i])
    return f


def skewed_tiled(f, tt=2, ti=4):
    """i' = i + t, then tiles of tt x ti over (t, i')."""
    S = f.statements[0]
    S.skew("t", "i", 1)
    S.tile("t", "i", tt, ti)
    return f


def reference(A, T):
    A = A.copy()
    for t in range(T):
        src, dst = A[t % 2], A[(t + 1) % 2]
        dst[1:-1] = (src[:-2] + src[1:-1] + src[2:]) / np.float32(3)
    return A


def main(T=7, n=40):
    A = np.random.default_rng(0).standard_normal((2, n)).astype(np.float32)
    out = skewed_tiled(build()).compile()(A=A.copy(), T=T)
    print("max abs error vs NumPy:", float(np.abs(out - reference(A, T)).max()))


if __name__ == "__main__":
    main()

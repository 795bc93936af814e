"""Kernels outside PolyBench for the auto-scheduler's tests, each a
:class:`polybench_kernels.Spec` (fresh unscheduled Function, random inputs,
an independent NumPy reference): a tensor contraction, a naive convolution,
a 9-point stencil with a time loop, a softmax over rows, a batched
matrix-vector product and a triangular matrix product."""
from __future__ import annotations

import numpy as np

import tiramisu_py as tp
from polybench_kernels import SPECS, Spec, build_jacobi1d

F64 = tp.float64


MM_SOURCE = '''
import tiramisu_py as tp

def mm():
    f = tp.Function("mm_tuned", params=["N", "M", "K"])
    i, j, k = f.var("i", 0, "N"), f.var("j", 0, "M"), f.var("k", 0, "K")
    A, B = f.input("A", ("N", "K"), tp.float64), f.input("B", ("K", "M"), tp.float64)
    C = f.computation("C", [i, j], 0.0, dtype=tp.float64)
    C[i, j] += A[i, k] * B[k, j]
    return f
'''
_mm_space: dict = {}
exec(MM_SOURCE, _mm_space)
build_mm = _mm_space["mm"]           # a plain GEMM (init, then the update over k), float64


def build_jacobi1d_fixed(T=5, N=23):
    """jacobi-1d with its sizes fixed at declaration (known to the scheduler)."""
    return build_jacobi1d({"T": T, "N": N})


def build_contraction():
    """C[a, b, c] = sum_d A[a, d, c] * B[d, b]."""
    f = tp.Function("contraction", params=["NA", "NB", "NC", "ND"])
    a, b, c, d = (f.var(n, 0, p) for n, p in zip("abcd", ("NA", "NB", "NC", "ND")))
    A = f.input("A", ("NA", "ND", "NC"), F64)
    B = f.input("B", ("ND", "NB"), F64)
    C = f.computation("C", [a, b, c], 0.0, dtype=F64)
    C[a, b, c] += A[a, d, c] * B[d, b]
    return f


def contraction_inputs(rng):
    return {"A": rng.standard_normal((5, 6, 7)), "B": rng.standard_normal((6, 4))}


def contraction_reference(A, B, **_):
    return {"C": np.einsum("adc,db->abc", A, B)}


def build_conv():
    """out[o, y, x] = sum_{c, ky, kx} w[o, c, ky, kx] * inp[c, y + ky, x + kx]."""
    f = tp.Function("conv", params=["CO", "CI", "H", "W"])
    o, c = f.var("o", 0, "CO"), f.var("c", 0, "CI")
    y, x = f.var("y", 0, "H - 2"), f.var("x", 0, "W - 2")
    ky, kx = f.var("ky", 0, 3), f.var("kx", 0, 3)
    inp = f.input("inp", ("CI", "H", "W"), F64)
    w = f.input("w", ("CO", "CI", 3, 3), F64)
    out = f.computation("out", [o, y, x], 0.0, dtype=F64)
    out[o, y, x] += w[o, c, ky, kx] * inp[c, y + ky, x + kx]
    return f


def conv_inputs(rng):
    return {"inp": rng.standard_normal((3, 9, 10)), "w": rng.standard_normal((4, 3, 3, 3))}


def conv_reference(inp, w, **_):
    ci, h, wd = inp.shape
    out = np.zeros((w.shape[0], h - 2, wd - 2))
    for ky in range(3):
        for kx in range(3):
            out += np.einsum("oc,cyx->oyx", w[:, :, ky, kx], inp[:, ky:ky + h - 2, kx:kx + wd - 2])
    return {"out": out}


def build_stencil9():
    """Nine-point Jacobi stencil with a time loop, two arrays in turn."""
    f = tp.Function("stencil9", params=["T", "N"])
    t = f.var("t", 0, "T")
    i, j = f.var("i", 1, "N - 1"), f.var("j", 1, "N - 1")
    A = f.buffer("A", ("N", "N"), F64, output=True)
    B = f.buffer("B", ("N", "N"), F64, output=True)

    def nine(X):
        return sum((X[i + di, j + dj] for di in (-1, 0, 1) for dj in (-1, 0, 1)),
                   0.0) / 9.0
    with f.nest(t):
        f.computation("sB", [t, i, j], nine(A)).store_in(B, [i, j])
        f.computation("sA", [t, i, j], nine(B)).store_in(A, [i, j])
    return f


def stencil9_inputs(rng):
    return {"A": rng.standard_normal((11, 11)), "B": rng.standard_normal((11, 11))}


def stencil9_reference(A, B, T, **_):
    A, B = A.copy(), B.copy()

    def nine(X):
        n = len(X)
        return sum(X[1 + di:n - 1 + di, 1 + dj:n - 1 + dj]
                   for di in (-1, 0, 1) for dj in (-1, 0, 1)) / 9.0
    for _ in range(T):
        B[1:-1, 1:-1] = nine(A)
        A[1:-1, 1:-1] = nine(B)
    return {"A": A, "B": B}


def build_softmax():
    """Row softmax: max, exp, sum, divide (four nests over the rows)."""
    f = tp.Function("softmax", params=["N", "M"])
    i, j = f.var("i", 0, "N"), f.var("j", 0, "M")
    X = f.input("X", ("N", "M"), F64)
    mx = f.computation("mx", [i], X[i, 0])
    mx[i].max(X[i, j])
    e = f.computation("e", [i, j], tp.exp(X[i, j] - mx[i]))
    s = f.computation("s", [i], 0.0, dtype=F64)
    s[i] += e[i, j]
    f.computation("out", [i, j], e[i, j] / s[i])
    return f


def softmax_inputs(rng):
    return {"X": rng.standard_normal((6, 13))}


def softmax_reference(X, **_):
    e = np.exp(X - X.max(axis=1, keepdims=True))
    return {"out": e / e.sum(axis=1, keepdims=True)}


def build_batched_mv():
    """y[b, i] = sum_j A[b, i, j] * x[b, j]."""
    f = tp.Function("bmv", params=["NB", "N", "M"])
    b, i, j = f.var("b", 0, "NB"), f.var("i", 0, "N"), f.var("j", 0, "M")
    A = f.input("A", ("NB", "N", "M"), F64)
    x = f.input("x", ("NB", "M"), F64)
    y = f.computation("y", [b, i], 0.0, dtype=F64)
    y[b, i] += A[b, i, j] * x[b, j]
    return f


def batched_mv_inputs(rng):
    return {"A": rng.standard_normal((3, 7, 9)), "x": rng.standard_normal((3, 9))}


def batched_mv_reference(A, x, **_):
    return {"y": np.einsum("bij,bj->bi", A, x)}


def build_trmm():
    """C = L @ B with L lower triangular: C[i, j] = sum_{k <= i} L[i, k] B[k, j]."""
    f = tp.Function("trmm", params=["N", "M"])
    i, j = f.var("i", 0, "N"), f.var("j", 0, "M")
    k = f.var("k", 0, i + 1)
    L = f.input("L", ("N", "N"), F64)
    B = f.input("B", ("N", "M"), F64)
    C = f.computation("C", [i, j], 0.0, dtype=F64)
    C[i, j] += L[i, k] * B[k, j]
    return f


def trmm_inputs(rng):
    return {"L": rng.standard_normal((9, 9)), "B": rng.standard_normal((9, 8))}


def trmm_reference(L, B, **_):
    return {"C": np.tril(L) @ B}


KERNELS = {
    "contraction": Spec("contraction", build_contraction, contraction_inputs,
                        contraction_reference),
    "conv": Spec("conv", build_conv, conv_inputs, conv_reference),
    "stencil9": Spec("stencil9", build_stencil9, stencil9_inputs, stencil9_reference, {"T": 4}),
    "softmax": Spec("softmax", build_softmax, softmax_inputs, softmax_reference),
    "batched_mv": Spec("batched_mv", build_batched_mv, batched_mv_inputs, batched_mv_reference),
    "trmm": Spec("trmm", build_trmm, trmm_inputs, trmm_reference),
}
KERNELS.update({k: SPECS[k] for k in ("gemm", "2mm", "jacobi-1d", "jacobi-2d", "seidel-2d")})

"""Six kernels outside PolyBench for the auto-scheduler: a tensor contraction,
a naive convolution, a 9-point stencil with a time loop, a softmax over rows,
a batched matrix-vector product and a triangular matrix product.

Each is a :class:`examples.polybench.common.Kernel` record like PolyBench's
(``build(sizes)``, ``inputs(rng, sizes)``, an independent NumPy
``reference(arrays, sizes)``) with no hand schedule (``schedule`` None):
``tiramisu-py bench polybench --beyond`` times the plain algorithm and its
``auto_schedule()``; the auto-scheduler's tests check them at their MINI sizes
(``tests/auto_kernels.py``).
``build(None)`` leaves the sizes symbolic (given at call time); softmax and
the batched matrix-vector product take a ``dtype`` too (float32 in
``tiramisu-py bench peers``)."""
from __future__ import annotations

import numpy as np

import tiramisu_py as tp
from examples.polybench.common import Kernel

F64 = tp.float64


def _function(name, sizes, names):
    """A Function whose sizes are fixed (``sizes``) or symbolic (None)."""
    return tp.Function(name, params=dict(sizes) if sizes is not None else list(names))


# --------------------------------------------------------------- contraction
def build_contraction(s=None):
    """C[a, b, c] = sum_d A[a, d, c] * B[d, b]."""
    f = _function("contraction", s, ("NA", "NB", "NC", "ND"))
    a, b, c, d = (f.var(n, 0, p) for n, p in zip("abcd", ("NA", "NB", "NC", "ND")))
    A = f.input("A", ("NA", "ND", "NC"), F64)
    B = f.input("B", ("ND", "NB"), F64)
    C = f.computation("C", [a, b, c], 0.0, dtype=F64)
    C[a, b, c] += A[a, d, c] * B[d, b]
    return f


def contraction_inputs(rng, s):
    return {"A": rng.standard_normal((s["NA"], s["ND"], s["NC"])),
            "B": rng.standard_normal((s["ND"], s["NB"]))}


def contraction_reference(a, s=None):
    return {"C": np.einsum("adc,db->abc", a["A"], a["B"])}


# ---------------------------------------------------------------------- conv
def build_conv(s=None):
    """out[o, y, x] = sum_{c, ky, kx} w[o, c, ky, kx] * inp[c, y + ky, x + kx]."""
    f = _function("conv", s, ("CO", "CI", "H", "W"))
    o, c = f.var("o", 0, "CO"), f.var("c", 0, "CI")
    y, x = f.var("y", 0, "H - 2"), f.var("x", 0, "W - 2")
    ky, kx = f.var("ky", 0, 3), f.var("kx", 0, 3)
    inp = f.input("inp", ("CI", "H", "W"), F64)
    w = f.input("w", ("CO", "CI", 3, 3), F64)
    out = f.computation("out", [o, y, x], 0.0, dtype=F64)
    out[o, y, x] += w[o, c, ky, kx] * inp[c, y + ky, x + kx]
    return f


def conv_inputs(rng, s):
    return {"inp": rng.standard_normal((s["CI"], s["H"], s["W"])),
            "w": rng.standard_normal((s["CO"], s["CI"], 3, 3))}


def conv_reference(a, s=None):
    inp, w = a["inp"], a["w"]
    _, h, wd = inp.shape
    out = np.zeros((w.shape[0], h - 2, wd - 2))
    for ky in range(3):
        for kx in range(3):
            out += np.einsum("oc,cyx->oyx", w[:, :, ky, kx], inp[:, ky:ky + h - 2, kx:kx + wd - 2])
    return {"out": out}


# ------------------------------------------------------------------ stencil9
def build_stencil9(s=None):
    """Nine-point Jacobi stencil with a time loop, two arrays in turn."""
    f = _function("stencil9", s, ("T", "N"))
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


def stencil9_inputs(rng, s):
    return {"A": rng.standard_normal((s["N"], s["N"])), "B": rng.standard_normal((s["N"], s["N"]))}


def stencil9_reference(a, s):
    A, B = a["A"].copy(), a["B"].copy()

    def nine(X):
        n = len(X)
        return sum(X[1 + di:n - 1 + di, 1 + dj:n - 1 + dj]
                   for di in (-1, 0, 1) for dj in (-1, 0, 1)) / 9.0
    for _ in range(s["T"]):
        B[1:-1, 1:-1] = nine(A)
        A[1:-1, 1:-1] = nine(B)
    return {"A": A, "B": B}


# ------------------------------------------------------------------- softmax
def build_softmax(s=None, dtype=F64):
    """Row softmax: max, exp, sum, divide (four nests over the rows)."""
    f = _function("softmax", s, ("N", "M"))
    i, j = f.var("i", 0, "N"), f.var("j", 0, "M")
    X = f.input("X", ("N", "M"), dtype)
    mx = f.computation("mx", [i], X[i, 0])
    mx[i].max(X[i, j])
    e = f.computation("e", [i, j], tp.exp(X[i, j] - mx[i]))
    sm = f.computation("s", [i], 0.0, dtype=dtype)
    sm[i] += e[i, j]
    f.computation("out", [i, j], e[i, j] / sm[i])
    return f


def softmax_inputs(rng, s):
    return {"X": rng.standard_normal((s["N"], s["M"]))}


def softmax_reference(a, s=None):
    X = a["X"]
    e = np.exp(X - X.max(axis=1, keepdims=True))
    return {"out": e / e.sum(axis=1, keepdims=True)}


# ---------------------------------------------------------------- batched_mv
def build_batched_mv(s=None, dtype=F64):
    """y[b, i] = sum_j A[b, i, j] * x[b, j]."""
    f = _function("bmv", s, ("NB", "N", "M"))
    b, i, j = f.var("b", 0, "NB"), f.var("i", 0, "N"), f.var("j", 0, "M")
    A = f.input("A", ("NB", "N", "M"), dtype)
    x = f.input("x", ("NB", "M"), dtype)
    y = f.computation("y", [b, i], 0.0, dtype=dtype)
    y[b, i] += A[b, i, j] * x[b, j]
    return f


def batched_mv_inputs(rng, s):
    return {"A": rng.standard_normal((s["NB"], s["N"], s["M"])),
            "x": rng.standard_normal((s["NB"], s["M"]))}


def batched_mv_reference(a, s=None):
    return {"y": np.einsum("bij,bj->bi", a["A"], a["x"])}


# ---------------------------------------------------------------------- trmm
def build_trmm(s=None):
    """C = L @ B with L lower triangular: C[i, j] = sum_{k <= i} L[i, k] B[k, j]."""
    f = _function("trmm", s, ("N", "M"))
    i, j = f.var("i", 0, "N"), f.var("j", 0, "M")
    k = f.var("k", 0, i + 1)
    L = f.input("L", ("N", "N"), F64)
    B = f.input("B", ("N", "M"), F64)
    C = f.computation("C", [i, j], 0.0, dtype=F64)
    C[i, j] += L[i, k] * B[k, j]
    return f


def trmm_inputs(rng, s):
    return {"L": rng.standard_normal((s["N"], s["N"])), "B": rng.standard_normal((s["N"], s["M"]))}


def trmm_reference(a, s=None):
    return {"C": np.tril(a["L"]) @ a["B"]}


def _sizes(mini, small, medium, large):
    return {"MINI": mini, "SMALL": small, "MEDIUM": medium, "LARGE": large}


# MINI: the tests' sizes; LARGE: about 0.1-1 s unscheduled on one core
KERNELS = {k.name: k for k in (
    Kernel("contraction", "beyond", _sizes(
        dict(NA=5, NB=4, NC=7, ND=6), dict(NA=8, NB=32, NC=32, ND=32),
        dict(NA=16, NB=64, NC=128, ND=64), dict(NA=32, NB=128, NC=256, ND=256)),
        build_contraction, None, contraction_inputs, contraction_reference, ("C",)),
    Kernel("conv", "beyond", _sizes(
        dict(CO=4, CI=3, H=9, W=10), dict(CO=8, CI=8, H=18, W=18),
        dict(CO=32, CI=32, H=30, W=30), dict(CO=64, CI=64, H=58, W=58)),
        build_conv, None, conv_inputs, conv_reference, ("out",)),
    Kernel("stencil9", "beyond", _sizes(
        dict(T=4, N=11), dict(T=10, N=60), dict(T=20, N=250), dict(T=50, N=1000)),
        build_stencil9, None, stencil9_inputs, stencil9_reference, ("A", "B")),
    Kernel("softmax", "beyond", _sizes(
        dict(N=6, M=13), dict(N=64, M=100), dict(N=500, M=500), dict(N=2000, M=2000)),
        build_softmax, None, softmax_inputs, softmax_reference, ("out",)),
    Kernel("batched_mv", "beyond", _sizes(
        dict(NB=3, N=7, M=9), dict(NB=8, N=32, M=40), dict(NB=16, N=128, M=128),
        dict(NB=32, N=256, M=512)),
        build_batched_mv, None, batched_mv_inputs, batched_mv_reference, ("y",)),
    Kernel("trmm", "beyond", _sizes(
        dict(N=9, M=8), dict(N=60, M=80), dict(N=200, M=240), dict(N=1000, M=1000)),
        build_trmm, None, trmm_inputs, trmm_reference, ("C",)),
)}

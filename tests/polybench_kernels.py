"""PolyBench kernels written in the tiramisu_py DSL, each with an independent
sequential reference (plain Python loops over NumPy arrays, PolyBench
semantics, in place where PolyBench is in place) and random inputs.

Every kernel is a :class:`Spec`: ``build()`` returns a fresh, unscheduled
Function; ``inputs(rng)`` fresh random arguments (only structured where the
algorithm needs it); ``params`` the sizes passed at call time; ``reference``
the NumPy result, a dict by output name.  Sizes are small and deliberately not
multiples of the tile and split factors the tests use (3 and 4)."""
from __future__ import annotations

import math
from dataclasses import dataclass, field

import numpy as np

import tiramisu_py as tp

F64 = tp.float64


@dataclass
class Spec:
    name: str
    build: object                 # () -> tp.Function
    inputs: object                # (rng) -> dict name -> array
    reference: object             # (**inputs, **params) -> dict name -> array
    params: dict = field(default_factory=dict)


# =========================================================================== gemm
# C = alpha * A B + beta * C   (PolyBench: for i { for j: C *= beta; for k, j: C += ... })
GEMM_ALPHA, GEMM_BETA = 1.5, 1.2


def build_gemm():
    f = tp.Function("gemm", params=["NI", "NJ", "NK"])
    i, j, k = f.var("i", 0, "NI"), f.var("j", 0, "NJ"), f.var("k", 0, "NK")
    A = f.input("A", ("NI", "NK"), F64)
    B = f.input("B", ("NK", "NJ"), F64)
    C = f.buffer("C", ("NI", "NJ"), F64, output=True)
    with f.nest(i):
        s = f.computation("scale", [i, j], C[i, j] * GEMM_BETA).store_in(C, [i, j])
        s[i, j] += GEMM_ALPHA * A[i, k] * B[k, j]          # statement scale_update (i, j, k)
    return f


def gemm_inputs(rng, NI=11, NJ=13, NK=10):
    return {"A": rng.standard_normal((NI, NK)), "B": rng.standard_normal((NK, NJ)),
            "C": rng.standard_normal((NI, NJ))}


def gemm_reference(A, B, C, **_):
    C = C.copy()
    NI, NK = A.shape
    NJ = B.shape[1]
    for i in range(NI):
        for j in range(NJ):
            C[i, j] *= GEMM_BETA
        for j in range(NJ):
            for k in range(NK):
                C[i, j] += GEMM_ALPHA * A[i, k] * B[k, j]
    return {"C": C}


# ============================================================================ 2mm
# tmp = alpha A B;  D = beta D + tmp C
MM_ALPHA, MM_BETA = 1.5, 1.2


def build_2mm():
    f = tp.Function("mm2", params=["NI", "NJ", "NK", "NL"])
    i, j = f.var("i", 0, "NI"), f.var("j", 0, "NJ")
    k, l = f.var("k", 0, "NK"), f.var("l", 0, "NL")
    A = f.input("A", ("NI", "NK"), F64)
    B = f.input("B", ("NK", "NJ"), F64)
    C = f.input("C", ("NJ", "NL"), F64)
    D = f.buffer("D", ("NI", "NL"), F64, output=True)
    tmp = f.buffer("tmp", ("NI", "NJ"), F64)                 # a temporary
    with f.nest(i, j):
        t = f.computation("T", [i, j], 0.0, dtype=F64).store_in(tmp, [i, j])
        t[i, j] += MM_ALPHA * A[i, k] * B[k, j]                # T_update (i, j, k)
    with f.nest(i, l):
        d = f.computation("Dscale", [i, l], D[i, l] * MM_BETA).store_in(D, [i, l])
        d[i, l] += tmp[i, j] * C[j, l]                        # Dscale_update (i, l, j)
    return f


def mm2_inputs(rng, NI=11, NJ=10, NK=7, NL=13):
    return {"A": rng.standard_normal((NI, NK)), "B": rng.standard_normal((NK, NJ)),
            "C": rng.standard_normal((NJ, NL)), "D": rng.standard_normal((NI, NL))}


def mm2_reference(A, B, C, D, **_):
    D = D.copy()
    NI, NK = A.shape
    NJ, NL = C.shape
    tmp = np.zeros((NI, NJ))
    for i in range(NI):
        for j in range(NJ):
            tmp[i, j] = 0.0
            for k in range(NK):
                tmp[i, j] += MM_ALPHA * A[i, k] * B[k, j]
    for i in range(NI):
        for l in range(NL):
            D[i, l] *= MM_BETA
            for j in range(NJ):
                D[i, l] += tmp[i, j] * C[j, l]
    return {"D": D}


# ====================================================================== jacobi-1d
def build_jacobi1d(params=("T", "N")):
    """``params``: the sizes' names, or a dict fixing them (known when scheduling)."""
    f = tp.Function("jacobi1d", params=params if isinstance(params, dict) else list(params))
    t = f.var("t", 0, "T")
    i = f.var("i", 1, "N - 1")
    A = f.buffer("A", ("N",), F64, output=True)
    B = f.buffer("B", ("N",), F64, output=True)
    with f.nest(t):
        f.computation("sB", [t, i], (A[i - 1] + A[i] + A[i + 1]) / 3.0).store_in(B, [i])
        f.computation("sA", [t, i], (B[i - 1] + B[i] + B[i + 1]) / 3.0).store_in(A, [i])
    return f


def jacobi1d_inputs(rng, N=23):
    return {"A": rng.standard_normal(N), "B": rng.standard_normal(N)}


def jacobi1d_reference(A, B, T, **_):
    A, B = A.copy(), B.copy()
    N = len(A)
    for _t in range(T):
        for i in range(1, N - 1):
            B[i] = (A[i - 1] + A[i] + A[i + 1]) / 3.0
        for i in range(1, N - 1):
            A[i] = (B[i - 1] + B[i] + B[i + 1]) / 3.0
    return {"A": A, "B": B}


# ====================================================================== jacobi-2d
def build_jacobi2d():
    f = tp.Function("jacobi2d", params=["T", "N"])
    t = f.var("t", 0, "T")
    i, j = f.var("i", 1, "N - 1"), f.var("j", 1, "N - 1")
    A = f.buffer("A", ("N", "N"), F64, output=True)
    B = f.buffer("B", ("N", "N"), F64, output=True)
    with f.nest(t):
        f.computation("sB", [t, i, j], 0.2 * (A[i, j] + A[i, j - 1] + A[i, j + 1]
                                              + A[i + 1, j] + A[i - 1, j])).store_in(B, [i, j])
        f.computation("sA", [t, i, j], 0.2 * (B[i, j] + B[i, j - 1] + B[i, j + 1]
                                              + B[i + 1, j] + B[i - 1, j])).store_in(A, [i, j])
    return f


def jacobi2d_inputs(rng, N=12):
    return {"A": rng.standard_normal((N, N)), "B": rng.standard_normal((N, N))}


def jacobi2d_reference(A, B, T, **_):
    A, B = A.copy(), B.copy()
    N = len(A)
    for _t in range(T):
        for i in range(1, N - 1):
            for j in range(1, N - 1):
                B[i, j] = 0.2 * (A[i, j] + A[i, j - 1] + A[i, j + 1] + A[i + 1, j] + A[i - 1, j])
        for i in range(1, N - 1):
            for j in range(1, N - 1):
                A[i, j] = 0.2 * (B[i, j] + B[i, j - 1] + B[i, j + 1] + B[i + 1, j] + B[i - 1, j])
    return {"A": A, "B": B}


# ====================================================================== seidel-2d
def build_seidel2d():
    f = tp.Function("seidel2d", params=["T", "N"])
    t = f.var("t", 0, "T")
    i, j = f.var("i", 1, "N - 1"), f.var("j", 1, "N - 1")
    A = f.buffer("A", ("N", "N"), F64, output=True)
    f.computation("S", [t, i, j],
                  (A[i - 1, j - 1] + A[i - 1, j] + A[i - 1, j + 1]
                   + A[i, j - 1] + A[i, j] + A[i, j + 1]
                   + A[i + 1, j - 1] + A[i + 1, j] + A[i + 1, j + 1]) / 9.0).store_in(A, [i, j])
    return f


def seidel2d_inputs(rng, N=11):
    return {"A": rng.standard_normal((N, N))}


def seidel2d_reference(A, T, **_):
    A = A.copy()
    N = len(A)
    for _t in range(T):
        for i in range(1, N - 1):
            for j in range(1, N - 1):
                A[i, j] = (A[i - 1, j - 1] + A[i - 1, j] + A[i - 1, j + 1]
                           + A[i, j - 1] + A[i, j] + A[i, j + 1]
                           + A[i + 1, j - 1] + A[i + 1, j] + A[i + 1, j + 1]) / 9.0
    return {"A": A}


# ======================================================================== heat-3d
def _heat(X, i, j, k):
    return (0.125 * (X[i + 1, j, k] - 2.0 * X[i, j, k] + X[i - 1, j, k])
            + 0.125 * (X[i, j + 1, k] - 2.0 * X[i, j, k] + X[i, j - 1, k])
            + 0.125 * (X[i, j, k + 1] - 2.0 * X[i, j, k] + X[i, j, k - 1])
            + X[i, j, k])


def build_heat3d():
    f = tp.Function("heat3d", params=["T", "N"])
    t = f.var("t", 0, "T")
    i, j, k = f.var("i", 1, "N - 1"), f.var("j", 1, "N - 1"), f.var("k", 1, "N - 1")
    A = f.buffer("A", ("N", "N", "N"), F64, output=True)
    B = f.buffer("B", ("N", "N", "N"), F64, output=True)
    with f.nest(t):
        f.computation("sB", [t, i, j, k], _heat(A, i, j, k)).store_in(B, [i, j, k])
        f.computation("sA", [t, i, j, k], _heat(B, i, j, k)).store_in(A, [i, j, k])
    return f


def heat3d_inputs(rng, N=7):
    return {"A": rng.standard_normal((N, N, N)), "B": rng.standard_normal((N, N, N))}


def heat3d_reference(A, B, T, **_):
    A, B = A.copy(), B.copy()
    N = len(A)
    r = range(1, N - 1)
    for _t in range(T):
        for i in r:
            for j in r:
                for k in r:
                    B[i, j, k] = _heat(A, i, j, k)
        for i in r:
            for j in r:
                for k in r:
                    A[i, j, k] = _heat(B, i, j, k)
    return {"A": A, "B": B}


# ======================================================================== fdtd-2d
def build_fdtd2d():
    f = tp.Function("fdtd2d", params=["T", "NX", "NY"])
    t = f.var("t", 0, "T")
    y0 = f.var("y0", 0, "NY")                                  # ey[0][j] = fict[t]
    ei, ej = f.var("ei", 1, "NX"), f.var("ej", 0, "NY")        # ey update
    xi, xj = f.var("xi", 0, "NX"), f.var("xj", 1, "NY")        # ex update
    hi, hj = f.var("hi", 0, "NX - 1"), f.var("hj", 0, "NY - 1")  # hz update
    fict = f.input("fict", ("T",), F64)
    ex = f.buffer("ex", ("NX", "NY"), F64, output=True)
    ey = f.buffer("ey", ("NX", "NY"), F64, output=True)
    hz = f.buffer("hz", ("NX", "NY"), F64, output=True)
    with f.nest(t):
        f.computation("s0", [t, y0], fict[t]).store_in(ey, [0, y0])
        f.computation("s1", [t, ei, ej],
                      ey[ei, ej] - 0.5 * (hz[ei, ej] - hz[ei - 1, ej])).store_in(ey, [ei, ej])
        f.computation("s2", [t, xi, xj],
                      ex[xi, xj] - 0.5 * (hz[xi, xj] - hz[xi, xj - 1])).store_in(ex, [xi, xj])
        f.computation("s3", [t, hi, hj],
                      hz[hi, hj] - 0.7 * (ex[hi, hj + 1] - ex[hi, hj]
                                          + ey[hi + 1, hj] - ey[hi, hj])).store_in(hz, [hi, hj])
    return f


def fdtd2d_inputs(rng, T=4, NX=10, NY=11):
    return {"fict": rng.standard_normal(T), "ex": rng.standard_normal((NX, NY)),
            "ey": rng.standard_normal((NX, NY)), "hz": rng.standard_normal((NX, NY))}


def fdtd2d_reference(fict, ex, ey, hz, T, **_):
    ex, ey, hz = ex.copy(), ey.copy(), hz.copy()
    NX, NY = ex.shape
    for t in range(T):
        for j in range(NY):
            ey[0, j] = fict[t]
        for i in range(1, NX):
            for j in range(NY):
                ey[i, j] = ey[i, j] - 0.5 * (hz[i, j] - hz[i - 1, j])
        for i in range(NX):
            for j in range(1, NY):
                ex[i, j] = ex[i, j] - 0.5 * (hz[i, j] - hz[i, j - 1])
        for i in range(NX - 1):
            for j in range(NY - 1):
                hz[i, j] = hz[i, j] - 0.7 * (ex[i, j + 1] - ex[i, j] + ey[i + 1, j] - ey[i, j])
    return {"ex": ex, "ey": ey, "hz": hz}


# ============================================================================= lu
# NOTE (library bug, see test_bug_triangular_computation): f.computation() with a
# loop whose bounds use an outer loop (j = f.var("j", 0, i)) at any position but
# the first raises TypeError, so every non-rectangular statement here is written
# as an *update* of a no-op computation A0 (A[r, c] = A[r, c]) declared first.
# Updates have + - * only, so PolyBench's A[i][j] /= A[j][j] is written (and
# referenced) as A[i][j] *= 1.0 / A[j][j].
def _in_place_alias(f, name, shape_params):
    r, c = f.var("r", 0, shape_params[0]), f.var("c", 0, shape_params[1])
    A = f.buffer("A", shape_params, F64, output=True)
    A0 = f.computation(name, [r, c], A[r, c]).store_in(A, [r, c])
    return A, A0


def build_lu():
    f = tp.Function("lu", params=["N"])
    A, A0 = _in_place_alias(f, "A0", ("N", "N"))
    i = f.var("i", 0, "N")
    j = f.var("j", 0, i)              # lower part: j < i
    k = f.var("k", 0, j)
    ju = f.var("ju", i, "N")          # upper part: i <= ju < N
    ku = f.var("ku", 0, i)
    with f.nest(i):
        with f.nest(j):
            L1 = A0[i, j].reduce("-", A[i, k] * A[k, j])
            L2 = A0[i, j].reduce("*", 1.0 / A[j, j])
        U1 = A0[i, ju].reduce("-", A[i, ku] * A[ku, ju])
    f.named = {"L1": L1, "L2": L2, "U1": U1}
    return f


def build_lu_natural():
    """lu as one would write it: plain computations over triangular domains."""
    f = tp.Function("lu_nat", params=["N"])
    i = f.var("i", 0, "N")
    j = f.var("j", 0, i)
    k = f.var("k", 0, j)
    ju = f.var("ju", i, "N")
    ku = f.var("ku", 0, i)
    A = f.buffer("A", ("N", "N"), F64, output=True)
    with f.nest(i):
        with f.nest(j):
            f.computation("L1", [i, j, k], A[i, j] - A[i, k] * A[k, j]).store_in(A, [i, j])
            f.computation("L2", [i, j], A[i, j] * (1.0 / A[j, j])).store_in(A, [i, j])
        f.computation("U1", [i, ju, ku], A[i, ju] - A[i, ku] * A[ku, ju]).store_in(A, [i, ju])
    return f


def lu_inputs(rng, N=11):
    # diagonally dominant: no pivoting needed, well conditioned
    return {"A": rng.standard_normal((N, N)) + 2.0 * N * np.eye(N)}


def lu_reference(A, **_):
    A = A.copy()
    N = len(A)
    for i in range(N):
        for j in range(i):
            for k in range(j):
                A[i, j] -= A[i, k] * A[k, j]
            A[i, j] *= 1.0 / A[j, j]
        for j in range(i, N):
            for k in range(i):
                A[i, j] -= A[i, k] * A[k, j]
    return {"A": A}


# ======================================================================= cholesky
def build_cholesky():
    f = tp.Function("cholesky", params=["N"])
    A, A0 = _in_place_alias(f, "A0", ("N", "N"))
    i = f.var("i", 0, "N")
    j = f.var("j", 0, i)
    k = f.var("k", 0, j)
    kd = f.var("kd", 0, i)
    with f.nest(i):
        with f.nest(j):
            C1 = A0[i, j].reduce("-", A[i, k] * A[j, k])
            C2 = A0[i, j].reduce("*", 1.0 / A[j, j])
        C3 = A0[i, i].reduce("-", A[i, kd] * A[i, kd])
        C4 = f.computation("C4", [i], tp.sqrt(A[i, i])).store_in(A, [i, i])
    f.named = {"C1": C1, "C2": C2, "C3": C3, "C4": C4}
    return f


def cholesky_inputs(rng, N=11):
    M = rng.standard_normal((N, N))
    return {"A": M @ M.T + N * np.eye(N)}         # symmetric positive definite


def cholesky_reference(A, **_):
    A = A.copy()
    N = len(A)
    for i in range(N):
        for j in range(i):
            for k in range(j):
                A[i, j] -= A[i, k] * A[j, k]
            A[i, j] *= 1.0 / A[j, j]
        for k in range(i):
            A[i, i] -= A[i, k] * A[i, k]
        A[i, i] = math.sqrt(A[i, i])
    return {"A": A}


# ======================================================================== trisolv
def build_trisolv():
    f = tp.Function("trisolv", params=["N"])
    i = f.var("i", 0, "N")
    j = f.var("j", 0, i)
    L = f.input("L", ("N", "N"), F64)
    b = f.input("b", ("N",), F64)
    x = f.buffer("x", ("N",), F64, output=True)
    with f.nest(i):
        s = f.computation("xinit", [i], b[i]).store_in(x, [i])
        s[i] -= L[i, j] * x[j]                                  # xinit_update (i, j)
        f.computation("xdiv", [i], x[i] / L[i, i]).store_in(x, [i])
    return f


def trisolv_inputs(rng, N=13):
    L = np.tril(rng.standard_normal((N, N)), -1) + np.diag(rng.uniform(1.0, 2.0, N) + N)
    return {"L": L, "b": rng.standard_normal(N)}


def trisolv_reference(L, b, **_):
    N = len(b)
    x = np.zeros(N)
    for i in range(N):
        x[i] = b[i]
        for j in range(i):
            x[i] -= L[i, j] * x[j]
        x[i] = x[i] / L[i, i]
    return {"x": x}


# ================================================================= floyd-warshall
def build_floyd_warshall():
    f = tp.Function("floyd", params=["N"])
    k, i, j = f.var("k", 0, "N"), f.var("i", 0, "N"), f.var("j", 0, "N")
    P = f.buffer("path", ("N", "N"), F64, output=True)
    f.computation("FW", [k, i, j],
                  tp.min(P[i, j], P[i, k] + P[k, j])).store_in(P, [i, j])
    return f


def floyd_inputs(rng, N=11):
    P = rng.uniform(1.0, 20.0, (N, N))                # non-negative edge weights
    P[rng.random((N, N)) < 0.3] = 1e6                  # some missing edges
    np.fill_diagonal(P, 0.0)                          # path[k][k] = 0
    return {"path": P}


def floyd_reference(path, **_):
    P = path.copy()
    N = len(P)
    for k in range(N):
        for i in range(N):
            for j in range(N):
                P[i, j] = min(P[i, j], P[i, k] + P[k, j])
    return {"path": P}


# =========================================================================== syrk
SYRK_ALPHA, SYRK_BETA = 1.5, 1.2


def build_syrk():
    f = tp.Function("syrk", params=["N", "M"])
    r, c = f.var("r", 0, "N"), f.var("c", 0, "N")
    i = f.var("i", 0, "N")
    j = f.var("j", 0, i + 1)                         # lower triangle j <= i
    k = f.var("k", 0, "M")
    A = f.input("A", ("N", "M"), F64)
    C = f.buffer("C", ("N", "N"), F64, output=True)
    # no-op alias of C: a triangular computation is refused (library bug, see lu)
    C0 = f.computation("C0", [r, c], C[r, c]).store_in(C, [r, c])
    with f.nest(i):
        scale = C0[i, j].reduce("*", SYRK_BETA)                       # C0_update  (i, j)
        acc = C0[i, j].reduce("+", SYRK_ALPHA * A[i, k] * A[j, k])   # C0_update1 (i, j, k)
    f.named = {"scale": scale, "acc": acc}
    return f


def syrk_inputs(rng, N=11, M=10):
    return {"A": rng.standard_normal((N, M)), "C": rng.standard_normal((N, N))}


def syrk_reference(A, C, **_):
    C = C.copy()
    N, M = A.shape
    for i in range(N):
        for j in range(i + 1):
            C[i, j] *= SYRK_BETA
        for j in range(i + 1):
            for k in range(M):
                C[i, j] += SYRK_ALPHA * A[i, k] * A[j, k]
    return {"C": C}


# ============================================================================ adi
def _adi_consts(N, T):
    DX, DY, DT = 1.0 / N, 1.0 / N, 1.0 / T
    B1, B2 = 2.0, 1.0
    mul1 = B1 * DT / (DX * DX)
    mul2 = B2 * DT / (DY * DY)
    a, b = -mul1 / 2.0, 1.0 + mul1
    d, e = -mul2 / 2.0, 1.0 + mul2
    return a, b, a, d, e, d          # a, b, c, d, e, f


ADI_N, ADI_T = 10, 3                  # fixed sizes: the constants depend on them


def build_adi():
    N, T = ADI_N, ADI_T
    a, b, c, d, e, f_ = _adi_consts(N, T)
    f = tp.Function("adi", params=["T", "N"])
    t = f.var("t", 1, "T + 1")
    i = f.var("i", 1, "N - 1")
    j = f.var("j", 1, "N - 1")
    jb = f.var("jb", 1, "N - 1")                 # backward sweep: column N - 1 - jb
    u = f.buffer("u", ("N", "N"), F64, output=True)
    v = f.buffer("v", ("N", "N"), F64)
    p = f.buffer("p", ("N", "N"), F64)
    q = f.buffer("q", ("N", "N"), F64)
    n1 = f.param("N") - 1
    with f.nest(t):
        with f.nest(i):                                         # column sweep
            f.computation("c1", [t, i], 1.0, dtype=F64).store_in(v, [0, i])
            f.computation("c2", [t, i], 0.0, dtype=F64).store_in(p, [i, 0])
            f.computation("c3", [t, i], v[0, i]).store_in(q, [i, 0])
            with f.nest(j):
                f.computation("c4", [t, i, j], -c / (a * p[i, j - 1] + b)).store_in(p, [i, j])
                f.computation("c5", [t, i, j],
                              (-d * u[j, i - 1] + (1.0 + 2.0 * d) * u[j, i] - f_ * u[j, i + 1]
                               - a * q[i, j - 1]) / (a * p[i, j - 1] + b)).store_in(q, [i, j])
            f.computation("c6", [t, i], 1.0, dtype=F64).store_in(v, [n1, i])
            f.computation("c7", [t, i, jb],
                          p[i, n1 - jb] * v[n1 - jb + 1, i] + q[i, n1 - jb]
                          ).store_in(v, [n1 - jb, i])
        with f.nest(i):                                         # row sweep
            f.computation("r1", [t, i], 1.0, dtype=F64).store_in(u, [i, 0])
            f.computation("r2", [t, i], 0.0, dtype=F64).store_in(p, [i, 0])
            f.computation("r3", [t, i], u[i, 0]).store_in(q, [i, 0])
            with f.nest(j):
                f.computation("r4", [t, i, j], -f_ / (d * p[i, j - 1] + e)).store_in(p, [i, j])
                f.computation("r5", [t, i, j],
                              (-a * v[i - 1, j] + (1.0 + 2.0 * a) * v[i, j] - c * v[i + 1, j]
                               - d * q[i, j - 1]) / (d * p[i, j - 1] + e)).store_in(q, [i, j])
            f.computation("r6", [t, i], 1.0, dtype=F64).store_in(u, [i, n1])
            f.computation("r7", [t, i, jb],
                          p[i, n1 - jb] * u[i, n1 - jb + 1] + q[i, n1 - jb]
                          ).store_in(u, [i, n1 - jb])
    return f


def adi_inputs(rng, N=ADI_N):
    return {"u": rng.standard_normal((N, N))}


def adi_reference(u, T, **_):
    u = u.copy()
    N = len(u)
    a, b, c, d, e, f_ = _adi_consts(N, T)
    v, p, q = np.zeros((N, N)), np.zeros((N, N)), np.zeros((N, N))
    for _t in range(1, T + 1):
        for i in range(1, N - 1):
            v[0, i] = 1.0
            p[i, 0] = 0.0
            q[i, 0] = v[0, i]
            for j in range(1, N - 1):
                p[i, j] = -c / (a * p[i, j - 1] + b)
                q[i, j] = (-d * u[j, i - 1] + (1.0 + 2.0 * d) * u[j, i] - f_ * u[j, i + 1]
                           - a * q[i, j - 1]) / (a * p[i, j - 1] + b)
            v[N - 1, i] = 1.0
            for j in range(N - 2, 0, -1):
                v[j, i] = p[i, j] * v[j + 1, i] + q[i, j]
        for i in range(1, N - 1):
            u[i, 0] = 1.0
            p[i, 0] = 0.0
            q[i, 0] = u[i, 0]
            for j in range(1, N - 1):
                p[i, j] = -f_ / (d * p[i, j - 1] + e)
                q[i, j] = (-a * v[i - 1, j] + (1.0 + 2.0 * a) * v[i, j] - c * v[i + 1, j]
                           - d * q[i, j - 1]) / (d * p[i, j - 1] + e)
            u[i, N - 1] = 1.0
            for j in range(N - 2, 0, -1):
                u[i, j] = p[i, j] * u[i, j + 1] + q[i, j]
    return {"u": u}


SPECS = {
    "gemm": Spec("gemm", build_gemm, gemm_inputs, gemm_reference),
    "2mm": Spec("2mm", build_2mm, mm2_inputs, mm2_reference),
    "jacobi-1d": Spec("jacobi-1d", build_jacobi1d, jacobi1d_inputs, jacobi1d_reference, {"T": 5}),
    "jacobi-2d": Spec("jacobi-2d", build_jacobi2d, jacobi2d_inputs, jacobi2d_reference, {"T": 5}),
    "seidel-2d": Spec("seidel-2d", build_seidel2d, seidel2d_inputs, seidel2d_reference, {"T": 5}),
    "heat-3d": Spec("heat-3d", build_heat3d, heat3d_inputs, heat3d_reference, {"T": 3}),
    "fdtd-2d": Spec("fdtd-2d", build_fdtd2d, fdtd2d_inputs, fdtd2d_reference, {"T": 4}),
    "lu": Spec("lu", build_lu, lu_inputs, lu_reference),
    "cholesky": Spec("cholesky", build_cholesky, cholesky_inputs, cholesky_reference),
    "trisolv": Spec("trisolv", build_trisolv, trisolv_inputs, trisolv_reference),
    "floyd-warshall": Spec("floyd-warshall", build_floyd_warshall, floyd_inputs, floyd_reference),
    "syrk": Spec("syrk", build_syrk, syrk_inputs, syrk_reference),
    "adi": Spec("adi", build_adi, adi_inputs, adi_reference, {"T": ADI_T}),
}

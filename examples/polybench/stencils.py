"""PolyBench stencils: adi, fdtd-2d, heat-3d, jacobi-1d, jacobi-2d, seidel-2d.

The time loop carries every dependence.  The hand schedules tile time and
space, the tiles run as a parallel wavefront (jacobi-2d, seidel-2d), or run
the space loops of each time step in parallel and in SIMD lanes (heat-3d,
fdtd-2d, adi); jacobi-1d is left as written."""
from __future__ import annotations

import numpy as np

import tiramisu_py as tp
from examples.polybench.common import F64, Kernel, each, lanes, stmt

TIME_TILE_GAP = ("not time-tiled as jacobi-2d and seidel-2d are (their tiles of 16 steps x "
                 "128^2 points run as a parallel wavefront)")


# ----------------------------------------------------------------- jacobi-1d
def build_jacobi1d(s, through="B"):
    """``through="A"``: the half step written into A itself, in place (Gauss-
    Seidel, another algorithm: the tests show it gives another answer)."""
    f = tp.Function("jacobi1d", params=s)
    t, i = f.var("t", 0, "TSTEPS"), f.var("i", 1, "N - 1")
    A, B = f.buffer("A", ("N",), F64, output=True), f.buffer("B", ("N",), F64, output=True)
    X = {"A": A, "B": B}[through]
    with f.nest(t):
        f.computation("sB", [t, i], 0.33333 * (A[i - 1] + A[i] + A[i + 1])).store_in(X, [i])
        f.computation("sA", [t, i], 0.33333 * (X[i - 1] + X[i] + X[i + 1])).store_in(A, [i])
    return f


def schedule_jacobi1d(f, s):
    """Left as written: the lines (at most 2000 points: in L1) are too short
    for a parallel region per step, time tiles (skew 2, shift sA by 1, tile
    (t, i), sA after sB at i1) are legal but run one after the other, and
    gcc vectorises each line itself, faster than ``vectorize("i", 8)``'s
    strip-mined ``omp simd`` blocks (0.18 vs 0.22 ms at LARGE)."""


def ref_jacobi1d(a, s):
    A, B = a["A"].copy(), a["B"].copy()
    for _ in range(s["TSTEPS"]):
        B[1:-1] = 0.33333 * (A[:-2] + A[1:-1] + A[2:])
        A[1:-1] = 0.33333 * (B[:-2] + B[1:-1] + B[2:])
    return {"A": A, "B": B}


def _two_arrays(shape):
    return lambda rng, s: {"A": rng.standard_normal(shape(s)), "B": rng.standard_normal(shape(s))}


JACOBI1D = Kernel(
    "jacobi-1d", "stencils",
    {"MINI": dict(TSTEPS=20, N=30), "SMALL": dict(TSTEPS=40, N=120),
     "MEDIUM": dict(TSTEPS=100, N=400), "LARGE": dict(TSTEPS=500, N=2000)},
    build_jacobi1d, schedule_jacobi1d, _two_arrays(lambda s: (s["N"],)), ref_jacobi1d, ("A", "B"),
    gaps=TIME_TILE_GAP + ": the 2000-point lines fit in L1 and gcc vectorises them")


# ----------------------------------------------------------------- jacobi-2d
def build_jacobi2d(s):
    f = tp.Function("jacobi2d", params=s)
    t = f.var("t", 0, "TSTEPS")
    i, j = f.var("i", 1, "N - 1"), f.var("j", 1, "N - 1")
    A = f.buffer("A", ("N", "N"), F64, output=True)
    B = f.buffer("B", ("N", "N"), F64, output=True)
    with f.nest(t):
        f.computation("sB", [t, i, j], 0.2 * (A[i, j] + A[i, j - 1] + A[i, 1 + j] + A[1 + i, j]
                                              + A[i - 1, j])).store_in(B, [i, j])
        f.computation("sA", [t, i, j], 0.2 * (B[i, j] + B[i, j - 1] + B[i, 1 + j] + B[1 + i, j]
                                              + B[i - 1, j])).store_in(A, [i, j])
    return f


def schedule_jacobi2d(f, s):
    """Time tiles run as a wavefront (Pluto's tiling): sA shifted by one
    point behind sB, i and j skewed by 2t so that (t, i, j) is permutable,
    the band tiled 16 x 128 x 128 (two 128^2 tiles of float64 in a quarter
    of the L2), then the tile loops skewed so that j0 is the wavefront,
    outermost, and the time tiles on it dealt round-robin to the threads."""
    sB, sA = stmt(f, "sB"), stmt(f, "sA")
    sA.shift("i", 1)
    sA.shift("j", 1)
    for loop in ("i", "j"):
        each((sB, sA), "skew", "t", loop, 2)
    f.tile_band([sB, sA], ["t", "i", "j"], [16, 128, 128])
    for loop in ("t0", "i0"):
        each((sB, sA), "skew", loop, "j0", 1)
    each((sB, sA), "reorder", "j0", "t0", "i0")
    each((sB, sA), "parallelize", "t0", schedule="static", chunk=1)


def ref_jacobi2d(a, s):
    A, B = a["A"].copy(), a["B"].copy()
    for _ in range(s["TSTEPS"]):
        B[1:-1, 1:-1] = 0.2 * (A[1:-1, 1:-1] + A[1:-1, :-2] + A[1:-1, 2:] + A[2:, 1:-1]
                               + A[:-2, 1:-1])
        A[1:-1, 1:-1] = 0.2 * (B[1:-1, 1:-1] + B[1:-1, :-2] + B[1:-1, 2:] + B[2:, 1:-1]
                               + B[:-2, 1:-1])
    return {"A": A, "B": B}


JACOBI2D = Kernel(
    "jacobi-2d", "stencils",
    {"MINI": dict(TSTEPS=20, N=30), "SMALL": dict(TSTEPS=40, N=90),
     "MEDIUM": dict(TSTEPS=100, N=250), "LARGE": dict(TSTEPS=500, N=1300)},
    build_jacobi2d, lambda f, s: schedule_jacobi2d(f, s),
    _two_arrays(lambda s: (s["N"], s["N"])), ref_jacobi2d, ("A", "B"))


# ----------------------------------------------------------------- seidel-2d
def build_seidel2d(s):
    f = tp.Function("seidel2d", params=s)
    t = f.var("t", 0, "TSTEPS")
    i, j = f.var("i", 1, "N - 1"), f.var("j", 1, "N - 1")
    A = f.buffer("A", ("N", "N"), F64, output=True)
    f.computation("S", [t, i, j],
                  (A[i - 1, j - 1] + A[i - 1, j] + A[i - 1, j + 1]
                   + A[i, j - 1] + A[i, j] + A[i, j + 1]
                   + A[i + 1, j - 1] + A[i + 1, j] + A[i + 1, j + 1]) / 9.0).store_in(A, [i, j])
    return f


def schedule_seidel2d(f, s):
    """Time tiles as a wavefront: i and j skewed by t, j by i, so that
    (t, i, j) is permutable; tiled 16 x 128 x 128; the tile loops skewed so
    that j0 is the wavefront, outermost, the time tiles on it dealt
    round-robin to the threads (one parallel region per wavefront of tiles,
    not per wavefront of points)."""
    S = stmt(f, "S")
    S.skew("t", "i", 1)
    S.skew("t", "j", 1)
    S.skew("i", "j", 1)
    S.tile("t", "i", "j", 16, 128, 128)
    S.skew("t0", "j0", 1)
    S.skew("i0", "j0", 1)
    S.reorder("j0", "t0", "i0")
    S.parallelize("t0", schedule="static", chunk=1)


def ref_seidel2d(a, s):
    A = a["A"].copy()
    n = len(A)
    for _ in range(s["TSTEPS"]):
        for i in range(1, n - 1):
            for j in range(1, n - 1):                  # in place: row i uses the new A[i, j-1]
                A[i, j] = (A[i - 1, j - 1] + A[i - 1, j] + A[i - 1, j + 1]
                           + A[i, j - 1] + A[i, j] + A[i, j + 1]
                           + A[i + 1, j - 1] + A[i + 1, j] + A[i + 1, j + 1]) / 9.0
    return {"A": A}


SEIDEL2D = Kernel(
    "seidel-2d", "stencils",
    {"MINI": dict(TSTEPS=20, N=40), "SMALL": dict(TSTEPS=40, N=120),
     "MEDIUM": dict(TSTEPS=100, N=400), "LARGE": dict(TSTEPS=500, N=2000)},
    build_seidel2d, schedule_seidel2d,
    lambda rng, s: {"A": rng.standard_normal((s["N"], s["N"]))}, ref_seidel2d, ("A",),
    gaps="the points of a tile in order (j depends on j - 1): no SIMD")


# ------------------------------------------------------------------- heat-3d
def _heat(X, i, j, k):
    return (0.125 * (X[i + 1, j, k] - 2.0 * X[i, j, k] + X[i - 1, j, k])
            + 0.125 * (X[i, j + 1, k] - 2.0 * X[i, j, k] + X[i, j - 1, k])
            + 0.125 * (X[i, j, k + 1] - 2.0 * X[i, j, k] + X[i, j, k - 1])
            + X[i, j, k])


def build_heat3d(s):
    f = tp.Function("heat3d", params=s)
    t = f.var("t", 1, "TSTEPS + 1")
    i, j, k = (f.var(n, 1, "N - 1") for n in "ijk")
    A = f.buffer("A", ("N", "N", "N"), F64, output=True)
    B = f.buffer("B", ("N", "N", "N"), F64, output=True)
    with f.nest(t):
        f.computation("sB", [t, i, j, k], _heat(A, i, j, k)).store_in(B, [i, j, k])
        f.computation("sA", [t, i, j, k], _heat(B, i, j, k)).store_in(A, [i, j, k])
    return f


def ref_heat3d(a, s):
    A, B = a["A"].copy(), a["B"].copy()
    c = slice(1, -1)

    def step(X):
        m = X[c, c, c]
        return (0.125 * (X[2:, c, c] - 2.0 * m + X[:-2, c, c])
                + 0.125 * (X[c, 2:, c] - 2.0 * m + X[c, :-2, c])
                + 0.125 * (X[c, c, 2:] - 2.0 * m + X[c, c, :-2]) + m)
    for _ in range(s["TSTEPS"]):
        B[c, c, c] = step(A)
        A[c, c, c] = step(B)
    return {"A": A, "B": B}


HEAT3D = Kernel(
    "heat-3d", "stencils",
    {"MINI": dict(TSTEPS=20, N=10), "SMALL": dict(TSTEPS=40, N=20),
     "MEDIUM": dict(TSTEPS=100, N=40), "LARGE": dict(TSTEPS=500, N=120)},
    build_heat3d, lambda f, s: each((stmt(f, "sB"), stmt(f, "sA")), "parallelize", "i"),
    _two_arrays(lambda s: (s["N"],) * 3), ref_heat3d, ("A", "B"),
    gaps=TIME_TILE_GAP + ": 3-D tiles that fit the L2 (16^3) leave no room for the skewed "
    "halo; k (118 points at LARGE) is left to the C compiler's vectoriser")


# ------------------------------------------------------------------- fdtd-2d
def build_fdtd2d(s):
    f = tp.Function("fdtd2d", params=s)
    t = f.var("t", 0, "TMAX")
    y0 = f.var("y0", 0, "NY")
    ei, ej = f.var("ei", 1, "NX"), f.var("ej", 0, "NY")
    xi, xj = f.var("xi", 0, "NX"), f.var("xj", 1, "NY")
    hi, hj = f.var("hi", 0, "NX - 1"), f.var("hj", 0, "NY - 1")
    fict = f.input("fict", ("TMAX",), F64)
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


def schedule_fdtd2d(f, s):
    stmt(f, "s0").vectorize("y0", lanes())
    for name, o, i in (("s1", "ei", "ej"), ("s2", "xi", "xj"), ("s3", "hi", "hj")):
        stmt(f, name).parallelize(o)
        stmt(f, name).vectorize(i, lanes())


def ref_fdtd2d(a, s):
    ex, ey, hz = a["ex"].copy(), a["ey"].copy(), a["hz"].copy()
    for t in range(s["TMAX"]):
        ey[0, :] = a["fict"][t]
        ey[1:, :] = ey[1:, :] - 0.5 * (hz[1:, :] - hz[:-1, :])
        ex[:, 1:] = ex[:, 1:] - 0.5 * (hz[:, 1:] - hz[:, :-1])
        hz[:-1, :-1] = hz[:-1, :-1] - 0.7 * (ex[:-1, 1:] - ex[:-1, :-1] + ey[1:, :-1] - ey[:-1, :-1])
    return {"ex": ex, "ey": ey, "hz": hz}


FDTD2D = Kernel(
    "fdtd-2d", "stencils",
    {"MINI": dict(TMAX=20, NX=20, NY=30), "SMALL": dict(TMAX=40, NX=60, NY=80),
     "MEDIUM": dict(TMAX=100, NX=200, NY=240), "LARGE": dict(TMAX=500, NX=1000, NY=1200)},
    build_fdtd2d, schedule_fdtd2d,
    lambda rng, s: {"fict": rng.standard_normal(s["TMAX"]),
                    **{n: rng.standard_normal((s["NX"], s["NY"])) for n in ("ex", "ey", "hz")}},
    ref_fdtd2d, ("ex", "ey", "hz"), gaps=TIME_TILE_GAP + " (four statements a step: not tried)")


# ----------------------------------------------------------------------- adi
def adi_coefficients(N, T):
    DX, DY, DT = 1.0 / N, 1.0 / N, 1.0 / T
    B1, B2 = 2.0, 1.0
    mul1, mul2 = B1 * DT / (DX * DX), B2 * DT / (DY * DY)
    a, b = -mul1 / 2.0, 1.0 + mul1
    d, e = -mul2 / 2.0, 1.0 + mul2
    return a, b, a, d, e, d                     # a, b, c, d, e, f


def build_adi(s):
    N, T = s["N"], s["TSTEPS"]
    a, b, c, d, e, f_ = adi_coefficients(N, T)
    f = tp.Function("adi", params=s)
    t = f.var("t", 1, "TSTEPS + 1")
    i, j, jb = f.var("i", 1, "N - 1"), f.var("j", 1, "N - 1"), f.var("jb", 1, "N - 1")
    u = f.buffer("u", ("N", "N"), F64, output=True)
    v, p, q = (f.buffer(n, ("N", "N"), F64) for n in ("v", "p", "q"))
    n1 = N - 1
    with f.nest(t):
        with f.nest(i):                                        # column sweep
            f.computation("c1", [t, i], 1.0, dtype=F64).store_in(v, [0, i])
            f.computation("c2", [t, i], 0.0, dtype=F64).store_in(p, [i, 0])
            f.computation("c3", [t, i], v[0, i]).store_in(q, [i, 0])
            with f.nest(j):
                f.computation("c4", [t, i, j], -c / (a * p[i, j - 1] + b)).store_in(p, [i, j])
                f.computation("c5", [t, i, j],
                              (-d * u[j, i - 1] + (1.0 + 2.0 * d) * u[j, i] - f_ * u[j, i + 1]
                               - a * q[i, j - 1]) / (a * p[i, j - 1] + b)).store_in(q, [i, j])
            f.computation("c6", [t, i], 1.0, dtype=F64).store_in(v, [n1, i])
            f.computation("c7", [t, i, jb], p[i, n1 - jb] * v[n1 - jb + 1, i] + q[i, n1 - jb]
                          ).store_in(v, [n1 - jb, i])
        with f.nest(i):                                        # row sweep
            f.computation("r1", [t, i], 1.0, dtype=F64).store_in(u, [i, 0])
            f.computation("r2", [t, i], 0.0, dtype=F64).store_in(p, [i, 0])
            f.computation("r3", [t, i], u[i, 0]).store_in(q, [i, 0])
            with f.nest(j):
                f.computation("r4", [t, i, j], -f_ / (d * p[i, j - 1] + e)).store_in(p, [i, j])
                f.computation("r5", [t, i, j],
                              (-a * v[i - 1, j] + (1.0 + 2.0 * a) * v[i, j] - c * v[i + 1, j]
                               - d * q[i, j - 1]) / (d * p[i, j - 1] + e)).store_in(q, [i, j])
            f.computation("r6", [t, i], 1.0, dtype=F64).store_in(u, [i, n1])
            f.computation("r7", [t, i, jb], p[i, n1 - jb] * u[i, n1 - jb + 1] + q[i, n1 - jb]
                          ).store_in(u, [i, n1 - jb])
    return f


def schedule_adi(f, s):
    """Each sweep solves one tridiagonal system per i: the i's in parallel."""
    each([stmt(f, f"{x}{n}") for x in "cr" for n in range(1, 8)], "parallelize", "i")


def ref_adi(arr, s):
    u = arr["u"].copy()
    N, T = s["N"], s["TSTEPS"]
    a, b, c, d, e, f_ = adi_coefficients(N, T)
    v, p, q = np.zeros((N, N)), np.zeros((N, N)), np.zeros((N, N))
    inner = slice(1, N - 1)
    for _ in range(T):
        v[0, inner], p[inner, 0], q[inner, 0] = 1.0, 0.0, 1.0
        for j in range(1, N - 1):                 # all columns i at once
            den = a * p[inner, j - 1] + b
            p[inner, j] = -c / den
            q[inner, j] = (-d * u[j, :-2] + (1.0 + 2.0 * d) * u[j, 1:-1] - f_ * u[j, 2:]
                           - a * q[inner, j - 1]) / den
        v[N - 1, inner] = 1.0
        for j in range(N - 2, 0, -1):
            v[j, inner] = p[inner, j] * v[j + 1, inner] + q[inner, j]
        u[inner, 0], p[inner, 0], q[inner, 0] = 1.0, 0.0, 1.0
        for j in range(1, N - 1):
            den = d * p[inner, j - 1] + e
            p[inner, j] = -f_ / den
            q[inner, j] = (-a * v[:-2, j] + (1.0 + 2.0 * a) * v[1:-1, j] - c * v[2:, j]
                           - d * q[inner, j - 1]) / den
        u[inner, N - 1] = 1.0
        for j in range(N - 2, 0, -1):
            u[inner, j] = p[inner, j] * u[inner, j + 1] + q[inner, j]
    return {"u": u}


ADI = Kernel(
    "adi", "stencils",
    {"MINI": dict(TSTEPS=20, N=20), "SMALL": dict(TSTEPS=40, N=60),
     "MEDIUM": dict(TSTEPS=100, N=200), "LARGE": dict(TSTEPS=500, N=1000)},
    build_adi, schedule_adi, lambda rng, s: {"u": rng.standard_normal((s["N"], s["N"]))},
    ref_adi, ("u",),
    gaps="the column sweep reads u[j][i] with i parallel outside: an interchange to make "
         "i the stride-1 loop needs the recurrences over j distributed from i")

KERNELS = (ADI, FDTD2D, HEAT3D, JACOBI1D, JACOBI2D, SEIDEL2D)

"""PolyBench linear-algebra/solvers: cholesky, durbin, gramschmidt, lu, ludcmp, trisolv.

These are sequential along their outer loop; the hand schedules reorder loops
so that the inner ones are contiguous, vectorise them (reassociating durbin's
dot product) and run the independent ones in parallel (lu's upper rows,
cholesky's columns, gramschmidt's projections); trisolv has none."""
from __future__ import annotations

import math

import numpy as np

import tiramisu_py as tp
from examples.polybench.common import F64, Kernel, lanes, stmt

NSIZES = {d: dict(N=n) for d, n in
          {"MINI": 40, "SMALL": 120, "MEDIUM": 400, "LARGE": 2000}.items()}
SEQ_GAP = "no parallelism along the factorisation's outer loop without changing the algorithm"


def _dominant(rng, s):
    n = s["N"]
    return {"A": rng.standard_normal((n, n)) + 2.0 * n * np.eye(n)}


# ----------------------------------------------------------------------- lu
def _lu_nest(f, A, upper_first=False):
    """``upper_first``: row i's upper part before its lower part, which it
    reads (another algorithm: the tests show it gives another answer)."""
    i = f.var("i", 0, "N")
    j = f.var("j", 0, i)
    k = f.var("k", 0, j)
    ju, ku = f.var("ju", i, "N"), f.var("ku", 0, i)

    def upper():
        f.computation("U1", [i, ju, ku], A[i, ju] - A[i, ku] * A[ku, ju]).store_in(A, [i, ju])
    with f.nest(i):
        if upper_first:
            upper()
        with f.nest(j):
            f.computation("L1", [i, j, k], A[i, j] - A[i, k] * A[k, j]).store_in(A, [i, j])
            f.computation("L2", [i, j], A[i, j] / A[j, j]).store_in(A, [i, j])
        if not upper_first:
            upper()


def _schedule_lu(f):
    """Row i: L2 at column j, then L1's updates of the columns after j (i-k-j,
    contiguous; its triangular j loop left to gcc's vectoriser: ``omp simd``
    over strip-mined blocks measured 1.2x slower); then the upper row, ku-ju
    with ju in lanes (a block's vectors unrolled), blocks of it in parallel."""
    L1, L2, U1 = stmt(f, "L1"), stmt(f, "L2"), stmt(f, "U1")
    L1.interchange("j", "k")
    L1.after(L2, "j")
    U1.split("ju", 64)                            # blocks of the row's upper part in parallel
    U1.reorder("ju0", "ku", "ju1")
    U1.parallelize("ju0")
    U1.vectorize("ju1", lanes())
    U1.unroll("ju10")                             # the block's vectors


def build_lu(s, upper_first=False):
    f = tp.Function("lu", params=s)
    _lu_nest(f, f.buffer("A", ("N", "N"), F64, output=True), upper_first)
    return f


def ref_lu(a, s):
    A = a["A"].copy()
    n = len(A)
    for i in range(n):
        for j in range(i):
            A[i, j] = (A[i, j] - A[i, :j] @ A[:j, j]) / A[j, j]
        A[i, i:] -= A[i, :i] @ A[:i, i:]
    return {"A": A}


LU = Kernel("lu", "solvers", NSIZES, build_lu, lambda f, s: _schedule_lu(f), _dominant,
            ref_lu, ("A",), gaps=SEQ_GAP)


# ------------------------------------------------------------------- ludcmp
def build_ludcmp(s):
    f = tp.Function("ludcmp", params=s)
    A = f.buffer("A", ("N", "N"), F64, output=True)
    b = f.input("b", ("N",), F64)
    x, y = f.buffer("x", ("N",), F64, output=True), f.buffer("y", ("N",), F64, output=True)
    _lu_nest(f, A)
    i2 = f.var("i2", 0, "N")
    j2 = f.var("j2", 0, i2)
    with f.nest(i2):
        f.computation("y0", [i2], b[i2]).store_in(y, [i2])
        f.computation("y1", [i2, j2], y[i2] - A[i2, j2] * y[j2]).store_in(y, [i2])
    r = f.var("r", 0, "N")                        # i = N - 1 - r
    j3 = f.var("j3", s["N"] - r, "N")
    i3 = s["N"] - 1 - r
    with f.nest(r):
        f.computation("x0", [r], y[i3]).store_in(x, [i3])
        f.computation("x1", [r, j3], x[i3] - A[i3, j3] * x[j3]).store_in(x, [i3])
        f.computation("x2", [r], x[i3] / A[i3, i3]).store_in(x, [i3])
    return f


def ref_ludcmp(a, s):
    A = ref_lu(a, s)["A"]
    n = len(A)
    y = a["b"].copy()
    for i in range(n):
        y[i] -= A[i, :i] @ y[:i]
    x = np.zeros(n)
    for i in range(n - 1, -1, -1):
        x[i] = (y[i] - A[i, i + 1:] @ x[i + 1:]) / A[i, i]
    return {"A": A, "x": x, "y": y}


LUDCMP = Kernel(
    "ludcmp", "solvers", NSIZES, build_ludcmp, lambda f, s: _schedule_lu(f),
    lambda rng, s: {**_dominant(rng, s), "b": rng.standard_normal(s["N"]),
                    "x": np.zeros(s["N"]), "y": np.zeros(s["N"])},
    ref_ludcmp, ("A", "x", "y"), gaps=SEQ_GAP)


# ----------------------------------------------------------------- cholesky
def build_cholesky(s):
    f = tp.Function("cholesky", params=s)
    A = f.buffer("A", ("N", "N"), F64, output=True)
    i = f.var("i", 0, "N")
    j = f.var("j", 0, i)
    k = f.var("k", 0, j)
    kd = f.var("kd", 0, i)
    with f.nest(i):
        with f.nest(j):
            # A[i][j] -= A[i][k] * A[j][k] as a reduction: its start, its
            # update, and the division that reads its sum
            a = f.computation("C0", [i, j], A[i, j]).store_in(A, [i, j])
            a[i, j] -= A[i, k] * A[j, k]                                    # C0_update
            f.computation("C2", [i, j], a[i, j] / A[j, j]).store_in(A, [i, j])
        d = f.computation("C3", [i], A[i, i]).store_in(A, [i, i])
        d[i] -= A[i, kd] * A[i, kd]                                         # C3_update
        f.computation("C4", [i], tp.sqrt(d[i])).store_in(A, [i, i])
    return f


def schedule_cholesky(f, s):
    """Column by column (j outside i): the diagonal element of column j
    first (at i = j), then the elements below it in parallel, each a dot
    product of two finished rows accumulated in a slot of its row's own
    (``store_in``), apart from the A it reads, so a reduction: in SIMD lanes
    (reassociated), four vectors of partial sums a step."""
    C0, C1, C2, C4 = (stmt(f, n) for n in ("C0", "C0_update", "C2", "C4"))
    C3, C3u = stmt(f, "C3"), stmt(f, "C3_update")
    i, j = C0.vars
    C0.store_in(f.buffer("row_sums", ("N",), F64), [i])
    C3.store_in(f.buffer("diagonal", (1,), F64), [0])
    for st in (C0, C1, C2):
        st.interchange("i", "j")
    C0.after(C4, "i")
    C1.after(C0, "i")
    C2.after(C1, "i")
    for st in (C0, C1, C2):
        st.parallelize("i")
    for dot, k in ((C1, "k"), (C3u, "kd")):
        dot.split(k, 4 * lanes(), names=(k + "0", k + "v"))
        dot.vectorize(k + "v", lanes(), allow_reassociation=True)
        dot.unroll(k + "v0")


def ref_cholesky(a, s):
    A = a["A"].copy()
    n = len(A)
    for i in range(n):
        for j in range(i):
            A[i, j] = (A[i, j] - A[i, :j] @ A[j, :j]) / A[j, j]
        A[i, i] = math.sqrt(A[i, i] - A[i, :i] @ A[i, :i])
    return {"A": A}


def spd(rng, s):
    m = rng.standard_normal((s["N"], s["N"]))
    return {"A": m @ m.T + s["N"] * np.eye(s["N"])}


CHOLESKY = Kernel("cholesky", "solvers", NSIZES, build_cholesky, schedule_cholesky, spd,
                  ref_cholesky, ("A",),
                  gaps="one parallel region per column (no blocked, right-looking order: "
                  "each dot product streams two rows)")


# ------------------------------------------------------------------ trisolv
def build_trisolv(s):
    f = tp.Function("trisolv", params=s)
    i = f.var("i", 0, "N")
    j = f.var("j", 0, i)
    L, b = f.input("L", ("N", "N"), F64), f.input("b", ("N",), F64)
    x = f.buffer("x", ("N",), F64, output=True)
    with f.nest(i):
        xi = f.computation("x0", [i], b[i]).store_in(x, [i])
        xi[i] -= L[i, j] * x[j]
        f.computation("x2", [i], xi[i] / L[i, i]).store_in(x, [i])
    return f


def schedule_trisolv(f, s):
    """The rows are a chain (row i reads every earlier x[j]); each row's dot
    product accumulates in a scalar of its own (``store_in``), apart from
    the x[j] it reads, and so is a reduction: in SIMD lanes (reassociated),
    four vectors of partial sums a step."""
    x0, dot = stmt(f, "x0"), stmt(f, "x0_update")
    x0.store_in(f.buffer("row_sum", (1,), F64), [0])
    dot.split("j", 4 * lanes(), names=("j0", "jv"))
    dot.vectorize("jv", lanes(), allow_reassociation=True)
    dot.unroll("jv0")


def ref_trisolv(a, s):
    L, x = a["L"], a["b"].copy()
    for i in range(len(x)):
        x[i] = (x[i] - L[i, :i] @ x[:i]) / L[i, i]
    return {"x": x}


TRISOLV = Kernel(
    "trisolv", "solvers", NSIZES, build_trisolv, schedule_trisolv,
    lambda rng, s: {"L": np.tril(rng.standard_normal((s["N"], s["N"])))
                    + s["N"] * np.eye(s["N"]), "b": rng.standard_normal(s["N"]),
                    "x": np.zeros(s["N"])},
    ref_trisolv, ("x",),
    gaps=SEQ_GAP)


# ------------------------------------------------------------------- durbin
def build_durbin(s):
    f = tp.Function("durbin", params=s)
    r = f.input("r", ("N",), F64)
    y = f.buffer("y", ("N",), F64, output=True)
    z = f.buffer("z", ("N",), F64)
    sc = f.buffer("scalars", (3,), F64)          # alpha, beta, sum
    AL, BE, SU = 0, 1, 2
    f.computation("init_y", [], -r[0]).store_in(y, [0])
    f.computation("init_b", [], 1.0, dtype=F64).store_in(sc, [BE])
    f.computation("init_a", [], -r[0]).store_in(sc, [AL])
    k = f.var("k", 1, "N")
    i = f.var("i", 0, k)
    with f.nest(k):
        f.computation("beta", [k], (1.0 - sc[AL] * sc[AL]) * sc[BE]).store_in(sc, [BE])
        sm = f.computation("sum", [k], 0.0, dtype=F64).store_in(sc, [SU])
        sm[k] += r[k - i - 1] * y[i]
        f.computation("alpha", [k], -(r[k] + sc[SU]) / sc[BE]).store_in(sc, [AL])
        f.computation("zc", [k, i], y[i] + sc[AL] * y[k - i - 1]).store_in(z, [i])
        f.computation("copy", [k, i], z[i]).store_in(y, [i])
        f.computation("yk", [k], sc[AL]).store_in(y, [k])
    return f


def schedule_durbin(f, s):
    stmt(f, "sum_update").vectorize("i", lanes(), allow_reassociation=True)
    stmt(f, "zc").vectorize("i", lanes())
    stmt(f, "copy").vectorize("i", lanes())


def ref_durbin(a, s):
    r = a["r"]
    n = len(r)
    y = np.zeros(n)
    y[0] = alpha = -r[0]
    beta = 1.0
    for k in range(1, n):
        beta = (1 - alpha * alpha) * beta
        alpha = -(r[k] + r[k - 1::-1][:k] @ y[:k]) / beta
        y[:k] = y[:k] + alpha * y[k - 1::-1][:k]
        y[k] = alpha
    return {"y": y}


DURBIN = Kernel("durbin", "solvers", NSIZES, build_durbin, schedule_durbin,
                lambda rng, s: {"r": rng.uniform(-0.5, 0.5, s["N"]) / s["N"],
                                "y": np.zeros(s["N"])},
                ref_durbin, ("y",), gaps=SEQ_GAP)


# -------------------------------------------------------------- gramschmidt
def build_gramschmidt(s):
    f = tp.Function("gramschmidt", params=s)
    k, i, i2 = f.var("k", 0, "N"), f.var("i", 0, "M"), f.var("i2", 0, "M")
    j = f.var("j", k + 1, "N")
    ii = f.var("ii", 0, "M")
    A = f.buffer("A", ("M", "N"), F64, output=True)
    R = f.buffer("R", ("N", "N"), F64, output=True)
    Q = f.buffer("Q", ("M", "N"), F64, output=True)
    nrm = f.buffer("nrm", (1,), F64)
    with f.nest(k):
        f.computation("n0", [k], 0.0, dtype=F64).store_in(nrm, [0])
        f.computation("n1", [k, i], nrm[0] + A[i, k] * A[i, k]).store_in(nrm, [0])
        f.computation("rkk", [k], tp.sqrt(nrm[0])).store_in(R, [k, k])
        f.computation("q", [k, i2], A[i2, k] / R[k, k]).store_in(Q, [i2, k])
        with f.nest(j):
            f.computation("r0", [k, j], 0.0, dtype=F64).store_in(R, [k, j])
            f.computation("r1", [k, j, ii], R[k, j] + Q[ii, k] * A[ii, j]).store_in(R, [k, j])
            f.computation("a1", [k, j, i], A[i, j] - Q[i, k] * R[k, j]).store_in(A, [i, j])
    return f


def schedule_gramschmidt(f, s):
    """For each k: R's row k over blocks of columns in parallel (rows ii
    outside the columns in SIMD lanes), then A's update by rows in parallel."""
    r0, r1, a1 = stmt(f, "r0"), stmt(f, "r1"), stmt(f, "a1")
    r0.vectorize("j", lanes())
    r1.after(r0, "k")
    r1.split("j", 64)
    r1.reorder("j0", "ii", "j1")
    r1.parallelize("j0")
    r1.vectorize("j1", lanes())
    r1.unroll("j10")                              # the block's vectors
    a1.after(r1, "k")
    a1.interchange("j", "i")
    a1.parallelize("i")
    a1.vectorize("j", lanes())


def ref_gramschmidt(a, s):
    A = a["A"].copy()
    m, n = A.shape
    R, Q = np.zeros((n, n)), np.zeros((m, n))
    for k in range(n):
        R[k, k] = math.sqrt(A[:, k] @ A[:, k])
        Q[:, k] = A[:, k] / R[k, k]
        R[k, k + 1:] = Q[:, k] @ A[:, k + 1:]
        A[:, k + 1:] -= np.outer(Q[:, k], R[k, k + 1:])
    return {"A": A, "R": R, "Q": Q}


GRAMSCHMIDT = Kernel(
    "gramschmidt", "solvers",
    {"MINI": dict(M=20, N=30), "SMALL": dict(M=60, N=80), "MEDIUM": dict(M=200, N=240),
     "LARGE": dict(M=1000, N=1200)},
    build_gramschmidt, schedule_gramschmidt,
    lambda rng, s: {"A": rng.standard_normal((s["M"], s["N"])),
                    "R": np.zeros((s["N"], s["N"])), "Q": np.zeros((s["M"], s["N"]))},
    ref_gramschmidt, ("A", "R", "Q"),
    # with M < N (as in PolyBench's sizes) the columns k >= M of Q divide
    # rounding noise by rounding noise: only the first M are compared
    compared=lambda out, s: {**out, "Q": out["Q"][:, :min(s["M"], s["N"])]})

KERNELS = (CHOLESKY, DURBIN, GRAMSCHMIDT, LU, LUDCMP, TRISOLV)

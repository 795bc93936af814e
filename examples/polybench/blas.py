"""PolyBench linear-algebra/blas: gemm, gemver, gesummv, symm, syr2k, syrk, trmm."""
from __future__ import annotations

import numpy as np

import tiramisu_py as tp
from examples.polybench.common import (F64, Kernel, blis_float64, each, lanes,
                                       rows_of_8, stmt)

ALPHA, BETA = 1.5, 1.2
MN = {"MINI": dict(M=20, N=30), "SMALL": dict(M=60, N=80),
      "MEDIUM": dict(M=200, N=240), "LARGE": dict(M=1000, N=1200)}
NSQ = {"MINI": 40, "SMALL": 120, "MEDIUM": 400, "LARGE": 2000}


def _rand(rng, *shape):
    return rng.standard_normal(shape)


# ---------------------------------------------------------------------- gemm
def build_gemm(s):
    f = tp.Function("gemm", params=s)
    i, j, k = f.var("i", 0, "NI"), f.var("j", 0, "NJ"), f.var("k", 0, "NK")
    A, B = f.input("A", ("NI", "NK"), F64), f.input("B", ("NK", "NJ"), F64)
    C = f.buffer("C", ("NI", "NJ"), F64, output=True)
    with f.nest(i):
        scale = f.computation("scale", [i, j], C[i, j] * BETA).store_in(C, [i, j])
        scale[i, j].reduce("+", ALPHA * A[i, k] * B[k, j], loops=[i, k, j])   # scale_update
    return f


def schedule_gemm(f, s):
    """All the scaling first, then the library's BLIS schedule of the product."""
    scale, acc = stmt(f, "scale"), stmt(f, "scale_update")
    acc.after(scale, None)
    scale.parallelize("i")
    scale.vectorize("j", lanes())
    blis_float64(acc, "i", "j", "k", (s["NI"], s["NJ"], s["NK"]))


GEMM = Kernel(
    "gemm", "blas",
    {"MINI": dict(NI=20, NJ=25, NK=30), "SMALL": dict(NI=60, NJ=70, NK=80),
     "MEDIUM": dict(NI=200, NJ=220, NK=240), "LARGE": dict(NI=1000, NJ=1100, NK=1200)},
    build_gemm, schedule_gemm,
    lambda rng, s: {"A": _rand(rng, s["NI"], s["NK"]), "B": _rand(rng, s["NK"], s["NJ"]),
                    "C": _rand(rng, s["NI"], s["NJ"])},
    lambda a, s: {"C": BETA * a["C"] + ALPHA * a["A"] @ a["B"]},
    ("C",))


# -------------------------------------------------------------------- gemver
def build_gemver(s):
    f = tp.Function("gemver", params=s)
    i, j = f.var("i", 0, "N"), f.var("j", 0, "N")
    u1, v1, u2, v2, y, z = (f.input(n, ("N",), F64) for n in ("u1", "v1", "u2", "v2", "y", "z"))
    A = f.buffer("A", ("N", "N"), F64, output=True)
    x = f.buffer("x", ("N",), F64, output=True)
    w = f.buffer("w", ("N",), F64, output=True)
    f.computation("s1", [i, j], A[i, j] + u1[i] * v1[j] + u2[i] * v2[j]).store_in(A, [i, j])
    f.computation("s2", [i, j], x[i] + BETA * A[j, i] * y[j]).store_in(x, [i])
    f.computation("s3", [i], x[i] + z[i]).store_in(x, [i])
    w0 = f.computation("w0", [i], w[i]).store_in(w, [i])      # w[i] += ... as an update
    w0[i] += ALPHA * A[i, j] * x[j]
    return f


def schedule_gemver(f, s):
    s1, s2, s3, wu = (stmt(f, n) for n in ("s1", "s2", "s3", "w0_update"))
    s1.parallelize("i")
    s1.vectorize("j", lanes())
    s2.split("i", 64)                              # x[i] += A[j][i] y[j]: rows of A inside
    s2.reorder("i0", "j", "i1")
    s2.parallelize("i0")
    s2.vectorize("i1", lanes())
    s3.vectorize("i", lanes())
    wu.parallelize("i")
    wu.vectorize("j", lanes(), allow_reassociation=True)


def ref_gemver(a, s):
    A = a["A"] + np.outer(a["u1"], a["v1"]) + np.outer(a["u2"], a["v2"])
    x = a["x"] + BETA * A.T @ a["y"] + a["z"]
    return {"A": A, "x": x, "w": a["w"] + ALPHA * A @ x}


GEMVER = Kernel(
    "gemver", "blas", {d: dict(N=n) for d, n in NSQ.items()}, build_gemver, schedule_gemver,
    lambda rng, s: {**{n: _rand(rng, s["N"]) for n in ("u1", "v1", "u2", "v2", "y", "z",
                                                       "x", "w")},
                    "A": _rand(rng, s["N"], s["N"])},
    ref_gemver, ("A", "x", "w"))


# ------------------------------------------------------------------- gesummv
def build_gesummv(s):
    f = tp.Function("gesummv", params=s)
    i, j = f.var("i", 0, "N"), f.var("j", 0, "N")
    A, B, x = f.input("A", ("N", "N"), F64), f.input("B", ("N", "N"), F64), f.input("x", ("N",), F64)
    y = f.buffer("y", ("N",), F64, output=True)
    with f.nest(i):
        t = f.computation("tmp", [i], 0.0, dtype=F64)
        yy = f.computation("yacc", [i], 0.0, dtype=F64).store_in(y, [i])
        with f.nest(j):
            t[i] += A[i, j] * x[j]
            yy[i] += B[i, j] * x[j]
        f.computation("yout", [i], ALPHA * t[i] + BETA * y[i]).store_in(y, [i])
    return f


def schedule_gesummv(f, s):
    """Blocks of 8 rows in parallel; in a block the two dot products of the
    8 rows, unrolled inside j (independent chains, each in order)."""
    sts = [stmt(f, n) for n in ("tmp", "yacc", "tmp_update", "yacc_update", "yout")]
    rows_of_8(f, sts, sts[2:4], parallel=True)


GESUMMV = Kernel(
    "gesummv", "blas", {"MINI": dict(N=30), "SMALL": dict(N=90), "MEDIUM": dict(N=250),
                        "LARGE": dict(N=1300)}, build_gesummv, schedule_gesummv,
    lambda rng, s: {"A": _rand(rng, s["N"], s["N"]), "B": _rand(rng, s["N"], s["N"]),
                    "x": _rand(rng, s["N"]), "y": np.zeros(s["N"])},
    lambda a, s: {"y": ALPHA * a["A"] @ a["x"] + BETA * a["B"] @ a["x"]}, ("y",))


# ---------------------------------------------------------------------- symm
def build_symm(s):
    """PolyBench's C[i][j] = beta C[i][j] + alpha B[i][j] A[i][i] + alpha
    temp2 is written as its two terms, the first before the k loop (row i of
    C is not written in it), the second after, as an update: the same
    additions in the same order.  temp2 (a scalar in PolyBench) is a
    reduction over k per (i, j), stored per column j."""
    f = tp.Function("symm", params=s)
    i, j = f.var("i", 0, "M"), f.var("j", 0, "N")
    k = f.var("k", 0, i)
    A, B = f.input("A", ("M", "M"), F64), f.input("B", ("M", "N"), F64)
    C = f.buffer("C", ("M", "N"), F64, output=True)
    t2 = f.buffer("temp2", ("N",), F64)
    with f.nest(i, j):
        c = f.computation("c", [i, j], BETA * C[i, j] + ALPHA * B[i, j] * A[i, i]
                          ).store_in(C, [i, j])
        t = f.computation("t", [i, j], 0.0, dtype=F64).store_in(t2, [j])
        with f.nest(k):
            c[k, j] += ALPHA * B[i, j] * A[i, k]                    # c_update
            t[i, j] += B[k, j] * A[i, k]                            # t_update
        c[i, j] += ALPHA * t[i, j]                                  # c_update1
    return f


def schedule_symm(f, s):
    """Three products, each the library's BLIS schedule (register blocks
    accumulated locally, the blocks wholly inside the triangle with constant
    bounds): temp2 kept per (i, j) in a matrix of its own (``store_in``) and
    summed over k < i, then C's first term and temp2's added, then the
    column updates of the earlier rows (k < i) summed over i."""
    c, t, c_up, t_up, c_fin = (stmt(f, n) for n in ("c", "t", "c_update", "t_update",
                                                    "c_update1"))
    i, j = t.vars
    t.store_in(f.buffer("temp2_all", ("M", "N"), F64), [i, j])
    blis_float64(t_up, "i", "j", "k", (s["M"], s["N"], s["M"]))
    t_up.after(t, None)
    c.after(t_up, None)
    c_fin.after(c, "j")
    blis_float64(c_up, "k", "j", "i", (s["M"], s["N"], s["M"]))
    c_up.after(c_fin, None)
    for st in (t, c, c_fin):
        st.parallelize("i")
        st.vectorize("j", lanes())


def ref_symm(a, s):
    A, B, C = a["A"], a["B"], a["C"].copy()
    M = len(A)
    for i in range(M):
        temp2 = B[:i].T @ A[i, :i]
        C[:i] += ALPHA * np.outer(A[i, :i], B[i])
        C[i] = BETA * C[i] + ALPHA * B[i] * A[i, i] + ALPHA * temp2
    return {"C": C}


SYMM = Kernel(
    "symm", "blas", MN, build_symm, schedule_symm,
    lambda rng, s: {"A": _rand(rng, s["M"], s["M"]), "B": _rand(rng, s["M"], s["N"]),
                    "C": _rand(rng, s["M"], s["N"])},
    ref_symm, ("C",))


# ------------------------------------------------------------- syrk / syr2k
def _build_rank_update(name, s, two):
    f = tp.Function(name, params=s)
    i, k = f.var("i", 0, "N"), f.var("k", 0, "M")
    j = f.var("j", 0, i + 1)
    A = f.input("A", ("N", "M"), F64)
    B = f.input("B", ("N", "M"), F64) if two else None
    C = f.buffer("C", ("N", "N"), F64, output=True)
    term = (A[j, k] * ALPHA * B[i, k] + B[j, k] * ALPHA * A[i, k]) if two \
        else ALPHA * A[i, k] * A[j, k]
    with f.nest(i):
        scale = f.computation("scale", [i, j], C[i, j] * BETA).store_in(C, [i, j])
        scale[i, j].reduce("+", term, loops=[i, k, j])                # scale_update
    return f


def schedule_rank_update(f, s):
    """All the scaling first, then the library's BLIS schedule of the
    products over the lower triangle: ``A[j][k]`` (and ``B[j][k]``) read
    along k and packed into panels, the other operand broadcast in place; the
    register blocks wholly below the diagonal run with constant bounds, the
    diagonal's in a generic copy.  The column panels are dealt to the threads
    one at a time (a triangle: halves would give one thread 3/4 of it)."""
    scale, acc = stmt(f, "scale"), stmt(f, "scale_update")
    acc.after(scale, None)
    scale.parallelize("i", schedule="static", chunk=1)
    scale.vectorize("j", lanes())
    i, k, j = acc.vars
    packed = [f.buffers[n][j, k] for n in ("A", "B") if n in f.buffers]
    blis_float64(acc, "i", "j", "k", (s["N"], s["N"], s["M"]), packed)
    acc.parallelize("jc", schedule="static", chunk=1)


def _rank_inputs(two):
    def inputs(rng, s):
        d = {"A": _rand(rng, s["N"], s["M"]), "C": _rand(rng, s["N"], s["N"])}
        if two:
            d["B"] = _rand(rng, s["N"], s["M"])
        return d
    return inputs


def _rank_ref(two):
    def ref(a, s):
        A, C = a["A"], a["C"].copy()
        P = ALPHA * (A @ a["B"].T + a["B"] @ A.T) if two else ALPHA * A @ A.T
        low = np.tril_indices(len(C))
        C[low] = BETA * C[low] + P[low]
        return {"C": C}
    return ref


SYRK = Kernel("syrk", "blas", MN, lambda s: _build_rank_update("syrk", s, False),
              schedule_rank_update, _rank_inputs(False), _rank_ref(False), ("C",))
SYR2K = Kernel("syr2k", "blas", MN, lambda s: _build_rank_update("syr2k", s, True),
               schedule_rank_update, _rank_inputs(True), _rank_ref(True), ("C",))


# ---------------------------------------------------------------------- trmm
def build_trmm(s):
    f = tp.Function("trmm", params=s)
    i, j = f.var("i", 0, "M"), f.var("j", 0, "N")
    k = f.var("k", i + 1, "M")
    A = f.input("A", ("M", "M"), F64)
    B = f.buffer("B", ("M", "N"), F64, output=True)
    with f.nest(i, j):
        # PolyBench's B[i][j] += A[k][i] * B[k][j] as a reduction: its start
        # (B[i][j] itself), its update, and the scaling that reads its sum
        acc = f.computation("acc", [i, j], B[i, j]).store_in(B, [i, j])
        acc[i, j] += A[k, i] * B[k, j]
        f.computation("scale", [i, j], ALPHA * acc[i, j]).store_in(B, [i, j])
    return f


def schedule_trmm(f, s):
    """The rows' sums accumulate in a temporary (``store_in``), so that B
    keeps its input values until every row is summed: first the copy of B,
    then the products as the library's BLIS schedule (B read in place, A's
    column broadcast; the register blocks wholly below the diagonal with
    constant bounds), then the scaled rows written back to B."""
    init, acc, scale = stmt(f, "acc"), stmt(f, "acc_update"), stmt(f, "scale")
    i, j = init.vars
    init.store_in(f.buffer("B_sum", ("M", "N"), F64), [i, j])
    blis_float64(acc, "i", "j", "k", (s["M"], s["N"], s["M"]))
    acc.after(init, None)
    scale.after(acc, None)
    for st in (init, scale):
        st.parallelize("i")
        st.vectorize("j", lanes())


def ref_trmm(a, s):
    A, B = a["A"], a["B"].copy()
    for i in range(len(A)):
        B[i] = ALPHA * (B[i] + A[i + 1:, i] @ B[i + 1:])
    return {"B": B}


TRMM = Kernel("trmm", "blas", MN, build_trmm, schedule_trmm,
              lambda rng, s: {"A": _rand(rng, s["M"], s["M"]), "B": _rand(rng, s["M"], s["N"])},
              ref_trmm, ("B",))

KERNELS = (GEMM, GEMVER, GESUMMV, SYMM, SYR2K, SYRK, TRMM)

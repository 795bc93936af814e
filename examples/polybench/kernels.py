"""PolyBench linear-algebra/kernels: 2mm, 3mm, atax, bicg, doitgen, mvt."""
from __future__ import annotations

import numpy as np

import tiramisu_py as tp
from examples.polybench.common import F64, Kernel, blis_float64, lanes, rows_of_8, stmt

ALPHA, BETA = 1.5, 1.2
MN = {"MINI": dict(M=38, N=42), "SMALL": dict(M=116, N=124),
      "MEDIUM": dict(M=390, N=410), "LARGE": dict(M=1900, N=2100)}


def _rand(rng, *shape):
    return rng.standard_normal(shape)


def _product(f, name, out, a, b, i, j, k, init, coeff=1.0):
    """``out[i, j] = init(i, j); out[i, j] += coeff * a[i, k] * b[k, j]`` in
    PolyBench's i-j-k order (the accumulation an update: ``{name}_init_update``)."""
    with f.nest(i, j):
        c = f.computation(f"{name}_init", [i, j], init).store_in(out, [i, j])
        c[i, j] += coeff * a[i, k] * b[k, j]


def _schedule_product(f, name, i, j, k, s, extents):
    """The initialisation first (rows in parallel), then the library's BLIS
    schedule of the accumulation (loop names and size names given)."""
    init, acc = stmt(f, f"{name}_init"), stmt(f, f"{name}_init_update")
    acc.after(init, None)
    init.parallelize(i)
    init.vectorize(j, lanes())
    blis_float64(acc, i, j, k, [s[e] for e in extents])


# ----------------------------------------------------------------- 2mm / 3mm
def build_2mm(s):
    f = tp.Function("mm2", params=s)
    i, j, k, l = (f.var(n, 0, p) for n, p in (("i", "NI"), ("j", "NJ"), ("k", "NK"),
                                               ("l", "NL")))
    A, B = f.input("A", ("NI", "NK"), F64), f.input("B", ("NK", "NJ"), F64)
    C = f.input("C", ("NJ", "NL"), F64)
    D = f.buffer("D", ("NI", "NL"), F64, output=True)
    tmp = f.buffer("tmp", ("NI", "NJ"), F64)
    _product(f, "tmp", tmp, A, B, i, j, k, 0.0, ALPHA)
    _product(f, "D", D, tmp, C, i, l, j, D[i, l] * BETA)
    return f


def schedule_2mm(f, s):
    _schedule_product(f, "tmp", "i", "j", "k", s, ("NI", "NJ", "NK"))
    _schedule_product(f, "D", "i", "l", "j", s, ("NI", "NL", "NJ"))


MM2 = Kernel(
    "2mm", "kernels",
    {"MINI": dict(NI=16, NJ=18, NK=22, NL=24), "SMALL": dict(NI=40, NJ=50, NK=70, NL=80),
     "MEDIUM": dict(NI=180, NJ=190, NK=210, NL=220),
     "LARGE": dict(NI=800, NJ=900, NK=1100, NL=1200)},
    build_2mm, schedule_2mm,
    lambda rng, s: {"A": _rand(rng, s["NI"], s["NK"]), "B": _rand(rng, s["NK"], s["NJ"]),
                    "C": _rand(rng, s["NJ"], s["NL"]), "D": _rand(rng, s["NI"], s["NL"])},
    lambda a, s: {"D": BETA * a["D"] + (ALPHA * a["A"] @ a["B"]) @ a["C"]}, ("D",))


def build_3mm(s):
    f = tp.Function("mm3", params=s)
    i, j, k, l, m = (f.var(n, 0, p) for n, p in (("i", "NI"), ("j", "NJ"), ("k", "NK"),
                                                  ("l", "NL"), ("m", "NM")))
    A, B = f.input("A", ("NI", "NK"), F64), f.input("B", ("NK", "NJ"), F64)
    C, D = f.input("C", ("NJ", "NM"), F64), f.input("D", ("NM", "NL"), F64)
    E, F = f.buffer("E", ("NI", "NJ"), F64), f.buffer("F", ("NJ", "NL"), F64)
    G = f.buffer("G", ("NI", "NL"), F64, output=True)
    _product(f, "E", E, A, B, i, j, k, 0.0)
    _product(f, "F", F, C, D, j, l, m, 0.0)
    _product(f, "G", G, E, F, i, l, j, 0.0)
    return f


def schedule_3mm(f, s):
    for name, loops, extents in (("E", "ijk", ("NI", "NJ", "NK")), ("F", "jlm", ("NJ", "NL", "NM")),
                                 ("G", "ilj", ("NI", "NL", "NJ"))):
        _schedule_product(f, name, *loops, s, extents)


MM3 = Kernel(
    "3mm", "kernels",
    {"MINI": dict(NI=16, NJ=18, NK=20, NL=22, NM=24),
     "SMALL": dict(NI=40, NJ=50, NK=60, NL=70, NM=80),
     "MEDIUM": dict(NI=180, NJ=190, NK=200, NL=210, NM=220),
     "LARGE": dict(NI=800, NJ=900, NK=1000, NL=1100, NM=1200)},
    build_3mm, schedule_3mm,
    lambda rng, s: {"A": _rand(rng, s["NI"], s["NK"]), "B": _rand(rng, s["NK"], s["NJ"]),
                    "C": _rand(rng, s["NJ"], s["NM"]), "D": _rand(rng, s["NM"], s["NL"]),
                    "G": np.zeros((s["NI"], s["NL"]))},
    lambda a, s: {"G": (a["A"] @ a["B"]) @ (a["C"] @ a["D"])}, ("G",))


# ---------------------------------------------------------------------- atax
def build_atax(s):
    f = tp.Function("atax", params=s)
    i, j, jj = f.var("i", 0, "M"), f.var("j", 0, "N"), f.var("jj", 0, "N")
    A, x = f.input("A", ("M", "N"), F64), f.input("x", ("N",), F64)
    y = f.buffer("y", ("N",), F64, output=True)
    tmp = f.buffer("tmp", ("M",), F64)
    f.computation("y0", [jj], 0.0, dtype=F64).store_in(y, [jj])
    with f.nest(i):
        t = f.computation("t", [i], 0.0, dtype=F64).store_in(tmp, [i])
        t[i] += A[i, j] * x[j]
        f.computation("yacc", [i, j], y[j] + A[i, j] * tmp[i]).store_in(y, [j])
    return f


def schedule_atax(f, s):
    """One pass over A in blocks of 8 rows: per block, tmp for the 8 rows
    (8 dot products unrolled inside j: independent chains, in order), then
    y += A^T tmp over the same rows while they are in cache."""
    t, tu, ya = stmt(f, "t"), stmt(f, "t_update"), stmt(f, "yacc")
    rows_of_8(f, (t, tu, ya), (tu,))


ATAX = Kernel(
    "atax", "kernels", MN, build_atax, schedule_atax,
    lambda rng, s: {"A": _rand(rng, s["M"], s["N"]), "x": _rand(rng, s["N"]),
                    "y": np.zeros(s["N"])},
    lambda a, s: {"y": a["A"].T @ (a["A"] @ a["x"])}, ("y",))


# ---------------------------------------------------------------------- bicg
def build_bicg(s):
    f = tp.Function("bicg", params=s)
    i, j, jj = f.var("i", 0, "N"), f.var("j", 0, "M"), f.var("jj", 0, "M")
    A = f.input("A", ("N", "M"), F64)
    r, p = f.input("r", ("N",), F64), f.input("p", ("M",), F64)
    s_ = f.buffer("s", ("M",), F64, output=True)
    q = f.buffer("q", ("N",), F64, output=True)
    f.computation("s0", [jj], 0.0, dtype=F64).store_in(s_, [jj])
    with f.nest(i):
        qc = f.computation("q0", [i], 0.0, dtype=F64).store_in(q, [i])
        f.computation("sacc", [i, j], s_[j] + r[i] * A[i, j]).store_in(s_, [j])
        qc[i] += A[i, j] * p[j]
    return f


def schedule_bicg(f, s):
    """One pass over A in blocks of 8 rows: per block, s += A^T r over the
    block's rows, then q for the 8 rows (8 dot products unrolled inside j,
    in order) while they are in cache."""
    q0, sa, qu = stmt(f, "q0"), stmt(f, "sacc"), stmt(f, "q0_update")
    rows_of_8(f, (q0, sa, qu), (qu,))


BICG = Kernel(
    "bicg", "kernels", MN, build_bicg, schedule_bicg,
    lambda rng, s: {"A": _rand(rng, s["N"], s["M"]), "r": _rand(rng, s["N"]),
                    "p": _rand(rng, s["M"]), "s": np.zeros(s["M"]), "q": np.zeros(s["N"])},
    lambda a, s: {"s": a["A"].T @ a["r"], "q": a["A"] @ a["p"]}, ("s", "q"))


# ------------------------------------------------------------------- doitgen
def build_doitgen(s):
    f = tp.Function("doitgen", params=s)
    r, q, p, ss = (f.var(n, 0, b) for n, b in (("r", "NR"), ("q", "NQ"), ("p", "NP"),
                                                ("s", "NP")))
    C4 = f.input("C4", ("NP", "NP"), F64)
    A = f.buffer("A", ("NR", "NQ", "NP"), F64, output=True)
    summ = f.buffer("sum", ("NP",), F64)
    with f.nest(r, q):
        with f.nest(p):
            f.computation("zero", [r, q, p], 0.0, dtype=F64).store_in(summ, [p])
            f.computation("acc", [r, q, p, ss],
                          summ[p] + A[r, q, ss] * C4[ss, p]).store_in(summ, [p])
        f.computation("copy", [r, q, p], summ[p]).store_in(A, [r, q, p])
    return f


def schedule_doitgen(f, s):
    """(r, q) in parallel (sum privatised per thread), s-p order inside."""
    zero, acc, copy = stmt(f, "zero"), stmt(f, "acc"), stmt(f, "copy")
    acc.after(zero, "q")
    acc.interchange("p", "s")
    copy.after(acc, "q")
    for st in (zero, acc, copy):
        st.parallelize("r")
    acc.vectorize("p", lanes())


def ref_doitgen(a, s):
    return {"A": np.einsum("rqs,sp->rqp", a["A"], a["C4"])}


DOITGEN = Kernel(
    "doitgen", "kernels",
    {"MINI": dict(NQ=8, NR=10, NP=12), "SMALL": dict(NQ=20, NR=25, NP=30),
     "MEDIUM": dict(NQ=40, NR=50, NP=60), "LARGE": dict(NQ=140, NR=150, NP=160)},
    build_doitgen, schedule_doitgen,
    lambda rng, s: {"A": _rand(rng, s["NR"], s["NQ"], s["NP"]), "C4": _rand(rng, s["NP"], s["NP"])},
    ref_doitgen, ("A",))


# ----------------------------------------------------------------------- mvt
def build_mvt(s):
    f = tp.Function("mvt", params=s)
    i, j = f.var("i", 0, "N"), f.var("j", 0, "N")
    A = f.input("A", ("N", "N"), F64)
    y1, y2 = f.input("y_1", ("N",), F64), f.input("y_2", ("N",), F64)
    x1, x2 = f.buffer("x1", ("N",), F64, output=True), f.buffer("x2", ("N",), F64, output=True)
    a1 = f.computation("x1_0", [i], x1[i]).store_in(x1, [i])
    a1[i] += A[i, j] * y1[j]
    f.computation("x2acc", [i, j], x2[i] + A[j, i] * y2[j]).store_in(x2, [i])
    return f


def schedule_mvt(f, s):
    u, x2 = stmt(f, "x1_0_update"), stmt(f, "x2acc")
    stmt(f, "x1_0").parallelize("i")
    u.parallelize("i")
    u.vectorize("j", lanes(), allow_reassociation=True)
    x2.split("i", 64)
    x2.reorder("i0", "j", "i1")
    x2.parallelize("i0")
    x2.vectorize("i1", lanes())


MVT = Kernel(
    "mvt", "kernels", {d: dict(N=n) for d, n in
                       {"MINI": 40, "SMALL": 120, "MEDIUM": 400, "LARGE": 2000}.items()},
    build_mvt, schedule_mvt,
    lambda rng, s: {"A": _rand(rng, s["N"], s["N"]), "y_1": _rand(rng, s["N"]),
                    "y_2": _rand(rng, s["N"]), "x1": _rand(rng, s["N"]), "x2": _rand(rng, s["N"])},
    lambda a, s: {"x1": a["x1"] + a["A"] @ a["y_1"], "x2": a["x2"] + a["A"].T @ a["y_2"]},
    ("x1", "x2"))

KERNELS = (MM2, MM3, ATAX, BICG, DOITGEN, MVT)

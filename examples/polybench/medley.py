"""PolyBench medley: deriche, floyd-warshall, nussinov."""
from __future__ import annotations

import math

import numpy as np

import tiramisu_py as tp
from examples.polybench.common import F64, Kernel, each, lanes, stmt


# ------------------------------------------------------------------- deriche
def deriche_coefficients(alpha=0.25):
    k = ((1.0 - math.exp(-alpha)) * (1.0 - math.exp(-alpha))
         / (1.0 + 2.0 * alpha * math.exp(-alpha) - math.exp(2.0 * alpha)))
    a1 = a5 = k
    a2 = a6 = k * math.exp(-alpha) * (alpha - 1.0)
    a3 = a7 = k * math.exp(-alpha) * (alpha + 1.0)
    a4 = a8 = -k * math.exp(-2.0 * alpha)
    b1, b2 = 2.0 ** (-alpha), -math.exp(-2.0 * alpha)
    return dict(a1=a1, a2=a2, a3=a3, a4=a4, a5=a5, a6=a6, a7=a7, a8=a8, b1=b1, b2=b2, c1=1.0,
                c2=1.0)


def _recursive(f, name, src, dst, outer, inner, n, forward, ca, cb, cy):
    """One causal (``forward``) or anti-causal pass of the Deriche filter along
    ``inner`` for each ``outer``: PolyBench's scalars xm1, ym1, ym2 (xp1, xp2,
    yp1, yp2) are the previous elements, 0 before the first; ``src``/``dst``
    index (outer, position) or (position, outer) through ``at``."""
    o, r = outer
    at = inner

    def x(e_pos):
        return src[tuple(at(o, e_pos))]

    def y(e_pos):
        return dst[tuple(at(o, e_pos))]
    pos = r if forward else n - 3 - r
    step = -1 if forward else 1                      # where the previous elements are
    with f.nest(o):
        if forward:
            f.computation(f"{name}0", [o], cy[0] * x(0)).store_in(dst, at(o, 0))
            f.computation(f"{name}1", [o], cy[0] * x(1) + cy[1] * x(0)
                          + cb[0] * y(0)).store_in(dst, at(o, 1))
        else:
            f.computation(f"{name}0", [o], 0.0, dtype=F64).store_in(dst, at(o, n - 1))
            f.computation(f"{name}1", [o], ca[0] * x(n - 1)
                          + cb[0] * y(n - 1)).store_in(dst, at(o, n - 2))
        if forward:
            e = (ca[0] * x(pos) + ca[1] * x(pos + step) + cb[0] * y(pos + step)
                 + cb[1] * y(pos + 2 * step))
        else:
            e = (ca[0] * x(pos + 1) + ca[1] * x(pos + 2) + cb[0] * y(pos + 1)
                 + cb[1] * y(pos + 2))
        f.computation(f"{name}2", [o, r], e).store_in(dst, at(o, pos))


def build_deriche(s):
    c = deriche_coefficients()
    W, H = s["W"], s["H"]
    f = tp.Function("deriche", params=s)
    imgIn = f.input("imgIn", ("W", "H"), F64)
    imgOut = f.buffer("imgOut", ("W", "H"), F64, output=True)
    y1, y2 = f.buffer("y1", ("W", "H"), F64), f.buffer("y2", ("W", "H"), F64)
    rows = lambda o, p: [o, p]                                         # noqa: E731
    cols = lambda o, p: [p, o]                                         # noqa: E731
    i1, j1 = f.var("i1", 0, "W"), f.var("j1", 2, "H")
    _recursive(f, "yf", imgIn, y1, (i1, j1), rows, H, True,
               (c["a1"], c["a2"]), (c["b1"], c["b2"]), (c["a1"], c["a2"]))
    i2, j2 = f.var("i2", 0, "W"), f.var("j2", 0, H - 2)
    _recursive(f, "yb", imgIn, y2, (i2, j2), rows, H, False,
               (c["a3"], c["a4"]), (c["b1"], c["b2"]), None)
    i3, j3 = f.var("i3", 0, "W"), f.var("j3", 0, "H")
    f.computation("sum1", [i3, j3], c["c1"] * (y1[i3, j3] + y2[i3, j3])).store_in(imgOut, [i3, j3])
    j4, i4 = f.var("j4", 0, "H"), f.var("i4", 2, "W")
    _recursive(f, "zf", imgOut, y1, (j4, i4), cols, W, True,
               (c["a5"], c["a6"]), (c["b1"], c["b2"]), (c["a5"], c["a6"]))
    j5, i5 = f.var("j5", 0, "H"), f.var("i5", 0, W - 2)
    _recursive(f, "zb", imgOut, y2, (j5, i5), cols, W, False,
               (c["a7"], c["a8"]), (c["b1"], c["b2"]), None)
    i6, j6 = f.var("i6", 0, "W"), f.var("j6", 0, "H")
    f.computation("sum2", [i6, j6], c["c2"] * (y1[i6, j6] + y2[i6, j6])).store_in(imgOut, [i6, j6])
    return f


def schedule_deriche(f, s):
    """Every pass is a recurrence along one axis, independent along the other:
    that axis in parallel; the column passes with the rows inside (contiguous)."""
    for p, o in (("yf", "i1"), ("yb", "i2"), ("zf", "j4"), ("zb", "j5")):
        each([stmt(f, f"{p}{n}") for n in range(2 if p[0] == "z" else 3)], "parallelize", o)
    for p, o, r in (("zf", "j4", "i4"), ("zb", "j5", "i5")):
        last = stmt(f, f"{p}2")
        last.after(stmt(f, f"{p}1"), None)
        last.split(o, 64)
        last.reorder(o + "0", r, o + "1")
        last.parallelize(o + "0")
        last.vectorize(o + "1", lanes())
    stmt(f, "sum1").parallelize("i3")
    stmt(f, "sum1").vectorize("j3", lanes())
    stmt(f, "sum2").parallelize("i6")
    stmt(f, "sum2").vectorize("j6", lanes())


def ref_deriche(a, s):
    c = deriche_coefficients()
    img = a["imgIn"]
    W, H = img.shape

    def causal(x, a0, a1_, along):
        x = np.moveaxis(x, along, 0)
        y = np.zeros_like(x)
        xm1 = np.zeros(x.shape[1])
        ym1 = np.zeros(x.shape[1])
        ym2 = np.zeros(x.shape[1])
        for p in range(x.shape[0]):
            y[p] = a0 * x[p] + a1_ * xm1 + c["b1"] * ym1 + c["b2"] * ym2
            xm1, ym2, ym1 = x[p], ym1, y[p]
        return np.moveaxis(y, 0, along)

    def anticausal(x, a0, a1_, along):
        return np.flip(causal_shifted(np.flip(x, along), a0, a1_, along), along)

    def causal_shifted(x, a0, a1_, along):
        x = np.moveaxis(x, along, 0)
        y = np.zeros_like(x)
        xp1, xp2 = np.zeros(x.shape[1]), np.zeros(x.shape[1])
        yp1, yp2 = np.zeros(x.shape[1]), np.zeros(x.shape[1])
        for p in range(x.shape[0]):
            y[p] = a0 * xp1 + a1_ * xp2 + c["b1"] * yp1 + c["b2"] * yp2
            xp2, xp1, yp2, yp1 = xp1, x[p], yp1, y[p]
        return np.moveaxis(y, 0, along)

    out = c["c1"] * (causal(img, c["a1"], c["a2"], 1) + anticausal(img, c["a3"], c["a4"], 1))
    out = c["c2"] * (causal(out, c["a5"], c["a6"], 0) + anticausal(out, c["a7"], c["a8"], 0))
    return {"imgOut": out}


DERICHE = Kernel(
    "deriche", "medley",
    {"MINI": dict(W=64, H=64), "SMALL": dict(W=192, H=128), "MEDIUM": dict(W=720, H=480),
     "LARGE": dict(W=4096, H=2160)},
    build_deriche, schedule_deriche,
    lambda rng, s: {"imgIn": rng.random((s["W"], s["H"])), "imgOut": np.zeros((s["W"], s["H"]))},
    ref_deriche, ("imgOut",))


# ------------------------------------------------------------ floyd-warshall
def build_floyd_warshall(s, order="kij"):
    """``order``: the loops outermost first (PolyBench: k, i, j; another order
    is another algorithm, which the tests show gives another answer)."""
    f = tp.Function("floyd_warshall", params=s)
    loops = {n: f.var(n, 0, "N") for n in order}
    k, i, j = loops["k"], loops["i"], loops["j"]
    P = f.buffer("path", ("N", "N"), F64, output=True)
    f.computation("relax", [loops[n] for n in order],
                  tp.min(P[i, j], P[i, k] + P[k, j])).store_in(P, [i, j])
    return f


def schedule_floyd_warshall(f, s):
    """For one k, row k and column k do not change (path[k][k] >= 0), so the
    rows i are independent in value; but the dependence analysis is on memory
    (row k is read and rewritten at i = k), so i and j carry dependences and
    parallelising them is refused.  What is left, unrolling j by 4, measured
    slower than gcc's own code for the plain loop (0.89x at LARGE): left as
    written."""


def ref_floyd(a, s):
    P = a["path"].copy()
    for k in range(len(P)):
        P = np.minimum(P, P[:, k:k + 1] + P[k:k + 1, :])
    return {"path": P}


def floyd_inputs(rng, s):
    n = s["N"]
    P = rng.uniform(1.0, 20.0, (n, n))
    P[rng.random((n, n)) < 0.5] = 1e6                 # missing edges: paths matter
    np.fill_diagonal(P, 0.0)
    return {"path": P}


FLOYD_WARSHALL = Kernel(
    "floyd-warshall", "medley", {d: dict(N=n) for d, n in
                                 {"MINI": 60, "SMALL": 180, "MEDIUM": 500, "LARGE": 2800}.items()},
    build_floyd_warshall, schedule_floyd_warshall, floyd_inputs, ref_floyd, ("path",),
    gaps="rows i are parallel only given path[k][k] >= 0 (a value fact); an index-set "
         "split of i at k (i < k, i = k, i > k) would make it provable")


# ------------------------------------------------------------------ nussinov
def build_nussinov(s):
    """PolyBench's conditions j-1 >= 0 and i+1 < N always hold inside j > i;
    i < j-1 chooses between the two forms of the third statement."""
    n = s["N"]
    f = tp.Function("nussinov", params=s)
    r = f.var("r", 0, "N")                            # i = N - 1 - r
    i = n - 1 - r
    j = f.var("j", n - r, "N")
    k = f.var("k", n - r, j)
    seq = f.input("seq", ("N",), F64)
    T = f.buffer("table", ("N", "N"), F64, output=True)
    match = tp.select(seq[i] + seq[j] == 3.0, 1.0, 0.0)
    with f.nest(r, j):
        f.computation("s1", [r, j], tp.max(T[i, j], T[i, j - 1])).store_in(T, [i, j])
        f.computation("s2", [r, j], tp.max(T[i, j], T[i + 1, j])).store_in(T, [i, j])
        f.computation("s3", [r, j], tp.max(T[i, j], T[i + 1, j - 1]
                                           + tp.select(i < j - 1, match, 0.0))).store_in(T, [i, j])
        f.computation("s4", [r, j, k], tp.max(T[i, j], T[i, k] + T[k + 1, j])).store_in(T, [i, j])
    return f


def schedule_nussinov(f, s):
    """Each cell (i, j) reads cells left of it and below it, all on earlier
    anti-diagonals j - i: skewing j by r (= N - 1 - i) makes the outer loop
    the anti-diagonal, and the cells of one anti-diagonal run in parallel
    (their max chains over k have the same length: balanced)."""
    sts = [stmt(f, n) for n in ("s1", "s2", "s3", "s4")]
    each(sts, "skew", "r", "j", 1)
    each(sts, "interchange", "r", "j")
    each(sts, "parallelize", "r")


def ref_nussinov(a, s):
    seq, T = a["seq"], a["table"].copy()
    n = len(seq)
    for i in range(n - 1, -1, -1):
        for j in range(i + 1, n):
            T[i, j] = max(T[i, j], T[i, j - 1])
            T[i, j] = max(T[i, j], T[i + 1, j])
            m = (1.0 if seq[i] + seq[j] == 3 else 0.0) if i < j - 1 else 0.0
            T[i, j] = max(T[i, j], T[i + 1, j - 1] + m)
            if j > i + 1:
                T[i, j] = max(T[i, j], np.max(T[i, i + 1:j] + T[i + 2:j + 1, j]))
    return {"table": T}


NUSSINOV = Kernel(
    "nussinov", "medley", {d: dict(N=n) for d, n in
                           {"MINI": 60, "SMALL": 180, "MEDIUM": 500, "LARGE": 2500}.items()},
    build_nussinov, schedule_nussinov,
    lambda rng, s: {"seq": rng.integers(0, 4, s["N"]).astype(np.float64),
                    "table": rng.integers(0, 3, (s["N"], s["N"])).astype(np.float64)},
    ref_nussinov, ("table",),
    gaps="one parallel region per anti-diagonal (no tiling of the wavefront); int table "
         "and seq as float64")

KERNELS = (DERICHE, FLOYD_WARSHALL, NUSSINOV)

"""PolyBench datamining: correlation, covariance."""
from __future__ import annotations

import math

import numpy as np

import tiramisu_py as tp
from examples.polybench.common import F64, Kernel, blis_float64, lanes, stmt

EPS = 0.1
SIZES = {"MINI": dict(M=28, N=32), "SMALL": dict(M=80, N=100),
         "MEDIUM": dict(M=240, N=260), "LARGE": dict(M=1200, N=1400)}


def _mean(f, s, data, mean, i, j):
    f.computation("mean0", [j], 0.0, dtype=F64).store_in(mean, [j])
    f.computation("mean1", [j, i], mean[j] + data[i, j]).store_in(mean, [j])
    f.computation("mean2", [j], mean[j] / float(s["N"])).store_in(mean, [j])


def _gram(f, data, out, i, j, k, last, finish):
    """out[i][j] = sum_k data[k][i] data[k][j] over j >= i (or > i), finished
    by ``finish`` and mirrored; PolyBench's i, j, k order."""
    with f.nest(i, j):
        g = f.computation("g0", [i, j], 0.0, dtype=F64).store_in(out, [i, j])
        g[i, j] += data[k, i] * data[k, j]                        # g0_update
        if finish is not None:
            f.computation("g2", [i, j], finish(out[i, j])).store_in(out, [i, j])
        f.computation("g3", [i, j], out[i, j]).store_in(out, [j, i])


def _schedule_columns(f, names):
    """Column statistics (j outer, i inner) as rows of blocks of columns."""
    for name in names:
        st = stmt(f, name)
        st.interchange("j", "i")
        st.split("j", 64)
        st.reorder("j0", "i", "j1")
        st.parallelize("j0")
        st.vectorize("j1", lanes())


def _schedule_gram(f, s, finish):
    """Every statement of the Gram matrix one after the other over the whole
    triangle: the zeros, the products as the library's BLIS schedule (data[k][c]
    packed into panels, data[k][a] broadcast in place; the register blocks
    wholly above the diagonal with constant bounds), the finish, the mirror.
    The column panels are dealt to the threads one at a time (a triangle:
    halves would give one thread 3/4 of it)."""
    g0, g1, g3 = stmt(f, "g0"), stmt(f, "g0_update"), stmt(f, "g3")
    tail = [stmt(f, "g2")] if finish else []
    g1.after(g0, None)
    a, c, k = g1.vars
    blis_float64(g1, "a", "c", "k", (s["M"], s["M"], s["N"]), [f.buffers["data"][k, c]])
    g1.parallelize("jc", schedule="static", chunk=1)
    prev = g1
    for st in (*tail, g3):
        st.after(prev, None)
        prev = st
    for st in (g0, *tail, g3):
        st.parallelize("a", schedule="static", chunk=1)
    for st in (g0, *tail):
        st.vectorize("c", lanes())


# ---------------------------------------------------------------- covariance
def build_covariance(s):
    f = tp.Function("covariance", params=s)
    i, j, jj = f.var("i", 0, "N"), f.var("j", 0, "M"), f.var("jj", 0, "M")
    a, b = f.var("a", 0, "M"), f.var("k", 0, "N")
    c = f.var("c", a, "M")
    data = f.buffer("data", ("N", "M"), F64, output=True)
    cov = f.buffer("cov", ("M", "M"), F64, output=True)
    mean = f.buffer("mean", ("M",), F64)
    with f.nest(j):
        _mean(f, s, data, mean, i, j)
    f.computation("center", [i, jj], data[i, jj] - mean[jj]).store_in(data, [i, jj])
    _gram(f, data, cov, a, c, b, None, lambda e: e / (s["N"] - 1.0))
    return f


def schedule_covariance(f, s):
    stmt(f, "mean1").after(stmt(f, "mean0"), None)
    stmt(f, "mean2").after(stmt(f, "mean1"), None)
    for name in ("mean0", "mean2"):
        stmt(f, name).vectorize("j", lanes())
    _schedule_columns(f, ["mean1"])
    stmt(f, "center").parallelize("i")
    stmt(f, "center").vectorize("jj", lanes())
    _schedule_gram(f, s, True)


def ref_covariance(d, s):
    data = d["data"] - d["data"].mean(axis=0)
    return {"data": data, "cov": data.T @ data / (s["N"] - 1.0)}


COVARIANCE = Kernel(
    "covariance", "datamining", SIZES, build_covariance, schedule_covariance,
    lambda rng, s: {"data": rng.standard_normal((s["N"], s["M"])),
                    "cov": np.zeros((s["M"], s["M"]))},
    ref_covariance, ("data", "cov"))


# --------------------------------------------------------------- correlation
def build_correlation(s):
    f = tp.Function("correlation", params=s)
    i, j, jj = f.var("i", 0, "N"), f.var("j", 0, "M"), f.var("jj", 0, "M")
    a, b = f.var("a", 0, "M - 1"), f.var("k", 0, "N")
    c = f.var("c", a + 1, "M")
    data = f.buffer("data", ("N", "M"), F64, output=True)
    corr = f.buffer("corr", ("M", "M"), F64, output=True)
    mean, std = f.buffer("mean", ("M",), F64), f.buffer("stddev", ("M",), F64)
    n = float(s["N"])
    with f.nest(j):
        _mean(f, s, data, mean, i, j)
        f.computation("std0", [j], 0.0, dtype=F64).store_in(std, [j])
        f.computation("std1", [j, i], std[j] + (data[i, j] - mean[j]) * (data[i, j] - mean[j])
                      ).store_in(std, [j])
        f.computation("std2", [j], std[j] / n).store_in(std, [j])
        f.computation("std3", [j], tp.sqrt(std[j])).store_in(std, [j])
        f.computation("std4", [j], tp.select(std[j] <= EPS, 1.0, std[j])).store_in(std, [j])
    with f.nest(i, jj):
        f.computation("center", [i, jj], data[i, jj] - mean[jj]).store_in(data, [i, jj])
        f.computation("scale", [i, jj], data[i, jj] / (math.sqrt(n) * std[jj])
                      ).store_in(data, [i, jj])
    d = f.var("d", 0, "M - 1")
    f.computation("diag", [d], 1.0, dtype=F64).store_in(corr, [d, d])
    _gram(f, data, corr, a, c, b, None, None)
    f.computation("last", [], 1.0, dtype=F64).store_in(corr, [s["M"] - 1, s["M"] - 1])
    return f


def schedule_correlation(f, s):
    first = stmt(f, "mean0")
    cols = ["mean1", "std1"]
    prev = first
    for name in ("mean1", "mean2", "std0", "std1", "std2", "std3", "std4"):
        stmt(f, name).after(prev, None)
        prev = stmt(f, name)
    for name in ("mean0", "mean2", "std0", "std2", "std3", "std4"):
        stmt(f, name).vectorize("j", lanes())
    _schedule_columns(f, cols)
    for name in ("center", "scale"):
        stmt(f, name).parallelize("i")
        stmt(f, name).vectorize("jj", lanes())
    _schedule_gram(f, s, False)


def ref_correlation(d, s):
    data, n = d["data"], float(s["N"])
    mean = data.mean(axis=0)
    std = np.sqrt(((data - mean) ** 2).sum(axis=0) / n)
    std[std <= EPS] = 1.0
    data = (data - mean) / (math.sqrt(n) * std)
    corr = data.T @ data
    np.fill_diagonal(corr, 1.0)
    return {"data": data, "corr": corr}


def corr_inputs(rng, s):
    data = rng.standard_normal((s["N"], s["M"]))
    data[:, 0] = 0.01 * rng.standard_normal(s["N"])      # a column under the epsilon
    return {"data": data, "corr": np.zeros((s["M"], s["M"]))}


CORRELATION = Kernel(
    "correlation", "datamining", SIZES, build_correlation, schedule_correlation,
    corr_inputs, ref_correlation, ("data", "corr"))

KERNELS = (CORRELATION, COVARIANCE)

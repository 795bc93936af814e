"""Our side of ``tiramisu-py bench peers`` (bench/peers_kernels.py has the
kernels): each kernel written in the language with its sizes fixed at
declaration (as Halide's estimates and TVM's static shapes give theirs),
float32 (softmax and the batched matrix-vector product are those of
examples/beyond_polybench.py), compiled by the default target, run three ways:

  tiramisu_py            the plain algorithm, no schedule
  tiramisu_py[auto]      after ``f.auto_schedule()``
  tiramisu_py[tuned]     after ``tp.tune(f, budget=TUNE_BUDGET)`` (60 s): the
                         tuner's record, which ``compile()`` then uses (kept
                         in the tuning store: a later run reuses it, its
                         prep time then ~0; ``tiramisu-py tune --forget
                         peer_`` to tune again)
  tiramisu_py[auto+re]   after ``f.auto_schedule(reassociate=True)``, where
                         the kernel has a reduction that it vectorises
                         (softmax's row max and sum, the matrix-vector
                         product's dot products: the peers reassociate them)
  tiramisu_py[library]   the operator library's call, where it has one
                         (``schedules.gemm``, ``schedules.conv2d``)
  tiramisu_py[hand]      the layer norm's hand schedule (:func:`hand_layernorm`),
                         what ``auto_schedule(reassociate=True)`` is judged against

Outputs are written into arrays made once (as the peers realise into
buffers made once); jacobi-2d updates A and B in place, restored untimed
before each call."""
from __future__ import annotations

import numpy as np

import tiramisu_py as tp
from examples import beyond_polybench

NAMES = ("tiramisu_py", "tiramisu_py[auto]", "tiramisu_py[tuned]", "tiramisu_py[auto+re]",
         "tiramisu_py[library]", "tiramisu_py[hand]")
TUNE_BUDGET = 60.0
REASSOCIATED = ("softmax", "bmv", "layernorm")          # the kernels auto_schedule(reassociate=True) changes
F32 = tp.float32


def unavailable():
    return None


def build(kernel, s):
    """The plain algorithm of ``kernel`` at sizes ``s``."""
    f = tp.Function(f"peer_{kernel}", params=dict(s))
    if kernel == "gemm":
        i, j, k = (f.var(n, 0, "N") for n in "ijk")
        A, B = f.input("A", ("N", "N"), F32), f.input("B", ("N", "N"), F32)
        C = f.computation("C", [i, j], 0.0, dtype=F32)
        C[i, j] += A[i, k] * B[k, j]
    elif kernel == "jacobi2d":
        t = f.var("t", 0, "T")
        i, j = f.var("i", 1, "N - 1"), f.var("j", 1, "N - 1")
        A = f.buffer("A", ("N", "N"), F32, output=True)
        B = f.buffer("B", ("N", "N"), F32, output=True)

        def five(X):
            return 0.2 * (X[i, j] + X[i, j - 1] + X[i, j + 1] + X[i + 1, j] + X[i - 1, j])
        with f.nest(t):
            f.computation("sB", [t, i, j], five(A)).store_in(B, [i, j])
            f.computation("sA", [t, i, j], five(B)).store_in(A, [i, j])
    elif kernel == "softmax":
        return beyond_polybench.build_softmax({"N": s["R"], "M": s["C"]}, F32)
    elif kernel == "stencil9":
        i, j = f.var("i", 0, "N - 2"), f.var("j", 0, "N - 2")
        A = f.input("A", ("N", "N"), F32)
        f.computation("out", [i, j], sum((A[i + di, j + dj] for di in range(3)
                                          for dj in range(3)), 0.0) / 9.0)
    elif kernel == "bmv":
        return beyond_polybench.build_batched_mv({"NB": s["B"], "N": s["N"], "M": s["M"]}, F32)
    elif kernel == "layernorm":
        from bench.peers_kernels import EPS
        i, j = f.var("i", 0, "R"), f.var("j", 0, "C")
        X = f.input("X", ("R", "C"), F32)
        mean = f.computation("mean", [i], 0.0, dtype=F32)
        mean[i] += X[i, j] / float(s["C"])
        var = f.computation("var", [i], 0.0, dtype=F32)
        var[i] += (X[i, j] - mean[i]) * (X[i, j] - mean[i]) / float(s["C"])
        f.computation("Y", [i, j], (X[i, j] - mean[i]) / tp.sqrt(var[i] + EPS))
    else:
        n, o = f.var("n", 0, "N"), f.var("o", 0, "CO")
        y, x = f.var("y", 0, "H"), f.var("x", 0, "W")
        c, ky, kx = f.var("c", 0, "CI"), f.var("ky", 0, 3), f.var("kx", 0, 3)
        inp = f.input("inp", ("N", "CI", "H", "W"), F32)
        w = f.input("w", ("CO", "CI", 3, 3), F32)
        iy, ix = y + ky - 1, x + kx - 1
        inside = (iy >= 0) & (iy < f.param("H")) & (ix >= 0) & (ix < f.param("W"))
        out = f.computation("out", [n, o, y, x], 0.0, dtype=F32)
        out[n, o, y, x] += w[o, c, ky, kx] * tp.select(inside, inp[n, c, iy, ix], 0.0)
    return f


def impls(kernel, s, arrays, opts):
    """``{name: factory}``: each factory compiles and returns the call."""
    from bench.peers_kernels import empty_outputs
    outs = empty_outputs(kernel, s)

    def compiled(auto, reassociate=False, hand=False, tuned=False):
        def make():
            f = build(kernel, s)
            if tuned:
                tp.tune(f, budget=opts.get("tune_budget") or TUNE_BUDGET, progress=False)
            if auto:
                f.auto_schedule(reassociate=reassociate)
            if hand:
                hand_layernorm(f)
            k = f.compile(tuned=tuned)        # the plain row: as written, whatever is recorded
            if kernel == "jacobi2d":
                work = {n: a.copy() for n, a in arrays.items()}

                def call():
                    k(**work)
                    return work

                def restore():
                    for n, a in arrays.items():
                        np.copyto(work[n], a)
                call.prepare = restore
                return call
            return lambda: (k(**arrays, **outs), outs)[1]
        return make
    out = {"tiramisu_py": compiled(False), "tiramisu_py[auto]": compiled(True),
           "tiramisu_py[tuned]": compiled(False, tuned=True)}
    if kernel in REASSOCIATED:
        out["tiramisu_py[auto+re]"] = compiled(True, reassociate=True)
    if kernel in ("gemm", "conv2d"):
        out["tiramisu_py[library]"] = lambda: _library(kernel, arrays)
    if kernel == "layernorm":
        out["tiramisu_py[hand]"] = compiled(False, hand=True)
    return out


def hand_layernorm(f):
    """The layer norm as a user schedules it by hand: the row's three
    statements and both updates fused in ``i``, which runs in parallel, the
    sums vectorised along ``j`` with partial sums in the lanes."""
    from codegen import loops
    lanes = loops.host_lanes(32)
    c = f.computations
    mean, var = c["mean"], c["var"]
    mean.update.after(mean, "i")
    var.after(mean.update, "i")
    var.update.after(var, "i")
    c["Y"].after(var.update, "i")
    mean.parallelize("i")
    mean.update.vectorize("j", lanes, allow_reassociation=True)
    var.update.vectorize("j", lanes, allow_reassociation=True)
    c["Y"].vectorize("j", lanes)


def _library(kernel, a):
    import schedules
    if kernel == "gemm":
        return lambda: {"C": schedules.gemm(a["A"], a["B"])}
    return lambda: {"out": schedules.conv2d(a["inp"], a["w"], None, padding=1)}

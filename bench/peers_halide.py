"""Halide's side of ``tiramisu-py bench peers``: each kernel of
bench/peers_kernels.py as a Halide pipeline (``pip install halide==21.0.0``),
its outputs' estimates set to the sizes, scheduled by each of the three
autoschedulers the wheel ships as plugins, JIT-compiled for the host:

  halide[Mullapudi2016]   halide[Adams2019]   halide[Li2018]

with ``parallelism`` = the thread count (``HL_NUM_THREADS``).  Adams2019's
default beam (32) on conv2d ran over 100 s and ~10 GB: ``beam_size=1``
(greedy) there.  jacobi-2d has no time loop in Halide: its 2T updates are
2T stages (the borders kept by a ``select``; the first reads the inputs
through ``repeat_edge``, so each stage's region grows by one point a side,
4% more points at T=20, N=2000); Mullapudi2016 and Adams2019 did not finish
on its 40 stages, so they are run there only up to :data:`MAX_STAGES`.

Halide indexes the innermost dimension first: a NumPy array ``a[i][j]`` is
the Halide buffer ``a[j, i]`` (``hl.Buffer(ndarray)`` reverses the axes),
so every access below lists the indices in reverse."""
from __future__ import annotations

import os

NAMES = ("halide[Mullapudi2016]", "halide[Adams2019]", "halide[Li2018]")
PLUGINS = {"Mullapudi2016": "autoschedule_mullapudi2016", "Adams2019": "autoschedule_adams2019",
           "Li2018": "autoschedule_li2018"}
MAX_STAGES = 8              # Mullapudi2016 / Adams2019 on jacobi-2d: at most this many stages
_LOADED = set()


def unavailable():
    try:
        import halide  # noqa: F401
    except ImportError:
        return "halide is not installed (pip install halide==21.0.0)"
    return None


def _load(hl, name):
    if name in _LOADED:
        return
    lib = os.path.join(os.path.dirname(hl.__file__), "lib64", f"lib{PLUGINS[name]}.so")
    hl.load_plugin(lib if os.path.exists(lib) else PLUGINS[name])
    _LOADED.add(name)


def impls(kernel, s, arrays, opts):
    out = {}
    for sched in PLUGINS:
        name = f"halide[{sched}]"
        if kernel == "jacobi2d" and sched != "Li2018" and 2 * s["T"] > MAX_STAGES:
            out[name] = (f"not run on {2 * s['T']} stages (it did not finish on jacobi-2d's "
                         f"40; run up to {MAX_STAGES})")
            continue
        out[name] = (lambda sched=sched: _compiled(kernel, s, arrays, sched))
    return out


def _compiled(kernel, s, arrays, sched):
    import halide as hl
    from bench.peers_kernels import empty_outputs
    _load(hl, sched)
    params = {"parallelism": str(int(os.environ.get("HL_NUM_THREADS", os.cpu_count() or 1)))}
    if sched == "Adams2019" and kernel == "conv2d":
        params["beam_size"] = "1"
    images = {n: hl.ImageParam(hl.Float(32), a.ndim, n) for n, a in arrays.items()}
    for n, a in arrays.items():
        for d, extent in enumerate(reversed(a.shape)):
            images[n].dim(d).set_estimate(0, extent)
    funcs = _pipeline(hl, kernel, s, images)         # output name -> Func
    outs = empty_outputs(kernel, s)
    for n, fn in funcs.items():
        fn.set_estimates([(0, e) for e in reversed(outs[n].shape)])
    p = hl.Pipeline(list(funcs.values()))
    target = hl.get_host_target()
    p.apply_autoscheduler(target, hl.AutoschedulerParams(sched, params))
    p.compile_jit(target)
    for n, a in arrays.items():
        images[n].set(hl.Buffer(a))
    buffers = [hl.Buffer(outs[n]) for n in funcs]

    def call():
        p.realize(buffers)
        return outs
    return call


def _pipeline(hl, kernel, s, im):
    f32 = hl.f32
    x, y, z, u = hl.Var("x"), hl.Var("y"), hl.Var("z"), hl.Var("u")
    if kernel == "gemm":
        k = hl.RDom([(0, s["N"])])
        C = hl.Func("C")
        C[x, y] = f32(0)
        C[x, y] += im["A"][k.x, y] * im["B"][x, k.x]
        return {"C": C}
    if kernel == "jacobi2d":
        n = s["N"]
        inner = (x >= 1) & (x < n - 1) & (y >= 1) & (y < n - 1)
        a0, b0 = (hl.BoundaryConditions.repeat_edge(im[v]) for v in "AB")
        prev = {"A": a0, "B": b0}
        for t in range(s["T"]):
            for dst, src in (("B", "A"), ("A", "B")):
                g = hl.Func(f"s{dst}{t}")
                X = prev[src]
                g[x, y] = hl.select(inner, f32(0.2) * (X[x, y] + X[x - 1, y] + X[x + 1, y]
                                                      + X[x, y + 1] + X[x, y - 1]),
                                    prev[dst][x, y])
                prev[dst] = g
        out_b = hl.Func("out_B")              # the last B is read with a halo: not an output
        out_b[x, y] = prev["B"][x, y]
        return {"A": prev["A"], "B": out_b}
    if kernel == "softmax":
        r = hl.RDom([(0, s["C"])])
        X = im["X"]
        mx, e, sm, out = hl.Func("mx"), hl.Func("e"), hl.Func("s"), hl.Func("out")
        mx[y] = hl.maximum(X[r.x, y])
        e[x, y] = hl.exp(X[x, y] - mx[y])
        sm[y] = hl.sum(e[r.x, y])
        out[x, y] = e[x, y] / sm[y]
        return {"out": out}
    if kernel == "stencil9":
        A = im["A"]
        out = hl.Func("out")
        total = A[x, y]
        for dy in range(3):
            for dx in range(3):
                if dx or dy:
                    total = total + A[x + dx, y + dy]
        out[x, y] = total / f32(9)
        return {"out": out}
    if kernel == "bmv":
        r = hl.RDom([(0, s["M"])])
        out = hl.Func("y")
        out[x, y] = hl.sum(im["A"][r.x, x, y] * im["x"][r.x, y])
        return {"y": out}
    if kernel == "layernorm":
        from bench.peers_kernels import EPS
        r = hl.RDom([(0, s["C"])])
        X, inv = im["X"], f32(1.0 / s["C"])
        mean, var, out = hl.Func("mean"), hl.Func("var"), hl.Func("Y")
        mean[y] = hl.sum(X[r.x, y] * inv)
        var[y] = hl.sum((X[r.x, y] - mean[y]) * (X[r.x, y] - mean[y]) * inv)
        out[x, y] = (X[x, y] - mean[y]) / hl.sqrt(var[y] + f32(EPS))
        return {"Y": out}
    # conv2d: out[n][o][y][x] is out[x, y, z=o, u=n]
    r = hl.RDom([(0, 3), (0, 3), (0, s["CI"])])
    padded = hl.BoundaryConditions.constant_exterior(im["inp"], f32(0))
    out = hl.Func("out")
    out[x, y, z, u] = f32(0)
    out[x, y, z, u] += im["w"][r.x, r.y, r.z, z] * padded[x + r.x - 1, y + r.y - 1, r.z, u]
    return {"out": out}

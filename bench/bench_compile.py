"""Compile time.

Cold: the compile-time phases of the examples, legality analysis (model,
dependences, schedule check) and isl AST generation + lowering, median of
several runs, with the warm start off (every run analyses).

Warm (``--warm``): a first process compiles the examples and the library
operators into a fresh cache directory; a second, fresh process then times
``compile()`` of each example (its declaration and schedule commands are
user code, not timed) and the first use of each library operator's kernel
(``schedules.core.kernels.kernel``: the Function is not even built), median of
``repeats`` fresh processes.  The first kernel of a process also loads the
backends (llvmlite, libgomp): reported apart, as "backend start-up".

    python -m bench.bench_compile [--warm] [--quick]
"""
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, ROOT)

from examples import conv_relu_maxpool, gemm, jacobi2d, lstm, sparse_conv  # noqa: E402

CASES = {
    "lstm (program order)": lambda: lstm.build(),
    "lstm (wavefront)": lambda: lstm.wavefront(lstm.build()),
    "gemm (tiled, parallel, vector)": lambda: _gemm_tiled(),
    "conv+relu+maxpool": lambda: conv_relu_maxpool.build(),
    "sparse conv (CSR)": lambda: sparse_conv.build(),
    "jacobi-2d": lambda: jacobi2d.build(),
}


def _library():
    """name -> () -> the operator's kernel, as the operators get it."""
    import importlib
    from schedules.core import kernels as runtime
    from schedules.solvers import conv_dense, conv_fused
    sg = importlib.import_module("schedules.blocks.blis")
    from schedules.problems.conv import ConvShape
    s = ConvShape(1, 64, 56, 56, 64, 3, 3, 1, 1)
    p = sg.default_params(512, 512, 512)

    def conv(algo):
        return runtime.kernel(("conv2d", algo, s, True),
                              lambda: conv_dense.BUILDERS[algo](s, bias=True), None)

    def fused(algo):
        return runtime.kernel(("conv_relu_maxpool", algo, s, 2, True),
                              lambda: conv_fused.function(s, 2, bias=True, algo=algo), None)
    return {
        "library gemm 512": lambda: runtime.kernel(("gemm", 512, 512, 512, p),
                                                   lambda: sg.function(512, 512, 512, params=p), None),
        "library conv2d direct": lambda: conv("direct"),
        "library conv2d spatial_pack": lambda: conv("spatial_pack"),
        "library fused direct": lambda: fused("direct"),
        "library fused winograd": lambda: fused("winograd"),
    }


def _gemm_tiled():
    f = gemm.build()
    u = f.computations["C"].update
    u.tile("i", "j", 32, 32)
    u.parallelize("i0")
    u.vectorize("j1", 16)
    return f


def main(repeats=7):
    from tiramisu_py.driver import warm
    warm.ENABLED = False
    print(f"{'program':34} {'analysis ms':>12} {'AST ms':>8} {'sum ms':>8}")
    results = {}
    for name, build in CASES.items():
        an, ast = [], []
        for _ in range(repeats):
            k = build().compile()
            an.append(k.timings["analysis"])
            ast.append(k.timings["ast"])
        a, b = statistics.median(an), statistics.median(ast)
        results[name] = (a, b)
        print(f"{name:34} {a * 1e3:12.1f} {b * 1e3:8.1f} {(a + b) * 1e3:8.1f}")
    warm.ENABLED = True
    return results


def _child(mode):
    """One process: "fill" compiles everything; "time" prints the times (s)."""
    import schedules.core.kernels  # noqa: F401 - imports are not compile time
    import tiramisu_py as tp
    out = {}
    for _ in (1,):            # backend start-up: a small kernel of its own, per backend
        f = tp.Function("startup", params=["N"])
        i = f.var("i", 0, "N")
        f.computation("y", [i], f.input("x", ("N",), tp.float32)[i] * 2.0)
        for target in ("c", "llvm"):
            t0 = time.perf_counter()
            f.compile(target=target)
            out[f"backend start-up ({target})"] = time.perf_counter() - t0
    for name, build in CASES.items():
        f = build()
        t0 = time.perf_counter()
        f.compile()
        out[name] = time.perf_counter() - t0
    for name, get in _library().items():
        t0 = time.perf_counter()
        get()
        out[name] = time.perf_counter() - t0
    print(json.dumps(out))


def warm_start(repeats=3):
    """{name: (cold s, warm s)}: a fresh cache filled by one process, then
    timed in ``repeats`` fresh processes (median)."""
    env = dict(os.environ, TIRAMISU_PY_CACHE=tempfile.mkdtemp(prefix="tp_warm_"),
               OMP_WAIT_POLICY="passive", PYTHONPATH=ROOT)

    def run(mode):
        r = subprocess.run([sys.executable, "-m", "bench.bench_compile", "--child", mode],
                           cwd=ROOT, env=env, capture_output=True, text=True, check=True)
        return json.loads(r.stdout.strip().splitlines()[-1])
    cold = run("fill")
    warm = [run("time") for _ in range(repeats)]
    print(f"{'warm start (fresh process)':34} {'cold ms':>9} {'warm ms':>9}")
    results = {}
    for name in warm[0]:
        w = statistics.median(t[name] for t in warm)
        c = cold.get(name)
        results[name] = (c, w)
        print(f"{name:34} {'' if c is None else f'{c * 1e3:9.1f}':>9} {w * 1e3:9.2f}")
    return results


if __name__ == "__main__":
    if "--child" in sys.argv:
        _child(sys.argv[sys.argv.index("--child") + 1])
    elif "--warm" in sys.argv:
        warm_start(1 if "--quick" in sys.argv else 3)
    else:
        main(2 if "--quick" in sys.argv else 7)

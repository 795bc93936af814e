"""Command line: ``tiramisu-py demo``, ``tiramisu-py bench`` (or ``python -m tiramisu_py ...``)."""
from __future__ import annotations

import argparse
import importlib
import os
import sys
import time


def _checkout_module(name, command):
    """A module of the repository's examples/ or bench/ package (present in a source checkout)."""
    root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    package = name.partition(".")[0]
    if not os.path.isdir(os.path.join(root, package)):
        raise SystemExit(f"tiramisu-py {command} needs the source checkout's {package}/ folder "
                         "(install with `pip install -e .` from a clone)")
    if root not in sys.path:
        sys.path.insert(0, root)
    return importlib.import_module(name)


def _median_time(fn, repeats=5):
    times = []
    for _ in range(repeats):
        t0 = time.perf_counter()
        fn()
        times.append(time.perf_counter() - t0)
    times.sort()
    return times[len(times) // 2]


def demo(show_source=True):
    import numpy as np
    os.environ.setdefault("OMP_WAIT_POLICY", "passive")
    _checkout_module("examples", "demo")
    from examples import conv2d, conv_relu_maxpool, gemm, jacobi2d, lstm, sparse_conv, trisolv
    rng = np.random.default_rng(0)

    a = rng.standard_normal((256, 256), dtype=np.float32)
    b = rng.standard_normal((256, 256), dtype=np.float32)
    conv_args = conv2d.random_inputs(2, 16, 16, 32, 32)
    sp_args = sparse_conv.random_inputs(2, 16, 16, 32, 32, density=0.2)
    L, rhs = trisolv.random_inputs(300)
    jA, jB = jacobi2d.random_inputs(200)
    lstm_args = lstm.random_inputs(2, 16, 4, 64)
    cases = [
        ("gemm 256^3", gemm, lambda k: k(a, b), lambda: gemm.reference(a, b)),
        ("conv2d 2x16x32x32, 16 out", conv2d, lambda k: k(*conv_args),
         lambda: conv2d.reference(*conv_args)),
        ("conv+relu+maxpool", conv_relu_maxpool, lambda k: k(*conv_args),
         lambda: conv_relu_maxpool.reference(*conv_args)),
        ("CSR sparse conv (20% dense)", sparse_conv, lambda k: sparse_conv.run(k, *sp_args),
         lambda: conv2d.reference(*sp_args)),
        ("trisolv N=300", trisolv, lambda k: k(L, rhs), lambda: trisolv.reference(L, rhs)),
        ("jacobi-2d 200^2, T=10", jacobi2d,
         lambda k: k(A=jA.copy(), B=jB.copy(), T=10)["A"],
         lambda: jacobi2d.reference(jA, jB, 10)[0]),
        ("LSTM 2 layers, T=16, B=4, H=64", lstm, lambda k: lstm.run(k, *lstm_args),
         lambda: lstm.reference(*lstm_args)),
    ]
    print("tiramisu_py demo: each example compiled from the DSL (program-order schedule),")
    print("checked against an independent NumPy reference, and timed (median of 5).\n")
    rows = []
    kernels = {}
    for name, module, call, ref in cases:
        t0 = time.perf_counter()
        kernel = module.build().compile()
        t_compile = time.perf_counter() - t0
        kernels[module.__name__] = kernel
        out = call(kernel)
        expected = ref()
        err = float(np.max(np.abs(np.asarray(out, np.float64) - expected))) if np.size(out) else 0.0
        ok = err <= 1e-3 * max(1.0, float(np.max(np.abs(expected))))
        t_run = _median_time(lambda: call(kernel))
        t_ref = _median_time(ref)
        rows.append((name, t_compile, t_run, t_ref, err, ok))
    if show_source:
        print("Generated C for the CSR sparse convolution (note the data-dependent j loop):\n")
        print(kernels["examples.sparse_conv"].source)
    print(f"{'example':34} {'compile s':>9} {'run ms':>9} {'numpy ms':>9} {'max err':>9}  ok")
    for name, tc, tr, tn, err, ok in rows:
        print(f"{name:34} {tc:9.3f} {tr * 1e3:9.2f} {tn * 1e3:9.2f} {err:9.1e}  {'yes' if ok else 'NO'}")
    if not all(r[-1] for r in rows):
        raise SystemExit("demo: a result did not match its reference")
    print("\nAll results match. Compile times include isl analysis and the C compiler;"
          "\na second run hits the on-disk cache.\n")
    _schedule_demo(np, gemm, lstm)


def _schedule_demo(np, gemm, lstm):
    """The same algorithms with a schedule: faster, still checked."""
    import tiramisu_py as tp
    print("Scheduling (algorithm unchanged; legality checked at compile):")
    n = 512
    rng = np.random.default_rng(1)
    a = rng.standard_normal((n, n), dtype=np.float32)
    b = rng.standard_normal((n, n), dtype=np.float32)
    plain = gemm.build().compile()
    f = gemm.build()
    C = f.computations["C"]
    C.parallelize("i")
    C.update.interchange("j", "k")          # i-k-j order: unit stride in j
    C.update.parallelize("i")
    C.update.vectorize("j", 16)
    fast = f.compile()
    ok = np.allclose(fast(a, b), a @ b, rtol=1e-3, atol=1e-3)
    t_plain = _median_time(lambda: plain(a, b), 3)
    t_fast = _median_time(lambda: fast(a, b))
    t_np = _median_time(lambda: a @ b)
    gf = 2 * n ** 3 / 1e9
    print(f"  gemm {n}^3: program order {t_plain * 1e3:.1f} ms ({gf / t_plain:.1f} GFLOP/s), "
          f"scheduled {t_fast * 1e3:.1f} ms ({gf / t_fast:.1f} GFLOP/s), NumPy {t_np * 1e3:.1f} ms; "
          f"correct: {'yes' if ok else 'NO'}")
    print("  commands: " + "; ".join(f.schedule_commands()))
    wf = lstm.wavefront(lstm.build()).compile()
    args = lstm.random_inputs(3, 9, 2, 8)
    ok_w = np.allclose(lstm.run(wf, *args), lstm.reference(*args), rtol=1e-4, atol=2e-5)
    print(f"  LSTM wavefront (skew t by l, interchange, parallel l): correct: "
          f"{'yes' if ok_w else 'NO'}; legality + AST "
          f"{(wf.timings['analysis'] + wf.timings['ast']) * 1e3:.0f} ms")
    bad = lstm.build()
    for st in bad.statements:
        if [v.name for v in st.vars[:2]] == ["l", "t"]:
            st.parallelize("l")
    try:
        bad.compile()
        print("  BUG: an illegal schedule compiled")
        raise SystemExit(1)
    except tp.IllegalScheduleError as e:
        print("  the same parallel layers without the skew are refused:\n    " + str(e))
    if not (ok and ok_w):
        raise SystemExit("demo: a scheduled result did not match")


def bench(argv):
    """The benchmark suites of bench/suites.py; ``argv``: its options."""
    suites = _checkout_module("bench.suites", "bench")
    suites.main(suites.parser("tiramisu-py bench").parse_args(argv))


def main(argv=None):
    p = argparse.ArgumentParser(prog="tiramisu-py", description=__doc__)
    sub = p.add_subparsers(dest="cmd", required=True)
    d = sub.add_parser("demo", help="compile and check the examples, print code and timings")
    d.add_argument("--no-source", action="store_true", help="do not print generated code")
    sub.add_parser("bench", add_help=False,     # its options are parsed by bench()
                   help="benchmark the operator library against NumPy and PyTorch "
                        "(tiramisu-py bench --help)")
    args, rest = p.parse_known_args(argv)
    if args.cmd == "bench":
        bench(rest)
    elif rest:
        p.error(f"unrecognized arguments: {' '.join(rest)}")
    else:
        demo(show_source=not args.no_source)
    return 0


if __name__ == "__main__":
    sys.exit(main())

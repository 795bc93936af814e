"""``tiramisu-py demo``: what the project is for, in one run.

1. An algorithm (GEMM) and schedules for it: program order, a schedule a
   user writes, the legality check refusing a wrong one (its explanation on
   screen, then ``f.undo()``), and the operator library's schedule of the
   same algorithm, timed against NumPy and PyTorch in the same process.
2. The operator library (convolution, and convolution + ReLU + max-pool in
   one fused pass) against NumPy and PyTorch.
3. The examples compiled from the DSL in program order, each checked
   against an independent NumPy reference; the generated C of the CSR
   sparse convolution.

Every timing is a median of several calls after a warm-up, all in this
process; PyTorch columns appear when torch is installed.  The first run
compiles (tens of seconds: the library's find step times its algorithms
once per shape); later runs load everything from the cache.
"""
from __future__ import annotations

import os
import time

import numpy as np
from tiramisu_py.cli import Command

from examples import conv2d, conv_relu_maxpool, gemm, jacobi2d, lstm, sparse_conv, trisolv

GEMM_N = 512
CONV = (4, 64, 64, 56, 56)        # n, ci, co, h, w: 3x3, padding 1


def _median(fn, repeats=5):
    if repeats > 1:
        fn()                                   # warm-up (and first-call checks)
    times = []
    for _ in range(repeats):
        t0 = time.perf_counter()
        fn()
        times.append(time.perf_counter() - t0)
    return sorted(times)[len(times) // 2]


def _torch():
    try:
        import torch
    except ImportError:
        return None
    return torch


def _row(name, t, base, gflop=None, ok=True):
    speed = f"{gflop / t:7.1f} GFLOP/s" if gflop else " " * 15
    return (f"  {name:44} {t * 1e3:9.2f} ms {speed}  {base / t:5.2f}x NumPy"
            + ("" if ok else "  WRONG RESULT"))


def gemm_part(torch):
    import schedules
    import tiramisu_py as tp
    n = GEMM_N
    rng = np.random.default_rng(1)
    a = rng.standard_normal((n, n), dtype=np.float32)
    b = rng.standard_normal((n, n), dtype=np.float32)
    ref = a.astype(np.float64) @ b.astype(np.float64)
    gf = 2 * n ** 3 / 1e9
    print(f"1. GEMM {n}^3 float32: one algorithm, several schedules\n")
    print("   f = tp.Function('gemm', params=['N', 'M', 'K'])  # examples/gemm.py")
    print("   C = f.computation('C', [i, j], 0.0)")
    print("   C[i, j] += A[i, k] * B[k, j]\n")
    f = gemm.build()
    C = f.computations["C"]
    plain = f.compile()
    C.update.interchange("j", "k")            # i-k-j order: unit stride in j
    C.update.parallelize("i")
    C.update.vectorize("j", 16)
    calls = list(dict.fromkeys(c.call for c in f._commands))      # as written, once per call
    print("   schedule: " + "; ".join(calls))
    scheduled = f.compile()
    print("\n   the legality check refuses a wrong schedule, and says why:")
    print('   >>> C.update.parallelize("k"); f.compile()')
    C.update.parallelize("k")
    try:
        f.compile()
        raise SystemExit("demo: BUG: an illegal schedule compiled")
    except tp.IllegalScheduleError as e:
        print("   IllegalScheduleError: " + str(e).replace("\n", "\n   "))
    print(f"   >>> f.undo()   # -> {f.undo()}\n")
    rows = [("program order (no schedule)", lambda: plain(a, b)),
            ("scheduled: interchange, parallel, vector", lambda: scheduled(a, b)),
            ("schedules.gemm (BLIS schedule, same DSL)", lambda: schedules.gemm(a, b))]
    if torch is not None:
        ta, tb = torch.from_numpy(a), torch.from_numpy(b)
        rows.append(("torch.mm", lambda: torch.mm(ta, tb)))
    rows.append(("NumPy a @ b", lambda: a @ b))
    return _table(rows, gf, lambda out: np.allclose(np.asarray(out), ref, rtol=1e-3, atol=1e-2),
                  repeats={"program order (no schedule)": 1})


def _table(rows, gflop, check, repeats=None):
    results = [(name, _median(fn, (repeats or {}).get(name, 7)), check(fn())) for name, fn in rows]
    base = results[-1][1]
    for name, t, ok in results:
        print(_row(name, t, base, gflop, ok))
    print()
    return all(ok for _, _, ok in results)


def _numpy_conv(x, w, bias):
    """A fast NumPy convolution (3x3, padding 1): windows + one BLAS product."""
    n, ci, h, wd = x.shape
    xp = np.pad(x, ((0, 0), (0, 0), (1, 1), (1, 1)))
    win = np.lib.stride_tricks.sliding_window_view(xp, (3, 3), axis=(2, 3))  # n ci h w 3 3
    out = np.tensordot(w, win, axes=([1, 2, 3], [1, 4, 5]))                   # co n h w
    return out.transpose(1, 0, 2, 3) + bias[None, :, None, None]


def _numpy_block(x, w, bias):
    c = np.maximum(_numpy_conv(x, w, bias), 0)
    n, co, h, wd = c.shape
    return c[:, :, :h // 2 * 2, :wd // 2 * 2].reshape(n, co, h // 2, 2, wd // 2, 2).max(axis=(3, 5))


def conv_part(torch):
    import schedules
    n, ci, co, h, w = CONV
    rng = np.random.default_rng(2)
    x = rng.standard_normal((n, ci, h, w), dtype=np.float32)
    wt = rng.standard_normal((co, ci, 3, 3), dtype=np.float32) / np.float32(np.sqrt(ci * 9))
    b = rng.standard_normal(co, dtype=np.float32)
    gf = 2 * n * co * h * w * ci * 9 / 1e9
    print(f"2. The operator library: {n}x{ci}x{h}x{w} -> {co} channels, 3x3, padding 1")
    print("   (a first run compiles the library's kernels and times its algorithms once per")
    print("   shape: the find step; later runs load them from the cache)\n")
    ref = _numpy_conv(x, wt, b)
    rows = [("schedules.conv2d(x, w, b, padding=1)",
             lambda: schedules.conv2d(x, wt, b, padding=1))]
    if torch is not None:
        tx, tw, tb = (torch.from_numpy(v) for v in (x, wt, b))
        F = torch.nn.functional
        rows.append(("torch.nn.functional.conv2d", lambda: F.conv2d(tx, tw, tb, padding=1)))
    rows.append(("NumPy (windows + tensordot)", lambda: _numpy_conv(x, wt, b)))
    ok = _table(rows, gf, lambda out: np.allclose(np.asarray(out), ref, rtol=1e-3, atol=1e-3))
    ref = _numpy_block(x, wt, b)
    rows = [("schedules.conv_relu_maxpool (one fused pass)",
             lambda: schedules.conv_relu_maxpool(x, wt, b, padding=1, pool=2))]
    if torch is not None:
        rows.append(("torch: max_pool2d(relu(conv2d))",
                     lambda: F.max_pool2d(F.relu(F.conv2d(tx, tw, tb, padding=1)), 2)))
    rows.append(("NumPy", lambda: _numpy_block(x, wt, b)))
    print("   conv2d + ReLU + 2x2 max-pool:")
    return _table(rows, gf, lambda out: np.allclose(np.asarray(out), ref, rtol=1e-3, atol=1e-3)) and ok


def examples_part(show_source):
    rng = np.random.default_rng(0)
    a = rng.standard_normal((128, 128), dtype=np.float32)
    b = rng.standard_normal((128, 128), dtype=np.float32)
    conv_args = conv2d.random_inputs(2, 16, 16, 32, 32)
    sp_args = sparse_conv.random_inputs(2, 16, 16, 32, 32, density=0.2)
    L, rhs = trisolv.random_inputs(300)
    jA, jB = jacobi2d.random_inputs(200)
    lstm_args = lstm.random_inputs(2, 16, 4, 64)
    cases = [
        ("gemm 128^3", gemm, lambda k: k(a, b), lambda: gemm.reference(a, b)),
        ("conv2d 2x16x32x32, 16 out", conv2d, lambda k: k(*conv_args),
         lambda: conv2d.reference(*conv_args)),
        ("conv+relu+maxpool", conv_relu_maxpool, lambda k: k(*conv_args),
         lambda: conv_relu_maxpool.reference(*conv_args)),
        ("CSR sparse conv (20% dense)", sparse_conv, lambda k: sparse_conv.run(k, *sp_args),
         lambda: conv2d.reference(*sp_args)),
        ("trisolv N=300", trisolv, lambda k: k(L, rhs), lambda: trisolv.reference(L, rhs)),
        ("jacobi-2d 200^2, T=10", jacobi2d, lambda k: k(A=jA.copy(), B=jB.copy(), T=10)["A"],
         lambda: jacobi2d.reference(jA, jB, 10)[0]),
        ("LSTM 2 layers, T=16, B=4, H=64", lstm, lambda k: lstm.run(k, *lstm_args),
         lambda: lstm.reference(*lstm_args)),
    ]
    print("3. The examples, compiled from the DSL in program order (no schedule) and")
    print("   checked against independent NumPy references:\n")
    print(f"  {'example':34} {'compile s':>9} {'max err':>9}  ok")
    kernels, good = {}, True
    for name, module, call, ref in cases:
        t0 = time.perf_counter()
        kernel = kernels[module.__name__] = module.build().compile()
        tc = time.perf_counter() - t0
        out, expected = call(kernel), ref()
        err = float(np.max(np.abs(np.asarray(out, np.float64) - expected))) if np.size(out) else 0.0
        ok = err <= 1e-3 * max(1.0, float(np.max(np.abs(expected))))
        good &= ok
        print(f"  {name:34} {tc:9.3f} {err:9.1e}  {'yes' if ok else 'NO'}")
    if show_source:
        print("\n  Generated C for the CSR sparse convolution (note the data-dependent j loop):\n")
        print(kernels["examples.sparse_conv"].source)
    return good


def main(show_source=True):
    os.environ.setdefault("OMP_WAIT_POLICY", "passive")
    torch = _torch()
    print("tiramisu_py demo (timings: median ms in this process; "
          + ("PyTorch " + torch.__version__ if torch else "PyTorch not installed") + ")\n")
    ok = gemm_part(torch)
    ok &= conv_part(torch)
    ok &= examples_part(show_source)
    if not ok:
        raise SystemExit("demo: a result did not match its reference")
    print("\nAll results match their references.")


# ------------------------------------------------------------------ the commands
EXAMPLES = {m.__name__.rpartition(".")[2]: m for m in
            (gemm, conv2d, conv_relu_maxpool, trisolv, jacobi2d, sparse_conv, lstm)}


def _demo_arguments(sub):
    sub.add_argument("--no-source", action="store_true", help="do not print generated code")


def _example_arguments(sub):
    sub.add_argument("name", choices=tuple(EXAMPLES))


DEMO = Command("demo", "an algorithm, its schedules and the legality check; the operator "
                       "library against NumPy and PyTorch; the examples checked against NumPy",
               lambda args, sub: main(show_source=not args.no_source), _demo_arguments)
EXAMPLE = Command("example", "run one of the examples (from any directory)",
                  lambda args, sub: EXAMPLES[args.name].main(), _example_arguments)

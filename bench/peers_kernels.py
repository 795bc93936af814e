"""The seven kernels of ``tiramisu-py bench peers`` (bench/suite_peers.py) and
the worker process each side of the comparison runs in.

Every kernel is float32, its inputs drawn from a fixed-seed RNG (the same
arrays in every process), checked against a float64 NumPy reference:

  gemm      C = A @ B, N x N                                  (1024; quick 64)
  jacobi2d  PolyBench's jacobi-2d: T steps of two 5-point updates, A and B
            in turn, the borders kept                          (T=20, N=2000; quick 2, 40)
  softmax   rows of an R x C matrix                            (4096 x 1024; quick 64 x 48)
  stencil9  one sweep of the 9-point mean over the interior of an N x N
            grid, out (N-2) x (N-2)                             (4096; quick 66)
  bmv       batched matrix-vector y[b] = A[b] @ x[b]            (512 x 256 x 256; quick 4 x 16 x 24)
  conv2d    3x3, stride 1, zero padding 1, no bias, NCHW        (8x64x56x56 -> 64; quick 2x4x10x12 -> 8)
  layernorm rows of an R x C matrix normalised (mean, biased variance, eps
            1e-5; no weight or bias)                           (4096 x 1024; quick 64 x 48)

    python -m bench.peers_kernels ours|peers

runs a worker (the suite starts one per side, each in its own interpreter):
it reads one JSON command a line on stdin and answers one JSON line on
stdout.  ``{"op": "setup", "kernel": K, "quick": Q, "opts": {...}}`` makes the
inputs, the side's implementations and torch's (the normaliser), runs each
once, checks it and answers ``{"impls": {name: {"error", "prep_s"}},
"skipped": {name: why}}``; ``{"op": "info"}``: the process's Python and
package versions (:func:`versions`); ``{"op": "round"}`` times each implementation
(calls for :data:`ROUND_S` at least, their median) and answers ``{"times":
{name: seconds}}``; ``{"op": "quit"}`` ends it.  An implementation is a
zero-argument callable returning ``{output: array}``; its ``prepare``
attribute, if any, runs untimed before each call (restoring arrays a kernel
updates in place)."""
from __future__ import annotations

import importlib
import json
import os
import statistics
import sys
import time
import traceback

import numpy as np

KERNELS = ("gemm", "jacobi2d", "softmax", "stencil9", "bmv", "conv2d", "layernorm")
SIZES = {   # kernel -> (full sizes, --quick sizes)
    "gemm": ({"N": 1024}, {"N": 64}),
    "jacobi2d": ({"T": 20, "N": 2000}, {"T": 2, "N": 40}),
    "softmax": ({"R": 4096, "C": 1024}, {"R": 64, "C": 48}),
    "stencil9": ({"N": 4096}, {"N": 66}),
    "bmv": ({"B": 512, "N": 256, "M": 256}, {"B": 4, "N": 16, "M": 24}),
    "conv2d": ({"N": 8, "CI": 64, "CO": 64, "H": 56, "W": 56},
               {"N": 2, "CI": 4, "CO": 8, "H": 10, "W": 12}),
    "layernorm": ({"R": 4096, "C": 1024}, {"R": 64, "C": 48}),
}
EPS = 1e-5               # the layer norm's epsilon
SIDES = {"ours": ("bench.peers_ours",), "peers": ("bench.peers_halide", "bench.peers_tvm")}
TORCH = "torch"
VERSIONED = ("numpy", "torch", "halide", "apache-tvm", "apache-tvm-ffi", "xgboost")
ROUND_S = 0.1            # calls of each implementation per round, seconds at least
MAX_CALLS = 50           # ... or this many


def sizes(kernel, quick=False) -> dict:
    return dict(SIZES[kernel][1 if quick else 0])


def describe(kernel, s) -> str:
    """``conv2d 8x64x56x56->64``: the kernel and its sizes, for the table."""
    shape = {"gemm": "{N}", "jacobi2d": "T={T} N={N}", "softmax": "{R}x{C}", "stencil9": "{N}^2",
             "bmv": "{B}x{N}x{M}", "conv2d": "{N}x{CI}x{H}x{W}->{CO}",
             "layernorm": "{R}x{C}"}[kernel]
    return f"{kernel} {shape.format(**s)}"


def flops(kernel, s) -> float:
    return {"gemm": lambda: 2.0 * s["N"] ** 3,
            "jacobi2d": lambda: 2 * 5.0 * s["T"] * (s["N"] - 2) ** 2,
            "softmax": lambda: 4.0 * s["R"] * s["C"],
            "stencil9": lambda: 9.0 * (s["N"] - 2) ** 2,
            "bmv": lambda: 2.0 * s["B"] * s["N"] * s["M"],
            "conv2d": lambda: 2.0 * s["N"] * s["CO"] * s["H"] * s["W"] * s["CI"] * 9,
            "layernorm": lambda: 7.0 * s["R"] * s["C"]}[kernel]()


def inputs(kernel, s) -> dict:
    """The kernel's input arrays (float32, C order, seed 0)."""
    rng = np.random.default_rng(0)

    def r(*shape):
        return rng.standard_normal(shape, dtype=np.float32)
    if kernel == "gemm":
        return {"A": r(s["N"], s["N"]), "B": r(s["N"], s["N"])}
    if kernel == "jacobi2d":
        return {"A": r(s["N"], s["N"]), "B": r(s["N"], s["N"])}
    if kernel in ("softmax", "layernorm"):
        return {"X": r(s["R"], s["C"])}
    if kernel == "stencil9":
        return {"A": r(s["N"], s["N"])}
    if kernel == "bmv":
        return {"A": r(s["B"], s["N"], s["M"]), "x": r(s["B"], s["M"])}
    return {"inp": r(s["N"], s["CI"], s["H"], s["W"]),
            "w": r(s["CO"], s["CI"], 3, 3) / np.float32(np.sqrt(s["CI"] * 9))}


def output_shapes(kernel, s) -> dict:
    return {"gemm": lambda: {"C": (s["N"], s["N"])},
            "jacobi2d": lambda: {"A": (s["N"], s["N"]), "B": (s["N"], s["N"])},
            "softmax": lambda: {"out": (s["R"], s["C"])},
            "stencil9": lambda: {"out": (s["N"] - 2, s["N"] - 2)},
            "bmv": lambda: {"y": (s["B"], s["N"])},
            "conv2d": lambda: {"out": (s["N"], s["CO"], s["H"], s["W"])},
            "layernorm": lambda: {"Y": (s["R"], s["C"])}}[kernel]()


def empty_outputs(kernel, s) -> dict:
    return {n: np.zeros(shape, np.float32) for n, shape in output_shapes(kernel, s).items()}


def reference(kernel, a, s) -> dict:
    """The outputs in float64 NumPy."""
    d = {k: v.astype(np.float64) for k, v in a.items()}
    if kernel == "gemm":
        return {"C": d["A"] @ d["B"]}
    if kernel == "jacobi2d":
        return jacobi(d["A"], d["B"], s["T"])
    if kernel == "softmax":
        e = np.exp(d["X"] - d["X"].max(axis=1, keepdims=True))
        return {"out": e / e.sum(axis=1, keepdims=True)}
    if kernel == "stencil9":
        A, n = d["A"], s["N"]
        return {"out": sum(A[dy:n - 2 + dy, dx:n - 2 + dx] for dy in range(3)
                           for dx in range(3)) / 9.0}
    if kernel == "bmv":
        return {"y": np.einsum("bij,bj->bi", d["A"], d["x"])}
    if kernel == "layernorm":
        c = d["X"] - d["X"].mean(axis=1, keepdims=True)
        return {"Y": c / np.sqrt((c * c).mean(axis=1, keepdims=True) + EPS)}
    p = np.pad(d["inp"], ((0, 0), (0, 0), (1, 1), (1, 1)))
    h, w = s["H"], s["W"]
    return {"out": sum(np.einsum("nchw,oc->nohw", p[:, :, ky:ky + h, kx:kx + w],
                                 d["w"][:, :, ky, kx], optimize=True)
                       for ky in range(3) for kx in range(3))}


def jacobi(A, B, T):
    """jacobi-2d's T steps on NumPy arrays or torch tensors, in place."""
    for _ in range(T):
        B[1:-1, 1:-1] = 0.2 * (A[1:-1, 1:-1] + A[1:-1, :-2] + A[1:-1, 2:] + A[2:, 1:-1]
                               + A[:-2, 1:-1])
        A[1:-1, 1:-1] = 0.2 * (B[1:-1, 1:-1] + B[1:-1, :-2] + B[1:-1, 2:] + B[2:, 1:-1]
                               + B[:-2, 1:-1])
    return {"A": A, "B": B}


def torch_impl(kernel, a, s):
    """torch's call for the kernel (the normaliser of each process), or None
    without torch."""
    try:
        import torch
        import torch.nn.functional as F
    except ImportError:
        return None
    t = {k: torch.from_numpy(v) for k, v in a.items()}
    if kernel == "gemm":
        return lambda: {"C": torch.mm(t["A"], t["B"])}
    if kernel == "jacobi2d":
        return lambda: jacobi(t["A"].clone(), t["B"].clone(), s["T"])
    if kernel == "softmax":
        return lambda: {"out": torch.softmax(t["X"], dim=1)}
    if kernel == "stencil9":
        return lambda: {"out": F.avg_pool2d(t["A"][None, None], 3, stride=1)[0, 0]}
    if kernel == "bmv":
        return lambda: {"y": torch.bmm(t["A"], t["x"][:, :, None])[:, :, 0]}
    if kernel == "layernorm":
        return lambda: {"Y": F.layer_norm(t["X"], (s["C"],), eps=EPS)}
    return lambda: {"out": F.conv2d(t["inp"], t["w"], padding=1)}


def max_error(out: dict, ref: dict) -> float:
    """The largest error over the outputs, relative to each output's largest
    magnitude (float32 sums of a thousand terms: ~1e-6)."""
    worst = 0.0
    for name, want in ref.items():
        got = np.asarray(out[name], dtype=np.float64)
        if got.shape != want.shape:
            raise ValueError(f"output {name}: shape {got.shape}, expected {want.shape}")
        worst = max(worst, float(np.max(np.abs(got - want))) / max(1.0, float(np.max(np.abs(want)))))
    return worst


# ----------------------------------------------------------------- the worker
class Worker:
    """One side's implementations of the current kernel (module doc)."""

    def __init__(self, side):
        self.side = side
        self.impls, self.calls = {}, {}

    def setup(self, kernel, quick, opts):
        self.impls, self.calls = {}, {}
        s = sizes(kernel, quick)
        arrays = inputs(kernel, s)
        ref = reference(kernel, arrays, s)
        found, skipped = {}, {}
        torch_call = torch_impl(kernel, arrays, s)
        if torch_call is None:
            skipped[TORCH] = "torch is not installed"
        else:
            found[TORCH] = lambda: torch_call
        for name in SIDES[self.side]:
            module = importlib.import_module(name)
            why = module.unavailable()
            if why:
                skipped.update({impl: why for impl in module.NAMES})
                continue
            for impl, make in module.impls(kernel, s, arrays, opts).items():
                found[impl] = make
        report = {}
        for impl, make in found.items():
            t0 = time.perf_counter()
            try:
                if isinstance(make, str):          # the implementation's reason to be absent
                    skipped[impl] = make
                    continue
                call = make()
                _prepare(call)
                out = call()
                report[impl] = {"error": max_error(out, ref),
                                "prep_s": time.perf_counter() - t0}
                self.impls[impl] = call
            except Exception as e:                 # one failing peer must not end the run
                skipped[impl] = f"failed: {type(e).__name__}: {str(e).splitlines()[0][:200]}" \
                    if str(e) else f"failed: {type(e).__name__}"
                traceback.print_exc(file=sys.stderr)
        for impl, call in self.impls.items():
            start, n = time.perf_counter(), 0
            while n < 2 or time.perf_counter() - start < ROUND_S / 2:
                _prepare(call)
                call()
                n += 1
            per_call = (time.perf_counter() - start) / n
            self.calls[impl] = max(1, min(MAX_CALLS, int(ROUND_S / max(per_call, 1e-9))))
        return {"impls": report, "skipped": skipped}

    def round(self):
        times = {}
        for impl, call in self.impls.items():
            ts = []
            for _ in range(self.calls[impl]):
                _prepare(call)
                t0 = time.perf_counter()
                call()
                ts.append(time.perf_counter() - t0)
            times[impl] = statistics.median(ts)
        return {"times": times}


def versions() -> dict:
    """``{"python": ..., "versions": {package: version or None}}`` of this process."""
    import importlib.metadata
    import platform
    out = {}
    for pkg in VERSIONED:
        try:
            out[pkg] = importlib.metadata.version(pkg)
        except importlib.metadata.PackageNotFoundError:
            out[pkg] = None
    return {"python": platform.python_version(), "versions": out}


def _prepare(call):
    prepare = getattr(call, "prepare", None)
    if prepare is not None:
        prepare()


def serve(side, stdin=None, stdout=None):
    """The worker loop of the module's doc.  Without ``stdout``, the answers
    go to this process's stdout and everything else printed there (the
    peers' logs, from Python or C) to stderr."""
    if stdout is None:
        stdout = os.fdopen(os.dup(1), "w")
        os.dup2(2, 1)
        sys.stdout = sys.stderr
    stdin = stdin or sys.stdin
    threads = int(os.environ.get("OMP_NUM_THREADS", "0"))
    try:
        import torch
        if threads:
            torch.set_num_threads(threads)
    except ImportError:
        pass
    worker = Worker(side)
    for line in stdin:
        cmd = json.loads(line)
        try:
            if cmd["op"] == "quit":
                break
            answer = worker.setup(cmd["kernel"], cmd["quick"], cmd.get("opts") or {}) \
                if cmd["op"] == "setup" else versions() if cmd["op"] == "info" \
                else worker.round()
        except Exception as e:
            traceback.print_exc(file=sys.stderr)
            answer = {"error": f"{type(e).__name__}: {e}"}
        stdout.write(json.dumps(answer) + "\n")
        stdout.flush()


if __name__ == "__main__":
    serve(sys.argv[1])

"""TVM's side of ``tiramisu-py bench peers``: each kernel of
bench/peers_kernels.py in TVM's tensor expressions (``pip install
apache-tvm==0.27.0.post1 apache-tvm-ffi==0.1.14.post0 psutil xgboost``;
tvm-ffi 0.1.15 segfaults importing tvm 0.27; MetaSchedule needs psutil and
its default cost model xgboost), tuned by MetaSchedule for the host
(``{"kind": "llvm", "mcpu": <the host's>, "num-cores": threads}``):

  tvm[MetaSchedule]    :data:`TRIALS` trials (``opts["trials"]``)

Candidates are built in children forked from this process, 120 s each
(:func:`_builder`: the stock builder's fresh worker processes spent 30-36 s
importing tvm, past their 30 s timeout, and every candidate failed); they
run in the stock runner's one worker, given 120 s.  Tuning takes minutes per kernel: the tuned records
are MetaSchedule's JSON database in a directory per kernel, sizes, trials,
threads and CPU under ``opts["cache"]`` (default
``~/.cache/tiramisu_py/peers/tvm``); a run that finds a record there
compiles its best schedule at once.  jacobi-2d (no time loop in tensor
expressions: 2T stages) is not run: the search took minutes per valid
candidate on 2 steps already."""
from __future__ import annotations

import os
import select
import signal

NAMES = ("tvm[MetaSchedule]",)
TRIALS = 64
RUNNER_TIMEOUT_S = 120
BUILD_TIMEOUT_S = 120
DEFAULT_CACHE = os.path.join(os.path.expanduser("~"), ".cache", "tiramisu_py", "peers", "tvm")


def unavailable():
    try:
        import tvm  # noqa: F401
        from tvm.s_tir import meta_schedule  # noqa: F401
    except ImportError as e:
        return f"tvm is not installed (no module {e.name!r}; pip install apache-tvm==0.27.0.post1 " \
               f"apache-tvm-ffi==0.1.14.post0 psutil xgboost)"
    return None


def impls(kernel, s, arrays, opts):
    if kernel == "jacobi2d":
        return {"tvm[MetaSchedule]": "not run: its search took 3.5 min for its first valid "
                                     "candidate on 2 steps (5 stages); jacobi-2d has 40"}
    return {"tvm[MetaSchedule]": lambda: _tuned(kernel, s, arrays, opts)}


def _builder():
    """MetaSchedule's builder: each candidate built in a child forked from
    this process (tvm already imported: the stock builder's fresh workers
    spent 30-36 s importing it, past their 30 s timeout), killed after
    :data:`BUILD_TIMEOUT_S` (a candidate LLVM takes minutes to compile kept
    an in-process build busy for over 20 minutes)."""
    from tvm.ir.utils import derived_object
    from tvm.s_tir.meta_schedule.builder import BuilderResult, PyBuilder
    from tvm.s_tir.meta_schedule.builder.local_builder import default_build, default_export

    def one(b):
        read, write = os.pipe()
        pid = os.fork()
        if pid == 0:                                  # the child: build, say where, exit
            os.close(read)
            try:
                path = default_export(default_build(b.mod, b.target, None))
                os.write(write, ("ok " + path).encode())
            except BaseException as e:                # noqa: B036 (the child must exit)
                os.write(write, f"error {type(e).__name__}: {e}"[:2000].encode())
            os._exit(0)
        os.close(write)
        try:
            ready, _, _ = select.select([read], [], [], BUILD_TIMEOUT_S)
            text = os.read(read, 4096).decode() if ready else None
        finally:
            os.close(read)
            if text is None:
                os.kill(pid, signal.SIGKILL)
            os.waitpid(pid, 0)
        if text is None:
            return BuilderResult(None, f"build killed after {BUILD_TIMEOUT_S} s")
        if text.startswith("ok "):
            return BuilderResult(text[3:], None)
        return BuilderResult(None, f"build: {text[6:] or 'no answer'}")

    @derived_object
    class ForkBuilder(PyBuilder):
        def build(self, build_inputs):
            return [one(b) for b in build_inputs]
    return ForkBuilder()


def _tuned(kernel, s, arrays, opts):
    import numpy as np
    import tvm
    from tvm.s_tir import meta_schedule as ms

    from bench.peers_kernels import empty_outputs
    threads = int(os.environ.get("TVM_NUM_THREADS", os.cpu_count() or 1))
    cpu = tvm.target.codegen.llvm_get_system_cpu()
    target = tvm.target.Target({"kind": "llvm", "mcpu": cpu, "num-cores": threads})
    tensors = _compute(kernel, s)
    func = tvm.te.create_prim_func(list(tensors.values()))
    trials = int(opts.get("trials") or TRIALS)
    shape = "-".join(f"{k}{v}" for k, v in sorted(s.items()))
    work = os.path.join(opts.get("cache") or DEFAULT_CACHE,
                        f"{kernel}-{shape}-t{trials}-n{threads}-{cpu}")
    os.makedirs(work, exist_ok=True)
    db = ms.database.JSONDatabase(work_dir=work)
    sch = ms.tir_integration.compile_tir(db, func, target)
    if sch is None:
        db = ms.tune_tir(func, target, work, max_trials_global=trials,
                         num_trials_per_iter=min(64, trials), builder=_builder(),
                         runner=ms.runner.LocalRunner(timeout_sec=RUNNER_TIMEOUT_S),
                         database=db)
        sch = ms.tir_integration.compile_tir(db, func, target)
    if sch is None:
        raise RuntimeError(f"MetaSchedule found no valid schedule in {trials} trials "
                           f"(see {work}/logs)")
    lib = tvm.compile(sch.mod, target=target)
    dev = tvm.cpu()
    outs = empty_outputs(kernel, s)
    args = [tvm.runtime.tensor(outs[n[4:]] if n.startswith("out_") else arrays[n], dev)
            for n in tensors]
    lib(*args)
    for n in outs:            # the check reads the outputs of this first call
        np.copyto(outs[n], args[list(tensors).index("out_" + n)].numpy())

    def call():
        lib(*args)            # (the outputs stay in TVM's tensors: no copy timed)
        return outs
    return call


def _compute(kernel, s):
    """``{name: te.Tensor}``: the inputs (their names) and the outputs
    (``out_`` + their names), the PrimFunc's arguments in order."""
    from tvm import te
    f32 = "float32"

    def ph(name, *shape):
        return te.placeholder(shape, f32, name=name)
    if kernel == "gemm":
        n = s["N"]
        A, B = ph("A", n, n), ph("B", n, n)
        k = te.reduce_axis((0, n), "k")
        C = te.compute((n, n), lambda i, j: te.sum(A[i, k] * B[k, j], axis=k), name="C")
        return {"A": A, "B": B, "out_C": C}
    if kernel == "jacobi2d":
        n = s["N"]
        A, B = ph("A", n, n), ph("B", n, n)
        cur = {"A": A, "B": B}

        def step(X, keep, name):
            return te.compute((n, n), lambda i, j: te.if_then_else(
                te.all(i >= 1, i < n - 1, j >= 1, j < n - 1),
                0.2 * (X[i, j] + X[i, j - 1] + X[i, j + 1] + X[i + 1, j] + X[i - 1, j]),
                keep[i, j]), name=name)
        for t in range(s["T"]):
            cur["B"] = step(cur["A"], cur["B"], f"sB{t}")
            cur["A"] = step(cur["B"], cur["A"], f"sA{t}")
        out_b = te.compute((n, n), lambda i, j: cur["B"][i, j], name="out_B")
        return {"A": A, "B": B, "out_A": cur["A"], "out_B": out_b}
    if kernel == "softmax":
        r, c = s["R"], s["C"]
        X = ph("X", r, c)
        k1, k2 = te.reduce_axis((0, c), "k1"), te.reduce_axis((0, c), "k2")
        mx = te.compute((r,), lambda i: te.max(X[i, k1], axis=k1), name="mx")
        e = te.compute((r, c), lambda i, j: te.exp(X[i, j] - mx[i]), name="e")
        sm = te.compute((r,), lambda i: te.sum(e[i, k2], axis=k2), name="s")
        out = te.compute((r, c), lambda i, j: e[i, j] / sm[i], name="out")
        return {"X": X, "out_out": out}
    if kernel == "stencil9":
        n = s["N"]
        A = ph("A", n, n)

        def nine(i, j):
            total = A[i, j]
            for dy in range(3):
                for dx in range(3):
                    if dx or dy:
                        total = total + A[i + dy, j + dx]
            return total / 9.0
        return {"A": A, "out_out": te.compute((n - 2, n - 2), nine, name="out")}
    if kernel == "bmv":
        A, x = ph("A", s["B"], s["N"], s["M"]), ph("x", s["B"], s["M"])
        k = te.reduce_axis((0, s["M"]), "k")
        y = te.compute((s["B"], s["N"]), lambda b, i: te.sum(A[b, i, k] * x[b, k], axis=k),
                       name="y")
        return {"A": A, "x": x, "out_y": y}
    if kernel == "layernorm":
        from bench.peers_kernels import EPS
        r, c = s["R"], s["C"]
        X = ph("X", r, c)
        k1, k2 = te.reduce_axis((0, c), "k1"), te.reduce_axis((0, c), "k2")
        mean = te.compute((r,), lambda i: te.sum(X[i, k1] / float(c), axis=k1), name="mean")
        var = te.compute((r,), lambda i: te.sum((X[i, k2] - mean[i]) * (X[i, k2] - mean[i])
                                                / float(c), axis=k2), name="var")
        out = te.compute((r, c), lambda i, j: (X[i, j] - mean[i]) / te.sqrt(var[i] + EPS),
                         name="Y")
        return {"X": X, "out_Y": out}
    n, ci, co, h, w_ = (s[k] for k in ("N", "CI", "CO", "H", "W"))
    inp, w = ph("inp", n, ci, h, w_), ph("w", co, ci, 3, 3)
    pad = te.compute((n, ci, h + 2, w_ + 2), lambda b, c, y, x: te.if_then_else(
        te.all(y >= 1, y <= h, x >= 1, x <= w_), inp[b, c, y - 1, x - 1], 0.0), name="pad")
    c, ky, kx = te.reduce_axis((0, ci), "c"), te.reduce_axis((0, 3), "ky"), \
        te.reduce_axis((0, 3), "kx")
    out = te.compute((n, co, h, w_), lambda b, o, y, x: te.sum(
        pad[b, c, y + ky, x + kx] * w[o, c, ky, kx], axis=[c, ky, kx]), name="out")
    return {"inp": inp, "w": w, "out_out": out}

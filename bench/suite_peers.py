"""The peers suite: ``auto_schedule()`` against Halide's and TVM's automatic
schedulers on seven kernels (bench/peers_kernels.py: GEMM 1024, jacobi-2d
T=20 N=2000, softmax 4096x1024, a 9-point stencil sweep over 4096^2, batched
matrix-vector 512 x 256x256, conv2d 3x3 8x64x56x56 -> 64 with padding 1, a
layer norm's rows 4096x1024; float32).

    tiramisu-py bench peers [--peers-python PATH] [--kernels gemm,conv2d,...]
                            [--trials 64] [--peers-cache DIR] [--threads 2]
                            [--repeats 5] [--quick] [--json PATH]

Each side runs in its own process (a worker of bench/peers_kernels.py):
ours in this interpreter (the plain algorithm, ``auto_schedule()``, the
operator library where it has the kernel, ``tp.tune``'s record:
bench/peers_ours.py); the peers in
``--peers-python`` (default ``$TIRAMISU_PY_PEERS_PYTHON``, else this
interpreter): Halide's Mullapudi2016, Adams2019 and Li2018
(bench/peers_halide.py) and TVM's MetaSchedule (``--trials``, default 64;
its tuned records cached under ``--peers-cache``: bench/peers_tvm.py).  A
peer that is not installed there is skipped with a note.  Install them in a
virtual environment of their own, so that the project's stays as it is::

    python -m venv --system-site-packages ~/peers-venv
    ~/peers-venv/bin/pip install "halide==21.0.0" "apache-tvm==0.27.0.post1" \\
        "apache-tvm-ffi==0.1.14.post0" psutil xgboost       # (the "peers" extra)
    tiramisu-py bench peers --peers-python ~/peers-venv/bin/python

Every implementation is checked against a float64 NumPy reference (the error
column: relative to the output's largest magnitude).  Each process also
times torch's call for the kernel; the times of a process are normalised by
its own torch time (``norm ms`` = time x ours' torch / its torch), so that
a difference between the processes (their libraries, their place on the
cores) cancels.  After the setup (compiling, autoscheduling, tuning: the
``prep s`` column, not timed), the processes are timed in rounds, one
process at a time, their order alternated (``--repeats`` rounds; per round
each implementation runs 0.1 s of calls at least, their median); the table
gives the median over rounds.  Both processes get ``--threads`` threads
(default: the host's cores) through OMP_NUM_THREADS, HL_NUM_THREADS,
TVM_NUM_THREADS and torch, and ``OMP_WAIT_POLICY=passive`` unless it is set.
The last lines of each kernel compare ``tiramisu_py[auto]``,
``tiramisu_py[tuned]`` (``tp.tune``'s record, 60 s of search; cached in the
tuning store from the first run on) (and ``tiramisu_py[auto+re]``, ``auto_schedule(reassociate=True)``, where the
kernel has it) with the best peer (normalised; > 1: ours is faster), and
the layer norm's ``tiramisu_py[auto+re]`` with its hand schedule
(``tiramisu_py[hand]``, same process).  The load average before and after
is printed: on a shared host, numbers taken while it was busy say little.
"""
from __future__ import annotations

import json
import os
import statistics
import subprocess
import sys
import tempfile

from bench import harness, peers_kernels as pk

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
PEERS_ENV = "TIRAMISU_PY_PEERS_PYTHON"
AUTO = "tiramisu_py[auto]"
# the rows compared with the best peer: the JSON key of each comparison
VERSUS = {"auto_vs_best_peer": AUTO, "tuned_vs_best_peer": "tiramisu_py[tuned]",
          "reassociated_vs_best_peer": "tiramisu_py[auto+re]"}
QUICK_TUNE_BUDGET = 2.0       # --quick: tp.tune's seconds (a smoke test)
HAND = "tiramisu_py[hand]"     # a hand schedule (the layer norm's): auto+re judged against it


def add_arguments(p):
    p.add_argument("--peers-python", metavar="PATH",
                   help=f"peers suite: the Python that has halide and tvm (default "
                        f"${PEERS_ENV}, else this interpreter)")
    p.add_argument("--trials", type=int, default=None, metavar="N",
                   help="peers suite: MetaSchedule trials per kernel (default 64)")
    p.add_argument("--peers-cache", metavar="DIR",
                   help="peers suite: where MetaSchedule's tuned records are kept "
                        "(default ~/.cache/tiramisu_py/peers/tvm)")


class Process:
    """A worker of bench/peers_kernels.py, one JSON line each way."""

    def __init__(self, side, python, env, log):
        self.side = side
        self.proc = subprocess.Popen([python, "-m", "bench.peers_kernels", side], cwd=ROOT,
                                     env=env, stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                                     stderr=log, text=True)

    def ask(self, **cmd):
        self.proc.stdin.write(json.dumps(cmd) + "\n")
        self.proc.stdin.flush()
        line = self.proc.stdout.readline()
        if not line:
            raise RuntimeError(f"the {self.side} worker ended (exit {self.proc.wait()})")
        answer = json.loads(line)
        if "error" in answer:
            raise RuntimeError(f"the {self.side} worker: {answer['error']}")
        return answer

    def close(self):
        try:
            self.ask(op="quit") if self.proc.poll() is None else None
        except (RuntimeError, BrokenPipeError, OSError):
            pass
        self.proc.wait(timeout=60)


def _env(threads):
    env = dict(os.environ)
    for var in ("OMP_NUM_THREADS", "OPENBLAS_NUM_THREADS", "MKL_NUM_THREADS", "HL_NUM_THREADS",
                "TVM_NUM_THREADS"):
        env[var] = str(threads)
    env.setdefault("OMP_WAIT_POLICY", "passive")
    env["PYTHONPATH"] = os.pathsep.join([ROOT] + [p for p in env.get("PYTHONPATH", "").split(
        os.pathsep) if p])
    return env


def main(args) -> dict:
    kernels = [k.strip() for k in (args.kernels or "").split(",") if k.strip()] \
        or list(pk.KERNELS)
    unknown = [k for k in kernels if k not in pk.KERNELS]
    if unknown:
        raise SystemExit(f"--kernels: unknown kernel {', '.join(unknown)}; the peers suite has "
                         f"{', '.join(pk.KERNELS)}")
    threads = (args.threads or [os.cpu_count() or 1])[0]
    rounds = args.repeats or 5          # --repeats given to no suite: its documented default
    python = args.peers_python or os.environ.get(PEERS_ENV) or sys.executable
    opts = {"trials": args.trials, "cache": args.peers_cache,
            "tune_budget": QUICK_TUNE_BUDGET if args.quick else None}
    env = _env(threads)
    log = tempfile.NamedTemporaryFile("w", prefix="tiramisu-peers-", suffix=".log", delete=False)
    info = harness.machine_info()
    print(harness.format_machine(info))
    notes = []
    procs = [Process("ours", sys.executable, env, log)]
    if os.path.exists(python) or os.path.sep not in python:
        procs.append(Process("peers", python, env, log))
    else:
        notes.append(f"peers: {python} not found: Halide and TVM skipped")
    report_versions = {p.side: p.ask(op="info") for p in procs}
    for side, v in report_versions.items():
        print(f"{side} process: Python {v['python']}, " + ", ".join(
            f"{k} {x}" for k, x in v["versions"].items() if x))
    load = [os.getloadavg()[0]]
    print(f"threads {threads}, {rounds} rounds; peers' Python {python}; load average "
          f"{load[0]:.2f} (a busy shared host makes these numbers say little); "
          f"workers' log {log.name}", flush=True)
    report = {"machine": info, "threads": threads, "rounds": rounds, "peers_python": python,
              "processes": report_versions, "notes": notes, "kernels": []}
    try:
        for kernel in kernels:
            report["kernels"].append(_kernel(procs, kernel, args.quick, opts, rounds))
            print(format_kernel(report["kernels"][-1]), flush=True)
    finally:
        for p in procs:
            p.close()
        log.close()
    load.append(os.getloadavg()[0])
    report["load_average"] = load
    for n in notes:
        print(n)
    print(f"load average {load[0]:.2f} before, {load[1]:.2f} after")
    if args.json:
        with open(args.json, "w") as f:
            json.dump(report, f, indent=1)
        print(f"wrote {args.json}")
    return report


def _kernel(procs, kernel, quick, opts, rounds):
    s = pk.sizes(kernel, quick)
    out = {"name": pk.describe(kernel, s), "kernel": kernel, "sizes": s,
           "flops": pk.flops(kernel, s), "impls": {}, "skipped": {}}
    setups, times = {}, {}
    for p in procs:
        setups[p.side] = p.ask(op="setup", kernel=kernel, quick=quick, opts=opts)
        for impl, why in setups[p.side]["skipped"].items():
            out["skipped"][f"{impl} ({p.side})" if impl == pk.TORCH else impl] = why
        times[p.side] = {impl: [] for impl in setups[p.side]["impls"]}
    for r in range(rounds):
        for p in (procs if r % 2 == 0 else procs[::-1]):
            for impl, t in p.ask(op="round")["times"].items():
                times[p.side][impl].append(t)
    ours_torch = _median(times.get("ours", {}).get(pk.TORCH))
    for p in procs:
        torch_t = _median(times[p.side].get(pk.TORCH))
        for impl, ts in times[p.side].items():
            med = _median(ts)
            row = {"process": p.side, "median_s": med, "min_s": min(ts) if ts else None,
                   "rounds_s": ts, **setups[p.side]["impls"][impl]}
            row["x_torch"] = torch_t / med if torch_t and med else None
            row["normalised_s"] = med * ours_torch / torch_t if torch_t and ours_torch and med \
                else med
            out["impls"][impl if impl != pk.TORCH else f"torch ({p.side})"] = row
    peers = {k: v for k, v in out["impls"].items() if v["process"] == "peers"
             and not k.startswith("torch")}
    if peers:
        best = min(peers, key=lambda k: peers[k]["normalised_s"])
        for key, impl in VERSUS.items():
            if impl in out["impls"]:
                out[key] = {"peer": best, "speedup": peers[best]["normalised_s"]
                            / out["impls"][impl]["normalised_s"]}
    if HAND in out["impls"] and VERSUS["reassociated_vs_best_peer"] in out["impls"]:
        out["reassociated_vs_hand"] = out["impls"][HAND]["median_s"] \
            / out["impls"][VERSUS["reassociated_vs_best_peer"]]["median_s"]
    return out


def _median(ts):
    return statistics.median(ts) if ts else None


def format_kernel(k) -> str:
    lines = [f"\n{k['name']}  ({k['flops'] / 1e9:.3g} GFLOP)",
             f"  {'implementation':24} {'process':8} {'median ms':>10} {'x torch':>8} "
             f"{'norm ms':>9} {'GFLOP/s':>8} {'error':>8} {'prep s':>7}"]
    for impl, r in k["impls"].items():
        med = r["median_s"]
        gf = k["flops"] / r["normalised_s"] / 1e9 if r["normalised_s"] else 0.0
        x = f"{r['x_torch']:.2f}" if r["x_torch"] else "-"
        lines.append(f"  {impl:24} {r['process']:8} {_ms(med):>10} {x:>8} "
                     f"{_ms(r['normalised_s']):>9} {gf:8.2f} {r['error']:8.1e} "
                     f"{r['prep_s']:7.1f}")
    for impl, why in k["skipped"].items():
        lines.append(f"  {impl:24} skipped: {why}")
    for key, impl in VERSUS.items():
        if key in k:
            v = k[key]
            lines.append(f"  {impl} vs the best peer ({v['peer']}): {v['speedup']:.2f}x "
                         f"({'faster' if v['speedup'] >= 1 else 'slower'})")
    if "reassociated_vs_hand" in k:
        x = k["reassociated_vs_hand"]
        lines.append(f"  {VERSUS['reassociated_vs_best_peer']} vs {HAND}: {x:.2f}x "
                     f"({'faster' if x >= 1 else 'slower'})")
    return "\n".join(lines)


def _ms(t):
    return "-" if t is None else f"{t * 1e3:.3f}" if t < 0.01 else f"{t * 1e3:.1f}"

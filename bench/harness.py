"""A small, generic benchmark harness.

A suite is a module-level function returning a list of ``Case``; each case's
``setup()`` returns ``{impl_name: zero-arg callable}``.  A callable may carry a
``prepare`` attribute (a zero-arg callable) that runs, untimed, before each of
its calls: it restores the arrays a kernel updates in place.  ``run()`` measures the
suite once per thread count, each in a fresh subprocess of this harness with
OMP_NUM_THREADS / OPENBLAS_NUM_THREADS / MKL_NUM_THREADS (and torch's thread
count) set, then prints one table with a column group per thread count, and
optionally writes JSON and a bar chart (matplotlib, optional).

Per case, each implementation is called once as a warm-up (it may compile; its
result goes to ``check``), then timed over ``repeats`` calls in a row (at least; short calls
until :data:`MIN_TIMED_S` of them, :data:`MAX_CALLS` at most) (after a
short pause and untimed calls for :data:`WARM_S`: an idle virtual CPU runs slow
for a few milliseconds), one implementation after the other:
interleaving single calls let the thread pools of one library (OpenBLAS
spinning after a call) slow down the next one.  A case whose implementations
spin no pool after a call (``Case.interleave``: PolyBench's variants, all
ours; the models', every OpenMP pool under the children's
``OMP_WAIT_POLICY=passive`` with ``GOMP_SPINCOUNT`` bounded, see
:func:`_child_env`) is timed in rounds, one call of each per round,
so that a slow spell of a shared host falls on all of them alike.  Reported: median and minimum
seconds, GFLOP/s from the median,
and the ratio of GFLOP/s to torch (eager) in the same run, or to numpy where a
case has no torch implementation (> 1: faster).
"""
from __future__ import annotations

import argparse
import importlib
import importlib.metadata
import json
import os
import platform
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass, field
from typing import Any, Callable

from bench import markdown, peak
from codegen.target import cache_sizes, cpu_flags, cpu_model
from tiramisu_py.cli import writable_path

TIRAMISU = "tiramisu_py"          # impl names starting with this are our variants
BASELINES = ("torch", "numpy")    # ratio to the first of these a case has


@dataclass
class Case:
    """One benchmark: ``setup()`` makes the inputs and returns the implementations;
    ``check(output)``, if given, returns the max abs error of one implementation's
    warm-up output against a reference (printed, never asserted)."""
    name: str
    flops: float
    setup: Callable[[], dict[str, Callable[[], Any]]]
    check: Callable[[Any], float] | None = None
    # the implementations' timed calls in rounds, one call of each per round
    # (no thread pool left spinning to slow the next one), so that a slow
    # spell of a shared host hits them alike
    interleave: bool = False
    # implementation -> the measured ceiling of its "peak" column (a key of
    # peak.ceilings: "vnni_gops", "bf16_gflops"); the FMA peak where absent
    ceiling: dict = field(default_factory=dict)


# ----------------------------------------------------------------- machine info

def machine_info() -> dict:
    return {
        "cpu": cpu_model(),
        "logical_cores": os.cpu_count(),
        "caches": _caches(),
        "simd": [f for f in ("avx512f", "avx2", "avx512_bf16", "avx512_vnni") if f in cpu_flags()],
        "os": platform.platform(),
        "python": platform.python_version(),
        "versions": {pkg: _version(pkg) for pkg in ("numpy", "torch", "islpy", "llvmlite")},
        "gcc": _gcc_version(),
    }


def _caches():
    """``{"L1d": "48K", ...}`` (from :func:`codegen.target.cache_sizes`)."""
    suffix = {"Data": "d", "Instruction": "i"}
    return {f"L{level}{suffix.get(kind, '')}": f"{size >> 10}K"
            for (level, kind), size in cache_sizes().items()}


def _version(pkg):
    try:
        return importlib.metadata.version(pkg)
    except importlib.metadata.PackageNotFoundError:
        return None


def _gcc_version():
    try:
        done = subprocess.run(["gcc", "-dumpfullversion"], capture_output=True, text=True)
    except OSError:
        return None
    return done.stdout.strip() or None


def format_machine(info: dict) -> str:
    caches = " ".join(f"{k} {v}" for k, v in info["caches"].items()) or "unknown"
    software = [f"Python {info['python']}"] + [
        f"{pkg} {ver}" for pkg, ver in info["versions"].items() if ver] + [
        f"gcc {info['gcc'] or 'not found'}"]
    return (f"machine:  {info['cpu']}, {info['logical_cores']} logical cores, "
            f"caches {caches}, SIMD {' '.join(info['simd']) or 'no AVX2/AVX-512'}\n"
            f"software: {info['os']}; {', '.join(software)}")


# ------------------------------------------------------------------- measuring

class Progress:
    """A text progress bar on stderr: redrawn in place on a terminal; elsewhere one
    line per non-transient update."""

    def __init__(self, total, done=0, stream=sys.stderr, width=20):
        self.total, self.done, self.stream, self.width = total, done, stream, width
        self.tty = stream.isatty()

    def show(self, text, transient=False):
        if transient and not self.tty:
            return
        filled = self.width * self.done // max(self.total, 1)
        line = f"[{'#' * filled}{'.' * (self.width - filled)}] {self.done}/{self.total} {text}"
        if self.tty:
            line = "\r\033[K" + line[:shutil.get_terminal_size().columns - 1]
        else:
            line += "\n"
        self.stream.write(line)
        self.stream.flush()

    def close(self):
        if self.tty:
            self.stream.write("\r\033[K")
            self.stream.flush()


SETTLE_S = 0.3       # OpenBLAS threads spin ~0.1 s after a call
QUIET_S = 10.0       # then up to this long for the other processes to go idle
QUIET_CORES = 0.1    # idle: the others use less than this many cores (over 0.1 s)
WARM_S = 0.2         # untimed calls before the timed ones (one at least)
MIN_TIMED_S = 0.5    # timed calls past ``repeats`` until they add up to this...
MAX_CALLS = 1000     # ...or this many

# TIRAMISU_PY_BENCH_SMOKE=1 (the test suite's runs of the suites, which check
# results and reports, never times): no pause, no wait for a quiet host, one
# warm call, ``repeats`` timed calls, the host's ceilings probed for their
# minimum rounds only, bandwidth on 4 MB; the numbers mean nothing
SMOKE = os.environ.get("TIRAMISU_PY_BENCH_SMOKE", "") not in ("", "0")
if SMOKE:
    SETTLE_S = QUIET_S = WARM_S = MIN_TIMED_S = 0.0
    peak.PROBE_S, peak.BYTES = 0.0, 4 << 20


def measure(case: Case, repeats: int, threads: int, progress: Progress,
            only: list[str] | None = None) -> dict:
    """``{impl: {"median_s", "min_s", "error", "failure"}}`` for one case; an
    implementation that raises in its warm-up (or check) is reported, not timed.
    ``only``: names to keep; "tiramisu_py" also keeps "tiramisu_py[direct]" etc."""
    impls = {k: f for k, f in case.setup().items()
             if only is None or any(k == o or k.startswith(o + "[") for o in only)}
    if "torch" in sys.modules:
        sys.modules["torch"].set_num_threads(threads)
    label = f"{threads} thread{'s' * (threads > 1)}: {case.name}"
    results, timed = {}, {}
    for i, (name, fn) in enumerate(impls.items(), 1):
        progress.show(f"{label}: warm-up {name} ({i}/{len(impls)})")
        result = results[name] = dict(median_s=None, min_s=None, error=None, failure=None)
        try:
            _prepare(fn)
            out = fn()
            result["error"] = case.check(out) if case.check else None
        except Exception as e:                      # report and go on with the others
            result["failure"] = f"{type(e).__name__}: {e}".splitlines()[0]
            continue
        del out
        timed[name] = fn
    # each implementation's calls back to back, after a pause and one untimed
    # call: a thread pool that spins after a call (OpenBLAS) would otherwise
    # slow down whichever implementation runs next
    times = {name: [] for name in timed}
    if case.interleave:
        _timed_rounds(timed, times, repeats, progress, label)
        timed = {}
    for i, (name, fn) in enumerate(timed.items(), 1):
        progress.show(f"{label}: timing {name} ({i}/{len(timed)}), {repeats} calls",
                      transient=i > 1)
        settle()                       # the previous library's threads go to sleep
        _warm(fn)
        # ``repeats`` calls at least, more for short ones (MIN_TIMED_S in all):
        # the median of 5 calls of a millisecond is at the mercy of one hiccup
        while len(times[name]) < repeats or \
                (sum(times[name]) < MIN_TIMED_S and len(times[name]) < MAX_CALLS):
            _prepare(fn)
            t0 = time.perf_counter()
            fn()
            times[name].append(time.perf_counter() - t0)
    for name, ts in times.items():
        results[name].update(median_s=statistics.median(ts), min_s=min(ts))
    return results


def settle():
    """A pause of :data:`SETTLE_S`, then one until the host's other work is
    idle (:func:`_busy_cores` under :data:`QUIET_CORES`), :data:`QUIET_S`
    at most: a warm-up can leave work behind it (torch.compile's pool of
    compile workers starts in the background and imports torch, seconds of
    CPU: the implementation timed next ran 10% slower on 2 cores)."""
    time.sleep(SETTLE_S)
    end = time.perf_counter() + QUIET_S
    while time.perf_counter() < end:
        busy = _busy_cores(0.1)
        if busy is None or busy < QUIET_CORES:
            return


def _busy_cores(seconds):
    """Cores the host kept busy over ``seconds`` (this process sleeps
    meanwhile; time stolen by a hypervisor not counted), from /proc/stat;
    None where there is none."""
    def sample():
        try:
            with open("/proc/stat") as f:
                v = [int(x) for x in f.readline().split()[1:]]
        except (OSError, ValueError):
            return None
        idle = v[3] + (v[4] if len(v) > 4 else 0)
        steal = v[7] if len(v) > 7 else 0
        return sum(v[:8]) - steal, idle
    first = sample()
    time.sleep(seconds)
    second = sample()
    if first is None or second is None or second[0] <= first[0]:
        return None
    total, idle = second[0] - first[0], second[1] - first[1]
    return (total - idle) / total * (os.cpu_count() or 1)


def _warm(fn):
    """Untimed calls for :data:`WARM_S` at least: after a pause an idle
    (virtual) CPU runs slow for some milliseconds, which a short call's
    median would show."""
    start = time.perf_counter()
    while True:
        _prepare(fn)
        fn()
        if time.perf_counter() - start >= WARM_S:
            break


def _timed_rounds(timed, times, repeats, progress, label):
    """The timed calls of :func:`measure` in rounds: after each
    implementation's warm calls, one call of each per round, until each has
    ``repeats`` calls and (:data:`MIN_TIMED_S` of them or :data:`MAX_CALLS`)."""
    progress.show(f"{label}: timing {', '.join(timed)} in rounds, {repeats} calls")
    settle()
    for fn in timed.values():
        _warm(fn)

    def more(name):
        ts = times[name]
        return len(ts) < repeats or (sum(ts) < MIN_TIMED_S and len(ts) < MAX_CALLS)
    while any(more(name) for name in timed):
        for name, fn in timed.items():
            if more(name):
                _prepare(fn)
                t0 = time.perf_counter()
                fn()
                times[name].append(time.perf_counter() - t0)


def _prepare(fn):
    prepare = getattr(fn, "prepare", None)
    if prepare is not None:
        prepare()


def _load_suite(spec, kwargs):
    module, _, name = spec.partition(":")
    return getattr(importlib.import_module(module), name)(**kwargs)


def _child(job):
    """One thread count, in its own process: measure every case, write JSON."""
    job = json.loads(job)
    progress = Progress(job["total"], job["done"])
    progress.show(f"{job['threads']} thread{'s' * (job['threads'] > 1)}: measuring the host's "
                  "FMA peak and bandwidth", transient=True)
    ceiling = peak.ceilings((job["threads"],))[job["threads"]]
    results = []
    for case in _load_suite(job["suite"], job["kwargs"]):
        results.append(measure(case, job["repeats"], job["threads"], progress, job["only"]))
        progress.done += 1
    peak.measure_again()             # and once more after the cases: the higher of the two
    ceiling = peak.best_of(ceiling, peak.ceilings((job["threads"],))[job["threads"]])
    progress.close()
    with open(job["out"], "w") as f:
        json.dump({"results": results, "ceiling": ceiling}, f)


def _child_env(threads):
    """The environment of a measuring child: ``threads`` for every library,
    ``OMP_WAIT_POLICY=passive`` and ``GOMP_SPINCOUNT`` at tiramisu_py's bound
    (:data:`codegen.team.SPINCOUNT`, tens of microseconds of polling): an
    idle OpenMP thread, torch's or ours, polls that long after a parallel
    call and then sleeps, so no pool spins into the next implementation's
    call and none pays a full wake-up at each of its own (fully passive,
    torch's 2-layer LSTM at batch 2 took 12 ms against 5.5; GOMP_SPINCOUNT,
    where set, rules over the policy's).  Set here, whatever the calling
    shell or an import set: the parent's import of :mod:`codegen.team`
    bounds it only where neither variable was set."""
    from codegen.team import SPINCOUNT
    path = [os.path.abspath(p or os.curdir) for p in sys.path]    # the child imports what we do
    return dict(os.environ, OMP_WAIT_POLICY="passive", GOMP_SPINCOUNT=str(SPINCOUNT),
                PYTHONPATH=os.pathsep.join(path),
                **{v: str(threads) for v in ("OMP_NUM_THREADS", "OPENBLAS_NUM_THREADS",
                                             "MKL_NUM_THREADS")})


def _run_child(threads, **job):
    env = _child_env(threads)
    with tempfile.TemporaryDirectory() as tmp:
        out = os.path.join(tmp, "results.json")
        code = "import sys; from bench.harness import _child; _child(sys.argv[1])"
        job = json.dumps(dict(job, threads=threads, out=out))
        rc = subprocess.run([sys.executable, "-c", code, job], env=env).returncode
        if rc != 0:
            raise SystemExit(f"bench: the {threads}-thread run failed (exit status {rc})")
        with open(out) as f:
            return json.load(f)


# --------------------------------------------------------------------- running

def run(suite: Callable[..., list[Case]], kwargs: dict | None = None, threads=(1, 2),
        repeats=5, only: list[str] | None = None, json_path=None, png_path=None,
        stdout=None) -> dict:
    """Measure ``suite(**kwargs)`` (a module-level function, re-imported by the
    per-thread-count subprocesses) for each thread count; print the table; write
    ``json_path`` / ``png_path`` if given.  ``only``: implementation names to keep.
    Returns the report (the JSON document)."""
    stdout = stdout or sys.stdout
    kwargs = kwargs or {}
    spec = f"{suite.__module__}:{suite.__qualname__}"
    cases = suite(**kwargs)                      # cheap: setup() is only called in the children
    machine = machine_info()
    print(format_machine(machine), file=stdout, flush=True)
    children = {n: _run_child(n, suite=spec, kwargs=kwargs, repeats=repeats, only=only,
                              done=k * len(cases), total=len(threads) * len(cases))
                for k, n in enumerate(threads)}
    runs = {n: child["results"] for n, child in children.items()}
    ceilings = {str(n): child["ceiling"] for n, child in children.items()}
    report = {"machine": machine, "suite": spec, "arguments": kwargs, "threads": list(threads),
              "repeats": repeats, "ceilings": ceilings,
              "cases": [_merge(case, i, runs, ceilings) for i, case in enumerate(cases)]}
    print(format_table(report), file=stdout)
    if json_path:
        with open(json_path, "w") as f:
            json.dump(report, f, indent=1)
        print(f"wrote {json_path}", file=stdout)
    if png_path and plot(report, png_path):
        print(f"wrote {png_path}", file=stdout)
    return report


def _merge(case, index, runs, ceilings=None):
    """One case's results over all thread counts, with GFLOP/s, ratios and
    the fraction of the measured ceiling of that thread count (the FMA peak,
    or the one ``case.ceiling`` names for the implementation)."""
    impls = {}
    for n, results in runs.items():
        measured = (ceilings or {}).get(str(n)) or {}
        for impl, r in results[index].items():
            peak_gflops = measured.get(case.ceiling.get(impl, "fma_gflops"))
            r["gflops"] = case.flops / r["median_s"] / 1e9 if r["median_s"] else None
            r["of_peak"] = r["gflops"] / peak_gflops if r["gflops"] and peak_gflops else None
            impls.setdefault(impl, {})[str(n)] = r
    baseline = next((b for b in BASELINES if b in impls), None)
    best = {}
    for n in map(str, runs):
        base = impls[baseline].get(n, {}).get("gflops") if baseline else None
        for r in (rs[n] for rs in impls.values() if n in rs):
            r["ratio"] = r["gflops"] / base if r["gflops"] and base else None
        ours = [(rs[n]["gflops"], impl) for impl, rs in impls.items()
                if impl.startswith(TIRAMISU) and n in rs and rs[n]["gflops"]]
        best[n] = max(ours)[1] if ours else None
    return {"name": case.name, "flops": case.flops, "baseline": baseline,
            "best_tiramisu_py": best, "impls": impls}


# -------------------------------------------------------------------- printing

def format_table(report: dict) -> str:
    cases, threads = report["cases"], [str(n) for n in report["threads"]]
    baselines = {c["baseline"] for c in cases}
    ratio = f"vs {baselines.pop()}" if len(baselines) == 1 and None not in baselines else "ratio"
    w_case = max([len("case")] + [len(c["name"]) for c in cases])
    w_impl = max([len("impl")] + [len(i) for c in cases for i in c["impls"]])
    group = f"{'ms':>10} {'GFLOP/s':>9} {'peak':>5} {ratio:>9} "
    title = "".join(f"| {n + ' thread' + 's' * (n != '1'):<{len(group)}}" for n in threads)
    ceil = {int(n): c for n, c in (report.get("ceilings") or {}).items() if c}
    lines = [peak.format_ceilings(ceil)] if ceil else []
    lines += [f"{'':{w_case}}  {'':{w_impl}} {title}|",
             f"{'case':{w_case}}  {'impl':{w_impl}} " + f"| {group}" * len(threads) + "| max err"]
    lines.append("-" * len(lines[1]))
    failures = []
    for c in cases:
        for k, (impl, per_n) in enumerate(c["impls"].items()):
            row = f"{c['name'] if k == 0 else '':{w_case}}  {impl:{w_impl}} "
            for n in threads:
                r = per_n.get(n)
                if r is None or r["median_s"] is None:
                    row += f"| {'failed' if r and r['failure'] else '-':>10} {'':9} {'':5} {'':9} "
                    continue
                mark = "*" if c["best_tiramisu_py"][n] == impl else " "
                ratio_s = f"{r['ratio']:.2f}x" if r["ratio"] else "-"
                peak_s = f"{r['of_peak']:.0%}" if r.get("of_peak") else "-"
                row += (f"| {r['median_s'] * 1e3:10.3f} {r['gflops']:9.2f} {peak_s:>5} "
                        f"{ratio_s:>8}{mark} ")
            errors = [r["error"] for r in per_n.values() if r["error"] is not None]
            lines.append(row + (f"| {max(errors):.1e}" if errors else "|"))
            failure = next((r["failure"] for r in per_n.values() if r["failure"]), None)
            if failure:
                failures.append(f"  {c['name']} / {impl}: {failure}")
    versus = ("torch eager's (numpy's where a case has no torch)" if ratio == "ratio"
              else f"{ratio[3:]}'s")
    lines += ["", f"ms: median of {report['repeats']} calls (more for short ones: "
              f"{MIN_TIMED_S} s of calls, {MAX_CALLS} at most) after a warm-up; "
              "GFLOP/s from the median; peak: GFLOP/s over the measured FMA peak of that "
              "thread count (int8 and bf16 products: over the vpdpbusd / vdpbf16ps peak);",
              f"{ratio}: GFLOP/s over {versus} in the same run (> 1: faster);",
              f"*: the fastest {TIRAMISU} variant of the case at that thread count;",
              "max err: largest abs error against the reference over all runs."]
    if failures:
        lines += ["failures:"] + failures
    return "\n".join(lines)


def plot(report: dict, path: str) -> bool:
    """Bar chart of GFLOP/s, one panel per thread count; False if matplotlib is missing."""
    try:
        import matplotlib
    except ImportError:
        print(f"bench: matplotlib is not installed, so {path} was not written "
              "(pip install matplotlib)", file=sys.stderr)
        return False
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    cases = report["cases"]
    impls = list(dict.fromkeys(impl for c in cases for impl in c["impls"]))
    width = 0.8 / len(impls)
    fig, axes = plt.subplots(len(report["threads"]), 1, squeeze=False,
                             figsize=(max(6.0, 1.2 * len(cases) * max(1, len(impls) / 3)),
                                      3.5 * len(report["threads"])))
    for ax, n in zip(axes[:, 0], map(str, report["threads"])):
        for k, impl in enumerate(impls):
            bars = [(i, c["impls"][impl][n]["gflops"]) for i, c in enumerate(cases)
                    if n in c["impls"].get(impl, {}) and c["impls"][impl][n]["gflops"]]
            ax.bar([i - 0.4 + width * (k + 0.5) for i, _ in bars], [g for _, g in bars],
                   width, label=impl, color=f"C{k % 10}")
        ax.set_xticks(range(len(cases)), [c["name"] for c in cases], rotation=15, ha="right")
        ax.set_ylabel("GFLOP/s")
        ax.set_title(f"{n} thread{'s' * (n != '1')}")
        ax.grid(axis="y", alpha=0.3)
    axes[0, 0].legend(fontsize="small", ncol=min(len(impls), 4))
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)
    return True


# ------------------------------------------------------------- command line

def _positive_int(text: str) -> int:
    if not text.strip().isdigit() or int(text) < 1:
        raise argparse.ArgumentTypeError(f"expected a positive integer, got {text!r}")
    return int(text)


def add_arguments(p: argparse.ArgumentParser):
    """The suite-independent options; ``run_args`` turns them into ``run`` keywords."""
    p.add_argument("--threads", type=lambda s: [_positive_int(t) for t in s.split(",")],
                   metavar="1,2", help="thread counts, each measured in its own subprocess "
                   "(default 1,2; 2 for polybench and models)")
    p.add_argument("--repeats", type=_positive_int, metavar="N",
                   help="timed calls per implementation after the warm-up (default 5, 3 for "
                   f"models; short calls repeat until {MIN_TIMED_S} s)")
    p.add_argument("--impls", metavar="NAME,...", type=lambda s: s.split(","),
                   help="only these implementations (e.g. tiramisu_py,numpy,torch; "
                        "tiramisu_py also selects tiramisu_py[direct] etc.)")
    # (the output paths are checked before the run: a run of minutes must not end unwritten)
    p.add_argument("--json", metavar="PATH", type=writable_path,
                   help="write all results and machine info as JSON")
    p.add_argument("--png", metavar="PATH", type=writable_path,
                   help="write a GFLOP/s bar chart (needs matplotlib)")
    p.add_argument("--md", metavar="PATH", nargs="?", const=markdown.DEFAULT, type=writable_path,
                   help="put this run's table in PATH's section for the suite and this host "
                        f"(default {markdown.DEFAULT}; other sections are kept)")


def run_args(args: argparse.Namespace, threads=(1, 2), repeats=5) -> dict:
    """``threads`` / ``repeats``: the thread counts and timed calls when
    ``--threads`` / ``--repeats`` is not given."""
    return dict(threads=list(args.threads or threads), repeats=args.repeats or repeats,
                only=args.impls, json_path=args.json, png_path=args.png)

"""The contention suite: the library's calls on a quiet machine and beside
busy processes, against torch in the same conditions.

    tiramisu-py bench contention [--busy 1,4] [--threads N] [--repeats N] [--quick]
                                 [--json PATH]

Users' machines are not quiet: a laptop with a browser, a CI box, a data
loader's workers beside the model.  Each case is one call a user makes (the
README's calls, torch tensors as torch gives them) and torch's call for the
same work:

  gemm 256, gemm 1024     schedules.gemm(a, b)            torch.mm
  batched_gemm 256x64^3   schedules.batched_gemm(a, b)    torch.bmm
  conv 64@56 b1           schedules.conv2d(x, w, b, padding=1)  F.conv2d
  lstm tagger small       schedules.nn.convert of a tagger (Embedding(1000, 64) ->
                          LSTM(64, 64, 2 layers) -> Linear(64, 17)) on (12, 4) tokens
                                                           the tagger
  lstm tagger large       the same at 512 units on (50, 16) tokens
  resnet18 b2             schedules.nn.convert(ResNet-18) inference (bench/suite_models)
                                                           the model in eval mode

Conditions, in this order: quiet (the host idle first), then with each count
of ``--busy`` processes beside the calls (``python -c "while True: pass"``,
one core's worth each, started before the condition's first call and killed
after its last).  In each condition ours and torch's calls alternate (one of
each per round, after warm-up calls), ``--repeats`` rounds at least and
:data:`ROUND_S` of calls each at least; the mean time of a call is printed
(the calls' total over their count: a busy machine's stalls, a thread
descheduled for a few ms now and then, count as a user pays them; a median
hides them -- a 0.2 ms GEMM's median held its quiet value beside a busy
process while its mean tripled).  Everything runs in one
child process with ``OMP_NUM_THREADS`` and torch's threads set to
``--threads`` (default: the cores); ``OMP_WAIT_POLICY`` is left as the user
has it (a user's default is libgomp's, not the ``passive`` of the other
suites) and printed in the header.

Per row and busy condition the table gives our slowdown (busy / quiet time;
the target: at most 2.5x with one busy process on two cores) and how our
ratio to torch held (``torch / ours`` busy over the same quiet: at least
0.8x, or still >= 1.0x torch)."""
from __future__ import annotations

import json
import os
import statistics
import subprocess
import sys
import tempfile
import time

from bench import harness

BUSY = (1, 4)
ROUND_S = 2.0            # calls of each implementation per condition, seconds at least
WARM_CALLS = 5


def _cases(quick):
    """name -> (ours, torch): zero-argument calls on inputs made once."""
    import copy

    import torch
    import torch.nn.functional as F

    import schedules
    import schedules.nn
    from bench import suite_models

    g = torch.Generator().manual_seed(0)

    def rand(*shape):
        return torch.randn(*shape, generator=g)
    out = {}
    for n in ((48,) if quick else (256, 1024)):
        a, b = rand(n, n), rand(n, n)
        out[f"gemm {n}"] = (lambda a=a, b=b: schedules.gemm(a, b), lambda a=a, b=b: torch.mm(a, b))
    nb, n = (8, 16) if quick else (256, 64)
    a, b = rand(nb, n, n), rand(nb, n, n)
    out[f"batched_gemm {nb}x{n}^3"] = (lambda: schedules.batched_gemm(a, b), lambda: torch.bmm(a, b))
    c, hw = (8, 10) if quick else (64, 56)
    x, w, bias = rand(1, c, hw, hw), rand(c, c, 3, 3) * 0.1, rand(c)
    out[f"conv {c}@{hw} b1"] = (lambda: schedules.conv2d(x, w, bias, padding=1),
                                lambda: F.conv2d(x, w, bias, padding=1))
    for tag, (h, t, bsz) in (("small", (16 if quick else 64, 12, 4)),
                             ("large", (32 if quick else 512, 8 if quick else 50, 16))):
        torch.manual_seed(1)
        m = _tagger(h).eval()
        ours = schedules.nn.convert(copy.deepcopy(m))
        tokens = torch.randint(0, 1000, (t, bsz), generator=g)
        out[f"lstm tagger {tag} {h}x2 T={t} B={bsz}"] = (_no_grad(ours, tokens),
                                                         _no_grad(m, tokens))
    if not quick:
        model, make_input = suite_models.model("resnet18", False)
        model.eval()
        ours = schedules.nn.convert(copy.deepcopy(model)).eval()
        torch.manual_seed(1)
        img = make_input(2)
        out["resnet18 b2 inference"] = (_no_grad(ours, img), _no_grad(model, img))
    return out


def _tagger(h):
    """A sequence tagger: Embedding(1000, h) -> LSTM(h, h, 2 layers) ->
    Linear(h, 17) over (T, B) tokens (``convert`` replaces the LSTM and the
    Linear)."""
    from torch import nn

    class Tagger(nn.Module):
        def __init__(self):
            super().__init__()
            self.emb, self.lstm, self.out = nn.Embedding(1000, h), nn.LSTM(h, h, 2), nn.Linear(h, 17)

        def forward(self, tokens):
            return self.out(self.lstm(self.emb(tokens))[0])
    return Tagger()


def _no_grad(module, x):
    import torch

    def call():
        with torch.no_grad():
            return module(x)
    return call


def _time(fns, repeats):
    """Medians (s) of ``fns`` (name -> call), their calls alternating."""
    for fn in fns.values():
        for _ in range(WARM_CALLS):
            fn()
    times = {k: [] for k in fns}

    def more(k):
        return len(times[k]) < repeats or sum(times[k]) < ROUND_S
    while any(more(k) for k in fns):
        for k, fn in fns.items():
            if more(k):
                t0 = time.perf_counter()
                fn()
                times[k].append(time.perf_counter() - t0)
    return {k: statistics.fmean(v) for k, v in times.items()}


def _child(job):
    """The measurements, in a process with the suite's thread count (torch or
    tiramisu_py imported before this module, as ``job["first"]`` says: :func:`run`)."""
    import torch

    from codegen import team
    job = json.loads(job)
    torch.set_num_threads(job["threads"])
    cases = {k: v for k, v in _cases(job["quick"]).items()
             if not job.get("only") or any(o in k for o in job["only"])}
    results = {name: {} for name in cases}
    for busy in [0] + job["busy"]:
        procs = [subprocess.Popen([sys.executable, "-c", "while True: pass"])
                 for _ in range(busy)]
        try:
            time.sleep(0.5 if busy else 0)
            if not busy:
                harness.settle()
            for name, (ours, theirs) in cases.items():
                print(f"  {busy} busy: {name}", file=sys.stderr, flush=True)
                t = _time({"ours": ours, "torch": theirs}, job["repeats"])
                results[name][str(busy)] = t
        finally:
            for p in procs:
                p.kill()
                p.wait()
    with open(job["out"], "w") as f:
        json.dump({"results": results, "spin": team.runtime_spin()}, f)


def run(threads=None, busy=BUSY, repeats=10, quick=False, only=None, first="torch"):
    """Runs the suite in a child process; returns the report."""
    threads = threads or os.cpu_count() or 1
    env = dict(os.environ, **{v: str(threads) for v in ("OMP_NUM_THREADS", "OPENBLAS_NUM_THREADS",
                                                         "MKL_NUM_THREADS")})
    from codegen import team
    if team.SPIN == "bounded":          # this process's import set it: the child decides afresh
        env.pop("GOMP_SPINCOUNT", None)
    path = [os.path.abspath(p or os.curdir) for p in sys.path]
    env["PYTHONPATH"] = os.pathsep.join(path)
    with tempfile.TemporaryDirectory() as tmp:
        out = os.path.join(tmp, "contention.json")
        job = json.dumps(dict(threads=threads, busy=list(busy), repeats=repeats, quick=quick,
                              only=only, out=out, first=first))
        # the first import decides libgomp's waiting (codegen.team): before this module's own
        code = (f"import {first}; import sys; from bench.suite_contention import _child; "
                "_child(sys.argv[1])")
        rc = subprocess.run([sys.executable, "-c", code, job], env=env).returncode
        if rc != 0:
            raise SystemExit(f"bench contention: the measuring process failed (exit status {rc})")
        with open(out) as f:
            child = json.load(f)
    return {"machine": harness.machine_info(), "threads": threads, "busy": list(busy),
            "omp_wait_policy": os.environ.get("OMP_WAIT_POLICY", "(unset: libgomp's default)"),
            "first": first, "runtime_spin": child["spin"], "results": child["results"]}


def verdicts(report) -> dict:
    """Per row and busy count: (our slowdown, ratio held, torch / ours busy)."""
    out = {}
    for name, by in report["results"].items():
        q = by["0"]
        for busy in report["busy"]:
            b = by[str(busy)]
            slow = b["ours"] / q["ours"]
            ratio_q, ratio_b = q["torch"] / q["ours"], b["torch"] / b["ours"]
            out[(name, busy)] = (slow, ratio_b / ratio_q, ratio_b)
    return out


def format_table(report) -> str:
    busy = report["busy"]
    head = ["call", "quiet ours / torch ms"] + [f"{n} busy ours / torch ms" for n in busy] \
        + [f"{n} busy: slowdown, ratio held" for n in busy]
    lines = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    v = verdicts(report)
    for name, by in report["results"].items():
        cells = [name]
        for n in [0] + busy:
            t = by[str(n)]
            cells.append(f"{t['ours'] * 1e3:.3g} / {t['torch'] * 1e3:.3g} "
                         f"({t['torch'] / t['ours']:.2f}x)")
        for n in busy:
            slow, held, ratio = v[(name, n)]
            ok = (n != 1 or slow <= 2.5) and (held >= 0.8 or ratio >= 1.0)
            cells.append(f"{slow:.2f}x, {held:.2f} {'ok' if ok else 'MISS'}")
        lines.append("| " + " | ".join(cells) + " |")
    return "\n".join(lines)


def add_arguments(p):
    p.add_argument("--busy", type=lambda s: [int(x) for x in s.split(",")], default=list(BUSY),
                   metavar="1,4", help="contention: the counts of busy processes (default 1,4)")
    p.add_argument("--cases", type=lambda s: s.split(","), default=None, metavar="NAME,...",
                   help="contention: only the calls whose name contains one of these")
    p.add_argument("--first", choices=("torch", "tiramisu_py"), default="torch",
                   help="contention: which the measuring process imports first (default torch, "
                        "as most scripts do; tiramisu_py first bounds libgomp's waiting where "
                        "OMP_WAIT_POLICY and GOMP_SPINCOUNT are unset)")


def main(args) -> dict:
    threads = args.threads[-1] if getattr(args, "threads", None) else None
    print(harness.format_machine(harness.machine_info()), flush=True)
    report = run(threads, getattr(args, "busy", BUSY), max(args.repeats or 5, 5), args.quick,
                 getattr(args, "cases", None), getattr(args, "first", "torch"))
    print(f"imported first: {report['first']}; the OpenMP runtime's idle threads wait: "
          f"{report['runtime_spin']}")
    print(f"threads {report['threads']}, OMP_WAIT_POLICY {report['omp_wait_policy']}; "
          "mean ms a call (the calls' total over their count); ratio = torch / ours; slowdown = ours busy / ours quiet (target <= 2.5x with 1 busy);"
          " ratio held = busy ratio / quiet ratio (target >= 0.8, or the busy ratio >= 1.0)")
    print(format_table(report))
    if args.json:
        with open(args.json, "w") as f:
            json.dump(report, f, indent=1)
        print(f"wrote {args.json}")
    return report

"""The paper suite: the TIRAMISU paper's deep-learning evaluation in one table.

    tiramisu-py bench paper [--quick] [--threads 1,2] [--repeats N] [--densities 10,40,50]
                            [--json PATH] [--png PATH]

Rows (float32, NCHW, 3x3 kernels, stride 1, padding 1, 2x2 max-pool; the
sizes of the paper's public benchmark folder, batch 8 where 32 would make one
call take seconds; ``--quick``: tiny sizes, no torch.compile, a smoke test):

  Conv                      32 x 3 -> 32 @ 224x224          schedules.conv2d
  Conv-ReLU-MaxPool         the same, dense and sparse 20%  schedules.conv_relu_maxpool
  Resize-Conv-ReLU-MaxPool  32 x 3 @ 256x256 resized (bilinear) to 224x224, then the
                            block, dense and sparse 20%     schedules.resize_conv_relu_maxpool
  VGG block                 conv-ReLU-conv-ReLU-maxpool, 8 x 3 -> 32 -> 32 @ 112 (dense,
                            sparse 2%) and 8 x 512 -> 512 -> 512 @ 14 (dense, sparse 1%)
                                                            schedules.vgg_block
  ResNet block              conv-BN-ReLU-conv-BN + x, ReLU, 8 x 32 -> 32 @ 224, dense and
                            sparse 16.1%, BN folded into the convolutions once (inference)
                                                            schedules.resnet_block
  LSTM (seq-to-seq)         4 layers, hidden 1024, T = 100, batch 1, dense and sparse 15%
                            (the rnn suite's case (a))      schedules.lstm

each against torch eager (oneDNN, the successor of the paper's MKL-DNN; the
ResNet block with its BatchNorm ops, as an eval-mode module runs) and
torch.compile of the same function (a failure is reported in the table and the
row's compile column left empty).  Sparse rows: our CSR kernels on the
weight pruned by magnitude (:func:`schedules.prune_magnitude`, the stand-in
for the paper's lottery-ticket masks, which need training data we do not
have: same density per layer) against torch's dense kernels on the same
zero-filled weight.  Weights are torch-given (``torch.from_numpy`` of one
fixed-seed array, no copies); each call is the documented library call.

After the harness's table: the paper table (our fastest variant, torch,
torch.compile, speed-ups, the paper's reported figure and the issue's
target), then the break-even density of our sparse conv against torch's
dense conv2d on the VGG 512 @ 14 shape (the sparse suite's sweep and rule,
:func:`bench.suite_sparse.break_even`; paper: 43.5%).
"""
from __future__ import annotations

import functools
import json

import numpy as np

from bench import harness, suite_rnn, suite_sparse
from bench.harness import Case

PAPER_BREAK_EVEN = 43.5
FIGURES = {   # row: (the paper's reported figure, issue 34's target on this host)
    "Conv": ("- (not reported alone)", "-"),
    "Conv-ReLU-MaxPool": ("up to 3x over MKL-DNN (fusion)", ">= 3x torch"),
    "Conv-ReLU-MaxPool sparse": ("up to 5x (sparse)", "-"),
    "Resize-Conv-ReLU-MaxPool": ("up to 3x over MKL-DNN (fusion)", ">= 3x torch"),
    "Resize-Conv-ReLU-MaxPool sparse": ("up to 5x (sparse)", "-"),
    "VGG block": ("-", "-"),
    "VGG block sparse": ("up to 5x (sparse; 2% @112, 1% @14)", ">= 5x torch dense at 1%"),
    "ResNet block": ("-", "-"),
    "ResNet block sparse": ("up to 5x (sparse, 16.1%)", ">= 1.5x torch dense"),
    "LSTM": ("-", "-"),
    "LSTM sparse": ("-", "-"),
}
# (batch, in, out, height) per size; quick: tiny
SIZES = {False: dict(conv=(32, 3, 32, 224), src=256, vgg=((8, 3, 32, 112, 0.02),
                                                          (8, 512, 512, 14, 0.01)),
                     resnet=(8, 32, 224), sweep=(5, 10, 20, 30, 40, 50, 70)),
         True: dict(conv=(2, 3, 8, 18), src=23, vgg=((1, 16, 16, 6, 0.1),),
                    resnet=(1, 8, 10), sweep=(1, 50))}
SPARSE_CONV = 0.2
SPARSE_RESNET = 0.161


def cases(quick=False, densities=None) -> list[Case]:
    z = SIZES[quick]
    n, ci, co, h = z["conv"]
    out = [_conv_row("Conv", n, ci, co, h, quick),
           _conv_row("Conv-ReLU-MaxPool", n, ci, co, h, quick),
           _conv_row("Conv-ReLU-MaxPool", n, ci, co, h, quick, SPARSE_CONV),
           _conv_row("Resize-Conv-ReLU-MaxPool", n, ci, co, h, quick, src=z["src"]),
           _conv_row("Resize-Conv-ReLU-MaxPool", n, ci, co, h, quick, SPARSE_CONV, z["src"])]
    for n, ci, co, h, density in z["vgg"]:
        out += [_vgg_row(n, ci, co, h, quick), _vgg_row(n, ci, co, h, quick, density)]
    n, c, h = z["resnet"]
    out += [_resnet_row(n, c, h, quick), _resnet_row(n, c, h, quick, SPARSE_RESNET)]
    for case in suite_rnn.cases(quick):
        if case.name.startswith("lstm (a)"):
            case.name = "LSTM seq2seq " + case.name[len("lstm (a) "):]
            case.row = "LSTM" + (" sparse" if case.rnn["density"] < 1 else "")
            out.append(case)
    for case in suite_sparse.cases(quick, shapes=[0], densities=densities or z["sweep"]):
        if case.name.startswith("sparse "):        # the sweep's convs (not its fused cases)
            case.setup = _keep(case.setup, ("tiramisu_py[sparse]", "torch"))
            out.append(case)
    return out


def _keep(setup, names):
    return lambda: {k: v for k, v in setup().items() if k in names}


def _random(seed, *shapes):
    rng = np.random.default_rng(seed)
    return [rng.standard_normal(s, dtype=np.float32) for s in shapes]


def _weight(seed, co, ci, density):
    """A conv weight scaled by its fan-in, pruned by magnitude to ``density``."""
    import schedules
    (w,) = _random(seed, (co, ci, 3, 3))
    w /= np.float32(np.sqrt(ci * 9))
    return w if density == 1 else schedules.prune_magnitude(w, density)


def _torch_pair(fn, tensors, quick):
    """``{"torch": eager, "torch.compile": compiled}`` of ``fn(*tensors)``
    (no grad; compiled lazily in the warm-up; left out by ``--quick``)."""
    import torch

    def eager():
        with torch.no_grad():
            return fn(*tensors)
    out = {"torch": eager}
    if not quick:
        compiled = functools.cache(lambda: torch.compile(fn, dynamic=False))

        def comp():
            with torch.no_grad():
                return compiled()(*tensors)
        out["torch.compile"] = comp
    return out


def _case(row, name, flops, density, make, quick):
    """A row's case: ``make()`` returns ``(ours, torch_fn, torch_args)``,
    ours a dict of our implementations; checked against torch eager."""
    made = functools.cache(make)

    @functools.cache
    def reference():
        import torch
        _, fn, args = made()
        with torch.no_grad():
            return fn(*args).numpy()

    def setup():
        ours, fn, args = made()
        return {**ours, **_torch_pair(fn, args, quick)}

    def check(out):
        return float(np.max(np.abs(np.asarray(out, np.float64) - reference())))

    case = Case(name + (f" sparse {density:.1%}" if density < 1 else " dense"), flops, setup,
                check)
    case.row = row + (" sparse" if density < 1 else "")
    return case


def _conv_row(row, n, ci, co, h, quick, density=1.0, src=None):
    def make():
        import torch
        import schedules
        F = torch.nn.functional
        (x,) = _random(1, (n, ci, src or h, src or h))
        w, (b,) = _weight(2, co, ci, density), _random(3, (co,))
        xt, wt, bt = (torch.from_numpy(a) for a in (x, w, b))
        wk = schedules.CSRWeights.from_dense(w) if density < 1 else wt   # converted once
        tag = "tiramisu_py" if density == 1 else "tiramisu_py[sparse]"
        if row == "Conv":
            return ({tag: lambda: schedules.conv2d(xt, wt, bt, padding=1)},
                    lambda x, w, b: F.conv2d(x, w, b, padding=1), (xt, wt, bt))
        if row == "Conv-ReLU-MaxPool":
            return ({tag: lambda: schedules.conv_relu_maxpool(xt, wk, bt, padding=1)},
                    lambda x, w, b: F.max_pool2d(F.relu(F.conv2d(x, w, b, padding=1)), 2),
                    (xt, wt, bt))
        return ({tag: lambda: schedules.resize_conv_relu_maxpool(xt, h, wk, bt, padding=1)},
                lambda x, w, b: F.max_pool2d(F.relu(F.conv2d(
                    F.interpolate(x, (h, h), mode="bilinear", align_corners=False), w, b,
                    padding=1)), 2), (xt, wt, bt))

    shape = f"{n}x{ci}x{h}x{h} -> {co}" if src is None else \
        f"{n}x{ci}x{src}x{src} (to {h}x{h}) -> {co}"
    return _case(row, f"{row} {shape}", 2.0 * n * co * h * h * ci * 9, density, make, quick)


def _vgg_row(n, ci, co, h, quick, density=1.0):
    def make():
        import torch
        import schedules
        F = torch.nn.functional
        (x, b1, b2) = _random(4, (n, ci, h, h), (co,), (co,))
        w1, w2 = _weight(5, co, ci, density), _weight(6, co, co, density)
        t = [torch.from_numpy(a) for a in (x, w1, b1, w2, b2)]
        wk = [schedules.CSRWeights.from_dense(w) for w in (w1, w2)] if density < 1 else t[1::2]
        tag = "tiramisu_py" if density == 1 else "tiramisu_py[sparse]"
        return ({tag: lambda: schedules.vgg_block(t[0], wk[0], t[2], wk[1], t[4])},
                lambda x, w1, b1, w2, b2: F.max_pool2d(F.relu(F.conv2d(
                    F.relu(F.conv2d(x, w1, b1, padding=1)), w2, b2, padding=1)), 2), t)
    flops = 2.0 * n * h * h * 9 * co * (ci + co)
    return _case("VGG block", f"VGG block {n}x{ci}x{h}x{h} -> {co} -> {co}", flops, density,
                 make, quick)


def _resnet_row(n, c, h, quick, density=1.0):
    def make():
        import torch
        import schedules
        F = torch.nn.functional
        rng = np.random.default_rng(7)
        (x, b1, b2) = _random(8, (n, c, h, h), (c,), (c,))
        w1, w2 = _weight(9, c, c, density), _weight(10, c, c, density)
        bn = [[rng.uniform(lo, hi, c).astype(np.float32) for lo, hi in
               ((0.5, 1.5), (-0.2, 0.2), (-0.2, 0.2), (0.5, 2.0))] for _ in range(2)]
        t = [torch.from_numpy(a) for a in (x, w1, b1, w2, b2)]
        tb = [[torch.from_numpy(a) for a in layer] for layer in bn]
        f1 = schedules.fold_batchnorm(w1, b1, *bn[0])           # once, as a converted model
        f2 = schedules.fold_batchnorm(w2, b2, *bn[1])
        if density < 1:
            f1, f2 = ((schedules.CSRWeights.from_dense(w), b) for w, b in (f1, f2))
        f1, f2 = ((w if density < 1 else torch.from_numpy(w), torch.from_numpy(b))
                  for w, b in (f1, f2))
        tag = "tiramisu_py" if density == 1 else "tiramisu_py[sparse]"

        def torch_block(x, w1, b1, w2, b2):
            def bn_(y, g, beta, mean, var):
                return F.batch_norm(y, mean, var, g, beta, training=False)
            y = F.relu(bn_(F.conv2d(x, w1, b1, padding=1), *tb[0]))
            return F.relu(bn_(F.conv2d(y, w2, b2, padding=1), *tb[1]) + x)
        return {tag: lambda: schedules.resnet_block(t[0], *f1, *f2)}, torch_block, t
    flops = 2.0 * 2 * n * h * h * 9 * c * c
    return _case("ResNet block", f"ResNet block {n}x{c}x{h}x{h}", flops, density, make, quick)


# ------------------------------------------------------------- the paper table
def paper_rows(report, cases_):
    """One entry per paper row and thread count: our fastest variant, torch,
    torch.compile (ms), the speed-ups and the paper's figure."""
    rows = []
    for c, case in zip(report["cases"], cases_):
        row = getattr(case, "row", None)
        if row is None:
            continue
        for n in map(str, report["threads"]):
            ours = [(r[n]["median_s"], impl) for impl, r in c["impls"].items()
                    if impl.startswith(harness.TIRAMISU) and r.get(n, {}).get("median_s")]
            t = {k: c["impls"].get(k, {}).get(n, {}).get("median_s")
                 for k in ("torch", "torch.compile")}
            best = min(ours) if ours else (None, None)
            paper, target = FIGURES[row]
            rows.append(dict(row=row, case=c["name"], threads=int(n), ours=best[1],
                             ours_ms=_ms(best[0]), torch_ms=_ms(t["torch"]),
                             compile_ms=_ms(t["torch.compile"]),
                             speedup_vs_torch=_ratio(t["torch"], best[0]),
                             speedup_vs_compile=_ratio(t["torch.compile"], best[0]),
                             paper=paper, target=target))
    return rows


def _ms(s):
    return None if s is None else s * 1e3


def _ratio(a, b):
    return a / b if a and b else None


def format_paper(rows):
    def fmt(v, spec, unit=""):
        width = int(spec.split(".")[0])
        return f"{'-':>{width}}{' ' * len(unit)}" if v is None else format(v, spec) + unit
    w = max(len(r["case"]) for r in rows)
    head = (f"{'case':{w}}  thr {'ours ms':>9} {'torch ms':>9} {'compile ms':>10} "
            f"{'vs torch':>8} {'vs compile':>10}  paper reported / target")
    lines = ["", "the paper's rows (ours: our fastest variant; torch: eager, oneDNN)", head,
             "-" * len(head)]
    for r in rows:
        lines.append(f"{r['case']:{w}}  {r['threads']:>3} {fmt(r['ours_ms'], '9.3f')} "
                     f"{fmt(r['torch_ms'], '9.3f')} {fmt(r['compile_ms'], '10.3f')} "
                     f"{fmt(r['speedup_vs_torch'], '7.2f', 'x')} "
                     f"{fmt(r['speedup_vs_compile'], '9.2f', 'x')}"
                     f"  {r['paper']} / {r['target']}")
    return "\n".join(lines)


def main(args) -> dict:
    kwargs = dict(quick=args.quick, densities=getattr(args, "densities", None))
    report = harness.run(cases, kwargs, **dict(harness.run_args(args), json_path=None))
    report["paper"] = paper_rows(report, cases(**kwargs))
    print(format_paper(report["paper"]))
    sweeps = suite_sparse.sweeps(report)
    report["break_even"] = {f"{shape} / {n}": suite_sparse.break_even(rows)
                            for (shape, n), rows in sorted(sweeps.items())}
    report["paper_break_even"] = PAPER_BREAK_EVEN
    print(f"\nbreak-even density, our sparse conv vs torch's dense conv2d (paper: "
          f"{PAPER_BREAK_EVEN}% against MKL-DNN; target >= 45%):")
    for key, be in report["break_even"].items():
        print(f"  {key} threads: {'never faster' if be is None else f'{be:.1f}%'}")
    if args.json:
        with open(args.json, "w") as f:
            json.dump(report, f, indent=1)
        print(f"wrote {args.json}")
    return report

"""The sparse suite: CSR sparse-weight convolution over a density sweep.

    tiramisu-py bench sparse [--densities 1,10,50] [--shapes 0,2] [--quick]
                             [--threads 1,2] [--repeats N] [--json PATH] [--png PATH]

Shapes (3x3, stride 1, padding 1, bias): VGG-16 512->512 at 14x14 and 28x28,
batch 8; ResNet-20-style 32->32 at 16x16 and 64->64 at 8x8, batch 64.
Densities (percent of nonzero weights, unstructured, uniform at random):
1, 2, 5, 10, 20, 30, 40, 50, 70, 100.  Columns per (shape, density):

  tiramisu_py[sparse]  schedules.sparse_conv2d on CSRWeights made once
  tiramisu_py[sparse, dense w]  (at 1% and 10%) schedules.sparse_conv2d on the
                       pruned dense weight as torch gives it: its CSR form is
                       made on the first call and found again in the
                       prepared-weights cache (its bytes compared) each call
  tiramisu_py[dense]   schedules.conv2d with the dense algorithm the find
                       step picks for the shape (dense algorithms do the same
                       work at every density)
  torch                F.conv2d (oneDNN), the baseline of the ratios
  torch.sparse         F.unfold (im2col) + torch.sparse.mm on the CSR weight
  scipy                NumPy im2col + scipy.sparse CSR @ (one thread)
                       (torch.sparse up to 50%, scipy up to 20%: IM2COL_MAX_DENSITY)

plus, at 1% and 10%, the fused block ``max_pool2d(relu(conv), 2)``:
tiramisu_py[fused] (schedules.sparse_conv_relu_maxpool) against
tiramisu_py[sparse]+torch (our sparse conv, then torch's relu and max_pool2d)
and torch eager.  After the table: the **break-even density** per shape and
thread count (where our sparse conv stops beating torch's dense conv2d,
interpolated linearly in the sweep), and with ``--png`` a plot of time
against density (log scale), break-even marked.  FLOP counts are the dense
ones (2*N*Co*Ho*Wo*Ci*9) at every density, so GFLOP/s are "effective".
``--quick``: one tiny shape, two densities (a smoke test).
"""
from __future__ import annotations

import functools
import json
import sys
import warnings

import numpy as np

from bench import harness
from bench.harness import Case

# (batch, in channels, out channels, height, width)
SHAPES = {False: ((8, 512, 512, 14, 14), (8, 512, 512, 28, 28),
                  (64, 32, 32, 16, 16), (64, 64, 64, 8, 8)),
          True: ((2, 16, 16, 10, 10),)}
DENSITIES = {False: (1, 2, 5, 10, 20, 30, 40, 50, 70, 100), True: (1, 50)}
FUSED_DENSITIES = (1, 10)
# the im2col baselines are left out above these densities (percent), where
# they lose to dense by far and one call takes seconds to tens of seconds
IM2COL_MAX_DENSITY = {"torch.sparse": 50, "scipy": 20}


def cases(quick=False, shapes=None, densities=None) -> list[Case]:
    out = []
    for i, shape in enumerate(SHAPES[quick]):
        if shapes is not None and i not in shapes:
            continue
        for d in densities or DENSITIES[quick]:
            out.append(_case("conv", shape, d))
        for d in FUSED_DENSITIES:
            if densities is None or d in densities:
                out.append(_case("fused", shape, d))
    return out


def _name(op, shape, density):
    n, ci, co, h, w = shape
    return f"{'sparse' if op == 'conv' else 'sparse+relu+pool'} {n}x{ci}x{h}x{w} -> {co} @ {density}%"


def _case(op, shape, density):
    n, ci, co, h, w = shape

    @functools.cache
    def inputs():
        rng = np.random.default_rng(density)
        x = rng.standard_normal((n, ci, h, w), dtype=np.float32)
        wt = rng.standard_normal((co, ci, 3, 3), dtype=np.float32) / np.float32(np.sqrt(ci * 9 * density / 100))
        wt *= rng.random(wt.shape) < density / 100
        return x, wt.astype(np.float32), rng.standard_normal(co, dtype=np.float32)

    @functools.cache
    def reference():
        import torch
        F = torch.nn.functional
        x, wt, b = (torch.from_numpy(a) for a in inputs())
        y = F.conv2d(x, wt, b, stride=1, padding=1)
        return (y if op == "conv" else F.max_pool2d(F.relu(y), 2)).numpy()

    def setup():
        import schedules
        x, wt, b = inputs()
        csr = schedules.CSRWeights.from_dense(wt)
        impls = {}
        if op == "conv":
            impls["tiramisu_py[sparse]"] = lambda: schedules.sparse_conv2d(x, csr, b, stride=1, padding=1)
            if density in FUSED_DENSITIES:      # the pruned weight as torch gives it
                impls["tiramisu_py[sparse, dense w]"] = lambda: schedules.sparse_conv2d(
                    x, wt, b, stride=1, padding=1)
            algo = functools.cache(lambda: _best_dense(x, wt, b))      # found in the warm-up
            impls["tiramisu_py[dense]"] = lambda: schedules.conv2d(x, wt, b, stride=1, padding=1,
                                                                   algo=algo())
        else:
            impls["tiramisu_py[fused]"] = lambda: schedules.sparse_conv_relu_maxpool(x, csr, b, pool=2, padding=1)
        impls.update(_torch_impls(op, x, wt, b, csr))
        if op == "fused" or density > IM2COL_MAX_DENSITY["torch.sparse"]:
            impls.pop("torch.sparse", None)
        if op == "conv" and density <= IM2COL_MAX_DENSITY["scipy"]:
            impls.update(_scipy_impl(x, csr, b))
        return impls

    return Case(_name(op, shape, density), 2.0 * n * co * h * w * ci * 9, setup,
                lambda out: float(np.max(np.abs(np.asarray(out) - reference()))))


def _best_dense(x, wt, b):
    """The dense algorithm conv2d's find step picks for this shape (found on
    a fully dense weight, so "sparse" is not a candidate; remembered)."""
    from schedules.core.find import find
    from schedules.problems.conv import ConvProblem
    from schedules.registry import SOLVERS
    full = np.random.default_rng(1).standard_normal(wt.shape, dtype=np.float32)
    p, args = ConvProblem.from_call("conv2d", x, full, b, 1, 1, 1, 1)
    return find(p, SOLVERS["conv2d"], args, call="conv2d").name


def _torch_impls(op, x, wt, b, csr):
    try:
        import torch
    except ImportError:
        return {}
    import schedules
    F = torch.nn.functional
    xt, wtt, bt = (torch.from_numpy(a) for a in (x, wt, b))
    n, ci, h, w = x.shape
    co = wt.shape[0]
    if op == "fused":
        def ours_then_torch():
            return F.max_pool2d(F.relu(schedules.sparse_conv2d(xt, csr, bt, stride=1, padding=1)), 2)
        return {"tiramisu_py[sparse]+torch": ours_then_torch,
                "torch": lambda: F.max_pool2d(F.relu(F.conv2d(xt, wtt, bt, stride=1, padding=1)), 2)}
    with warnings.catch_warnings():         # "beta", "invariant checks disabled"
        warnings.simplefilter("ignore", UserWarning)
        w_csr = torch.sparse_csr_tensor(torch.from_numpy(csr.rowptr.astype(np.int64)),
                                        torch.from_numpy(csr.colidx.astype(np.int64)),
                                        torch.from_numpy(csr.values), (co, ci * 9),
                                        check_invariants=False)

    def torch_sparse():
        cols = F.unfold(xt, 3, padding=1)                          # (N, Ci*9, H*W)
        cols = cols.permute(1, 0, 2).reshape(ci * 9, n * h * w)
        y = torch.sparse.mm(w_csr, cols) + bt[:, None]
        return y.reshape(co, n, h, w).permute(1, 0, 2, 3).contiguous()
    return {"torch": lambda: F.conv2d(xt, wtt, bt, stride=1, padding=1),
            "torch.sparse": torch_sparse}


def _scipy_impl(x, csr, b):
    try:
        import scipy.sparse as sps
    except ImportError:
        return {}
    n, ci, h, w = x.shape
    co = csr.shape[0]
    m = sps.csr_matrix((csr.values, csr.colidx, csr.rowptr), shape=(co, ci * 9))

    def run():
        xp = np.pad(x, ((0, 0), (0, 0), (1, 1), (1, 1)))
        win = np.lib.stride_tricks.sliding_window_view(xp, (3, 3), axis=(2, 3))  # n,ci,h,w,3,3
        cols = np.ascontiguousarray(win.transpose(1, 4, 5, 0, 2, 3)).reshape(ci * 9, n * h * w)
        y = m @ cols + b[:, None]
        return y.reshape(co, n, h, w).transpose(1, 0, 2, 3)
    return {"scipy": run}


# ------------------------------------------------------------- break-even, plot
def sweeps(report):
    """``{(shape, threads): [(density, {impl: ms})]}`` of the conv cases."""
    out = {}
    for c in report["cases"]:
        if not c["name"].startswith("sparse "):
            continue
        shape, density = c["name"][len("sparse "):].rsplit(" @ ", 1)
        for impl, per_n in c["impls"].items():
            for n, r in per_n.items():
                if r["median_s"]:
                    row = out.setdefault((shape, n), {}).setdefault(float(density[:-1]), {})
                    row[impl] = r["median_s"] * 1e3
    return {k: sorted(v.items()) for k, v in out.items()}


def break_even(rows, ours="tiramisu_py[sparse]", base="torch"):
    """The density (percent) where ``ours`` stops beating ``base``: linear
    interpolation of the time ratio between the last density it wins and the
    first it loses; ``None`` if it never wins; the last density if it never loses."""
    pts = [(d, t[base] / t[ours]) for d, t in rows if ours in t and base in t]
    if not pts or pts[0][1] < 1:
        return None
    for (d0, r0), (d1, r1) in zip(pts, pts[1:]):
        if r1 < 1 <= r0:
            return d0 + (d1 - d0) * (r0 - 1) / (r0 - r1)
    return pts[-1][0]


def plot(report, sweeps, path):
    try:
        import matplotlib
    except ImportError:
        print(f"bench: matplotlib is not installed, so {path} was not written", file=sys.stderr)
        return False
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    keys = sorted(sweeps)
    fig, axes = plt.subplots(1, len(keys), squeeze=False, figsize=(4.2 * len(keys), 3.8))
    for ax, key in zip(axes[0], keys):
        rows = sweeps[key]
        impls = list(dict.fromkeys(i for _, t in rows for i in t))
        for k, impl in enumerate(impls):
            pts = [(d, t[impl]) for d, t in rows if impl in t]
            ax.plot([d for d, _ in pts], [v for _, v in pts], "o-", ms=3, label=impl, color=f"C{k}")
        be = report["break_even"].get(f"{key[0]} / {key[1]}")
        if be is not None:
            ax.axvline(be, color="k", ls="--", lw=1)
            ax.text(be, ax.get_ylim()[1], f" break-even {be:.0f}%", va="top", fontsize=8)
        ax.set_xscale("log")
        ax.set_yscale("log")
        ax.set_xlabel("density (%)")
        ax.set_ylabel("ms (median)")
        ax.set_title(f"{key[0]}, {key[1]} thr", fontsize=9)
        ax.grid(alpha=0.3, which="both")
    axes[0, 0].legend(fontsize="x-small")
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return True


# ------------------------------------------------------------- command line
def add_arguments(p):
    p.add_argument("--densities", metavar="1,10,50",
                   type=lambda s: [int(t) for t in s.split(",") if t.strip()],
                   help="sparse suite: densities in percent (default 1,2,5,10,20,30,40,50,70,100)")


def main(args) -> dict:
    report = harness.run(cases, dict(quick=args.quick, shapes=args.shapes,
                                     densities=getattr(args, "densities", None)),
                         **dict(harness.run_args(args), png_path=None, json_path=None))
    by_shape = sweeps(report)
    report["break_even"] = {f"{shape} / {n}": break_even(rows)
                            for (shape, n), rows in sorted(by_shape.items())}
    print("\nbreak-even density (our sparse conv vs torch dense conv2d):")
    for key, be in report["break_even"].items():
        shape, n = key.split(" / ")
        text = "never faster" if be is None else f"{be:.1f}%"
        print(f"  {shape}, {n} thread{'s' * (n != '1')}: {text}")
    for c in report["cases"]:
        if c["name"].startswith("sparse+relu+pool"):
            for n, r in c["impls"].get("tiramisu_py[fused]", {}).items():
                other = c["impls"].get("tiramisu_py[sparse]+torch", {}).get(n, {})
                if r["median_s"] and other.get("median_s"):
                    print(f"  fused vs our sparse conv + torch relu/pool, {c['name'][17:]}, {n} thr: "
                          f"{other['median_s'] / r['median_s']:.2f}x")
    if args.json:
        with open(args.json, "w") as f:
            json.dump(report, f, indent=1)
        print(f"wrote {args.json}")
    if args.png and plot(report, by_shape, args.png):
        print(f"wrote {args.png}")
    return report

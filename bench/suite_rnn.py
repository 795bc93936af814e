"""The ``rnn`` suite: multilayer LSTM and GRU (``schedules.lstm`` / ``gru``)
against ``torch.nn.LSTM`` / ``torch.nn.GRU`` and ``torch.compile`` of a
hand-written cell loop.

Sizes (layers, hidden, input, T, batch): (a) the TIRAMISU paper's seq-to-seq
layer stack 4 x 1024, input 1024, T = 100, batch 1; (b) 4 x 512, T = 100,
batch 64; (c) 2 x 256, T = 50, batch 16; and the LSTM (a) with 15% of its
weights nonzero (uniform), ours with CSR weights against torch with the dense
zero-filled ones.  Implementations: ``tiramisu_py`` (schedule="auto": the find
step's choice), ``tiramisu_py[layer]`` and ``tiramisu_py[wavefront]`` forced,
``tiramisu_py[csr]`` (sparse), ``tiramisu_py[module]`` (the module a converted
model holds, ``schedules.nn.LSTM/GRU.from_torch(m)(x)``), ``torch`` (nn.LSTM/GRU, no grad) and
``torch.compile`` (the cell step compiled, the loops over layers and steps in
Python, each layer's input product one matmul; left out by ``--quick``, whose
tiny sizes then run in seconds once our kernels are in the disk cache).  Our rows
time the documented call, ``schedules.lstm(x, m.all_weights)`` with torch's tensors
(``sparse=True`` for the CSR row): the library prepares the weights on the first
call and reuses them while the tensors are unchanged; ``[prepacked]`` rows pass
the internal ``schedules.RNNWeights`` object instead, labelled as such.

``--dtype bf16`` / ``fp16`` (the dense cases; needs torch): the module's weights
and the input in that dtype, ours through the same documented call (the
weights kept in their format, float32 sums and states) against torch's
module in that dtype (oneDNN); ``tiramisu_py[float32]`` and
``torch[float32]``: the same rounded weights in float32, so the table shows
the reduced format's gain over our own float32 kernel.  The check is against
the float32 reference of the rounded weights.

FLOP counts: 2 * T * B * G * H * (I_l + H) per layer (G = 4 gates for the
LSTM, 3 for the GRU; nonlinearities not counted); the sparse case counts the
dense FLOPs (its ratio is a speed-up).  After the table, the achieved
bandwidth of each implementation at batch 1 (the weights each schedule must
read per call over the median time) is printed against this host's measured
memory bandwidth (NumPy copy, 1 thread; a 2-thread read with torch).
"""
from __future__ import annotations

import functools
import json
import time

import numpy as np

from bench.harness import Case

# (name, cell, layers, hidden, input, T, batch, density)
SIZES = {False: (("a", 4, 1024, 1024, 100, 1), ("b", 4, 512, 512, 100, 64),
                 ("c", 2, 256, 256, 50, 16)),
         True: (("a", 2, 16, 16, 5, 1), ("b", 2, 16, 12, 4, 3), ("c", 1, 8, 8, 3, 2))}
DENSITY = 0.15


def cases(quick=False, dtype="float32"):
    """LSTM and GRU at each size, then (float32) the sparse LSTM at size (a)."""
    out = []
    for tag, *size in SIZES[quick]:
        out += [_case(cell, tag, *size, quick=quick, dtype=dtype) for cell in ("lstm", "gru")]
    if dtype != "float32":
        return out
    tag, *size = SIZES[quick][0]
    return out + [_case("lstm", tag, *size, density=DENSITY, quick=quick)]


def _flops(cell, L, H, I, T, B):
    G = 4 if cell == "lstm" else 3
    return sum(2.0 * T * B * G * H * ((I if l == 0 else H) + H) for l in range(L))


def weight_bytes(cell, L, H, I, T, impl, density=1.0, itemsize=4):
    """Bytes of weights an implementation reads per call at batch 1: the
    recurrent matrices every step, the input ones once (hoisted GEMM) or
    once per chunk of steps (the wavefront's layers of input size H); CSR
    reads a value and a column index per nonzero: the recurrent matrices
    every step, the input ones once (the hoisted projection).  ``itemsize``:
    the bytes of a weight (2 in bfloat16 / float16)."""
    from schedules.blocks.rnn_cells import chunk_of
    G = 4 if cell == "lstm" else 3
    ih = [G * H * (I if l == 0 else H) * itemsize for l in range(L)]
    hh = G * H * H * itemsize
    if "csr" in impl:
        return density * (sum(ih) + L * T * hh) * 2
    if "wavefront" in impl:
        first = 0 if I == H else 1
        return first * ih[0] + (L - first) * T // chunk_of(T) * ih[-1] + L * T * hh
    return sum(ih) + L * T * hh


def _case(cell, tag, L, H, I, T, B, density=1.0, quick=False, dtype="float32"):
    import examples.rnn as ref

    @functools.cache
    def inputs():
        weights = ref.random_weights(cell, L, I, H, density=density)
        x = np.random.default_rng(1).standard_normal((T, B, I)).astype(np.float32)
        if dtype != "float32":          # the values the reduced format holds, in float32
            import torch
            t = getattr(torch, dtype)
            weights = [[torch.from_numpy(w).to(t).float().numpy() for w in layer]
                       for layer in weights]
            x = torch.from_numpy(x).to(t).float().numpy()
        return x, weights

    @functools.cache
    def reference():
        return ref.reference(cell, *inputs())[0]

    def setup():
        import schedules
        x, weights = inputs()
        op = schedules.lstm if cell == "lstm" else schedules.gru
        module = _torch_module(cell, x, weights)
        if dtype != "float32":
            return _reduced(cell, op, x, module, dtype)
        # the documented call: the input and the weights as torch gives them
        # (module.all_weights; NumPy's lists without torch), prepared once by
        # the library's cache; "[prepacked]": the internal RNNWeights object
        if module is not None:
            import torch
            xd, wd = torch.from_numpy(x), module.all_weights
        else:
            xd, wd = x, weights

        def documented(**kw):
            if module is None:
                return op(xd, wd, **kw)[0]
            with torch.no_grad():
                return op(xd, wd, **kw)[0]
        if density < 1:
            packed = schedules.RNNWeights(weights, cell, sparse=True)
            ours = {"tiramisu_py[csr]": lambda: documented(sparse=True),
                    "tiramisu_py[csr, prepacked]": lambda: op(x, packed, schedule="layer")[0]}
        else:
            packed = schedules.RNNWeights(weights, cell)
            ours = {"tiramisu_py": documented,
                    "tiramisu_py[prepacked]": lambda: op(x, packed)[0]}
            if module is not None:          # the module a converted model holds
                ours["tiramisu_py[module]"] = _module_call(cell, module, xd)
            ours.update({f"tiramisu_py[{s}]": (lambda s=s: documented(schedule=s))
                         for s in schedules.RNN_SCHEDULES
                         if s in _applicable(cell, x, packed)})
        return {**ours, **_torch_impls(cell, x, weights, module,
                                       compiled=density == 1 and not quick)}

    name = f"{cell} ({tag}) {L}x{H} in {I} T={T} B={B}" + (
        f" {density:.0%} dense" if density < 1 else "") + (
        f" {dtype}" if dtype != "float32" else "")
    case = Case(name, _flops(cell, L, H, I, T, B), setup,
                lambda out: float(np.max(np.abs(np.asarray(out, np.float64) - reference()))))
    case.rnn = dict(cell=cell, L=L, H=H, I=I, T=T, B=B, density=density, dtype=dtype)
    return case


def _reduced(cell, op, x, module, dtype):
    """The implementations of a bfloat16 / float16 case: ours and torch's in
    that dtype (the documented call, weights as the module holds them), and
    both in float32 on the same values."""
    import torch
    import schedules
    if module is None:
        raise RuntimeError(f"--dtype {dtype}: needs torch")
    t = getattr(torch, dtype)
    low = (torch.nn.LSTM if cell == "lstm" else torch.nn.GRU)(
        module.input_size, module.hidden_size, module.num_layers).to(t)
    low.load_state_dict(module.state_dict())
    x32, xl = torch.from_numpy(x), torch.from_numpy(x).to(t)

    def run(fn, *args, **kw):
        def call():
            with torch.no_grad():
                out = fn(*args, **kw)[0]
            return out.float()
        return call
    out = {"tiramisu_py": run(op, xl, low.all_weights),
           "tiramisu_py[float32]": run(op, x32, module.all_weights)}
    packed = schedules.RNNWeights(low.all_weights, cell)
    out.update({f"tiramisu_py[{s}]": run(op, xl, low.all_weights, schedule=s)
                for s in schedules.RNN_SCHEDULES if s in _applicable(cell, xl, packed)})
    return {**out, "torch": run(low, xl), "torch[float32]": run(module, x32)}


def _module_call(cell, module, x):
    """``schedules.nn.LSTM/GRU.from_torch(module)(x)[0]`` without grad."""
    import torch

    import schedules.nn
    ours = (schedules.nn.LSTM if cell == "lstm" else schedules.nn.GRU).from_torch(module)

    def call():
        with torch.no_grad():
            return ours(x)[0]
    return call


def _torch_module(cell, x, weights):
    """A torch.nn.LSTM/GRU holding ``weights``; None without torch."""
    try:
        import torch
    except ImportError:
        return None
    L, H, I = len(weights), weights[0][1].shape[1], x.shape[2]
    module = (torch.nn.LSTM if cell == "lstm" else torch.nn.GRU)(I, H, L)
    with torch.no_grad():
        for layer, ws in zip(module.all_weights, weights):
            for p, w in zip(layer, ws):
                p.copy_(torch.from_numpy(w))
    return module


def _torch_impls(cell, x, weights, module, compiled=True):
    """``{"torch": nn.LSTM/GRU, "torch.compile": the compiled cell loop}``
    on the same weights (zero-copy tensors); empty without torch."""
    if module is None:
        return {}
    import torch
    xt = torch.from_numpy(x)
    tw = [[torch.from_numpy(w) for w in layer] for layer in weights]

    def eager():
        with torch.no_grad():
            return module(xt)[0]

    out = {"torch": eager}
    if compiled:
        step = functools.cache(lambda: torch.compile(_lstm_step if cell == "lstm" else _gru_step,
                                                     dynamic=False))

        def loop():
            with torch.no_grad():
                seq = xt
                for w_ih, w_hh, b_ih, b_hh in tw:
                    xp = torch.matmul(seq, w_ih.t()) + b_ih          # hoisted per layer
                    h = seq.new_zeros(seq.shape[1], w_hh.shape[1])
                    c, outs = torch.zeros_like(h), []
                    for t in range(seq.shape[0]):
                        h, c = step()(xp[t], h, c, w_hh, b_hh)
                        outs.append(h)
                    seq = torch.stack(outs)
                return seq
        out["torch.compile"] = loop
    return out


def _lstm_step(xp, h, c, w_hh, b_hh):
    import torch
    i, f, g, o = (xp + torch.matmul(h, w_hh.t()) + b_hh).chunk(4, dim=1)
    c = torch.sigmoid(f) * c + torch.sigmoid(i) * torch.tanh(g)
    return torch.sigmoid(o) * torch.tanh(c), c


def _gru_step(xp, h, c, w_hh, b_hh):
    import torch
    ri, zi, ni = xp.chunk(3, dim=1)
    rh, zh, nh = (torch.matmul(h, w_hh.t()) + b_hh).chunk(3, dim=1)
    r, z = torch.sigmoid(ri + rh), torch.sigmoid(zi + zh)
    return (1 - z) * torch.tanh(ni + r * nh) + z * h, c


# ---------------------------------------------------------- bandwidth report
def host_bandwidth(mib=64, l3_mib=4):
    """{"copy_GBps": NumPy copy (read + write, 1 thread), "read_GBps": a
    parallel sum compiled by tiramisu_py (all cores) of a ``mib``-MiB array,
    far beyond the L3, "l3_read_GBps": the same over ``l3_mib`` MiB, read
    again and again from the L3}."""
    import tiramisu_py as tp
    # 32 running sums per row (4 SIMD vectors of 8), kept in registers
    f = tp.Function("stream_read", params=["R", "C"])
    i, jb, v = f.var("i", 0, "R"), f.var("jb", 0, "C"), f.var("v", 0, 32)
    src = f.input("a", ("R", "C * 32"), tp.float32)
    part = f.computation("part", [i, v], 0.0, dtype=tp.float32)
    part[i, v] += src[i, jb * 32 + v]
    part.update.interchange("v", "jb")
    part.update.split("v", 8, names=("v0", "v1"))
    part.update.unroll("v0")
    part.update.vectorize("v1", 8)
    part.update.accumulate_locally("jb", allow_reassociation=True)
    part.update.parallelize("i")
    read = f.compile(target="llvm")          # the C backend keeps the sums in memory

    def best(fn, n=5):
        fn()
        t = []
        for _ in range(n):
            t0 = time.perf_counter()
            fn()
            t.append(time.perf_counter() - t0)
        return min(t)
    a = np.ones(((mib << 20) // 4 // 4096, 4096), np.float32)
    b = np.empty_like(a)
    small = a[: (l3_mib << 20) // 4 // 4096]
    return {"l3_MiB": l3_mib, "copy_GBps": 2 * a.nbytes / best(lambda: np.copyto(b, a)) / 1e9,
            "read_GBps": a.nbytes / best(lambda: read(a=a)) / 1e9,
            "l3_read_GBps": 10 * small.nbytes / best(lambda: [read(a=small) for _ in range(10)])
            / 1e9}


def annotate(report, cases_):
    """Adds ``bandwidth_GBps`` to each batch-1 result and ``host_bandwidth``
    to ``report``; returns the text of the bandwidth table."""
    from schedules.host import host
    hb = report["host_bandwidth"] = host_bandwidth()
    lines = [f"achieved weight bandwidth at batch 1 (GB/s; host: NumPy copy "
             f"{hb['copy_GBps']:.1f} GB/s 1 thread"
             + f", parallel read {hb['read_GBps']:.1f} GB/s"
             + f", {hb['l3_MiB']} MiB from L3 {hb['l3_read_GBps']:.1f} GB/s"
             + f", L3 {host().l3 >> 20} MiB):"]
    for case, c in zip(cases_, report["cases"]):
        s = getattr(case, "rnn", None)
        if not s or s["B"] != 1:
            continue
        for impl, per_n in c["impls"].items():
            if impl == "torch.compile" or impl == "tiramisu_py":
                continue
            low = s.get("dtype", "float32") != "float32" and "float32" not in impl
            nbytes = weight_bytes(s["cell"], s["L"], s["H"], s["I"], s["T"], impl, s["density"],
                                  2 if low else 4)
            cols = []
            for n, r in per_n.items():
                if r.get("median_s"):
                    r["bandwidth_GBps"] = nbytes / r["median_s"] / 1e9
                    cols.append(f"{n} thr {r['bandwidth_GBps']:6.1f}")
            lines.append(f"  {c['name']:<42} {impl:<24} {nbytes / 1e9:5.2f} GB  " + "  ".join(cols))
    return "\n".join(lines + find_choices(report, cases_))


def _applicable(cell, x, packed):
    """The CPU schedules (solvers) that apply to this call."""
    from schedules.problems.rnn import RnnProblem
    from schedules.registry import SOLVERS
    p, _ = RnnProblem.from_call(cell, x, packed, None, None, False, None)
    return [s.name for s in SOLVERS[cell] if s.applicable(p) is True]


def find_choices(report, cases_):
    """Lines saying which schedule the find step chose per case and thread
    count (from the tuning store), with the times it measured; also stored
    in the report's cases as ``find``."""
    from schedules.core import find
    records = {}
    for key, value in find.records().items():
        k = json.loads(key)
        if k["op"] in ("lstm", "gru"):
            records[(k["op"], k["layers"], k["input_size"], k["hidden"], k["T"], k["B"],
                     k["sparse"], k["threads"], k.get("dtype", "float32"))] = value
    lines = ["find step (schedule=\"auto\"): choice and its timings (ms) per thread count:"]
    for case, c in zip(cases_, report["cases"]):
        s = getattr(case, "rnn", None)
        if not s or s["density"] < 1:
            continue
        found = {}
        for n in report["threads"]:
            r = records.get((s["cell"], s["L"], s["I"], s["H"], s["T"], s["B"], False, n,
                             s.get("dtype", "float32")))
            if r:
                found[str(n)] = r
                times = ", ".join(f"{k} {v * 1e3:.0f}" for k, v in r["seconds"].items())
                lines.append(f"  {c['name']:<42} {n} thr: {r['algo']:<10} ({times})")
        c["find"] = found
    return lines

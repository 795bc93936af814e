"""The multilayer LSTM (and GRU) on a GPU: the wavefront over time x layers,
written in the public language only, with ``torch.nn.LSTM``'s (``GRU``'s)
semantics.

The algorithm (``function(L, T, B, I, H)``), gate order i, f, g, o::

    xp[t, b, g]    = sum_k x[t, b, k] * w_ih0T[k, g]                (layer 0's input
                                                                   projection, hoisted)
    z[l, t, b, q, j] = bias[l, g] + (l == 0 ? xp[t, b, g] : 0)     (g = q * H + j)
                     + sum_k whT[l, k, g] * h[l + 1, t, b, k]       (previous step)
                     + (l > 0 ? sum_k wiT[l, k, g] * h[l, t + 1, b, k] : 0)   (layer below)
    c[l, t + 1, b, j] = sig(z_f) * c[l, t, b, j] + sig(z_i) * tanh(z_g)
    h[l + 1, t + 1, b, j] = sig(z_o) * tanh(c[l, t + 1, b, j])

``h`` holds every layer's outputs at every step (``h[0]`` is unused: layer
0 reads ``xp``), ``c`` every cell state; ``h[l + 1, 0]`` and ``c[l, 0]`` are
``h0`` / ``c0``.  Weights are transposed (``[k][gate row]``) so that the
threads of a warp, consecutive hidden units, read consecutive words.

The GRU (``cell="gru"``, gates r, z, n) runs the same four gate sums, with
its weights packed as four gate blocks: input rows [r, z, n, 0], hidden rows
[r, z, 0, n] (the zero blocks are read: a quarter of the weight traffic is
waste), so ``z_2`` is n's input part (+ b_in) and ``z_3`` its hidden part
(+ b_hn); the update is ``h' = (1 - sig(z_1)) * tanh(z_2 + sig(z_0) * z_3)
+ sig(z_1) * h``, no ``c``.

The schedule (``schedule(f, hc, bc)``)::

    xp:     one launch: gate rows in chunks of xp_rows on block.z / thread.x,
            b on block.y, t on block.x, k serial per thread
    inits:  one launch each (h0, c0 copied into h[l + 1, 0], c[l, 0])
    d (anti-diagonal = t + l, host loop: one launch per anti-diagonal)
      l   -> block.x                      (the layers of the anti-diagonal)
      j0  -> block.y                      (a chunk of hc hidden units)
      b0  -> block.z                      (a chunk of bc batch rows)
        b1 -> thread.z, q -> thread.y, j1 -> thread.x    (one gate sum per thread,
          k serial                                        the four gates of a unit
                                                          in four threads)
        barrier                           (placed by the GPU legality check: the
                                           cell update reads the other gates)
        b1 -> thread.z, j1 -> thread.x    (c and h of one unit, thread.y == 0)

Layer ``l`` at step ``t`` reads ``h[l, t + 1]`` (layer ``l - 1`` at step
``t``) and ``h[l + 1, t]`` (itself at step ``t - 1``): both on the previous
anti-diagonal, hence written by the previous launch; the blocks of one
launch read only data written before it and write disjoint slices of ``h``,
``c`` and the gate buffer, so the block loops carry no dependence and the
check accepts them (and refuses layers on blocks without the skew).
"""
from __future__ import annotations

import numpy as np

import tiramisu_py as tp

from ..blocks.rnn_common import RnnSolver
from ..core.arrays import positive_int
from ..core.kernels import cuda_kernel
from ..problems.rnn import TENSORS
from ..problems.rnn_device import DeviceArrays

HC = 32          # hidden units per block (threads along x)
BC = 2           # batch rows per block (threads along z): 4 * HC * BC threads
XP_ROWS = 128    # gate rows per block of the input projection


def algorithm(L, T, B, I, H, cell="lstm"):
    """The unscheduled multilayer LSTM or GRU (``cell``; sizes fixed: the GPU
    schedule needs constant thread extents)."""
    if cell not in ("lstm", "gru"):
        raise ValueError(f"cell must be 'lstm' or 'gru', got {cell!r}")
    for name, v in (("L", L), ("T", T), ("B", B), ("I", I), ("H", H)):
        if not isinstance(v, int) or isinstance(v, bool) or v < 1:
            raise ValueError(f"{name}: expected a positive int, got {v!r}")
    f = tp.Function(f"{cell}_gpu", params={"L": L, "T": T, "B": B, "I": I, "H": H})
    l, t, b = f.var("l", 0, "L"), f.var("t", 0, "T"), f.var("b", 0, "B")
    q, j, g = f.var("q", 0, 4), f.var("j", 0, "H"), f.var("g", 0, "4 * H")
    k, ki = f.var("k", 0, "H"), f.var("ki", 0, "I")
    Hs = f.param("H")
    x = f.input("x", ("T", "B", "I"), tp.float32)
    w_ih0T = f.input("w_ih0T", ("I", "4 * H"), tp.float32)
    wiT = f.input("wiT", ("L", "H", "4 * H"), tp.float32)      # wiT[0] unused
    whT = f.input("whT", ("L", "H", "4 * H"), tp.float32)
    bias = f.input("bias", ("L", "4 * H"), tp.float32)         # b_ih + b_hh
    h0 = f.input("h0", ("L", "B", "H"), tp.float32)
    h = f.buffer("h", ("L + 1", "T + 1", "B", "H"), tp.float32, output=True)
    zb = f.buffer("gates", ("L", "B", "4", "H"), tp.float32)

    xp = f.computation("xp", [t, b, g], 0.0, dtype=tp.float32)
    xp[t, b, g] += x[t, b, ki] * w_ih0T[ki, g]
    f.computation("h_init", [l, b, j], h0[l, b, j]).store_in(h, [l + 1, 0, b, j])
    if cell == "lstm":
        c0 = f.input("c0", ("L", "B", "H"), tp.float32)
        c = f.buffer("c", ("L", "T + 1", "B", "H"), tp.float32, output=True)
        f.computation("c_init", [l, b, j], c0[l, b, j]).store_in(c, [l, 0, b, j])
    with f.nest(l, t):
        gi = q * Hs + j
        z = f.computation("z", [l, t, b, q, j],
                          bias[l, gi] + tp.select(l == 0, xp[t, b, gi], 0.0)
                          ).store_in(zb, [l, b, q, j])
        z[l, t, b, q, j] += (whT[l, k, gi] * h[l + 1, t, b, k]
                             + tp.select(l > 0, wiT[l, k, gi] * h[l, t + 1, b, k], 0.0))
        if cell == "gru":
            zz = tp.sigmoid(zb[l, b, 1, j])
            f.computation("h_step", [l, t, b, j],
                          (1.0 - zz) * tp.tanh(zb[l, b, 2, j] + tp.sigmoid(zb[l, b, 0, j])
                                               * zb[l, b, 3, j]) + zz * h[l + 1, t, b, j]
                          ).store_in(h, [l + 1, t + 1, b, j])
            return f
        f.computation("c_step", [l, t, b, j],
                      tp.sigmoid(zb[l, b, 1, j]) * c[l, t, b, j]
                      + tp.sigmoid(zb[l, b, 0, j]) * tp.tanh(zb[l, b, 2, j])
                      ).store_in(c, [l, t + 1, b, j])
        f.computation("h_step", [l, t, b, j],
                      tp.sigmoid(zb[l, b, 3, j]) * tp.tanh(c[l, t + 1, b, j])
                      ).store_in(h, [l + 1, t + 1, b, j])
    return f


def wavefront(s, layer="l", time="t"):
    """The GPU wavefront of a layers x time recurrence statement ``s``: time
    skewed by the layer (``time`` becomes the anti-diagonal ``time + layer``)
    and moved outermost, where it stays a host loop (one launch per
    anti-diagonal), and the layers of an anti-diagonal on ``block.x``."""
    s.skew(layer, time, 1)
    s.interchange(layer, time)
    s.bind(layer, "block.x")
    return s


def _chunk(extent, limit):
    """A chunk size <= ``limit`` giving at least two chunks when ``extent``
    allows (more blocks for small sizes)."""
    return max(1, min(limit, -(-extent // 2)))


def schedule(f, hc=None, bc=None, xp_rows=None):
    """Applies the wavefront GPU schedule to :func:`algorithm`'s Function:
    ``hc`` hidden units and ``bc`` batch rows per block of the step kernel
    (default :data:`HC`, :data:`BC`, smaller for sizes under two chunks),
    ``xp_rows`` gate rows per block of the input projection."""
    for name, v in (("hc", hc), ("bc", bc), ("xp_rows", xp_rows)):
        if v is not None:
            positive_int("gpu_rnn", name, v)
    cs = f.computations
    L, H, B = f.fixed["L"], f.fixed["H"], f.fixed["B"]
    hc = _chunk(H, HC) if hc is None else min(hc, H)
    bc = _chunk(B, BC) if bc is None else min(bc, B)
    # the hoisted input projection: a thread per (t, b, gate row)
    xp = cs["xp"]
    rows = _chunk(4 * H, xp_rows or XP_ROWS)
    for s in (xp, xp.update):
        s.split("g", rows)
        s.reorder("t", "b", "g0", "g1")
        s.bind("t", "block.x")          # x: up to 2^31 - 1 blocks (y, z: 65535)
        s.bind("b", "block.y")
        s.bind("g0", "block.z")
        s.bind("g1", "thread.x")
    xp.update.after(xp, "g1")
    lstm = "c_step" in cs
    for name in ("h_init", "c_init") if lstm else ("h_init",):
        cs[name].bind("l", "block.x")
        _units(cs[name], ("l",), hc, bc)
    z = cs["z"]
    cell = [cs["c_step"], cs["h_step"]] if lstm else [cs["h_step"]]
    for s in (z, z.update, *cell):
        _units(wavefront(s), ("t", "l"), hc, bc)
    z.update.after(z, "j1")
    cell[0].after(z.update, "b0")
    if lstm:
        cs["h_step"].after(cs["c_step"], "j1")
    return f


def _units(s, outer, hc, bc):
    """Hidden units in chunks of ``hc`` (block.y, thread.x), batch rows in
    chunks of ``bc`` (block.z, thread.z), the gates (if ``s`` has them) on
    thread.y; ``outer`` are the loops kept outside."""
    s.split("j", hc)
    s.split("b", bc)
    gate = ["q"] if "q" in [v.name for v in s.vars] else []
    s.reorder(*outer, "j0", "b0", "b1", *gate, "j1")
    s.bind("j0", "block.y")
    s.bind("b0", "block.z")
    s.bind("b1", "thread.z")
    if gate:
        s.bind("q", "thread.y")
    s.bind("j1", "thread.x")


def function(L, T, B, I, H, hc=None, bc=None, cell="lstm"):
    """The ``L``-layer LSTM (input size ``I``, hidden size ``H``, ``T`` steps,
    batch ``B``; ``cell="gru"``: the GRU) scheduled for CUDA: compile with
    ``.compile(target="cuda")`` (or for the CPU, blocks and threads as
    loops).  Arguments ``x, w_ih0T, wiT, whT, bias, h0`` (and ``c0``), see
    :func:`pack`; outputs ``h`` (and ``c``)."""
    return schedule(algorithm(L, T, B, I, H, cell), hc, bc)


# ------------------------------------------------------------------ the call
def pack(layers, I, H, like, cell="lstm"):
    """The kernel's weight arguments from torch's per-layer ``[w_ih, w_hh,
    b_ih, b_hh]``: ``w_ih0T`` (I, 4H), ``wiT`` / ``whT`` (L, H, 4H, ``wiT[0]``
    zero), ``bias`` (L, 4H) = b_ih + b_hh (GRU: rows as four gate blocks,
    see the module's text)."""
    ar = DeviceArrays(like)
    L, G = len(layers), 4 if cell == "lstm" else 3
    for l, (wih, whh, bih, bhh) in enumerate(layers):
        want = {0: (G * H, I if l == 0 else H), 1: (G * H, H), 2: (G * H,), 3: (G * H,)}
        for k, m in enumerate((wih, whh, bih, bhh)):
            if m is not None and tuple(m.shape) != want[k]:
                raise ValueError(f"weights[{l}][{k}] ({TENSORS[k]} of layer {l}): expected "
                                 f"shape {want[k]} ({G} gates x hidden size {H}), got "
                                 f"{tuple(m.shape)}")
        if (bih is None) != (layers[0][2] is None):
            raise ValueError(f"weights[{l}]: give every layer the same form (with or without "
                             "biases)")

    def rows(m, hidden):
        """[G*H, ...] -> the four gate blocks (GRU: n's input / hidden part)."""
        if cell == "lstm":
            return m
        zero = ar.zeros(H, *m.shape[1:])
        return ar.cat([m[:2 * H], zero, m[2 * H:]] if hidden else [m[:2 * H], m[2 * H:], zero])

    bias = (ar.stack([rows(b_ih, False) + rows(b_hh, True) for _, _, b_ih, b_hh in layers])
            if layers[0][2] is not None else ar.zeros(L, 4 * H))
    return dict(w_ih0T=ar.contiguous(rows(layers[0][0], False).T),
                wiT=ar.contiguous(ar.stack([ar.zeros(H, 4 * H)]
                                           + [rows(w[0], False).T for w in layers[1:]])),
                whT=ar.contiguous(ar.stack([rows(w[1], True).T for w in layers])),
                bias=ar.contiguous(bias))


def unpack(h, c, ar):
    """``y, h_n, c_n`` from the kernel's ``h`` (L+1, T+1, B, H) and ``c``
    (L, T+1, B, H; ``None`` for the GRU: ``c_n`` is ``None``)."""
    L, T = int(h.shape[0]) - 1, int(h.shape[1]) - 1
    return (ar.copy(ar.contiguous(h[L, 1:])), ar.contiguous(h[1:, T]),
            None if c is None else ar.contiguous(c[:, T]))


class CudaWavefront(RnnSolver):
    """``op`` ("lstm" or "gru") on the GPU: the wavefront of :func:`function`
    over the arguments :func:`parse` checked; ``(y, h_n, c_n)``."""
    name = "wavefront"
    target = "cuda"

    def __init__(self, op):
        self.op = op

    def space(self, p):
        return {"hc": [16, 32, 64], "bc": [1, 2, 4]}

    def build(self, p, params):
        return function(p.layers, p.T, p.B, p.input_size, p.hidden, cell=p.cell, **params)

    def run(self, p, args):
        x, layers, states, ar, to_torch = (args.x, args.layers, args.states, args.arrays,
                                           args.to_torch)
        kw = dict(x=x, **pack(layers, p.input_size, p.hidden, x, p.cell), **states)
        kern = cuda_kernel((f"{p.cell}_cuda", p.layers, p.T, p.B, p.input_size, p.hidden),
                           lambda: self.build(p, {}))
        out = kern(**kw)
        res = unpack(out["h"], out["c"], ar) if p.cell == "lstm" else unpack(out, None, ar)
        if to_torch:
            import torch
            res = tuple(None if a is None else torch.from_numpy(a) for a in res)
        return res

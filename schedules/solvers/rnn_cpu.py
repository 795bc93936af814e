"""The CPU solvers of multilayer LSTM and GRU, with ``torch.nn.LSTM`` / ``torch.nn.GRU``'s
semantics (``batch_first=False``), dense or CSR (sparse) weights.

    y, (h_n, c_n) = schedules.lstm(x, weights, h0=None, c0=None)
    y, h_n = schedules.gru(x, weights, h0=None)

``x`` is (T, B, I); ``weights`` a list per layer of ``[w_ih, w_hh, b_ih,
b_hh]`` (or ``[w_ih, w_hh]``) exactly like ``module.all_weights``; gate order
i, f, g, o (LSTM) and r, z, n (GRU, with ``b_hn`` inside ``r * (...)``).
NumPy arrays or CPU torch tensors, float32, or bfloat16 / float16 (weights and
input of one dtype, as torch): the weights stay in their format (half the
bytes the recurrence streams), the products, sums and states run in float32
and the results are rounded to the input's dtype; the results have the
input's kind.

The CPU solvers (``schedule=``; "auto": the find step of :mod:`schedules.core.find`):

- ``"layer"`` (layer-major): per layer, the input projection of all T steps is
  one library GEMM (:func:`schedules.blocks.blis.kernel`, ``W_ih`` repacked once so that the
  GEMM writes the gates in the recurrence's order), then one kernel runs the
  T recurrent steps: at each step the hidden units are split in blocks across
  the cores, each block sweeps its rows of ``w_hh`` once for its four gates
  (register-blocked), then applies the nonlinearities and the c/h update
  (:func:`schedules.blocks.rnn_cells.layer_function`).
- ``"wavefront"``: one kernel for the stacked layers whose input size is H
  (all of them when I == H, else the ones above layer 0, which runs
  layer-major), over chunks of steps: each chunk of a layer first projects its
  inputs (the layer below's outputs of that chunk) in one small GEMM, then
  runs its steps; chunks skewed by the layer, the layers of one anti-diagonal
  in parallel (:func:`schedules.blocks.rnn_cells.wavefront_function`).

Sparse weights (``sparse=True``, or any weight given as a CSR object with
``rowptr, colidx, values, shape`` such as ``schedules.CSRWeights``): both
products are CSR matrix-vector products (data-dependent bounds ``rowptr[r] ..
rowptr[r + 1]``), layer-major.

Weights are repacked into the kernels' layouts on every call, unless given as
:class:`RNNWeights` (``schedules.RNNWeights(weights, "lstm")``), which packs
once per schedule and is reused by later calls.
"""
from __future__ import annotations

from dataclasses import replace

import numpy as np

import tiramisu_py as tp

from ..blocks import dot_gemm
from ..blocks import rnn_cells as cells
from ..blocks.blis import default_params
from ..blocks.blis import kernel as gemm_kernel
from ..blocks.rnn_common import RnnSolver
from ..core.kernels import kernel
from ..core.sizes import largest_divisor
from ..core.transpose import transposed_into
from ..host import host
from ..weights.rnn import PAIRED, PROJECTION_TILE, as_dtype, blocking, kernel_array, padded
from ..weights.window import SLICE, WINDOW

SCHEDULES = ("layer", "wavefront")


def rnn_function(cell, T, B, H, layers=1, schedule="layer", sparse=False):
    """The scheduled Function of ``cell``'s recurrence with the host's
    blocking: one layer's T steps (``"layer"``, its input projection given
    as ``xp``) or ``layers`` stacked layers of input size H
    (``"wavefront"``, dense)."""
    blk = blocking(cells.GATES[cell], B)
    if schedule == "layer":
        return cells.layer_function(cell, T, B, H, H, blk, sparse=sparse)
    if schedule == "wavefront" and not sparse:
        return cells.wavefront_function(cell, layers, T, B, H, blk)
    raise ValueError(f"schedule must be 'layer' or 'wavefront' (dense), got {schedule!r}")


def lstm_function(T, B, H, layers=1, schedule="layer", sparse=False):
    """The scheduled Function of the LSTM recurrence: one layer's T steps
    (``"layer"``, its input projection given as ``xp``) or ``layers`` stacked
    layers of input size H (``"wavefront"``)."""
    return rnn_function("lstm", T, B, H, layers, schedule, sparse)


def gru_function(T, B, H, layers=1, schedule="layer", sparse=False):
    """The same for the GRU."""
    return rnn_function("gru", T, B, H, layers, schedule, sparse)


def _layer_kernel(cell, T, B, H, K, blk, sparse, target, wdtype="float32"):
    return kernel(("rnn_layer", cell, T, B, H, K, blk, sparse) + _typed(wdtype),
                  lambda: cells.layer_function(cell, T, B, H, K, blk, sparse=sparse,
                                               wdtype=wdtype), target)


def _wavefront_kernel(cell, L, T, B, H, blk, target, chunk=None, wdtype="float32"):
    return kernel(("rnn_wavefront", cell, L, T, B, H, blk) + ((chunk,) if chunk else ())
                  + _typed(wdtype),
                  lambda: cells.wavefront_function(cell, L, T, B, H, blk, chunk, wdtype), target)


def _typed(wdtype):
    """The kernel key's part for the weights' storage type (none for float32)."""
    return () if wdtype == "float32" else (wdtype,)


def _host(out):
    """A kernel's results as NumPy arrays (reduced-precision weights are
    passed as torch tensors, so the kernel allocates torch outputs)."""
    if isinstance(out, dict):
        return {k: _host(v) for k, v in out.items()}
    return out if isinstance(out, np.ndarray) else out.numpy()


ROWS = 256     # rows of the CSR projection per parallel chunk (its sums stay in L2)


def _projection_kernel(M, R, I, NKB, target):
    """CSR input projection of all T * B rows at once (hoisted), transposed:
    ``xp[r, m] = sum_nz values[nz] * x[colidx[nz], m]`` over the packed rows
    ``r``, the nonzeros in ``NKB`` blocks of columns
    (:func:`schedules.weights.rnn.column_blocked`): each nonzero scales a
    contiguous row of ``x`` (I x M) into a tile of up to
    :data:`~schedules.weights.rnn.PROJECTION_TILE` vectors of the row of
    ``xp`` kept in registers over the nonzeros of one block, added to ``xp``
    once per block.  Loops: chunks of :data:`ROWS` rows in parallel, the
    tile's columns, the column blocks, the chunk's rows, the nonzeros: one
    block's rows of ``x`` (a tile wide) are read from L1 by all the chunk's
    rows (read at random from L2, one nonzero at a time, the kernel ran at a
    fifth of the FMA peak).  ``M``: the rows padded to whole vectors
    (:func:`schedules.blocks.rnn_cells.projection_columns`): a tail of a few
    columns would accumulate through memory, a scalar chain per nonzero."""
    def build():
        f = tp.Function("rnn_csr_projection",
                        params={"M": M, "R": R, "I": I, "NKB": NKB, "NNZ": None})
        r, m, kb = f.var("r", 0, "R"), f.var("m", 0, "M"), f.var("kb", 0, "NKB")
        x = f.input("x", ("I", "M"), tp.float32)
        rowptr = f.input("rowptr", ("NKB * R + 1",), tp.int32)
        colidx = f.input("colidx", ("NNZ",), tp.int32)
        values = f.input("values", ("NNZ",), tp.float32)
        nz = f.var("nz", rowptr[kb * R + r], rowptr[kb * R + r + 1])
        xp = f.computation("xp", [r, m], 0.0, dtype=tp.float32)
        xp[r, m].reduce("+", values[nz] * x[colidx[nz], m], loops=[r, kb, nz, m])
        lanes = host().lanes(4)
        xp.vectorize("m", lanes)
        xp.parallelize("r")
        u = xp.update
        vectors = M // lanes
        tile = largest_divisor(vectors, PROJECTION_TILE)
        rows = largest_divisor(R, ROWS)
        u.split("r", rows, names=("r0", "r1"))
        u.split("m", lanes, names=("m0", "m1"))
        u.split("m0", tile, names=("mc", "mu"))
        u.reorder("r0", "mc", "kb", "r1", "nz", "mu", "m1")
        u.unroll("mu", tile)
        u.vectorize("m1", lanes)
        u.accumulate_locally("nz", allow_reassociation=True)
        u.parallelize("r0")                 # its own nest: without this it ran on one core
        return f
    return kernel(("rnn_csr_projection", M, R, I, NKB), build, target)


def sparse_form(blk, hidden):
    """The recurrent product's sparse layout for ``hidden`` units blocked by
    ``blk``: "window" (:mod:`schedules.weights.window`, a permute of the
    input's window a slot) where the vectors hold 16 float32 lanes
    (AVX-512), the blocks are whole slices of 16 units and the windows of
    32 tile the padded hidden size (the compiler's range check of the
    window's column bytes sees no window past the row), else "csr" (a
    gather a group)."""
    window = host().lanes(4) == SLICE and blk.hb % SLICE == 0 and \
        padded(hidden, blk.hb) % WINDOW == 0
    return "window" if window else "csr"


def _run_layer(W, l, seq, h0, c0, blk, target):
    """One layer, layer-major: the hoisted projection, then the recurrence.
    Returns (y (T, B, Hp) view, c (B, Hp) or None)."""
    T, B, K = seq.shape
    H = W.hidden
    sparse = W.sparse and sparse_form(blk, W.hidden)
    if sparse:
        p = W.packed(sparse, B, blk)[l]
        rowptr, colidx, values = p["wi"]
        xt = transposed_into(np.ascontiguousarray(seq.reshape(T * B, K)),
                             np.zeros((K, cells.projection_columns(T * B)), np.float32))
        R = cells.padded(H, blk.hb) * W.gates
        xp = _projection_kernel(xt.shape[1], R, K, (len(rowptr) - 1) // R, target)(
            x=xt, rowptr=rowptr, colidx=colidx, values=values)
        names = ("wptr", "wval", "widx") if sparse == "window" else ("rowptr", "colidx", "values")
        weights = dict(zip(names, p["wh"]))
    else:
        p = W.packed("layer", B, blk)[l]
        a, wiT = np.ascontiguousarray(seq.reshape(T * B, K)), p["wiT"]
        if W.wdtype in PAIRED:
            # the inputs rounded to the weights' type, a product of pairs
            # (vdpbf16ps where the host has it), float32 sums
            xp = _host(kernel(("rnn_projection", W.wdtype, T * B, wiT.shape[1], K),
                              lambda: dot_gemm.function(T * B, wiT.shape[1], K, W.wdtype,
                                                        float32_io=True),
                              target)(a, kernel_array(wiT, W.wdtype)))
        else:                                             # the library GEMM's kernel
            xp = gemm_kernel(T * B, wiT.shape[1], K, default_params(T * B, wiT.shape[1], K),
                             target)(a, wiT)
        weights = dict(w=kernel_array(p["w"], W.wdtype))
    kern = _layer_kernel(W.cell, T, B, H, H, blk, sparse, target, W.wdtype)
    args = dict(xp=xp if sparse else xp.reshape((T, B, -1)), h0=h0, bias=p["bias"],
                **weights)
    if W.cell == "lstm":
        out = _host(kern(c0=c0, **args))
        return out["y"][1:], out["c"]
    args["bias_i"] = p["bias_i"]
    return _host(kern(**args))[1:], None


def _pad(a, Hp):
    """(..., H) -> contiguous (..., Hp), zero-padded."""
    if a.shape[-1] == Hp:
        return np.ascontiguousarray(a)
    out = np.zeros(a.shape[:-1] + (Hp,), np.float32)
    out[..., :a.shape[-1]] = a
    return out


class _Forward:
    """One forward of a stack on the CPU: the blocking (``values``: tuned
    ``hb``, ``mb`` and the wavefront's ``chunk``, else the host's), the
    states padded to it and the results ``h_n``/``c_n`` being filled.
    ``train`` (training, :mod:`schedules.solvers.rnn_train`): a dict whose
    ``"masks"`` (None, or one dropout mask per layer but the last:
    layer-major only) multiply each layer's output, and whose ``"states"``
    receives per layer ``(input, h [T + 1][B][H])``, what the backward
    needs."""

    def __init__(self, W, x, h0, c0, target, train=None, values=None):
        T, B, _ = x.shape
        L, H = len(W.layers), W.hidden
        values = dict(values or {})
        self.chunk = values.pop("chunk", None)
        self.blk = replace(W.blocking(B), **values)
        self.Hp = cells.padded(H, self.blk.hb)
        self.h0p = _pad(h0, self.Hp)
        self.c0p = _pad(c0, self.Hp) if c0 is not None else None
        self.hn = np.empty((L, B, H), np.float32)
        self.cn = np.empty((L, B, H), np.float32) if W.cell == "lstm" else None
        self.masks = train and train.get("masks")
        self.states = None if train is None else train.setdefault("states", [])
        if self.states is not None:
            self.states.clear()         # (the find step runs a solver more than once)
        self.W, self.h0, self.target, self.T, self.H = W, h0, target, T, H

    def layers(self, seq, count):
        """Layers ``0 .. count - 1`` layer-major from the input ``seq``;
        returns the last one's output."""
        W, T, H, L = self.W, self.T, self.H, len(self.W.layers)
        for l in range(count):
            y, c = _run_layer(W, l, seq, self.h0p[l], None if self.c0p is None else self.c0p[l],
                              self.blk, self.target)
            self.hn[l] = y[T - 1, :, :H]
            if c is not None:
                self.cn[l] = c[:, :H]
            if self.states is not None:
                self.states.append((seq, np.concatenate([self.h0[l][None], y[:, :, :H]])))
            seq = y if self.Hp == H else np.ascontiguousarray(y[:, :, :H])
            if self.masks and l < L - 1:
                seq = seq * self.masks[l]
        return seq

    def wavefront(self, seq, first):
        """Layers ``first ..`` (input size H) in one wavefront kernel from
        the input ``seq``; returns the top layer's output."""
        W, T, H, blk, L = self.W, self.T, self.H, self.blk, len(self.W.layers)
        B = seq.shape[1]
        p = W.packed("wavefront", B, blk)
        kern = _wavefront_kernel(W.cell, L - first, T, B, H, blk, self.target, self.chunk,
                                 W.wdtype)
        args = dict(xin=seq, wi=kernel_array(p["wi"], W.wdtype),
                    wh=kernel_array(p["wh"], W.wdtype), bi=p["bi"], bh=p["bh"],
                    h0=self.h0p[first:])
        if W.cell == "lstm":
            out = _host(kern(c0=self.c0p[first:], **args))
            h, c = out["h"], out["c"]
            self.cn[first:] = c[:, :, :H]
        else:
            h = _host(kern(**args))
        self.hn[first:] = h[1:, T, :, :H]
        if self.states is not None:
            for i in range(L - first):
                below = seq if i == 0 else np.ascontiguousarray(h[i, 1:, :, :H])
                self.states.append((below, np.ascontiguousarray(h[i + 1, :, :, :H])))
        return h[L - first, 1:, :, :H]

    def results(self, seq):
        """(y, h_n, c_n) as NumPy arrays."""
        return np.ascontiguousarray(seq), self.hn, self.cn


def _results(p, args, out):
    """``out`` (y, h_n, c_n) of the input's kind and dtype."""
    return tuple(None if a is None else as_dtype(a, p.dtype, args.torch_in) for a in out)


class _Blocked(RnnSolver):
    """What the CPU solvers of ``op`` ("lstm" or "gru") share: the blocking
    of the hidden units, its defaults and tunable space.  Version 2: the
    layer-major steps became one parallel region (codegen.regions) and the
    sparse product windows, which changed which schedule is fastest."""
    version = 2

    def __init__(self, op):
        self.op = op

    def params(self, p):
        """The host's blocking (:func:`schedules.weights.rnn.blocking`)."""
        blk = blocking(cells.GATES[p.cell], p.B)
        return {"hb": blk.hb, "mb": blk.mb}

    def space(self, p):
        """The hidden units per block (whole vectors: the split of the
        hidden units across the cores) and, with a batch, the batch rows
        in the register block."""
        lanes = host().lanes(4)
        out = {"hb": [v * lanes for v in (1, 2, 4) if v == 1 or v * lanes <= p.hidden]}
        if p.B > 1:
            out["mb"] = [m for m in (1, 2, 3, 4) if m <= p.B]
        return out


def _blocking(p, params):
    """The blocking of ``params`` (``hb``, ``mb``) for ``p``."""
    return replace(blocking(cells.GATES[p.cell], p.B), hb=params["hb"], mb=params["mb"])


class Layer(_Blocked):
    """Layer-major (see the module): per layer the hoisted input projection,
    then one kernel for the recurrence."""
    name = "layer"

    def build(self, p, params):
        blk = _blocking(p, {**self.params(p), **params})
        return cells.layer_function(p.cell, p.T, p.B, p.hidden, p.hidden, blk,
                                    sparse=p.sparse and sparse_form(blk, p.hidden),
                                    wdtype="float32" if p.sparse else p.dtype)

    def run(self, p, args, values=None):
        fw = _Forward(args.W, args.x, args.h0, args.c0, p.target, args.train,
                      self.chosen(p, values))
        return _results(p, args, fw.results(fw.layers(args.x, len(args.W.layers))))


class Wavefront(_Blocked):
    """The wavefront (see the module) of the layers of input size H (layer
    0 layer-major before it when its input size differs); its chunk of
    steps tuned too."""
    name = "wavefront"

    def applicable(self, p):
        why = super().applicable(p)
        if why is True and (p.stacked < 2 or p.sparse):
            return "needs at least two stacked layers of input size H and dense weights; use 'layer'"
        return why

    def params(self, p):
        """The host's blocking and its chunk of steps."""
        return {**super().params(p), "chunk": cells.chunk_of(p.T)}

    def space(self, p):
        return {**super().space(p), "chunk": [c for c in (1, 2, 4, 8, 16) if p.T % c == 0]}

    def build(self, p, params):
        params = {**self.params(p), **params}
        return cells.wavefront_function(p.cell, p.layers, p.T, p.B, p.hidden,
                                        _blocking(p, params), params["chunk"],
                                        "float32" if p.sparse else p.dtype)

    def run(self, p, args, values=None):
        W = args.W
        fw = _Forward(W, args.x, args.h0, args.c0, p.target, args.train,
                      self.chosen(p, values))
        L, B = len(W.layers), args.x.shape[1]
        first = L if W.sparse else W.packed("wavefront", B, fw.blk)["first"]
        seq = fw.layers(args.x, first)
        return _results(p, args, fw.results(fw.wavefront(seq, first) if first < L else seq))

"""Multilayer LSTM and GRU with ``torch.nn.LSTM`` / ``torch.nn.GRU``'s
semantics (``batch_first=False``), dense or CSR (sparse) weights.

    y, (h_n, c_n) = schedules.lstm(x, weights, h0=None, c0=None)
    y, h_n = schedules.gru(x, weights, h0=None)

``x`` is (T, B, I); ``weights`` a list per layer of ``[w_ih, w_hh, b_ih,
b_hh]`` (or ``[w_ih, w_hh]``) exactly like ``module.all_weights``; gate order
i, f, g, o (LSTM) and r, z, n (GRU, with ``b_hn`` inside ``r * (...)``).
NumPy arrays or CPU torch tensors, float32; the results have the input's kind.

Schedules (``schedule=``; "auto" runs a find step whose choice is recorded in
the tuning store, kind "rnn_find", per shape and machine):

- ``"layer"`` (layer-major): per layer, the input projection of all T steps is
  one library GEMM (:func:`schedules.gemm`, ``W_ih`` repacked once so that the
  GEMM writes the gates in the recurrence's order), then one kernel runs the
  T recurrent steps: at each step the hidden units are split in blocks across
  the cores, each block sweeps its rows of ``w_hh`` once for its four gates
  (register-blocked), then applies the nonlinearities and the c/h update
  (:func:`schedules.rnn_cells.layer_function`).
- ``"wavefront"``: one kernel for the stacked layers whose input size is H
  (all of them when I == H, else the ones above layer 0, which runs
  layer-major), over chunks of steps: each chunk of a layer first projects its
  inputs (the layer below's outputs of that chunk) in one small GEMM, then
  runs its steps; chunks skewed by the layer, the layers of one anti-diagonal
  in parallel (:func:`schedules.rnn_cells.wavefront_function`).

Sparse weights (``sparse=True``, or any weight given as a CSR object with
``rowptr, colidx, values, shape`` such as ``schedules.CSRWeights``): both
products are CSR matrix-vector products (data-dependent bounds ``rowptr[r] ..
rowptr[r + 1]``), layer-major.

Weights are repacked into the kernels' layouts on every call, unless given as
:class:`RNNWeights` (``schedules.RNNWeights(weights, "lstm")``), which packs
once per schedule and is reused by later calls.
"""
from __future__ import annotations

import json
import os
import time

import numpy as np

import tiramisu_py as tp
from tiramisu_py import tuning

from . import runtime
from . import rnn_cells as cells
from .gemm import gemm
from .host import host

SCHEDULES = ("layer", "wavefront")
FIND_KIND = "rnn_find"
FIND_VERSION = 2        # in the records' key: bump when a schedule changes
_TENSORS = ("w_ih", "w_hh", "b_ih", "b_hh")


# ------------------------------------------------------------------- weights
def _is_csr(w):
    return all(hasattr(w, a) for a in ("rowptr", "colidx", "values", "shape"))


def _csr_arrays(dense, threshold=0.0):
    """(rowptr int32, colidx int32, values float32) of ``dense`` keeping the
    entries with ``|w| > threshold``."""
    mask = np.abs(dense) > threshold
    rowptr = np.zeros(dense.shape[0] + 1, np.int32)
    np.cumsum(mask.sum(axis=1), out=rowptr[1:])
    rows, cols = np.nonzero(mask)
    return rowptr, cols.astype(np.int32), np.ascontiguousarray(dense[rows, cols], np.float32)


def _check_csr(m, name):
    """``m`` (an object with rowptr, colidx, values, shape) if it is a valid
    CSR matrix; else a ValueError naming the tensor."""
    try:
        rows, cols = (int(v) for v in m.shape)
        rowptr, colidx, values = (np.asarray(a) for a in (m.rowptr, m.colidx, m.values))
    except (TypeError, ValueError) as e:
        raise ValueError(f"{name}: not a CSR matrix ({e})") from None
    problem = None
    if rowptr.shape != (rows + 1,) or rowptr.dtype.kind not in "iu":
        problem = f"rowptr must be {rows + 1} integers, got {rowptr.dtype} {rowptr.shape}"
    elif rowptr[0] != 0 or np.any(np.diff(rowptr) < 0) or rowptr[-1] != len(values):
        problem = "rowptr must start at 0, not decrease and end at len(values)"
    elif colidx.shape != values.shape or values.ndim != 1 or colidx.dtype.kind not in "iu":
        problem = "colidx and values must be 1-D of one length, colidx integers"
    elif len(colidx) and (colidx.min() < 0 or colidx.max() >= cols):
        problem = f"colidx must lie in [0, {cols})"
    elif values.dtype != np.float32:
        problem = f"values must be float32, got {values.dtype}"
    if problem:
        raise ValueError(f"{name}: invalid CSR matrix: {problem}")
    return m


def _numpy(x, name):
    """A float32 NumPy view of an array or CPU tensor (parameters detached)."""
    if runtime.is_torch(x):
        if str(x.dtype) != "torch.float32":
            raise TypeError(f"{name}: expected a float32 tensor, got {x.dtype}")
        if x.device.type != "cpu":
            raise ValueError(f"{name}: expected a CPU tensor, got device {x.device}")
        return x.detach().contiguous().numpy()
    if not isinstance(x, np.ndarray):
        raise TypeError(f"{name}: expected a NumPy array or torch tensor, got {type(x).__name__}")
    if x.dtype != np.float32:
        raise TypeError(f"{name}: expected float32, got {x.dtype}")
    return np.ascontiguousarray(x)


class RNNWeights:
    """The weights of a ``cell`` ("lstm" or "gru") stack, checked once, with
    the packed layouts of each schedule made on first use and kept.  Pass it
    to :func:`lstm` / :func:`gru` in place of the list to pack only once
    (the arrays are not copied until packed: change them and make a new
    one)."""

    def __init__(self, weights, cell="lstm", sparse=False, input_size=None):
        if cell not in cells.GATES:
            raise ValueError(f"cell must be 'lstm' or 'gru', got {cell!r}")
        self.cell, self.gates = cell, cells.GATES[cell]
        if not isinstance(weights, (list, tuple)) or not weights:
            raise TypeError("weights: expected a non-empty list per layer of [w_ih, w_hh, b_ih, "
                            f"b_hh] (like {cell.upper()}.all_weights), got {type(weights).__name__}")
        first = weights[0]
        if isinstance(first, (list, tuple)) and len(first) in (2, 4):
            w_hh = first[1] if _is_csr(first[1]) else _numpy(first[1], "weights[0][1] (w_hh of layer 0)")
            if len(w_hh.shape) != 2 or w_hh.shape[1] < 1:
                raise ValueError(f"weights[0][1] (w_hh of layer 0): expected shape ({self.gates}*H, H)"
                                 f" with H >= 1, got {tuple(w_hh.shape)}")
            self.hidden = w_hh.shape[1]
        self.layers = []
        for l, layer in enumerate(weights):
            self.layers.append(self._layer(l, layer, input_size))
            if l == 0 and input_size is None:
                input_size = self.layers[0][0].shape[1]
        self.sparse = bool(sparse) or any(_is_csr(m) for layer in self.layers for m in layer[:2])
        self.input_size = self.layers[0][0].shape[1]
        self.has_bias = self.layers[0][2] is not None
        self._packed = {}

    def _layer(self, l, layer, input_size):
        G, H = self.gates, self.hidden
        if not isinstance(layer, (list, tuple)) or len(layer) not in (2, 4):
            raise ValueError(f"weights[{l}]: expected [w_ih, w_hh, b_ih, b_hh] or [w_ih, w_hh], "
                             f"got {type(layer).__name__} of length "
                             f"{len(layer) if hasattr(layer, '__len__') else '?'}")
        out = []
        for k, m in enumerate(layer):
            name = f"weights[{l}][{k}] ({_TENSORS[k]} of layer {l})"
            m = _check_csr(m, name) if k < 2 and _is_csr(m) else _numpy(m, name)
            shape = tuple(m.shape)
            if k >= 2:
                want = (G * H,)
            elif k == 1:
                want = (G * H, H)
            else:
                want = (G * H, H if l else (input_size or (shape[1] if len(shape) == 2 else -1)))
            if shape != want or (k == 0 and want[1] < 1):
                what = f"input size {want[1]}" if k == 0 else f"hidden size {H}"
                raise ValueError(f"{name}: expected shape {want} ({G} gates x hidden size {H}, "
                                 f"{what}), got {shape}")
            out.append(m)
        if len(out) == 2:
            out += [None, None]
        if l and (out[2] is None) != (self.layers[0][2] is None):
            raise ValueError(f"weights[{l}]: layer {l} {'lacks' if out[2] is None else 'has'}"
                             f" biases and layer 0 {'has' if out[2] is None else 'lacks'} them; "
                             "give every layer the same form")
        return out

    def blocking(self, batch):
        return _blocking(self.gates, batch)

    def packed(self, what, batch):
        """The packed arrays of one schedule (made once, kept)."""
        blk = self.blocking(batch)
        key = (what, blk)
        if key not in self._packed:
            self._packed[key] = getattr(self, f"_pack_{what}")(blk)
        return self._packed[key]

    # --- packing: [G*H, K] (gate-major rows) -> [NB][K][G][HB] and friends ---
    @staticmethod
    def _dense(m):
        if not _is_csr(m):
            return m
        return m.to_dense() if hasattr(m, "to_dense") else _csr_to_dense(m)

    def _blocked(self, m, hb):
        """[G*H, K] -> [NB, K, G, HB] (padded units are zero rows)."""
        G, H = self.gates, self.hidden
        m = self._dense(m)
        Hp = cells.padded(H, hb)
        w = np.zeros((G, Hp, m.shape[1]), np.float32)
        w[:, :H] = m.reshape(G, H, -1)
        return np.ascontiguousarray(w.reshape(G, Hp // hb, hb, -1).transpose(1, 3, 0, 2))

    def _bias(self, l, k, hb):
        G, H = self.gates, self.hidden
        Hp = cells.padded(H, hb)
        out = np.zeros((G, Hp), np.float32)
        for b in ([self.layers[l][2], self.layers[l][3]] if k == "both" else [self.layers[l][k]]):
            if b is not None:
                out[:, :H] += b.reshape(G, H)
        return np.ascontiguousarray(out.reshape(G, Hp // hb, hb).transpose(1, 0, 2))

    def _biases(self, l, hb):
        """{name: packed} as the layer kernel reads them."""
        if self.cell == "lstm":
            return {"bias": self._bias(l, "both", hb)}
        return {"bias": self._bias(l, 3, hb), "bias_i": self._bias(l, 2, hb)}

    def _pack_layer(self, blk):
        out = []
        for l, (wih, whh, _, _) in enumerate(self.layers):
            wi = self._blocked(wih, blk.hb)                      # [NB, I, G, HB]
            out.append(dict(wiT=np.ascontiguousarray(
                wi.transpose(1, 0, 2, 3).reshape(wi.shape[1], -1)),   # [I, NB*G*HB]
                w=self._blocked(whh, blk.hb), **self._biases(l, blk.hb)))
        return out

    def _pack_wavefront(self, blk):
        first = 0 if self.input_size == self.hidden else 1
        ups = self.layers[first:]
        bi = [self._bias(l, 2, blk.hb) for l in range(first, len(self.layers))]
        bh = [self._bias(l, 3, blk.hb) for l in range(first, len(self.layers))]
        return dict(first=first,
                    wi=np.stack([self._blocked(w[0], blk.hb) for w in ups]),
                    wh=np.stack([self._blocked(w[1], blk.hb) for w in ups]),
                    bi=np.stack(bi), bh=np.stack(bh))

    def _pack_csr(self, blk):
        out = []
        for l, (wih, whh, _, _) in enumerate(self.layers):
            out.append(dict(wi=self._csr_packed(wih, blk.hb),
                            wh=self._csr_packed(whh, blk.hb, group=blk.lanes),
                            **self._biases(l, blk.hb)))
        return out

    def _csr_packed(self, m, hb, group=1):
        """CSR with its rows in the packed order ``(jb * G + g) * HB + j``
        (padded units: empty rows); ``group`` > 1: each row padded with
        zeros to a multiple of ``group`` nonzeros, ``rowptr`` counting
        groups."""
        G, H = self.gates, self.hidden
        rowptr, colidx, values = ((np.asarray(m.rowptr), np.asarray(m.colidx),
                                   np.asarray(m.values)) if _is_csr(m) else _csr_arrays(m))
        Hp = cells.padded(H, hb)
        jb, g, j = np.meshgrid(np.arange(Hp // hb), np.arange(G), np.arange(hb), indexing="ij")
        unit = (jb * hb + j).ravel()
        src = np.where(unit < H, g.ravel() * H + np.minimum(unit, H - 1), -1)
        counts = np.where(src >= 0, np.diff(rowptr.astype(np.int64))[np.maximum(src, 0)], 0)
        slots = -(-counts // group) * group
        newptr = np.zeros(len(src) + 1, np.int64)
        np.cumsum(slots, out=newptr[1:])
        # slot s of packed row p holds nonzero s of the source row, or a zero
        p = np.repeat(np.arange(len(src)), slots)
        s = np.arange(newptr[-1]) - newptr[p]
        real = s < counts[p]
        gather = np.where(real, rowptr[np.maximum(src, 0)][p].astype(np.int64) + s, 0)
        cols = np.where(real, colidx[gather] if len(colidx) else 0, 0)
        vals = np.where(real, values[gather] if len(values) else 0, 0)
        return ((newptr // group).astype(np.int32), np.ascontiguousarray(cols, np.int32),
                np.ascontiguousarray(vals, np.float32))


def _csr_to_dense(m):
    rows, cols = m.shape
    out = np.zeros((rows, cols), np.float32)
    rowptr = np.asarray(m.rowptr)
    r = np.repeat(np.arange(rows), np.diff(rowptr))
    out[r, np.asarray(m.colidx)] = np.asarray(m.values)
    return out


def _blocking(gates, batch):
    """Hidden block and register block for this machine.  At batch 1: two
    SIMD vectors per gate (2 x G accumulators).  Else one vector per gate
    and as many batch rows MB as fit the registers with the G weight vectors
    and a broadcast beside the MB x G accumulators (AVX2, 16 registers:
    LSTM 2, GRU 4; a third row for the LSTM spilled and measured ~10%
    slower, one thread, H = 512, B = 64)."""
    h = host()
    lanes = h.lanes(4)
    if batch == 1:
        return cells.Blocking(hb=2 * lanes, mb=1, lanes=lanes)
    mb = max(1, min(batch, 8, (h.vector_registers - gates - 1) // gates))
    return cells.Blocking(hb=lanes, mb=mb, lanes=lanes)


# ------------------------------------------------------------------- kernels
def _layer_kernel(cell, T, B, H, K, blk, sparse, target):
    return runtime.kernel(("rnn_layer", cell, T, B, H, K, blk, sparse),
                          lambda: cells.layer_function(cell, T, B, H, K, blk, sparse=sparse),
                          target)


def _wavefront_kernel(cell, L, T, B, H, blk, target):
    return runtime.kernel(("rnn_wavefront", cell, L, T, B, H, blk),
                          lambda: cells.wavefront_function(cell, L, T, B, H, blk), target)


def _projection_kernel(M, R, I, target):
    """CSR input projection of all T * B rows at once (hoisted), transposed:
    ``xp[r, m] = sum_nz values[nz] * x[colidx[nz], m]`` over the packed rows
    ``r``; each nonzero scales a contiguous row of ``x`` (I x M), the row of
    ``xp`` accumulates in a local tile."""
    def build():
        f = tp.Function("rnn_csr_projection", params={"M": M, "R": R, "I": I, "NNZ": None})
        r, m = f.var("r", 0, "R"), f.var("m", 0, "M")
        x = f.input("x", ("I", "M"), tp.float32)
        rowptr = f.input("rowptr", ("R + 1",), tp.int32)
        colidx = f.input("colidx", ("NNZ",), tp.int32)
        values = f.input("values", ("NNZ",), tp.float32)
        nz = f.var("nz", rowptr[r], rowptr[r + 1])
        xp = f.computation("xp", [r, m], 0.0, dtype=tp.float32)
        xp[r, m].reduce("+", values[nz] * x[colidx[nz], m], loops=[r, nz, m])
        lanes = host().lanes(4)
        xp.vectorize("m", lanes)
        xp.update.vectorize("m", lanes)
        xp.update.accumulate_locally("nz", allow_reassociation=True)
        xp.parallelize("r")
        return f
    return runtime.kernel(("rnn_csr_projection", M, R, I), build, target)


def _run_layer(W, l, seq, h0, c0, blk, target):
    """One layer, layer-major: the hoisted projection, then the recurrence.
    Returns (y (T, B, Hp) view, c (B, Hp) or None)."""
    T, B, K = seq.shape
    H = W.hidden
    if W.sparse:
        p = W.packed("csr", B)[l]
        rowptr, colidx, values = p["wi"]
        xp = _projection_kernel(T * B, len(rowptr) - 1, K, target)(
            x=np.ascontiguousarray(seq.reshape(T * B, K).T), rowptr=rowptr, colidx=colidx,
            values=values)
        rowptr, colidx, values = p["wh"]
        weights = dict(rowptr=rowptr, colidx=colidx, values=values)
    else:
        p = W.packed("layer", B)[l]
        xp = gemm(seq.reshape(T * B, K), p["wiT"], target=target)
        weights = dict(w=p["w"])
    kern = _layer_kernel(W.cell, T, B, H, H, blk, W.sparse, target)
    args = dict(xp=xp.reshape((-1, T, B) if W.sparse else (T, B, -1)), h0=h0, bias=p["bias"],
                **weights)
    if W.cell == "lstm":
        out = kern(c0=c0, **args)
        return out["y"][1:], out["c"]
    args["bias_i"] = p["bias_i"]
    return kern(**args)[1:], None


def _pad(a, Hp):
    """(..., H) -> contiguous (..., Hp), zero-padded."""
    if a.shape[-1] == Hp:
        return np.ascontiguousarray(a)
    out = np.zeros(a.shape[:-1] + (Hp,), np.float32)
    out[..., :a.shape[-1]] = a
    return out


def _forward(W, x, h0, c0, schedule, target):
    """(y, h_n, c_n) as NumPy arrays."""
    T, B, _ = x.shape
    L, H = len(W.layers), W.hidden
    blk = W.blocking(B)
    Hp = cells.padded(H, blk.hb)
    h0p, c0p = _pad(h0, Hp), _pad(c0, Hp) if c0 is not None else None
    hn = np.empty((L, B, H), np.float32)
    cn = np.empty((L, B, H), np.float32) if W.cell == "lstm" else None
    seq, first = x, L
    if schedule == "wavefront" and not W.sparse:
        first = W.packed("wavefront", B)["first"]
    for l in range(first):
        y, c = _run_layer(W, l, seq, h0p[l], None if c0p is None else c0p[l], blk, target)
        hn[l] = y[T - 1, :, :H]
        if c is not None:
            cn[l] = c[:, :H]
        seq = y if Hp == H else np.ascontiguousarray(y[:, :, :H])
    if first < L:
        p = W.packed("wavefront", B)
        kern = _wavefront_kernel(W.cell, L - first, T, B, H, blk, target)
        args = dict(xin=seq, wi=p["wi"], wh=p["wh"], bi=p["bi"], bh=p["bh"], h0=h0p[first:])
        if W.cell == "lstm":
            out = kern(c0=c0p[first:], **args)
            h, c = out["h"], out["c"]
            cn[first:] = c[:, :, :H]
        else:
            h = kern(**args)
        hn[first:] = h[1:, T, :, :H]
        seq = h[L - first, 1:, :, :H]
    return np.ascontiguousarray(seq), hn, cn


# ----------------------------------------------------------------- find step
def _threads():
    """The OpenMP threads a kernel will use ($OMP_NUM_THREADS, else the
    cores): the wavefront's worth depends on it."""
    try:
        return max(1, int(os.environ.get("OMP_NUM_THREADS", "").split(",")[0]))
    except ValueError:
        return host().cores


def _find_key(W, T, B, target):
    h = host()
    return json.dumps([W.cell, len(W.layers), W.input_size, W.hidden, T, B, W.sparse,
                       runtime.target_of(target), h.vector_bits, h.cores, _threads(),
                       f"{tp.__version__}/{FIND_VERSION}"])


def _valid_record(value):
    return (isinstance(value, dict) and value.get("schedule") in SCHEDULES
            and isinstance(value.get("seconds"), dict))


def candidates(W, T, B):
    """The schedules that apply: the wavefront needs at least two layers of
    input size H (and dense weights)."""
    stacked = len(W.layers) - (0 if W.input_size == W.hidden else 1)
    return ["layer", "wavefront"] if stacked >= 2 and not W.sparse else ["layer"]


def find(W, x, h0, c0, target=None, repeats=2):
    """The faster schedule for this shape: remembered in the tuning store, or
    timed now on these arguments (fastest of ``repeats`` after a warm-up)."""
    T, B, _ = x.shape
    cands = candidates(W, T, B)
    if len(cands) == 1:
        return cands[0]
    key = _find_key(W, T, B, target)
    known = tuning.get(FIND_KIND, key, valid=_valid_record)
    if known is not None and known["schedule"] in cands:
        return known["schedule"]
    seconds = {}
    for s in cands:
        _forward(W, x, h0, c0, s, target)
        best = float("inf")
        for _ in range(repeats):
            t0 = time.perf_counter()
            _forward(W, x, h0, c0, s, target)
            best = min(best, time.perf_counter() - t0)
        seconds[s] = best
    choice = min(seconds, key=seconds.get)
    tuning.put(FIND_KIND, key, {"schedule": choice, "seconds": seconds},
               meta={"repeats": repeats})
    return choice


def find_records():
    """{key: record} of every RNN find record in the tuning store."""
    return tuning.records(FIND_KIND, valid=_valid_record)


# ----------------------------------------------------------------- operators
def _state(s, name, L, B, H, kind):
    if s is None:
        return np.zeros((L, B, H), np.float32)
    if runtime.is_torch(s) != kind:
        raise TypeError(f"{name}: pass x and {name} both as NumPy arrays or both as torch tensors")
    s = _numpy(s, name)
    if s.shape != (L, B, H):
        raise ValueError(f"{name}: expected shape {(L, B, H)} (layers, batch, hidden), "
                         f"got {s.shape}")
    return s


def _run(cell, x, weights, h0, c0, sparse, schedule, target):
    if schedule not in ("auto", *SCHEDULES):
        raise ValueError(f"schedule must be 'auto' or one of {', '.join(SCHEDULES)}; "
                         f"got {schedule!r}")
    torch_in = runtime.is_torch(x)
    xa = _numpy(x, "x")
    if xa.ndim != 3:
        raise ValueError(f"x: expected (T, B, I) (batch_first=False), got shape {xa.shape}")
    T, B, I = xa.shape
    if T < 1 or B < 1:
        raise ValueError(f"x: the sequence length and batch must be at least 1, got shape "
                         f"{xa.shape}")
    if isinstance(weights, RNNWeights):
        W = weights
        if W.cell != cell:
            raise ValueError(f"weights: packed for {W.cell!r}, used with {cell!r}")
        if W.input_size != I:
            raise ValueError(f"x: input size {I}, but weights[0][0] (w_ih of layer 0) expects "
                             f"{W.input_size}")
        if sparse and not W.sparse:
            raise ValueError("sparse=True: make the RNNWeights with sparse=True")
    else:
        W = RNNWeights(weights, cell, sparse=sparse, input_size=I)
    L, H = len(W.layers), W.hidden
    h0a = _state(h0, "h0", L, B, H, torch_in)
    c0a = _state(c0, "c0", L, B, H, torch_in) if cell == "lstm" else None
    if schedule == "auto":
        schedule = find(W, xa, h0a, c0a, target)
    elif schedule not in candidates(W, T, B):
        raise ValueError(f"schedule {schedule!r} needs at least two stacked layers of input size "
                         f"H and dense weights; use 'layer'")
    y, hn, cn = _forward(W, xa, h0a, c0a, schedule, target)
    if torch_in:
        import torch
        y, hn = torch.from_numpy(y), torch.from_numpy(hn)
        cn = torch.from_numpy(cn) if cn is not None else None
    return y, hn, cn


def lstm(x, weights, h0=None, c0=None, *, sparse=False, schedule="auto", target=None):
    """``torch.nn.LSTM`` (batch_first=False) forward: returns ``(y, (h_n, c_n))``.
    ``weights``: ``module.all_weights`` (or CSR matrices, or :class:`RNNWeights`);
    ``sparse=True`` runs CSR products (exact zeros dropped); ``schedule``:
    "auto" (find step), "layer" or "wavefront".  ``target="cuda"``, or device
    arrays (torch CUDA tensors) with no target: the GPU wavefront of
    :mod:`schedules.gpu_rnn` (dense weights)."""
    if runtime.use_cuda(target, x, h0, c0, *_tensors(weights)):
        _gpu_options(sparse, schedule)
        from . import gpu_rnn
        return gpu_rnn.lstm(x, weights, h0, c0)
    y, hn, cn = _run("lstm", x, weights, h0, c0, sparse, schedule, target)
    return y, (hn, cn)


def _tensors(weights):
    """The arrays of a per-layer weight list (for the device check)."""
    if isinstance(weights, (list, tuple)):
        return [m for layer in weights if isinstance(layer, (list, tuple)) for m in layer]
    return []


def _gpu_options(sparse, schedule):
    if sparse:
        raise ValueError("sparse=True: sparse (CSR) weights have no GPU schedule; run them on "
                         "the CPU")
    if schedule not in ("auto", "wavefront"):
        raise ValueError(f"schedule={schedule!r}: on the GPU the schedule is the wavefront; "
                         "pass 'auto' or 'wavefront'")


def gru(x, weights, h0=None, *, sparse=False, schedule="auto", target=None):
    """``torch.nn.GRU`` (batch_first=False) forward: returns ``(y, h_n)``.
    ``target="cuda"`` or device arrays: the GPU wavefront, as :func:`lstm`."""
    if runtime.use_cuda(target, x, h0, *_tensors(weights)):
        _gpu_options(sparse, schedule)
        from . import gpu_rnn
        return gpu_rnn.gru(x, weights, h0)
    y, hn, _ = _run("gru", x, weights, h0, None, sparse, schedule, target)
    return y, hn


def _function(cell, T, B, H, layers, schedule, sparse):
    blk = _blocking(cells.GATES[cell], B)
    if schedule == "layer":
        return cells.layer_function(cell, T, B, H, H, blk, sparse=sparse)
    if schedule == "wavefront" and not sparse:
        return cells.wavefront_function(cell, layers, T, B, H, blk)
    raise ValueError(f"schedule must be 'layer' or 'wavefront' (dense), got {schedule!r}")


def lstm_function(T, B, H, layers=1, schedule="layer", sparse=False):
    """The scheduled Function of the LSTM recurrence: one layer's T steps
    (``"layer"``, its input projection given as ``xp``) or ``layers`` stacked
    layers of input size H (``"wavefront"``)."""
    return _function("lstm", T, B, H, layers, schedule, sparse)


def gru_function(T, B, H, layers=1, schedule="layer", sparse=False):
    """The same for the GRU."""
    return _function("gru", T, B, H, layers, schedule, sparse)


__all__ = ["lstm", "gru", "lstm_function", "gru_function", "RNNWeights", "SCHEDULES", "find",
           "find_records", "candidates"]

"""The weights of an LSTM/GRU stack (``torch.nn.LSTM.all_weights``, dense or
CSR) checked once (:class:`RNNWeights`), with the packed layouts of each CPU
solver made on first use and kept, and the register blocking they use.
:func:`rnn_weights` makes the RNNWeights of a caller's list once per weights
and reuses it (packed layouts included) while the arrays hold the same values
(:mod:`schedules.core.prepared`): ``lstm(x, m.all_weights)`` packs once."""
from __future__ import annotations

from dataclasses import dataclass
from types import SimpleNamespace

import numpy as np

from tiramisu_py.runtime.memory import seal

from ..core.arrays import dtype_name, is_torch
from ..core.prepared import prepared
from ..core.transpose import gate_blocked
from ..host import host
from .csr import csr_to_dense
from .window import windowed

TENSORS = ("w_ih", "w_hh", "b_ih", "b_hh")
GATES = {"lstm": 4, "gru": 3}


@dataclass(frozen=True)
class Blocking:
    """The register blocking the packed layouts and the CPU solvers share."""
    hb: int          # hidden units per block (a multiple of the SIMD width)
    mb: int          # batch rows in the register block
    lanes: int       # SIMD lanes


def padded(h, hb):
    """``h`` rounded up to a multiple of the block ``hb``."""
    return -(-h // hb) * hb


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


REDUCED = ("bfloat16", "float16")     # storage types of the weights (float32 sums)
# the types whose input projection is a product of pairs (vdpbf16ps), its
# inputs rounded to the type (schedules.solvers.rnn_cpu): kept so, not widened
PAIRED = ("bfloat16",)


def as_numpy(x, name, dtypes=("float32",)):
    """A NumPy view of an array or CPU tensor (parameters detached) of one of
    ``dtypes``: float32 and float16 as they are, a bfloat16 tensor as its
    bits (uint16; NumPy has no bfloat16)."""
    what = " or ".join(dtypes)
    if is_torch(x):
        if dtype_name(x) not in dtypes:
            raise TypeError(f"{name}: expected a {what} tensor, got {x.dtype}")
        if x.device.type != "cpu":
            raise ValueError(f"{name}: expected a CPU tensor, got device {x.device}")
        x = x.detach().contiguous()
        if dtype_name(x) == "bfloat16":
            import torch
            return x.view(torch.int16).numpy().view(np.uint16)
        return x.numpy()
    if not isinstance(x, np.ndarray):
        raise TypeError(f"{name}: expected a NumPy array or torch tensor, got {type(x).__name__}")
    if x.dtype.name not in dtypes:
        raise TypeError(f"{name}: expected {what}, got {x.dtype}")
    return np.ascontiguousarray(x)


def to_float32(a, dtype):
    """The float32 values of a NumPy array of ``dtype`` (bfloat16: its bits
    as uint16), exact (every bfloat16 and float16 is a float32)."""
    if dtype == "bfloat16":
        return (np.ascontiguousarray(a).astype(np.uint32) << 16).view(np.float32)
    return np.ascontiguousarray(a, np.float32)


def storage(dtype):
    """The NumPy dtype that holds ``dtype``'s values (bfloat16: its bits)."""
    return {"float32": np.float32, "float16": np.float16, "bfloat16": np.uint16}[dtype]


def as_dtype(a, dtype, torch_out):
    """A float32 NumPy result rounded to ``dtype`` (to nearest even), as a
    torch tensor when ``torch_out`` (a bfloat16 result must be)."""
    if not torch_out:
        return a if dtype == "float32" else a.astype(dtype)
    import torch
    t = torch.from_numpy(a)
    return t if dtype == "float32" else t.to(getattr(torch, dtype))


def kernel_array(a, dtype):
    """A NumPy array of ``dtype``'s storage as a kernel takes it (bfloat16
    bits: a torch bfloat16 tensor over the same memory)."""
    if dtype != "bfloat16":
        return a
    import torch
    return torch.from_numpy(a.view(np.int16)).view(torch.bfloat16)


class RNNWeights:
    """The weights of a ``cell`` ("lstm" or "gru") stack, checked once, with
    the packed layouts of each schedule made on first use and kept.  Pass it
    to :func:`lstm` / :func:`gru` in place of the list to pack only once
    (the arrays are not copied until packed: change them and make a new
    one).

    The weights are float32, or all bfloat16 or all float16 (torch's rule:
    one dtype; ``dtype``: the weights' dtype, needed only for NumPy arrays
    holding bfloat16 bits as uint16, NumPy having no bfloat16).  Reduced
    precision weights stay in their format in the packed layouts the
    recurrences read (half the bytes), the sums and states in float32; the
    biases are made float32 (exactly), and so are CSR values (sparse weights
    run in float32)."""

    def __init__(self, weights, cell="lstm", sparse=False, input_size=None, dtype=None):
        if cell not in GATES:
            raise ValueError(f"cell must be 'lstm' or 'gru', got {cell!r}")
        self.cell, self.gates = cell, GATES[cell]
        if not isinstance(weights, (list, tuple)) or not weights:
            raise TypeError("weights: expected a non-empty list per layer of [w_ih, w_hh, b_ih, "
                            f"b_hh] (like {cell.upper()}.all_weights), got {type(weights).__name__}")
        if dtype not in (None, "float32") + REDUCED:
            raise ValueError(f"dtype must be None, 'float32', 'bfloat16' or 'float16', "
                             f"got {dtype!r}")
        first = weights[0]
        self.dtype = dtype or weights_dtype(first)
        self._accepted = (self.dtype,) + (("uint16",) if self.dtype == "bfloat16" else ())
        if isinstance(first, (list, tuple)) and len(first) in (2, 4):
            w_hh = first[1] if _is_csr(first[1]) else as_numpy(
                first[1], "weights[0][1] (w_hh of layer 0)", self._accepted)
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
        # the packed weights' storage type: the weights' own, float32 for CSR
        self.wdtype = "float32" if self.sparse else self.dtype
        for layer in self.layers:
            for k, m in enumerate(layer):
                if m is not None and not _is_csr(m) and (k >= 2 or self.wdtype == "float32"):
                    layer[k] = to_float32(m, self.dtype)
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
            name = f"weights[{l}][{k}] ({TENSORS[k]} of layer {l})"
            if k < 2 and _is_csr(m):
                m = _check_csr(m, name)
            else:
                kind = dtype_name(m) if isinstance(m, np.ndarray) or is_torch(m) else None
                if kind is not None and kind not in self._accepted and \
                        kind in ("float32", "float64") + REDUCED:
                    raise TypeError(f"{name}: expected {self.dtype}, the dtype of weights[0][1] "
                                    f"(w_hh of layer 0): one dtype for all weights, as torch; "
                                    f"got {kind}")
                m = as_numpy(m, name, self._accepted)
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
        return blocking(self.gates, batch)

    @property
    def nbytes(self) -> int:
        """The bytes of the packed layouts made so far (the weights
        themselves are the caller's, or the cache's copies)."""
        def size(v):
            if isinstance(v, np.ndarray):
                return v.nbytes
            if isinstance(v, dict):
                return sum(size(x) for x in v.values())
            if isinstance(v, (list, tuple)):
                return sum(size(x) for x in v)
            return 0
        return size(list(self._packed.values()))

    def packed(self, what, batch, blk=None):
        """The packed arrays of one schedule (made once, kept) for the
        blocking ``blk`` (default: :meth:`blocking`, the host's)."""
        blk = blk or self.blocking(batch)
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
        Hp = padded(H, hb)
        if Hp == H and storage(self.wdtype) == m.dtype == np.float32:     # (no padding)
            return gate_blocked(np.ascontiguousarray(m), G, hb,
                                np.empty((H // hb, m.shape[1], G, hb), np.float32))
        w = np.zeros((G, Hp, m.shape[1]), storage(self.wdtype))
        w[:, :H] = m.reshape(G, H, -1)
        return np.ascontiguousarray(w.reshape(G, Hp // hb, hb, -1).transpose(1, 3, 0, 2))

    def _bias(self, l, k, hb):
        G, H = self.gates, self.hidden
        Hp = padded(H, hb)
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
            wiT = np.ascontiguousarray(wi.transpose(1, 0, 2, 3).reshape(wi.shape[1], -1))
            out.append(dict(                                        # [I, NB*G*HB]: the GEMM's
                wiT=wiT if self.wdtype in PAIRED else to_float32(wiT, self.wdtype),
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
        return self._pack_sparse(blk, lambda whh: self._csr_packed(whh, blk.hb, group=blk.lanes))

    def _pack_window(self, blk):
        """As :meth:`_pack_csr`, with ``w_hh`` in windows
        (:mod:`schedules.weights.window`: the product's AVX-512 layout)."""
        def recurrent(whh):
            rowptr, colidx, values = self._csr_packed(whh, blk.hb)
            return windowed(rowptr, colidx, values, len(rowptr) - 1, self.hidden)
        return self._pack_sparse(blk, recurrent)

    def _pack_sparse(self, blk, recurrent):
        """Per layer: ``w_ih`` in CSR over the packed rows, its columns in
        blocks of :func:`projection_block` (:func:`column_blocked`),
        ``recurrent(w_hh)`` and the biases."""
        width = projection_block(blk.lanes)
        # sealed (read-only to NumPy; checked in full by every call): the kernels
        # read these index arrays on every call, their values never change
        return [dict(wi=tuple(map(seal, column_blocked(*self._csr_packed(wih, blk.hb),
                                                       int(wih.shape[1]), width))),
                     wh=tuple(map(seal, recurrent(whh))), **self._biases(l, blk.hb))
                for l, (wih, whh, _, _) in enumerate(self.layers)]

    def _csr_packed(self, m, hb, group=1):
        """CSR with its rows in the packed order ``(jb * G + g) * HB + j``
        (padded units: empty rows); ``group`` > 1: each row padded with
        zeros to a multiple of ``group`` nonzeros, ``rowptr`` counting
        groups."""
        G, H = self.gates, self.hidden
        rowptr, colidx, values = ((np.asarray(m.rowptr), np.asarray(m.colidx),
                                   np.asarray(m.values)) if _is_csr(m) else _csr_arrays(m))
        Hp = padded(H, hb)
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


PROJECTION_TILE = 8     # vectors of a row of the CSR projection kept in registers


def projection_block(lanes, l1d=None):
    """Columns of a sparse ``w_ih`` per block of the hoisted projection
    (:func:`schedules.solvers.rnn_cpu._projection_kernel`): the rows of the
    input a block's nonzeros read, a tile of :data:`PROJECTION_TILE`
    vectors each, fill this host's L1 data cache, so that a block's
    products read the input from L1 or close to it (a multiple of 8, at
    least 8; 4096 x 1024 at 15% on a 32 KB L1 and 16 lanes: 8 columns 4.6
    ms, 16 2.8, 32 1.9, 64 1.5, 128 1.4, 256 1.6, unblocked 1.8)."""
    l1d = l1d or host().l1d
    return max(8, l1d // (PROJECTION_TILE * lanes * 4) // 8 * 8)


def column_blocked(rowptr, colidx, values, cols, width):
    """A CSR matrix of ``cols`` columns, its nonzeros regrouped by blocks of
    ``width`` columns:
    (``ptr``, colidx, values) with the nonzeros of row ``r`` in columns
    ``[kb * width, (kb + 1) * width)`` at ``ptr[kb * R + r] : ptr[kb * R
    + r + 1]`` (R rows; within a block in the row's order)."""
    R = len(rowptr) - 1
    row = np.repeat(np.arange(R, dtype=np.int64), np.diff(rowptr.astype(np.int64)))
    slot = colidx.astype(np.int64) // width * R + row           # kb * R + r
    nkb = max(1, -(-cols // width))
    order = np.argsort(slot, kind="stable")                    # each row's order kept
    ptr = np.zeros(nkb * R + 1, np.int64)
    np.cumsum(np.bincount(slot, minlength=nkb * R), out=ptr[1:])
    return (ptr.astype(np.int32), np.ascontiguousarray(colidx[order]),
            np.ascontiguousarray(values[order]))


def weights_dtype(layer):
    """The dtype of a layer's ``w_hh`` when it is a reduced-precision array,
    else float32 (the tensors' own checks name what is wrong)."""
    m = layer[1] if isinstance(layer, (list, tuple)) and len(layer) in (2, 4) else None
    if m is None or _is_csr(m) or not (isinstance(m, np.ndarray) or is_torch(m)):
        return "float32"
    name = dtype_name(m)
    return name if name in REDUCED else "float32"


def _csr_to_dense(m):
    return csr_to_dense(m.rowptr, m.colidx, m.values, tuple(int(d) for d in m.shape))


def rnn_weights(weights, cell="lstm", sparse=False, input_size=None):
    """``RNNWeights(weights, cell, sparse, input_size)``, made once per
    weights and reused, its packed layouts with it, while every array holds
    the values it held (:func:`schedules.core.prepared.prepared`; the
    RNNWeights is built on the cache's read-only copies).  ``weights`` as
    :class:`RNNWeights` takes them; float32 (bfloat16, float16) NumPy arrays
    or CPU tensors and CSR objects (``rowptr, colidx, values, shape``) are
    cached, anything else is checked and packed on every call as before."""
    layout, sources = _sources(weights)
    if layout is None:
        return RNNWeights(weights, cell, sparse=sparse, input_size=input_size)
    dtype = weights_dtype(weights[0])      # (the copies of bfloat16 tensors are their bits)

    def make(arrays):
        it, out = iter(arrays), []
        for layer in layout:
            row = []
            for kind in layer:
                if kind == "dense":
                    m = next(it)
                    row.append(m.view(np.uint16) if m.dtype == np.int16 else m)
                else:
                    row.append(SimpleNamespace(rowptr=next(it), colidx=next(it),
                                               values=next(it), shape=kind))
            out.append(row)
        return RNNWeights(out, cell, sparse=sparse, input_size=input_size, dtype=dtype)
    return prepared("rnn", sources, make, extra=(cell, bool(sparse), input_size, layout, dtype))


def _sources(weights):
    """``(layout, arrays)`` of a per-layer weight list: per tensor "dense" or
    a CSR object's shape, and the arrays in order; ``(None, None)`` when a
    tensor is not a float32, bfloat16 or float16 host array or CSR object
    (RNNWeights then checks and names it)."""
    if not isinstance(weights, (list, tuple)) or not weights:
        return None, None
    layout, sources = [], []
    for layer in weights:
        if not isinstance(layer, (list, tuple)) or len(layer) not in (2, 4):
            return None, None
        kinds = []
        for m in layer:
            if _is_csr(m) and not isinstance(m, np.ndarray) and not is_torch(m):
                try:
                    shape = tuple(int(d) for d in m.shape)
                except (TypeError, ValueError):
                    return None, None
                kinds.append(shape)
                sources += [m.rowptr, m.colidx, m.values]
            elif _float_host(m):
                kinds.append("dense")
                sources.append(m)
            else:
                return None, None
        layout.append(tuple(kinds))
    return tuple(layout), sources


def _float_host(m):
    if isinstance(m, np.ndarray):
        return m.dtype in (np.float32, np.float16)
    return (is_torch(m) and dtype_name(m) in ("float32",) + REDUCED and m.device.type == "cpu"
            and str(m.layout) == "torch.strided")


def blocking(gates, batch):
    """Hidden block and register block for this machine.  At batch 1: two
    SIMD vectors per gate (2 x G accumulators).  Else one vector per gate
    and as many batch rows MB as fit the registers with the G weight vectors
    and a broadcast beside the MB x G accumulators (AVX2, 16 registers:
    LSTM 2, GRU 4; a third row for the LSTM spilled and measured ~10%
    slower, one thread, H = 512, B = 64)."""
    h = host()
    lanes = h.lanes(4)
    if batch == 1:
        return Blocking(hb=2 * lanes, mb=1, lanes=lanes)
    mb = max(1, min(batch, 8, (h.vector_registers - gates - 1) // gates))
    return Blocking(hb=lanes, mb=mb, lanes=lanes)

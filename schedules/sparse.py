"""Sparse weights in CSR form and the CSR sparse-weight convolution.

:class:`CSRWeights` holds a pruned weight once (``rowptr``, ``colidx``,
``values`` and the dense ``shape``) and caches the layouts kernels derive from
it (the flat input offsets of a convolution for one image size); the sparse
convolution here and the sparse RNNs share it.

``sparse_conv2d`` is the direct sparse convolution of Park et al. (ICLR'17),
an algorithm and a schedule in the DSL (:func:`function`):

* per image, the input is zero-padded once into a flat image
  ``x_image[ci*Hp*Wp + y*Wp + x]`` (plus a zero tail, see below);
* ``colidx`` holds, per nonzero ``(co, ci, ky, kx)``, the flat offset
  ``ci*Hp*Wp + ky*dh*Wp + kx*dw`` (:meth:`CSRWeights.conv_offsets`), so the
  output of row ``co`` at the flat position ``q = y*Wp + x`` is
  ``bias[co] + sum_j val[j] * x_image[colidx[j] + stride*q]``: with stride 1
  every nonzero reads a *contiguous* run of the padded image (no im2col);
* the output row of one channel, in that flat layout (``Wp - Wo`` unused
  columns per row, padded to whole register tiles), is split into tiles of
  ``vector_registers - 2`` SIMD vectors: loops ``n, co, q0, j, qu, qv`` with
  the tile accumulated in registers across the data-dependent nonzero loop
  ``j`` (``accumulate_locally``: one broadcast and one FMA per vector per
  nonzero, the output row touched once per tile), then copied (or, fused,
  pooled with ReLU) to NCHW;
* images are parallel when there are enough of them, else output channels.
"""
from __future__ import annotations

import numpy as np

import tiramisu_py as tp

from . import runtime
from .conv import ConvShape
from .host import host

_INDEX_DTYPES = (np.int32, np.int64)


# ------------------------------------------------------------------ the weight type
class CSRWeights:
    """A sparse weight in CSR form: row ``r`` holds ``values[rowptr[r]:rowptr[r+1]]``
    at columns ``colidx[...]``.  ``shape`` is the dense shape: ``(rows, cols)``,
    or ``(Cout, Cin, KH, KW)`` for a convolution (rows = Cout, cols =
    Cin*KH*KW, column ``ci*KH*KW + ky*KW + kx``).  Checked on construction
    (ValueError naming the field): rowptr starts at 0 and never decreases,
    ends at nnz; colidx in ``[0, cols)``; values as many as colidx."""

    def __init__(self, rowptr, colidx, values, shape):
        shape = tuple(shape) if isinstance(shape, (tuple, list)) else shape
        if (not isinstance(shape, tuple) or len(shape) not in (2, 4)
                or any(isinstance(d, bool) or not isinstance(d, (int, np.integer)) or d < 0
                       for d in shape)):
            raise ValueError(f"CSRWeights: shape must be 2 or 4 non-negative ints, got {shape!r}")
        self.shape = tuple(int(d) for d in shape)
        rows, cols = self.shape[0], int(np.prod(self.shape[1:]))
        self.rowptr = _index_array(rowptr, "rowptr")
        self.colidx = _index_array(colidx, "colidx")
        values = np.asarray(values.numpy() if runtime.is_torch(values) else values)
        if values.dtype != np.float32 or values.ndim != 1:
            raise ValueError(f"CSRWeights: values must be a 1-D float32 array, got "
                             f"{values.dtype} of shape {values.shape}")
        self.values = np.ascontiguousarray(values)
        if self.rowptr.shape[0] != rows + 1:
            raise ValueError(f"CSRWeights: rowptr has {self.rowptr.shape[0]} entries; "
                             f"{rows} rows need {rows + 1}")
        if self.rowptr[0] != 0:
            raise ValueError(f"CSRWeights: rowptr must start at 0, starts at {self.rowptr[0]}")
        if rows and (np.diff(self.rowptr) < 0).any():
            r = int(np.argmax(np.diff(self.rowptr) < 0))
            raise ValueError(f"CSRWeights: rowptr must be non-decreasing: rowptr[{r}] = "
                             f"{self.rowptr[r]} > rowptr[{r + 1}] = {self.rowptr[r + 1]}")
        nnz = int(self.rowptr[-1])
        if self.colidx.shape[0] != nnz:
            raise ValueError(f"CSRWeights: nnz mismatch: rowptr ends at {nnz}, colidx has "
                             f"{self.colidx.shape[0]} entries")
        if self.values.shape[0] != nnz:
            raise ValueError(f"CSRWeights: nnz mismatch: rowptr ends at {nnz}, values has "
                             f"{self.values.shape[0]} entries")
        if nnz and (self.colidx.min() < 0 or self.colidx.max() >= cols):
            bad = int(self.colidx[(self.colidx < 0) | (self.colidx >= cols)][0])
            raise ValueError(f"CSRWeights: colidx holds {bad}, out of range [0, {cols})")
        self._derived = {}

    @classmethod
    def from_dense(cls, w, threshold=0.0):
        """The CSR form of a dense 2-D or 4-D float32 weight (NumPy or torch),
        keeping the entries with ``|w| > threshold`` (NaN kept)."""
        w = w.detach().cpu().numpy() if runtime.is_torch(w) else w
        if not isinstance(w, np.ndarray):
            raise TypeError(f"CSRWeights.from_dense: w must be a NumPy array or torch tensor, "
                            f"got {type(w).__name__}")
        if w.dtype != np.float32 or w.ndim not in (2, 4):
            raise ValueError(f"CSRWeights.from_dense: w must be 2-D or 4-D float32, got "
                             f"{w.dtype} of shape {w.shape}")
        flat = w.reshape(w.shape[0], int(np.prod(w.shape[1:])))
        keep = ~(np.abs(flat) <= threshold)
        rows, cols = np.nonzero(keep)
        rowptr = np.zeros(flat.shape[0] + 1, np.int64)
        np.cumsum(np.bincount(rows, minlength=flat.shape[0]), out=rowptr[1:])
        index = np.int32 if max(flat.shape[1], rows.size) < 2 ** 31 else np.int64
        return cls(rowptr.astype(index), cols.astype(index), flat[rows, cols], w.shape)

    @property
    def nnz(self) -> int:
        return int(self.rowptr[-1])

    @property
    def density(self) -> float:
        """nnz / (rows * cols); 0.0 for an empty shape."""
        size = int(np.prod(self.shape))
        return self.nnz / size if size else 0.0

    def to_dense(self):
        out = np.zeros((self.shape[0], int(np.prod(self.shape[1:]))), np.float32)
        rows = np.repeat(np.arange(self.shape[0]), np.diff(self.rowptr))
        out[rows, self.colidx] = self.values
        return out.reshape(self.shape)

    def __repr__(self):
        return f"CSRWeights(shape={self.shape}, nnz={self.nnz}, density={self.density:.3g})"

    def derived(self, key, make):
        """Kernel-specific data derived from the weights, made once by
        ``make()`` and cached on the object under ``key``."""
        if key not in self._derived:
            self._derived[key] = make()
        return self._derived[key]

    def conv_offsets(self, kh, kw, hp, wp, dh=1, dw=1):
        """``colidx`` as flat offsets ``ci*hp*wp + ky*dh*wp + kx*dw`` into a
        padded ``hp x wp`` image (int32; cached per image size)."""
        def make():
            c = self.colidx.astype(np.int64)
            ci, r = np.divmod(c, kh * kw)
            ky, kx = np.divmod(r, kw)
            off = ci * (hp * wp) + ky * (dh * wp) + kx * dw
            if off.size and off.max() >= 2 ** 31:
                raise ValueError(f"sparse conv: the padded input ({hp}x{wp} per channel) is "
                                 "too large for 32-bit offsets")
            return off.astype(np.int32)
        return self.derived(("conv_offsets", kh, kw, hp, wp, dh, dw), make)

    def conv_layout(self, kh, kw, hp, wp, dh=1, dw=1, cb=None):
        """``(rowptr, colidx, values)`` as the sparse conv kernel takes them
        (cached): int32 row pointers, with ``cb`` (input channels per block)
        one per (row, channel block), ``Cout * ceil(Cin / cb) + 1`` of them
        (each row's nonzeros ordered by block; stable, so sorted columns stay
        as they are); colidx as flat offsets (:meth:`conv_offsets`); at least
        one element in colidx and values (the kernel's arrays may not be
        empty when the loops reading them never run)."""
        def make():
            if self.nnz >= 2 ** 31:
                raise ValueError(f"sparse conv: {self.nnz} nonzeros do not fit 32-bit row pointers")
            rows, ci = self.shape[0], self.shape[1]
            nb = -(-ci // cb) if cb else 1
            row = np.repeat(np.arange(rows, dtype=np.int64), np.diff(self.rowptr))
            key = row * nb + (self.colidx // (kh * kw * cb) if cb else 0)
            off, val = self.conv_offsets(kh, kw, hp, wp, dh, dw), self.values
            if key.size and (np.diff(key) < 0).any():
                order = np.argsort(key, kind="stable")
                key, off, val = key[order], off[order], val[order]
            rowptr = np.zeros(rows * nb + 1, np.int64)
            np.cumsum(np.bincount(key, minlength=rows * nb), out=rowptr[1:])
            if not self.nnz:
                off, val = np.zeros(1, np.int32), np.zeros(1, np.float32)
            return rowptr.astype(np.int32), off, val
        return self.derived(("conv_layout", kh, kw, hp, wp, dh, dw, cb), make)


def _index_array(a, name):
    a = a.numpy() if runtime.is_torch(a) else a
    a = np.asarray(a)
    if a.ndim != 1 or a.dtype.type not in _INDEX_DTYPES:
        raise ValueError(f"CSRWeights: {name} must be a 1-D int32 or int64 array, got "
                         f"{a.dtype} of shape {a.shape}")
    return np.ascontiguousarray(a)


def is_sparse(w) -> bool:
    """A sparse weight: CSRWeights, a torch sparse-CSR tensor or a scipy CSR matrix."""
    if isinstance(w, CSRWeights):
        return True
    if runtime.is_torch(w):
        return str(getattr(w, "layout", "")) == "torch.sparse_csr"
    return type(w).__module__.startswith("scipy.sparse")


def density_of(w) -> float:
    """The fraction of nonzeros of a dense NumPy array or torch tensor."""
    size = int(np.prod(w.shape))
    if not size:
        return 0.0
    nz = int(w.count_nonzero()) if runtime.is_torch(w) else np.count_nonzero(w)
    return nz / size


def as_csr(w, ci, name="w"):
    """``w`` as CSRWeights of shape (Cout, Cin, KH, KW), ``ci`` = the input's
    channels.  A 2-D sparse matrix (torch sparse-CSR, scipy CSR, 2-D
    CSRWeights) of shape (Cout, Cin*K*K) is read as a square K x K kernel."""
    if isinstance(w, CSRWeights):
        csr = w
    elif runtime.is_torch(w) and is_sparse(w):
        if str(w.dtype) != "torch.float32":
            raise TypeError(f"{name}: expected a float32 tensor, got {w.dtype}")
        csr = CSRWeights(w.crow_indices().numpy(), w.col_indices().numpy(),
                         w.values().numpy(), tuple(w.shape))
    elif is_sparse(w):              # scipy
        if getattr(w, "format", None) != "csr":
            raise TypeError(f"{name}: expected a scipy CSR matrix, got format {w.format!r}")
        if w.dtype != np.float32:
            raise TypeError(f"{name}: expected float32, got {w.dtype}")
        csr = CSRWeights(w.indptr, w.indices, w.data, w.shape)
    else:
        return CSRWeights.from_dense(runtime.float32_array(w, name, 4))
    if len(csr.shape) == 4:
        return csr
    cols = csr.shape[1]
    k = int(round((cols / ci) ** 0.5)) if ci else 0
    if ci == 0 or k * k * ci != cols:
        raise ValueError(f"{name}: a 2-D sparse weight must have Cin*K*K columns for a square "
                         f"K x K kernel; it has {cols} for {ci} input channels (pass "
                         "CSRWeights with the 4-D shape (Cout, Cin, KH, KW))")
    return csr.derived(("as4d", ci), lambda: CSRWeights(csr.rowptr, csr.colidx, csr.values,
                                                         (csr.shape[0], ci, k, k)))


# ------------------------------------------------------------------ shape
def pitch(s: ConvShape):
    """Row pitch of the flat output row of shape ``s``: the padded width
    when both strides agree (then an output row is a run of the flat input),
    else Wo."""
    return s.wp if s.sh == s.sw else s.wo


def conv_shape(x_shape, w_shape, stride, padding, dilation, op="sparse_conv2d"):
    """The checked :class:`schedules.conv.ConvShape` of a sparse convolution
    (``groups`` 1; errors name ``op``, ``x`` and ``w``)."""
    return ConvShape.make(x_shape, w_shape, stride, padding, dilation, 1, op, names=("x", "w"))


def tile_size(s: ConvShape, vectors=None):
    """``(T, Qp)``: floats per register tile (whole SIMD vectors, at most
    ``vectors``, default two fewer than the vector registers: one holds the
    broadcast weight) and the flat output row padded to whole tiles."""
    lanes = host().lanes(4)
    vectors = vectors or max(1, host().vector_registers - 2)
    q = (s.ho - 1) * pitch(s) + s.wo
    ntiles = -(-q // (vectors * lanes))
    t = -(-(-(-q // ntiles)) // lanes) * lanes
    return t, ntiles * t


def plan(s: ConvShape, vectors=None, rows_outer=None, channel_block=None, density=1.0):
    """The schedule's choices for shape ``s`` and weight ``density``
    (arguments given win): ``tile`` / ``qp`` (:func:`tile_size`), ``size`` /
    ``tail`` (floats of the flat padded image and of the zero tail after it
    that the last tile may read), ``channel_block`` (input channels per
    block, so that one block of the band of input rows a tile reads fills
    half of L1; None or 0: no blocking) and ``rows_outer``: by default when
    the padded image exceeds twice L2 and a block's share of a CSR row holds
    at least 16 nonzeros on average.  Below that the tile loads and stores
    per block cost more than L1 reuse saves, and channels outer won in every
    measurement (8x512x14x14, one run: 7.6 vs 19.5 ms at 1%, 102 vs 108 ms
    at 10%, 351 ms both at 40%; 4x512x28x28: 30 vs 44 ms at 1%, 876 vs 759 ms
    at 40%, where rows outer with blocks wins and unblocked took 938 ms)."""
    t, qp = tile_size(s, vectors)
    size = s.ci * s.hp * s.wp
    # the last read: the largest offset of a nonzero + the last (padded) position
    last = max(s.ci - 1, 0) * s.hp * s.wp + (s.kh - 1) * s.dh * s.wp + (s.kw - 1) * s.dw + \
        (((qp - 1) // pitch(s)) * s.sh * s.wp + ((qp - 1) % pitch(s)) * s.sw if s.sh != s.sw
         else (qp - 1) * s.sh)
    tail = max(0, last + 1 - size)
    if channel_block is None:
        band = (-(-t // pitch(s)) + 1) * s.sh + (s.kh - 1) * s.dh      # input rows a tile reads
        channel_block = max(1, host().l1d // 2 // (band * s.wp * 4))
    if rows_outer is None:
        rows_outer = (4 * (size + tail) > 2 * host().l2
                      and density * min(channel_block or s.ci, s.ci) * s.kh * s.kw >= 16)
    if not rows_outer or not channel_block or channel_block >= s.ci:
        channel_block = None
    return dict(tile=t, qp=qp, size=size, tail=tail, rows_outer=rows_outer,
                channel_block=channel_block)


# ------------------------------------------------------------------ the Function
def function(s: ConvShape, bias=True, pool=1, relu=False, vectors=None, parallel=None,
             rows_outer=None, channel_block=None, density=1.0):
    """The scheduled sparse convolution (``pool > 1``: ``max_pool(relu?(conv))``
    with non-overlapping ``pool x pool`` windows, fused).  Kernel arguments:
    ``data`` (NCHW), ``rowptr`` (int32, Cout + 1), ``colidx`` (int32 flat
    offsets, :meth:`CSRWeights.conv_offsets`), ``val`` (float32), ``bias``;
    the param ``NNZ`` is the length of ``colidx``/``val``.  ``vectors``:
    SIMD vectors per register tile; ``parallel``: "n" or "co";
    ``rows_outer``: loops ``n, q0, co`` (each tile of output rows for every
    channel, so the band of input rows it reads stays in L2; the image's
    output is kept whole) instead of ``n, co, q0`` (one channel's row at a
    time, in L1).
    ``channel_block`` (rows outer only): loops ``n, q0, b, co, j`` where
    ``b`` runs over blocks of input channels and ``j`` over the nonzeros of
    row ``co`` in block ``b`` (``rowptr`` then has ``Cout * blocks + 1``
    entries, :meth:`CSRWeights.conv_layout`), so the slice of the input
    band one block reads stays in L1 while every channel reads it (4x512x28x28,
    40%: 547 ms with 16 channels per block, 1095 ms unblocked, one run).
    Defaults: :func:`plan` for ``density``."""
    name = "sparse_conv2d" if pool == 1 and not relu else "sparse_conv_relu_maxpool"
    f = tp.Function(name, params=["NNZ"])
    X = f.input("data", (s.n, s.ci, s.h, s.w), tp.float32)
    p = plan(s, vectors, rows_outer, channel_block, density)
    t, qp, size, tail, rows_outer, cb = (p[k] for k in ("tile", "qp", "size", "tail", "rows_outer",
                                                         "channel_block"))
    nb = -(-s.ci // cb) if cb else 1
    rowptr = f.input("rowptr", (s.co * nb + 1,), tp.int32)
    colidx = f.input("colidx", ("NNZ",), tp.int32)
    val = f.input("val", ("NNZ",), tp.float32)
    B = f.input("bias", (s.co,), tp.float32) if bias else None
    lanes = host().lanes(4)

    def offset(q):          # where output position q starts reading the flat image
        if s.sh == s.sw:
            return q * s.sh
        return (q // pitch(s)) * (s.sh * s.wp) + (q % pitch(s)) * s.sw
    plane = s.hp * s.wp
    ximg = f.buffer("x_image", (size + tail,), tp.float32)
    if parallel is None:
        cores = host().cores
        parallel = "n" if s.n >= cores and (s.n % cores == 0 or s.n >= 4 * cores) else "co"
    if parallel not in ("n", "co"):
        raise ValueError(f"{name}: parallel must be 'n' or 'co', got {parallel!r}")

    n = f.var("n", 0, s.n)
    with f.nest(n):
        # the input of image n, zero-padded, flat: x_image[ci*Hp*Wp + y*Wp + x]
        c, y, x = f.var("ic", 0, s.ci), f.var("iy", 0, s.hp), f.var("ix", 0, s.wp)
        inside = (y >= s.ph) & (y < s.h + s.ph) & (x >= s.pw) & (x < s.w + s.pw)
        xp = f.computation("x_padded", [n, c, y, x],
                           tp.select(inside, X[n, c, y - s.ph, x - s.pw], 0.0))
        xp.store_in(ximg, [c * plane + y * s.wp + x])
        if tail:        # read only by the unused positions of the last tile
            e = f.var("it", 0, tail)
            f.computation("x_tail", [n, e], 0.0).store_in(ximg, [size + e])
        co = f.var("co", 0, s.co)
        q = f.var("q", 0, qp)
        if rows_outer:      # tiles outside channels: acc holds the image's output
            b = f.var("b", 0, nb)
            j = f.var("j", rowptr[co * nb + b], rowptr[co * nb + b + 1])  # row co, block b
            acc = f.computation("acc", [n, co, q], B[co] if bias else 0.0)
            acc.store_in(f.buffer("acc_image", (s.co, qp), tp.float32), [co, q])
            acc[n, co, q].reduce("+", val[j] * ximg[colidx[j] + offset(q)],
                                 loops=[n, co, q, b, j])
            out = _write_out(f, s, acc, n, co, pool, relu)
        else:
            j = f.var("j", rowptr[co], rowptr[co + 1])        # the nonzeros of row co
            with f.nest(co):
                acc = f.computation("acc", [n, co, q], B[co] if bias else 0.0)
                acc.store_in(f.buffer("acc_row", (qp,), tp.float32), [q])
                acc[n, co, q].reduce("+", val[j] * ximg[colidx[j] + offset(q)], loops=[n, co, q, j])
                out = _write_out(f, s, acc, n, co, pool, relu)
    u = acc.update
    u.split("q", t, names=("q0", "q1"))
    u.split("q1", lanes, names=("qu", "qv"))
    if rows_outer:
        u.reorder("n", "q0", "b", "co", "j", "qu", "qv")
        acc.split("q", t, names=("q0", "q1"))
        acc.reorder("n", "q0", "co", "q1")
        u.after(acc, "q0")          # the tile's init for every channel, then its blocks
    else:
        u.reorder("n", "co", "q0", "j", "qu", "qv")
    u.accumulate_locally("j", allow_reassociation=True)
    if t > lanes:
        u.unroll("qu", t // lanes)
    u.vectorize("qv", lanes)
    acc.vectorize("q1" if rows_outer else "q", lanes)
    out.vectorize(out.loops[-1], lanes)
    if parallel == "n":
        xp.parallelize("n")
    else:
        xp.parallelize("ic")
        acc.parallelize("co")
        if rows_outer:
            u.parallelize("co")
            out.parallelize("co")
    return f


def _write_out(f, s, acc, n, co, pool, relu):
    """NCHW from the flat row: the copy (``pool == 1``), or the max over each
    pooling window, after ReLU when asked."""
    ph, pw = s.ho // pool, s.wo // pool
    oy, ox = f.var("oy", 0, ph), f.var("ox", 0, pw)
    best = None
    for dy in range(pool):
        for dx in range(pool):
            v = acc[n, co, (oy * pool + dy) * pitch(s) + ox * pool + dx]
            best = v if best is None else tp.max(best, v)
    return f.computation("out", [n, co, oy, ox], tp.max(best, 0.0) if relu else best)


# ------------------------------------------------------------------ operators
def _kernel(s, bias, pool, relu, p, target):
    order = dict(rows_outer=p["rows_outer"], channel_block=p["channel_block"] or 0)
    return runtime.kernel(("sparse_conv", s, bias, pool, relu, tuple(order.values())),
                          lambda: function(s, bias=bias, pool=pool, relu=relu, **order), target)


def _prepare(x, w, bias, stride, padding, dilation, groups, op):
    """Checked arguments: ``(x, csr, b, shape)``."""
    if not is_sparse(w):
        runtime.same_kind((x, w, bias), ("x", "w", "bias"))
    else:
        runtime.same_kind((x, bias), ("x", "bias"))
    x = runtime.float32_array(x, "x", 4)
    if groups != 1:
        raise ValueError(f"{op}: groups must be 1 for sparse weights, got {groups!r}")
    csr = as_csr(w, x.shape[1])
    if len(csr.shape) != 4:
        raise ValueError(f"{op}: w must be a 4-D (Cout, Cin, KH, KW) weight, got shape {csr.shape}")
    s = conv_shape(tuple(x.shape), csr.shape, stride, padding, dilation, op)
    b = None if bias is None else runtime.float32_array(bias, "bias", 1)
    if b is not None and b.shape[0] != s.co:
        raise ValueError(f"{op}: bias has {b.shape[0]} values for {s.co} output channels")
    return x, csr, b, s


def _call(x, csr, b, s, pool, relu, target):
    p = plan(s, density=csr.density)
    k = _kernel(s, b is not None, pool, relu, p, target)
    rowptr, colidx, val = csr.conv_layout(s.kh, s.kw, s.hp, s.wp, s.dh, s.dw, p["channel_block"])
    args = dict(data=x, rowptr=rowptr, colidx=colidx, val=val)
    if b is not None:
        args["bias"] = b
    return k(**args)


def sparse_conv2d(x, w, bias=None, stride=1, padding=0, dilation=1, groups=1, target=None):
    """``torch.nn.functional.conv2d`` with a sparse weight: NCHW float32, NumPy
    or CPU torch (the result has the input's kind).  ``w``: a dense weight
    with zeros (converted on every call), :class:`CSRWeights` (convert once
    with ``CSRWeights.from_dense``), a torch sparse-CSR tensor or a scipy CSR
    matrix of shape (Cout, Cin*K*K) (a square K x K kernel).  ``stride``,
    ``padding``, ``dilation``: ints or pairs; ``groups`` must be 1.
    ``target="cuda"``, or torch CUDA tensors with no target: the CUDA
    schedule :mod:`schedules.gpu_sparse`, the result on the input's device."""
    # (a torch sparse tensor raises on the device probe: the input decides)
    if runtime.use_cuda(target, x, None if is_sparse(w) else w, bias):
        from .gpu_ops import sparse_conv2d_cuda
        return sparse_conv2d_cuda(x, w, bias, stride, padding, dilation, groups)
    x, csr, b, s = _prepare(x, w, bias, stride, padding, dilation, groups, "sparse_conv2d")
    return _call(x, csr, b, s, 1, False, target)


def sparse_conv_relu_maxpool(x, w, bias=None, pool=2, *, stride=1, padding=0, dilation=1,
                             target=None):
    """``max_pool2d(relu(conv2d(x, w, bias, stride, padding, dilation)), pool)``
    with a sparse ``w`` (as in :func:`sparse_conv2d`), in one pass: each
    output channel's row is pooled from registers' tile results in L1; no
    conv-sized intermediate exists.  The convolution's keywords and defaults
    are torch's (as :func:`schedules.conv_relu_maxpool`); the TIRAMISU
    paper's block is ``padding=1``."""
    x, csr, b, s = _prepare(x, w, bias, stride, padding, dilation, 1, "sparse_conv_relu_maxpool")
    if not isinstance(pool, int) or isinstance(pool, bool) or not 1 <= pool <= min(s.ho, s.wo):
        raise ValueError(f"sparse_conv_relu_maxpool: pool must be an int in "
                         f"[1, {min(s.ho, s.wo)}], got {pool!r}")
    return _call(x, csr, b, s, pool, True, target)


def sparse_conv2d_function(n, ci, h, w, co, kh=3, kw=3, stride=1, padding=0, dilation=1,
                           bias=True, pool=1, relu=False, **schedule):
    """The scheduled Function, to inspect or re-schedule."""
    s = conv_shape((n, ci, h, w), (co, ci, kh, kw), stride, padding, dilation,
                   "sparse_conv2d_function")
    return function(s, bias=bias, pool=pool, relu=relu, **schedule)

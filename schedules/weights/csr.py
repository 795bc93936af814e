"""Sparse weights in CSR form: :class:`CSRWeights` holds a pruned weight once
(``rowptr``, ``colidx``, ``values`` and the dense ``shape``) and caches the
layouts kernels derive from it (the flat input offsets of a convolution for
one image size); the sparse convolutions and the sparse RNNs share it.
:func:`as_csr` reads the sparse forms a caller may pass (torch sparse-CSR,
scipy CSR, a dense weight), each converted once per weight and reused while
the weight is unchanged (:mod:`schedules.core.prepared`).

Never stale: a CSRWeights **copies** the arrays it is given and keeps them
read-only, so changing the caller's ``rowptr``/``colidx``/``values`` after
construction changes neither it nor a layout derived from it.  Duplicate
columns in a row are kept as given and **summed**, as the sparse kernels,
scipy and torch sum them (:meth:`CSRWeights.to_dense` too).
"""
from __future__ import annotations

import math

import numpy as np

from tiramisu_py.draw.pattern import sparsity_picture

from ..core.arrays import float32_array, is_torch
from ..core.prepared import prepared

_INDEX_DTYPES = (np.int32, np.int64)


class CSRWeights:
    """A sparse weight in CSR form: row ``r`` holds ``values[rowptr[r]:rowptr[r+1]]``
    at columns ``colidx[...]``.  ``shape`` is the dense shape: ``(rows, cols)``,
    or ``(Cout, Cin, KH, KW)`` for a convolution (rows = Cout, cols =
    Cin*KH*KW, column ``ci*KH*KW + ky*KW + kx``).  Checked on construction
    (ValueError naming the field): rowptr starts at 0 and never decreases,
    ends at nnz; colidx in ``[0, cols)``; values as many as colidx.  The
    arrays are copied and kept read-only (a later change of the caller's
    arrays changes nothing here); duplicate columns are summed."""

    def __init__(self, rowptr, colidx, values, shape, *, _copy=True):
        shape = tuple(shape) if isinstance(shape, (tuple, list)) else shape
        if (not isinstance(shape, tuple) or len(shape) not in (2, 4)
                or any(isinstance(d, bool) or not isinstance(d, (int, np.integer)) or d < 0
                       for d in shape)):
            raise ValueError(f"CSRWeights: shape must be 2 or 4 non-negative ints, got {shape!r}")
        self.shape = tuple(int(d) for d in shape)
        if math.prod(self.shape) >= 2 ** 63:
            raise ValueError(f"CSRWeights: shape {self.shape} has {math.prod(self.shape)} "
                             "elements, more than int64 can index (2**63 - 1); pass the weight's "
                             "true dense shape")
        rows, cols = self.shape[0], int(np.prod(self.shape[1:]))
        self.rowptr = _owned(_index_array(rowptr, "rowptr"), _copy)
        self.colidx = _owned(_index_array(colidx, "colidx"), _copy)
        values = np.asarray(values.numpy() if is_torch(values) else values)
        if values.dtype != np.float32 or values.ndim != 1:
            raise ValueError(f"CSRWeights: values must be a 1-D float32 array, got "
                             f"{values.dtype} of shape {values.shape}")
        self.values = _owned(values, _copy)
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
        w = w.detach().cpu().numpy() if is_torch(w) else w
        if not isinstance(w, np.ndarray):
            raise TypeError(f"CSRWeights.from_dense: w must be a NumPy array or torch tensor, "
                            f"got {type(w).__name__}")
        if w.dtype != np.float32 or w.ndim not in (2, 4):
            raise ValueError(f"CSRWeights.from_dense: w must be 2-D or 4-D float32, got "
                             f"{w.dtype} of shape {w.shape}")
        rows, cols = w.shape[0], int(np.prod(w.shape[1:]))
        flat = np.ascontiguousarray(w).reshape(rows, cols)
        keep = (flat != 0) if threshold == 0 else ~(np.abs(flat) <= threshold)   # NaN kept
        counts = np.count_nonzero(keep, axis=1)
        index = np.int32 if rows * cols < 2 ** 31 else np.int64
        rowptr = np.zeros(rows + 1, index)
        np.cumsum(counts, out=rowptr[1:])
        at = np.flatnonzero(keep.ravel())           # row-major: rows in order, columns sorted
        values = flat.ravel()[at]
        colidx = at.astype(index)
        colidx -= np.repeat(np.arange(rows, dtype=index) * index(cols), counts)
        return cls(rowptr, colidx, values, w.shape, _copy=False)

    @property
    def nnz(self) -> int:
        return int(self.rowptr[-1])

    @property
    def density(self) -> float:
        """nnz / (rows * cols); 0.0 for an empty shape."""
        size = int(np.prod(self.shape))
        return self.nnz / size if size else 0.0

    @property
    def nbytes(self) -> int:
        """The bytes held: the CSR arrays and the layouts derived so far."""
        def size(v):
            if isinstance(v, np.ndarray):
                return v.nbytes
            if isinstance(v, (tuple, list)):
                return sum(size(x) for x in v)
            return int(getattr(v, "nbytes", 0)) if not isinstance(v, CSRWeights) else 0
        return (self.rowptr.nbytes + self.colidx.nbytes + self.values.nbytes
                + sum(size(v) for v in self._derived.values()))

    def to_dense(self):
        """The dense weight (float32, of ``shape``); duplicate columns of a
        row summed in order, as the sparse kernels sum them."""
        return csr_to_dense(self.rowptr, self.colidx, self.values, self.shape)

    def draw(self, path=None):
        """A :class:`tiramisu_py.Picture` of the sparsity pattern: one row per
        output channel (row), one column per input position (``ci*KH*KW +
        ky*KW + kx`` for a convolution, a line between input channels); saved
        to ``path`` if given.  ``.data.nonzeros``: the (row, column) pairs.
        Rendering needs matplotlib (``pip install tiramisu_py[draw]``)."""
        rows = np.repeat(np.arange(self.shape[0]), np.diff(self.rowptr))
        conv = len(self.shape) == 4
        cols = int(np.prod(self.shape[1:]))
        return sparsity_picture(
            rows, self.colidx, (self.shape[0], cols),
            f"CSRWeights {'x'.join(map(str, self.shape))}: {self.nnz} nonzeros "
            f"({100 * self.density:.1f}%)",
            "output channel" if conv else "row",
            "input channel x kernel position" if conv else "column",
            self.shape[2] * self.shape[3] if conv else None, path)

    def __repr__(self):
        return f"CSRWeights(shape={self.shape}, nnz={self.nnz}, density={self.density:.3g})"

    def derived(self, key, make):
        """Kernel-specific data derived from the weights, made once by
        ``make()`` and cached on the object under ``key``."""
        if key not in self._derived:
            self._derived[key] = make()
        return self._derived[key]

    def rows(self, start, stop):
        """The weight of rows ``start:stop`` (a grouped convolution's group),
        made once and cached on this object (its own layouts with it)."""
        def make():
            lo, hi = int(self.rowptr[start]), int(self.rowptr[stop])
            return CSRWeights(self.rowptr[start:stop + 1] - self.rowptr.dtype.type(lo),
                              self.colidx[lo:hi], self.values[lo:hi],
                              (stop - start,) + self.shape[1:])
        return self.derived(("rows", start, stop), make)

    def conv_offsets(self, kh, kw, hp, wp, dh=1, dw=1, copy=0):
        """``colidx`` as flat offsets ``ci*hp*wp + ky*dh*wp + kx*dw`` into a
        padded ``hp x wp`` image (int32; cached per image size); ``copy`` >
        0: ``kx*copy + ci*hp*wp + ky*dh*wp``, into copy ``kx`` of ``copy``
        floats (the image shifted by ``kx*dw``: the sparse conv's aligned
        layout)."""
        def make():
            c = self.colidx.astype(np.int64)
            ci, r = np.divmod(c, kh * kw)
            ky, kx = np.divmod(r, kw)
            off = ci * (hp * wp) + ky * (dh * wp) + (kx * copy if copy else kx * dw)
            if off.size and off.max() >= 2 ** 31:
                raise ValueError(f"sparse conv: the padded input ({hp}x{wp} per channel) is "
                                 "too large for 32-bit offsets")
            return off.astype(np.int32)
        return self.derived(("conv_offsets", kh, kw, hp, wp, dh, dw, copy), make)

    def conv_layout(self, kh, kw, hp, wp, dh=1, dw=1, cb=None, copy=0):
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
            off, val = self.conv_offsets(kh, kw, hp, wp, dh, dw, copy), self.values
            if key.size and (np.diff(key) < 0).any():
                order = np.argsort(key, kind="stable")
                key, off, val = key[order], off[order], val[order]
            rowptr = np.zeros(rows * nb + 1, np.int64)
            np.cumsum(np.bincount(key, minlength=rows * nb), out=rowptr[1:])
            if not self.nnz:
                off, val = np.zeros(1, np.int32), np.zeros(1, np.float32)
            return rowptr.astype(np.int32), off, val
        return self.derived(("conv_layout", kh, kw, hp, wp, dh, dw, cb, copy), make)


def csr_to_dense(rowptr, colidx, values, shape):
    """The dense float32 array of ``shape`` of CSR arrays (rows =
    ``shape[0]``); duplicate columns summed in order."""
    rows, cols = shape[0], int(np.prod(shape[1:]))
    out = np.zeros(rows * cols, np.float32)
    r = np.repeat(np.arange(rows, dtype=np.int64), np.diff(np.asarray(rowptr, np.int64)))
    np.add.at(out, r * cols + np.asarray(colidx, np.int64), np.asarray(values, np.float32))
    return out.reshape(shape)


def _owned(a, copy):
    """``a`` as a contiguous read-only array of its own (copied if ``copy``)."""
    a = np.array(a, copy=True) if copy else np.ascontiguousarray(a)
    a.setflags(write=False)
    return a


def _index_array(a, name):
    a = a.numpy() if is_torch(a) else a
    a = np.asarray(a)
    if a.ndim != 1 or a.dtype.type not in _INDEX_DTYPES:
        raise ValueError(f"CSRWeights: {name} must be a 1-D int32 or int64 array, got "
                         f"{a.dtype} of shape {a.shape}")
    return np.ascontiguousarray(a)


def is_sparse(w) -> bool:
    """A sparse weight: CSRWeights, a torch sparse-CSR tensor or a scipy CSR matrix."""
    if isinstance(w, CSRWeights):
        return True
    if is_torch(w):
        return str(getattr(w, "layout", "")) == "torch.sparse_csr"
    return type(w).__module__.startswith("scipy.sparse")


def as_csr(w, ci, name="w"):
    """``w`` as CSRWeights of shape (Cout, Cin, KH, KW), ``ci`` = the input's
    channels.  A 2-D sparse matrix (torch sparse-CSR, scipy CSR, 2-D
    CSRWeights) of shape (Cout, Cin*K*K) is read as a square K x K kernel."""
    if isinstance(w, CSRWeights):
        csr = w
    elif is_torch(w) and is_sparse(w):
        if str(w.dtype) != "torch.float32":
            raise TypeError(f"{name}: expected a float32 tensor, got {w.dtype}")
        csr = csr_weights(w.crow_indices(), w.col_indices(), w.values(), tuple(w.shape))
    elif is_sparse(w):              # scipy
        if getattr(w, "format", None) != "csr":
            raise TypeError(f"{name}: expected a scipy CSR matrix, got format {w.format!r}")
        if w.dtype != np.float32:
            raise TypeError(f"{name}: expected float32, got {w.dtype}")
        csr = csr_weights(w.indptr, w.indices, w.data, w.shape)
    else:
        w = float32_array(w, name, 4)
        return prepared("csr_from_dense", [w], lambda a: CSRWeights.from_dense(a[0]))
    if len(csr.shape) == 4:
        return csr
    cols = csr.shape[1]
    k = int(round((cols / ci) ** 0.5)) if ci else 0
    if ci == 0 or k * k * ci != cols:
        raise ValueError(f"{name}: a 2-D sparse weight must have Cin*K*K columns for a square "
                         f"K x K kernel; it has {cols} for {ci} input channels (pass "
                         "CSRWeights with the 4-D shape (Cout, Cin, KH, KW))")
    return csr.derived(("as4d", ci), lambda: CSRWeights(csr.rowptr, csr.colidx, csr.values,
                                                         (csr.shape[0], ci, k, k), _copy=False))


def csr_weights(rowptr, colidx, values, shape):
    """``CSRWeights(rowptr, colidx, values, shape)`` made once per weight and
    reused (with the layouts derived from it) while the arrays hold the same
    values (:func:`schedules.core.prepared.prepared`): the sparse weight of a
    torch op or a torch/scipy sparse tensor, converted once, not per call."""
    if not isinstance(shape, (tuple, list)) or not all(isinstance(d, (int, np.integer))
                                                       for d in shape):
        return CSRWeights(rowptr, colidx, values, shape)      # (refused there, named)

    def make(arrays):          # the cache's read-only copies, or the sources as they are
        own = all(isinstance(a, np.ndarray) and not a.flags.writeable for a in arrays)
        return CSRWeights(*arrays, shape, _copy=not own)
    return prepared("csr", [rowptr, colidx, values], make, extra=(tuple(shape),))

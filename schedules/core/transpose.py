"""A float32 matrix transposed into a wider one, by a small C helper in
tiles of 16 x 16 (NumPy's strided copy of a 100 x 1024 matrix took ~0.3 ms,
2.7 ns an element: the sparse RNN layer's input, once per layer and call).
Built once per host through :func:`codegen.compile_c_source`; NumPy's copy
where no C compiler builds it."""
from __future__ import annotations

import numpy as np

from codegen import CHelper

SOURCE = r"""
#include <stdint.h>

/* dst[j * ld + i] = src[i * cols + j] for i < rows, j < cols, in tiles of
   16 x 16 (one tile's rows and columns stay in L1) */
void tp_transpose_f32(const float *src, int64_t rows, int64_t cols, float *dst, int64_t ld)
{
    for (int64_t i0 = 0; i0 < rows; i0 += 16) {
        int64_t i1 = i0 + 16 < rows ? i0 + 16 : rows;
        for (int64_t j0 = 0; j0 < cols; j0 += 16) {
            int64_t j1 = j0 + 16 < cols ? j0 + 16 : cols;
            for (int64_t j = j0; j < j1; j++)
                for (int64_t i = i0; i < i1; i++)
                    dst[j * ld + i] = src[i * cols + j];
        }
    }
}
"""
DECLARATION = ("void tp_transpose_f32(uintptr_t src, int64_t rows, int64_t cols, uintptr_t dst, "
               "int64_t ld);")

_HELPER = CHelper("tp_transpose_f32", SOURCE, DECLARATION)


def _transpose():
    lib = _HELPER.lib()
    return lib.tp_transpose_f32 if lib else None


def transposed_into(src, out):
    """``out[:, :rows] = src.T`` for a C-contiguous float32 ``src`` (rows x
    cols) and a C-contiguous float32 ``out`` (cols x at least rows); the
    rest of ``out`` is left as it is.  Returns ``out``."""
    rows, cols = src.shape
    if out.shape[0] != cols or out.shape[1] < rows:
        raise ValueError(f"transposed_into: out of shape {out.shape} cannot hold the "
                         f"transpose of {src.shape}")
    f = _transpose()
    if f is None or src.dtype != np.float32 or out.dtype != np.float32 \
            or not (src.flags.c_contiguous and out.flags.c_contiguous):
        out[:, :rows] = src.T
    elif src.size:
        f(src.ctypes.data, rows, cols, out.ctypes.data, out.shape[1])
    return out


def gate_blocked(m, gates, hb, out):
    """``out[jb, k, g, j] = m[g * H + jb * hb + j, k]`` for a C-contiguous
    float32 ``m`` (``gates * H`` x K, H a multiple of ``hb``) and a
    C-contiguous float32 ``out`` (H / hb, K, ``gates``, ``hb``): a recurrent
    weight in its packed layout (:mod:`schedules.weights.rnn`), one tiled
    transpose per block of ``hb`` rows of a gate (NumPy's strided copy of
    1024 x 256 in blocks of 16 took ~1.2 ms, a training step's four of them
    most of a 2-layer LSTM's forward).  Returns ``out``."""
    rows, K = m.shape
    H = rows // gates
    nb = H // hb
    if out.shape != (nb, K, gates, hb) or nb * hb * gates != rows:
        raise ValueError(f"gate_blocked: out of shape {out.shape} cannot hold {m.shape} in "
                         f"blocks of {hb} units of {gates} gates")
    f = _transpose()
    if f is None or m.dtype != np.float32 or out.dtype != np.float32 \
            or not (m.flags.c_contiguous and out.flags.c_contiguous):
        out[...] = m.reshape(gates, nb, hb, K).transpose(1, 3, 0, 2)
        return out
    src, dst, size = m.ctypes.data, out.ctypes.data, m.itemsize
    for jb in range(nb):
        for g in range(gates):
            f(src + (g * H + jb * hb) * K * size, hb, K,
              dst + (jb * K * gates + g) * hb * size, gates * hb)
    return out

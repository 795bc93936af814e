"""A float32 matrix transposed into a wider one, by a small C helper in
tiles of 16 x 16, each through registers (NumPy's strided copy of a 100 x
1024 matrix took ~0.3 ms, 2.7 ns an element: the sparse RNN layer's input,
once per layer and call; packed weights, made again at each training step).
Built once per host through :func:`codegen.compile_c_source`; NumPy's copy
where no C compiler builds it."""
from __future__ import annotations

import numpy as np

from codegen import CHelper
from codegen.c.transpose import pairs, rounds

from .workers import split


def _tile_source():
    """C of one 16 x 16 tile transposed through registers: 16 vector loads,
    the rounds of :func:`codegen.c.transpose.rounds` (within 128-bit lanes
    first, then whole lanes) and 16 vector stores (GCC vector extensions)."""
    plan, order = rounds(16, 4)
    lines = ["    v16 " + ", ".join(f"r0_{k} = tp_ld(s + {k} * cols)" for k in range(16)) + ";"]
    for n, (lo, hi) in enumerate(plan):
        lo, hi = (", ".join(map(str, idx)) for idx in (lo, hi))
        for i, j in pairs(16, n):
            a, b = f"r{n}_{i}", f"r{n}_{j}"
            lines.append(f"    v16 r{n + 1}_{i} = __builtin_shuffle({a}, {b}, (i16){{{lo}}}), "
                         f"r{n + 1}_{j} = __builtin_shuffle({a}, {b}, (i16){{{hi}}});")
    lines += [f"    tp_st(t + {c} * ld, r{len(plan)}_{order[c]});" for c in range(16)]
    return "\n".join(lines)


SOURCE = r"""
#include <stdint.h>
#include <string.h>

typedef float v16 __attribute__((vector_size(64)));
typedef int32_t i16 __attribute__((vector_size(64)));
static inline v16 tp_ld(const float *p) { v16 v; memcpy(&v, p, sizeof v); return v; }
static inline void tp_st(float *p, v16 v) { memcpy(p, &v, sizeof v); }

/* the 16 x 16 tile at s (rows cols apart) into t (rows ld apart), transposed */
static inline void tp_tile16(const float *s, int64_t cols, float *t, int64_t ld)
{
TILE
}

/* dst[j * ld + i] = src[i * cols + j] for i < rows, j < cols: whole tiles of
   16 x 16 through registers, the edges element by element */
void tp_transpose_f32(const float *src, int64_t rows, int64_t cols, float *dst, int64_t ld)
{
    int64_t r16 = rows - rows % 16, c16 = cols - cols % 16;
    for (int64_t i0 = 0; i0 < r16; i0 += 16)
        for (int64_t j0 = 0; j0 < c16; j0 += 16)
            tp_tile16(src + i0 * cols + j0, cols, dst + j0 * ld + i0, ld);
    for (int64_t i = 0; i < rows; i++)
        for (int64_t j = i < r16 ? c16 : 0; j < cols; j++)
            dst[j * ld + i] = src[i * cols + j];
}

/* dst[b][j][v] = src[b * vb + v][j] for b0 <= b < b1 (src: rows x cols), zero where
   b * vb + v >= rows: the rows in blocks of vb, each block transposed */
void tp_pack_blocks_f32(const float *src, int64_t rows, int64_t cols, int64_t vb, float *dst,
                        int64_t b0, int64_t b1)
{
    for (int64_t b = b0; b < b1; b++) {
        int64_t n = rows - b * vb < vb ? rows - b * vb : vb;
        float *d = dst + b * cols * vb;
        if (n < vb)
            memset(d, 0, sizeof(float) * cols * vb);
        tp_transpose_f32(src + b * vb * cols, n, cols, d, vb);
    }
}

/* per group g: dst[g][j][i][q] = src[g][i][j][k - 1 - q], each group a rows x cols
   matrix of items of k floats transposed, each item reversed, in tiles of 16 x 16 items */
void tp_flip_items_f32(const float *src, int64_t groups, int64_t rows, int64_t cols, int64_t k,
                       float *dst)
{
    if (k == 1) {       /* (a pointwise weight's) each group a plain transpose, in tiles */
        for (int64_t g = 0; g < groups; g++, src += rows * cols, dst += rows * cols)
            tp_transpose_f32(src, rows, cols, dst, rows);
        return;
    }
    for (int64_t g = 0; g < groups; g++, src += rows * cols * k, dst += rows * cols * k)
        for (int64_t i0 = 0; i0 < rows; i0 += 16)
            for (int64_t j0 = 0; j0 < cols; j0 += 16)
                for (int64_t j = j0; j < j0 + 16 && j < cols; j++)
                    for (int64_t i = i0; i < i0 + 16 && i < rows; i++) {
                        const float *s = src + (i * cols + j) * k + k - 1;
                        float *d = dst + (j * rows + i) * k;
                        for (int64_t q = 0; q < k; q++)
                            d[q] = s[-q];
                    }
}

/* dst[b][o][a][c][v] = src[o][b * vb + v][rh + (th - 1 - a) * st][rw + (tw - 1 - c) * st],
   zero where b * vb + v >= cin, for o0 <= o < o1 (th, tw: the taps rh, rh + st, ... below
   kh and rw, rw + st, ... below kw): the sub-kernel of phase (rh, rw) of a weight (cout,
   cin, kh, kw) of stride st flipped for its input's gradient (channels swapped, taps
   rotated by 180 degrees; stride 1: the whole weight) straight into the NCHWc blocks
   [cin / vb][cout][th][tw][vb] its conv reads */
void tp_flip_pack_f32(const float *src, int64_t cout, int64_t cin, int64_t kh, int64_t kw,
                      int64_t st, int64_t rh, int64_t rw, int64_t vb, float *dst,
                      int64_t o0, int64_t o1)
{
    int64_t nb = (cin + vb - 1) / vb, th = (kh - rh + st - 1) / st, tw = (kw - rw + st - 1) / st;
    int64_t k = kh * kw, t = th * tw;
    for (int64_t b = 0; b < nb; b++)
        for (int64_t o = o0; o < o1; o++) {
            float *d = dst + (b * cout + o) * t * vb;
            const float *s = src + (o * cin + b * vb) * k;
            int64_t n = cin - b * vb < vb ? cin - b * vb : vb;
            for (int64_t a = 0; a < th; a++)
                for (int64_t c = 0; c < tw; c++) {
                    const float *sj = s + (rh + (th - 1 - a) * st) * kw + rw + (tw - 1 - c) * st;
                    float *dq = d + (a * tw + c) * vb;
                    for (int64_t v = 0; v < n; v++)
                        dq[v] = sj[v * k];
                    for (int64_t v = n; v < vb; v++)
                        dq[v] = 0.0f;
                }
        }
}
""".replace("TILE", _tile_source())
DECLARATION = ("void tp_transpose_f32(uintptr_t src, int64_t rows, int64_t cols, uintptr_t dst, "
               "int64_t ld);\n"
               "void tp_pack_blocks_f32(uintptr_t src, int64_t rows, int64_t cols, int64_t vb, "
               "uintptr_t dst, int64_t b0, int64_t b1);\n"
               "void tp_flip_items_f32(uintptr_t src, int64_t groups, int64_t rows, int64_t cols, "
               "int64_t k, uintptr_t dst);\n"
               "void tp_flip_pack_f32(uintptr_t src, int64_t cout, int64_t cin, int64_t kh, "
               "int64_t kw, int64_t st, int64_t rh, int64_t rw, int64_t vb, uintptr_t dst, "
               "int64_t o0, int64_t o1);")

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


# the tiles move bytes at memory speed: two threads win on large weights only (a 256x256x3x3
# weight, 4.7 MB: 0.11 ms by one thread, 0.17 by two; 512x512x3x3, 19 MB: 1.14 against 0.80)
PACK_SPLIT_BYTES = 16 << 20


def packed_blocks(m, vb):
    """``out[b, j, v] = m[b * vb + v, j]`` for a float32 ``m`` (rows x cols):
    its rows in blocks of ``vb``, each block transposed (``out``: ``ceil(rows
    / vb) x cols x vb``, the last block's missing rows zero), in one C call
    per range of blocks, the blocks split over the host's cores
    (:func:`schedules.core.workers.split`).  Returns ``out``."""
    rows, cols = m.shape
    nb = -(-rows // vb)
    out = np.empty((nb, cols, vb), np.float32)
    lib = _HELPER.lib()
    src = np.ascontiguousarray(m, np.float32)
    if lib is None:
        padded = np.zeros((nb * vb, cols), np.float32)
        padded[:rows] = src
        out[...] = padded.reshape(nb, vb, cols).transpose(0, 2, 1)
    elif out.size:
        a, b = src.ctypes.data, out.ctypes.data
        split(lambda b0, b1: lib.tp_pack_blocks_f32(a, rows, cols, vb, b, b0, b1), nb,
              src.nbytes + out.nbytes, PACK_SPLIT_BYTES)
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


def flipped_items(m, out):
    """``out[g, j, i, q] = m[g, i, j, k - 1 - q]`` for a C-contiguous float32
    ``m`` (groups, rows, cols, k) and ``out`` (groups, cols, rows, k): per
    group a matrix of items transposed, each item reversed (a convolution's
    weight to the one of its input's gradient: channels swapped, kernels
    rotated by 180 degrees), in tiles of 16 x 16 items (torch's flip and copy
    read and wrote a 512x512x3x3 weight twice, 2.5 ms).  Returns ``out``."""
    groups, rows, cols, k = m.shape
    if out.shape != (groups, cols, rows, k):
        raise ValueError(f"flipped_items: out of shape {out.shape} cannot hold {m.shape} "
                         "transposed")
    lib = _HELPER.lib()
    if lib is None or m.dtype != np.float32 or out.dtype != np.float32 \
            or not (m.flags.c_contiguous and out.flags.c_contiguous):
        out[...] = m.transpose(0, 2, 1, 3)[..., ::-1]
    elif m.size:
        lib.tp_flip_items_f32(m.ctypes.data, groups, rows, cols, k, out.ctypes.data)
    return out


def flip_packed(w, vb, stride=1, phase=(0, 0)):
    """The float32 weight ``w`` (cout, cin, kh, kw) of a convolution
    (``groups=1``) as the weight of its input's gradient -- channels swapped,
    kernels rotated by 180 degrees: (cin, cout, kh, kw) -- already in the
    NCHWc blocks ``[cin / vb][cout][kh][kw][vb]`` its conv reads
    (:func:`schedules.weights.conv.pack_weight` of the flipped weight, the
    input channels zero-padded to whole blocks), in one pass over ``w``
    instead of a flip and a packing (a training step made both for every
    conv: 22 of ResNet-18's 190 ms at batch 2); output channels split over
    the host's cores (:func:`schedules.core.workers.split`).  With a
    ``stride`` above 1: the sub-kernel of ``phase`` ``(rh, rw)`` only (the
    taps ``rh, rh + stride, ...`` by ``rw, rw + stride, ...``), flipped and
    packed so (``[cin / vb][cout][th][tw][vb]``: the sub-kernel of
    :func:`schedules.solvers.conv_grad.phase_weight` packed), None where no
    tap is in the phase."""
    cout, cin, kh, kw = w.shape
    rh, rw = phase
    th, tw = len(range(rh, kh, stride)), len(range(rw, kw, stride))
    if th == 0 or tw == 0:
        return None
    nb = -(-cin // vb)
    out = np.empty((nb, cout, th, tw, vb), np.float32)
    lib = _HELPER.lib()
    src = np.ascontiguousarray(w, np.float32)
    if lib is None:
        sub = src[:, :, rh::stride, rw::stride][:, :, ::-1, ::-1]
        flipped = np.zeros((nb * vb, cout, th, tw), np.float32)
        flipped[:cin] = sub.transpose(1, 0, 2, 3)
        out[...] = flipped.reshape(nb, vb, cout, th, tw).transpose(0, 2, 3, 4, 1)
    elif out.size:
        a, b = src.ctypes.data, out.ctypes.data
        split(lambda o0, o1: lib.tp_flip_pack_f32(a, cout, cin, kh, kw, stride, rh, rw, vb, b,
                                                  o0, o1),
              cout, src.nbytes + out.nbytes)
    return out

"""The sparse copy that :mod:`schedules.core.prepared` keeps of a mostly-zero
source instead of a full copy, and the comparison of a source against it.

A pruned weight (the sparse LSTM's, ``sparse_conv2d``'s dense pruned
weight) is mostly zeros.  Its cache entry must still compare every byte of
the caller's array on each call (the never-stale rule), but it need not
read a full copy beside it: :class:`SparseCopy` keeps two bits per 32-bit
word (is it nonzero but for its sign; its sign) and the nonzero words in
order, so a lookup reads the source once plus ``n / 4 + 4 * nnz`` bytes,
instead of the source twice.  At 15% nonzeros that is 1.2 bytes read per
source byte instead of 2.

The comparison is bitwise, as a full copy's ``memcmp`` (NaN equals itself,
-0.0 differs from 0.0: a word is "zero" only if all its bits are).  It is
the C helper :data:`SOURCE` (built once per host by the C backend's
:func:`codegen.compile_c_source`, with the host's flags: AVX-512 loads
16 words and expands the next nonzero values under the block's 16 bits;
elsewhere a portable loop, slower than ``memcmp``, so other hosts keep full
copies), over ranges of whole chunks
(:data:`CHUNK_BLOCKS` blocks of 16 words), so the prepared cache splits a
lookup over threads.  Without a C compiler :func:`of` returns None and the
cache keeps full copies, as before."""
from __future__ import annotations

import sys

import numpy as np

from codegen import CHelper

# a source is kept sparse from this many bytes on (below, one memcmp of a few
# pages costs less than the packbits of making the copy), and when at most this
# fraction of its 32-bit words is nonzero
MIN_BYTES = 1 << 20
MAX_DENSITY = 0.5
CHUNK_BLOCKS = 4096             # blocks of 16 words per chunk (256 KiB of source)

SOURCE = r"""
#include <stdint.h>
#ifdef __AVX512F__
#include <immintrin.h>
#endif

/* Nonzero unless the words src[16*lo .. min(16*hi, n)) are those the sparse
   copy describes: bit t of bitmap[b] says word 16*b + t has a nonzero bit
   below its top one; values are those words in order, from block lo on (16
   words of padding follow the last); bit t of signs[b]: word 16*b + t's top
   bit (the others, a zero's sign).  "vector": AVX-512 where the build has it. */
int tp_sparse_differs(const uint32_t *src, int64_t n, int64_t lo, int64_t hi,
                      const uint16_t *bitmap, const uint16_t *signs, const uint32_t *values,
                      int vector)
{
    int64_t full = n / 16 < hi ? n / 16 : hi;
    uint32_t diff = 0;
    int64_t b = lo;
#ifdef __AVX512F__
    if (vector) {
        for (; b < full; b++) {
            __mmask16 m = (__mmask16)bitmap[b];
            __m512i v = _mm512_loadu_si512((const void *)(src + 16 * b));
            __m512i e = _mm512_maskz_expand_epi32(m, _mm512_loadu_si512((const void *)values));
            e = _mm512_mask_mov_epi32(e, (__mmask16)(~m & signs[b]),
                                      _mm512_set1_epi32((int)0x80000000u));
            diff |= (uint32_t)_mm512_cmpneq_epi32_mask(v, e);
            values += __builtin_popcount((unsigned)m);
        }
    }
#endif
    for (; b < hi; b++) {
        uint32_t m = bitmap[b], s = signs[b];
        int64_t end = 16 * b + 16 < n ? 16 * b + 16 : n;
        for (int64_t i = 16 * b; i < end; i++) {
            uint32_t bit = (m >> (i - 16 * b)) & 1u;
            uint32_t zero = ((s >> (i - 16 * b)) & 1u) << 31;
            diff |= src[i] ^ (bit ? *values : zero);
            values += bit;
        }
    }
    return diff != 0;
}

/* 1 where the build has the vector loop above (else the portable loop alone,
   slower than a memcmp of a full copy: the cache keeps full copies then) */
int tp_sparse_vector(void)
{
#ifdef __AVX512F__
    return 1;
#else
    return 0;
#endif
}
"""
DECLARATION = ("int tp_sparse_differs(uintptr_t src, int64_t n, int64_t lo, int64_t hi, "
               "uintptr_t bitmap, uintptr_t signs, uintptr_t values, int vector);\n"
               "int tp_sparse_vector(void);")

_HELPER = CHelper("tp_sparse_differs", SOURCE, DECLARATION)


def helper():
    """The compiled ``tp_sparse_differs`` (cffi, releases the GIL), or None
    where no C compiler builds it."""
    lib = _HELPER.lib()
    return lib.tp_sparse_differs if lib else None


def vector() -> bool:
    """Whether this host's build of the helper has its vector loop (AVX-512)."""
    return helper() is not None and bool(_HELPER.lib().tp_sparse_vector())


def _bits(flags, blocks):
    """``flags`` (bool, one per word) as one uint16 per block of 16 words."""
    bits = np.zeros(blocks * 16, bool)
    bits[:flags.size] = flags
    return np.packbits(bits, bitorder="little").view(np.uint16)


class SparseCopy:
    """Two bits per 32-bit word of a source, as one uint16 per block of 16
    words: ``bitmap`` (a bit below the top one is set: the word is kept in
    ``values``, in order, padded by 16 zeros) and ``signs`` (the top bit: a
    zero's sign, so -0.0 of a pruned weight, ``w * mask``, stays apart from
    0.0); ``starts[c]``: the index in ``values`` of chunk ``c``'s first word;
    ``read[c]``: the bytes a comparison of chunks ``0 .. c`` reads (source
    and copy)."""
    __slots__ = ("n", "bitmap", "signs", "values", "starts", "read", "blocks", "chunk",
                 "nbytes", "src_nbytes")

    def __init__(self, words):
        self.n = n = words.size
        nonzero = (words & np.uint32(0x7FFFFFFF)) != 0
        self.blocks = -(-n // 16)
        self.chunk = chunk = CHUNK_BLOCKS
        self.bitmap = _bits(nonzero, self.blocks)
        self.signs = _bits(words >= np.uint32(0x80000000), self.blocks)
        self.values = np.concatenate([words[nonzero], np.zeros(16, np.uint32)])
        # at each chunk boundary: the words kept before it, and the bytes read up to it
        # (64 of source and 4 of bits a block, 4 a kept word)
        kept = np.concatenate([[0], np.cumsum(np.bitwise_count(self.bitmap), dtype=np.int64)])
        bounds = np.minimum(np.arange(self.chunks + 1) * chunk, self.blocks)
        self.starts = kept[bounds[:-1]]
        self.read = 68 * bounds + 4 * kept[bounds]
        for a in (self.bitmap, self.signs, self.values, self.starts, self.read):
            a.setflags(write=False)
        self.nbytes = sum(a.nbytes for a in (self.bitmap, self.signs, self.values, self.starts))
        self.src_nbytes = 4 * n

    @property
    def chunks(self) -> int:
        return -(-self.blocks // self.chunk)

    def chunk_bytes(self, c0, c1) -> int:
        """The bytes a comparison of chunks ``c0 .. c1`` reads (source and copy)."""
        return int(self.read[c1] - self.read[c0])

    def chunks_within(self, c0, end, budget) -> int:
        """The last chunk ``c1`` (``c0 < c1 <= end``) such that chunks
        ``c0 .. c1`` read at most ``budget`` bytes (one chunk at least)."""
        c1 = int(np.searchsorted(self.read, self.read[c0] + budget, side="right")) - 1
        return min(end, max(c0 + 1, c1))

    def differs(self, address, c0, c1, vector=True) -> bool:
        """Whether the source at ``address`` differs from this copy in chunks
        ``c0 .. c1`` (whole source: ``0 .. chunks``)."""
        f = helper()
        values = self.values.ctypes.data + 4 * int(self.starts[c0])
        return bool(f(address, self.n, c0 * self.chunk, min(c1 * self.chunk, self.blocks),
                      self.bitmap.ctypes.data, self.signs.ctypes.data, values,
                      1 if vector else 0))


def of(view):
    """The :class:`SparseCopy` of the contiguous NumPy array ``view``, or
    None where a full copy is kept: 32-bit words only, at least
    :data:`MIN_BYTES`, at most :data:`MAX_DENSITY` of them nonzero, a
    little-endian host whose build of the helper has the vector loop."""
    if view.dtype.itemsize != 4 or view.nbytes < MIN_BYTES or not view.flags.c_contiguous \
            or sys.byteorder != "little":
        return None
    words = view.reshape(-1).view(np.uint32)
    sample = words[::max(1, words.size // 4096)]      # (a dense weight is told at once)
    if np.count_nonzero(sample & np.uint32(0x7FFFFFFF)) > 1.2 * MAX_DENSITY * sample.size:
        return None
    if np.count_nonzero(words & np.uint32(0x7FFFFFFF)) > MAX_DENSITY * words.size \
            or not vector():
        return None
    return SparseCopy(words)

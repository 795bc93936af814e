"""C backend: a copy that transposes square blocks, through registers (mixed
into the C emitter).

A packed tile that a consumer reads down its other axis (``cache_at`` of
``A[b, i, j]`` stored ``[j % L][i % L]``, so that a dot product's rows run in
the lanes, each in its own order of additions) is copied by a nest of two
loops of ``L`` iterations, the lanes of one register::

    for (int64_t At_1 = 16 * i0; At_1 < 16 * i0 + 16; At_1++) {
      for (int64_t At_2 = 16 * j0; At_2 < 16 * j0 + 16; At_2++) {
        At_tile[At_2 - 16 * j0][At_1 - 16 * i0] = A[b][At_1][At_2];
      }
    }

The source is read contiguously along the inner loop and the copy written
contiguously along the outer one, so either way round one side goes element
by element (gcc: a load and a store per element).  Printed instead as ``L``
vector loads of the source's rows, ``log2(L)`` rounds that each pair the
registers ``m`` and ``m + 2**n`` and shuffle them, and ``L`` vector stores:
first, within each 128-bit lane, interleaving single elements, then pairs
(``unpcklps``, ``unpcklpd``), then whole 128-bit lanes, the even ones of
both registers and the odd ones (``vshuff32x4``, ``vperm2f128``), the
cheaper shuffles first (the usual AVX-512 16 x 16 transpose); the register that
ends with each column is found by running the rounds on indices
(:func:`rounds`).  16 x 16 float32: 16 loads, 32 in-lane and 32 lane
shuffles, 16 stores.  Each row load also prefetches that row two vectors
ahead (into L2: ``__builtin_prefetch(p, 0, 1)``): a tile is one of ``L``
rows streamed side by side, more than the hardware's stream prefetchers
follow (batched matrix-vector 512 x 256 x 256 on a Zen 5 host: 7.2 -> 5.3
ms).  An outer loop of 2 to :data:`MAX_BLOCKS` times ``L`` iterations (a
tile of several vectors of rows) is copied as that many ``L x L`` blocks,
one after the other.  Values are moved, never computed: the copy is the
same bit for bit."""
from __future__ import annotations

from functools import cache

from .. import ir, loops
from .widen import FAST, SUF, reads_var, unit_stride

SHUFFLE_INT = {"float32": "i32", "int32": "i32", "float64": "i64", "int64": "i64"}


AHEAD = 2    # a row load prefetches its row this many vectors ahead
MAX_BLOCKS = 4   # a copy of up to this many L x L blocks stacked along its outer loop


@cache
def rounds(w: int, q: int):
    """The shuffles of a ``w x w`` transpose with ``q`` elements to a 128-bit
    lane: ``(rounds, order)``, ``rounds[n] = (lo, hi)`` the index lists
    (``0..w-1`` the first register, ``w..2w-1`` the second) of round ``n``,
    which pairs registers ``m`` and ``m + 2**n``; ``order[c]`` the register
    holding column ``c`` at the end.  Checked by running it on indices."""
    out, blk = [], 1
    while blk < q:          # within each lane: blocks of blk elements interleaved
        lo, hi = [], []
        for lane in range(0, w, q):
            for half, idx in ((0, lo), (q // 2, hi)):
                for k in range(0, q // 2, blk):
                    base = lane + half + k
                    idx += [base + e for e in range(blk)] + [w + base + e for e in range(blk)]
        out.append((tuple(lo), tuple(hi)))
        blk *= 2
    while len(out) < w.bit_length() - 1:   # whole lanes: the even ones of both, the odd ones
        out.append(tuple(tuple(src + lane + e for src in (0, w)
                               for lane in range(odd * q, w, 2 * q) for e in range(q))
                         for odd in (0, 1)))
    regs = [[(r, c) for c in range(w)] for r in range(w)]
    for n, (lo, hi) in enumerate(out):
        new = list(regs)
        for a, b in pairs(w, n):
            both = regs[a] + regs[b]
            new[a], new[b] = [both[k] for k in lo], [both[k] for k in hi]
        regs = new
    order = {}
    for k, reg in enumerate(regs):
        assert len({c for _, c in reg}) == 1 and [r for r, _ in reg] == list(range(w)), (w, q)
        order[reg[0][1]] = k
    return out, tuple(order[c] for c in range(w))


def pairs(w: int, n: int):
    """The registers round ``n`` of :func:`rounds` shuffles together: ``(m,
    m + 2**n)`` for each ``m`` of ``0..w-1`` without bit ``n``; the first
    gets the round's ``lo``, the second its ``hi``."""
    d = 1 << n
    return [(m, m + d) for m in range(w) if not m & d]


def lane_elems(dt: str, w: int) -> int:
    """Elements of ``dt`` to a 128-bit lane of a ``w``-lane register."""
    return min(w, 16 // ir.ELSIZE[dt])


def rounds_helper(name: str) -> str:
    """Source of ``tp_zip_<suf>x<W>``: ``tp_zip<n>_lo_<suf>x<W>(a, b)`` and
    ``..._hi_...`` for each round ``n`` of :func:`rounds`, after the vector
    types they use."""
    suf, w = name[len("tp_zip_"):].split("x")
    w = int(w)
    v = f"tp_{suf}x{w}"
    dt = next(d for d, s in SUF.items() if s == suf and d in SHUFFLE_INT)
    m = f"tp_{SHUFFLE_INT[dt]}x{w}"
    out = []
    for n, pair in enumerate(rounds(w, lane_elems(dt, w))[0]):
        for half, idx in zip(("lo", "hi"), pair):
            idx = ", ".join(map(str, idx))
            out.append(f"static inline {v} tp_zip{n}_{half}_{suf}x{w}({v} a, {v} b) {{\n"
                       f"#ifdef __clang__\n  return __builtin_shufflevector(a, b, {idx});\n#else\n"
                       f"  return __builtin_shuffle(a, b, ({m}){{{idx}}});\n#endif\n}}")
    return "\n".join(out)


class TransposeMixin:
    """Needs :class:`codegen.c.emit.CPrinter` (``expr``, ``access``, ``out``,
    ``helper``, ``array_dtype``, ``wide``)."""

    ntransposed = 0

    def transposed_copy(self, s: ir.For, ind: int) -> bool:
        """``s`` (``L``, or up to :data:`MAX_BLOCKS` times ``L``, iterations)
        and the one loop in it (``L``: the lanes of one register, 4 or more)
        run a copy ``T[...] = S[...]`` of one FAST
        dtype, ``S`` contiguous along the inner loop and ``T`` along
        ``s``, the inner loop's bounds free of ``s``: printed as register
        transposes of ``L x L`` blocks (module docstring).  True if printed."""
        t = loops.sole_stmt(s.body)
        if self.wide is not None or not isinstance(t, ir.For) or int(s.step) != 1 \
                or int(t.step) != 1 or s.kind != "serial" or t.kind != "serial":
            return False
        st = loops.sole_stmt(t.body)
        if not isinstance(st, ir.Store) or not isinstance(st.value, ir.Load) \
                or st.value.array == st.array:
            return False
        ld, dt = st.value, st.value.dtype
        if dt not in FAST or self.array_dtype(st.array) != dt:
            return False
        w = loops.host_lanes(8 * ir.ELSIZE[dt])
        rows = _trip(s)
        if w < 4 or rows is None or rows % w or not 1 <= rows // w <= MAX_BLOCKS or _trip(t) != w \
                or reads_var(t.lo, s.var) or reads_var(t.hi, s.var) \
                or not unit_stride(ld.index, t.var) or not unit_stride(st.index, s.var):
            return False
        suf = SUF[dt]
        v = self.helper(f"tp_vec_{suf}x{w}")[len("tp_vec_"):]
        self.helper(f"tp_vec_{SHUFFLE_INT[dt]}x{w}")
        self.helper(f"tp_zip_{suf}x{w}")
        plan, order = rounds(w, lane_elems(dt, w))
        self.ntransposed += 1
        r = f"tp_tr{self.ntransposed}"
        self.out(ind, f"{{ /* loops {s.var}, {t.var}: a {rows} x {w} copy transposed through "
                      f"registers, {w} x {w} at a time (GCC vector extensions) */")
        self.out(ind + 1, f"tp_{v} {', '.join(f'{r}_0_{k}' for k in range(w))};")
        lo_t = self.expr(t.lo)
        for q in range(rows // w):    # block q: the source's rows q * w ..
            lo_s = self.expr(ir.Binary("add", s.lo, ir.Const(q * w, "int64"), "int64")) if q \
                else self.expr(s.lo)
            for k in range(w):        # row k of the block: s = lo + k, t from its lo
                self.out(ind + 1, f"{{ const int64_t {s.var} = {lo_s} + {k}, {t.var} = {lo_t}; "
                                  f"{r}_0_{k} = tp_vld_{v}(&{self.access(ld.array, ld.index)}); }}")
                self.out(ind + 1, f"{{ const int64_t {s.var} = {lo_s} + {k}, {t.var} = {lo_t} + "
                                  f"{AHEAD * w}; __builtin_prefetch(&{self.access(ld.array, ld.index)}, 0, 1); }}")
            self.out(ind + 1, "{")
            for n in range(len(plan)):
                for i, j in pairs(w, n):
                    a, b = f"{r}_{n}_{i}", f"{r}_{n}_{j}"
                    self.out(ind + 2, f"tp_{v} {r}_{n + 1}_{i} = tp_zip{n}_lo_{v}({a}, {b}), "
                                      f"{r}_{n + 1}_{j} = tp_zip{n}_hi_{v}({a}, {b});")
            for k in range(w):        # column k: t = lo + k, s from the block's lo
                self.out(ind + 2, f"{{ const int64_t {s.var} = {lo_s}, {t.var} = {lo_t} + {k}; "
                                  f"tp_vst_{v}(&{self.access(st.array, st.index)}, {r}_{len(plan)}_{order[k]}); }}")
            self.out(ind + 1, "}")
        self.out(ind, "}")
        return True


def _trip(s: ir.For):
    """``s.hi - s.lo`` when it is a constant (``16 * i0 + 16`` minus ``16 * i0``)."""
    f = loops.affine(ir.Binary("sub", s.hi, s.lo, "int64"), lambda n: True)
    return f[1] if f is not None and not f[0] else None

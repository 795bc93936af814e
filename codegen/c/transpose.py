"""C backend: a square copy that transposes, through registers (mixed into
the C emitter).

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
vector loads of the source's rows, ``log2(L)`` rounds of interleaving pairs
of rows ``m`` and ``m + L/2`` (the perfect shuffle: after ``log2(L)`` rounds
row ``k`` holds column ``k``) and ``L`` vector stores: 16 x 16 float32 in 16
loads, 64 two-register shuffles and 16 stores.  Values are moved, never
computed: the copy is the same bit for bit."""
from __future__ import annotations

from .. import ir, loops
from .widen import FAST, SUF, unit_stride, reads_var

SHUFFLE_INT = {"float32": "i32", "int32": "i32", "float64": "i64", "int64": "i64"}


def zip_helper(name: str) -> str:
    """Source of ``tp_zip_<suf>x<W>``: ``tp_zip_lo_<suf>x<W>(a, b)`` (``a0 b0
    a1 b1 ...`` of the low halves) and ``tp_zip_hi_...`` (the high halves),
    after the vector types they use."""
    suf, w = name[len("tp_zip_"):].split("x")
    w = int(w)
    v = f"tp_{suf}x{w}"
    dt = next(d for d, s in SUF.items() if s == suf and d in SHUFFLE_INT)
    m = f"tp_{SHUFFLE_INT[dt]}x{w}"
    out = []
    for half, base in (("lo", 0), ("hi", w // 2)):
        idx = ", ".join(f"{base + k}, {w + base + k}" for k in range(w // 2))
        out.append(f"static inline {v} tp_zip_{half}_{suf}x{w}({v} a, {v} b) {{\n"
                   f"#ifdef __clang__\n  return __builtin_shufflevector(a, b, {idx});\n#else\n"
                   f"  return __builtin_shuffle(a, b, ({m}){{{idx}}});\n#endif\n}}")
    return "\n".join(out)


class TransposeMixin:
    """Needs :class:`codegen.c.emit.CPrinter` (``expr``, ``access``, ``out``,
    ``helper``, ``array_dtype``, ``wide``)."""

    ntransposed = 0

    def transposed_copy(self, s: ir.For, ind: int) -> bool:
        """``s`` and the one loop in it, both ``L`` iterations (the lanes of
        one register, 4 or more), run a copy ``T[...] = S[...]`` of one FAST
        dtype, ``S`` contiguous along the inner loop and ``T`` along
        ``s``, the inner loop's bounds free of ``s``: printed as a register
        transpose (module docstring).  True if printed."""
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
        if w < 4 or _trip(s) != w or _trip(t) != w \
                or reads_var(t.lo, s.var) or reads_var(t.hi, s.var) \
                or not unit_stride(ld.index, t.var) or not unit_stride(st.index, s.var):
            return False
        suf = SUF[dt]
        v = self.helper(f"tp_vec_{suf}x{w}")[len("tp_vec_"):]
        self.helper(f"tp_vec_{SHUFFLE_INT[dt]}x{w}")
        self.helper(f"tp_zip_{suf}x{w}")
        self.ntransposed += 1
        r = f"tp_tr{self.ntransposed}"
        self.out(ind, f"{{ /* loops {s.var}, {t.var}: a {w} x {w} copy transposed through "
                      f"registers (GCC vector extensions) */")
        self.out(ind + 1, f"tp_{v} {', '.join(f'{r}_0_{k}' for k in range(w))};")
        lo_s, lo_t = self.expr(s.lo), self.expr(t.lo)
        for k in range(w):        # row k of the source: s = lo + k, t from its lo
            self.out(ind + 1, f"{{ const int64_t {s.var} = {lo_s} + {k}, {t.var} = {lo_t}; "
                              f"{r}_0_{k} = tp_vld_{v}(&{self.access(ld.array, ld.index)}); }}")
        rounds = w.bit_length() - 1
        for n in range(rounds):
            for m in range(w // 2):
                a, b = f"{r}_{n}_{m}", f"{r}_{n}_{m + w // 2}"
                self.out(ind + 1, f"tp_{v} {r}_{n + 1}_{2 * m} = tp_zip_lo_{v}({a}, {b}), "
                                  f"{r}_{n + 1}_{2 * m + 1} = tp_zip_hi_{v}({a}, {b});")
        for k in range(w):        # column k: t = lo + k, s from its lo
            self.out(ind + 1, f"{{ const int64_t {s.var} = {lo_s}, {t.var} = {lo_t} + {k}; "
                              f"tp_vst_{v}(&{self.access(st.array, st.index)}, {r}_{rounds}_{k}); }}")
        self.out(ind, "}")
        return True


def _trip(s: ir.For):
    """``s.hi - s.lo`` when it is a constant (``16 * i0 + 16`` minus ``16 * i0``)."""
    f = loops.affine(ir.Binary("sub", s.hi, s.lo, "int64"), lambda n: True)
    return f[1] if f is not None and not f[0] else None

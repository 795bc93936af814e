"""C backend: a vector loop's streaming stores (:class:`codegen.ir.StreamStore`,
the schedule's ``store_nontemporal()``) written past the caches.  gcc has no
portable non-temporal store (it ignores OpenMP's ``nontemporal`` clause), so
the loop computes its lanes into a small buffer, vectorised as before, and
one helper call streams the buffer to the row (mixed into the C emitter)::

    { /* out: 16 lanes streamed past the caches (store_nontemporal) */
      float tp_nt_out[16];
      #pragma omp simd
      for (int64_t j1 = 0; j1 < 16; j1++) {
        tp_nt_out[j1] = (A[i][16 * j0 + j1] + ...) / 9.0f;
      }
      tp_stream(&out[i][16 * j0], tp_nt_out, sizeof(tp_nt_out));
    }

``tp_stream`` writes 64-byte aligned lines with ``vmovntps`` (AVX-512) or
``vmovntdq`` (AVX), and the rest (a row that does not start on a line, as
most rows of a matrix of odd width) with ``movnti``, 8 or 4 bytes at a time:
write-combined by the core into whole lines all the same, so no line is read
before it is written.  ``tp_stream_fence`` (``sfence``) ends each iteration
of a parallel loop that streams, and the kernel: the streamed values are
visible to other threads and to the caller after it.  On a host without SSE2
the helper is a ``memcpy`` and the fence a full fence.

A loop streams when it is a plain vector loop of a constant trip count
whose body is one streaming store, contiguous in the loop's variable (the
last index ``v + ...``, no other index using ``v``); other stores of a
computation marked ``store_nontemporal`` (a partial tile's loop, a widened
or speculated loop) stay plain stores."""
from __future__ import annotations

import math

from .. import ir, loops
from ..ir import ELSIZE
from .syntax import CTYPES

STREAM_SOURCE = """#if defined(__x86_64__) && defined(__SSE2__)
#include <immintrin.h>
#endif
static inline void tp_stream(void *restrict dst, const void *restrict src, int64_t n)
{
  char *d = (char *)dst;
  const char *s = (const char *)src;
#if defined(__x86_64__) && defined(__SSE2__)
  if (n == 64 && ((uintptr_t)d & 7) == 0) {       /* a vector of 16 floats (8 doubles) */
#if defined(__AVX512F__)
    if (((uintptr_t)d & 63) == 0) {
      _mm512_stream_si512((__m512i *)d, _mm512_loadu_si512((const void *)s));
      return;
    }
#endif
    long long v[8];
    memcpy(v, s, 64);
    for (int k = 0; k < 8; k++)
      _mm_stream_si64((long long *)d + k, v[k]);
    return;
  }
  for (; n > 0 && ((uintptr_t)d & 63) != 0; ) {
    if (((uintptr_t)d & 7) == 0 && n >= 8) {
      long long v; memcpy(&v, s, 8); _mm_stream_si64((long long *)d, v); d += 8; s += 8; n -= 8;
    } else if (((uintptr_t)d & 3) == 0 && n >= 4) {
      int v; memcpy(&v, s, 4); _mm_stream_si32((int *)d, v); d += 4; s += 4; n -= 4;
    } else {
      break;
    }
  }
  if (((uintptr_t)d & 63) == 0) {
    for (; n >= 64; d += 64, s += 64, n -= 64) {
#if defined(__AVX512F__)
      _mm512_stream_si512((__m512i *)d, _mm512_loadu_si512((const void *)s));
#elif defined(__AVX__)
      _mm256_stream_si256((__m256i *)d, _mm256_loadu_si256((const __m256i *)s));
      _mm256_stream_si256((__m256i *)(d + 32), _mm256_loadu_si256((const __m256i *)(s + 32)));
#else
      for (int k = 0; k < 64; k += 16)
        _mm_stream_si128((__m128i *)(d + k), _mm_loadu_si128((const __m128i *)(s + k)));
#endif
    }
  }
  if (((uintptr_t)d & 7) == 0)
    for (; n >= 8; d += 8, s += 8, n -= 8) {
      long long v; memcpy(&v, s, 8); _mm_stream_si64((long long *)d, v);
    }
  if (((uintptr_t)d & 3) == 0)
    for (; n >= 4; d += 4, s += 4, n -= 4) {
      int v; memcpy(&v, s, 4); _mm_stream_si32((int *)d, v);
    }
#endif
  if (n > 0)
    memcpy(d, s, (size_t)n);
}
/* a thread's run of streamed lines: the lanes of a line not yet written */
typedef struct {
  char *next;                   /* where the run continues */
  int k;                        /* 4-byte lanes of the line before next held in pend */
#if defined(__AVX512F__)
  __m512i pend;
#endif
} tp_stream_run;
static inline __attribute__((always_inline)) void tp_stream_flush(tp_stream_run *st)
{
#if defined(__AVX512F__)
  if (st->k)
    _mm512_mask_storeu_epi32(st->next - 4 * st->k, (__mmask16)((1u << st->k) - 1), st->pend);
#endif
  st->k = 0;
  st->next = 0;
}
/* 64 bytes at dst (4-byte aligned) from src: whole lines streamed, the
   lanes of a partial line held in the run until the next call continues it
   (registers only: a misaligned row streams as fast as an aligned one) */
static inline __attribute__((always_inline)) void tp_stream_line(tp_stream_run *st, void *dst,
                                                          const void *src)
{
#if defined(__AVX512F__)
  char *d = (char *)dst;
  const __m512i v = _mm512_loadu_si512(src);
  const __m512i iota = _mm512_set_epi32(15, 14, 13, 12, 11, 10, 9, 8, 7, 6, 5, 4, 3, 2, 1, 0);
  if (d == st->next && st->k) {
    const int k = st->k;
    const __m512i idx = _mm512_mask_add_epi32(iota, (__mmask16)~((1u << k) - 1), iota,
                                              _mm512_set1_epi32(16 - k));
    _mm512_stream_si512((__m512i *)(d - 4 * k), _mm512_permutex2var_epi32(st->pend, idx, v));
    st->pend = _mm512_permutexvar_epi32(_mm512_add_epi32(iota, _mm512_set1_epi32(16 - k)), v);
    st->next = d + 64;
    return;
  }
  tp_stream_flush(st);
  const int a = (int)(((uintptr_t)d & 63) >> 2);
  if (((uintptr_t)d & 3) != 0) {
    tp_stream(d, src, 64);
  } else if (a == 0) {
    _mm512_stream_si512((__m512i *)d, v);
  } else {                      /* the line's first part now, its last lanes held */
    _mm512_mask_storeu_epi32(d, (__mmask16)((1u << (16 - a)) - 1), v);
    st->pend = _mm512_permutexvar_epi32(_mm512_add_epi32(iota, _mm512_set1_epi32(16 - a)), v);
    st->k = a;
    st->next = d + 64;
  }
#else
  (void)st;
  tp_stream(dst, src, 64);
#endif
}
static inline void tp_stream_fence(void)
{
#if defined(__x86_64__) && defined(__SSE2__)
  _mm_sfence();
#else
  __atomic_thread_fence(__ATOMIC_SEQ_CST);
#endif
}"""


_MAX_RUNS = 16           # runs of one array in a thread: rows written in turn


def stream_plan(loop: ir.For, consts: dict):
    """``(store, lanes)`` when the vector ``loop`` streams (module doc), else None."""
    st = loops.sole_stmt(loop.body)
    lo, hi = ir.const_eval(loop.lo, consts), ir.const_eval(loop.hi, consts)
    if not isinstance(st, ir.StreamStore) or lo is None or hi is None or hi <= lo \
            or int(loop.step) != 1 or not st.index:
        return None
    v = loop.var
    if any(v in ir.free_vars(i) for i in st.index[:-1]):
        return None
    last = loops.affine(st.index[-1], lambda n: True)
    if last is None or last[0].get(v) != 1:
        return None
    return st, hi - lo


def carriable(fn: ir.LoweredFunction) -> set:
    """The arrays whose streaming stores may be held in a run
    (``tp_stream_line``): 4- or 8-byte elements, never read in ``fn`` (a
    held lane is not yet in memory), not a temporary of the kernel (a run
    is flushed after its scope, which may free it)."""
    stored, loaded, temps = {}, set(), set()
    for x in ir.walk_stmts(fn.body):
        if isinstance(x, ir.StreamStore):
            stored[x.array] = x.value.dtype
        elif isinstance(x, ir.Allocate):
            temps.add(x.array)
        for e in ir.stmt_exprs(x):
            loaded |= {n.array for n in ir.walk_exprs(e) if isinstance(n, ir.Load)}
    return {a for a, dt in stored.items()
            if a not in loaded and a not in temps and ELSIZE[dt] in (4, 8)}


def line_store(loop, consts: dict):
    """The store of a vector ``loop`` that streams 64-byte vectors (through a
    run where its array has one), else None."""
    plan = stream_plan(loop, consts) if isinstance(loop, ir.For) and loop.kind == "vector" else None
    if plan is None or plan[1] * ELSIZE[plan[0].value.dtype] != 64:
        return None
    return plan[0]


def _runs_needed(body, consts: dict, arrays: set) -> dict:
    """``{array: runs}`` for the arrays of ``arrays`` that vector loops in
    ``body`` stream in 64-byte vectors: as many runs (a power of two, at
    most :data:`_MAX_RUNS`) as the copies of the unrolled loops of constant
    bounds around such a store whose variables its row (the indices but the
    last) uses: rows written in turn keep a run each."""
    found = {}

    def walk(s, copies):
        st = line_store(s, consts)
        if st is not None and st.array in arrays:
            used = set().union(*(ir.free_vars(i) for i in st.index[:-1]))
            n = math.prod(t for v, t in copies if v in used)
            found[st.array] = max(found.get(st.array, 1), 1 << (min(n, _MAX_RUNS) - 1).bit_length())
            return
        if isinstance(s, ir.For) and s.kind == "unrolled":
            lo, hi = ir.const_eval(s.lo, consts), ir.const_eval(s.hi, consts)
            if lo is not None and hi is not None and hi - lo > 1 and int(s.step) == 1:
                copies = copies + [(s.var, hi - lo)]
        for c in ir.stmt_children(s):
            walk(c, copies)
    walk(body, [])
    return found


class StreamMixin:
    """Needs :class:`codegen.c.emit.CPrinter` (``expr``, ``access``, ``out``,
    ``helper``, ``fn``); its state: ``streaming`` (the loop being streamed),
    ``runs`` (array -> the runs in scope), ``flushed`` (arrays whose runs
    the loops being printed flushed before them), ``nstreamed`` (the
    vector loops streamed so far: a scope that streamed none needs no fence)."""

    def open_runs(self, body, ind: int) -> dict:
        """At the top of a thread's scope (a parallel loop's iteration, a
        serial kernel): the runs of each array ``body`` streams that may be
        held (:func:`_runs_needed`).  Returns what it replaces (for
        :meth:`close_runs`)."""
        saved = (self.runs, self.nstreamed, self.flushed)
        self.runs, self.flushed = {}, set()
        for a, count in sorted(_runs_needed(body, self.fn.constants, self.carried).items()):
            self.runs[a] = (f"tp_run_{a}", count)
            self.helper("tp_stream")
            self.out(ind, f"tp_stream_run tp_run_{a}[{count}] = {{{{0}}}};")
        return saved

    def flush_runs(self, a: str, ind: int) -> None:
        """Every held lane of ``a``'s runs written (before a store to ``a``
        that no run of it makes)."""
        name, count = self.runs[a]
        if count == 1:
            self.out(ind, f"tp_stream_flush(&{name}[0]);")
        else:
            self.out(ind, f"for (int tp_r = 0; tp_r < {count}; tp_r++) tp_stream_flush(&{name}[tp_r]);")

    def close_runs(self, body, ind: int, saved) -> None:
        """At the end of that scope: the held lanes written, the fence (where
        the scope streamed)."""
        for a in self.runs:
            self.flush_runs(a, ind)
        self.runs, before, self.flushed = saved
        if self.nstreamed > before:
            self.out(ind, "tp_stream_fence();")

    def run_of(self, st) -> str:
        """The run (an lvalue's address) that streams ``st``: chosen by its
        row (its next-to-last index, modulo the runs), so the lanes of one
        row are only ever held by one run (another run writing them would be
        overwritten by the first's later flush); the unrolled copies of a
        row loop fold to a constant each."""
        name, count = self.runs[st.array]
        if count == 1 or len(st.index) < 2:
            return f"&{name}[0]"
        return f"&{name}[(uint64_t)({self.expr(st.index[-2])}) & {count - 1}]"

    def open_stream(self, s: ir.For, ind: int) -> bool:
        """Before the vector loop ``s``'s ``#pragma omp simd``: opens the
        scope of its lane buffer when it streams (then True)."""
        plan = stream_plan(s, self.fn.constants)
        if plan is None:
            return False
        st, lanes = plan
        self.helper("tp_stream")
        name = f"tp_nt_{st.array}"
        self.out(ind, f"{{ /* {st.array}: {lanes} lanes streamed past the caches "
                      "(store_nontemporal) */")
        self.out(ind + 1, f"{CTYPES[st.value.dtype]} {name}[{lanes}];")
        lane = ir.Var(s.var) if ir.const_eval(s.lo, {}) == 0 else ir.binary("sub", ir.Var(s.var), s.lo)
        self.streaming[id(st)] = (name, lane, lanes * ELSIZE[st.value.dtype] == 64)
        return True

    def close_stream(self, s: ir.For, ind: int) -> None:
        """After the vector loop ``s`` (opened by :meth:`open_stream`): the
        lane buffer streamed to the row, the scope closed."""
        st = loops.sole_stmt(s.body)
        name, _, line = self.streaming.pop(id(st))
        self.nstreamed += 1
        first = f"&{self.access(st.array, tuple(ir.substitute(i, {s.var: s.lo}) for i in st.index))}"
        if line and st.array in self.runs:
            self.out(ind + 1, f"tp_stream_line({self.run_of(st)}, {first}, {name});")
        else:
            if st.array in self.runs and st.array not in self.flushed:
                self.flush_runs(st.array, ind + 1)  # what the runs hold goes first
            self.out(ind + 1, f"tp_stream({first}, {name}, sizeof({name}));")
        self.out(ind, "}")

    def flush_before(self, s: ir.For, ind: int) -> set:
        """Before a loop that stores to an array with runs other than through
        them (a partial tile, another computation's stores) and streams no
        64-byte vectors of it inside (whose loops then see to it): the runs'
        held lanes written first (the loop may write where they go).
        Returns the arrays flushed (none need it again inside the loop)."""
        if not self.runs:
            return set()
        lines = {st.array for st in (line_store(x, self.fn.constants) for x in ir.walk_stmts(s))
                 if st is not None}
        plain = {x.array for x in ir.walk_stmts(s.body)
                 if isinstance(x, ir.Store) and x.array in self.runs}
        arrays = sorted(plain - lines - self.flushed)
        for a in arrays:
            self.flush_runs(a, ind)
        return set(arrays)

    def stream_store(self, s: ir.Store, ind: int) -> bool:
        """Prints a streaming store of the loop being streamed into its lane
        buffer (then True); before any other store to an array with runs
        outside a loop flushed for it, the runs' flush."""
        found = self.streaming.get(id(s))
        if found is None:
            if s.array in self.runs and s.array not in self.flushed:
                self.flush_runs(s.array, ind)
            return False
        name, lane, _ = found
        self.out(ind, f"{name}[{self.expr(lane)}] = {self.expr(s.value)};")
        return True

    def stream_fence(self, ind: int) -> None:
        """Ends a kernel with parallel loops that streamed with the fence."""
        if self.nstreamed:
            self.out(ind, "tp_stream_fence();")

"""GEMMs with few rows on the CPU, one pass over B (``nn.Linear`` at a small
batch: ``x @ W^T`` forward, ``grad @ W`` backward).

``rows_t``: B given as its ``M x K`` transpose (the weight as stored), as dot
products along K.  ``rows``: B ``K x M`` as it is (the backward's ``W``),
each block of columns of C accumulated in registers over all of K, the
rows of B read in order.

With a handful of rows of A the product is a pass over the weight: packing
B into BLIS panels (:mod:`schedules.blocks.blis`) would read it, write a
copy and read that again, three times the traffic of the product.  Here
each row ``j`` of the stored weight is read once, contiguously, for all
rows of A at once: ``C[i, j] = sum_k A[i, k] * B[j, k]`` with ``k`` in
vector lanes (partial sums per lane, reduced at the end), the N rows of A
unrolled, the rows of B parallel.

Numerics ``"rows_t"``: the lanes sum apart and are reduced at the end, which
rounds differently from the BLIS blocks, so it is its own arithmetic; the
registry lists it first and it applies by shape alone (``trans_b``, at most
:func:`max_rows_t` rows: :func:`fits`; K in chunks where A would not fit
half of L2, by shape and host too), so which of the two computes a product
never depends on a timing.  ``rows`` adds the products
to each C element one by one in K's order (its own ``"rows"`` numerics,
chosen by shape the same way).
"""
from __future__ import annotations

import tiramisu_py as tp

from ..core.kernels import kernel as _kernel
from ..core.sizes import largest_divisor
from ..core.solver import Solver
from ..host import host

MAX_ROWS = 8


def max_rows_t() -> int:
    """The rows of A ``rows_t`` takes: one accumulator vector each, half of
    the host's vector registers (16 with AVX-512's 32, 8 with AVX2's 16)."""
    return max(MAX_ROWS, min(16, host().vector_registers // 2))


def chunk(n, k, lanes=None) -> int:
    """The K steps of ``rows_t`` a pass over B's rows covers: all of K when
    the ``n`` rows of A fit half of L2, else the most (whole vectors) that
    do, so that A is read from L2 for every row of B (a 16-row product with
    K = 25088: A alone is 1.6 MB)."""
    lanes = lanes or host().lanes(4)
    room = host().l2 // 2 // (4 * max(1, n))
    return k if room >= k else max(lanes, room // lanes * lanes)


def fits(p) -> bool:
    """A GEMM (not empty, unbatched, with the host's tiles) of at most
    :data:`MAX_ROWS` rows of A (accumulators in registers), all of A in half
    of L2 (it is read again for every row or block of B); with B transposed
    (``rows_t``) up to :func:`max_rows_t` rows and any K (:func:`chunk`)."""
    if not (p.batch is None and p.params is None and min(p.m, p.k) >= 1 and p.n >= 1):
        return False
    if p.trans_b:
        return p.n <= max_rows_t()
    return p.n <= MAX_ROWS and p.n * p.k * 4 <= host().l2 // 2


def _product(name, n, m, k, b_transposed):
    """``(f, C)``: the unscheduled ``C = A @ B`` (``B`` stored ``m x k`` when
    ``b_transposed``)."""
    f = tp.Function(name, params={"N": n, "M": m, "K": k})
    i, j, kk = f.var("i", 0, "N"), f.var("j", 0, "M"), f.var("k", 0, "K")
    A = f.input("A", ("N", "K"), tp.float32)
    B = f.input("B", ("M", "K") if b_transposed else ("K", "M"), tp.float32)
    C = f.computation("C", [i, j], 0.0)
    C[i, j] += A[i, kk] * (B[j, kk] if b_transposed else B[kk, j])
    C.parallelize("i")
    return f, C


def function(n, m, k, lanes=None):
    """``C = A @ B^T`` for ``A`` ``n x k`` and ``B`` stored ``m x k``; K in
    chunks (:func:`chunk`) when A does not fit half of L2: the chunks one
    after the other, B's rows parallel in each (one region:
    :mod:`codegen.regions`), each row's sums added to C once a chunk."""
    lanes = lanes or host().lanes(4)
    f, C = _product("gemm_dot", n, m, k, True)
    u = C.update
    kc = chunk(n, k, lanes)
    if kc < k:
        u.split("k", kc, names=("kc", "kr"))
        u.split("kr", lanes, names=("k0", "k1"))
    else:
        u.split("k", lanes, names=("k0", "k1"))
    ib, jb = block(n, m)
    if ib < n:
        u.split("i", ib, names=("i0", "i1"))
    if jb > 1:
        u.split("j", jb, names=("j0", "j1"))
    rows, cols = ("i1" if ib < n else "i"), ("j0" if jb > 1 else "j")
    u.reorder(*(["kc"] if kc < k else []), cols, *(["i0"] if ib < n else []), "k0", rows,
              *(["j1"] if jb > 1 else []), "k1")
    u.unroll(rows, ib)
    if jb > 1:
        u.unroll("j1", jb)
    u.vectorize("k1", lanes)
    u.accumulate_locally("k0", allow_reassociation=True)
    u.parallelize(cols)
    return f


def block(n, m):
    """The register block of :func:`function`: ``ib`` rows of A (all n when
    they fit, else a divisor of n, at most 4) x ``jb`` rows of B (4, 2 or 1,
    dividing m), at most half the vector registers of accumulators: each vector of A loaded
    serves ``jb`` rows of B and each of B ``ib`` rows of A.  One row of B
    at a time against all of A's rows (A's vectors loaded for every row of
    B) ran at a quarter of this: 16 x 4096 @ 4096^2 18.4 -> 3.8 ms, 16 x
    25088 @ 25088 x 4096 60 -> 29 ms (measured against 16x4, 8x2, 8x4)."""
    room = max(2, host().vector_registers // 2)
    jb = next(d for d in (4, 2, 1) if m % d == 0 and d <= room)
    if n * jb <= room:
        return n, jb
    return largest_divisor(n, min(4, room // jb)), jb


def rows_function(n, m, k, lanes=None):
    """``C = A @ B`` for ``A`` ``n x k`` and ``B`` ``k x m``: per block of
    ``4 x lanes`` columns, the ``n`` rows' accumulators in registers while
    ``k`` runs; the blocks parallel."""
    lanes = lanes or host().lanes(4)
    width = 4 * lanes if m >= 4 * lanes else lanes
    f, C = _product("gemm_rows", n, m, k, False)
    u = C.update
    u.split("j", width, names=("j0", "j1"))
    u.reorder("j0", "k", "i", "j1")
    u.unroll("i", n)
    u.vectorize("j1", lanes if width % lanes == 0 else width)
    u.parallelize("j0")
    return f


class _OnePass(Solver):
    """A product with few rows in ``a`` (:func:`fits`) and ``b`` transposed
    (``transposed``) or as stored: one pass over ``b``."""
    op = "gemm"
    transposed = True
    make = None

    def applicable(self, p):
        why = super().applicable(p)
        if why is True and p.dtype != "float32":
            return f"needs float32 (got {p.dtype})"
        if why is True and not (p.trans_b == self.transposed and fits(p)):
            layout = "transposed (weight.t())" if self.transposed else "as stored"
            rows = (f"at most {max_rows_t()} rows of a" if self.transposed
                    else f"at most {MAX_ROWS} rows of a, a in half of L2")
            return (f"needs b {layout}, {rows}, no params (got trans_b={p.trans_b}, "
                    f"{p.n} x {p.k})")
        return why

    def build(self, p, params):
        return self.make(p.n, p.m, p.k)

    def run(self, p, args, values=None):
        """``args``: ``(a, b)``, ``b`` as ``m x k`` when ``p.trans_b``."""
        return self._kernel(p)(*args)

    def runner(self, p):
        k = self._kernel(p)
        return lambda args: k(*args)

    def _kernel(self, p):
        return _kernel((f"gemm_{self.name}", p.n, p.m, p.k), lambda: self.build(p, {}), p.target)


class RowsT(_OnePass):
    """``a @ b`` with ``b`` passed transposed: dot products along K."""
    name = "rows_t"
    numerics = "rows_t"
    make = staticmethod(function)


class Rows(_OnePass):
    """``a @ b`` with ``b`` as stored: blocks of columns over K in order."""
    name = "rows"
    numerics = "rows"
    transposed = False
    make = staticmethod(rows_function)

"""``C = A^T @ B`` summed as outer products, ``A`` ``K x M`` and ``B`` ``K x N``
both read as stored: the weight gradients of a linear layer and of an LSTM
layer (``grad^T @ input`` over the batch's rows or a sequence's steps).

The library's GEMM takes ``A^T`` as a copy (a transposed view is made
contiguous) and packs both operands into BLIS panels, which for a short K
(64 rows: a batch of 2 over 32 steps) costs as much as the products.  Here
each step ``k`` of the sum reads a row of ``B`` (two vectors of N) and MB
consecutive values of a row of ``A`` (broadcasts), and adds MB x two
vectors of products to the accumulators of one block of C, kept in
registers over a chunk of KC steps: no copy, no packing.  Blocks of rows of
C in parallel; chunks of K one after the other (each C element sums its
products in K's order, one by one); with one chunk, each block of C zeroed
right before its sums, in the same loop nest.
"""
from __future__ import annotations

import tiramisu_py as tp

from ..core.kernels import kernel
from ..core.sizes import largest_divisor
from ..host import host

KC = 256                # steps of the sum per chunk (the block's rows of A and B in L1/L2)


def function(k: int, m: int, n: int, kc=KC):
    """The scheduled Function of ``c[i, j] = sum_s a[s, i] * b[s, j]``
    (inputs ``a`` ``k x m``, ``b`` ``k x n``; output ``c`` ``m x n``, float32)."""
    lanes = host().lanes(4)
    f = tp.Function("outer_gemm", params={})
    a, b = f.input("a", (k, m), tp.float32), f.input("b", (k, n), tp.float32)
    i, j, s = f.var("i", 0, m), f.var("j", 0, n), f.var("s", 0, k)
    c = f.computation("c", [i, j], 0.0)
    c[i, j] += a[s, i] * b[s, j]
    mb = largest_divisor(m, 8)          # (m itself below 8)
    nb = 2 * lanes if n >= 2 * lanes else lanes if n >= lanes else n
    u = c.update
    u.split("i", mb, names=("i0", "i1"))
    u.split("j", nb, names=("j0", "j1"))
    order = ["i0", "j0", "s", "i1", "j1"]
    if k > kc:
        u.split("s", kc, names=("s0", "s1"))
        order = ["s0", "i0", "j0", "s1", "i1", "j1"]
    if nb == 2 * lanes:
        u.split("j1", lanes, names=("jv", "jl"))
        order[-1:] = ["jv", "jl"]
        u.reorder(*order)
        u.unroll("jv")
        u.vectorize("jl", lanes)
    else:
        u.reorder(*order)
        if nb > 1:
            u.vectorize("j1", nb)
    u.unroll("i1", mb)
    u.parallelize("i0")
    if k > kc:
        c.parallelize("i")
        return f
    # one chunk: each block of C zeroed just before its sums (the block's lines
    # hot): C crosses memory once, not zeroed in a pass of its own then read
    # back (4096 x 25088 from 2 rows, VGG's first FC layer: 27 ms against 40)
    c.split("i", mb, names=("i0", "i1"))
    c.split("j", nb, names=("j0", "j1"))
    c.reorder("i0", "j0", "i1", "j1")
    if nb > 1:
        c.vectorize("j1", nb)
    c.parallelize("i0")
    u.after(c, "j0")
    return f


def product(a, b, target=None):
    """``a^T @ b`` of float32 ``K x M`` and ``K x N`` matrices (NumPy arrays or
    CPU torch tensors, contiguous; K, M, N at least 1) by :func:`function`'s
    kernel, compiled once per shape; the result as the inputs are."""
    k, m = a.shape
    n = b.shape[1]
    return kernel(("outer_gemm", k, m, n), lambda: function(k, m, n), target)(a=a, b=b)

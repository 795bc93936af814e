"""The loop nests of the recurrent operators (:mod:`schedules.rnn`): one
layer's recurrence over all time steps (layer-major), a stack of layers as a
wavefront, and the CSR (sparse-weight) forms.  Algorithm and schedule in the
public language only.

Layouts (made once by :mod:`schedules.rnn`; ``G`` gates: 4 for the LSTM
(i, f, g, o), 3 for the GRU (r, z, n); hidden units in blocks of ``HB``,
``NB`` blocks, ``Hp = NB * HB`` the padded hidden size)::

    w   [NB][K][G][HB]        a weight matrix (G*H x K), a block of HB hidden
                               units with its G gates side by side: one pass
                               over the block's rows computes all its gates
    xp  [T][B][NB*G*HB]       the hoisted input projection, columns in the
                               same (block, gate, unit) order
    bias[NB][G][HB]
    y   [T + 1][B][Hp]        y[0] = h0, y[t + 1] = h_t (the layer's output)
    c   [B][Hp]               the cell state, updated in place (LSTM)

The recurrent step of one block ``jb`` at time ``t``: the gates' accumulators
start from the projection (+ biases), the block's rows of ``w`` are swept once
(``k`` outer, the ``G x HB`` gates of ``MB`` batch rows in registers:
``accumulate_locally``), then the nonlinearities and the c/h update of the
block's ``HB`` units follow in the same nest, from the scratch ``z`` that is
never larger than ``NB x B x G x HB``.
"""
from __future__ import annotations

import tiramisu_py as tp

from ..core.sizes import largest_divisor
from ..weights.rnn import GATES, Blocking, padded      # noqa: F401  (the weights' layout facts)
from ..weights.window import SLICE, WINDOW


def projection_columns(m):
    """The row length of the sparse layer's transposed input projection:
    ``m`` (= T * B) padded to whole vectors of 16, so that its accumulation
    (a tile of the row in registers per nonzero) has no scalar tail."""
    return -(-m // SLICE) * SLICE


# ---------------------------------------------------------------- cell math
def _lstm_cell(f, z, c_in, t, b, j, n, c_buf, y_out):
    """c = f*c + i*g; h = o*tanh(c): statements ``cell`` and ``hidden``."""
    cell = f.computation("cell", [*t, b, j],
                         tp.sigmoid(z(1)) * c_in + tp.sigmoid(z(0)) * tp.tanh(z(2)))
    cell.store_in(c_buf[0], c_buf[1])
    hid = f.computation("hidden", [*t, b, j], tp.sigmoid(z(3)) * tp.tanh(c_buf[0][tuple(c_buf[1])]))
    hid.store_in(y_out[0], y_out[1])
    return [cell, hid]


def _gru_cell(f, zi, zh, h_prev, t, b, j, y_out):
    """r = s(zi_r + zh_r); u = s(zi_z + zh_z); n = tanh(zi_n + r * zh_n);
    h = (1 - u) * n + u * h_prev: statement ``hidden``."""
    r = tp.sigmoid(zi(0) + zh(0))
    u = tp.sigmoid(zi(1) + zh(1))
    nn = tp.tanh(zi(2) + r * zh(2))
    hid = f.computation("hidden", [*t, b, j], (1.0 - u) * nn + u * h_prev)
    hid.store_in(y_out[0], y_out[1])
    return [hid]


def _block_gemv(update, blk: Blocking, b="b", k="k", g="g", j="j"):
    """Register blocking of ``z[.., b, g, j] += w[.., k, g, j] * h[.., b, k]``:
    ``b0 k b1 g j`` with b1 (MB rows) and g unrolled, j vectorised, the
    MB x G x HB accumulators kept in registers over ``k``."""
    update.split(b, blk.mb, names=("b0", "b1"))
    update.split(j, blk.lanes, names=("j0", "j1"))
    update.reorder("b0", k, "b1", g, "j0", "j1")
    update.unroll("b1", blk.mb)
    update.unroll(g)
    update.unroll("j0")
    update.vectorize("j1", blk.lanes)
    update.accumulate_locally(k, allow_reassociation=True)


# ------------------------------------------------------------- layer-major
def layer_function(cell, T, B, H, K, blk: Blocking, sparse=False, parallel=True,
                   wdtype="float32"):
    """One layer over all ``T`` steps, its input projection ``xp`` given
    (hoisted: one GEMM over all steps).  Inputs ``xp, w (or the sparse
    arrays), bias, h0, c0 (LSTM)``; outputs ``y`` (and ``c``).  ``K`` is the
    recurrent product's depth (H).  ``sparse``: ``w`` over the packed rows
    ``(jb * G + g) * HB + j``, "csr" (or True): ``rowptr, colidx, values``,
    each row padded to groups of ``lanes`` nonzeros, a group a gather of
    ``y``; "window": ``wptr, wval, widx`` (:mod:`schedules.weights.window`:
    16 rows in the lanes, their nonzeros window by window of 32 columns,
    each slot's 16 inputs one permute of the window's two vectors).
    ``wdtype``: the storage type of ``w`` ("float32", "bfloat16",
    "float16"; the products and sums in float32)."""
    G, hb = GATES[cell], blk.hb
    NB = padded(H, hb) // hb
    Hp = NB * hb
    form = ("window" if sparse == "window" else "csr") if sparse else None
    if form == "window" and hb % SLICE:
        raise ValueError(f"layer_function: the window form needs blocks of whole slices of "
                         f"{SLICE} units, got HB={hb}")
    f = tp.Function(f"{cell}_layer{'_' + form if form else ''}",
                    params={"T": T, "B": B, "NB": NB, "HB": hb, "K": K,
                            **({"NNZ": None} if sparse else {})})
    t, jb = f.var("t", 0, "T"), f.var("jb", 0, "NB")
    b, g, j = f.var("b", 0, "B"), f.var("g", 0, G), f.var("j", 0, "HB")
    n = f.var("n", 0, Hp)
    # the CSR projection is made transposed, [rows][T * B] with its rows
    # padded to whole vectors (schedules.solvers.rnn_cpu._projection_kernel)
    xp = f.input("xp", (NB * G * hb, projection_columns(T * B)) if sparse
                 else ("T", "B", NB * G * hb), tp.float32)

    def xp_at(gate):
        row = (jb * G + gate) * hb + j
        return xp[row, t * B + b] if sparse else xp[t, b, row]

    bias = f.input("bias", ("NB", G, "HB"), tp.float32)
    h0 = f.input("h0", ("B", Hp), tp.float32)
    y = f.buffer("y", ("T + 1", "B", Hp), tp.float32, output=True)
    zb = f.buffer("gates_acc", ("NB", "B", G, "HB"), tp.float32)
    f.computation("y_init", [b, n], h0[b, n]).store_in(y, [0, b, n])
    if cell == "lstm":
        c0 = f.input("c0", ("B", Hp), tp.float32)
        cb = f.buffer("c", ("B", Hp), tp.float32, output=True)
        f.computation("c_init", [b, n], c0[b, n]).store_in(cb, [b, n])
    if sparse == "window":
        nj, nw = hb // SLICE, -(-K // WINDOW)
        wptr = f.input("wptr", (NB * G * nj * nw + 1,), tp.int32)
        wval = f.input("wval", ("NNZ * 16",), tp.float32)
        widx = f.input("widx", ("NNZ * 16",), tp.uint8)
    elif sparse:
        rowptr = f.input("rowptr", (NB * G * hb + 1,), tp.int32)      # in groups
        colidx = f.input("colidx", ("NNZ",), tp.int32)
        values = f.input("values", ("NNZ",), tp.float32)
    else:
        w = f.input("w", ("NB", "K", G, "HB"), getattr(tp, wdtype))
    u = jb * hb + j
    with f.nest(t, jb):
        # LSTM: the accumulators start from the projection; GRU: from b_hh
        # (its n gate needs the recurrent part apart)
        init = bias[jb, g, j] + (xp_at(g) if cell == "lstm" else 0.0)
        z = f.computation("gates", [t, jb, b, g, j], init).store_in(zb, [jb, b, g, j])
        if sparse == "window":
            # a slice of 16 units of gate g in the lanes (jl), window by window
            jv, jl = f.var("jv", 0, nj), f.var("jl", 0, SLICE)
            w = f.var("w", 0, nw)
            at = ((jb * G + g) * nj + jv) * nw + w
            nz = f.var("nz", wptr[at], wptr[at + 1])
            z[t, jb, b, g, jv * SLICE + jl].reduce(
                "+", wval[nz * SLICE + jl] * y[t, b, w * WINDOW + widx[nz * SLICE + jl] % WINDOW],
                loops=[t, jb, b, g, jv, w, nz, jl])
            z.update.vectorize("jl", SLICE)
            z.update.accumulate_locally("nz", allow_reassociation=True)
        elif sparse:
            # rows padded to groups of ``lanes`` nonzeros (rowptr counts
            # groups): a group is one vector of products, its lanes summed
            # in a register tile over the row, reduced once
            row, q = (jb * G + g) * hb + j, f.var("q", 0, blk.lanes)
            nz = f.var("nz", rowptr[row], rowptr[row + 1])
            z[t, jb, b, g, j].reduce(
                "+", values[nz * blk.lanes + q] * y[t, b, colidx[nz * blk.lanes + q]],
                loops=[t, jb, b, g, j, nz, q])
            z.update.vectorize("q", blk.lanes)
            z.update.accumulate_locally("nz", allow_reassociation=True)
        else:
            k = f.var("k", 0, "K")
            z[t, jb, b, g, j] += w[jb, k, g, j] * y[t, b, k]
        zg = lambda gate: z[t, jb, b, gate, j]              # noqa: E731
        if cell == "lstm":
            stmts = _lstm_cell(f, zg, cb[b, u], [t, jb], b, j, u, (cb, [b, u]),
                               (y, [t + 1, b, u]))
        else:
            bias_i = f.input("bias_i", ("NB", G, "HB"), tp.float32)
            xg = lambda gate: xp_at(gate) + bias_i[jb, gate, j]  # noqa: E731
            stmts = _gru_cell(f, xg, zg, y[t, b, u], [t, jb], b, j, (y, [t + 1, b, u]))
    # schedule: the hidden blocks in parallel at every step
    z.vectorize("j", blk.lanes)
    if not sparse:
        _block_gemv(z.update, blk)
    for s in stmts:
        s.vectorize("j", blk.lanes)
    if parallel:
        z.parallelize("jb")
    return f


# ---------------------------------------------------------------- wavefront
def chunk_of(T, limit=16):
    """The wavefront's chunk of steps: the largest divisor of T <= limit."""
    return largest_divisor(T, limit)


def wavefront_function(cell, L, T, B, H, blk: Blocking, chunk=None, wdtype="float32"):
    """``L`` stacked layers of input size ``H`` (the layers above the first,
    or all when I == H) as a wavefront over chunks of ``chunk`` steps: the
    chunk ``tc`` of layer ``l`` first projects its ``chunk * B`` inputs (the
    layer below's outputs of the same chunk) in one small GEMM (``proj``,
    hoisted out of the steps: ``w_ih`` is read once per chunk, not once per
    step), then runs its steps.  The chunk loop is skewed by the layer
    (``tc' = tc + l``) and the layers of one anti-diagonal run in parallel:
    one barrier per anti-diagonal, not per step.
    Inputs ``xin (T, B, H), wi, wh [L][NB][H][G][HB], bi, bh [L][NB][G][HB],
    h0, c0 [L][B][Hp]``; outputs ``h [L + 1][T + 1][B][Hp]`` (slot 0 the
    input, ``h[l + 1][t + 1]`` layer l's h_t) and ``c [L][B][Hp]``.
    ``wdtype``: the storage type of ``wi`` and ``wh`` (sums in float32)."""
    G, hb = GATES[cell], blk.hb
    TC = chunk or chunk_of(T)
    NB = padded(H, hb) // hb
    Hp = NB * hb
    f = tp.Function(f"{cell}_wavefront",
                    params={"L": L, "T": T, "B": B, "NB": NB, "HB": hb, "H": H, "TC": TC,
                            "NC": T // TC})
    l, tc, jb = f.var("l", 0, "L"), f.var("tc", 0, "NC"), f.var("jb", 0, "NB")
    t1, r = f.var("t1", 0, "TC"), f.var("r", 0, "TC * B")
    b, g, j = f.var("b", 0, "B"), f.var("g", 0, G), f.var("j", 0, "HB")
    k, kh = f.var("k", 0, "H"), f.var("kh", 0, "H")
    n, tx = f.var("n", 0, Hp), f.var("tx", 0, "T")
    xin = f.input("xin", ("T", "B", "H"), tp.float32)
    wi = f.input("wi", ("L", "NB", "H", G, "HB"), getattr(tp, wdtype))
    wh = f.input("wh", ("L", "NB", "H", G, "HB"), getattr(tp, wdtype))
    bi = f.input("bi", ("L", "NB", G, "HB"), tp.float32)
    bh = f.input("bh", ("L", "NB", G, "HB"), tp.float32)
    h0 = f.input("h0", ("L", "B", Hp), tp.float32)
    hb_ = f.buffer("h", ("L + 1", "T + 1", "B", Hp), tp.float32, output=True)
    f.computation("x_copy", [tx, b, kh], xin[tx, b, kh]).store_in(hb_, [0, tx + 1, b, kh])
    f.computation("h_init", [l, b, n], h0[l, b, n]).store_in(hb_, [l + 1, 0, b, n])
    if cell == "lstm":
        c0 = f.input("c0", ("L", "B", Hp), tp.float32)
        cb = f.buffer("c", ("L", "B", Hp), tp.float32, output=True)
        f.computation("c_init", [l, b, n], c0[l, b, n]).store_in(cb, [l, b, n])
    u, t = jb * hb + j, tc * TC + t1
    xpb = f.buffer("proj_acc", ("L", "TC * B", "NB", G, "HB"), tp.float32)
    zb = f.buffer("gates_acc", ("L", "NB", "B", G, "HB"), tp.float32)
    with f.nest(l, tc):
        # the chunk's input projection (LSTM: both biases; GRU: b_ih)
        pinit = bi[l, jb, g, j] + (bh[l, jb, g, j] if cell == "lstm" else 0.0)
        proj = f.computation("proj", [l, tc, jb, r, g, j], pinit).store_in(xpb, [l, r, jb, g, j])
        proj[l, tc, jb, r, g, j] += wi[l, jb, kh, g, j] * hb_[l, tc * TC + r // B + 1, r % B, kh]
        with f.nest(t1, jb):
            xp = lambda gate: xpb[l, t1 * B + b, jb, gate, j]       # noqa: E731
            z = f.computation("gates", [l, tc, t1, jb, b, g, j],
                              xp(g) if cell == "lstm" else bh[l, jb, g, j])
            z.store_in(zb, [l, jb, b, g, j])
            z[l, tc, t1, jb, b, g, j] += wh[l, jb, k, g, j] * hb_[l + 1, t, b, k]
            zg = lambda gate: z[l, tc, t1, jb, b, gate, j]          # noqa: E731
            loops = [l, tc, t1, jb]
            if cell == "lstm":
                stmts = _lstm_cell(f, zg, cb[l, b, u], loops, b, j, u, (cb, [l, b, u]),
                                   (hb_, [l + 1, t + 1, b, u]))
            else:
                stmts = _gru_cell(f, xp, zg, hb_[l + 1, t, b, u], loops, b, j,
                                  (hb_, [l + 1, t + 1, b, u]))
    for s in (proj, z, *stmts):
        s.vectorize("j", blk.lanes)
    _block_gemv(proj.update, blk, b="r", k="kh")
    _block_gemv(z.update, blk)
    for s in (proj, proj.update, z, z.update, *stmts):
        s.skew("l", "tc", 1)
        s.interchange("l", "tc")
    proj.parallelize("l")
    return f

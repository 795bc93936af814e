"""The loop nest of one LSTM layer with a projection (``torch.nn.LSTM(...,
proj_size=P)``), written in the public language: the recurrence reads the
projected hidden state, ``h_t = W_hr @ (o_t * tanh(c_t))`` of size ``P``, so
every step ends with a product over all ``H`` cell units before the next step
can start (the layer-major kernel of :mod:`schedules.blocks.rnn_cells` has no
such phase; this is its own nest).

Layouts (torch's matrices, reshaped without copies by the caller)::

    x    [T][B][I]          the layer's input
    wi   [4][H][I]          w_ih, gates i, f, g, o
    wh   [4][H][P]          w_hh (its depth is P, not H)
    wr   [P][H]             w_hr
    bias [4][H]             b_ih + b_hh (zeros without biases)
    h0   [B][P], c0 [B][H]
    y    [T + 1][B][P]      y[0] = h0, y[t + 1] = h_t (output)
    c    [B][H]             the cell state, updated in place (output)

``proj`` (all steps' input projections, hoisted out of the recurrence) runs
first, parallel over the steps; then, per step: the gates' accumulators start
from ``proj`` and sweep ``wh`` once (``k`` innermost in a register), the cell
update, the unprojected hidden state ``full`` and the projection into ``y``
(``m`` innermost in a register).
"""
from __future__ import annotations

import tiramisu_py as tp


def lstm_projected_function(T, B, I, H, P):
    """One projected LSTM layer over ``T`` steps (inputs ``x, wi, wh, wr,
    bias, h0, c0``; outputs ``y``, ``c``)."""
    f = tp.Function("lstm_projected_layer", params={"T": T, "B": B, "I": I, "H": H, "P": P})
    t, b = f.var("t", 0, "T"), f.var("b", 0, "B")
    g, j, i = f.var("g", 0, 4), f.var("j", 0, "H"), f.var("i", 0, "I")
    k, p, m = f.var("k", 0, "P"), f.var("p", 0, "P"), f.var("m", 0, "H")
    x = f.input("x", ("T", "B", "I"), tp.float32)
    wi = f.input("wi", (4, "H", "I"), tp.float32)
    wh = f.input("wh", (4, "H", "P"), tp.float32)
    wr = f.input("wr", ("P", "H"), tp.float32)
    bias = f.input("bias", (4, "H"), tp.float32)
    h0 = f.input("h0", ("B", "P"), tp.float32)
    c0 = f.input("c0", ("B", "H"), tp.float32)
    xp = f.buffer("proj_acc", ("T", "B", 4, "H"), tp.float32)
    y = f.buffer("y", ("T + 1", "B", "P"), tp.float32, output=True)
    cb = f.buffer("c", ("B", "H"), tp.float32, output=True)
    full = f.buffer("full", ("B", "H"), tp.float32)
    zb = f.buffer("gates_acc", ("B", 4, "H"), tp.float32)
    proj = f.computation("proj", [t, b, g, j], bias[g, j]).store_in(xp, [t, b, g, j])
    proj[t, b, g, j] += wi[g, j, i] * x[t, b, i]
    f.computation("y_init", [b, p], h0[b, p]).store_in(y, [0, b, p])
    f.computation("c_init", [b, j], c0[b, j]).store_in(cb, [b, j])
    with f.nest(t):
        z = f.computation("gates", [t, b, g, j], xp[t, b, g, j]).store_in(zb, [b, g, j])
        z[t, b, g, j] += wh[g, j, k] * y[t, b, k]
        zg = lambda gate: z[t, b, gate, j]              # noqa: E731
        cell = f.computation("cell", [t, b, j],
                             tp.sigmoid(zg(1)) * cb[b, j] + tp.sigmoid(zg(0)) * tp.tanh(zg(2)))
        cell.store_in(cb, [b, j])
        hid = f.computation("full_hidden", [t, b, j], tp.sigmoid(zg(3)) * tp.tanh(cb[b, j]))
        hid.store_in(full, [b, j])
        out = f.computation("hidden", [t, b, p], 0.0).store_in(y, [t + 1, b, p])
        out[t, b, p] += wr[p, m] * full[b, m]
    proj.parallelize("t")
    z.update.accumulate_locally(k, allow_reassociation=True)
    out.update.accumulate_locally(m, allow_reassociation=True)
    return f

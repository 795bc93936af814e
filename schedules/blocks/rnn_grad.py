"""The loop nests of LSTM/GRU training, any dtype (float32, float64): one
layer's forward that keeps every hidden state (:func:`layer_forward`), and
its backpropagation through time (:func:`layer_backward`), written in the
public language; :mod:`schedules.solvers.rnn_train` runs them layer by layer.

Layouts (gates in torch's order, rows ``g * H + j`` of the G*H x K weights)::

    x    [T][B][K]        the layer's input
    h    [T + 1][B][H]    h[0] = h0, h[t + 1] = the output at step t
    c    [T + 1][B][H]    the LSTM's cell states, c[0] = c0

The backward needs only ``x``, ``h`` and the weights: the pre-activations
of all steps are two GEMMs with no recurrence (h is known), and the LSTM's
cell states a cheap elementwise scan; then one reverse-time nest runs the
recurrence of the gradients (``dH[s]``: the gradient reaching h at step
``T - 1 - s`` from later steps, ``dC[s]`` the cell state's), writes the
gates' gradients ``dzx`` / ``dzh`` of every step, and the products that do
not recur (the input's gradient, the weights', the biases') follow as GEMMs
and reductions over all steps.  Schedules: the outer loop parallel; the
products whose innermost loop is an output's column (the h gradient through
``w_hh``, the input's, the weights') run that column in vectors, each sum
in its order (bit for bit the plain nest's); float32 pre-activations sum
their dot products in vectors (reassociated: float32 rounding, not the
plain order), float64 ones in order (gradcheck).
"""
from __future__ import annotations

import tiramisu_py as tp

from ..core.sizes import largest_divisor
from ..host import host
from ..weights.rnn import GATES


def _dt(dtype):
    return {"float32": tp.float32, "float64": tp.float64}[dtype]


def _projection(f, name, src, w, bias, T, B, G, H, K, dt, L=None):
    """``name[(l,) t, b, g, j] = bias[(l,) g*H + j] + sum_k src[(l,) t, b, k] *
    w[(l,) g*H + j, k]`` (all steps, all layers at once: no recurrence)."""
    t, b = f.var(f"{name}_t", 0, T), f.var(f"{name}_b", 0, B)
    g, j, k = f.var(f"{name}_g", 0, G), f.var(f"{name}_j", 0, H), f.var(f"{name}_k", 0, K)
    lv = (f.var(f"{name}_l", 0, L),) if L else ()
    z = f.computation(name, [*lv, t, b, g, j], bias[(*lv, g * H + j)])
    z[(*lv, t, b, g, j)] += src[(*lv, t, b, k)] * w[(*lv, g * H + j, k)]
    outer = (lv[0] if L else t).name
    z.parallelize(outer)
    z.update.parallelize(outer)
    if dt == tp.float32:        # a dot product of two contiguous rows, in vectors
        lanes = host().lanes(4)
        if K >= 2 * lanes:
            z.update.allow_reassociation()
            _vector(z.update, f"{name}_k", K, lanes)
    return z


def _vector(stmt, loop, extent, lanes):
    """``loop`` (innermost, no reduction along it) of ``stmt`` in vectors of
    ``lanes`` where it is at least two vectors long."""
    if extent >= 2 * lanes:
        stmt.split(loop, lanes, names=(f"{loop}_v0", f"{loop}_v1"))
        stmt.vectorize(f"{loop}_v1", lanes)


def _sig(v):
    return tp.sigmoid(v)


def layer_forward(cell, T, B, K, H, dtype="float64"):
    """One layer's forward over ``T`` steps keeping every state: inputs ``x,
    w_ih, w_hh, b_ih, b_hh, h0`` (and ``c0``), outputs ``h`` (and ``c``),
    ``[T + 1][B][H]``."""
    G, dt = GATES[cell], _dt(dtype)
    f = tp.Function(f"{cell}_train_forward_{dtype}", params={})
    x = f.input("x", (T, B, K), dt)
    w_ih, w_hh = f.input("w_ih", (G * H, K), dt), f.input("w_hh", (G * H, H), dt)
    b_ih, b_hh = f.input("b_ih", (G * H,), dt), f.input("b_hh", (G * H,), dt)
    h0 = f.input("h0", (B, H), dt)
    hb = f.buffer("h", (T + 1, B, H), dt, output=True)
    b0, j0 = f.var("ib", 0, B), f.var("ij", 0, H)
    f.computation("h_init", [b0, j0], h0[b0, j0]).store_in(hb, [0, b0, j0])
    if cell == "lstm":
        c0 = f.input("c0", (B, H), dt)
        cb = f.buffer("c", (T + 1, B, H), dt, output=True)
        f.computation("c_init", [b0, j0], c0[b0, j0]).store_in(cb, [0, b0, j0])
    zx = _projection(f, "zx", x, w_ih, b_ih, T, B, G, H, K, dt)
    t, b, g, j, k = (f.var("t", 0, T), f.var("b", 0, B), f.var("g", 0, G), f.var("j", 0, H),
                     f.var("k", 0, H))
    zhb = f.buffer("zh", (B, G, H), dt)
    with f.nest(t):
        zh = f.computation("zh_step", [t, b, g, j], b_hh[g * H + j]).store_in(zhb, [b, g, j])
        zh[t, b, g, j] += hb[t, b, k] * w_hh[g * H + j, k]
        zx_, zh_ = (lambda q: zx[t, b, q, j]), (lambda q: zhb[b, q, j])
        if cell == "lstm":
            z = lambda q: zx_(q) + zh_(q)                                # noqa: E731
            f.computation("cell", [t, b, j], _sig(z(1)) * cb[t, b, j] + _sig(z(0)) * tp.tanh(z(2))
                          ).store_in(cb, [t + 1, b, j])
            f.computation("hidden", [t, b, j], _sig(z(3)) * tp.tanh(cb[t + 1, b, j])
                          ).store_in(hb, [t + 1, b, j])
        else:
            r, u = _sig(zx_(0) + zh_(0)), _sig(zx_(1) + zh_(1))
            n = tp.tanh(zx_(2) + r * zh_(2))
            f.computation("hidden", [t, b, j], (1.0 - u) * n + u * hb[t, b, j]
                          ).store_in(hb, [t + 1, b, j])
    zh.update.parallelize("b")
    return f


def layer_backward(cell, T, B, K, H, dtype="float64"):
    """Backpropagation through time of one layer (layer-major).  Inputs ``x,
    h`` (the forward's states), ``w_ih, w_hh, b_ih, b_hh``, ``c0`` (LSTM),
    ``dy`` (T, B, H: the gradient of the layer's outputs), ``dh_n`` (and
    ``dc_n``) (B, H).  Outputs ``dx`` (T, B, K), ``dw_ih`` (G, H, K),
    ``dw_hh`` (G, H, H), ``db_ih``, ``db_hh`` (G, H), ``dH`` and ``dC``
    ([T + 1][B][H]; ``dH[T]`` is the gradient of h0, ``dC[T]`` of c0)."""
    return _backward(cell, T, B, K, H, dtype)


def layer_recurrence(cell, T, B, H, dtype="float32"):
    """The recurrent part of :func:`layer_backward`, for a caller that runs the
    products without recurrence as library GEMMs (:mod:`schedules.solvers.rnn_train`):
    inputs ``zx``, ``zh`` (T, B, G, H: ``x @ w_ih^T`` and ``h[:T] @ w_hh^T``,
    without the biases), ``h``, ``w_hh``, ``b_ih``, ``b_hh``, ``c0`` (LSTM),
    ``dy``, ``dh_n`` (and ``dc_n``); outputs the gates' gradients ``dzx``
    (and the GRU's ``dzh``) (T, B, G, H), ``db_ih``, ``db_hh``, ``dH`` and
    ``dC`` as :func:`layer_backward`'s."""
    return _backward(cell, T, B, H, H, dtype, products=False)


def wavefront_backward(cell, L, T, B, H, dtype="float64"):
    """Backpropagation through time of ``L`` stacked layers of input size H
    as a wavefront: the reverse step ``s`` of layer ``l`` needs the step
    ``s - 1`` of the same layer (the recurrence) and the step ``s`` of the
    layer above (its input's gradient at that time is this layer's output
    gradient), so the nest ``(m, s)`` (``m = L - 1 - l``, top layer first)
    is skewed (``s' = s + m``), interchanged, and the layers of one
    anti-diagonal run in parallel: one barrier per anti-diagonal (T + L - 1)
    instead of L * T steps in a row.  Every buffer has a layer dimension, so
    parallel layers share nothing.  Inputs as :func:`layer_backward`'s with a
    leading layer dimension (``x`` (L, T, B, H): each layer's input, ``keep``
    (L, T, B, H): the dropout mask applied to that input, ones where none),
    ``dy`` the top layer's output gradient (T, B, H).  Outputs ``dys``
    ([L + 1][T][B][H]; ``dys[l + 1]`` layer l's output gradient, ``dys[0]``
    the stack input's), ``dw_ih``, ``dw_hh`` (L, G, H, H), ``db_ih``,
    ``db_hh`` (L, G, H), ``dH``, ``dC`` (L, T + 1, B, H)."""
    return _backward(cell, T, B, H, H, dtype, L)


def _backward(cell, T, B, K, H, dtype, L=None, products=True):
    G, dt = GATES[cell], _dt(dtype)
    lstm, stack = cell == "lstm", L is not None
    lanes = host().lanes(4 if dtype == "float32" else 8)
    kind = "wavefront" if stack else "layer" if products else "recurrence"
    f = tp.Function(f"{cell}_{kind}_backward_{dtype}", params={})
    pre = (L,) if stack else ()
    x = f.input("x", (*pre, T, B, K), dt) if products else None
    h = f.input("h", (*pre, T + 1, B, H), dt)
    w_ih = f.input("w_ih", (*pre, G * H, K), dt) if products else None
    w_hh = f.input("w_hh", (*pre, G * H, H), dt)
    b_ih, b_hh = f.input("b_ih", (*pre, G * H), dt), f.input("b_hh", (*pre, G * H), dt)
    dy, dhn = f.input("dy", (T, B, H), dt), f.input("dh_n", (*pre, B, H), dt)
    shapes = (("dys" if stack else "dx", (L + 1, T, B, H) if stack else (T, B, K)),
              ("dw_ih", (*pre, G, H, K)), ("dw_hh", (*pre, G, H, H))) if products else (
              ("dzx", (T, B, G, H)),) + ((("dzh", (T, B, G, H)),) if not lstm else ())
    out = {n: f.buffer(n, shape, dt, output=True) for n, shape in shapes + (
        ("db_ih", (*pre, G, H)), ("db_hh", (*pre, G, H)), ("dH", (*pre, T + 1, B, H)),
        ("dC", (*pre, T + 1, B, H)))}
    dH, dC = out["dH"], out["dC"]
    il = (f.var("il", 0, L),) if stack else ()
    b0, j0 = f.var("ib", 0, B), f.var("ij", 0, H)
    f.computation("dh_init", [*il, b0, j0], dhn[(*il, b0, j0)]).store_in(dH, [*il, 0, b0, j0])
    if lstm:
        c0, dcn = f.input("c0", (*pre, B, H), dt), f.input("dc_n", (*pre, B, H), dt)
        dc_init = dcn[(*il, b0, j0)]
    else:           # the GRU has no cell state: dC stays 0
        dc_init = tp.cast(dt, 0.0)
    f.computation("dc_init", [*il, b0, j0], dc_init).store_in(dC, [*il, 0, b0, j0])
    if stack:       # the top layer's output gradient, in slot L
        keep = f.input("keep", (L, T, B, H), dt)
        dys = out["dys"]
        it = f.var("it", 0, T)
        f.computation("dy_top", [it, b0, j0], dy[it, b0, j0]).store_in(dys, [L, it, b0, j0])
    # the pre-activations of all steps (h is known: no recurrence)
    if products:
        zx = _projection(f, "zx", x, w_ih, b_ih, T, B, G, H, K, dt, L)
        zh = _projection(f, "zh", h, w_hh, b_hh, T, B, G, H, H, dt, L)
    else:           # the caller's products, and the biases added as they are read
        zx = _Biased(f.input("zx", (T, B, G, H), dt), b_ih, H)
        zh = _Biased(f.input("zh", (T, B, G, H), dt), b_hh, H)
    if lstm:        # the cell states, an elementwise scan
        cb = f.buffer("c", (*pre, T + 1, B, H), dt)
        f.computation("c_init", [*il, b0, j0], c0[(*il, b0, j0)]).store_in(cb, [*il, 0, b0, j0])
        cl = (f.var("cl", 0, L),) if stack else ()
        t, b, j = f.var("ct", 0, T), f.var("cb", 0, B), f.var("cj", 0, H)
        z = lambda q: zx[(*cl, t, b, q, j)] + zh[(*cl, t, b, q, j)]     # noqa: E731
        cs = f.computation("cell", [*cl, t, b, j],
                           _sig(z(1)) * cb[(*cl, t, b, j)] + _sig(z(0)) * tp.tanh(z(2)))
        cs.store_in(cb, [*cl, t + 1, b, j])
        if stack:
            cs.parallelize("cl")
    # the reverse-time recurrence: step s is time T - 1 - s (top layer first)
    s, b, j = f.var("s", 0, T), f.var("b", 0, B), f.var("j", 0, H)
    gr, jr, k = f.var("gr", 0, G), f.var("jr", 0, H), f.var("k", 0, H)
    t = (T - 1) - s
    m = f.var("m", 0, L) if stack else None
    lv = ((L - 1) - m,) if stack else ()
    loops = [m, s] if stack else [s]
    dzx = out["dzx"] if not products else f.buffer("dzx", (*pre, T, B, G, H), dt)
    dzh = dzx if lstm else out["dzh"] if not products else f.buffer("dzh", (*pre, T, B, G, H), dt)
    with f.nest(*loops):
        if stack:
            dh = dys[(L - m, t, b, j)] + dH[(*lv, s, b, j)]
        else:
            dh = dy[t, b, j] + dH[s, b, j]
        zxq = lambda q: zx[(*lv, t, b, q, j)]                           # noqa: E731
        zhq = lambda q: zh[(*lv, t, b, q, j)]                           # noqa: E731
        if lstm:
            z = lambda q: zxq(q) + zhq(q)                               # noqa: E731
            i, fg, gg, o = _sig(z(0)), _sig(z(1)), tp.tanh(z(2)), _sig(z(3))
            tc = tp.tanh(cb[(*lv, t + 1, b, j)])
            dct = f.computation("dc_total", [*loops, b, j],
                                dC[(*lv, s, b, j)] + dh * o * (1.0 - tc * tc))
            dc = dct[(*loops, b, j)]
            grads = (dc * gg * i * (1.0 - i), dc * cb[(*lv, t, b, j)] * fg * (1.0 - fg),
                     dc * i * (1.0 - gg * gg), dh * tc * o * (1.0 - o))
            stmts = [dct]
            for q, e in enumerate(grads):
                stmts.append(f.computation(f"dz{q}", [*loops, b, j], e
                                           ).store_in(dzx, [*lv, t, b, q, j]))
            stmts.append(f.computation("dc_prev", [*loops, b, j], dc * fg
                                       ).store_in(dC, [*lv, s + 1, b, j]))
            init = tp.cast(dt, 0.0)
        else:
            r, u = _sig(zxq(0) + zhq(0)), _sig(zxq(1) + zhq(1))
            n = tp.tanh(zxq(2) + r * zhq(2))
            dn = f.computation("dn", [*loops, b, j], dh * (1.0 - u) * (1.0 - n * n))
            dnv = dn[(*loops, b, j)]
            dr = dnv * zhq(2) * r * (1.0 - r)
            du = dh * (h[(*lv, t, b, j)] - n) * u * (1.0 - u)
            stmts = [dn]
            for q, e in enumerate((dr, du, dnv)):
                stmts.append(f.computation(f"dzx{q}", [*loops, b, j], e
                                           ).store_in(dzx, [*lv, t, b, q, j]))
            for q, e in enumerate((dr, du, dnv * r)):
                stmts.append(f.computation(f"dzh{q}", [*loops, b, j], e
                                           ).store_in(dzh, [*lv, t, b, q, j]))
            stmts.append(f.computation("dc_prev", [*loops, b, j], tp.cast(dt, 0.0)
                                       ).store_in(dC, [*lv, s + 1, b, j]))
            # the gradient reaching h_prev directly: h = ... + u * h_prev
            dhk = (dys[(L - m, t, b, k)] if stack else dy[t, b, k]) + dH[(*lv, s, b, k)]
            init = dhk * _sig(zx[(*lv, t, b, 1, k)] + zh[(*lv, t, b, 1, k)])
        # the gradient reaching h at the step before, through w_hh
        dprev = f.computation("dh_prev", [*loops, b, k], init).store_in(dH, [*lv, s + 1, b, k])
        dprev[(*loops, b, k)] += dzh[(*lv, t, b, gr, jr)] * w_hh[(*lv, gr * H + jr, k)]
        stmts.append(dprev)
        if stack:   # this layer's input gradient at this step: the layer below's dy
            dxs = f.computation("dx_step", [*loops, b, k], tp.cast(dt, 0.0))
            dxs[(*loops, b, k)] += dzx[(*lv, t, b, gr, jr)] * w_ih[(*lv, gr * H + jr, k)]
            dyb = f.computation("dy_below", [*loops, b, k],
                                keep[(*lv, t, b, k)] * dxs[(*loops, b, k)])
            dyb.store_in(dys, [*lv, t, b, k])
            stmts += [dxs, dyb]
    if stack:
        for st in stmts:
            for u in [st, *st.updates]:
                u.skew("m", "s", 1)
                u.interchange("m", "s")
        stmts[0].parallelize("m")
    else:
        _step_product(dprev.update, B, H, lanes)
    if not products:        # float32: the gates' math in vectors of j (and the cell scan's)
        for st in [cs] + stmts[:-1] if lstm else stmts[:-1]:
            _vector(st, st.vars[-1].name, H, lanes)
    # the products that do not recur: over all steps at once
    ol = (f.var("ol", 0, L),) if stack else ()
    t, b = f.var("t", 0, T), f.var("bb", 0, B)
    g, jj, kx, kh = f.var("g", 0, G), f.var("jj", 0, H), f.var("kx", 0, K), f.var("kh", 0, H)
    if not products:
        _bias_gradients(f, out, ol, t, b, g, jj, dzx, dzh, dt, H, lanes)
        return f
    if not stack:
        dx = f.computation("dx_c", [t, b, kx], tp.cast(dt, 0.0)).store_in(out["dx"], [t, b, kx])
        dx[t, b, kx] += dzx[t, b, g, jj] * w_ih[g * H + jj, kx]
        dx.update.reorder("t", "bb", "g", "jj", "kx")       # (each sum's order kept)
        _vector(dx.update, "kx", K, lanes)
        dx.parallelize("t")
        dx.update.parallelize("t")
    for name, src, kv, dz in (("dw_ih", x, kx, dzx), ("dw_hh", h, kh, dzh)):
        dw = f.computation(f"{name}_c", [*ol, g, jj, kv], tp.cast(dt, 0.0)
                           ).store_in(out[name], [*ol, g, jj, kv])
        dw[(*ol, g, jj, kv)] += dz[(*ol, t, b, g, jj)] * src[(*ol, t, b, kv)]
        dw.update.reorder(*[v.name for v in ol], "g", "jj", "t", "bb", kv.name)
        _vector(dw.update, kv.name, K if kv is kx else H, lanes)
        outer = ol[0].name if stack else "g"
        dw.parallelize(outer)
        dw.update.parallelize(outer)
    _bias_gradients(f, out, ol, t, b, g, jj, dzx, dzh, dt)
    return f


def _step_product(u, B, H, lanes):
    """The h gradient through ``w_hh`` at one step, ``dH[b, k] += dz[b, gr,
    jr] * w_hh[gr * H + jr, k]``, as a register block: ``mb`` batch rows x
    two vectors of columns ``k`` kept in registers over each gate's units
    (copied in and out once a gate: every sum in the plain nest's order, the
    same bits), so each row of ``w_hh`` read serves ``mb`` rows of the batch
    (one row at a time read all of ``w_hh`` B times a step).  Blocks of rows
    in parallel, else of columns."""
    mb = largest_divisor(B, 8)
    if H < lanes:
        u.reorder("s", "b", "gr", "jr", "k")
        u.parallelize("b")
        return
    kv = 2 * lanes if H % (2 * lanes) == 0 else lanes
    u.split("b", mb, names=("b0", "b1"))
    u.split("k", kv, names=("k0", "k1"))
    u.split("k1", lanes, names=("kv", "kl"))
    u.reorder("s", "b0", "k0", "gr", "jr", "b1", "kv", "kl")
    u.unroll("b1", mb)
    u.unroll("kv")
    u.vectorize("kl", lanes)
    u.accumulate_locally("jr")
    u.parallelize("b0" if B // mb >= 2 else "k0")


def _bias_gradients(f, out, ol, t, b, g, jj, dzx, dzh, dt, H=None, lanes=None):
    """``db_ih`` and ``db_hh``: the gates' gradients summed over all steps
    (``lanes``: the units ``jj`` innermost, in vectors, each sum in its order)."""
    for name, dz in (("db_ih", dzx), ("db_hh", dzh)):
        db = f.computation(f"{name}_c", [*ol, g, jj], tp.cast(dt, 0.0)
                           ).store_in(out[name], [*ol, g, jj])
        db[(*ol, g, jj)] += dz[(*ol, t, b, g, jj)]
        if lanes:
            db.update.reorder("g", "t", "bb", "jj")
            _vector(db.update, "jj", H, lanes)


class _Biased:
    """``zx[t, b, g, j] + bias[g * H + j]`` where ``zx[...]`` is read: a
    product given without its bias (:func:`layer_recurrence`)."""
    def __init__(self, z, bias, H):
        self.z, self.bias, self.H = z, bias, H

    def __getitem__(self, index):
        *_, g, j = index
        return self.z[index] + self.bias[g * self.H + j]

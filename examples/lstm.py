"""Multilayer LSTM (PyTorch's gate order i, f, g, o): a layers x time
recurrence.  Layer l at time t reads layer l-1 at time t and itself at time
t-1, all through the buffers h and c."""
import numpy as np

import tiramisu_py as tp


def build(sizes=None):
    """``sizes``: {"NL": .., "T": .., "B": .., "H": ..} to fix them (constants
    in the generated code; the GPU schedule needs constant thread extents)."""
    f = tp.Function("lstm", params=sizes or ["NL", "T", "B", "H"])
    l, t = f.var("l", 0, "NL"), f.var("t", 0, "T")
    b, i = f.var("b", 0, "B"), f.var("i", 0, "H")
    g, k = f.var("g", 0, "4 * H"), f.var("k", 0, "H")
    Hs = f.param("H")
    x = f.input("x", ("T", "B", "H"), tp.float32)           # input size = hidden size
    W = f.input("W", ("NL", "4 * H", "H"), tp.float32)      # input weights per layer
    U = f.input("U", ("NL", "4 * H", "H"), tp.float32)      # recurrent weights
    bias = f.input("bias", ("NL", "4 * H"), tp.float32)
    h = f.buffer("h", ("NL + 1", "T + 1", "B", "H"), tp.float32, output=True)
    c = f.buffer("c", ("NL", "T + 1", "B", "H"), tp.float32)
    zb = f.buffer("gates", ("NL", "B", "4 * H"), tp.float32)

    f.computation("copy_x", [t, b, i], x[t, b, i]).store_in(h, [0, t + 1, b, i])
    f.computation("h_init", [l, b, i], 0.0, dtype=tp.float32).store_in(h, [l + 1, 0, b, i])
    f.computation("c_init", [l, b, i], 0.0, dtype=tp.float32).store_in(c, [l, 0, b, i])
    with f.nest(l, t):
        z = f.computation("z", [l, t, b, g], bias[l, g]).store_in(zb, [l, b, g])
        z[l, t, b, g] += W[l, g, k] * h[l, t + 1, b, k]        # from the layer below
        z[l, t, b, g] += U[l, g, k] * h[l + 1, t, b, k]        # from the previous step
        f.computation("c_step", [l, t, b, i],
                      tp.sigmoid(z[l, t, b, Hs + i]) * c[l, t, b, i]
                      + tp.sigmoid(z[l, t, b, i]) * tp.tanh(z[l, t, b, 2 * Hs + i])
                      ).store_in(c, [l, t + 1, b, i])
        f.computation("h_step", [l, t, b, i],
                      tp.sigmoid(z[l, t, b, 3 * Hs + i]) * tp.tanh(c[l, t + 1, b, i])
                      ).store_in(h, [l + 1, t + 1, b, i])
    return f


def wavefront(f):
    """Schedules the layers x time recurrence as a wavefront: time skewed by
    the layer (t' = t + l), then interchanged outward, so all layers of one
    anti-diagonal run in parallel."""
    nest = [s for s in f.statements if [v.name for v in s.vars[:2]] == ["l", "t"]]
    for s in nest:
        s.skew("l", "t", 1)
        s.interchange("l", "t")
        s.parallelize("l")
    return f


def wavefront_gpu(f):
    """The wavefront on a GPU: one launch per anti-diagonal (the skewed time
    loop stays on the host), its layers on blocks, batch x gates (or batch x
    hidden) on threads.  The barrier between the gate sums and the cell
    update is placed by the GPU legality check.  Needs fixed sizes
    (``build(sizes)``).  The wavefront itself is the library's
    (:func:`schedules.solvers.rnn_cuda.wavefront`); the library's full LSTM on the GPU
    (torch's weights, hidden units over several blocks) is
    :func:`schedules.solvers.rnn_cuda.function`, which :func:`schedules.lstm` runs
    with ``target="cuda"``."""
    from schedules.solvers.rnn_cuda import wavefront
    for s in f.statements:
        loops = [v.name for v in s.vars]
        if loops[:2] == ["l", "t"]:
            wavefront(s)
        else:                                   # copy_x (t, b, i), inits (l, b, i)
            s.bind(loops[0], "block.x")
        s.bind("b", "thread.y")
        s.bind("g" if "g" in loops else "i", "thread.x")
    return f


def sigmoid(v):
    return 1 / (1 + np.exp(-v))


def reference(x, W, U, bias):
    """Returns the last layer's outputs, shape (T, B, H)."""
    T, B, H = x.shape
    seq = x.astype(np.float64)
    for l in range(W.shape[0]):
        hp, cp = np.zeros((B, H)), np.zeros((B, H))
        outs = []
        for t in range(T):
            z = seq[t] @ W[l].T + hp @ U[l].T + bias[l]
            ig, fg, gg, og = sigmoid(z[:, :H]), sigmoid(z[:, H:2 * H]), np.tanh(z[:, 2 * H:3 * H]), sigmoid(z[:, 3 * H:])
            cp = fg * cp + ig * gg
            hp = og * np.tanh(cp)
            outs.append(hp)
        seq = np.stack(outs)
    return seq


def random_inputs(layers=3, T=6, B=2, H=8, seed=0):
    rng = np.random.default_rng(seed)
    s = 1 / np.sqrt(H)
    return (rng.standard_normal((T, B, H)).astype(np.float32),
            (rng.uniform(-s, s, (layers, 4 * H, H))).astype(np.float32),
            (rng.uniform(-s, s, (layers, 4 * H, H))).astype(np.float32),
            (rng.uniform(-s, s, (layers, 4 * H))).astype(np.float32))


def run(kernel, x, W, U, bias):
    h = kernel(x=x, W=W, U=U, bias=bias)
    return h[-1, 1:]                    # last layer, times 1..T


def main():
    args = random_inputs()
    kernel = build().compile()
    out = run(kernel, *args)
    print("max abs error vs NumPy:", float(np.abs(out - reference(*args)).max()))
    kernel = wavefront(build()).compile()
    out = run(kernel, *args)
    print("wavefront schedule, max abs error vs NumPy:", float(np.abs(out - reference(*args)).max()))


if __name__ == "__main__":
    main()

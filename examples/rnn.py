"""The library's recurrent operators, ``schedules.lstm`` and ``schedules.gru``,
against a float64 NumPy reference with ``torch.nn.LSTM`` / ``torch.nn.GRU``'s
semantics (batch_first=False, weights like ``module.all_weights``)."""
import numpy as np

GATES = {"lstm": 4, "gru": 3}


def sigmoid(v):
    return 1 / (1 + np.exp(-v))


def reference(cell, x, weights, h0=None, c0=None):
    """``(y, h_n, c_n)`` (``c_n`` None for the GRU) in float64; ``weights``
    a list per layer of ``[w_ih, w_hh(, b_ih, b_hh)]``."""
    seq = np.asarray(x, np.float64)
    B, L, H = seq.shape[1], len(weights), np.asarray(weights[0][1]).shape[1]
    h0 = np.zeros((L, B, H)) if h0 is None else np.asarray(h0, np.float64)
    c0 = np.zeros((L, B, H)) if c0 is None else np.asarray(c0, np.float64)
    hn, cn = [], []
    for l, w in enumerate(weights):
        wih, whh = (np.asarray(m, np.float64) for m in w[:2])
        bih, bhh = ((np.asarray(b, np.float64) for b in w[2:]) if len(w) == 4 else (0.0, 0.0))
        h, c, outs = h0[l], c0[l], []
        for t in range(seq.shape[0]):
            gi, gh = seq[t] @ wih.T + bih, h @ whh.T + bhh
            if cell == "lstm":
                i, f, g, o = np.split(gi + gh, 4, axis=1)
                c = sigmoid(f) * c + sigmoid(i) * np.tanh(g)
                h = sigmoid(o) * np.tanh(c)
            else:
                (ri, zi, ni), (rh, zh, nh) = np.split(gi, 3, axis=1), np.split(gh, 3, axis=1)
                r, z = sigmoid(ri + rh), sigmoid(zi + zh)
                h = (1 - z) * np.tanh(ni + r * nh) + z * h
            outs.append(h)
        seq = np.stack(outs)
        hn.append(h)
        cn.append(c)
    return seq, np.stack(hn), (np.stack(cn) if cell == "lstm" else None)


def random_weights(cell, layers, input_size, hidden, bias=True, density=1.0, seed=0):
    """Weights like ``torch.nn.LSTM(input_size, hidden, layers).all_weights``
    (uniform in +-1/sqrt(hidden)), a fraction ``density`` of them nonzero."""
    rng = np.random.default_rng(seed)
    G, s = GATES[cell], 1 / np.sqrt(hidden)
    out = []
    for l in range(layers):
        mats = [rng.uniform(-s, s, (G * hidden, input_size if l == 0 else hidden)),
                rng.uniform(-s, s, (G * hidden, hidden))]
        if density < 1:
            mats = [m * (rng.random(m.shape) < density) for m in mats]
        if bias:
            mats += [rng.uniform(-s, s, G * hidden), rng.uniform(-s, s, G * hidden)]
        out.append([m.astype(np.float32) for m in mats])
    return out


def main():
    import schedules
    rng = np.random.default_rng(1)
    L, T, B, I, H = 3, 6, 2, 12, 16
    x = rng.standard_normal((T, B, I)).astype(np.float32)
    for cell in ("lstm", "gru"):
        weights = random_weights(cell, L, I, H)
        ry, rh, _ = reference(cell, x, weights)
        for schedule in schedules.RNN_SCHEDULES:
            fn = schedules.lstm if cell == "lstm" else schedules.gru
            y = fn(x, weights, schedule=schedule)[0]
            print(f"{cell} {schedule}: max abs error vs NumPy: {float(np.abs(y - ry).max()):.2e}")


if __name__ == "__main__":
    main()

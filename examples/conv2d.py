"""Direct 2-D convolution, NCHW, 3x3 kernel, stride 1, zero padding 1."""
import numpy as np

import tiramisu_py as tp


def build():
    f = tp.Function("conv2d", params=["N", "Cin", "Cout", "H", "W"])
    n, co = f.var("n", 0, "N"), f.var("co", 0, "Cout")
    y, x = f.var("y", 0, "H"), f.var("x", 0, "W")
    ci, ky, kx = f.var("ci", 0, "Cin"), f.var("ky", 0, 3), f.var("kx", 0, 3)
    inp = f.input("inp", ("N", "Cin", "H", "W"), tp.float32)
    w = f.input("w", ("Cout", "Cin", 3, 3), tp.float32)
    bias = f.input("bias", ("Cout",), tp.float32)
    iy, ix = y + ky - 1, x + kx - 1
    inside = (iy >= 0) & (iy < f.param("H")) & (ix >= 0) & (ix < f.param("W"))
    out = f.computation("out", [n, co, y, x], bias[co])
    out[n, co, y, x] += w[co, ci, ky, kx] * tp.select(inside, inp[n, ci, iy, ix], 0.0)
    return f


def reference(inp, w, bias):
    n, cin, h, wd = inp.shape
    p = np.pad(inp, ((0, 0), (0, 0), (1, 1), (1, 1)))
    out = np.zeros((n, w.shape[0], h, wd), dtype=np.float64)
    for ky in range(3):
        for kx in range(3):
            patch = p[:, :, ky:ky + h, kx:kx + wd]
            out += np.einsum("nchw,oc->nohw", patch, w[:, :, ky, kx], optimize=True)
    return (out + bias[None, :, None, None]).astype(np.float32)


def random_inputs(n=2, cin=3, cout=4, h=9, w=7, seed=0):
    rng = np.random.default_rng(seed)
    return (rng.standard_normal((n, cin, h, w), dtype=np.float32),
            rng.standard_normal((cout, cin, 3, 3), dtype=np.float32),
            rng.standard_normal((cout,), dtype=np.float32))


def main():
    args = random_inputs()
    kernel = build().compile()
    out = kernel(*args)
    print("max abs error vs NumPy:", float(np.abs(out - reference(*args)).max()))


if __name__ == "__main__":
    main()

"""Convolution + bias, ReLU, then 2x2 max-pool: three computations, the pool a
max-reduction."""
import numpy as np

import tiramisu_py as tp

from . import conv2d


def build():
    f = tp.Function("conv_relu_maxpool", params=["N", "Cin", "Cout", "H", "W"])
    n, co = f.var("n", 0, "N"), f.var("co", 0, "Cout")
    y, x = f.var("y", 0, "H"), f.var("x", 0, "W")
    ci, ky, kx = f.var("ci", 0, "Cin"), f.var("ky", 0, 3), f.var("kx", 0, 3)
    py, px = f.var("py", 0, "H // 2"), f.var("px", 0, "W // 2")
    dy, dx = f.var("dy", 0, 2), f.var("dx", 0, 2)
    inp = f.input("inp", ("N", "Cin", "H", "W"), tp.float32)
    w = f.input("w", ("Cout", "Cin", 3, 3), tp.float32)
    bias = f.input("bias", ("Cout",), tp.float32)
    iy, ix = y + ky - 1, x + kx - 1
    inside = (iy >= 0) & (iy < f.param("H")) & (ix >= 0) & (ix < f.param("W"))
    conv = f.computation("conv", [n, co, y, x], bias[co])
    conv[n, co, y, x] += w[co, ci, ky, kx] * tp.select(inside, inp[n, ci, iy, ix], 0.0)
    relu = f.computation("relu", [n, co, y, x], tp.max(conv[n, co, y, x], 0.0))
    pool = f.computation("pool", [n, co, py, px], float("-inf"), dtype=tp.float32)
    pool[n, co, py, px].max(relu[n, co, 2 * py + dy, 2 * px + dx])
    return f


def reference(inp, w, bias):
    c = np.maximum(conv2d.reference(inp, w, bias), 0)
    n, co, h, wd = c.shape
    c = c[:, :, :h // 2 * 2, :wd // 2 * 2]
    return c.reshape(n, co, h // 2, 2, wd // 2, 2).max(axis=(3, 5))


def main():
    args = conv2d.random_inputs(h=10, w=9)
    kernel = build().compile()
    out = kernel(*args)
    print("max abs error vs NumPy:", float(np.abs(out - reference(*args)).max()))


if __name__ == "__main__":
    main()

"""Forward substitution L x = b with L lower-triangular: a triangular
(non-rectangular) domain ``j < i`` and a recurrence through the buffer x."""
import numpy as np

import tiramisu_py as tp


def build():
    f = tp.Function("trisolv", params=["N"])
    i = f.var("i", 0, "N")
    j = f.var("j", 0, i)                         # triangular: 0 <= j < i
    L = f.input("L", ("N", "N"), tp.float64)
    b = f.input("b", ("N",), tp.float64)
    x = f.buffer("x", ("N",), tp.float64, output=True)
    with f.nest(i):                               # for i: { x[i] = b[i]; x[i] -= ...; x[i] /= L[i,i] }
        s = f.computation("s", [i], b[i]).store_in(x, [i])
        s[i] -= L[i, j] * x[j]
        f.computation("xdiv", [i], x[i] / L[i, i]).store_in(x, [i])
    return f


def reference(L, b):
    n = len(b)
    x = np.zeros(n)
    for i in range(n):
        x[i] = (b[i] - L[i, :i] @ x[:i]) / L[i, i]
    return x


def random_inputs(n=40, seed=0):
    rng = np.random.default_rng(seed)
    L = np.tril(rng.standard_normal((n, n))) + n * np.eye(n)
    return L, rng.standard_normal(n)


def main():
    L, b = random_inputs()
    kernel = build().compile()
    out = kernel(L, b)
    print(kernel.source)
    print("max abs error vs NumPy:", float(np.abs(out - reference(L, b)).max()))


if __name__ == "__main__":
    main()

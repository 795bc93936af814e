"""Dense matrix multiply C = A @ B in float32."""
import numpy as np

import tiramisu_py as tp


def build():
    f = tp.Function("gemm", params=["N", "M", "K"])
    i, j, k = f.var("i", 0, "N"), f.var("j", 0, "M"), f.var("k", 0, "K")
    A = f.input("A", ("N", "K"), tp.float32)
    B = f.input("B", ("K", "M"), tp.float32)
    C = f.computation("C", [i, j], 0.0)
    C[i, j] += A[i, k] * B[k, j]
    return f


def reference(a, b):
    return a @ b


def main(n=256):
    rng = np.random.default_rng(0)
    a = rng.standard_normal((n, n), dtype=np.float32)
    b = rng.standard_normal((n, n), dtype=np.float32)
    kernel = build().compile()
    out = kernel(a, b)
    print(kernel.source)
    print("max abs error vs NumPy:", float(np.abs(out - reference(a, b)).max()))


if __name__ == "__main__":
    main()

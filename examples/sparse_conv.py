"""CSR sparse-weight convolution in the direct form of Park et al. (ICLR'17):
weights [Cout, Cin*3*3] in CSR; for each output channel the nonzero loop ``j``
runs from ``rowptr[co]`` to ``rowptr[co+1]`` (a data-dependent bound) and the
input is gathered through ``colidx[j]``, which holds the offset of (ci, ky, kx)
in the zero-padded, flattened input image."""
import numpy as np

import tiramisu_py as tp


def build():
    f = tp.Function("sparse_conv", params=["N", "Cout", "H", "W", "L", "NNZ"])
    n, co = f.var("n", 0, "N"), f.var("co", 0, "Cout")
    y, x = f.var("y", 0, "H"), f.var("x", 0, "W")
    inp = f.input("inp", ("N", "L"), tp.float32)           # padded: Cin*(H+2)*(W+2)
    rowptr = f.input("rowptr", ("Cout + 1",), tp.int32)
    colidx = f.input("colidx", ("NNZ",), tp.int32)
    val = f.input("val", ("NNZ",), tp.float32)
    bias = f.input("bias", ("Cout",), tp.float32)
    j = f.var("j", rowptr[co], rowptr[co + 1])            # data-dependent bound
    Wp = f.param("W") + 2
    out = f.computation("out", [n, co, y, x], bias[co])
    # loop order n, co, j, y, x: each weight is loaded once per image row sweep
    out[n, co, y, x].reduce("+", val[j] * inp[n, colidx[j] + y * Wp + x], loops=[n, co, j, y, x])
    return f


def to_csr(w):
    """Dense [Cout, Cin, 3, 3] weights -> (rowptr, colidx, val) with colidx the
    flat offset ci*(H+2)*(W+2) + ky*(W+2) + kx, for a given padded image size."""
    def pack(H, W):
        cout, cin, kh, kw = w.shape
        hp, wp = H + 2, W + 2
        rowptr, colidx, val = [0], [], []
        for o in range(cout):
            for c in range(cin):
                for ky in range(kh):
                    for kx in range(kw):
                        if w[o, c, ky, kx] != 0:
                            colidx.append(c * hp * wp + ky * wp + kx)
                            val.append(w[o, c, ky, kx])
            rowptr.append(len(colidx))
        return (np.array(rowptr, np.int32), np.array(colidx, np.int32),
                np.array(val, np.float32))
    return pack


def pad_flat(inp):
    n = inp.shape[0]
    return np.ascontiguousarray(np.pad(inp, ((0, 0), (0, 0), (1, 1), (1, 1))).reshape(n, -1))


def random_inputs(n=2, cin=4, cout=6, h=8, w=7, density=0.3, seed=0):
    rng = np.random.default_rng(seed)
    weights = rng.standard_normal((cout, cin, 3, 3)).astype(np.float32)
    weights *= rng.random(weights.shape) < density
    inp = rng.standard_normal((n, cin, h, w)).astype(np.float32)
    bias = rng.standard_normal(cout).astype(np.float32)
    return inp, weights, bias


def run(kernel, inp, weights, bias):
    h, w = inp.shape[2:]
    rowptr, colidx, val = to_csr(weights)(h, w)
    return kernel(inp=pad_flat(inp), rowptr=rowptr, colidx=colidx, val=val, bias=bias,
                  H=h, W=w)


def main():
    from .conv2d import reference
    kernel = build().compile()
    print(kernel.source)
    for density in (0.0, 0.1, 0.5, 1.0):
        inp, weights, bias = random_inputs(density=density)
        out = run(kernel, inp, weights, bias)
        err = float(np.abs(out - reference(inp, weights, bias)).max())
        print(f"density {density:.1f}: max abs error vs dense NumPy conv: {err:.2e}")


if __name__ == "__main__":
    main()

"""Compile-time phases of the examples: legality analysis (model, dependences,
schedule check) and isl AST generation + lowering, median of several runs.

    python -m bench.bench_compile
"""
import os
import statistics
import sys

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from examples import conv_relu_maxpool, gemm, jacobi2d, lstm, sparse_conv  # noqa: E402

CASES = {
    "lstm (program order)": lambda: lstm.build(),
    "lstm (wavefront)": lambda: lstm.wavefront(lstm.build()),
    "gemm (tiled, parallel, vector)": lambda: _gemm_tiled(),
    "conv+relu+maxpool": lambda: conv_relu_maxpool.build(),
    "sparse conv (CSR)": lambda: sparse_conv.build(),
    "jacobi-2d": lambda: jacobi2d.build(),
}


def _gemm_tiled():
    f = gemm.build()
    u = f.computations["C"].update
    u.tile("i", "j", 32, 32)
    u.parallelize("i0")
    u.vectorize("j1", 16)
    return f


def main(repeats=7):
    print(f"{'program':34} {'analysis ms':>12} {'AST ms':>8} {'sum ms':>8}")
    results = {}
    for name, build in CASES.items():
        an, ast = [], []
        for _ in range(repeats):
            k = build().compile()
            an.append(k.timings["analysis"])
            ast.append(k.timings["ast"])
        a, b = statistics.median(an), statistics.median(ast)
        results[name] = (a, b)
        print(f"{name:34} {a * 1e3:12.1f} {b * 1e3:8.1f} {(a + b) * 1e3:8.1f}")
    return results


if __name__ == "__main__":
    main()

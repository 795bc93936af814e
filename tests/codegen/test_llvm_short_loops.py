"""Short loops (fewer iterations than a vector, bounds clamped by constants)
in the LLVM backend, when guarded: neither vectorised nor unrolled when
innermost, not unrolled around loops; unguarded ones are left to LLVM
(``loops.trip_bound``, ``codegen.llvm.stmt``);
results checked against NumPy references on both backends."""
import numpy as np
import pytest

import tiramisu_py as tp
from codegen import ir, loops
from tests.tiramisu_py import test_legality_polybench as T
from tests.auto_kernels import SUITE


def test_trip_bound_reads_constant_clamps():
    v, n = ir.Var("v", "int64"), ir.Var("N", "int64")
    c = lambda k: ir.Const(k, "int64")
    lo = ir.Binary("max", ir.Binary("max", c(0), n, "int64"), v, "int64")
    hi = ir.Binary("add", ir.Binary("min", ir.Binary("min", c(2), n, "int64"), v, "int64"), c(1), "int64")
    assert loops.trip_bound(ir.For("j", lo, hi, ir.Block([]))) == 3
    assert loops.trip_bound(ir.For("j", n, hi, ir.Block([]))) is None
    assert loops.trip_bound(ir.For("j", lo, n, ir.Block([]))) is None


J1_HINT = "; loop j1: at most 3 iterations, fewer than a vector: neither vectorised nor unrolled"
I1_HINT = "; loop i1: at most 4 iterations, fewer than a vector: not unrolled (a loop nest)"


@pytest.mark.parametrize("target", ["c", "llvm"])
def test_time_tiled_jacobi2d_matches_reference(target, monkeypatch):
    """Run for this host; the hints follow its float64 lanes (AVX2: 4, so the
    4-trip i1 is not shorter than a vector); the code of a 512-bit host (8
    lanes, only generated here, not run) hints both short loops."""
    case = SUITE["jacobi-2d"]
    args = case.inputs(np.random.default_rng(3))
    f = case.build()
    T.j2d_time_tile(f)
    k = f.compile(target=target)
    out = case.run(k, args)
    for name, want in case.reference(args).items():
        np.testing.assert_allclose(out[name], want, rtol=1e-10, atol=1e-12)
    if target == "llvm":
        lanes = loops.host_lanes(64)
        assert (J1_HINT in k.source) == (3 < lanes)
        assert (I1_HINT in k.source) == (4 < lanes)
        monkeypatch.setenv("TIRAMISU_PY_HOST", "vector_bits=512,vector_registers=32")
        f = case.build()
        T.j2d_time_tile(f)
        src = f.compile(target=target).source
        assert J1_HINT in src and I1_HINT in src


def test_unguarded_short_loops_stay_llvms():
    """The library GEMM's 4-trip ``jv0`` around its micro-kernel has no ``if``:
    unrolled by LLVM (keeping it rolled cost 2.4x), so no hint on it."""
    import importlib
    G = importlib.import_module("schedules.blocks.blis")
    k = G.function(64, 64, 64).compile(target="llvm")
    assert "; loop jv0: at most" not in k.source
    rng = np.random.default_rng(0)
    a = rng.standard_normal((64, 64), dtype=np.float32)
    b = rng.standard_normal((64, 64), dtype=np.float32)
    np.testing.assert_allclose(k(A=a, B=b), a @ b, rtol=1e-4, atol=1e-4)

"""schedules.gemm / batched_gemm: correctness against NumPy (odd sizes, partial
tiles, both CPU backends), torch tensors in and out, host-derived tile sizes,
the exposed Function, and clear errors.  Nothing here is timed."""
import os

os.environ.setdefault("OMP_WAIT_POLICY", "passive")

import numpy as np
import pytest

import importlib

import schedules
from schedules.host import Host

G = importlib.import_module("schedules.blocks.blis")    # the module (schedules.gemm is the function)

RNG = np.random.default_rng(7)


def rand(*shape):
    return RNG.standard_normal(shape, dtype=np.float32)


@pytest.mark.parametrize("n,m,k", [(1, 1, 1), (37, 45, 53), (64, 64, 64), (100, 300, 7),
                                   (129, 65, 300)])
def test_gemm_matches_numpy(n, m, k):
    a, b = rand(n, k), rand(k, m)
    np.testing.assert_allclose(schedules.gemm(a, b), a @ b, rtol=1e-4, atol=1e-4)


def test_small_tiles_exercise_every_level():
    """Several jc, kc, ic tiles, partial register blocks: each micro-kernel
    and packing with both parallel loops and both CPU backends, and each
    parallel loop on each backend (every pair of choices, 8 builds)."""
    a, b = rand(50, 70), rand(70, 101)
    crossed = ((("ic", "llvm"), ("jc", "c")), (("jc", "llvm"), ("ic", "c")))
    for k, (micro, pack_a) in enumerate((("ir", False), ("jr", True), ("ir", True), ("jr", False))):
        for parallel, target in crossed[k // 2]:
            p = G.GemmParams(mr=4, nr=16, kc=24, mc=12, nc=48, vector=8, parallel=parallel,
                             micro=micro, pack_a=pack_a)
            out = schedules.gemm(a, b, params=p, target=target)
            np.testing.assert_allclose(out, a @ b, rtol=1e-4, atol=1e-4)


def test_batched_gemm_matches_numpy():
    a, b = rand(3, 21, 30), rand(3, 30, 40)
    np.testing.assert_allclose(schedules.batched_gemm(a, b), a @ b, rtol=1e-4, atol=1e-4)


def test_torch_in_torch_out():
    torch = pytest.importorskip("torch")
    a, b = torch.randn(33, 17), torch.randn(17, 40)
    out = schedules.gemm(a, b)
    assert isinstance(out, torch.Tensor)
    torch.testing.assert_close(out, a @ b, rtol=1e-4, atol=1e-4)
    # non-contiguous views are accepted
    out = schedules.gemm(b.t(), a.t())
    torch.testing.assert_close(out, b.t() @ a.t(), rtol=1e-4, atol=1e-4)


def test_params_follow_the_host():
    avx512 = Host(vector_bits=512, vector_registers=32, l1d=48 << 10, l2=1 << 20,
                  l3=32 << 20, cores=2)
    avx2 = Host(vector_bits=256, vector_registers=16, l1d=32 << 10, l2=256 << 10,
                l3=8 << 20, cores=4)
    p, q = G.default_params(1024, 1024, 1024, avx512), G.default_params(1024, 1024, 1024, avx2)
    assert (p.nr, p.vector, p.mr) == (64, 16, 6)        # 24 of 32 registers accumulate
    assert (q.nr, q.vector, q.mr) == (16, 8, 6)         # 12 of 16 (BLIS's 6 x 16)
    for x, h in ((p, avx512), (q, avx2)):
        assert (x.micro, x.pack_a) == ("ir", False)
        assert x.mr * x.kc * 4 <= h.l1d * 3 // 8 + x.mr * 8 * 4  # MR rows of A in L1
        assert x.kc * x.nc * 4 <= h.l2 // 4 + x.kc * x.nr * 4    # B's KC x NC panel in L2
        assert x.mc * x.nc * 4 <= h.l2 // 4 + x.mc * x.nr * 4    # a thread's C block in L2
        if x.parallel == "ic":
            assert -(-1024 // x.mc) >= 2 * h.cores               # blocks for every core
        else:
            assert -(-1024 // x.nc) % h.cores == 0               # whole panels per core
        assert x.mc % x.mr == 0 and x.nc % x.nr == 0
    assert (p.parallel, q.parallel) == ("jc", "jc")
    # small problems get small tiles, and few columns make ic the parallel loop
    s = G.default_params(10, 20, 30, avx512)
    assert s.mc <= 16 and s.nc <= 32 and s.kc == 30 and s.parallel == "ic"


def test_few_rows_of_a_transposed_b_take_eight_rows_by_two_vectors():
    """With B given transposed (a linear layer's weight) and few rows of A,
    the register block is 8 x 2 vectors on a host of 32 registers (float32);
    with B as it is, many rows, float64 or 16 registers it is as before."""
    avx512 = Host(vector_bits=512, vector_registers=32, l1d=48 << 10, l2=1 << 20,
                  l3=32 << 20, cores=2)
    avx2 = Host(vector_bits=256, vector_registers=16, l1d=32 << 10, l2=256 << 10,
                l3=8 << 20, cores=4)
    few = G.default_params(64, 8000, 256, avx512, b_transposed=True)
    assert (few.mr, few.nr, few.vector) == (8, 32, 16)
    assert few.mc % few.mr == 0 and few.nc % few.nr == 0 and few.mc >= 64
    for kw in ({}, {"itemsize": 8, "b_transposed": True}):
        assert G.default_params(64, 8000, 256, avx512, **kw).mr == 6
    assert G.default_params(G.FEW_ROWS + 1, 8000, 256, avx512, b_transposed=True).mr == 6
    assert G.default_params(64, 8000, 256, avx2, b_transposed=True) == \
        G.default_params(64, 8000, 256, avx2)
    assert few.kc == G.default_params(64, 8000, 256, avx512).kc
    for k in (1000, 385, 640):                  # (the depth's blocks as the default block's)
        assert G.default_params(40, 96, k, avx512, b_transposed=True).kc == \
            G.default_params(40, 96, k, avx512).kc
    # a linear layer's product at such a block: the bits of the 6 x 4-vector block, and of B
    # passed untransposed, here too where K spans several blocks of depth (KC < K)
    for n, m, k in ((72, 300, 200), (9, 17, 385), (64, 96, 512), (20, 48, 1000)):
        a, w = rand(n, k), rand(m, k)
        ours = G.kernel(n, m, k, G.default_params(n, m, k, b_transposed=True), "llvm",
                        b_transposed=True)(a, w)
        old = G.kernel(n, m, k, G.default_params(n, m, k), "llvm", b_transposed=True)(a, w)
        np.testing.assert_array_equal(ours, old)
        if n > 16:          # (BLIS either way; up to 16 rows B^T runs rows_t, numerics of its own)
            np.testing.assert_array_equal(schedules.gemm(a, w.T),
                                          schedules.gemm(a, np.ascontiguousarray(w.T)))
        np.testing.assert_allclose(ours, a @ w.T, rtol=1e-4, atol=1e-4)


def test_function_is_the_schedule_users_can_change():
    f = schedules.gemm_function(40, 48, 32, params=G.GemmParams(8, 16, 16, 16, 48, 16,
                                                                micro="jr", pack_a=True))
    cmds = "\n".join(f.schedule_commands())
    for expected in ("split(i, 16)", "reorder(jc, ic, kc, jr, ir, kk, iu, jv)",
                     "B_packed.compute_at(C_update, jc)", "A_packed.compute_at(C_update, kc)",
                     "parallelize(ic)", "unroll(iu, 8)"):
        assert expected in cmds, cmds
    kern = f.compile(target="c")
    src = kern.source
    assert "B_panel[jr][16 * kc + kk][jv]" in src and "A_block[ir][kk][iu]" in src
    # the block of A is private to each iteration (thread) of the parallel ic loop
    assert src.index("for (int64_t ic = ") < src.index("float A_block[2][16][8]")
    a, b = rand(40, 32), rand(32, 48)
    np.testing.assert_allclose(kern(a, b), a @ b, rtol=1e-4, atol=1e-4)


def test_default_schedule_reads_a_in_place():
    # the default micro-kernel keeps its MR rows of A in L1 and reads them
    # where they are; only B is packed
    f = schedules.gemm_function(40, 48, 32, params=G.GemmParams(8, 16, 16, 16, 48, 16))
    cmds = "\n".join(f.schedule_commands())
    assert "reorder(jc, ic, kc, ir, jr, kk, iu, jv)" in cmds and "A_packed" not in cmds, cmds
    src = f.compile(target="c").source
    assert "B_panel[jr][16 * kc + kk][jv]" in src and "A_block" not in src
    a, b = rand(40, 32), rand(32, 48)
    np.testing.assert_allclose(f.compile()(a, b), a @ b, rtol=1e-4, atol=1e-4)


@pytest.mark.parametrize("call,match", [
    (lambda: schedules.gemm(np.zeros((3, 4), np.float64), np.zeros((4, 5), np.float32)),
     r"b: expected float64, got float32"),      # float64 runs (issue 29); the dtypes must agree
    # float16 and bfloat16 run too (issue 31, float32 sums); an integer matrix does not
    (lambda: schedules.gemm(np.zeros((3, 4), np.int16), np.zeros((4, 5), np.int16)),
     r"a: expected float32 or float64 or bfloat16 or float16, got int16"),
    (lambda: schedules.gemm(np.zeros((3, 4), np.float32), np.zeros((5, 5), np.float32)),
     r"inner dimensions differ"),
    (lambda: schedules.gemm(np.zeros((3,), np.float32), np.zeros((3, 5), np.float32)),
     r"a: expected 2 dimensions"),
    (lambda: schedules.gemm([[1.0]], np.zeros((1, 1), np.float32)), r"a: expected a NumPy"),
    (lambda: schedules.batched_gemm(np.zeros((2, 3, 4), np.float32),
                                    np.zeros((3, 4, 5), np.float32)),
     r"batched_gemm: a holds 2 matrices but b holds 3"),
])
def test_bad_arguments_are_named(call, match):
    with pytest.raises((TypeError, ValueError), match=match):
        call()

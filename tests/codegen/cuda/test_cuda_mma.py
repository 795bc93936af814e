"""Tensor cores without a GPU: ``tensor_core(k, i, j)`` on a lane-mapped
update (``mma.sync.m16n8k16`` with ``ldmatrix`` fragments), checked on the
access functions and refused by name where the layout, the types, the
reassociation or the operands' memory do not hold; the library's bf16/fp16
GEMM emulated in the three thread orders (the emulator exchanges the lanes'
registers as the instructions do) against float32 NumPy of the same
inputs, a removed barrier caught.  SASS in tests/codegen/cuda/test_cuda_sass.py."""
import functools

import numpy as np
import pytest

import tiramisu_py as tp
from codegen.cuda.printer import CudaPrintError
from schedules.solvers import gemm_cuda_mma as mma
from tests.codegen.cuda.test_cuda import ORDERS, emulate_source, emulation_cubins, needs_cxx

torch = pytest.importorskip("torch")        # bfloat16 arrays
RNG = np.random.default_rng(16)


def half_args(n, m, k, dtype="bfloat16"):
    t = getattr(torch, dtype)
    a = torch.from_numpy(RNG.standard_normal((n, k), dtype=np.float32)).to(t)
    b = torch.from_numpy(RNG.standard_normal((k, m), dtype=np.float32)).to(t)
    return a, b, (a.float() @ b.float()).numpy()


@functools.lru_cache(maxsize=None)
def compiled(n, m, k, dtype="bfloat16", **values):
    with emulation_cubins():
        return mma.function(n, m, k, dtype, **values).compile(target="cuda")


@needs_cxx
@pytest.mark.parametrize("shape,dtype,values", [((64, 64, 64), "bfloat16", ()),
                                                ((128, 64, 96), "float16", (("stages", 2),)),
                                                ((64, 128, 32), "bfloat16",
                                                 (("swizzle", False),))])
def test_tensor_core_gemm_emulated(shape, dtype, values):
    k = compiled(*shape, dtype, **dict(values))
    a, b, want = half_args(*shape, dtype)
    for order in ORDERS:
        got = k.emulate(a, b, order=order, seed=3)
        np.testing.assert_allclose(np.asarray(got), want, rtol=1e-4, atol=1e-3)


def test_printed_fragments_and_instructions():
    src = compiled(64, 64, 128).source
    assert "tpy_ldmatrix<4, false>(tpy_a[i_m]" in src          # A: k contiguous
    assert "tpy_ldmatrix<2, true>(tpy_b[j_m]" in src           # B: columns contiguous
    assert "tpy_mma_16816<0>(tpy_c, tpy_a[i_m], tpy_b[j_m]);" in src
    assert "mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32" in src
    assert src.count("__syncthreads();") == 2                  # per k step, after the loop


@needs_cxx
def test_removed_barrier_caught():
    k = compiled(64, 64, 128)          # 4 k steps: one loop, a barrier (and wait) per step
    a, b, want = half_args(64, 64, 128)
    assert k.source.count("__syncthreads();") == 2
    src = k.source.replace("__syncthreads();", "", 1)
    errs = [np.abs(np.asarray(emulate_source(k, src, a, b, order=o, seed=1)) - want).max()
            for o in ORDERS]
    assert max(errs) > 1e-2


def lane_gemm(ly=8, lx=4, dtype="bfloat16", shared=True, reassociate=True, loops=None):
    """The schedule of gemm_cuda_mma with one thing changed."""
    f = mma.algorithm(64, 64, 32, dtype)
    u = f.computations["C"].update
    f.computations["C"].gpu_tile("i", "j", 16, 16)
    u.tile("i", "j", 64, 64)
    u.split("i1", 32, names=("i_w", "i_in")).split("i_in", 16, names=("i_m", "i_16"))
    u.split("i_16", 16 // (32 // ly // 4 * 2) if ly != 8 else 8, names=("i_h", "ly"))
    u.split("j1", 32, names=("j_w", "j_in")).split("j_in", 8, names=("j_m", "j_8"))
    u.split("j_8", 8 // lx, names=("lx", "j_p"))
    u.split("k", 32).split("k1", 16, names=("k_m", "k16"))
    u.reorder("i0", "j0", "k0", "i_w", "j_w", "ly", "lx", "k_m", "i_m", "j_m", "k16", "i_h", "j_p")
    u.bind("i0", "block.y").bind("j0", "block.x")
    u.bind("i_w", "warp.y").bind("j_w", "warp.x").bind("ly", "lane.y").bind("lx", "lane.x")
    if shared:
        u.cache_shared(f.buffers["A"], "k0", vector=8 if dtype != "float32" else 4)
        u.cache_shared(f.buffers["B"], "k0", vector=8 if dtype != "float32" else 4)
    u.tensor_core(*(loops or ("k16", "i_h", "j_p")))
    u.accumulate_locally("k0", allow_reassociation=reassociate)
    return f


def test_the_plain_lane_schedule_is_accepted():
    with emulation_cubins():
        k = lane_gemm().compile(target="cuda")
    a, b, want = half_args(64, 64, 32)
    np.testing.assert_allclose(np.asarray(k.emulate(a, b)), want, rtol=1e-4, atol=1e-3)


@pytest.mark.parametrize("change,match", [
    (dict(reassociate=False), r"the tensor cores sum in their own order: C_update must allow"),
    (dict(shared=False), r"A is read from global memory; ldmatrix reads shared tiles"),
    (dict(loops=("k16", "j_p", "i_h")), r"one step of 'j_p' moves C_update's element by "
                                        r"\(0, 1\), the mma's layout needs \(8, 0\)"),
    (dict(ly=4, lx=8), r"C_update.s lanes must be lane.y \(8 rows\) x lane.x \(4 column pairs\)"),
])
def test_tensor_core_refused_by_name(change, match):
    f = lane_gemm(**change)
    with pytest.raises(tp.IllegalScheduleError,
                       match=r"C_update.tensor_core\(k16, .*\) is illegal: " + match):
        f.compile(target="cuda")


def test_float32_operands_refused():
    f = mma.algorithm(64, 64, 32)
    f.buffers["A"].dtype = f.buffers["B"].dtype = tp.float32
    from tiramisu_py.analysis.gpu_mma import _operands
    with pytest.raises(tp.IllegalScheduleError, match="multiply bfloat16 or float16 here"):
        _operands(f.computations["C"].update, "t", "C_update")


def test_partial_tiles_refused():
    with pytest.raises(ValueError, match="n = 72 is not a multiple of bm = 64"):
        mma.function(72, 64, 32)
    f = mma.schedule(mma.algorithm(72, 64, 32), mma.params(72, 64, 32))
    with pytest.raises((CudaPrintError, tp.IllegalScheduleError), match="tensor_core"):
        f.compile(target="cuda")


@needs_cxx
def test_library_gemm_of_bfloat16_on_the_tensor_cores(monkeypatch):
    """``schedules.gemm`` of bfloat16 (or float16) tensors with target="cuda":
    the tensor-core solver, every launch emulated; the result rounded once
    to bfloat16, as torch's."""
    import schedules
    from tiramisu_py.runtime.cuda_kernel import CudaKernel
    monkeypatch.setattr(CudaKernel, "__call__",
                        lambda self, *a, **kw: self.emulate(*a, order="shuffle", **kw))
    a, b, _ = half_args(64, 64, 128)
    out = schedules.gemm(a, b, target="cuda")
    assert out.dtype == torch.bfloat16 and tuple(out.shape) == (64, 64)
    torch.testing.assert_close(out, a @ b, rtol=1e-2, atol=1e-2)
    assert float((out.float() - (a.float() @ b.float()).to(torch.bfloat16).float())
                 .abs().max()) < 0.07                  # one rounding of the float32 sums
    with pytest.raises(ValueError, match=r"cuda_mma \(cuda\): needs whole tiles \(n = 70 is "
                                         r"not a multiple of bm = 64"):
        schedules.gemm(a[:70].repeat(2, 1)[:70], b, target="cuda")

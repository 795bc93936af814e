"""The machine code of the GPU kernels, checked without a GPU: ptxas's
resources (registers, no spill, no stack) and the SASS counted
(``cuobjdump -sass``: 128-bit global and shared accesses, ``LDGSTS`` =
``cp.async``, barriers, FFMAs per shared load in the main loop, no local
memory).  Skipped, with the reason, where nvcc or cuobjdump is missing
(``pip install nvidia-cuda-cuobjdump`` gives the latter)."""
import functools
import os
import shutil

import pytest

from codegen.cuda import sass
from schedules.blocks import gemm_cuda_warp as warp
from schedules.solvers import gemm_cuda

pytestmark = [
    pytest.mark.skipif(shutil.which("nvcc") is None, reason="nvcc is not installed"),
    pytest.mark.skipif(sass.find_cuobjdump() is None,
                       reason="cuobjdump is not installed (pip install nvidia-cuda-cuobjdump)"),
]
ARCHS = ("sm_80", "sm_90")


@functools.lru_cache(maxsize=None)
def built(build):
    old = os.environ.get("TIRAMISU_PY_CUDA_COMPILER")
    os.environ["TIRAMISU_PY_CUDA_COMPILER"] = "nvcc"
    try:
        return build().compile(target="cuda")
    finally:
        if old is None:
            os.environ.pop("TIRAMISU_PY_CUDA_COMPILER")
        else:
            os.environ["TIRAMISU_PY_CUDA_COMPILER"] = old


def warp_1024():
    return warp.function(1024, 1024, 1024)


def classic_1024():
    return gemm_cuda.function(1024, 1024, 1024)


@pytest.mark.parametrize("arch", ARCHS)
def test_warp_gemm_resources(arch):
    r = built(warp_1024).resources[arch]["gemm_k1"]
    assert r.spill_stores == r.spill_loads == r.stack_bytes == 0
    assert 96 <= r.registers <= 168                   # 64 sums + fragments, 2 blocks an SM
    stages, bk, bm, bn, pad = 3 if arch == "sm_80" else 4, 8, 128, 128, 4
    # the one build serves both archs: the generic defaults (3 stages)
    assert r.shared_bytes == 3 * bk * ((bm + pad) + bn) * 4 and stages >= 3


@pytest.mark.parametrize("arch", ARCHS)
def test_warp_gemm_sass(arch):
    cubin = built(warp_1024).cubins[arch]
    whole = sass.counts(cubin)["gemm_k1"]
    loop = sass.loop_counts(cubin, "gemm_k1")
    # the main loop: 8 k steps of an 8 x 8 tile per thread, fragments as
    # 128-bit shared loads (2 of A, 2 of B per k step), one barrier, cp.async
    assert sass.total(loop, "FFMA") == 512
    assert loop["LDS.128"] == 32 and sass.total(loop, "LDS") == 32
    assert sass.total(loop, "FFMA") / sass.total(loop, "LDS") == 16
    assert sass.total(loop, "BAR.SYNC") == 1
    assert loop["LDGSTS.E.BYPASS.128"] == 1 and loop["LDGSTS.E"] == 4     # B 16 B, A 4 x 4 B
    assert loop["DEPBAR.LE"] == 1                                          # the wait
    assert sass.total(loop, "FFMA") / sum(loop.values()) > 0.75
    # no local memory; C stored with 128-bit stores
    assert not sass.total(whole, "LDL") and not sass.total(whole, "STL")
    assert whole["STG.E.128"] == 16 and not whole["STG.E"]


@pytest.mark.parametrize("arch", ARCHS)
def test_classic_gemm_sass_for_comparison(arch):
    """The plain shared-tile GEMM (issue 53's starting point): mostly scalar
    shared loads (nvcc merges some of A's), two barriers per k step, no
    cp.async, 3-4 FFMA per shared load (measured 256 / 80)."""
    cubin = built(classic_1024).cubins[arch]
    loop = sass.loop_counts(cubin, "gemm_k1")
    assert sass.total(loop, "BAR.SYNC") == 2 and not sass.total(loop, "LDGSTS")
    assert loop["LDS"] > loop["LDS.128"]
    assert sass.total(loop, "FFMA") / sass.total(loop, "LDS") < 5


def mma_1024():
    from schedules.solvers import gemm_cuda_mma
    return gemm_cuda_mma.function(1024, 1024, 1024)


@pytest.mark.parametrize("arch", ARCHS)
def test_tensor_core_gemm_sass(arch):
    k = built(mma_1024)
    r = k.resources[arch]["gemm_mma_k1"]
    assert r.spill_stores == r.spill_loads == r.stack_bytes == 0
    assert r.shared_bytes == 3 * (128 * 32 + 32 * 128) * 2          # 3 stages, bf16
    loop = sass.loop_counts(k.cubins[arch], "gemm_mma_k1")
    # per k step of 32: 2 x 4 x 4 mma.sync, each fragment loaded once by ldmatrix
    assert loop["HMMA.16816.F32.BF16"] == 32
    assert loop["LDSM.16.M88.4"] == 8 and loop["LDSM.16.MT88.2"] == 8
    assert loop["LDGSTS.E.BYPASS.128"] == 4 and sass.total(loop, "BAR.SYNC") == 1
    assert not sass.total(loop, "LDS") and not sass.total(loop, "FFMA")
    whole = sass.counts(k.cubins[arch])["gemm_mma_k1"]
    assert not sass.total(whole, "LDL") and not sass.total(whole, "STL")

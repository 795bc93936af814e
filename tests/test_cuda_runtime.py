"""The CUDA runtime pieces, tested without a GPU: cubins by NVRTC (same
ptxas report as nvcc), the compiler choice, DLPack capsules parsed with
ctypes, device arguments marshalled up to the driver call (the launch is
recorded instead of run), and bench/bench_cuda.py's case table."""
import os
import shutil
import subprocess
import sys

import numpy as np
import pytest

from codegen.toolchain import CompileError
from tests.test_cuda import reverse_in_block    # one barrier between two statements

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def _nvrtc_reason():
    from codegen.cuda import nvrtc
    return nvrtc.unavailable()


needs_nvrtc = pytest.mark.skipif(_nvrtc_reason() is not None,
                                 reason=f"NVRTC cannot be used: {_nvrtc_reason()}")
needs_nvcc = pytest.mark.skipif(shutil.which("nvcc") is None, reason="nvcc is not installed")


def printed(build):
    """``build()`` compiled for CUDA without cubins (printed only)."""
    from tiramisu_py import cuda_kernel as ck
    saved, ck.CUDA_ARCHS = ck.CUDA_ARCHS, ()
    try:
        return build().compile(target="cuda")
    finally:
        ck.CUDA_ARCHS = saved


def gemm_shared():
    import schedules
    return schedules.gemm_cuda_function(64, 48, 32)


def lstm_wavefront():
    from examples import lstm
    return lstm.wavefront_gpu(lstm.build({"NL": 3, "T": 5, "B": 2, "H": 8}))


# a kernel that must spill: 64 live accumulators per thread under 32 registers
SPILLING = """#include <stdint.h>
extern "C" __global__ void __launch_bounds__(1024, 2)
spill_k0(const float* __restrict__ A, float* __restrict__ B)
{
  float acc[64];
  for (int q = 0; q < 64; q++) acc[q] = 0.0f;
  for (int64_t k = 0; k < 256; k++) {
    float a = A[k * 1024 + threadIdx.x];
#pragma unroll
    for (int q = 0; q < 64; q++) acc[q] += a * A[q * 7 + k];
  }
  for (int q = 0; q < 64; q++) B[q * 1024 + threadIdx.x] = acc[q];
}
"""


# ------------------------------------------------------------ NVRTC
@needs_nvrtc
@pytest.mark.parametrize("build", [gemm_shared, lstm_wavefront, reverse_in_block])
def test_nvrtc_cubins_with_ptxas_resources(build):
    from codegen.cuda import build_cubin
    source = printed(build).source
    for arch in ("sm_80", "sm_90"):
        cubin, res = build_cubin(source, arch, "nvrtc")
        assert cubin[:4] == b"\x7fELF"
        assert res and all(0 < r.registers <= 255 and r.spill_stores == r.spill_loads == 0
                           for r in res.values())
        if shutil.which("nvcc"):
            # NVRTC and nvcc run the same ptxas on the same PTX: identical reports
            _, want = build_cubin(source, arch, "nvcc")
            assert res == want


@needs_nvrtc
def test_nvrtc_gemm_registers_and_shared_memory():
    from codegen.cuda import build_cubin
    source = printed(gemm_shared).source
    k1 = {arch: build_cubin(source, arch, "nvrtc")[1]["gemm_k1"] for arch in ("sm_80", "sm_90")}
    assert k1["sm_80"].shared_bytes == k1["sm_90"].shared_bytes == 2 * 16 * 16 * 4
    assert k1["sm_80"].barriers == 1 and k1["sm_80"].registers <= 40


@pytest.mark.parametrize("compiler", ["nvrtc", "nvcc"])
def test_spill_is_a_compile_error(compiler):
    from codegen.cuda import build_cubin
    if compiler == "nvrtc" and _nvrtc_reason():
        pytest.skip(f"NVRTC cannot be used: {_nvrtc_reason()}")
    if compiler == "nvcc" and not shutil.which("nvcc"):
        pytest.skip("nvcc is not installed")
    with pytest.raises(CompileError, match="[Ss]pill") as info:
        build_cubin(SPILLING, "sm_90", compiler)
    assert info.value.c_path.read_text() == SPILLING      # kept, and named in the message
    assert str(info.value.c_path) in str(info.value)


@needs_nvrtc
def test_nvrtc_compile_error_names_the_kept_source():
    from codegen.cuda import build_cubin
    bad = 'extern "C" __global__ void bad_k0(float* A) { A[0] = undefined_name; }\n'
    with pytest.raises(CompileError, match="undefined_name") as info:
        build_cubin(bad, "sm_80", "nvrtc")
    assert "NVRTC failed" in str(info.value) and info.value.c_path.exists()


def test_spill_in_report_refused_even_if_build_succeeds(monkeypatch):
    """A report with spills is refused, whatever the compiler's exit status."""
    from codegen.cuda import toolchain
    log = ("ptxas info    : Compiling entry function 'f_k0' for 'sm_90'\n"
           "ptxas         .     8 bytes stack frame, 4 bytes spill stores, 4 bytes spill loads\n"
           "ptxas info    : Used 32 registers, used 0 barriers\n")
    with pytest.raises(CompileError, match=r"spilled registers for sm_90 in f_k0 \(4 bytes"):
        toolchain._cached_cubin("/* unique: spill report */", "sm_90", "fake", ("-x",),
                                lambda d: (b"\x7fELF", log))


def _hide_cuda_python(monkeypatch):
    for m in ("cuda", "cuda.bindings", "cuda.bindings.nvrtc", "cuda.bindings.driver"):
        monkeypatch.setitem(sys.modules, m, None)


def test_compiler_choice(monkeypatch):
    from codegen.cuda import toolchain
    monkeypatch.setenv("TIRAMISU_PY_CUDA_COMPILER", "none")
    assert toolchain.cuda_compiler() is None
    monkeypatch.setenv("TIRAMISU_PY_CUDA_COMPILER", "clang")
    with pytest.raises(ValueError, match="TIRAMISU_PY_CUDA_COMPILER.*not 'clang'"):
        toolchain.cuda_compiler()
    monkeypatch.delenv("TIRAMISU_PY_CUDA_COMPILER")
    monkeypatch.setattr(toolchain, "find_nvcc", lambda: "/usr/bin/nvcc")
    assert toolchain.cuda_compiler() == "nvcc"                  # auto: nvcc first
    monkeypatch.setattr(toolchain, "find_nvcc", lambda: None)
    with pytest.raises(CompileError, match="nvcc was asked for"):
        toolchain.cuda_compiler("nvcc")
    if _nvrtc_reason() is None:
        assert toolchain.cuda_compiler() == "nvrtc"             # auto without nvcc
    _hide_cuda_python(monkeypatch)                              # cuda-python absent
    assert toolchain.cuda_compiler() is None
    with pytest.raises(CompileError, match="NVRTC was asked for .*cuda-python is not installed"):
        toolchain.cuda_compiler("nvrtc")
    with pytest.raises(CompileError, match="neither nvcc .* nor NVRTC"):
        toolchain.build_cubin("", "sm_80")


@needs_nvrtc
def test_compile_uses_nvrtc_without_nvcc(monkeypatch):
    from codegen.cuda import toolchain
    monkeypatch.setattr(toolchain, "find_nvcc", lambda: None)
    k = reverse_in_block().compile(target="cuda")
    assert k.cubin_compiler == "nvrtc" and set(k.cubins) == {"sm_80", "sm_90"}
    assert k.resources["sm_90"]["rev_k0"].barriers == 1


def test_compile_without_any_cuda_compiler(monkeypatch):
    from codegen.cuda import toolchain
    monkeypatch.setattr(toolchain, "find_nvcc", lambda: None)
    _hide_cuda_python(monkeypatch)
    k = reverse_in_block().compile(target="cuda")
    assert k.cubins == {} and k.resources == {} and k.cubin_compiler is None
    assert "__syncthreads();" in k.source


def test_core_works_without_cuda_python():
    """cuda-python absent (imports fail): the core imports, compiles for
    CUDA, runs on the CPU, and a launch is the one clear error."""
    code = """
import sys
for m in ("cuda", "cuda.bindings", "cuda.bindings.driver", "cuda.bindings.nvrtc"):
    sys.modules[m] = None
import numpy as np, tiramisu_py, schedules, codegen.cuda
from codegen.cuda import toolchain
from codegen.cuda.runtime import NoCudaDriverError
toolchain.find_nvcc = lambda: None
import schedules
f = schedules.gemm_cuda_function(32, 32, 32)
a = np.ones((32, 32), np.float32)
assert (f.compile()(a, a) == 32).all()
k = f.compile(target="cuda")
assert k.cubins == {} and k.cubin_compiler is None
try:
    k(a, a)
except NoCudaDriverError as e:
    print("ERR", e)
"""
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=ROOT)
    assert r.returncode == 0, r.stderr
    assert "ERR no CUDA driver on this machine" in r.stdout and "cuda-python" in r.stdout

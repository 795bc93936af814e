"""The CUDA runtime pieces, tested without a GPU: cubins by NVRTC (same
ptxas report as nvcc), the compiler choice, DLPack capsules parsed with
ctypes, device arguments marshalled up to the driver call (the launch is
recorded instead of run), and bench/bench_cuda.py's case table."""
from repo_paths import ROOT
import ctypes
import os
import re
import shutil
import subprocess
import sys

import numpy as np
import pytest

from codegen.toolchain import CompileError
from tiramisu_py.runtime import device_arrays as da
from tests.codegen.cuda.test_cuda import reverse_in_block    # one barrier between two statements



def _nvrtc_reason():
    from codegen.cuda import nvrtc
    return nvrtc.unavailable()


needs_nvrtc = pytest.mark.skipif(_nvrtc_reason() is not None,
                                 reason=f"NVRTC cannot be used: {_nvrtc_reason()}")
needs_nvcc = pytest.mark.skipif(shutil.which("nvcc") is None, reason="nvcc is not installed")


def printed(build):
    """``build()`` compiled for CUDA without cubins (printed only)."""
    from tiramisu_py.driver import cuda as ck
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
def test_an_empty_nvrtc_log_leaves_shared_bytes_alone():
    """NVRTC writes its log's terminator into the buffer it is given.  An empty
    log has size 1, and ``b" " * 1`` is CPython's shared one-byte object: the
    log was once read into it, every later ``b" "`` of the process became
    ``b"\\0"``, and the LLVM modules compiled after it lost their spaces (seen
    on a GPU host whose NVRTC writes no ptxas report)."""
    from cuda.bindings import nvrtc
    from codegen.cuda.nvrtc import _output, _result
    prog = _result(nvrtc.nvrtcCreateProgram(
        b'extern "C" __global__ void k(float* x) { x[threadIdx.x] += 1.0f; }',
        b"k.cu", 0, [], []), "nvrtcCreateProgram")
    try:
        assert int(nvrtc.nvrtcCompileProgram(prog, 1, [b"--gpu-architecture=sm_80"])[0]) == 0
        log = _output(nvrtc.nvrtcGetProgramLogSize, nvrtc.nvrtcGetProgramLog, prog,
                      "ProgramLog")
        cubin = _output(nvrtc.nvrtcGetCUBINSize, nvrtc.nvrtcGetCUBIN, prog, "CUBIN")
    finally:
        nvrtc.nvrtcDestroyProgram(prog)
    assert log == b"\0"                       # the empty log: its terminator alone
    assert cubin[:4] == b"\x7fELF"
    space = bytes([32])                        # CPython's shared one-byte object
    assert space[0] == 32 and space.decode() == " "


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


# kernels whose reports have every field non-zero on some architecture: a
# stack frame (a local array indexed at run time), named barriers, shared memory
RESOURCE_KERNELS = """extern "C" __global__ void frame_k(float* x, const int* idx, int n) {
  float a[64];
  for (int i = 0; i < 64; i++) a[i] = 0.0f;
  for (int i = 0; i < n; i++) a[idx[i] & 63] += x[i];
  x[threadIdx.x] = a[idx[threadIdx.x] & 63];
}
extern "C" __global__ void barriers_k(float* x) {
  __shared__ float s[320];
  s[threadIdx.x] = x[threadIdx.x];
  asm volatile("bar.sync 3, 64;");
  x[threadIdx.x] += s[63 - threadIdx.x];
}
extern "C" __global__ void plain_k(float* x) { x[threadIdx.x] += 1.0f; }
"""


@needs_nvrtc
@pytest.mark.parametrize("build", [None, gemm_shared, lstm_wavefront, reverse_in_block])
def test_cubin_records_match_the_ptxas_report(build):
    """The resources read from a cubin's ELF records equal ptxas's report
    (what build_cubin falls back on when a compiler's log lacks it).  The
    report comes from nvcc where it is installed: NVRTC 13.0 left it out of
    some logs on an H100 host (NVRTC 13.5 here writes it every time)."""
    from codegen.cuda import cubin, nvrtc, parse_ptxas, toolchain
    source = RESOURCE_KERNELS if build is None else printed(build).source
    nvcc = toolchain.find_nvcc()
    for arch in ("sm_80", "sm_90"):
        if nvcc:
            data, log = toolchain._nvcc_cubin(nvcc, (*toolchain.NVCC_FLAGS, f"-arch={arch}"),
                                              source, toolchain.cache.build_directory(
                                                  toolchain.cache.cache_dir()))
        else:
            data, log = nvrtc.compile_cubin(source, arch)
        report = parse_ptxas(log)
        assert report and cubin.resources(data) == report
        if build is None:
            r = report
            assert r["frame_k"].stack_bytes > 0 and r["barriers_k"].barriers == 4
            assert r["barriers_k"].shared_bytes == 320 * 4 and r["plain_k"].barriers == 0


@needs_nvrtc
def test_a_log_without_the_report_takes_the_cubins_records(monkeypatch):
    from codegen.cuda import build_cubin, cubin, nvrtc
    real = nvrtc.compile_cubin
    monkeypatch.setattr(nvrtc, "compile_cubin", lambda *a: (real(*a)[0], ""))
    data, res = build_cubin(RESOURCE_KERNELS + "// empty log\n", "sm_90", "nvrtc")
    assert set(res) == {"frame_k", "barriers_k", "plain_k"}
    assert res == cubin.resources(data) and res["barriers_k"].barriers == 4


def test_not_a_cubin_is_refused():
    from codegen.cuda import cubin
    with pytest.raises(cubin.CubinFormatError, match="ELF64"):
        cubin.resources(b"\x7fELF\x01\x01" + bytes(58))


@needs_nvrtc
def test_nvrtc_gemm_registers_and_shared_memory():
    from codegen.cuda import build_cubin
    from schedules.solvers.gemm_cuda import TILE, TK, function
    source = printed(lambda: function(64, 48, 32)).source       # the classic shared tiles
    k1 = {arch: build_cubin(source, arch, "nvrtc")[1]["gemm_k1"] for arch in ("sm_80", "sm_90")}
    # the shared tiles are the footprints of one k-step: A min(TILE, n) x TK, B TK x min(TILE, m)
    n, m = 64, 48
    assert k1["sm_80"].shared_bytes == k1["sm_90"].shared_bytes == \
        (min(TILE, n) * TK + TK * min(TILE, m)) * 4
    # one barrier symbol; the register-blocked micro-tile fits without spills
    assert k1["sm_80"].barriers == 1 and 16 < k1["sm_80"].registers <= 128
    assert all(r.spill_stores == r.spill_loads == r.stack_bytes == 0 for r in k1.values())


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


# ------------------------------------------------------------ DLPack capsules
def _managed(capsule):
    """The DLTensor inside a capsule (for the checks and the fakes below)."""
    name = da._get_name(capsule)
    ptr = da._get_pointer(capsule, name)
    if name == b"dltensor_versioned":
        return da.DLManagedTensorVersioned.from_address(ptr).dl_tensor
    return da.DLManagedTensor.from_address(ptr).dl_tensor


@pytest.mark.parametrize("versioned", [False, True])
def test_parse_numpy_capsule(versioned):
    base = np.arange(2 * 5 * 6, dtype=np.float32).reshape(2, 5, 6)
    a = base[:, 1:4, ::2]                       # strided view, nonzero offset
    cap = a.__dlpack__(max_version=(1, 0)) if versioned else a.__dlpack__()
    v = da.parse_capsule(cap, "x")
    assert v.address == a.__array_interface__["data"][0]
    assert v.shape == a.shape and v.dtype == "float32" and v.itemsize == 4
    assert v.strides == tuple(s // 4 for s in a.strides)
    assert v.device == (da.kDLCPU, 0)
    assert v.version[0] == (1 if versioned else 0) and not v.read_only
    ro = np.arange(4, dtype=np.int16)
    ro.flags.writeable = False
    v = da.parse_capsule(ro.__dlpack__(max_version=(1, 0)))
    assert v.read_only and v.dtype == "int16" and v.strides in (None, (1,))


def test_parse_torch_capsules():
    torch = pytest.importorskip("torch")
    t = torch.arange(12, dtype=torch.float32).reshape(3, 4).t()     # transposed view
    v = da.parse_capsule(t.__dlpack__(), "t")
    assert (v.address, v.shape, v.strides) == (t.data_ptr(), (4, 3), t.stride())
    s = torch.zeros(10, dtype=torch.int64)[3:]
    v = da.parse_capsule(s.__dlpack__(), "s")
    assert v.address == s.data_ptr() and v.dtype == "int64" and v.shape == (7,)
    for dt, name in ((torch.bool, "bool"), (torch.bfloat16, "bfloat16"),
                     (torch.uint8, "uint8"), (torch.float64, "float64")):
        assert da.parse_capsule(torch.ones(2, dtype=dt).__dlpack__()).dtype == name


def test_parse_capsule_errors():
    with pytest.raises(TypeError, match="'x': __dlpack__\\(\\) returned int"):
        da.parse_capsule(3, "x")
    a = np.ones(3, np.float32)
    cap = a.__dlpack__()

    class Once:
        def __dlpack__(self, stream=None):
            return cap

        def __dlpack_device__(self):
            return (1, 0)
    np.from_dlpack(Once())                      # consumes it: renamed used_dltensor
    with pytest.raises(ValueError, match="'y'.*'used_dltensor' was consumed"):
        da.parse_capsule(cap, "y")
    c = np.ones(2, np.complex64).__dlpack__()
    _managed(c).dtype.lanes = 4
    with pytest.raises(TypeError, match="'z': DLPack dtype .* 4 lanes"):
        da.parse_capsule(c, "z")
    _managed(c).dtype.lanes = 1


class FakeGPUArray:
    """A DLPack producer that says it lives on a CUDA device: a NumPy
    array's capsule with its device field rewritten.  Only the launch is
    faked below, so the host pointer is never dereferenced as device memory.
    Records the ``stream`` each ``__dlpack__`` call is given."""

    def __init__(self, array, device=(da.kDLCUDA, 0), versioned=True):
        self.array, self.device, self.versioned = array, device, versioned
        self.streams = []

    def __dlpack_device__(self):
        return self.device

    def __dlpack__(self, stream=None, max_version=None, dl_device=None, copy=None):
        if max_version is not None and not self.versioned:
            raise TypeError("__dlpack__() got an unexpected keyword argument 'max_version'")
        self.streams.append(stream)
        cap = self.array.__dlpack__(max_version=max_version)
        t = _managed(cap)
        t.device.device_type, t.device.device_id = self.device
        return cap

    @property
    def address(self):
        return self.array.__array_interface__["data"][0]


class FakeCAIArray:
    """``__cuda_array_interface__`` (version 3) over a NumPy array."""

    def __init__(self, array, stream=None, readonly=False):
        self.array = array
        self.__cuda_array_interface__ = {
            "shape": array.shape, "typestr": array.dtype.str, "version": 3,
            "data": (array.__array_interface__["data"][0], readonly),
            "strides": None if array.flags.c_contiguous else array.strides, "stream": stream}


def test_on_device_detection():
    from schedules.core.kernels import use_cuda
    a = np.zeros(3, np.float32)
    assert da.on_device(FakeGPUArray(a)) and da.on_device(FakeGPUArray(a, (da.kDLCUDAManaged, 0)))
    assert da.on_device(FakeCAIArray(a))
    assert not da.on_device(a) and not da.on_device(FakeGPUArray(a, (da.kDLCPU, 0)))
    assert not da.on_device(FakeGPUArray(a, (10, 0)))          # kDLROCM
    assert not da.on_device(3.0) and not da.on_device(None)

    class Broken:
        def __dlpack_device__(self):
            raise RuntimeError("no")
    assert not da.on_device(Broken())
    assert use_cuda(None, a, FakeGPUArray(a)) and not use_cuda(None, a)
    with pytest.raises(ValueError, match="target='llvm' runs on the CPU"):
        use_cuda("llvm", FakeGPUArray(a))
    torch = pytest.importorskip("torch")
    assert not da.on_device(torch.zeros(2))


# ------------------------------------------------------------ device calls, launch recorded
@pytest.fixture
def launches(monkeypatch):
    """Every DeviceFunction.launch as a dict instead of a launch (the driver
    check passes)."""
    from codegen.cuda import runtime
    calls = []
    monkeypatch.setattr(runtime, "driver", lambda: None)

    def launch(self, scalars, pointers, stream=0, waits=(), device=0):
        calls.append(dict(scalars=list(scalars), pointers=list(pointers), stream=stream,
                          waits=[w for w in waits if w is not None], device=device))
    monkeypatch.setattr(runtime.DeviceFunction, "launch", launch)
    return calls


def f32(*shape):
    return np.random.default_rng(0).standard_normal(shape, dtype=np.float32)


def _has_driver():
    from codegen.cuda.runtime import NoCudaDriverError, driver
    try:
        driver()
    except NoCudaDriverError:
        return False
    return True


@pytest.mark.skipif(_has_driver(), reason="a CUDA driver is present")
def test_launch_without_driver_on_dlpack_arguments():
    from codegen.cuda.runtime import NoCudaDriverError
    k = printed(gemm_shared)
    with pytest.raises(NoCudaDriverError, match="no CUDA driver on this machine"):
        k(FakeGPUArray(f32(64, 32)), FakeGPUArray(f32(32, 48)), C=FakeGPUArray(f32(64, 48)))


def test_dlpack_arguments_are_passed_by_pointer(launches):
    k = printed(gemm_shared)
    a, b, c = FakeGPUArray(f32(64, 32)), FakeGPUArray(f32(32, 48), versioned=False), \
        FakeGPUArray(f32(64, 48))
    assert k(a, b, C=c) is c
    (call,) = launches
    assert call["pointers"] == [a.address, b.address, c.address]
    assert call["stream"] == 0 and call["device"] == 0 and call["scalars"] == []
    assert a.streams == b.streams == c.streams == [1]        # legacy default stream: 1


def test_dlpack_params_inferred_and_byte_offset(launches):
    k = printed(reverse_in_block)
    base = f32(9, 32)
    a, c = FakeGPUArray(base[2:7]), FakeGPUArray(np.empty((5, 32), np.float32))
    k(a, C=c)
    assert launches[0]["scalars"] == [5]                     # N from A's shape
    assert launches[0]["pointers"][0] == base.__array_interface__["data"][0] + 2 * 32 * 4
    k(a, C=c, N=5)
    with pytest.raises(ValueError, match="argument 'C' has shape \\(5, 32\\), expected \\(4, 32\\)"):
        k(FakeGPUArray(base[:4]), C=c)


def test_dlpack_argument_errors(launches):
    k = printed(gemm_shared)
    a, b, c = f32(64, 32), f32(32, 48), np.empty((64, 48), np.float32)
    dev = FakeGPUArray
    with pytest.raises(TypeError, match="argument 'A' has dtype float64, expected float32"):
        k(dev(a.astype(np.float64)), dev(b), C=dev(c))
    with pytest.raises(ValueError, match="argument 'B' is not C-contiguous"):
        k(dev(a), dev(np.asfortranarray(b)), C=dev(c))
    with pytest.raises(ValueError, match="argument 'B' has 3 dimensions, expected 2"):
        k(dev(a), dev(b[None]), C=dev(c))
    with pytest.raises(TypeError, match="argument 'B': mixing host and device"):
        k(dev(a), b, C=dev(c))
    with pytest.raises(TypeError, match="argument 'B' lives on DLPack device kDLROCM:0"):
        k(dev(a), dev(b, (10, 0)), C=dev(c))
    with pytest.raises(ValueError, match="'A' \\(cuda:0\\) and 'B' \\(cuda:1\\) are on different"):
        k(dev(a), dev(b, (da.kDLCUDA, 1)), C=dev(c))
    ro = c.copy()
    ro.flags.writeable = False
    with pytest.raises(ValueError, match="output argument 'C' is read-only"):
        k(dev(a), dev(b), C=dev(ro))
    buf = f32(64 * 48)
    with pytest.raises(ValueError, match="output argument 'C' overlaps argument 'A'"):
        k(dev(buf[:64 * 32].reshape(64, 32)), dev(b), C=dev(buf.reshape(64, 48)))
    with pytest.raises(TypeError, match="pass the output 'C' \\(a device array of shape "
                                        "\\(64, 48\\), dtype float32\\) by name"):
        k(dev(a), dev(b))
    with pytest.raises(TypeError, match="param 'N' must be an int"):
        printed(reverse_in_block)(dev(f32(5, 32)), C=dev(f32(5, 32)), N=5.0)
    assert launches == []


def test_cuda_array_interface_stream_waited_for(launches):
    k = printed(gemm_shared)
    a, b, c = FakeCAIArray(f32(64, 32), stream=77), FakeGPUArray(f32(32, 48)), \
        FakeCAIArray(np.empty((64, 48), np.float32))
    k(a, b, C=c)
    assert launches[0]["waits"] == [77]
    assert launches[0]["pointers"][0] == a.array.__array_interface__["data"][0]
    with pytest.raises(ValueError, match="output argument 'C' is read-only"):
        k(a, b, C=FakeCAIArray(np.empty((64, 48), np.float32), readonly=True))


def test_outputs_allocated_with_the_inputs_framework(launches, monkeypatch):
    """CuPy (faked as a module): CuPy's current stream, output by cupy.zeros
    / cupy.empty on the inputs' device."""
    import types
    made = []

    class ndarray(FakeCAIArray):
        pass
    ndarray.__module__ = "cupy._core.core"

    class Device:
        def __init__(self, index):
            made.append(("device", index))

        def __enter__(self):
            return self

        def __exit__(self, *exc):
            return False

    def factory(kind):
        def make(shape, dtype):
            made.append((kind, tuple(shape), np.dtype(dtype).name))
            return ndarray(np.zeros(shape, dtype))
        return make
    cupy = types.ModuleType("cupy")
    cupy.cuda = types.SimpleNamespace(Device=Device, get_current_stream=lambda: types.
                                      SimpleNamespace(ptr=4242))
    cupy.zeros, cupy.empty = factory("zeros"), factory("empty")
    monkeypatch.setitem(sys.modules, "cupy", cupy)
    k = printed(gemm_shared)
    a, b = ndarray(f32(64, 32)), FakeGPUArray(f32(32, 48))
    out = k(a, b)
    assert isinstance(out, ndarray) and out.array.shape == (64, 48)
    assert ("device", 0) in made and made[-1][1:] == ((64, 48), "float32")
    assert launches[0]["stream"] == 4242 and b.streams == [4242]
    assert launches[0]["pointers"][2] == out.array.__array_interface__["data"][0]


class FakeDriver:
    """Enough of cuda.bindings.driver to run DeviceFunction.launch: records
    each cuLaunchKernel with its kernel parameters read back from memory."""
    class CUdevice_attribute:
        CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR = 75

    class CUevent_flags:
        CU_EVENT_DISABLE_TIMING = 2

    def __init__(self, plan, major=9):
        nptr = len(plan.arrays) + len(plan.temps)
        self.nargs = {k.name: len(plan.scalars) + len(k.host_vars) + nptr for k in plan.kernels}
        self.major, self.log, self.launches = major, [], []

    def cuModuleGetFunction(self, module, name):
        return (0, name.decode())

    def CUstream(self, s):
        return ("stream", s)

    def __getattr__(self, name):
        def call(*args):
            self.log.append((name, args))
            return (0, f"{name}-handle")
        return call

    def cuDeviceGetAttribute(self, attr, dev):
        return (0, self.major)

    def cuMemAllocAsync(self, nbytes, stream):
        self.log.append(("cuMemAllocAsync", (nbytes, stream)))
        return (0, 0x10000 * (1 + len(self.log)))

    def cuLaunchKernel(self, f, gx, gy, gz, bx, by, bz, shared, stream, params, extra):
        vals = [ctypes.c_int64.from_address(ctypes.c_uint64.from_address(params + 8 * i).value)
                .value for i in range(self.nargs[f])]
        self.launches.append(dict(kernel=f, grid=(gx, gy, gz), block=(bx, by, bz),
                                  shared=shared, stream=stream, args=vals))
        return (0,)


def test_runtime_launch_marshals_kernel_parameters(monkeypatch):
    """DeviceFunction.launch against a fake driver: module for the device's
    architecture, grid from the params, int64 scalars then pointers, one
    launch per kernel and host-loop step, producer streams waited for."""
    from codegen.cuda import runtime
    k = printed(reverse_in_block)
    fn = runtime.DeviceFunction({"sm_90": b"cubin"}, k.launch_plan, k.source)
    fake = FakeDriver(k.launch_plan)
    monkeypatch.setattr(runtime, "driver", lambda: fake)
    fn.launch([7], [0xA000, 0xC000], stream=99, waits=[5, None, 99], device=0)
    (l,) = fake.launches
    assert l["grid"] == (7, 1, 1) and l["block"] == (32, 1, 1) and l["stream"] == ("stream", 99)
    names = [n for n, _ in fake.log]
    (alloc,) = [a for n, a in fake.log if n == "cuMemAllocAsync"]   # the temporary B
    assert alloc == (7 * 32 * 4, ("stream", 99))
    assert l["args"][:3] == [7, 0xA000, 0xC000] and len(l["args"]) == 4
    assert ("cuMemFreeAsync", (l["args"][3], ("stream", 99))) in fake.log
    assert ("cuModuleLoadData", (b"cubin",)) in fake.log
    assert names.count("cuEventRecord") == 1 and ("cuStreamWaitEvent" in names)
    fake.major = 8                                  # another device without an sm_80 cubin
    with pytest.raises(RuntimeError, match="no cubin for this device \\(sm_80\\); built: sm_90"):
        fn.launch([7], [0xA000, 0xC000], device=1)


def test_runtime_launch_host_loop_steps(monkeypatch):
    from codegen.cuda import runtime
    k = printed(lstm_wavefront)
    plan = k.launch_plan
    fake = FakeDriver(plan)
    fn = runtime.DeviceFunction({"sm_90": b"cubin"}, plan, k.source)
    monkeypatch.setattr(runtime, "driver", lambda: fake)
    fn.launch([], list(range(0x1000, 0x1000 + 8 * len(plan.arrays), 8)))
    assert [l["kernel"] for l in fake.launches[:3]] == ["lstm_k0", "lstm_k1", "lstm_k2"]
    steps = [l for l in fake.launches if l["kernel"] == "lstm_k3"]
    assert [l["args"][0] for l in steps] == list(range(7))     # t, one launch per anti-diagonal
    assert [l["grid"][0] for l in steps] == [1, 2, 3, 3, 3, 2, 1]


# ------------------------------------------------------------ bench/bench_cuda.py
def test_bench_cuda_case_table_builds_without_gpu():
    from bench import bench_cuda, suite_rnn, suite_sparse, suites
    table = bench_cuda.cases()
    by_name = {c.name: c for c in table}
    assert len(by_name) == len(table)
    assert by_name["gemm 4096x4096x4096"].flops == 2.0 * 4096 ** 3
    assert [c.name for c in table if c.name.startswith("gemm ") and c.name[5].isdigit()] \
        == [f"gemm {n}x{n}x{n}" for n in (512, 1024, 2048, 4096)]
    assert [c.name for c in table if "float16" in c.name] == \
        [f"gemm {t} {n}x{n}x{n}" for n in (1024, 4096) for t in ("bfloat16", "float16")]
    assert [c.name for c in table if c.name.startswith("gemm variants")] == \
        [f"gemm variants {n}x{n}x{n}" for n in (1024, 4096)]
    convs = [c for c in table if c.name.startswith("conv ")]
    assert len(convs) == len(suites.CONV_SHAPES[False])
    n, ci, co, h, w = suites.CONV_SHAPES[False][1]
    assert by_name[f"conv {n}x{ci}x{h}x{w} -> {co}"].flops == 2.0 * n * co * h * w * ci * 9
    sparse = [c for c in table if c.name.startswith("sparse ")]
    assert len(sparse) == len(suite_sparse.SHAPES[False]) * 3
    assert sparse[0].name.endswith("@ 1%") and sparse[0].flops > 0
    lstms = [c for c in table if c.name.startswith("lstm ")]
    L, H, I, T, B = suite_rnn.SIZES[False][0][1:]
    assert len(lstms) == 3 and lstms[0].flops == suite_rnn._flops("lstm", L, H, I, T, B)
    assert all(callable(c.setup) and callable(c.check) for c in table)
    assert [c.name for c in bench_cuda.cases("gemm", sizes=(64,))] == ["gemm 64x64x64"]
    with pytest.raises(ValueError, match="unknown suite\\(s\\) fft"):
        bench_cuda.cases("gemm,fft")


def test_bench_cuda_records_the_fastest_gemm_variant(tmp_path, monkeypatch):
    from bench import bench_cuda
    from schedules.core import kernels, tuned
    from schedules.problems.gemm import GemmProblem
    from schedules.solvers.gemm_cuda import CudaTiled
    monkeypatch.setenv("TIRAMISU_PY_CACHE", str(tmp_path))
    monkeypatch.setattr(kernels, "cuda_device", lambda *a: ("sm_90", "NVIDIA H200"))
    case = bench_cuda.cases("gemmv", sizes=(2048,))[0]
    ms = lambda s: {"median_s": s, "min_s": s, "error": 0.0, "failure": None}   # noqa: E731
    results = {"tiramisu_py": ms(2.0), "tiramisu_py[classic]": ms(1.0),
               "tiramisu_py[stages=4]": ms(1.5), "tiramisu_py[swizzle]": ms(1.9),
               "torch": ms(1.2)}
    said = bench_cuda.record_variant(case, results)
    assert said == ("gemm variants 2048x2048x2048: {'stages': 4} recorded for NVIDIA H200 "
                    "(sm_90)")                       # the classic schedule is not a warp value
    p = GemmProblem("gemm", 2048, 2048, 2048, "cuda", device="cuda")
    device = tuned.device_key("sm_90", "NVIDIA H200")
    assert tuned.recorded(CudaTiled(), p, device) == {"stages": 4}
    results["tiramisu_py[stages=4]"] = results["tiramisu_py[swizzle]"] = ms(1.99)
    assert "the defaults recorded" in bench_cuda.record_variant(case, results)


def test_bench_cuda_exits_2_with_the_reason():
    from bench import bench_cuda
    reason = bench_cuda.no_gpu_reason()
    if reason is None:
        pytest.skip("a GPU is present: the benchmark would run")
    run = [sys.executable, "-m", "bench.bench_cuda", "--quick", "--suite", "gemm"]
    r = subprocess.run(run, capture_output=True, text=True, cwd=ROOT)
    assert r.returncode == 2 and r.stderr.strip() == f"bench_cuda: {reason}"
    r = subprocess.run(run + ["--list"], capture_output=True, text=True, cwd=ROOT)
    assert r.returncode == 0
    assert [line.split()[1] for line in r.stdout.splitlines()] == ["256x256x256", "512x512x512"]


def test_bench_cuda_baselines_agree_on_cpu(monkeypatch):
    """Each quick case's setup on the CPU (DEVICE patched): the torch baselines
    agree with the reference (so im2col + torch.sparse computes the convolution),
    and each tiramisu_py entry point (at its first size: the others take the same
    path) matches or raises (no target="cuda" path, or no driver), never crashes."""
    torch = pytest.importorskip("torch")
    from bench import bench_cuda
    monkeypatch.setattr(bench_cuda, "DEVICE", "cpu")
    seen = {}                   # (entry point's suite, name) -> the case that ran it
    for case in bench_cuda.cases(quick=True):
        impls = case.setup()
        assert "torch" in impls
        suite = re.split(r" [(\d]", case.name)[0]         # "gemm variants", "lstm": no size
        for name, fn in impls.items():
            if name.startswith("tiramisu_py"):
                if seen.setdefault((suite, name), case.name) != case.name:
                    continue
                try:
                    out = fn()
                except Exception as exc:         # what the bench reports as a failure
                    assert str(exc)
                    continue
            else:
                out = fn()
            assert isinstance(out, torch.Tensor)
            assert case.check(out) < 1e-3 * max(1.0, float(out.abs().max())), (case.name, name)

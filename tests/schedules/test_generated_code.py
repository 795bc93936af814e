"""The generated code of every library kernel, hashed and compared with the
hashes recorded in ``tests/data/generated_code.json``: moving code between
modules (the architecture work) must leave every kernel byte-identical; a
change that means to alter generated code re-records them and says so.

The host is pinned (``TIRAMISU_PY_HOST``: AVX-512 with BF16 and VNNI, 32 vector registers, the
caches and 2 cores of the machine the hashes were recorded on), so the
schedules' host-derived parameters and the vector widths do not depend on
where the test runs; LLVM's ``target datalayout``/``target triple`` lines are
left out of the hash (they name the process's target, not our code).

    TIRAMISU_PY_RECORD_CODE=1 python -m pytest tests/schedules/test_generated_code.py   # re-record
"""
from repo_paths import TESTS
import hashlib
import json
import os
from pathlib import Path
from types import SimpleNamespace

import pytest

import schedules
from schedules.solvers import backward
from schedules.solvers import conv_cuda as gpu_conv
from schedules.solvers import conv_sparse_cuda as gpu_sparse
from schedules.problems.conv import ConvShape

RECORD = Path(TESTS, "data") / "generated_code.json"
PIN = ("vector_bits=512,vector_registers=32,l1d=49152,l2=1048576,l3=33554432,cores=2,"
       "avx512_bf16=1,avx512_vnni=1")

S = ConvShape(2, 8, 12, 10, 16, 3, 3, 1, 1)
S_ODD = ConvShape(2, 4, 13, 11, 8, 3, 3, 2, 1, 2)

CPU = {
    "gemm": lambda: schedules.gemm_function(64, 48, 40),
    "gemm_batched": lambda: schedules.gemm_function(32, 24, 16, batch=3),
    "conv_direct": lambda: schedules.conv2d_function(2, 8, 12, 10, 16, padding=1, algo="direct"),
    "conv_im2col": lambda: schedules.conv2d_function(2, 8, 12, 10, 16, padding=1, algo="im2col"),
    "conv_spatial_pack": lambda: schedules.conv2d_function(2, 8, 12, 10, 16, padding=1,
                                                           algo="spatial_pack"),
    "conv_strided_dilated": lambda: schedules.conv2d_function(2, 4, 13, 11, 8, stride=2,
                                                              padding=1, dilation=2),
    "conv_grouped": lambda: schedules.conv2d_function(2, 8, 12, 10, 16, padding=1, groups=2),
    "conv_relu_maxpool_direct": lambda: schedules.conv_relu_maxpool_function(S, pool=2),
    "conv_relu_maxpool_winograd": lambda: schedules.conv_relu_maxpool_function(
        S, pool=2, algo="winograd"),
    "sparse_conv": lambda: schedules.sparse_conv2d_function(2, 8, 12, 10, 16, padding=1),
    "sparse_conv_relu_maxpool": lambda: schedules.sparse_conv2d_function(
        2, 8, 12, 10, 16, padding=1, pool=2, relu=True),
    "lstm_layer": lambda: schedules.lstm_function(5, 2, 16, layers=2, schedule="layer"),
    "lstm_wavefront": lambda: schedules.lstm_function(5, 2, 16, layers=2, schedule="wavefront"),
    "lstm_sparse": lambda: schedules.lstm_function(5, 2, 16, layers=2, sparse=True),
    "gru_layer": lambda: schedules.gru_function(5, 2, 16, layers=2, schedule="layer"),
    "gru_wavefront": lambda: schedules.gru_function(5, 2, 16, layers=2, schedule="wavefront"),
    "backward_matmul": lambda: backward.matmul(24, 16, 8, dtype="float32"),
    "backward_conv_forward": lambda: backward.conv_forward(S_ODD, dtype="float32"),
    "backward_conv_grad_input": lambda: backward.conv_grad_input(S_ODD),
    "backward_conv_grad_weight": lambda: backward.conv_grad_weight(S_ODD),
    "backward_fused_forward": lambda: backward.fused_forward(S, 2, dtype="float32"),
    "backward_fused_grad_pre": lambda: backward.fused_grad_pre(S, 2),
}
CUDA = {
    "cuda_gemm": lambda: schedules.gemm_cuda_function(64, 48, 32),
    "cuda_lstm": lambda: schedules.rnn_cuda_function(2, 5, 2, 8, 8),
    "cuda_gru": lambda: schedules.rnn_cuda_function(2, 5, 2, 8, 8, cell="gru"),
    "cuda_conv": lambda: gpu_conv.function(S),
    "cuda_sparse_conv": lambda: gpu_sparse.function(S),
}
CASES = [(name, t) for name in CPU for t in ("c", "llvm")] + [(name, "cuda") for name in CUDA]


def digest(source: str) -> str:
    lines = [ln for ln in source.splitlines()
             if not ln.startswith(("target datalayout", "target triple"))]
    return hashlib.sha256("\n".join(lines).encode()).hexdigest()


@pytest.fixture(scope="module")
def generated():
    """{"name/target": sha256} of every case, compiled under the pinned host
    as far as the printed code: the backends print it and stop (no C
    compiler, no LLVM machine code, no kernel kept in the warm-start cache:
    what is compared is the code, and gcc took most of the time)."""
    import codegen
    from tiramisu_py.driver import cuda, warm
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("TIRAMISU_PY_HOST", PIN)
        mp.setattr(cuda, "CUDA_ARCHS", ())     # printed only: no cubin, no toolkit needed
        mp.setattr(warm, "ENABLED", False)
        mp.setattr(codegen, "compile_c", lambda fn: SimpleNamespace(source=codegen.emit_c(fn)))
        mp.setattr(codegen, "compile_llvm",
                   lambda fn: SimpleNamespace(source=codegen.emit_llvm(fn)))
        return {f"{name}/{t}": digest((CPU if t != "cuda" else CUDA)[name]()
                                      .compile(target=t).source) for name, t in CASES}


def test_every_library_kernel_is_byte_identical_to_the_record(generated):
    if os.environ.get("TIRAMISU_PY_RECORD_CODE"):
        RECORD.parent.mkdir(exist_ok=True)
        RECORD.write_text(json.dumps(generated, indent=1, sort_keys=True) + "\n")
    recorded = json.loads(RECORD.read_text())
    assert set(recorded) == set(generated), "kernels added or removed: re-record"
    changed = sorted(k for k in generated if generated[k] != recorded[k])
    assert not changed, f"generated code changed for {changed}"


def test_the_pin_reaches_every_host_reader():
    """The record means something only if the pin decides what the schedules
    and both vectorisers see."""
    from codegen import loops, target
    from codegen.llvm import lower
    from schedules.host import host
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("TIRAMISU_PY_HOST", "vector_bits=256,cores=3,l2=65536")
        assert (loops.host_lanes(32), lower.host().vector_bits) == (8, 256)
        h = host()
        assert (h.vector_bits, h.vector_registers, h.cores, h.l2) == (256, 16, 3, 65536)
        mp.setenv("TIRAMISU_PY_HOST", "vector_bits=100")
        with pytest.raises(ValueError, match="TIRAMISU_PY_HOST: vector_bits must be .*128"):
            target.vector_bits()
        mp.setenv("TIRAMISU_PY_HOST", "lanes=4")
        with pytest.raises(ValueError, match="name from vector_bits"):
            host()

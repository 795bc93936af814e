"""The CUDA backend: a printer of the GPU-mapped loop IR (:mod:`.printer`),
cubins by nvcc or NVRTC (:mod:`.nvrtc`) with ptxas resources
(:mod:`.toolchain`; read from the cubin itself by :mod:`.cubin` where a log lacks them), a CPU emulator of the printed CUDA (:mod:`.emulator`, ``tpy_emu.h``) and the driver launch
(:mod:`.runtime`, needs ``cuda-python`` and a driver; imported lazily)."""
from . import cubin
from .printer import CudaPrintError, KernelLaunch, LaunchPlan, emit_cuda, evaluate
from .toolchain import ARCHS, COMPILER_ENV, Resources, build_cubin, cuda_compiler, parse_ptxas

__all__ = ["cubin", "CudaPrintError", "KernelLaunch", "LaunchPlan", "emit_cuda", "evaluate", "ARCHS",
           "COMPILER_ENV", "Resources", "build_cubin", "cuda_compiler", "parse_ptxas"]

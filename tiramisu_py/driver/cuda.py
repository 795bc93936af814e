"""``compile(target="cuda")``: the GPU-mapped loop IR printed as CUDA and
built into cubins (nvcc or NVRTC, when present) with their ptxas resources;
the result is a :class:`~tiramisu_py.runtime.cuda_kernel.CudaKernel`."""
from __future__ import annotations

import time

from codegen import cuda as gpu_codegen
from codegen.accumulate import accumulate_locally
from codegen.cuda.runtime import DeviceFunction
from codegen.simplify import simplify_indices

from ..analysis.gpu_plan import check_shared
from ..runtime.cuda_kernel import CudaKernel

# the architectures compile(target="cuda") builds cubins for (nvcc or NVRTC present)
CUDA_ARCHS = gpu_codegen.ARCHS


def compile_cuda(f, lowered, plan, inputs, outputs, temps, checker, zeroed, model, state,
                 t0, times):
    unmapped = [s for s in state if plan is None or s not in plan.by_stmt]
    if unmapped:
        raise ValueError(f"compile(target='cuda'): {', '.join(unmapped)} "
                         f"{'is' if len(unmapped) == 1 else 'are'} not mapped to the GPU; bind "
                         "the outermost loop of every statement to a block (bind / gpu_tile)")
    check_shared(model, plan)
    t2 = time.perf_counter()
    lowered = accumulate_locally(simplify_indices(lowered))   # per-thread tiles
    source, launch = gpu_codegen.emit_cuda(lowered)
    cubins, resources = {}, {}
    compiler = gpu_codegen.cuda_compiler() if CUDA_ARCHS else None
    for arch in CUDA_ARCHS if compiler else ():
        cubins[arch], resources[arch] = gpu_codegen.build_cubin(source, arch, compiler)
    compiled = DeviceFunction(cubins, launch, source)
    kernel = CudaKernel(f, compiled, inputs, outputs, temps, checker, lowered,
                        zeroed_outputs={b.name for b in outputs if b.name in zeroed},
                        source=source, plan=launch, cubins=cubins, resources=resources)
    kernel.cubin_compiler = compiler if cubins else None
    kernel.model, kernel.schedule, kernel.gpu_plan = model, state, plan
    kernel.timings = {"analysis": times[0], "ast": times[1],
                      "backend": time.perf_counter() - t2}
    return kernel



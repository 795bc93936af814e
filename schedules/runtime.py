"""What every operator shares: argument checks, the backend choice and the
in-process table of compiled kernels (the on-disk cache of the backends makes
a later process skip code generation)."""
from __future__ import annotations

import os

import numpy as np

# The LLVM backend is the default for the operator library: it promotes the
# register-blocked accumulators of the micro-kernels to vector registers (gcc
# keeps them in memory) and needs no C compiler.  ``target=`` or
# $TIRAMISU_PY_TARGET choose another one.
DEFAULT_TARGET = "llvm"

_KERNELS: dict = {}


def target_of(target):
    if target is not None and not isinstance(target, str):
        raise TypeError(f"target must be a string ('llvm', 'c', 'cpu' or 'cuda') or None, not "
                        f"{target!r}")
    return target or os.environ.get("TIRAMISU_PY_TARGET") or DEFAULT_TARGET


def positive_int(op, name, v):
    """Refuses ``v`` unless it is a positive int (not a bool), naming ``name``."""
    if not isinstance(v, int) or isinstance(v, bool) or v < 1:
        raise ValueError(f"{op}: {name} must be a positive int, got {v!r}")
    return v


def kernel(key, build, target):
    """The compiled kernel for ``key``, built by ``build()`` (a Function) once
    per process."""
    key = (key, target_of(target))
    k = _KERNELS.get(key)
    if k is None:       # a later process: from the warm-start entry, without building
        from tiramisu_py.driver.warm import library_kernel
        from .host import host
        k = _KERNELS[key] = library_kernel(key[0], build, key[1], repr(host()))
    return k


def use_cuda(target, *arrays) -> bool:
    """Whether a library call runs on the GPU: ``target="cuda"`` (or
    $TIRAMISU_PY_TARGET=cuda with no ``target``), or no target given and an
    argument is a device array (a torch CUDA tensor, ``__cuda_array_interface__``).
    Device arrays with a CPU target are refused, naming the target."""
    from tiramisu_py.runtime.device_arrays import on_device
    on_gpu = any(a is not None and on_device(a) for a in arrays)
    if target_of(target) == "cuda":
        return True
    if on_gpu:
        if target is not None:
            raise ValueError(f"target={target!r} runs on the CPU, but an argument is on a GPU; "
                             "pass target='cuda' (or no target) for device arrays")
        return True
    return False


def cuda_kernel(key, build):
    """The CUDA kernel for ``key`` (``build()`` returns the GPU-scheduled
    Function), compiled once per process."""
    return kernel(key, build, "cuda")


def is_torch(x) -> bool:
    return type(x).__module__.startswith("torch")


def float32_array(x, name, ndim):
    """``x`` (NumPy array or CPU torch tensor) as a C-contiguous float32 array
    of ``ndim`` dimensions; a clear error names ``name`` otherwise."""
    if is_torch(x):
        if str(x.dtype) != "torch.float32":
            raise TypeError(f"{name}: expected a float32 tensor, got {x.dtype}")
        if x.device.type != "cpu":
            raise ValueError(f"{name}: expected a CPU tensor, got device {x.device}")
        if x.dim() != ndim:
            raise ValueError(f"{name}: expected {ndim} dimensions, got shape {tuple(x.shape)}")
        return x.contiguous()
    if not isinstance(x, np.ndarray):
        raise TypeError(f"{name}: expected a NumPy array or torch tensor, got {type(x).__name__}")
    if x.dtype != np.float32:
        raise TypeError(f"{name}: expected float32, got {x.dtype}")
    if x.ndim != ndim:
        raise ValueError(f"{name}: expected {ndim} dimensions, got shape {x.shape}")
    return np.ascontiguousarray(x)


def same_kind(args, names):
    """All NumPy or all torch: mixing them is refused (the result type would
    be ambiguous)."""
    kinds = {is_torch(a) for a in args if a is not None}
    if len(kinds) > 1:
        raise TypeError(f"{', '.join(names)}: pass all NumPy arrays or all torch tensors")


def cuda_float32(x, name, ndim):
    """An argument of a library call on the GPU: a device array (torch CUDA
    tensor, made contiguous; or any ``__cuda_array_interface__`` object)
    checked as float32 with ``ndim`` dimensions, else as
    :func:`float32_array` (a host array, copied to the device by the call)."""
    from tiramisu_py.runtime.device_arrays import on_device
    if not on_device(x):
        return float32_array(x, name, ndim)
    if is_torch(x):
        dtype, shape = str(x.dtype).replace("torch.", ""), tuple(x.shape)
    else:
        cai = x.__cuda_array_interface__
        dtype, shape = np.dtype(cai["typestr"]).name, tuple(cai["shape"])
    if dtype != "float32":
        raise TypeError(f"{name}: expected float32, got {dtype}")
    if len(shape) != ndim:
        raise ValueError(f"{name}: expected {ndim} dimensions, got shape {shape}")
    return x.detach().contiguous() if is_torch(x) else x

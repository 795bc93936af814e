"""The backend choice and the in-process table of compiled kernels (the
on-disk cache of the backends makes a later process skip code generation):
what every solver's ``run`` shares."""
from __future__ import annotations

from . import environ

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
    return target or environ.get("TIRAMISU_PY_TARGET") or DEFAULT_TARGET


def kernel(key, build, target):
    """The compiled kernel for ``key``, built by ``build()`` (a Function) once
    per process."""
    key = (key, target_of(target))
    k = _KERNELS.get(key)
    if k is None:       # a later process: from the warm-start entry, without building
        from tiramisu_py.driver.warm import library_kernel
        from ..host import host
        k = _KERNELS[key] = library_kernel(key[0], build, key[1], repr(host()))
    return k


def use_cuda(target, *arrays, names=()) -> bool:
    """Whether a library call runs on the GPU: ``target="cuda"`` (or
    $TIRAMISU_PY_TARGET=cuda with no ``target``), or no target given and an
    argument is a device array (a torch CUDA tensor, ``__cuda_array_interface__``).
    Device arrays with a CPU target are refused, naming the target and (with
    ``names``, one per array) the argument."""
    from tiramisu_py.runtime.device_arrays import on_device
    on_gpu = [i for i, a in enumerate(arrays) if a is not None and on_device(a)]
    if target_of(target) == "cuda":
        return True
    if on_gpu:
        if target is not None:
            which = names[on_gpu[0]] if len(names) > on_gpu[0] else "an argument"
            raise ValueError(f"target={target!r} runs on the CPU, but {which} is a device array "
                             f"({type(arrays[on_gpu[0]]).__name__}); pass target='cuda' (or no "
                             "target) for device arrays, or copy it to the host")
        return True
    return False


def cuda_device(*arrays):
    """(architecture "sm_XY", name) of the GPU the device arrays are on (the
    current device for host arrays), from torch when it has been imported
    and sees a GPU; (None, None) otherwise (the generic defaults run)."""
    import sys
    torch = sys.modules.get("torch")
    try:
        if torch is None or not torch.cuda.is_available():
            return None, None
        dev = next((a.device for a in arrays if getattr(getattr(a, "device", None), "type", "")
                    == "cuda"), torch.cuda.current_device())
        major, minor = torch.cuda.get_device_capability(dev)
        return f"sm_{major}{minor}", torch.cuda.get_device_name(dev)
    except (RuntimeError, AssertionError, AttributeError):
        return None, None


def cuda_kernel(key, build):
    """The CUDA kernel for ``key`` (``build()`` returns the GPU-scheduled
    Function), compiled once per process."""
    return kernel(key, build, "cuda")



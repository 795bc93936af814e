"""Launching cubins through the CUDA driver API of ``cuda-python``
(``cuda.bindings.driver``).  Optional: imported only when a CUDA kernel is
called; without cuda-python or without a driver every launch raises
:class:`NoCudaDriverError`.

Unverified on this project's machines (no GPU): module load and launch
follow the driver API (cuInit, primary context, cuModuleLoadData,
cuModuleGetFunction, cuLaunchKernel on the given stream).  Host NumPy
arrays are copied to the device and back around the launches (synchronous);
device arrays (``__cuda_array_interface__``: torch CUDA tensors, CuPy,
Numba, pycuda GPUArray) are passed by pointer and the kernels are launched on
the caller's stream without synchronising (:meth:`DeviceFunction.launch`)."""
from __future__ import annotations

import threading

import numpy as np

from .printer import LaunchPlan, evaluate


class NoCudaDriverError(RuntimeError):
    """No CUDA driver on this machine (or cuda-python is not installed)."""


_MESSAGE = ("no CUDA driver on this machine: a CUDA kernel can only be launched where an NVIDIA "
            "driver (libcuda) and the optional dependency cuda-python are present "
            "(pip install 'tiramisu_py[cuda]'); kernel.emulate() runs the generated CUDA on "
            "the CPU, and compile(target='cpu') runs the same schedule with blocks and threads "
            "as loops")

_state = {}
_lock = threading.Lock()


def driver():
    """The ``cuda.bindings.driver`` module after a successful cuInit, or
    NoCudaDriverError."""
    with _lock:
        if "driver" in _state:
            return _state["driver"]
        if "error" in _state:
            raise NoCudaDriverError(_state["error"])
        try:
            from cuda.bindings import driver as cu
        except ImportError as exc:
            _state["error"] = f"{_MESSAGE} (cuda-python: {exc})"
            raise NoCudaDriverError(_state["error"]) from None
        try:
            err, = cu.cuInit(0)
        except Exception as exc:         # cuda.pathfinder.DynamicLibNotFoundError and kin
            _state["error"] = f"{_MESSAGE} ({type(exc).__name__}: {exc})"
            raise NoCudaDriverError(_state["error"]) from None
        if int(err) != 0:
            _state["error"] = f"{_MESSAGE} (cuInit: {err})"
            raise NoCudaDriverError(_state["error"])
        _state["driver"] = cu
        return cu


def _check(result, what):
    err = result[0]
    if int(err) != 0:
        raise RuntimeError(f"CUDA driver: {what} failed: {err}")
    return result[1] if len(result) == 2 else result[1:]


class DeviceFunction:
    """The kernels of one Function loaded on the current device: ``call``
    takes host scalars and NumPy arrays (by address) like the CPU backends."""

    def __init__(self, cubins: dict, plan: LaunchPlan, source: str):
        self.cubins, self.plan, self.source = cubins, plan, source
        self.path = "<cuda>"
        self._funcs, self._modules, self._contexts = {}, {}, {}   # per device ordinal

    def _load(self, device=0):
        cu = driver()
        dev = _check(cu.cuDeviceGet(int(device)), "cuDeviceGet")
        major = _check(cu.cuDeviceGetAttribute(
            cu.CUdevice_attribute.CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR, dev), "attribute")
        ctx = _check(cu.cuDevicePrimaryCtxRetain(dev), "cuDevicePrimaryCtxRetain")
        _check((cu.cuCtxSetCurrent(ctx)[0], None), "cuCtxSetCurrent")
        arch = f"sm_{major}0"
        if arch not in self.cubins:
            raise RuntimeError(f"CUDA: no cubin for this device ({arch}); built: "
                               f"{', '.join(self.cubins) or 'none (no nvcc or NVRTC)'}")
        mod = _check(cu.cuModuleLoadData(self.cubins[arch]), "cuModuleLoadData")
        self._modules[device] = mod
        self._funcs[device] = {k.name: _check(cu.cuModuleGetFunction(mod, k.name.encode()),
                                              "cuModuleGetFunction") for k in self.plan.kernels}
        self._contexts[device] = ctx

    def _activate(self, cu, device):
        """Loads the module on ``device`` once; makes its context current."""
        if device not in self._funcs:
            self._load(device)
        else:
            _check((cu.cuCtxSetCurrent(self._contexts[device])[0], None), "cuCtxSetCurrent")

    def launch(self, scalars, pointers, stream=0, waits=(), device=0) -> None:
        """Launches the kernels in order on ``stream`` (a CUstream handle as an
        int; 0 the legacy default stream) of CUDA device ``device`` with
        device ``pointers`` for the arrays, after the work queued on each
        stream of ``waits`` (producers' streams: an event recorded there,
        waited for on ``stream``); temporaries are allocated and freed on the
        stream (cuMemAllocAsync / cuMemFreeAsync).  Does not synchronise."""
        plan = self.plan
        values = dict(plan.constants)
        values.update({sc.name: v for sc, v in zip(plan.scalars, scalars)})
        plan.check_grids(values)
        plan.check_aligned(pointers)
        cu = driver()
        self._activate(cu, device)
        st = cu.CUstream(int(stream))
        for w in sorted({int(w) for w in waits if w is not None and int(w) != int(stream)}):
            ev = _check(cu.cuEventCreate(int(cu.CUevent_flags.CU_EVENT_DISABLE_TIMING)), "cuEventCreate")
            try:
                _check((cu.cuEventRecord(ev, cu.CUstream(w))[0], None), "cuEventRecord")
                _check((cu.cuStreamWaitEvent(st, ev, 0)[0], None), "cuStreamWaitEvent")
            finally:
                cu.cuEventDestroy(ev)
        temps = []
        try:
            for _, dtype, n, zero in plan.temp_sizes(values):
                nbytes = n * np.dtype(dtype).itemsize
                p = _check(cu.cuMemAllocAsync(nbytes, st), "cuMemAllocAsync")
                temps.append(p)
                if zero:
                    _check((cu.cuMemsetD8Async(p, 0, nbytes, st)[0], None), "cuMemsetD8Async")
            self._launch_all(cu, self._funcs[device], values, scalars,
                             [int(p) for p in pointers] + [int(p) for p in temps], st)
        finally:
            for p in temps:
                cu.cuMemFreeAsync(p, st)

    def _launch_all(self, cu, funcs, values, scalars, pointers, stream):
        keep = []
        for k, vals in self.plan.launches(values):
            grid = [evaluate(g, vals) for g in k.grid]
            if min(grid) <= 0:
                continue
            args = [np.array(v, dtype=np.int64) for v in scalars]
            args += [np.array(vals[v], dtype=np.int64) for v in k.host_vars]
            args += [np.array(p, dtype=np.uint64) for p in pointers]
            ptrs = np.array([a.ctypes.data for a in args], dtype=np.uint64)
            keep.append((args, ptrs))       # alive until the launches are queued
            _check((cu.cuLaunchKernel(funcs[k.name], *grid, *k.block, k.shared_bytes,
                                      stream, ptrs.ctypes.data, 0)[0], None), f"launch {k.name}")

    def call(self, scalars, addresses) -> int:
        """Host arrays: copied to the device, launched (:meth:`launch`, legacy
        stream), synchronised, writable arrays copied back."""
        plan = self.plan
        values = dict(plan.constants)
        values.update({sc.name: v for sc, v in zip(plan.scalars, scalars)})
        plan.check_grids(values)        # before the driver: the same error anywhere
        cu = driver()
        self._activate(cu, 0)           # the context is current before cuMemAlloc
        host = []                   # (address, bytes) of each array argument
        for a, addr in zip(plan.arrays, addresses):
            n = 1
            for d in a.shape:
                n *= max(0, evaluate(d, values))
            host.append((addr, n * np.dtype(a.dtype).itemsize))
        dev = []
        try:
            for addr, nbytes in host:
                p = _check(cu.cuMemAlloc(max(nbytes, 1)), "cuMemAlloc")
                dev.append(p)
                _check((cu.cuMemcpyHtoD(p, addr, nbytes)[0], None), "cuMemcpyHtoD")
            self.launch(scalars, dev, 0)
            _check((cu.cuCtxSynchronize()[0], None), "cuCtxSynchronize")
            for (addr, nbytes), p, a in zip(host, dev, plan.arrays):
                if a.writable:
                    _check((cu.cuMemcpyDtoH(addr, p, nbytes)[0], None), "cuMemcpyDtoH")
        finally:
            for p in dev:
                cu.cuMemFree(p)
        return 0

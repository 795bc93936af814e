"""The compiled GPU function: a Kernel that launches its cubins through the
CUDA driver (cuda-python) or, with :meth:`CudaKernel.emulate`, runs the same
CUDA source on the CPU (``tiramisu_py.driver.cuda`` builds it)."""
from __future__ import annotations

import operator

import numpy as np

from . import device_arrays
from .device_arrays import on_device
from .kernel import Kernel


class CudaKernel(Kernel):
    """A compiled GPU function.  Calling it launches the kernels on the GPU
    (``NoCudaDriverError`` where there is none).  ``source`` is the CUDA C;
    ``launch_plan`` the host's launch sequence; ``cubins`` {arch: bytes} and
    ``resources`` {arch: {kernel: Resources}} (registers, shared memory,
    spills) when nvcc or NVRTC was found (else empty; ``cubin_compiler`` says
    which built them, $TIRAMISU_PY_CUDA_COMPILER chooses)."""

    def __init__(self, *args, source, plan, cubins, resources, **kwargs):
        super().__init__(*args, **kwargs)
        self._cuda_source = source
        self.launch_plan = plan
        self.cubins = cubins
        self.resources = resources
        self._emulated = None

    @property
    def source(self) -> str:
        return self._cuda_source

    def __call__(self, *args, **kwargs):
        """NumPy arrays / CPU tensors: copied to the device and back around the
        launches (synchronous).  Device arrays (torch CUDA tensors, objects
        with ``__cuda_array_interface__`` or CUDA DLPack producers, see
        :mod:`tiramisu_py.runtime.device_arrays`): zero-copy, launched on the
        framework's current stream (torch's for torch tensors), outputs
        allocated with the inputs' framework, no synchronisation."""
        if any(on_device(x) for x in (*args, *kwargs.values())):
            return self._device_call(args, kwargs)
        return super().__call__(*args, **kwargs)

    def _device_call(self, args, kwargs):
        from codegen.cuda.runtime import driver
        driver()                                  # NoCudaDriverError first
        if len(args) > len(self.inputs):
            self._too_many_positional(args)
        given = {b.name: a for b, a in zip(self.inputs, args)}
        values = {}
        names = {b.name for b in self.inputs + self.outputs}
        for k, v in kwargs.items():
            if k in given:
                raise TypeError(f"{self.name}() got argument {k!r} twice")
            if k in names:
                given[k] = v
            elif k in self.params:
                if isinstance(v, bool) or not isinstance(v, (int, np.integer)):
                    raise TypeError(f"param {k!r} must be an int, not {type(v).__name__}")
                values[k] = int(v)
            else:
                raise TypeError(f"{self.name}() got an unexpected argument {k!r}")
        missing = [b.name for b in self.inputs if b.name not in given]
        if missing:
            raise TypeError(f"{self.name}() missing array argument(s): {', '.join(missing)}")
        stream = device_arrays.consumer_stream(given.values())
        arrs = {b.name: device_arrays.DeviceArray(b.name, given[b.name], stream)
                for b in self.inputs + self.outputs if b.name in given}
        for b in self.inputs + self.outputs:
            a = arrs.get(b.name)
            if a is None:
                continue
            if a.dtype != b.dtype.name:
                raise TypeError(f"argument {b.name!r} has dtype {a.dtype}, expected "
                                f"{b.dtype.name}")
            if len(a.shape) != len(b.shape):
                raise ValueError(f"argument {b.name!r} has {len(a.shape)} dimensions, "
                                 f"expected {len(b.shape)}")
            if b in self.outputs and a.read_only:
                raise ValueError(f"output argument {b.name!r} is read-only (its producer "
                                 "exported it read-only or as a copy)")
        device = device_arrays.common_device(arrs.values())
        self._infer_params(values, arrs)
        like = next((a for a in arrs.values() if a.framework == "torch"),
                    next((a for a in arrs.values() if a.framework), None))
        results = {}
        # the arrays given, before the outputs not given are allocated (or asked for)
        self._check_shapes([b for b in self.inputs + self.outputs if b.name in arrs], arrs,
                           values)
        for b in self.outputs:
            if b.name not in arrs:
                obj = device_arrays.allocate(like, b.name, self._extents(b, values),
                                             b.dtype.name, b.name in self.zeroed_outputs,
                                             self.name)
                arrs[b.name] = device_arrays.DeviceArray(b.name, obj, stream)
            results[b.name] = arrs[b.name].obj
        self._check_aliasing(arrs)
        scalars = [values[p] for p in self.params]
        self._compiled.launch(scalars, [arrs[b.name].address for b in self.inputs + self.outputs],
                              stream, waits=[a.wait_stream for a in arrs.values()],
                              device=device)
        return next(iter(results.values())) if len(results) == 1 else results

    def _check_shapes(self, buffers, arrs, values):
        for b in buffers:
            if tuple(arrs[b.name].shape) != self._extents(b, values):
                raise ValueError(f"argument {b.name!r} has shape {tuple(arrs[b.name].shape)}, "
                                 f"expected {self._extents(b, values)}")

    def emulate(self, *args, order="forward", seed=0, **kwargs):
        """Runs the generated CUDA source on the CPU (C++ with fibers, see
        :mod:`codegen.cuda.emulator`) with the threads of each block in
        ``order`` ("forward", "reverse" or "shuffle" with ``seed``);
        arguments and result as for a call."""
        from codegen.cuda.emulator import ORDERS, EmulatedFunction
        if order not in ORDERS:
            raise ValueError(f"emulate: order must be one of {', '.join(ORDERS)}, not {order!r}")
        try:
            value = None if isinstance(seed, bool) else operator.index(seed)
        except TypeError:
            value = None
        if value is None or not 0 <= value < 2 ** 64:
            raise ValueError(f"emulate: seed must be an int in [0, 2**64), not {seed!r}")
        if self._emulated is None:
            self._emulated = EmulatedFunction(self._cuda_source, self.launch_plan)
        emu = self._emulated
        emu.order, emu.seed = order, value
        saved, self._compiled = self._compiled, emu
        try:
            return Kernel.__call__(self, *args, **kwargs)
        finally:
            self._compiled = saved

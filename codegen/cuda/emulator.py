"""Runs the generated CUDA on the CPU: the ``.cu`` compiled as C++ with
``tpy_emu.h`` (each thread of a block a fiber; ``__syncthreads()`` a switch
to the scheduler; thread orders forward, reverse or a seeded shuffle per
phase).  A result that depends on the order reveals a missing barrier."""
from __future__ import annotations

import threading

import cffi

from .printer import LaunchPlan, emulator_declarations, evaluate
from .toolchain import build_emulator

ORDERS = {"forward": 0, "reverse": 1, "shuffle": 2}
_lock = threading.Lock()          # the emulator's scheduler state is process-global


class EmulatorError(RuntimeError):
    """The emulated kernel broke the CUDA rules (a barrier not reached by
    every thread of a block) or was launched with bad dimensions."""


class EmulatedFunction:
    """``call(scalars, addresses)`` like a CPU compiled function: allocates the
    temporaries, then launches each kernel in order (``order``, ``seed``)."""

    def __init__(self, source: str, plan: LaunchPlan):
        self.source = source
        self.plan = plan
        self.path = str(build_emulator(source))
        self.ffi = cffi.FFI()
        self.ffi.cdef(emulator_declarations(plan))
        self.lib = self.ffi.dlopen(self.path)
        self.order, self.seed = "forward", 0

    def call(self, scalars, addresses) -> int:
        import numpy as np
        plan = self.plan
        values = dict(plan.constants)
        values.update({sc.name: v for sc, v in zip(plan.scalars, scalars)})
        plan.check_grids(values)
        plan.check_aligned(addresses)
        temps = [(np.zeros if zero else np.empty)(n, dtype=dtype)
                 for _, dtype, n, zero in plan.temp_sizes(values)]
        addrs = list(addresses) + [t.ctypes.data for t in temps]
        with _lock:
            for k, vals in plan.launches(values):
                grid = self.ffi.new("int64_t[3]", [max(0, evaluate(g, vals)) for g in k.grid])
                block = self.ffi.new("int64_t[3]", list(k.block))
                fn = getattr(self.lib, f"tpy_emu_{k.name}")
                host = [vals[v] for v in k.host_vars]
                rc = fn(grid, block, ORDERS[self.order], self.seed, *scalars, *host, *addrs)
                if rc == 2:
                    raise EmulatorError(f"{k.name}: a barrier was not reached by every thread "
                                        "of a block")
                if rc == 4:
                    raise EmulatorError(f"{k.name}: a vector access or cp.async was not "
                                        "aligned to its size")
                if rc != 0:
                    raise EmulatorError(f"{k.name}: bad launch (grid {list(grid)}, block "
                                        f"{list(k.block)})")
        return 0

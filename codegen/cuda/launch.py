"""The host side of the printed CUDA: :class:`LaunchPlan` (the kernels'
grids and blocks, the temporaries, host loops of launches, the alignment
of vector-accessed arrays) and :func:`evaluate` for the grid expressions;
built by :func:`codegen.cuda.printer.emit_cuda`."""
from __future__ import annotations

from dataclasses import dataclass, field

from .. import ir

MAX_SHARED_BYTES = 48 * 1024          # static shared memory per block (no opt-in)
MAX_THREADS = 1024
MAX_GRID = (2 ** 31 - 1, 65535, 65535)     # blocks along x, y, z (every GPU since sm_30)


class CudaPrintError(ValueError):
    """A loop IR the CUDA printer cannot express (a mapping the legality check
    does not rule out, e.g. a grid that is not rectangular)."""


@dataclass
class KernelLaunch:
    name: str                     # the __global__ symbol
    grid: tuple                   # ir.Expr per axis x, y, z (over params and host loops)
    block: tuple                  # ints: threads per axis x, y, z
    shared_bytes: int = 0         # static __shared__ bytes per block
    guard: object = None          # ir.Expr over params: launch only if true (None: always)
    host_vars: tuple = ()         # enclosing host loops, passed after the scalars


@dataclass
class HostLoop:
    """``for (var = lo; var < hi; var++)`` on the host around launches (e.g.
    time steps, wavefront anti-diagonals): one launch per iteration."""
    var: str
    lo: object
    hi: object
    steps: list
    guard: object = None


@dataclass
class LaunchPlan:
    """The host side: allocate the temporaries, launch the kernels in order.
    Every kernel takes every scalar, then every array, then every temporary."""
    function: str
    scalars: list                 # ir.ScalarArg
    arrays: list                  # ir.ArrayArg
    temps: list                   # (name, dtype, shape exprs, zero_init)
    kernels: list = field(default_factory=list)   # KernelLaunch, in source order
    constants: dict = field(default_factory=dict)
    steps: list = field(default_factory=list)     # KernelLaunch | HostLoop, run in order
    aligned: dict = field(default_factory=dict)   # array -> bytes its base pointer is aligned to

    def temp_sizes(self, values):
        """[(name, dtype, elements (at least 1), zero_init)] of the global
        temporaries for the params ``values``."""
        out = []
        for name, dtype, shape, zero in self.temps:
            n = 1
            for d in shape:
                n *= max(0, evaluate(d, values))
            out.append((name, dtype, max(n, 1), zero))
        return out

    def launches(self, values):
        """Yields (KernelLaunch, values with the host loops' iterators) in
        launch order for the params ``values``."""
        yield from _walk(self.steps, dict(values))

    def check_aligned(self, addresses):
        """Refuses an array argument whose address is not aligned as the
        kernels' vector accesses to it need (:attr:`aligned`; the printer
        proved the offsets, the base pointer is the caller's)."""
        for a, addr in zip(self.arrays, addresses):
            n = self.aligned.get(a.name)
            if n and int(addr) % n:
                raise ValueError(
                    f"argument {a.name!r}: the kernel accesses it {n} bytes at a time and its "
                    f"address {int(addr):#x} is not a multiple of {n}; pass an array that "
                    "starts on an aligned address (a fresh or .clone()d one, not a view "
                    "that starts inside another)")

    def check_grids(self, values):
        """Refuses, before anything runs, a launch whose grid has more blocks
        along an axis than CUDA allows (:data:`MAX_GRID`; the grid depends on
        the params, so this is checked at each call)."""
        for k, vals in self.launches(values):
            grid = [evaluate(g, vals) for g in k.grid]
            for axis, n, limit in zip("xyz", grid, MAX_GRID):
                if n > limit:
                    raise CudaPrintError(
                        f"CUDA launch of {k.name}: {n} blocks along block.{axis} (grid "
                        f"{tuple(grid)}), beyond CUDA's limit of {limit} for that axis; bind "
                        "the loop with the most blocks to block.x (up to 2**31 - 1 blocks), "
                        "or use larger tiles")


def _walk(steps, values):
    for st in steps:
        if st.guard is not None and not evaluate(st.guard, values):
            continue
        if isinstance(st, HostLoop):
            for v in range(evaluate(st.lo, values), evaluate(st.hi, values)):
                yield from _walk(st.steps, dict(values, **{st.var: v}))
        else:
            yield st, values


def evaluate(e, values: dict) -> int:
    """An integer IR expression over the params, evaluated on the host."""
    if isinstance(e, ir.Const):
        return int(e.value) if not isinstance(e.value, bool) else bool(e.value)
    if isinstance(e, ir.Var):
        if e.name not in values:
            raise CudaPrintError(f"CUDA launch: {e.name!r} is not a param")
        return values[e.name]
    if isinstance(e, ir.Cast):
        return evaluate(e.a, values)
    if isinstance(e, ir.Unary):
        v = evaluate(e.a, values)
        return -v if e.op == "neg" else (not v)
    if isinstance(e, ir.Select):
        return evaluate(e.a, values) if evaluate(e.cond, values) else evaluate(e.b, values)
    if isinstance(e, ir.Binary):
        a, b = evaluate(e.a, values), evaluate(e.b, values)
        op = e.op
        if op in ("div", "mod") and b != 0:
            q = abs(a) // abs(b) * (1 if (a >= 0) == (b > 0) else -1)
            return q if op == "div" else a - q * b
        table = {"add": lambda: a + b, "sub": lambda: a - b, "mul": lambda: a * b,
                 "floordiv": lambda: a // b if b else 0, "floormod": lambda: a % b if b else 0,
                 "div": lambda: 0, "mod": lambda: 0,
                 "min": lambda: min(a, b), "max": lambda: max(a, b), "lt": lambda: a < b,
                 "le": lambda: a <= b, "gt": lambda: a > b, "ge": lambda: a >= b,
                 "eq": lambda: a == b, "ne": lambda: a != b, "and": lambda: a and b,
                 "or": lambda: a or b}
        return table[op]()
    raise CudaPrintError(f"CUDA launch: cannot evaluate {e!r} on the host")

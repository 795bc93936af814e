"""The GEMM solvers on the CPU: the Goto/BLIS schedule of
:mod:`schedules.blocks.blis`, plain and batched."""
from __future__ import annotations

from dataclasses import replace

import tiramisu_py as tp

from ..blocks.blis import default_params, function, kernel
from ..core.solver import Solver
from ..host import host

DTYPES = {"float32": tp.float32, "float64": tp.float64}


class Blis(Solver):
    """``a @ b`` (``op`` "gemm") or a batch of them ("batched_gemm") with the
    BLIS schedule; the tiles from the host unless the caller gives them."""
    name = "blis"

    def __init__(self, op):
        self.op = op

    def applicable(self, p):
        why = super().applicable(p)
        if why is True and p.dtype not in ("float32", "float64"):
            return f"needs float32 or float64 (got {p.dtype}; the 'dot' solver takes it)"
        return why

    def params(self, p):
        return {"params": p.params or default_params(p.n, p.m, p.k, batch=p.batch,
                                                     itemsize=DTYPES[p.dtype].bits // 8,
                                                     b_transposed=p.trans_b)}

    def space(self, p):
        """The register block (``mr`` rows unrolled x ``nr`` columns, whole
        vectors, the accumulators within the SIMD registers), the cache
        blocking (``kc``, ``mc``, ``nc``: up to the problem's extents), the
        parallel loop, the micro order and the packing of A."""
        h, d = host(), self.params(p)["params"]
        lanes, regs = d.vector, host().vector_registers
        nrs = [v * lanes for v in (1, 2, 3, 4) if v * lanes <= max(lanes, p.m)]
        mrs = [r for r in (2, 4, 6, 8, 12, 14) if r * (d.nr // lanes) <= regs - 2]
        return {"mr": sorted(set(mrs) | {d.mr}), "nr": sorted(set(nrs) | {d.nr}),
                "kc": _sizes(d.kc, max(1, p.k), 8), "mc": _sizes(d.mc, max(1, p.n), d.mr),
                "nc": _sizes(d.nc, max(1, p.m), d.nr),
                "parallel": (["ic", "jc"] if h.cores > 1 else ["ic"])
                + (["b"] if p.batch and h.cores > 1 else []),
                "micro": ["ir", "jr"], "pack_a": [False, True]}

    def with_values(self, p, values):
        return {"params": replace(self.params(p)["params"], **values)}

    def build(self, p, params):
        return function(p.n, p.m, p.k, batch=p.batch, dtype=DTYPES[p.dtype], b_transposed=p.trans_b,
                        **params)

    def run(self, p, args, values=None):
        """``args``: ``(a, b)``, ``b`` as ``m x k`` when ``p.trans_b``."""
        return self._kernel(p, values)(*args)

    def runner(self, p):
        k = self._kernel(p)
        return lambda args: k(*args)

    def _kernel(self, p, values=None):
        return kernel(p.n, p.m, p.k, self.tuned(p, values)["params"], p.target, batch=p.batch,
                      dtype=DTYPES[p.dtype], b_transposed=p.trans_b)


def _sizes(default, extent, multiple):
    """Tile sizes around ``default``: halved and doubled (multiples of
    ``multiple``, at most the extent rounded up to one)."""
    top = -(-extent // multiple) * multiple
    out = {default}
    for f in (0.5, 2):
        v = max(multiple, int(default * f) // multiple * multiple)
        out.add(min(v, top))
    return sorted(out)

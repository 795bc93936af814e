"""C backend: a register tile (a local accumulation's block, ``C_local[6][2][8]``)
held as named vector variables instead of an array (mixed into the C emitter).

A register-blocked reduction accumulates into a small stack array, read and
written only by vector loops of one register's length inside loops the
source unrolls (:meth:`codegen.c.emit.CPrinter.unrolled`)::

    float C_local[6][2][8];
    ... { const int64_t i11 = 3; { const int64_t j110 = 1;
          C_local[i11][j110][j111..] = C_local[i11][j110][j111..] + a * B[k][..]; } }

gcc does not keep such an array in registers once it holds more than a few
vectors: its scalar replacement gives up and every accumulator is stored
(and partly reloaded) at each step of the reduction loop (GEMM's 6 x 2 block
on AVX2, 16 registers: 47 ms for 1024^3 on Zen 3, LLVM 20 ms).  Every index
of every access is known when the code is printed, though -- constants, or
unrolled loops' values -- so each register of the tile gets a name
(``C_local__v7``, a ``tp_f32x8``) and each access becomes that variable; the
vector loops are printed as vector statements (:mod:`codegen.c.widen`), and
gcc allocates the block's registers as LLVM does.

Held so only when every access to the array qualifies (checked before the
declaration is printed, :meth:`RegTileMixin.named_tile`): inside a vector
loop of constant length that :meth:`codegen.c.widen.WidenMixin.constant_vector_loop`
prints (plain stores of ``+ - * /`` over contiguous or invariant loads), the
last index that loop's variable, the register's lanes dividing the last
dimension, and every other index a constant or the variable of a loop
unrolled in the source between the declaration and the access (constant
bounds, at most 64 iterations; or a constant start and an unroll factor of
at most 64, whose partial tile :meth:`codegen.c.emit.CPrinter.unrolled` then
prints as guarded copies, ``if (1 < n) { const int64_t x = 1; ... }``); and the tile in 3/4 of the vector registers
(the auto-scheduler's block: 6 x 2 of 16, 6 x 4 of 32; the rest hold the
other operand's vectors and the broadcast).  Otherwise the array is printed
as before.
"""
from __future__ import annotations

import math

from .. import ir, loops, target, vectorize
from .widen import FAST, SUF, body_bits, plain_body


class RegTileMixin:
    """Needs :class:`codegen.c.emit.CPrinter` and :class:`codegen.c.widen.WidenMixin`."""

    named: dict = None        # array -> (constant dims, lanes of one register)

    def named_tile(self, alloc: ir.Allocate, dims) -> int | None:
        """The lanes of one register if ``alloc`` (its ``dims`` constant) can
        be held as named vector variables, else None."""
        if self.wide is not None or alloc.dtype not in FAST or not dims or None in dims:
            return None
        n = loops.host_lanes(ir.ELSIZE[alloc.dtype] * 8)
        if n < 2 or dims[-1] % n or math.prod(dims) // n > target.vector_registers() * 3 // 4:
            return None             # a larger tile would spill anyway: the array, as before
        consts = dict(self.fn.constants)
        found = [False]                         # an access seen

        def unrolled_in_source(s) -> bool:      # as CPrinter.unrolled prints it, copy by copy
            lo, hi = ir.const_eval(s.lo, consts), ir.const_eval(s.hi, consts)
            factor = s.attrs.get("unroll")
            if lo is None or int(s.step) != 1:
                return False
            if hi is None:                      # a tile's, full and partial: guarded copies
                return isinstance(factor, int) and 0 < factor <= 64
            return hi - lo <= 64 and (factor is None or factor == hi - lo)

        def index_ok(index, vloop, unrolled):
            if not (isinstance(index[-1], ir.Var) and index[-1].name == vloop.var):
                return False
            for e in index[:-1]:
                if ir.const_eval(e, consts) is not None:
                    continue
                if not (isinstance(e, ir.Var) and e.name in unrolled):
                    return False
            return True

        def vector_loop_ok(s):
            lo, hi = ir.const_eval(s.lo, consts), ir.const_eval(s.hi, consts)
            if s.kind != "vector" or s.attrs.get("reduction") or s.attrs.get("dot") \
                    or loops.nested(s.body) or int(s.step) != 1 or lo != 0 or hi != dims[-1] \
                    or not plain_body(s):
                return False
            if min(hi, loops.host_lanes(body_bits(s.body))) != n:
                return False
            return vectorize.plan(s)[0] is not None

        def visit(s, vloop, unrolled) -> bool:
            if isinstance(s, ir.For):
                if s.kind == "vector":
                    if vloop is not None:
                        return False
                    touches = any(_names(st, alloc.array) for st in ir.walk_stmts(s.body))
                    if touches and not vector_loop_ok(s):
                        return False
                    return all(visit(x, s, unrolled) for x in ir.stmt_children(s))
                if s.kind == "unrolled" and unrolled_in_source(s):
                    inner = unrolled | {s.var}
                else:
                    inner = unrolled - {s.var}
                return all(visit(x, vloop, inner) for x in ir.stmt_children(s))
            if isinstance(s, ir.Allocate) and s.array == alloc.array:
                return False                    # shadowed: keep it simple
            accesses = _names(s, alloc.array)
            if accesses and (vloop is None or not all(index_ok(ix, vloop, unrolled) for ix in accesses)):
                return False
            found[0] = found[0] or bool(accesses)
            return all(visit(x, vloop, unrolled) for x in ir.stmt_children(s))

        return n if visit(alloc.body, None, frozenset()) and found[0] else None

    def declare_named_tile(self, alloc: ir.Allocate, dims, n: int, ind: int) -> None:
        vt = f"tp_{SUF[alloc.dtype]}x{n}"
        self.helper(f"tp_vec_{SUF[alloc.dtype]}x{n}")
        count = math.prod(dims) // n
        init = " = {0}" if alloc.zero_init else ""
        self.out(ind, f"/* {alloc.array}{''.join(f'[{d}]' for d in dims)}: {count} registers, "
                      "named (codegen.c.regtile) */")
        names = [f"{alloc.array}__v{r}{init}" for r in range(count)]
        for k in range(0, count, 6):
            self.out(ind, f"{vt} {', '.join(names[k:k + 6])};")

    def touches_named(self, s: ir.For) -> bool:
        """Whether loop ``s`` reads or writes a named tile."""
        return bool(self.named) and any(_names(st, a) for st in ir.walk_stmts(s.body)
                                        for a in self.named)

    def named_register(self, array: str, index):
        """C text of the current chunk's (or lane's) part of a named tile's
        access ``array[index]``, or None if ``array`` is not one."""
        if not self.named or array not in self.named or self.wide is None:
            return None
        dims, n = self.named[array]
        wd = self.wide
        consts = dict(self.fn.constants, **(self.known or {}))
        flat = 0
        for e, d in zip(index[:-1], dims[:-1]):
            v = ir.const_eval(e, consts)
            if v is None:
                raise ValueError(f"C backend: the register tile {array} is indexed by "
                                 f"{e!r}, not known where it is printed")
            flat = flat * d + v
        flat = flat * dims[-1] + wd.chunk * wd.n
        name = f"{array}__v{flat // n}"
        return name if wd.lane is None else f"{name}[{wd.lane}]"


def _names(s, array):
    """The indices of ``s``'s own loads and stores of ``array`` (not those of
    statements nested in it)."""
    out = [s.index] if isinstance(s, ir.Store) and s.array == array else []
    for e in ir.stmt_exprs(s):
        out += [x.index for x in ir.walk_exprs(e) if isinstance(x, ir.Load) and x.array == array]
    return out

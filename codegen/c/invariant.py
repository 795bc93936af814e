"""C backend: loads a vector loop repeats, read once before it (mixed into the
C emitter).

A fused row's ``e[i][j] = exp(X[i][j] - mx[i])`` reads ``mx[i]`` at every
lane.  Inside an OpenMP region gcc may not see that the loop's stores leave
``mx`` alone (the outlined function's pointers lose their ``restrict``): it
reloads it per iteration and then refuses to vectorise the loop ("control
flow in loop": softmax with reassociated sums, 4096x1024 on C, 9.1 ms; with
the loads read before the loops 2.8 ms).  Printed instead::

    const float tp_inv1 = mx[i];          /* read once: the loop does not write mx */
    #pragma omp simd
    for (int64_t j1 = 0; j1 < 16; j1++) {
      e[i][16 * j0 + j1] = tp_exp_f32(X[i][16 * j0 + j1] - tp_inv1);
    }

Only a loop that runs at least once (constant bounds), and only loads every
iteration makes (not in a select's arm or an ``if``), whose index reads
neither the loop's variable nor a value bound inside it, from an array the
loop does not store to: the same reads, earlier, of values that do not
change."""
from __future__ import annotations

from .. import ir
from ..ir import expr_key
from .syntax import CTYPES
from .widen import reads_var


class InvariantMixin:
    """Needs :class:`codegen.c.emit.CPrinter` (``expr``, ``out``)."""

    hoisted: dict = None             # expr_key of a load -> the C name holding it
    ninvariant = 0

    def hoist_invariant_loads(self, s: ir.For, ind: int) -> None:
        """Prints the declarations of ``s``'s invariant loads; the loop's
        printer reads them through :attr:`hoisted` (and restores it after)."""
        before = self.hoisted
        lo, hi = ir.const_eval(s.lo, self.fn.constants), ir.const_eval(s.hi, self.fn.constants)
        if lo is None or hi is None or hi <= lo:
            return
        stored, bound = set(), set()
        for st in ir.walk_stmts(s.body):
            if isinstance(st, ir.Store):
                stored.add(st.array)
            elif isinstance(st, ir.Let):
                bound.add(st.name)
            elif isinstance(st, ir.For):
                return
        found = dict(before or {})
        for e in _unconditional_loads(s.body):
            key = expr_key(e)
            if key in found or e.array in stored \
                    or any(reads_var(i, s.var, bound) for i in e.index) \
                    or any(isinstance(x, ir.Load) for i in e.index for x in ir.walk_exprs(i)):
                continue
            self.ninvariant += 1
            name = f"tp_inv{self.ninvariant}"
            self.out(ind, f"const {CTYPES[e.dtype]} {name} = {self.expr(e)};")
            found[key] = name
        self.hoisted = found


def _unconditional_loads(st):
    """The loads every run of ``st`` evaluates (not inside an ``if`` or a
    select's arms), in order."""
    if isinstance(st, ir.Block):
        for x in st.stmts:
            yield from _unconditional_loads(x)
    elif isinstance(st, ir.Let):
        yield from _loads(st.value)
        yield from _unconditional_loads(st.body)
    elif isinstance(st, ir.Store):
        for e in (*st.index, st.value):
            yield from _loads(e)


def _loads(e):
    """The loads ``e`` evaluates whatever its selects choose (iterative: an
    expression may be deep)."""
    stack = [e]
    while stack:
        x = stack.pop()
        if isinstance(x, ir.Load):
            yield x
        stack.extend(reversed([x.cond] if isinstance(x, ir.Select) else ir.expr_children(x)))

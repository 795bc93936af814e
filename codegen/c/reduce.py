"""C backend: a loop of reductions into accumulators it does not index, as
scalars under an OpenMP reduction clause (mixed into the C emitter).

``for k: A[idx] = A[idx] op e`` with ``idx`` invariant in ``k`` (a vector
loop whose reduction the user let reassociate, or a parallel one) is printed
as a local accumulator the loop reduces::

    {
      double tp_acc_jv1 = tmp[i];
      #pragma omp simd reduction(+: tp_acc_jv1)
      for (int64_t jv1 = 0; jv1 < 8; jv1++) {
        tp_acc_jv1 = tp_acc_jv1 + A[i][8 * jv0 + jv1] * x[8 * jv0 + jv1];
      }
      tmp[i] = tp_acc_jv1;
    }

Several such statements fused in one loop (gesummv's two dot products of a
row, ``tmp[i] += A[i][j] x[j]`` and ``y[i] += B[i][j] x[j]``) get one
accumulator each (``tp_acc_jv1_0``, ``tp_acc_jv1_1``), provided no statement
reads an array the loop reduces into (it would read the accumulator's stale
memory).  Before, such a loop was printed scalar with the accumulators
loaded and stored at every iteration (gesummv LARGE with reassociation: 0.5x
the unscheduled kernel)."""
from __future__ import annotations

from .. import ir
from .syntax import CTYPES, SUFFIX
from .widen import reads_var

OPS = {"add": "+", "sub": "+", "mul": "*", "max": "max", "min": "min"}


def omp_op(op: str, dt: str, em) -> str:
    """The OpenMP reduction identifier of ``op`` on ``dt``: the built-in one,
    or for float min/max a declared one that keeps NaN (OpenMP's ``max``
    does not); ``em`` the printer that collects the helpers."""
    if op in ("max", "min") and ir.is_float(dt):
        em.helper(f"tp_{op}_{SUFFIX[dt]}")
        return em.helper(f"tp_omp_{op}_{SUFFIX[dt]}")
    return OPS[op]


class ReductionMixin:
    """:meth:`vector_reduction` for the C printer."""

    def reduction_stores(self, s: ir.For):
        """``(stores, targets)``: the Stores of ``s``'s body and the C of the
        elements they update, when each is ``A[idx] = A[idx] op e`` with
        ``idx`` free of ``s``'s variable, their elements distinct and no
        ``e`` reading an array they store to; else None."""
        body = s.body.stmts if isinstance(s.body, ir.Block) else [s.body]
        targets = []
        for st in body:
            if not isinstance(st, ir.Store) or not isinstance(st.value, ir.Binary) \
                    or st.value.op not in OPS:
                return None
            old = st.value.a
            target = self.access(st.array, st.index)
            if not isinstance(old, ir.Load) or old.array != st.array or \
                    self.access(old.array, old.index) != target:
                return None
            if any(reads_var(i, s.var) for i in st.index):
                return None
            targets.append(target)
        if not body or len(set(targets)) != len(targets):
            return None
        stored = {st.array for st in body}
        if any(isinstance(n, ir.Load) and n.array in stored
               for st in body for n in ir.walk_exprs(st.value.b)):
            return None
        return body, targets

    def vector_reduction(self, s: ir.For, ind: int, pragma: str = "simd") -> bool:
        """``s`` as accumulators under ``#pragma omp simd|parallel for
        reduction`` (see the module); False when its body is not such
        stores."""
        found = self.reduction_stores(s)
        if found is None:
            return False
        body, targets = found
        accs = [f"tp_acc_{s.var}" if len(body) == 1 else f"tp_acc_{s.var}_{k}"
                for k in range(len(body))]
        clauses = {}
        for st, acc in zip(body, accs):
            clauses.setdefault(omp_op(st.value.op, st.value.dtype, self), []).append(acc)
        self.out(ind, "{")
        for st, acc, target in zip(body, accs, targets):
            self.out(ind + 1, f"{CTYPES[st.value.dtype]} {acc} = {target};")
        self.out(ind + 1, f"#pragma omp {pragma} " + " ".join(
            f"reduction({op}: {', '.join(names)})" for op, names in clauses.items()))
        self.out(ind + 1, self.for_header(s, int(s.step)))
        saved = (self.omp, self.in_parallel)
        self.omp = "simd" if pragma == "simd" else "parallel"
        self.in_parallel = self.in_parallel or pragma != "simd"
        self.loop_depth += 1
        for st, acc in zip(body, accs):
            dt = st.value.dtype
            update = ir.Binary(st.value.op, ir.Var(acc, dt), st.value.b, dt)
            self.out(ind + 2, f"{acc} = {self.expr(update)};")
        self.loop_depth -= 1
        self.omp, self.in_parallel = saved
        self.out(ind + 1, "}")
        for acc, target in zip(accs, targets):
            self.out(ind + 1, f"{target} = {acc};")
        self.out(ind, "}")
        return True

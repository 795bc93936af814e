"""The auto-scheduler's interchange for parallelism (a mixin of
:class:`~tiramisu_py.driver.auto_schedule.AutoScheduler`, run before its
other steps): a loop nest inside a serial outer loop turned inside out so
that the outer loop's iterations become a parallel inner loop.

Cholesky's row ``i`` runs its dot products ``A[i][j] -= A[i][k] * A[j][k]``
over ``j < i`` and then its diagonal: every ``i`` reads the rows before it,
and every ``j`` the columns before it, so neither loop runs in parallel as
written.  Interchanged (``j`` outside, ``i`` inside), after the diagonal of
row ``j`` (the statements of the outer loop that are not in the nest, moved
first), column ``j`` of every row below it is independent: ``i`` is
parallel, the same computation in each element (no reassociation)."""
from __future__ import annotations

from ..analysis import schedule_space as space
from .auto_steps import StmtRef, loop_names


class Interchange:
    """:meth:`inner_parallel` (module doc)."""

    def inner_parallel(self):
        """Each top-level group of statements (one outer loop, none touched
        by a command of the user's) with a nest of statements sharing their
        second loop, apart from other statements of the outer loop, where
        neither of the nest's two loops runs in parallel, nor any loop of
        the other statements (LU's upper row does, in blocks: the other
        rules' parallelism, left to them): the nest's two
        loops interchanged, the nest moved after the group's other
        statements (sharing the outer loop), and its new inner loop
        parallelised, if the whole is legal and that loop has the work of a
        parallel region (:meth:`too_little_work`).  True if any was kept."""
        groups = {}
        for name, st in self.state().items():
            groups.setdefault(st.consts[0], []).append(name)
        kept = False
        for key in sorted(groups):
            names = groups[key]
            if self.out_of_time():
                break
            if len(names) > 2 and not any(n in self.touched for n in names):
                kept = self.interchange_nest(names) or kept
        return kept

    def interchange_nest(self, names):
        st = self.state()
        if not all(st[n].loops for n in names) or len({loop_names(st[n])[0] for n in names}) != 1:
            return False
        outer = loop_names(st[names[0]])[0]
        nests = {}
        for n in names:
            loops = loop_names(st[n])
            if len(loops) >= 2:
                nests.setdefault((st[n].consts[1], loops[1]), []).append(n)
        for (_, inner), nest in nests.items():
            others = [n for n in names if n not in nest]
            if not others or len(nest) < 2:
                continue
            if any(outer in space.parallel_loops(self.model, self.deps, st, n)
                   or inner in space.parallel_loops(self.model, self.deps, st, n)
                   for n in nest) \
                    or any(space.parallel_loops(self.model, self.deps, st, n) for n in others):
                continue          # the other rules' case: a loop already parallel (LU's upper row)
            if self.try_interchange(nest, others, outer, inner):
                return True
        return False

    def try_interchange(self, nest, others, outer, inner):
        before = len(self.applied)
        steps = [self.step(n, "interchange", outer, inner) for n in nest]
        steps.append(self.step(nest[0], "after", StmtRef(self.f, others[-1]), outer))
        steps += [self.step(n, "after", StmtRef(self.f, p), outer)
                  for p, n in zip(nest, nest[1:])]
        if not self.attempt(steps):
            return False
        if all(self.too_little_work(n, outer) for n in nest) \
                or not self.may_be_parallel(nest, outer) \
                or not self.attempt([self.step(n, "parallelize", outer) for n in nest]):
            self._drop(len(self.applied) - before)
            return False
        return True


__all__ = ["Interchange"]

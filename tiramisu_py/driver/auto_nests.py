"""The auto-scheduler's changes to the nests themselves (a mixin of
:class:`~tiramisu_py.driver.auto_schedule.AutoScheduler`): the interchange
for parallelism (:meth:`Nests.inner_parallel`, run before the other steps)
and the distribution of a deep statement into a nest of its own
(:meth:`Nests.distribute_deep`, the band step's first move).

The interchange: a loop nest inside a serial outer loop turned inside out so
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


class Nests:
    """:meth:`inner_parallel` and :meth:`distribute_deep` (module doc)."""

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
        parallel region (:meth:`too_little_work`)."""
        for names in self.top_groups():
            if self.out_of_time():
                break
            if len(names) > 2 and not any(n in self.touched for n in names):
                self.interchange_nest(names)

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
        def par(n):
            return set(space.parallel_loops(self.model, self.deps, st, n))
        for (_, inner), nest in nests.items():
            others = [n for n in names if n not in nest]
            if not others or len(nest) < 2:
                continue
            if any({outer, inner} & par(n) for n in nest) or any(par(n) for n in others):
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

    def distribute_deep(self, names):
        """When one statement of the group has a deeper tileable nest than the
        loops the group has in common (3 or more loops with reuse across
        them: PolyBench's gemm, ``C *= beta`` fused in ``i`` with ``C += A
        B`` over ``i, k, j``; 2mm's products, initialised in ``i, j``;
        covariance's Gram update between its zeros and its finish), that
        statement runs after the ones before it in a nest of its own
        (``after(prev, None)``), to be tiled there with its reduction loop,
        and the ones after it follow in a nest of theirs, fused as they were
        at the group's shared loops; where that order is illegal, it runs
        last, after all the others (symm's ``C[k][j] += alpha B[i][j]
        A[i][k]``, whose element row ``i = k`` finished first).  Returns the parts (the statements
        before, the deep one, the ones after; empty ones left out) if kept,
        else None."""
        st = self.state()
        band = self.common_band(names)
        for k, deep in enumerate(names):
            loops = loop_names(st[deep])
            depth = min(4, len(loops), space.data_dependent_from(self.model, deep))
            if depth < 3 or len(band) >= depth \
                    or not self.reuse_needs_tiles(deep, loops[:depth]):
                continue
            before, after = names[:k], names[k + 1:]
            steps = [self.step(deep, "after", StmtRef(self.f, before[-1]), None)] if before \
                else []
            if after:
                steps.append(self.step(after[0], "after", StmtRef(self.f, deep), None))
                shared = band[-1] if band else None
                steps += [self.step(n, "after", StmtRef(self.f, p), shared)
                          for p, n in zip(after, after[1:])]
            if steps and self.attempt(steps):
                return [part for part in (before, [deep], after) if part]
            others = before + after
            if after and self.attempt([self.step(deep, "after", StmtRef(self.f, others[-1]),
                                                 None)]):
                return [others, [deep]]      # last, where a later statement adds to its array
            return None
        return None


__all__ = ["Nests"]

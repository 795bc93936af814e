"""Step 0 of :mod:`tiramisu_py.driver.auto_schedule`: storage that frees the
schedule.  A computation moved into a buffer of its own (``store_in``) where
its storage keeps the program from being scheduled as it could be: an update
that reads its accumulator's array at other elements
(:meth:`Storage.private_accumulators`: trisolv, cholesky, trmm) is no
reduction until its sums live apart from the array.  (Expanding a computation
folded into a smaller temporary, symm's ``temp2[j]`` for ``t[i, j]``, was
tried: PolyBench LARGE symm kept its speed, 7.7x over plain, so it is not
done.)  A move is kept only where the array's memory keeps its meaning
(:func:`~tiramisu_py.poly.dataflow.memory_view`) and the whole schedule is
legal.  And after a group is scheduled, a temporary that the group's
statements write and read inside one iteration of the loops they share
(softmax's exponentials, in blocks of rows) is stored in a buffer that one
iteration fills (:meth:`Storage.shrink_to_blocks`): it stays in cache instead
of going to memory and back.  A mixin of
:class:`~tiramisu_py.driver.auto_schedule.AutoScheduler` (its
``apply_checked``, ``step``, ``model``, ``deps``, ``touched``, ``state``)."""
from __future__ import annotations

import math
import re

from ..analysis import schedule_space as space
from ..lang import affine
from ..lang.affine import NonAffine
from ..lang.expr import Const
from ..poly import dataflow, footprint
from .auto_steps import new_buffer, store_index


class Storage:
    """The storage steps of the search (mixed into AutoScheduler)."""

    def private_accumulators(self):
        """An update that reads its accumulator's array at other elements
        (trisolv's ``x[i] -= L[i][j] * x[j]``, cholesky's ``A[i][j] -=
        A[i][k] * A[j][k]``) is no reduction: nothing tells the element it
        accumulates apart from those it reads.  Its computation stored in a
        buffer of its own makes it one: one element (``store_in(f.buffer(
        'x0_acc', (1,), ...), [0])``: a register to the C compiler, vectors
        of partial sums where reassociation is allowed) where the
        computation's loops all carry a dependence (nothing is lost to
        parallelism), else a slot per iteration of its bounding box, sizes
        known (trmm's ``B[i][j] += A[k][i] * B[k][j]``, its columns in
        parallel).  Kept when the update is then a reduction, the array's
        memory keeps its meaning (every other read, and the array's final
        content, sees the same writes: a finishing statement such as
        trisolv's ``x[i] = x0[i] / L[i][i]`` writes the array) and the
        schedule is legal."""
        for m in list(self.model.stmts):
            comp = getattr(m.stmt, "parent", None)
            if self.out_of_time():
                return
            if not m.stmt.is_update or m.name in self.deps.reductions \
                    or not self.movable(comp, "_acc"):
                continue
            if space.parallel_loops(self.model, self.deps, self.state(), comp.name):
                store = self.box_store(comp, "_acc")
            else:
                store = (new_buffer(comp.name + "_acc", (1,), ("computations", comp.name)), [0])
            if store is not None and self.moved(comp, store, lambda deps, u=m.name:
                                                u in deps.reductions) and store[1:] == ([0],):
                self.local_sums.add(m.name)      # in a local scalar: no local copy to make

    def shrink_to_blocks(self, names, cache_bytes):
        """A temporary of the group ``names`` (an array compile allocates, its
        computation with no update and no command of the user's), read only
        by statements of the group that share its outer loops, stored in a
        buffer ``<name>_block`` the size of what one iteration of those loops
        writes: a dimension covered whole indexed from its lower bound, the
        others modulo their width (one iteration's elements never share a
        slot).  Only where the array (of known size) exceeds ``cache_bytes``
        and the block is at most a quarter of it; kept when the schedule is
        legal (a parallel loop's iterations get blocks of their own)."""
        st = self.state()
        for comp in self.f.computations.values():
            buf = comp.buffer
            if comp.name not in names or comp.updates or comp.name in self.touched \
                    or not getattr(comp, "_auto_buffer", False) or buf is None \
                    or buf.kind != "temp" or comp.name + "_block" in self.f.buffers:
                continue
            readers = {m.name for m in self.model.stmts for a in m.accesses
                       if a.buffer.name == buf.name and not a.write}
            if not readers or not readers <= set(names):
                continue
            sizes = [_known(d, self.f.fixed) for d in buf.shape]
            if None in sizes \
                    or math.prod(sizes) * space.element_bytes(self.model, comp.name) <= cache_bytes:
                continue                    # (fits in the cache: no isl work for it)
            depth = _shared_depth([st[n] for n in readers | {comp.name}])
            if depth == 0:
                continue
            widths = footprint.block_widths(self.model, st, comp.name, depth)
            if None in widths or 4 * math.prod(widths) > math.prod(sizes):
                continue
            try:
                box = self.model.bounding_box(self.model.by_name[comp.name])
            except ValueError:
                continue
            index = []
            for k, (w, (lo, ext)) in enumerate(zip(widths, box)):
                whole = isinstance(ext, Const) and ext.value == w \
                    and (lo is None or isinstance(lo, Const))
                start = int(lo.value) if whole and lo is not None else 0
                index.append(0 if w == 1 else (k, "-", start) if start else (k, "", 0) if whole
                             else (k, "%", w))
            buffer = new_buffer(comp.name + "_block", widths, ("computations", comp.name))
            self.apply_checked([self.step(comp.name, "store_in", buffer,
                                          store_index(comp.name, index))])

    def stream_outputs(self, names, cache_bytes):
        """A computation of the group ``names`` that writes each element of
        its array once (indexed by its own loops, in some order, each plus a
        constant at most), that no
        statement reads and no other writes, larger than ``cache_bytes``
        (the host's last-level cache), its innermost loop vectorised along
        the element's last index, writes past the caches
        (``store_nontemporal``): its lines are not read in before they are
        written (a write-bound loop moves a third less memory).  Not on C
        where a vector is narrower than a cache line (AVX2): its streamed
        rows are assembled line by line (``codegen/c/stream.py``), and a
        9-point stencil's 4094 x 4094 output took 9.6 ms so on Zen 3, 3.7
        cached (LLVM streams it in 3.8).  The knob
        ``stream`` (False: never) is noted only where a computation
        qualifies; kept when the schedule is legal."""
        st = self.state()
        for comp in self.f.computations.values():
            buf = comp.buffer
            if comp.name not in names or comp.updates or comp.name in self.touched \
                    or buf is None or st[comp.name].nontemporal:
                continue
            m = self.model.by_name[comp.name]
            accesses = [(x.name, a) for x in self.model.stmts for a in x.accesses
                        if a.buffer.name == buf.name]
            if len(accesses) != 1 or accesses[0][0] != comp.name or not accesses[0][1].write:
                continue                    # (read, or written by another too)
            loops = _own_loops(accesses[0][1].index, m.vars, self.f.fixed)
            if loops is None:
                continue
            sizes = [_known(d, self.f.fixed) for d in buf.shape]
            if None in sizes \
                    or math.prod(sizes) * space.element_bytes(self.model, comp.name) <= cache_bytes:
                continue
            inner = st[comp.name].loops[-1] if st[comp.name].loops else None
            tag = st[comp.name].tags.get(inner.name) if inner else None
            if tag is None or tag.kind != "vector" \
                    or not re.search(rf"\b{re.escape(loops[-1])}\b", inner.expr):
                continue
            if self.target != "llvm" and self.lanes(comp.name) * space.element_bytes(
                    self.model, comp.name) < 64:
                continue        # C assembles a line from narrower vectors: slower than caching
            if self.knob("stream", True):
                self.apply_checked([self.step(comp.name, "store_nontemporal")])

    def movable(self, comp, suffix):
        """True when ``comp`` (and its updates) are the search's to move: in
        a buffer the user chose, none of them given a command, the new
        buffer's name free."""
        names = {comp.name} | {u.name for u in comp.updates}
        return comp.buffer is not None and not getattr(comp, "_auto_buffer", False) \
            and not names & self.touched and comp.name + suffix not in self.f.buffers

    def box_store(self, comp, suffix):
        """``store_in`` arguments giving ``comp`` a buffer ``<comp><suffix>``
        with a slot per iteration of its domain's bounding box, indexed by its
        loops; None unless the box's bounds are constants and it holds no more
        elements than the array it leaves (sizes known)."""
        try:
            box = self.model.bounding_box(self.model.by_name[comp.name])
        except ValueError:
            return None
        if not all(isinstance(e, Const) and (lo is None or isinstance(lo, Const))
                   for lo, e in box):
            return None
        shape = tuple(int(e.value) for _, e in box)
        sizes = [_known(d, self.f.fixed) for d in comp.buffer.shape]
        if None in sizes or math.prod(shape) > math.prod(sizes):
            return None
        buffer = new_buffer(comp.name + suffix, shape, ("computations", comp.name))
        if all(lo is None for lo, _ in box):
            return (buffer,)            # indexed by its loops (store_in's default)
        return buffer, store_index(comp.name, [(k, "-", int(lo.value)) if lo is not None
                                               else (k, "", 0) for k, (lo, _) in enumerate(box)])

    def moved(self, comp, store, accept):
        """``comp.store_in(*store)``, kept when ``accept(deps)`` holds of the
        new analysis, the array it leaves keeps its meaning
        (:func:`~tiramisu_py.poly.dataflow.memory_view`, its final content
        included) and the schedule is legal.  True if kept."""
        array = comp.buffer.name
        before = dataflow.memory_view(self.model, array)
        if before is None:
            return False

        def same_memory(model, deps):
            after = dataflow.memory_view(model, array)
            # (each model has an isl context of its own: compared in the new one)
            return accept(deps) and after is not None \
                and all(type(a)(str(b), context=model.ctx).is_equal(a)
                        for a, b in zip(after, before))
        return self.apply_checked([self.step(comp.name, "store_in", *store)], accept=same_memory)


def _shared_depth(states):
    """The loops the schedules ``states`` share, outermost first: as many as
    have the same position and name in each (the same loop of one nest)."""
    first, depth = states[0], 0
    while all(len(s.loops) > depth and s.consts[depth] == first.consts[depth]
              and s.loops[depth].name == first.loops[depth].name for s in states):
        depth += 1
    return depth


def _own_loops(index, loop_vars, fixed):
    """The loop each index of the write ``index`` is (``v`` or ``v + c``,
    ``c`` constant: the default buffer of a domain that starts at 1), or
    None unless they are the statement's loop variables, each once (every
    element written by one iteration)."""
    names = []
    for e in index:
        try:
            form = affine.linear(e, values=fixed)
        except NonAffine:
            return None
        terms = [(a, c) for a, c in form.items() if a != 1 and c]
        if len(terms) != 1 or terms[0][1] != 1 or not isinstance(terms[0][0], str):
            return None
        names.append(terms[0][0])
    if len(set(names)) != len(names) or set(names) != {v.name for v in loop_vars}:
        return None
    return names


def _known(e, fixed):
    """The value of the size ``e`` with the params ``fixed``; None when it
    is not a constant then."""
    try:
        form = affine.linear(e, values=fixed)
    except NonAffine:
        return None
    return form.get(1, 0) if affine.is_const(form) else None

"""Step 4 of :mod:`tiramisu_py.driver.auto_schedule`, per statement: its
point loops (the stride-1 loop innermost and vectorised, the short loop
around it unrolled), the register block of a GEMM-like reduction, and the
local accumulation of a reduction.  A mixin of
:class:`~tiramisu_py.driver.auto_schedule.AutoScheduler` (its ``attempt``,
``state``, ``step``, ``lanes``, ``model``, ``deps``, ``opt``)."""
from __future__ import annotations

import re

import islpy as isl

from codegen import target as host

from ..analysis import legality, schedule_space as space
from ..base.errors import IllegalScheduleError
from ..commands.atomic import restore as _restore, snapshot as _snapshot
from ..commands.state import extent_of
from ..lang.expr import Access, walk
from ..poly.footprint import footprint_widths
from ..poly.padding import padded_reads
from .auto_steps import StmtRef as _StmtRef, loop_names as _names, new_buffer, statement, \
    store_index

VECTOR_SUMS = 4             # registers of partial sums of a reassociated reduction
STENCIL_ROWS = 4            # rows of a stencil computed per vector strip (:meth:`stencil_rows`)
ROW_VECTORS = 4             # vectors of rows a transposed dot product keeps in flight
                            # (:meth:`transposed_rows`; the copy's blocks: codegen.c.transpose)
MAX_TAPS = 4                # a register block's innermost reduction loop unrolled up to this long


class PointLoops:
    """The per-statement steps of the search (mixed into AutoScheduler)."""

    # -- register blocks ----------------------------------------------------
    def block_plan(self, names, band):
        """For a lone reduction whose written element's last index is a band
        loop read stride-1 (or not at all), the register block: ``col``
        that loop (j), ``row`` another band loop of the element that no read
        indexes together with ``col`` (GEMM's ``C[i][j] += A[i][k] *
        B[k][j]``: i, whose ``A`` is broadcast while ``B``'s vectors serve
        every row; a convolution's output channel ``o``, not its row ``y``,
        which the input reads with ``x``), ``reds`` the reduction loops (the
        loops the element leaves out, in order: k; c, ky, kx), ``red`` the
        last of them in the band (the packed tiles' loop), ``mr`` rows by
        ``nv`` vectors, 3/4 of the host's vector registers (6 x 4 with 32);
        else None."""
        if len(names) != 1 or not (self.opt["vectorize"] and self.opt["unroll"]):
            return None
        stmt = names[0]
        if stmt not in self.deps.reductions or len(band) < 3 \
                or space.has_data_dependent_loop(self.model, stmt):
            return None
        index = space.written_vars(self.model, stmt)
        col = space.stride_one_var(self.model, stmt)
        if len(index) < 2 or index[-1] != [col] or col not in band:
            return None
        row = self.block_row(stmt, index, col, band)
        loops = _names(self.state()[stmt])
        reds = [lp for lp in loops if all(lp not in vs for vs in index)]
        red = ([lp for lp in reds if lp in band] or [None])[-1]
        if row is None or not reds:
            return None
        pack = self.transposed_reads(stmt, col, red) if red else []
        if pack is None:
            return None
        regs = host.vector_registers()
        nv = self.knob("nv", 4 if regs >= 32 else 2)
        self.used.setdefault("extents", (extent_of(self.f, stmt, row), extent_of(self.f, stmt, col)))
        self.used.setdefault("lanes", self.lanes(stmt))
        mr = self.knob("mr", self.block_rows(stmt, col, reds, band, regs, nv))
        return {"row": row, "col": col, "red": red, "reds": reds, "nv": nv, "mr": mr,
                "pack": pack, "width": extent_of(self.f, stmt, col)}

    def block_rows(self, stmt, col, reds, band, regs, nv):
        """Rows of the register block.  A GEMM-like block (its reduction loop
        in the band, tiled): accumulators in 3/4 of the vector registers (6
        rows of 4 vectors with 32).  A reduction with loops outside the band
        (a convolution's ``c, ky, kx``): half of them, as the library's NCHWc
        block measured (4 rows; padded 8x64x56x56 3x3 on Zen 5, LLVM: 4 rows
        8.7 ms, 6 rows 34.9); 2 when a read along the columns is guarded by a
        select that no padded copy removes (:meth:`pad_guarded`; each row
        evaluates its guarded loads, 2 rows 10.4 ms, 4 rows 16.1, 6 rows 26.8)."""
        if all(r in band for r in reds):
            return max(1, min(8, regs * 3 // 4 // nv))
        padded = self.guarded_inputs(stmt) if self.opt["pad"] else []
        guarded = any(a.guards and not a.write and col in _indexed_by(a) and a.what not in padded
                      for a in self.model.by_name[stmt].accesses)
        return 2 if guarded else max(1, min(8, regs // 2 // nv))

    def block_row(self, stmt, index, col, band):
        """The innermost band loop of the element's other indices (each one
        loop alone) that no read of ``stmt`` indexes together with ``col``,
        or None."""
        reads = [a for a in self.model.by_name[stmt].accesses if not a.write and not a.implicit]
        for vs in reversed(index[:-1]):
            if len(vs) != 1 or vs[0] not in band or vs[0] == col:
                continue
            if not any({vs[0], col} <= _indexed_by(a) for a in reads):
                return vs[0]
        return None

    def transposed_reads(self, stmt, col, red):
        """The reads of ``stmt`` strided along ``col`` as text (``A[j, k]``),
        each a 2-D input read ``[col, red]`` (syrk's ``A[j][k]``: packed per
        tile into ``[red][col]`` by :meth:`pack_transposed`), ``[]`` for none;
        None when another read is strided along ``col``."""
        out = []
        for a in self.model.by_name[stmt].accesses:
            names = [repr(e) for e in a.index]
            if a.write or not any(col in space.loop_names(e) for e in a.index[:-1]):
                continue
            if names != [col, red] or self.f.buffers.get(a.buffer.name) is None \
                    or self.f.buffers[a.buffer.name].kind != "input":
                return None
            text = f"{a.buffer.name}[{', '.join(names)}]"
            if text not in out:
                out.append(text)
        return out

    def pack_transposed(self, stmt, block):
        """Each read of ``block["pack"]`` (``A[j, k]``, strided along the
        register block's columns) copied per column tile (``cache_at`` at the
        tile loop) into a tile buffer ``[k % Tk][j % Tj]`` (``store_in``):
        the block's vectors then load it contiguously.  The copy is a new
        statement: the model is analysed again.  True if kept (the tile then
        holds no other change)."""
        sizes = self.tile_of.get(stmt)
        if not sizes:
            return False
        col, red = block["col"], block["red"]

        def steps():
            for text in block["pack"]:
                buf = text.split("[")[0]
                copy = f"{stmt}_{buf}_packed"
                yield self.step(stmt, "cache_at", text, col + "0", name=copy)
                tile = new_buffer(copy + "_tile", (sizes[red], sizes[col]), ("buffers", buf))
                at = store_index(copy, [(1, "%", sizes[red]), (0, "%", sizes[col])])
                yield self.step(copy, "store_in", tile, at)
        return self.apply_checked(steps())

    def apply_checked(self, steps, accept=None):
        """Applies ``steps`` (made lazily: a copy one step makes is named by
        the next) one at a time, then checks the schedule: kept, the model
        analysed again (a copy is a new statement), or the Function restored.
        ``accept(model, deps)``: a further condition on the new model.  True
        if kept."""
        snap = _snapshot(self.f)
        done = []
        try:
            for step in steps:
                step.apply(self.f)
                done.append(step)
            model, deps, _ = legality.analyse(self.f)
            if accept is not None and not accept(model, deps):
                raise ValueError("not accepted")
            legality.check(model, deps, self.f._commands)
        except (IllegalScheduleError, ValueError, TypeError, KeyError, isl.Error):
            _restore(snap)
            return False
        self.model, self.deps = model, deps
        self.applied += done
        return True

    def register_block(self, stmt, block):
        """The point loops of a tiled :meth:`block_plan` statement as a
        register block inside the reduction's point loop: ``mr`` rows
        (unrolled) by ``nv`` vectors (unrolled, vectorised), each step one
        load of each B vector and one broadcast per row feeding ``mr * nv``
        multiply-adds into accumulators that :meth:`register_accumulate`
        keeps local over the reduction's point loop (its order of additions
        per element unchanged).  True if kept."""
        lanes = self.lanes(stmt)
        r, c = block["row"] + "1", block["col"] + "1"
        reds = self.red_points(stmt, block)
        ext = extent_of(self.f, stmt, r)
        if ext is not None and ext < block["mr"]:
            return False
        # a row shorter than the block's vectors: as many as cover it, the last partial
        ext = extent_of(self.f, stmt, c)
        nv = block["nv"] if ext is None else min(block["nv"], -(-ext // lanes))
        if nv < 1:
            return False
        width = nv * lanes
        if block["pack"] and not self.pack_transposed(stmt, block):
            return False
        return self.attempt([
            self.step(stmt, "split", c, width),            # c0, c1
            self.step(stmt, "split", c + "1", lanes),      # c10, c11
            self.step(stmt, "split", r, block["mr"]),      # r0, r1
            self.step(stmt, "reorder", r + "0", c + "0", *reds, r + "1", c + "10", c + "11"),
            self.step(stmt, "unroll", r + "1"),
            self.step(stmt, "unroll", c + "10"),
            self.step(stmt, "vectorize", c + "11", lanes)])

    def unroll_taps(self, stmt, block):
        """A register block's innermost reduction loop unrolled when it is a
        few taps outside the band (a convolution's ``kx``, 3 long): each tap
        a copy of the block's multiply-adds in the source, so no compiler
        runs a loop of 3 around them (gcc's complete peeling is off where it
        miscompiles, :data:`codegen.toolchain.PEEL_FLAGS`)."""
        if self.out_of_time() or not self.opt["unroll"]:
            return
        tap = self.red_points(stmt, block)[-1]
        ext = extent_of(self.f, stmt, tap)
        if tap in block["reds"] and ext is not None and 1 < ext <= MAX_TAPS:
            self.attempt([self.step(stmt, "unroll", tap)])

    def pad_guarded(self, stmt, block):
        """Each input read of a register-blocked ``stmt`` guarded by its own
        bounds (a convolution's zero padding) copied with its padding
        (``cache_at``: no guard left in the block) at the outermost loop
        inside the parallel ones and outside the reduction whose footprint
        fits in half of L2 (one image's rows of a tile), into a tile buffer
        of that footprint (``cache_at(..., tile=True)``), its rows
        vectorised.  True if kept."""
        st = self.state()[stmt]
        loops = _names(st)
        first = loops.index(self.red_points(stmt, block)[0])
        par = max([k for k, lp in enumerate(loops[:first]) if st.tags.get(lp)
                   and st.tags[lp].kind == "parallel"], default=-1)
        texts = self.guarded_inputs(stmt)
        for loop in loops[par + 1:first] if texts else ():
            snap = _snapshot(self.f)
            if self.pad_at(stmt, texts, loop):
                return True
            _restore(snap)
        return False

    def guarded_inputs(self, stmt):
        """The reads of ``stmt`` (as written, ``inp[n, c, ((y + ky) - 1), ..]``)
        of inputs guarded by their own bounds, that a padded copy can hold."""
        texts, obj = [], statement(self.f, stmt)
        for a in (x for x in walk(obj.value) if isinstance(x, Access)):
            buf = self.f.buffers.get(a.target.name)
            if buf is a.target and buf.kind == "input" and repr(a) not in texts \
                    and padded_reads(self.f, obj, buf, a):
                texts.append(repr(a))
        return texts

    def pad_at(self, stmt, texts, loop):
        """The padded copies of :meth:`pad_guarded` at ``loop``; False (the
        caller restores the Function) when one does not fit or is refused."""
        steps = []
        try:
            for k, text in enumerate(texts):
                copy = f"{stmt}_{text.split('[')[0]}_padded" + (str(k) if k else "")
                steps.append(self.step(stmt, "cache_at", text, loop, name=copy, tile=True))
                steps[-1].apply(self.f)
                size = self.f.computations[copy].dtype.bits // 8
                for w in footprint_widths(self.f, copy):
                    size *= w
                if size > l2_bytes() // 2:
                    return False
                var = self.f.computations[copy].vars[-1].name
                steps.append(self.step(copy, "vectorize", var, self.lanes(stmt)))
                steps[-1].apply(self.f)
            model, deps, _ = legality.analyse(self.f)
            legality.check(model, deps, self.f._commands)
        except (IllegalScheduleError, ValueError, TypeError, KeyError, isl.Error):
            return False
        self.model, self.deps = model, deps
        self.applied += steps
        return True

    def pack_panels(self, stmt, block):
        """Each input read of a GEMM-like register block along its columns
        and its tiled reduction that the block's rows do not index (GEMM's
        ``B[k, j]``: one tile serves every row block of the row tile) copied
        per reduction tile into a tile buffer (``cache_at(..., tile=True)`` at
        ``k0``, its rows vectorised), as BLIS packs its B panel: read in
        place, the tile's rows lie a whole matrix row apart, so a 64 x 64
        tile of a 1024-wide matrix maps to a few L1 sets and evicts itself
        (GEMM 1024 on Zen 3: 24 -> 18 ms).  Only where the row tile holds
        at least four register blocks (the copy is then read four times or
        more) and the array's rows are longer than the tile's.  True if
        kept."""
        sizes = self.tile_of.get(stmt)
        red, col, row = block["red"], block["col"], block["row"]
        loops = _names(self.state()[stmt])
        if not sizes or red is None or red + "0" not in loops or block["pack"] \
                or sizes.get(row, 0) < 4 * block["mr"] \
                or block["width"] is None or block["width"] <= sizes[col]:
            return False
        texts, obj = [], statement(self.f, stmt)
        for a in (x for x in walk(obj.value) if isinstance(x, Access)):
            names = [repr(e) for e in a.indices]
            buf = self.f.buffers.get(a.target.name)
            if buf is not a.target or buf.kind != "input" or names[-2:] != [red, col] \
                    or repr(a) in texts:
                continue
            texts.append(repr(a))
        if not texts:
            return False

        def steps():
            for k, text in enumerate(texts):
                copy = f"{stmt}_{text.split('[')[0]}_panel" + (str(k) if k else "")
                yield self.step(stmt, "cache_at", text, red + "0", name=copy, tile=True)
                var = self.f.computations[copy].vars[-1].name       # made by the step before
                yield self.step(copy, "vectorize", var, self.lanes(stmt))
        return self.apply_checked(steps())

    def red_points(self, stmt, block):
        """The reduction loops of the block as they are named in ``stmt``'s
        tiled nest: a band loop's point loop (``k1``), the others as they are
        (a convolution's ``c, ky, kx``, outside the band)."""
        names = _names(self.state()[stmt])
        return [r + "1" if r + "1" in names else r for r in block["reds"]]

    def block_accumulate(self, stmt, block):
        """The register block's accumulators kept local over all of its
        reduction loops (from the outermost: a convolution's ``c``, its
        ``ky, kx`` inside adding to the same registers), else over the
        innermost loop that allows it (:meth:`register_accumulate`)."""
        if self.out_of_time():
            return
        if not self.attempt([self.step(stmt, "accumulate_locally",
                                       self.red_points(stmt, block)[0])]):
            self.register_accumulate(stmt)

    # -- reductions ---------------------------------------------------------
    def register_accumulate(self, stmt):
        """A reduction accumulates over its innermost loop that leaves the
        updated element fixed in a local tile copied in and out
        (``accumulate_locally`` without reassociation: the program's order,
        bit for bit), so the element stays in a register instead of being
        loaded and stored at every step (a C compiler cannot keep it there
        when it cannot prove the arrays apart, e.g. in an OpenMP region)."""
        if self.out_of_time() or stmt not in self.deps.reductions or stmt in self.local_sums:
            return
        if space.has_data_dependent_loop(self.model, stmt):
            return                      # data-dependent bounds: left as written
        st = self.state()[stmt]
        loops = _names(st)
        for k in range(len(loops) - 1, -1, -1):
            if st.tags.get(loops[k]):
                continue
            if self.attempt([self.step(stmt, "accumulate_locally", loops[k])]):
                return

    def vector_reduction_loop(self, stmt):
        """The innermost loop of ``stmt``, a reduction the user allows to
        reassociate (``reassociate=True``, or its ``allow_reassociation()``),
        when that loop is one of its reduction loops (the element leaves it
        out), untagged, every read contiguous or invariant along it and at
        least the lanes long (sizes known); else None."""
        if not self.opt["vectorize"] or stmt not in self.deps.reductions \
                or not (self.opt["reassociate"] or stmt in self.reassociable) \
                or space.has_data_dependent_loop(self.model, stmt):
            return None
        st = self.state()[stmt]
        names = _names(st)
        if not names or st.tags.get(names[-1]):
            return None
        red = names[-1]
        # the statement's loop variable the loop runs over (a split's part j1:
        # "((j) mod 16)"); none or several (a collapsed loop): not a reduction loop
        over = {v.name for v in self.model.by_name[stmt].vars
                if re.search(rf"\b{re.escape(v.name)}\b", st.loops[-1].expr)}
        if len(over) != 1:
            return None
        root = over.pop()
        if any(root in vs for vs in space.written_vars(self.model, stmt)) \
                or space.strided_reads(self.model, stmt, root):
            return None
        ext = extent_of(self.f, stmt, red)
        return red if ext is None or ext >= self.lanes(stmt) else None

    def reduction_vector(self, stmt):
        """A reduction allowed to reassociate, vectorised along its innermost
        reduction loop (:meth:`vector_reduction_loop`: a row's sum, a dot
        product's ``j``): partial sums in the lanes, combined after the loop
        (``vectorize(..., allow_reassociation=True)``), :data:`VECTOR_SUMS`
        vectors of them where the loop is that long (``vectorize(j, 4 L)``:
        a vector of partial sums 4 registers wide, whose adds do not wait on
        each other).  True if kept."""
        red = self.vector_reduction_loop(stmt)
        if red is None:
            return False
        lanes, ext = self.lanes(stmt), extent_of(self.f, stmt, red)
        sums = self.knob("sums", VECTOR_SUMS)
        widths = [sums * lanes] if sums > 1 and (ext is None or ext >= sums * lanes) else []
        if not any(self.attempt([self.step(stmt, "vectorize", red, w, allow_reassociation=True)])
                   for w in widths + [lanes]):
            return False
        self.local_sums.add(stmt)        # its sums are in vector registers: no local copy
        return True

    # -- point loops --------------------------------------------------------
    def point_loops(self, stmt, move=True, vector=True, before=(), after=()):
        """The stride-1 loop innermost and vectorised (the loop around it
        unrolled when short).  ``before``: the statements of the group that
        precede ``stmt``; when moving the loop breaks the order a shared loop
        gave them (an initialisation and its reduction fused in ``i, j``:
        ``k`` moved out of ``j``), ``stmt`` is placed after the last of them
        at the loop above the moved ones; ``after``: the statements that
        follow it, placed after it there too when the order needs it (a
        reduction's finishing statements)."""
        if self.out_of_time() or (vector and self.reduction_vector(stmt)):
            return
        var = space.stride_one_var(self.model, stmt)
        st = self.state()[stmt]
        names = _names(st)
        inner = var + "1" if var and var + "1" in names else var
        if inner not in names or st.tags.get(inner):
            return
        fixed = space.has_data_dependent_loop(self.model, stmt)
        if names[-1] != inner and space.strided_reads(self.model, stmt, var):
            # innermost, the loop would read an operand down a column
            # (cholesky's A[j][k] along j) and could not be vectorised
            return
        if move and names[-1] != inner and not fixed:
            k = names.index(inner)
            rest = [n for n in names[k + 1:] if not st.tags.get(n)]
            if rest and len(rest) == len(names) - k - 1:
                move_it = [self.step(stmt, "reorder", *rest, inner)]
                if not self.attempt(move_it) and k > 0 and (before or after):
                    # distributed at the loop above: after the group's
                    # previous statement, the following ones after it
                    # (a reduction's finishing statements, fused in i, j)
                    head = [self.step(stmt, "after", _StmtRef(self.f, before[-1]),
                                      names[k - 1])] if before else []
                    tail = [self.step(n, "after", _StmtRef(self.f, p), names[k - 1])
                            for p, n in zip([stmt, *after], after)]
                    if not self.attempt(head + move_it) and tail:
                        if not self.attempt(head + move_it + tail):
                            self.swap_past_next(stmt, move_it, k, after)
        if self.state()[stmt].loops[-1].name != inner or not self.opt["vectorize"] or not vector:
            return
        if self.shared_over_deeper(stmt, inner, (*before, *after)):
            return
        if space.strided_reads(self.model, stmt, var):
            return      # lanes would gather a strided operand: slower than the scalar loop
        if self.compiler_vectorises(stmt):
            return
        if not self.attempt([self.step(stmt, "vectorize", inner, self.lanes(stmt))]):
            return
        if not self.opt["unroll"]:
            return
        names = _names(self.state()[stmt])
        if len(names) >= 2 and names[-2] == inner + "0":
            ext = extent_of(self.f, stmt, names[-2])
            if ext is not None and 1 < ext <= 8:
                self.attempt([self.step(stmt, "unroll", names[-2])])
        self.jam_stencil_rows(stmt)

    # -- dot products' rows in the lanes -----------------------------------
    def dot_rows(self, stmt, band):
        """``stmt`` is a dot product per row (:meth:`jam_rows`' statement):
        a reduction, untagged, not reassociated, its loops the band's (in
        order) but the innermost, which the element it writes leaves out."""
        st = self.state()[stmt]
        loops = _names(st)
        return stmt in self.deps.reductions and not st.tags \
            and self.vector_reduction_loop(stmt) is None \
            and 2 <= len(loops) <= len(band) + 1 and loops[:-1] == band[:len(loops) - 1] \
            and space.written_vars(self.model, stmt) == [[x] for x in loops[:-1]]

    def transposed_rows(self, names, band):
        """A lone dot product per row, ``y[b][i] += A[b][i][j] * x[b][j]``
        (:meth:`jam_rows`' statement: the row loop ``i`` and the reduction
        ``j`` innermost, ``A`` its one read strided along ``i``, ``[..., i,
        j]``), on C with sizes known, both multiples of the lanes ``L``
        (``2L`` rows at least): ``i`` and ``j`` split by ``L``, ``i0, j0,
        j1, i1``; the ``L x L`` tile of ``A`` copied per ``j0`` into a tile
        buffer transposed, ``[j % L][i % L]`` (``cache_at`` + ``store_in``:
        the C printer moves it through registers, codegen.c.transpose); the
        rows a vector over ``i1`` updated once per ``j1`` (unrolled), each
        lane adding in the program's order (no reassociation).  With the
        knob ``row_vectors`` ``R`` > 1 (default :data:`ROW_VECTORS`, halved
        until it divides the rows), ``R`` vectors of rows at once: ``i``
        split by ``R L`` and then ``L`` (``i0, j0, j1, i10, i11``, ``i10``
        unrolled), an ``R L x L`` tile: ``R`` chains of multiply-adds in
        flight, not one waiting on the last.  The peers' bmv 512x256x256 on
        C: 12.3 -> 7.3-7.8 ms (one vector), 6.8-7.6 -> 5.0-5.9 (4).  True
        if kept."""
        if self.target == "llvm" or len(names) != 1 or not (self.opt["vectorize"]
                                                           and self.opt["unroll"]):
            return False
        stmt = names[0]
        if not self.dot_rows(stmt, band) or space.has_data_dependent_loop(self.model, stmt):
            return False
        loops = _names(self.state()[stmt])
        row, red, lanes = loops[-2], loops[-1], self.lanes(stmt)
        for lp in (row, red):
            ext = extent_of(self.f, stmt, lp)
            if ext is None or ext % lanes or ext < (2 if lp == row else 1) * lanes:
                return False
        a = self.row_read(stmt, row, red)
        if a is None:
            return False
        vectors, rows = self.knob("row_vectors", ROW_VECTORS), extent_of(self.f, stmt, row)
        while vectors > 1 and rows % (vectors * lanes):
            vectors //= 2

        def steps():
            yield self.step(stmt, "split", row, vectors * lanes)
            yield from self.lane_steps(stmt, row, red, vectors, a)
        return self.apply_checked(steps())

    def row_read(self, stmt, row, red):
        """``stmt``'s one read strided along its ``row`` loop, an array's
        ``[..., row, red]`` (neither loop in the other indices), else None."""
        strided = [a for a in self.model.by_name[stmt].accesses
                   if not a.write and not a.implicit
                   and any(row in space.loop_names(e) for e in a.index[:-1])]
        if len(strided) != 1 or [repr(e) for e in strided[0].index[-2:]] != [row, red] \
                or any({row, red} & space.loop_names(e) for e in strided[0].index[:-2]) \
                or self.f.buffers.get(strided[0].buffer.name) is None:
            return None
        return strided[0]

    def jam_lanes(self, rows, loop, jam):
        """On C, those of :meth:`jam_rows`' 32-bit rows that read one array
        strided along them, their reduction a multiple of the lanes long, in
        the lanes: ``{row: its steps}`` (``lane_steps``, made lazily: a
        transposed copy per vector of the reduction, the rows a vector
        updated in the program's order).  Softmax 4096x1024 float32 on Zen 3:
        5.6 -> 4.3 ms (its row max a vector max, not a select per row that
        gcc leaves scalar), layer norm 2.8 -> 2.4; float64 rows stay jammed
        (bicg, atax, gesummv LARGE: 1.25-1.4x slower in the lanes)."""
        if self.target == "llvm" or not self.opt["vectorize"]:
            return {}
        out = {}
        for n in rows:
            red, lanes = _names(self.state()[n])[-1], self.lanes(n)
            ext, a = extent_of(self.f, n, red), self.row_read(n, loop, red)
            if space.element_bytes(self.model, n) <= 4 \
                    and not (jam % lanes or ext is None or ext % lanes or a is None):
                out[n] = self.lane_steps(n, loop, red, jam // lanes, a)
        return out

    def lane_steps(self, stmt, row, red, vectors, a):
        """The steps putting ``row``'s point loop (``row1``, already split
        off, ``vectors`` vectors long) in the lanes, ``a`` (:meth:`row_read`)
        copied per vector of ``red`` transposed (:meth:`transposed_rows`)."""
        lanes = self.lanes(stmt)
        buf, nd = a.buffer.name, len(a.index)
        text = f"{buf}[{', '.join(repr(e) for e in a.index)}]"
        copy = f"{stmt}_{buf}_t"
        lane_loop = row + "11" if vectors > 1 else row + "1"
        yield self.step(stmt, "split", red, lanes)
        if vectors > 1:
            yield self.step(stmt, "split", row + "1", lanes)
            yield self.step(stmt, "reorder", row + "0", red + "0", red + "1", row + "10", lane_loop)
        else:
            yield self.step(stmt, "reorder", row + "0", red + "0", red + "1", lane_loop)
        yield self.step(stmt, "cache_at", text, red + "0", name=copy)
        yield self.step(copy, "store_in",
                        new_buffer(copy + "_tile", (lanes, vectors * lanes), ("buffers", buf)),
                        store_index(copy, [(nd - 1, "%", lanes), (nd - 2, "%", vectors * lanes)]))
        yield self.step(stmt, "vectorize", lane_loop, lanes)
        yield self.step(stmt, "unroll", red + "1")
        if vectors > 1:
            yield self.step(stmt, "unroll", row + "10")

    # -- stencil rows -------------------------------------------------------
    def stencil_rows(self, names, band):
        """A lone statement, no reduction, whose reads take rows again
        (:func:`~tiramisu_py.analysis.schedule_space.rows_read_again`: a
        9-point stencil's ``A[i + di][j + dj]``): its row loop, the band's
        loop around the stride-1 one, split by :data:`STENCIL_ROWS` before
        it is parallelised, so that :meth:`jam_stencil_rows` can compute that
        many rows per vector strip once the stride-1 loop has its vectors.
        The row loop parallel (no dependence carried: seidel-2d's is not),
        its size known and at least 4 blocks of rows per core (the parallel
        loop is not collapsed), enough work to run in parallel on C (else
        gcc vectorises the serial row whole), rows of more than 8 vectors
        (else :meth:`point_loops` unrolls their strips).  True if kept."""
        if len(names) != 1 or not (self.opt["vectorize"] and self.opt["unroll"]):
            return False
        stmt = names[0]
        if stmt in self.deps.reductions or space.has_data_dependent_loop(self.model, stmt):
            return False
        loops = _names(self.state()[stmt])
        if len(loops) < 2 or loops[-1] != space.stride_one_var(self.model, stmt) \
                or loops[-2] not in band or self.state()[stmt].tags:
            return False
        row, ext = loops[-2], extent_of(self.f, stmt, loops[-2])
        if ext is None or ext < STENCIL_ROWS * 4 * host.cores() \
                or row not in space.parallel_loops(self.model, self.deps, self.state(), stmt) \
                or not space.rows_read_again(self.model, stmt, row):
            return False
        if self.target != "llvm" and self.too_little_work(stmt, row):
            return False    # serial on C: gcc vectorises the row whole, no strips to jam
        cols = extent_of(self.f, stmt, loops[-1])
        if cols is not None and cols <= 8 * self.lanes(stmt):
            return False    # a row of at most 8 vectors: its strips are unrolled instead
        return self.attempt([self.step(stmt, "split", row, STENCIL_ROWS)])

    def jam_stencil_rows(self, stmt):
        """After :meth:`stencil_rows` split the rows and :meth:`point_loops`
        vectorised the stride-1 loop (``i0, i1, j0, j1``): the rows' point
        loop moved inside the vectors' strip loop and unrolled (``i0, j0,
        i1, j1``), each strip computing its rows' vectors together, the rows
        they share loaded once (9-point stencil 4096^2 on Zen 5, 2 threads:
        5.4 -> 4.5 ms on both targets).  True if kept."""
        st = self.state()[stmt]
        loops = _names(st)
        if len(loops) < 4 or getattr(st.tags.get(loops[-1]), "kind", None) != "vector":
            return False
        rows, strip = loops[-3], loops[-2]
        if not (rows.endswith("1") and rows[:-1] + "0" in loops and strip.endswith("0")) \
                or st.tags.get(rows) or st.tags.get(strip) \
                or extent_of(self.f, stmt, rows) != STENCIL_ROWS \
                or not space.rows_read_again(self.model, stmt, rows[:-1]):
            return False
        return self.attempt([self.step(stmt, "interchange", rows, strip),
                             self.step(stmt, "unroll", rows)])

    def swap_past_next(self, stmt, move_it, k, after):
        """The stride-1 loop moved in and ``stmt`` placed after the group's
        next statement in the loop it now shares with it at depth ``k``
        (LU's row update ``A[i][j] -= A[i][k] * A[k][j]`` in ``i, k, j``
        after the division ``A[i][k] /= A[k][k]`` at ``k``: the
        right-looking order, contiguous along ``j``).  True if kept."""
        if not after:
            return False
        theirs = _names(self.state()[after[0]])
        mine = _names(self.state()[stmt])
        if len(theirs) <= k or theirs[:k] != mine[:k]:
            return False
        return self.attempt(move_it + [self.step(stmt, "after", _StmtRef(self.f, after[0]),
                                                 theirs[k])])

    def compiler_vectorises(self, stmt):
        """True on the C target for a statement whose loops all run serially
        and that is no reduction: its innermost loop, stride-1 and
        unit-stride in every read, is what gcc's own vectoriser takes at -O3
        (restrict arrays, no OpenMP region hiding them), with its own
        alignment peeling; ``vectorize`` (``omp simd`` over strip-mined
        blocks) measured slower there (jacobi-1d 0.225 vs 0.177 ms)."""
        if self.target == "llvm" or stmt in self.deps.reductions:
            return False
        return not any(t.kind == "parallel" for t in self.state()[stmt].tags.values())

    def shared_over_deeper(self, stmt, loop, others):
        """True when ``loop``, ``stmt``'s innermost, is also a loop of one of
        ``others`` (fused: the same loop at the same depth) that runs more
        loops inside it (an initialisation fused with its reduction): strip
        mining it for ``stmt``'s vectors would split the shared loop for
        ``stmt`` alone, its blocks running against the others' elements."""
        st = self.state()
        names = _names(st[stmt])
        depth = len(names) - 1
        for n in others:
            theirs = _names(st[n])
            if len(theirs) > depth + 1 and theirs[:depth + 1] == names:
                return True
        return False


def l2_bytes() -> int:
    """The host's L2 size in bytes (1 MiB when it cannot be read)."""
    return host.cache_sizes().get((2, "Unified"), 1 << 20)


def llc_bytes() -> int:
    """The host's last-level cache in bytes (its L3; 8 L2s when it cannot
    be read)."""
    return host.cache_sizes().get((3, "Unified"), 8 * l2_bytes())


def _indexed_by(a) -> set:
    """The loops whose iterators the access ``a``'s indices use."""
    return set().union(*(space.loop_names(e) for e in a.index))

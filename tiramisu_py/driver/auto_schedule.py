"""``f.auto_schedule(target=None, budget=None)``: a legal, fast schedule chosen
from the exact dependences, applied through the language's own commands and
returned as them (:class:`Step`: each prints as the Python a user would write,
``f.computations['C'].update.tile('i', 'j', 'k', 32, 32, 64)``).

The search (per top-level group of statements, in program order; first, a
nest whose loops all carry inside a serial loop is turned inside out where that
makes a parallel loop: cholesky's columns, :mod:`.auto_nests`):

1. **Fusion** where it pays: a single-statement nest too shallow to tile
   that shares an array with the previous one joins its outermost loop
   (``after``), e.g. the rows of a softmax.
2. **Band**: a group with a statement deeper than the loops the group
   shares (3 or more loops with reuse: a GEMM's update fused with its
   initialisation in ``i``; covariance's between its zeros and its finish)
   first gives that statement a nest of its own (``after(prev, None)``),
   the statements after it another; then the loops all statements of the group share (same names, same
   depths, at most 4, none from a loop with data-dependent bounds on), when
   the group reuses data across them (a 2-D read that leaves a band loop out)
   or its first loop carries a dependence (a time loop), are made permutable, if they are not, by the smallest
   uniform shift of the later statements (all band loops but the first) and
   the smallest skews of each band loop by the outer ones (factors 0..2,
   found on the distance vectors, :mod:`tiramisu_py.analysis.schedule_space`),
   then tiled (``tile``; several statements: ``tile_band``) with sizes from
   the host's caches: a tile's arrays fit in a quarter of the L2 (a time loop gets
   16).
3. **Parallelism**: the outermost tile loop (or loop) that carries no
   dependence, never one of one iteration, is parallelised; when it has
   fewer than :data:`PARALLEL_PER_CORE` iterations per core, the loops
   nested directly in it that carry none are first ``collapse``d with it
   until they hold that many (one statement's loops, sizes known); on the
   C target its iterations are dealt round-robin (``schedule="static",
   chunk=1``) when a loop inside it has an extent that changes with it (a
   triangle).  When every loop carries one (time-tiled stencils) the
   tiles run as a **wavefront**: the last tile loop is skewed by the others,
   moved outermost, and the next one parallelised (untiled, the band's
   points, when each runs a loop of its own: nussinov); untiled statements that
   share only a loop carrying a dependence (fdtd-2d's time loop) each get
   their own outermost parallel loop inside it, after step 4.
4. **Point loops**: the statement's stride-1 loop (its written element's
   last index; none along which a read is strided: cholesky's ``A[j][k]``)
   is moved innermost (when a fused loop ordered them,
   distributing the nest at the loop above: the statement ``after`` the
   group's previous one, its finishing statements after it) and vectorised with the host's lanes (not when a read is strided along
   it: the lanes would gather it, nor when the loop is fused with a
   statement that runs loops inside it); the
   loop around it is unrolled when short; a lone GEMM-like reduction
   (``C[i][j] += A[i][k] * B[k][j]``, or a convolution's
   ``out[n][o][y][x] += w[o][c][ky][kx] * in[n][c][y + ky][x + kx]``) gets a
   register block instead (:meth:`AutoScheduler.register_block`: MR rows by
   NV vectors inside all of the reduction's loops, the rows a loop of the
   element that no read indexes together with the columns (``i``; the
   output channel ``o``), sized from the host's vector registers and
   accumulated locally over the outermost reduction loop; an input
   read along the other index, syrk's ``A[j][k]``, first copied per column
   tile into a ``[k][j]`` tile: ``pack_transposed``; GEMM's ``B[k][j]``,
   read along the columns, copied per reduction tile where four blocks of
   rows or more share it: ``pack_panels``); a reduction
   accumulates over its innermost loop that leaves the element fixed in a
   local tile copied in and out (``accumulate_locally`` without
   reassociation: the program's order); the rows of a dot
   product (``x[i] += A[i][j] * y[j]``) run 8 at a time, unrolled inside
   ``j`` (:meth:`AutoScheduler.jam_rows`, before step 3).
5. **Storage**: a temporary the group writes and reads in one iteration of
   its shared loops lives in a buffer of one iteration's elements
   (:meth:`Storage.shrink_to_blocks`: softmax's exponentials); an
   array larger than the last-level cache that one computation writes
   element by element along its vectorised loop and nothing in the
   Function reads is written past the caches (``store_nontemporal``,
   :meth:`Storage.stream_outputs`: a 9-point stencil's output).

Every step is given through the verbs users call and kept only if the exact
legality check (:func:`tiramisu_py.analysis.legality.check`) accepts the whole
schedule; otherwise it is undone.  Sizes fixed at declaration feed a small
cost model (a time band whose space fits in cache, or whose space tiles
would be small, is not time-tiled; a loop
with too little work per run is not parallelised); free sizes are assumed
large.  Reductions are reassociated only where the user allows it
(``auto_schedule(reassociate=True)``, or ``allow_reassociation()`` given to
the reduction before, which leaves its group to the search): such a
reduction whose innermost loop is one of its reduction loops, read
contiguously or not at all along it (a row's sum, a dot product's ``j``),
gets that loop vectorised with partial sums in the lanes
(:meth:`PointLoops.reduction_vector`) instead of jammed rows; elsewhere results
stay bit-identical to the program order.  A group that any user command
already touches is kept as given; the auto-scheduler only adds its
parallel and vector tags where none is (it completes a partial schedule and
replaces nothing).  ``budget`` (seconds, default :data:`DEFAULT_BUDGET`)
bounds the search: past it, what was applied is kept and returned.  The
result is a list (:class:`Applied`) whose ``notes`` name the groups left as
they were because their analysis failed."""
from __future__ import annotations

import itertools
import time

import islpy as isl

from codegen import target as host

from ..analysis import legality, schedule_space as space
from ..base.errors import IllegalScheduleError
from ..commands.state import extent_of, state_of
from ..poly import footprint
from .auto_nests import Nests
from .auto_point_loops import PointLoops, l2_bytes, llc_bytes
from .auto_storage import Storage
from .auto_steps import Applied, Step, StmtRef as _StmtRef, loop_names as _names, \
    statement as _statement
from .compile import default_target

DEFAULT_BUDGET = 5.0
TIME_TILE = 16
SIZES = (8, 16, 32, 64, 128, 256)
SIZES_1D = (512, 1024, 2048, 4096)     # a band with one space loop: its tiles are rows
PARALLEL_MIN = 1 << 14                 # iterations a parallel region must hold (known sizes)
EACH_MIN = 1 << 15                     # the same for a statement's own region inside a serial loop
BLOCK_VECTORS = 8                      # vectors in a parallel block of a stride-1 loop
MIN_SPACE_TILE = 64                    # smaller space tiles: a time loop is not tiled
JAM_ROWS = 8                           # rows of a dot product unrolled inside its loop
PARALLEL_PER_CORE = 4                  # iterations per core a parallel loop should have


class AutoScheduler(Storage, PointLoops, Nests):
    """The search of the module's doc over one Function.  ``options``
    (what :func:`tiramisu_py.tune` varies): ``tile`` (a size for every
    non-time band loop, instead of the cache rule), ``time_tile``,
    ``vectorize``, ``unroll``, ``fuse``, ``pad``, ``stream`` (bools), ``schedule`` (the parallel
    loops' OpenMP schedule, C target only), ``reassociate`` (every
    reduction may be reassociated: :meth:`PointLoops.reduction_vector`),
    and the sizes the rules otherwise fix: ``mr``, ``nv`` (a register
    block's rows and vectors), ``jam`` (:data:`JAM_ROWS`), ``sums``
    (:data:`~tiramisu_py.driver.auto_point_loops.VECTOR_SUMS`),
    ``block_vectors`` (:data:`BLOCK_VECTORS`).  ``used`` holds, after
    :meth:`run`, each of those options (and ``tile``, ``time_tile``) that a
    rule consulted, with the value it took: the knobs that matter to this
    Function (what :mod:`tiramisu_py.driver.tune_space` varies); with a
    register block also ``extents`` (its rows' and columns' loop lengths,
    None where unknown) and ``lanes``."""

    def __init__(self, f, target="cpu", budget=None, options=None):
        self.f, self.target = f, target
        self.deadline = time.perf_counter() + (DEFAULT_BUDGET if budget is None else budget)
        self.opt = {"tile": None, "time_tile": TIME_TILE, "vectorize": True, "unroll": True,
                    "fuse": True, "pad": True, "stream": None, "schedule": None,
                    "reassociate": False,
                    "mr": None, "nv": None, "jam": None, "sums": None, "block_vectors": None,
                    "row_vectors": None}
        unknown = set(options or {}) - set(self.opt)
        if unknown:
            raise ValueError(f"auto_schedule: unknown option(s) {', '.join(sorted(unknown))}; "
                             f"known: {', '.join(sorted(self.opt))}")
        self.opt.update(options or {})
        self.used = {}
        self.model, self.deps, _ = legality.analyse(f)
        self.applied = Applied()
        # a reduction the user allowed to reassociate (``allow_reassociation()``
        # alone) is not a schedule given: its group is still scheduled
        self.touched = {c.stmt for c in f._commands if c.op != "allow_reassociation"}
        self.reassociable = {c.stmt for c in f._commands if c.op == "allow_reassociation"}
        self.local_sums = set()          # reductions summing in registers already (lanes, a scalar)
        self.tile_of = {}               # statement -> {band loop: tile size}
        self.pinned = set()             # loops a later step names (not collapsed)

    # ------------------------------------------------------------ primitives
    def out_of_time(self):
        return time.perf_counter() > self.deadline

    def attempt(self, steps, check=True):
        """Gives ``steps`` in order; keeps them if each is accepted and the
        whole schedule is legal, else undoes them.  Returns True if kept."""
        done = 0
        try:
            for st in steps:
                st.apply(self.f)
                done += 1
            if check:
                # the whole check, order included: a split of one statement's
                # loop in a fused nest moves it against the others sharing that
                # loop (covariance's mean1/mean2), so no verb is exempt
                legality.check(self.model, self.deps, self.f._commands)
        except (IllegalScheduleError, ValueError, TypeError, isl.Error):
            for _ in range(done):
                self.f.undo()
            return False
        self.applied += steps
        return True

    def state(self):
        return state_of(self.f)

    def top_groups(self):
        """The statements by top-level group (their outermost position), in
        program order."""
        groups = {}
        for name, st in self.state().items():
            groups.setdefault(st.consts[0], []).append(name)
        return [groups[key] for key in sorted(groups)]

    def knob(self, name, default):
        """The option ``name`` if given, else ``default``; either way noted
        in :attr:`used` (the knobs this Function's schedule depends on)."""
        value = default if self.opt.get(name) is None else self.opt[name]
        self.used.setdefault(name, value)
        return value

    def lanes(self, stmt):
        """The host's SIMD lanes for the element ``stmt`` writes."""
        return max(1, host.vector_bits() // (8 * space.element_bytes(self.model, stmt)))

    def step(self, stmt, verb, *args, **kwargs):
        return Step(self.f, stmt, verb, *args, **kwargs)

    # ------------------------------------------------------------ the search
    def run(self):
        if any(st.at is not None for st in self.state().values()):
            return self.applied          # compute_at programs: left as written
        self.inner_parallel()
        self.private_accumulators()
        if self.opt["fuse"]:
            self.fuse()
        for names in self.top_groups():
            if self.out_of_time():
                break
            try:
                if any(n in self.touched for n in names):
                    self.complete(names)
                else:
                    self.schedule_group(names)
                    self.shrink_to_blocks(names, l2_bytes())
                    self.stream_outputs(names, llc_bytes())
            except (IllegalScheduleError, ValueError, TypeError, KeyError, isl.Error) as e:
                # what was kept is legal (each step was checked); say why the rest was not
                self.applied.notes.append(f"{', '.join(names)}: left as it is after "
                                          f"{type(e).__name__}: {str(e).splitlines()[0]}")
        return self.applied

    def fuse(self):
        """Step 1: shallow single-statement nests join the previous chain's
        outermost loop when they (or their computation's other statements)
        share an array with it."""
        order = sorted(self.state().items(), key=lambda kv: kv[1].consts[0])
        chain = []
        for name, st in order:
            if self.out_of_time():
                return
            if name in self.touched or not st.loops or len(st.loops) > 2 \
                    or len([n for n, o in self.state().items()
                            if o.consts[0] == st.consts[0]]) > 1:
                chain = []
                continue
            if chain and self.shares_array(chain, name):
                outer = self.state()[chain[-1]].loops[0].name
                if self.attempt([self.step(name, "after", _StmtRef(self.f, chain[-1]), outer)]):
                    chain.append(name)
                    continue
            chain = [name]

    def shares_array(self, chain, name):
        """True when ``name``'s computation (itself and its updates) and the
        statements of ``chain`` access a common array, one of them writing it."""
        def touched(names, write):
            return {a.buffer.name for n in names for a in self.model.by_name[n].accesses
                    if write is None or a.write == write}
        st = _statement(self.f, name)
        parent = st.parent if st.is_update else st
        family = [parent.name] + [u.name for u in parent.updates]
        return bool(touched(chain, True) & touched(family, None)) \
            or bool(touched(family, True) & touched(chain, None))

    def common_band(self, names):
        """The loop names every statement of ``names`` has at the same
        leading depths (at most 4)."""
        st = self.state()
        band = []
        depth = min([4] + [space.data_dependent_from(self.model, n) for n in names])
        for k, lp in enumerate(st[names[0]].loops[:depth]):
            if all(len(st[n].loops) > k and st[n].loops[k].name == lp.name for n in names):
                band.append(lp.name)
            else:
                break
        return band

    def schedule_group(self, names):
        parts = self.distribute_deep(names) if len(names) > 1 else None
        if parts:
            for part in parts:
                self.schedule_group(part)
            return
        band = self.common_band(names)
        st = self.state()
        deep = max(len(st[n].loops) for n in names)
        lead = names[0]
        tiled = carried = False
        block = self.block_plan(names, band)
        if len(band) >= 2:
            carried = not all(band[0] in space.parallel_loops(self.model, self.deps, st, n)
                              for n in names)
            reuse = any(self.reuse_needs_tiles(n, band) for n in names)
            if carried and (self.fits_in_cache(lead, band[1:])
                            or (self.opt["tile"] is None
                                and self.tile_sizes(lead, band, True)[1] < MIN_SPACE_TILE)):
                # known sizes, all in cache; or the caches' space tiles too small
                # for the skewed time tiles' halo (heat-3d: 16^3; a tile size the
                # tuner gives is tried as given): no time tiling
                carried = reuse = False
            if (deep >= 3 and reuse) or carried:
                tiled = self.tile_band(names, band, time_loop=carried,
                                       block=None if carried else block)
        if not tiled and band:
            self.transposed_rows(names, band) or self.jam_rows(names, band) \
                or self.stencil_rows(names, band)
        if tiled and block and block["pack"]:
            self.pinned.add(block["col"] + "0")      # the packed copies' loop
        par = self.parallelize(names, [n + "0" for n in band] if tiled
                               else _names(self.state()[lead]), wavefront=tiled)
        if not par and not tiled and len(band) >= 2 and deep > len(band):
            # every band loop carries and each point runs a loop of its own
            # (nussinov's max over k): the band's points as a wavefront
            par = self.parallelize(names, band, wavefront=True)
        each = not par and not tiled and len(names) > 1
        if tiled and not carried and block and self.register_block(lead, block):
            self.block_accumulate(lead, block)
            self.pack_panels(lead, block)
            if self.opt["pad"]:
                self.pad_guarded(lead, block)
            self.unroll_taps(lead, block)
            return
        for k, n in enumerate(names):
            # a skewed (time-tiled) point loop has unaligned bounds: strip-mining
            # it for vectors leaves short guarded loops; the C compiler
            # vectorises the whole point loop better
            self.point_loops(n, vector=not (tiled and carried), before=names[:k],
                             after=names[k + 1:])
        if each:
            # no loop the statements share runs in parallel (fdtd-2d's time
            # loop): each statement's own outermost parallel loop inside
            # them, then its stride-1 loop vectorised (not left to gcc now)
            for n in names:
                st = self.state()[n]
                own = [lp for lp in _names(st)[len(band):] if not st.tags.get(lp)]
                if self.parallelize([n], own, wavefront=False, least=EACH_MIN) \
                        or self.blocks_outward(n, own):
                    self.point_loops(n, move=False)
        for n in names:
            self.register_accumulate(n)

    def complete(self, names):
        """A group the user scheduled: only the missing tags."""
        st = self.state()
        if not any(t.kind == "parallel" for n in names for t in st[n].tags.values()):
            loops = _names(st[names[0]])
            self.parallelize(names, loops, wavefront=False, collapse=False)
        for n in names:
            if not any(t.kind == "vector" for t in self.state()[n].tags.values()):
                self.point_loops(n, move=False)

    # -- band ---------------------------------------------------------------
    def make_permutable(self, names, band):
        """Shifts and skews (kept) making ``band`` permutable; False if none
        of the small ones does."""
        dl = lambda: space.deltas(self.model, self.deps, self.state(), names)  # noqa: E731
        ok = lambda: all(space.permutable(self.model, self.state(), dl(), n, band)  # noqa: E731
                         for n in names[:1])
        if ok():
            return True
        for shift in (0, 1, 2):
            shifts = [self.step(n, "shift", lp, shift * k) for k, n in enumerate(names)
                      if k for lp in band[1:]] if shift else []
            if shifts and not self.attempt(shifts, check=False):
                continue
            kept = len(shifts)
            good = True
            for m in range(1, len(band)):
                found = False
                for factors in _factor_choices(m):
                    if self.out_of_time():
                        return self._drop(kept) and False
                    skews = [self.step(n, "skew", band[l], band[m], fct) for n in names
                             for l, fct in enumerate(factors) if fct]
                    if skews and not self.attempt(skews, check=False):
                        continue
                    d = dl()
                    if all(space.permutable(self.model, self.state(), d, n, band[:m + 1])
                           for n in names[:1]):
                        kept += len(skews)
                        found = True
                        break
                    self._drop(len(skews))
                if not found:
                    good = False
                    break
            if good:
                return True
            self._drop(kept)
        return False

    def _drop(self, count):
        for _ in range(count):
            self.f.undo()
            self.applied.pop()
        return True

    def tile_band(self, names, band, time_loop, block=None):
        before = len(self.applied)
        if not self.make_permutable(names, band):
            return False
        sizes = self.tile_sizes(names[0], band, time_loop, block)
        self.tile_of[names[0]] = dict(zip(band, sizes))
        if len(names) == 1:
            tile = [self.step(names[0], "tile", *band, *sizes)]
        else:
            tile = [self.step(None, "tile_band", [_StmtRef(self.f, n) for n in names],
                              list(band), list(sizes))]
        if self.attempt(tile):
            return True
        self._drop(len(self.applied) - before)       # the shifts and skews without the tile
        return False

    def tile_sizes(self, stmt, band, time_loop, block=None):
        e = space.element_bytes(self.model, stmt)
        arrays = space.arrays_touched(self.model, stmt)
        l2 = l2_bytes()
        lanes = self.lanes(stmt)
        if self.opt["tile"] is not None:
            size = self.opt["tile"]
        else:
            space_dims = len(band) - (1 if time_loop else 0)
            # a tile's footprint in each array: t^(its dimensions, at most the band's)
            dims = min(space_dims, max([len(a.index) for a in self.model.by_name[stmt].accesses]
                                       + [1]))
            size = SIZES[0]
            for t in SIZES + (SIZES_1D if space_dims == 1 else ()):
                if arrays * t ** dims * e <= l2 // 4:
                    size = t
        size = max(lanes, size - size % lanes)
        self.used.setdefault("tile", size)
        out = [size] * len(band)
        if time_loop:
            out[0] = self.knob("time_tile", TIME_TILE)
        if block:
            # whole register blocks per tile: rows a multiple of MR, columns of NV vectors
            width = block["nv"] * lanes
            r, c = band.index(block["row"]), band.index(block["col"])
            out[r] = self.rows_tile(stmt, block, out[r])
            out[c] = max(width, out[c] - out[c] % width)
            ext = block["width"]
            if ext is not None and out[c] < ext <= 4 * width:
                # a short row whole (a conv's 56 columns in 4 blocks of 16): a
                # part of it, its padded copy's halo makes the tile's index a
                # remainder the vectors cannot load (8x64x56x56 on AVX2: 650 ms)
                out[c] = -(-ext // width) * width
        return out

    def rows_tile(self, stmt, block, size):
        """Rows of a register-blocked tile: a multiple of the block's rows
        near ``size``, rounded up (by less than a block) where rounding down
        would add a tile to the parallel tile loop: 1024 rows in tiles of 128
        make 8 (4 a thread on 2 cores), in 126 (21 blocks of 6) 9, dealt 5
        and 4 (GEMM 1024 on C: 12.8-13.0 ms in 126-row tiles, 10.5-12.0 in
        128); in 132, 8 again."""
        mr = block["mr"]
        down = max(mr, size - size % mr)
        ext = extent_of(self.f, stmt, block["row"])
        if not ext or down == size:
            return down
        up = down + mr
        return up if -(-ext // up) == -(-ext // size) < -(-ext // down) else down

    # -- parallelism --------------------------------------------------------
    def parallelize(self, names, loops, wavefront, least=PARALLEL_MIN, collapse=True):
        for k, lp in enumerate(loops):
            if all(self.too_little_work(n, lp, least) for n in names):
                return False
            if not self.may_be_parallel(names, lp):
                continue
            if all(extent_of(self.f, n, lp) == 1 for n in names):
                continue                   # a parallel loop of one iteration runs on one core
            sched = self.schedule_of(names, lp)
            if not wavefront and self.parallel_blocks(names, lp, sched):
                return True
            if collapse and self.parallel_collapsed(names, loops[k:], sched):
                return True
            if self.attempt([self.step(n, "parallelize", lp, **sched) for n in names]):
                return True
        if wavefront and len(loops) >= 2 and not self.out_of_time():
            last = loops[-1]
            skews = [self.step(n, "skew", lp, last, 1) for n in names for lp in loops[:-1]]
            moves = [self.step(n, "reorder", last, *loops[:-1]) for n in names]
            par = [self.step(n, "parallelize", loops[0], **self.schedule_of(names, loops[0]))
                   for n in names]
            return self.attempt(skews + moves + par)
        return False

    def parallel_collapsed(self, names, loops, sched):
        """When ``loops[0]`` (known extent) has fewer than
        :data:`PARALLEL_PER_CORE` iterations per core, it and the loops
        nested directly in it (of ``loops``, each parallel, known extents,
        not :attr:`pinned`) are collapsed (``collapse``) until they hold that
        many, and the collapsed loop runs in parallel: a convolution's batch
        of 8 tiled by 16 ran its one tile on one core.  One statement only
        (a loop several share cannot be collapsed for one).  True if kept."""
        if len(names) != 1:
            return False
        stmt, want = names[0], PARALLEL_PER_CORE * host.cores()
        total = extent_of(self.f, stmt, loops[0])
        order = _names(self.state()[stmt])
        chain = [loops[0]]
        for nxt in loops[1:]:
            if total is None or total >= want:
                break
            ext = extent_of(self.f, stmt, nxt)
            if ext is None or nxt in self.pinned or order.index(nxt) != order.index(chain[-1]) + 1 \
                    or not self.may_be_parallel(names, nxt):
                break
            chain.append(nxt)
            total *= ext
        if len(chain) < 2 or chain[0] in self.pinned:
            return False
        steps, name = [], chain[0]
        for nxt in chain[1:]:
            steps.append(self.step(stmt, "collapse", name, nxt))
            name = f"{name}_{nxt}"
        return self.attempt(steps + [self.step(stmt, "parallelize", name, **sched)])

    def parallel_blocks(self, names, loop, sched):
        """When ``loop`` is the stride-1 loop of a statement that runs loops
        inside it (a matrix-vector product read along columns, ``x[i] +=
        A[j][i] * y[j]``), its blocks of :data:`BLOCK_VECTORS` vectors run in
        parallel instead (``split``, the outer part parallel) so that the
        inner part can still become the innermost, vectorised loop (point
        loops).  True if kept."""
        st = self.state()
        if not any(space.stride_one_var(self.model, n) == loop
                   and _names(st[n])[-1] != loop
                   and not space.strided_reads(self.model, n, loop) for n in names):
            return False                   # (a row's dot product stays as it is)
        size = self.block_size(names[0], loop)
        if size is None:
            return False
        sharing = [n for n in names if loop in _names(st[n])]
        return self.attempt([self.step(n, "split", loop, size) for n in sharing]
                            + [self.step(n, "parallelize", loop + "0", **sched) for n in sharing])

    def block_size(self, stmt, loop):
        """The iterations of a parallel block of ``stmt``'s stride-1
        ``loop``: :data:`BLOCK_VECTORS` vectors; None when ``loop`` (of known
        extent) has fewer than two blocks per core."""
        size = self.knob("block_vectors", BLOCK_VECTORS) * self.lanes(stmt)
        ext = extent_of(self.f, stmt, loop)
        return None if ext is not None and ext < 2 * size * host.cores() else size

    def jam_rows(self, names, band):
        """Rows of a dot product, ``x[i] += A[i][j] * y[j]`` over ``i, j``
        (the element indexed by every loop of the group's ``band`` but its
        reduction ``j``, innermost; ``y[b][i] += A[b][i][j] * x[b][j]`` over
        ``b, i, j`` too), ``j`` not vectorised (that would reassociate it):
        :data:`JAM_ROWS` rows of the band's last loop at a time, unrolled
        inside ``j`` (that many independent chains of multiply-adds instead
        of one, each in the program's order); the group split by the same
        blocks of that loop, its statements one after the other in a block.
        True if kept."""
        st = self.state()
        rows = [n for n in names if self.dot_rows(n, band)]
        if not rows or not self.opt["unroll"]:
            return False
        lead = _names(st[rows[0]])[:-1]
        loop = lead[-1]
        ext = extent_of(self.f, names[0], loop)
        jam = self.knob("jam", JAM_ROWS)
        if (ext is not None and ext < 2 * jam) \
                or not all(_names(st[n])[:len(lead)] == lead for n in names):
            return False
        rows = [n for n in rows if _names(st[n])[:-1] == lead
                and space.strided_reads(self.model, n, loop)]   # else: rows in lanes
        if not rows:
            return False
        steps = [self.step(n, "split", loop, jam) for n in names]
        steps += [self.step(n, "after", _StmtRef(self.f, p), loop + "0")
                  for p, n in zip(names, names[1:])]
        def jammed(n):
            inner = _names(st[n])[-1]
            return [self.step(n, "reorder", inner, loop + "1"), self.step(n, "unroll", loop + "1")]
        lanes = self.jam_lanes(rows, loop, jam)
        if lanes and self.apply_checked(itertools.chain(
                steps, *(lanes.get(n) or jammed(n) for n in rows))):
            return True
        return self.attempt(steps + [x for n in rows for x in jammed(n)])

    def blocks_outward(self, stmt, own):
        """When ``stmt``'s innermost loop (of ``own``, its loops inside the
        group's shared ones) is its stride-1 loop and the loops around it
        carry a dependence (LU's upper row, ``A[i][ju] -= A[i][ku] *
        A[ku][ju]`` over ``ku, ju``): blocks of :data:`BLOCK_VECTORS` vectors
        of it moved outside them and run in parallel, each block's part
        innermost.  True if kept."""
        inner = own[-1] if own else None
        if len(own) < 2 or inner != space.stride_one_var(self.model, stmt) \
                or space.strided_reads(self.model, stmt, inner):
            return False
        size = self.block_size(stmt, inner)
        work = self.extents(stmt, own)
        if size is None or (work is not None and work < EACH_MIN):
            return False
        return self.attempt([self.step(stmt, "split", inner, size),
                             self.step(stmt, "reorder", inner + "0", *own[:-1], inner + "1"),
                             self.step(stmt, "parallelize", inner + "0")])

    def schedule_of(self, names, loop):
        """The OpenMP schedule of parallel ``loop``: the one given in
        ``options``; else, on the C target, iterations dealt one at a time
        round-robin (``schedule="static", chunk=1``) when a loop inside it
        has an extent that changes with it (a triangle: a static split in
        halves gives one thread three quarters of the work); else none (the
        static default, contiguous halves)."""
        if self.opt["schedule"] is not None:
            return {"schedule": self.opt["schedule"]}
        if self.target == "llvm":
            return {}                    # static halves only
        st = self.state()
        for n in names:
            loops = _names(st[n])
            if loop in loops and any(
                    footprint.extent_varies_with(self.model, st, n, loop, inner)
                    for inner in loops[loops.index(loop) + 1:]):
                return {"schedule": "static", "chunk": 1}
        return {}

    def extents(self, stmt, loops):
        """The product of the extents of ``loops`` of ``stmt``, or None when
        one is not known (a size given only at call time)."""
        total = 1
        for lp in loops:
            e = extent_of(self.f, stmt, lp)
            if e is None:
                return None
            total *= e
        return total

    def reuse_needs_tiles(self, stmt, loops):
        """Whether a read reuses elements across ``loops``
        (:func:`~tiramisu_py.analysis.schedule_space.reuse_reads`), not
        counting one whose footprint between two uses (known sizes: the
        extents of the loops in its index inside the outermost loop it leaves
        out) fits in a quarter of the L2: its elements stay in
        cache untiled (a batched matrix-vector product's x rows: one row
        between two uses)."""
        order = _names(self.state()[stmt])
        for a, used in space.reuse_reads(self.model, stmt, loops):
            # the elements read between two uses of one: the index's loops
            # inside the outermost loop it leaves out (``x[b][j]`` over
            # ``b, i, j``: one row of ``j``, reused across ``i``)
            skip = min((order.index(lp) for lp in loops if lp not in used and lp in order),
                       default=0)
            n = self.extents(stmt, [lp for lp in order[skip:] if lp in used])
            if n is None or n * max(1, a.buffer.dtype.bits // 8) > l2_bytes() // 4:
                return True
        return False

    def fits_in_cache(self, stmt, loops):
        """Known sizes: the arrays over ``loops`` fit in half the L2."""
        n = self.extents(stmt, loops)
        l2 = l2_bytes()
        return n is not None and n * space.arrays_touched(self.model, stmt) \
            * space.element_bytes(self.model, stmt) <= l2 // 2

    def too_little_work(self, stmt, loop, least=PARALLEL_MIN):
        """Known sizes: one run of ``loop`` (with the loops inside it) has
        fewer than ``least`` iterations (:data:`PARALLEL_MIN`; a statement's
        own region inside a serial loop, run once per iteration of it:
        :data:`EACH_MIN`): a parallel region would cost more than it saves."""
        names = _names(self.state()[stmt])
        if loop not in names:
            return False
        n = self.extents(stmt, names[names.index(loop):])
        return n is not None and n < least

    def may_be_parallel(self, names, loop):
        """False when ``loop`` carries a dependence through an array that no
        thread could get its own copy of (not a temporary): the check would
        refuse it; a quick filter before the check."""
        st = self.state()
        for n in names:
            if loop not in _names(st[n]):
                return False
            c = legality.carried_by(self.model, self.deps, st, n, loop)
            if c is not None and self.f.buffers.get(c[0]) is not None \
                    and self.f.buffers[c[0]].kind != "temp":
                return False
        return True

def _factor_choices(m):
    """Skew factors of band loop ``m`` by loops ``0..m-1``, smallest first."""
    return sorted(itertools.product((0, 1, 2), repeat=m), key=lambda c: (sum(c), [-x for x in c]))


def auto_schedule(f, target=None, budget=None, options=None, reassociate=False):
    """Runs the search (module doc); returns the list of :class:`Step`.
    ``reassociate``: every reduction may be reassociated (as each one given
    ``allow_reassociation()`` before)."""
    if not isinstance(reassociate, bool):
        raise TypeError(f"auto_schedule: reassociate must be True or False, not {reassociate!r}")
    if budget is not None and (isinstance(budget, bool) or not isinstance(budget, (int, float))
                               or budget <= 0):
        raise ValueError(f"auto_schedule: budget must be a positive number of seconds, "
                         f"not {budget!r}")
    if target is not None and target not in ("cpu", "c", "llvm"):
        raise ValueError(f"auto_schedule: target must be 'cpu', 'c' or 'llvm' (the CPU "
                         f"targets it schedules for), not {target!r}")
    if target is None:
        # compile()'s default target: $TIRAMISU_PY_TARGET (a CPU one), else "cpu"
        target = default_target()
        target = target if target in ("cpu", "c", "llvm") else "cpu"
    opts = dict(options or {})
    if reassociate:
        opts["reassociate"] = True
    if target == "llvm":
        opts["schedule"] = None          # the LLVM backend deals static chunks only
    return AutoScheduler(f, target, budget, opts).run()

"""The scheduling commands users call on statements (``split``, ``tile``,
``parallelize``, ``vectorize``, ``bind``, ``compute_at``, ``cache_*`` ...):
each records a :class:`~tiramisu_py.lang.schedule.Command` in the
Function's command log and validates it at once by applying it to the
current schedule (errors name the user's call)."""
from __future__ import annotations

import copy

from ..base import provenance
from ..lang.expr import Access
from ..lang.program import Buffer, Computation, check_name
from ..lang.schedule import (MAX_UNROLL, OMP_SCHEDULES, TAG_OPS, Command, apply,
                             attaching_command, check_unroll, loop_name, replay)
from .atomic import all_or_nothing_call, atomic
from .copies import access_named, make_copy, store_in_tile, writers_in_root_item
from .gpu_copies import cache_local, cache_shared
from .gpu_pipeline import pipeline
from .state import extent_of, model_of, range_of, state_of


def _new_loop_names(names, count, text, arg):
    """Checks the loop names a command creates (``names=``/``name=``), with the
    same rule as every declared name (:func:`function.check_name`)."""
    if isinstance(names, str) or not isinstance(names, (tuple, list)) or len(names) != count:
        raise ValueError(f"{text}: {arg} must be {count} loop names, not {names!r}")
    for n in names:
        check_name(n, f"{text}: {arg}: loop")
    return tuple(names)



class Schedulable:
    """Scheduling commands, mixed into statements (computations and updates)."""

    def _command(self, op, *args, text, **kwargs):
        f = self.function
        call = provenance.current()
        cmd = Command(self.name, op, args, kwargs, text, call.text, call.where, call.id)
        state = state_of(f)
        at = attaching_command(f._commands, self.name) \
            if state[self.name].at is not None and op not in TAG_OPS else None
        if at is not None:
            # a loop transformation of a computed-at producer (e.g. a cache_at
            # copy) acts on its own loops: it takes effect before the compute_at
            commands = f._commands[:at] + [cmd] + f._commands[at:]
            trial = replay(model_of(f), commands)     # validate now: errors name the call
            f._commands[:] = commands
        else:
            trial = copy.deepcopy(state)
            apply(trial, cmd, len(f._commands))        # validate now: errors name the call
            f._commands.append(cmd)
        f._state_cache = trial
        return self

    @provenance.command
    def split(self, loop, factor, names=None):
        """Splits ``loop`` into ``loop0`` (outer, ``loop // factor``) and
        ``loop1`` (inner, ``loop % factor``); partial last tiles are fine."""
        n = loop_name(loop)
        text = f"{self.name}.split({n}, {factor})"
        names = _new_loop_names(names, 2, text, "names=") if names is not None \
            else (n + "0", n + "1")
        return self._command("split", n, factor, names, text=text)

    @provenance.command
    def tile(self, *args, names=None):
        """``tile(i, j, fi, fj)``, ``tile(i, j, k, fi, fj, fk)``, ... over any
        number of loops: loops ``i0, j0, ..., i1, j1, ...``.  The loops must
        be nested directly in that order.  Legal when the band is permutable
        for every dependence (decided exactly by the legality check)."""
        if len(args) < 2 or len(args) % 2:
            raise TypeError("tile takes one or more loops followed by as many factors "
                            f"(got {len(args)} arguments)")
        d = len(args) // 2
        loops = [loop_name(x) for x in args[:d]]
        factors = args[d:]
        text = f"{self.name}.tile({', '.join(loops)}, {', '.join(map(str, factors))})"
        if len(set(loops)) != d:
            raise ValueError(f"{text}: a loop is named twice")
        if names is None:
            names = [(n + "0", n + "1") for n in loops]
        else:
            if isinstance(names, str) or not isinstance(names, (tuple, list)) \
                    or len(names) != d:
                raise ValueError(f"{text}: names= must be {d} pairs of loop names, "
                                 f"not {names!r}")
            names = [_new_loop_names(p, 2, text, "names=") for p in names]
        return self._command("tile", loops, factors, names, text=text)

    @provenance.command
    def collapse(self, outer, inner, name=None):
        """``outer`` and ``inner`` (the loop nested directly in it) as one
        loop ``name`` (default ``outer_inner``) running both's iterations in
        the same order: ``outer * E + (inner - lo)``, where ``inner`` takes
        the values ``lo .. lo + E - 1`` (constants: the sizes fixed).
        Halide's and TVM's ``fuse``, OpenMP's ``collapse``: a parallel loop
        of more iterations than either (``c.collapse("n0", "co0")`` then
        ``c.parallelize("n0_co0")``).  It never changes the order, so it is
        always legal; refused when another statement runs inside ``outer``,
        when a tag is on either loop (tag the collapsed one), when
        ``inner``'s bounds change with a size given at call time, and on a
        statement computed at another (collapse its loops first)."""
        o, i = loop_name(outer), loop_name(inner)
        text = f"{self.name}.collapse({o}, {i})"
        name = _new_loop_names((name,), 1, text, "name=")[0] if name is not None \
            else f"{o}_{i}"
        st = state_of(self.function)[self.name]
        if st.at is not None:
            raise ValueError(f"{text}: {self.name} is computed at {st.at[1]} (compute_at); "
                             "collapse its loops before compute_at")
        st.find(o, text, self.name)
        st.find(i, text, self.name)
        bounds = range_of(self.function, self.name, i)
        if bounds is None:
            raise ValueError(f"{text}: the bounds of loop {i!r} change with a size given at "
                             "call time; collapse needs them constant (fix the sizes: "
                             "Function(..., params={name: value}))")
        lo, hi = bounds
        return self._command("collapse", o, i, name, text=text, lo=lo, extent=hi - lo + 1)

    @provenance.command
    def interchange(self, a, b):
        a, b = loop_name(a), loop_name(b)
        return self._command("interchange", a, b, text=f"{self.name}.interchange({a}, {b})")

    @provenance.command
    def reorder(self, *loops):
        """Puts the named loops, in the given order, at the positions they
        occupy together."""
        names = [loop_name(x) for x in loops]
        return self._command("reorder", *names, text=f"{self.name}.reorder({', '.join(names)})")

    @provenance.command
    def skew(self, outer, inner, factor=1, name=None):
        """``inner' = inner + factor * outer`` (unimodular, no interchange)."""
        o, i = loop_name(outer), loop_name(inner)
        text = f"{self.name}.skew({o}, {i}, {factor})"
        if name is not None:
            name = _new_loop_names((name,), 1, text, "name=")[0]
        return self._command("skew", o, i, factor, name or i, text=text)

    @provenance.command
    def shift(self, loop, amount):
        n = loop_name(loop)
        return self._command("shift", n, amount, text=f"{self.name}.shift({n}, {amount})")

    @provenance.command
    def reverse(self, loop):
        n = loop_name(loop)
        return self._command("reverse", n, text=f"{self.name}.reverse({n})")

    @provenance.command
    @all_or_nothing_call
    def parallelize(self, loop, allow_reassociation=False, schedule=None, chunk=None):
        """Runs ``loop``'s iterations in parallel (OpenMP); legal when it
        carries no dependence in the final schedule.  ``schedule`` ("static",
        "dynamic" or "guided") and ``chunk`` (a positive int) choose how the
        iterations are dealt to the threads (OpenMP's ``schedule`` clause;
        "dynamic" balances triangular loops).  They never change legality:
        the iterations of a loop that carries no dependence may run in any
        order on any thread.  The LLVM backend deals static chunks only and
        refuses the others at compile time, naming the loop."""
        n = loop_name(loop)
        text = f"{self.name}.parallelize({n})"
        if schedule is None and chunk is not None:
            schedule = "static"
        if schedule is not None and schedule not in OMP_SCHEDULES:
            raise ValueError(f"{text}: schedule must be one of {', '.join(map(repr, OMP_SCHEDULES))}"
                             f", not {schedule!r}")
        if chunk is not None and (not isinstance(chunk, int) or isinstance(chunk, bool)
                                  or chunk < 1):
            raise ValueError(f"{text}: chunk must be a positive int, not {chunk!r}")
        if allow_reassociation:
            self.allow_reassociation()
        arg = None if schedule is None else (schedule, chunk)
        if arg is not None:
            text = f"{self.name}.parallelize({n}, schedule={schedule!r}" \
                + (f", chunk={chunk})" if chunk is not None else ")")
        return self._command("tag", n, "parallel", arg, text=text)

    @provenance.command
    @all_or_nothing_call
    def vectorize(self, loop, width, allow_reassociation=False):
        """Runs ``loop`` as SIMD lanes of ``width``; strip-mines it first
        (``loop0``, ``loop1``) unless its extent is at most ``width``."""
        n = loop_name(loop)
        if allow_reassociation:
            self.allow_reassociation()
        if not isinstance(width, int) or width < 1:
            raise ValueError(f"{self.name}.vectorize({n}, {width}): width must be a positive int")
        ext = self._own_extent(n, f"{self.name}.vectorize({n}, {width})", "vectorize")
        return self._tag_strip_mined(n, ext, width, "vector", "vectorize")

    @provenance.command
    @all_or_nothing_call
    def unroll(self, loop, factor=None):
        """Unrolls ``loop`` in the generated source; with ``factor``, strip-mines
        it first unless its extent is at most ``factor``.  The factor (or the
        extent, without one) is at most :data:`MAX_UNROLL`, and the unrolled
        loops of a statement copy it at most :data:`MAX_UNROLL_TOTAL` times."""
        n = loop_name(loop)
        if factor is not None and (not isinstance(factor, int) or isinstance(factor, bool)
                                   or factor < 1):
            raise ValueError(f"{self.name}.unroll({n}, {factor!r}): the factor must be a "
                             "positive int")
        ext = self._own_extent(n, f"{self.name}.unroll({n}" + (f", {factor})" if factor else ")"),
                               "unroll")
        if factor is None:
            if ext is None:
                raise ValueError(f"{self.name}.unroll({n}): the loop's extent is not a "
                                 "constant; give a factor")
            if ext > MAX_UNROLL:
                raise ValueError(f"{self.name}.unroll({n}): the loop's extent {ext} is beyond "
                                 f"the unroll limit of {MAX_UNROLL} "
                                 "(tiramisu_py.lang.schedule.MAX_UNROLL); give a factor")
            factor = ext
        # refuse before the split is recorded: a refused command leaves no trace
        check_unroll(state_of(self.function)[self.name], n, factor,
                      f"{self.name}.unroll({n}, {factor})")
        return self._tag_strip_mined(n, ext, factor, "unrolled", "unroll")

    def _own_extent(self, n, text, verb):
        """The extent of loop ``n`` for ``vectorize``/``unroll`` (None: split
        first).  A statement computed at another (``compute_at``) runs inside
        that consumer's loops: those are the consumer's to tag, and they have
        no extent of the statement's own, so they are refused here.  Its own
        loop of the same name as one of them is meant: it is split first (a
        transformation of its own loop, recorded before the compute_at), so
        that the tag lands on a loop of its own."""
        st = state_of(self.function)[self.name]
        if st.at is not None:
            depth, consumer = st.at[2], st.at[1]
            names = [lp.name for lp in st.loops]
            if n in names[:depth]:
                if n in names[depth:]:
                    return None
                raise ValueError(
                    f"{text}: loop {n!r} is {consumer}'s loop, which {self.name} runs in since "
                    f"{st.at[0]}.compute_at({consumer}, {names[depth - 1]}); {self.name}'s own "
                    f"loops are {', '.join(names[depth:]) or 'none'}: {verb} one of those, or "
                    f"{consumer}'s loop {n!r} on {consumer}")
        return extent_of(self.function, self.name, n)

    def _tag_strip_mined(self, n, ext, size, kind, verb):
        """Tags loop ``n`` (extent ``ext``) ``kind`` with ``size``, after
        splitting it by ``size`` (tagging the inner loop) unless ``ext`` is at
        most ``size``."""
        if ext is None or ext > size:
            self.split(n, size)
            n = n + "1"
        return self._command("tag", n, kind, size, text=f"{self.name}.{verb}({n}, {size})")

    @provenance.command
    def distribute(self, loop):
        """Runs blocks of ``loop``'s iterations on the ranks of
        ``MPI.COMM_WORLD`` (owner computes, the block rule of
        :func:`tiramisu_py.mpi.block_range` over the extent of the buffer
        dimension the loop writes).  Buffers indexed by ``loop`` are
        block-distributed with it, the others replicated; the messages are
        derived exactly from the dependences, and ``compile()`` refuses,
        naming the instances, a dependence that communication between the
        steps of the enclosing loops cannot order
        (:mod:`tiramisu_py.analysis.distribution`).  Every statement of the
        Function is distributed (over its own loop of the same extent)."""
        n = loop_name(loop)
        return self._command("distribute", n, tuple(v.name for v in self.vars),
                             text=f"{self.name}.distribute({n})")

    @provenance.command
    def bind(self, loop, to):
        """Maps ``loop`` to a GPU grid or block index: ``to`` is "block.x",
        "block.y", "block.z", "thread.x", "thread.y" or "thread.z", or a
        warp-level tile's "warp.x", "warp.y", "lane.x", "lane.y" (the lane
        loops split one warp's 32 threads, the warp loops the block's warps;
        :mod:`tiramisu_py.analysis.gpu_threads`).  Block loops are the
        outermost and carry no dependence; a dependence between threads of
        one block gets a barrier where it is carried (a serial loop or a
        sequence outside the thread loops), and is refused inside the thread
        loops (:mod:`tiramisu_py.analysis.gpu_plan`, checked by ``compile()``)."""
        n = loop_name(loop)
        text = f"{self.name}.bind({n}, {to!r})"
        level, _, axis = to.partition(".") if isinstance(to, str) else ("", "", "")
        if level in ("warp", "lane") and axis in ("x", "y"):
            return self._command("tag", n, "gpu_thread", to, text=text)
        if level not in ("block", "thread") or axis not in ("x", "y", "z"):
            raise ValueError(f"{text}: to must be one of 'block.x', 'block.y', 'block.z', "
                             f"'thread.x', 'thread.y', 'thread.z', 'warp.x', 'warp.y', 'lane.x', "
                             f"'lane.y', not {to!r}")
        return self._command("tag", n, "gpu_" + level, axis, text=text)

    @provenance.command
    @all_or_nothing_call
    def gpu_tile(self, i, j, ti, tj, names=None):
        """``tile(i, j, ti, tj)`` and maps the tile loops to the GPU: ``i0`` to
        block.y, ``j0`` to block.x, ``i1`` to thread.y, ``j1`` to thread.x
        (the inner loop ``j`` on x, for coalesced accesses).  A block has
        ``ti * tj`` threads (at most 1024)."""
        a, b = loop_name(i), loop_name(j)
        for f in (ti, tj):
            if not isinstance(f, int) or isinstance(f, bool) or f < 1:
                raise ValueError(f"{self.name}.gpu_tile({a}, {b}, {ti}, {tj}): the tile sizes "
                                 "must be positive ints")
        if ti * tj > 1024:
            raise ValueError(f"{self.name}.gpu_tile({a}, {b}, {ti}, {tj}): {ti} x {tj} = "
                             f"{ti * tj} threads per block, beyond the limit of 1024")
        self.tile(a, b, ti, tj, names=names)
        (i0, i1), (j0, j1) = names if names is not None else ((a + "0", a + "1"), (b + "0", b + "1"))
        self.bind(i0, "block.y").bind(j0, "block.x")
        return self.bind(i1, "thread.y").bind(j1, "thread.x")

    @provenance.command
    @all_or_nothing_call
    def accumulate_locally(self, loop, allow_reassociation=False):
        """Accumulates this reduction over ``loop`` (and the loops inside it) in
        a small local tile, one slot per element (per iteration of the loops
        inside ``loop`` that the element's index uses; a convolution's
        ``ky, kx`` inside ``c`` add to the same slot), written back to the
        output once after each run of ``loop``: a register block that never
        loads the output inside the loop (BLIS's micro-kernel).  By default the tile starts from the
        output's values (copied in before the loop, out after it): the same
        additions in the same order, bit for bit the program's result.  With
        ``allow_reassociation=True`` it starts at the reduction's identity and
        is combined into the output once (the reduction reassociated; partial
        sums per vector lane allowed).  ``compile()`` checks that no other
        statement in ``loop`` accesses the output and that the element
        updated does not change with ``loop``."""
        n = loop_name(loop)
        if not getattr(self, "is_update", False):
            raise ValueError(f"{self.name}.accumulate_locally({n}): applies to updates "
                             "(reductions)")
        if allow_reassociation:
            self.allow_reassociation()
        return self._command("accumulate", n, text=f"{self.name}.accumulate_locally({n})")

    @provenance.command
    def allow_reassociation(self):
        """Lets this reduction's iterations be reordered, parallelised or
        vectorised (floating-point results may change in the last bits)."""
        if not getattr(self, "is_update", False):
            raise ValueError(f"{self.name}: allow_reassociation applies to updates (reductions)")
        return self._command("allow_reassociation", text=f"{self.name}.allow_reassociation()")

    @provenance.command
    def store_nontemporal(self):
        """Writes this computation's results past the caches (non-temporal,
        streaming stores: x86 ``movntps``/``movnti``), where the CPU backends
        can: each vector of results straight to memory, without first reading
        the lines it fills.  For a result much larger than the last-level
        cache that is not read again soon (a large output written once):
        a write-bound loop then moves a third less memory.  Fenced before any
        other thread or the caller reads the results, so the values are the
        same; a result read back soon is slower (it is no longer in cache).
        A hint: stores of a loop shape the backend does not stream (and on
        the GPU) stay plain.  Applies to computations, not updates (an update
        reads the element it writes)."""
        text = f"{self.name}.store_nontemporal()"
        if getattr(self, "is_update", False):
            raise ValueError(f"{text}: applies to computations; {self.name} is an update "
                             "(it reads the element it writes, which a streaming store "
                             "has just sent past the cache)")
        return self._command("nontemporal", text=text)

    @provenance.command
    def after(self, other, loop=None):
        """Runs this statement right after ``other``, inside ``other``'s loops up
        to and including ``loop`` (``None``: after it, sharing no loop)."""
        n = None if loop is None else loop_name(loop)
        return self._command("after", other.name, n,
                             text=f"{self.name}.after({other.name}, {n})")

    @provenance.command
    def compute_at(self, consumer, loop):
        """Computes this computation (and its updates) inside ``consumer``'s
        loops up to and including ``loop``, just before ``consumer``, for the
        region one iteration of those loops reads (overlaps are recomputed).
        The producer's own loop transformations may come before or after this
        command: given after, they are recorded before it (they act on the
        producer's own loops, inside the consumer's).  The consumer's loops
        it runs in are the consumer's to vectorize or unroll; ``vectorize``
        and ``unroll`` of a producer's own loop named like one of them split
        it first, so that the tag names one loop."""
        if self.is_update:
            raise ValueError(f"{self.name}.compute_at: apply it to the computation, not an update")
        n = loop_name(loop)
        group = [self.name] + [u.name for u in self.updates]
        return self._command("compute_at", consumer.name, n, group,
                             text=f"{self.name}.compute_at({consumer.name}, {n})")

    @provenance.command
    @atomic
    def cache_at(self, source, loop, name=None, tile=False):
        """Array packing: a copy of the part of ``source`` (an input, a buffer
        or a computation) that one iteration of this statement's ``loop``
        reads, made just before it, inside that loop; this statement then reads
        the copy.  ``source`` given as one of the statement's accesses
        (``A[j, k]``, written with the statement's loops, or as the string
        ``"A[j, k]"``) copies only what the reads written so touch, the
        others keep reading ``A`` (syrk's ``A[i, k] * A[j, k]``: one
        operand packed).  Reads of an array guarded by their own bounds
        (``select(inside, inp[n, c, y + ky - 1, x + kx - 1], 0.0)``: zero
        padding) get a padded copy: it reaches as far past the edges as the
        reads do, holds the guard's constant there, and the guard goes.
        Returns the copy (a computation): ``store_in`` it to choose
        its layout, or ``tile=True``: a buffer ``<name>_tile`` the size of one
        iteration's footprint, reused by every iteration (a dimension the
        footprint does not cover whole indexed modulo its width).
        ``source`` must not be written inside the loop nest of this statement.
        Like ``cache_shared`` and ``cache_local``, atomic: refused, it leaves
        the Function unchanged; ``f.undo()`` removes the copy too
        (:mod:`tiramisu_py.commands.atomic`)."""
        f = self.function
        if not isinstance(tile, bool):
            raise TypeError(f"{self.name}.cache_at: tile must be a bool, not {type(tile).__name__}")
        access = None
        if isinstance(source, (str, Access)):
            # the statement's own read written so (an Access compares by its text)
            access = access_named(self, source if isinstance(source, str) else repr(source))
            source = access.target
        if not isinstance(source, (Buffer, Computation)):
            raise TypeError(f"{self.name}.cache_at: source must be a buffer or computation, "
                            "or one access of it (A[j, k])")
        if name is not None:
            check_name(name, f"{self.name}.cache_at({source.name}): name=: computation")
        name = name or f"{source.name}_cache"
        writers = writers_in_root_item(f, self, source)
        if writers:
            raise ValueError(f"{self.name}.cache_at({source.name}): {', '.join(writers)} writes "
                             f"{source.name!r} in the same loop nest, so a copy made before it "
                             "would be stale")
        copy_ = make_copy(self, source, loop, name, access)
        if tile:
            store_in_tile(copy_, f"{self.name}.cache_at({source.name}, tile=True)")
        return copy_

    @provenance.command
    @atomic
    def cache_local(self, source, loop, name=None):
        """A :meth:`cache_at` into per-thread registers on the GPU: the part
        of ``source`` that ONE thread reads in one iteration of ``loop`` (a
        thread loop or a serial loop inside the thread loops) is copied by
        that thread into a local array (the classic register fragments: the
        A and B values of a micro-tile per k step); this statement then reads
        the copy.  The array is shaped by that footprint (isl: per dimension
        the bounding box, compressed by its stride), at most
        :data:`tiramisu_py.commands.gpu_copies.MAX_LOCAL_ELEMENTS` elements.  No
        barrier is needed; ``compile()`` checks that every value read from
        the copy was written by the same thread.  ``source`` (an input, a
        temporary or a shared tile such as ``A_shared``) must not be written
        inside ``loop``."""
        return cache_local(self, source, loop_name(loop), name)

    @provenance.command
    @atomic
    def cache_shared(self, source, loop, name=None, *, order=None, pad=0, swizzle=False,
                     vector=None):
        """A :meth:`cache_at` into GPU shared memory: the part of ``source``
        one iteration of ``loop`` reads is copied, cooperatively by the
        block's threads, into a ``__shared__`` tile shaped like that
        footprint's bounding box (computed exactly with isl) and indexed
        ``v % extent``; this statement then reads the tile.  ``loop`` is a
        block or a block-level serial loop of this statement, whose thread
        loops (bound before this call) give the copy's threads.  The
        barriers the copy needs (after it; before the next copy overwrites
        the tile) are placed by the GPU legality check, and the tiles of a
        block must fit in shared memory (checked by ``compile``).

        The tile's storage mapping: ``order`` permutes its dimensions
        (``(1, 0)``: a transposed tile), ``pad`` adds elements to each row
        and ``swizzle=True`` XOR-permutes its 16-byte chunks within each
        128-byte line (both avoid bank conflicts; a swizzle is a bijection of
        the tile, so the dependences are those of the plain layout).
        ``vector=w``: each thread copies ``w`` consecutive elements of
        ``source``'s last dimension as one access (a 128-bit load for 4
        floats; the copy's innermost loop vectorized, its alignment proved
        at ``compile``)."""
        return cache_shared(self, source, loop_name(loop), name, order, pad, swizzle, vector)

    @provenance.command
    @atomic
    def pipeline(self, loop, stages=2):
        """Software pipelining over the serial ``loop``: the copies computed
        at it (``cache_shared`` tiles, ``cache_local`` fragments) run
        ``stages - 1`` iterations ahead of their readers, into ``stages``
        slots of their storage (multi-buffering).  ``compile()`` proves it
        with the dependences (a WAR the slots cannot hold is refused, naming
        two instances), derives the barriers (one per iteration) and, on the
        GPU, copies global -> shared tiles with ``cp.async`` and waits for
        them where the dependences say
        (:mod:`tiramisu_py.commands.gpu_pipeline`).  Atomic; ``f.undo()``
        puts the copies and their storage back."""
        return pipeline(self, loop_name(loop), stages)

    @provenance.command
    def tensor_core(self, k, i, j):
        """Runs this update's innermost loops ``k`` (16 steps of the sum),
        ``i`` (2: rows ``r`` and ``r + 8``) and ``j`` (2: a pair of
        columns) on the tensor cores: one ``mma.sync.m16n8k16`` per warp
        (bfloat16 or float16 inputs read from shared tiles with
        ``ldmatrix``, float32 sums in the thread's registers).  The update
        must be lane-mapped as the instruction holds its sums: ``lane.y``
        (8) the rows, ``lane.x`` (4) the column pairs, i.e. ``row = 8 * i +
        lane.y`` and ``col = 2 * lane.x + j`` within the 16 x 8 tile, and
        reassociated (``allow_reassociation``: the instruction sums in its
        own order).  ``compile()`` checks all of it on the access functions
        and refuses, naming this command, what does not hold; the tiles'
        copies get their barriers from the dependences as for any read of
        another lane's data (:mod:`tiramisu_py.analysis.gpu_mma`)."""
        names = [loop_name(x) for x in (k, i, j)]
        return self._command("tensor_core", *names,
                             text=f"{self.name}.tensor_core({', '.join(names)})")

    @provenance.command
    def then(self, other, loop=None):
        """``a.then(b, loop)`` is ``b.after(a, loop)``; returns ``b`` to chain."""
        other.after(self, loop)
        return other

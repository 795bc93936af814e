"""LLVM backend: parallel loops through libgomp, a mixin of
:class:`codegen.llvm.stmt.Lowering`.

A parallel loop is outlined: its body over a range ``[vs, ve)`` becomes an
internal *range function*; an *outlined function* (the one ``GOMP_parallel``
runs on every thread of the team) reads the captured values from a context
struct, computes its thread's static block of the iterations and calls the
range function.  Several loops share one region (:meth:`ParallelLowering.region`,
the groups :mod:`codegen.regions` forms): adjacent parallel loops without a
reduction (one outlined function calls each loop's range function in turn
with ``GOMP_barrier`` between them, as C's ``#pragma omp parallel`` + one
``omp for`` each -- one fork/join instead of one per statement); a serial loop
whose body is only such loops (a time loop around its parallel sweep), which
every thread runs, its block of each inner loop and the generated barrier
after each; and such serial loops with plain parallel loops beside them."""
from __future__ import annotations

from .. import ir, regions
from ..regions import SPIN_MAX, SPIN_MIN, plain_parallel
from .lower import LLT, Arr, Ctx, Func, Val, name_hint

__all__ = ["ParallelLowering", "plain_parallel"]

_BARRIER = '@"tp.barrier"'
_BUDGET = '@"tp.spin_polls"'
# the futex system call's number on Linux, by architecture (others yield the core)
_FUTEX = {"x86_64": 202, "i386": 240, "i686": 240, "aarch64": 98, "riscv64": 98, "powerpc64le": 221,
          "s390x": 238}


class ParallelLowering:
    def parallel_loop(self, s: ir.For, step: int, red=None) -> None:
        """Outlines ``s`` and runs it through ``GOMP_parallel``.  ``red`` (a
        :class:`codegen.llvm.reduce.ParallelHooks`, for reductions) adds struct
        fields, per-thread arguments of the range function, its body, and code
        in the caller after the join; the team size is then written back."""
        sched = s.attrs.get("omp_schedule")
        if sched and (sched[0] != "static" or sched[1]):
            raise ValueError(
                f"LLVM backend: parallel loop {s.var!r} asks for schedule={sched[0]!r}"
                + (f", chunk={sched[1]}" if sched[1] else "") + "; the LLVM backend deals "
                "each thread one static block of iterations only: compile with target='cpu' "
                "(C + OpenMP) for another schedule or a chunk size")
        f, m = self.f, self.m
        lo, hi = self.index(s.lo).t, self.index(s.hi).t
        outl, rng = self._outlined_names(1)
        caps = self._captures()
        go, done = f.label("par"), f.label("endpar")
        f.cbr(f.op(f"icmp slt i64 {lo}, {hi}"), go, done)
        f.start(go)
        extra, nthreads = red.setup() if red else ([], "0")
        fields = [("i64", lo), ("i64", hi), ("ptr", self.ctx.status)] + [(c[2], c[3]) for c in caps]
        fields += extra + ([("i64", "0")] if red else [])        # the last: team size, written back
        sty, buf = self._context(fields)
        m.declare("GOMP_parallel", "void", ["ptr", "ptr", "i32", "i32"])
        f.emit(f"call void @GOMP_parallel(ptr {outl}, ptr {buf}, i32 {nthreads}, i32 0)")
        if red:
            g = f.op(f"getelementptr inbounds {sty}, ptr {buf}, i32 0, i32 {len(fields) - 1}")
            red.finish(f.op(f"load i64, ptr {g}, align 8", "team"))
        f.br(done)
        f.start(done)
        saved = (self.f, self.ctx, self.env, self.arrays)
        try:
            self._range_function(s, step, rng[0], caps, red)
            self._outlined_function(step, outl, rng[0], sty, fields, caps, red)
        finally:
            self.f, self.ctx, self.env, self.arrays = saved

    def _range_functions(self, loops, steps, rngs, caps, saved) -> None:
        """One range function per loop, the lowering's state restored after each."""
        for s, step, rng in zip(loops, steps, rngs):
            self.enclosing.append(s)
            try:
                self._range_function(s, step, rng, caps, None)
            finally:
                self.enclosing.pop()
            self.f, self.ctx, self.env, self.arrays = saved

    def region(self, members: list) -> None:
        """Parallel loops (:func:`plain_parallel`) and stepped loops
        (:func:`codegen.regions.stepped_loops`) run one after the other in
        one region (:mod:`codegen.regions`: adjacent plain loops, a stepped
        region, a mixed one): the outlined function runs each plain loop's
        static block (an empty loop: empty blocks) and each stepped loop on
        every thread around its inner loops' blocks; OpenMP's barrier after
        a plain loop (the last of plain loops alone: none, the join follows;
        the user's wait policy), the generated one
        (``tp_barrier``) after each inner loop of a stepped loop.  The bounds
        of the members are evaluated here, those of a stepped loop's inner
        loops by each thread at each step (they may use its iterator); a lone
        stepped loop with no step forks nothing."""
        f, m = self.f, self.m
        outl, _ = self._outlined_names(1)
        caps = self._captures()
        # the status, the barrier's arrival count, generation and sleepers,
        # each member's bounds, then the captures
        fields = [("ptr", self.ctx.status), ("i64", "0"), ("i32", "0"), ("i32", "0")]
        for x in members:
            fields += [("i64", self.index(x.lo).t), ("i64", self.index(x.hi).t)]
        fields += [(c[2], c[3]) for c in caps]
        inner = regions.stepped_loops(members[0])
        if len(members) == 1 and inner:
            f.emit(f"; loop {name_hint(members[0].var)} around parallel loop(s) "
                   f"{', '.join(name_hint(x.var) for x in inner)}: one region, a barrier after each")
            go, done = f.label("steps"), f.label("endsteps")
            f.cbr(f.op(f"icmp slt i64 {fields[4][1]}, {fields[5][1]}"), go, done)
            f.start(go)
        else:
            done = None
            f.emit(f"; loops {', '.join(name_hint(x.var) for x in members)}: one region, a "
                   "barrier after each parallel loop")
        sty, buf = self._context(fields)
        m.declare("GOMP_parallel", "void", ["ptr", "ptr", "i32", "i32"])
        f.emit(f"call void @GOMP_parallel(ptr {outl}, ptr {buf}, i32 0, i32 0)")
        if done is not None:
            f.br(done)
            f.start(done)
        saved = (self.f, self.ctx, self.env, self.arrays)
        plan = []                  # per member: (loop, its inner loops or None, [(loop, step, range fn)])
        base = outl[:-1]
        for j, x in enumerate(members):
            inner = regions.stepped_loops(x)
            loops = inner or [x]
            rngs = [f'{base}.range{j}.{i}"' for i in range(len(loops))]
            steps = [ir.check_loop(y, "LLVM backend") for y in loops]
            if inner:
                self.enclosing.append(x)
            try:
                self._range_functions(loops, steps, rngs, caps + (
                    [("s", x.var, "i64", None, "int64")] if inner else []), saved)
            finally:
                if inner:
                    self.enclosing.pop()
            plan.append((x, inner, list(zip(loops, steps, rngs))))
        try:
            self._region_function(outl, plan, sty, fields, caps)
        finally:
            self.f, self.ctx, self.env, self.arrays = saved

    def _region_function(self, outl, plan, sty, fields, caps) -> None:
        f = self.f = Func(f"define internal void {outl}(ptr %ctx) #0")
        vals = self._load_fields(f, sty, fields)
        status, captured = vals[0], vals[4 + 2 * len(plan):]
        bar = f.op(f"getelementptr inbounds {sty}, ptr %ctx, i32 0, i32 1", "bar")
        tid, nth = self._team(f)
        self.ctx = Ctx(True, status)
        self.env, self.arrays = self._bound(caps, captured)

        def run(step, rng, lo, hi, extra):
            vs, ve = self._thread_block(f, lo, hi, step, tid, nth, clamp=True)
            args = [f"i64 {vs}", f"i64 {ve}"] + [f"{c[2]} {v}" for c, v in zip(caps, captured)]
            f.emit(f"call void {rng}({', '.join(args + extra + [f'ptr {status}'])})")
        mixed = any(inner for _, inner, _ in plan)
        for j, (x, inner, loops) in enumerate(plan):
            lo, hi = vals[4 + 2 * j], vals[5 + 2 * j]
            if not inner:
                run(*loops[0][1:], lo, hi, [])
                if mixed or j < len(plan) - 1:     # OpenMP's own (the user's wait policy)
                    self.m.declare("GOMP_barrier", "void", [])
                    f.emit("call void @GOMP_barrier()")
                continue
            self._barrier()

            def one_step(t, x=x, loops=loops):
                self.env[x.var] = Val(t, "int64")
                for y, ystep, rng in loops:
                    run(ystep, rng, self.index(y.lo).t, self.index(y.hi).t, [f"i64 {t}"])
                    f.emit(f"call void {_BARRIER}(ptr {bar}, i64 {nth})")
            self.counted_loop(x.var, lo, hi, ir.check_loop(x, "LLVM backend"), one_step)
        f.emit("ret void")
        self.m.funcs.append(f.text())

    def _barrier(self) -> None:
        """Defines the module's ``tp.barrier(ptr bar, i64 team)`` once
        (:mod:`codegen.regions`; ``bar``: ``{ i64 count, i32 gen, i32
        sleepers }``): the generation read, the count incremented; the last
        thread to arrive resets the count, advances the generation and wakes
        the sleepers; the others poll the generation (with the pause hint) for
        the module's spin budget ``tp.spin_polls``, then sleep on it (a futex
        on Linux, yielding the core elsewhere).  The budget halves when a spin
        ends in a sleep and doubles when it ends in time."""
        if getattr(self, "_barrier_defined", False):
            return
        self._barrier_defined = True
        m = self.m
        triple = m.host.triple
        x86 = triple.startswith(("x86_64", "i386", "i686"))
        if x86:
            m.declare("llvm.x86.sse2.pause", "void", [])
        futex = _FUTEX.get(triple.split("-")[0]) if "linux" in triple else None
        if futex:
            m.declare("syscall", "i64", ["i64", "..."])
            sys = f"call i64 (i64, ...) @syscall(i64 {futex}, ptr %genp, i64"
            wake = f"  %r = {sys} 129, i64 2147483647, ptr null, ptr null, i64 0)\n"   # FUTEX_WAKE_PRIVATE
            wait = (f"  %gz = zext i32 %gen to i64\n"                                   # FUTEX_WAIT_PRIVATE
                    f"  %w = {sys} 128, i64 %gz, ptr null, ptr null, i64 0)\n")
        else:
            m.declare("sched_yield", "i32", [])
            wake, wait = "", "  %y = call i32 @sched_yield()\n"
        m.decls[_BUDGET] = f"{_BUDGET} = internal global i64 {SPIN_MAX}, align 8"
        hint = "  call void @llvm.x86.sse2.pause()\n" if x86 else ""
        m.funcs.append(
            f"define internal void {_BARRIER}(ptr %count, i64 %team) #0 {{\n"
            "entry:\n"
            "  %alone = icmp eq i64 %team, 1\n"
            "  br i1 %alone, label %done, label %arrive\n"
            "arrive:\n"
            "  %genp = getelementptr inbounds i8, ptr %count, i64 8\n"
            "  %sleepp = getelementptr inbounds i8, ptr %count, i64 12\n"
            "  %gen = load atomic i32, ptr %genp acquire, align 4\n"
            "  %before = atomicrmw add ptr %count, i64 1 acq_rel, align 8\n"
            "  %others = sub i64 %team, 1\n"
            "  %last = icmp eq i64 %before, %others\n"
            "  br i1 %last, label %release, label %spin\n"
            "release:\n"
            "  store atomic i64 0, ptr %count monotonic, align 8\n"
            "  %next = add i32 %gen, 1\n"
            "  store atomic i32 %next, ptr %genp seq_cst, align 4\n"
            "  %sl = load atomic i32, ptr %sleepp seq_cst, align 4\n"
            "  %any = icmp ne i32 %sl, 0\n"
            "  br i1 %any, label %wake, label %done\n"
            "wake:\n"
            f"{wake}"
            "  br label %done\n"
            "spin:\n"
            f"  %budget = load atomic i64, ptr {_BUDGET} monotonic, align 8\n"
            "  br label %poll\n"
            "poll:\n"
            "  %n = phi i64 [ 0, %spin ], [ %n1, %pause ]\n"
            "  %now = load atomic i32, ptr %genp acquire, align 4\n"
            "  %moved = icmp ne i32 %now, %gen\n"
            "  br i1 %moved, label %intime, label %more\n"
            "more:\n"
            "  %n1 = add i64 %n, 1\n"
            "  %left = icmp slt i64 %n1, %budget\n"
            "  br i1 %left, label %pause, label %sleep\n"
            "pause:\n"
            f"{hint}"
            "  br label %poll\n"
            "intime:\n"
            f"  %small = icmp slt i64 %budget, {SPIN_MAX}\n"
            "  br i1 %small, label %grow, label %done\n"
            "grow:\n"
            "  %doubled = shl i64 %budget, 1\n"
            f"  store atomic i64 %doubled, ptr {_BUDGET} monotonic, align 8\n"
            "  br label %done\n"
            "sleep:\n"
            f"  %big = icmp sgt i64 %budget, {SPIN_MIN}\n"
            "  br i1 %big, label %shrink, label %block\n"
            "shrink:\n"
            "  %halved = lshr i64 %budget, 1\n"
            f"  store atomic i64 %halved, ptr {_BUDGET} monotonic, align 8\n"
            "  br label %block\n"
            "block:\n"
            "  %s0 = atomicrmw add ptr %sleepp, i32 1 seq_cst, align 4\n"
            "  br label %check\n"
            "check:\n"
            "  %g2 = load atomic i32, ptr %genp seq_cst, align 4\n"
            "  %same = icmp eq i32 %g2, %gen\n"
            "  br i1 %same, label %wait, label %woke\n"
            "wait:\n"
            f"{wait}"
            "  br label %check\n"
            "woke:\n"
            "  %s1 = atomicrmw sub ptr %sleepp, i32 1 monotonic, align 4\n"
            "  br label %done\n"
            "done:\n"
            "  ret void\n"
            "}")

    # ------------------------------------------------------------- the pieces
    def _outlined_names(self, loops: int):
        k = self.npar
        self.npar += 1
        outl = f'@"{self.fn.name}.par{k}"'
        if loops == 1:
            return outl, [f'@"{self.fn.name}.par{k}.range"']
        return outl, [f'@"{self.fn.name}.par{k}.range{j}"' for j in range(loops)]

    def _captures(self) -> list:
        """(what, name, llvm type, value, extra) of every scalar, array and
        run-time stride the outlined code reads."""
        caps = []
        for name, v in self.env.items():
            caps.append(("s", name, LLT[v.dtype], v.t, v.dtype))
        for name, a in self.arrays.items():
            caps.append(("p", name, "ptr", a.ptr, a))
            caps += [("i", name, "i64", st, d) for d, st in enumerate(a.strides) if not isinstance(st, int)]
        return caps

    @staticmethod
    def _bound(caps, values):
        """``(env, arrays)`` of the captures ``caps`` (:meth:`_captures`) under
        the SSA names ``values`` in an outlined function."""
        env, arrays = {}, {}
        for (what, name, _, _, extra), v in zip(caps, values):
            if what == "s":
                env[name] = Val(v, extra)
            elif what == "p":
                arrays[name] = Arr(v, extra.dtype, list(extra.strides), extra.writable)
            else:
                arrays[name].strides[extra] = v
        return env, arrays

    def _context(self, fields):
        """The context struct's type, and a stack copy of ``fields`` in it."""
        f = self.f
        sty = "{ " + ", ".join(t for t, _ in fields) + " }"
        buf = f.alloca(sty, 8, "ctx")
        for j, (t, v) in enumerate(fields):
            g = f.op(f"getelementptr inbounds {sty}, ptr {buf}, i32 0, i32 {j}")
            f.emit(f"store {t} {v}, ptr {g}")
        return sty, buf

    def _range_function(self, s, step, rng, caps, red) -> None:
        names = [f"%c{j}.{name_hint(c[1])}" for j, c in enumerate(caps)]
        params = ["i64 %vs", "i64 %ve"] + [
            f"ptr noalias {p}" if c[0] == "p" else f"{c[2]} {p}" for c, p in zip(caps, names)]
        env, arrays = self._bound(caps, names)
        params.append("ptr %status")
        rparams = [f"%r{j}" for j in range(len(red.range_types))] if red else []
        params += [f"{t} {p}" for t, p in zip(red.range_types, rparams)] if red else []
        self.f = Func(f"define internal void {rng}({', '.join(params)}) #1")
        self.ctx, self.env, self.arrays = Ctx(True, "%status"), env, arrays
        if red:
            red.range_body("%vs", "%ve", rparams)
        else:
            self.counted_loop(s.var, "%vs", "%ve", step,
                              lambda v: self.with_var(s.var, Val(v, "int64"), s.body))
            self.stream_fence(s.body)                    # codegen.llvm.stream
        self.f.emit("ret void")
        self.m.funcs.append(self.f.text())

    def _team(self, f):
        """This thread's number and the team's size, as i64."""
        self.m.declare("omp_get_thread_num", "i32", [])
        self.m.declare("omp_get_num_threads", "i32", [])
        tid = f.op(f"sext i32 {f.op('call i32 @omp_get_thread_num()')} to i64", "tid")
        nth = f.op(f"sext i32 {f.op('call i32 @omp_get_num_threads()')} to i64", "nth")
        return tid, nth

    @staticmethod
    def _thread_block(f, lo, hi, step, tid, nth, clamp=False):
        """``(vs, ve)``: thread ``tid``'s static block of ``lo .. hi`` by
        ``step`` (the first ``n % nth`` threads take one more); ``clamp``: an
        empty or reversed range gives empty blocks."""
        n = f.op(f"sub i64 {hi}, {lo}")
        if step != 1:
            n = f.op(f"sdiv i64 {f.op(f'add i64 {n}, {step - 1}')}, {step}")
        if clamp:
            n = f.op(f"select i1 {f.op(f'icmp slt i64 {n}, 0')}, i64 0, i64 {n}")
        q, r = f.op(f"sdiv i64 {n}, {nth}"), f.op(f"srem i64 {n}, {nth}")
        lt = f.op(f"icmp slt i64 {tid}, {r}")
        first = f.op(f"add i64 {f.op(f'mul i64 {tid}, {q}')}, {f.op(f'select i1 {lt}, i64 {tid}, i64 {r}')}")
        cnt = f.op(f"add i64 {q}, {f.op(f'zext i1 {lt} to i64')}")
        if step != 1:
            first, cnt = f.op(f"mul i64 {first}, {step}"), f.op(f"mul i64 {cnt}, {step}")
        vs = f.op(f"add i64 {lo}, {first}", "vs")
        return vs, f.op(f"add i64 {vs}, {cnt}", "ve")

    @staticmethod
    def _load_fields(f, sty, fields):
        vals = []
        for j, (t, _) in enumerate(fields):
            g = f.op(f"getelementptr inbounds {sty}, ptr %ctx, i32 0, i32 {j}")
            vals.append(f.op(f"load {t}, ptr {g}"))
        return vals

    def _outlined_function(self, step, outl, rng, sty, fields, caps, red) -> None:
        f = self.f = Func(f"define internal void {outl}(ptr %ctx) #0")
        vals = self._load_fields(f, sty, fields)
        lo, hi, status = vals[:3]
        tid, nth = self._team(f)
        vs, ve = self._thread_block(f, lo, hi, step, tid, nth)
        args = [f"i64 {vs}", f"i64 {ve}"] + [f"{c[2]} {v}" for c, v in zip(caps, vals[3:3 + len(caps)])]
        args.append(f"ptr {status}")
        if red:
            g = f.op(f"getelementptr inbounds {sty}, ptr %ctx, i32 0, i32 {len(fields) - 1}")
            f.emit(f"store atomic i64 {nth}, ptr {g} monotonic, align 8")    # same value from each
            args += [f"{t} {v}" for t, v in red.thread_args(tid, nth, vals[3 + len(caps):-1])]
        f.emit(f"call void {rng}({', '.join(args)})")
        f.emit("ret void")
        self.m.funcs.append(f.text())

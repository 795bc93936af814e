"""LLVM backend, part 3: reassociated reductions (mixed into
:class:`codegen.llvm.stmt.Lowering`).

A ``parallel`` or ``vector`` loop with ``attrs["reduction"] = [(array, op), ...]``
(op in add/sub/mul/max/min) may reorder the ``elem = elem op term`` updates of
those arrays (see :class:`codegen.ir.For`).  As in the C backend:

1. *Accumulator pattern*: the body is one ``A[idx] = A[idx] op e`` with ``idx``
   invariant in the loop, ``e`` not reading ``A`` and one dtype throughout.
   The loop accumulates ``e`` into a register starting at op's identity
   (:func:`identity`) and ``A[idx] = A[idx] op acc`` is stored once after it
   (nothing is touched when the loop runs no iteration).  The accumulation
   (:meth:`ReductionLowering.reduce_range`) is widened when ``e`` can be: ``UNROLL``
   ``<W x T>`` accumulators over ``UNROLL * W`` iterations, one over ``W``, a
   horizontal reduction (``llvm.vector.reduce.*``, ``reassoc`` for fadd/fmul; a
   halving tree of NaN-propagating selects for float min/max)
   folded into the running value, then a scalar epilogue; otherwise it is a
   scalar loop.  A ``vector`` loop (or a ``parallel`` one nested in a parallel
   region) runs it in place.  A top-level ``parallel`` loop runs it per thread
   over the thread's static chunk into its slot of a stack array of
   ``omp_get_max_threads()`` partials (``GOMP_parallel`` is asked for that many
   threads; the team size is written back); the caller folds the partials into
   ``A[idx]`` in thread order after the join.
2. *Array sections* (a top-level ``parallel`` loop otherwise): the caller
   mallocs ``max_threads`` private copies of each reduced array (an argument
   array or a temporary); each thread fills its copy with the identity and runs its
   chunk with the array's loads and stores redirected to the copy; after the
   join the caller folds the copies into the array in thread order and frees
   them.  A failed allocation returns 1.
3. A ``vector`` loop otherwise is lowered as any vector loop
   (:mod:`codegen.llvm.stmt`) unless it reads through an index array:
   widened where its lanes are distinct (a local tile's lanes,
   :mod:`codegen.accumulate`), else left to LLVM's vectorizer, which keeps a
   float sum's order.  Otherwise (an indirect read, a bool reduction, a nested
   parallel loop) it runs in order (LLVM may vectorize it: its gathers).

The results depend on the thread count (and the vector width), never on timing.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Callable

from .. import ir
from ..ir import COMBINE, ELSIZE, expr_key, identity
from .expr import VecState
from .lower import LLT, MEMT, Arr, CannotWiden, Val, lit, mangle, name_hint, vt

ACC = "%acc"            # the accumulator in synthesised IR (not an identifier: cannot clash)
UNROLL = 4              # independent vector accumulators in the main widened loop


def _indirect(body) -> bool:
    """Whether ``body`` reads an array at an index that reads an array."""
    return any(isinstance(x, ir.Load) and any(isinstance(y, ir.Load) for i in x.index
                                               for y in ir.walk_exprs(i))
               for st in ir.walk_stmts(body) for e in _stmt_exprs(st) for x in ir.walk_exprs(e))


def _stmt_exprs(st):
    if isinstance(st, ir.Store):
        return [st.value, *st.index]
    if isinstance(st, ir.Let):
        return [st.value]
    return []


def _mentions(exprs, name: str) -> bool:
    return any(isinstance(x, ir.Var) and x.name == name for e in exprs for x in ir.walk_exprs(e))


@dataclass
class ParallelHooks:
    """What a reduction adds to :meth:`Lowering.parallel_loop`."""
    setup: Callable          # () -> ([(type, value)] struct fields, i32 team size to ask for); caller
    range_types: list        # LLVM types of the range function's extra parameters
    range_body: Callable     # (vs, ve, params) -> None; in the range function
    thread_args: Callable    # (tid, nth, field values) -> [(type, value)]; in the outlined function
    finish: Callable         # (team size) -> None; in the caller after the join


class ReductionLowering:
    """Reduction loops; needs the rest of :class:`codegen.llvm.stmt.Lowering`."""

    # -------------------------------------------------------------- dispatch
    def reduction_loop(self, s: ir.For, step: int) -> None:
        pat = self.accumulator(s)
        if pat is not None and (s.kind == "vector" or self.ctx.parallel):
            return self.accumulate_in_place(s, step, pat)
        if pat is not None:
            return self.parallel_accumulate(s, step, pat)
        if s.kind == "parallel" and not self.ctx.parallel:
            specs = self.section_specs(s)
            if specs:
                return self.parallel_sections(s, step, specs)
        if s.kind == "vector" and not _indirect(s.body):
            # no accumulator of its own: a local tile's lanes (accumulate_locally
            # gave each lane its slot), which the vector loop widens when its
            # lanes are distinct (else it is left to LLVM, which keeps a float
            # sum's order); kept serial, LLVM vectorised a tile of one row but
            # not of 4 x 4 (4-wide partial vectors: 16 x 4096 @ 4096^2 104 ms
            # against 9.5).  Indirect reads stay LLVM's (its gathers: a CSR
            # row's groups 48 ms, widened lane by lane 71)
            return self.vector_loop(s, step)
        why = ("bool array" if not self.ctx.parallel else "inside a parallel region") \
            if s.kind == "parallel" else "not one loop-invariant accumulator update"
        self.f.emit(f"; {s.kind} reduction loop {name_hint(s.var)}: runs in order ({why})")
        self.loop(ir.For(s.var, s.lo, s.hi, s.body, kind="serial", step=step))

    def accumulator(self, s: ir.For):
        """(store, op, term) if ``s.body`` is ``A[idx] = A[idx] op term`` as
        described in the module docstring, else None."""
        body = s.body
        if isinstance(body, ir.Block) and len(body.stmts) == 1:
            body = body.stmts[0]
        if not isinstance(body, ir.Store) or not isinstance(body.value, ir.Binary):
            return None
        v, names = body.value, {r[0] for r in s.attrs.get("reduction") or ()}
        old, a = v.a, self.arrays.get(body.array)
        if v.op not in COMBINE or body.array not in names or a is None or not isinstance(old, ir.Load):
            return None
        if old.array != body.array or [expr_key(i) for i in old.index] != [expr_key(i) for i in body.index]:
            return None
        if v.dtype not in LLT or v.dtype == "bool" or not a.dtype == old.dtype == v.b.dtype == v.dtype:
            return None
        if _mentions(body.index, s.var) or any(isinstance(x, ir.Load) and x.array == body.array
                                               for x in ir.walk_exprs(v.b)):
            return None
        return body, v.op, v.b

    # -------------------------------------------------------------- helpers
    def eval_with(self, bindings: dict, e) -> Val:
        saved = self.env
        self.env = dict(saved)
        self.env.update(bindings)
        try:
            return self.ex(e)
        finally:
            self.env = saved

    def store_acc(self, st: ir.Store, value: str) -> None:
        """``A[idx] = value`` (the store's array and index, evaluated here)."""
        dt = st.value.dtype
        self.with_var(ACC, Val(value, dt), ir.Store(st.array, st.index, ir.Var(ACC, dt)))

    def horizontal(self, op: str, dt: str, w: int, vacc: str, start: str) -> str:
        """``start op (lanes of vacc combined)``."""
        f, m = self.f, self.m
        t, vty, comb = LLT[dt], vt(LLT[dt], w), COMBINE[op]
        if ir.is_float(dt) and comb in ("add", "mul"):
            name = m.declare(f"llvm.vector.reduce.f{comb}.{mangle(dt, w)}", t, [t, vty])
            return f.op(f"call reassoc {t} @{name}({t} {start}, {vty} {vacc})", "hred")
        if ir.is_float(dt):     # min/max propagate NaN: a halving tree of the same select
            cur, n = vacc, w
            while n > 1 and n % 2 == 0:
                h, vn = n // 2, vt(t, n)
                halves = [f.op(f"shufflevector {vn} {cur}, {vn} poison, <{h} x i32> <"
                               + ", ".join(f"i32 {k + off}" for k in range(h)) + ">", "half")
                          for off in (0, h)]
                cur, n = self._arith(comb, dt, halves[0], halves[1], h), h
            r = None
            for k in range(n):
                x = f.op(f"extractelement {vt(t, n)} {cur}, i64 {k}")
                r = x if r is None else self._arith(comb, dt, r, x, None)
            return self._arith(comb, dt, start, r, None)
        base = ("" if comb in ("add", "mul") else "u" if dt == "uint8" else "s") + comb
        name = m.declare(f"llvm.vector.reduce.{base}.{mangle(dt, w)}", t, [vty])
        r = f.op(f"call {t} @{name}({vty} {vacc})", "hred")
        return self._arith(comb, dt, start, r, None)

    # -------------------------------------------------------------- accumulation
    def reduce_range(self, s: ir.For, step: int, st: ir.Store, op: str, term, lo: str, hi: str,
                     start: str) -> str:
        """``start op term(lo) op term(lo + step) ...`` for the iterator below
        ``hi``, reassociated; widened if ``term`` can be."""
        f = self.f
        w = self.vector_width(s)
        reason, info = (self.widen_check(ir.Store(st.array, st.index, term), s.var) if w > 1
                        else ("vector width 1", None))
        if reason is None:
            mark, env = f.mark(), self.env
            try:
                return self._vector_reduce(s, step, st.value.dtype, op, term, lo, hi, start, w, info)
            except CannotWiden as exc:
                f.rollback(mark)
                self.vec, self.spec, self.env = None, 0, env
                reason = str(exc)
        f.emit(f"; reduction loop {name_hint(s.var)}: not widened ({' '.join(reason.split())})")
        return self._scalar_reduce(s.var, step, st.value.dtype, op, term, lo, hi, start)

    def _scalar_reduce(self, var, step, dt, op, term, lo, hi, start, md="") -> str:
        upd = ir.Binary(op, ir.Var(ACC, dt), term, dt)
        return self.carried_loop(var, lo, hi, step, [(LLT[dt], start)], lambda v, accs: [self.eval_with(
            {var: Val(v, "int64"), ACC: Val(accs[0], dt)}, upd).t], md)[0]

    def _vector_reduce(self, s, step, dt, op, term, lo, hi, start, w, info) -> str:
        f, m = self.f, self.m
        t, vty = LLT[dt], vt(LLT[dt], w)
        upd = ir.Binary(op, ir.Var(ACC, dt), term, dt)
        ident = f"splat ({t} {lit(identity(op, dt), dt)})"
        done_md = m.loop_md('!"llvm.loop.isvectorized", i32 1')

        def lanes(base, acc):
            self.vec = VecState(w, *info)
            try:
                return self.mat(self.eval_with({s.var: Val(base, "int64", "a", step),
                                                ACC: Val(acc, dt, "v")}, upd))
            finally:
                self.vec = None

        def unrolled(v, accs):
            return [lanes(v if u == 0 else f.op(f"add nsw i64 {v}, {u * w * step}"), a)
                    for u, a in enumerate(accs)]

        f.emit(f"; reduction loop {name_hint(s.var)}: {UNROLL} x {w} lanes, {w} lanes, horizontal "
               f"{op}, scalar epilogue")
        vend_u = self.vector_end(lo, hi, step, w * UNROLL)
        accs = self.carried_loop(s.var, lo, vend_u, w * UNROLL * step, [(vty, ident)] * UNROLL,
                                 unrolled, done_md)
        acc = accs[0]
        for a in accs[1:]:
            acc = self._arith(COMBINE[op], dt, acc, a, w)
        vend = self.vector_end(lo, hi, step, w)
        acc = self.carried_loop(s.var, vend_u, vend, w * step, [(vty, acc)], lambda v, a: [lanes(v, a[0])],
                                m.loop_md('!"llvm.loop.isvectorized", i32 1'))[0]
        r = self.horizontal(op, dt, w, acc, start)
        return self._scalar_reduce(s.var, step, dt, op, term, vend, hi, r, m.loop_md(
            '!"llvm.loop.vectorize.width", i32 1', '!"llvm.loop.interleave.count", i32 1'))

    def accumulate_in_place(self, s: ir.For, step: int, pat) -> None:
        st, op, term = pat
        f = self.f
        lo, hi = self.index(s.lo).t, self.index(s.hi).t
        go, done = f.label("red"), f.label("endred")
        f.cbr(f.op(f"icmp slt i64 {lo}, {hi}"), go, done)
        f.start(go)
        old = self.ex(st.value.a)
        self.store_acc(st, self.reduce_range(s, step, st, op, term, lo, hi, old.t))
        f.br(done)
        f.start(done)

    # -------------------------------------------------------------- parallel
    def _max_threads(self) -> tuple:
        self.m.declare("omp_get_max_threads", "i32", [])
        p = self.f.op("call i32 @omp_get_max_threads()", "maxth")
        return p, self.f.op(f"sext i32 {p} to i64", "maxth")

    def parallel_accumulate(self, s: ir.For, step: int, pat) -> None:
        """Pattern 1 in a top-level parallel loop: per-thread partials."""
        st, op, term = pat
        dt = st.value.dtype
        t, al = LLT[dt], ELSIZE[dt]
        state = {}

        def setup():
            f, m = self.f, self.m
            p, p64 = self._max_threads()
            m.declare("llvm.stacksave.p0", "ptr", [])
            m.declare("llvm.stackrestore.p0", "void", ["ptr"])
            state["sp"] = f.op("call ptr @llvm.stacksave.p0()", "sp")
            state["part"] = f.op(f"alloca {t}, i64 {p64}, align 64", "partial")
            return [("ptr", state["part"])], p

        def thread_args(tid, nth, vals):
            return [("ptr", self.f.op(f"getelementptr inbounds {t}, ptr {vals[0]}, i64 {tid}", "slot"))]

        def range_body(vs, ve, params):
            r = self.reduce_range(s, step, st, op, term, vs, ve, lit(identity(op, dt), dt))
            self.f.emit(f"store {t} {r}, ptr {params[0]}, align {al}")

        def finish(nth):
            f = self.f
            old = self.ex(st.value.a)

            def fold(k, accs):
                p = f.op(f"getelementptr inbounds {t}, ptr {state['part']}, i64 {k}")
                return [self._arith(COMBINE[op], dt, accs[0], f.op(f"load {t}, ptr {p}, align {al}"), None)]
            self.store_acc(st, self.carried_loop("thread", "0", nth, 1, [(t, old.t)], fold)[0])
            f.emit(f"call void @llvm.stackrestore.p0(ptr {state['sp']})")

        self.f.emit(f"; parallel reduction loop {name_hint(s.var)}: per-thread partials of {st.array}")
        self.parallel_loop(s, step, ParallelHooks(setup, ["ptr"], range_body, thread_args, finish))

    def section_specs(self, s: ir.For) -> list:
        """[(name, op, ArrayArg)] of the arrays reduced by ``s`` (arguments,
        or temporaries in scope seen as one); [] if one is bool."""
        args, specs = {a.name: a for a in self.fn.arrays}, {}
        args.update((n, ir.ArrayArg(n, t.dtype, t.shape, True)) for n, t in self.temps.items())
        for name, op in s.attrs.get("reduction") or ():
            if op not in COMBINE:
                raise ValueError(f"LLVM backend: no parallel reduction for {op!r}")
            if name not in args:
                raise ValueError(f"LLVM backend: parallel reduction into {name!r}, which is "
                                 "neither an argument array nor a temporary in scope")
            if not args[name].writable:
                raise ValueError(f"LLVM backend: parallel reduction into read-only array {name!r}")
            specs.setdefault(name, (name, op, args[name]))
        return [] if any(a.dtype == "bool" for _, _, a in specs.values()) else list(specs.values())

    def _checked_mul(self, vals: list) -> tuple:
        """(product, failed): failed if a factor is negative or the product overflows."""
        f = self.f
        self.m.declare("llvm.umul.with.overflow.i64", "{ i64, i1 }", ["i64", "i64"])
        n, fail = "1", "false"
        for d in vals:
            if isinstance(d, int):
                d = str(d)
            fail = f.op(f"or i1 {fail}, {f.op(f'icmp slt i64 {d}, 0')}")
            r = f.op(f"call {{ i64, i1 }} @llvm.umul.with.overflow.i64(i64 {n}, i64 {d})")
            fail = f.op(f"or i1 {fail}, {f.op(f'extractvalue {{ i64, i1 }} {r}, 1')}")
            n = f.op(f"extractvalue {{ i64, i1 }} {r}, 0")
        return n, fail

    def parallel_sections(self, s: ir.For, step: int, specs: list) -> None:
        """Pattern 2: a private copy of each reduced array per thread."""
        bufs, sizes = [], []

        def setup():
            f, m = self.f, self.m
            p, p64 = self._max_threads()
            m.declare("malloc", "noalias ptr", ["i64"])
            m.declare("free", "void", ["ptr"])
            fields = []
            for name, _, arg in specs:
                count, fail1 = self._checked_mul([self._dim(d) for d in arg.shape])
                nbytes, fail2 = self._checked_mul([count, p64, ELSIZE[arg.dtype]])
                fail = f.op(f"or i1 {fail1}, {fail2}")
                nbytes = f.op(f"select i1 {f.op(f'icmp eq i64 {nbytes}, 0')}, i64 1, i64 {nbytes}")
                go, bad, ok = f.label("alloc"), f.label("allocfail"), f.label("allocok")
                f.cbr(fail, bad, go)
                f.start(go)
                buf = f.op(f"call ptr @malloc(i64 {nbytes})", name_hint(name) + ".priv")
                f.cbr(f.op(f"icmp eq ptr {buf}, null"), bad, ok)
                f.start(bad)
                for live in reversed(self.ctx.heap + bufs):
                    f.emit(f"call void @free(ptr {live})")
                f.emit("ret i32 1")
                f.start(ok)
                bufs.append(buf)
                sizes.append(count)
                fields += [("ptr", buf), ("i64", count)]
            return fields, p

        def thread_args(tid, nth, vals):
            f, out = self.f, []
            for k, (name, op, arg) in enumerate(specs):
                mt, base, count = MEMT[arg.dtype], vals[2 * k], vals[2 * k + 1]
                priv = f.op(f"getelementptr inbounds {mt}, ptr {base}, i64 {f.op(f'mul i64 {tid}, {count}')}",
                            name_hint(name) + ".mine")
                ident = lit(identity(op, arg.dtype), arg.dtype)
                self.counted_loop("fill", "0", count, 1, lambda e: f.emit(
                    f"store {mt} {ident}, ptr {f.op(f'getelementptr inbounds {mt}, ptr {priv}, i64 {e}')}"))
                out.append(("ptr", priv))
            return out

        def range_body(vs, ve, params):
            self.arrays = dict(self.arrays)
            for (name, _, _), p in zip(specs, params):
                a = self.arrays[name]
                self.arrays[name] = Arr(p, a.dtype, list(a.strides), True)
            self.counted_loop(s.var, vs, ve, step, lambda v: self.with_var(s.var, Val(v, "int64"), s.body))

        def finish(nth):
            f = self.f
            for (name, op, arg), buf, count in zip(specs, bufs, sizes):
                dt, mt, al = arg.dtype, MEMT[arg.dtype], ELSIZE[arg.dtype]
                dst = self.arrays[name].ptr

                def per_thread(k):
                    src = f.op(f"getelementptr inbounds {mt}, ptr {buf}, i64 {f.op(f'mul i64 {k}, {count}')}")

                    def per_elem(e):
                        pa = f.op(f"getelementptr inbounds {mt}, ptr {dst}, i64 {e}")
                        pb = f.op(f"getelementptr inbounds {mt}, ptr {src}, i64 {e}")
                        x = f.op(f"load {mt}, ptr {pa}, align {al}")
                        y = f.op(f"load {mt}, ptr {pb}, align {al}")
                        f.emit(f"store {mt} {self._arith(COMBINE[op], dt, x, y, None)}, ptr {pa}, align {al}")
                    self.counted_loop("elem", "0", count, 1, per_elem,
                                      self.m.loop_md('!"llvm.loop.vectorize.enable", i1 true'))
                self.counted_loop("thread", "0", nth, 1, per_thread)
                f.emit(f"call void @free(ptr {buf})")

        self.f.emit(f"; parallel reduction loop {name_hint(s.var)}: private copies of "
                    f"{', '.join(n for n, _, _ in specs)}")
        self.parallel_loop(s, step, ParallelHooks(setup, ["ptr"] * len(specs), range_body,
                                                  thread_args, finish))

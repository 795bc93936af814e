"""LLVM backend, part 2: statements, loops (serial, unrolled, widened vector,
outlined parallel), temporaries, and :func:`emit_llvm`.

Vector loops (``For.kind == "vector"``, ``attrs["vector_width"]`` lanes, by
default one 512-bit register on AVX-512 hosts: 16 float32 / 8 float64; a width
that is no power of two runs at the widest power of two below it) become
explicit ``<W x T>`` code followed by, for a straight-line body (or a rounded
width) with ``W >= 8``, at most one step of ``W/2`` lanes, then a scalar
epilogue (not unrolled) for the remainder.  In the
widened body an index that is affine with unit stride in the iterator is a vector
load/store, one that does not depend on it is a scalar load + broadcast, anything
else a gather/scatter of scalar accesses (lanes in order).  ``a*b+c`` on floats
becomes ``llvm.fma``.  A body is widened only if it is made of ``Store``/``Let``/
``Block`` and every array it stores is stored at one index and loaded (if at all)
at that same index, with distinct lanes; otherwise -- an inner loop, an ``If``, an
``Allocate``, a possible cross-lane dependence, or a lane-dependent condition
guarding a gathered load (a contiguous one is an ``llvm.masked.load``) -- the
loop stays scalar with
``llvm.loop.vectorize.enable`` metadata (LLVM's vectorizer then checks legality
itself) and a comment in the IR says why.

Parallel loops (outside another parallel loop) are outlined: the enclosing
function stores every live scalar, array pointer and runtime row stride into a
struct and calls ``GOMP_parallel(NAME.parK, &struct, 0, 0)`` (0 threads: the
OpenMP default, which honours ``OMP_NUM_THREADS``); ``NAME.parK`` takes its static
chunk by ``omp_get_thread_num``/``omp_get_num_threads`` and calls the
``alwaysinline`` ``NAME.parK.range`` whose array arguments are ``noalias``.
Parallel loops nested in a parallel loop run serially (as nested OpenMP regions
do by default).  Parallel and vector loops carrying a reassociated reduction
(``attrs["reduction"]``) are lowered by :mod:`codegen.llvm.reduce` (accumulators,
horizontal reductions, per-thread partials or private array copies).
"""
from __future__ import annotations

import math
import sys

from .. import ir, isplit, jam, loops, ordered, pipeline, regblock, regions, simplify, vectorize
from ..ir import ELSIZE, expr_key
from .expr import ExprLowering, VecState
from .lower import (BITS, IDENT, LLT, MEMT, STACK_LIMIT, Arr, CannotWiden, Ctx, Func, Val, host,
                    name_hint, vt)
from .dot import DotLowering
from .parallel import ParallelLowering, plain_parallel
from .promote import PromotionLowering
from .reduce import ACC, ReductionLowering

# large temporaries (see StmtLowering's allocation): 2 MiB aligned from 4 MiB
# on and advised for transparent huge pages, on Linux (MADV_HUGEPAGE there)
HUGE_PAGES = sys.platform.startswith("linux")
HUGE_PAGE, HUGE_FROM, MADV_HUGEPAGE = 2 << 20, 4 << 20, 14
_SCALAR_ATTR = {"bool": " zeroext", "int8": " signext", "uint8": " zeroext"}


class Lowering(ParallelLowering, PromotionLowering, ReductionLowering, DotLowering, ExprLowering):
    def __init__(self, fn: ir.LoweredFunction, h):
        super().__init__(fn, h)
        self.npar = 0
        self.temps: dict = {}        # name -> ir.Allocate of the temporaries in scope

    # -------------------------------------------------------------- function
    def run(self) -> str:
        fn = self.fn
        if not isinstance(fn.name, str) or not IDENT.match(fn.name):
            raise ValueError(f"LLVM backend: function name {fn.name!r} is not an identifier")
        seen = set()
        for n in [*fn.constants, *(s.name for s in fn.scalars), *(a.name for a in fn.arrays)]:
            if n in seen:
                raise ValueError(f"LLVM backend: name {n!r} is declared twice")
            seen.add(n)
        params = []
        for k, sc in enumerate(fn.scalars):
            if sc.dtype not in LLT:
                raise TypeError(f"LLVM backend: unknown dtype {sc.dtype!r}")
            p = f"%s{k}.{name_hint(sc.name)}"
            params.append(f"{LLT[sc.dtype]}{_SCALAR_ATTR.get(sc.dtype, '')} {p}")
            self.env[sc.name] = Val(p, sc.dtype)
        ptrs = []
        for k, a in enumerate(fn.arrays):
            if a.dtype not in LLT:
                raise TypeError(f"LLVM backend: unknown dtype {a.dtype!r}")
            ptrs.append(f"%a{k}.{name_hint(a.name)}")
            params.append(f"ptr noalias {ptrs[-1]}")
        self.f = Func(f"define i32 @{fn.name}({', '.join(params)}) #0")
        status = self.f.alloca("i32", 4, "status")
        self.f.emit(f"store i32 0, ptr {status}, align 4")
        self.ctx = Ctx(False, status)
        for p, a in zip(ptrs, fn.arrays):
            dims = [self._dim(d) for d in a.shape]
            self.arrays[a.name] = Arr(p, a.dtype, self.strides(dims), a.writable)
        self.stmt(isplit.split_invariant_loads(fn.body))   # codegen.isplit
        self.stream_fence(fn.body)                         # codegen.llvm.stream
        r = self.f.op(f"load i32, ptr {status}, align 4")
        self.f.emit(f"ret i32 {r}")
        self.m.funcs.insert(0, self.f.text())
        return self.m.text()

    def _dim(self, d):
        c = ir.const_eval(d, self.consts)
        return c if c is not None else self.index(d).t

    def strides(self, dims: list) -> list:
        """Row-major strides (ints where the extents are constant)."""
        st, acc = [1] * len(dims), 1
        for k in range(len(dims) - 1, 0, -1):
            d = dims[k]
            if isinstance(acc, int) and isinstance(d, int):
                acc = acc * d
            elif acc == 1:
                acc = d
            else:
                acc = self.f.op(f"mul nsw i64 {acc}, {d}", "stride")
            st[k - 1] = acc
        return st

    # -------------------------------------------------------------- statements
    def stmt(self, s) -> None:
        if isinstance(s, ir.Store):
            self.store(s)
        elif isinstance(s, ir.Block):
            k = 0
            while k < len(s.stmts):
                mixed = regions.mixed_run(s.stmts, k) if not self.ctx.parallel and self.vec is None \
                    else []
                if mixed:                         # codegen.llvm.parallel: one region
                    self.region(mixed)
                    k += len(mixed)
                    continue
                run = []
                while not self.ctx.parallel and self.vec is None and k + len(run) < len(s.stmts) \
                        and plain_parallel(s.stmts[k + len(run)]):
                    run.append(s.stmts[k + len(run)])
                if len(run) > 1:                  # codegen.llvm.parallel: one region
                    self.region(run)
                    k += len(run)
                else:
                    self.stmt(s.stmts[k])
                    k += 1
        elif isinstance(s, ir.Let):
            self.with_var(s.name, self.ex(s.value), s.body)
        elif isinstance(s, ir.If):
            self.if_(s)
        elif isinstance(s, ir.For):
            self.loop(s)
        elif isinstance(s, ir.Allocate):
            self.allocate(s)
        else:
            raise TypeError(f"LLVM backend: not a statement: {s!r}")

    def with_var(self, name: str, val: Val, body) -> None:
        saved = self.env
        self.env = dict(saved)
        self.env[name] = val
        try:
            self.stmt(body)
        finally:
            self.env = saved

    def with_array(self, name: str, arr: Arr, body) -> None:
        saved = self.arrays
        self.arrays = dict(saved)
        self.arrays[name] = arr
        try:
            self.stmt(body)
        finally:
            self.arrays = saved

    def if_(self, s: ir.If) -> None:
        if self.vec is not None and self.vec.plan is None:
            raise CannotWiden("an If in the body")
        c = self.to_bool(self.ex(s.cond))
        if c.kind != "u":
            raise CannotWiden("the condition of an if depends on the vector iterator")
        f = self.f
        then, done = f.label("then"), f.label("endif")
        other = f.label("else") if s.else_ is not None else done
        f.cbr(c.t, then, other)
        f.start(then)
        self.stmt(s.then)
        f.br(done)
        if s.else_ is not None:
            f.start(other)
            self.stmt(s.else_)
            f.br(done)
        f.start(done)

    # -------------------------------------------------------------- loops
    def carried_loop(self, var: str, lo: str, hi, step: int, inits, body, md: str = "") -> list:
        """``for (v = lo; v < hi; v += step) accs = body(v, accs)`` with loop-carried
        values ``inits`` = [(type, initial value)]; returns their values after it.
        ``hi`` is a value, or a callable evaluated in the loop header each
        iteration (as C does)."""
        f = self.f
        head, bl, done = f.label("for"), f.label("body"), f.label("endfor")
        pre = f.cur
        f.br(head)
        f.start(head)
        hb = f.blocks[-1]
        v = f.tmp(name_hint(var) + ".")
        accs = [f.tmp("acc") for _ in inits]
        h = hi() if callable(hi) else hi
        f.cbr(f.op(f"icmp slt i64 {v}, {h}"), bl, done)
        f.start(bl)
        new = body(v, accs)
        nxt = f.op(f"add nsw i64 {v}, {step}")
        latch = f.cur
        f.br(head, md)
        f.start(done)
        hb[1][0:0] = [f"{v} = phi i64 [ {lo}, %{pre} ], [ {nxt}, %{latch} ]"] + [
            f"{a} = phi {t} [ {x}, %{pre} ], [ {y}, %{latch} ]" for a, (t, x), y in zip(accs, inits, new)]
        return accs

    def counted_loop(self, var: str, lo: str, hi, step: int, body, md: str = "") -> None:
        """``for (v = lo; v < hi; v += step) body(v)``."""
        def run(v, accs):
            body(v)
            return []
        self.carried_loop(var, lo, hi, step, [], run, md)

    def loop(self, s: ir.For) -> None:
        self.enclosing.append(s)
        try:
            self._loop(s)
        finally:
            self.enclosing.pop()

    def _loop(self, s: ir.For) -> None:
        step = ir.check_loop(s, "LLVM backend")
        if self.vec is not None:
            if self.vec.plan is None:
                raise CannotWiden("an inner loop in the body")
            return self.inner_loop(s, step)
        if s.attrs.get("reduction") and s.kind in ("parallel", "vector"):
            return self.reduction_loop(s, step)          # codegen.llvm.reduce
        if s.kind == "parallel" and not self.ctx.parallel:
            return self.parallel_loop(s, step)
        if not self.ctx.parallel and regions.stepped_loops(s):   # codegen.regions
            return self.region([s])
        if s.kind == "vector" and s.attrs.get("dot"):
            return self.dot_loop(s)                      # codegen.llvm.dot
        if s.kind == "vector":
            return self.vector_loop(s, step)
        md = ""
        if s.kind == "unrolled":
            md = self.m.loop_md(f'!"llvm.loop.unroll.count", i32 {int(s.attrs.get("unroll", 8))}')
        elif isinstance(s.body, ir.If) and s.body.else_ is not None and simplify.partial_tiles(s.body.else_):
            # the loop over tiles around a versioned body (full tile / partial
            # tile): unrolled by LLVM, both copies' addresses competed for
            # registers and the hot one reloaded its bases from the stack
            # (fuzz037, a 2-trip loop of 4-lane tiles: 0.8x -> 0.92x gcc)
            md = self.m.loop_md('!"llvm.loop.unroll.disable"')
        else:
            strided = ordered.strided_ordered_reduction(s, {n: a.dtype for n, a in self.arrays.items()})
            if strided:
                self.f.emit(f"; loop {name_hint(s.var)}: ordered float reduction not vectorised "
                            f"({' '.join(strided.split())} is not contiguous in {name_hint(s.var)})")
                md = self.m.loop_md('!"llvm.loop.vectorize.enable", i1 false')
            elif self._short_loop(s):
                md = self.m.loop_md('!"llvm.loop.vectorize.enable", i1 false',
                                    '!"llvm.loop.unroll.disable"')
            elif self._short_loop(s, nest=True):
                md = self.m.loop_md('!"llvm.loop.unroll.disable"')
        held = self._held(s)
        if held:
            return self.promoted_loop(s, step, held, md)
        if not md and jam.jam_count(s):
            n = jam.jam_count(s)
            self.f.emit(f"; loop {name_hint(s.var)}: unroll-and-jam {n} into loop "
                        f"{name_hint(jam.inner_loop(s).var)} (a column walk: codegen.jam)")
            done = ir.For(s.var, s.lo, s.hi, s.body, kind=s.kind, step=s.step, attrs={"jammed": n})
            return self.stmt(regblock.jam(done, n, attr="jammed"))
        self.counted_loop(s.var, self.index(s.lo).t, lambda: self.index(s.hi).t, step,
                          lambda v: self.with_var(s.var, Val(v, "int64"), s.body), md)

    def _short_loop(self, s: ir.For, nest=False) -> bool:
        """A guarded serial loop (an ``if`` somewhere in its body) that runs
        fewer iterations than one vector holds (``loops.trip_bound``:
        ``max(0, ..) .. min(2, ..) + 1`` in a skewed time tile).  Innermost:
        LLVM's vectorizer made it one masked vector step and its unroller
        copied it three times, each copy's addresses competing for registers
        in the deep nest (jacobi-2d time-tiled 0.71x gcc): neither vectorised
        nor unrolled.  Around loops (``nest``): not unrolled (jacobi-2d's
        4-trip ``i1``: 0.78x unrolled, 0.95x not).  Metadata only: the hint
        never changes what runs.  Unguarded short loops are left to LLVM:
        unrolling cholesky's 4-trip ``k1`` pays (1.14x vs 0.97x), and keeping
        the library GEMM's 4-trip ``jv0`` around its micro-kernel rolled cost
        2.4x."""
        trip = loops.trip_bound(s)
        inner = list(ir.walk_stmts(s.body))
        if trip is None or trip >= self.vector_width(s) or nest != any(
                isinstance(x, ir.For) for x in inner):
            return False
        if not any(isinstance(x, ir.If) for x in inner):
            return False        # unguarded (cholesky's k1, floyd's j1, GEMM's jv0)
        self.f.emit(f"; loop {name_hint(s.var)}: at most {trip} iterations, fewer than a vector: "
                    + ("not unrolled (a loop nest)" if nest else "neither vectorised nor unrolled"))
        return True

    # -------------------------------------------------------------- vector loops
    def vector_width(self, s: ir.For) -> int:
        w = (s.attrs or {}).get("vector_width")
        if w is not None:
            return max(1, int(w))
        bits = 32
        for st in ir.walk_stmts(s.body):
            exprs = []
            if isinstance(st, ir.Store):
                a = self.arrays.get(st.array)
                bits = max(bits, BITS[a.dtype] if a else 32)
                exprs = [st.value, *st.index]
            elif isinstance(st, ir.Let):
                exprs = [st.value]
            for e in exprs:
                for x in ir.walk_exprs(e):
                    if isinstance(x, ir.Load) and x.array in self.arrays:
                        bits = max(bits, BITS[self.arrays[x.array].dtype])
        return max(1, self.host.vector_bits // bits)

    @staticmethod
    def widen_check(body, var: str):
        """(None, (read-and-written arrays, unconditional load keys)) if the body
        can be widened, else (reason, None)."""
        stores, loads, safe, lets = {}, {}, set(), set()

        def visit(e, uncond):
            _visit_loads(e, uncond, loads, safe)

        def walk(s):
            if isinstance(s, ir.Block):
                return next((r for r in map(walk, s.stmts) if r), None)
            if isinstance(s, ir.Let):
                if s.name in lets or s.name == var:     # keys of loads would be ambiguous
                    return f"the body binds {s.name} twice"
                lets.add(s.name)
                visit(s.value, True)
                return walk(s.body)
            if isinstance(s, ir.Store):
                stores.setdefault(s.array, {})[tuple(expr_key(i) for i in s.index)] = s.index
                for e in (s.value, *s.index):
                    visit(e, True)
                return None
            return f"a{'n' if type(s).__name__[0] in 'AEIOU' else ''} {type(s).__name__} in the body"

        reason = walk(body)
        if reason:
            return reason, None
        opaque = lets | {var}
        rmw = set()
        for name, st in stores.items():
            keys = list(st)
            for k1 in range(len(keys)):
                for k2 in range(k1 + 1, len(keys)):
                    if not _disjoint(st[keys[k1]], st[keys[k2]], opaque):
                        return f"{name} is stored at indices that may overlap", None
            for key, index in loads.get(name, {}).items():
                if key in st:
                    rmw.add(name)
                elif not all(_disjoint(index, other, opaque) for other in st.values()):
                    return f"{name} is loaded at another index than it is stored", None
        return None, (rmw, safe)

    def inner_loop(self, s: ir.For, step: int) -> None:
        """A loop inside a widened body: a lane-uniform iterator; the plan's
        accumulators for it are carried in registers (phis) and stored after it."""
        lo, hi = self.index(s.lo), self.index(s.hi)
        if lo.kind != "u" or hi.kind != "u":
            raise CannotWiden(f"the bounds of the inner loop {s.var} depend on the vector iterator")
        vec, f = self.vec, self.f
        accs = [(a, ix, (a, tuple(expr_key(i) for i in ix)))
                for a, ix in vec.plan.promote.get(id(s), ())]
        run = lambda v: self.with_var(s.var, Val(v, "int64"), s.body)     # noqa: E731
        if not accs:
            return self.counted_loop(s.var, lo.t, lambda: self.index(s.hi).t, step, run)
        go, done = f.label("acc"), f.label("endacc")
        f.cbr(f.op(f"icmp slt i64 {lo.t}, {hi.t}"), go, done)
        f.start(go)
        f.emit(f"; {', '.join(a for a, _, _ in accs)} held in registers over loop {name_hint(s.var)}")
        outer = {k: vec.promoted.get(k) for _, _, k in accs}
        inits = []
        for a, ix, key in accs:
            dt = self.array(a).dtype
            v = self.ex(ir.Load(a, ix, dt))
            inits.append((v.kind, dt, v.t if v.kind == "u" else self.mat(v)))

        def body(v, regs):
            for (_, _, key), (k, dt, _), r in zip(accs, inits, regs):
                vec.promoted[key] = Val(r, dt, k)
            run(v)
            return [vec.promoted[key].t if k == "u" else self.mat(vec.promoted[key])
                    for (_, _, key), (k, _, _) in zip(accs, inits)]

        final = self.carried_loop(s.var, lo.t, lambda: self.index(s.hi).t, step,
                                  [(vt(LLT[dt], None if k == "u" else vec.w), x) for k, dt, x in inits],
                                  body)
        for (a, ix, key), (k, dt, _), r in zip(accs, inits, final):
            if outer[key] is None:
                vec.promoted.pop(key, None)
            else:
                vec.promoted[key] = outer[key]
            self.with_var(ACC, Val(r, dt, k), ir.Store(a, ix, ir.Var(ACC, dt)))
        f.br(done)
        f.start(done)

    def vector_loop(self, s: ir.For, step: int) -> None:
        w = self.vector_width(s)
        if w & (w - 1):
            # <26 x float> is no hardware width: LLVM's type legalisation
            # split it lane by lane (vinsertps through the stack, 0.68x gcc on
            # the library's direct conv2d).  The widest power of two below
            # it runs the groups, then the half step and the scalar epilogue.
            self.f.emit(f"; vector loop {name_hint(s.var)}: {w} lanes asked, {1 << (w.bit_length() - 1)} "
                        "used (a power of two)")
            w = 1 << (w.bit_length() - 1)
        if w > 1 and loops.nested(s.body):
            return self.nested_vector_loop(s, step, w, half=w != self.vector_width(s))
        reason, info = self.widen_check(s.body, s.var) if w > 1 else ("vector width 1", None)
        if reason is None:
            mark, env = self.f.mark(), self.env
            try:
                return self.widened_loop(s, step, w, info)
            except CannotWiden as exc:
                self.f.rollback(mark)
                self.vec, self.spec, self.env = None, 0, env
                reason = str(exc)
        self.scalar_vector_loop(s, step, f"not widened ({' '.join(reason.split())}); left to the "
                                         "loop vectorizer",
                                self.m.loop_md('!"llvm.loop.vectorize.enable", i1 true'))

    def scalar_vector_loop(self, s: ir.For, step: int, why: str, md: str = "") -> None:
        """A vector loop run as a scalar loop, with a comment saying why."""
        self.f.emit(f"; vector loop {name_hint(s.var)}: {why}")
        self.counted_loop(s.var, self.index(s.lo).t, lambda: self.index(s.hi).t, step,
                          lambda v: self.with_var(s.var, Val(v, "int64"), s.body), md)

    def nested_vector_loop(self, s: ir.For, step: int, w: int, half=False) -> None:
        """A vector loop with loops or ifs inside (:mod:`codegen.vectorize`);
        ``half``: a half step before the scalar epilogue (the width was rounded
        down to a power of two)."""
        p, reason = vectorize.plan(s) if step == 1 else (None, f"step {step}")
        if p is not None:
            loads, safe = {}, set()
            for st in ir.walk_stmts(s.body):
                for e in ir.stmt_exprs(st):
                    _visit_loads(e, True, loads, safe)
            mark, env = self.f.mark(), self.env
            try:
                return self.widened_loop(s, step, w, (p.written & set(loads), safe, p), half)
            except CannotWiden as exc:
                self.f.rollback(mark)
                self.vec, self.spec, self.env = None, 0, env
                reason = str(exc)
        self.scalar_vector_loop(s, step, f"not widened ({' '.join(reason.split())}); runs as a "
                                         "scalar loop")

    def vector_end(self, lo: str, hi: str, step: int, w: int) -> str:
        """The iterator value after the last whole group of ``w`` iterations."""
        f = self.f
        n = f.op(f"sub i64 {hi}, {lo}", "span")
        if step != 1:
            n = f.op(f"sdiv i64 {f.op(f'add i64 {n}, {step - 1}')}, {step}", "trips")
        n = f.op(f"select i1 {f.op(f'icmp sgt i64 {n}, 0')}, i64 {n}, i64 0", "trips")
        if w & (w - 1) == 0:
            nv = f.op(f"and i64 {n}, {-w}", "vtrips")
        else:
            nv = f.op(f"mul nuw i64 {f.op(f'udiv i64 {n}, {w}')}, {w}", "vtrips")
        return f.op(f"add nsw i64 {lo}, {nv if step == 1 else f.op(f'mul nsw i64 {nv}, {step}')}", "vend")

    def widened_loop(self, s: ir.For, step: int, w: int, info, half=False) -> None:
        f = self.f
        lo, hi = self.index(s.lo).t, self.index(s.hi).t
        vend = self.vector_end(lo, hi, step, w)
        f.emit(f"; vector loop {name_hint(s.var)}: {w} lanes, then a scalar epilogue"
               + ("; inner loops run once per vector iteration" if len(info) > 2 else ""))

        def vbody(base, w=w):
            self.vec = VecState(w, *info)
            try:
                self.with_var(s.var, Val(base, "int64", "a", step), s.body)
            finally:
                self.vec = None
        self.counted_loop(s.var, lo, vend, w * step, vbody,
                          self.m.loop_md('!"llvm.loop.isvectorized", i32 1'))
        if (len(info) == 2 or half) and w >= 8 and w & (w - 1) == 0:
            # straight-line body (or a rounded width): half the remainder (one group of w/2
            # lanes) as one narrower vector step, as gcc's masked epilogue would
            vend, start = self.vector_end(vend, hi, step, w // 2), vend
            f.emit(f"; vector loop {name_hint(s.var)}: then at most one step of {w // 2} lanes")
            self.counted_loop(s.var, start, vend, w // 2 * step, lambda b: vbody(b, w // 2),
                              self.m.loop_md('!"llvm.loop.isvectorized", i32 1'))
        # the epilogue runs fewer than w iterations: unrolled (LLVM's runtime
        # unroll by 4 + remainder loop) its induction variables spilled the hot
        # vector loop's (fuzz063, a tile of 4 lanes: 0.71x -> 0.91x gcc)
        self.counted_loop(s.var, vend, hi, step, lambda v: self.with_var(s.var, Val(v, "int64"), s.body),
                          self.m.loop_md('!"llvm.loop.vectorize.width", i32 1',
                                         '!"llvm.loop.interleave.count", i32 1',
                                         '!"llvm.loop.unroll.disable"'))

    # -------------------------------------------------------------- temporaries
    def allocate(self, s: ir.Allocate) -> None:
        self.temps[s.array] = s
        try:
            self._allocate(s)
        finally:
            del self.temps[s.array]

    def _allocate(self, s: ir.Allocate) -> None:
        if self.vec is not None:
            raise CannotWiden("an Allocate in the body")
        if s.dtype not in LLT:
            raise TypeError(f"LLVM backend: unknown dtype {s.dtype!r}")
        f, m = self.f, self.m
        mt, el = MEMT[s.dtype], ELSIZE[s.dtype]
        dims = [ir.const_eval(d, self.consts) for d in s.shape]
        if None not in dims:
            n = math.prod(dims)
            if 0 < n * el <= STACK_LIMIT:
                p = f.alloca(f"[{n} x {mt}]", 64, name_hint(s.array) + ".")
                if s.zero_init:
                    m.declare("llvm.memset.p0.i64", "void", ["ptr", "i8", "i64", "i1"])
                    f.emit(f"call void @llvm.memset.p0.i64(ptr align 64 {p}, i8 0, i64 {n * el}, i1 false)")
                return self.with_array(s.array, Arr(p, s.dtype, self.strides(dims)), s.body)
        dvals = [d if d is not None else self.index(e).t for d, e in zip(dims, s.shape)]
        m.declare("llvm.umul.with.overflow.i64", "{ i64, i1 }", ["i64", "i64"])
        fail, n = "false", "1"

        def mul_checked(x, y):
            r = f.op(f"call {{ i64, i1 }} @llvm.umul.with.overflow.i64(i64 {x}, i64 {y})")
            ov = f.op(f"extractvalue {{ i64, i1 }} {r}, 1")
            return f.op(f"extractvalue {{ i64, i1 }} {r}, 0"), ov

        for d in dvals:                     # negative extents or an overflowing size fail
            fail = f.op(f"or i1 {fail}, {f.op(f'icmp slt i64 {d}, 0')}")
            n, ov = mul_checked(n, d)
            fail = f.op(f"or i1 {fail}, {ov}")
        n = f.op(f"select i1 {f.op(f'icmp eq i64 {n}, 0')}, i64 1, i64 {n}", "count")
        # 64-byte aligned (a cache line, a full AVX-512 vector); from 4 MiB on
        # (as NumPy and the C backend do) 2 MiB aligned and advised for
        # transparent huge pages (Linux): a large temporary, fresh from the
        # system at every call, faults 2 MiB at a time, not 4 KiB.
        # aligned_alloc wants a size that is a multiple of the alignment
        nbytes, ov = mul_checked(n, el)
        fail = f.op(f"or i1 {fail}, {ov}")
        fail = f.op(f"or i1 {fail}, {f.op(f'icmp ugt i64 {nbytes}, 4611686018427387904')}")
        huge = f.op(f"icmp uge i64 {nbytes}, {HUGE_FROM}", "huge") if HUGE_PAGES else None
        align = f.op(f"select i1 {huge}, i64 {HUGE_PAGE}, i64 64", "align") if huge else "64"
        if huge:
            up = f.op(f"add i64 {nbytes}, {f.op(f'sub i64 {align}, 1')}")
            nbytes = f.op(f"and i64 {up}, {f.op(f'sub i64 0, {align}')}", "bytes")
        else:
            nbytes = f.op(f"and i64 {f.op(f'add i64 {nbytes}, 63')}, -64", "bytes")
        m.declare("aligned_alloc", "noalias ptr", ["i64", "i64"])
        call = f"call ptr @aligned_alloc(i64 {align}, i64 {nbytes})"
        m.declare("free", "void", ["ptr"])
        go, bad, ok = f.label("alloc"), f.label("allocfail"), f.label("allocok")
        f.cbr(fail, bad, go)
        f.start(go)
        p = f.op(call, name_hint(s.array) + ".")
        f.cbr(f.op(f"icmp eq ptr {p}, null"), bad, ok)
        f.start(bad)
        after = None
        if self.ctx.parallel:              # no return out of a parallel loop: flag, skip the body
            f.emit(f"store atomic i32 1, ptr {self.ctx.status} monotonic, align 4")
            after = f.label("endalloc")
            f.br(after)
        else:
            for live in reversed(self.ctx.heap):
                f.emit(f"call void @free(ptr {live})")
            f.emit("ret i32 1")
        f.start(ok)
        if huge:
            advise, done = f.label("advise"), f.label("advised")
            f.cbr(huge, advise, done)
            f.start(advise)
            m.declare("madvise", "i32", ["ptr", "i64", "i32"])
            f.emit(f"call i32 @madvise(ptr {p}, i64 {nbytes}, i32 {MADV_HUGEPAGE})")
            f.br(done)
            f.start(done)
        if s.zero_init:
            m.declare("llvm.memset.p0.i64", "void", ["ptr", "i8", "i64", "i1"])
            f.emit(f"call void @llvm.memset.p0.i64(ptr align 64 {p}, i8 0, i64 {nbytes}, i1 false)")
        self.ctx.heap.append(p)
        try:
            self.with_array(s.array, Arr(p, s.dtype, self.strides(dvals)), s.body)
        finally:
            self.ctx.heap.pop()
        f.emit(f"call void @free(ptr {p})")
        if after:
            f.br(after)
            f.start(after)


def _visit_loads(e, uncond, loads: dict, safe: set) -> None:
    """Records the loads of ``e`` ({array: {key: index}}) and, in ``safe``, those
    evaluated whenever ``e`` is (not under a select's arm or a lazy operand)."""
    if isinstance(e, ir.Load):
        key = tuple(expr_key(i) for i in e.index)
        loads.setdefault(e.array, {})[key] = e.index
        if uncond:
            safe.add(("L", e.array, key))
    if isinstance(e, ir.Select):
        _visit_loads(e.cond, uncond, loads, safe)
        _visit_loads(e.a, False, loads, safe)
        _visit_loads(e.b, False, loads, safe)
    elif isinstance(e, ir.Binary) and e.op in ir.LOGIC_OPS:
        _visit_loads(e.a, uncond, loads, safe)
        _visit_loads(e.b, False, loads, safe)
    else:
        for c in ir.expr_children(e):
            _visit_loads(c, uncond, loads, safe)


def _affine_form(e, opaque: set):
    """``e`` as ({name: coefficient}, constant) over lane-invariant names, or None."""
    return loops.affine(e, lambda n: n not in opaque)


def _disjoint(idx1, idx2, opaque: set) -> bool:
    """Whether two in-bounds index tuples never name the same element in one
    vector iteration: some dimension differs by a nonzero lane-invariant constant."""
    if len(idx1) != len(idx2):
        return False
    for x, y in zip(idx1, idx2):
        fx, fy = _affine_form(x, opaque), _affine_form(y, opaque)
        if fx is not None and fy is not None and fx[0] == fy[0] and fx[1] != fy[1]:
            return True
    return False


def emit_llvm(fn: ir.LoweredFunction) -> str:
    """The LLVM IR text of ``fn`` (one exported function ``fn.name`` for this host)."""
    return Lowering(pipeline.prepare_for_printing(fn), host()).run()

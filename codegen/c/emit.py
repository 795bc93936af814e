"""C backend: turns an :class:`ir.LoweredFunction` into readable C99 + OpenMP.

:func:`emit_c` only produces text; :func:`codegen.compile_c` compiles, caches and
loads it.  Conventions of the emitted code:

* signature ``int NAME(<scalars>, <arrays>)``; read-only arrays are ``const``;
  arrays of rank >= 2 arrive as ``T* restrict A_`` and are viewed through a C99
  VLA pointer ``T (*restrict A)[d1]...`` so accesses read ``A[i][j]``;
* helpers (``tp_*``) are emitted only when used;
* temporaries live on the heap (``tp_alloc``: 64-byte aligned; from 4 MiB on
  2 MiB aligned and ``madvise``d for transparent huge pages, as NumPy does, so
  a large temporary fresh from the system at each call faults in 2 MiB at a
  time); a failed allocation frees what is
  live and returns 1 (inside an OpenMP loop, where ``return`` is not allowed, it
  sets ``tp_status`` and skips the body instead).  Small constant-size
  temporaries inside loops live on the stack.

Names: the user's names are emitted as they are, renamed only where the
generated code spells the same identifier (the rule: :mod:`codegen.c.names`).
The module layout: types, literals and precedence in :mod:`codegen.c.syntax`,
the ``tp_*`` helpers in :mod:`codegen.c.helpers`, widened vector loops in
:mod:`codegen.c.widen`; the passes run before printing in
:mod:`codegen.pipeline`.
"""
from __future__ import annotations

import math

from .. import ir, loops, pipeline, regions, toolchain, vecmath
from ..ir import ELSIZE, INT_RANGE
from .helpers import BARRIER_INCLUDES, helper_source
from .names import c_names, check_name, renamed
from .syntax import (BINOPS, CTYPES, LIBM, P_ADD, P_EQ, P_MUL, P_OR, P_PRIMARY, P_REL, P_UNARY,
                     SUFFIX, const_literal, int_literal)
from .dot import DotMixin
from .omp_regions import RegionsMixin
from .invariant import InvariantMixin
from .reduce import OPS, ReductionMixin, omp_op
from .regtile import RegTileMixin
from .speculate import InteriorMixin, Speculation, speculated
from .stream import StreamMixin, carriable
from .transpose import TransposeMixin
from .widen import WidenMixin

_STACK_LIMIT = 16384        # bytes: constant-size temporaries inside loops up to this go on the stack


def _safe_divisor(b) -> bool:
    """An integer divisor that can neither be 0 nor -1 (C's ``/`` and ``%``
    trap on 0 and on MIN / -1)."""
    if not isinstance(b, ir.Const):
        return False
    v = int(b.value)
    lo, hi = INT_RANGE.get(b.dtype, (None, None))
    if lo is not None:
        v = (v - lo) % (hi - lo) + lo
    return v != 0 and (v != -1 or b.dtype == "uint8")


# ------------------------------------------------------------------ printer
class CPrinter(WidenMixin, RegTileMixin, DotMixin, RegionsMixin, TransposeMixin, InvariantMixin,
               ReductionMixin, InteriorMixin, StreamMixin):
    """Prints the statements of a (renamed: :func:`codegen.c.names.renamed`)
    loop IR function as C into :attr:`lines`, collecting the ``tp_*`` helpers
    it uses in :attr:`helpers` (their source: :func:`codegen.c.helpers.helper_source`).

    The extension surface, for a printer of another C dialect (the CUDA
    printer, :class:`codegen.cuda.printer.CudaPrinter`, subclasses it):

    * state: ``fn`` (the function), ``lines``, ``helpers``;
    * ``out(indent, text)`` appends a line; ``helper(name)`` notes a helper
      and returns its name;
    * ``expr(e)`` the C text of an expression, ``wrap(e, min_prec)`` the
      same parenthesised below the precedence ``min_prec`` (``P_*`` of
      :mod:`codegen.c.syntax`);
    * overridable: ``call(e)`` (a math call: (text, precedence)),
      ``access(array, index)`` (an element's lvalue), ``stmt(s, indent)``,
      ``loop(s, indent)``, ``allocate(s, indent)`` (a temporary and then its
      body); ``body(s, indent)`` prints a statement as the tail of a scope.
    """

    # a select that reads memory in an arm prints as tp_pick(cond, a, b), its
    # loads at clamped indices (:func:`speculated`); a printer for another
    # dialect may keep the plain ternary
    SPECULATE = True

    def __init__(self, fn: ir.LoweredFunction):
        self.fn = fn
        self.speculation = Speculation(fn) if self.SPECULATE else None
        self.helpers: dict = {}          # name -> None (ordered set)
        self.lines: list = []
        self.heap: list = []             # live heap temporaries outside OpenMP loops
        self.omp = None                  # None, "parallel" or "simd": innermost OpenMP loop
        self.in_parallel = False
        self.loop_depth = 0
        self.uses_status = False
        self.temps: dict = {}            # name -> ir.Allocate of the temporaries in scope
        self.versioning: set = set()     # ids of the vector loops printed in two versions now
        self.streaming: dict = {}        # id(StreamStore) -> the lane buffer: codegen.c.stream
        self.carried = carriable(fn)     # arrays whose streamed lines a run may hold
        self.runs: dict = {}             # array -> its run in this thread's scope
        self.flushed: set = set()        # arrays whose runs were flushed before the loops printed
        self.nstreamed = 0               # vector loops streamed so far

    def helper(self, name: str) -> str:
        self.helpers.setdefault(name, None)
        return name

    def out(self, indent: int, text: str) -> None:
        self.lines.append("  " * indent + text)

    # ---------------------------------------------------------------- exprs
    def expr(self, e) -> str:
        return self._e(e)[0]

    def wrap(self, e, min_prec: int) -> str:
        s, p = self._e(e)
        return s if p >= min_prec else f"({s})"

    def _narrow_literal(self, e) -> bool:
        """True where the C type of ``e`` would be ``int`` although its dtype is int64."""
        if isinstance(e, ir.Const):
            return e.dtype == "int64" and -2**31 < int(e.value) < 2**31
        if isinstance(e, ir.Unary) and e.op == "neg":
            return self._narrow_literal(e.a)
        if isinstance(e, ir.Select):
            return self._narrow_literal(e.a) and self._narrow_literal(e.b)
        return False

    def _e(self, e) -> tuple:
        if isinstance(e, ir.Const):
            return const_literal(e)
        if isinstance(e, ir.Var):
            return (self.lane_var(e.name) if self.wide else None) or e.name, P_PRIMARY
        if isinstance(e, ir.Load):
            return (self.lane_load(e) if self.wide else None) or (self.hoisted or {}).get(
                ir.expr_key(e)) or self.access(e.array, e.index), P_PRIMARY
        if isinstance(e, ir.Binary):
            return self._binary(e)
        if isinstance(e, ir.Unary):
            if e.op == "neg":
                s = self.wrap(e.a, P_UNARY)
                s = f"-({s})" if s.startswith("-") else f"-{s}"
                return self._narrow(s, P_UNARY, e.dtype)
            if e.op == "not":
                return "!" + self.wrap(e.a, P_UNARY), P_UNARY
            raise ValueError(f"C backend: unknown unary op {e.op!r}")
        if isinstance(e, ir.Call):
            return self.call(e)
        if isinstance(e, ir.Select):
            arms = self.speculation.arms(e) if self.SPECULATE else None
            if arms is not None:
                pick = self.helper(f"tp_pick_{SUFFIX[e.dtype]}")
                return (f"{pick}({self.expr(e.cond)}, {self.expr(arms[0])}, "
                        f"{self.expr(arms[1])})"), P_PRIMARY
            return (f"({self.wrap(e.cond, P_REL)} ? {self.wrap(e.a, P_OR)} : "
                    f"{self.wrap(e.b, P_OR)})"), P_PRIMARY
        if isinstance(e, ir.Cast):
            if e.a.dtype == e.dtype:
                return self._e(e.a)
            if ir.is_half(e.dtype) or ir.is_half(e.a.dtype):
                return self.half_cast(e)
            return f"({CTYPES[e.dtype]}){self.wrap(e.a, P_UNARY)}", P_UNARY
        raise TypeError(f"C backend: not an expression: {e!r}")

    def half_cast(self, e: ir.Cast) -> tuple:
        """A conversion to or from a 16-bit float: through float32, by the
        functions :meth:`half_conversion` names."""
        fr, to = e.a.dtype, e.dtype
        x = self.expr(e.a)
        if ir.is_half(fr):
            x = f"{self.half_conversion(fr, 'float32')}({x})"
            if to == "float32":
                return x, P_PRIMARY
            if not ir.is_half(to):
                return f"({CTYPES[to]}){x}", P_UNARY
        elif fr != "float32":
            x = f"(float){self.wrap(e.a, P_UNARY)}"
        return f"{self.half_conversion('float32', to)}({x})", P_PRIMARY

    def half_conversion(self, fr: str, to: str) -> str:
        """The C function converting ``fr`` to ``to`` (one of them float32, the
        other 16-bit): the ``tp_cvt_*`` helpers on the bits in ``uint16_t``."""
        return self.helper(f"tp_cvt_{SUFFIX[fr]}_{SUFFIX[to]}")

    def _narrow(self, s: str, prec: int, dtype: str) -> tuple:
        # int8/uint8 arithmetic is done in int by C: convert back so that
        # enclosing operations see the wrapped value.
        if dtype in ("int8", "uint8"):
            return f"({CTYPES[dtype]})({s})", P_UNARY
        return s, prec

    def _binary(self, e: ir.Binary) -> tuple:
        op, dt = e.op, e.dtype
        if op in ("div", "mod") and ir.is_int(dt) and not _safe_divisor(e.b):
            fn = self.helper(f"tp_{op}_{SUFFIX[dt]}")
            return f"{fn}({self.expr(e.a)}, {self.expr(e.b)})", P_PRIMARY
        if op in ("min", "max") or op in ("floordiv", "floormod") and not (
                op == "floordiv" and ir.is_float(dt)):
            fn = self.helper(f"tp_{op}_{SUFFIX[dt]}")
            return f"{fn}({self.expr(e.a)}, {self.expr(e.b)})", P_PRIMARY
        if op == "floordiv":                                   # float
            fl = "floorf" if dt == "float32" else "floor"
            return f"{fl}({self.wrap(e.a, P_MUL)} / {self.wrap(e.b, P_MUL + 1)})", P_PRIMARY
        if op == "mod" and ir.is_float(dt):
            fm = "fmodf" if dt == "float32" else "fmod"
            return f"{fm}({self.expr(e.a)}, {self.expr(e.b)})", P_PRIMARY
        if op not in BINOPS:
            raise ValueError(f"C backend: unknown binary op {op!r}")
        sym, prec = BINOPS[op]
        if op in ir.CMP_OPS:            # keep comparisons of comparisons explicit
            lmin, rmin = P_ADD, P_ADD
        elif op in ir.LOGIC_OPS:        # parenthesise && inside || for readability
            lmin = rmin = P_EQ
            if isinstance(e.a, ir.Binary) and e.a.op == op:
                lmin = prec
        else:
            lmin, rmin = prec, prec + 1
        ls = self.wrap(e.a, lmin)
        if dt == "int64" and self._narrow_literal(e.a) and self._narrow_literal(e.b):
            ls = f"(int64_t){self.wrap(e.a, P_UNARY)}"        # avoid int overflow
        s = f"{ls} {sym} {self.wrap(e.b, rmin)}"
        if op in ir.ARITH_OPS:
            return self._narrow(s, prec, dt)
        return s, prec

    def call(self, e: ir.Call) -> tuple:
        f, dt = e.func, e.dtype
        ir.check_call(e, "C backend")
        arg = e.args[0]
        if ir.is_float(dt):
            if vecmath.supported(f, dt):                 # branchless, vectorisable
                self.helper(f"tp_bits_{SUFFIX[dt]}")
                name = self.helper(f"tp_{f}_{SUFFIX[dt]}")
            elif f == "sigmoid":
                name = self.helper(f"tp_sigmoid_{SUFFIX[dt]}")
            else:
                name = LIBM[f] + ("f" if dt == "float32" else "")
            return f"{name}({self.expr(arg)})", P_PRIMARY
        if ir.is_int(dt):
            if f in ("floor", "ceil"):
                return self._e(arg)
            if f == "abs":
                if dt == "uint8":
                    return self._e(arg)
                return f"{self.helper('tp_abs_' + SUFFIX[dt])}({self.expr(arg)})", P_PRIMARY
            inner = (f"{self.helper('tp_sigmoid_f64')}" if f == "sigmoid" else f)
            return f"({CTYPES[dt]}){inner}((double){self.wrap(arg, P_UNARY)})", P_UNARY
        raise TypeError(f"C backend: {f} of dtype {dt}")

    def access(self, array: str, index) -> str:
        if len(index) == 0:
            return f"{array}[0]"
        return array + "".join(f"[{self.expr(i)}]" for i in index)

    # ---------------------------------------------------------------- stmts
    def body(self, s, ind: int) -> None:
        """Emits ``s`` as the tail of an existing ``{ }`` scope."""
        stmts = s.stmts if isinstance(s, ir.Block) else [s]
        k = 0
        while k < len(stmts):
            mixed = regions.mixed_run(stmts, k) if self.omp is None and not self.in_parallel else []
            if mixed:
                self.region(mixed, ind)
                k += len(mixed)
                continue
            run = self.parallel_run(stmts, k)
            if len(run) > 1:
                self.region(run, ind)
                k += len(run)
                continue
            st, last = stmts[k], k == len(stmts) - 1
            k += 1
            if isinstance(st, ir.Block):
                if last:
                    self.body(st, ind)
                else:
                    for sub in st.stmts:
                        self.stmt(sub, ind)
            elif isinstance(st, ir.Let) and last:
                self.let_decl(st, ind)
                self.body(st.body, ind)
            elif isinstance(st, ir.Allocate) and last:
                self.allocate(st, ind)
            else:
                self.stmt(st, ind)

    def for_header(self, s: ir.For, step: int) -> str:
        """``for (int64_t v = lo; v < hi; v++) {`` of the loop ``s``."""
        inc = f"{s.var}++" if step == 1 else f"{s.var} += {step}"
        return (f"for (int64_t {s.var} = {self.expr(s.lo)}; {s.var} < "
                f"{self.wrap(s.hi, P_REL + 1)}; {inc}) {{")

    def worksharing_loop(self, s: ir.For, ind: int, pragma: str) -> None:
        """``s`` as an ``omp for`` (``pragma``) inside a parallel region."""
        check_name(s.var, "loop")
        step = ir.check_loop(s, "C backend")
        self.out(ind, pragma + omp_schedule_clause(s))
        self.out(ind, self.for_header(s, step))
        self.loop_depth += 1
        runs = self.open_runs(s.body, ind + 1)      # codegen.c.stream
        self.body(s.body, ind + 1)
        self.close_runs(s.body, ind + 1, runs)
        self.loop_depth -= 1
        self.out(ind, "}")

    def let_decl(self, s: ir.Let, ind: int) -> None:
        check_name(s.name, "Let")
        self.out(ind, f"const {CTYPES[s.value.dtype]} {s.name} = {self.expr(s.value)};")

    def stmt(self, s, ind: int) -> None:
        if isinstance(s, ir.Store):
            if not self.stream_store(s, ind):
                self.out(ind, f"{self.access(s.array, s.index)} = {self.expr(s.value)};")
        elif isinstance(s, ir.Block):
            for st in s.stmts:
                self.stmt(st, ind)
        elif isinstance(s, ir.For):
            self.loop(s, ind)
        elif isinstance(s, ir.If):
            self.if_(s, ind, "if")
        elif isinstance(s, ir.Let):
            self.out(ind, "{")
            self.let_decl(s, ind + 1)
            self.body(s.body, ind + 1)
            self.out(ind, "}")
        elif isinstance(s, ir.Allocate):
            self.out(ind, "{")
            self.allocate(s, ind + 1)
            self.out(ind, "}")
        else:
            raise TypeError(f"C backend: not a statement: {s!r}")

    def if_(self, s: ir.If, ind: int, word: str) -> None:
        self.out(ind, f"{word} ({self.expr(s.cond)}) {{")
        self.body(s.then, ind + 1)
        if s.else_ is None:
            self.out(ind, "}")
        elif isinstance(s.else_, ir.If):              # an else-if chain stays flat
            self.if_(s.else_, ind, "} else if")
        else:
            self.out(ind, "} else {")
            self.body(s.else_, ind + 1)
            self.out(ind, "}")

    def loop(self, s: ir.For, ind: int) -> None:
        flushed = self.flush_before(s, ind)         # codegen.c.stream
        if flushed:
            self.flushed = self.flushed | flushed
            try:
                return self.print_loop(s, ind)
            finally:
                self.flushed = self.flushed - flushed
        return self.print_loop(s, ind)

    def print_loop(self, s: ir.For, ind: int) -> None:
        check_name(s.var, "loop")
        step = ir.check_loop(s, "C backend")
        if s.kind == "vector" and self.SPECULATE and id(s) not in self.versioning \
                and not loops.nested(s.body):
            found = self.speculation.interior(s)
            if found:
                return self.interior_version(s, ind, *found)
        if self.omp is None and not self.in_parallel and regions.stepped_loops(s):
            return self.region([s], ind)
        if s.kind == "unrolled" and step == 1 and self.unrolled(s, ind) \
                or s.kind == "serial" and self.transposed_copy(s, ind):    # codegen.c.transpose
            return
        if s.attrs.get("small"):
            w, grain = s.attrs["small"]
            self.out(ind, f"/* parallel loop {s.var} runs on one thread: at most {w} statement "
                          f"instances between synchronisations, below the parallel grain {grain} */")
        saved = (self.omp, self.in_parallel, self.hoisted)
        aliases, views, streamed = [], [], None
        if s.kind == "parallel" and self.omp == "simd":
            # OpenMP forbids a parallel region inside simd: run this loop serially
            self.out(ind, "/* parallel loop inside a simd loop: runs serially */")
            s = ir.For(s.var, s.lo, s.hi, s.body, kind="serial", step=s.step)
        outer_runs = None
        if s.kind == "parallel":
            sched = omp_schedule_clause(s)
            outer_runs, self.runs = self.runs, {}   # a thread's runs: codegen.c.stream
            if s.attrs.get("reduction") and self.vector_reduction(s, ind, "parallel for" + sched):
                self.runs = outer_runs
                return
            clause, aliases, views = self.reduction_clause(s)
            if views:       # flat views of reduced temporaries, in a scope of their own
                self.out(ind, "{")
                for line in views:
                    self.out(ind + 1, line)
                ind += 1
            self.out(ind, "#pragma omp parallel for" + sched + clause)
            self.omp, self.in_parallel = "parallel", True
        elif s.kind == "vector" and s.attrs.get("dot"):
            return self.dot_loop(s, ind)                # codegen.c.dot
        elif s.kind == "vector" and not s.attrs.get("reduction") and loops.nested(s.body):
            return self.nested_vector_loop(s, ind)      # codegen.c.widen
        elif s.kind == "vector" and not s.attrs.get("reduction") and self.constant_vector_loop(s, ind):
            return                                      # codegen.c.widen
        elif s.kind == "vector":
            if s.attrs.get("reduction"):
                if self.vector_reduction(s, ind):
                    return
                # not the accumulator pattern: a plain (correct, scalar) loop
                self.out(ind, "/* vector reduction kept scalar: accumulator varies in the loop */")
            else:
                self.hoist_invariant_loads(s, ind)      # codegen.c.invariant
                if self.open_stream(s, ind):            # codegen.c.stream
                    streamed, ind = s, ind + 1
                self.out(ind, "#pragma omp simd")
                self.omp = "simd"
        elif s.kind == "unrolled":
            self.out(ind, f"#pragma GCC unroll {int(s.attrs.get('unroll', 8))}")
        self.out(ind, self.for_header(s, step))
        for line in aliases:          # views of the privatised reduction copies
            self.out(ind + 1, line)
        self.loop_depth += 1
        if outer_runs is not None:
            opened = self.open_runs(s.body, ind + 1)    # codegen.c.stream
        self.body(s.body, ind + 1)
        if outer_runs is not None:
            self.close_runs(s.body, ind + 1, opened)
            self.runs = outer_runs
        self.loop_depth -= 1
        self.omp, self.in_parallel, self.hoisted = saved
        self.out(ind, "}")
        if streamed is not None:
            self.close_stream(streamed, ind - 1)
        if views:
            self.out(ind - 1, "}")

    def unrolled(self, s: ir.For, ind: int) -> bool:
        """Unrolls in the source: one scoped copy of the body per iteration.
        A loop whose trip count is not constant gets the copies when it runs
        exactly ``attrs['unroll']`` times (full tiles) and a plain loop
        otherwise (the partial tile).  Returns False to fall back to a pragma."""
        lo = ir.const_eval(s.lo, self.fn.constants)
        hi = ir.const_eval(s.hi, self.fn.constants)
        factor = s.attrs.get("unroll")
        if lo is not None and hi is not None:
            if hi - lo > 64 or (factor is not None and factor != hi - lo):
                return False            # unroll-by-factor: leave it to the pragma
            outer, copies = self.known or {}, self.copies     # constant_vector_loop reads them
            self.copies = copies * (hi - lo)
            for v in range(lo, hi):
                self.out(ind, f"{{ /* {s.var} = {v} */")
                self.out(ind + 1, f"const int64_t {s.var} = {v};")
                self.known = dict(outer, **{s.var: v})
                self.body(s.body, ind + 1)
                self.out(ind, "}")
            self.known, self.copies = outer, copies
            return True
        if not isinstance(factor, int) or not 0 < factor <= 64:
            return False
        lo_s = self.expr(s.lo)
        # a named register tile (codegen.c.regtile) indexed by this loop needs
        # every copy's index known, the partial tile's too: its copies guarded
        guarded = lo is not None and self.touches_named(s)
        outer, copies = self.known or {}, self.copies
        if guarded:
            self.copies = copies * factor
        self.out(ind, f"if ({self.wrap(s.hi, P_REL + 1)} - ({lo_s}) == {factor}) {{")
        for v in range(factor):
            self.out(ind + 1, f"{{ /* {s.var} = {lo_s} + {v} */")
            self.out(ind + 2, f"const int64_t {s.var} = {lo_s} + {v};" if lo_s != "0"
                     else f"const int64_t {s.var} = {v};")
            if guarded:
                self.known = dict(outer, **{s.var: lo + v})
            self.body(s.body, ind + 2)
            self.out(ind + 1, "}")
        self.out(ind, "} else {")
        if guarded:                     # the tag's loop runs at most `factor` times
            hi_s = self.wrap(s.hi, P_REL + 1)
            for v in range(factor - 1):
                self.out(ind + 1, f"if ({lo + v} < {hi_s}) {{ /* {s.var} = {lo + v} */")
                self.out(ind + 2, f"const int64_t {s.var} = {lo + v};")
                self.known = dict(outer, **{s.var: lo + v})
                self.body(s.body, ind + 2)
                self.out(ind + 1, "}")
        else:
            plain = ir.For(s.var, s.lo, s.hi, s.body, kind="serial", step=1)
            self.loop(plain, ind + 1)
        self.out(ind, "}")
        self.known, self.copies = outer, copies
        return True

    def reduction_clause(self, s: ir.For) -> tuple:
        """OpenMP array-section reductions for ``attrs['reduction']`` =
        [(array, op)]: every thread accumulates into a private copy of the
        whole array (an argument or a temporary in scope), combined at the
        end.  An array of two or more dimensions is reduced through a flat
        pointer (an argument's own, ``name_``; for a temporary a view
        ``tp_red_name`` declared before the loop) and seen as ``name``
        again inside it.  Returns (clause, alias lines, view lines)."""
        items = s.attrs.get("reduction") or []
        if not items:
            return "", [], []
        arrays = {a.name: a for a in self.fn.arrays}
        parts, aliases, views = [], [], []
        for name, op in items:
            if op not in OPS:
                raise ValueError(f"C backend: no OpenMP reduction for {op!r}")
            a = arrays.get(name) or self.temps.get(name)
            if a is None:
                raise ValueError(f"C backend: parallel reduction into {name!r}, which is "
                                 "neither an argument array nor a temporary in scope")
            dtype = a.dtype
            size = " * ".join(f"({self.expr(d)})" for d in a.shape) or "1"
            t = CTYPES[dtype]
            raw = name
            if len(a.shape) > 1:
                raw = name + "_" if name in arrays else "tp_red_" + name
                if name not in arrays:
                    views.append(f"{t} *restrict {raw} = ({t} *){name};")
                ext = "".join(f"[{self.expr(d)}]" for d in a.shape[1:])
                aliases.append(f"{t} (*restrict {name}){ext} = ({t} (*){ext}){raw};")
            parts.append(f"reduction({omp_op(op, dtype, self)}: {raw}[0:{size}])")
        return " " + " ".join(parts), aliases, views

    def allocate(self, s: ir.Allocate, ind: int) -> None:
        """Emits the temporary, then its body, into the current scope."""
        self.temps[s.array] = s
        try:
            self._allocate(s, ind)
        finally:
            del self.temps[s.array]

    def _allocate(self, s: ir.Allocate, ind: int) -> None:
        name, t, rank = s.array, CTYPES[s.dtype], len(s.shape)
        check_name(name, "Allocate")
        dims = [ir.const_eval(d, self.fn.constants) for d in s.shape]
        nbytes = math.prod(dims) * ELSIZE[s.dtype] if None not in dims else None
        if self.loop_depth and nbytes is not None and 0 < nbytes <= _STACK_LIMIT:
            n = self.named_tile(s, dims)
            if n is not None:                           # codegen.c.regtile
                self.declare_named_tile(s, dims, n, ind)
                self.named = dict(self.named or {}, **{name: (dims, n)})
                try:
                    self.body(s.body, ind)
                finally:
                    del self.named[name]
                return
            ext = "".join(f"[{d}]" for d in dims) if rank else "[1]"
            self.out(ind, f"{t} {name}{ext}{' = {0}' if s.zero_init else ''};")
            self.body(s.body, ind)
            return
        self.helper("tp_alloc")
        shape = [self.expr(d) for d in s.shape] or ["1"]
        ptr = f"{t} (*restrict {name})" + "".join(f"[{d}]" for d in shape[1:]) if rank > 1 \
            else f"{t} *restrict {name}"
        self.out(ind, f"{ptr} = tp_alloc((const int64_t[]){{{', '.join(shape)}}}, {len(shape)}, "
                      f"sizeof({t}), {int(s.zero_init)});")
        if self.omp is None:
            self.out(ind, f"if ({name} == NULL) {{")
            for live in reversed(self.heap):
                self.out(ind + 1, f"free({live});")
            self.out(ind + 1, "return 1;")
            self.out(ind, "}")
            self.heap.append(name)
            self.body(s.body, ind)
            self.heap.pop()
            self.out(ind, f"free({name});")
        else:       # no return out of an OpenMP loop: flag the failure, skip the body
            self.uses_status = True
            self.out(ind, f"if ({name} == NULL) {{")
            if self.omp == "parallel":
                self.out(ind + 1, "#pragma omp atomic write")
            self.out(ind + 1, "tp_status = 1;")
            self.out(ind, "} else {")
            self.body(s.body, ind + 1)
            self.out(ind + 1, f"free({name});")
            self.out(ind, "}")


def _signature(fn: ir.LoweredFunction, em: "CPrinter") -> tuple:
    """(parameter declarations, cffi declaration types, body preamble lines)."""
    params, cffi_types, pre = [], [], []
    seen = set()

    def claim(n, what):
        check_name(n, what)
        if n in seen:
            raise ValueError(f"C backend: name {n!r} is declared twice")
        seen.add(n)

    for n in fn.constants:
        claim(n, "constant")
    for sc in fn.scalars:
        claim(sc.name, "scalar")
        params.append(f"{CTYPES[sc.dtype]} {sc.name}")
        cffi_types.append(CTYPES[sc.dtype])
    for a in fn.arrays:
        claim(a.name, "array")
        t = CTYPES[a.dtype]
        cq = "" if a.writable else "const "
        if len(a.shape) <= 1:
            params.append(f"{cq}{t}* restrict {a.name}")
        else:
            claim(a.name + "_", "array")
            params.append(f"{cq}{t}* restrict {a.name}_")
            ext = "".join(f"[{em.expr(d)}]" for d in a.shape[1:])
            pre.append(f"{cq}{t} (*restrict {a.name}){ext} = ({cq}{t} (*){ext}){a.name}_;")
        cffi_types.append("intptr_t")
    return params, cffi_types, pre


def cffi_declaration(fn: ir.LoweredFunction) -> str:
    """The cdef of ``fn`` for cffi ABI mode: array pointers as ``intptr_t``."""
    cfn = renamed(fn, c_names(fn))
    return f"int {fn.name}({', '.join(_signature(cfn, CPrinter(cfn))[1]) or 'void'});"


def emit_c(fn: ir.LoweredFunction) -> str:
    """The C99 + OpenMP source of ``fn`` (one exported function ``fn.name``)."""
    fn = pipeline.prepare_for_printing(fn)
    symbol, cmap = fn.name, c_names(fn)
    fn = renamed(fn, cmap)
    check_name(fn.name, "function")
    em = CPrinter(fn)
    params, _, pre = _signature(fn, em)
    body_lines = []
    for n, v in fn.constants.items():
        body_lines.append(f"  const int64_t {n} = {int_literal(int(v), 'int64')[0]};")
    body_lines += ["  " + p for p in pre]
    if any(isinstance(x, ir.For) and x.kind == "parallel" for x in ir.walk_stmts(fn.body)):
        em.body(fn.body, 1)
        em.stream_fence(1)                      # codegen.c.stream
    else:                                       # one thread: its runs span the kernel
        runs = em.open_runs(fn.body, 1)
        em.body(fn.body, 1)
        em.close_runs(fn.body, 1, runs)
    if em.uses_status:
        body_lines.append("  int tp_status = 0;")
    body_lines += em.lines
    body_lines.append(f"  return {'tp_status' if em.uses_status else '0'};")

    # no header may declare the kernel's name, nor define a macro of any user name
    # (the rule: codegen.c.names)
    ids = sorted(set(cmap.values()) | {a.name + "_" for a in fn.arrays if len(a.shape) > 1})
    head = ["/* generated by tiramisu_py codegen.c */",
            *([toolchain.IFCVT_GUARD] if guarded_access(fn.body, fn.constants,
                                                        readonly=em.speculation.readonly) else []),
            f"#undef {fn.name}", f"#define {fn.name} tp_hidden_{fn.name}",
            *(f"#include <{h}>" for h in ("stdint.h", "stdbool.h", "stdlib.h", "string.h", "math.h",
                                                "sys/mman.h")),
            *(BARRIER_INCLUDES if "tp_barrier" in em.helpers else ()),
            *(f"#undef {n}" for n in ids), ""]
    order = ["tp_alloc"] + sorted(h for h in em.helpers if h != "tp_alloc")
    for h in order:
        if h in em.helpers:
            head.append(helper_source(h))
    if em.helpers:
        head.append("")
    sig = f"int {fn.name}({', '.join(params) or 'void'})"
    if fn.name != symbol:              # renamed in C: the symbol keeps the user's name
        head += [f'{sig} __asm__("{symbol}");', ""]
    return "\n".join(head + [sig, "{", *body_lines, "}", ""])


# gcc unrolls a loop of at most this many iterations completely before it
# if-converts (its max-completely-peel-times), so a guard around one may end
# up in the body of the loop outside it
_PEELED = 16


def guarded_access(s, consts: dict, in_loop: bool = False, readonly: dict | None = None) -> bool:
    """Whether ``s`` reads or writes memory under a condition inside a loop
    that gcc may if-convert into masked loads: a select with a load in an arm,
    or an ``if`` whose arms access memory and have no loop but (perhaps) short
    ones of constant length (unrolled first).  Such a kernel gets
    :data:`codegen.toolchain.IFCVT_GUARD` (gcc 12.2's miscompile of masked
    group loads); every other kernel keeps if-conversion, which vectorises
    loops with selects (the vector math helpers' clamps, max).  ``consts``:
    the kernel's fixed parameters."""
    readonly = {} if readonly is None else readonly
    if in_loop and any(isinstance(e, ir.Select) and _reads(e.a, e.b) and (
            speculated(e, readonly) is None)
                       for x in ir.stmt_exprs(s) for e in ir.walk_exprs(x)):
        return True
    if (in_loop and isinstance(s, ir.If) and _straight(s, consts)
            and any(isinstance(x, ir.Store) or _reads(*ir.stmt_exprs(x))
                    for arm in ir.stmt_children(s) for x in ir.walk_stmts(arm))):
        return True
    inner = in_loop or isinstance(s, ir.For)
    return any(guarded_access(c, consts, inner, readonly) for c in ir.stmt_children(s))


def _reads(*exprs) -> bool:
    return any(isinstance(n, ir.Load) for e in exprs for n in ir.walk_exprs(e))


def _straight(s, consts) -> bool:
    """No loop in ``s`` but loops of a constant trip count of at most
    :data:`_PEELED` (which gcc may unroll away)."""
    for x in ir.walk_stmts(s):
        if isinstance(x, ir.For):
            lo, hi = ir.const_eval(x.lo, consts), ir.const_eval(x.hi, consts)
            if lo is None or hi is None or -(-(hi - lo) // max(1, x.step)) > _PEELED:
                return False
    return True


def omp_schedule_clause(s: ir.For) -> str:
    """`` schedule(kind[, chunk])`` of a parallel loop whose schedule was
    chosen (``attrs["omp_schedule"]`` = (kind, chunk or None)), else ""."""
    sched = s.attrs.get("omp_schedule")
    if not sched:
        return ""
    kind, chunk = sched
    if kind not in ("static", "dynamic", "guided"):
        raise ValueError(f"C backend: loop {s.var}: unknown OpenMP schedule {kind!r}")
    return f" schedule({kind}" + (f", {int(chunk)})" if chunk else ")")

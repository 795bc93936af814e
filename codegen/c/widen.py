"""C backend: vector loops with loops or ifs inside, widened explicitly with
GCC/Clang vector extensions (:mod:`codegen.vectorize` decides; mixed into the
C emitter).

::

    /* vector loop j11: 16 lanes (GCC vector extensions) ... */
    int64_t j11 = 0;
    for (; j11 + 16 <= 16; j11 += 16) {          /* j11 is lane 0 */
      if (0 < K) {                                /* C[i][j11..] in a register over k */
        tp_f32x16 tp_acc1 = tp_vld_f32x16(&C[i][j11]);
        for (int64_t k = 0; k < K; k++) {
          tp_acc1 = tp_acc1 + A[i][k] * tp_vld_f32x16(&B[k][j11]);
        }
        tp_vst_f32x16(&C[i][j11], tp_acc1);
      }
    }
    for (; j11 < 16; j11++) { ...the scalar body... }

Values that do not depend on the vector iterator stay scalar C (vector
arithmetic broadcasts them); unit-stride accesses of float32/float64/int32/int64
are vector loads and stores (``memcpy``, any alignment); float ``+ - * /`` and
integer ``+ - *`` are vector operators; anything else is evaluated lane by lane
(``(tp_f32x16){e(j11 + 0), e(j11 + 1), ...}``: gathers, conversions, calls,
selects), and a store that is not unit-stride is a loop over the lanes
(scatter, lanes in order).
"""
from __future__ import annotations

import math

from .. import ir, loops, target, vectorize
from ..ir import expr_key

CT = {"float32": "float", "float64": "double", "int8": "int8_t", "uint8": "uint8_t",
      "int32": "int32_t", "int64": "int64_t", "bool": "uint8_t", "bfloat16": "uint16_t",
      "float16": "uint16_t"}
SUF = {"float32": "f32", "float64": "f64", "int8": "i8", "uint8": "u8", "int32": "i32",
       "int64": "i64", "bool": "u8", "bfloat16": "bf16", "float16": "f16"}
FAST = ("float32", "float64", "int32", "int64")       # vector loads, stores and operators


def vector_helper(name: str) -> str:
    """Source of ``tp_vec_<suf>x<W>``: the vector type, its load and store."""
    suf, w = name[len("tp_vec_"):].split("x")
    dt = next(d for d, s in SUF.items() if s == suf and d != "bool")
    t, v, size = CT[dt], f"tp_{suf}x{w}", int(w) * ir.ELSIZE[dt]
    return (f"typedef {t} {v} __attribute__((vector_size({size})));\n"
            f"static inline {v} tp_vld_{suf}x{w}(const {t} *p) {{ {v} v; memcpy(&v, p, sizeof v); return v; }}\n"
            f"static inline void tp_vst_{suf}x{w}({t} *p, {v} v) {{ memcpy(p, &v, sizeof v); }}")


class _Wide:
    """State while a widened body is emitted."""

    def __init__(self, var: str, w: int, n: int, plan):
        self.var, self.w, self.n, self.plan = var, w, n, plan
        self.lets = {}               # varying Let name -> dtype
        self.held = set()            # accumulator variables (NAME_c per chunk)
        self.promoted = {}           # (array, index key) -> C variable (chunk c: NAME_c)
        self.chunk = 0               # the chunk of n lanes being emitted (lanes c*n ...)
        self.lane = None             # per-lane emission: the lane in the chunk (text), else None


class WidenMixin:
    """Needs :class:`codegen.c.emit.CPrinter` (``expr``, ``out``, ``body``, ``helper``)."""

    wide: _Wide = None
    nacc = 0

    # ------------------------------------------------------------ entry
    def nested_vector_loop(self, s: ir.For, ind: int) -> None:
        w = int(s.attrs.get("vector_width") or loops.host_lanes(body_bits(s.body)))
        p, reason = (vectorize.plan(s) if int(s.step) == 1 else (None, f"step {s.step}"))
        if p is not None and w > 1:
            if self.wide is None:
                n = loops.host_lanes(body_bits(s.body))       # lanes of one register
                while w % n:
                    n //= 2
                return self._widened(s, ind, w, n, p)
            reason = "inside another widened loop"
        if w <= 1:
            reason = "vector width 1"
        self.out(ind, f"/* vector loop {s.var}: not widened ({' '.join(reason.split())}); "
                      "runs as a scalar loop */")
        self.loop(ir.For(s.var, s.lo, s.hi, s.body, kind="serial", step=s.step), ind)

    def _widened(self, s: ir.For, ind: int, w: int, n: int, p) -> None:
        v = s.var
        acc = sorted({a for lst in p.promote.values() for a, _ in lst})
        self.out(ind, f"/* vector loop {v}: {w} lanes (GCC vector extensions"
                      + (f", {w // n} registers of {n}" if w > n else "") + "), the loops inside "
                      "run once per vector iteration"
                 + (f"; {', '.join(acc)} held in registers over inner loops" if acc else "")
                 + "; then a scalar epilogue */")
        self.out(ind, "{")
        self.out(ind + 1, f"int64_t {v} = {self.expr(s.lo)};")
        hi = self.wrap(s.hi, 61)
        self.out(ind + 1, f"for (; {v} + {w} <= {hi}; {v} += {w}) {{")
        self.wide = _Wide(v, w, n, p)
        self.loop_depth += 1
        try:
            self.wstmt(s.body, ind + 2)
        finally:
            self.wide = None
        self.out(ind + 1, "}")
        self.out(ind + 1, f"for (; {v} < {hi}; {v}++) {{")
        self.body(s.body, ind + 2)
        self.loop_depth -= 1
        self.out(ind + 1, "}")
        self.out(ind, "}")

    known: dict = None           # unrolled loop -> its value in the copy being printed
    copies = 1                   # copies the unrolled loops around make of what is printed

    def constant_vector_loop(self, s: ir.For, ind: int) -> bool:
        """A vector loop of a constant length (4 to 64, a power of two; once
        the unrolled loops around it are known: a register block's last,
        partial vector) whose body is stores into a register tile (a local
        accumulation's, at most 4 KB) of ``+ - * /`` over contiguous or
        invariant loads, printed as vector statements instead of an ``omp
        simd`` loop: gcc then keeps a register block's accumulators in
        registers over the reduction loop around it and loads each input
        vector once for every row (the peers' padded conv2d 8x64x56x56 on
        C: 17.4 -> 9.5 ms; one omp simd loop per row and vector left each
        accumulator in memory and reloaded the inputs per row).  Only in a
        block (the loop unrolled around it, or more than one register) and
        while the unrolled copies of such vectors fit in half of the vector
        registers: gcc spills a larger block held so (GEMM's 6 x 4: 12.5 ->
        22 ms), and keeps its loop form fast.  True if printed."""
        consts = dict(self.fn.constants, **(self.known or {}))
        lo, hi = ir.const_eval(s.lo, consts), ir.const_eval(s.hi, consts)
        named = self.touches_named(s)                   # codegen.c.regtile: checked already
        if self.wide is not None or lo is None or hi is None or int(s.step) != 1 \
                or hi - lo not in (4, 8, 16, 32, 64) or not plain_body(s) \
                or not (named or all(_register_tile(self.temps.get(st.array), consts)
                                     for st in _stores(s))):
            return False
        w = hi - lo
        n = min(w, loops.host_lanes(body_bits(s.body)))
        if not named and not 1 < self.copies * (w // n) <= target.vector_registers() // 2:
            return False                # not a block (one vector), or too large a one
        p, _ = vectorize.plan(s)
        if p is None:
            return False
        self.out(ind, f"/* vector loop {s.var}: {w} lanes, its length known (GCC vector "
                      f"extensions{f', {w // n} registers of {n}' if w > n else ''}) */")
        self.out(ind, "{")
        self.out(ind + 1, f"const int64_t {s.var} = {lo};")
        self.wide = _Wide(s.var, w, n, p)
        try:
            self.wstmt(s.body, ind + 1)
        finally:
            self.wide = None
        self.out(ind, "}")
        return True

    # ------------------------------------------------------------ classification
    def varies(self, e) -> bool:
        return reads_var(e, self.wide.var, self.wide.lets)

    def vtype(self, dt: str) -> str:
        suf = SUF[dt]
        self.helper(f"tp_vec_{suf}x{self.wide.n}")
        return f"tp_{suf}x{self.wide.n}"

    def _contiguous(self, index) -> bool:
        return unit_stride(index, self.wide.var, self.wide.lets)

    def _address(self, array: str, index) -> str:
        """The address of the chunk's first lane."""
        return f"&{self.lane_expr(ir.Load(array, tuple(index), 'int64'), '0')}"

    # ------------------------------------------------------------ expressions
    def lane_expr(self, e, lane: str) -> str:
        wd = self.wide
        old, wd.lane = wd.lane, lane
        try:
            return self.expr(e)
        finally:
            wd.lane = old

    def lane_var(self, name: str):
        """C text of a name in per-lane emission, or None (as it is)."""
        wd = self.wide
        if wd is None or wd.lane is None:
            return None
        if name == wd.var:
            off = wd.chunk * wd.n
            if not off:
                return f"{name}" if wd.lane == "0" else f"({name} + {wd.lane})"
            return f"({name} + {off + int(wd.lane)})" if wd.lane.isdigit() else f"({name} + {off} + {wd.lane})"
        if name in wd.lets:
            return f"{name}__v{wd.chunk}[{wd.lane}]"
        if name in wd.held:
            return f"{name}_{wd.chunk}[{wd.lane}]"
        return None

    def lane_load(self, e):
        wd = self.wide
        named = self.named_register(e.array, e.index)
        if named is not None:
            return named
        if wd is None or not wd.promoted:
            return None
        var = wd.promoted.get((e.array, tuple(expr_key(i) for i in e.index)))
        if var is None:
            return None
        return f"{var}_{wd.chunk}" if wd.lane is None else f"{var}_{wd.chunk}[{wd.lane}]"

    def vexpr(self, e) -> tuple:
        """(C text, "u" scalar or "v" vector of ``e.dtype``)."""
        wd = self.wide
        if isinstance(e, _Held):
            return f"{e.name}_{wd.chunk}", "v"
        if not self.varies(e):
            return self.expr(e), "u"
        if isinstance(e, ir.Var) and e.name in wd.lets:
            return f"{e.name}__v{wd.chunk}", "v"
        if isinstance(e, ir.Load):
            held = self.lane_load(e)
            if held is not None:
                return held, "v"
            if e.dtype in FAST and self._contiguous(e.index):
                vt = self.vtype(e.dtype)
                return f"tp_vld_{vt[3:]}({self._address(e.array, e.index)})", "v"
        if _vector_op(e):
            (a, ka), (b, kb) = self.vexpr(e.a), self.vexpr(e.b)
            sym = {"add": "+", "sub": "-", "mul": "*", "div": "/"}[e.op]
            if ka == "u" and kb == "u":
                return f"({a} {sym} {b})", "u"
            if ka == "u":
                a = f"({CT[e.dtype]})({a})"
            if kb == "u":
                b = f"({CT[e.dtype]})({b})"
            return f"({a} {sym} {b})", "v"
        vt = self.vtype(e.dtype)
        lanes = ", ".join(self.lane_expr(e, str(k)) for k in range(wd.n))
        return f"({vt}){{{lanes}}}", "v"

    def as_vector(self, e, dt: str) -> str:
        text, k = self.vexpr(e)
        return text if k == "v" else f"(({self.vtype(dt)}){{0}} + ({CT[dt]})({text}))"

    # ------------------------------------------------------------ statements
    def chunks(self):
        """Iterates over the chunks (registers) of the vector, setting ``wide.chunk``."""
        wd = self.wide
        for c in range(wd.w // wd.n):
            wd.chunk = c
            yield c
        wd.chunk = 0

    def wstmt(self, s, ind: int) -> None:
        wd = self.wide
        if isinstance(s, ir.Block):
            for x in s.stmts:
                self.wstmt(x, ind)
        elif isinstance(s, ir.Let):
            self.out(ind, "{")
            if self.varies(s.value):
                dt = s.value.dtype
                for c in self.chunks():
                    if dt in FAST:
                        text = self.as_vector(s.value, dt)
                    else:
                        text = "{" + ", ".join(self.lane_expr(s.value, str(k)) for k in range(wd.n)) + "}"
                    self.out(ind + 1, f"const {self.vtype(dt)} {s.name}__v{c} = {text};")
                wd.lets[s.name] = dt
                self.wstmt(s.body, ind + 1)
                del wd.lets[s.name]
            else:
                self.let_decl(s, ind + 1)
                self.wstmt(s.body, ind + 1)
            self.out(ind, "}")
        elif isinstance(s, ir.If):
            self.out(ind, f"if ({self.expr(s.cond)}) {{")
            self.wstmt(s.then, ind + 1)
            if s.else_ is not None:
                self.out(ind, "} else {")
                self.wstmt(s.else_, ind + 1)
            self.out(ind, "}")
        elif isinstance(s, ir.For):
            self.wloop(s, ind)
        elif isinstance(s, ir.Store):
            for _ in self.chunks():
                self.wstore(s, ind)
        else:
            raise TypeError(f"C backend: cannot widen {type(s).__name__}")

    def wstore(self, s: ir.Store, ind: int) -> None:
        """The store of the current chunk."""
        wd = self.wide
        dt = self.array_dtype(s.array)
        named = self.named_register(s.array, s.index)
        held = wd.promoted.get((s.array, tuple(expr_key(i) for i in s.index)))
        if named is not None:
            self.out(ind, f"{named} = {self.as_vector(s.value, dt)};")
        elif held is not None:
            self.out(ind, f"{held}_{wd.chunk} = {self.as_vector(s.value, dt)};")
        elif dt in FAST and self._contiguous(s.index) and s.value.dtype == dt:
            vt = self.vtype(dt)
            self.out(ind, f"tp_vst_{vt[3:]}({self._address(s.array, s.index)}, {self.as_vector(s.value, dt)});")
        else:                                # scatter: lanes in order
            self.out(ind, f"for (int64_t tp_l = 0; tp_l < {wd.n}; tp_l++) {{")
            old, wd.lane = wd.lane, "tp_l"
            try:
                self.out(ind + 1, f"{self.access(s.array, s.index)} = {self.expr(s.value)};")
            finally:
                wd.lane = old
            self.out(ind, "}")

    def wloop(self, s: ir.For, ind: int) -> None:
        wd = self.wide
        step = int(s.step)
        head = self.for_header(s, step)
        accs = [(a, ix) for a, ix in wd.plan.promote.get(id(s), ())]
        if not accs:
            self.out(ind, head)
            self.wstmt(s.body, ind + 1)
            self.out(ind, "}")
            return
        self.out(ind, f"if ({self.expr(s.lo)} < {self.wrap(s.hi, 61)}) {{")
        saved = {}
        for a, ix in accs:
            key = (a, tuple(expr_key(i) for i in ix))
            dt = self.array_dtype(a)
            self.nacc += 1
            name = f"tp_acc{self.nacc}"
            for c in self.chunks():
                self.out(ind + 1, f"{self.vtype(dt)} {name}_{c} = {self.as_vector(ir.Load(a, ix, dt), dt)};")
            saved[key] = (wd.promoted.get(key), name, a, ix, dt)
            wd.promoted[key] = name
            wd.held.add(name)
        self.out(ind + 1, head)
        self.wstmt(s.body, ind + 2)
        self.out(ind + 1, "}")
        for key, (outer, name, a, ix, dt) in saved.items():
            if outer is None:
                del wd.promoted[key]
            else:
                wd.promoted[key] = outer
            for _ in self.chunks():
                self.wstore(ir.Store(a, ix, _Held(name, dt)), ind + 1)
        self.out(ind, "}")

    def array_dtype(self, name: str) -> str:
        for a in self.fn.arrays:
            if a.name == name:
                return a.dtype
        return self.temp_dtype(name)

    def temp_dtype(self, name: str) -> str:
        for st in ir.walk_stmts(self.fn.body):
            if isinstance(st, ir.Allocate) and st.array == name:
                return st.dtype
        raise ValueError(f"C backend: unknown array {name!r}")


class _Held(ir.Var):
    """A register holding an accumulator (a vector variable) as a store's value."""


def body_bits(body) -> int:
    bits = 32
    for st in ir.walk_stmts(body):
        for e in ir.stmt_exprs(st):
            for x in ir.walk_exprs(e):
                if isinstance(x, ir.Load):
                    bits = max(bits, ir.ELSIZE.get(x.dtype, 4) * 8)
    return bits


def plain_body(s: ir.For) -> bool:
    """The body of ``s``: stores (of FAST dtypes) whose values are ``+ - *``
    (``/`` of floats) over loads contiguous along ``s.var`` or not varying
    with it, and invariants: each widens to vector operators, none lane by
    lane."""
    var = s.var

    def value(e):
        if not reads_var(e, var):
            return True
        if isinstance(e, ir.Load):
            return e.dtype in FAST and unit_stride(e.index, var)
        return _vector_op(e) and value(e.a) and value(e.b)
    return all(isinstance(st, ir.Store) and st.value.dtype in FAST and unit_stride(st.index, var)
               and value(st.value) for st in _stores(s))


def unit_stride(index, var, lets=()) -> bool:
    """``index`` steps one element along its last dimension per step of
    ``var`` and stays put along the others (``lets``: names that vary with
    ``var``)."""
    if not index or any(reads_var(i, var, lets) for i in index[:-1]):
        return False
    f = loops.affine(index[-1], lambda n: n not in lets)
    return f is not None and f[0].get(var) == 1 and \
        not any(isinstance(x, ir.Load) for x in ir.walk_exprs(index[-1]))


def reads_var(e, var, lets=()) -> bool:
    """``e`` reads ``var`` or one of the ``lets`` that vary with it."""
    return any(isinstance(x, ir.Var) and (x.name == var or x.name in lets)
               for x in ir.walk_exprs(e))


def _vector_op(e) -> bool:
    """``e`` is what vector operators compute: ``+ - *`` (``/`` of floats)
    of two values of its own FAST dtype."""
    return isinstance(e, ir.Binary) and e.dtype in FAST and e.a.dtype == e.b.dtype == e.dtype \
        and (e.op in ("add", "sub", "mul") or e.op == "div" and ir.is_float(e.dtype))


def _stores(s: ir.For) -> list:
    return list(s.body.stmts) if isinstance(s.body, ir.Block) else [s.body]


def _register_tile(alloc, consts) -> bool:
    """``alloc`` (an ir.Allocate or None) is a temporary of at most 4 KB."""
    dims = [] if alloc is None else [ir.const_eval(d, consts) for d in alloc.shape]
    return alloc is not None and None not in dims \
        and math.prod(dims) * ir.ELSIZE.get(alloc.dtype, 8) <= 4096

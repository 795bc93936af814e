"""LLVM backend, IR building, part 1: the host target, types, exact literals and
the text builders (functions of basic blocks, the module).  Expressions are in
:mod:`codegen.llvm.expr`, statements, loops and :func:`emit_llvm` in
:mod:`codegen.llvm.stmt`; :func:`codegen.compile_llvm` (:mod:`codegen.llvm.backend`)
optimises, compiles, caches and loads the text.

Conventions of the emitted module (same calling convention as the C backend):

* ``define i32 @NAME(<scalars>, ptr noalias <arrays>...)``; arrays are flat and
  indexed row-major with their shape expressions (row strides computed once);
* every value is SSA (loop iterators are phis, ``Let`` binds a value); the
  semantics of every operator follow the C backend and NumPy (integer
  arithmetic wraps: no ``nsw``/``nuw`` on values; integer ``div``/``mod``
  truncate, ``floordiv``/``floormod`` round to -inf, a zero divisor gives 0 and
  ``MIN / -1`` wraps, never a trap; float ``mod`` is ``frem`` = fmod; float
  min/max propagate NaN, ``(a < b || a != a) ? a : b``), ``Select`` and
  ``and``/``or`` are lazy (branches) when an operand may trap (a load), as in C;
* ``vector`` loops are widened to explicit ``<W x T>`` code plus a scalar
  epilogue; ``parallel`` loops are outlined and run through libgomp's
  ``GOMP_parallel`` with static chunking (details in :mod:`codegen.llvm.stmt`);
  loops with ``attrs["reduction"]`` accumulate privately and combine
  (:mod:`codegen.llvm.reduce`);
* temporaries: constant size <= 16 KiB -> ``alloca`` in the entry block, else
  ``malloc``/``calloc`` with overflow checks, freed on every path; a failed
  allocation returns 1 (inside a parallel loop: sets the status, skips the body).
"""
from __future__ import annotations

import math
import re
import struct
import threading
import dataclasses
from dataclasses import dataclass

import llvmlite.binding as llvm

from .. import ir, target
from ..ir import INT_RANGE, to_f32

LLT = {"bool": "i1", "int8": "i8", "uint8": "i8", "int32": "i32", "int64": "i64",
       "float32": "float", "float64": "double",
       "bfloat16": "i16", "float16": "i16"}   # 16-bit floats: their bits (see expr.half_*)
MEMT = dict(LLT, bool="i8")                # how a dtype lives in memory
BITS = {"bool": 8, "int8": 8, "uint8": 8, "int32": 32, "int64": 64, "float32": 32, "float64": 64,
        "bfloat16": 16, "float16": 16}
STACK_LIMIT = 16384                         # bytes: constant-size temporaries up to this go on the stack
# math functions without an LLVM intrinsic that we want from libm (patched by a test)
LIBM_NAMES = {("tanh", "float32"): "tanhf", ("tanh", "float64"): "tanh"}
INTRINSICS = {"exp": "exp", "log": "log", "sqrt": "sqrt", "abs": "fabs", "floor": "floor", "ceil": "ceil"}
FCMP = {"lt": "olt", "le": "ole", "gt": "ogt", "ge": "oge", "eq": "oeq", "ne": "une"}
IDENT = re.compile(r"[A-Za-z_][A-Za-z0-9_]*\Z")


class CannotWiden(Exception):
    """Raised while widening a vector loop body; the loop falls back to scalar code."""


# ------------------------------------------------------------------ host
@dataclass(frozen=True)
class Host:
    triple: str
    datalayout: str
    cpu: str
    features: str
    vector_bits: int
    llvm_version: str

    @property
    def avx512(self) -> bool:
        return self.vector_bits >= 512


_host = None
_host_tm = None
_host_lock = threading.Lock()


def host_target_machine():
    """The process's target machine for optimisation and ``emit_object``; it is
    never handed to an execution engine."""
    _native_host()
    return _host_tm


def host() -> Host:
    """The JIT target (initialises LLVM's native target once); its vector
    width as :func:`codegen.target.vector_bits` pins it, else LLVM's."""
    base = _native_host()
    bits = target.pinned().get("vector_bits")
    return base if bits is None else dataclasses.replace(base, vector_bits=bits)


def _native_host() -> Host:
    global _host, _host_tm
    with _host_lock:
        if _host is None:
            llvm.initialize_native_target()
            llvm.initialize_native_asmprinter()
            triple, cpu = llvm.get_process_triple(), llvm.get_host_cpu_name()
            try:
                features = llvm.get_host_cpu_features().flatten()
            except RuntimeError:
                features = ""
            features = ",".join(x for x in (features, tuning_features(cpu)) if x)
            feats = set(features.split(","))
            bits = 512 if "+avx512f" in feats else 256 if "+avx" in feats else 128
            tm = _host_tm = target_machine(triple, cpu, features)
            _host = Host(triple, str(tm.target_data), cpu, features, bits,
                         ".".join(map(str, llvm.llvm_version_info)))
        return _host


def tuning_features(cpu: str) -> str:
    """Tuning LLVM's host defaults lack but gcc's ``-march=native`` has: on AMD
    Zen (``znver*``) vector gathers and scatters are microcoded and slower than
    the scalar loads they replace (gcc's znver tuning never emits them), yet
    LLVM's cost model picks ``vgatherqpd`` for strided loops (heat-3d with
    ``j`` innermost: 0.5x gcc); ``prefer-no-gather``/``prefer-no-scatter``
    make it scalarise them as gcc does.  Part of the features, so of the cache key."""
    return "+prefer-no-gather,+prefer-no-scatter" if cpu.startswith("znver") else ""


def target_machine(triple, cpu, features):
    """A fresh target machine (``create_mcjit_compiler`` takes ownership of the
    one it is given: never share one between engines)."""
    return llvm.Target.from_triple(triple).create_target_machine(
        cpu=cpu, features=features, opt=3, jit=True)


# ------------------------------------------------------------------ types and literals
def vt(t: str, w) -> str:
    return t if w is None else f"<{w} x {t}>"


def mangle(dtype: str, w) -> str:
    base = {"float32": "f32", "float64": "f64"}.get(dtype, LLT[dtype])
    return base if w is None else f"v{w}{base}"


def lit(value, dtype: str) -> str:
    """The exact LLVM literal of ``value`` read as ``dtype``."""
    if dtype == "bool":
        return "true" if value else "false"
    if ir.is_int(dtype):
        lo, hi = INT_RANGE[dtype]
        v = (int(value) - lo) % (hi - lo) + lo        # wrap like a C conversion
        return str(v - 256 if dtype == "uint8" and v >= 128 else v)
    if ir.is_float(dtype):
        v = float(value)
        if dtype == "float32":
            v = to_f32(v)
        if math.isnan(v):
            return "0x7FF8000000000000"
        return "0x%016X" % struct.unpack("<Q", struct.pack("<d", v))[0]
    raise TypeError(f"LLVM backend: unknown dtype {dtype!r}")


def zero(dtype: str, w) -> str:
    return "zeroinitializer" if w is not None else ("0.0" if ir.is_float(dtype) else
                                                    "false" if dtype == "bool" else "0")


def splat_lit(text: str, t: str, w) -> str:
    return text if w is None else f"splat ({t} {text})"


def common(d1: str, d2: str) -> str:
    """C's usual arithmetic conversions over our dtypes."""
    if d1 == d2:
        return d1
    for d in ("float64", "float32", "int64"):
        if d in (d1, d2):
            return d
    return "int32"


def may_trap(e) -> bool:
    """Whether evaluating ``e`` speculatively could fault: a load.  (Integer
    divisions never trap: a divisor of 0, or -1 against MIN, is replaced, see
    :meth:`codegen.llvm.expr.ExprLowering._safe_divisor`.)"""
    return any(isinstance(x, ir.Load) for x in ir.walk_exprs(e))


def name_hint(name: str) -> str:
    """``name`` usable in an LLVM local name (a hint for readability only)."""
    s = re.sub(r"[^A-Za-z0-9_.]", "_", str(name))[:40]
    return s if s[:1].isalpha() or s[:1] == "_" else "v" + s


# ------------------------------------------------------------------ values
class Val:
    """An SSA value or literal.  ``kind``: ``u`` a scalar (uniform over the lanes of
    a vector loop), ``v`` a ``<W x T>`` vector, ``a`` an affine int64 lane
    sequence ``t + lane * stride`` (``t`` scalar) inside a widened vector loop."""
    __slots__ = ("t", "dtype", "kind", "stride", "const", "peeled")

    def __init__(self, t, dtype, kind="u", stride=0, const=None, peeled=None):
        self.t, self.dtype, self.kind, self.stride, self.const = t, dtype, kind, stride, const
        self.peeled = peeled        # an index ``x + c``: (Val of x, int c), for addresses


class Arr:
    __slots__ = ("ptr", "dtype", "strides", "writable")

    def __init__(self, ptr, dtype, strides, writable=True):
        self.ptr, self.dtype, self.strides = ptr, dtype, strides   # strides: int or SSA text
        self.writable = writable


def kind(w) -> str:
    return "u" if w is None else "v"


# ------------------------------------------------------------------ builders
class Func:
    """One LLVM function under construction: basic blocks of instruction lines."""

    def __init__(self, header: str):
        self.header = header
        self.blocks = [["entry", []]]
        self.allocas = []
        self.n = 0

    @property
    def cur(self) -> str:
        return self.blocks[-1][0]

    def tmp(self, hint="t") -> str:
        self.n += 1
        return f"%{hint}{self.n}"

    def label(self, hint) -> str:
        self.n += 1
        return f"{hint}{self.n}"

    def emit(self, line: str) -> None:
        self.blocks[-1][1].append(line)

    def op(self, text: str, hint="t") -> str:
        r = self.tmp(hint)
        self.emit(f"{r} = {text}")
        return r

    def start(self, label: str) -> None:
        self.blocks.append([label, []])

    def br(self, label: str, md: str = "") -> None:
        self.emit(f"br label %{label}" + (f", !llvm.loop {md}" if md else ""))

    def cbr(self, cond: str, t: str, f: str) -> None:
        self.emit(f"br i1 {cond}, label %{t}, label %{f}")

    def alloca(self, ty: str, align: int, hint="a") -> str:
        r = self.tmp(hint)
        self.allocas.append(f"{r} = alloca {ty}, align {align}")
        return r

    def mark(self):
        return len(self.blocks), len(self.blocks[-1][1]), len(self.allocas)

    def rollback(self, mark) -> None:
        nb, nl, na = mark
        del self.blocks[nb:]
        del self.blocks[-1][1][nl:]
        del self.allocas[na:]

    def text(self) -> str:
        out = [self.header + " {"]
        for k, (label, lines) in enumerate(self.blocks):
            out.append(f"{label}:")
            if k == 0:
                out += ["  " + a for a in self.allocas]
            out += ["  " + x for x in lines]
        out.append("}")
        return "\n".join(out)


class Ctx:
    """Per-function state: inside a parallel region (failures set ``status``
    instead of returning), and the heap temporaries live in this function."""

    def __init__(self, parallel: bool, status: str):
        self.parallel, self.status, self.heap = parallel, status, []


class Module:
    def __init__(self, h: Host):
        self.host = h
        self.decls: dict = {}
        self.funcs: list = []
        self.md: list = []
        self.nt_md = None               # the !nontemporal node, once made

    def declare(self, name: str, ret: str, args) -> str:
        self.decls.setdefault(name, f"declare {ret} @{name}({', '.join(args)})")
        return name

    def intrinsic(self, base: str, dtype: str, w, nargs=1, extra=()) -> tuple:
        t = vt(LLT[dtype], w)
        return self.declare(f"{base}.{mangle(dtype, w)}", t, [t] * nargs + list(extra)), t

    def nontemporal(self) -> str:
        """The metadata node of a ``!nontemporal`` store (one per module)."""
        if self.nt_md is None:
            self.nt_md = f"!{len(self.md)}"
            self.md.append(f"{self.nt_md} = !{{i32 1}}")
        return self.nt_md

    def loop_md(self, *props: str) -> str:
        n = len(self.md)
        ids = [f"!{n + 1 + k}" for k in range(len(props))]
        self.md.append(f"!{n} = distinct !{{!{n}, {', '.join(ids)}}}")
        self.md += [f"{i} = !{{{p}}}" for i, p in zip(ids, props)]
        return f"!{n}"

    def text(self) -> str:
        h = self.host
        attrs = ['nounwind', '"no-trapping-math"="true"']
        if h.avx512:
            attrs += ['"prefer-vector-width"="512"', '"min-legal-vector-width"="512"']
        a = " ".join(attrs)
        parts = ["; generated by tiramisu_py codegen.llvm", "source_filename = \"tiramisu_py\"",
                 f'target datalayout = "{h.datalayout}"', f'target triple = "{h.triple}"', ""]
        parts += [self.decls[k] for k in sorted(k for k in self.decls if isinstance(k, str))] + [""]
        for f in self.funcs:
            parts += [f, ""]
        parts += [f"attributes #0 = {{ {a} }}", f"attributes #1 = {{ alwaysinline {a} }}",
                  "attributes #2 = { nounwind willreturn memory(none) }"]
        parts += self.md
        return "\n".join(parts) + "\n"

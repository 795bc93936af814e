"""C backend: turns an :class:`ir.LoweredFunction` into readable C99 + OpenMP.

:func:`emit_c` only produces text; :func:`codegen.compile_c` compiles, caches and
loads it.  Conventions of the emitted code:

* signature ``int NAME(<scalars>, <arrays>)``; read-only arrays are ``const``;
  arrays of rank >= 2 arrive as ``T* restrict A_`` and are viewed through a C99
  VLA pointer ``T (*restrict A)[d1]...`` so accesses read ``A[i][j]``;
* helpers (``tp_*``) are emitted only when used;
* temporaries live on the heap (``tp_alloc``); a failed allocation frees what is
  live and returns 1 (inside an OpenMP loop, where ``return`` is not allowed, it
  sets ``tp_status`` and skips the body instead).  Small constant-size
  temporaries inside loops live on the stack.

Names.  The user's names (kernel, params, arrays, loops, temporaries) are
emitted as they are (``i``, ``j``, ``A``), so the code reads like the
algorithm, and no header can change their meaning, by a rule that needs no
list of the headers' macros (no list is ever complete: ``linux``, ``unix``
and ``i386`` are predefined in GNU mode, ``errno`` and ``math_errhandling``
are macros, ``M_PI``, ``INT32_MAX``...):

* after the ``#include`` lines every user identifier of the kernel is
  ``#undef``-ed: whatever macro a header or the compiler defines under that
  name is gone, and a name the headers *declare* (``rand``, ``y0``) is legally
  shadowed by the kernel's local of the same name;
* the kernel's own name is a file-scope symbol, so it is also ``#define``-d
  away before the includes: the headers declare nothing under it;
* a user name that the generated code spells itself (:data:`_OWN`: C and GNU
  keywords, the ``<stdint.h>`` types, ``NULL``, ``INFINITY``, the libm and
  allocation functions it calls, the ``tp_`` prefix of its helpers) is
  renamed with a trailing ``_`` (more while taken: ``NULL`` -> ``NULL_``); the
  kernel keeps its exported symbol through an ``__asm__`` label.

Only the kernel's symbol cannot be renamed: :func:`reserved_c_symbol` names the
ones it cannot take (functions the generated code or the runtime calls), which
the language refuses when the Function is declared.
"""
from __future__ import annotations

import math
import re
import struct
from fractions import Fraction

from .. import ir, regblock, vecmath, vectorize, vreduce
from .widen import WidenMixin, vector_helper

CTYPES = {"float32": "float", "float64": "double", "int8": "int8_t", "uint8": "uint8_t",
          "int32": "int32_t", "int64": "int64_t", "bool": "bool"}
_SUFFIX = {"float32": "f32", "float64": "f64", "int8": "i8", "uint8": "u8",
           "int32": "i32", "int64": "i64", "bool": "b"}
# half-open [lo, hi) ranges of the integer dtypes, for wrapping literals
_INT_RANGE = {t: (lo, hi + 1) for t, (lo, hi) in ir.INT_LIMITS.items()}
_C_KEYWORDS = set("""auto break case char const continue default do double else enum extern
float for goto if inline int long register restrict return short signed sizeof static struct
switch typedef union unsigned void volatile while _Bool _Complex _Imaginary bool true false
NULL INFINITY NAN int8_t uint8_t int32_t int64_t intptr_t size_t main malloc calloc free
memset abs exp expf log logf tanh tanhf sqrt sqrtf fabs fabsf floor floorf ceil ceilf fmod
fmodf""".split())
# names the included headers declare (libc, libm) or define as macros: a kernel,
# array or loop with one of these names would clash in C
_C_LIBRARY = set("""sin cos tan asin acos atan atan2 sinh cosh asinh acosh atanh exp2 expm1 log2
log10 log1p pow cbrt hypot erf erfc lgamma tgamma round lround trunc rint nearbyint fmin fmax
fma fdim copysign frexp ldexp modf remainder signbit isnan isinf isfinite nan
sinf cosf tanf powf roundf truncf fminf fmaxf fmaf exit abort atexit atoi atol atof strtol
strtod qsort bsearch rand srand labs llabs div ldiv getenv system realloc aligned_alloc
memcpy memmove memcmp memchr strlen strcmp strncmp strcpy strncpy strcat strchr strstr
strdup strerror errno assert printf puts putchar""".split())
_MACRO_LIKE = re.compile(r"\A(U?INT(8|16|32|64|PTR|MAX)?_(MAX|MIN|C)|SIZE_MAX|PTRDIFF_(MAX|MIN)|"
                         r"M_[A-Z0-9_]+|HUGE_VALF?|FP_[A-Z]+|EXIT_(SUCCESS|FAILURE)|RAND_MAX|"
                         r"EOF|BUFSIZ|NULL|EDOM|ERANGE|EILSEQ|EINVAL|ENOMEM)\Z")


# identifiers the generated code spells itself, besides the user's names: a user
# name among them is emitted renamed (see the module docstring)
_OWN = (_C_KEYWORDS
        | set("""asm typeof posix_memalign int16_t uint16_t uint32_t uint64_t ptrdiff_t
              _Alignas _Alignof _Atomic _Generic _Noreturn _Static_assert _Thread_local
              omp_out omp_in omp_priv""".split()))


def _own_name(name: str) -> bool:
    return name in _OWN or name.startswith(("tp_", "_"))


# symbols the kernel's exported name must not take: functions the C and LLVM
# kernels call, or that the process resolves by name
_SYMBOLS = (_C_KEYWORDS | _C_LIBRARY | {"posix_memalign", "aligned_alloc", "memcpy"}) \
    - {"errno", "assert", "NULL", "INFINITY", "NAN", "int8_t", "uint8_t", "int32_t", "int64_t",
       "intptr_t", "size_t", "bool", "true", "false"}


def reserved_c_symbol(name: str) -> bool:
    """True when a kernel cannot be exported under ``name``: a function the
    generated code, libc, libm or the OpenMP runtime define (its C identifier
    may be renamed, its symbol may not)."""
    return name in _SYMBOLS or name.startswith(("tp_", "_", "omp_", "GOMP_", "llvm", "kmp_"))


def reserved_c_name(name: str) -> bool:
    """True when ``name`` cannot be a C identifier of a generated kernel."""
    return (name in _C_KEYWORDS or name in _C_LIBRARY or bool(_MACRO_LIKE.match(name))
            or name.startswith(("tp_", "__")))
_IDENT = re.compile(r"[A-Za-z_][A-Za-z0-9_]*\Z")
_STACK_LIMIT = 16384        # bytes: constant-size temporaries inside loops up to this go on the stack

# precedence levels (higher binds tighter)
P_PRIMARY, P_UNARY, P_MUL, P_ADD, P_REL, P_EQ, P_AND, P_OR = 100, 90, 80, 70, 60, 55, 40, 35
_BINOPS = {"add": ("+", P_ADD), "sub": ("-", P_ADD), "mul": ("*", P_MUL), "div": ("/", P_MUL),
           "mod": ("%", P_MUL), "lt": ("<", P_REL), "le": ("<=", P_REL), "gt": (">", P_REL),
           "ge": (">=", P_REL), "eq": ("==", P_EQ), "ne": ("!=", P_EQ),
           "and": ("&&", P_AND), "or": ("||", P_OR)}
_LIBM = {"exp": "exp", "log": "log", "tanh": "tanh", "sqrt": "sqrt", "abs": "fabs",
         "floor": "floor", "ceil": "ceil"}


# ------------------------------------------------------------------ literals
def _int_literal(v: int, dtype: str) -> tuple:
    lo, hi = _INT_RANGE[dtype]
    v = (int(v) - lo) % (hi - lo) + lo          # wrap like a C conversion
    if dtype == "int64" and v == lo:
        return "(-9223372036854775807LL - 1)", P_PRIMARY
    if dtype == "int32" and v == lo:
        return "(-2147483647 - 1)", P_PRIMARY
    s = str(v) + ("LL" if dtype == "int64" and not -2**31 < v < 2**31 else "")
    return s, (P_UNARY if v < 0 else P_PRIMARY)


def _to_f32(v: float) -> float:
    try:
        return struct.unpack("f", struct.pack("f", v))[0]
    except OverflowError:                     # beyond float32 range: rounds to infinity
        return math.copysign(math.inf, v)


def _rounds_to_f32(text: str, f: float) -> bool:
    """Whether the decimal ``text`` rounds (to nearest even) to the float32 ``f``,
    computed exactly, i.e. as a C compiler reads ``<text>f``."""
    d, x = Fraction(text), Fraction(f)
    bits = struct.unpack("I", struct.pack("f", f))[0]
    if f == 0 or math.isinf(f):
        return False
    if (bits & 0x7fffffff) < 0x7f7fffff:
        up = Fraction(struct.unpack("f", struct.pack("I", bits + 1))[0])
    else:                                      # beyond the largest float lies infinity
        up = Fraction(math.copysign(2.0 ** 128, f))
    down = Fraction(struct.unpack("f", struct.pack("I", bits - 1))[0])
    for nb in (up, down):
        if abs(d - x) > abs(d - nb) or (abs(d - x) == abs(d - nb) and bits & 1):
            return False
    return True


def _float_literal(v: float, dtype: str) -> tuple:
    v = float(v)
    if dtype == "float32":
        v = _to_f32(v)
    if math.isnan(v):
        return "NAN", P_PRIMARY
    if math.isinf(v):
        return ("INFINITY", P_PRIMARY) if v > 0 else ("-INFINITY", P_UNARY)
    if dtype == "float64":
        s = repr(v)
    elif v == 0.0:
        s = "0.0" if math.copysign(1.0, v) > 0 else "-0.0"
    else:
        s = None
        for digits in range(1, 10):
            cand = "%.*g" % (digits, v)
            if _rounds_to_f32(cand, v):
                s = cand
                break
        if s is None:                          # never expected; hex floats are exact
            s = v.hex()
    if not any(c in s for c in ".ex"):
        s += ".0"
    s += "f" if dtype == "float32" else ""
    return s, (P_UNARY if s.startswith("-") else P_PRIMARY)


def c_literal(value, dtype: str) -> str:
    """The exact C literal of ``value`` read as ``dtype``."""
    return _const(ir.Const(value, dtype))[0]


def _const(e: ir.Const) -> tuple:
    if e.dtype == "bool":
        return ("true" if e.value else "false"), P_PRIMARY
    if ir.is_int(e.dtype):
        return _int_literal(e.value, e.dtype)
    if ir.is_float(e.dtype):
        return _float_literal(e.value, e.dtype)
    raise TypeError(f"C backend: unknown dtype {e.dtype!r}")


# ------------------------------------------------------------------ helpers
def _helper_source(name: str) -> str:
    if name == "tp_alloc":
        return _ALLOC_SOURCE
    if name.startswith("tp_vec_"):
        return vector_helper(name)
    if name in ("tp_bits_f32", "tp_bits_f64"):
        return vecmath.c_bits_helpers("float32" if name.endswith("f32") else "float64")
    kind, suf = name[3:].rsplit("_", 1)
    dt = next(d for d, s in _SUFFIX.items() if s == suf)
    t = CTYPES[dt]
    if kind in ("min", "max"):
        op = "<" if kind == "min" else ">"
        if ir.is_float(dt):     # NaN-propagating, as np.minimum / np.maximum
            return (f"static inline {t} {name}({t} a, {t} b) {{ {t} m = a {op} b ? a : b; "
                    "return a != a ? a : m; }")
        return f"static inline {t} {name}({t} a, {t} b) {{ return a {op} b ? a : b; }}"
    if kind in ("omp_min", "omp_max"):          # an OpenMP reduction that keeps NaN
        op, init = kind[4:], ("-INFINITY" if kind == "omp_max" else "INFINITY")
        return (f"#pragma omp declare reduction({name}: {t}: omp_out = tp_{op}_{suf}(omp_out, omp_in)) "
                f"initializer(omp_priv = {init})")
    if kind in ("div", "mod"):                  # C's truncation; NumPy's 0 and MIN / -1
        op = "/" if kind == "div" else "%"
        if dt == "uint8":
            return f"static inline {t} {name}({t} a, {t} b) {{ return b == 0 ? 0 : ({t})(a {op} b); }}"
        minus1 = f"({t})(0 - (uint64_t)a)" if kind == "div" else "0"
        return (f"static inline {t} {name}({t} a, {t} b) {{ return b == 0 ? 0 : b == -1 ? {minus1} "
                f": ({t})(a {op} b); }}")
    if vecmath.supported(kind, dt):
        return vecmath.c_helper(kind, dt)
    if kind == "abs":
        return f"static inline {t} {name}({t} a) {{ return a < 0 ? ({t})-a : a; }}"
    if kind == "sigmoid":
        one, fexp = ("1.0f", "expf") if dt == "float32" else ("1.0", "exp")
        return f"static inline {t} {name}({t} x) {{ return {one} / ({one} + {fexp}(-x)); }}"
    if kind == "floormod" and ir.is_float(dt):   # Python sign-of-divisor remainder
        fl = "floorf" if dt == "float32" else "floor"
        return f"static inline {t} {name}({t} a, {t} b) {{ return a - {fl}(a / b) * b; }}"
    if kind in ("floordiv", "floormod"):
        # NumPy semantics where C has none: x // 0 == x % 0 == 0; MIN // -1 wraps
        if dt == "uint8":
            op = '/' if kind == 'floordiv' else '%'
            return f"static inline {t} {name}({t} a, {t} b) {{ return b == 0 ? 0 : ({t})(a {op} b); }}"
        guard = (f"  if (b == 0) return 0;\n"
                 + (f"  if (b == -1) return ({t})(0 - (uint64_t)a);\n" if kind == "floordiv"
                    else "  if (b == -1) return 0;\n"))
        decl, fix = ((f"{t} q = ({t})(a / b), r = ({t})(a % b);", f"({t})(q - 1) : q")
                     if kind == "floordiv" else (f"{t} r = ({t})(a % b);", f"({t})(r + b) : r"))
        return (f"static inline {t} {name}({t} a, {t} b) {{\n{guard}  {decl}\n"
                f"  return (r != 0 && ((r < 0) != (b < 0))) ? {fix};\n}}")
    raise AssertionError(name)


_ALLOC_SOURCE = ("static void *tp_alloc(const int64_t *dims, int rank, size_t elsize, int zero) {\n"
                "  size_t n = 1;\n"
                "  for (int d = 0; d < rank; d++) {\n"
                "    if (dims[d] < 0 || __builtin_mul_overflow(n, (size_t)dims[d], &n)) return NULL;\n"
                "  }\n"
                "  if (n == 0) n = 1;\n"
                "  size_t bytes;\n"
                "  if (__builtin_mul_overflow(n, elsize, &bytes) || bytes > ((size_t)1 << 62)) return NULL;\n"
                "  /* 64-byte aligned: a cache line, a vector */\n"
                "  void *p = NULL;\n"
                "  if (posix_memalign(&p, 64, bytes) != 0) return NULL;\n"
                "  if (zero) memset(p, 0, bytes);\n"
                "  return p;\n}")


def _const_eval(e, consts: dict):
    """Folds an integer shape expression over ``consts``; None if not constant."""
    if isinstance(e, ir.Const) and ir.is_int(e.dtype):
        return int(e.value)
    if isinstance(e, ir.Var):
        return consts.get(e.name)
    if isinstance(e, ir.Binary) and e.op in ("add", "sub", "mul", "floordiv", "min", "max"):
        a, b = _const_eval(e.a, consts), _const_eval(e.b, consts)
        if a is None or b is None or (e.op == "floordiv" and b == 0):
            return None
        if e.op == "floordiv":
            return a // b
        return {"add": a + b, "sub": a - b, "mul": a * b, "min": min(a, b), "max": max(a, b)}[e.op]
    return None


def _safe_divisor(b) -> bool:
    """An integer divisor that can neither be 0 nor -1 (C's ``/`` and ``%``
    trap on 0 and on MIN / -1)."""
    if not isinstance(b, ir.Const):
        return False
    v = int(b.value)
    lo, hi = _INT_RANGE.get(b.dtype, (None, None))
    if lo is not None:
        v = (v - lo) % (hi - lo) + lo
    return v != 0 and (v != -1 or b.dtype == "uint8")


def _omp_op(op: str, dt: str, em: "_Emitter") -> str:
    """The OpenMP reduction identifier of ``op`` on ``dt``: the built-in one,
    or for float min/max a declared one that keeps NaN (OpenMP's ``max``
    does not)."""
    if op in ("max", "min") and ir.is_float(dt):
        em.helper(f"tp_{op}_{_SUFFIX[dt]}")
        return em.helper(f"tp_omp_{op}_{_SUFFIX[dt]}")
    return {"add": "+", "sub": "+", "mul": "*", "max": "max", "min": "min"}[op]


# ------------------------------------------------------------------ emitter
class _Emitter(WidenMixin):
    def __init__(self, fn: ir.LoweredFunction):
        self.fn = fn
        self.helpers: dict = {}          # name -> None (ordered set)
        self.lines: list = []
        self.heap: list = []             # live heap temporaries outside OpenMP loops
        self.omp = None                  # None, "parallel" or "simd": innermost OpenMP loop
        self.in_parallel = False
        self.loop_depth = 0
        self.uses_status = False

    def helper(self, name: str) -> str:
        self.helpers.setdefault(name, None)
        return name

    def out(self, indent: int, text: str) -> None:
        self.lines.append("  " * indent + text)

    # ---------------------------------------------------------------- exprs
    def expr(self, e) -> str:
        return self._e(e)[0]

    def _wrap(self, e, min_prec: int) -> str:
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
            return _const(e)
        if isinstance(e, ir.Var):
            return (self.lane_var(e.name) if self.wide else None) or e.name, P_PRIMARY
        if isinstance(e, ir.Load):
            return (self.lane_load(e) if self.wide else None) or self.access(e.array, e.index), P_PRIMARY
        if isinstance(e, ir.Binary):
            return self._binary(e)
        if isinstance(e, ir.Unary):
            if e.op == "neg":
                s = self._wrap(e.a, P_UNARY)
                s = f"-({s})" if s.startswith("-") else f"-{s}"
                return self._narrow(s, P_UNARY, e.dtype)
            if e.op == "not":
                return "!" + self._wrap(e.a, P_UNARY), P_UNARY
            raise ValueError(f"C backend: unknown unary op {e.op!r}")
        if isinstance(e, ir.Call):
            return self._call(e)
        if isinstance(e, ir.Select):
            return (f"({self._wrap(e.cond, P_REL)} ? {self._wrap(e.a, P_OR)} : "
                    f"{self._wrap(e.b, P_OR)})"), P_PRIMARY
        if isinstance(e, ir.Cast):
            if e.a.dtype == e.dtype:
                return self._e(e.a)
            return f"({CTYPES[e.dtype]}){self._wrap(e.a, P_UNARY)}", P_UNARY
        raise TypeError(f"C backend: not an expression: {e!r}")

    def _narrow(self, s: str, prec: int, dtype: str) -> tuple:
        # int8/uint8 arithmetic is done in int by C: convert back so that
        # enclosing operations see the wrapped value.
        if dtype in ("int8", "uint8"):
            return f"({CTYPES[dtype]})({s})", P_UNARY
        return s, prec

    def _binary(self, e: ir.Binary) -> tuple:
        op, dt = e.op, e.dtype
        if op in ("div", "mod") and ir.is_int(dt) and not _safe_divisor(e.b):
            fn = self.helper(f"tp_{op}_{_SUFFIX[dt]}")
            return f"{fn}({self.expr(e.a)}, {self.expr(e.b)})", P_PRIMARY
        if op in ("min", "max") or op in ("floordiv", "floormod") and not (
                op == "floordiv" and ir.is_float(dt)):
            fn = self.helper(f"tp_{op}_{_SUFFIX[dt]}")
            return f"{fn}({self.expr(e.a)}, {self.expr(e.b)})", P_PRIMARY
        if op == "floordiv":                                   # float
            fl = "floorf" if dt == "float32" else "floor"
            return f"{fl}({self._wrap(e.a, P_MUL)} / {self._wrap(e.b, P_MUL + 1)})", P_PRIMARY
        if op == "mod" and ir.is_float(dt):
            fm = "fmodf" if dt == "float32" else "fmod"
            return f"{fm}({self.expr(e.a)}, {self.expr(e.b)})", P_PRIMARY
        if op not in _BINOPS:
            raise ValueError(f"C backend: unknown binary op {op!r}")
        sym, prec = _BINOPS[op]
        if op in ir.CMP_OPS:            # keep comparisons of comparisons explicit
            lmin, rmin = P_ADD, P_ADD
        elif op in ir.LOGIC_OPS:        # parenthesise && inside || for readability
            lmin = rmin = P_EQ
            if isinstance(e.a, ir.Binary) and e.a.op == op:
                lmin = prec
        else:
            lmin, rmin = prec, prec + 1
        ls = self._wrap(e.a, lmin)
        if dt == "int64" and self._narrow_literal(e.a) and self._narrow_literal(e.b):
            ls = f"(int64_t){self._wrap(e.a, P_UNARY)}"        # avoid int overflow
        s = f"{ls} {sym} {self._wrap(e.b, rmin)}"
        if op in ir.ARITH_OPS:
            return self._narrow(s, prec, dt)
        return s, prec

    def _call(self, e: ir.Call) -> tuple:
        f, dt = e.func, e.dtype
        ir.check_call(e, "C backend")
        arg = e.args[0]
        if ir.is_float(dt):
            if vecmath.supported(f, dt):                 # branchless, vectorisable
                self.helper(f"tp_bits_{_SUFFIX[dt]}")
                name = self.helper(f"tp_{f}_{_SUFFIX[dt]}")
            elif f == "sigmoid":
                name = self.helper(f"tp_sigmoid_{_SUFFIX[dt]}")
            else:
                name = _LIBM[f] + ("f" if dt == "float32" else "")
            return f"{name}({self.expr(arg)})", P_PRIMARY
        if ir.is_int(dt):
            if f in ("floor", "ceil"):
                return self._e(arg)
            if f == "abs":
                if dt == "uint8":
                    return self._e(arg)
                return f"{self.helper('tp_abs_' + _SUFFIX[dt])}({self.expr(arg)})", P_PRIMARY
            inner = (f"{self.helper('tp_sigmoid_f64')}" if f == "sigmoid" else f)
            return f"({CTYPES[dt]}){inner}((double){self._wrap(arg, P_UNARY)})", P_UNARY
        raise TypeError(f"C backend: {f} of dtype {dt}")

    def access(self, array: str, index) -> str:
        if len(index) == 0:
            return f"{array}[0]"
        return array + "".join(f"[{self.expr(i)}]" for i in index)

    # ---------------------------------------------------------------- stmts
    def body(self, s, ind: int) -> None:
        """Emits ``s`` as the tail of an existing ``{ }`` scope."""
        stmts = s.stmts if isinstance(s, ir.Block) else [s]
        for k, st in enumerate(stmts):
            last = k == len(stmts) - 1
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

    def let_decl(self, s: ir.Let, ind: int) -> None:
        _check_name(s.name, "Let")
        self.out(ind, f"const {CTYPES[s.value.dtype]} {s.name} = {self.expr(s.value)};")

    def stmt(self, s, ind: int) -> None:
        if isinstance(s, ir.Store):
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
        _check_name(s.var, "loop")
        step = ir.check_loop(s, "C backend")
        if s.kind == "unrolled" and step == 1 and self.unrolled(s, ind):
            return
        saved = (self.omp, self.in_parallel)
        aliases = []
        if s.kind == "parallel" and self.omp == "simd":
            # OpenMP forbids a parallel region inside simd: run this loop serially
            self.out(ind, "/* parallel loop inside a simd loop: runs serially */")
            s = ir.For(s.var, s.lo, s.hi, s.body, kind="serial", step=s.step)
        if s.kind == "parallel":
            if s.attrs.get("reduction") and self.vector_reduction(s, ind, "parallel for"):
                return
            clause, aliases = self.reduction_clause(s)
            self.out(ind, "#pragma omp parallel for" + clause)
            self.omp, self.in_parallel = "parallel", True
        elif s.kind == "vector" and not s.attrs.get("reduction") and vectorize.nested(s.body):
            return self.nested_vector_loop(s, ind)      # codegen.c.widen
        elif s.kind == "vector":
            if s.attrs.get("reduction"):
                if self.vector_reduction(s, ind):
                    return
                # not the accumulator pattern: a plain (correct, scalar) loop
                self.out(ind, "/* vector reduction kept scalar: accumulator varies in the loop */")
            else:
                self.out(ind, "#pragma omp simd")
                self.omp = "simd"
        elif s.kind == "unrolled":
            self.out(ind, f"#pragma GCC unroll {int(s.attrs.get('unroll', 8))}")
        inc = f"{s.var}++" if step == 1 else f"{s.var} += {step}"
        self.out(ind, f"for (int64_t {s.var} = {self.expr(s.lo)}; {s.var} < "
                      f"{self._wrap(s.hi, P_REL + 1)}; {inc}) {{")
        for line in aliases:          # views of the privatised reduction copies
            self.out(ind + 1, line)
        self.loop_depth += 1
        self.body(s.body, ind + 1)
        self.loop_depth -= 1
        self.omp, self.in_parallel = saved
        self.out(ind, "}")

    def unrolled(self, s: ir.For, ind: int) -> bool:
        """Unrolls in the source: one scoped copy of the body per iteration.
        A loop whose trip count is not constant gets the copies when it runs
        exactly ``attrs['unroll']`` times (full tiles) and a plain loop
        otherwise (the partial tile).  Returns False to fall back to a pragma."""
        lo = _const_eval(s.lo, self.fn.constants)
        hi = _const_eval(s.hi, self.fn.constants)
        factor = s.attrs.get("unroll")
        if lo is not None and hi is not None:
            if hi - lo > 64 or (factor is not None and factor != hi - lo):
                return False            # unroll-by-factor: leave it to the pragma
            for v in range(lo, hi):
                self.out(ind, f"{{ /* {s.var} = {v} */")
                self.out(ind + 1, f"const int64_t {s.var} = {v};")
                self.body(s.body, ind + 1)
                self.out(ind, "}")
            return True
        if not isinstance(factor, int) or not 0 < factor <= 64:
            return False
        lo_s = self.expr(s.lo)
        self.out(ind, f"if ({self._wrap(s.hi, P_REL + 1)} - ({lo_s}) == {factor}) {{")
        for v in range(factor):
            self.out(ind + 1, f"{{ /* {s.var} = {lo_s} + {v} */")
            self.out(ind + 2, f"const int64_t {s.var} = {lo_s} + {v};" if lo_s != "0"
                     else f"const int64_t {s.var} = {v};")
            self.body(s.body, ind + 2)
            self.out(ind + 1, "}")
        self.out(ind, "} else {")
        plain = ir.For(s.var, s.lo, s.hi, s.body, kind="serial", step=1)
        self.loop(plain, ind + 1)
        self.out(ind, "}")
        return True

    def vector_reduction(self, s: ir.For, ind: int, pragma: str = "simd") -> bool:
        """``for k: A[idx] = A[idx] op e`` with ``idx`` invariant in ``k``:
        a scalar accumulator under ``#pragma omp simd|parallel for reduction``."""
        body = s.body.stmts[0] if isinstance(s.body, ir.Block) and len(s.body.stmts) == 1 \
            else s.body
        ops = {"add": "+", "sub": "+", "mul": "*", "max": "max", "min": "min"}
        if not isinstance(body, ir.Store) or not isinstance(body.value, ir.Binary) \
                or body.value.op not in ops:
            return False
        old = body.value.a
        if not isinstance(old, ir.Load) or old.array != body.array or \
                self.access(old.array, old.index) != self.access(body.array, body.index):
            return False
        if any(isinstance(n, ir.Var) and n.name == s.var
               for i in body.index for n in ir.walk_exprs(i)):
            return False
        step = int(s.step)
        inc = f"{s.var}++" if step == 1 else f"{s.var} += {step}"
        dt = body.value.dtype
        target = self.access(body.array, body.index)
        acc = f"tp_acc_{s.var}"
        self.out(ind, "{")
        self.out(ind + 1, f"{CTYPES[dt]} {acc} = {target};")
        self.out(ind + 1, f"#pragma omp {pragma} reduction({_omp_op(body.value.op, dt, self)}: {acc})")
        self.out(ind + 1, f"for (int64_t {s.var} = {self.expr(s.lo)}; {s.var} < "
                          f"{self._wrap(s.hi, P_REL + 1)}; {inc}) {{")
        update = ir.Binary(body.value.op, ir.Var(acc, dt), body.value.b, dt)
        saved = (self.omp, self.in_parallel)
        self.omp = "simd" if pragma == "simd" else "parallel"
        self.in_parallel = self.in_parallel or pragma != "simd"
        self.loop_depth += 1
        self.out(ind + 2, f"{acc} = {self.expr(update)};")
        self.loop_depth -= 1
        self.omp, self.in_parallel = saved
        self.out(ind + 1, "}")
        self.out(ind + 1, f"{target} = {acc};")
        self.out(ind, "}")
        return True

    def reduction_clause(self, s: ir.For) -> tuple:
        """OpenMP array-section reductions for ``attrs['reduction']`` =
        [(array, op)]: every thread accumulates into a private copy of the
        whole array, combined at the end.  Returns (clause, alias lines)."""
        items = s.attrs.get("reduction") or []
        if not items:
            return "", []
        ops = {"add": "+", "sub": "+", "mul": "*", "max": "max", "min": "min"}
        arrays = {a.name: a for a in self.fn.arrays}
        parts, aliases = [], []
        for name, op in items:
            if op not in ops:
                raise ValueError(f"C backend: no OpenMP reduction for {op!r}")
            if name not in arrays:
                raise NotImplementedError(f"C backend: parallel reduction into {name!r}, "
                                          "which is not an argument array")
            a = arrays[name]
            size = " * ".join(f"({self.expr(d)})" for d in a.shape) or "1"
            raw = name + "_" if len(a.shape) > 1 else name
            parts.append(f"reduction({_omp_op(op, a.dtype, self)}: {raw}[0:{size}])")
            if len(a.shape) > 1:
                t = CTYPES[a.dtype]
                ext = "".join(f"[{self.expr(d)}]" for d in a.shape[1:])
                aliases.append(f"{t} (*restrict {name}){ext} = ({t} (*){ext}){raw};")
        return " " + " ".join(parts), aliases

    def allocate(self, s: ir.Allocate, ind: int) -> None:
        """Emits the temporary, then its body, into the current scope."""
        name, t, rank = s.array, CTYPES[s.dtype], len(s.shape)
        _check_name(name, "Allocate")
        dims = [_const_eval(d, self.fn.constants) for d in s.shape]
        nbytes = math.prod(dims) * _ELSIZE[s.dtype] if None not in dims else None
        if self.loop_depth and nbytes is not None and 0 < nbytes <= _STACK_LIMIT:
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


_ELSIZE = {"float32": 4, "float64": 8, "int8": 1, "uint8": 1, "int32": 4, "int64": 8, "bool": 1}


def _check_name(name: str, what: str) -> None:
    if not isinstance(name, str) or not _IDENT.match(name) or name in _C_KEYWORDS \
            or name.startswith("tp_"):
        raise ValueError(f"C backend: {what} name {name!r} is not usable as a C identifier "
                         "(C keywords, libc names and the tp_ prefix are reserved)")


def _signature(fn: ir.LoweredFunction, em: "_Emitter") -> tuple:
    """(parameter declarations, cffi declaration types, body preamble lines)."""
    params, cffi_types, pre = [], [], []
    seen = set()

    def claim(n, what):
        _check_name(n, what)
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


def c_names(fn: ir.LoweredFunction) -> dict:
    """{user name: its C identifier} for every name of ``fn`` (the rule is in
    the module docstring); names of the backend's own (``tp_*``) are left out."""
    names, seen = [], set()

    def add(n):
        if n not in seen and not n.startswith("tp_"):
            seen.add(n)
            names.append(n)
    add(fn.name)
    for n in fn.constants:
        add(n)
    for sc in fn.scalars:
        add(sc.name)
    for a in fn.arrays:
        add(a.name)
    for st in ir.walk_stmts(fn.body):
        if isinstance(st, ir.For):
            add(st.var)
            for key in ("reduction", "private", "accumulate"):
                for item in st.attrs.get(key) or ():
                    add(item[0] if isinstance(item, tuple) else item)
        elif isinstance(st, ir.Let):
            add(st.name)
        elif isinstance(st, (ir.Allocate, ir.Store)):
            add(st.array)
        for e in ir.stmt_exprs(st):
            for x in ir.walk_exprs(e):
                if isinstance(x, ir.Var):
                    add(x.name)
                elif isinstance(x, ir.Load):
                    add(x.array)
    raw_of = [a.name for a in fn.arrays if len(a.shape) > 1]   # ``A`` also declares ``A_``
    mangle, extra = {n for n in names if _own_name(n)}, set()
    for _ in range(len(names) + 2):
        taken = {n for n in names if n not in mangle} | extra
        cmap = {n: n for n in names if n not in mangle}
        for n in names:
            if n in mangle:
                c = n + "_"
                while c in taken:
                    c += "_"
                taken.add(c)
                cmap[n] = c
        raws = {cmap[a] + "_" for a in raw_of}
        clash = {n for n in names if cmap[n] in raws}
        if not clash:
            break
        if clash - mangle:
            mangle |= clash
        else:
            extra |= raws
    return cmap


def _renamed(fn: ir.LoweredFunction, cmap: dict) -> ir.LoweredFunction:
    """``fn`` with every name replaced by its C identifier (``fn.name`` too)."""
    if all(k == v for k, v in cmap.items()):
        return fn
    nm = lambda n: cmap.get(n, n)          # noqa: E731
    done = {}

    def ex(e):
        if id(e) in done:
            return done[id(e)]
        if isinstance(e, ir.Var):
            r = ir.Var(nm(e.name), e.dtype)
        elif isinstance(e, ir.Load):
            r = ir.Load(nm(e.array), tuple(ex(i) for i in e.index), e.dtype)
        elif isinstance(e, ir.Binary):
            r = ir.Binary(e.op, ex(e.a), ex(e.b), e.dtype)
        elif isinstance(e, ir.Unary):
            r = ir.Unary(e.op, ex(e.a), e.dtype)
        elif isinstance(e, ir.Call):
            r = ir.Call(e.func, tuple(ex(a) for a in e.args), e.dtype)
        elif isinstance(e, ir.Select):
            r = ir.Select(ex(e.cond), ex(e.a), ex(e.b), e.dtype)
        elif isinstance(e, ir.Cast):
            r = ir.Cast(ex(e.a), e.dtype)
        else:
            r = e
        done[id(e)] = r
        return r

    def attrs(a):
        out = dict(a)
        for key in ("reduction", "private", "accumulate"):
            if out.get(key):
                out[key] = [(nm(x[0]),) + tuple(x[1:]) if isinstance(x, tuple) else nm(x)
                            for x in out[key]]
        return out

    def st(s):
        if isinstance(s, ir.Store):
            return ir.Store(nm(s.array), tuple(ex(i) for i in s.index), ex(s.value))
        if isinstance(s, ir.For):
            return ir.For(nm(s.var), ex(s.lo), ex(s.hi), st(s.body), kind=s.kind, step=s.step,
                          attrs=attrs(s.attrs))
        if isinstance(s, ir.Let):
            return ir.Let(nm(s.name), ex(s.value), st(s.body))
        if isinstance(s, ir.If):
            return ir.If(ex(s.cond), st(s.then), None if s.else_ is None else st(s.else_))
        if isinstance(s, ir.Block):
            return ir.Block([st(x) for x in s.stmts])
        if isinstance(s, ir.Allocate):
            return ir.Allocate(nm(s.array), s.dtype, tuple(ex(d) for d in s.shape), st(s.body),
                               s.zero_init)
        return s
    return ir.LoweredFunction(
        name=nm(fn.name), scalars=[ir.ScalarArg(nm(x.name), x.dtype) for x in fn.scalars],
        arrays=[ir.ArrayArg(nm(a.name), a.dtype, tuple(ex(d) for d in a.shape), a.writable)
                for a in fn.arrays],
        body=st(fn.body), constants={nm(k): v for k, v in fn.constants.items()})


def cffi_declaration(fn: ir.LoweredFunction) -> str:
    """The cdef of ``fn`` for cffi ABI mode: array pointers as ``intptr_t``."""
    cfn = _renamed(fn, c_names(fn))
    return f"int {fn.name}({', '.join(_signature(cfn, _Emitter(cfn))[1]) or 'void'});"


def emit_c(fn: ir.LoweredFunction) -> str:
    """The C99 + OpenMP source of ``fn`` (one exported function ``fn.name``)."""
    fn = regblock.register_block(vreduce.hoist_vector_reductions(fn))
    symbol, cmap = fn.name, c_names(fn)
    fn = _renamed(fn, cmap)
    _check_name(fn.name, "function")
    em = _Emitter(fn)
    params, _, pre = _signature(fn, em)
    body_lines = []
    for n, v in fn.constants.items():
        body_lines.append(f"  const int64_t {n} = {_int_literal(int(v), 'int64')[0]};")
    body_lines += ["  " + p for p in pre]
    em.body(fn.body, 1)
    if em.uses_status:
        body_lines.append("  int tp_status = 0;")
    body_lines += em.lines
    body_lines.append(f"  return {'tp_status' if em.uses_status else '0'};")

    # no header may declare the kernel's name, nor define a macro of any user name
    # (see the module docstring)
    ids = sorted(set(cmap.values()) | {a.name + "_" for a in fn.arrays if len(a.shape) > 1})
    head = ["/* generated by tiramisu_py codegen.c */",
            f"#undef {fn.name}", f"#define {fn.name} tp_hidden_{fn.name}",
            *(f"#include <{h}>" for h in ("stdint.h", "stdbool.h", "stdlib.h", "string.h", "math.h")),
            *(f"#undef {n}" for n in ids), ""]
    order = ["tp_alloc"] + sorted(h for h in em.helpers if h != "tp_alloc")
    for h in order:
        if h in em.helpers:
            head.append(_helper_source(h))
    if em.helpers:
        head.append("")
    sig = f"int {fn.name}({', '.join(params) or 'void'})"
    if fn.name != symbol:              # renamed in C: the symbol keeps the user's name
        head += [f'{sig} __asm__("{symbol}");', ""]
    return "\n".join(head + [sig, "{", *body_lines, "}", ""])

"""C identifiers: the names the C family's generated code may not give the
user's names, and the identifier each user name gets.

The user's names (kernel, params, arrays, loops, temporaries) are
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
* a user name that the generated code spells itself (``_OWN``: C and GNU
  keywords, the ``<stdint.h>`` types, ``NULL``, ``INFINITY``, the libm and
  allocation functions it calls, the ``tp_`` prefix of its helpers) is
  renamed with a trailing ``_`` (more while taken: ``NULL`` -> ``NULL_``); the
  kernel keeps its exported symbol through an ``__asm__`` label.

Only the kernel's symbol cannot be renamed: :func:`reserved_c_symbol` names the
ones it cannot take (functions the generated code or the runtime calls), which
the language refuses when the Function is declared.
"""
from __future__ import annotations

import re

from .. import ir

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
        | set("""asm typeof posix_memalign madvise MADV_HUGEPAGE int16_t uint16_t uint32_t
              uint64_t ptrdiff_t
              _Alignas _Alignof _Atomic _Generic _Noreturn _Static_assert _Thread_local
              omp_out omp_in omp_priv omp_get_num_threads sched_yield syscall SYS_futex
              FUTEX_WAIT_PRIVATE FUTEX_WAKE_PRIVATE""".split()))


def _own_name(name: str) -> bool:
    return name in _OWN or name.startswith(("tp_", "_"))


# symbols the kernel's exported name must not take: functions the C and LLVM
# kernels call, or that the process resolves by name
_SYMBOLS = (_C_KEYWORDS | _C_LIBRARY | {"posix_memalign", "aligned_alloc", "memcpy", "madvise",
                                             "sched_yield", "syscall"}) \
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


def check_name(name: str, what: str) -> None:
    """Refuses ``name`` (of a ``what``: "loop", "array"...) where it cannot be a C identifier."""
    if not isinstance(name, str) or not _IDENT.match(name) or name in _C_KEYWORDS \
            or name.startswith("tp_"):
        raise ValueError(f"C backend: {what} name {name!r} is not usable as a C identifier "
                         "(C keywords, libc names and the tp_ prefix are reserved)")


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


def renamed(fn: ir.LoweredFunction, cmap: dict) -> ir.LoweredFunction:
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
            return ir.store_like(s, nm(s.array), tuple(ex(i) for i in s.index), ex(s.value))
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
                               s.zero_init, s.scope, s.layout)
        return s
    return ir.LoweredFunction(
        name=nm(fn.name), scalars=[ir.ScalarArg(nm(x.name), x.dtype) for x in fn.scalars],
        arrays=[ir.ArrayArg(nm(a.name), a.dtype, tuple(ex(d) for d in a.shape), a.writable)
                for a in fn.arrays],
        body=st(fn.body), constants={nm(k): v for k, v in fn.constants.items()})

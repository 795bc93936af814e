"""The C family's helper functions (``tp_*``), emitted into a kernel's source
only when it uses them: NumPy's integer division and floor division, NaN-keeping
min/max and their OpenMP reductions, the vector math of :mod:`codegen.vecmath`,
the vector types of widened loops (:mod:`codegen.c.widen`) and the heap
allocator of temporaries."""
from __future__ import annotations

from .. import ir, vecmath
from ..regions import SPIN_MAX, SPIN_MIN
from .syntax import CTYPES, SUFFIX
from .dot import DOT_SOURCE
from .stream import STREAM_SOURCE
from .vecmath import c_bits_helpers, c_helper
from .transpose import rounds_helper
from .widen import vector_helper


def helper_source(name: str) -> str:
    """The C source of the helper ``name`` (``tp_alloc``, ``tp_min_f32``,
    ``tp_exp_f32``, ``tp_vec_f32x16``...)."""
    if name == "tp_alloc":
        return _ALLOC_SOURCE
    if name.startswith("tp_vec_"):
        return vector_helper(name)
    if name.startswith("tp_zip_"):
        return rounds_helper(name)
    if name == "tp_dot":
        return DOT_SOURCE
    if name == "tp_stream":
        return STREAM_SOURCE
    if name == "tp_barrier":
        return _BARRIER_SOURCE
    if name in _HALF_SOURCE:
        return _HALF_SOURCE[name]
    if name in ("tp_bits_f32", "tp_bits_f64"):
        return c_bits_helpers("float32" if name.endswith("f32") else "float64")
    kind, suf = name[3:].rsplit("_", 1)
    dt = next(d for d, s in SUFFIX.items() if s == suf)
    t = CTYPES[dt]
    if kind in ("min", "max"):
        op = "<" if kind == "min" else ">"
        if ir.is_float(dt):     # NaN-propagating, as np.minimum / np.maximum
            # (the NaN test first: gcc then branches on it, predicted, around
            # one vmaxss; the select after it went through a general register,
            # and a row max of softmax ran 1.6-2x slower)
            return (f"static inline {t} {name}({t} a, {t} b) {{ "
                    f"return (a != a || a {op} b) ? a : b; }}")
        return f"static inline {t} {name}({t} a, {t} b) {{ return a {op} b ? a : b; }}"
    if kind == "pick":          # a select of values both computed (codegen.c.emit.speculated)
        return f"static inline {t} {name}(int c, {t} a, {t} b) {{ return c ? a : b; }}"
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
        return c_helper(kind, dt)
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
                "  /* 64-byte aligned: a cache line, a vector; from 4 MiB on (as NumPy\n"
                "     does), 2 MiB aligned and marked for transparent huge pages: a large\n"
                "     temporary, fresh from the system at every call, then faults in 2 MiB\n"
                "     at a time, not 4 KiB */\n"
                "  size_t align = bytes >= ((size_t)4 << 20) ? ((size_t)2 << 20) : 64;\n"
                "  void *p = NULL;\n"
                "  if (posix_memalign(&p, align, bytes) != 0) return NULL;\n"
                "#ifdef MADV_HUGEPAGE\n"
                "  if (align > 64) madvise(p, bytes, MADV_HUGEPAGE);\n"
                "#endif\n"
                "  if (zero) memset(p, 0, bytes);\n"
                "  return p;\n}")


# the headers the barrier needs (with the kernel's includes, before its names are #undef-ed)
BARRIER_INCLUDES = ("#ifdef __linux__", "#include <linux/futex.h>", "#include <sys/syscall.h>",
                    "#include <unistd.h>", "#endif")

# the stepped region's barrier (codegen.regions): the generation read, the
# count incremented; the last to arrive resets the count, advances the
# generation and wakes the sleepers; the others poll the generation (pausing)
# for the module's spin budget, then sleep on it (a futex on Linux, yielding
# elsewhere).  The budget halves when a spin ends in a sleep and doubles when
# it ends in time, between SPIN_MIN and SPIN_MAX polls.
_BARRIER_SOURCE = (
    "int omp_get_num_threads(void);\n"
    "int sched_yield(void);\n"
    "typedef struct { int64_t count; int32_t gen, sleepers; } tp_barrier_t;\n"
    f"static int64_t tp_spin_polls = {SPIN_MAX};\n"
    "static void tp_barrier(tp_barrier_t *b) {\n"
    "  int64_t team = omp_get_num_threads();\n"
    "  if (team == 1) return;\n"
    "  int32_t gen = __atomic_load_n(&b->gen, __ATOMIC_ACQUIRE);\n"
    "  if (__atomic_fetch_add(&b->count, 1, __ATOMIC_ACQ_REL) == team - 1) {\n"
    "    __atomic_store_n(&b->count, 0, __ATOMIC_RELAXED);\n"
    "    __atomic_store_n(&b->gen, gen + 1, __ATOMIC_SEQ_CST);\n"
    "#ifdef __linux__\n"
    "    if (__atomic_load_n(&b->sleepers, __ATOMIC_SEQ_CST) != 0)\n"
    "      syscall(SYS_futex, &b->gen, FUTEX_WAKE_PRIVATE, 0x7fffffff, NULL, NULL, 0);\n"
    "#endif\n"
    "    return;\n"
    "  }\n"
    "  int64_t budget = __atomic_load_n(&tp_spin_polls, __ATOMIC_RELAXED);\n"
    "  for (int64_t n = 0; n < budget; n++) {\n"
    "    if (__atomic_load_n(&b->gen, __ATOMIC_ACQUIRE) != gen) {\n"
    f"      if (budget < {SPIN_MAX}) __atomic_store_n(&tp_spin_polls, 2 * budget, __ATOMIC_RELAXED);\n"
    "      return;\n"
    "    }\n"
    "#if defined(__x86_64__) || defined(__i386__)\n"
    "    __builtin_ia32_pause();\n"
    "#endif\n"
    "  }\n"
    f"  if (budget > {SPIN_MIN}) __atomic_store_n(&tp_spin_polls, budget / 2, __ATOMIC_RELAXED);\n"
    "  __atomic_fetch_add(&b->sleepers, 1, __ATOMIC_SEQ_CST);\n"
    "  while (__atomic_load_n(&b->gen, __ATOMIC_SEQ_CST) == gen) {\n"
    "#ifdef __linux__\n"
    "    syscall(SYS_futex, &b->gen, FUTEX_WAIT_PRIVATE, gen, NULL, NULL, 0);\n"
    "#else\n"
    "    sched_yield();\n"
    "#endif\n"
    "  }\n"
    "  __atomic_fetch_sub(&b->sleepers, 1, __ATOMIC_RELAXED);\n"
    "}")


# 16-bit floats live as their bits in uint16_t.  bfloat16: round to nearest
# even on the bits, a NaN stays a quiet NaN with its sign and top payload;
# float16: IEEE, by the compiler's _Float16 (F16C's vcvtps2ph where present)
_HALF_SOURCE = {
    "tp_cvt_bf16_f32": ("static inline float tp_cvt_bf16_f32(uint16_t h) {\n"
                        "  uint32_t u = (uint32_t)h << 16; float f; memcpy(&f, &u, 4); return f;\n}"),
    "tp_cvt_f32_bf16": ("static inline uint16_t tp_cvt_f32_bf16(float f) {\n"
                        "  uint32_t u; memcpy(&u, &f, 4);\n"
                        "  if ((u & 0x7fffffffu) > 0x7f800000u) return (uint16_t)((u >> 16) | 0x40u);\n"
                        "  return (uint16_t)((u + 0x7fffu + ((u >> 16) & 1u)) >> 16);\n}"),
    "tp_cvt_f16_f32": ("static inline float tp_cvt_f16_f32(uint16_t h) {\n"
                       "  _Float16 x; memcpy(&x, &h, 2); return (float)x;\n}"),
    "tp_cvt_f32_f16": ("static inline uint16_t tp_cvt_f32_f16(float f) {\n"
                       "  _Float16 x = (_Float16)f; uint16_t h; memcpy(&h, &x, 2); return h;\n}"),
}

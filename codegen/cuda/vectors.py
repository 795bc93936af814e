"""Vector accesses on the GPU: a ``vector`` loop of ``W`` lanes inside a
thread (``vectorize`` of a per-thread loop; ``cache_shared(...,
vector=W)``; a ``cache_local`` copy vectorized) is printed as one access of
``W * elsize`` bytes (up to 16: ``LDG.E.128`` / ``LDS.128`` / ``STS.128``)
for each access that is contiguous in the lane, and lane by lane otherwise.

Each access of the loop's store (its target and every load of its value)
is classified by its flat (row-major) index ``e(v)`` as a function of the
lane variable ``v``: *contiguous* (``e(v) = e(lo) + (v - lo)``), *uniform*
(no ``v``) or *gathered* (anything else: one scalar access per lane).  A
contiguous access must be aligned: ``e(lo)`` a multiple of ``W`` for every
instance, proved term by term (each coefficient of the loop variables a
multiple of ``W``; the fixed sizes substituted), else the loop is refused
naming its command.  Shared and local arrays accessed so are declared
``__align__(16)``; a global array's base pointer is checked at each launch
(:attr:`LaunchPlan.aligned`).  A loop whose trip count may be short of
``W`` (a partial tile) runs the vector body when it is full and the lanes
one by one otherwise.

An :class:`ir.AsyncCopy` (``pipeline``'s copies global -> shared) is printed
as ``cp.async`` of ``W * elsize`` bytes when both sides are contiguous, of
one element per lane (4 or 8 bytes) when the shared side is gathered (a
transposed tile), and as a plain copy where ``cp.async`` has no size (2
bytes)."""
from __future__ import annotations

import math

from .. import ir

ASYNC_SIZES = (4, 8, 16)          # bytes cp.async copies


# the device side of the helpers the printed kernels call (the emulator's are
# in tpy_emu.h): 16/8/4/2-byte moves, cp.async (sm_80+; a plain copy before)
DEVICE_HELPERS = {
    "vector": """\
template <int B> struct tpy_bytes;
template <> struct tpy_bytes<16> { typedef uint4 t; };
template <> struct tpy_bytes<8> { typedef uint2 t; };
template <> struct tpy_bytes<4> { typedef unsigned int t; };
template <> struct tpy_bytes<2> { typedef unsigned short t; };
#define TPY_VMOVE(B, dst, src) \\
  (*(typename tpy_bytes<B>::t *)(dst) = *(const typename tpy_bytes<B>::t *)(src))""",
    "async": """\
template <int B> static __device__ __forceinline__ void tpy_cp_async(void *dst, const void *src) {
#if __CUDA_ARCH__ >= 800
  unsigned s = (unsigned)__cvta_generic_to_shared(dst);
  if (B == 16)
    asm volatile("cp.async.cg.shared.global [%0], [%1], 16;\\n" :: "r"(s), "l"(src) : "memory");
  else
    asm volatile("cp.async.ca.shared.global [%0], [%1], %2;\\n" :: "r"(s), "l"(src), "n"(B)
                 : "memory");
#else
  *(typename tpy_bytes<B>::t *)dst = *(const typename tpy_bytes<B>::t *)src;
#endif
}
static __device__ __forceinline__ void tpy_cp_async_commit() {
#if __CUDA_ARCH__ >= 800
  asm volatile("cp.async.commit_group;\\n" ::: "memory");
#endif
}
template <int N> static __device__ __forceinline__ void tpy_cp_async_wait() {
#if __CUDA_ARCH__ >= 800
  asm volatile("cp.async.wait_group %0;\\n" :: "n"(N) : "memory");
#endif
}""",
}
# both sides (plain C++): a swizzled tile's storage offset
SWIZZLE_HELPER = """\
static __device__ __forceinline__ int64_t tpy_swizzle(int64_t off, int shift, int rows) {
  return off ^ (((off >> rows) & 7) << shift);   /* 16-byte chunk ^= row (128-byte line) % 8 */
}"""


class VectorError(ValueError):
    """A vector loop the CUDA printer cannot print as vector accesses."""


def flat_index(shapes, array, index):
    """The row-major flat index of ``array[index]`` (IR), ``shapes`` the
    printer's array shapes."""
    if len(index) == 0:
        return ir.const(0)
    flat = index[0]
    for d, i in zip(shapes[array][1:], index[1:]):
        flat = ir.Binary("add", ir.Binary("mul", flat, d, "int64"), i, "int64")
    return flat


def coefficient(e, var, consts):
    """The coefficient of ``var`` in the integer expression ``e`` when ``e``
    is affine in it (0 when ``var`` does not occur), else None."""
    if var not in ir.free_vars(e):
        return 0
    if isinstance(e, ir.Var):
        return 1
    if isinstance(e, ir.Cast):
        return coefficient(e.a, var, consts)
    if isinstance(e, ir.Unary) and e.op == "neg":
        c = coefficient(e.a, var, consts)
        return None if c is None else -c
    if isinstance(e, ir.Binary) and e.op in ("add", "sub"):
        a, b = coefficient(e.a, var, consts), coefficient(e.b, var, consts)
        if a is None or b is None:
            return None
        return a + b if e.op == "add" else a - b
    if isinstance(e, ir.Binary) and e.op == "mul":
        for x, y in ((e.a, e.b), (e.b, e.a)):
            k = ir.const_eval(x, consts)
            if k is not None:
                c = coefficient(y, var, consts)
                return None if c is None else int(k) * c
    return None


def divisible(e, w, consts) -> bool:
    """True when the integer expression ``e`` is a multiple of ``w`` for
    every value of its variables (a sufficient test, term by term)."""
    if w == 1:
        return True
    k = ir.const_eval(e, consts)
    if k is not None:
        return int(k) % w == 0
    if isinstance(e, ir.Cast):
        return divisible(e.a, w, consts)
    if isinstance(e, ir.Unary) and e.op == "neg":
        return divisible(e.a, w, consts)
    if isinstance(e, ir.Binary) and e.op in ("add", "sub", "min", "max"):
        return divisible(e.a, w, consts) and divisible(e.b, w, consts)
    if isinstance(e, ir.Binary) and e.op == "mul":
        for x, y in ((e.a, e.b), (e.b, e.a)):
            k = ir.const_eval(x, consts)
            if k is not None:
                g = math.gcd(int(k), w)
                return divisible(y, w // g, consts)
        return divisible(e.a, w, consts) or divisible(e.b, w, consts)
    return False


def _plus(e, k):
    """``e + k`` (folded for a constant ``e``)."""
    if isinstance(e, ir.Const):
        return ir.const(int(e.value) + k)
    return ir.Binary("add", e, ir.const(k), "int64") if k else e


def substitute(e, var, value):
    """``e`` with the variable ``var`` replaced by the expression ``value``."""
    if isinstance(e, ir.Var) and e.name == var:
        return value
    return ir.with_children(e, [substitute(k, var, value) for k in ir.expr_children(e)])


def lone_store(s):
    """The single Store a loop body is, else None."""
    while isinstance(s, ir.Block) and len(s.stmts) == 1:
        s = s.stmts[0]
    return s if isinstance(s, ir.Store) else None


def vector_arrays(loop) -> set:
    """Arrays a kernel accesses in its vector loops (declared aligned)."""
    out = set()
    for s in ir.walk_stmts(loop):
        if isinstance(s, ir.For) and s.kind == "vector":
            st = lone_store(s.body)
            if st is not None:
                out.add(st.array)
                out |= {e.array for e in ir.walk_exprs(st.value) if isinstance(e, ir.Load)}
    return out


class VectorPrinter:
    """Prints one vector loop for a :class:`~codegen.cuda.printer.CudaPrinter`."""

    def __init__(self, em, s):
        self.em, self.s = em, s
        self.width = int(s.attrs.get("vector_width", 0))
        self.consts = dict(em.fn.constants)
        self.what = s.attrs.get("command") or f"the vector loop {s.var!r}"

    def refuse(self, why):
        raise VectorError(f"{self.what} cannot run on the GPU as {self.width}-lane vector "
                          f"accesses: {why}")

    def kind(self, array, index, dtype):
        """("contiguous" | "uniform" | "gather", flat index)."""
        flat = flat_index(self.em.shapes, array, index)
        c = coefficient(flat, self.s.var, self.consts)
        if c == 0:
            return "uniform", flat
        if c != 1 or array in self.em.per_thread:
            return "gather", flat         # (a thread's registers: element by element)
        base = substitute(flat, self.s.var, self.s.lo)
        if not divisible(base, self.width, self.consts):
            self.refuse(f"{array}[...] is contiguous in {self.s.var!r} but not provably "
                        f"aligned to {self.width} elements ({self.width * ir.ELSIZE[dtype]} "
                        "bytes): its row length and offsets must be multiples of "
                        f"{self.width}")
        if ir.ELSIZE[dtype] * self.width > 16:
            self.refuse(f"{self.width} x {ir.ELSIZE[dtype]} bytes is beyond one 16-byte access")
        self.em.need_aligned(array, self.width * ir.ELSIZE[dtype])
        return "contiguous", flat

    def print(self, ind):
        em, s, w = self.em, self.s, self.width
        store = lone_store(s.body)
        if store is None or w < 2 or int(s.step) != 1 or w & (w - 1):
            return False
        full = isinstance(s.hi, ir.Const) and isinstance(s.lo, ir.Const) \
            and int(s.hi.value) - int(s.lo.value) >= w
        if isinstance(s.lo, ir.Const) and isinstance(s.hi, ir.Const) \
                and int(s.hi.value) - int(s.lo.value) < w:
            return False                     # a short constant loop: lane by lane
        dtype = em.array_dtype(store.array)
        skind, sflat = self.kind(store.array, store.index, dtype)
        if skind == "uniform":
            return False                     # every lane updates one element: serial
        loads = {}
        for e in ir.walk_exprs(store.value):
            if isinstance(e, ir.Load) and ir.expr_key(e) not in loads:
                if any(isinstance(x, ir.Load) for i in e.index for x in ir.walk_exprs(i)):
                    self.refuse(f"the index of {e.array}[...] reads memory")
                loads[ir.expr_key(e)] = (e, *self.kind(e.array, e.index, e.dtype))
        if any(isinstance(x, ir.Load) for i in store.index for x in ir.walk_exprs(i)):
            self.refuse(f"the index of {store.array}[...] reads memory")
        if skind != "contiguous" and all(k != "contiguous" for _, k, _ in loads.values()):
            return False                     # nothing to widen: element by element
        em.out(ind, f"{{  /* vector loop {s.var}: {w} lanes */")
        if full:
            self.body(store, skind, sflat, loads, ind + 1)
        else:
            em.out(ind + 1, f"if ({em.wrap(s.hi, 0)} - {em.wrap(s.lo, 0)} >= {w}) {{")
            self.body(store, skind, sflat, loads, ind + 2)
            em.out(ind + 1, "} else {")
            em.out(ind + 2, f"for (int64_t {s.var} = {em.expr(s.lo)}; {s.var} < "
                            f"{em.expr(s.hi)}; {s.var}++) {{")
            em.stmt(store, ind + 3)
            em.out(ind + 2, "}")
            em.out(ind + 1, "}")
        em.out(ind, "}")
        return True

    def body(self, store, skind, sflat, loads, ind):
        em, s, w = self.em, self.s, self.width
        em.out(ind, f"const int64_t {s.var} = {em.expr(s.lo)};")
        dtype = em.array_dtype(store.array)
        nbytes = w * ir.ELSIZE[dtype]
        value = store.value
        copy = isinstance(value, ir.Load) and value.dtype == dtype
        if isinstance(store, ir.AsyncCopy) and copy:
            _, lkind, lflat = loads[ir.expr_key(value)]
            if lkind == "contiguous" and skind == "contiguous" and nbytes in ASYNC_SIZES:
                em.out(ind, f"tpy_cp_async<{nbytes}>(&{em.flat_ref(store.array, sflat)}, "
                            f"&{em.flat_ref(value.array, lflat)});")
                return
            size = ir.ELSIZE[dtype]
            if size in ASYNC_SIZES:
                for lane in range(w):
                    at = _plus(s.lo, lane)
                    em.out(ind, f"tpy_cp_async<{size}>("
                                f"&{em.flat_ref(store.array, substitute(sflat, s.var, at))}, "
                                f"&{em.flat_ref(value.array, substitute(lflat, s.var, at))});")
                return
        if copy and skind == "contiguous" and loads[ir.expr_key(value)][1] == "contiguous":
            em.out(ind, f"TPY_VMOVE({nbytes}, &{em.flat_ref(store.array, sflat)}, "
                        f"&{em.flat_ref(value.array, loads[ir.expr_key(value)][2])});")
            return
        regs = {}
        for key, (ld, lkind, lflat) in loads.items():
            if lkind != "contiguous":
                continue
            name = em.fresh("tpy_v")
            em.out(ind, f"__align__(16) {em.ctype(ld.dtype)} {name}[{w}];")
            em.out(ind, f"TPY_VMOVE({w * ir.ELSIZE[ld.dtype]}, {name}, "
                        f"&{em.flat_ref(ld.array, lflat)});")
            regs[key] = name
        out = em.fresh("tpy_s") if skind == "contiguous" else None
        if out:
            em.out(ind, f"__align__(16) {em.ctype(dtype)} {out}[{w}];")
        for lane in range(w):
            at = _plus(s.lo, lane)
            val = self.lane_value(value, regs, lane, at)
            if out:
                em.out(ind, f"{out}[{lane}] = {em.expr(val)};")
            else:
                idx = tuple(substitute(i, s.var, at) for i in store.index)
                em.out(ind, f"{em.access(store.array, idx)} = {em.expr(val)};")
        if out:
            em.out(ind, f"TPY_VMOVE({nbytes}, &{em.flat_ref(store.array, sflat)}, {out});")

    def lane_value(self, e, regs, lane, at):
        if isinstance(e, ir.Load) and ir.expr_key(e) in regs:
            return ir.Var(f"{regs[ir.expr_key(e)]}[{lane}]", e.dtype)
        if isinstance(e, ir.Var) and e.name == self.s.var:
            return at
        return ir.with_children(e, [self.lane_value(k, regs, lane, at)
                                    for k in ir.expr_children(e)])

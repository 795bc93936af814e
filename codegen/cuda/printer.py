"""The CUDA C printer: a GPU-mapped :class:`ir.LoweredFunction` as CUDA
kernels plus the host-side launch sequence (:class:`LaunchPlan`).

The function body's top level is a sequence of kernels: each is a
``gpu_block`` loop nest (possibly under a guard on the params).  Temporaries
allocated around the kernels live in global memory: the host allocates them
and passes them to every kernel (blocks communicate only across launches, in
order).  Inside a kernel:

* a ``gpu_block`` loop ``for (i0 = lo; i0 < hi; i0++)`` is
  ``i0 = lo + blockIdx.<axis>; if (i0 < hi)``; the grid extent ``hi - lo``
  must depend on the params only (a rectangular grid); a kernel whose block
  loops were all dropped by isl (one iteration each) runs as one block;
  top-level serial loops are host loops when the lowering marks them
  ``attrs["host"]`` (or they contain a block loop);
* a ``gpu_thread`` loop (``attrs``: axis, min, extent) is
  ``i1 = min + threadIdx.<axis>; if (lo <= i1 && i1 < hi)``; the block has,
  per axis, the largest extent of its thread loops;
* a store under no thread loop of an axis the block uses runs in thread 0 of
  that axis only (``if (threadIdx.y == 0)``), so that block-level statements
  are not repeated by every thread;
* ``Barrier`` is ``__syncthreads()``; a ``shared`` Allocate is a static
  ``__shared__`` array (constant shape), any other Allocate in a kernel is a
  per-thread local array (constant shape; scope ``thread``: a per-thread
  tile of :mod:`codegen.accumulate`; scope ``local``: a per-thread copy of
  ``cache_local``, declared at the top of the kernels using it);
* a loop with ``attrs["full_extent"] = E`` (a slot loop of a per-thread
  tile) is ``#pragma unroll`` ``for (v = lo; v < lo + E; v++) if (v < hi)``:
  a constant trip count, so that the tile's indices are constants after
  unrolling and the tile lives in registers;
* arrays are flat pointers indexed row-major (``A[i * K + k]``).

The printed subset is what the CPU emulator (:mod:`codegen.cuda.emulator`)
covers: ``__global__`` functions, ``blockIdx``/``threadIdx``/``blockDim``,
static ``__shared__`` arrays declared in the kernel, ``__syncthreads()``,
``<cmath>`` float functions, 64-bit integer index arithmetic, no warp
intrinsics, atomics, dynamic shared memory, ``__device__`` globals or
cooperative groups.
"""
from __future__ import annotations

import math

from .. import ir
from ..c.emit import CPrinter
from ..c.helpers import helper_source
from ..c.names import c_names, check_name, renamed
from ..c.syntax import CTYPES as C_TYPES, LIBM, P_ADD, P_PRIMARY, P_REL

# CUDA's spelling: the 16-bit floats as cuda_bf16.h's and cuda_fp16.h's types
CTYPES = dict(C_TYPES, bfloat16="__nv_bfloat16", float16="__half")
_TO_F32 = {"bfloat16": "__bfloat162float", "float16": "__half2float"}
_FROM_F32 = {"bfloat16": "__float2bfloat16_rn", "float16": "__float2half_rn"}
# the emulator (a C++ build on the CPU) gets the two types as their bits and
# the four conversions from the C backend's helpers
_EMU_HALF = """\
struct __nv_bfloat16 { uint16_t x; };
struct __half { uint16_t x; };
static inline float __bfloat162float(__nv_bfloat16 h) { return tp_cvt_bf16_f32(h.x); }
static inline __nv_bfloat16 __float2bfloat16_rn(float f) { return {tp_cvt_f32_bf16(f)}; }
static inline float __half2float(__half h) { return tp_cvt_f16_f32(h.x); }
static inline __half __float2half_rn(float f) { return {tp_cvt_f32_f16(f)}; }"""
from ..ir import ELSIZE
from .mma import DEVICE_HELPER as MMA_HELPER, MmaError, MmaPrinter, hoisted
from .vectors import (ASYNC_SIZES, DEVICE_HELPERS, SWIZZLE_HELPER, VectorError, VectorPrinter,
                      flat_index, vector_arrays)

from .launch import (MAX_GRID, MAX_SHARED_BYTES, MAX_THREADS, CudaPrintError,  # noqa: F401
                     HostLoop, KernelLaunch, LaunchPlan, evaluate)


class CudaPrinter(CPrinter):
    SPECULATE = False     # the plain ternary: no masked group loads to avoid on a GPU

    def __init__(self, fn, shapes):
        super().__init__(fn)
        self.shapes = shapes          # array -> shape exprs
        self.axes = set()             # thread axes bound around the current statement
        self.block_axes = {}          # axis -> threads (this kernel)
        self.grid = {}                # axis -> (lo, hi) of the block loop
        self.grid_vars = {}           # axis -> the block loop's variable
        self.shared = 0
        self.locals_ = set()
        self.thread_tiles = False     # a per-thread tile (scope "thread") in this kernel
        self.dtypes = {a.name: a.dtype for a in fn.arrays}
        self.swizzled = {}            # shared array -> chunk (elements) of its XOR swizzle
        self.aligned = set()          # arrays accessed by vector loops (declared aligned)
        self.uses = set()             # "async", "vector": helpers the kernel needs
        self.taken = set()
        self.global_arrays = set(shapes)
        self.per_thread = set()       # local arrays (registers): accessed element by element
        self.lanes = {}               # "lane.x" / "lane.y" -> the enclosing lane loop's variable
        self.divergent = 0            # guards inside the thread loops around (may leave lanes out)
        self.aligned_globals = {}     # global array -> bytes of its widest vector access

    def call(self, e: ir.Call) -> tuple:
        # CUDA's own math library (expf, logf, tanhf...), not the CPU backends'
        # vectorisable polynomials: a GPU thread is scalar
        f, dt = e.func, e.dtype
        if not ir.is_float(dt):
            return super().call(e)
        ir.check_call(e, "CUDA backend")
        suf = "f" if dt == "float32" else ""
        x = self.expr(e.args[0])
        if f == "sigmoid":
            one = "1.0f" if dt == "float32" else "1.0"
            return f"({one} / ({one} + exp{suf}(-({x}))))", P_PRIMARY
        return f"{LIBM[f]}{suf}({x})", P_PRIMARY

    def _binary(self, e):
        # floor division and modulo by a power of 2: a shift and a mask, exact
        # for negative values too (two's complement), where the C helpers
        # branch (a pipelined loop starts below 0)
        if e.op in ("floordiv", "floormod") and e.dtype in ("int32", "int64") \
                and isinstance(e.b, ir.Const) and int(e.b.value) > 1 \
                and int(e.b.value) & (int(e.b.value) - 1) == 0:
            m = int(e.b.value)
            if e.op == "floormod":
                return f"({self.wrap(e.a, P_PRIMARY)} & {m - 1})", P_PRIMARY
            return f"({self.wrap(e.a, P_PRIMARY)} >> {m.bit_length() - 1})", P_PRIMARY
        return super()._binary(e)

    def access(self, array, index):
        if len(index) == 0:
            return f"{array}[0]"
        return self.flat_ref(array, flat_index(self.shapes, array, index))

    def flat_ref(self, array, flat):
        """``array[flat]``, through the array's swizzle if it has one."""
        sw = self.swizzled.get(array)
        if sw:
            self.uses.add("swizzle")
            chunk, row = sw
            shift = chunk.bit_length() - 1
            rows = max(shift + 3, row.bit_length() - 1)     # the row, or the 128-byte line
            return f"{array}[tpy_swizzle({self.expr(flat)}, {shift}, {rows})]"
        return f"{array}[{self.expr(flat)}]"

    def need_aligned(self, array, nbytes):
        """A vector access of ``nbytes`` to ``array``: a global array's base
        pointer is checked at each launch (:attr:`LaunchPlan.aligned`)."""
        if array in self.global_arrays:
            self.aligned_globals[array] = max(nbytes, self.aligned_globals.get(array, 0))

    def array_dtype(self, array):
        return self.dtypes[array]

    def ctype(self, dtype):
        return CTYPES[dtype]

    def fresh(self, base):
        return ir.fresh_name(base, self.taken)

    def stmt(self, s, ind):
        if isinstance(s, ir.Barrier):
            if s.wait is not None:
                self.uses.add("async")
                self.out(ind, f"tpy_cp_async_wait<{int(s.wait)}>();")
            self.out(ind, "__syncthreads();")
        elif isinstance(s, ir.AsyncCommit):
            self.uses.add("async")
            self.out(ind, "tpy_cp_async_commit();")
        elif isinstance(s, ir.AsyncWait):
            self.uses.add("async")
            self.out(ind, f"tpy_cp_async_wait<{int(s.pending)}>();")
        elif isinstance(s, ir.Store):
            guard = [f"threadIdx.{a} == 0" for a in sorted(self.block_axes)
                     if a not in self.axes and self.block_axes[a] > 1]
            line = f"{self.access(s.array, s.index)} = {self.expr(s.value)};"
            size = ir.ELSIZE[self.dtypes.get(s.array, "float32")]
            if isinstance(s, ir.AsyncCopy) and isinstance(s.value, ir.Load) \
                    and s.value.dtype == self.dtypes.get(s.array) and size in ASYNC_SIZES:
                self.uses.add("async")
                line = (f"tpy_cp_async<{size}>(&{self.access(s.array, s.index)}, "
                        f"&{self.access(s.value.array, s.value.index)});")
            if guard:
                self.out(ind, f"if ({' && '.join(guard)}) {line}")
            else:
                self.out(ind, line)
        else:
            super().stmt(s, ind)

    def loop(self, s, ind):
        check_name(s.var, "loop")
        if s.kind == "gpu_block":
            ax = s.attrs["axis"]
            if ax in self.grid:
                raise CudaPrintError(f"CUDA printer: two block loops on axis {ax} in one kernel")
            self.grid[ax] = (s.lo, s.hi)
            self.grid_vars[ax] = s.var
            self.out(ind, f"{{  /* block loop {s.var}: blockIdx.{ax} */")
            base = "" if _is_zero(s.lo) else f"{self.wrap(s.lo, P_ADD)} + "
            self.out(ind + 1, f"const int64_t {s.var} = {base}(int64_t)blockIdx.{ax};")
            self.out(ind + 1, f"if ({s.var} < {self.wrap(s.hi, P_REL + 1)}) {{")
            self.body(s.body, ind + 2)
            self.out(ind + 1, "}")
            self.out(ind, "}")
            return
        if s.kind == "gpu_thread" and "linear" in s.attrs:
            self._linear_thread_loop(s, ind)
            return
        if s.kind == "gpu_thread":
            ax, lo0, ext = s.attrs["axis"], int(s.attrs["min"]), int(s.attrs["extent"])
            if int(s.step) != 1:
                raise CudaPrintError(f"CUDA printer: thread loop {s.var} has step {s.step}")
            self.block_axes[ax] = max(self.block_axes.get(ax, 1), ext)
            self.out(ind, f"{{  /* thread loop {s.var}: threadIdx.{ax} */")
            base = f"{lo0} + " if lo0 else ""
            self.out(ind + 1, f"const int64_t {s.var} = {base}(int64_t)threadIdx.{ax};")
            low = "" if isinstance(s.lo, ir.Const) and int(s.lo.value) == lo0 \
                else f"{self.wrap(s.lo, P_REL + 1)} <= {s.var} && "
            self.out(ind + 1, f"if ({low}{s.var} < {self.wrap(s.hi, P_REL + 1)}) {{")
            saved = set(self.axes)
            self.axes.add(ax)
            self.body(s.body, ind + 2)
            self.axes = saved
            self.out(ind + 1, "}")
            self.out(ind, "}")
            return
        step = ir.check_loop(s, "CUDA printer")
        try:
            if "mma" in s.attrs:
                MmaPrinter(self, s).print(ind)
                return
            if self.lanes and hoisted(self, s, ind):
                return
        except (MmaError, VectorError) as e:
            raise CudaPrintError(str(e)) from None
        if s.kind == "vector":
            try:
                done = VectorPrinter(self, s).print(ind)
            except VectorError as e:
                raise CudaPrintError(str(e)) from None
            if done:
                self.uses.add("vector")
                return
        if "full_extent" in s.attrs and step == 1 and isinstance(s.lo, ir.Const):
            self._full_loop(s, ind, int(s.attrs["full_extent"]))
            return
        if s.kind == "unrolled":
            self.out(ind, f"#pragma unroll {int(s.attrs.get('unroll', 4))}")
        elif s.kind in ("parallel", "vector"):
            self.out(ind, f"/* {s.kind} loop {s.var} runs serially in each thread */")
        inc = f"{s.var}++" if step == 1 else f"{s.var} += {step}"
        self.out(ind, f"for (int64_t {s.var} = {self.expr(s.lo)}; {s.var} < "
                      f"{self.wrap(s.hi, P_REL + 1)}; {inc}) {{")
        self.body(s.body, ind + 1)
        self.out(ind, "}")

    def _linear_thread_loop(self, s, ind):
        """A thread loop of a warp-tiled kernel: its part of the linear index
        ``threadIdx.x`` (``min + (tid / stride) % extent``; no ``%`` where the
        block has no more threads); the guard only where a bound may cut."""
        lo0, ext = int(s.attrs["min"]), int(s.attrs["extent"])
        stride, total = int(s.attrs["stride"]), int(s.attrs["linear"])
        if int(s.step) != 1:
            raise CudaPrintError(f"CUDA printer: thread loop {s.var} has step {s.step}")
        self.block_axes["x"] = max(self.block_axes.get("x", 1), total)
        tid = "(int64_t)threadIdx.x" if stride == 1 else f"((int64_t)threadIdx.x / {stride})"
        top = bool(s.attrs.get("slowest"))      # the statement's slowest: no wrap-around
        part = tid if top else f"{tid} % {ext}"
        self.out(ind, f"{{  /* thread loop {s.var}: {s.attrs.get('level', 'x')} */")
        base = f"{lo0} + " if lo0 else ""
        if base and not top:
            part = f"({part})"
        self.out(ind + 1, f"const int64_t {s.var} = {base}{part};")
        conds = []
        if not (isinstance(s.lo, ir.Const) and int(s.lo.value) <= lo0):
            conds.append(f"{self.wrap(s.lo, P_REL + 1)} <= {s.var}")
        full = isinstance(s.hi, ir.Const) and int(s.hi.value) >= lo0 + ext \
            and (not top or stride * ext >= total)
        if not full:
            conds.append(f"{s.var} < {self.wrap(s.hi, P_REL + 1)}")
        saved, lanes = set(self.axes), dict(self.lanes)
        self.axes.add("x")
        self.lanes[s.attrs.get("level")] = s.var
        if conds:
            self.divergent += 1
            self.out(ind + 1, f"if ({' && '.join(conds)}) {{")
            self.body(s.body, ind + 2)
            self.out(ind + 1, "}")
            self.divergent -= 1
        else:
            self.body(s.body, ind + 1)
        self.axes, self.lanes = saved, lanes
        self.out(ind, "}")

    def if_(self, s, ind, word):
        inside = bool(self.axes)          # in the thread loops: may differ between lanes
        self.divergent += inside
        super().if_(s, ind, word)
        self.divergent -= inside

    def _full_loop(self, s, ind, extent):
        lo = int(s.lo.value)
        self.out(ind, "#pragma unroll")
        self.out(ind, f"for (int64_t {s.var} = {lo}; {s.var} < {lo + extent}; {s.var}++) {{")
        if isinstance(s.hi, ir.Const) and int(s.hi.value) >= lo + extent:
            self.body(s.body, ind + 1)
        else:
            self.out(ind + 1, f"if ({s.var} < {self.wrap(s.hi, P_REL + 1)}) {{")
            self.body(s.body, ind + 2)
            self.out(ind + 1, "}")
        self.out(ind, "}")

    def half_conversion(self, fr, to):
        """CUDA's intrinsics (round to nearest even)."""
        return _TO_F32[fr] if to == "float32" else _FROM_F32[to]

    def allocate(self, s, ind):
        check_name(s.array, "Allocate")
        dims = [ir.const_eval(d, self.fn.constants) for d in s.shape]
        if None in dims:
            raise CudaPrintError(f"CUDA printer: temporary {s.array!r} inside a kernel needs a "
                                 "constant shape")
        n = max(1, math.prod(dims))
        t = CTYPES[s.dtype]
        self.shapes[s.array] = tuple(ir.const(d) for d in dims)
        self.dtypes[s.array] = s.dtype
        if s.layout and s.layout.get("swizzle"):
            self.swizzled[s.array] = (int(s.layout["swizzle"]), int(s.layout.get("row", 0)))
        if s.scope == "shared" and (s.array in self.aligned or s.array in self.swizzled):
            t = f"__align__(16) {t}"
        if s.scope == "shared":
            self.shared += n * ELSIZE[s.dtype]
            self.out(ind, f"__shared__ {t} {s.array}[{n}];")
        elif s.scope == "thread":
            self.thread_tiles = True
            self.per_thread.add(s.array)
            self.out(ind, f"{t} {s.array}[{n}];  /* per-thread tile (registers) */")
        elif s.scope == "local":
            self.thread_tiles = True
            self.per_thread.add(s.array)
            self.out(ind, f"{t} {s.array}[{n}];  /* per-thread copy (registers) */")
        else:
            self.out(ind, f"{t} {s.array}[{n}];")
        if s.zero_init:
            self.out(ind, f"for (int tp_z = 0; tp_z < {n}; tp_z++) {s.array}[tp_z] = 0;")
        self.body(s.body, ind)


def _is_zero(e):
    return isinstance(e, ir.Const) and int(e.value) == 0


def _is_one(e):
    return isinstance(e, ir.Const) and int(e.value) == 1


def _kernels(s, guards, out, host=()):
    """Collects the top-level structure: kernels (a block loop) as (guards,
    host loop vars, loop), and serial loops around them as HostLoop steps."""
    if isinstance(s, ir.Block):
        for x in s.stmts:
            _kernels(x, guards, out, host)
    elif isinstance(s, ir.If) and s.else_ is None:
        _kernels(s.then, guards + [s.cond], out, host)
    elif isinstance(s, ir.For) and s.kind == "gpu_block":
        out.append((guards, host, s))
    elif isinstance(s, ir.For) and s.kind == "serial" and int(s.step) == 1 and _is_host(s):
        check_name(s.var, "loop")
        inner = []
        _kernels(s.body, [], inner, host + (s.var,))
        out.append(HostLoop(s.var, s.lo, s.hi, inner, _conj(guards)))
    elif isinstance(s, ir.Let):
        raise CudaPrintError("CUDA printer: a value computed outside the kernels")
    else:
        # a kernel whose block loops all have one iteration: isl's AST drops
        # such degenerate loops (a GEMM no larger than one tile); one block
        out.append((guards, host, s))


def _is_host(s: ir.For) -> bool:
    """A serial loop around kernels (the lowering marks it ``host``; IR built
    by hand: a loop with a block loop inside), not a kernel's own loop."""
    return bool(s.attrs.get("host")) or any(
        isinstance(x, ir.For) and x.kind == "gpu_block" for x in ir.walk_stmts(s.body))


def _conj(guards):
    cond = None
    for g in guards:
        cond = g if cond is None else ir.Binary("and", cond, g, "bool")
    return cond


REGISTER_FLOOR = 64       # registers a thread may use without a per-thread tile


def min_blocks(nthreads, thread_tiles):
    """``__launch_bounds__``'s minimum of resident blocks per SM.  Given the
    block size alone, ptxas caps the registers for occupancy (32 for a block
    of 64 threads) and spills a kernel that needs more, which fails the build;
    so the minimum is what leaves :data:`REGISTER_FLOOR` registers a thread
    (65536 per SM, threads counted in whole warps, at most 32 blocks: ptxas's
    range), and 1 (up to 255) for a kernel with a per-thread tile, whose
    registers are the point."""
    if thread_tiles:
        return 1
    warps = -(-nthreads // 32)
    return min(32, max(1, 65536 // (warps * 32 * REGISTER_FLOOR)))


def emit_cuda(fn: ir.LoweredFunction) -> tuple:
    """(CUDA source, :class:`LaunchPlan`) of a GPU-mapped function."""
    fn = renamed(fn, c_names(fn))
    body, temps, shared = fn.body, [], {}
    while isinstance(body, ir.Allocate):
        if body.scope in ("shared", "local"):   # per block / per thread: declared in the
            # kernels using it
            shared[body.array] = body
        else:
            temps.append((body.array, body.dtype, body.shape, body.zero_init))
        body = body.body
    plan = LaunchPlan(fn.name, list(fn.scalars), list(fn.arrays), temps,
                      constants=dict(fn.constants))
    found = []
    _kernels(body, [], found)
    shapes = {a.name: a.shape for a in fn.arrays}
    shapes.update({t[0]: t[2] for t in temps})
    known = set(fn.constants) | {sc.name for sc in fn.scalars}
    kernels, helpers, uses = [], {}, set()

    def kernel(guards, host, loop):
        k = len(plan.kernels)
        em = CudaPrinter(fn, dict(shapes))
        em.aligned = vector_arrays(loop)
        em.taken = _names(fn)
        used = {x.array for x in ir.walk_stmts(loop) if isinstance(x, ir.Store)}
        used |= {e.array for x in ir.walk_stmts(loop) for r in ir.stmt_exprs(x)
                 for e in ir.walk_exprs(r) if isinstance(e, ir.Load)}
        for name in sorted(used & set(shared)):
            a = shared[name]
            em.allocate(ir.Allocate(a.array, a.dtype, a.shape, ir.Block([]), a.zero_init,
                                    a.scope, a.layout), 1)
        # threads per axis known before the first store (a store before the
        # kernel's first thread loop of an axis is guarded too)
        for x in ir.walk_stmts(loop):
            if isinstance(x, ir.For) and x.kind == "gpu_thread":
                ax = x.attrs["axis"]
                n = int(x.attrs.get("linear", x.attrs["extent"]))
                em.block_axes[ax] = max(em.block_axes.get(ax, 1), n)
        if isinstance(loop, ir.For) and loop.kind == "gpu_block":
            em.loop(loop, 1)
        else:
            em.body(loop, 1)         # degenerate block loops: a one-block grid
        helpers.update(em.helpers)
        uses.update(em.uses)
        for a, n in em.aligned_globals.items():
            plan.aligned[a] = max(n, plan.aligned.get(a, 0))
        grid = []
        for ax in ir.GPU_AXES:
            if ax not in em.grid:
                grid.append(ir.const(1))
                continue
            lo, hi = em.grid[ax]
            ext = hi if _is_zero(lo) else ir.Binary("sub", hi, lo, "int64")
            if isinstance(hi, ir.Binary) and hi.op == "add" and _is_one(hi.b) \
                    and ir.expr_key(hi.a) == ir.expr_key(lo):
                ext = ir.const(1)           # a block loop of one iteration: lo .. lo + 1
            free = ir.free_vars(ext)
            if not free <= known | set(host):
                raise CudaPrintError(
                    f"CUDA printer: kernel {fn.name}_k{k}: the extent of block loop "
                    f"{em.grid_vars.get(ax, '?')!r} (block.{ax}) depends on "
                    f"{', '.join(sorted(free - known - set(host)))}: the grid must be "
                    "rectangular (bounds over the params and host loops only; e.g. a split "
                    "loop's partial last tile, or a skew, between two block loops)")
            grid.append(ext)
        block = tuple(em.block_axes.get(ax, 1) for ax in ir.GPU_AXES)
        nthreads = math.prod(block)
        if nthreads > MAX_THREADS:
            raise CudaPrintError(f"CUDA printer: {nthreads} threads per block, beyond "
                                 f"{MAX_THREADS}")
        if em.shared > MAX_SHARED_BYTES:
            raise CudaPrintError(f"CUDA printer: kernel {k} uses {em.shared} bytes of shared "
                                 f"memory, beyond {MAX_SHARED_BYTES}")
        name = f"{fn.name}_k{k}"
        ps = _params(fn, temps, host)
        bounds = f"{nthreads}, {min_blocks(nthreads, em.thread_tiles)}"
        kernels.append(f'extern "C" __global__ void __launch_bounds__({bounds})\n'
                       f"{name}({', '.join(ps)})\n{{\n" + "\n".join(consts + em.lines) + "\n}\n")
        kl = KernelLaunch(name, tuple(grid), block, em.shared, _conj(guards), tuple(host))
        plan.kernels.append(kl)
        return kl

    def steps(items):
        out = []
        for x in items:
            if isinstance(x, HostLoop):
                out.append(HostLoop(x.var, x.lo, x.hi, steps(x.steps), x.guard))
            else:
                out.append(kernel(*x))
        return out

    consts = [f"  const int64_t {n} = {int(v)};" for n, v in fn.constants.items()]
    plan.steps = steps(found)
    halves = {a.dtype for a in fn.arrays} | {t[1] for t in temps}
    halves |= {x.dtype for x in ir.walk_stmts(fn.body) if isinstance(x, ir.Allocate)}
    halves = sorted(d for d in halves if ir.is_half(d))
    head = ["/* generated by tiramisu_py codegen.cuda */",
            "#ifdef TPY_EMULATE",
            '#include "tpy_emu.h"']
    if halves:
        head.append("#include <string.h>")
        head += [helper_source(f"tp_cvt_{a}_{b}") for a, b in
                 (("bf16", "f32"), ("f32", "bf16"), ("f16", "f32"), ("f32", "f16"))]
        head.append(_EMU_HALF)
    head += ["#else", "#include <stdint.h>"]
    head += [f"#include <{'cuda_bf16.h' if d == 'bfloat16' else 'cuda_fp16.h'}>" for d in halves]
    head += ["#endif", ""]
    for h in sorted(helpers):
        head.append(helper_source(h).replace("static inline", "static __device__ inline")
                    .replace("#pragma omp", "// #pragma omp"))
    if helpers:
        head.append("")
    if uses & {"vector", "async", "mma"}:
        head += ["#ifndef TPY_EMULATE", DEVICE_HELPERS["vector"]]
        if "async" in uses:
            head.append(DEVICE_HELPERS["async"])
        if "mma" in uses:
            head.append(MMA_HELPER)
        head += ["#endif", ""]
    if "swizzle" in uses:
        head += [SWIZZLE_HELPER, ""]
    emu = ["#ifdef TPY_EMULATE"]
    for kl in plan.kernels:
        ps = _params(fn, temps, kl.host_vars)
        args = [p.rsplit(" ", 1)[1] for p in ps]
        emu.append(f'extern "C" int tpy_emu_{kl.name}(const int64_t *grid, const int64_t *block, '
                   f"int order, uint64_t seed{''.join(', ' + p for p in ps)}) {{")
        emu.append(f"  return tpy_emu::launch(grid, block, order, seed, [&]() {{ "
                   f"{kl.name}({', '.join(args)}); }});")
        emu.append("}")
    emu.append("#endif")
    return "\n".join(head + kernels + emu) + "\n", plan


def _names(fn) -> set:
    """Every name of ``fn`` (loops, arrays, lets, scalars): fresh names avoid them."""
    out = {a.name for a in fn.arrays} | {sc.name for sc in fn.scalars} | set(fn.constants)
    for s in ir.walk_stmts(fn.body):
        if isinstance(s, ir.For):
            out.add(s.var)
        elif isinstance(s, ir.Let):
            out.add(s.name)
        elif isinstance(s, ir.Allocate):
            out.add(s.array)
    return out


def _params(fn, temps, host):
    """A kernel's parameters: scalars, host loop iterators, arrays, temporaries."""
    ps = [f"int64_t {sc.name}" for sc in fn.scalars] + [f"int64_t {v}" for v in host]
    ps += [f"{'' if a.writable else 'const '}{CTYPES[a.dtype]}* __restrict__ {a.name}"
           for a in fn.arrays]
    return ps + [f"{CTYPES[t[1]]}* __restrict__ {t[0]}" for t in temps]


def emulator_declarations(plan: LaunchPlan) -> str:
    """The cffi cdef of the emulator entry points (array pointers as intptr_t)."""
    arrs = len(plan.arrays) + len(plan.temps)
    return "\n".join(
        f"int tpy_emu_{k.name}(const int64_t *, const int64_t *, int, uint64_t"
        f"{', int64_t' * (len(plan.scalars) + len(k.host_vars))}{', intptr_t' * arrs});"
        for k in plan.kernels)

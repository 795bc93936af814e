"""``Function.compile``: buffers, the polyhedral model, lowering, code
generation and the Kernel."""
from __future__ import annotations

import logging
import sys
import time

import codegen
from codegen import ir
from codegen.pipeline import optimize_loops

from . import gpu, legality, warm
from .checks import BoundsChecker
from .dataflow import needs_zero
from .legality import Dependences
from .expr import Access, walk
from .function import Buffer, Computation
from .kernel import Kernel
from .lower import AstLowering, ExprLowering
from .poly import PolyModel
from .schedule import replay

TARGETS = ("cpu", "c", "llvm", "cuda")     # "cpu" is the C backend


def analyse(f):
    """The model, dependences and (unchecked) schedule of ``f``."""
    _prepare(f)
    model = PolyModel(f)
    _assign_buffers(f, model)
    model.build_accesses()
    deps = Dependences(model)
    return model, deps, replay(model, f._commands)


# A compile slower than this (seconds) is reported, one line per phase boundary
# passed after it and one at the end, e.g. ``tiramisu_py: compiled 'gemm' in
# 7.3 s (analysis 6.1 s, ast 0.2 s, backend 1.0 s)``: to the ``tiramisu_py``
# logger at INFO when logging is configured, else to stderr.  None: never.
SLOW_COMPILE_S = 5.0
_log = logging.getLogger("tiramisu_py")


def _report(msg):
    if _log.hasHandlers():
        _log.info(msg)
    else:
        print(msg, file=sys.stderr, flush=True)


def _progress(f, t0, phases, nxt=None):
    """Reports the phases so far when the compile has been slow."""
    total = time.perf_counter() - t0
    if SLOW_COMPILE_S is None or total <= SLOW_COMPILE_S:
        return
    done = ", ".join(f"{k} {v:.1f} s" for k, v in phases.items())
    if nxt is None:
        _report(f"tiramisu_py: compiled {f.name!r} in {total:.1f} s ({done})")
    else:
        _report(f"tiramisu_py: compiling {f.name!r}: {done} (next: {nxt})")


def compile_function(f, target="cpu", **options):
    if target not in TARGETS:
        raise ValueError(f"compile: unknown target {target!r}; available: {', '.join(TARGETS)}")
    if options:
        raise TypeError(f"compile: unexpected option(s) {', '.join(options)}")
    try:
        k = warm.key(f, target) if warm.ENABLED and target != "cuda" else None  # CPU kernels only
        kernel = warm.load(k, f) if k is not None else None
        if kernel is None:
            kernel = _compile(f, target)
            if k is not None:
                warm.store(k, f, target, kernel)
        return kernel
    except RecursionError:
        # expressions are bounded when declared (expr.MAX_EXPR_DEPTH), so this
        # is not expected; it is never let out bare
        raise ValueError(f"compiling {f.name!r}: an expression or loop nest is nested too "
                         "deeply for the compiler; split it into several computations") from None


def _compile(f, target):
    t0 = time.perf_counter()
    _prepare(f)
    model = PolyModel(f)
    inputs, outputs, temps = _assign_buffers(f, model)
    model.build_accesses()
    checker = BoundsChecker(model)
    checker.dry_run()
    checker.prove_all()
    deps = Dependences(model)
    state = legality.check(model, deps, f._commands)
    plan = gpu.plan(model, deps, state, f._commands)
    zeroed = {b.name for b in temps if needs_zero(model, b, output=False)}
    zeroed |= {b.name for b in outputs if needs_zero(model, b, output=True)}
    t1 = time.perf_counter()
    _progress(f, t0, {"analysis": t1 - t0}, "ast")

    reserved = (set(f._names) - {v.name for v in f.vars}) | {b.name for b in inputs + outputs + temps}
    body = AstLowering(model, state, reserved, gpu=plan).run()
    t2 = time.perf_counter()
    _progress(f, t0, {"analysis": t1 - t0, "ast": t2 - t1}, "backend")
    ex = ExprLowering(f.fixed)
    allocs = {b.name: (b.dtype.name, tuple(ex.index(s, {}) for s in b.shape)) for b in temps}
    body, private = _privatise(body, allocs, zeroed)
    for b in reversed(temps):
        if b.name not in private:
            body = ir.Allocate(b.name, *allocs[b.name], body, zero_init=b.name in zeroed,
                               scope=getattr(b, "memory", "global"))
    arrays = [ir.ArrayArg(b.name, b.dtype.name, tuple(ex.index(s, {}) for s in b.shape),
                          writable=b.kind != "input") for b in inputs + outputs]
    lowered = ir.LoweredFunction(
        name=f.name,
        scalars=[ir.ScalarArg(p) for p in f.params if p not in f.fixed],
        arrays=arrays, body=body, constants=dict(f.fixed))
    if target == "cuda":
        from .cuda_kernel import compile_cuda
        return compile_cuda(f, lowered, plan, inputs, outputs, temps, checker, zeroed,
                            model, state, t0, (t1 - t0, t2 - t1))
    if plan is not None:
        lowered.body = ir.for_cpu(lowered.body)   # blocks and threads as serial loops
    optimize_loops(lowered)
    compiled = codegen.compile_llvm(lowered) if target == "llvm" else codegen.compile_c(lowered)
    t3 = time.perf_counter()
    kernel = Kernel(f, compiled, inputs, outputs, temps, checker, lowered,
                    zeroed_outputs={b.name for b in outputs if b.name in zeroed})
    kernel.model, kernel.schedule = model, state
    kernel.timings = {"analysis": t1 - t0, "ast": t2 - t1, "backend": t3 - t2}
    _progress(f, t0, kernel.timings)
    return kernel


def _prepare(f):
    if not f.statements:
        raise ValueError(f"function {f.name!r} has no computation")
    for c in f.computations.values():
        if c.value is None:
            raise ValueError(f"computation {c.name!r} has no expression; define it with "
                             f"{c.name}[{', '.join(c.loops)}] = ... or set_expression")
        if getattr(c, "_auto_buffer", False):
            c.buffer, c.store_index, c._auto_buffer = None, None, False


def _privatise(s, allocs, zeroed):
    """Moves the temporaries a parallel loop privatises (``attrs["private"]``,
    decided by the legality check) inside that loop, so that each iteration,
    hence each thread, has its own copy (zero-filled if in ``zeroed``).
    Returns (statement, names moved)."""
    moved = set()

    def visit(x):
        x = ir.rebuild(x, visit)
        if isinstance(x, ir.For) and x.attrs.get("private"):
            body = x.body
            for name in reversed(x.attrs["private"]):
                body = ir.Allocate(name, *allocs[name], body, zero_init=name in zeroed)
                moved.add(name)
            x = ir.For(x.var, x.lo, x.hi, body, kind=x.kind, step=x.step, attrs=x.attrs)
        return x

    return visit(s), moved


def _assign_buffers(f, model):
    """Gives every computation without ``store_in`` a buffer of its own, shaped
    like its domain's bounding box; decides which buffers are outputs."""
    read_by = {c.name: set() for c in f.computations.values()}
    for s in f.statements:
        owner = s.parent.name if s.is_update else s.name
        exprs = [s.value] + [e for v in s.vars for e in (v.lo, v.hi)]
        exprs += list(s.lhs) if s.is_update else list(s.store_index or [])
        for e in exprs:
            for n in walk(e):
                if isinstance(n, Access) and isinstance(n.target, Computation):
                    if n.target.name != owner:
                        read_by[n.target.name].add(owner)
    explicit_outputs = any(b.kind == "output" for b in f.buffers.values())
    default_outputs, default_temps = [], []
    for c in f.computations.values():
        if c.buffer is not None:
            continue
        box = model.bounding_box(model.by_name[c.name])
        shape = tuple(ext for _, ext in box)
        kind = "temp" if (explicit_outputs or read_by[c.name]) else "output"
        b = Buffer(f, c.name, shape, c.dtype, kind)
        c.buffer = b
        c.store_index = [v if lo is None else v - lo for v, (lo, _) in zip(c.vars, box)]
        c._auto_buffer = True
        (default_outputs if kind == "output" else default_temps).append(b)
    declared = list(f.buffers.values())
    inputs = [b for b in declared if b.kind == "input"]
    outputs = [b for b in declared if b.kind == "output"] + default_outputs
    temps = [b for b in declared if b.kind == "temp"] + default_temps
    if not outputs:
        raise ValueError(f"function {f.name!r} has no output: every computation is read by "
                         "another; mark a buffer with f.buffer(..., output=True)")
    return inputs, outputs, temps


__all__ = ["compile_function"]

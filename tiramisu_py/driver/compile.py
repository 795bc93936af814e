"""``Function.compile``: buffers, the polyhedral model, lowering, code
generation and the Kernel."""
from __future__ import annotations

import logging
import os
import sys
import time

import codegen
from codegen import ir
from codegen.pipeline import optimize_loops

from ..analysis import gpu_plan, legality
from ..analysis.bounds import BoundsChecker
from ..analysis.legality import Dependences
from ..lower.ast import AstLowering
from ..lower.expr import ExprLowering
from ..poly.dataflow import needs_zero
from ..poly.model import build_model
from ..runtime.kernel import Kernel
from ..runtime.shapes import may_be_negative
from ..tuning import grain
from . import warm
from .cuda import compile_cuda

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


def default_target() -> str:
    """The target of ``compile()`` without one: ``$TIRAMISU_PY_TARGET``, else "cpu"."""
    return os.environ.get("TIRAMISU_PY_TARGET") or "cpu"


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
    model = build_model(f)
    inputs, outputs, temps = model.inputs, model.outputs, model.temps
    checker = BoundsChecker(model)
    checker.dry_run()
    checker.prove_all()
    deps = Dependences(model)
    state = legality.check(model, deps, f._commands)
    plan = gpu_plan.plan(model, deps, state, f._commands)
    zeroed = {b.name for b in temps if needs_zero(model, b, output=False)}
    zeroed |= {b.name for b in outputs if needs_zero(model, b, output=True)}
    t1 = time.perf_counter()
    _progress(f, t0, {"analysis": t1 - t0}, "ast")

    reserved = (set(f._names) - {v.name for v in f.vars}) | {b.name for b in inputs + outputs + temps}
    body = AstLowering(model, state, reserved, gpu=plan).run()
    t2 = time.perf_counter()
    _progress(f, t0, {"analysis": t1 - t0, "ast": t2 - t1}, "backend")
    ex = ExprLowering(f.fixed)
    shaped = {c.buffer.name for c in f.computations.values() if getattr(c, "_auto_buffer", False)}
    allocs = {b.name: (b.dtype.name, tuple(_temp_extent(ex, s, b.name in shaped, f.fixed)
                                           for s in b.shape)) for b in temps}
    body, private = _privatise(body, allocs, zeroed)
    for b in reversed(temps):
        if b.name not in private:
            body = ir.Allocate(b.name, *allocs[b.name], body, zero_init=b.name in zeroed,
                               scope=getattr(b, "memory", "global"),
                               layout=getattr(b, "layout", None))
    arrays = [ir.ArrayArg(b.name, b.dtype.name, tuple(ex.index(s, {}) for s in b.shape),
                          writable=b.kind != "input") for b in inputs + outputs]
    lowered = ir.LoweredFunction(
        name=f.name,
        scalars=[ir.ScalarArg(p) for p in f.params if p not in f.fixed],
        arrays=arrays, body=body, constants=dict(f.fixed))
    return TARGETS[target](f, lowered, plan, inputs, outputs, temps, checker, zeroed, model,
                           state, t0, (t1 - t0, t2 - t1))


def _compile_host(f, lowered, plan, inputs, outputs, temps, checker, zeroed, model, state,
                  t0, times, *, backend):
    """The CPU targets: ``backend`` (C or LLVM) compiles the loop IR."""
    t2 = t0 + times[0] + times[1]
    if plan is not None:
        lowered.body = ir.for_cpu(lowered.body)   # blocks and threads as serial loops
    optimize_loops(lowered, parallel_grain=grain.parallel_grain())
    compiled = backend(lowered)
    t3 = time.perf_counter()
    kernel = Kernel(f, compiled, inputs, outputs, temps, checker, lowered,
                    zeroed_outputs={b.name for b in outputs if b.name in zeroed})
    kernel.model, kernel.schedule = model, state
    kernel.timings = {"analysis": times[0], "ast": times[1], "backend": t3 - t2}
    _progress(f, t0, kernel.timings)
    return kernel


def _c(*args):
    return _compile_host(*args, backend=codegen.compile_c)


def _llvm(*args):
    return _compile_host(*args, backend=codegen.compile_llvm)


# the targets: name -> what turns the lowered function into a Kernel ("cpu" is
# the C backend)
TARGETS = {"cpu": _c, "c": _c, "llvm": _llvm, "cuda": compile_cuda}


def _temp_extent(ex, size, domain_shaped, fixed):
    """One extent of a temporary as loop IR.  A temporary shaped like its
    computation's domain (its default buffer) has an extent below 0 where
    that domain is empty (``N - 2`` for ``1 <= i < N - 1`` at N = 1): it is
    clamped at 0 when it can be negative for non-negative params, so that
    the call goes on (the kernel lets it through: ``Kernel._domain_shaped``)."""
    e = ex.index(size, {})
    if domain_shaped and may_be_negative(size, fixed):
        e = ir.binary("max", ir.const(0), e)
    return e


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


__all__ = ["compile_function"]

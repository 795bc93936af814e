"""The per-process memo of a library call's parse and find, by the layout of
its arguments.

A call such as ``schedules.gemm(a, b)`` parses its arguments into a problem
(:mod:`schedules.problems`) and finds its solver (:mod:`schedules.core.find`)
before the kernel runs: about 17 us of Python per call, 1-2% of a 512^3
GEMM.  Both depend only on what :func:`layout` names of each array (type,
shape, strides, dtype; a torch tensor on the CPU), on the other arguments,
on the environment the find step reads and on the tuning stores this
process has read (:func:`tiramisu_py.tuning.generation`).  So a call whose
parse handed the caller's own arrays through unchanged (no copy, no view)
records ``(solver, problem)`` under that key, and a later call with the same
key runs ``solver.run(problem, arrays)`` at once: the same solver, problem
and kernel as the full path would give, and the same result.

Never memoised: an argument that is not a NumPy array or a CPU torch
tensor (device arrays, lists, subclasses other than a Parameter, a tensor
that requires grad while grad mode is on), a call while torch compiles (the
memo would be traced), and a call whose parse changed an argument (a copy,
a transposed view: that work is the parse's own).  The memo holds at most
:data:`LIMIT` entries (it is cleared when full); a record is dropped when
this process writes a tuning store."""
from __future__ import annotations

import sys

import numpy as np

from tiramisu_py import tuning

from . import environ
from .find import ENVIRONMENT

LIMIT = 256
# what the parse and the find step read from the environment
_ENV = ENVIRONMENT + ("TIRAMISU_PY_TARGET",)
_PLANS: dict = {}


def layout(x):
    """``(type, shape, strides, dtype)`` of a NumPy array or of a CPU torch
    tensor (a Parameter too) that records no gradient: it requires none, or
    grad mode is off (a converted module's weights under ``torch.no_grad``);
    None while torch compiles and for anything else (what :func:`key` takes
    of each array)."""
    k = key(None, (x,))
    return None if k is None else k[1]


def key(op, arrays, *rest):
    """The memo key of a call of ``op`` on ``arrays`` (None items: optional
    arrays left out) with the hashable arguments ``rest`` (None: not
    memoised, see :func:`layout`)."""
    parts = [op]
    torch = sys.modules.get("torch")
    compiling = grad = None                 # (asked of torch once, when a tensor needs it)
    for x in arrays:                        # (inlined: a call per array cost ~1 us)
        kind = type(x)
        if kind is np.ndarray:
            parts.append((kind, x.shape, x.strides, x.dtype))
            continue
        if x is None:               # (an optional argument left out)
            parts.append(None)
            continue
        if torch is None or not (kind is torch.Tensor or kind is torch.nn.Parameter) \
                or not x.is_cpu:
            return None
        if compiling is None:
            compiling = torch.compiler.is_compiling()
        if compiling:
            return None
        if x.requires_grad:
            if grad is None:
                grad = torch.is_grad_enabled()
            if grad:
                return None
        parts.append((kind, x.shape, x.stride(), x.dtype))
    return (*parts, *rest, *environ.values(_ENV))


def get(k):
    """What :func:`put` recorded under ``k`` while no tuning store has
    changed since; None otherwise."""
    if k is None:
        return None
    plan = _PLANS.get(k)
    if plan is None or plan[0] != tuning.generation():
        return None
    return plan[1]


def put(k, value):
    """Records ``value`` under ``k`` (nothing for ``k`` None)."""
    if k is None:
        return
    if len(_PLANS) >= LIMIT:
        _PLANS.clear()
    _PLANS[k] = (tuning.generation(), value)

"""The torch glue every ``torch.ops.tiramisu`` module shares: the namespace,
the one way an op is defined (:func:`op`), the float dtypes the ops take and the
refusal of a double backward (:mod:`schedules.torch_ops` registers the conv,
GEMM and sparse ops, :mod:`schedules.torch_rnn_ops` the recurrent ones)."""
from __future__ import annotations

import torch

from tiramisu_py.runtime.torch_bridge import define

NS = "tiramisu"
FLOATS = {torch.float32: "float32", torch.float64: "float64"}


def op(name, schema, impl, fake, backward=None, setup_context=None):
    """Defines ``tiramisu::name`` (see :func:`tiramisu_py.runtime.torch_bridge.define`)."""
    return define(f"{NS}::{name}", schema, impl, fake, backward, setup_context)


def float_dtype(name, *ts):
    """"float32" or "float64": the one dtype of the tensors ``ts`` (None
    skipped), else a TypeError naming the op."""
    dts = {t.dtype for t in ts if t is not None}
    if len(dts) != 1 or next(iter(dts)) not in FLOATS:
        raise TypeError(f"tiramisu::{name}: expected float32 or float64 tensors of one dtype, "
                        f"got {', '.join(str(t.dtype) for t in ts if t is not None)}")
    return FLOATS[next(iter(dts))]


def no_double_backward(name):
    """The backward of a backward op: a NotImplementedError naming ``name``."""
    def backward(ctx, *_):
        raise NotImplementedError(f"tiramisu::{name} has no double backward (a gradient of its "
                                  "gradient): compute higher-order gradients with torch's module")
    return backward

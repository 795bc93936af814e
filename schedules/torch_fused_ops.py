"""The fused ``torch.ops.tiramisu`` ops (imports torch): BatchNorm folded
into a convolution with its activation as the epilogue, ``nn.Linear``'s
product and bias, and the resize block, each one call.
:func:`schedules.nn.convert`'s folded chains (:mod:`schedules.fusion`) and
the ``torch.compile`` backend (:mod:`schedules.dynamo`) run them::

    torch.ops.tiramisu.linear(input, weight, bias=None)              # aten::linear
    torch.ops.tiramisu.conv2d_folded(input, weight, bias, bn_weight, bn_bias, running_mean,
                                     running_var, eps, stride, padding, dilation, groups, *,
                                     residual=None, activation=None)  # forward only
    torch.ops.tiramisu.resize_conv_relu_maxpool(input, size, weight, bias=None, pool=2, *,
                                                mode="bilinear", stride=1, padding=0,
                                                dilation=1, algo="auto")  # float32, forward only

``linear`` is ``input @ weight.T + bias`` through ``tiramisu::gemm``'s
solvers, the weight read as torch stores it (never transposed into a copy,
also where Inductor hands the op contiguous tensors); its backward is two
GEMMs and a sum.  ``conv2d_folded`` is ``act(batch_norm(conv2d(input,
weight, bias), running_mean, running_var, bn_weight, bn_bias, eps) +
residual)`` of an eval-mode BatchNorm (``running_mean`` None: no
BatchNorm), ``residual`` a tensor of the result's shape or None (a residual
block's shortcut), ``act`` "relu", "relu6" or None: one convolution with ``W * s`` and ``(b - mean) * s +
beta``, ``s = bn_weight / sqrt(running_var + eps)`` folded in float64 and
rounded once (:func:`folded`: made once per value of the six tensors by the
prepared-weights cache, never stale), the residual and the activation
inside the kernel where the solver has them (:func:`folded_conv`).  Inference only: asking it
for a gradient raises."""
from __future__ import annotations

import contextlib

import numpy as np
import torch

from tiramisu_py.runtime.torch_bridge import contiguous

from . import api, plans
from . import torch_glue as glue
from . import torch_ops as T
from .core import call_memo
from .core.prepared import Slot, own, prepared
from .problems.conv import ConvProblem

ACTIVATIONS = (None, "relu", "relu6")


# ------------------------------------------------------------------ folding
def fold(weight, bias, gamma, beta, mean, var, eps):
    """``(weight * s, (bias - mean) * s + beta)``, ``s = rsqrt(var + eps) *
    gamma``, in float64, each rounded once to the weight's dtype
    (differentiable)."""
    wide = torch.float64
    scale = var.to(wide).add(eps).rsqrt()
    if gamma is not None:
        scale = scale * gamma.to(wide)
    shift = -mean.to(wide) if bias is None else bias.to(wide) - mean
    shift = shift * scale + (0 if beta is None else beta.to(wide))
    return ((weight.to(wide) * scale.reshape(-1, 1, 1, 1)).to(weight.dtype),
            shift.to(weight.dtype))


def folded(weight, bias, gamma, beta, mean, var, eps, slot=None):
    """:func:`fold`, differentiable where a gradient is recorded (or while
    compiling, or on inference tensors), else made once per value of the six
    tensors (:func:`schedules.core.prepared.prepared`: never stale,
    ``.data`` writes included; ``slot``: the call site's
    :class:`~schedules.core.prepared.Slot`)."""
    parts = (weight, bias, gamma, beta, mean, var)
    given = [t for t in parts if t is not None]
    if torch.compiler.is_compiling() or any(t.is_inference() for t in given) or (
            torch.is_grad_enabled() and any(t.requires_grad for t in given)):
        return fold(*parts, eps)
    return prepared("folded_batchnorm", parts, lambda arrays: _made(arrays, eps), extra=(eps,),
                    slot=slot)


def _made(arrays, eps):
    """The fold of the cache's read-only NumPy copies, as ordinary tensors
    (not inference tensors, whatever the mode of the call that made them)."""
    with torch.inference_mode(False):
        made = _Folded(fold(*[None if a is None else torch.from_numpy(np.array(a))
                              for a in arrays], eps))
    own(*made)          # what the conv prepares from them: found by identity
    return made


class _Folded(tuple):
    """A folded ``(weight, bias)``, sized for the prepared-weights cache."""
    nbytes = property(lambda self: sum(t.numel() * t.element_size() for t in self))


def folded_conv(x, weight, bias, stride, padding, dilation, groups, activation, algo="auto",
                residual=None):
    """``activation(conv2d(x, weight, bias, ...) + residual)`` (NCHW ``x``;
    stride, padding, dilation as lists; ``residual`` None: nothing added):
    in the conv kernel's epilogue where the op's implementation runs
    directly and its solver has one (:func:`schedules.torch_ops.conv2d_then`;
    spatial_pack's and pointwise's apply a ReLU as they write each tile, as
    the fused block with ``pool=1`` does, which 1x1 convolutions ran slower:
    3.0 against 2.4 ms at 256 -> 128, 56x56, two images), else (and under
    autocast, where conv2d runs in the autocast dtype) added and applied in
    place to the conv's fresh output."""
    return T.conv2d_then(activation, x, weight, bias, list(stride), padding, list(dilation),
                         groups, algo, residual)


# ------------------------------------------------------------------ conv2d_folded
def conv2d_folded_now(input, weight, bias, bn, stride, padding, dilation, groups, activation,
                      algo="auto", residual=None, *, op=False):
    """``activation(batch_norm(conv2d(input, weight, bias, ...)) + residual)``
    with the BatchNorm ``bn`` = ``(bn_weight, bn_bias, running_mean,
    running_var, eps)`` folded (None: no BatchNorm): :func:`folded`, then
    :func:`folded_conv`.  ``op``: the op's call (its arguments checked, the
    fold made under ``no_grad``); else a converted module's (the fold
    differentiable where a gradient is recorded).

    A call that records no gradient (and, a module's, where the op's
    dispatch would add nothing: :func:`schedules.torch_glue.eager`'s
    conditions) on the layout of one before (every
    tensor's type, shape, strides and dtype, the other arguments and the
    environment: :mod:`schedules.core.call_memo`) runs that call's plan:
    the fold found in the prepared-weights cache (never stale) and the
    convolution's plan (:func:`schedules.plans.conv`), none of the checks,
    parses and wrappers between (whose outcome the layout decides): a
    960-channel 7x7 depthwise call 121 -> ~60 us (the kernel ~31)."""
    gamma, beta, mean, var, eps = (None,) * 4 + (0.0,) if bn is None else bn
    tensors = (input, weight, bias, gamma, beta, mean, var, residual)
    # (a module's call: only where the op's dispatch would add nothing, as glue.eager's)
    memo = None if isinstance(padding, str) or not (op or glue.direct(tensors)) else \
        call_memo.key("tiramisu::conv2d_folded", tensors, *T.conf_key(stride, padding, dilation),
                      groups, eps, activation, algo, op)
    plan = call_memo.get(memo)
    if plan is not None:
        return plan(*tensors)
    if op:
        glue.float_dtype("conv2d_folded", input, weight, bias, gamma, beta, mean, var, residual)
        s = _folded_problem(input, weight, stride, padding, dilation, groups, activation)
        _check_residual(s, input, residual)
    with torch.no_grad() if op else contextlib.nullcontext():
        if mean is not None:
            weight, bias = folded(weight, bias, gamma, beta, mean, var, eps)
        out = folded_conv(input, weight, bias, stride, padding, dilation, groups, activation,
                          algo, residual)
    if memo is not None:
        call_memo.put(memo, _plan(input, weight, bias, residual, stride, padding, dilation,
                                  groups, activation, algo, eps))
    return out


def _plan(x, weight, bias, residual, stride, padding, dilation, groups, activation, algo, eps):
    """The plan of :func:`conv2d_folded_now` for arguments of this layout
    (``weight``, ``bias``: the folded ones), or None where the convolution
    has none (it then takes the whole path at every call)."""
    if x.dtype != torch.float32 or x.dim() != 4 or weight.dtype != torch.float32:
        return None
    s = ConvProblem.from_meta("conv2d", x.shape, weight.shape, stride, padding, dilation, groups)
    if not T.square(s):
        return None
    args = glue.unwrapped((x, weight, bias, residual))
    conv = plans.conv("conv2d", *args[:3], s.sh, s.ph, s.dh, groups, algo,
                      activation=activation, residual=residual)
    if conv is None:
        return None
    parameter, slots = torch.nn.Parameter, {}

    def plan(x, weight, bias, gamma, beta, mean, var, residual):
        if mean is not None:
            # (the layers of one layout share the plan: a slot per layer, by its weight's place)
            slot = slots.get(weight.data_ptr())
            if slot is None:
                if len(slots) >= 64:
                    slots.clear()
                slot = slots[weight.data_ptr()] = Slot()
            weight, bias = folded(weight, bias, gamma, beta, mean, var, eps, slot)
            # (the fold's layout is the plan's unless it was made apart: an inference
            # tensor's fold keeps an expanded weight's strides, the cache's copies do not)
            if not (weight.is_contiguous() and (bias is None or bias.is_contiguous())):
                return folded_conv(x, weight, bias, stride, padding, dilation, groups,
                                   activation, algo, residual)
        else:                       # (a Parameter's every call goes through its subclass)
            weight = weight.detach() if type(weight) is parameter else weight
            bias = bias.detach() if type(bias) is parameter else bias
        return glue.fresh_outputs(conv(x, weight, bias, residual), ())
    return plan


def _folded_problem(input, weight, stride, padding, dilation, groups, activation):
    torch._check(activation in ACTIVATIONS,
                 lambda: f"tiramisu::conv2d_folded: activation must be one of "
                         f"{', '.join(map(repr, ACTIVATIONS))}, got {activation!r}")
    torch._check(input.dim() == 4, lambda: "tiramisu::conv2d_folded: input must be 4-D (N, C, "
                                           f"H, W), got shape {tuple(input.shape)}")
    return ConvProblem.from_meta("conv2d_folded", input.shape, weight.shape, stride, padding,
                                 dilation, groups, check=torch._check)


def _conv2d_folded(input, weight, bias, bn_weight, bn_bias, running_mean, running_var, eps,
                   stride, padding, dilation, groups, *, residual=None, activation=None):
    return conv2d_folded_now(input, weight, bias,
                             (bn_weight, bn_bias, running_mean, running_var, eps), stride,
                             padding, dilation, groups, activation, residual=residual, op=True)


def _conv2d_folded_fake(input, weight, bias, bn_weight, bn_bias, running_mean, running_var, eps,
                        stride, padding, dilation, groups, *, residual=None, activation=None):
    s = _folded_problem(input, weight, stride, padding, dilation, groups, activation)
    return input.new_empty(_check_residual(s, input, residual))


def _check_residual(s, input, residual):
    """The result's shape, checked against the residual's (of the input's
    dtype), where there is one."""
    shape = (s.n, s.co if s.ci else 0, s.ho, s.wo)
    if residual is None:
        return shape
    torch._check(tuple(residual.shape) == shape and residual.dtype == input.dtype,
                 lambda: f"tiramisu::conv2d_folded: residual must be a {input.dtype} tensor of "
                         f"the result's shape {shape}, got {residual.dtype} of shape "
                         f"{tuple(residual.shape)}")
    return shape


conv2d_folded = glue.op(
    "conv2d_folded",
    "(Tensor input, Tensor weight, Tensor? bias, Tensor? bn_weight, Tensor? bn_bias, "
    "Tensor? running_mean, Tensor? running_var, float eps, SymInt[2] stride, SymInt[2] padding, "
    "SymInt[2] dilation, SymInt groups, *, Tensor? residual=None, str? activation=None) -> Tensor",
    _conv2d_folded, _conv2d_folded_fake)


# ------------------------------------------------------------------ linear
def _linear_shape(input, weight, bias):
    torch._check(weight.dim() == 2 and input.dim() >= 1 and input.shape[-1] == weight.shape[1],
                 lambda: f"tiramisu::linear: input {tuple(input.shape)} and weight "
                         f"{tuple(weight.shape)} do not match (weight: (out_features, "
                         "in_features))")
    torch._check(bias is None or (bias.dim() == 1 and bias.shape[0] == weight.shape[0]),
                 lambda: f"tiramisu::linear: bias must have {weight.shape[0]} values")
    return (*input.shape[:-1], weight.shape[0])


def _linear(input, weight, bias=None):
    shape = _linear_shape(input, weight, bias)
    with torch.no_grad():
        y = T.gemm_now(input.reshape(-1, weight.shape[1]), weight.t())
        if bias is not None:
            y += bias if bias.dtype == y.dtype else bias.to(y.dtype)
    return y.reshape(shape)


def _linear_fake(input, weight, bias=None):
    return input.new_empty(_linear_shape(input, weight, bias))


def _linear_setup(ctx, inputs, output):
    input, weight = inputs[:2]
    ctx.has_bias = len(inputs) > 2 and inputs[2] is not None
    ctx.n_inputs = len(inputs)
    ctx.save_for_backward(input, weight)


def _linear_backward(ctx, g):
    """``dX = dY @ W``, ``dW = dY^T @ X``, ``db = sum(dY)`` (rows: every
    leading dimension)."""
    input, weight = ctx.saved_tensors
    g2 = g.reshape(-1, weight.shape[0])
    need = ctx.needs_input_grad
    gx = T.gemm_now(g2, weight).reshape(input.shape) if need[0] else None
    gw = T.outer_sum(g2, input.reshape(-1, weight.shape[1])) if need[1] else None
    gb = g2.sum(0) if ctx.has_bias and need[2] else None
    return (gx, gw, gb)[:ctx.n_inputs]


linear = glue.op("linear", "(Tensor input, Tensor weight, Tensor? bias=None) -> Tensor",
                 _linear, _linear_fake, _linear_backward, _linear_setup)


# ------------------------------------------------------------------ resize block
def _resize_shape(input, size, weight, stride, padding, dilation, pool, mode):
    op = "resize_conv_relu_maxpool"
    torch._check(mode in ("bilinear", "nearest"),
                 lambda: f"tiramisu::{op}: mode must be 'bilinear' or 'nearest', got {mode!r}")
    size = list(size)
    torch._check(len(size) in (1, 2) and all(v >= 1 for v in size),
                 lambda: f"tiramisu::{op}: size must be 1 or 2 positive ints, got {size}")
    torch._check(input.dim() == 4, lambda: f"tiramisu::{op}: input must be 4-D (N, C, H, W), "
                                           f"got shape {tuple(input.shape)}")
    xshape = (input.shape[0], input.shape[1], size[0], size[-1])
    s = ConvProblem.from_meta(op, xshape, weight.shape, stride, padding, dilation, 1,
                              check=torch._check)
    torch._check(1 <= pool <= min(s.ho, s.wo),
                 lambda: f"tiramisu::{op}: pool must be in [1, {min(s.ho, s.wo)}], got {pool}")
    return s


def _resize(input, size, weight, bias=None, pool=2, *, mode="bilinear", stride=(1, 1),
            padding=(0, 0), dilation=(1, 1), algo="auto"):
    if glue.float_dtype("resize_conv_relu_maxpool", input, weight, bias) != "float32":
        raise TypeError("tiramisu::resize_conv_relu_maxpool: the resize block is float32 only, "
                        f"got {input.dtype}")
    _resize_shape(input, size, weight, stride, padding, dilation, pool, mode)
    return api.resize_conv_relu_maxpool(contiguous(input), tuple(size), contiguous(weight),
                                        contiguous(bias), pool, mode=mode, stride=tuple(stride),
                                        padding=tuple(padding), dilation=tuple(dilation),
                                        algo=algo)


def _resize_fake(input, size, weight, bias=None, pool=2, *, mode="bilinear", stride=(1, 1),
                 padding=(0, 0), dilation=(1, 1), algo="auto"):
    s = _resize_shape(input, size, weight, stride, padding, dilation, pool, mode)
    return input.new_empty((s.n, s.co, s.ho // pool, s.wo // pool))


# forward only: asking for a gradient raises "has no backward"
resize_conv_relu_maxpool = glue.op(
    "resize_conv_relu_maxpool",
    "(Tensor input, SymInt[2] size, Tensor weight, Tensor? bias=None, int pool=2, *, "
    "str mode='bilinear', SymInt[2] stride=1, SymInt[2] padding=0, SymInt[2] dilation=1, "
    "str algo='auto') -> Tensor", _resize, _resize_fake)

"""The fused ``torch.ops.tiramisu`` ops (imports torch): BatchNorm folded
into a convolution with its activation as the epilogue (what
:func:`schedules.nn.convert`'s folded chains run, :mod:`schedules.fusion`)
and the resize block::

    torch.ops.tiramisu.resize_conv_relu_maxpool(input, size, weight, bias=None, pool=2, *,
                                                mode="bilinear", stride=1, padding=0,
                                                dilation=1, algo="auto")  # float32, forward only

The fold: ``W * s`` and ``(b - mean) * s + beta``, ``s = gamma /
sqrt(var + eps)`` in float64, rounded once (:func:`folded`: made once per
value of the six tensors by the prepared-weights cache, never stale); the
activation inside the kernel where the solver has it (:func:`folded_conv`)."""
from __future__ import annotations

import numpy as np
import torch

from tiramisu_py.runtime.torch_bridge import contiguous

from . import api
from . import torch_glue as glue
from . import torch_ops as T
from .core.prepared import own, prepared
from .problems.conv import ConvProblem

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


def folded(weight, bias, gamma, beta, mean, var, eps):
    """:func:`fold`, differentiable where a gradient is recorded (or while
    compiling, or on inference tensors), else made once per value of the six
    tensors (:func:`schedules.core.prepared.prepared`: never stale,
    ``.data`` writes included)."""
    parts = (weight, bias, gamma, beta, mean, var)
    given = [t for t in parts if t is not None]
    if torch.compiler.is_compiling() or any(t.is_inference() for t in given) or (
            torch.is_grad_enabled() and any(t.requires_grad for t in given)):
        return fold(*parts, eps)
    return prepared("folded_batchnorm", [None if t is None else t.detach() for t in parts],
                    lambda arrays: _made(arrays, eps), extra=(eps,))


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


def folded_conv(x, weight, bias, stride, padding, dilation, groups, activation, algo="auto"):
    """``activation(conv2d(x, weight, bias, ...))`` (NCHW ``x``; stride,
    padding, dilation as lists): ReLU inside the kernel (the fused block
    with ``pool=1``) where that takes the conv, else in the conv kernel's
    epilogue where the op's implementation runs directly and its solver has
    one (:func:`schedules.torch_ops.conv2d_then`), else (and under autocast,
    where conv2d runs in the autocast dtype) applied in place to the conv's
    fresh output."""
    in_kernel = (activation == "relu" and algo == "auto" and groups == 1
                 and tuple(stride) == (1, 1) and tuple(dilation) == (1, 1)
                 and not isinstance(padding, str) and weight.dtype == torch.float32
                 and not torch.is_autocast_enabled("cpu"))     # (conv2d: the autocast dtype)
    if in_kernel:
        return T.conv_relu_maxpool_now(x, weight, bias, [1, 1], padding, [1, 1], 1, pool=1)
    return T.conv2d_then(activation, x, weight, bias, list(stride), padding, list(dilation),
                         groups, algo)


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

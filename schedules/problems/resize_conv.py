"""The resize block's problem: ``max_pool2d(relu(conv2d(interpolate(x, size,
mode, align_corners=False), weight, bias, stride, padding, dilation)), pool)``
(:class:`ResizeConvProblem`): the fused block's :class:`ConvProblem` on the
resized shape, plus the source image's size and the resize mode, parsed once
from the call's arguments, with its explicit, versioned find key.
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from .conv import ConvProblem

OP = "resize_conv_relu_maxpool"
MODES = ("bilinear", "nearest")


def resize_size(size, op=OP):
    """``size`` as ``interpolate`` takes it for a 4-D input (an int, or two
    ints (height, width)), each positive: ``(height, width)``; else
    ValueError naming ``size``."""
    items = tuple(size) if isinstance(size, (tuple, list)) else (size,)
    if len(items) not in (1, 2) or not all(isinstance(v, (int, np.integer)) and not isinstance(v, bool) and v >= 1
                                          for v in items):
        raise ValueError(f"{op}: size must be a positive int or a pair of them (height, width), "
                         f"got {size!r}")
    return (int(items[0]), int(items[-1]))


@dataclass(frozen=True)
class ResizeConvProblem:
    """One resize block call: ``conv`` (the fused conv+ReLU+max-pool problem
    on the resized image: its shape's ``h``/``w`` are ``size``), the source
    image's ``src_h``/``src_w`` and ``mode`` ("bilinear" or "nearest")."""
    conv: ConvProblem
    src_h: int
    src_w: int
    mode: str

    VERSION = 1
    op = OP

    shape = property(lambda self: self.conv.shape)
    device = property(lambda self: self.conv.device)
    weight = property(lambda self: self.conv.weight)
    target = property(lambda self: self.conv.target)
    bias = property(lambda self: self.conv.bias)
    pool = property(lambda self: self.conv.pool)
    density = property(lambda self: self.conv.density)
    degenerate = property(lambda self: self.conv.degenerate)
    output_shape = property(lambda self: self.conv.output_shape)

    def key(self) -> dict:
        """The conv problem's key with the resize's fields, by name."""
        return {**self.conv.key(), "op": self.op, "resize_version": self.VERSION,
                "src": [self.src_h, self.src_w], "mode": self.mode}

    @classmethod
    def from_call(cls, input, size, weight, bias, pool, mode, stride, padding, dilation, *,
                  algo="auto", target=None, name=OP):
        """``(problem, args)``: host arrays (NumPy, CPU torch) only; errors
        start with ``name`` and name the argument (``x``, ``size``,
        ``weight``, ``bias``, ``pool``, ``mode``, ...)."""
        if not isinstance(mode, str) or mode not in MODES:
            raise ValueError(f"{name}: mode must be one of {', '.join(map(repr, MODES))}, "
                             f"got {mode!r}")
        if target == "cuda":
            raise ValueError(f"{name}: target='cuda': the resize block has no CUDA solver; use "
                             "target=None, 'cpu', 'c' or 'llvm'")
        hw = resize_size(size, name)
        shape = tuple(getattr(input, "shape", ()))
        if hasattr(input, "shape") and len(shape) != 4:
            # (torch's interpolate reads a 3-D input as (N, C, L), a 1-D resize:
            # no unbatched image here)
            raise ValueError(f"{name}: x must be 4-D (N, C, H, W), got shape {shape}")
        if len(shape) == 4 and 0 in shape[2:]:
            raise ValueError(f"{name}: x has an empty image ({shape}); interpolate needs input "
                             "sizes greater than 0")
        conv, args = ConvProblem.from_call("conv_relu_maxpool", input, weight, bias, stride,
                                           padding, dilation, 1, algo=algo, target=target,
                                           pool=pool, name=name, names=("x", "weight"),
                                           gpu=False, size=hw)
        return cls(conv, int(args.x.shape[2]), int(args.x.shape[3]), mode), args

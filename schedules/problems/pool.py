"""The max-pooling problem: ``torch.nn.functional.max_pool2d``'s arguments
parsed and checked as torch checks them (the kernel size, stride, padding,
dilation and ceil mode of its windows), into the :class:`PoolShape` of one
plane and the count of planes."""
from __future__ import annotations

from dataclasses import dataclass

from ..core import arrays as A
from .conv import pair


@dataclass(frozen=True)
class PoolShape:
    """A plane's pooling: input ``h x w``, window ``kh x kw``, strides
    ``sh, sw``, padding ``ph, pw``, dilation ``dh, dw``, output ``ho x wo``."""
    h: int
    w: int
    kh: int
    kw: int
    sh: int
    sw: int
    ph: int
    pw: int
    dh: int
    dw: int
    ho: int
    wo: int

    @property
    def hp(self):
        """The rows the windows read, the padding (and a ceil-mode window's
        overhang) included."""
        return max(self.h + 2 * self.ph, (self.ho - 1) * self.sh + (self.kh - 1) * self.dh + 1)

    @property
    def wp(self):
        return max(self.w + 2 * self.pw, (self.wo - 1) * self.sw + (self.kw - 1) * self.dw + 1)


def pooled_size(size, k, pad, stride, dilation, ceil_mode):
    """torch's pooled extent: ``floor`` (or ``ceil``) of ``(size + 2 pad -
    dilation (k - 1) - 1) / stride`` + 1, a ceil-mode window that would
    start in the right padding dropped."""
    span = size + 2 * pad - dilation * (k - 1) - 1 + (stride - 1 if ceil_mode else 0)
    out = span // stride + 1
    if ceil_mode and (out - 1) * stride >= size + pad:
        out -= 1
    return out


def max_pool_problem(input, kernel_size, stride, padding, dilation, ceil_mode,
                     op="max_pool2d"):
    """``(x, shape, unbatched)`` of a ``max_pool2d`` call: ``x`` the input
    as NCHW float32 (a NumPy array or CPU tensor; an unbatched CHW input
    gets its batch axis, ``unbatched``), ``shape`` its :class:`PoolShape`;
    the arguments checked as torch checks them (ValueError / TypeError
    naming the argument)."""
    nd = getattr(input, "ndim", None)
    if isinstance(nd, int) and nd not in (3, 4):
        raise ValueError(f"{op}: input must be 3-D (C, H, W) or 4-D (N, C, H, W), as in torch; "
                         f"got shape {tuple(input.shape)}")
    x = A.float32_array(input, "input", nd if nd in (3, 4) else 4)
    unbatched = x.ndim == 3
    if unbatched:
        x = x[None]
    if any(d == 0 for d in x.shape[1:]):
        raise ValueError(f"{op}: input of shape {tuple(input.shape)} is empty; as in torch, "
                         "only the batch may be 0")
    kh, kw = _pair(kernel_size, "kernel_size", 1, op)
    sh, sw = (kh, kw) if stride is None or (isinstance(stride, (list, tuple)) and not stride) \
        else _pair(stride, "stride", 1, op)
    ph, pw = _pair(padding, "padding", 0, op)
    dh, dw = _pair(dilation, "dilation", 1, op)
    if not isinstance(ceil_mode, bool):
        raise TypeError(f"{op}: ceil_mode must be a bool, got {ceil_mode!r}")
    if ph > kh // 2 or pw > kw // 2:
        raise ValueError(f"{op}: padding should be at most half of the kernel size, as in "
                         f"torch; got padding=({ph}, {pw}), kernel_size=({kh}, {kw})")
    h, w = x.shape[2], x.shape[3]
    ho = pooled_size(h, kh, ph, sh, dh, ceil_mode)
    wo = pooled_size(w, kw, pw, sw, dw, ceil_mode)
    if ho < 1 or wo < 1:
        raise ValueError(f"{op}: the output of a {h}x{w} input would be {ho}x{wo} (kernel_size "
                         f"({kh}, {kw}), stride ({sh}, {sw}), padding ({ph}, {pw}), dilation "
                         f"({dh}, {dw})): too small, as torch refuses it")
    return x, PoolShape(h, w, kh, kw, sh, sw, ph, pw, dh, dw, ho, wo), unbatched


def _pair(v, name, least, op):
    p = pair(v, name, least, op)
    return p if isinstance(p, tuple) else (p, p)

"""Drop-in ``torch.nn`` modules that run this compiler's kernels through the
operators ``torch.ops.tiramisu.*`` (:mod:`schedules.torch_ops`): eager,
autograd (backward kernels written in the DSL) and ``torch.compile``
(``fullgraph=True``: no graph break).  Importing this module imports torch.

Migration is one line per layer::

    model.features[0] = schedules.nn.Conv2d.from_torch(model.features[0])

or :func:`convert` for a whole model.  ``from_torch`` takes over the torch
module's parameters (the same ``Parameter`` objects: an optimizer built
before keeps working) and honours its stride, padding and dilation.
float32 and float64; CPU tensors.
"""
from __future__ import annotations

import torch
from torch import nn

import schedules.torch_ops  # noqa: F401  (registers torch.ops.tiramisu)
from schedules.weights.csr import CSRWeights

ops = torch.ops.tiramisu


def _adopt(new, old):
    """``new`` (made on the meta device) takes ``old``'s parameters, buffers
    and training flag."""
    for name, p in old.named_parameters(recurse=False):
        setattr(new, name, p)
    new.train(old.training)
    return new


class Linear(nn.Linear):
    """``nn.Linear`` computed as ``tiramisu::gemm(x, weight^T) + bias``."""

    def forward(self, input):
        lead = input.shape[:-1]
        y = ops.gemm(input.reshape(-1, self.in_features), self.weight.t())
        if self.bias is not None:
            y = y + self.bias
        return y.reshape(*lead, self.out_features)

    @classmethod
    def from_torch(cls, module: nn.Linear):
        if not isinstance(module, nn.Linear):
            raise TypeError(f"Linear.from_torch: expected an nn.Linear, got {type(module).__name__}")
        new = cls(module.in_features, module.out_features, bias=module.bias is not None,
                  device="meta", dtype=module.weight.dtype)
        return _adopt(new, module)


def _padding(conv):
    """The conv's padding as an ``(h, w)`` pair ("valid", "same", ints)."""
    if conv.padding_mode != "zeros":
        raise ValueError(f"{type(conv).__name__}: padding_mode {conv.padding_mode!r} is not "
                         "supported (only 'zeros')")
    if conv.padding == "valid":
        return [0, 0]
    if conv.padding == "same":
        pads = []
        for d, k in zip(conv.dilation, conv.kernel_size):
            total = d * (k - 1)
            if total % 2:
                raise ValueError(f"{type(conv).__name__}: padding='same' with kernel {k} and "
                                 f"dilation {d} pads unevenly; not supported")
            pads.append(total // 2)
        return pads
    return list(conv.padding)


class Conv2d(nn.Conv2d):
    """``nn.Conv2d`` (zeros padding, any stride/padding/dilation/groups) as
    ``tiramisu::conv2d``; ``algo``: "auto" (the find step of
    :mod:`schedules.conv_ops`), "direct", "im2col" or "spatial_pack"
    (float32 shapes the library takes; others use the plain kernel)."""

    algo = "auto"

    def forward(self, input):
        unbatched = input.dim() == 3
        x = input.unsqueeze(0) if unbatched else input
        y = ops.conv2d(x, self.weight, self.bias, list(self.stride), _padding(self),
                       list(self.dilation), self.groups, algo=self.algo)
        return y.squeeze(0) if unbatched else y

    @classmethod
    def from_torch(cls, module: nn.Conv2d, algo="auto"):
        if not isinstance(module, nn.Conv2d):
            raise TypeError(f"Conv2d.from_torch: expected an nn.Conv2d, got {type(module).__name__}")
        _padding(module)
        new = cls(module.in_channels, module.out_channels, module.kernel_size,
                  stride=module.stride, padding=module.padding, dilation=module.dilation,
                  groups=module.groups, bias=module.bias is not None,
                  padding_mode=module.padding_mode, device="meta", dtype=module.weight.dtype)
        new.algo = algo
        return _adopt(new, module)


class ConvReLUMaxPool2d(nn.Module):
    """``max_pool2d(relu(conv2d(x, weight, bias, padding=padding)), pool)``
    in one fused kernel (``tiramisu::conv_relu_maxpool``; stride 1,
    dilation 1, groups 1; non-overlapping ``pool x pool`` windows, floor
    mode).  ``algo``: "auto", "direct" or "winograd"."""

    def __init__(self, in_channels, out_channels, kernel_size=3, padding=1, pool=2, bias=True,
                 algo="auto", device=None, dtype=None):
        super().__init__()
        conv = nn.Conv2d(in_channels, out_channels, kernel_size, padding=padding, bias=bias,
                         device=device, dtype=dtype)
        self.weight, self.bias = conv.weight, conv.bias
        self.padding, self.pool, self.algo = _padding(conv), int(pool), algo

    def extra_repr(self):
        co, ci, kh, kw = self.weight.shape
        return f"{ci}, {co}, kernel_size=({kh}, {kw}), padding={tuple(self.padding)}, pool={self.pool}"

    def forward(self, input):
        return ops.conv_relu_maxpool(input, self.weight, self.bias, padding=self.padding,
                                     pool=self.pool, algo=self.algo)

    @classmethod
    def from_torch(cls, module, pool=None, algo="auto"):
        """From ``nn.Sequential(Conv2d, ReLU, MaxPool2d)`` (or a ``Conv2d``
        and ``pool``)."""
        if isinstance(module, nn.Conv2d):
            conv, p = module, pool
            if p is None:
                raise TypeError("ConvReLUMaxPool2d.from_torch(conv): pass pool=")
        else:
            parts = list(module) if isinstance(module, nn.Sequential) else []
            if len(parts) != 3 or not isinstance(parts[0], nn.Conv2d) \
                    or not isinstance(parts[1], nn.ReLU) or not isinstance(parts[2], nn.MaxPool2d):
                raise TypeError("ConvReLUMaxPool2d.from_torch: expected nn.Sequential(Conv2d, "
                                "ReLU, MaxPool2d) or a Conv2d with pool=")
            conv, mp = parts[0], parts[2]
            p = _pool_of(mp)
        if tuple(conv.stride) != (1, 1) or tuple(conv.dilation) != (1, 1) or conv.groups != 1:
            raise ValueError("ConvReLUMaxPool2d.from_torch: the conv must have stride 1, "
                             f"dilation 1, groups 1 (got stride {conv.stride}, dilation "
                             f"{conv.dilation}, groups {conv.groups})")
        new = cls(conv.in_channels, conv.out_channels, conv.kernel_size, padding=conv.padding,
                  pool=p, bias=conv.bias is not None, algo=algo, device="meta",
                  dtype=conv.weight.dtype)
        new.padding = _padding(conv)
        return _adopt(new, conv)


class ResizeConvReLUMaxPool2d(nn.Module):
    """``max_pool2d(relu(conv2d(interpolate(x, size, mode=mode,
    align_corners=False), weight, bias, padding=padding)), pool)`` in one
    kernel (``tiramisu::resize_conv_relu_maxpool``,
    :func:`schedules.resize_conv_relu_maxpool`): the resize is computed where
    the convolution reads it, never stored as an image.  float32, forward
    only (asking for a gradient raises).  ``algo="sparse"`` runs the CSR
    kernel on the weight's nonzeros (a pruned weight,
    :func:`schedules.prune_magnitude`; converted once per weight value)."""

    def __init__(self, in_channels, out_channels, size, kernel_size=3, padding=1, pool=2,
                 bias=True, mode="bilinear", algo="auto", device=None, dtype=None):
        super().__init__()
        conv = nn.Conv2d(in_channels, out_channels, kernel_size, padding=padding, bias=bias,
                         device=device, dtype=dtype)
        self.weight, self.bias = conv.weight, conv.bias
        self.size = [int(size), int(size)] if isinstance(size, int) else [int(v) for v in size]
        self.padding, self.pool, self.mode, self.algo = _padding(conv), int(pool), mode, algo

    def extra_repr(self):
        co, ci, kh, kw = self.weight.shape
        return (f"{ci}, {co}, size={tuple(self.size)}, kernel_size=({kh}, {kw}), "
                f"padding={tuple(self.padding)}, pool={self.pool}, mode={self.mode!r}")

    def forward(self, input):
        return ops.resize_conv_relu_maxpool(input, self.size, self.weight, self.bias, self.pool,
                                            mode=self.mode, padding=self.padding, algo=self.algo)


class SparseConv2d(nn.Module):
    """``nn.Conv2d`` with a CSR sparse weight (a pruned layer), as
    ``tiramisu::sparse_conv2d`` (:func:`schedules.sparse_conv2d`, float32,
    groups 1).  The sparsity pattern (``rowptr``, ``colidx``: buffers) is
    fixed; ``values`` (one per nonzero) and ``bias`` are parameters, trained
    through the dense backward kernels."""

    def __init__(self, csr, bias=None, stride=1, padding=0, dilation=1):
        super().__init__()
        pair = lambda v: list(v) if isinstance(v, (tuple, list)) else [int(v), int(v)]  # noqa: E731
        self.weight_size = list(csr.shape)
        own = lambda a, dt: (torch.as_tensor(a, dtype=dt).clone() if isinstance(a, torch.Tensor)  # noqa: E731
                             else torch.tensor(a, dtype=dt))      # (CSRWeights' arrays are read-only)
        self.register_buffer("rowptr", own(csr.rowptr, torch.int64))    # copies: the module's own
        self.register_buffer("colidx", own(csr.colidx, torch.int64))
        self.values = nn.Parameter(own(csr.values, torch.float32))
        self.bias = None if bias is None else nn.Parameter(torch.as_tensor(bias).detach().clone())
        self.stride, self.padding, self.dilation = pair(stride), pair(padding), pair(dilation)

    @property
    def density(self):
        co, ci, kh, kw = self.weight_size
        return self.values.numel() / max(1, co * ci * kh * kw)

    def extra_repr(self):
        co, ci, kh, kw = self.weight_size
        return (f"{ci}, {co}, kernel_size=({kh}, {kw}), stride={tuple(self.stride)}, "
                f"padding={tuple(self.padding)}, density={self.density:.3f}")

    def forward(self, input):
        return ops.sparse_conv2d(input, self.rowptr, self.colidx, self.values, self.weight_size,
                                 self.bias, self.stride, self.padding, self.dilation)

    @classmethod
    def from_torch(cls, module: nn.Conv2d, threshold=0.0):
        """The pruned ``nn.Conv2d`` ``module`` (weights with ``|w| <=
        threshold`` dropped), converted once to CSR."""
        if not isinstance(module, nn.Conv2d):
            raise TypeError(f"SparseConv2d.from_torch: expected an nn.Conv2d, got "
                            f"{type(module).__name__}")
        if module.groups != 1:
            raise ValueError("SparseConv2d.from_torch: groups must be 1")
        csr = CSRWeights.from_dense(module.weight.detach().float().numpy(), threshold=threshold)
        bias = None if module.bias is None else module.bias.detach().float()
        return cls(csr, bias, module.stride, _padding(module), module.dilation)


class _Recurrent(nn.Module):
    """A torch ``nn.LSTM``/``nn.GRU``'s parameters (the same objects) run by
    ``tiramisu::lstm``/``gru`` (:func:`schedules.lstm`, float32, forward only:
    no backward kernels yet, asking for a gradient raises); bidirectional
    and (LSTM) ``proj_size`` > 0 as torch computes them."""

    _torch = None

    def __init__(self, module):
        super().__init__()
        if not isinstance(module, self._torch):
            raise TypeError(f"{type(self).__name__}.from_torch: expected an "
                            f"{self._torch.__name__}, got {type(module).__name__}")
        self.num_layers, self.batch_first = module.num_layers, module.batch_first
        self.bidirectional = bool(module.bidirectional)
        self.proj_size = int(getattr(module, "proj_size", 0))
        self.hidden_size, self.dropout = module.hidden_size, float(module.dropout)
        self._names = [n for layer in module._all_weights for n in layer]
        for n in self._names:
            setattr(self, n, getattr(module, n))
        self.train(module.training)

    @classmethod
    def from_torch(cls, module):
        return cls(module)

    def _run(self, x, *state):
        if self.training and self.dropout > 0 and self.num_layers > 1:
            # torch drops between layers in training mode: refused, never ignored
            raise ValueError(f"{type(self).__name__}: dropout={self.dropout} in training mode is "
                             "not supported (torch would drop between layers); call .eval(), or "
                             "convert a module with dropout=0")
        if self.batch_first:
            if x.dim() != 3 or min(x.shape[:2]) < 1:    # the caller's shape, not transposed
                raise ValueError(f"{type(self).__name__}: input: expected (B, T, I) "
                                 f"(batch_first=True) with B, T >= 1, got shape {tuple(x.shape)}")
            x = x.transpose(0, 1)
        out = self._op(x, [getattr(self, n) for n in self._names], self.num_layers, *state,
                       bidirectional=self.bidirectional)
        y = out[0].transpose(0, 1) if self.batch_first else out[0]
        return y, out[1:]


class LSTM(_Recurrent):
    """``schedules.nn.LSTM.from_torch(lstm)``: ``forward(input, (h0, c0)=None)``
    returns ``(y, (h_n, c_n))`` as ``nn.LSTM`` does."""
    _torch = nn.LSTM

    def forward(self, input, hx=None):
        h0, c0 = (None, None) if hx is None else hx
        self._op = ops.lstm
        y, (hn, cn) = self._run(input, h0, c0)
        return y, (hn, cn)


class GRU(_Recurrent):
    """``schedules.nn.GRU.from_torch(gru)``: ``forward(input, h0=None)`` returns
    ``(y, h_n)`` as ``nn.GRU`` does."""
    _torch = nn.GRU

    def forward(self, input, hx=None):
        self._op = ops.gru
        y, (hn,) = self._run(input, hx)
        return y, hn


def _pool_of(mp: nn.MaxPool2d):
    """The window of a non-overlapping floor-mode max-pool, else an error."""
    k = mp.kernel_size if isinstance(mp.kernel_size, int) else mp.kernel_size[0]
    same = lambda v: v if isinstance(v, int) else (v[0] if len(set(v)) == 1 else None)  # noqa: E731
    if same(mp.kernel_size) != k or same(mp.stride) != k or same(mp.padding) != 0 \
            or same(mp.dilation) != 1 or mp.ceil_mode or mp.return_indices:
        raise ValueError(f"ConvReLUMaxPool2d.from_torch: the max-pool must be a square "
                         f"non-overlapping window (stride = kernel, padding 0, floor mode); "
                         f"got {mp}")
    return k


def convert(model: nn.Module, fuse=True, algo="auto"):
    """Replaces, in place, every ``nn.Linear`` and ``nn.Conv2d`` of ``model``
    by this module's, and (``fuse``) every ``Conv2d, ReLU, MaxPool2d`` run of
    an ``nn.Sequential`` that the fused block takes by one
    :class:`ConvReLUMaxPool2d` (the run's modules are renumbered).  Returns
    ``model``."""
    if fuse and isinstance(model, nn.Sequential):
        fused = _fused(model, algo)
        model._modules.clear()
        for k, m in enumerate(fused):
            model.add_module(str(k), m)
    for name, child in list(model.named_children()):
        if type(child) is nn.Linear:
            setattr(model, name, Linear.from_torch(child))
        elif type(child) is nn.Conv2d:
            setattr(model, name, Conv2d.from_torch(child, algo=algo))
        else:
            convert(child, fuse, algo)
    return model


def _fused(seq, algo):
    """The modules of ``seq`` with each fusable Conv2d-ReLU-MaxPool2d run as
    one :class:`ConvReLUMaxPool2d`."""
    mods, out, k = list(seq), [], 0
    while k < len(mods):
        trio = mods[k:k + 3]
        if len(trio) == 3 and type(trio[0]) is nn.Conv2d and isinstance(trio[1], nn.ReLU) \
                and isinstance(trio[2], nn.MaxPool2d):
            try:
                out.append(ConvReLUMaxPool2d.from_torch(nn.Sequential(*trio), algo=algo))
                k += 3
                continue
            except ValueError:          # not a shape the fused block takes: keep the three
                pass
        out.append(mods[k])
        k += 1
    return out

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

import schedules.torch_ops as T  # (registers torch.ops.tiramisu)
from schedules import api
from schedules import torch_glue as glue
from schedules.fusion import STAND_INS, ConvertReport, find_chains, find_tails
from schedules.problems.conv import ConvProblem
from schedules.problems.rnn import dropout_masks, dropout_p
from schedules.registry import FUSED_ALGOS
from schedules.torch_fused_ops import conv2d_folded_now, folded_conv
from schedules.torch_rnn_ops import rnn_recorded
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
        y = T.gemm_now(input.reshape(-1, self.in_features), self.weight.t())
        if self.bias is not None:      # (under autocast the product is bfloat16: so the bias)
            # in place: the product's storage is the op's own (a new one was 4.5 of a
            # seq2seq b16 step's 85 ms: 16 MB allocated, first touched and written)
            y.add_(self.bias if self.bias.dtype == y.dtype else self.bias.to(y.dtype))
        return y.reshape(*lead, self.out_features)

    @classmethod
    def from_torch(cls, module: nn.Linear):
        if not isinstance(module, nn.Linear):
            raise TypeError(f"Linear.from_torch: expected an nn.Linear, got {type(module).__name__}")
        new = cls(module.in_features, module.out_features, bias=module.bias is not None,
                  device="meta", dtype=module.weight.dtype)
        return _adopt(new, module)


def _padded(conv, input):
    """``(input, padding)`` for the conv op, by torch's rule
    (``nn.Conv2d._conv_forward``): with ``padding_mode`` "reflect",
    "replicate" or "circular" the input padded by ``F.pad`` (torch's own
    refusals: a padding too large for the input) and padding 0; with
    "zeros" the input and the padding as given ("same" / "valid" too: the op
    pads an odd "same" as torch)."""
    if conv.padding_mode != "zeros":
        return (nn.functional.pad(input, conv._reversed_padding_repeated_twice,
                                  mode=conv.padding_mode), [0, 0])
    return input, conv.padding if isinstance(conv.padding, str) else list(conv.padding)


class Conv2d(nn.Conv2d):
    """``nn.Conv2d`` (any padding, padding_mode, stride, dilation, groups;
    batched or unbatched input) as ``tiramisu::conv2d``; ``algo``: "auto"
    (the find step of :mod:`schedules.conv_ops`), "direct", "depthwise",
    "im2col" or "spatial_pack" (float32 shapes the library takes; others use
    the plain kernel)."""

    algo = "auto"

    def forward(self, input, residual=None, tail=False):
        """The convolution of ``input``; ``tail`` (a call written by
        :func:`convert` into a parent's forward, :func:`schedules.fusion.find_tails`):
        the whole chain this conv heads, ``residual`` its shortcut."""
        if tail:
            return self._run_tail(input, residual, self.__dict__["_tail"])
        x, padding = _padded(self, input)
        group = self.__dict__.get("_fusion")         # set by convert: see schedules.fusion
        if group is not None and group.active():
            unbatched = x.dim() == 3
            y = self._fused(x.unsqueeze(0) if unbatched else x, group, padding)
            return y.squeeze(0) if unbatched else y
        return T.conv2d_now(x, self.weight, self.bias, list(self.stride), padding,
                            list(self.dilation), self.groups, algo=self.algo)

    def _run_tail(self, input, residual, chain):
        """``act(bn(conv(input)) + residual)`` of a :class:`schedules.fusion.TailChain`:
        one folded convolution with the residual and the activation in its
        epilogue where the chain is active (eval mode) and the residual has
        the result's shape and dtype (a float32 batch, int padding); else
        each link as the parent's forward ran it (the BatchNorm and
        activation modules called, the add in place or not, as written)."""
        x, padding = _padded(self, input)
        if chain.active():
            fits = x.dim() == 4 and (residual is None or (
                residual.dtype == x.dtype == torch.float32 and not isinstance(padding, str)
                and tuple(residual.shape) == self._result_shape(x, padding)))
            if fits:
                return self._fused(x, chain, padding, residual)
            weight, bias = chain.folded(self.weight, self.bias)
            y = folded_conv(x, weight, bias, list(self.stride), padding, list(self.dilation),
                            self.groups, None, self.algo)
        else:
            y = T.conv2d_now(x, self.weight, self.bias, list(self.stride), padding,
                             list(self.dilation), self.groups, algo=self.algo)
            y = y if chain.bn is None else chain.bn(y)
        if chain.add is not None:
            y = y.add_(residual) if chain.add == "add_" else torch.add(y, residual)
        return y if chain.act is None else chain.act(y)

    def _fused(self, x, group, pad, residual=None):
        """The chain's conv with its BatchNorm folded into the weight and bias
        and its activation (after ``residual``, where given) as the epilogue
        (:func:`schedules.torch_fused_ops.conv2d_folded_now`)."""
        bn = group.bn
        return conv2d_folded_now(x, self.weight, self.bias, None if bn is None else (
            bn.weight, bn.bias, bn.running_mean, bn.running_var, bn.eps), list(self.stride), pad,
            list(self.dilation), self.groups, group.activation, self.algo, residual)

    def _result_shape(self, x, padding):
        """The shape of this conv's result on the batch ``x`` (int ``padding``)."""
        s = ConvProblem.from_meta("conv2d", x.shape, self.weight.shape, self.stride, padding,
                                  self.dilation, self.groups)
        return (s.n, s.co, s.ho, s.wo)

    @classmethod
    def from_torch(cls, module: nn.Conv2d, algo="auto"):
        if not isinstance(module, nn.Conv2d):
            raise TypeError(f"Conv2d.from_torch: expected an nn.Conv2d, got {type(module).__name__}")
        new = cls(module.in_channels, module.out_channels, module.kernel_size,
                  stride=module.stride, padding=module.padding, dilation=module.dilation,
                  groups=module.groups, bias=module.bias is not None,
                  padding_mode=module.padding_mode, device="meta", dtype=module.weight.dtype)
        new.algo = algo
        return _adopt(new, module)


def _torch_padding(padding, kernel_size, dilation):
    """nn.Conv2d's ``_reversed_padding_repeated_twice`` (left, right, top,
    bottom) of ``padding`` (ints, "valid", or "same" split as torch splits
    it: the odd extra on the right / bottom)."""
    if isinstance(padding, str):
        totals = [0, 0] if padding == "valid" else [d * (k - 1) for d, k in
                                                     zip(dilation, kernel_size)]
        return [p for t in reversed(totals) for p in (t // 2, t - t // 2)]
    return [p for p in reversed(padding) for _ in range(2)]


class ConvReLUMaxPool2d(nn.Module):
    """``max_pool2d(relu(conv(x)), pool)`` in one fused kernel
    (``tiramisu::conv_relu_maxpool``), ``conv`` an ``nn.Conv2d`` of these
    arguments (any stride, padding, dilation, groups, padding_mode; batched
    or unbatched input); non-overlapping ``pool x pool`` windows, floor
    mode.  ``algo``: "auto", "direct" or "winograd"."""

    def __init__(self, in_channels, out_channels, kernel_size=3, padding=1, pool=2, bias=True,
                 algo="auto", device=None, dtype=None, *, stride=1, dilation=1, groups=1,
                 padding_mode="zeros"):
        super().__init__()
        conv = nn.Conv2d(in_channels, out_channels, kernel_size, stride, padding, dilation,
                         groups, bias, padding_mode, device=device, dtype=dtype)
        self.weight, self.bias = conv.weight, conv.bias
        for k in ("stride", "padding", "dilation", "groups", "padding_mode",
                  "_reversed_padding_repeated_twice"):
            setattr(self, k, getattr(conv, k))
        self.pool, self.algo = int(pool), algo

    def extra_repr(self):
        co, ci, kh, kw = self.weight.shape
        return (f"{ci * self.groups}, {co}, kernel_size=({kh}, {kw}), stride={self.stride}, "
                f"padding={self.padding!r}, dilation={self.dilation}, groups={self.groups}, "
                f"padding_mode={self.padding_mode!r}, pool={self.pool}")

    def forward(self, input):
        x, padding = _padded(self, input)
        return T.conv_relu_maxpool_now(x, self.weight, self.bias, list(self.stride), padding,
                                       list(self.dilation), self.groups, pool=self.pool,
                                       algo=self.algo)

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
        new = cls(conv.in_channels, conv.out_channels, conv.kernel_size, padding=conv.padding,
                  pool=p, bias=conv.bias is not None, algo=algo, device="meta",
                  dtype=conv.weight.dtype, stride=conv.stride, dilation=conv.dilation,
                  groups=conv.groups, padding_mode=conv.padding_mode)
        return _adopt(new, conv)


def _resize_padding(conv):
    """The resize block's padding as an ``(h, w)`` pair of ints ("valid",
    "same" with an even total, ints): its op pads the resized image, which
    no caller holds, so an uneven "same" (torch's extra zeros below and
    right of a copy) is refused, naming it."""
    if conv.padding == "valid":
        return [0, 0]
    if conv.padding == "same":
        pads = []
        for d, k in zip(conv.dilation, conv.kernel_size):
            total = d * (k - 1)
            if total % 2:
                raise ValueError(f"ResizeConvReLUMaxPool2d: padding='same' with kernel {k} and "
                                 f"dilation {d} pads unevenly; pass the padding as ints")
            pads.append(total // 2)
        return pads
    return list(conv.padding)


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
        self.padding, self.pool, self.mode, self.algo = _resize_padding(conv), int(pool), mode, algo

    def extra_repr(self):
        co, ci, kh, kw = self.weight.shape
        return (f"{ci}, {co}, size={tuple(self.size)}, kernel_size=({kh}, {kw}), "
                f"padding={tuple(self.padding)}, pool={self.pool}, mode={self.mode!r}")

    def forward(self, input):
        return ops.resize_conv_relu_maxpool(input, self.size, self.weight, self.bias, self.pool,
                                            mode=self.mode, padding=self.padding, algo=self.algo)


class SparseConv2d(nn.Module):
    """``nn.Conv2d`` with a CSR sparse weight (a pruned layer), as
    ``tiramisu::sparse_conv2d`` (:func:`schedules.sparse_conv2d`, float32;
    any stride, padding, dilation, groups, padding_mode; batched or
    unbatched input).  The sparsity pattern (``rowptr``, ``colidx``:
    buffers) is fixed; ``values`` (one per nonzero) and ``bias`` are
    parameters, trained through the dense backward kernels."""

    def __init__(self, csr, bias=None, stride=1, padding=0, dilation=1, groups=1,
                 padding_mode="zeros"):
        super().__init__()
        pair = lambda v: list(v) if isinstance(v, (tuple, list)) else [int(v), int(v)]  # noqa: E731
        self.weight_size = list(csr.shape)
        own = lambda a, dt: (torch.as_tensor(a, dtype=dt).clone() if isinstance(a, torch.Tensor)  # noqa: E731
                             else torch.tensor(a, dtype=dt))      # (CSRWeights' arrays are read-only)
        self.register_buffer("rowptr", own(csr.rowptr, torch.int64))    # copies: the module's own
        self.register_buffer("colidx", own(csr.colidx, torch.int64))
        self.values = nn.Parameter(own(csr.values, torch.float32))
        self.bias = None if bias is None else nn.Parameter(torch.as_tensor(bias).detach().clone())
        self.stride, self.dilation, self.groups = pair(stride), pair(dilation), groups
        self.padding = padding if isinstance(padding, str) else pair(padding)
        self.padding_mode = padding_mode
        self._reversed_padding_repeated_twice = _torch_padding(self.padding, csr.shape[2:],
                                                               self.dilation)

    @property
    def density(self):
        co, ci, kh, kw = self.weight_size
        return self.values.numel() / max(1, co * ci * kh * kw)

    def extra_repr(self):
        co, ci, kh, kw = self.weight_size
        return (f"{ci * self.groups}, {co}, kernel_size=({kh}, {kw}), stride={tuple(self.stride)}, "
                f"padding={self.padding!r}, groups={self.groups}, density={self.density:.3f}")

    def forward(self, input):
        if isinstance(self.padding, str) or self.padding_mode != "zeros":   # torch's rule
            mode = "constant" if self.padding_mode == "zeros" else self.padding_mode
            x, padding = nn.functional.pad(input, self._reversed_padding_repeated_twice,
                                           mode=mode), [0, 0]
        else:
            x, padding = input, self.padding
        return ops.sparse_conv2d(x, self.rowptr, self.colidx, self.values, self.weight_size,
                                 self.bias, self.stride, padding, self.dilation, self.groups)

    @classmethod
    def from_torch(cls, module: nn.Conv2d, threshold=0.0):
        """The pruned ``nn.Conv2d`` ``module`` (weights with ``|w| <=
        threshold`` dropped), converted once to CSR."""
        if not isinstance(module, nn.Conv2d):
            raise TypeError(f"SparseConv2d.from_torch: expected an nn.Conv2d, got "
                            f"{type(module).__name__}")
        csr = CSRWeights.from_dense(module.weight.detach().float().numpy(), threshold=threshold)
        bias = None if module.bias is None else module.bias.detach().float()
        return cls(csr, bias, module.stride, module.padding, module.dilation, module.groups,
                   module.padding_mode)


class _Recurrent(nn.Module):
    """A torch ``nn.LSTM``/``nn.GRU``'s parameters (the same objects) run by
    ``tiramisu::lstm``/``gru`` (:func:`schedules.lstm`; float32 and float64;
    trained through backpropagation-through-time kernels).  In training mode
    with ``dropout`` > 0 the masks between layers are drawn as torch's CPU
    RNN draws them (:func:`schedules.problems.rnn.dropout_masks`): a
    seeded run drops what torch drops.  Input ``(T, B, I)`` (``(B, T, I)``
    with ``batch_first``) or unbatched ``(T, I)``, as torch's.  Bidirectional
    and (LSTM) ``proj_size`` > 0 as torch computes them, through
    :func:`schedules.lstm`'s composition of one-layer calls (gradients through
    it for bidirectional stacks; none for a projected layer; no dropout in
    training mode there)."""

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
        self._layers = [list(layer) for layer in module._all_weights]
        self._names = [n for layer in self._layers for n in layer]
        for n in self._names:
            setattr(self, n, getattr(module, n))
        self.train(module.training)

    @classmethod
    def from_torch(cls, module):
        return cls(module)

    def extra_repr(self):
        return (f"hidden_size={self.hidden_size}, num_layers={self.num_layers}, "
                f"batch_first={self.batch_first}, dropout={self.dropout}")

    def _run(self, x, *state):
        name = type(self).__name__
        if x.dim() not in (2, 3):
            batched = "(B, T, I) (batch_first=True)" if self.batch_first else "(T, B, I)"
            raise ValueError(f"{name}: input: expected {batched} or unbatched (T, I), got shape "
                             f"{tuple(x.shape)}")
        unbatched = x.dim() == 2
        want = 2 if unbatched else 3
        for s, what in zip(state, ("h0", "c0")):
            if s is not None and s.dim() != want:
                raise ValueError(f"{name}: for {'unbatched 2-D' if unbatched else 'batched 3-D'} "
                                 f"input, {what} should be {want}-D, got {s.dim()}-D")
        if unbatched:                   # (T, I) is one sequence of batch 1, time-major
            x = x.unsqueeze(1)
            state = tuple(None if s is None else s.unsqueeze(1) for s in state)
        elif self.batch_first:
            if min(x.shape[:2]) < 1:    # the caller's shape, not transposed
                raise ValueError(f"{name}: input: expected (B, T, I) (batch_first=True) with "
                                 f"B, T >= 1, got shape {tuple(x.shape)}")
            x = x.transpose(0, 1)
        out = self._stacked(x, state) if self.bidirectional or self.proj_size \
            else self._layers_op(x, state)
        if unbatched:
            return out[0].squeeze(1), tuple(o.squeeze(1) for o in out[1:])
        y = out[0].transpose(0, 1) if self.batch_first else out[0]
        return y, out[1:]

    def _layers_op(self, x, state):
        """``tiramisu::lstm``/``gru`` of a one-direction stack, with torch's
        dropout masks in training mode."""
        weights = [getattr(self, n) for n in self._names]
        masks = None
        p = dropout_p(self.dropout, self.training)
        if p and self.num_layers > 1:   # torch's masks, from torch's generator
            per = len(weights) // self.num_layers
            masks = dropout_masks(x, self.num_layers, [weights[:per]], p)
        if rnn_recorded(x, weights, state):    # a gradient recorded: the states kept for it
            return self._op_train(x, weights, self.num_layers, *state, dropout_masks=masks)[:-1]
        return self._op(x, weights, self.num_layers, *state, dropout_masks=masks)

    def _stacked(self, x, state):
        """A bidirectional or projected stack through :func:`schedules.lstm`
        / :func:`schedules.gru` (per layer and direction, one-layer calls)."""
        if dropout_p(self.dropout, self.training) and self.num_layers > 1:
            raise ValueError(f"{type(self).__name__}: dropout={self.dropout} in training mode is "
                             "not supported with bidirectional=True or proj_size > 0 (call "
                             ".eval(), or use dropout=0)")
        weights = [[getattr(self, n) for n in layer] for layer in self._layers]
        if self._torch is nn.LSTM:
            y, (hn, cn) = api.lstm(x, weights, *state, bidirectional=self.bidirectional)
            return y, hn, cn
        y, hn = api.gru(x, weights, *state, bidirectional=self.bidirectional)
        return y, hn


class LSTM(_Recurrent):
    """``schedules.nn.LSTM.from_torch(lstm)``: ``forward(input, (h0, c0)=None)``
    returns ``(y, (h_n, c_n))`` as ``nn.LSTM`` does."""
    _torch = nn.LSTM

    def forward(self, input, hx=None):
        h0, c0 = (None, None) if hx is None else hx
        self._op, self._op_train = ops.lstm, ops.lstm_train
        y, (hn, cn) = self._run(input, h0, c0)
        return y, (hn, cn)


class GRU(_Recurrent):
    """``schedules.nn.GRU.from_torch(gru)``: ``forward(input, h0=None)`` returns
    ``(y, h_n)`` as ``nn.GRU`` does."""
    _torch = nn.GRU

    def forward(self, input, hx=None):
        self._op, self._op_train = ops.gru, ops.gru_train
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


class MaxPool2d(nn.MaxPool2d):
    """``nn.MaxPool2d`` as :func:`schedules.max_pool2d` on float32 input in
    eager mode (:func:`schedules.torch_glue.plain_eager`); where a gradient
    is recorded, with the maxima's indices, and aten's
    ``max_pool2d_with_indices_backward`` as the backward (the indices are
    torch's, so the gradient is too).  Compiling, tracing, under autocast
    or on other dtypes: torch's forward."""

    def forward(self, input):
        if input.dtype != torch.float32 or not glue.plain_eager((input,)):
            return super().forward(input)
        conf = (self.kernel_size, self.stride, self.padding, self.dilation, self.ceil_mode)
        if glue.direct((input,)):
            return glue.fresh_outputs(api.max_pool2d(input, *conf, self.return_indices),
                                      (input,))
        out, indices = _MaxPool2dFunction.apply(input, conf)
        return (out, indices) if self.return_indices else out

    @classmethod
    def from_torch(cls, module: nn.MaxPool2d):
        if not isinstance(module, nn.MaxPool2d):
            raise TypeError(f"MaxPool2d.from_torch: expected an nn.MaxPool2d, got "
                            f"{type(module).__name__}")
        new = cls(module.kernel_size, module.stride, module.padding, module.dilation,
                  module.return_indices, module.ceil_mode)
        return new.train(module.training)


class _MaxPool2dFunction(torch.autograd.Function):
    """Our max pooling with its indices forward, aten's backward from them."""

    @staticmethod
    def forward(ctx, input, conf):
        out, indices = glue.fresh_outputs(api.max_pool2d(input.detach(), *conf,
                                                         return_indices=True), (input,))
        ctx.save_for_backward(input, indices)
        ctx.conf = conf
        ctx.mark_non_differentiable(indices)
        return out, indices

    @staticmethod
    def backward(ctx, grad, _):
        input, indices = ctx.saved_tensors
        kernel_size, stride, padding, dilation, ceil_mode = ctx.conf
        pairs = [list(v) if isinstance(v, (tuple, list)) else [v] for v in
                 (kernel_size, [] if stride is None else stride, padding, dilation)]
        return torch.ops.aten.max_pool2d_with_indices_backward(
            grad, input, *pairs, ceil_mode, indices), None


# torch module types convert replaces, and how: ``{type: (module, algo) -> our module}``
CONVERTERS = {nn.Linear: lambda m, algo: Linear.from_torch(m),
              nn.Conv2d: lambda m, algo: Conv2d.from_torch(m, algo=algo),
              nn.LSTM: lambda m, algo: LSTM.from_torch(m),
              nn.GRU: lambda m, algo: GRU.from_torch(m),
              nn.MaxPool2d: lambda m, algo: MaxPool2d.from_torch(m)}


def convert(model: nn.Module, fuse=True, algo="auto", verbose=False, report=None):
    """Replaces, in place, every ``nn.Linear``, ``nn.Conv2d``, ``nn.LSTM``,
    ``nn.GRU`` and ``nn.MaxPool2d`` of ``model`` by this module's
    (:data:`CONVERTERS`), and with
    ``fuse``:

    * each ``Conv2d, ReLU, MaxPool2d`` run of an ``nn.Sequential`` that the
      fused block takes by one :class:`ConvReLUMaxPool2d` (the run's
      modules are renumbered; with ``algo`` "auto" or one of the block's,
      :data:`schedules.FUSED_ALGOS`);
    * each ``Conv2d -> BatchNorm2d -> ReLU/ReLU6`` chain of the forward
      (either link optional; found by ``torch.fx``, see
      :mod:`schedules.fusion`) into one convolution while the BatchNorm and
      activation are in eval mode: the BatchNorm folded into the conv's
      weight and bias, the activation its epilogue; in training mode the
      three run apart, exactly as torch's (``train()`` un-folds, ``eval()``
      folds again; parameters, buffers and ``state_dict`` are untouched);
    * each such chain with a residual ``add`` before the activation, or
      whose activation module is called more than once, in a module's own
      forward: that forward rewritten so the chain is one call of the conv
      (:func:`schedules.fusion.find_tails`; the shortcut in the kernel's
      epilogue in eval mode).

    Returns ``model``; what was converted, fused and left to torch is
    ``model.tiramisu_report`` (a :class:`schedules.fusion.ConvertReport`),
    printed with ``verbose=True``; ``report``: a list that also receives one
    ``"name: Torch -> schedules.nn.Ours"`` line per module converted."""
    chains, how, functions = find_chains(model) if fuse else ({}, "no fusion", {})
    tails = find_tails(model, chains) if fuse else []
    lines = report
    report = ConvertReport(functions=dict(functions), how=how)
    _convert(model, fuse, algo, {**chains, **{id(t.conv): t for _, _, ts in tails for t in ts}},
             report, "")
    if lines is not None:
        lines += [f"{name}: {torch_type} -> {ours}" for name, torch_type, ours in report.converted]
    live = [g for g in chains.values() if isinstance(g.conv, Conv2d)]
    _stand_ins(model, {id(m): g for g in live for m in (g.bn, g.act) if m is not None})
    names = {id(m): n for n, m in model.named_modules()}
    for g in live:
        g.conv.__dict__["_fusion"] = g
        report.fused.append((g.names(names), _chain_text(g)))
    in_tails = set()
    for parent, code, chains_of in tails:
        if not all(isinstance(t.conv, Conv2d) for t in chains_of):
            continue                    # (a conv left to torch: the forward stays as written)
        for t in chains_of:
            t.conv.__dict__["_tail"] = t
            report.fused.append((t.names(names), _chain_text(t)))
            in_tails |= {id(m) for m in (t.bn, t.act) if m is not None}
            if report.functions.get(t.function):        # (the add is the conv's now)
                report.functions[t.function] -= 1
        parent.forward = type(code).forward.__get__(parent)
    report.functions = {k: v for k, v in report.functions.items() if v}
    # (MaxPool2d subclasses torch's: each module is listed once, by its name)
    ours = tuple(STAND_INS.values()) + (Linear, Conv2d, ConvReLUMaxPool2d, SparseConv2d,
                                        MaxPool2d, _Recurrent, nn.Identity)
    listed = {r[0] for r in report.left_to_torch + report.converted}
    report.left_to_torch += [(n, type(m).__name__, LEFT.get(type(m), "no schedules.nn module"))
                             for n, m in model.named_modules()
                             if n and not m._modules and not isinstance(m, ours)
                             and n not in listed and id(m) not in in_tails]
    model.tiramisu_report = report
    if verbose:
        print(report)
    return model


# why convert leaves a module type to torch (the rest: "no schedules.nn module")
_UNFUSED = ("not fused: fusion needs it called once, as the only user of a converted "
            "Conv2d's output or of that conv's BatchNorm's, with fuse=True")
LEFT = {nn.BatchNorm2d: _UNFUSED, nn.ReLU: _UNFUSED, nn.ReLU6: _UNFUSED}


def _convert(model, fuse, algo, chains, report, prefix):
    if fuse and isinstance(model, nn.Sequential) and algo in ("auto",) + FUSED_ALGOS:
        fused = _fused(model, algo, report, prefix)    # (an algo the block has not: no trios)
        model._modules.clear()
        for k, m in enumerate(fused):
            model.add_module(str(k), m)
    for name, child in list(model.named_children()):
        full = prefix + name
        convert_one = CONVERTERS.get(type(child))
        if convert_one is None:
            _convert(child, fuse, algo, chains, report, full + ".")
            continue
        try:
            new = convert_one(child, algo)
        except ValueError as e:             # a setting our module does not take: torch's stays
            report.left_to_torch.append((full, type(child).__name__, str(e)))
            continue
        setattr(model, name, new)
        report.converted.append((full, type(child).__name__, f"schedules.nn.{type(new).__name__}"))
        if id(child) in chains:
            chains[id(child)].conv = new
    return model


def _stand_ins(model, groups):
    """Replaces each chain's BatchNorm and activation by its stand-in."""
    for name, child in list(model.named_children()):
        group = groups.get(id(child))
        if group is None:
            _stand_ins(child, groups)
            continue
        new = STAND_INS[type(child)].adopt(child, group)
        setattr(model, name, new)
        if child is group.bn:
            group.bn = new
        else:
            group.act = new


def _chain_text(group):
    parts = ["BatchNorm2d folded into the weight and bias" if group.bn is not None else "",
             "the residual add" if getattr(group, "add", None) else "",
             f"{group.activation} as the epilogue" if group.activation else ""]
    return " + ".join(p for p in parts if p) + " (eval mode; apart in training mode)"


def _fused(seq, algo, report, prefix):
    """The modules of ``seq`` with each fusable Conv2d-ReLU-MaxPool2d run as
    one :class:`ConvReLUMaxPool2d`."""
    mods, out, k = list(seq), [], 0
    while k < len(mods):
        trio = mods[k:k + 3]
        if len(trio) == 3 and type(trio[0]) is nn.Conv2d and isinstance(trio[1], nn.ReLU) \
                and isinstance(trio[2], nn.MaxPool2d):
            try:
                out.append(ConvReLUMaxPool2d.from_torch(nn.Sequential(*trio), algo=algo))
                report.fused.append((f"{prefix}{k}..{k + 2}", "Conv2d + ReLU + MaxPool2d as one "
                                     f"ConvReLUMaxPool2d (now {prefix}{len(out) - 1})"))
                k += 3
                continue
            except ValueError:          # not a shape the fused block takes: keep the three
                pass
        out.append(mods[k])
        k += 1
    return out

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
from schedules.api import FUSED_ALGOS
from schedules.fusion import STAND_INS, ConvertReport, find_chains
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
    :mod:`schedules.conv_ops`), "direct", "depthwise", "im2col" or "spatial_pack"
    (float32 shapes the library takes; others use the plain kernel)."""

    algo = "auto"

    def forward(self, input):
        unbatched = input.dim() == 3
        x = input.unsqueeze(0) if unbatched else input
        group = self.__dict__.get("_fusion")         # set by convert: see schedules.fusion
        if group is not None and group.active():
            y = self._fused(x, group)
        else:
            y = ops.conv2d(x, self.weight, self.bias, list(self.stride), _padding(self),
                           list(self.dilation), self.groups, algo=self.algo)
        return y.squeeze(0) if unbatched else y

    def _fused(self, x, group):
        """The chain's conv with its BatchNorm folded into the weight and bias
        and its activation as the epilogue: ReLU inside the kernel (the
        fused block with ``pool=1``) where that takes the conv, else applied
        in place to the conv's fresh output."""
        weight, bias = group.folded(self.weight, self.bias)
        pad = _padding(self)
        in_kernel = (group.activation == "relu" and self.algo == "auto" and self.groups == 1
                     and tuple(self.stride) == (1, 1) and tuple(self.dilation) == (1, 1)
                     and weight.dtype == torch.float32)
        if in_kernel:
            return ops.conv_relu_maxpool(x, weight, bias, [1, 1], pad, [1, 1], 1, pool=1)
        y = ops.conv2d(x, weight, bias, list(self.stride), pad, list(self.dilation),
                       self.groups, algo=self.algo)
        if group.activation == "relu":
            return y.clamp_(min=0)
        return y.clamp_(0, 6) if group.activation == "relu6" else y

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
    no backward kernels yet, asking for a gradient raises)."""

    _torch = None

    def __init__(self, module):
        super().__init__()
        if not isinstance(module, self._torch):
            raise TypeError(f"{type(self).__name__}.from_torch: expected an "
                            f"{self._torch.__name__}, got {type(module).__name__}")
        if module.bidirectional or getattr(module, "proj_size", 0):
            raise ValueError(f"{type(self).__name__}.from_torch: bidirectional and proj_size are "
                             "not supported")
        self.num_layers, self.batch_first = module.num_layers, module.batch_first
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
        out = self._op(x, [getattr(self, n) for n in self._names], self.num_layers, *state)
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


# torch module types convert replaces, and how: ``{type: (module, algo) -> our module}``.
# nn.LSTM / nn.GRU are not here yet (their ops have no backward): the recurrent
# conversion adds its lines here and drops their entries from LEFT below.
CONVERTERS = {nn.Linear: lambda m, algo: Linear.from_torch(m),
              nn.Conv2d: lambda m, algo: Conv2d.from_torch(m, algo=algo)}


def convert(model: nn.Module, fuse=True, algo="auto", verbose=False):
    """Replaces, in place, every ``nn.Linear`` and ``nn.Conv2d`` of ``model``
    by this module's (:data:`CONVERTERS`), and with ``fuse``:

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
      folds again; parameters, buffers and ``state_dict`` are untouched).

    Returns ``model``; what was converted, fused and left to torch is
    ``model.tiramisu_report`` (a :class:`schedules.fusion.ConvertReport`),
    printed with ``verbose=True``."""
    chains, how, functions = find_chains(model) if fuse else ({}, "no fusion", {})
    report = ConvertReport(functions=dict(functions), how=how)
    _convert(model, fuse, algo, chains, report, "")
    live = [g for g in chains.values() if isinstance(g.conv, Conv2d)]
    _stand_ins(model, {id(m): g for g in live for m in (g.bn, g.act) if m is not None})
    names = {id(m): n for n, m in model.named_modules()}
    for g in live:
        g.conv.__dict__["_fusion"] = g
        report.fused.append((g.names(names), _chain_text(g)))
    ours = tuple(STAND_INS.values()) + (Linear, Conv2d, ConvReLUMaxPool2d, SparseConv2d,
                                        _Recurrent, nn.Identity)
    report.left_to_torch += [(n, type(m).__name__, LEFT.get(type(m), "no schedules.nn module"))
                             for n, m in model.named_modules()
                             if n and not m._modules and not isinstance(m, ours)
                             and n not in {r[0] for r in report.left_to_torch}]
    model.tiramisu_report = report
    if verbose:
        print(report)
    return model


# why convert leaves a module type to torch (the rest: "no schedules.nn module")
_UNFUSED = ("not fused: fusion needs it called once, as the only user of a converted "
            "Conv2d's output or of that conv's BatchNorm's, with fuse=True")
LEFT = {nn.BatchNorm2d: _UNFUSED, nn.ReLU: _UNFUSED, nn.ReLU6: _UNFUSED,
        nn.LSTM: "not converted by convert: schedules.nn.LSTM.from_torch converts it "
                 "(forward only)",
        nn.GRU: "not converted by convert: schedules.nn.GRU.from_torch converts it "
                "(forward only)"}


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

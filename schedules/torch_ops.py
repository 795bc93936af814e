"""The operator library as PyTorch operators (imports torch), with aten's
schemas where aten has the op (``torch.ops.aten.conv2d.default._schema``:
the same argument names, types and defaults; ``algo`` is ours, keyword
only)::

    torch.ops.tiramisu.gemm(self, mat2)                                    # aten::mm
    torch.ops.tiramisu.conv2d(input, weight, bias=None, stride=1, padding=0, dilation=1,
                              groups=1, *, algo="auto")                    # aten::conv2d
    torch.ops.tiramisu.conv2d(input, weight, bias=None, stride=1, padding="valid",
                              dilation=1, groups=1, *, algo="auto")        # conv2d.padding
    torch.ops.tiramisu.conv_relu_maxpool(input, weight, bias=None, stride=1, padding=0,
                                         dilation=1, groups=1, *, pool=2, algo="auto")
                                         # (and .padding: "valid" / "same")
    torch.ops.tiramisu.sparse_conv2d(input, rowptr, colidx, values, weight_size, bias=None,
                                     stride=1, padding=0, dilation=1)  # CSR weight, float32
    torch.ops.tiramisu.lstm(input, params, num_layers, h0, c0) -> (y, h_n, c_n)  # forward only
    torch.ops.tiramisu.gru(input, params, num_layers, h0) -> (y, h_n)            # forward only

``stride``, ``padding``, ``dilation`` are lists of 1 or 2 ints as aten takes
them (``[2]`` is ``[2, 2]``); every argument aten refuses is refused here
too, by :meth:`schedules.problems.conv.ConvProblem.from_meta` (RuntimeError
naming the argument), and an unknown ``algo`` is refused (ValueError).
Each op has a backward made of compiled kernels, themselves ops
(``gemm`` twice; ``conv2d_grad_input``, ``conv2d_grad_weight``;
``conv_relu_maxpool_grad`` then the two conv ones), float32 and float64.
``conv2d_grad_input`` of a float32 stride-1 conv runs as the forward
convolution of the output's gradient with the flipped, group-transposed
weight (:func:`flipped_weight`), through the forward solvers and their find
step, and ``conv2d_grad_weight`` of a float32 pointwise (1x1, stride 1, no
padding, groups 1) conv as one GEMM per image (the input read transposed);
other shapes and float64 run the plain kernels.  Every op returns
fresh tensors (:func:`fresh_outputs`); ``gemm`` reads a transposed
``mat2`` (``weight.t()``) in place.
float32 forwards run the library's solvers (:mod:`schedules.api`; a forced
``algo`` there); float64, and float32 shapes those do not take (unequal
stride/padding/dilation pairs, a fused block with groups), run the plain
kernels of :mod:`schedules.solvers.backward`, whatever ``algo``.

Adding an op is one :func:`_op` call: a schema, an implementation, a fake
(shape) function and optionally a backward (see the ones below).
"""
from __future__ import annotations


import torch

from tiramisu_py.runtime.torch_bridge import contiguous, define

from . import api
from .core.kernels import kernel
from .problems.conv import ConvProblem, ConvShape, padding_of, pair
from .registry import SOLVERS
from .solvers import backward as BW
from .weights.csr import csr_weights

NS = "tiramisu"
FLOATS = {torch.float32: "float32", torch.float64: "float64"}


def _op(name, schema, impl, fake, backward=None, setup_context=None):
    def owned(*args, **kwargs):
        return fresh_outputs(impl(*args, **kwargs), args)
    owned.__name__, owned.__doc__ = impl.__name__, impl.__doc__
    return define(f"{NS}::{name}", schema, owned, fake, backward, setup_context)


def _tensors(args):
    for a in args:
        if isinstance(a, torch.Tensor):
            yield a
        elif isinstance(a, (list, tuple)):
            yield from _tensors(a)


def fresh_outputs(result, args):
    """``result`` (a tensor or a tuple of them) with no output aliasing
    anything but its own fresh storage: an output sharing storage with an
    argument is copied, and an output that is a view (im2col's reshape of
    the kernel's output) becomes a tensor of its own over the same fresh
    storage (no copy).  So every op returns tensors that in-place ops after
    it (``ReLU(inplace=True)``) may modify under autograd."""
    if isinstance(result, (tuple, list)):
        return type(result)(fresh_outputs(r, args) for r in result)
    if not isinstance(result, torch.Tensor):
        return result
    mine = result.untyped_storage().data_ptr()
    if result.untyped_storage().nbytes() and any(
            t.untyped_storage().data_ptr() == mine for t in _tensors(args)):
        return result.clone()
    if result._base is None:
        return result
    own = result.new_empty(0)
    return own.set_(result.untyped_storage(), result.storage_offset(), result.shape,
                    result.stride())


def _dtype(op, *ts):
    dts = {t.dtype for t in ts if t is not None}
    if len(dts) != 1 or next(iter(dts)) not in FLOATS:
        raise TypeError(f"tiramisu::{op}: expected float32 or float64 tensors of one dtype, "
                        f"got {', '.join(str(t.dtype) for t in ts if t is not None)}")
    return FLOATS[next(iter(dts))]


def _kernel(key, build):
    return kernel(("torch_ops",) + key, build, None)


def _conv(op, xshape, wshape, stride, padding, dilation, groups):
    """The problem's shape of input ``xshape`` and weights ``wshape`` (ints or
    SymInts), checked."""
    return ConvProblem.from_meta(op, xshape, wshape, stride, padding, dilation, groups,
                                 check=torch._check)


def _square(s: ConvShape):
    return s.sh == s.sw and s.ph == s.pw and s.dh == s.dw


# ------------------------------------------------------------------ gemm
def _gemm(a, b):
    dt = _dtype("gemm", a, b)
    if a.dim() != 2 or b.dim() != 2 or a.shape[1] != b.shape[0]:
        raise ValueError(f"tiramisu::gemm: shapes {tuple(a.shape)} @ {tuple(b.shape)} do not match")
    a = contiguous(a)
    if dt == "float32":         # a transposed b (``weight.t()``) is read as it is stored
        return api.gemm(a, b if b.t().is_contiguous() else contiguous(b))
    b = contiguous(b)
    (n, k), m = a.shape, b.shape[1]
    return _kernel(("matmul", n, m, k, dt), lambda: BW.matmul(n, m, k, dt))(a, b)


def _gemm_fake(a, b):
    torch._check(a.dim() == 2 and b.dim() == 2 and a.shape[1] == b.shape[0],
                 lambda: f"tiramisu::gemm: shapes {tuple(a.shape)} @ {tuple(b.shape)} do not match")
    return a.new_empty((a.shape[0], b.shape[1]))


def _gemm_setup(ctx, inputs, output):
    ctx.save_for_backward(*inputs)


def _gemm_backward(ctx, g):
    a, b = ctx.saved_tensors
    ga = gemm(g, b.t()) if ctx.needs_input_grad[0] else None      # dA = dC @ B^T
    gb = gemm(a.t(), g) if ctx.needs_input_grad[1] else None      # dB = A^T @ dC
    return ga, gb


gemm = _op("gemm", "(Tensor self, Tensor mat2) -> Tensor", _gemm, _gemm_fake, _gemm_backward,
           _gemm_setup)


# ------------------------------------------------------------------ conv2d
# aten's conv2d arguments (``torch.ops.aten.conv2d.default._schema``), defaults included
_CONV_DEFAULTS = dict(stride=(1, 1), padding=(0, 0), dilation=(1, 1), groups=1)
_CONV = ("Tensor input, Tensor weight, Tensor? bias=None, SymInt[2] stride=1, {padding}, "
         "SymInt[2] dilation=1, SymInt groups=1")
_CONV_INT = _CONV.format(padding="SymInt[2] padding=0")
_CONV_STR = _CONV.format(padding="str padding=\"valid\"")


def _algo(op, algo):
    """``algo`` checked against the op's solvers (float64 and the shapes
    the solvers do not take run the plain kernel whatever ``algo``)."""
    names = ("auto",) + tuple(dict.fromkeys(s.name for s in SOLVERS[op]))
    if algo not in names:
        raise ValueError(f"tiramisu::{op}: algo must be one of {', '.join(names)}; got {algo!r}")


def _str_padding(op, weight, stride, padding, dilation):
    """aten's ``conv2d.padding``: "valid" or "same" as a (height, width)
    list (:func:`schedules.problems.conv.padding_of`: "same" needs stride 1
    and an even total padding)."""
    st, dl = (pair(v, name, 1, f"tiramisu::{op}") for v, name in ((stride, "stride"),
                                                                 (dilation, "dilation")))
    p = padding_of(padding, weight.shape[2], weight.shape[3], st, dl, f"tiramisu::{op}")
    return list(p) if isinstance(p, tuple) else [p, p]


def _conv2d(input, weight, bias=None, stride=(1, 1), padding=(0, 0), dilation=(1, 1), groups=1,
            *, algo="auto"):
    dt = _dtype("conv2d", input, weight, bias)
    _algo("conv2d", algo)
    x, weight, bias = contiguous(input), contiguous(weight), contiguous(bias)
    s = _conv("conv2d", x.shape, weight.shape, stride, padding, dilation, groups)
    if dt == "float32" and _square(s):
        return api.conv2d(x, weight, bias, stride=s.sh, padding=s.ph,
                          dilation=s.dh, groups=groups, algo=algo)
    k = _kernel(("conv", s, dt, bias is not None), lambda: BW.conv_forward(s, dt, bias is not None))
    return k(data=x, weight=weight, **({"bias": bias} if bias is not None else {}))


def _conv2d_fake(input, weight, bias=None, stride=(1, 1), padding=(0, 0), dilation=(1, 1),
                 groups=1, *, algo="auto"):
    s = _conv("conv2d", input.shape, weight.shape, stride, padding, dilation, groups)
    return input.new_empty((s.n, s.co, s.ho, s.wo))


def _conv2d_str(input, weight, bias=None, stride=(1, 1), padding="valid", dilation=(1, 1),
                groups=1, *, algo="auto"):
    return _conv2d(input, weight, bias, stride,
                   _str_padding("conv2d", weight, stride, padding, dilation), dilation, groups,
                   algo=algo)


def _conv2d_str_fake(input, weight, bias=None, stride=(1, 1), padding="valid", dilation=(1, 1),
                     groups=1, *, algo="auto"):
    return _conv2d_fake(input, weight, bias, stride,
                        _str_padding("conv2d", weight, stride, padding, dilation), dilation,
                        groups)


def _conv_args(op, inputs, keyword_only_inputs):
    """``(input, weight, bias, [stride, padding, dilation, groups])`` of a
    conv op's call (torch hands setup_context the positional arguments
    given, the defaults left out), padding as a (height, width) list."""
    x, weight, bias = (list(inputs[:3]) + [None])[:3]
    given = dict(zip(("stride", "padding", "dilation", "groups"), inputs[3:]))
    conf = {k: given.get(k, v) for k, v in _CONV_DEFAULTS.items()}
    st, pd, dl, g = (conf[k] for k in ("stride", "padding", "dilation", "groups"))
    if isinstance(pd, str):
        pd = _str_padding(op, weight, st, pd, dl)
    lists = [list(v) * (2 if len(v) == 1 else 1) for v in (st, pd, dl)]
    return x, weight, bias, lists + [g]


def _conv2d_setup(ctx, inputs, keyword_only_inputs, output):
    x, weight, bias, ctx.conf = _conv_args("conv2d", inputs, keyword_only_inputs)
    ctx.save_for_backward(x, weight)
    ctx.has_bias, ctx.n_inputs = bias is not None, len(inputs)


def _conv2d_backward(ctx, g):
    x, weight = ctx.saved_tensors
    gx = gw = gb = None
    if ctx.needs_input_grad[0]:
        gx = conv2d_grad_input(g, weight, list(x.shape), *ctx.conf)
    if ctx.needs_input_grad[1] or (ctx.has_bias and ctx.needs_input_grad[2]):
        gw, gb = conv2d_grad_weight(g, x, list(weight.shape), *ctx.conf)
    return ((gx, gw, gb if ctx.has_bias else None) + (None,) * ctx.n_inputs)[:ctx.n_inputs]


def _grad_input(g, weight, input_size, stride, padding, dilation, groups):
    dt = _dtype("conv2d_grad_input", g, weight)
    g, weight = contiguous(g), contiguous(weight)
    s = _conv("conv2d_grad_input", input_size, weight.shape, stride,
              padding, dilation, groups)
    if dt == "float32" and _square(s) and s.sh == 1 and s.ph <= s.dh * (s.kh - 1) \
            and s.pw <= s.dw * (s.kw - 1) and min(s.n, s.ci, s.co, s.ho, s.wo) > 0:
        # stride 1: the gradient is the convolution of the output's gradient
        # with the flipped, group-transposed weight, run by the forward solvers
        return api.conv2d(g, flipped_weight(weight, groups), None, stride=1,
                          padding=s.dh * (s.kh - 1) - s.ph, dilation=s.dh, groups=groups)
    return _kernel(("grad_input", s, dt), lambda: BW.conv_grad_input(s, dt))(grad=g, weight=weight)


def flipped_weight(weight, groups):
    """The weight of the convolution that maps an output gradient to the
    input gradient (stride 1): per group ``(Co/g, Ci/g)`` transposed to
    ``(Ci/g, Co/g)``, each kernel rotated by 180 degrees; ``(Ci, Co/g, Kh, Kw)``."""
    co, cig, kh, kw = weight.shape
    w = weight.reshape(groups, co // groups, cig, kh, kw).transpose(1, 2)
    return w.flip(-1, -2).reshape(groups * cig, co // groups, kh, kw).contiguous()


def _grad_input_fake(g, weight, input_size, stride, padding, dilation, groups):
    return g.new_empty(input_size)


def _grad_weight(g, x, weight_size, stride, padding, dilation, groups):
    dt = _dtype("conv2d_grad_weight", g, x)
    g, x = contiguous(g), contiguous(x)
    s = _conv("conv2d_grad_weight", x.shape, weight_size, stride, padding,
              dilation, groups)
    if dt == "float32" and (s.kh, s.kw, s.sh, s.sw, s.ph, s.pw, s.groups) == (1, 1, 1, 1, 0, 0, 1) \
            and min(s.n, s.ci, s.co, s.ho, s.wo) > 0:
        # a pointwise conv: per image grad (Co x P) @ input^T, the input (Ci x P)
        # read transposed in place by the library's GEMM
        p, gw = s.ho * s.wo, None
        for i in range(s.n):
            part = api.gemm(g[i].reshape(s.co, p), x[i].reshape(s.ci, p).t())
            gw = part if gw is None else gw.add_(part)
        return gw.reshape(weight_size), g.sum((0, 2, 3))
    r = _kernel(("grad_weight", s, dt), lambda: BW.conv_grad_weight(s, dt))(data=x, grad=g)
    return r["grad_weight"], r["grad_bias"]


def _grad_weight_fake(g, x, weight_size, stride, padding, dilation, groups):
    return g.new_empty(weight_size), g.new_empty((weight_size[0],))


_CONF = "SymInt[2] stride, SymInt[2] padding, SymInt[2] dilation, SymInt groups"
conv2d = _op("conv2d", f"({_CONV_INT}, *, str algo='auto') -> Tensor",
             _conv2d, _conv2d_fake, _conv2d_backward, _conv2d_setup)
_op("conv2d.padding", f"({_CONV_STR}, *, str algo='auto') -> Tensor",
    _conv2d_str, _conv2d_str_fake, _conv2d_backward, _conv2d_setup)
conv2d_grad_input = _op("conv2d_grad_input",
                        f"(Tensor grad, Tensor weight, SymInt[4] input_size, {_CONF}) -> Tensor",
                        _grad_input, _grad_input_fake)
conv2d_grad_weight = _op("conv2d_grad_weight",
                         f"(Tensor grad, Tensor input, SymInt[4] weight_size, {_CONF}) "
                         "-> (Tensor, Tensor)",
                         _grad_weight, _grad_weight_fake)


# ------------------------------------------------------------------ fused block
def _fused(input, weight, bias=None, stride=(1, 1), padding=(0, 0), dilation=(1, 1), groups=1,
           *, pool=2, algo="auto"):
    dt = _dtype("conv_relu_maxpool", input, weight, bias)
    _algo("conv_relu_maxpool", algo)
    x, weight, bias = contiguous(input), contiguous(weight), contiguous(bias)
    s = _fused_conv(x, weight, stride, padding, dilation, groups, pool)
    if dt == "float32" and _square(s) and s.groups == 1:
        return api.conv_relu_maxpool(x, weight, bias, s.sh, s.ph, s.dh, pool=pool, algo=algo)
    bias = x.new_zeros((s.co,)) if bias is None else bias
    return _kernel(("fused", s, pool, dt), lambda: BW.fused_forward(s, pool, dt))(
        data=x, weight=weight, bias=bias)


def _fused_conv(x, weight, stride, padding, dilation, groups, pool):
    s = _conv("conv_relu_maxpool", x.shape, weight.shape, stride, padding, dilation, groups)
    torch._check(1 <= pool <= min(s.ho, s.wo),
                 lambda: f"tiramisu::conv_relu_maxpool: pool must be in [1, {min(s.ho, s.wo)}], "
                         f"got {pool}")
    return s


def _fused_fake(input, weight, bias=None, stride=(1, 1), padding=(0, 0), dilation=(1, 1),
                groups=1, *, pool=2, algo="auto"):
    s = _fused_conv(input, weight, stride, padding, dilation, groups, pool)
    return input.new_empty((s.n, s.co, s.ho // pool, s.wo // pool))


def _fused_str(input, weight, bias=None, stride=(1, 1), padding="valid", dilation=(1, 1),
               groups=1, *, pool=2, algo="auto"):
    return _fused(input, weight, bias, stride,
                  _str_padding("conv_relu_maxpool", weight, stride, padding, dilation), dilation,
                  groups, pool=pool, algo=algo)


def _fused_str_fake(input, weight, bias=None, stride=(1, 1), padding="valid", dilation=(1, 1),
                    groups=1, *, pool=2, algo="auto"):
    return _fused_fake(input, weight, bias, stride,
                       _str_padding("conv_relu_maxpool", weight, stride, padding, dilation),
                       dilation, groups, pool=pool)


def _fused_setup(ctx, inputs, keyword_only_inputs, output):
    x, weight, bias, ctx.conf = _conv_args("conv_relu_maxpool", inputs, keyword_only_inputs)
    ctx.has_bias, ctx.n_inputs = bias is not None, len(inputs)
    ctx.save_for_backward(x, weight, x.new_zeros((weight.shape[0],)) if bias is None else bias)
    ctx.pool = keyword_only_inputs.get("pool", 2)


def _fused_backward(ctx, g):
    x, weight, bias = ctx.saved_tensors
    gz = conv_relu_maxpool_grad(g, x, weight, bias, *ctx.conf, ctx.pool)
    gx = conv2d_grad_input(gz, weight, list(x.shape), *ctx.conf) if ctx.needs_input_grad[0] else None
    gw = gb = None
    if ctx.needs_input_grad[1] or (ctx.has_bias and ctx.needs_input_grad[2]):
        gw, gb = conv2d_grad_weight(gz, x, list(weight.shape), *ctx.conf)
    return ((gx, gw, gb if ctx.has_bias else None) + (None,) * ctx.n_inputs)[:ctx.n_inputs]


def _fused_grad(g, x, weight, bias, stride, padding, dilation, groups, pool):
    dt = _dtype("conv_relu_maxpool_grad", g, x, weight, bias)
    g, x, weight, bias = (contiguous(t) for t in (g, x, weight, bias))
    s = _fused_conv(x, weight, stride, padding, dilation, groups, pool)
    return _kernel(("fused_grad", s, pool, dt), lambda: BW.fused_grad_pre(s, pool, dt))(
        data=x, weight=weight, bias=bias, grad=g)


def _fused_grad_fake(g, x, weight, bias, stride, padding, dilation, groups, pool):
    s = _fused_conv(x, weight, stride, padding, dilation, groups, pool)
    return x.new_empty((s.n, s.co, s.ho, s.wo))


_FUSED_KW = "*, int pool=2, str algo='auto'"
conv_relu_maxpool = _op("conv_relu_maxpool", f"({_CONV_INT}, {_FUSED_KW}) -> Tensor",
                        _fused, _fused_fake, _fused_backward, _fused_setup)
_op("conv_relu_maxpool.padding", f"({_CONV_STR}, {_FUSED_KW}) -> Tensor",
    _fused_str, _fused_str_fake, _fused_backward, _fused_setup)
conv_relu_maxpool_grad = _op(
    "conv_relu_maxpool_grad",
    f"(Tensor grad, Tensor input, Tensor weight, Tensor bias, {_CONF}, int pool) -> Tensor",
    _fused_grad, _fused_grad_fake)

# ------------------------------------------------------------------ sparse conv
def _sparse_conv2d(x, rowptr, colidx, values, weight_size, bias=None, stride=(1, 1),
                   padding=(0, 0), dilation=(1, 1)):
    _dtype("sparse_conv2d", x, values, bias)
    _conv("sparse_conv2d", x.shape, weight_size, stride, padding, dilation, 1)
    if values.dtype != torch.float32:
        raise TypeError("tiramisu::sparse_conv2d: the sparse kernel is float32 only, got "
                        f"{values.dtype}")
    csr = csr_weights(rowptr, colidx, values, tuple(weight_size))     # converted once per weight
    return api.sparse_conv2d(contiguous(x), csr, bias, tuple(stride), tuple(padding), tuple(dilation))


def _sparse_conv2d_fake(x, rowptr, colidx, values, weight_size, bias=None, stride=(1, 1),
                        padding=(0, 0), dilation=(1, 1)):
    s = _conv("sparse_conv2d", x.shape, weight_size, stride, padding, dilation, 1)
    return x.new_empty((s.n, s.co, s.ho, s.wo))


def _sparse_flat(rowptr, colidx, weight_size):
    """Flat positions in the dense (Cout, Cin*KH*KW) weight of the nonzeros."""
    co, k = weight_size[0], weight_size[1] * weight_size[2] * weight_size[3]
    rows = torch.repeat_interleave(torch.arange(co), (rowptr[1:] - rowptr[:-1]).long())
    return rows * k + colidx.long()


def _sparse_setup(ctx, inputs, output):
    x, rowptr, colidx, values, weight_size = inputs[:5]
    ctx.save_for_backward(x, rowptr, colidx, values)
    _, _, bias, ctx.conf = _conv_args("sparse_conv2d", (x, None) + tuple(inputs[5:]), {})
    ctx.weight_size, ctx.has_bias, ctx.n_inputs = list(weight_size), bias is not None, len(inputs)


def _sparse_backward(ctx, g):
    """Through the dense kernels: grad x with the weight scattered dense; the
    values' gradient is the dense weight gradient at the nonzeros (the
    sparsity pattern is fixed, as in pruned training)."""
    x, rowptr, colidx, values = ctx.saved_tensors
    flat = _sparse_flat(rowptr, colidx, ctx.weight_size)
    gx = gv = gb = None
    if ctx.needs_input_grad[0]:
        n = ctx.weight_size[0] * ctx.weight_size[1] * ctx.weight_size[2] * ctx.weight_size[3]
        dense = values.new_zeros(n).index_add(0, flat, values).reshape(ctx.weight_size)
        gx = conv2d_grad_input(g, dense, list(x.shape), *ctx.conf)
    if ctx.needs_input_grad[3] or ctx.needs_input_grad[5]:
        gw, gb = conv2d_grad_weight(g, x, ctx.weight_size, *ctx.conf)
        gv = gw.reshape(-1)[flat]
    return (gx, None, None, gv, None, gb if ctx.has_bias else None, None, None, None)[:ctx.n_inputs]


sparse_conv2d = _op(
    "sparse_conv2d",
    "(Tensor input, Tensor rowptr, Tensor colidx, Tensor values, SymInt[4] weight_size, "
    "Tensor? bias=None, SymInt[2] stride=1, SymInt[2] padding=0, SymInt[2] dilation=1) -> Tensor",
    _sparse_conv2d, _sparse_conv2d_fake, _sparse_backward, _sparse_setup)


# ------------------------------------------------------------------ recurrent
def _rnn_layers(op, weights, num_layers):
    per = len(weights) // num_layers if num_layers > 0 else 0
    torch._check(num_layers >= 1 and per in (2, 4) and per * num_layers == len(weights),
                 lambda: f"tiramisu::{op}: weights must be num_layers x [w_ih, w_hh(, b_ih, b_hh)] "
                         f"(as module.all_weights flattened), got {len(weights)} tensors for "
                         f"{num_layers} layers")
    return [list(weights[i * per:(i + 1) * per]) for i in range(num_layers)]


def _rnn_fake(op, x, weights, num_layers, gates):
    layers = _rnn_layers(op, weights, num_layers)
    torch._check(x.dim() == 3, lambda: f"tiramisu::{op}: x must be (T, B, I)")
    h = layers[0][1].shape[1]
    torch._check(layers[0][1].shape[0] == gates * h,
                 lambda: f"tiramisu::{op}: w_hh of layer 0 must be ({gates}*H, H)")
    t, b = x.shape[0], x.shape[1]
    return x.new_empty((t, b, h)), x.new_empty((num_layers, b, h))


def _lstm(x, weights, num_layers, h0=None, c0=None):
    _dtype("lstm", x, *weights)
    y, (hn, cn) = api.lstm(contiguous(x).detach(), [[contiguous(w).detach() for w in layer]
                                       for layer in _rnn_layers("lstm", weights, num_layers)],
                       None if h0 is None else contiguous(h0).detach(),
                       None if c0 is None else contiguous(c0).detach())
    return y, hn, cn


def _lstm_fake(x, weights, num_layers, h0=None, c0=None):
    y, hn = _rnn_fake("lstm", x, weights, num_layers, 4)
    return y, hn, hn.new_empty(hn.shape)


def _gru(x, weights, num_layers, h0=None):
    _dtype("gru", x, *weights)
    y, hn = api.gru(contiguous(x).detach(), [[contiguous(w).detach() for w in layer]
                                for layer in _rnn_layers("gru", weights, num_layers)],
                None if h0 is None else contiguous(h0).detach())
    return y, hn


def _gru_fake(x, weights, num_layers, h0=None):
    return _rnn_fake("gru", x, weights, num_layers, 3)


# forward only: no backward kernels yet (asking for a gradient raises "has no backward")
lstm = _op("lstm", "(Tensor input, Tensor[] params, int num_layers, Tensor? h0=None, "
           "Tensor? c0=None) -> (Tensor, Tensor, Tensor)", _lstm, _lstm_fake)
gru = _op("gru", "(Tensor input, Tensor[] params, int num_layers, Tensor? h0=None) -> (Tensor, Tensor)",
          _gru, _gru_fake)

OPS = {"gemm": gemm, "conv2d": conv2d, "conv2d_grad_input": conv2d_grad_input,
       "conv2d_grad_weight": conv2d_grad_weight, "conv_relu_maxpool": conv_relu_maxpool,
       "conv_relu_maxpool_grad": conv_relu_maxpool_grad, "sparse_conv2d": sparse_conv2d,
       "lstm": lstm, "gru": gru}

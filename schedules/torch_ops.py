"""The operator library as PyTorch operators (imports torch), with aten's
schemas where aten has the op (``torch.ops.aten.conv2d.default._schema``:
the same argument names, types and defaults; ``algo`` is ours, keyword
only)::

    torch.ops.tiramisu.gemm(self, mat2)                                    # aten::mm
    torch.ops.tiramisu.matmul(self, other)                                 # aten::matmul
    torch.ops.tiramisu.conv2d(input, weight, bias=None, stride=1, padding=0, dilation=1,
                              groups=1, *, algo="auto")                    # aten::conv2d
    torch.ops.tiramisu.conv2d(input, weight, bias=None, stride=1, padding="valid",
                              dilation=1, groups=1, *, algo="auto")        # conv2d.padding
    torch.ops.tiramisu.conv_relu_maxpool(input, weight, bias=None, stride=1, padding=0,
                                         dilation=1, groups=1, *, pool=2, algo="auto")
                                         # (and .padding: "valid" / "same")
    torch.ops.tiramisu.sparse_conv2d(input, rowptr, colidx, values, weight_size, bias=None,
                                     stride=1, padding=0, dilation=1, groups=1)  # CSR, float32
                                     # (and .padding: "valid" / "same")
    torch.ops.tiramisu.lstm(input, params, num_layers, h0, c0, dropout_masks) -> (y, h_n, c_n)
    torch.ops.tiramisu.gru(input, params, num_layers, h0, dropout_masks) -> (y, h_n)
    torch.ops.tiramisu.lstm_train / gru_train: the same and the h states (L, T + 1, B, H) kept
    torch.ops.tiramisu.lstm_backward / gru_backward: their backward (an op, for torch.compile)

``stride``, ``padding``, ``dilation`` are lists of 1 or 2 ints as aten takes
them (``[2]`` is ``[2, 2]``); the input NCHW or unbatched CHW (the result
then CHW); ``padding="same"`` with an odd total padded as aten pads it (a
copy of the input with the extra zeros below and right, then
``total // 2`` on each side; the gradient cropped back); an input of 0
channels gives aten's result of 0 channels; every argument aten refuses is refused here
too, by :meth:`schedules.problems.conv.ConvProblem.from_meta` (RuntimeError
naming the argument), and an unknown ``algo`` is refused (ValueError).
Each op has a backward made of compiled kernels, themselves ops
(``gemm`` twice; ``matmul`` twice, summed over broadcast batch dimensions;
``conv2d_grad_input``, ``conv2d_grad_weight``; ``conv_relu_maxpool_grad`` then the two conv
ones; ``lstm``/``gru``: the forward recomputed keeping every layer's states, ``_train``'s
kept, then backpropagation through time, :mod:`schedules.solvers.rnn_train`), float32 and float64.
``conv2d_grad_input`` of a float32 conv runs as the forward convolution of
the output's gradient (spread out by the stride) with the flipped,
group-transposed weight (:func:`schedules.solvers.conv_grad.grad_input`),
through the forward solvers and their find step, and ``conv2d_grad_weight``
of a float32 conv of one group as GEMMs (a pointwise conv of one or two
images per image, its input read transposed; else one per chunk of images
over their im2col: :func:`schedules.solvers.conv_grad.grad_weight`), of a
stride-1 depthwise conv by its own vectorised kernel;
the fused block's gradient recomputes the convolution by the forward solvers;
other shapes and float64 run the plain kernels.  Every op returns
fresh tensors (:func:`schedules.torch_glue.fresh_outputs`); ``gemm`` reads a transposed
``mat2`` (``weight.t()``) in place.
float32 forwards run the library's solvers (:mod:`schedules.api`; a forced
``algo`` there); float64, and float32 shapes those do not take (unequal
stride/padding/dilation pairs), run the plain
kernels of :mod:`schedules.solvers.backward`, whatever ``algo``.

Adding an op is one :func:`schedules.torch_glue.op` call: a schema, an implementation, a fake
(shape) function and optionally a backward (see the ones below).
"""
from __future__ import annotations


import torch

from tiramisu_py.runtime.torch_bridge import contiguous

from . import api, plans
from . import torch_glue as glue
from .torch_rnn_ops import gru, gru_backward, gru_train, lstm, lstm_backward, lstm_train
from .blocks import outer_gemm
from .core import arrays as A
from .core import call_memo
from .core.kernels import kernel
from .problems.conv import ConvProblem, ConvShape, padding_of, pair, same_extra
from .problems.gemm import MatmulShapes
from .registry import SOLVERS
from .solvers import backward as BW
from .solvers import conv_grad
from .weights.csr import csr_weights

_op, _dtype = glue.op, glue.float_dtype


def _kernel(key, build):
    return kernel(("torch_ops",) + key, build, None)


def _conv(op, xshape, wshape, stride, padding, dilation, groups):
    """The problem's shape of input ``xshape`` and weights ``wshape`` (ints or
    SymInts), checked."""
    return ConvProblem.from_meta(op, xshape, wshape, stride, padding, dilation, groups,
                                 check=torch._check)


def _out(x, s: ConvShape, pool=1):
    """The result's shape for input ``x`` (CHW unbatched: no batch axis)."""
    shape = (s.n, s.co if s.ci else 0, s.ho // pool, s.wo // pool)
    return shape[1:] if x.dim() == 3 else shape


def square(s: ConvShape):
    """Whether ``s``'s stride, padding and dilation are each one int for both axes."""
    return s.sh == s.sw and s.ph == s.pw and s.dh == s.dw


# ------------------------------------------------------------------ gemm
def _gemm(a, b):
    dt = _dtype("gemm", a, b, reduced=True)
    if a.dim() != 2 or b.dim() != 2 or a.shape[1] != b.shape[0]:
        raise ValueError(f"tiramisu::gemm: shapes {tuple(a.shape)} @ {tuple(b.shape)} do not match")
    a = contiguous(a)
    if dt == "float32":         # a transposed b (``weight.t()``) is read as it is stored
        return api.gemm(a, b if b.t().is_contiguous() else contiguous(b))
    if dt in ("bfloat16", "float16"):       # the 'dot' solver, float32 sums
        return api.gemm(a, contiguous(b))
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
    gb = None
    if ctx.needs_input_grad[1]:                                   # dB = A^T @ dC
        # a transposed b (nn.Linear's weight.t()) gets its gradient in the
        # layout of the weight it views: (dC^T @ A)^T, so that the weight's
        # gradient arrives contiguous (411 MB not copied again for VGG's
        # first classifier layer)
        gb = outer_sum(g, a).t() if b.t().is_contiguous() and not b.is_contiguous() \
            else outer_sum(a, g)
    return ga, gb


def outer_sum(x, y):
    """``x^T @ y`` of two matrices with the same rows (a weight's gradient
    over a batch's rows): float32 CPU tensors of a call that may run directly
    (:func:`schedules.torch_glue.direct`: nothing traced, no gradient of the
    gradient recorded) as sums of outer products over the rows, both read as
    stored (:mod:`schedules.blocks.outer_gemm`: 64 rows, 8000 x 256, 1.2 ms
    against the GEMM's 1.6 on the transpose's copy, torch 1.6); else the
    ``gemm`` op."""
    if glue.direct([x, y]) and x.dtype == y.dtype == torch.float32 \
            and min(x.shape[0], x.shape[1], y.shape[1]) > 0:
        return outer_gemm.product(contiguous(x), contiguous(y))
    return gemm(x.t(), y)


gemm = _op("gemm", "(Tensor self, Tensor mat2) -> Tensor", _gemm, _gemm_fake, _gemm_backward,
           _gemm_setup)
gemm_now = glue.eager(gemm, _gemm)


# ------------------------------------------------------------------ matmul
def _matmul_shapes(a, b):
    return MatmulShapes.of(a.shape, b.shape, "tiramisu::matmul", ("self", "other"), torch._check)


def _matmul(self, other):
    """``torch.matmul``: float32 through :func:`schedules.matmul`; float64
    through ``gemm``'s plain kernel, one product per batch entry."""
    dt = _dtype("matmul", self, other)
    s = _matmul_shapes(self, other)
    if dt == "float32":
        return api.matmul(contiguous(self), contiguous(other))
    a, b = s.operands(contiguous(self), contiguous(other))
    if s.folded:
        return _gemm(a, b).reshape(s.out)
    out = self.new_empty((a.shape[0], s.n, s.m))
    for i in range(a.shape[0]):
        out[i] = _gemm(a[i], b[i])
    return out.reshape(s.out)


def _matmul_fake(self, other):
    return self.new_empty(_matmul_shapes(self, other).out)


def _matmul_backward(ctx, g):
    """Through ``matmul`` itself, on the operands with their 1-D sides made
    2-D: ``dA = dC @ B^T`` and ``dB = A^T @ dC``, summed over the batch
    dimensions the operand was broadcast along."""
    a, b = ctx.saved_tensors
    a2 = a.unsqueeze(0) if a.dim() == 1 else a
    b2 = b.unsqueeze(-1) if b.dim() == 1 else b
    g2 = g.reshape(_matmul_shapes(a2, b2).out)
    ga = gb = None
    if ctx.needs_input_grad[0]:
        ga = matmul(g2, b2.transpose(-1, -2)).sum_to_size(a2.shape).reshape(a.shape)
    if ctx.needs_input_grad[1]:
        gb = matmul(a2.transpose(-1, -2), g2).sum_to_size(b2.shape).reshape(b.shape)
    return ga, gb


matmul = _op("matmul", "(Tensor self, Tensor other) -> Tensor", _matmul, _matmul_fake,
             _matmul_backward, _gemm_setup)


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


def _str_padding(op, kernel, stride, padding, dilation):
    """aten's ``conv2d.padding``: "valid" or "same" as ``(pads, extra)``: a
    (height, width) list padded on both sides and the zeros added below and
    right first (:func:`schedules.problems.conv.padding_of`,
    :func:`~schedules.problems.conv.same_extra`: "same" needs stride 1)."""
    st, dl = (pair(v, name, 1, f"tiramisu::{op}") for v, name in ((stride, "stride"),
                                                                 (dilation, "dilation")))
    kh, kw = kernel[-2], kernel[-1]
    p = padding_of(padding, kh, kw, st, dl, f"tiramisu::{op}")
    return (list(p) if isinstance(p, tuple) else [p, p]), same_extra(padding, kh, kw, dl)


def _pad_extra(x, extra):
    """``x`` with torch's extra "same" zeros below and right (a copy), or itself."""
    return torch.nn.functional.pad(x, (0, extra[1], 0, extra[0])) if any(extra) else x


def _grads(ctx, g, x, weight_shape, run):
    """``run(g, x)`` of a conv op's backward on NCHW ``g`` and ``x`` (padded
    as the forward padded it: ``ctx.extra``), its input gradient cropped and
    unbatched back to ``x``'s shape; an input of 0 channels: zeros."""
    if x.shape[-3] == 0:
        return x.new_zeros(x.shape), x.new_zeros(weight_shape), x.new_zeros(weight_shape[:1])
    x4 = _pad_extra(x if x.dim() == 4 else x[None], ctx.extra)
    gx, gw, gb = run(g if g.dim() == 4 else g[None], x4)
    if gx is not None:
        gx = gx[..., :x.shape[-2], :x.shape[-1]]
        gx = gx if x.dim() == 4 else gx[0]
    return gx, gw, gb


def _conv2d(input, weight, bias=None, stride=(1, 1), padding=(0, 0), dilation=(1, 1), groups=1,
            *, algo="auto", activation=None, residual=None):
    """The op's implementation; ``activation`` ("relu" / "relu6") and
    ``residual`` (not in the op's schema: :func:`conv2d_then` passes them
    when it calls this directly): ``act(conv + residual)``, in the kernel
    where the solver can.  A float32 call of a layout planned before runs
    its plan (:func:`_planned`)."""
    memo = call_memo.key("tiramisu::conv2d", (input, weight, bias, residual),
                         *conf_key(stride, padding, dilation), groups, algo, activation)
    plan = call_memo.get(memo)
    if plan is not None:
        return plan(input, weight, bias, residual)
    if residual is not None and not (input.dim() == residual.dim() == 4
                                     and input.dtype == residual.dtype == torch.float32):
        out = _conv2d(input, weight, bias, stride, padding, dilation, groups, algo=algo)
        return A.add_activate(out, residual, activation)
    dt = _dtype("conv2d", input, weight, bias, reduced=True)
    _algo("conv2d", algo)
    given = (input, weight, bias)
    x, weight, bias = contiguous(input), contiguous(weight), contiguous(bias)
    s = _conv("conv2d", x.shape, weight.shape, stride, padding, dilation, groups)
    if s.ci == 0 or s.n == 0:                     # aten's empty result
        return x.new_zeros(_out(x, s)) if residual is None else residual.clone()
    if x.dim() == 3:
        return _conv2d(x[None], weight, bias, stride, padding, dilation, groups, algo=algo,
                       activation=activation)[0]
    if dt in ("bfloat16", "float16") and not square(s):    # float32 sums, rounded once
        up = [None if t is None else t.float() for t in (x, weight, bias)]
        out = _conv2d(*up, stride, padding, dilation, groups, algo=algo).to(x.dtype)
        return A.activate(out, activation)
    extra = {"activation": activation, "residual": residual}
    if dt == "float32" and square(s) and _same(given, (x, weight, bias)):
        return _planned(memo, "conv2d", x, weight, bias, s, groups, algo, **extra)
    if dt != "float64" and square(s):
        return api.conv2d(x, weight, bias, stride=s.sh, padding=s.ph,
                          dilation=s.dh, groups=groups, algo=algo, **extra)
    k = _kernel(("conv", s, dt, bias is not None), lambda: BW.conv_forward(s, dt, bias is not None))
    out = k(data=x, weight=weight, **({"bias": bias} if bias is not None else {}))
    return A.add_activate(out, residual, activation)


def conf_key(*conf):
    """Stride, padding and dilation as a memo's key takes them (lists as tuples)."""
    return [tuple(v) if type(v) is list else v for v in conf]


def _same(given, used):
    """Whether the tensors ``used`` are the caller's ``given`` (no copy made)."""
    return all(a is b for a, b in zip(given, used))


def _planned(memo, op, x, weight, bias, s, groups, algo, **extra):
    """``op``'s result on the arguments (``extra``: the activation and the
    residual, or the pool), by its plan (:func:`schedules.plans.conv`),
    remembered under ``memo`` for the next call of this layout; by the
    library's call where there is no plan."""
    plan = plans.conv(op, x, weight, bias, s.sh, s.ph, s.dh, groups, algo, **extra)
    if plan is None:
        call = api.conv2d if op == "conv2d" else api.conv_relu_maxpool
        return call(x, weight, bias, s.sh, s.ph, s.dh, groups, algo=algo, **extra)
    call_memo.put(memo, plan)
    return plan(x, weight, bias, extra.get("residual"))


def _conv2d_fake(input, weight, bias=None, stride=(1, 1), padding=(0, 0), dilation=(1, 1),
                 groups=1, *, algo="auto"):
    s = _conv("conv2d", input.shape, weight.shape, stride, padding, dilation, groups)
    return input.new_empty(_out(input, s))


def _conv2d_str(input, weight, bias=None, stride=(1, 1), padding="valid", dilation=(1, 1),
                groups=1, *, algo="auto"):
    pads, extra = _str_padding("conv2d", weight.shape, stride, padding, dilation)
    return _conv2d(_pad_extra(input, extra), weight, bias, stride, pads, dilation, groups,
                   algo=algo)


def _conv2d_str_fake(input, weight, bias=None, stride=(1, 1), padding="valid", dilation=(1, 1),
                     groups=1, *, algo="auto"):
    pads, extra = _str_padding("conv2d", weight.shape, stride, padding, dilation)
    return _conv2d_fake(_pad_extra(input, extra), weight, bias, stride, pads, dilation, groups)


def _conv_args(op, inputs, keyword_only_inputs, kernel=None):
    """``(input, weight, bias, [stride, padding, dilation, groups], extra)``
    of a conv op's call (torch hands setup_context the positional arguments
    given, the defaults left out), padding as a (height, width) list and
    ``extra`` the uneven "same" zeros (:func:`_str_padding`)."""
    x, weight, bias = (list(inputs[:3]) + [None])[:3]
    given = dict(zip(("stride", "padding", "dilation", "groups"), inputs[3:]))
    conf = {k: given.get(k, v) for k, v in _CONV_DEFAULTS.items()}
    st, pd, dl, g = (conf[k] for k in ("stride", "padding", "dilation", "groups"))
    extra = (0, 0)
    if isinstance(pd, str):
        pd, extra = _str_padding(op, weight.shape if kernel is None else kernel, st, pd, dl)
    lists = [list(v) * (2 if len(v) == 1 else 1) for v in (st, pd, dl)]
    return x, weight, bias, lists + [g], extra


def _conv2d_setup(ctx, inputs, keyword_only_inputs, output):
    x, weight, bias, ctx.conf, ctx.extra = _conv_args("conv2d", inputs, keyword_only_inputs)
    ctx.save_for_backward(x, weight)
    ctx.has_bias, ctx.n_inputs = bias is not None, len(inputs)


def _conv2d_backward(ctx, g):
    x, weight = ctx.saved_tensors
    want_bias = ctx.has_bias and ctx.needs_input_grad[2]

    def run(g, x):
        gx = gw = gb = None
        if ctx.needs_input_grad[0]:
            gx = _grad_input_now(g, weight, list(x.shape), *ctx.conf)
        if ctx.needs_input_grad[1] or want_bias:
            gw, gb = _grad_weight_now(g, x, list(weight.shape), *ctx.conf,
                                        bias=want_bias)
        return gx, gw, gb
    gx, gw, gb = _grads(ctx, g, x, weight.shape, run)
    return ((gx, gw, gb if want_bias else None) + (None,) * ctx.n_inputs)[:ctx.n_inputs]


def _grad_input(g, weight, input_size, stride, padding, dilation, groups):
    dt = _dtype("conv2d_grad_input", g, weight)
    g, weight = contiguous(g), contiguous(weight)
    s = _conv("conv2d_grad_input", input_size, weight.shape, stride,
              padding, dilation, groups)
    if dt == "float32" and square(s) and min(s.n, s.ci, s.co, s.ho, s.wo) > 0:
        # the convolution of the output's gradient (spread out by a stride)
        # with the flipped, group-transposed weight, by the forward solvers
        gx = conv_grad.grad_input(g, weight, s, api.conv2d, _kernel, plans.flipped_conv)
        if gx is not None:
            return gx
    return _kernel(("grad_input", s, dt), lambda: BW.conv_grad_input(s, dt))(grad=g, weight=weight)


def _grad_input_fake(g, weight, input_size, stride, padding, dilation, groups):
    return g.new_empty(input_size)


def _bias_grad(g, bias):
    """The bias gradient (the output gradient's sum per channel), or an empty
    tensor when ``bias`` is false (a conv without one: not computed)."""
    return g.sum((0, 2, 3)) if bias else g.new_empty((0,))


def _grad_weight(g, x, weight_size, stride, padding, dilation, groups, *, bias=True):
    dt = _dtype("conv2d_grad_weight", g, x)
    g, x = contiguous(g), contiguous(x)
    s = _conv("conv2d_grad_weight", x.shape, weight_size, stride, padding,
              dilation, groups)
    if dt == "float32":         # the fastest kernel that takes it (conv_grad.weight_grad)
        gw = conv_grad.weight_grad(g, x, s, _kernel, api.gemm, api.batched_gemm)
        if gw is not None:
            return gw.reshape(weight_size), _bias_grad(g, bias)
    r = _kernel(("grad_weight", s, dt), lambda: BW.conv_grad_weight(s, dt))(data=x, grad=g)
    return r["grad_weight"], r["grad_bias"] if bias else g.new_empty((0,))


def _grad_weight_fake(g, x, weight_size, stride, padding, dilation, groups, *, bias=True):
    return g.new_empty(weight_size), g.new_empty((weight_size[0] if bias else 0,))


def _grad_setup(ctx, inputs, output):
    g, other, size, *conf = inputs
    ctx.save_for_backward(g, other)
    ctx.conf = conf


def _grad_input_backward(ctx, u):
    """The double backward through the input's gradient ``gi = GI(g, W)``
    (linear in each): ``d/dg = conv2d(u, W)``, ``d/dW = GW(g, u)``."""
    g, weight = ctx.saved_tensors
    conf = ctx.conf
    dg = conv2d(u, weight, None, *conf) if ctx.needs_input_grad[0] else None
    dw = (conv2d_grad_weight(g, u, list(weight.shape), *conf, bias=False)[0]
          if ctx.needs_input_grad[1] else None)
    return dg, dw, None, None, None, None, None


def _grad_weight_backward(ctx, uw, ub):
    """The double backward through the weights' gradient ``(gw, gb) =
    GW(g, x)``: ``d/dg = conv2d(x, uw, ub)``, ``d/dx = GI(g, uw)``."""
    g, x = ctx.saved_tensors
    conf = ctx.conf
    co = g.shape[1]
    if ub is not None and ub.numel() != co:     # (bias=False: its empty gradient)
        ub = None
    if uw is None:
        uw = g.new_zeros((co, x.shape[1] // conf[3]) + tuple(ctx.kernel_size))
    dg = conv2d(x, uw, ub, *conf) if ctx.needs_input_grad[0] else None
    dx = conv2d_grad_input(g, uw, list(x.shape), *conf) if ctx.needs_input_grad[1] else None
    return dg, dx, None, None, None, None, None


def _grad_weight_setup(ctx, inputs, output, keyword_only_inputs=None):
    _grad_setup(ctx, inputs, output)
    ctx.kernel_size = list(inputs[2])[2:]


_CONF = "SymInt[2] stride, SymInt[2] padding, SymInt[2] dilation, SymInt groups"
conv2d = _op("conv2d", f"({_CONV_INT}, *, str algo='auto') -> Tensor",
             _conv2d, _conv2d_fake, _conv2d_backward, _conv2d_setup)
_op("conv2d.padding", f"({_CONV_STR}, *, str algo='auto') -> Tensor",
    _conv2d_str, _conv2d_str_fake, _conv2d_backward, _conv2d_setup)
conv2d_grad_input = _op("conv2d_grad_input",
                        f"(Tensor grad, Tensor weight, SymInt[4] input_size, {_CONF}) -> Tensor",
                        _grad_input, _grad_input_fake, _grad_input_backward, _grad_setup)
conv2d_grad_weight = _op("conv2d_grad_weight",
                         f"(Tensor grad, Tensor input, SymInt[4] weight_size, {_CONF}, *, "
                         "bool bias=True) -> (Tensor, Tensor)",
                         _grad_weight, _grad_weight_fake, _grad_weight_backward,
                         _grad_weight_setup)
# what the modules' forwards and the backward functions call: the implementations
# directly when nothing records (torch_glue.eager), else the ops
class _Conv2dRecorded(torch.autograd.Function):
    """``tiramisu::conv2d`` (int padding) where autograd records it in plain
    eager code: the implementation forward, the op's own setup and backward
    (:func:`_conv2d_setup`, :func:`_conv2d_backward`), without the op's
    dispatch and schema handling; compiling or tracing takes the op."""

    @staticmethod
    def forward(ctx, input, weight, bias, stride, padding, dilation, groups, algo):
        inputs = (input, weight, bias, stride, padding, dilation, groups)
        _conv2d_setup(ctx, inputs, {"algo": algo}, None)
        ctx.n_inputs = 8                                  # (algo gets no gradient)
        return glue.fresh_outputs(_conv2d(*glue.unwrapped(inputs), algo=algo), inputs)

    @staticmethod
    def backward(ctx, g):
        return _conv2d_backward(ctx, g)


def _conv2d_recorded(input, weight, bias=None, stride=(1, 1), padding=(0, 0), dilation=(1, 1),
                     groups=1, *, algo="auto"):
    if isinstance(padding, str):
        return conv2d(input, weight, bias, stride, padding, dilation, groups, algo=algo)
    return _Conv2dRecorded.apply(input, weight, bias, stride, padding, dilation, groups, algo)


conv2d_now = glue.eager(conv2d, glue.overloads(_conv2d, _conv2d_str), _conv2d_recorded)


def conv2d_then(activation, input, weight, bias, stride, padding, dilation, groups, algo,
                residual=None):
    """``activation`` ("relu", "relu6" or None) of ``conv2d_now``'s result
    plus ``residual`` (of the result's shape, or None): in the kernel's
    epilogue where the implementation runs directly (:func:`schedules.torch_glue.eager`'s
    conditions) and can, else in place on ``conv2d_now``'s fresh result."""
    args = (input, weight, bias, stride, padding, dilation, groups)
    tensors = glue.direct_tensors(args if residual is None else args + (residual,))
    if tensors is not None and not isinstance(padding, str):
        return glue.fresh_outputs(_conv2d(*glue.unwrapped(args, tensors), algo=algo,
                                          activation=activation, residual=residual),
                                  args, tensors)
    out = conv2d_now(*args, algo=algo)
    return A.add_activate(out, residual, activation)
_grad_input_now = glue.eager(conv2d_grad_input, _grad_input)
_grad_weight_now = glue.eager(conv2d_grad_weight, _grad_weight)


# ------------------------------------------------------------------ fused block
def _fused(input, weight, bias=None, stride=(1, 1), padding=(0, 0), dilation=(1, 1), groups=1,
           *, pool=2, algo="auto"):
    memo = call_memo.key("tiramisu::conv_relu_maxpool", (input, weight, bias),
                         *conf_key(stride, padding, dilation), groups, pool, algo)
    plan = call_memo.get(memo)
    if plan is not None:
        return plan(input, weight, bias)
    dt = _dtype("conv_relu_maxpool", input, weight, bias)
    _algo("conv_relu_maxpool", algo)
    given = (input, weight, bias)
    x, weight, bias = contiguous(input), contiguous(weight), contiguous(bias)
    s = _fused_conv(x, weight, stride, padding, dilation, groups, pool)
    if s.n == 0:
        return x.new_zeros(_out(x, s, pool))
    if x.dim() == 3:
        return _fused(x[None], weight, bias, stride, padding, dilation, groups, pool=pool,
                      algo=algo)[0]
    if dt == "float32" and square(s) and _same(given, (x, weight, bias)):
        return _planned(memo, "conv_relu_maxpool", x, weight, bias, s, groups, algo, pool=pool)
    if dt == "float32" and square(s):
        return api.conv_relu_maxpool(x, weight, bias, s.sh, s.ph, s.dh, groups, pool=pool,
                                     algo=algo)
    bias = x.new_zeros((s.co,)) if bias is None else bias
    return _kernel(("fused", s, pool, dt), lambda: BW.fused_forward(s, pool, dt))(
        data=x, weight=weight, bias=bias)


def _fused_conv(x, weight, stride, padding, dilation, groups, pool):
    s = _conv("conv_relu_maxpool", x.shape, weight.shape, stride, padding, dilation, groups)
    torch._check(s.ci != 0, lambda: "tiramisu::conv_relu_maxpool: input has no channel: the "
                                    "convolution's result has none, and torch's max_pool2d "
                                    "refuses an input of 0 channels")
    torch._check(1 <= pool <= min(s.ho, s.wo),
                 lambda: f"tiramisu::conv_relu_maxpool: pool must be in [1, {min(s.ho, s.wo)}], "
                         f"got {pool}")
    return s


def _fused_fake(input, weight, bias=None, stride=(1, 1), padding=(0, 0), dilation=(1, 1),
                groups=1, *, pool=2, algo="auto"):
    s = _fused_conv(input, weight, stride, padding, dilation, groups, pool)
    return input.new_empty(_out(input, s, pool))


def _fused_str(input, weight, bias=None, stride=(1, 1), padding="valid", dilation=(1, 1),
               groups=1, *, pool=2, algo="auto"):
    pads, extra = _str_padding("conv_relu_maxpool", weight.shape, stride, padding, dilation)
    return _fused(_pad_extra(input, extra), weight, bias, stride, pads, dilation, groups,
                  pool=pool, algo=algo)


def _fused_str_fake(input, weight, bias=None, stride=(1, 1), padding="valid", dilation=(1, 1),
                    groups=1, *, pool=2, algo="auto"):
    pads, extra = _str_padding("conv_relu_maxpool", weight.shape, stride, padding, dilation)
    return _fused_fake(_pad_extra(input, extra), weight, bias, stride, pads, dilation, groups,
                       pool=pool)


def _fused_setup(ctx, inputs, keyword_only_inputs, output):
    x, weight, bias, ctx.conf, ctx.extra = _conv_args("conv_relu_maxpool", inputs,
                                                       keyword_only_inputs)
    ctx.has_bias, ctx.n_inputs = bias is not None, len(inputs)
    ctx.save_for_backward(x, weight, x.new_zeros((weight.shape[0],)) if bias is None else bias)
    ctx.pool = keyword_only_inputs.get("pool", 2)


def _fused_backward(ctx, g):
    x, weight, bias = ctx.saved_tensors
    want_bias = ctx.has_bias and ctx.needs_input_grad[2]

    def run(g, x):
        gz = _fused_grad_now(g, x, weight, bias, *ctx.conf, ctx.pool)
        gx = (_grad_input_now(gz, weight, list(x.shape), *ctx.conf)
              if ctx.needs_input_grad[0] else None)
        gw = gb = None
        if ctx.needs_input_grad[1] or want_bias:
            gw, gb = _grad_weight_now(gz, x, list(weight.shape), *ctx.conf,
                                        bias=want_bias)
        return gx, gw, gb
    gx, gw, gb = _grads(ctx, g, x, weight.shape, run)
    return ((gx, gw, gb if want_bias else None) + (None,) * ctx.n_inputs)[:ctx.n_inputs]


def _fused_grad(g, x, weight, bias, stride, padding, dilation, groups, pool):
    dt = _dtype("conv_relu_maxpool_grad", g, x, weight, bias)
    g, x, weight, bias = (contiguous(t) for t in (g, x, weight, bias))
    s = _fused_conv(x, weight, stride, padding, dilation, groups, pool)
    if dt == "float32" and square(s) and min(s.n, s.ci, s.co, s.ho, s.wo) > 0:
        # the convolution again by the forward solvers (the fused block's
        # sums, in its order: the same maxima), then the windows' gradients
        z = api.conv2d(x, weight, bias, s.sh, s.ph, s.dh, groups)
        return _kernel(("fused_grad_mask", s, pool), lambda: conv_grad.pooled_grad(s, pool))(
            conv=z, grad=g)
    return _kernel(("fused_grad", s, pool, dt), lambda: BW.fused_grad_pre(s, pool, dt))(
        data=x, weight=weight, bias=bias, grad=g)


def _fused_grad_fake(g, x, weight, bias, stride, padding, dilation, groups, pool):
    s = _fused_conv(x, weight, stride, padding, dilation, groups, pool)
    return x.new_empty(_out(x, s))


_FUSED_KW = "*, int pool=2, str algo='auto'"
conv_relu_maxpool = _op("conv_relu_maxpool", f"({_CONV_INT}, {_FUSED_KW}) -> Tensor",
                        _fused, _fused_fake, _fused_backward, _fused_setup)
_op("conv_relu_maxpool.padding", f"({_CONV_STR}, {_FUSED_KW}) -> Tensor",
    _fused_str, _fused_str_fake, _fused_backward, _fused_setup)
conv_relu_maxpool_now = glue.eager(conv_relu_maxpool, glue.overloads(_fused, _fused_str))
def _fused_grad_backward(ctx, *_):
    raise NotImplementedError("tiramisu::conv_relu_maxpool has no double backward (a gradient "
                              "of its gradient): use conv2d, relu and max_pool2d apart for "
                              "higher-order gradients (tiramisu::conv2d has one)")


conv_relu_maxpool_grad = _op(
    "conv_relu_maxpool_grad",
    f"(Tensor grad, Tensor input, Tensor weight, Tensor bias, {_CONF}, int pool) -> Tensor",
    _fused_grad, _fused_grad_fake, _fused_grad_backward, lambda ctx, inputs, output: None)
_fused_grad_now = glue.eager(conv_relu_maxpool_grad, _fused_grad)

# ------------------------------------------------------------------ sparse conv
def _sparse_conv2d(x, rowptr, colidx, values, weight_size, bias=None, stride=(1, 1),
                   padding=(0, 0), dilation=(1, 1), groups=1):
    _dtype("sparse_conv2d", x, values, bias)
    _conv("sparse_conv2d", x.shape, weight_size, stride, padding, dilation, groups)
    if values.dtype != torch.float32:
        raise TypeError("tiramisu::sparse_conv2d: the sparse kernel is float32 only, got "
                        f"{values.dtype}")
    csr = csr_weights(rowptr, colidx, values, tuple(weight_size))     # converted once per weight
    return api.sparse_conv2d(contiguous(x), csr, bias, tuple(stride), tuple(padding),
                             tuple(dilation), groups)


def _sparse_conv2d_fake(x, rowptr, colidx, values, weight_size, bias=None, stride=(1, 1),
                        padding=(0, 0), dilation=(1, 1), groups=1):
    s = _conv("sparse_conv2d", x.shape, weight_size, stride, padding, dilation, groups)
    return x.new_empty(_out(x, s))


def _sparse_conv2d_str(x, rowptr, colidx, values, weight_size, bias=None, stride=(1, 1),
                       padding="valid", dilation=(1, 1), groups=1):
    pads, extra = _str_padding("sparse_conv2d", weight_size, stride, padding, dilation)
    return _sparse_conv2d(_pad_extra(x, extra), rowptr, colidx, values, weight_size, bias,
                          stride, pads, dilation, groups)


def _sparse_conv2d_str_fake(x, rowptr, colidx, values, weight_size, bias=None, stride=(1, 1),
                            padding="valid", dilation=(1, 1), groups=1):
    pads, extra = _str_padding("sparse_conv2d", weight_size, stride, padding, dilation)
    return _sparse_conv2d_fake(_pad_extra(x, extra), rowptr, colidx, values, weight_size, bias,
                               stride, pads, dilation, groups)


def _sparse_flat(rowptr, colidx, weight_size):
    """Flat positions in the dense (Cout, Cin*KH*KW) weight of the nonzeros."""
    co, k = weight_size[0], weight_size[1] * weight_size[2] * weight_size[3]
    rows = torch.repeat_interleave(torch.arange(co), (rowptr[1:] - rowptr[:-1]).long())
    return rows * k + colidx.long()


def _sparse_setup(ctx, inputs, output):
    x, rowptr, colidx, values, weight_size = inputs[:5]
    ctx.save_for_backward(x, rowptr, colidx, values)
    _, _, bias, ctx.conf, ctx.extra = _conv_args("sparse_conv2d", (x, None) + tuple(inputs[5:]),
                                                 {}, kernel=weight_size)
    ctx.weight_size, ctx.has_bias, ctx.n_inputs = list(weight_size), bias is not None, len(inputs)


def _sparse_backward(ctx, g):
    """Through the dense kernels: grad x with the weight scattered dense; the
    values' gradient is the dense weight gradient at the nonzeros (the
    sparsity pattern is fixed, as in pruned training)."""
    x, rowptr, colidx, values = ctx.saved_tensors
    flat = _sparse_flat(rowptr, colidx, ctx.weight_size)
    want_bias = ctx.has_bias and ctx.needs_input_grad[5]

    def run(g, x):
        gx = gw = gb = None
        if ctx.needs_input_grad[0]:
            n = ctx.weight_size[0] * ctx.weight_size[1] * ctx.weight_size[2] * ctx.weight_size[3]
            dense = values.new_zeros(n).index_add(0, flat, values).reshape(ctx.weight_size)
            gx = _grad_input_now(g, dense, list(x.shape), *ctx.conf)
        if ctx.needs_input_grad[3] or want_bias:
            gw, gb = _grad_weight_now(g, x, ctx.weight_size, *ctx.conf,
                                        bias=want_bias)
        return gx, gw, gb
    gx, gw, gb = _grads(ctx, g, x, ctx.weight_size, run)
    gv = None if gw is None else gw.reshape(-1)[flat]
    return (gx, None, None, gv, None, gb if want_bias else None, None, None, None,
            None)[:ctx.n_inputs]


_SPARSE = ("(Tensor input, Tensor rowptr, Tensor colidx, Tensor values, SymInt[4] weight_size, "
           "Tensor? bias=None, SymInt[2] stride=1, {padding}, SymInt[2] dilation=1, "
           "SymInt groups=1) -> Tensor")
sparse_conv2d = _op("sparse_conv2d", _SPARSE.format(padding="SymInt[2] padding=0"),
                    _sparse_conv2d, _sparse_conv2d_fake, _sparse_backward, _sparse_setup)
_op("sparse_conv2d.padding", _SPARSE.format(padding="str padding=\"valid\""),
    _sparse_conv2d_str, _sparse_conv2d_str_fake, _sparse_backward, _sparse_setup)


OPS = {"gemm": gemm, "matmul": matmul, "conv2d": conv2d, "conv2d_grad_input": conv2d_grad_input,
       "conv2d_grad_weight": conv2d_grad_weight, "conv_relu_maxpool": conv_relu_maxpool,
       "conv_relu_maxpool_grad": conv_relu_maxpool_grad, "sparse_conv2d": sparse_conv2d,
       "lstm": lstm, "gru": gru, "lstm_train": lstm_train, "gru_train": gru_train,
       "lstm_backward": lstm_backward, "gru_backward": gru_backward}

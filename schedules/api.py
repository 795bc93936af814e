"""The operator library's public calls, each parse -> find -> solve: the
problem parsed once from torch-style arguments (:mod:`schedules.problems`),
then :func:`schedules.core.find.solve` over the operator's solvers
(:data:`schedules.registry.SOLVERS`; ``algo=`` / ``schedule=`` forces one):
the solver found runs on the checked arguments and gives the call's result.
The calls composed of others (``matmul``, a bidirectional or projected RNN
stack, the paper's blocks) compose them here."""
from __future__ import annotations

import numpy as np

from .blocks.blis import GemmParams
from .blocks.pool import max_pool2d_function
from .core import arrays as A
from .core import call_memo
from .core.find import find, solve
from .core.kernels import kernel
from .problems.conv import ConvProblem
from .problems.gemm import GemmProblem, MatmulShapes, cpu_operands
from .problems.pool import max_pool_problem
from .problems.resize_conv import ResizeConvProblem
from .problems.rnn import ProjectedProblem, RnnStack, rnn_call
from .registry import SOLVERS


# ------------------------------------------------------------------ convolutions
def conv2d(input, weight, bias=None, stride=1, padding=0, dilation=1, groups=1, algo="auto",
           target=None, activation=None, residual=None):
    """2-D convolution with ``torch.nn.functional.conv2d``'s signature,
    defaults and results: NCHW, or unbatched CHW, float32 (NumPy arrays or
    CPU torch tensors; the result has the same kind); ``stride``,
    ``padding`` and ``dilation`` an int or a (height, width) pair;
    ``padding`` also "valid" or "same" (an odd total padded as torch: the
    extra row / column below and right); any ``groups``, on every CPU
    algorithm, CUDA too; empty shapes as torch (0 images: an empty result; 0 input
    channels: a result of 0 channels; 0 rows with images and channels, or
    fewer output channels than groups: refused).  ``algo``:
    "auto" (find step), "direct", "depthwise" (groups = channels, see
    :mod:`schedules.solvers.conv_depthwise`), "im2col", "spatial_pack" or "sparse"
    (:func:`schedules.sparse_conv2d`; ``weight`` may then also be a sparse
    weight, see there).  ``target="cuda"``, or torch CUDA tensors with no
    target: the CUDA solvers (:mod:`schedules.solvers.conv_cuda`; a sparse
    weight: :mod:`schedules.solvers.conv_sparse_cuda`; per group), the
    result on the input's device.  ``activation``: "relu" or "relu6" applied
    to the result (in the kernel's epilogue where the solver has one, on the
    host), or None.  ``residual``: an array of the result's shape (and the
    input's kind and dtype) added to it before the activation -- ``act(conv2d(...)
    + residual)``, a residual block's tail -- in the kernel's epilogue where
    the solver has one ("spatial_pack", "pointwise"), else after it; None:
    nothing added."""
    p, args = ConvProblem.from_call("conv2d", input, weight, bias, stride, padding, dilation,
                                    groups, algo=algo, target=target, activation=activation,
                                    residual=residual)
    return solve(SOLVERS["conv2d"], p, args, algo, call="conv2d")


def conv_relu_maxpool(input, weight, bias=None, stride=1, padding=0, dilation=1, groups=1, *,
                      pool=2, algo="auto", target=None):
    """``max_pool2d(relu(conv2d(input, weight, bias, stride, padding, dilation,
    groups)), pool)`` in one fused pass (see :mod:`schedules.solvers.conv_fused`):
    the convolution's arguments, defaults and inputs are :func:`conv2d`'s
    (torch's; an input of 0 channels is refused, as torch's max_pool2d
    refuses the convolution's result of 0 channels).  ``algo``: "auto" (find
    step), "direct", "winograd" (3x3 kernels, stride 1, no dilation,
    ``pool=2``) or "sparse" (:func:`schedules.sparse_conv_relu_maxpool`;
    ``weight`` may be sparse)."""
    p, args = ConvProblem.from_call("conv_relu_maxpool", input, weight, bias, stride, padding,
                                    dilation, groups, algo=algo, target=target, pool=pool,
                                    gpu=False)
    return solve(SOLVERS["conv_relu_maxpool"], p, args, algo, call="conv_relu_maxpool")


def max_pool2d(input, kernel_size, stride=None, padding=0, dilation=1, ceil_mode=False,
               return_indices=False):
    """``torch.nn.functional.max_pool2d``: its signature, defaults, checks
    and results (NaN propagated, padding read as -inf; ``return_indices``:
    also the int64 position in its plane of each maximum, the tap torch's
    scan picks), NCHW or unbatched CHW float32 (NumPy arrays or CPU torch
    tensors; the result has the same kind), by :mod:`schedules.blocks.pool`
    (one kernel per plane shape, any number of planes)."""
    x, s, unbatched = max_pool_problem(input, kernel_size, stride, padding, dilation, ceil_mode)
    if not isinstance(return_indices, bool):
        raise TypeError(f"max_pool2d: return_indices must be a bool, got {return_indices!r}")
    n, c = x.shape[0], x.shape[1]
    if n == 0:
        out = A.zeros(x, (0, c, s.ho, s.wo), None)
        return (out, A.zeros(x, (0, c, s.ho, s.wo), None, dtype="int64")) if return_indices \
            else out
    k = kernel(("max_pool2d", s, return_indices),
               lambda: max_pool2d_function(s, indices=return_indices), None)
    made = k(data=x.reshape(n * c, s.h, s.w))
    shaped = [made[name].reshape(n, c, s.ho, s.wo) for name in ("out", "indices")] \
        if return_indices else [made.reshape(n, c, s.ho, s.wo)]
    shaped = [t[0] if unbatched else t for t in shaped]
    return tuple(shaped) if return_indices else shaped[0]


def sparse_conv2d(x, w, bias=None, stride=1, padding=0, dilation=1, groups=1, target=None):
    """``torch.nn.functional.conv2d`` with a sparse weight: NCHW float32, NumPy
    or CPU torch (the result has the input's kind).  ``w``: a dense weight
    with zeros (converted on every call), :class:`CSRWeights` (convert once
    with ``CSRWeights.from_dense``), a torch sparse-CSR tensor or a scipy CSR
    matrix of shape (Cout, Cin*K*K) (a square K x K kernel).  ``stride``,
    ``padding``, ``dilation``, ``groups`` and the inputs as in
    :func:`conv2d` (a grouped weight is (Cout, Cin/groups, KH, KW); each
    group runs on its rows).  ``target="cuda"``, or torch CUDA tensors with
    no target: the CUDA solver :mod:`schedules.solvers.conv_sparse_cuda`,
    the result on the input's device."""
    p, args = ConvProblem.from_call("conv2d", x, w, bias, stride, padding, dilation, groups,
                                    algo="sparse", target=target, name="sparse_conv2d",
                                    names=("x", "w"))
    return solve(SOLVERS["conv2d"], p, args, "sparse", call="sparse_conv2d")


def sparse_conv_relu_maxpool(x, w, bias=None, pool=2, *, stride=1, padding=0, dilation=1,
                             groups=1, target=None):
    """``max_pool2d(relu(conv2d(x, w, bias, stride, padding, dilation)), pool)``
    with a sparse ``w`` (as in :func:`sparse_conv2d`), in one pass: each
    output channel's row is pooled from registers' tile results in L1; no
    conv-sized intermediate exists.  The convolution's keywords and defaults
    are torch's (as :func:`schedules.conv_relu_maxpool`); the TIRAMISU
    paper's block is ``padding=1``."""
    p, args = ConvProblem.from_call("conv_relu_maxpool", x, w, bias, stride, padding, dilation,
                                    groups, algo="sparse", target=target, pool=pool,
                                    name="sparse_conv_relu_maxpool", names=("x", "w"), gpu=False)
    return solve(SOLVERS["conv_relu_maxpool"], p, args, "sparse",
                 call="sparse_conv_relu_maxpool")


def resize_conv_relu_maxpool(x, size, weight, bias=None, pool=2, *, mode="bilinear", stride=1,
                             padding=0, dilation=1, algo="auto", target=None):
    """``max_pool2d(relu(conv2d(interpolate(x, size, mode=mode,
    align_corners=False), weight, bias, stride, padding, dilation)), pool)``
    in one pass, the resize computed where the convolution reads it (no
    resized image in memory, see :mod:`schedules.solvers.resize_conv`).
    ``x``: NCHW float32 (NumPy or CPU torch; the result has its kind);
    ``size``: an int or (height, width), as ``interpolate`` takes it;
    ``mode``: "bilinear" (half-pixel centres) or "nearest" (torch's legacy
    nearest); ``weight`` dense, or sparse as in :func:`sparse_conv2d`; the
    convolution's keywords are :func:`conv2d`'s.  ``algo``: "auto",
    "direct" (dense weight) or "sparse".  Forward only: a gradient asked of
    the result raises."""
    grad = A.needing_grad(x, weight, bias)
    if grad:                        # computed apart from autograd, attached below
        x, weight, bias = (v.detach() if any(v is g for g in grad) else v
                           for v in (x, weight, bias))
    p, args = ResizeConvProblem.from_call(x, size, weight, bias, pool, mode, stride, padding,
                                          dilation, algo=algo, target=target)
    out = solve(SOLVERS["resize_conv_relu_maxpool"], p, args, algo,
                call="resize_conv_relu_maxpool")
    if grad:                        # no backward kernel: a gradient asked of it raises
        (out,) = A.without_backward("schedules.resize_conv_relu_maxpool", (out,), grad)
    return out


# ------------------------------------------------------------------ GEMM
def gemm(a, b, params: GemmParams | None = None, target=None):
    """``a @ b`` for float32 or float64 matrices (NumPy arrays or CPU torch
    tensors, both of one dtype; the result has the same kind and dtype;
    float64 on the CPU only).  Compiles once per shape and dtype (cached).
    bfloat16 / float16 operands (both the same, as torch): float32
    accumulation, the result rounded once to their dtype (the 'dot' solver,
    :mod:`schedules.blocks.dot_gemm`: the host's vdpbf16ps for bfloat16).
    ``target="cuda"``, or device arrays (torch CUDA tensors) with no target:
    the CUDA solver of :mod:`schedules.solvers.gemm_cuda` (the result
    allocated by torch on the inputs' device)."""
    memo = call_memo.key("gemm", (a, b), params, target) \
        if (params is None or type(params) is GemmParams) and \
        (target is None or type(target) is str) else None
    plan = call_memo.get(memo)
    if plan is not None:            # parsed and found before: the same solver's kernel
        return plan((a, b))
    p, args = GemmProblem.from_call("gemm", a, b, params, target)
    solver = find(p, SOLVERS["gemm"], args, "auto", call="gemm")
    out = solver.run(p, args)
    if args[0] is a and args[1] is b:
        call_memo.put(memo, solver.runner(p))
    elif p.device == "cpu":         # (converted by layout alone: a copy, weight.t() as stored)
        call_memo.put(memo, _converting(solver.runner(p), p.dtype, p.trans_b))
    return out


def _converting(run, dtype, trans_b):
    """The plan of a CPU GEMM whose parse converted its operands: the same
    conversions (:func:`schedules.problems.gemm.cpu_operands`), then the
    solver's kernel (a conv's weight gradient multiplies transposed views:
    ~40 us of parse and find a call, ~9 memoised)."""
    def plan(ab):
        return run(cpu_operands(ab[0], ab[1], dtype, trans_b))
    return plan


def batched_gemm(a, b, params: GemmParams | None = None, target=None):
    """``a @ b`` for batches ``(B, N, K) @ (B, K, M)``
    (NumPy arrays or CPU torch tensors; dtypes as :func:`gemm`).  A batch of 1 on either side is
    broadcast to the other's, as ``torch.matmul`` does for 3-D operands
    (``torch.bmm`` refuses it); other batch sizes must be equal.  For more
    batch dimensions, or 2-D and 1-D operands, see :func:`matmul`."""
    p, args = GemmProblem.from_call("batched_gemm", a, b, params, target, gpu=False)
    return solve(SOLVERS["batched_gemm"], p, args, call="batched_gemm")


def matmul(a, b, params: GemmParams | None = None, target=None):
    """``torch.matmul(a, b)`` for float32 NumPy arrays or CPU torch tensors
    (the result has the same kind): 1-D operands (a leading 1 prepended to
    ``a``, a trailing 1 appended to ``b``, both dropped from the result),
    2-D ``a @ b`` (:func:`gemm`), and N-D with broadcast batch dimensions
    (``schedules.problems.gemm.MatmulShapes``).  When ``b`` has no
    batch dimension, ``a``'s batch folds into its rows (one GEMM, as
    torch does); else both are broadcast (copied) to one ``(B, N, K) @ (B,
    K, M)`` :func:`batched_gemm`.  ``target="cuda"``: the 2-D and folded
    products on the GPU (:func:`gemm`).  No autograd here (a tensor that
    requires grad is refused): ``torch.ops.tiramisu.matmul`` (``import
    schedules.torch_ops``) has the same semantics and a backward."""
    grad = A.needing_grad(a, b)
    if grad:
        raise RuntimeError("matmul: an argument requires grad and schedules.matmul has no "
                           "backward; call torch.ops.tiramisu.matmul (import schedules.torch_ops),"
                           " which has one, or pass .detach()ed tensors")
    A.same_kind((a, b), ("a", "b"))
    if not A.is_torch(a) or a.device.type == "cpu":
        a, b = A.float32_array(a, "a", None), A.float32_array(b, "b", None)
    s = MatmulShapes.of(a.shape, b.shape)
    a2, b2 = s.operands(a, b)
    out = (gemm if s.folded else batched_gemm)(a2, b2, params, target)
    return out.reshape(s.out)


def gemm_int8(a, b, target=None):
    """``torch._int_mm(a, b)``: int8 ``(N, K) @ (K, M)`` into int32, exact
    (NumPy arrays or CPU torch tensors, the result of the same kind).  The
    u8 x s8 dot-product instruction (vpdpbusd) where the host has it, B
    shifted to unsigned and the compensation ``128 * rowsum(A)`` folded in
    (:mod:`schedules.blocks.dot_gemm`)."""
    p, args = GemmProblem.from_call("gemm_int8", a, b, None, target, gpu=False)
    return solve(SOLVERS["gemm_int8"], p, args, call="gemm_int8")


# ------------------------------------------------------------------ RNNs
def lstm(x, weights, h0=None, c0=None, *, bidirectional=False, sparse=False,
         schedule="auto", target=None, dropout=0.0, training=False,
         dropout_masks=None):
    """``torch.nn.LSTM`` (batch_first=False) forward: returns ``(y, (h_n, c_n))``.
    ``x`` is (T, B, I), or (T, I) unbatched (then h0/c0 are (L, H) and the
    results have no batch dimension, as torch's).
    ``weights``: ``module.all_weights`` (or CSR matrices, or :class:`RNNWeights`);
    ``bidirectional=True``: two lists per layer (forward, reverse) as torch
    lists them; lists ending with ``w_hr`` (``proj_size`` > 0) run the
    projected cell (:func:`_stacked`).
    ``sparse=True`` runs CSR products (exact zeros dropped); ``schedule``:
    "auto" (find step), "layer" or "wavefront" (:mod:`schedules.solvers.rnn_cpu`).
    ``target="cuda"``, or device arrays (torch CUDA tensors) with no target:
    the GPU wavefront of :mod:`schedules.solvers.rnn_cuda` (dense weights).
    ``bidirectional=True``: two lists per layer (forward, reverse) as torch
    lists them; lists ending with ``w_hr`` (``proj_size`` > 0) run the
    projected cell (:func:`_stacked`; no dropout there).
    Training (:mod:`schedules.solvers.rnn_train`): on torch tensors that
    require grad the results carry a backward (backpropagation through time
    in compiled kernels), float64 runs too, and ``dropout`` > 0 with
    ``training=True`` drops between layers with torch's masks (or the
    ``dropout_masks`` given, one (T, B, H) per layer but the last, as
    ``torch.ops.tiramisu.lstm`` takes them); ``schedule`` then also chooses
    the backward's ("auto": "layer")."""
    y, hn, cn = _rnn("lstm", x, weights, h0, c0, sparse, schedule, target, dropout, training,
                     dropout_masks, bidirectional)
    return y, (hn, cn)


def gru(x, weights, h0=None, *, bidirectional=False, sparse=False, schedule="auto",
        target=None, dropout=0.0, training=False, dropout_masks=None):
    """``torch.nn.GRU`` (batch_first=False) forward: returns ``(y, h_n)``.
    ``target="cuda"`` or device arrays: the GPU wavefront; ``bidirectional``,
    unbatched input, training and dropout as :func:`lstm`."""
    y, hn, _ = _rnn("gru", x, weights, h0, None, sparse, schedule, target, dropout, training,
                    dropout_masks, bidirectional)
    return y, hn


def _rnn(cell, x, weights, h0, c0, sparse, schedule, target, dropout, training, masks,
         bidirectional=False):
    """One LSTM/GRU call: a bidirectional or projected stack composed of
    one-direction calls (:func:`_stacked`); else the call parsed once
    (:func:`schedules.problems.rnn.rnn_call`: an inference problem, or a
    training one, ``SOLVERS["lstm_train"]``: a gradient may be asked,
    float64, or dropout) and solved."""
    stack = RnnStack.of(cell, weights, bidirectional)
    if stack is not None:
        x, h0, c0, unbatched = stack.parse(x, h0, c0, schedule, dropout, training, masks)
        y, hn, cn = _stacked(stack, x, h0, c0, sparse, schedule, target)
        if unbatched:
            y, hn, cn = (None if a is None else a[:, 0] for a in (y, hn, cn))
        return y, hn, cn
    p, args = rnn_call(cell, x, weights, h0, c0, sparse, schedule, target, dropout, training,
                       masks)
    return solve(SOLVERS[p.op], p, args, schedule, call=cell, param="schedule", repeats=2)


def _stacked(st, x, h0, c0, sparse, schedule, target):
    """``(y, h_n, c_n)`` of a bidirectional or projected stack (its
    arguments checked, :meth:`RnnStack.parse`), composed layer by layer:
    each direction of a layer is one unidirectional layer (the reverse one
    on the time-flipped sequence, its output flipped back), run by
    :func:`lstm` / :func:`gru` (or, projected, by the solver of
    ``SOLVERS["lstm_projected"]``); the directions' outputs concatenated
    along the features feed the next layer.  ``h_n``/``c_n`` are
    layer-major, directions inner, as torch's.  Autograd composes through
    the flips and concatenations: a gradient asked of a projected layer (no
    backward kernel) raises."""
    torch_in = A.is_torch(x)
    if torch_in:
        import torch
        flip, cat = (lambda a: torch.flip(a, [0])), torch.cat
    else:
        flip, cat = (lambda a: a[::-1]), np.concatenate
    seq, hs, cs = x, [], []
    for l in range(st.layers):
        outs = []
        for d in range(st.directions):
            k = l * st.directions + d
            state = [None if s is None else s[k:k + 1] for s in (h0, c0)]
            inp = flip(seq) if d else seq
            if st.proj:
                p, args = ProjectedProblem.from_call(inp, st.weights[k], *state, target)
                y, hn, cn = solve(SOLVERS["lstm_projected"], p, args, call="lstm")
            elif st.cell == "lstm":
                y, (hn, cn) = lstm(inp, [_present(st.weights[k][:4])], *state, sparse=sparse,
                                   schedule=schedule, target=target)
            else:
                y, hn = gru(inp, [_present(st.weights[k][:4])], state[0], sparse=sparse,
                            schedule=schedule, target=target)
                cn = None
            outs.append(flip(y) if d else y)
            hs.append(hn)
            cs.append(cn)
        seq = cat(outs, -1) if len(outs) > 1 else outs[0]
    hn = cat(hs, 0)
    cn = cat(cs, 0) if st.cell == "lstm" else None
    if not torch_in:
        seq = np.ascontiguousarray(seq)
    return seq, hn, cn


def _present(tensors):
    """The tensors given (``[w_ih, w_hh]`` without biases)."""
    return [m for m in tensors if m is not None]


# ------------------------------------------------------------------ the paper's blocks
def fold_batchnorm(weight, bias, gamma, beta, mean, var, eps=1e-5):
    """``(weight', bias')`` of the convolution ``conv(x, weight, bias)``
    followed by inference BatchNorm (``(y - mean) / sqrt(var + eps) * gamma +
    beta``, per output channel) as one convolution: ``weight`` scaled by
    ``gamma / sqrt(var + eps)`` per output channel, ``bias'`` = ``(bias -
    mean) * scale + beta`` (``bias`` None: 0), computed in float64, returned
    as float32 of ``weight``'s kind (NumPy arrays, or CPU torch tensors
    without grad)."""
    import numpy as np

    def arr(v, name, ndim):
        v = v.detach().cpu().numpy() if A.is_torch(v) else np.asarray(v)
        if v.ndim != ndim:
            raise ValueError(f"fold_batchnorm: {name} must be {ndim}-D, got shape {v.shape}")
        return v.astype(np.float64)
    w = arr(weight, "weight", 4)
    co = w.shape[0]
    stats = {k: arr(v, k, 1) for k, v in
             dict(gamma=gamma, beta=beta, mean=mean, var=var).items()}
    stats["bias"] = np.zeros(co) if bias is None else arr(bias, "bias", 1)
    for k, v in stats.items():
        if v.shape != (co,):
            raise ValueError(f"fold_batchnorm: {k} has {v.shape[0]} values for {co} output "
                             "channels")
    if not (isinstance(eps, (int, float)) and eps >= 0) or (stats["var"] + eps <= 0).any():
        raise ValueError(f"fold_batchnorm: var + eps must be positive (eps={eps!r})")
    scale = stats["gamma"] / np.sqrt(stats["var"] + eps)
    out = ((w * scale[:, None, None, None]).astype(np.float32),
           ((stats["bias"] - stats["mean"]) * scale + stats["beta"]).astype(np.float32))
    if A.is_torch(weight):
        import torch
        return tuple(torch.from_numpy(v) for v in out)
    return out


def vgg_block(x, w1, b1, w2, b2, pool=2, algo="auto"):
    """The VGG-16 block ``max_pool2d(relu(conv2d(relu(conv2d(x, w1, b1,
    padding=1)), w2, b2, padding=1)), pool)`` as two fused calls
    (:func:`conv_relu_maxpool`: conv+ReLU, then conv+ReLU+max-pool); ``w1`` /
    ``w2`` dense or sparse (a sparse weight runs the CSR kernels)."""
    y = conv_relu_maxpool(x, w1, b1, padding=1, pool=1, algo=algo)
    return conv_relu_maxpool(y, w2, b2, padding=1, pool=pool, algo=algo)


def resnet_block(x, w1, b1, w2, b2, residual=True, algo="auto"):
    """The ResNet basic block in inference, BatchNorm folded into the
    convolutions (:func:`fold_batchnorm`): ``relu(conv2d(relu(conv2d(x, w1,
    b1, padding=1)), w2, b2, padding=1) + x)`` (``residual=False``: the
    paper's conv-BN-ReLU-conv-BN, without the addition and the last ReLU).
    The first conv+ReLU is one fused call; the addition and ReLU after the
    second conv are array operations of ``x``'s kind.  ``w1``/``w2`` dense or
    sparse; stride 1, Cin == Cout when ``residual``."""
    y = conv_relu_maxpool(x, w1, b1, padding=1, pool=1, algo=algo)
    z = conv2d(y, w2, b2, padding=1, algo=algo)
    if not residual:
        return z
    if tuple(z.shape) != tuple(x.shape):
        raise ValueError(f"resnet_block: the residual needs the output shape {tuple(z.shape)} to "
                         f"be x's {tuple(x.shape)}; pass residual=False")
    z += x
    return z.clip(min=0)

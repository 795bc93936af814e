"""The operator library's public calls, each parse -> find -> run: the
problem parsed once from torch-style arguments (:mod:`schedules.problems`),
the solver chosen by the find step (:func:`schedules.core.find.find` over
:data:`schedules.registry.SOLVERS`; ``algo=`` / ``schedule=`` forces one),
and run on the checked arguments.  The ``*_function`` helpers give a
solver's scheduled Function, to inspect or re-schedule."""
from __future__ import annotations

from .blocks import rnn_cells as cells
from .blocks.blis import GemmParams
from .core import arrays as A
from .core.find import find
from .problems.conv import ConvProblem, ConvShape, conv_shape
from .problems.gemm import GemmProblem
from .problems.rnn import RnnProblem
from .registry import SOLVERS
from .solvers import conv_fused, conv_sparse
from .solvers.conv_dense import BUILDERS
from .solvers.rnn_cpu import SCHEDULES
from .weights.rnn import blocking

CONV_ALGOS = tuple(BUILDERS)                  # the dense conv2d solvers ("sparse" aside)
FUSED_ALGOS = conv_fused.ALGOS
RNN_SCHEDULES = SCHEDULES


def _solve(op, p, args, algo, call, param="algo", repeats=3):
    return find(p, SOLVERS[op], args, algo, call=call, param=param, repeats=repeats).run(p, args)


# ------------------------------------------------------------------ convolutions
def conv2d(input, weight, bias=None, stride=1, padding=0, dilation=1, groups=1, algo="auto",
           target=None):
    """2-D convolution with ``torch.nn.functional.conv2d``'s signature and
    defaults: NCHW float32 (NumPy arrays or CPU torch tensors; the result has
    the same kind); ``stride``, ``padding`` and ``dilation`` an int or a
    (height, width) pair; ``padding`` also "valid" or "same".  ``algo``:
    "auto" (find step), "direct", "depthwise" (groups = channels, see
    :mod:`schedules.solvers.conv_depthwise`), "im2col", "spatial_pack" or "sparse"
    (:func:`schedules.sparse_conv2d`; ``weight`` may then also be a sparse
    weight, see there).  ``target="cuda"``, or torch CUDA tensors with no
    target: the CUDA solvers (:mod:`schedules.solvers.conv_cuda`; a sparse
    weight: :mod:`schedules.solvers.conv_sparse_cuda`; ``groups=1``), the
    result on the input's device."""
    p, args = ConvProblem.from_call("conv2d", input, weight, bias, stride, padding, dilation,
                                    groups, algo=algo, target=target)
    return _solve("conv2d", p, args, algo, "conv2d")


def conv2d_function(n, ci, h, w, co, kh=3, kw=3, stride=1, padding=0, dilation=1, groups=1,
                    algo="direct", bias=True):
    """The scheduled Function of one algorithm, to inspect or re-schedule
    (``stride``, ``padding``, ``dilation`` as in :func:`conv2d`)."""
    good = isinstance(groups, int) and not isinstance(groups, bool) and groups >= 1
    s = ConvShape.make((n, ci, h, w), (co, ci // groups if good else ci, kh, kw), stride,
                       padding, dilation, groups, op="conv2d_function")   # (bad groups: named)
    return BUILDERS[algo](s, bias=bias)


def conv_relu_maxpool(input, weight, bias=None, stride=1, padding=0, dilation=1, groups=1, *,
                      pool=2, algo="auto", target=None):
    """``max_pool2d(relu(conv2d(input, weight, bias, stride, padding, dilation,
    groups)), pool)`` in one fused pass (see :mod:`schedules.solvers.conv_fused`):
    the convolution's arguments and defaults are :func:`conv2d`'s (torch's);
    ``groups`` must be 1.  ``algo``: "auto" (find step), "direct",
    "winograd" (3x3 kernels, stride 1, no dilation, ``pool=2``) or "sparse"
    (:func:`schedules.sparse_conv_relu_maxpool`; ``weight`` may be sparse)."""
    if groups != 1:
        raise ValueError(f"conv_relu_maxpool: groups must be 1, got {groups!r}; use conv2d")
    p, args = ConvProblem.from_call("conv_relu_maxpool", input, weight, bias, stride, padding,
                                    dilation, groups, algo=algo, target=target, pool=pool,
                                    gpu=False)
    return _solve("conv_relu_maxpool", p, args, algo, "conv_relu_maxpool")


def sparse_conv2d(x, w, bias=None, stride=1, padding=0, dilation=1, groups=1, target=None):
    """``torch.nn.functional.conv2d`` with a sparse weight: NCHW float32, NumPy
    or CPU torch (the result has the input's kind).  ``w``: a dense weight
    with zeros (converted on every call), :class:`CSRWeights` (convert once
    with ``CSRWeights.from_dense``), a torch sparse-CSR tensor or a scipy CSR
    matrix of shape (Cout, Cin*K*K) (a square K x K kernel).  ``stride``,
    ``padding``, ``dilation``: ints or pairs; ``groups`` must be 1.
    ``target="cuda"``, or torch CUDA tensors with no target: the CUDA
    solver :mod:`schedules.solvers.conv_sparse_cuda`, the result on the
    input's device."""
    p, args = ConvProblem.from_call("conv2d", x, w, bias, stride, padding, dilation, groups,
                                    algo="sparse", target=target, name="sparse_conv2d",
                                    names=("x", "w"))
    return _solve("conv2d", p, args, "sparse", "sparse_conv2d")


def sparse_conv_relu_maxpool(x, w, bias=None, pool=2, *, stride=1, padding=0, dilation=1,
                             target=None):
    """``max_pool2d(relu(conv2d(x, w, bias, stride, padding, dilation)), pool)``
    with a sparse ``w`` (as in :func:`sparse_conv2d`), in one pass: each
    output channel's row is pooled from registers' tile results in L1; no
    conv-sized intermediate exists.  The convolution's keywords and defaults
    are torch's (as :func:`schedules.conv_relu_maxpool`); the TIRAMISU
    paper's block is ``padding=1``."""
    p, args = ConvProblem.from_call("conv_relu_maxpool", x, w, bias, stride, padding, dilation, 1,
                                    algo="sparse", target=target, pool=pool,
                                    name="sparse_conv_relu_maxpool", names=("x", "w"), gpu=False)
    return _solve("conv_relu_maxpool", p, args, "sparse", "sparse_conv_relu_maxpool")


def sparse_conv2d_function(n, ci, h, w, co, kh=3, kw=3, stride=1, padding=0, dilation=1,
                           bias=True, pool=1, relu=False, **schedule):
    """The scheduled Function of the CSR sparse convolution, to inspect or
    re-schedule."""
    s = conv_shape((n, ci, h, w), (co, ci, kh, kw), stride, padding, dilation,
                   "sparse_conv2d_function")
    return conv_sparse.function(s, bias=bias, pool=pool, relu=relu, **schedule)


# ------------------------------------------------------------------ GEMM
def gemm(a, b, params: GemmParams | None = None, target=None):
    """``a @ b`` for float32 matrices (NumPy arrays or CPU torch tensors, the
    result has the same kind).  Compiles once per shape (cached).
    ``target="cuda"``, or device arrays (torch CUDA tensors) with no target:
    the CUDA solver of :mod:`schedules.solvers.gemm_cuda` (the result
    allocated by torch on the inputs' device)."""
    p, args = GemmProblem.from_call("gemm", a, b, params, target)
    return _solve("gemm", p, args, "auto", "gemm")


def batched_gemm(a, b, params: GemmParams | None = None, target=None):
    """``a @ b`` for float32 batches ``(B, N, K) @ (B, K, M)``."""
    p, args = GemmProblem.from_call("batched_gemm", a, b, params, target, gpu=False)
    return _solve("batched_gemm", p, args, "auto", "batched_gemm")


# ------------------------------------------------------------------ RNNs
def lstm(x, weights, h0=None, c0=None, *, sparse=False, schedule="auto", target=None):
    """``torch.nn.LSTM`` (batch_first=False) forward: returns ``(y, (h_n, c_n))``.
    ``weights``: ``module.all_weights`` (or CSR matrices, or :class:`RNNWeights`);
    ``sparse=True`` runs CSR products (exact zeros dropped); ``schedule``:
    "auto" (find step), "layer" or "wavefront" (:mod:`schedules.solvers.rnn_cpu`).
    ``target="cuda"``, or device arrays (torch CUDA tensors) with no target:
    the GPU wavefront of :mod:`schedules.solvers.rnn_cuda` (dense weights)."""
    grad = A.needing_grad(x, weights, h0, c0)
    p, args = RnnProblem.from_call("lstm", x, weights, h0, c0, sparse, target)
    y, hn, cn = _solve("lstm", p, args, schedule, "lstm", "schedule", repeats=2)
    if grad:                        # no backward kernel yet: a gradient asked of it raises
        y, hn, cn = A.without_backward("schedules.lstm", (y, hn, cn), grad)
    return y, (hn, cn)


def gru(x, weights, h0=None, *, sparse=False, schedule="auto", target=None):
    """``torch.nn.GRU`` (batch_first=False) forward: returns ``(y, h_n)``.
    ``target="cuda"`` or device arrays: the GPU wavefront, as :func:`lstm`."""
    grad = A.needing_grad(x, weights, h0)
    p, args = RnnProblem.from_call("gru", x, weights, h0, None, sparse, target)
    y, hn, _ = _solve("gru", p, args, schedule, "gru", "schedule", repeats=2)
    if grad:
        y, hn = A.without_backward("schedules.gru", (y, hn), grad)
    return y, hn


def _rnn_function(cell, T, B, H, layers, schedule, sparse):
    blk = blocking(cells.GATES[cell], B)
    if schedule == "layer":
        return cells.layer_function(cell, T, B, H, H, blk, sparse=sparse)
    if schedule == "wavefront" and not sparse:
        return cells.wavefront_function(cell, layers, T, B, H, blk)
    raise ValueError(f"schedule must be 'layer' or 'wavefront' (dense), got {schedule!r}")


def lstm_function(T, B, H, layers=1, schedule="layer", sparse=False):
    """The scheduled Function of the LSTM recurrence: one layer's T steps
    (``"layer"``, its input projection given as ``xp``) or ``layers`` stacked
    layers of input size H (``"wavefront"``)."""
    return _rnn_function("lstm", T, B, H, layers, schedule, sparse)


def gru_function(T, B, H, layers=1, schedule="layer", sparse=False):
    """The same for the GRU."""
    return _rnn_function("gru", T, B, H, layers, schedule, sparse)

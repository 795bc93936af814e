"""The operator library: algorithms written in tiramisu_py with tuned
schedules, callable in one line on NumPy arrays or torch tensors.  Uses only
the public language and scheduling API (no hand-written C)::

    schedules.gemm(a, b)                      # Goto/BLIS GEMM
    schedules.batched_gemm(a, b)              # (B, N, K) @ (B, K, M), a batch of 1 broadcast
    schedules.matmul(a, b)                    # torch.matmul: 1-D, 2-D, N-D broadcast
    schedules.gemm_int8(a, b)                 # int8 x int8 -> int32, torch._int_mm
    schedules.conv2d(input, weight, bias=None, stride=1, padding=0, dilation=1, groups=1,
                     algo="auto")     # torch.nn.functional.conv2d's signature and defaults
    schedules.conv_relu_maxpool(input, weight, bias=None, stride=1, padding=0, dilation=1,
                                groups=1, *, pool=2, algo="auto")   # direct or Winograd
    schedules.sparse_conv2d(x, schedules.CSRWeights.from_dense(w), bias, stride=1, padding=1)
    schedules.sparse_conv_relu_maxpool(x, csr_w, bias, pool=2, padding=1)
    schedules.resize_conv_relu_maxpool(x, size, weight, bias=None, pool=2, *, mode="bilinear",
                                       stride=1, padding=0, dilation=1)   # resize fused in
    schedules.prune_magnitude(w, density)     # the paper's sparse weights' stand-in
    schedules.vgg_block(x, w1, b1, w2, b2)    # the paper's VGG and ResNet blocks, dense or
    schedules.resnet_block(x, *schedules.fold_batchnorm(w1, b1, *bn1), w2, b2)   # sparse
    y, (h_n, c_n) = schedules.lstm(x, weights, h0=None, c0=None)   # torch.nn.LSTM's forward
    y, h_n = schedules.gru(x, weights, h0=None)                     # torch.nn.GRU's forward

Each operator also has a ``*_function(...)`` giving its scheduled Function, for
users who want to change the schedule (``schedules.gemm_function(n, m, k)``).  The design (problems, solvers, one
registry, one find step): :mod:`schedules.registry`.
``schedules.gemm_cuda_function(n, m, k)`` is GEMM scheduled for CUDA as
``gemm(..., target="cuda")`` runs it (warp tiles, a cp.async pipeline;
``.compile(target="cuda")``), and
``schedules.rnn_cuda_function(L, T, B, I, H, cell="lstm")`` the stacked
LSTM/GRU wavefront.  ``target="cuda"`` (or torch CUDA tensors) runs
``gemm``, ``lstm`` and ``gru`` on the GPU.  ``schedules.tune_library()``
(``tiramisu-py tune gemm conv sparse rnn``) times the solvers' parameters on
this host once and records them; every later call on this host uses them.
"""
from .api import (batched_gemm, conv2d, conv_relu_maxpool, gemm, gemm_int8, gru, lstm, matmul,
                  max_pool2d, resize_conv_relu_maxpool, sparse_conv2d, sparse_conv_relu_maxpool,
                  fold_batchnorm, vgg_block, resnet_block)
from .blocks.blis import GemmParams
from .blocks.blis import default_params as gemm_params
from .blocks.blis import function as gemm_function
from .host import host
from .registry import CONV_ALGOS, FUSED_ALGOS, RNN_SCHEDULES
from .solvers.conv_dense import conv2d_function
from .solvers.conv_fused import function as conv_relu_maxpool_function
from .solvers.conv_sparse import sparse_conv2d_function
from .solvers.gemm_cuda import solver_function as gemm_cuda_function
from .solvers.resize_conv import function as resize_conv_relu_maxpool_function
from .solvers.rnn_cpu import gru_function, lstm_function
from .solvers.rnn_cuda import function as rnn_cuda_function
from .tuner import tune_library
from .weights.csr import CSRWeights
from .weights.prune import prune_magnitude
from .weights.rnn import RNNWeights

__all__ = ["gemm", "batched_gemm", "gemm_int8", "gemm_function", "gemm_params", "GemmParams", "conv2d",
           "conv2d_function", "conv_relu_maxpool", "conv_relu_maxpool_function", "CONV_ALGOS",
           "FUSED_ALGOS",
           "host", "gemm_cuda_function", "rnn_cuda_function", "CSRWeights", "sparse_conv2d", "sparse_conv2d_function",
           "sparse_conv_relu_maxpool", "lstm", "gru", "lstm_function", "gru_function", "RNNWeights",
           "RNN_SCHEDULES", "resize_conv_relu_maxpool", "resize_conv_relu_maxpool_function",
           "prune_magnitude", "fold_batchnorm", "vgg_block", "resnet_block", "matmul",
           "max_pool2d", "tune_library"]

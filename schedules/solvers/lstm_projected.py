"""The CPU solver of one LSTM layer with a projection (``proj_size`` > 0):
the nest of :mod:`schedules.blocks.lstm_projected` built once per shape and
target (C or LLVM), run on torch's matrices (reshaped, not repacked).  The
stack around it (layers, directions) is composed by :func:`schedules.lstm`."""
from __future__ import annotations

import numpy as np

from ..blocks.lstm_projected import lstm_projected_function
from ..core.kernels import kernel, target_of


def lstm_projected_layer(x, weights, h0, c0, target):
    """``(y (T, B, P), h_n (B, P), c_n (B, H))`` of one direction of one
    layer: ``x`` (T, B, I), ``weights`` ``(w_ih, w_hh, b_ih, b_hh, w_hr)``
    (biases may be None), ``h0`` (B, P) and ``c0`` (B, H) or None; float32
    NumPy arrays."""
    if target_of(target) == "cuda":
        raise ValueError("target='cuda': an LSTM with proj_size > 0 has no GPU schedule; run it "
                         "on the CPU (target='c' or 'llvm')")
    T, B, I = x.shape
    w_ih, w_hh, b_ih, b_hh, w_hr = weights
    P, H = w_hr.shape
    bias = np.zeros(4 * H, np.float32)
    for b in (b_ih, b_hh):
        if b is not None:
            bias += b
    kern = kernel(("lstm_projected", T, B, I, H, P),
                  lambda: lstm_projected_function(T, B, I, H, P), target)
    out = kern(x=np.ascontiguousarray(x), wi=np.ascontiguousarray(w_ih).reshape(4, H, I),
               wh=np.ascontiguousarray(w_hh).reshape(4, H, P), wr=np.ascontiguousarray(w_hr),
               bias=bias.reshape(4, H),
               h0=np.zeros((B, P), np.float32) if h0 is None else np.ascontiguousarray(h0),
               c0=np.zeros((B, H), np.float32) if c0 is None else np.ascontiguousarray(c0))
    y = out["y"]
    return np.ascontiguousarray(y[1:]), y[T].copy(), out["c"]

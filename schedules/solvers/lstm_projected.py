"""The CPU solver of one LSTM layer with a projection (``proj_size`` > 0):
the nest of :mod:`schedules.blocks.lstm_projected` built once per shape and
target (C or LLVM), run on torch's matrices (reshaped, not repacked).  The
stack around it (layers, directions) is composed by :func:`schedules.lstm`."""
from __future__ import annotations

import numpy as np

from ..blocks.lstm_projected import lstm_projected_function
from ..blocks.rnn_common import RnnSolver
from ..core.kernels import kernel


class Projected(RnnSolver):
    """One direction of one projected layer
    (:class:`~schedules.problems.rnn.ProjectedProblem`): ``(y (T, B, P),
    h_n (1, B, P), c_n (1, B, H))`` of the input's kind."""
    op = "lstm_projected"
    name = "layer"
    no_backward = "schedules.lstm with proj_size > 0"

    def build(self, p, params):
        return lstm_projected_function(p.T, p.B, p.input_size, p.hidden, p.proj)

    def run(self, p, args):
        T, B, H, P = p.T, p.B, p.hidden, p.proj
        w_ih, w_hh, b_ih, b_hh, w_hr = args.weights
        bias = np.zeros(4 * H, np.float32)
        for b in (b_ih, b_hh):
            if b is not None:
                bias += b
        kern = kernel(("lstm_projected", T, B, p.input_size, H, P),
                      lambda: self.build(p, {}), p.target)
        out = kern(x=np.ascontiguousarray(args.x),
                   wi=np.ascontiguousarray(w_ih).reshape(4, H, p.input_size),
                   wh=np.ascontiguousarray(w_hh).reshape(4, H, P), wr=np.ascontiguousarray(w_hr),
                   bias=bias.reshape(4, H),
                   h0=np.zeros((B, P), np.float32) if args.h0 is None
                   else np.ascontiguousarray(args.h0),
                   c0=np.zeros((B, H), np.float32) if args.c0 is None
                   else np.ascontiguousarray(args.c0))
        y = out["y"]
        outs = (np.ascontiguousarray(y[1:]), y[T].copy()[None], out["c"][None])
        if args.torch_in:
            import torch
            outs = tuple(torch.from_numpy(np.ascontiguousarray(o)) for o in outs)
        return outs

"""LSTM/GRU training on the CPU: the forward that keeps every layer's states,
dropout between layers drawn as torch draws it, and backpropagation through
time with the kernels of :mod:`schedules.blocks.rnn_grad` (float32 and
float64, ``target`` "llvm" or "cpu").

Layer-major: the layers run bottom up in the forward (layer ``l``'s output,
times its dropout mask, is layer ``l + 1``'s input) and top down in the
backward (layer ``l``'s input gradient, times the mask, is layer ``l - 1``'s
output gradient); within a layer, the reverse-time recurrence is one kernel.

:func:`run` is what ``schedules.lstm`` / ``gru`` call when a gradient may be
asked (torch inputs that require grad) or the dtype is float64: it returns
the results attached to the inputs by a ``torch.autograd.Function`` whose
backward runs :func:`backward`.  :func:`forward_states` is the forward of
``torch.ops.tiramisu.lstm_train`` / ``gru_train`` (their results and every
layer's h states, an output of theirs that autograd keeps); :func:`gradients`
runs the backward from those states, or recomputes the forward where none
are given (the backward of ``torch.ops.tiramisu.lstm`` / ``gru``, which keep
their schemas' three / two results).
"""
from __future__ import annotations

from dataclasses import replace

import numpy as np

from ..blocks import outer_gemm, rnn_grad
from ..blocks.blis import default_params
from ..blocks.blis import kernel as gemm_kernel
from ..blocks.rnn_common import RnnSolver
from ..core.arrays import is_torch
from ..core.find import find
from ..core.kernels import kernel
from ..problems.rnn import RnnProblem, is_float64, train_array, train_check, train_masks
from ..weights.rnn import GATES


def _forward_kernel(cell, T, B, K, H, dtype, target):
    return kernel(("rnn_train_forward", cell, T, B, K, H, dtype),
                  lambda: rnn_grad.layer_forward(cell, T, B, K, H, dtype), target)


def _backward_kernel(cell, T, B, K, H, dtype, target):
    return kernel(("rnn_train_backward", cell, T, B, K, H, dtype),
                  lambda: rnn_grad.layer_backward(cell, T, B, K, H, dtype), target)


def _recurrence_kernel(cell, T, B, H, dtype, target):
    return kernel(("rnn_train_recurrence", cell, T, B, H, dtype),
                  lambda: rnn_grad.layer_recurrence(cell, T, B, H, dtype), target)


def _gemm(a, b, target, transposed=False):
    """``a @ b`` (``transposed``: ``a @ b.T``) of float32 matrices by the
    library's GEMM (:mod:`schedules.blocks.blis`)."""
    a, b = np.ascontiguousarray(a), np.ascontiguousarray(b)
    n, k = a.shape
    m = b.shape[0] if transposed else b.shape[1]
    return gemm_kernel(n, m, k, default_params(n, m, k, b_transposed=transposed), target,
                       b_transposed=transposed)(a, b)


def _layer_backward_float32(cell, T, B, K, H, args, target):
    """One float32 layer's backward (the outputs of :func:`_backward_kernel`):
    the products without recurrence as library GEMMs over all steps (the
    pre-activations ``x @ w_ih^T`` and ``h @ w_hh^T``, the input's gradient
    from the gates' ones; the weights' as sums of outer products over the
    steps, :mod:`schedules.blocks.outer_gemm`), the reverse-time
    recurrence in :func:`rnn_grad.layer_recurrence`'s kernel."""
    G = GATES[cell]
    x2 = args["x"].reshape(T * B, K)
    h2 = args["h"][:T].reshape(T * B, H)
    zx = _gemm(x2, args["w_ih"], target, transposed=True).reshape(T, B, G, H)
    zh = _gemm(h2, args["w_hh"], target, transposed=True).reshape(T, B, G, H)
    rest = {k: v for k, v in args.items() if k not in ("x", "w_ih")}
    out = _recurrence_kernel(cell, T, B, H, "float32", target)(zx=zx, zh=zh, **rest)
    dzx = out["dzx"].reshape(T * B, G * H)
    dzh = dzx if cell == "lstm" else out["dzh"].reshape(T * B, G * H)
    out["dx"] = _gemm(dzx, args["w_ih"], target).reshape(T, B, K)
    # the weights' gradients: sums over the steps of outer products, read as stored
    out["dw_ih"] = outer_gemm.product(np.ascontiguousarray(dzx), np.ascontiguousarray(x2), target)
    out["dw_hh"] = outer_gemm.product(np.ascontiguousarray(dzh), np.ascontiguousarray(h2), target)
    return out


# ------------------------------------------------------------------ NumPy level
def forward(cell, layers, x, h0, c0, masks=None, target=None):
    """``(y, h_n, c_n, saved)``: the stack's results and, per layer, its
    ``(input, h states [T + 1][B][H])`` for :func:`backward`."""
    T, B, _ = x.shape
    dtype = str(x.dtype)
    L, H = len(layers), layers[0][1].shape[1]
    hn = np.empty((L, B, H), dtype)
    cn = np.empty((L, B, H), dtype) if cell == "lstm" else None
    inp, saved = x, []
    for l, (w_ih, w_hh, b_ih, b_hh) in enumerate(layers):
        kern = _forward_kernel(cell, T, B, inp.shape[2], H, dtype, target)
        args = dict(x=inp, w_ih=w_ih, w_hh=w_hh, b_ih=b_ih, b_hh=b_hh, h0=h0[l])
        if cell == "lstm":
            out = kern(c0=c0[l], **args)
            h, cn[l] = out["h"], out["c"][T]
        else:
            h = kern(**args)
        hn[l] = h[T]
        saved.append((inp, h))
        inp = h[1:]
        if masks is not None and l < L - 1:
            inp = inp * masks[l]
        inp = np.ascontiguousarray(inp)
    return inp, hn, cn, saved


def _wavefront_kernel(cell, L, T, B, H, dtype, target):
    return kernel(("rnn_train_wavefront_backward", cell, L, T, B, H, dtype),
                  lambda: rnn_grad.wavefront_backward(cell, L, T, B, H, dtype), target)


def stacked_from(layers):
    """The first layer of the wavefront's stack (the layers of input size H)."""
    return 0 if layers[0][0].shape[1] == layers[0][1].shape[1] else 1


def check_schedule(schedule, layers):
    """"layer" or "wavefront" for the backward ("auto": "layer"), refused
    as the forward's solvers refuse it."""
    if schedule in ("auto", "layer"):
        return "layer"
    if schedule != "wavefront":
        raise ValueError(f"schedule must be 'auto', 'layer' or 'wavefront', got {schedule!r}")
    if len(layers) - stacked_from(layers) < 2:
        raise ValueError("schedule='wavefront' needs at least two stacked layers of input size H "
                         "and dense weights; use 'layer'")
    return schedule


def backward(cell, layers, saved, c0, dy, dhn, dcn, masks=None, target=None, schedule="layer"):
    """``(dx, [[dw_ih, dw_hh, db_ih, db_hh] per layer], dh0, dc0)`` from the
    gradients of ``y`` (T, B, H), ``h_n`` and ``c_n`` (L, B, H).
    ``schedule``: "layer" (a kernel per layer, top down) or "wavefront" (the
    stacked layers of input size H in one skewed kernel, then layer 0
    layer-major when its input size differs)."""
    L = len(layers)
    T, B, H = dy.shape
    dtype = str(dy.dtype)
    G = GATES[cell]
    dW = [None] * L
    dh0 = np.empty((L, B, H), dtype)
    dc0 = np.empty((L, B, H), dtype) if cell == "lstm" else None
    low = L
    if schedule == "wavefront":
        low = stacked_from(layers)
        n = L - low
        def stack(k):
            return np.ascontiguousarray(np.stack([layers[l][k] for l in range(low, L)]))
        keep = np.ones((n, T, B, H), dtype)
        for i, l in enumerate(range(low, L)):
            if masks is not None and l > 0:
                keep[i] = masks[l - 1]
        args = dict(x=np.stack([saved[l][0] for l in range(low, L)]),
                    h=np.stack([saved[l][1] for l in range(low, L)]),
                    w_ih=stack(0), w_hh=stack(1), b_ih=stack(2), b_hh=stack(3), keep=keep,
                    dy=np.ascontiguousarray(dy), dh_n=np.ascontiguousarray(dhn[low:]))
        if cell == "lstm":
            args.update(c0=np.ascontiguousarray(c0[low:]), dc_n=np.ascontiguousarray(dcn[low:]))
        out = _wavefront_kernel(cell, n, T, B, H, dtype, target)(**args)
        for i, l in enumerate(range(low, L)):
            dW[l] = [out["dw_ih"][i].reshape(G * H, H), out["dw_hh"][i].reshape(G * H, H),
                     out["db_ih"][i].reshape(G * H), out["db_hh"][i].reshape(G * H)]
        dh0[low:] = out["dH"][:, T]
        if dc0 is not None:
            dc0[low:] = out["dC"][:, T]
        dy = out["dys"][0]
    for l in reversed(range(low)):
        (w_ih, w_hh, b_ih, b_hh), (inp, h) = layers[l], saved[l]
        K = inp.shape[2]
        args = dict(x=inp, h=h, w_ih=w_ih, w_hh=w_hh, b_ih=b_ih, b_hh=b_hh,
                    dy=np.ascontiguousarray(dy), dh_n=dhn[l])
        if cell == "lstm":
            args.update(c0=c0[l], dc_n=dcn[l])
        if dtype == "float32" and min(T, B, K, H) > 0:
            out = _layer_backward_float32(cell, T, B, K, H, args, target)
        else:
            out = _backward_kernel(cell, T, B, K, H, dtype, target)(**args)
        dW[l] = [out["dw_ih"].reshape(G * H, K), out["dw_hh"].reshape(G * H, H),
                 out["db_ih"].reshape(G * H), out["db_hh"].reshape(G * H)]
        dh0[l] = out["dH"][T]
        if dc0 is not None:
            dc0[l] = out["dC"][T]
        dy = out["dx"]
        if masks is not None and l > 0:
            dy = dy * masks[l - 1]
    return dy, dW, dh0, dc0


def _zeros_or(g, shape, dtype):
    return np.zeros(shape, dtype) if g is None else train_array(g, "grad", dtype)


def forward_states(cell, x, weights, h0, c0, masks=None, target=None, solve=None):
    """The forward of a training call keeping what its backward needs:
    ``(y, h_n, c_n, states)`` as NumPy arrays, ``states`` (L, T + 1, B, H)
    each layer's h states (its first the layer's h0).  ``solve``: the
    library's forward, as :func:`run` takes it (float32); else, and in
    float64, the plain kernels of :func:`forward`."""
    checked = train_check(cell, x, weights, h0, c0)
    return _forward_states(cell, checked, train_masks(checked[1], masks), target, solve)


def _forward_states(cell, checked, m, target, solve):
    """:func:`forward_states` of the checked arguments ``(layers, x, h0, c0)``
    (:func:`~schedules.problems.rnn.train_check`) and masks ``m``."""
    layers, xa, h0a, c0a = checked
    if solve is None or is_float64(xa):
        y, hn, cn, saved = forward(cell, layers, xa, h0a, c0a, m, target)
    else:
        train = {"masks": m}
        y, hn, cn = (None if a is None else train_array(a, "result") for a in solve(train))
        saved = train["states"]
    return y, hn, cn, np.stack([h for _, h in saved])


def gradients(cell, x, weights, h0, c0, dy, dhn, dcn, masks=None, target=None,
              schedule="layer", solve=None, states=None):
    """The gradients of the stack's inputs (NumPy): ``(dx, dW, dh0, dc0)`` as
    :func:`backward`; ``dy``/``dhn``/``dcn`` may be None (zero).  ``states``:
    the h states :func:`forward_states` kept; None: the forward recomputed
    (``solve`` as there)."""
    checked = train_check(cell, x, weights, h0, c0)
    layers, xa, _, c0a = checked
    schedule = check_schedule(schedule, layers)
    m = train_masks(xa, masks)
    if states is None:
        states = _forward_states(cell, checked, m, target, solve)[3]
    states = train_array(states, "states", str(xa.dtype))
    L, T1, B, H = len(layers), xa.shape[0] + 1, xa.shape[1], layers[0][1].shape[1]
    if states.shape != (L, T1, B, H):
        raise ValueError(f"states: expected shape {(L, T1, B, H)} (the h states of each layer, "
                         f"h0 first), got {states.shape}")
    saved, inp = [], xa
    for l in range(L):                   # each layer's input: the one below's output, masked
        saved.append((inp, states[l]))
        inp = states[l][1:] if m is None or l == L - 1 else states[l][1:] * m[l]
    dt = str(xa.dtype)
    return backward(cell, layers, saved, c0a, _zeros_or(dy, (T1 - 1, B, H), dt),
                    _zeros_or(dhn, (L, B, H), dt), _zeros_or(dcn, (L, B, H), dt), m, target,
                    schedule)


# ------------------------------------------------------------------ torch level
def _needing_grad(inputs):
    """Whether grad mode is on and a torch tensor among ``inputs`` requires grad."""
    if not any(is_torch(a) for a in inputs):
        return False
    import torch
    return torch.is_grad_enabled() and any(is_torch(a) and a.requires_grad for a in inputs)


def run(cell, args, schedule="layer", solve=None):
    """``(y, h_n, c_n)`` (c_n None for the GRU) of x's kind for the checked
    arguments ``args`` (:class:`~schedules.problems.rnn.TrainArgs`); torch
    results are attached to the inputs that require grad by an autograd node
    whose backward runs :func:`backward` (``schedule``) on the states the
    forward kept.  ``solve(train)``: the library's forward (float32),
    returning ``(y, h_n, c_n)`` and filling ``train["states"]``
    (``train["masks"]`` between the layers); without it, the plain kernels
    of :func:`forward`."""
    layers, xa, h0a, c0a, m, target = (args.layers, args.xa, args.h0a, args.c0a, args.masks,
                                       args.target)
    if solve is None:
        y, hn, cn, saved = forward(cell, layers, xa, h0a, c0a, m, target)
    else:
        train = {"masks": m}
        y, hn, cn = (train_array(a, "result") if a is not None else None for a in solve(train))
        saved = train["states"]
    x, h0, c0, weights = args.x, args.h0, args.c0, args.weights
    inputs = [x, h0, c0] + [w for layer in weights for w in layer]
    grad = _needing_grad(inputs)
    if not is_torch(x) and not grad:
        return y, hn, cn
    import torch
    outs = [torch.from_numpy(y), torch.from_numpy(hn)] + ([torch.from_numpy(cn)] if cn is not None
                                                          else [])
    if not grad:      # (a NumPy x with weights that need grad: tensors, to carry the graph)
        return outs[0], outs[1], outs[2] if cn is not None else None
    per = len(weights[0])

    class RecurrentBackward(torch.autograd.Function):
        @staticmethod
        def forward(ctx, *_):
            return tuple(outs)

        @staticmethod
        def backward(ctx, *grads):
            dt = str(xa.dtype)
            g = [_zeros_or(None if a is None else a.detach().numpy(), o.shape, dt)
                 for a, o in zip(grads, outs)]
            dx, dW, dh0, dc0 = backward(cell, layers, saved, c0a, g[0], g[1],
                                        g[2] if cell == "lstm" else None, m, target,
                                        schedule)
            res = [torch.from_numpy(dx), torch.from_numpy(dh0),
                   torch.from_numpy(dc0) if dc0 is not None else None]
            for layer in dW:
                res += [torch.from_numpy(a) for a in layer[:per]]
            return tuple(r if is_torch(a) and a.requires_grad else None
                         for r, a in zip(res, inputs))

    tensors = [a if is_torch(a) else torch.empty(0) for a in inputs]
    res = RecurrentBackward.apply(*tensors)
    return res[0], res[1], res[2] if cn is not None else None


# ------------------------------------------------------------------ the solvers
def states_solver(solvers, cell, x, weights, h0, c0, target=None, schedule="auto"):
    """``solve(train)`` for :func:`run` and :func:`gradients`: the forward
    found among ``solvers`` (the op's, :data:`schedules.registry.SOLVERS`)
    for this call's (batched, dense, float32) arguments, returning ``(y,
    h_n, c_n)`` and keeping each layer's ``(input, h states)`` in
    ``train["states"]`` (with ``train["masks"]``, the dropout between the
    layers, the layers run one by one: layer-major)."""
    def solve(train):
        p, args = RnnProblem.from_call(cell, x, weights, h0, c0, False, target)
        forward = "layer" if train["masks"] else schedule
        return find(p, solvers, args, forward, call=cell, param="schedule",
                    repeats=2).run(p, replace(args, train=train))
    return solve


class _Training(RnnSolver):
    """Training ``cell`` (:class:`~schedules.problems.rnn.RnnTraining`): the
    forward found among ``forward`` (the op's solvers, which the registry
    gives) keeping each layer's states, or in float64 the plain kernels of
    :func:`forward`; the results attached to autograd, whose backward runs
    this solver's schedule of :func:`backward`.  The call's ``schedule``
    chooses both: "auto" the forward found and the layer-major backward."""

    def __init__(self, cell, forward):
        self.op, self.forward = f"{cell}_train", forward

    def states(self, p, args):
        """The forward for :func:`run`: :func:`states_solver` (None: float64)."""
        if p.dtype == "float64":
            return None
        return states_solver(self.forward, p.cell, args.x, args.weights, args.h0, args.c0,
                             args.target, args.schedule)


class TrainLayer(_Training):
    """The layer-major backward: a kernel per layer, top down."""
    name = "layer"

    def run(self, p, args):
        return run(p.cell, args, "layer", self.states(p, args))


class TrainWavefront(_Training):
    """The wavefront backward: the stacked layers of input size H in one
    skewed kernel, then layer 0 layer-major when its input size differs.
    Its weights' gradients are summed in the nest (the layer-major's by the
    library's GEMMs in float32): "auto" never offers it."""
    name = "wavefront"
    numerics = "wavefront"

    def applicable(self, p):
        why = super().applicable(p)
        if why is True and p.stacked < 2:
            return "needs at least two stacked layers of input size H and dense weights; use 'layer'"
        return why

    def run(self, p, args):
        return run(p.cell, args, "wavefront", self.states(p, args))

"""The recurrent ``torch.ops.tiramisu`` ops: ``lstm`` and ``gru`` (forward
through :mod:`schedules.api`), and their backward as ops of their own,
``lstm_backward`` / ``gru_backward`` (backpropagation through time in
compiled kernels, :mod:`schedules.solvers.rnn_train`), so that
``torch.compile`` traces training too.  Registered by importing
:mod:`schedules.torch_ops`."""
from __future__ import annotations

import torch

from tiramisu_py.runtime.torch_bridge import contiguous

from . import api
from .registry import SOLVERS
from .solvers import rnn_train
from .torch_glue import float_dtype as _dtype
from .torch_glue import no_double_backward as _no_double_backward
from .torch_glue import op as _op


def rnn_recorded(x, weights, state=()):
    """Whether a call of ``lstm`` / ``gru`` on these tensors records a
    gradient (grad mode on, one of them requiring grad): ``lstm_train`` /
    ``gru_train`` then run instead, keeping the states for the backward."""
    return torch.is_grad_enabled() and any(
        t is not None and t.requires_grad for t in (x, *weights, *state))


def _rnn_layers(op, weights, num_layers):
    per = len(weights) // num_layers if num_layers > 0 else 0
    torch._check(num_layers >= 1 and per in (2, 4) and per * num_layers == len(weights),
                 lambda: f"tiramisu::{op}: weights must be num_layers x [w_ih, w_hh(, b_ih, b_hh)] "
                         f"(as module.all_weights flattened), got {len(weights)} tensors for "
                         f"{num_layers} layers")
    return [list(weights[i * per:(i + 1) * per]) for i in range(num_layers)]


def _rnn_fake(op, x, weights, num_layers, gates):
    layers = _rnn_layers(op, weights, num_layers)
    torch._check(x.dim() in (2, 3), lambda: f"tiramisu::{op}: x must be (T, B, I) or unbatched "
                                            f"(T, I)")
    h = layers[0][1].shape[1]
    torch._check(layers[0][1].shape[0] == gates * h,
                 lambda: f"tiramisu::{op}: w_hh of layer 0 must be ({gates}*H, H)")
    batch = tuple(x.shape[1:-1])
    return x.new_empty((x.shape[0], *batch, h)), x.new_empty((num_layers, *batch, h))


def _detached(t):
    return None if t is None else contiguous(t).detach()


def _rnn_impl(op, x, weights, num_layers, h0, c0, dropout_masks):
    _dtype(op, x, *weights, reduced=True)
    layers = [[contiguous(w).detach() for w in layer]
              for layer in _rnn_layers(op, weights, num_layers)]
    x, h0, c0 = _detached(x), _detached(h0), _detached(c0)
    if dropout_masks:           # training with dropout: the masks the module drew
        torch._check(len(dropout_masks) == num_layers - 1,
                     lambda: f"tiramisu::{op}: dropout_masks: expected num_layers - 1 = "
                             f"{num_layers - 1} masks, got {len(dropout_masks)}")
    masks = [_detached(m) for m in dropout_masks] if dropout_masks else None
    if op == "lstm":
        y, (hn, cn) = api.lstm(x, layers, h0, c0, dropout_masks=masks)
        return y, hn, cn
    y, hn = api.gru(x, layers, h0, dropout_masks=masks)
    return y, hn, None


def _lstm(x, weights, num_layers, h0=None, c0=None, dropout_masks=None):
    return _rnn_impl("lstm", x, weights, num_layers, h0, c0, dropout_masks)


def _lstm_fake(x, weights, num_layers, h0=None, c0=None, dropout_masks=None):
    y, hn = _rnn_fake("lstm", x, weights, num_layers, 4)
    return y, hn, hn.new_empty(hn.shape)


def _gru(x, weights, num_layers, h0=None, dropout_masks=None):
    return _rnn_impl("gru", x, weights, num_layers, h0, None, dropout_masks)[:2]


def _gru_fake(x, weights, num_layers, h0=None, dropout_masks=None):
    return _rnn_fake("gru", x, weights, num_layers, 3)


def _rnn_setup(ctx, inputs, output, states=None):
    """Saves the inputs (``save_for_backward``: changed in place before the
    backward, they are refused by torch, never used stale) and the forward's
    h ``states`` where it kept them (``lstm_train`` / ``gru_train``)."""
    x, weights, num_layers, h0, *rest = list(inputs) + [None] * 3
    masks = rest[1] if len(inputs) == 6 else rest[0]   # (lstm has c0 before the masks)
    c0 = rest[0] if len(inputs) == 6 else None
    ctx.num_layers, ctx.has = num_layers, (h0 is not None, c0 is not None, len(masks or ()))
    ctx.n_weights, ctx.kept = len(weights), states is not None
    ctx.save_for_backward(x, *weights, *(t for t in (h0, c0) if t is not None), *(masks or ()),
                          *((states,) if states is not None else ()))


def _rnn_train_setup(ctx, inputs, output):
    ctx.mark_non_differentiable(output[-1])
    _rnn_setup(ctx, inputs, output, output[-1])


def _rnn_saved(ctx):
    """``(x, weights, h0, c0, masks, states)`` as :func:`_rnn_setup` saved them."""
    saved = list(ctx.saved_tensors)
    states = saved.pop() if ctx.kept else None
    x, weights, rest = saved[0], saved[1:1 + ctx.n_weights], saved[1 + ctx.n_weights:]
    has_h, has_c, n_masks = ctx.has
    h0 = rest.pop(0) if has_h else None
    c0 = rest.pop(0) if has_c else None
    return x, weights, h0, c0, (rest if n_masks else None), states


def _batched(op, x, weights, num_layers, h0, c0):
    """The arguments of a training call as :mod:`schedules.solvers.rnn_train`
    takes them: ``(unbatched, batch, (x, layers, h0, c0), solve)``; a 2-d
    ``x`` (T, I) given batch 1 in the middle, as the forward takes it
    (``batch(t)``: the tensor detached, and given that axis), ``solve`` the
    library's forward (:func:`schedules.solvers.rnn_train.states_solver`)."""
    unbatched = x.dim() == 2
    batch = (lambda t: None if t is None else _detached(t).unsqueeze(-2)) if unbatched \
        else _detached
    args = (batch(x), [[_detached(w) for w in layer] for layer in
                       _rnn_layers(op, weights, num_layers)], batch(h0), batch(c0))
    return unbatched, batch, args, rnn_train.states_solver(SOLVERS[op], op, *args)


def _rnn_grads(op, dy, dhn, dcn, x, weights, num_layers, h0, c0, dropout_masks, states=None):
    """The implementation of ``tiramisu::lstm_backward`` / ``gru_backward``:
    backpropagation through time (:func:`schedules.solvers.rnn_train.gradients`,
    compiled kernels) from the h ``states`` that ``lstm_train`` / ``gru_train``
    kept, or the forward recomputed keeping them where none are given.
    Returns ``(dx, dparams, dh0, dc0)``."""
    unbatched, batch, args, solve = _batched(op, x, weights, num_layers, h0, c0)
    dx, dW, dh0, dc0 = rnn_train.gradients(
        op, *args, *(batch(g) for g in (dy, dhn, dcn)),
        [batch(m) for m in dropout_masks] if dropout_masks else None,
        solve=solve, states=None if states is None else batch(states))
    per = len(args[1][0])
    dws = [torch.from_numpy(g) for layer in dW for g in layer[:per]]
    out = [torch.from_numpy(a) if a is not None else None for a in (dx, dh0, dc0)]
    if unbatched:
        out = [a if a is None else a.squeeze(-2) for a in out]
    return out[0], dws, out[1], out[2]


def _rnn_train(op, x, weights, num_layers, h0, c0, dropout_masks):
    """The implementation of ``tiramisu::lstm_train`` / ``gru_train``: the
    forward keeping each layer's h states (:func:`schedules.solvers.rnn_train.forward_states`),
    ``(y, h_n, c_n, states)``, ``states`` (L, T + 1, *batch, H)."""
    _rnn_fake(op, x, weights, num_layers, 4 if op == "lstm" else 3)
    unbatched, batch, args, solve = _batched(op, x, weights, num_layers, h0, c0)
    masks = [batch(m) for m in dropout_masks] if dropout_masks else None
    if masks:
        torch._check(len(masks) == num_layers - 1,
                     lambda: f"tiramisu::{op}_train: dropout_masks: expected num_layers - 1 = "
                             f"{num_layers - 1} masks, got {len(masks)}")
    out = rnn_train.forward_states(op, *args, masks, solve=solve)
    y, hn, cn, states = (None if a is None else torch.from_numpy(a) for a in out)
    if unbatched:
        y, hn, cn, states = (None if a is None else a.squeeze(-2) for a in (y, hn, cn, states))
    return y, hn, cn, states


def _lstm_backward_impl(grad_y, grad_hn, grad_cn, input, params, num_layers, h0=None, c0=None,
                        dropout_masks=None, states=None):
    return _rnn_grads("lstm", grad_y, grad_hn, grad_cn, input, params, num_layers, h0, c0,
                      dropout_masks, states)


def _gru_backward_impl(grad_y, grad_hn, input, params, num_layers, h0=None, dropout_masks=None,
                       states=None):
    return _rnn_grads("gru", grad_y, grad_hn, None, input, params, num_layers, h0, None,
                      dropout_masks, states)[:3]


def _rnn_grads_fake(input, params, num_layers):
    h = params[1].shape[1]
    states = input.new_empty((num_layers, *input.shape[1:-1], h))
    return input.new_empty(input.shape), [p.new_empty(p.shape) for p in params], states


def _lstm_backward_fake(grad_y, grad_hn, grad_cn, input, params, num_layers, h0=None, c0=None,
                        dropout_masks=None, states=None):
    dx, dws, dh0 = _rnn_grads_fake(input, params, num_layers)
    return dx, dws, dh0, dh0.new_empty(dh0.shape)


def _gru_backward_fake(grad_y, grad_hn, input, params, num_layers, h0=None, dropout_masks=None,
                       states=None):
    return _rnn_grads_fake(input, params, num_layers)


_GRADS = "Tensor? grad_y, Tensor? grad_hn, {c}Tensor input, Tensor[] params, int num_layers, " \
         "Tensor? h0=None, {c0}Tensor[]? dropout_masks=None, Tensor? states=None"
_NO_CONTEXT = lambda ctx, inputs, output: None       # noqa: E731
lstm_backward = _op("lstm_backward",
                    "(" + _GRADS.format(c="Tensor? grad_cn, ", c0="Tensor? c0=None, ")
                    + ") -> (Tensor, Tensor[], Tensor, Tensor)", _lstm_backward_impl,
                    _lstm_backward_fake, _no_double_backward("lstm"), _NO_CONTEXT)
gru_backward = _op("gru_backward", "(" + _GRADS.format(c="", c0="") + ") -> (Tensor, Tensor[], "
                   "Tensor)", _gru_backward_impl, _gru_backward_fake, _no_double_backward("gru"),
                   _NO_CONTEXT)


def _rnn_backward(op):
    """The backward of ``tiramisu::lstm`` / ``gru`` and of ``lstm_train`` /
    ``gru_train``: one op of its own (``lstm_backward`` / ``gru_backward``,
    so that ``torch.compile`` traces it), given the saved inputs and, from
    the ``_train`` ops, the h states their forward kept (the states' own
    gradient, an output autograd does not differentiate, is ignored)."""
    def backward(ctx, dy, dhn, *rest):
        dcn = rest[0] if op == "lstm" else None
        x, weights, h0, c0, masks, states = _rnn_saved(ctx)
        if op == "lstm":
            dx, dws, dh0, dc0 = lstm_backward(dy, dhn, dcn, x, weights, ctx.num_layers, h0, c0,
                                              masks, states)
        else:
            (dx, dws, dh0), dc0 = gru_backward(dy, dhn, x, weights, ctx.num_layers, h0, masks,
                                               states), None
        need = ctx.needs_input_grad
        grads = [dx if need[0] else None, list(dws), None,
                 dh0 if h0 is not None and need[3] else None]
        if op == "lstm":
            grads.append(dc0 if c0 is not None and need[4] else None)
        grads.append(None if masks is None else [None] * len(masks))
        # one per argument dispatched (torch drops the trailing ones left at their defaults)
        return tuple(grads[:len(need)])
    return backward


def _lstm_train(x, weights, num_layers, h0=None, c0=None, dropout_masks=None):
    return _rnn_train("lstm", x, weights, num_layers, h0, c0, dropout_masks)


def _gru_train(x, weights, num_layers, h0=None, dropout_masks=None):
    y, hn, _, states = _rnn_train("gru", x, weights, num_layers, h0, None, dropout_masks)
    return y, hn, states


def _states_fake(x, hn):
    return hn.new_empty((hn.shape[0], x.shape[0] + 1, *hn.shape[1:]))


def _lstm_train_fake(x, weights, num_layers, h0=None, c0=None, dropout_masks=None):
    y, hn = _rnn_fake("lstm", x, weights, num_layers, 4)
    return y, hn, hn.new_empty(hn.shape), _states_fake(x, hn)


def _gru_train_fake(x, weights, num_layers, h0=None, dropout_masks=None):
    y, hn = _rnn_fake("gru", x, weights, num_layers, 3)
    return y, hn, _states_fake(x, hn)


# backward: backpropagation through time in compiled kernels (schedules.solvers.rnn_train);
# lstm / gru recompute the forward in it, lstm_train / gru_train keep their states for it
_LSTM_ARGS = ("(Tensor input, Tensor[] params, int num_layers, Tensor? h0=None, Tensor? c0=None, "
              "Tensor[]? dropout_masks=None)")
_GRU_ARGS = "(Tensor input, Tensor[] params, int num_layers, Tensor? h0=None, " \
            "Tensor[]? dropout_masks=None)"
lstm = _op("lstm", _LSTM_ARGS + " -> (Tensor, Tensor, Tensor)", _lstm, _lstm_fake,
           _rnn_backward("lstm"), _rnn_setup)
gru = _op("gru", _GRU_ARGS + " -> (Tensor, Tensor)", _gru, _gru_fake, _rnn_backward("gru"),
          _rnn_setup)
lstm_train = _op("lstm_train", _LSTM_ARGS + " -> (Tensor, Tensor, Tensor, Tensor)", _lstm_train,
                 _lstm_train_fake, _rnn_backward("lstm"), _rnn_train_setup)
gru_train = _op("gru_train", _GRU_ARGS + " -> (Tensor, Tensor, Tensor)", _gru_train,
                _gru_train_fake, _rnn_backward("gru"), _rnn_train_setup)

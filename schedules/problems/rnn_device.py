"""The checked arguments of an LSTM/GRU call on the GPU (:func:`parse_device`):
device arrays stay on their device, host arrays are copied there and back."""
from __future__ import annotations

import numpy as np

from tiramisu_py.runtime.device_arrays import on_device

from ..core.arrays import is_torch
from ..weights.rnn import TENSORS, RNNWeights


def parse_device(cell, x, weights, h0, c0):
    """The checked arguments of a GPU call: ``((L, T, B, I, H), (x, layers,
    states, array operations, to_torch))``
    (:class:`schedules.problems.rnn.RnnDeviceArgs`).  Device arrays (torch
    CUDA tensors) stay on the device, outputs allocated by torch on the
    current stream; NumPy arrays or CPU tensors are copied to the device and
    back (``to_torch``: the results are made CPU tensors)."""
    to_torch = False
    if on_device(x) or any(on_device(s) for s in (h0, c0) if s is not None):
        from codegen.cuda.runtime import driver
        driver()          # NoCudaDriverError before any device work
        if not is_torch(x):
            import torch  # other device arrays: zero-copy through __cuda_array_interface__
            x = torch.as_tensor(x, device="cuda")
    elif is_torch(x):
        x, weights, h0, c0 = _host_array(x, "x"), _host(weights), _host_array(h0, "h0"), _host_array(c0, "c0")
        to_torch = True
    x = _as_kind(x, x, "x")
    if len(x.shape) != 3 or min(x.shape) < 1:
        raise ValueError(f"x: expected (T, B, I) (batch_first=False) with no zero extent, got "
                         f"shape {tuple(x.shape)}")
    T, B, I = (int(v) for v in x.shape)
    layers = _layers(weights, x, cell)
    L, H = len(layers), int(layers[0][1].shape[-1])
    ar = DeviceArrays(x)
    states = {}
    for name, s in (("h0", h0), ("c0", c0)) if cell == "lstm" else (("h0", h0),):
        if s is None:
            s = ar.zeros(L, B, H)
        s = _as_kind(s, x, name)
        if tuple(s.shape) != (L, B, H):
            raise ValueError(f"{name}: expected shape {(L, B, H)} (layers, batch, hidden), "
                             f"got {tuple(s.shape)}")
        states[name] = ar.contiguous(s)
    return (L, T, B, I, H), (ar.contiguous(x), layers, states, ar, to_torch)


class DeviceArrays:
    """The few array operations packing needs, for NumPy arrays or torch
    tensors (on the tensors' device)."""

    def __init__(self, like):
        self.torch = is_torch(like)
        if self.torch:
            import torch
            self.mod, self.device = torch, like.device
        else:
            self.mod, self.device = np, None

    def zeros(self, *shape):
        if self.torch:
            return self.mod.zeros(shape, dtype=self.mod.float32, device=self.device)
        return np.zeros(shape, np.float32)

    def stack(self, items):
        return self.mod.stack(list(items))

    def cat(self, items):
        return self.mod.cat(items) if self.torch else np.concatenate(items)

    def contiguous(self, a):
        return a.contiguous() if self.torch else np.ascontiguousarray(a)

    def copy(self, a):
        return a.clone() if self.torch else a.copy()


def _as_kind(a, like, name):
    """``a`` (a weight or state) checked as float32 and of ``like``'s kind
    and device (NumPy weights, as :class:`RNNWeights` keeps them, are copied
    to a torch ``like``'s device)."""
    if is_torch(like):
        import torch
        if isinstance(a, np.ndarray) and name.startswith("weights"):
            a = torch.from_numpy(a).to(like.device)
        if not is_torch(a):
            raise TypeError(f"{name}: expected a torch tensor like x, got {type(a).__name__}")
        if a.dtype != torch.float32:
            raise TypeError(f"{name}: expected a float32 tensor, got {a.dtype}")
        if a.device != like.device:
            raise ValueError(f"{name}: on {a.device}, but x is on {like.device}")
        return a.detach()
    if is_torch(a) or not isinstance(a, np.ndarray):
        raise TypeError(f"{name}: expected a NumPy array like x, got {type(a).__name__}")
    if a.dtype != np.float32:
        raise TypeError(f"{name}: expected float32, got {a.dtype}")
    return a


def _layers(weights, like, cell):
    """[[w_ih, w_hh, b_ih or None, b_hh or None]] per layer, of x's kind."""
    if isinstance(weights, RNNWeights):
        if weights.cell != cell:
            raise ValueError(f"weights: packed for {weights.cell!r}, used with {cell!r}")
        if weights.sparse:
            raise ValueError("weights: sparse (CSR) weights have no GPU schedule; pass dense ones")
        weights = [[m for m in layer if m is not None] for layer in weights.layers]
    if not isinstance(weights, (list, tuple)) or not weights:
        raise TypeError("weights: expected a non-empty list per layer of [w_ih, w_hh, b_ih, b_hh] "
                        f"(like {cell.upper()}.all_weights), got {type(weights).__name__}")
    out = []
    for l, layer in enumerate(weights):
        if not isinstance(layer, (list, tuple)) or len(layer) not in (2, 4):
            raise ValueError(f"weights[{l}]: expected [w_ih, w_hh, b_ih, b_hh] or [w_ih, w_hh]")
        if any(all(hasattr(m, a) for a in ("rowptr", "colidx", "values")) for m in layer):
            raise ValueError(f"weights[{l}]: sparse (CSR) weights have no GPU schedule; pass "
                             "dense ones")
        ms = [_as_kind(m, like, f"weights[{l}][{k}] ({TENSORS[k]} of layer {l})")
              for k, m in enumerate(layer)]
        out.append(ms + [None] * (4 - len(ms)))
    return out




def _host_array(a, name):
    if a is None or not is_torch(a):
        return a
    if a.device.type != "cpu":
        raise ValueError(f"{name}: on {a.device}, but x is on the CPU")
    return a.detach().contiguous().numpy()


def _host(weights):
    if isinstance(weights, (list, tuple)):
        return [[_host_array(m, f"weights[{l}][{k}]") for k, m in enumerate(layer)]
                if isinstance(layer, (list, tuple)) else layer
                for l, layer in enumerate(weights)]
    return weights

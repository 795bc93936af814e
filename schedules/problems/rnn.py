"""The LSTM/GRU problem: a stacked recurrent forward parsed once (host arrays
into :class:`schedules.RNNWeights`, or device arrays for the GPU solver),
with its explicit, versioned key."""
from __future__ import annotations

import os
from dataclasses import dataclass

import numpy as np

from tiramisu_py.runtime.device_arrays import on_device

from ..core.arrays import is_torch, refuse_foreign
from ..core.kernels import target_of, use_cuda
from ..host import host
from ..weights.rnn import TENSORS
from ..weights.rnn import RNNWeights, _numpy, _weights_dtype, rnn_weights, to_float32


@dataclass(frozen=True)
class RnnProblem:
    """``layers`` stacked ``cell`` ("lstm" or "gru") layers, input size
    ``input_size``, hidden size ``hidden``, ``T`` steps of batch ``B``,
    dense or CSR (``sparse``) weights, on ``device`` with the backend
    ``target``; ``threads``: the OpenMP threads a CPU kernel will use (the
    wavefront's worth depends on it); ``dtype``: the weights' and input's
    ("float32", or "bfloat16" / "float16" on the CPU: the weights stored so,
    float32 sums and states; bfloat16's layer-major input projection takes
    the layer's input rounded to bfloat16)."""
    op: str
    layers: int
    input_size: int
    hidden: int
    T: int
    B: int
    sparse: bool
    target: str
    device: str = "cpu"
    threads: int = 1
    dtype: str = "float32"

    VERSION = 1
    degenerate = False          # T, B >= 1 and H >= 1 are checked

    cell = property(lambda self: self.op)

    def key(self) -> dict:
        return {"op": self.op, "version": self.VERSION, "layers": self.layers,
                "input_size": self.input_size, "hidden": self.hidden, "T": self.T, "B": self.B,
                "sparse": self.sparse, "target": self.target, "device": self.device,
                "threads": self.threads,
                **({"dtype": self.dtype} if self.dtype != "float32" else {})}

    @classmethod
    def from_call(cls, cell, x, weights, h0, c0, sparse, target):
        """``(problem, args)`` of ``lstm`` / ``gru`` with torch's arguments:
        on the GPU (``target="cuda"``, or device arrays) the arguments
        :func:`parse_device` checks (dense weights
        only); else ``(RNNWeights, x, h0, c0, torch_in)`` as NumPy arrays."""
        _per_layer(weights, cell)
        for a, name in ((x, "x"), (h0, "h0"), (c0, "c0")):
            if a is not None and not isinstance(a, np.ndarray) and not on_device(a):
                refuse_foreign(a, name)
        if use_cuda(target, x, h0, c0, *_tensors(weights), names=("x", "h0", "c0")):
            if sparse:
                raise ValueError("sparse=True: sparse (CSR) weights have no GPU schedule; run "
                                 "them on the CPU")
            (L, T, B, I, H), args = parse_device(cell, x, weights, h0, c0)
            return cls(cell, L, I, H, T, B, False, target_of(target), "cuda"), args
        torch_in = is_torch(x)
        dtype = weights.dtype if isinstance(weights, RNNWeights) else _weights_dtype(
            weights[0] if isinstance(weights, (list, tuple)) and weights else None)
        xa = to_float32(_numpy(x, "x", (dtype,)), dtype)
        if xa.ndim != 3:
            raise ValueError(f"x: expected (T, B, I) (batch_first=False) or unbatched (T, I), got "
                             f"shape {xa.shape}")
        T, B, I = xa.shape
        if T < 1 or B < 1:
            raise ValueError(f"x: the sequence length and batch must be at least 1, got shape "
                             f"{xa.shape}")
        if isinstance(weights, RNNWeights):
            W = weights
            if W.cell != cell:
                raise ValueError(f"weights: packed for {W.cell!r}, used with {cell!r}")
            if W.input_size != I:
                raise ValueError(f"x: input size {I}, but weights[0][0] (w_ih of layer 0) expects "
                                 f"{W.input_size}")
            if sparse and not W.sparse:
                raise ValueError("sparse=True: make the RNNWeights with sparse=True")
        else:
            first = weights[0] if isinstance(weights, (list, tuple)) and weights else None
            w_ih = first[0] if isinstance(first, (list, tuple)) and first else None
            if len(getattr(w_ih, "shape", ())) == 2 and w_ih.shape[1] != I:
                raise ValueError(f"x: input size {I} (its last dimension), but weights[0][0] "
                                 f"(w_ih of layer 0) expects {w_ih.shape[1]}: pass x of shape "
                                 f"(T, B, {w_ih.shape[1]})")
            W = rnn_weights(weights, cell, sparse=sparse, input_size=I)
        L, H = len(W.layers), W.hidden
        h0a = _state(h0, "h0", L, B, H, torch_in, dtype)
        c0a = _state(c0, "c0", L, B, H, torch_in, dtype) if cell == "lstm" else None
        p = cls(cell, L, I, H, T, B, W.sparse, target_of(target), "cpu", _threads(), dtype)
        return p, (W, xa, h0a, c0a, torch_in)


def _threads():
    """The OpenMP threads a kernel will use ($OMP_NUM_THREADS, else the
    cores)."""
    try:
        return max(1, int(os.environ.get("OMP_NUM_THREADS", "").split(",")[0]))
    except ValueError:
        return host().cores


def _per_layer(weights, cell):
    """Refuses a flat list of arrays (``module._flat_weights``, or
    ``parameters()``): the weights are one list per layer."""
    if isinstance(weights, (list, tuple)) and weights and hasattr(weights[0], "shape"):
        module = cell.upper()
        raise TypeError(f"weights: got a flat list of {len(weights)} arrays (like {module}."
                        f"_flat_weights); pass one list per layer, [w_ih, w_hh, b_ih, b_hh] or "
                        f"[w_ih, w_hh], as {module}.all_weights gives them")


def _tensors(weights):
    """The arrays of a per-layer weight list (for the device check)."""
    if isinstance(weights, (list, tuple)):
        return [m for layer in weights if isinstance(layer, (list, tuple)) for m in layer]
    return []


def _state(s, name, L, B, H, kind, dtype="float32"):
    if s is None:
        return np.zeros((L, B, H), np.float32)
    if is_torch(s) != kind:
        raise TypeError(f"{name}: pass x and {name} both as NumPy arrays or both as torch tensors")
    s = to_float32(_numpy(s, name, (dtype,)), dtype)
    if s.shape != (L, B, H):
        raise ValueError(f"{name}: expected shape {(L, B, H)} (layers, batch, hidden), "
                         f"got {s.shape}")
    return s


# ------------------------------------------------------------------ device arguments
def parse_device(cell, x, weights, h0, c0):
    """The checked arguments of a GPU call: ``((L, T, B, I, H), (x, layers,
    states, array operations, to_torch))``.  Device arrays (torch CUDA
    tensors) stay on the device, outputs allocated by torch on the current
    stream; NumPy arrays or CPU tensors are copied to the device and back
    (``to_torch``: the results are made CPU tensors)."""
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


# ------------------------------------------------------------------ directions and projections
@dataclass(frozen=True)
class RnnStack:
    """The structure of a torch RNN's weight list beyond one direction
    without a projection: ``layers`` layers of ``directions`` (1, or 2 with
    ``bidirectional=True``: torch's ``all_weights`` order, per layer the
    forward list then the reverse one) and, for the LSTM, ``proj`` > 0 when
    each list ends with ``w_hr`` (``proj_size``: ``[w_ih, w_hh, b_ih, b_hh,
    w_hr]`` or ``[w_ih, w_hh, w_hr]``).  ``weights[l * directions + d]`` is
    ``[w_ih, w_hh, b_ih or None, b_hh or None, w_hr or None]``; shapes are
    checked here (the tensors' kinds by the call that runs them)."""
    cell: str
    layers: int
    directions: int
    input_size: int
    hidden: int
    proj: int
    weights: tuple

    composed = property(lambda self: self.directions == 2 or self.proj > 0)
    out_size = property(lambda self: self.proj or self.hidden)   # h_t's size (torch's H_out)

    @classmethod
    def of(cls, cell, weights, bidirectional):
        """The stack of ``weights`` (None: the plain form, one direction,
        no projection, which :class:`RnnProblem` parses)."""
        if not isinstance(bidirectional, bool):
            raise TypeError(f"bidirectional must be a bool, got {bidirectional!r}")
        _per_layer(weights, cell)
        if isinstance(weights, RNNWeights):
            if bidirectional:
                raise TypeError("weights: an RNNWeights holds one direction; with "
                                "bidirectional=True pass the list per layer and direction "
                                f"({cell.upper()}.all_weights)")
            return None
        if not isinstance(weights, (list, tuple)) or not weights or \
                not all(isinstance(w, (list, tuple)) for w in weights):
            return None                     # RnnProblem names what is wrong
        n = {len(w) for w in weights}
        proj = cell == "lstm" and n <= {3, 5}
        if not bidirectional and not proj:
            _hint_bidirectional(weights, cell)
            return None
        D = 2 if bidirectional else 1
        if len(weights) % D:
            raise ValueError(f"weights: bidirectional=True takes two lists per layer (forward, "
                             f"then reverse, as {cell.upper()}.all_weights), got {len(weights)}")
        forms = ((3, 5) if proj else (2, 4))
        if len(n) != 1 or n.pop() not in forms:
            tail = ", w_hr" if proj else ""
            raise ValueError(f"weights: every list must be [w_ih, w_hh, b_ih, b_hh{tail}] or "
                             f"[w_ih, w_hh{tail}], all of one form; got lengths "
                             f"{[len(w) for w in weights]}")
        G = 4 if cell == "lstm" else 3
        first = weights[0]
        hidden_of = (first[-1], 4) if proj else (first[1], 1)     # w_hr (P, H) or w_hh
        H = _shape(hidden_of[0], _name(0, D, hidden_of[1], len(first)))[-1]
        P = int(first[-1].shape[0]) if proj else 0
        if proj and not 0 < P < H:
            raise ValueError(f"{_name(0, D, 4, len(first))}: proj_size (its rows) must lie in "
                             f"[1, hidden size {H}), got {P}")
        I = _shape(first[0], _name(0, D, 0))[-1]
        if H < 1 or I < 1:
            raise ValueError(f"weights: the hidden and input sizes must be at least 1, got "
                             f"hidden {H}, input {I}")
        out = []
        for k, w in enumerate(weights):
            l = k // D
            full = list(w[:-1] if proj else w)
            full += [None] * (4 - len(full)) + [w[-1] if proj else None]
            wants = ((G * H, I if l == 0 else D * (P or H)), (G * H, P or H), (G * H,),
                     (G * H,), (P, H))
            for n_, (m, want) in enumerate(zip(full, wants)):
                name = _name(k, D, n_, len(w))
                if m is not None and tuple(_shape(m, name)) != want:
                    raise ValueError(f"{name}: expected shape {want}, got "
                                     f"{tuple(m.shape)}")
            out.append(tuple(full))
        return cls(cell, len(weights) // D, D, int(I), H, P, tuple(out))

    def check_state(self, s, name, B):
        """``s`` (h0 or c0, or None) of torch's shape (layers * directions,
        B, H_out or H)."""
        size = self.out_size if name == "h0" else self.hidden
        want = (self.layers * self.directions, B, size)
        if s is not None and tuple(getattr(s, "shape", ())) != want:
            raise ValueError(f"{name}: expected shape {want} (layers * directions, batch, "
                             f"{'proj_size' if name == 'h0' and self.proj else 'hidden'}), got "
                             f"{tuple(getattr(s, 'shape', ()))}")


def _hint_bidirectional(weights, cell):
    """A unidirectional list whose later layer takes layer 0's input size or
    twice the hidden size is a bidirectional module's ``all_weights``
    (``weights[1]`` is layer 0's reverse direction): refused with the hint."""
    shapes = [[tuple(getattr(m, "shape", ())) for m in w[:2]] for w in weights]
    if len(weights) % 2 or any(len(s) < 2 or len(s[0]) != 2 or len(s[1]) != 2
                               for s in shapes):
        return
    I, H = shapes[0][0][1], shapes[0][1][1]
    for k, (w_ih, _) in enumerate(shapes[1:], 1):
        if w_ih[1] != H:
            if w_ih[1] == 2 * H or (k == 1 and w_ih[1] == I):
                raise ValueError(f"weights[{k}][0] (w_ih of layer {k}): expected {H} inputs "
                                 f"(the hidden size), got {w_ih[1]}: the all_weights of a "
                                 f"bidirectional {cell.upper()}? pass bidirectional=True")
            return


def _name(k, D, n, length=5):
    """The name of ``weights[k][n]`` (n: 0-3 torch's tensors, 4 ``w_hr``,
    the last of a list of ``length``)."""
    what, at = ("w_hr", length - 1) if n == 4 else (TENSORS[n], n)
    return f"weights[{k}][{at}] ({what} of layer {k // D}{', reverse' if k % D else ''})"


def _shape(m, name):
    shape = getattr(m, "shape", None)
    if shape is None or len(shape) not in (1, 2):
        raise TypeError(f"{name}: expected a matrix or vector, got {type(m).__name__}")
    return tuple(int(v) for v in shape)

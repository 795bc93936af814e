"""The LSTM/GRU problems and the arguments of a call, parsed once with
torch's rules: :func:`rnn_call` (an unbatched input, dropout, whether the
call trains) gives an :class:`RnnProblem`, an inference one (a stacked
recurrent forward: host arrays into :class:`schedules.RNNWeights`, or
device arrays for the GPU solver, :mod:`schedules.problems.rnn_device`) or
a training one (:meth:`RnnProblem.training`); :class:`RnnStack` is a
bidirectional or projected stack's structure, whose projected layers are
:class:`ProjectedProblem` s.  Each problem has its explicit, versioned
key."""
from __future__ import annotations

import os
from dataclasses import dataclass, replace

import numpy as np

from tiramisu_py.runtime.device_arrays import on_device

from ..core.arrays import dtype_name, is_torch, needing_grad, refuse_foreign
from ..core.kernels import target_of, use_cuda
from ..host import host
from ..weights.rnn import GATES, REDUCED, TENSORS
from ..weights.rnn import RNNWeights, as_numpy, rnn_weights, to_float32, weights_dtype
from .rnn_device import parse_device


@dataclass(kw_only=True)
class CallArgs:
    """What a recurrent call's results need besides its arrays
    (:class:`schedules.blocks.rnn_common.RnnSolver`): ``unbatched``: the
    call's ``x`` was (T, I), the results lose the batch axis; ``grad``: the
    inputs that require grad on a path without a backward (the results
    refuse a gradient)."""
    unbatched: bool = False
    grad: tuple = ()


@dataclass
class RnnArgs(CallArgs):
    """The checked arguments of a CPU lstm / gru call (:meth:`RnnProblem.from_call`):
    the packed weights ``W``, ``x`` (T, B, I), ``h0`` and ``c0`` (L, B, H;
    c0 None for the GRU) as float32 NumPy arrays; ``torch_in``: the results
    are torch tensors.  ``train``: the training forward's dict (its dropout
    masks in, each layer's states out, :mod:`schedules.solvers.rnn_train`)."""
    W: object
    x: object
    h0: object
    c0: object
    torch_in: bool
    train: dict | None = None


@dataclass
class RnnDeviceArgs(CallArgs):
    """The checked arguments of a GPU lstm / gru call
    (:func:`~schedules.problems.rnn_device.parse_device`): ``x``, ``layers``
    (per layer ``[w_ih, w_hh, b_ih or None, b_hh or None]``), ``states``
    ({"h0": ..., "c0": ...}), ``arrays`` (the array operations of x's kind,
    :class:`~schedules.problems.rnn_device.DeviceArrays`), ``to_torch``
    (host torch inputs: the results are made CPU tensors)."""
    x: object
    layers: list
    states: dict
    arrays: object
    to_torch: bool


@dataclass(frozen=True)
class RnnProblem:
    """``layers`` stacked ``cell`` ("lstm" or "gru") layers, input size
    ``input_size``, hidden size ``hidden``, ``T`` steps of batch ``B``, in
    inference (``op`` the cell) or training (``op`` "lstm_train",
    "gru_train": dense weights, float32 or float64),
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

    cell = property(lambda self: self.op.split("_")[0])      # ("lstm_train": "lstm")
    # the layers of input size H (the wavefront's)
    stacked = property(lambda self: self.layers - (0 if self.input_size == self.hidden else 1))

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
        :func:`~schedules.problems.rnn_device.parse_device` checks (dense
        weights only), :class:`RnnDeviceArgs`; else :class:`RnnArgs`."""
        _per_layer(weights, cell)
        for a, name in ((x, "x"), (h0, "h0"), (c0, "c0")):
            if a is not None and not isinstance(a, np.ndarray) and not on_device(a):
                refuse_foreign(a, name)
        if use_cuda(target, x, h0, c0, *_tensors(weights), names=("x", "h0", "c0")):
            if sparse:
                raise ValueError("sparse=True: sparse (CSR) weights have no GPU schedule; run "
                                 "them on the CPU")
            (L, T, B, I, H), arrays = parse_device(cell, x, weights, h0, c0)
            return cls(cell, L, I, H, T, B, False, target_of(target), "cuda"), \
                RnnDeviceArgs(*arrays)
        torch_in = is_torch(x)
        dtype = weights.dtype if isinstance(weights, RNNWeights) else weights_dtype(
            weights[0] if isinstance(weights, (list, tuple)) and weights else None)
        xa = to_float32(as_numpy(x, "x", (dtype,)), dtype)
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
            check_input_size(weights, I)
            W = rnn_weights(weights, cell, sparse=sparse, input_size=I)
        L, H = len(W.layers), W.hidden
        h0a = _state(h0, "h0", L, B, H, torch_in, dtype)
        c0a = _state(c0, "c0", L, B, H, torch_in, dtype) if cell == "lstm" else None
        p = cls(cell, L, I, H, T, B, W.sparse, target_of(target), "cpu", _threads(), dtype)
        return p, RnnArgs(W, xa, h0a, c0a, torch_in)


    @classmethod
    def training(cls, cell, x, weights, h0, c0, masks, target, schedule, unbatched=False):
        """``(problem, TrainArgs)`` of a training call of ``cell``
        (batched arguments; ``unbatched``: the call's were not): its ``op``
        ("lstm_train", "gru_train") names the registry's list, the
        backward's schedules (:mod:`schedules.solvers.rnn_train`); dense
        weights, ``dtype`` "float32" or "float64"."""
        layers, xa, h0a, c0a = train_check(cell, x, weights, h0, c0)
        m = train_masks(xa, masks)
        T, B, I = xa.shape
        p = cls(f"{cell}_train", len(layers), I, layers[0][1].shape[1], T, B, False,
                target_of(target), dtype=str(xa.dtype))
        return p, TrainArgs(x, weights, h0, c0, layers, xa, h0a, c0a, m, schedule, target,
                            unbatched=unbatched)


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
    s = to_float32(as_numpy(s, name, (dtype,)), dtype)
    if s.shape != (L, B, H):
        raise ValueError(f"{name}: expected shape {(L, B, H)} (layers, batch, hidden), "
                         f"got {s.shape}")
    return s


# ------------------------------------------------------------------ a call's arguments
def unbatched(cell, x, h0, c0):
    """Whether ``x`` is an unbatched (T, I) sequence; its states must then be
    (L, H) (and (L, B, H) for a batched x), as torch requires."""
    nd = len(getattr(x, "shape", ()))
    if nd not in (2, 3):
        return False                    # the problem's parse names the shape
    want = nd
    for a, name in ((h0, "h0"), (c0, "c0")):
        if a is not None and len(getattr(a, "shape", ())) != want:
            kind = "unbatched 2-D" if nd == 2 else "batched 3-D"
            raise ValueError(f"{name}: for {kind} input x, {name} should be {want}-D "
                             f"({'(layers, H)' if nd == 2 else '(layers, B, H)'}), got shape "
                             f"{tuple(a.shape)}")
    return nd == 2


def dropout_p(dropout, training):
    """The probability of dropping in this call: ``dropout`` checked (a
    number in [0, 1], as torch's RNN modules require), 0 unless ``training``."""
    if isinstance(dropout, bool) or not isinstance(dropout, (int, float)) or \
            not 0 <= dropout <= 1:
        raise ValueError(f"dropout should be a number in range [0, 1] representing the "
                         f"probability of an element being zeroed, got {dropout!r}")
    if not isinstance(training, bool):
        raise TypeError(f"training: expected a bool, got {type(training).__name__}")
    return float(dropout) if training else 0.0


def check_input_size(weights, I):
    """Refuses an input size ``I`` that layer 0's ``w_ih`` of the lists
    ``weights`` does not take, naming both."""
    first = weights[0] if isinstance(weights, (list, tuple)) and weights else None
    w_ih = first[0] if isinstance(first, (list, tuple)) and first else None
    if len(getattr(w_ih, "shape", ())) == 2 and w_ih.shape[1] != I:
        raise ValueError(f"x: input size {I} (its last dimension), but weights[0][0] "
                         f"(w_ih of layer 0) expects {w_ih.shape[1]}: pass x of shape "
                         f"(T, B, {w_ih.shape[1]})")


def is_float64(x):
    """Whether ``x`` (a NumPy array or tensor) is float64."""
    return str(getattr(x, "dtype", "")) in ("float64", "torch.float64")


def trainable(x, weights, h0, c0, sparse, target):
    """Whether the training path takes the call: dense weights as lists of
    host arrays (float32 or float64), not ``sparse``, a CPU target."""
    if sparse or target_of(target) == "cuda" or not isinstance(weights, (list, tuple)):
        return False
    arrays = [x, h0, c0]
    for layer in weights:
        if not isinstance(layer, (list, tuple)):
            return False
        arrays += list(layer)
    return all(a is None or (isinstance(a, np.ndarray) or is_torch(a)) and not on_device(a)
               and dtype_name(a) not in REDUCED
               for a in arrays)


def dropout_masks(x, layers, weights, p):
    """The masks torch's CPU RNN applies between layers in training mode
    (``aten::dropout`` on each layer's output (T, B, H) but the last, bottom
    up: ``empty_like(out).bernoulli_(1 - p).div_(1 - p)``, nothing drawn at
    ``p == 1``), drawn from torch's default generator: a seeded run gives
    torch's masks.  Needs torch."""
    try:
        import torch
    except ImportError:
        raise ValueError("dropout > 0 in training mode draws its masks with torch's generator "
                         "(as torch.nn.LSTM does): install torch, or pass training=False") from None
    T, B = x.shape[0], x.shape[1]
    H = weights[0][1].shape[1]
    dt = x.dtype if is_torch(x) else getattr(torch, str(x.dtype))
    if p == 1:
        return [torch.zeros((T, B, H), dtype=dt) for _ in range(layers - 1)]
    return [torch.empty((T, B, H), dtype=dt).bernoulli_(1 - p).div_(1 - p)
            for _ in range(layers - 1)]


def rnn_call(cell, x, weights, h0, c0, sparse, schedule, target, dropout, training, masks):
    """``(problem, args)`` of one ``lstm`` / ``gru`` call of one direction
    without a projection, with torch's rules: an unbatched (T, I) ``x`` (its
    states (L, H)) is one sequence of a batch of one (``args.unbatched``);
    ``dropout`` applies in ``training`` only, its masks drawn as torch
    draws them (:func:`dropout_masks`) unless given (``masks``).  A call
    that may be asked a gradient (torch inputs that require grad), in
    float64 or with dropout trains (:meth:`RnnProblem.training`), if its weights
    are dense host lists (:func:`trainable`); else it is an
    :class:`RnnProblem` (``args.grad``: the inputs whose gradient the
    results refuse; dropout refused)."""
    unb = unbatched(cell, x, h0, c0)          # (T, I), states (L, H)
    if unb:
        x, h0, c0 = (None if a is None else a[:, None] for a in (x, h0, c0))
    p_drop = dropout_p(dropout, training)
    grad = needing_grad(x, weights, h0, c0)
    if masks is not None and (p_drop or not isinstance(masks, (list, tuple))
                              or len(masks) != len(weights) - 1):
        raise ValueError("dropout_masks: expected a list of one (T, B, H) mask per layer but the "
                         "last (and no dropout= as well)")
    if (grad or p_drop or masks or is_float64(x)) and \
            trainable(x, weights, h0, c0, sparse, target):
        if p_drop and len(weights) > 1:
            masks = dropout_masks(x, len(weights), weights, p_drop)
        return RnnProblem.training(cell, x, weights, h0, c0, masks, target, schedule, unb)
    if p_drop or masks:
        raise ValueError(f"dropout={dropout} in training mode (or dropout_masks): the training "
                         "path takes dense weights as lists on the CPU (not CSR, RNNWeights "
                         "or the GPU)")
    p, args = RnnProblem.from_call(cell, x, weights, h0, c0, sparse, target)
    return p, replace(args, unbatched=unb, grad=tuple(grad))


# ------------------------------------------------------------------ training
TRAIN_DTYPES = ("float32", "float64")


def train_array(a, name, dtype=None):
    """A contiguous NumPy array of ``a`` (a NumPy array or CPU tensor,
    detached), float32 or float64; ``dtype``: the dtype it must have."""
    if is_torch(a):
        if a.device.type != "cpu":
            raise ValueError(f"{name}: expected a CPU tensor, got device {a.device}")
        a = a.detach().contiguous().numpy()
    elif not isinstance(a, np.ndarray):
        raise TypeError(f"{name}: expected a NumPy array or torch tensor, got {type(a).__name__}")
    if str(a.dtype) not in TRAIN_DTYPES:
        raise TypeError(f"{name}: expected float32 or float64, got {a.dtype}")
    if dtype is not None and str(a.dtype) != dtype:
        raise TypeError(f"{name}: expected {dtype} (x is {dtype}: give x, the weights and the "
                        f"states one dtype, float32 or float64), got {a.dtype}")
    return np.ascontiguousarray(a)


def train_masks(xa, masks):
    """The dropout ``masks`` (one per layer but the last, or None) as NumPy
    arrays of the checked input ``xa``'s dtype."""
    return None if not masks else [train_array(k, "dropout mask", str(xa.dtype)) for k in masks]


def train_check(cell, x, weights, h0, c0):
    """``(layers, x, h0, c0)`` as NumPy arrays of x's dtype, checked:
    ``layers`` a list per layer of ``[w_ih, w_hh, b_ih, b_hh]`` (zero biases
    where none are given), h0/c0 ``(L, B, H)`` (zeros when None)."""
    G = GATES[cell]
    xa = train_array(x, "x")
    dtype = str(xa.dtype)
    if xa.ndim != 3 or min(xa.shape) < 1:
        raise ValueError(f"x: expected (T, B, I) with T, B, I >= 1, got shape {xa.shape}")
    T, B, I = xa.shape
    check_input_size(weights, I)
    if not isinstance(weights, (list, tuple)) or not weights:
        raise TypeError(f"weights: expected a non-empty list per layer of [w_ih, w_hh, b_ih, "
                        f"b_hh] (like {cell.upper()}.all_weights)")
    H, layers, K = None, [], I
    for l, layer in enumerate(weights):
        if not isinstance(layer, (list, tuple)) or len(layer) not in (2, 4):
            raise ValueError(f"weights[{l}]: expected [w_ih, w_hh, b_ih, b_hh] or [w_ih, w_hh]")
        if len(layer) != len(weights[0]):
            raise ValueError(f"weights[{l}]: every layer must have the same form (with or "
                             "without biases)")
        arrs = [train_array(m, f"weights[{l}][{k}] ({TENSORS[k]} of layer {l})", dtype)
                for k, m in enumerate(layer)]
        if H is None:
            H = arrs[1].shape[1] if arrs[1].ndim == 2 else -1
        for k, a in enumerate(arrs):
            want = ((G * H, K), (G * H, H), (G * H,), (G * H,))[k]
            if a.shape != want or H < 1:
                raise ValueError(f"weights[{l}][{k}] ({TENSORS[k]} of layer {l}): expected shape "
                                 f"{want} ({G} gates x hidden size {H}), got {a.shape}")
        if len(arrs) == 2:
            arrs += [np.zeros(G * H, dtype), np.zeros(G * H, dtype)]
        layers.append(arrs)
        K = H
    L = len(layers)
    states = []
    for a, name in ((h0, "h0"), (c0, "c0")):
        if name == "c0" and cell != "lstm":
            states.append(None)
            continue
        if a is None:
            states.append(np.zeros((L, B, H), dtype))
            continue
        a = train_array(a, name, dtype)
        if a.shape != (L, B, H):
            raise ValueError(f"{name}: expected shape (layers, B, H) = {(L, B, H)}, got {a.shape}")
        states.append(a)
    return layers, xa, states[0], states[1]


@dataclass
class TrainArgs(CallArgs):
    """The arguments of a training call: the call's own ``x``, ``weights``,
    ``h0``, ``c0`` (the results' gradients flow to them), the same checked
    (:func:`train_check`: ``layers``, ``xa``, ``h0a``, ``c0a``), the
    dropout ``masks`` between the layers (checked, or None), the call's
    ``schedule`` (the forward's, "layer" under dropout) and ``target``
    (``grad``: none refused, the training computes them)."""
    x: object
    weights: object
    h0: object
    c0: object
    layers: list
    xa: object
    h0a: object
    c0a: object
    masks: list | None
    schedule: str
    target: object


# ------------------------------------------------------------------ one projected layer
@dataclass
class ProjectedArgs(CallArgs):
    """A projected layer's arrays (float32 NumPy): ``x`` (T, B, I),
    ``weights`` ``(w_ih, w_hh, b_ih, b_hh, w_hr)`` (biases may be None),
    ``h0`` (B, P) and ``c0`` (B, H) or None; ``torch_in`` as
    :class:`RnnArgs`."""
    x: object
    weights: tuple
    h0: object
    c0: object
    torch_in: bool


@dataclass(frozen=True)
class ProjectedProblem:
    """One direction of one LSTM layer with a projection (torch's
    ``proj_size`` = ``proj`` > 0): ``T`` steps of batch ``B``, input size
    ``input_size``, hidden size ``hidden``, on the CPU backend ``target``.
    A layer of a projected stack (:class:`RnnStack`), composed by
    :func:`schedules.lstm`."""
    T: int
    B: int
    input_size: int
    hidden: int
    proj: int
    target: str

    op = "lstm_projected"
    cell = "lstm"
    device = "cpu"
    VERSION = 1
    degenerate = False

    def key(self) -> dict:
        return {"op": self.op, "version": self.VERSION, "T": self.T, "B": self.B,
                "input_size": self.input_size, "hidden": self.hidden, "proj": self.proj,
                "target": self.target, "device": self.device}

    @classmethod
    def from_call(cls, x, weights, h0, c0, target):
        """``(problem, ProjectedArgs)`` of ``x`` (T, B, I), ``weights``
        ``[w_ih, w_hh, b_ih or None, b_hh or None, w_hr]`` (their shapes
        checked by :class:`RnnStack`), ``h0`` (1, B, P) and ``c0`` (1, B,
        H) or None, all of one kind (NumPy, or CPU torch tensors)."""
        grad = needing_grad(x, weights, h0, c0)
        torch_in = is_torch(x)
        for s, name in ((h0, "h0"), (c0, "c0")):
            if s is not None and is_torch(s) != torch_in:
                raise TypeError(f"{name}: pass x and {name} both as NumPy arrays or both as "
                                "torch tensors")
        names = ("w_ih", "w_hh", "b_ih", "b_hh", "w_hr")
        arrays = tuple(None if m is None else as_numpy(m, f"weights ({names[n]})")
                       for n, m in enumerate(weights))
        xa = as_numpy(x, "x")
        h0a = None if h0 is None else as_numpy(h0, "h0")[0]
        c0a = None if c0 is None else as_numpy(c0, "c0")[0]
        if target_of(target) == "cuda":
            raise ValueError("target='cuda': an LSTM with proj_size > 0 has no GPU schedule; run "
                             "it on the CPU (target='c' or 'llvm')")
        T, B, I = xa.shape
        P, H = arrays[4].shape
        return (cls(T, B, I, H, P, target_of(target)),
                ProjectedArgs(xa, arrays, h0a, c0a, torch_in, grad=tuple(grad)))


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

    def parse(self, x, h0, c0, schedule, dropout, training, masks):
        """``(x, h0, c0, unbatched)``: a call's arguments checked for this
        stack (torch's shapes; an unbatched (T, I) ``x`` given a batch axis),
        whose layers run one by one: no dropout, no wavefront."""
        if dropout_p(dropout, training) or masks is not None:
            raise ValueError(f"schedules.{self.cell}: dropout in training mode is not supported "
                             "for a bidirectional or projected stack (its layers run one by "
                             "one); pass dropout=0 or training=False")
        unb = unbatched(self.cell, x, h0, c0)      # (T, I), states (L*D, H)
        if unb:
            x, h0, c0 = (None if a is None else a[:, None] for a in (x, h0, c0))
        if schedule == "wavefront":
            raise ValueError("schedule='wavefront' runs a stack of unidirectional layers without "
                             "projection; a bidirectional or projected stack runs layer by layer: "
                             "pass schedule='layer' or 'auto'")
        shape = tuple(getattr(x, "shape", ()))
        if len(shape) != 3 or min(shape) < 1:
            raise ValueError(f"x: expected (T, B, I) (batch_first=False) with no zero extent, got "
                             f"shape {shape}")
        if shape[2] != self.input_size:
            raise ValueError(f"x: input size {shape[2]} (its last dimension), but weights[0][0] "
                             f"(w_ih of layer 0) expects {self.input_size}")
        self.check_state(h0, "h0", shape[1])
        self.check_state(c0, "c0", shape[1])
        return x, h0, c0, unb

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

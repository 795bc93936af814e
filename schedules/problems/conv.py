"""The convolution problem: the shape of a call (:class:`ConvShape`) and
:class:`ConvProblem`, every conv operator's arguments parsed once (host or
device arrays, a dense or a CSR weight, the fused block's pool), with its
explicit, versioned find key; :meth:`ConvProblem.from_meta` gives the shape
of symbolic (torch fake) arguments.
"""
from __future__ import annotations

import os
import sys
from dataclasses import dataclass, fields, replace

import numpy as np

from ..core import arrays as A
from ..core.kernels import target_of, use_cuda
from ..weights.csr import as_csr, is_sparse

ACTIVATIONS = (None, "relu", "relu6")   # a conv2d's epilogues (ConvProblem.activation)
SPARSE_MAX_DENSITY = 0.7         # the last density bucket of a CSR weight's find key
DENSITY_BUCKETS = (0.01, 0.02, 0.05, 0.1, 0.2, 0.3, 0.4, 0.5, 0.6, SPARSE_MAX_DENSITY)


@dataclass(frozen=True)
class ConvShape:
    n: int
    ci: int
    h: int
    w: int
    co: int
    kh: int
    kw: int
    stride: int | tuple = 1        # int, or (height, width) as torch takes them;
    padding: int | tuple = 0       # kept as an int when both are equal (as torch
    dilation: int | tuple = 1      # prints them), so equal shapes compare equal
    groups: int = 1

    def __post_init__(self):
        for name in ("stride", "padding", "dilation"):
            v = getattr(self, name)
            if isinstance(v, (tuple, list)) and len(v) == 2 and v[0] == v[1]:
                object.__setattr__(self, name, int(v[0]))
            elif isinstance(v, list):
                object.__setattr__(self, name, tuple(v))

    def _hw(self, name, axis):
        v = getattr(self, name)
        return v[axis] if isinstance(v, tuple) else v

    sh = property(lambda self: self._hw("stride", 0))
    sw = property(lambda self: self._hw("stride", 1))
    ph = property(lambda self: self._hw("padding", 0))
    pw = property(lambda self: self._hw("padding", 1))
    dh = property(lambda self: self._hw("dilation", 0))
    dw = property(lambda self: self._hw("dilation", 1))

    hp = property(lambda self: self.h + 2 * self.ph, doc="the zero-padded input's height")
    wp = property(lambda self: self.w + 2 * self.pw, doc="the zero-padded input's width")

    @property
    def ho(self):
        return (self.hp - self.dh * (self.kh - 1) - 1) // self.sh + 1

    @property
    def wo(self):
        return (self.wp - self.dw * (self.kw - 1) - 1) // self.sw + 1

    @property
    def flops(self):
        return 2 * self.n * self.co * self.ho * self.wo * (self.ci // self.groups) * self.kh * self.kw

    @classmethod
    def make(cls, x_shape, w_shape, stride=1, padding=0, dilation=1, groups=1, op="conv2d",
             names=("input", "weight"), extra=False):
        """:meth:`_make`, remembered for plain ints (every call of a model's
        layer parses the same arguments; a refusal is raised again each time)."""
        key = _plain((tuple(x_shape), tuple(w_shape), stride, padding, dilation, groups, op,
                      names, extra))
        if key is None:
            return cls._make(x_shape, w_shape, stride, padding, dilation, groups, op, names,
                             extra)
        s = _SHAPES.get(key)
        if s is None:
            s = cls._make(x_shape, w_shape, stride, padding, dilation, groups, op, names, extra)
            _remember(_SHAPES, key, s)
        return s

    @classmethod
    def _make(cls, x_shape, w_shape, stride=1, padding=0, dilation=1, groups=1, op="conv2d",
              names=("input", "weight"), extra=False):
        """The shape of ``op``'s call on an input of shape ``x_shape`` (NCHW)
        and a weight of shape ``w_shape`` (OIHW), checked: ValueError starting
        with ``op`` and naming the argument (``names``: what the op calls its
        input and weight).  ``stride``, ``padding``, ``dilation``: an int or a
        (height, width) pair, as torch takes them; ``padding`` also "valid"
        or "same" (:func:`padding_of`; with ``extra`` an uneven "same" is
        torch's: the shape's input has :func:`same_extra`'s zeros added,
        which the caller adds; without, it is refused)."""
        stride, dilation = pair(stride, "stride", 1, op), pair(dilation, "dilation", 1, op)
        if not _is_int(groups) or groups < 1:
            raise ValueError(f"{op}: groups must be a positive int, got {groups!r}")
        for shape, name, what in ((x_shape, names[0], "(N, C, H, W)"),
                                  (w_shape, names[1], "(Cout, Cin/groups, KH, KW)")):
            if len(shape) != 4:
                raise ValueError(f"{op}: {name} must be 4-D {what}, got shape {tuple(shape)}")
        n, ci, h, w = x_shape
        co, cig, kh, kw = w_shape
        if kh < 1 or kw < 1:
            raise ValueError(f"{op}: the kernel is {kh}x{kw}; it must be at least 1x1")
        padding_in, padding = padding, padding_of(padding, kh, kw, stride, dilation, op)
        if ci % groups or co % groups:
            raise ValueError(f"{op}: groups={groups} must divide the {ci} input and {co} output "
                             "channels")
        (xn, wn), groups = names, int(groups)
        if cig != ci // groups:
            raise ValueError(f"{op}: {wn} has {cig} input channels, {xn} has {ci}" if groups == 1
                             else f"{op}: {wn} has {cig} input channels per group; {xn} has {ci} "
                             f"channels in {groups} groups, so {ci // groups} were expected")
        if co < groups:
            raise ValueError(f"{op}: {wn} has {co} output channels; with groups={groups} it "
                             f"needs at least {groups}, as in torch")
        if n and ci and not (h and w):
            raise ValueError(f"{op}: {xn} of shape {tuple(x_shape)} is empty; as in torch, an "
                             "empty input may have 0 images or 0 channels, not 0 rows or columns")
        eh, ew = same_extra(padding_in, kh, kw, dilation)
        if (eh or ew) and not extra:
            raise ValueError(f"{op}: padding='same' with a {kh}x{kw} kernel (dilation "
                             f"{dilation!r}) pads unevenly: torch adds {eh} row(s) and {ew} "
                             f"column(s) of zeros below and right of the input first; pass the "
                             f"input so padded and padding={padding!r}")
        s = cls(n, ci, h + eh, w + ew, co, kh, kw, stride, padding, dilation, groups)
        if s.ho < 1 or s.wo < 1:
            raise ValueError(f"{op}: the {kh}x{kw} kernel (dilation {dilation}) does not fit the "
                             f"{h}x{w} input with padding {padding}")
        return s


def _is_int(v):
    return isinstance(v, (int, np.integer)) and not isinstance(v, bool)


_SHAPES: dict = {}              # ConvShape.make's arguments -> shape
_METAS: dict = {}               # ConvProblem.from_meta's arguments -> shape
_CALLS: dict = {}               # from_call's checked arrays and arguments -> (problem, ...)
MEMO_LIMIT = 4096


def _plain(args):
    """``args`` as a key when every leaf is a plain int (not a bool, a NumPy
    integer or a torch SymInt), str or bool flag of the call, lists as
    tuples; else None (not remembered)."""
    out = []
    for a in args:
        if isinstance(a, (tuple, list)):
            if not all(type(v) is int for v in a) and not all(type(v) is str for v in a):
                return None
            out.append(("t",) + tuple(a))
        elif type(a) in (int, str, bool) or a is None:
            out.append((type(a).__name__, a))
        else:
            return None
    return tuple(out)


def _call_key(op, arrays, settings):
    """The key of :data:`_CALLS` for a call whose ``arrays`` (the input, the
    weight, the bias and the residual; None: not given) are all C-contiguous
    NumPy arrays of native byte order or all contiguous, strided CPU torch
    tensors (exactly those types, dense weight) and whose other arguments
    are plain (:func:`_plain`): the op, the arrays' kinds, shapes and dtypes,
    the arguments and $TIRAMISU_PY_TARGET (no target given: the env's);
    else None (the call is parsed)."""
    plain = _plain(settings)
    if plain is None or settings[4] == "sparse":
        return None
    kind = type(arrays[0])
    if kind is np.ndarray:
        if not all(type(a) is np.ndarray and a.flags.c_contiguous and a.dtype.isnative
                   for a in arrays if a is not None):
            return None
    elif kind.__module__ == "torch" and kind.__name__ == "Tensor":
        strided = sys.modules["torch"].strided
        if not all(type(a) is kind and a.is_cpu and a.layout is strided and a.is_contiguous()
                   for a in arrays if a is not None):
            return None
    else:
        return None
    return (op, kind, plain, os.environ.get("TIRAMISU_PY_TARGET"),
            *((None, None) if a is None else (a.shape, a.dtype) for a in arrays))


def _remember(memo, key, value):
    if len(memo) >= MEMO_LIMIT:
        memo.clear()
    memo[key] = value


def _residual(r, p, x, unbatched, device, name):
    """The residual ``r`` checked: of the input's kind, dtype and device, of
    the result's shape (unbatched: without the batch axis), C-contiguous and
    batched as the input is."""
    shape = p.output_shape[1:] if unbatched else p.output_shape
    if A.is_torch(r) != A.is_torch(x):
        raise TypeError(f"{name}: residual must be of the input's kind ({type(x).__name__}), got "
                        f"{type(r).__name__}")
    if device is None:
        r = A.typed_array(r, "residual", len(shape), (p.dtype,))
    else:
        r = A.float32_on(r, "residual", len(shape), device)
    if tuple(r.shape) != tuple(shape):
        raise ValueError(f"{name}: residual must have the result's shape {tuple(shape)}, got "
                         f"{tuple(r.shape)}")
    return r[None] if unbatched else r


def pair(v, name, least, op="conv2d"):
    """``v`` as torch takes it (an int, or a list of 1 or 2 ints: one for
    both, or (height, width)) checked, each at least ``least``: an int, or a
    tuple of two ints.  A list of another length, or one that is not of
    ints: ValueError starting with ``op`` and naming ``name``."""
    what = "non-negative" if least == 0 else "positive"
    form = (f"{op}: {name} must be a {what} int or a list of 1 or 2 of them (height, width), "
            f"as torch takes it, got {v!r}")
    is_list = isinstance(v, (tuple, list))
    items = tuple(v) if is_list else (v,)
    if (is_list and len(items) not in (1, 2)) or not all(map(_is_int, items)) \
            or any(i < least for i in items):
        raise ValueError(form)
    return int(items[0]) if len(items) == 1 else (int(items[0]), int(items[1]))


def padding_of(padding, kh, kw, stride, dilation, op="conv2d"):
    """torch's ``padding``: an int, a pair, "valid" (0) or "same" (stride 1;
    the total padding ``dilation * (k - 1)`` split as torch splits it:
    ``total // 2`` on both sides, returned here, and an odd extra row or
    column on the bottom / right side, :func:`same_extra`).  ``stride`` and
    ``dilation`` as :func:`pair` returns them."""
    if isinstance(padding, str):
        if padding == "valid":
            return 0
        if padding != "same":
            raise ValueError(f"{op}: padding must be an int, a pair, 'valid' or 'same'; "
                             f"got {padding!r}")
        if stride not in (1, (1, 1)):
            raise ValueError(f"{op}: padding='same' is not supported for strided convolutions "
                             f"(stride={stride!r}), as in torch")
        th, tw = _same_total(kh, kw, dilation)
        return (th // 2, tw // 2)
    return pair(padding, "padding", 0, op)


def _same_total(kh, kw, dilation):
    dh, dw = dilation if isinstance(dilation, tuple) else (dilation, dilation)
    return dh * (kh - 1), dw * (kw - 1)


def same_extra(padding, kh, kw, dilation) -> tuple:
    """``(rows, columns)`` of zeros torch adds below and right of the input
    for ``padding="same"`` when the total ``dilation * (k - 1)`` is odd (0 or
    1 each; ``(0, 0)`` for any other padding): torch pads a copy of the input
    by them, then pads ``total // 2`` on every side (:func:`padding_of`), and
    so do the calls here.  ``dilation`` as :func:`pair` returns it."""
    if not isinstance(padding, str) or padding != "same":
        return (0, 0)                       # (also when dilation is bad: refused elsewhere)
    th, tw = _same_total(kh, kw, dilation)
    return (th % 2, tw % 2)


def conv_shape(x_shape, w_shape, stride, padding, dilation, op="sparse_conv2d"):
    """The checked :class:`ConvShape` of a sparse convolution (``groups`` 1;
    errors name ``op``, ``x`` and ``w``)."""
    return ConvShape.make(x_shape, w_shape, stride, padding, dilation, 1, op, names=("x", "w"))


@dataclass
class ConvArgs:
    """The checked arrays of a call: ``x`` (NCHW: an unbatched input has had
    its batch axis added, ``unbatched``, which the result loses again,
    :class:`schedules.blocks.conv_common.ConvSolver`; a "same" padding its
    odd extra zeros, :func:`same_extra`), the dense weight ``w`` (None for a CSR
    weight on the GPU), ``b``, the CSR weight ``csr`` (None for a dense
    weight), ``device`` (the input's torch device, None on the host) and
    ``r`` (the residual added before the activation, of the result's shape,
    or None)."""
    x: object
    w: object
    b: object
    csr: object = None
    device: object = None
    unbatched: bool = False
    r: object = None

    def inputs(self, data=None) -> dict:
        """The keywords of the input, the bias and the residual every conv
        kernel takes: ``data`` (``x``, or the caller's view of it), ``bias``
        (none without a bias) and ``residual`` (none without one)."""
        data = self.x if data is None else data
        given = {"data": data} if self.b is None else {"data": data, "bias": self.b}
        if self.r is not None:
            given["residual"] = self.r
        return given

    def zeros(self, p: "ConvProblem"):
        """The result of a degenerate problem: zeros (an empty array)."""
        return A.zeros(self.x, p.output_shape, self.b)

    def group(self, g, groups):
        """The arguments of group ``g`` of ``groups``: its input channels and
        its output channels' weight (dense rows, CSR rows) and bias, each
        contiguous."""
        ci = self.x.shape[1] // groups
        co = (self.w if self.csr is None else self.csr).shape[0] // groups
        rows = slice(g * co, (g + 1) * co)
        return ConvArgs(A.contiguous(self.x[:, g * ci:(g + 1) * ci]),
                        None if self.w is None else A.contiguous(self.w[rows]),
                        None if self.b is None else A.contiguous(self.b[rows]),
                        None if self.csr is None else self.csr.rows(g * co, (g + 1) * co),
                        self.device, False,
                        None if self.r is None else A.contiguous(self.r[:, rows]))


@dataclass(frozen=True)
class ConvProblem:
    """One convolution call: ``op`` ("conv2d", or "conv_relu_maxpool": the
    same problem with ``pool`` and ReLU), its :class:`ConvShape`, whether a
    bias is given, ``target`` (the backend: "llvm", "c", "cpu" or "cuda"),
    the weight's form the solvers read (``weight``: "csr" for a sparse
    weight, or a dense one with ``algo="sparse"``; else "dense") and
    ``density`` (the fraction of nonzeros of a CSR weight, else None).  A
    dense weight is never run sparse by "auto", nor a sparse one dense: the
    sparse solvers skip structural zeros (``0 * inf`` never computed), so
    the two forms differ on inf/NaN inputs (:func:`schedules.core.find.candidates`).
    ``activation`` (conv2d only): "relu" or "relu6" applied to the result, in
    the kernel's epilogue where the solver has one (``Solver.activations``),
    else in place after it (:func:`schedules.core.arrays.activate`); None:
    the convolution itself.  ``residual`` (conv2d only): an array of the
    result's shape (``ConvArgs.r``) is added to it before the activation, in
    the kernel's epilogue where the solver has one (``Solver.residual``),
    else after a kernel run without the activation (:meth:`plain`)."""
    op: str
    shape: ConvShape
    bias: bool
    target: str
    device: str = "cpu"
    weight: str = "dense"
    density: float | None = None
    pool: int = 1
    dtype: str = "float32"   # conv2d on the CPU also "bfloat16", "float16" (float32 sums)
    activation: str | None = None   # conv2d: "relu" / "relu6" applied to the result, or None
    residual: bool = False          # conv2d: a residual added before the activation

    VERSION = 2              # the key's layout: bump when a field changes meaning (2: dtype)

    relu = property(lambda self: self.op == "conv_relu_maxpool")

    @property
    def degenerate(self):
        """An empty output: no image, no output channel, or no input channel
        (then torch's result has no channel either: ``(N, 0, Ho, Wo)``, not
        the bias): the solver returns it without a kernel
        (:class:`schedules.blocks.conv_common.ConvSolver`), the find step has
        nothing to time."""
        s = self.shape
        return s.n == 0 or s.co == 0 or s.ci == 0

    @property
    def output_shape(self):
        s = self.shape
        return (s.n, s.co if s.ci else 0, s.ho // self.pool, s.wo // self.pool)

    @property
    def density_bucket(self):
        """The least of ``DENSITY_BUCKETS`` at or above a CSR weight's
        ``density`` (None: a dense weight, or denser than the last bucket)."""
        if self.density is None or self.shape.groups != 1:
            return None
        return next((d for d in DENSITY_BUCKETS if self.density <= d), None)

    def key(self) -> dict:
        """The find record's key (without the host, which the find step
        adds): every field by name, so that a new field is a new key and not
        an orphaned record (``activation`` only when there is one: the
        records of plain convolutions keep their keys)."""
        s = self.shape
        return {"op": self.op, "version": self.VERSION,
                "shape": {f.name: getattr(s, f.name) for f in fields(s)},
                "bias": self.bias, "target": self.target, "device": self.device,
                "weight": self.weight,
                "density<=": self.density_bucket, "pool": self.pool, "dtype": self.dtype,
                **({"activation": self.activation} if self.activation else {}),
                **({"residual": True} if self.residual else {})}

    def plain(self):
        """The problem without its epilogue (no activation, no residual): what
        a solver without a residual epilogue runs before the residual is
        added and the activation applied (:class:`schedules.blocks.conv_common.ConvSolver`)."""
        return replace(self, activation=None, residual=False)

    # ------------------------------------------------------------ parsing
    @classmethod
    def from_call(cls, op, input, weight, bias, stride, padding, dilation, groups, *,
                  algo="auto", target=None, pool=1, name=None, names=("input", "weight"),
                  gpu=True, size=None, activation=None, residual=None):
        """``(problem, args)`` of a call of ``op`` with torch's arguments,
        checked: ValueError/TypeError starting with ``name`` (the public
        call's name, default ``op``) and naming the argument (``names``:
        what the call names its input and weight).  ``input`` NCHW or, as
        torch takes it, unbatched CHW (the solver's result drops the batch
        axis again).  Host arrays (NumPy, CPU torch) or, with ``target="cuda"``
        or no target, torch CUDA tensors (the result on the input's device;
        ``gpu=False``: an operator without a GPU solver takes host arrays
        only); ``weight`` dense, or sparse (:class:`schedules.CSRWeights`,
        torch sparse-CSR, scipy CSR).  ``size``: the (height, width) the input
        is resized to before the convolution (the resize block's problem).
        ``activation``, ``residual``: see the class (conv2d; the residual an
        array of the result's shape, of the input's kind, dtype and device)."""
        name = name or op
        key = _call_key(op, (input, weight, bias, residual),
                        (stride, padding, dilation, groups, algo, target, pool, name, names, gpu,
                         size, activation))
        known = _CALLS.get(key) if key is not None else None
        if known is not None:               # checked before: the same problem of other values
            p, unbatched, (eh, ew) = known
            x = input[None] if unbatched else input
            return p, ConvArgs(A.pad_end(x, eh, ew) if eh or ew else x, weight, bias, None, None,
                               unbatched, None if residual is None
                               else residual[None] if unbatched else residual)
        if activation not in ACTIVATIONS or (activation and op != "conv2d"):
            raise ValueError(f"{name}: activation must be one of "
                             f"{', '.join(map(repr, ACTIVATIONS))}, got {activation!r}"
                             if op == "conv2d" else f"{name}: takes no activation")
        if residual is not None and op != "conv2d":
            raise ValueError(f"{name}: takes no residual")
        sparse = is_sparse(weight)
        # (a torch sparse tensor raises on the device probe: the input decides)
        _check_sparse_weight(weight, sparse, names[1])
        xn, wn = names
        input, unbatched = _batched(input, xn, name)
        cuda = gpu and use_cuda(target, input, None if sparse else weight, bias,
                                names=(names[0], names[1], "bias"))
        as_csr_form = sparse or algo == "sparse"
        cig = _channels_per_group(input, groups)
        if cuda:
            dev = A.device_of(input)
            x = A.float32_on(input, xn, 4, dev)
            csr = _host_csr(weight, cig, wn) if as_csr_form else None
            w = None if as_csr_form else A.float32_on(weight, wn, 4, dev)
            b = None if bias is None else A.float32_on(bias, "bias", 1, dev)
        else:
            dev = None
            A.same_kind((input, bias) if sparse else (input, weight, bias),
                        (xn, "bias") if sparse else (xn, wn, "bias"))
            # bfloat16 / float16 for the dense conv2d (its direct solver), as torch's
            kinds = ("float32", "bfloat16", "float16") if op == "conv2d" and not as_csr_form \
                else ("float32",)
            x = A.typed_array(input, xn, 4, kinds)
            csr = as_csr(weight, cig, wn) if as_csr_form else None
            w = None if sparse else A.typed_array(weight, wn, 4, kinds)
            b = None if bias is None else A.typed_array(bias, "bias", 1, kinds)
            dts = {A.dtype_name(t) for t in (x, w, b) if t is not None}
            if len(dts) > 1:                    # as torch's conv2d
                raise TypeError(f"{name}: {xn}, {wn} and bias must have the same dtype, got "
                                + ", ".join(str(t.dtype) for t in (x, w, b) if t is not None))
        if csr is not None and len(csr.shape) != 4:
            raise ValueError(f"{name}: {wn} must be a 4-D (Cout, Cin/groups, KH, KW) weight, "
                             f"got shape {csr.shape}")
        kshape, extra = (w if csr is None else csr).shape, (0, 0)
        s = ConvShape.make(_resized(x.shape, size), kshape, stride, padding, dilation, groups,
                           name, names=names, extra=True)
        if (s.h, s.w) != _resized(x.shape, size)[2:]:   # torch's uneven "same": zeros below, right
            if size is not None:
                raise ValueError(f"{name}: padding='same' needs uneven padding here (the "
                                 "resized image padded more below and right); pass the padding "
                                 "as ints")
            extra = (s.h - x.shape[2], s.w - x.shape[3])
            x = A.pad_end(x, *extra)
        args = ConvArgs(x, w, b, csr, dev, unbatched)
        if args.b is not None and args.b.shape[0] != s.co:
            raise ValueError(f"{name}: bias has {args.b.shape[0]} values for {s.co} output channels")
        if op == "conv_relu_maxpool":
            if not isinstance(pool, int) or isinstance(pool, bool) \
                    or not 1 <= pool <= min(s.ho, s.wo):
                raise ValueError(f"{name}: pool must be an int in [1, {min(s.ho, s.wo)}], got "
                                 f"{pool!r}")
            if s.ci == 0:
                raise ValueError(f"{name}: {xn} has no channel: the convolution's result has "
                                 "none, and torch's max_pool2d refuses an input of 0 channels")
        density = None if args.csr is None else args.csr.density
        # the form the solvers read: structural zeros absent ("csr") or not
        p = cls(op, s, args.b is not None, target_of(target), "cuda" if cuda else "cpu",
                "csr" if as_csr_form else "dense", density, pool,
                "float32" if cuda else A.dtype_name(args.x), activation, residual is not None)
        if residual is not None:
            args.r = _residual(residual, p, args.x, unbatched, dev, name)
        if key is not None and not cuda and csr is None:
            _remember(_CALLS, key, (p, unbatched, extra))
        return p, args

    def per_group(self):
        """The problem of one group (``groups=1``, its channels), which
        solvers without a grouped schedule run once per group."""
        s = self.shape
        g = s.groups
        one = ConvShape(s.n, s.ci // g, s.h, s.w, s.co // g, s.kh, s.kw, s.stride, s.padding,
                        s.dilation, 1)
        return ConvProblem(self.op, one, self.bias, self.target, self.device, self.weight,
                           self.density, self.pool, self.dtype, self.activation, self.residual)

    @classmethod
    def from_meta(cls, op, xshape, wshape, stride, padding, dilation, groups, check=None):
        """The :class:`ConvShape` of symbolic shapes and arguments (ints or
        torch SymInts, for torch's operators and fake implementations), with
        :meth:`ConvShape.make`'s rules (an unbatched CHW ``xshape`` is one
        image: ``n`` 1): ``stride``, ``padding``,
        ``dilation`` lists of 1 or 2 (one is both), positive (padding
        non-negative); ``check(condition, message)`` (``torch._check``:
        RuntimeError) refuses what does not fit, naming the argument
        (default: ValueError)."""
        key = _plain((op, tuple(xshape), tuple(wshape), stride, padding, dilation, groups))
        known = None if key is None else _METAS.get(key)
        if known is not None:
            return known
        s = cls._from_meta(op, xshape, wshape, stride, padding, dilation, groups, check)
        if key is not None:
            _remember(_METAS, key, s)
        return s

    @classmethod
    def _from_meta(cls, op, xshape, wshape, stride, padding, dilation, groups, check=None):
        check = check or _check
        xshape, wshape = tuple(xshape), tuple(wshape)
        check(len(xshape) in (3, 4), lambda: f"tiramisu::{op}: input must be 3-D (C, H, W, "
                                             f"unbatched) or 4-D (N, C, H, W), got shape {xshape}")
        xshape = (1,) + xshape if len(xshape) == 3 else xshape
        check(len(wshape) == 4, lambda: f"tiramisu::{op}: weight must be 4-D (Cout, Cin/groups, "
                                        f"KH, KW), got shape {wshape}")
        stride = _meta_pair(op, stride, "stride", 1, check)
        padding = _meta_pair(op, padding, "padding", 0, check)
        dilation = _meta_pair(op, dilation, "dilation", 1, check)
        n, ci, h, wd = xshape
        co, cig, kh, kw = wshape
        check(groups >= 1, lambda: f"tiramisu::{op}: groups must be a positive int, got {groups}")
        check(ci % groups == 0 and co % groups == 0,
              lambda: f"tiramisu::{op}: groups={groups} must divide the {ci} input and {co} "
                      "output channels")
        check(cig * groups == ci,
              lambda: f"tiramisu::{op}: weight {wshape} has {cig} input channels per group; "
                      f"input {xshape} has {ci} channels in {groups} groups")
        check(kh >= 1 and kw >= 1,
              lambda: f"tiramisu::{op}: the kernel is {kh}x{kw}; it must be at least 1x1")
        check(co >= groups, lambda: f"tiramisu::{op}: weight has {co} output channels; with "
                                    f"groups={groups} it needs at least {groups}, as in torch")
        check(n == 0 or ci == 0 or (h != 0 and wd != 0),
              lambda: f"tiramisu::{op}: input of shape {xshape} is empty; as in torch, an empty "
                      "input may have 0 images or 0 channels, not 0 rows or columns")
        s = ConvShape(n, ci, h, wd, co, kh, kw, stride, padding, dilation, groups)
        check(s.ho >= 1 and s.wo >= 1,
              lambda: f"tiramisu::{op}: the {kh}x{kw} kernel does not fit the {h}x{wd} input")
        return s


def _resized(xshape, size):
    """The shape the convolution reads: ``xshape`` with its height and width
    replaced by ``size`` when given."""
    return tuple(xshape) if size is None else (xshape[0], xshape[1], size[0], size[1])


def _meta_pair(op, v, name, least, check):
    """A symbolic ``stride``/``padding``/``dilation`` list as a (height,
    width) tuple: :func:`pair`'s rule, by ``check``."""
    v = tuple(v) if isinstance(v, (tuple, list)) else (v,)
    what = "non-negative" if least == 0 else "positive"
    check(len(v) in (1, 2),
          lambda: f"tiramisu::{op}: {name} must be a {what} int or a list of 1 or 2 of them "
                  f"(height, width), as torch takes it, got {list(v)}")
    for i in v:
        check(i >= least, lambda: f"tiramisu::{op}: {name} must be {what}, got {list(v)}")
    return v * 2 if len(v) == 1 else v


def _check_sparse_weight(w, sparse, name):
    """A sparse weight's own errors, before it is read: one that requires
    grad (sparse weights have no backward here), and a CSRWeights whose
    ``rowptr`` was changed after construction (checked on every call)."""
    if sparse and A.is_torch(w) and w.requires_grad:
        raise ValueError(f"{name}: a sparse weight that requires grad: the sparse convolution "
                         f"has no backward; pass {name}.detach(), or a dense weight to train")
    rowptr = getattr(w, "rowptr", None)
    if sparse and isinstance(rowptr, np.ndarray) and rowptr.size > 1:
        step = np.diff(rowptr)
        if (step < 0).any() or rowptr[0] != 0 or rowptr[-1] != len(w.colidx):
            r = int(np.argmax(step < 0)) if (step < 0).any() else 0
            raise ValueError(f"{name}: its rowptr was changed after construction (rowptr[{r}] = "
                             f"{rowptr[r]}, rowptr[{r + 1}] = {rowptr[r + 1]}, ends at "
                             f"{rowptr[-1]} for {len(w.colidx)} nonzeros); rowptr must start at "
                             "0, never decrease and end at nnz: make a new CSRWeights instead of "
                             "changing one")


def _batched(x, name, op):
    """``(x, unbatched)``: an unbatched CHW input as NCHW of one image (a
    view), as torch takes it; another rank is refused as torch refuses it."""
    nd = getattr(x, "ndim", None)
    if isinstance(nd, int) and nd not in (3, 4):
        raise ValueError(f"{op}: {name} must be 3-D (C, H, W, unbatched) or 4-D (N, C, H, W), "
                         f"as in torch; got shape {tuple(x.shape)}")
    return (x[None], True) if nd == 3 else (x, False)


def _channels_per_group(x, groups):
    """The input's channels per group (all of them when ``groups`` is not a
    positive divisor: refused later, named, by :meth:`ConvShape.make`)."""
    c = x.shape[1] if getattr(x, "ndim", 0) == 4 else 0
    return c // groups if _is_int(groups) and groups >= 1 and c % groups == 0 else c


def _check(cond, message):
    if not cond:
        raise ValueError(message())


def _host_csr(w, ci, name):
    """A sparse or dense weight (host or torch CUDA) as CSRWeights."""
    if A.is_torch(w) and w.device.type == "cuda":
        if str(w.dtype) != "torch.float32":
            raise TypeError(f"{name}: expected a float32 tensor, got {w.dtype}")
        w = w.cpu()                 # converted on every call, as a dense host weight is
    return as_csr(w, ci, name)


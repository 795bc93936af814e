"""The convolution problem: the shape of a call (:class:`ConvShape`) and
:class:`ConvProblem`, every conv operator's arguments parsed once (host or
device arrays, a dense or a CSR weight, the fused block's pool), with its
explicit, versioned find key; :meth:`ConvProblem.from_meta` gives the shape
of symbolic (torch fake) arguments.
"""
from __future__ import annotations

from dataclasses import dataclass, fields

import numpy as np

from ..core import arrays as A
from ..core.kernels import target_of, use_cuda
from ..weights.csr import as_csr, is_sparse

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
             names=("input", "weight")):
        """The shape of ``op``'s call on an input of shape ``x_shape`` (NCHW)
        and a weight of shape ``w_shape`` (OIHW), checked: ValueError starting
        with ``op`` and naming the argument (``names``: what the op calls its
        input and weight).  ``stride``, ``padding``, ``dilation``: an int or a
        (height, width) pair, as torch takes them; ``padding`` also "valid"
        or "same" (:func:`padding_of`)."""
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
        padding = padding_of(padding, kh, kw, stride, dilation, op)
        if ci % groups or co % groups:
            raise ValueError(f"{op}: groups={groups} must divide the {ci} input and {co} output "
                             "channels")
        (xn, wn), groups = names, int(groups)
        if cig != ci // groups:
            raise ValueError(f"{op}: {wn} has {cig} input channels, {xn} has {ci}" if groups == 1
                             else f"{op}: {wn} has {cig} input channels per group; {xn} has {ci} "
                             f"channels in {groups} groups, so {ci // groups} were expected")
        s = cls(n, ci, h, w, co, kh, kw, stride, padding, dilation, groups)
        if s.ho < 1 or s.wo < 1:
            raise ValueError(f"{op}: the {kh}x{kw} kernel (dilation {dilation}) does not fit the "
                             f"{h}x{w} input with padding {padding}")
        return s


def _is_int(v):
    return isinstance(v, (int, np.integer)) and not isinstance(v, bool)


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
    the total padding ``dilation * (k - 1)`` must be even: torch puts an odd
    extra row on one side, which these kernels do not).  ``stride`` and
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
        dh, dw = dilation if isinstance(dilation, tuple) else (dilation, dilation)
        th, tw = dh * (kh - 1), dw * (kw - 1)
        if th % 2 or tw % 2:
            raise ValueError(f"{op}: padding='same' with a {kh}x{kw} kernel (dilation "
                             f"{dilation!r}) needs uneven padding, which is not supported; "
                             f"pad the input and use padding=0")
        return (th // 2, tw // 2)
    return pair(padding, "padding", 0, op)


def conv_shape(x_shape, w_shape, stride, padding, dilation, op="sparse_conv2d"):
    """The checked :class:`ConvShape` of a sparse convolution (``groups`` 1;
    errors name ``op``, ``x`` and ``w``)."""
    return ConvShape.make(x_shape, w_shape, stride, padding, dilation, 1, op, names=("x", "w"))


@dataclass
class ConvArgs:
    """The checked arrays of a call: ``x``, the dense weight ``w`` (None for a
    CSR weight on the GPU), ``b``, the CSR weight ``csr`` (None for a dense
    weight) and ``device`` (the input's torch device, None on the host)."""
    x: object
    w: object
    b: object
    csr: object = None
    device: object = None

    def zeros(self, p: "ConvProblem"):
        """The result of a degenerate problem: the bias broadcast (zeros)."""
        return A.zeros(self.x, p.output_shape, self.b)


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
    the two forms differ on inf/NaN inputs (:func:`schedules.core.find.candidates`)."""
    op: str
    shape: ConvShape
    bias: bool
    target: str
    device: str = "cpu"
    weight: str = "dense"
    density: float | None = None
    pool: int = 1
    dtype: str = "float32"   # conv2d on the CPU also "bfloat16", "float16" (float32 sums)

    VERSION = 2              # the key's layout: bump when a field changes meaning (2: dtype)

    relu = property(lambda self: self.op == "conv_relu_maxpool")

    @property
    def degenerate(self):
        """An empty output (batch or output channels 0) or an empty sum (input
        channels 0: the output is the bias): every solver handles it, the
        find step has nothing to time."""
        s = self.shape
        return s.n == 0 or s.co == 0 or s.ci == 0

    @property
    def output_shape(self):
        s = self.shape
        return (s.n, s.co, s.ho // self.pool, s.wo // self.pool)

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
        an orphaned record."""
        s = self.shape
        return {"op": self.op, "version": self.VERSION,
                "shape": {f.name: getattr(s, f.name) for f in fields(s)},
                "bias": self.bias, "target": self.target, "device": self.device,
                "weight": self.weight,
                "density<=": self.density_bucket, "pool": self.pool, "dtype": self.dtype}

    # ------------------------------------------------------------ parsing
    @classmethod
    def from_call(cls, op, input, weight, bias, stride, padding, dilation, groups, *,
                  algo="auto", target=None, pool=1, name=None, names=("input", "weight"),
                  gpu=True):
        """``(problem, args)`` of a call of ``op`` with torch's arguments,
        checked: ValueError/TypeError starting with ``name`` (the public
        call's name, default ``op``) and naming the argument (``names``:
        what the call names its input and weight).  Host arrays (NumPy, CPU
        torch) or, with ``target="cuda"`` or no target, torch CUDA tensors
        (the result on the input's device; ``gpu=False``: an operator
        without a GPU solver takes host arrays only); ``weight`` dense, or sparse
        (:class:`schedules.CSRWeights`, torch sparse-CSR, scipy CSR)."""
        name = name or op
        sparse = is_sparse(weight)
        # (a torch sparse tensor raises on the device probe: the input decides)
        _check_sparse_weight(weight, sparse, names[1])
        cuda = gpu and use_cuda(target, input, None if sparse else weight, bias,
                                names=(names[0], names[1], "bias"))
        xn, wn = names
        if cuda:
            dev = A.device_of(input)
            x = A.float32_on(input, xn, 4, dev)
            if sparse or algo == "sparse":
                csr = _host_csr(weight, x.shape[1], wn)
                s = cls._sparse_shape(name, x, csr, groups, stride, padding, dilation, names)
                w = None
            else:
                csr = None
                w = A.float32_on(weight, wn, 4, dev)
                s = ConvShape.make(x.shape, w.shape, stride, padding, dilation, groups, name)
            b = None if bias is None else A.float32_on(bias, "bias", 1, dev)
            args = ConvArgs(x, w, b, csr, dev)
        elif sparse or algo == "sparse":
            if not sparse:
                A.same_kind((input, weight, bias), (xn, wn, "bias"))
            else:
                A.same_kind((input, bias), (xn, "bias"))
            x = A.float32_array(input, xn, 4)
            csr = as_csr(weight, x.shape[1], wn)
            s = cls._sparse_shape(name, x, csr, groups, stride, padding, dilation, names)
            b = None if bias is None else A.float32_array(bias, "bias", 1)
            args = ConvArgs(x, None if sparse else weight, b, csr)
        else:
            A.same_kind((input, weight, bias), (xn, wn, "bias"))
            kinds = ("float32", "bfloat16", "float16") if op == "conv2d" else ("float32",)
            x, w = A.typed_array(input, xn, 4, kinds), A.typed_array(weight, wn, 4, kinds)
            b = None if bias is None else A.typed_array(bias, "bias", 1, kinds)
            dts = {str(t.dtype).split(".")[-1] for t in (x, w, b) if t is not None}
            if len(dts) > 1:                    # as torch's conv2d
                raise TypeError(f"{name}: {xn}, {wn} and bias must have the same dtype, got "
                                + ", ".join(str(t.dtype) for t in (x, w, b) if t is not None))
            s = ConvShape.make(x.shape, w.shape, stride, padding, dilation, groups, name)
            args = ConvArgs(x, w, b)
        if args.b is not None and args.b.shape[0] != s.co:
            raise ValueError(f"{name}: bias has {args.b.shape[0]} values for {s.co} output channels")
        if op == "conv_relu_maxpool" and (not isinstance(pool, int) or isinstance(pool, bool)
                                         or not 1 <= pool <= min(s.ho, s.wo)):
            raise ValueError(f"{name}: pool must be an int in [1, {min(s.ho, s.wo)}], got {pool!r}")
        density = None if args.csr is None else args.csr.density
        # the form the solvers read: structural zeros absent ("csr") or not
        form = "csr" if sparse or algo == "sparse" else "dense"
        p = cls(op, s, args.b is not None, target_of(target), "cuda" if cuda else "cpu", form,
                density, pool, str(args.x.dtype).split(".")[-1])
        return p, args

    @staticmethod
    def _sparse_shape(name, x, csr, groups, stride, padding, dilation, names):
        if groups != 1:
            raise ValueError(f"{name}: groups must be 1 for sparse weights, got {groups!r}")
        if len(csr.shape) != 4:
            raise ValueError(f"{name}: {names[1]} must be a 4-D (Cout, Cin, KH, KW) weight, got "
                             f"shape {csr.shape}")
        return ConvShape.make(tuple(x.shape), csr.shape, stride, padding, dilation, 1, name,
                              names=names)

    @classmethod
    def from_meta(cls, op, xshape, wshape, stride, padding, dilation, groups, check=None):
        """The :class:`ConvShape` of symbolic shapes and arguments (ints or
        torch SymInts, for torch's operators and fake implementations), with
        :meth:`ConvShape.make`'s rules: ``stride``, ``padding``,
        ``dilation`` lists of 1 or 2 (one is both), positive (padding
        non-negative); ``check(condition, message)`` (``torch._check``:
        RuntimeError) refuses what does not fit, naming the argument
        (default: ValueError)."""
        check = check or _check
        xshape, wshape = tuple(xshape), tuple(wshape)
        check(len(xshape) == 4, lambda: f"tiramisu::{op}: input must be 4-D (N, C, H, W), got "
                                        f"shape {xshape}")
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
        s = ConvShape(n, ci, h, wd, co, kh, kw, stride, padding, dilation, groups)
        check(s.ho >= 1 and s.wo >= 1,
              lambda: f"tiramisu::{op}: the {kh}x{kw} kernel does not fit the {h}x{wd} input")
        return s


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


"""The torch glue every ``torch.ops.tiramisu`` module shares: the namespace,
the one way an op is defined (:func:`op`), the float dtypes the ops take and the
refusal of a double backward (:mod:`schedules.torch_ops` registers the conv,
GEMM and sparse ops, :mod:`schedules.torch_rnn_ops` the recurrent ones)."""
from __future__ import annotations

import torch

from tiramisu_py.runtime.torch_bridge import define

NS = "tiramisu"
FLOATS = {torch.float32: "float32", torch.float64: "float64"}
REDUCED = {torch.bfloat16: "bfloat16", torch.float16: "float16"}


# the ops that run in the autocast dtype under torch.autocast("cpu"), as aten's mm,
# conv2d and lstm do (their float32 arguments cast); every other op casts reduced-
# precision arguments to float32 (aten's gru, too, runs in float32 there)
REDUCED_OPS = ("gemm", "conv2d", "conv2d.padding", "lstm")


def op(name, schema, impl, fake, backward=None, setup_context=None):
    """Defines ``tiramisu::name`` (see :func:`tiramisu_py.runtime.torch_bridge.define`);
    its results pass through :func:`fresh_outputs`; under ``torch.autocast("cpu")``
    it runs in the autocast dtype if it is one of :data:`REDUCED_OPS`, else in
    float32."""
    def owned(*args, **kwargs):     # (below autograd: a Parameter's detach loses nothing)
        tensors = _tensors(args)    # (walked once for both)
        return fresh_outputs(impl(*unwrapped(args, tensors), **kwargs), args, tensors)
    owned.__name__, owned.__doc__ = impl.__name__, impl.__doc__
    return define(f"{NS}::{name}", schema, owned, fake, backward, setup_context,
                  autocast="reduced" if name in REDUCED_OPS else "float32")


def eager(op, impl, recorded=None):
    """``op`` for a module's forward or a backward to call: its
    implementation run directly (with :func:`fresh_outputs`, as the op runs
    it) where the op's dispatch could add nothing -- no gradient recorded
    (grad mode off, or no argument requiring one), nothing compiling or
    tracing (no dispatch or function mode, no ``torch.jit`` trace, no
    ``torch.func`` transform, plain CPU float32/float64 tensors), autocast off -- else the op: two dispatches
    fewer per conv in an inference forward or a training step.  ``recorded``:
    what runs where a gradient is recorded in an otherwise plain eager call
    (:func:`plain_eager`; an ``autograd.Function`` with the op's backward,
    None: the op)."""
    def call(*args, **kwargs):
        tensors = direct_tensors(args)
        if tensors is not None:
            return fresh_outputs(impl(*unwrapped(args, tensors), **kwargs), args, tensors)
        if recorded is not None and plain_eager(args):
            return recorded(*args, **kwargs)
        return op(*args, **kwargs)
    call.__name__, call.__doc__ = getattr(impl, "__name__", "op"), impl.__doc__
    return call


def unwrapped(args, tensors=None):
    """``args`` with each ``nn.Parameter`` (alone or in a list) as a plain
    tensor over the same storage (``detach``): a subclass's every attribute
    and method goes through torch's subclass dispatch, which made a
    converted depthwise conv's call 19 us slower than the same call on plain
    tensors (960 x 7x7, no_grad); detaching two costs ~1 us.  For a call
    that records no gradient (:func:`direct`); ``tensors``: its tensors
    (:func:`direct_tensors`), when known."""
    if _PARAMETER not in map(type, _tensors(args) if tensors is None else tensors):
        return args
    out = list(args)
    for k, a in enumerate(args):
        kind = type(a)
        if kind is _PARAMETER:
            out[k] = a.detach()
        elif kind is list and _PARAMETER in map(type, a):
            out[k] = [t.detach() if type(t) is _PARAMETER else t for t in a]
    return out


def overloads(ints, string):
    """The implementation of a conv op's two overloads, as aten's ``conv2d``
    and ``conv2d.padding``: ``ints`` for a padding of ints, ``string`` for
    "valid" / "same" (the fifth argument)."""
    def impl(input, weight, bias=None, stride=(1, 1), padding=(0, 0), *rest, **kwargs):
        chosen = string if isinstance(padding, str) else ints
        return chosen(input, weight, bias, stride, padding, *rest, **kwargs)
    impl.__name__, impl.__doc__ = ints.__name__, ints.__doc__
    return impl


def direct(args):
    """Whether an op's implementation may run directly on ``args`` (see
    :func:`eager`): its dispatch would record, trace or convert nothing."""
    return direct_tensors(args) is not None


def direct_tensors(args):
    """The tensors of ``args`` where :func:`direct` holds, else None."""
    if not _plain_mode(args):
        return None
    grad = _C.is_grad_enabled()
    tensors = _tensors(args)
    for t in tensors:
        if type(t) not in _PLAIN or not t.is_cpu or t.dtype not in FLOATS \
                or (grad and t.requires_grad):
            return None
    return tensors


def plain_eager(args):
    """Whether ``args`` are plain CPU float tensors (Parameters included) of
    an eager call: nothing compiling or tracing (no dispatch or function
    mode, no ``torch.jit`` trace, no ``torch.func`` transform), autocast
    off.  Gradients may be recorded (an ``autograd.Function`` records them)."""
    return _plain_mode(args) and all(type(t) in _PLAIN and t.is_cpu and t.dtype in FLOATS
                                     for t in _tensors(args))


def _plain_mode(args):
    """No compiling, tracing, mode or transform active, autocast off, and
    ``args[0]`` a plain tensor."""
    return bool(args) and type(args[0]) is torch.Tensor and not (
        _compiling() or _C._len_torch_dispatch_stack() or _C._is_torch_function_mode_enabled()
        or _C.is_autocast_enabled(_CPU) or _C._get_tracing_state()
        or _C._are_functorch_transforms_active())


_PARAMETER = torch.nn.Parameter
_PLAIN = (torch.Tensor, _PARAMETER)     # (a Parameter overrides no torch function)


_C = torch._C
_CPU = torch.device("cpu").type
_compiling = torch.compiler.is_compiling


def _tensors(args):
    """The tensors of ``args`` (a list), lists of tensors included (lists of
    ints, such as a conv's stride, are not walked)."""
    out = []
    for a in args:
        kind = type(a)
        if kind in _PLAIN:
            out.append(a)
        elif kind in _SCALARS:
            continue
        elif kind is list or kind is tuple:
            first = type(a[0]) if a else int
            if first in _PLAIN or (first not in _NUMBERS and isinstance(a[0], _NESTED)):
                out += _tensors(a)
        elif isinstance(a, torch.Tensor):           # (a subclass)
            out.append(a)
    return out


_NESTED = (torch.Tensor, list, tuple, type(None))
_NUMBERS = (int, float, bool, str)
_SCALARS = _NUMBERS + (type(None),)


def fresh_outputs(result, args, tensors=None):
    """``result`` (a tensor or a tuple of them) with no output aliasing
    anything but its own fresh storage: an output sharing storage with an
    argument is copied, and an output that is a view (im2col's reshape of
    the kernel's output) becomes a tensor of its own over the same fresh
    storage (no copy).  So every op returns tensors that in-place ops after
    it (``ReLU(inplace=True)``) may modify under autograd."""
    kind = type(result)
    if kind is tuple or kind is list:
        return kind(fresh_outputs(r, args, tensors) for r in result)
    if kind is not torch.Tensor and not isinstance(result, torch.Tensor):
        return result
    storage = result.untyped_storage()
    size = storage.nbytes()
    if size:            # an argument viewing this storage has its data inside it
        mine = storage.data_ptr()
        for t in _tensors(args) if tensors is None else tensors:
            if mine <= t.data_ptr() < mine + size:
                return result.clone()
    if result._base is None:
        return result
    own = result.new_empty(0)
    return own.set_(result.untyped_storage(), result.storage_offset(), result.shape,
                    result.stride())


def float_dtype(name, *ts, reduced=False):
    """"float32" or "float64" (``reduced``: also "bfloat16", "float16"): the
    one dtype of the tensors ``ts`` (None skipped), else a TypeError naming
    the op."""
    dts = {t.dtype for t in ts if t is not None}
    kinds = {**FLOATS, **(REDUCED if reduced else {})}
    if len(dts) != 1 or next(iter(dts)) not in kinds:
        raise TypeError(f"tiramisu::{name}: expected {' or '.join(kinds.values())} tensors of "
                        f"one dtype, got {', '.join(str(t.dtype) for t in ts if t is not None)}")
    return kinds[next(iter(dts))]


def no_double_backward(name):
    """The backward of a backward op: a NotImplementedError naming ``name``."""
    def backward(ctx, *_):
        raise NotImplementedError(f"tiramisu::{name} has no double backward (a gradient of its "
                                  "gradient): compute higher-order gradients with torch's module")
    return backward

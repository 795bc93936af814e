"""Compiled kernels as PyTorch operators (``torch.library``).

Importing this module imports torch; ``import tiramisu_py`` never does.

* :func:`define` registers one operator from a schema, a CPU implementation,
  a fake (shape) implementation and optionally a backward: the one place
  every operator of this project goes through (the library ops of
  :mod:`schedules.torch_ops` are a few lines each on top of it).
* :func:`kernel_op` (``Kernel.torch_op``) derives all of that from a compiled
  :class:`~tiramisu_py.Kernel`: the schema from its buffers and params, the
  fake implementation from the kernel's own shape rules
  (``Kernel._infer_params`` and ``Kernel._extents``, the code the call-time
  checks run), ``mutates_args`` from the outputs named ``inplace``.
* :func:`call` is where a plain kernel call on torch tensors goes inside
  ``torch.compile`` or when an input requires grad (see ``Kernel.__call__``).

Rules shared by every operator here:

* Defined with the ``Library`` API (``define``/``impl``) plus
  ``register_fake`` and an Autograd kernel (:func:`_autograd_kernel`:
  ``register_autograd``'s, with a direct path where nothing is recorded):
  ``custom_op`` costs several times more per call in eager.
* Tagged ``needs_contiguous_strides``: inside ``torch.compile`` Inductor hands
  the op contiguous tensors.  In eager a non-contiguous input is copied to a
  contiguous one (``.contiguous()``); a non-contiguous in-place output is
  computed in a contiguous copy and copied back.  A plain kernel call never
  copies: it refuses a non-contiguous array with an error naming it.
* Outputs are fresh tensors (never an alias of an input).
* An op with no backward still has an autograd registration: it raises a
  clear error when a gradient is asked of it, never a silent zero.
"""
from __future__ import annotations

import threading

import torch

from ..lang import affine
from ..lang.affine import NonAffine
from .shapes import eval_size

_LIBS: dict = {}                   # namespace -> torch.library.Library (kept alive)
_OPS: dict = {}                    # qualname -> the OpOverloadPacket
_LOCK = threading.RLock()
TAGS = (torch.Tag.needs_contiguous_strides,)


def _split(qualname):
    """``(namespace, name)`` of ``"namespace::name"`` (the name may be
    ``"name.overload"``, as aten's ``conv2d.padding``)."""
    if not isinstance(qualname, str) or qualname.count("::") != 1:
        raise ValueError(f"operator name must be 'namespace::name', got {qualname!r}")
    ns, name = qualname.split("::")
    for part, what in [(ns, "namespace")] + [(p, "name") for p in name.split(".", 1)]:
        if not part.isidentifier() or part.startswith("_"):
            raise ValueError(f"operator {what} {part!r} (in {qualname!r}) must be a Python "
                             "identifier not starting with '_'")
    return ns, name


def _no_backward(qualname):
    def backward(ctx, *grads):
        raise RuntimeError(f"{qualname} has no backward (no gradient kernel): compute it under "
                           "torch.no_grad() or on .detach()ed inputs (a kernel of your own "
                           "gets one with kernel.torch_op(..., backward=...))")
    return backward


def _autograd_kernel(qualname, impl, backward, setup_context):
    """The op's Autograd kernel: torch's for a formula
    (``torch.library.register_autograd``'s, which records ``backward``),
    except where no gradient is recorded and every tensor argument is a
    plain strided CPU tensor with no lazy negation or conjugation, no
    dispatch mode or functorch transform active: there ``impl`` runs at once
    (below autograd), as the CPU kernel would after torch's redispatch (the
    keys between do nothing to such tensors), without the redispatch's cost
    (~11 us a call)."""
    ns, name = _split(qualname)
    base, _, overload = name.partition(".")
    op = getattr(getattr(getattr(torch.ops, ns), base), overload or "default")
    slow = torch._library.autograd.make_autograd_impl(
        op, torch._library.autograd.Info(backward, setup_context))
    C = torch._C

    def kernel(keyset, *args, **kwargs):
        if (C.is_grad_enabled() and C._any_requires_grad(*args)) or not _plain(args) \
                or C._len_torch_dispatch_stack() or C._are_functorch_transforms_active():
            return slow(keyset, *args, **kwargs)
        with C._AutoDispatchBelowAutograd():
            return impl(*args, **kwargs)
    return kernel


_PLAIN = (torch.Tensor, torch.nn.Parameter)


def _plain(args):
    """Whether every tensor of ``args`` (lists of tensors included) is a
    plain strided CPU tensor without a lazy negation or conjugation."""
    for a in args:
        kind = type(a)
        if kind in _PLAIN:
            if not a.is_cpu or a.layout is not torch.strided or a.is_neg() or a.is_conj():
                return False
        elif kind is list or kind is tuple:
            if a and not isinstance(a[0], (int, float, bool, str)) and not _plain(a):
                return False
        elif isinstance(a, torch.Tensor):          # a subclass (fake, functional): torch's way
            return False
    return True


def define(qualname, schema, impl, fake, backward=None, setup_context=None, autocast=None):
    """Registers ``qualname`` (``"namespace::name"``, or
    ``"namespace::name.overload"`` for an overload of ``name`` defined
    before, as aten's ``conv2d.padding``) with ``schema`` (the part after the
    name: ``"(Tensor a, Tensor b) -> Tensor"``), ``impl`` (the CPU
    implementation), ``fake`` (shapes only) and ``backward`` /
    ``setup_context`` (as for ``torch.library.register_autograd``) and
    ``autocast`` (what the op does under ``torch.autocast("cpu")``:
    :func:`register_autocast`'s policy; None: nothing).  Returns
    ``torch.ops.namespace.name`` (the packet: torch picks the overload by
    the arguments' types)."""
    ns, name = _split(qualname)
    with _LOCK:
        if qualname in _OPS:
            raise ValueError(f"operator {qualname!r} is already registered")
        lib = _LIBS.get(ns)
        if lib is None:
            lib = _LIBS[ns] = torch.library.Library(ns, "FRAGMENT")
        try:
            lib.define(name + schema, tags=TAGS)
        except RuntimeError as exc:
            raise ValueError(f"cannot register {qualname!r}: {exc}".splitlines()[0]) from None
        lib.impl(name, impl, "CPU")
        torch.library.register_fake(qualname, fake, lib=lib)
        if "!" not in schema:       # torch takes autograd formulas for functional ops only
            lib.impl(name, _autograd_kernel(qualname, impl, backward or _no_backward(qualname),
                                            setup_context if backward else None),
                     "Autograd", with_keyset=True)
        elif backward is not None:
            raise ValueError(f"{qualname}: an op that writes arguments in place cannot have "
                             "a backward (torch takes autograd formulas for functional ops only)")
        op = getattr(getattr(torch.ops, ns), name.split(".")[0])
        _OPS[qualname] = op
        if autocast is not None:
            register_autocast(lib, qualname, autocast)
        return op


def register_autocast(lib, qualname, policy):
    """The op's kernel under ``torch.autocast("cpu")`` (dispatch key
    AutocastCPU), as aten's ops have: ``policy`` "reduced" casts its float32
    tensor arguments to the autocast dtype (``torch.get_autocast_dtype``:
    bfloat16 or float16; the op runs its reduced-precision kernels, as aten's
    lower-precision ops: mm, conv2d, lstm), "float32" casts bfloat16/float16
    ones to float32 (as aten's float32 ops), then the op runs with autocast
    off.  Keyword arguments are passed on (unlike
    ``torch.library.register_autocast``)."""
    if policy not in ("reduced", "float32"):
        raise ValueError(f"autocast policy must be 'reduced' or 'float32', got {policy!r}")
    key = torch._C.DispatchKey.AutocastCPU
    ns, name = _split(qualname)
    base, _, overload = name.partition(".")
    target = getattr(getattr(getattr(torch.ops, ns), base), overload or "default")
    low = (torch.bfloat16, torch.float16)

    def kernel(keyset, *args, **kwargs):
        to = torch.get_autocast_dtype("cpu") if policy == "reduced" else torch.float32

        def cast(a):
            if isinstance(a, torch.Tensor):
                if a.device.type == "cpu" and (a.dtype == torch.float32 if policy == "reduced"
                                               else a.dtype in low) and a.dtype != to:
                    return a.to(to)
                return a
            if isinstance(a, (list, tuple)):
                return type(a)(cast(x) for x in a)
            return a
        with torch._C._ExcludeDispatchKeyGuard(torch._C.DispatchKeySet(key)):
            return target(*cast(args), **{k: cast(v) for k, v in kwargs.items()})
    lib.impl(name, kernel, "AutocastCPU", with_keyset=True)


def contiguous(t):
    """``t`` itself when contiguous, else a contiguous copy (the eager rule)."""
    return t if t is None or t.is_contiguous() else t.contiguous()


# ------------------------------------------------------------------ kernels
class _Shape:
    """What ``Kernel._infer_params`` reads of an argument: its shape."""
    __slots__ = ("shape",)

    def __init__(self, shape):
        self.shape = tuple(shape)


def _inferable(kernel, buffers):
    """The params ``Kernel._infer_params`` can infer from these buffers'
    shapes (the same walk, on names instead of values)."""
    known = set()
    progress = True
    while progress:
        progress = False
        for b in buffers:
            for e in b.shape:
                try:
                    form = affine.linear(e, values=dict(kernel.fixed, **{p: 1 for p in known}))
                except NonAffine:
                    continue
                free = [a for a in form if a != 1]
                if len(free) == 1 and free[0] in kernel.params and free[0] not in known:
                    known.add(free[0])
                    progress = True
    return known


class KernelOp:
    """What :func:`kernel_op` registered: the op and how to call it."""

    def __init__(self, kernel, qualname, op, inputs, inplace, functional, int_params,
                 has_backward):
        self.kernel, self.qualname, self.op = kernel, qualname, op
        self.inputs, self.inplace, self.functional = inputs, inplace, functional
        self.int_params, self.has_backward = int_params, has_backward

    def __repr__(self):
        return f"<KernelOp {self.qualname} of {self.kernel!r}>"


def kernel_op(kernel, qualname, inplace=(), backward=None, setup_context=None):
    """Registers ``kernel`` as ``torch.ops.<namespace>.<name>`` (see
    ``Kernel.torch_op``).  Schema: the inputs (in declaration order), then the
    outputs named in ``inplace`` (mutated), then, keyword-only, the params
    that the shapes of those cannot give; it returns the other outputs."""
    out_names = [b.name for b in kernel.outputs]
    inplace = tuple(inplace)
    if inplace and backward is not None:
        raise ValueError(f"torch_op {qualname!r}: an op with in-place outputs cannot have a "
                         "backward (torch takes autograd formulas for functional ops only)")
    for n in inplace:
        if n not in out_names:
            raise ValueError(f"torch_op: inplace names {n!r}, which is not an output of "
                             f"{kernel.name} (outputs: {', '.join(out_names)})")
    shaped = kernel.inputs + [b for b in kernel.outputs if b.name in inplace]
    known = _inferable(kernel, shaped)
    int_params = [p for p in kernel.params if p not in known]
    functional = [b for b in kernel.outputs if b.name not in inplace]
    probe = dict(kernel.fixed, **{p: 1 for p in kernel.params})
    for b in functional:
        for e in b.shape:
            try:
                eval_size(e, probe, b.name)
            except ValueError as exc:
                raise ValueError(f"torch_op {qualname!r}: the shape of output {b.name!r} "
                                 f"cannot be derived from the params: {exc}") from None
    args = [f"Tensor {b.name}" for b in kernel.inputs]
    args += [f"Tensor({chr(97 + k)}!) {n}" for k, n in enumerate(inplace)]
    if int_params:
        args += ["*"] + [f"int {p}" for p in int_params]
    rets = ", ".join("Tensor" for _ in functional)
    schema = f"({', '.join(args)}) -> " + (f"({rets})" if len(functional) != 1 else "Tensor")
    in_names = [b.name for b in kernel.inputs]
    n_in, n_out = len(in_names), len(inplace)

    def impl(*args, **params):
        given = {n: contiguous(a) for n, a in zip(in_names, args)}
        copies = []
        for n, t in zip(inplace, args[n_in:n_in + n_out]):
            c = contiguous(t)
            if c is not t:
                copies.append((t, c))
            given[n] = c
        res = kernel(**given, **params)
        for t, c in copies:
            t.copy_(c)
        return _as_tuple(res, functional, out_names, single=len(functional) == 1)

    def fake(*args, **params):
        shapes = {n: _Shape(a.shape) for n, a in zip(in_names + list(inplace), args)}
        values = dict(params)
        kernel._infer_params(values, shapes)
        for n, a in zip(in_names + list(inplace), args):
            b = next(x for x in kernel.inputs + kernel.outputs if x.name == n)
            exp = kernel._extents(b, values)
            torch._check(tuple(a.shape) == tuple(exp),
                         lambda: f"{qualname}: argument {n!r} has shape {tuple(a.shape)}, "
                                 f"expected {tuple(exp)}")
        device = args[0].device if args else "cpu"
        outs = tuple(torch.empty(kernel._extents(b, values), dtype=getattr(torch, b.dtype.name),
                                 device=device)
                     for b in functional)
        return None if not outs else outs[0] if len(outs) == 1 else outs

    op = define(qualname, schema, impl, fake, backward, setup_context)
    info = KernelOp(kernel, qualname, op, in_names, inplace, [b.name for b in functional],
                    int_params, backward is not None)
    kernel._torch_ops[inplace] = info
    return info


def _as_tuple(res, functional, out_names, single):
    if not functional:
        return None
    if len(out_names) == 1:
        return res
    if single:
        return res[functional[0].name]
    return tuple(res[b.name] for b in functional)


# ---------------------------------------------------------- plain calls
_AUTO = "tiramisu_kernels"
_SEQ = [0]


def _auto_qualname(kernel, inplace):
    with _LOCK:
        _SEQ[0] += 1
        tail = ("_into_" + "_".join(inplace)) if inplace else ""
        return f"{_AUTO}::{kernel.name}{tail}_{_SEQ[0]}"


def _op_for(kernel, inplace):
    """The registered op of ``kernel`` for these in-place outputs, registered
    (under ``tiramisu_kernels::``) when there is none yet."""
    with _LOCK:
        info = kernel._torch_ops.get(inplace)
        if info is None:
            info = kernel_op(kernel, _auto_qualname(kernel, inplace), inplace=inplace)
        return info


@torch._dynamo.assume_constant_result
def _op_name(kernel, inplace):
    """Runs outside the graph while torch.compile traces (registration is
    not traceable); the name is a constant of the graph."""
    return _op_for(kernel, inplace).qualname


def call(kernel, args, kwargs):
    """A kernel call routed through its op: inside torch.compile, or when an
    input requires grad (then the op must have a backward)."""
    out_names = [b.name for b in kernel.outputs]
    inplace = tuple(n for n in out_names if n in kwargs)
    if torch.compiler.is_compiling():
        ns, name = _op_name(kernel, inplace).split("::")
        info = kernel._torch_ops[inplace]
        op = getattr(getattr(torch.ops, ns), name.split(".")[0])
    else:
        info = kernel._torch_ops.get(inplace)
        if info is None or not info.has_backward:
            names = [n for n, a in _named(kernel, args, kwargs)
                     if isinstance(a, torch.Tensor) and a.requires_grad]
            raise RuntimeError(
                f"{kernel.name}(): argument(s) {', '.join(map(repr, names))} require grad, but "
                "this kernel has no backward: its result would silently carry no gradient. "
                "Register one with kernel.torch_op('namespace::name', backward=...) (a plain "
                "call then goes through it), or call under torch.no_grad() or on .detach()ed "
                "tensors")
        op = info.op
    named = dict(_named(kernel, args, kwargs))
    in_names = [b.name for b in kernel.inputs]
    missing = [n for n in in_names if n not in named]
    if missing:
        raise TypeError(f"{kernel.name}() missing array argument(s): {', '.join(map(repr, missing))}")
    params = {k: v for k, v in kwargs.items() if k in info.int_params}
    res = op(*[named[n] for n in in_names], *[named[n] for n in inplace], **params)
    functional = [n for n in out_names if n not in inplace]
    if not isinstance(res, (tuple, list)):
        res = () if res is None else (res,)
    results = dict(zip(functional, res))
    results.update({n: named[n] for n in inplace})
    if len(results) == 1:
        return next(iter(results.values()))
    return {n: results[n] for n in out_names}


def _named(kernel, args, kwargs):
    names = [b.name for b in kernel.inputs]
    out = list(zip(names, args))
    arrays = set(names) | {b.name for b in kernel.outputs}
    out += [(k, v) for k, v in kwargs.items() if k in arrays]
    return out

"""Arrays in and results out, for every operator: NumPy arrays, CPU torch
tensors and device arrays checked as float32 of a rank (one family of
checks, host and device), the one framework of a call's arrays, and the
zeros of an empty result in the input's framework and on its device."""
from __future__ import annotations

import sys

import numpy as np

from tiramisu_py.runtime.device_arrays import on_device


def positive_int(op, name, v):
    """Refuses ``v`` unless it is a positive int (not a bool), naming ``name``."""
    if not isinstance(v, int) or isinstance(v, bool) or v < 1:
        raise ValueError(f"{op}: {name} must be a positive int, got {v!r}")
    return v


def is_torch(x) -> bool:
    return type(x).__module__.startswith("torch")


_DTYPE_NAMES: dict = {}          # dtype object -> its name (str() of a NumPy dtype is slow)


def dtype_name(x) -> str:
    """NumPy's or torch's name of an array's dtype ("float32", "bfloat16")."""
    dtype = x.dtype
    name = _DTYPE_NAMES.get(dtype)
    if name is None:
        name = _DTYPE_NAMES[dtype] = str(dtype).split(".")[-1]
    return name


def refuse_foreign(x, name):
    """Refuses, naming ``name``, what looks like an array but is not one an
    operator on the host takes: a subclass of ``torch.Tensor`` defined
    outside torch (its ``__torch_function__`` would be bypassed), or a
    device array (``__cuda_array_interface__``)."""
    cls = type(x)
    if not is_torch(x) and any(c.__name__ == "Tensor" and c.__module__ == "torch"
                               for c in cls.__mro__):
        raise TypeError(f"{name}: a subclass of torch.Tensor ({cls.__name__}) is not supported "
                        f"(its __torch_function__ would be bypassed); pass a plain tensor, "
                        f"{name}.as_subclass(torch.Tensor)")
    if not is_torch(x) and hasattr(x, "__cuda_array_interface__"):
        raise TypeError(f"{name}: a device array ({cls.__name__}, __cuda_array_interface__) "
                        f"passed to an operator that runs on the CPU here; copy it to the host "
                        f"(a NumPy array or CPU tensor), or pass target='cuda' where the "
                        f"operator has a GPU solver")


def float32_array(x, name, ndim, dtypes=("float32",)):
    """``x`` (NumPy array or CPU torch tensor) as a C-contiguous float32 array
    of ``ndim`` dimensions (None: any); ``dtypes``: the dtype names accepted;
    a clear error names ``name`` otherwise."""
    return typed_array(x, name, ndim, dtypes)


def typed_array(x, name, ndim, dtypes):
    """``x`` (NumPy array or CPU torch tensor) as a C-contiguous array of
    ``ndim`` dimensions (None: any) and one of ``dtypes`` (names: "float32",
    "bfloat16", "int8", ...); a clear error names ``name`` otherwise."""
    what = " or ".join(dtypes)
    if is_torch(x):
        if dtype_name(x) not in dtypes:
            raise TypeError(f"{name}: expected a {what} tensor, got {x.dtype}")
        if x.device.type != "cpu":
            raise ValueError(f"{name}: expected a CPU tensor, got device {x.device}")
        if ndim is not None and x.dim() != ndim:
            raise ValueError(f"{name}: expected {ndim} dimensions, got shape {tuple(x.shape)}")
        return x.contiguous()
    if not isinstance(x, np.ndarray):
        refuse_foreign(x, name)
        raise TypeError(f"{name}: expected a NumPy array or torch tensor, got {type(x).__name__}")
    if x.dtype.name not in dtypes:
        raise TypeError(f"{name}: expected {what}, got {x.dtype}")
    refuse_byte_order(x, name)
    if ndim is not None and x.ndim != ndim:
        raise ValueError(f"{name}: expected {ndim} dimensions, got shape {x.shape}")
    return x if x.flags.c_contiguous else x.copy(order="C")     # (a 0-d array stays 0-d)


def refuse_byte_order(x, name):
    """Refuses a NumPy array ``x`` of non-native byte order (``">f4"`` on
    a little-endian host), naming ``name`` and the two conversions."""
    if not x.dtype.isnative:
        raise TypeError(f"{name}: non-native byte order ({x.dtype.str}); convert it with "
                        f"{name}.astype(np.{x.dtype.name}) (or "
                        f"{name}.byteswap().view({name}.dtype.newbyteorder()))")


def activate(out, activation):
    """``out`` (NumPy or torch) with ``activation`` ("relu": max(x, 0),
    "relu6": min(max(x, 0), 6), NaN kept as torch keeps it; None: nothing)
    applied in place; returns ``out``."""
    if activation is None:
        return out
    high = 6.0 if activation == "relu6" else None
    if is_torch(out):
        return out.clamp_(0.0, high)
    return np.clip(out, 0.0, high, out=out) if high is not None else np.maximum(out, 0.0, out=out)


def add_into(out, r):
    """``out += r`` in place (NumPy or torch, of one kind); returns ``out``."""
    if is_torch(out):
        return out.add_(r)
    return np.add(out, r, out=out)


def add_activate(out, residual, activation):
    """``activation(out + residual)`` in place (``residual`` None: nothing
    added; :func:`add_into`, then :func:`activate`); returns ``out``."""
    return activate(out if residual is None else add_into(out, residual), activation)


def broadcast(x, shape):
    """``x`` (NumPy or torch) broadcast to ``shape`` (NumPy's and torch's
    rule), C-contiguous: copied where it stretches, ``x`` itself where its
    shape is ``shape`` already."""
    shape = tuple(shape)
    if tuple(x.shape) == shape:
        return x
    if is_torch(x):
        return x.expand(shape).contiguous()
    return np.ascontiguousarray(np.broadcast_to(x, shape))


def same_kind(args, names):
    """All NumPy or all torch: mixing them is refused (the result type would
    be ambiguous)."""
    for a, name in zip(args, names):
        if a is not None and not isinstance(a, np.ndarray) and not on_device(a):
            refuse_foreign(a, name)
    kinds = {is_torch(a) for a in args if a is not None}
    if len(kinds) > 1:
        raise TypeError(f"{', '.join(names)}: pass all NumPy arrays or all torch tensors")


def cuda_float32(x, name, ndim, dtypes=("float32",)):
    """An argument of a library call on the GPU: a device array (torch CUDA
    tensor, made contiguous; or any ``__cuda_array_interface__`` object)
    checked as float32 (one of ``dtypes``) with ``ndim`` dimensions, else as
    :func:`float32_array` (a host array, copied to the device by the call)."""
    if not on_device(x):
        return float32_array(x, name, ndim, dtypes)
    if is_torch(x):
        dtype, shape = str(x.dtype).replace("torch.", ""), tuple(x.shape)
    else:
        cai = x.__cuda_array_interface__
        dtype, shape = np.dtype(cai["typestr"]).name, tuple(cai["shape"])
    if dtype not in dtypes:
        raise TypeError(f"{name}: expected {' or '.join(dtypes)}, got {dtype}")
    if len(shape) != ndim:
        raise ValueError(f"{name}: expected {ndim} dimensions, got shape {shape}")
    return x.detach().contiguous() if is_torch(x) else x


def device_of(x):
    """The torch device of a device array, None for a host array; other
    device arrays are refused (the library allocates outputs with torch)."""
    if x is None or not on_device(x):
        return None
    if not is_torch(x):
        raise TypeError(f"on the GPU the library takes torch CUDA tensors (it allocates the "
                        f"output with torch); got {type(x).__module__}.{type(x).__name__}")
    return x.device


def float32_on(x, name, ndim, device):
    """``x`` checked (float32, ``ndim`` dimensions) and on the same side as
    the input (``device``: the input's torch device, None on the host)."""
    dev = device_of(x)
    if dev != device:
        where = lambda d: "the host" if d is None else str(d)     # noqa: E731
        raise ValueError(f"{name}: on {where(dev)} but the input is on {where(device)}; pass "
                         "every array on the same device")
    if dev is None:
        return float32_array(x, name, ndim)
    if str(x.dtype) != "torch.float32":
        raise TypeError(f"{name}: expected a float32 tensor, got {x.dtype}")
    if x.dim() != ndim:
        raise ValueError(f"{name}: expected {ndim} dimensions, got shape {tuple(x.shape)}")
    return x.contiguous()


def zeros(like, shape, bias=None, dtype="float32"):
    """Zeros of ``shape`` and ``dtype`` (a name) in ``like``'s framework and
    on its device; with ``bias`` (a convolution with an empty sum) the bias
    broadcast over the channels (axis 1)."""
    if is_torch(like):
        import torch
        out = torch.zeros(shape, dtype=getattr(torch, dtype), device=like.device)
        return out + bias.reshape(1, -1, 1, 1) if bias is not None and shape[1] else out
    if not isinstance(like, np.ndarray):
        raise TypeError("an empty result of device arrays other than torch tensors has no "
                        "output to allocate; pass torch CUDA tensors")
    out = np.zeros(shape, dtype)
    if bias is not None and shape[1]:
        out += np.asarray(bias).reshape(1, -1, 1, 1)
    return out


def contiguous(x):
    """``x`` (a NumPy array or torch tensor) C-contiguous: itself, or a copy."""
    return x.contiguous() if is_torch(x) else np.ascontiguousarray(x)


def pad_end(x, rows, cols):
    """A copy of ``x`` (N, C, H, W; NumPy or torch, on its device) with
    ``rows`` rows of zeros below and ``cols`` columns of zeros on the right."""
    n, c, h, w = x.shape
    out = zeros(x, (n, c, h + rows, w + cols))
    out[:, :, :h, :w] = x
    return out


def concat_channels(parts):
    """The arrays ``parts`` (NumPy or torch) joined along axis 1."""
    if is_torch(parts[0]):
        import torch
        return torch.cat(parts, 1)
    return np.concatenate(parts, 1)


def needing_grad(*args) -> list:
    """The torch tensors among ``args`` (nested lists and tuples too) that
    require grad while grad mode is on; empty without torch."""
    torch = sys.modules.get("torch")
    if torch is None or not torch.is_grad_enabled():
        return []
    out, stack = [], list(args)
    while stack:
        a = stack.pop()
        if isinstance(a, (list, tuple)):
            stack.extend(a)
        elif isinstance(a, torch.Tensor) and a.requires_grad:
            out.append(a)
    return out


def without_backward(what: str, outputs: tuple, inputs: list) -> tuple:
    """``outputs`` (torch tensors computed from ``inputs`` without autograd)
    attached to ``inputs`` in the autograd graph by a node whose backward
    raises, naming ``what``: a gradient asked of an operator that has no
    backward kernel fails clearly instead of the result silently carrying
    none (``requires_grad=False``)."""
    import torch
    outputs = [torch.as_tensor(o) for o in outputs]     # (NumPy results: tensors, to carry it)

    class NoBackward(torch.autograd.Function):
        @staticmethod
        def forward(ctx, *_):
            return tuple(o.view_as(o) for o in outputs)

        @staticmethod
        def backward(ctx, *_):
            raise RuntimeError(f"{what} has no backward kernel yet: its inputs that require "
                               "grad get no gradient from it; train with torch's module, or "
                               "compute it under torch.no_grad() / on .detach()ed tensors")

    return NoBackward.apply(*inputs)

"""The library's convolutions with ``target="cuda"`` (or device arguments):
argument checks for host and device arrays, then the CUDA schedules of
:mod:`schedules.gpu_conv` and :mod:`schedules.gpu_sparse`, compiled once per
process (:func:`schedules.runtime.cuda_kernel`).

Device arrays are torch CUDA tensors: the kernels launch on torch's current
stream and the output is allocated by torch on the input's device (the
kernel object's rule); the CSR arrays are copied to that device once per
CSRWeights and device.  Other ``__cuda_array_interface__`` arrays are
refused (the output could not be allocated).  Host arrays (NumPy, CPU
tensors) with ``target="cuda"`` are copied to the GPU and back around the
launches.  Without a CUDA driver every launch raises ``NoCudaDriverError``.
"""
from __future__ import annotations

import numpy as np

from tiramisu_py.runtime.device_arrays import on_device

from . import conv_ops, gpu_conv, gpu_sparse, runtime
from . import sparse as SP


def _device(x):
    """The torch device of a device array, None for a host array; other
    device arrays are refused."""
    if x is None or not on_device(x):
        return None
    if not runtime.is_torch(x):
        raise TypeError(f"on the GPU the library takes torch CUDA tensors (it allocates the "
                        f"output with torch); got {type(x).__module__}.{type(x).__name__}")
    return x.device


def _array(x, name, ndim, device):
    """``x`` checked (float32, ``ndim`` dimensions) and on the same side as
    the input (``device``: the input's torch device, None on the host)."""
    dev = _device(x)
    if dev != device:
        where = lambda d: "the host" if d is None else str(d)     # noqa: E731
        raise ValueError(f"{name}: on {where(dev)} but the input is on {where(device)}; pass "
                         "every array on the same device")
    if dev is None:
        return runtime.float32_array(x, name, ndim)
    if str(x.dtype) != "torch.float32":
        raise TypeError(f"{name}: expected a float32 tensor, got {x.dtype}")
    if x.dim() != ndim:
        raise ValueError(f"{name}: expected {ndim} dimensions, got shape {tuple(x.shape)}")
    return x.contiguous()


def _zeros(like, shape, bias):
    """The result of a convolution with an empty sum or an empty output: the
    bias broadcast (zeros without one), in ``like``'s framework and device."""
    if runtime.is_torch(like):
        import torch
        out = torch.zeros(shape, dtype=torch.float32, device=like.device)
        return out + bias.reshape(1, -1, 1, 1) if bias is not None and shape[1] else out
    out = np.zeros(shape, np.float32)
    if bias is not None and shape[1]:
        out += np.asarray(bias).reshape(1, -1, 1, 1)
    return out


def conv2d_cuda(input, weight, bias, stride, padding, dilation, groups, algo):
    """:func:`schedules.conv2d` on the GPU: the direct schedule
    (:mod:`schedules.gpu_conv`); a sparse ``weight`` runs the CSR sparse
    schedule."""
    if SP.is_sparse(weight):
        if algo not in ("auto", "sparse"):
            raise ValueError(f"conv2d: algo {algo!r} needs a dense weight; a sparse weight "
                             "takes 'auto' or 'sparse'")
        return sparse_conv2d_cuda(input, weight, bias, stride, padding, dilation, groups)
    if algo not in ("auto", "direct"):
        raise ValueError(f"conv2d: algo {algo!r} has no CUDA schedule; target='cuda' takes "
                         "'auto', 'direct' or 'sparse'")
    dev = _device(input)
    x = _array(input, "input", 4, dev)
    w = _array(weight, "weight", 4, dev)
    b = None if bias is None else _array(bias, "bias", 1, dev)
    s = conv_ops._shape(x, w, stride, padding, dilation, groups)
    if s.groups != 1:
        raise ValueError(f"conv2d: target='cuda' supports groups=1 only, got groups={s.groups}; "
                         "use a CPU target for grouped convolutions")
    if b is not None and b.shape[0] != s.co:
        raise ValueError(f"conv2d: bias has {b.shape[0]} values for {s.co} output channels")
    if conv_ops._degenerate(s):
        return _zeros(x, (s.n, s.co, s.ho, s.wo), b)
    k = runtime.cuda_kernel(("conv2d", "cuda", s, b is not None),
                            lambda: gpu_conv.function(s, bias=b is not None))
    return k(data=x, weight=w, bias=b) if b is not None else k(data=x, weight=w)


def _csr(w, ci):
    """A sparse or dense weight (host or torch CUDA) as CSRWeights."""
    if runtime.is_torch(w) and w.device.type == "cuda":
        if str(w.dtype) != "torch.float32":
            raise TypeError(f"w: expected a float32 tensor, got {w.dtype}")
        w = w.cpu()                 # converted on every call, as a dense host weight is
    return SP.as_csr(w, ci)


def sparse_conv2d_cuda(x, w, bias, stride, padding, dilation, groups):
    """:func:`schedules.sparse_conv2d` on the GPU (:mod:`schedules.gpu_sparse`)."""
    op = "sparse_conv2d"
    dev = _device(x)
    x = _array(x, "x", 4, dev)
    if groups != 1:
        raise ValueError(f"{op}: groups must be 1 for sparse weights, got {groups!r}")
    csr = _csr(w, x.shape[1])
    if len(csr.shape) != 4:
        raise ValueError(f"{op}: w must be a 4-D (Cout, Cin, KH, KW) weight, got shape {csr.shape}")
    s = SP.conv_shape(tuple(x.shape), csr.shape, stride, padding, dilation, op)
    b = None if bias is None else _array(bias, "bias", 1, dev)
    if b is not None and b.shape[0] != s.co:
        raise ValueError(f"{op}: bias has {b.shape[0]} values for {s.co} output channels")
    if s.n == 0 or s.co == 0 or s.ci == 0:
        return _zeros(x, (s.n, s.co, s.ho, s.wo), b)
    layout = (s.kh, s.kw, s.hp, s.wp, s.dh, s.dw)
    arrays = csr.conv_layout(*layout)
    if dev is not None:
        import torch
        arrays = csr.derived(("cuda_layout", *layout, str(dev)),
                             lambda: tuple(torch.from_numpy(a).to(dev) for a in arrays))
    rowptr, colidx, val = arrays
    k = runtime.cuda_kernel(("sparse_conv2d", "cuda", s, b is not None),
                            lambda: gpu_sparse.function(s, bias=b is not None))
    args = dict(data=x, rowptr=rowptr, colidx=colidx, val=val)
    if b is not None:
        args["bias"] = b
    return k(**args)

"""Arrays on a CUDA device, as a CUDA kernel's arguments, without a copy.

Three kinds of objects are accepted (first match wins):

- torch CUDA tensors (read through torch: ``data_ptr``, ``stride``; no
  ``__cuda_array_interface__``, which torch refuses for tensors that require
  grad);
- any object with ``__cuda_array_interface__`` (CuPy, Numba, pycuda's
  GPUArray): pointer, shape, byte strides, typestr, read-only flag; its
  ``stream`` entry (version 3), when set, is a producer stream the launch
  waits for;
- any DLPack producer (``__dlpack__`` / ``__dlpack_device__``) on a CUDA
  device (kDLCUDA = 2 or kDLCUDAManaged = 13): ``__dlpack__(stream=S)`` with
  the consumer's stream ``S`` (so the producer orders its pending work
  before it; the legacy default stream is passed as 1, as the protocol asks),
  versioned capsules (DLPack >= 1.0) asked first, and the capsule's
  ``DLManagedTensor`` read with ctypes: data + byte_offset, shape, strides
  (in elements; NULL = C-contiguous), dtype code/bits/lanes, device and, for
  versioned capsules, the read-only / copied flags.  The capsule is not
  renamed to ``used_dltensor``: its destructor calls the producer's deleter
  when the call drops it.

The stream a call launches on is the framework's current stream: torch's for
torch tensors, CuPy's for CuPy arrays, else the legacy default stream.
Outputs that are not passed are allocated with the framework of the inputs:
torch (``torch.empty`` / ``zeros`` on the input's device) or CuPy; with only
other producers (Numba, pycuda, JAX...) the output must be passed by name.
"""
from __future__ import annotations

import ctypes
import operator
import sys
from dataclasses import dataclass

import numpy as np

kDLCPU, kDLCUDA, kDLCUDAHost, kDLCUDAManaged = 1, 2, 3, 13
CUDA_DEVICE_TYPES = (kDLCUDA, kDLCUDAManaged)
DEVICE_NAMES = {1: "kDLCPU", 2: "kDLCUDA", 3: "kDLCUDAHost", 4: "kDLOpenCL", 7: "kDLVulkan",
                8: "kDLMetal", 9: "kDLVPI", 10: "kDLROCM", 11: "kDLROCMHost", 12: "kDLExtDev",
                13: "kDLCUDAManaged", 14: "kDLOneAPI", 15: "kDLWebGPU", 16: "kDLHexagon"}
FLAG_READ_ONLY, FLAG_IS_COPIED = 1, 2


class DLDevice(ctypes.Structure):
    _fields_ = [("device_type", ctypes.c_int32), ("device_id", ctypes.c_int32)]


class DLDataType(ctypes.Structure):
    _fields_ = [("code", ctypes.c_uint8), ("bits", ctypes.c_uint8), ("lanes", ctypes.c_uint16)]


class DLTensor(ctypes.Structure):
    _fields_ = [("data", ctypes.c_void_p), ("device", DLDevice), ("ndim", ctypes.c_int32),
                ("dtype", DLDataType), ("shape", ctypes.POINTER(ctypes.c_int64)),
                ("strides", ctypes.POINTER(ctypes.c_int64)), ("byte_offset", ctypes.c_uint64)]


class DLManagedTensor(ctypes.Structure):
    _fields_ = [("dl_tensor", DLTensor), ("manager_ctx", ctypes.c_void_p),
                ("deleter", ctypes.c_void_p)]


class DLPackVersion(ctypes.Structure):
    _fields_ = [("major", ctypes.c_uint32), ("minor", ctypes.c_uint32)]


class DLManagedTensorVersioned(ctypes.Structure):
    _fields_ = [("version", DLPackVersion), ("manager_ctx", ctypes.c_void_p),
                ("deleter", ctypes.c_void_p), ("flags", ctypes.c_uint64),
                ("dl_tensor", DLTensor)]


_get_name = ctypes.pythonapi.PyCapsule_GetName
_get_name.restype, _get_name.argtypes = ctypes.c_char_p, [ctypes.py_object]
_get_pointer = ctypes.pythonapi.PyCapsule_GetPointer
_get_pointer.restype, _get_pointer.argtypes = ctypes.c_void_p, [ctypes.py_object, ctypes.c_char_p]

_DTYPE_CODES = {0: "int", 1: "uint", 2: "float", 4: "bfloat", 5: "complex", 6: "bool"}


def refuse_lazy_view(t, name) -> None:
    """A torch tensor that is a lazy negated or conjugated view holds other
    values than it shows: refused, naming the argument and the fix."""
    if t.is_neg() or t.is_conj():
        raise ValueError(f"argument {name!r} is a lazy negated/conjugated view; pass "
                         f"{name}.resolve_neg().resolve_conj()")


@dataclass
class DLPackView:
    """What a DLPack capsule describes (nothing is copied)."""
    address: int            # data + byte_offset
    shape: tuple
    strides: tuple | None   # in elements; None: C-contiguous
    dtype: str              # NumPy's name ("float32", "bool", "bfloat16")
    itemsize: int
    device: tuple           # (device_type, device_id)
    read_only: bool = False
    copied: bool = False
    version: tuple = (0, 0)


def parse_capsule(capsule, name="argument") -> DLPackView:
    """The tensor a ``__dlpack__`` capsule ("dltensor" or
    "dltensor_versioned") describes; a clear error naming ``name`` for
    anything else (a consumed capsule, a vector dtype, an unknown version)."""
    if type(capsule).__name__ != "PyCapsule":
        raise TypeError(f"argument {name!r}: __dlpack__() returned {type(capsule).__name__}, "
                        "not a DLPack capsule")
    cname = _get_name(capsule)
    if cname not in (b"dltensor", b"dltensor_versioned"):
        raise ValueError(f"argument {name!r}: __dlpack__() returned a capsule named "
                         f"{(cname or b'').decode()!r} (a DLPack capsule is 'dltensor' or "
                         "'dltensor_versioned'; 'used_dltensor' was consumed already)")
    ptr = _get_pointer(capsule, cname)
    flags, version = 0, (0, 0)
    if cname == b"dltensor_versioned":
        m = DLManagedTensorVersioned.from_address(ptr)
        version = (m.version.major, m.version.minor)
        if version[0] != 1:
            raise ValueError(f"argument {name!r}: DLPack version {version[0]}.{version[1]} is "
                             "not supported (1.x is)")
        flags, t = m.flags, m.dl_tensor
    else:
        t = DLManagedTensor.from_address(ptr).dl_tensor
    if t.ndim < 0:
        raise ValueError(f"argument {name!r}: DLPack tensor with ndim {t.ndim}")
    shape = tuple(int(t.shape[k]) for k in range(t.ndim))
    strides = tuple(int(t.strides[k]) for k in range(t.ndim)) if t.strides else None
    code, bits, lanes = t.dtype.code, t.dtype.bits, t.dtype.lanes
    if lanes != 1 or code not in _DTYPE_CODES or bits % 8:
        raise TypeError(f"argument {name!r}: DLPack dtype (code {code}, {bits} bits, {lanes} "
                        "lanes) is not a scalar type a kernel takes")
    dtype = "bool" if code == 6 else f"{_DTYPE_CODES[code]}{bits}"
    return DLPackView((t.data or 0) + t.byte_offset, shape, strides, dtype, bits // 8,
                      (t.device.device_type, t.device.device_id), bool(flags & FLAG_READ_ONLY),
                      bool(flags & FLAG_IS_COPIED), version)


def dlpack_device(x):
    """``x.__dlpack_device__()`` as (type, id), or None (no such method, or it fails)."""
    method = getattr(type(x), "__dlpack_device__", None)
    if method is None:
        return None
    try:
        kind, index = method(x)
        return int(kind), int(index)
    except Exception:
        return None


def is_torch(x) -> bool:
    return type(x).__module__.startswith("torch") and hasattr(x, "data_ptr")


def framework(x):
    """"torch", "cupy" or None: the library whose allocator and current
    stream a call on ``x`` uses."""
    if is_torch(x):
        return "torch"
    return "cupy" if type(x).__module__.startswith("cupy") else None


def on_device(x) -> bool:
    """Whether ``x`` is a GPU array: a torch CUDA tensor, any object with
    ``__cuda_array_interface__`` (CuPy, Numba, pycuda's GPUArray) or a
    DLPack producer whose ``__dlpack_device__`` is kDLCUDA / kDLCUDAManaged."""
    if is_torch(x):
        return getattr(getattr(x, "device", None), "type", None) == "cuda"
    dev = dlpack_device(x)
    if dev is not None:
        return dev[0] in CUDA_DEVICE_TYPES
    try:
        return hasattr(x, "__cuda_array_interface__")
    except Exception:
        return False


def consumer_stream(objects) -> int:
    """The CUstream (as an int; 0 = legacy default) a call on ``objects``
    launches on: torch's current stream on the device of the first torch
    CUDA tensor, else CuPy's current stream, else 0."""
    objects = [x for x in objects if x is not None]
    for x in objects:
        if framework(x) == "torch" and x.device.type == "cuda":
            import torch
            return int(torch.cuda.current_stream(x.device).cuda_stream)
    if any(framework(x) == "cupy" for x in objects):
        import cupy
        return int(cupy.cuda.get_current_stream().ptr)
    return 0


def _c_contiguous(shape, strides, unit=1) -> bool:
    """``strides`` (in units of ``unit``) are row-major for ``shape``;
    extents of 0 or 1 make any stride acceptable there."""
    if strides is None or 0 in shape:
        return True
    expect = unit
    for n, s in zip(reversed(shape), reversed(strides)):
        if n != 1 and s != expect:
            return False
        expect *= n
    return True


class DeviceArray:
    """One device argument: ``address``, ``shape``, ``dtype`` (NumPy's name),
    ``nbytes``, ``device`` ((type, id); id None when unknown), ``read_only``,
    ``framework`` and ``wait_stream`` (a producer stream the launch must wait
    for, or None).  ``stream`` is the consumer's stream, handed to
    ``__dlpack__``.  Refuses non-contiguous and non-device arrays, naming the
    argument."""

    def __init__(self, name, obj, stream=0):
        self.name, self.obj = name, obj
        self.framework = framework(obj)
        self.read_only, self.wait_stream, self._capsule = False, None, None
        if self.framework == "torch":
            self._from_torch(obj)
        elif dlpack_device(obj) is not None and hasattr(obj, "__dlpack__"):
            self._from_dlpack(obj, stream)
        elif _has_cai(obj):
            self._from_cai(obj)
        else:
            raise TypeError(f"argument {name!r}: mixing host and device arrays ("
                            f"{type(obj).__name__} is not on a CUDA device); pass every array "
                            "on the device, or every array on the host")
        n = 1
        for d in self.shape:
            n *= d
        self.nbytes = n * self.itemsize

    def _from_torch(self, t):
        name = self.name
        if t.device.type != "cuda":
            raise TypeError(f"argument {name!r} is on {t.device}; mixing host and device "
                            "arrays: pass every array on the CUDA device")
        refuse_lazy_view(t, name)
        if not t.is_contiguous():
            raise ValueError(f"argument {name!r} is not C-contiguous (strides {t.stride()}); "
                             f"pass {name}.contiguous()")
        self.shape, self.dtype = tuple(t.shape), str(t.dtype).split(".")[-1]
        self.itemsize, self.address = t.element_size(), t.data_ptr()
        self.device = (kDLCUDA, t.device.index if t.device.index is not None else 0)

    def _from_cai(self, obj):
        name = self.name
        cai = obj.__cuda_array_interface__
        try:
            typestr, shape, (ptr, read_only) = cai["typestr"], cai["shape"], cai["data"]
            shape, address = tuple(operator.index(d) for d in shape), operator.index(ptr)
            stream, strides = cai.get("stream"), cai.get("strides")
            stream = None if stream is None else operator.index(stream)
            strides = None if strides is None else tuple(operator.index(x) for x in strides)
            if strides is not None and len(strides) != len(shape):
                raise ValueError("strides")
        except (KeyError, TypeError, ValueError, AttributeError):
            raise TypeError(f"argument {name!r}: malformed __cuda_array_interface__ (it needs "
                            "'typestr', 'shape' as a tuple of ints, 'data' as (pointer, "
                            "read_only), 'strides' as None or one int per dimension and an "
                            f"int or no 'stream'): {cai!r}") from None
        if any(d < 0 for d in shape):
            raise ValueError(f"argument {name!r}: __cuda_array_interface__ shape {shape} has a "
                             "negative extent")
        try:
            dt = np.dtype(typestr)
        except TypeError:
            raise TypeError(f"argument {name!r}: __cuda_array_interface__ typestr "
                            f"{typestr!r} is not a NumPy dtype") from None
        if not dt.isnative and dt.itemsize > 1:
            raise TypeError(f"argument {name!r} has non-native byte order ({dt.str})")
        if cai.get("mask") is not None:
            raise ValueError(f"argument {name!r}: masked arrays (__cuda_array_interface__ "
                             "'mask') are not supported")
        self.shape, self.dtype, self.itemsize = shape, dt.name, dt.itemsize
        self.address, self.read_only = address, bool(read_only)
        if not _c_contiguous(self.shape, strides, dt.itemsize):
            raise ValueError(f"argument {name!r} is not C-contiguous (byte strides "
                             f"{strides}); pass a contiguous copy")
        self.wait_stream = stream
        self.device = (kDLCUDA, None)

    def _from_dlpack(self, obj, stream):
        name = self.name
        dev = dlpack_device(obj)
        if dev[0] in (kDLCPU, kDLCUDAHost):
            raise TypeError(f"argument {name!r}: mixing host and device arrays ("
                            f"{type(obj).__name__} is in host memory, "
                            f"{DEVICE_NAMES[dev[0]]}); pass every array on the device, or "
                            "every array on the host")
        if dev[0] not in CUDA_DEVICE_TYPES:
            raise TypeError(f"argument {name!r} lives on DLPack device "
                            f"{DEVICE_NAMES.get(dev[0], dev[0])}:{dev[1]}, not on a CUDA device "
                            "(kDLCUDA / kDLCUDAManaged); pass every array on the GPU or every "
                            "array on the host")
        s = 1 if stream == 0 else int(stream)       # the protocol's legacy default stream
        try:
            cap = obj.__dlpack__(stream=s, max_version=(1, 0))
        except TypeError:                           # a producer older than DLPack 1.0
            cap = obj.__dlpack__(stream=s)
        view = parse_capsule(cap, name)
        if view.device[0] not in CUDA_DEVICE_TYPES:
            raise ValueError(f"argument {name!r}: __dlpack_device__ says CUDA but its capsule "
                             f"says {DEVICE_NAMES.get(view.device[0], view.device[0])}")
        if not _c_contiguous(view.shape, view.strides):
            raise ValueError(f"argument {name!r} is not C-contiguous (DLPack strides "
                             f"{view.strides}); pass a contiguous copy")
        if view.address % max(1, view.itemsize):
            raise ValueError(f"argument {name!r} is misaligned (address {view.address:#x}); "
                             "pass a copy")
        self._capsule = cap           # released after the call: its destructor frees it
        self.shape, self.dtype, self.itemsize = view.shape, view.dtype, view.itemsize
        self.address, self.device = view.address, view.device
        self.read_only = view.read_only or view.copied


def _has_cai(obj) -> bool:
    try:
        return hasattr(obj, "__cuda_array_interface__")
    except Exception:
        return False


def common_device(arrays) -> int:
    """The CUDA device ordinal every argument is on (0 when none says);
    a ValueError naming two arguments on different devices."""
    seen = None
    for a in arrays:
        if a.device[1] is None:
            continue
        if seen is None:
            seen = a
        elif a.device[1] != seen.device[1]:
            raise ValueError(f"arguments {seen.name!r} (cuda:{seen.device[1]}) and {a.name!r} "
                             f"(cuda:{a.device[1]}) are on different devices")
    return 0 if seen is None else seen.device[1]


def allocate(like, name, shape, dtype, zero, kernel_name):
    """A new device array for the output ``name`` with the framework of the
    argument ``like`` (a DeviceArray or None): torch or CuPy; otherwise a
    TypeError asking for the output."""
    fw = like.framework if like is not None else None
    if fw == "torch":
        import torch
        make = torch.zeros if zero else torch.empty
        return make(shape, dtype=getattr(torch, dtype), device=like.obj.device)
    if fw == "cupy":
        cupy = sys.modules.get("cupy") or __import__("cupy")
        with cupy.cuda.Device(like.device[1] or 0):
            return (cupy.zeros if zero else cupy.empty)(shape, dtype=dtype)
    kinds = sorted({type(like.obj).__name__}) if like is not None else []
    raise TypeError(f"{kernel_name}(): pass the output {name!r} (a device array of shape {shape}"
                    f", dtype {dtype}) by name: outputs are allocated only for torch tensors "
                    f"and CuPy arrays{', not for ' + ', '.join(kinds) if kinds else ''}")

"""Call-time checks of the memory a kernel is given: the range of an index
array (:func:`value_range`), row pointers that must not decrease
(:func:`check_monotone`), and whether an output's pages may be written
(:func:`memory_writable`, for memory neither NumPy nor torch allocated).

Sealed arrays (:func:`seal`): a library that makes index arrays once and
passes them to kernels on every call (the sparse RNN weights' packed CSR)
seals them: their values are copied once into an immutable ``bytes`` object
and viewed from it (NumPy refuses to make such a view writable again), and
the facts the checks establish of their values are remembered with them, so
a later call reads no index array again.  The facts leave with the array."""
from __future__ import annotations

import weakref

# id(array) -> (weak reference, {fact: value}); an entry leaves with its array
_SEALED: dict = {}


def seal(array):
    """A read-only copy of ``array`` (a NumPy array) over an immutable
    ``bytes`` object, whose checked facts are remembered from now on."""
    import numpy as np
    array = np.asarray(array)
    sealed = np.frombuffer(array.tobytes(), dtype=array.dtype).reshape(array.shape)
    key = id(sealed)
    _SEALED[key] = (weakref.ref(sealed, lambda _, key=key: _SEALED.pop(key, None)), {})
    return sealed


def _facts(array):
    """The remembered facts of a sealed ``array`` (None for any other)."""
    entry = _SEALED.get(id(array))
    if entry is None or entry[0]() is not array or array.flags.writeable:
        return None
    return entry[1]


def value_range(values):
    """``(min, max)`` of an index array (None when empty)."""
    facts = _facts(values)
    if facts is not None and "range" in facts:
        return facts["range"]
    found = None if values.size == 0 else (int(values.min()), int(values.max()))
    if facts is not None:
        facts["range"] = found
    return found


def check_monotone(name, values):
    """Row pointers (a NumPy array) must be non-decreasing."""
    import numpy as np
    facts = _facts(values)
    if facts is not None and facts.get("monotone"):
        return
    if values.size > 1:
        d = np.diff(values.astype(np.int64))
        if (d < 0).any():
            k = int(np.argmax(d < 0))
            raise ValueError(f"argument {name!r} must be non-decreasing (row pointers): "
                             f"{name}[{k}]={int(values[k])} > {name}[{k + 1}]={int(values[k + 1])}")
    if facts is not None:
        facts["monotone"] = True


# ------------------------------------------------------------ writable memory
# Whether memory may be written is asked of the kernel itself: NumPy's
# ``writeable`` flag is lost on the way through torch.from_numpy / .numpy(),
# and a torch tensor has no such flag at all, so a tensor over a read-only
# mapping (np.memmap(mode="r"), torch.frombuffer(bytes)) would crash the
# kernel that writes it.  Linux >= 6.11 answers for one address with the
# PROCMAP_QUERY ioctl on /proc/self/maps (~2-4 us per mapping the range
# spans); older kernels by a read of the whole /proc/self/maps text
# (~0.1-0.5 ms).  Without /proc the answer is unknown (None).
_PROCMAP_SIZE = 104                     # sizeof(struct procmap_query), linux/fs.h
_PROCMAP_QUERY = (3 << 30) | (_PROCMAP_SIZE << 16) | (ord("f") << 8) | 17   # _IOWR('f', 17, ...)
_VMA_WRITABLE = 0x2                     # PROCMAP_QUERY_VMA_WRITABLE
_maps = {"pid": None, "fd": None, "ioctl": True}


def memory_writable(address: int, nbytes: int):
    """True when every page of ``[address, address + nbytes)`` is mapped
    writable, False when one is read-only or not mapped, None when this
    system cannot say (no /proc)."""
    import os
    if nbytes <= 0:
        return True
    pid = os.getpid()
    if _maps["pid"] != pid:            # /proc/self is resolved when opened: reopen after fork
        try:
            _maps["fd"] = os.open("/proc/self/maps", os.O_RDONLY | os.O_CLOEXEC)
        except OSError:
            _maps["fd"] = None
        _maps["pid"] = pid
    fd = _maps["fd"]
    if fd is None:
        return None
    if _maps["ioctl"]:
        answer = _query_ioctl(fd, address, address + nbytes)
        if answer is not None:
            return answer
        _maps["ioctl"] = False
    return _query_text(address, address + nbytes)


def _query_ioctl(fd, start, end):
    import errno
    import fcntl
    import struct
    addr = start
    while addr < end:
        buf = bytearray(_PROCMAP_SIZE)
        struct.pack_into("=QQQ", buf, 0, _PROCMAP_SIZE, 0, addr)
        try:
            fcntl.ioctl(fd, _PROCMAP_QUERY, buf, True)
        except OSError as exc:
            if exc.errno == errno.ENOENT:       # no mapping covers addr
                return False
            return None                          # no PROCMAP_QUERY here
        vma_end, flags = struct.unpack_from("=QQ", buf, 32)
        if not flags & _VMA_WRITABLE or vma_end <= addr:
            return False
        addr = vma_end
    return True


def _query_text(start, end):
    try:
        with open("/proc/self/maps", "rb") as fh:
            lines = fh.read().splitlines()
    except OSError:
        return None
    addr = start
    for line in lines:                           # sorted by address
        fields = line.split(None, 2)
        lo, hi = (int(x, 16) for x in fields[0].split(b"-"))
        if hi <= addr:
            continue
        if lo > addr or b"w" not in fields[1]:
            return False                         # a hole, or a read-only mapping
        addr = hi
        if addr >= end:
            return True
    return False


# ------------------------------------------------------------ huge pages
# A large output is written once, so its first touch is its cost: with 4 KiB
# pages a 77 MB tensor takes ~19,000 page faults (~17 ms here, longer than
# the convolution that fills it).  NumPy asks the kernel for transparent huge
# pages on its large allocations (madvise MADV_HUGEPAGE: 2 MiB a fault);
# torch's CPU allocator does not, so the outputs a kernel allocates as torch
# tensors are advised the same way before they are touched.  Where THP is
# off ("never") or there is no madvise, nothing changes.
HUGE_PAGE = 2 << 20
_MADV_HUGEPAGE = 14                     # linux/mman.h
_madvise = {"fn": None, "tried": False}


def advise_huge_pages(address: int, nbytes: int) -> bool:
    """Advises transparent huge pages for the whole 2 MiB pages inside
    ``[address, address + nbytes)`` (Linux; nothing for less than two of
    them).  True when advised."""
    start = -(-address // HUGE_PAGE) * HUGE_PAGE
    end = (address + nbytes) // HUGE_PAGE * HUGE_PAGE
    if end - start < 2 * HUGE_PAGE:
        return False
    if not _madvise["tried"]:
        _madvise["tried"] = True
        import sys
        if sys.platform.startswith("linux"):
            import ctypes
            import ctypes.util
            try:
                fn = ctypes.CDLL(ctypes.util.find_library("c") or None, use_errno=True).madvise
                fn.restype = ctypes.c_int
                fn.argtypes = (ctypes.c_void_p, ctypes.c_size_t, ctypes.c_int)
                _madvise["fn"] = fn
            except (OSError, AttributeError):
                pass
    fn = _madvise["fn"]
    return fn is not None and fn(start, end - start, _MADV_HUGEPAGE) == 0


def torch_output(shape, dtype, zero: bool):
    """A new torch tensor for a kernel's output (``dtype`` a torch dtype),
    its large pages advised huge before the first touch; zero-filled when
    ``zero``."""
    import torch
    t = torch.empty(shape, dtype=dtype)
    if t.numel():
        advise_huge_pages(t.data_ptr(), t.numel() * t.element_size())
    return t.zero_() if zero else t

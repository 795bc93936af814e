"""Call-time checks of the memory a kernel is given: the range of an index
array (:func:`value_range`), row pointers that must not decrease
(:func:`check_monotone`), and whether an output's pages may be written
(:func:`memory_writable`, for memory neither NumPy nor torch allocated).

Sealed arrays (:func:`seal`): a library that makes index arrays once and
passes them to kernels on every call (the sparse RNN weights' packed CSR)
seals them: their values are copied once into an immutable ``bytes`` object
and viewed from it (NumPy refuses to make such a view writable again).

Nothing is remembered of a sealed array's values: every call reads its
index arrays in full (:mod:`tiramisu_py.runtime.index_scan`, one vectorised
C pass each).  A fact remembered of memory that something can still write
could be stale, and sealed memory can be written: ``torch.from_numpy``
ignores NumPy's read-only flag (it warns) and writes through, and an index
written out of range then was read out of bounds by the next call (a
segfault).  The exact alternatives were worse: a checksum or fingerprint
short of the full data can miss a write; memory made truly unwritable
(``mprotect``) turns such a write into a segfault in the writer; noticing
an alias (a reference count) misses one already dropped after writing.
The full re-read costs ~0.35 ms per call for the ~16 MB of index arrays of
the sparse 4 x 1024 LSTM (a ~35 ms call; NumPy's separate passes took
~0.7-0.8 ms; measured on a 2-core EPYC)."""
from __future__ import annotations

from . import index_scan


def seal(array):
    """A read-only copy of ``array`` (a NumPy array) over an immutable
    ``bytes`` object: NumPy cannot make it writable again (torch can write
    it through ``torch.from_numpy``: its values are checked on every call
    all the same)."""
    import numpy as np
    array = np.asarray(array)
    return np.frombuffer(array.tobytes(), dtype=array.dtype).reshape(array.shape)


def value_range(values):
    """``(min, max)`` of an index array (None when empty), read in full."""
    return index_scan.value_range(values)


def check_monotone(name, values):
    """Row pointers (a NumPy array) must be non-decreasing (read in full)."""
    k = index_scan.first_descent(values)
    if k is not None:
        raise ValueError(f"argument {name!r} must be non-decreasing (row pointers): "
                         f"{name}[{k}]={int(values[k])} > {name}[{k + 1}]={int(values[k + 1])}")


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

"""What a cubin says of its kernels' resources, read from its ELF sections:
the same numbers as ptxas's ``-v`` report, for when a compiler's log does not
carry that report (NVRTC 13.0 on an H100 host returned an empty log for some
programs while the cubin was complete).

Where each number lives (a CUDA ELF, little-endian ELF64):

* ``.nv.info`` (all kernels): attribute records of a 4-byte header (format,
  attribute, 16-bit value or payload size) and, for the "sized" format 0x04,
  a payload.  ``EIATTR_REGCOUNT`` (0x2f) and ``EIATTR_FRAME_SIZE`` (0x11) hold
  (symbol index, value) pairs: registers and stack frame bytes per kernel.
* ``.nv.info.<kernel>``: ``EIATTR_NUM_BARRIERS`` (0x4c, a byte value; absent
  when the kernel uses none).
* ``.nv.shared.<kernel>``: its size is the static shared memory; from sm_90 on
  the section also holds the 1 KB that the system reserves in each block
  (the cubin then defines ``__nv_reservedSMEM_offset_0_alias``), which ptxas
  does not count.

Spills are not recorded in a cubin; every build passes ptxas ``-warn-spills
-Werror``, so a cubin that exists has none."""
from __future__ import annotations

import struct
from dataclasses import dataclass

FMT_SIZED = 0x04
EIATTR_FRAME_SIZE = 0x11
EIATTR_REGCOUNT = 0x2f
EIATTR_NUM_BARRIERS = 0x4c
RESERVED_SMEM = "__nv_reservedSMEM_"
RESERVED_SMEM_BYTES = 1024


@dataclass
class Resources:
    """ptxas's report for one kernel on one architecture."""
    registers: int
    shared_bytes: int
    stack_bytes: int
    spill_stores: int
    spill_loads: int
    barriers: int


class CubinFormatError(ValueError):
    """The bytes are not a cubin this reader understands."""


def _sections(b: bytes) -> list:
    """[(name, offset, size, link)] of the ELF's section headers."""
    if b[:4] != b"\x7fELF" or b[4] != 2 or b[5] != 1:
        raise CubinFormatError("not a little-endian ELF64 cubin")
    shoff, = struct.unpack_from("<Q", b, 0x28)
    shentsize, shnum, shstrndx = struct.unpack_from("<HHH", b, 0x3A)
    raw = [struct.unpack_from("<IIQQQQII", b, shoff + i * shentsize) for i in range(shnum)]
    names = raw[shstrndx][4]
    return [(_string(b, names + r[0]), r[4], r[5], r[6]) for r in raw]


def _string(b: bytes, at: int) -> str:
    return b[at:b.index(b"\0", at)].decode()


def _symbols(b: bytes, sections: list) -> list:
    """Names of the ``.symtab`` entries, by index."""
    for name, off, size, link in sections:
        if name == ".symtab":
            strtab = sections[link][1]
            return [_string(b, strtab + struct.unpack_from("<I", b, off + 24 * i)[0])
                    for i in range(size // 24)]
    raise CubinFormatError("the cubin has no symbol table")


def _attributes(data: bytes):
    """(attribute, 16-bit value, payload) of each ``.nv.info`` record."""
    i = 0
    while i + 4 <= len(data):
        fmt, attr, value = struct.unpack_from("<BBH", data, i)
        payload = data[i + 4:i + 4 + value] if fmt == FMT_SIZED else b""
        yield attr, value, payload
        i += 4 + len(payload)


def resources(cubin: bytes) -> dict:
    """{kernel: Resources} of every kernel in ``cubin`` (spills 0, see above)."""
    secs = _sections(cubin)
    syms = _symbols(cubin, secs)
    regs, frame = {}, {}
    for name, off, size, _ in secs:
        if name == ".nv.info":
            for attr, _, payload in _attributes(cubin[off:off + size]):
                if attr in (EIATTR_REGCOUNT, EIATTR_FRAME_SIZE) and len(payload) == 8:
                    sym, value = struct.unpack("<II", payload)
                    (regs if attr == EIATTR_REGCOUNT else frame)[syms[sym]] = value
    reserved = RESERVED_SMEM_BYTES if any(s.startswith(RESERVED_SMEM) for s in syms) else 0
    shared, barriers = {}, {}
    for name, off, size, _ in secs:
        if name.startswith(".nv.shared.") and not name.startswith(".nv.shared.reserved"):
            shared[name[len(".nv.shared."):]] = max(size - reserved, 0)
        elif name.startswith(".nv.info."):
            for attr, value, _ in _attributes(cubin[off:off + size]):
                if attr == EIATTR_NUM_BARRIERS:
                    barriers[name[len(".nv.info."):]] = value & 0xff
    # entry functions (ptxas reports those) have an info section of their own
    kernels = [n[len(".nv.info."):] for n, *_ in secs if n.startswith(".nv.info.")]
    return {k: Resources(regs.get(k, 0), shared.get(k, 0), frame.get(k, 0), 0, 0,
                         barriers.get(k, 0)) for k in kernels}

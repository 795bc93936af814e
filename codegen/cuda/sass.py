"""The SASS of a cubin, counted (no GPU needed): ``cuobjdump -sass`` (from
the CUDA toolkit, or the ``nvidia-cuda-cuobjdump`` wheel) disassembles each
kernel; :func:`counts` tallies its opcodes (``LDG.E.128``, ``LDS.128``,
``LDGSTS``, ``HMMA``, ``BAR.SYNC``, ``FFMA``, ``LDL``/``STL`` spills ...)
and :func:`loop_counts` those of its innermost loop (the main loop of a
GEMM: the backward branch with the most ``FFMA``/``HMMA`` in its body)."""
from __future__ import annotations

import collections
import os
import re
import shutil
import subprocess
import tempfile
from pathlib import Path

_FUNC = re.compile(r"^\s*Function : (\S+)")
_INSN = re.compile(r"/\*([0-9a-f]{4,})\*/\s+(@!?U?P\w+\s+)?([A-Z][A-Z0-9_.]*)([^;]*);")
_TARGET = re.compile(r"\b(?:BRA|JMP)\b.*?`?\(?\.?L_x_(\d+)")
_LABEL = re.compile(r"^\s*\.L_x_(\d+):")


def find_cuobjdump():
    """The path of ``cuobjdump``: on PATH, beside nvcc, or in the
    ``nvidia-cuda-cuobjdump`` wheel; None when there is none."""
    exe = shutil.which("cuobjdump")
    if exe:
        return exe
    nvcc = shutil.which("nvcc")
    if nvcc and (Path(nvcc).parent / "cuobjdump").exists():
        return str(Path(nvcc).parent / "cuobjdump")
    try:
        import nvidia
    except ImportError:
        return None
    for root in getattr(nvidia, "__path__", []):
        for sub in ("cu13", "cu12", "cuda_cuobjdump"):
            p = Path(root) / sub / "bin" / "cuobjdump"
            if p.exists():
                return str(p)
    return None


def disassemble(cubin: bytes) -> str:
    """``cuobjdump -sass`` of ``cubin``."""
    exe = find_cuobjdump()
    if exe is None:
        raise FileNotFoundError("cuobjdump not found: install the CUDA toolkit or "
                                "`pip install nvidia-cuda-cuobjdump`")
    with tempfile.TemporaryDirectory() as d:
        path = os.path.join(d, "k.cubin")
        with open(path, "wb") as fh:
            fh.write(cubin)
        return subprocess.run([exe, "-sass", path], capture_output=True, text=True,
                              check=True).stdout


def kernels(sass: str) -> dict:
    """{kernel: [(address, opcode, operands)]} of a ``cuobjdump -sass`` listing."""
    out, name = {}, None
    for line in sass.splitlines():
        m = _FUNC.match(line)
        if m:
            name = m.group(1)
            out[name] = []
            continue
        m = _INSN.search(line)
        if m and name and (m.group(2) or "").strip() != "@!PT":     # never executed: padding
            out[name].append((int(m.group(1), 16), m.group(3), m.group(4)))
    return out


def counts(cubin: bytes) -> dict:
    """{kernel: Counter of opcodes (with their modifiers: ``LDG.E.128``)}."""
    return {k: collections.Counter(op for _, op, _ in insns)
            for k, insns in kernels(disassemble(cubin)).items()}


def loop_counts(cubin: bytes, kernel: str) -> collections.Counter:
    """The opcodes of ``kernel``'s hottest innermost loop: among the backward
    branches (a branch to a lower address), the shortest span holding the
    most ``FFMA`` + ``HMMA``."""
    insns = kernels(disassemble(cubin))[kernel]
    best, best_key = collections.Counter(), None
    for i, (addr, op, args) in enumerate(insns):
        if not op.startswith("BRA"):
            continue
        m = re.search(r"0x([0-9a-f]+)", args)
        if not m:
            continue
        target = int(m.group(1), 16)
        if target >= addr:
            continue
        body = collections.Counter(o for a, o, _ in insns if target <= a <= addr)
        work = sum(v for o, v in body.items() if o.startswith(("FFMA", "HMMA")))
        key = (work, -(addr - target))
        if work and (best_key is None or key > best_key):
            best, best_key = body, key
    return best


def total(c: collections.Counter, prefix: str) -> int:
    """The instructions of ``c`` whose opcode starts with ``prefix``."""
    return sum(v for op, v in c.items() if op == prefix or op.startswith(prefix + "."))

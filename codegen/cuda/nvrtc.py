"""Cubins with NVRTC, the CUDA runtime compiler, through cuda-python
(``cuda.bindings.nvrtc``; the library itself comes from the
``nvidia-cuda-nvrtc`` wheel).  Needs no CUDA toolkit and no driver: the
``cuda`` extra alone builds the cubins that ``nvcc`` would.

The printed CUDA includes ``<stdint.h>``, which NVRTC does not ship; the
program gets it (and ``INFINITY``/``NAN``, which nvcc's implicit CUDA headers
define) as an in-memory header.  ptxas runs with the same options as under
nvcc (``-v``, ``-warn-spills``, ``-Werror``), so its report has the same form
and a spill fails the build.  Optional: imported only when a cubin is built
with NVRTC; :func:`unavailable` says why it cannot be used."""
from __future__ import annotations

import hashlib

OPTIONS = ("-Xptxas=-v", "-Xptxas=-warn-spills", "-Xptxas=-Werror")

HEADERS = {
    "stdint.h": "\n".join((
        "/* tiramisu_py: <stdint.h> for NVRTC */",
        "#pragma once",
        "typedef signed char int8_t;", "typedef unsigned char uint8_t;",
        "typedef short int16_t;", "typedef unsigned short uint16_t;",
        "typedef int int32_t;", "typedef unsigned int uint32_t;",
        "typedef long long int64_t;", "typedef unsigned long long uint64_t;",
        "typedef long long intptr_t;", "typedef unsigned long long uintptr_t;",
        "#define INT32_MAX 2147483647", "#define INT32_MIN (-INT32_MAX - 1)",
        "#define INT64_MAX 9223372036854775807LL", "#define INT64_MIN (-INT64_MAX - 1)",
        "#ifndef INFINITY", "#define INFINITY __builtin_huge_valf()", "#endif",
        "#ifndef NAN", '#define NAN __builtin_nanf("")', "#endif", "")),
}


class NvrtcUnavailable(RuntimeError):
    """cuda-python or the NVRTC library is missing."""


def _load():
    """(the ``cuda.bindings.nvrtc`` module, (major, minor)) or NvrtcUnavailable."""
    try:
        from cuda.bindings import nvrtc
    except ImportError as exc:
        raise NvrtcUnavailable(f"cuda-python is not installed ({exc}); pip install "
                               "'tiramisu_py[cuda]'") from None
    try:
        err, major, minor = nvrtc.nvrtcVersion()
    except Exception as exc:            # cuda.pathfinder.DynamicLibNotFoundError and kin
        raise NvrtcUnavailable(f"the NVRTC library cannot be loaded ({type(exc).__name__}: "
                               f"{exc}); pip install nvidia-cuda-nvrtc") from None
    if int(err) != 0:
        raise NvrtcUnavailable(f"nvrtcVersion failed: {err}")
    return nvrtc, (int(major), int(minor))


def unavailable():
    """Why NVRTC cannot build cubins here, or None when it can."""
    try:
        _load()
    except NvrtcUnavailable as exc:
        return str(exc)
    return None


def identity() -> str:
    """What a cached cubin depends on besides the source and the options:
    NVRTC's version, cuda-bindings' and the in-memory headers."""
    nvrtc, (major, minor) = _load()
    try:
        from cuda.bindings import __version__ as bindings
    except ImportError:
        bindings = "?"
    text = "\0".join(f"{k}\0{v}" for k, v in sorted(HEADERS.items()))
    return f"nvrtc {major}.{minor} cuda-bindings {bindings} " + \
        hashlib.sha256(text.encode()).hexdigest()[:16]


class CompileFailed(Exception):
    def __init__(self, message, log):
        super().__init__(message)
        self.log = log


def _result(ret, what):
    err = ret[0]
    if int(err) != 0:
        raise CompileFailed(f"NVRTC: {what} failed: {err}", "")
    return ret[1] if len(ret) == 2 else ret[1:]


def _output(get_size, get, prog, what: str) -> bytes:
    """One of NVRTC's outputs (the log, the cubin), copied into a fresh writable
    buffer.  Never an immutable ``bytes``: NVRTC writes into the buffer it is
    given, and ``b" " * 1`` is CPython's shared one-byte object (an empty log
    has size 1), so writing its terminator there turned every later ``b" "`` of
    the process into ``b"\\0"`` and corrupted unrelated generated code (seen on
    a GPU host whose NVRTC writes an empty log)."""
    size = _result(get_size(prog), f"nvrtcGet{what}Size")
    buf = bytearray(size)
    _result((get(prog, buf)[0], None), f"nvrtcGet{what}")
    return bytes(buf)


def half_include_dirs() -> list:
    """``--include-path`` options for the toolkit's ``cuda_bf16.h`` and
    ``cuda_fp16.h`` (which this NVRTC does not ship built in): the first
    directory holding them of ``$CUDA_HOME``/``$CUDA_PATH``, /usr/local/cuda
    and /usr/local/cuda-*; [] where none does (NVRTC then names the header)."""
    import glob
    import os
    roots = [os.environ.get("CUDA_HOME"), os.environ.get("CUDA_PATH"), "/usr/local/cuda",
             *sorted(glob.glob("/usr/local/cuda-*"), reverse=True)]
    for root in filter(None, roots):
        inc = os.path.join(root, "include")
        if os.path.isfile(os.path.join(inc, "cuda_bf16.h")):
            return [f"--include-path={inc}"]
    return []


def compile_cubin(source: str, arch: str, options=()) -> tuple:
    """(cubin bytes, NVRTC's log with ptxas's report) for ``arch`` ("sm_90");
    CompileFailed (with the log) when NVRTC or ptxas fails."""
    nvrtc, _ = _load()
    names = sorted(HEADERS)
    prog = _result(nvrtc.nvrtcCreateProgram(source.encode(), b"tiramisu_py.cu", len(names),
                                            [HEADERS[n].encode() for n in names],
                                            [n.encode() for n in names]), "nvrtcCreateProgram")
    try:
        extra = half_include_dirs() if ("<cuda_bf16.h>" in source
                                         or "<cuda_fp16.h>" in source) else []
        opts = [o.encode() for o in (f"--gpu-architecture={arch}", *OPTIONS, *options, *extra)]
        err = nvrtc.nvrtcCompileProgram(prog, len(opts), opts)[0]
        log = _output(nvrtc.nvrtcGetProgramLogSize, nvrtc.nvrtcGetProgramLog, prog, "ProgramLog")
        log = log.rstrip(b"\0").decode(errors="replace")
        if int(err) != 0:
            raise CompileFailed(f"NVRTC failed ({err}) for {arch}", log)
        return _output(nvrtc.nvrtcGetCUBINSize, nvrtc.nvrtcGetCUBIN, prog, "CUBIN"), log
    finally:
        nvrtc.nvrtcDestroyProgram(prog)

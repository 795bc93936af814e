"""Building the generated CUDA: cubins with ``nvcc`` or NVRTC (:func:`cuda_compiler`
chooses; ptxas's resource report parsed into :class:`Resources`, completed
from the cubin where the log lacks it; spills an error) and the CPU emulation library with the system C++ compiler.  Both cached on disk like the other
backends (:mod:`codegen.cache`): a warm process never runs a compiler."""
from __future__ import annotations

import json
import os
import re
import shlex
import shutil
import subprocess
from dataclasses import asdict
from pathlib import Path

from .. import cache, toolchain
from .cubin import Resources, resources as cubin_resources
from ..toolchain import CompileError

ARCHS = ("sm_80", "sm_90")
NVCC_FLAGS = ("-cubin", "-O3", "-Xptxas", "-v,-warn-spills,-Werror")
EMU_FLAGS = ("-std=c++17", "-O1", "-fPIC", "-shared", "-fwrapv", "-DTPY_EMULATE")
HEADER = Path(__file__).with_name("tpy_emu.h")


_ENTRY = re.compile(r"Compiling entry function '([^']+)' for '(sm_\d+)'")
_FRAME = re.compile(r"(\d+) bytes stack frame, (\d+) bytes spill stores, (\d+) bytes spill loads")
# a kernel with a stack frame also reports "N bytes cumulative stack size" before smem
_USED = re.compile(r"Used (\d+) registers(?:, used (\d+) barriers)?"
                   r"(?:, \d+ bytes cumulative stack size)?(?:, (\d+) bytes smem)?")


def parse_ptxas(log: str) -> dict:
    """{kernel: Resources} from ``ptxas -v`` output."""
    out, name, frame = {}, None, (0, 0, 0)
    for line in log.splitlines():
        m = _ENTRY.search(line)
        if m:
            name, frame = m.group(1), (0, 0, 0)
            continue
        m = _FRAME.search(line)
        if m and name:
            frame = tuple(int(x) for x in m.groups())
            continue
        m = _USED.search(line)
        if m and name:
            out[name] = Resources(int(m.group(1)), int(m.group(3) or 0), frame[0], frame[1],
                                  frame[2], int(m.group(2) or 0))
            name = None
    return out


def find_nvcc():
    return shutil.which("nvcc")


def _identity(exe: str) -> str:
    st = Path(exe).resolve().stat()
    return f"{Path(exe).resolve()}:{st.st_size}:{st.st_mtime_ns}"


COMPILER_ENV = "TIRAMISU_PY_CUDA_COMPILER"
COMPILERS = ("nvcc", "nvrtc")


def cuda_compiler(choice=None):
    """The compiler that builds the cubins: ``choice``, else
    $TIRAMISU_PY_CUDA_COMPILER: "nvcc", "nvrtc", "none" (print and emulate
    only) or "auto" (the default: nvcc when on PATH, else NVRTC when
    cuda-python and its library load, else None: no cubins).  Naming a
    compiler that is not there raises CompileError saying why."""
    choice = (choice or os.environ.get(COMPILER_ENV) or "auto").strip().lower()
    if choice == "none":
        return None
    if choice not in ("auto", *COMPILERS):
        raise ValueError(f"CUDA compiler must be one of auto, nvcc, nvrtc, none (from "
                         f"${COMPILER_ENV} or the compiler argument), not {choice!r}")
    from . import nvrtc
    if choice == "nvcc" and find_nvcc() is None:
        raise CompileError(f"CUDA backend: nvcc was asked for (${COMPILER_ENV}) but is not on "
                           "PATH")
    if choice == "nvrtc":
        reason = nvrtc.unavailable()
        if reason:
            raise CompileError(f"CUDA backend: NVRTC was asked for (${COMPILER_ENV}) but cannot "
                               f"be used: {reason}")
    if choice != "auto":
        return choice
    if find_nvcc() is not None:
        return "nvcc"
    return "nvrtc" if nvrtc.unavailable() is None else None


def build_cubin(source: str, arch: str, compiler=None) -> tuple:
    """(cubin bytes, {kernel: Resources}) for ``arch`` built by ``compiler``
    ("nvcc" | "nvrtc"; default :func:`cuda_compiler`); cached.  Raises
    CompileError when no compiler is there, it fails, or ptxas reports a
    spill."""
    which = cuda_compiler(compiler)
    if which is None:
        raise CompileError("CUDA backend: neither nvcc (on PATH) nor NVRTC (pip install "
                           "'tiramisu_py[cuda]') is available; the cubin cannot be built (the "
                           "emulator and the CPU backends need no CUDA toolkit)")
    if which == "nvcc":
        nvcc = find_nvcc()
        flags = (*NVCC_FLAGS, f"-arch={arch}")
        return _cached_cubin(source, arch, "nvcc:" + _identity(nvcc), flags,
                             lambda d: _nvcc_cubin(nvcc, flags, source, d))
    from . import nvrtc
    flags = (*nvrtc.OPTIONS, f"--gpu-architecture={arch}")
    return _cached_cubin(source, arch, "nvrtc:" + nvrtc.identity(), flags,
                         lambda d: _nvrtc_cubin(source, arch))


class _Failed(Exception):
    def __init__(self, message, log=""):
        super().__init__(message)
        self.log = log


def _nvcc_cubin(nvcc, flags, source, directory):
    key = cache.make_key(source, "nvcc-build", flags)
    src = cache.temp_path(key, ".cu", directory)
    out = cache.temp_path(key, ".cubin", directory)
    try:
        cache.atomic_write(src, source.encode())
        cmd = [nvcc, *flags, "-o", str(out), "-x", "cu", str(src)]
        try:
            r = toolchain.run_compiler(cmd, cwd=str(directory))
        except (OSError, subprocess.SubprocessError) as exc:
            raise CompileError(f"nvcc could not run: {exc}\ncommand: {shlex.join(cmd)}") from exc
        log = r.stdout + r.stderr
        if r.returncode != 0:
            raise _Failed(f"nvcc failed (exit {r.returncode})\ncommand: {shlex.join(cmd)}", log)
        return out.read_bytes(), log
    finally:
        cache.unlink_quietly(src)
        cache.unlink_quietly(out)


def _nvrtc_cubin(source, arch):
    from . import nvrtc
    try:
        return nvrtc.compile_cubin(source, arch)
    except nvrtc.CompileFailed as exc:
        raise _Failed(f"{exc}\noptions: {' '.join(nvrtc.OPTIONS)}", exc.log) from None


def _spills(res, arch):
    """The error message for the kernels of a ptxas report that spill, or ''."""
    spilled = [f"{k} ({r.spill_stores} bytes spill stores, {r.spill_loads} bytes spill loads)"
               for k, r in res.items() if r.spill_stores or r.spill_loads]
    return (f"CUDA backend: ptxas spilled registers for {arch} in {', '.join(spilled)}; use "
            "smaller register tiles") if spilled else ""


def _cached_cubin(source, arch, identity, flags, build):
    """The cubin and ptxas report of ``source`` from the cache, else from
    ``build(directory) -> (bytes, log)``; a failed build keeps the source as
    ``<key>.cu`` and names it; a reported spill is an error."""
    key = cache.make_key(source, identity, flags)
    rkey = cache.make_key(source, "ptxas-report:" + identity, flags)
    directory = cache.cache_dir()
    cubin, report = cache.lookup_object(key, directory), cache.lookup_object(rkey, directory)
    if cubin is not None and report is not None:
        try:
            return cubin, {k: Resources(**v) for k, v in json.loads(report).items()}
        except (ValueError, TypeError):
            pass
    directory = cache.build_directory(directory)
    try:
        data, log = build(directory)
    except _Failed as exc:
        kept = cache.object_paths(key, directory)[2].with_suffix(".cu")
        cache.atomic_write(kept, source.encode())
        # a spill fails the build (-Werror): say so first, the log after
        spilled = _spills(parse_ptxas(exc.log), arch)
        raise CompileError(f"{spilled + chr(10) if spilled else ''}{exc} for {arch} on "
                           f"{kept}\n{exc.log.strip()}", kept, exc.log) from None
    res = parse_ptxas(log)
    spilled = _spills(res, arch)
    if spilled:
        raise CompileError(spilled)
    # a log without the report of some kernel (NVRTC 13.0 returned empty logs
    # on one GPU host): the cubin's own records (codegen.cuda.cubin)
    res = {**cubin_resources(data), **res}
    cache.install_object(key, data, directory)
    cache.install_object(rkey, json.dumps({k: asdict(v) for k, v in res.items()}).encode(),
                         directory)
    return data, res


def find_cxx():
    for name in ("g++", "c++", "clang++"):
        p = shutil.which(name)
        if p:
            return p
    return None


def build_emulator(source: str) -> Path:
    """The shared library of the emulated ``source`` (C++ with tpy_emu.h); cached."""
    cxx = find_cxx()
    if cxx is None:
        raise CompileError("CUDA emulator: no C++ compiler (g++, c++, clang++) on PATH")
    header = HEADER.read_text()
    key = cache.make_key(header + "\0" + source, "cxx:" + _identity(cxx), EMU_FLAGS)
    directory = cache.cache_dir()
    hit = cache.lookup(key, directory)
    if hit is not None:
        return hit
    directory = cache.build_directory(directory)
    so, _, c_path = cache.paths(key, directory)
    cu = c_path.with_suffix(".cu")
    cache.atomic_write(cu, source.encode())
    tmp = cache.temp_path(key, ".so", directory)
    cmd = [cxx, *EMU_FLAGS, f"-I{HEADER.parent}", "-x", "c++", "-o", str(tmp), str(cu)]
    try:
        try:
            r = toolchain.run_compiler(cmd, cwd=str(directory))
        except (OSError, subprocess.SubprocessError) as exc:
            raise CompileError(f"C++ compiler could not run: {exc}\ncommand: {shlex.join(cmd)}",
                               cu) from exc
        if r.returncode != 0:
            raise CompileError(f"C++ compiler failed (exit {r.returncode}) on the emulated "
                               f"CUDA {cu}\ncommand: {shlex.join(cmd)}\n{r.stderr.strip()}",
                               cu, r.stderr)
        return cache.install(key, tmp, directory)
    finally:
        cache.unlink_quietly(tmp)

"""The system C compiler: finding it, identifying it, probing its flags, running it.

A warm process never runs the compiler: the compiler's identity comes from
``stat`` of its binary, and the result of the one-off feature probe is kept on
disk in the cache directory, keyed by that identity.

The probe file is untrusted input: it is read with :func:`cache.read_trusted`
(a regular file of ours, not group/other-writable, at most 64 KiB) and used
only if it names this compiler's identity and its flags are an ordered subset
of :data:`OPTIONAL_FLAGS`; anything else is re-probed and overwritten.  A probe
read from disk is re-run once (:func:`reprobe`) when a build with its flags
fails, so a stale probe (e.g. libgomp removed since) does not break every
later compile.

The compiler runs in its own session/process group; on a timeout, a
KeyboardInterrupt or any other exception the whole group (``cc1``, ``as``,
``ld``...) is killed with SIGKILL and reaped.
"""
from __future__ import annotations

import ctypes
import hashlib
import json
import os
import platform
import shlex
import shutil
import signal
import subprocess
import tempfile
import threading
from dataclasses import dataclass
from pathlib import Path

from . import cache

COMPILER_INVOCATIONS = 0          # subprocess compiler runs in this process (probe or build)

BASE_FLAGS = ("-O3", "-std=gnu99", "-fPIC", "-shared", "-fno-math-errno", "-fno-trapping-math", "-fwrapv")
OPTIONAL_FLAGS = ("-march=native", "-fopenmp", "-mprefer-vector-width=512",
                  "-Werror=implicit-function-declaration")
# flags added only where a probe shows the compiler miscompiles without them:
# gcc 12.2 at -O3 with AVX2/AVX-512 vectorises a guarded copy (a padded
# input's ``cond ? data[iy - 1][ix] : 0``) wrongly after if-conversion (a
# masked load of a group of accesses, gcc PR 114375), so 30 of 54 values came
# out 0 (spatial_pack's packed input; LLVM and -O2 right).  The flag does not
# turn if-conversion off everywhere (every loop with a select, the vector math
# helpers' clamps included, then stays scalar): it defines IFCVT_MACRO, and a
# source with a guarded access (:data:`IFCVT_GUARD`, which the C printer puts
# in a kernel that has one) turns if-conversion off for itself only
IFCVT_MACRO = "TP_GCC_IFCVT_BUG"
IFCVT_FLAGS = (f"-D{IFCVT_MACRO}",)
# gcc 12.2 at -O3 (any x86 vector width) peels a short inner loop completely
# and then vectorises the loop around it across a dependence it carries:
# ``A[k + 1][i + 1] = f(A[k][i])`` over a 6 x 6 array read stale rows (found
# by the legality fuzzer; LLVM and -O2 right).  Where the probe sees it, inner
# loops are no longer peeled completely by gcc (its cost model's other
# unrolling and our unrolled loops stay; PolyBench MEDIUM and the library's
# GEMM and convolution measured 0.95-1.26x of the times without the flag)
PEEL_FLAGS = ("--param=max-completely-peel-times=1",)
WORKAROUND_FLAGS = IFCVT_FLAGS + PEEL_FLAGS
IFCVT_GUARD = (f"#ifdef {IFCVT_MACRO}  /* codegen.toolchain: this compiler miscompiles an if-converted "
               "guarded load */\n"
               '#pragma GCC optimize("no-tree-loop-if-convert")\n'
               "#endif")
LIBS = ("-lm",)
BUILD_TIMEOUT_S = 600

_PROBE_SRC = "int tp_probe(int n) { int s = 0; for (int i = 0; i < n; i++) s += i; return s; }\n"
# the guarded copy gcc 12.2 -O3 -mavx2 miscompiles: tp_probe returns the
# number of wrong values (0 with a sound compiler)
_PROBE_MISCOMPILE_SRC = IFCVT_GUARD + """
#include <stdint.h>
static void tp_fill(const float *restrict data_, float *restrict out_) {
  const float (*restrict data)[1][7][6] = (const float (*)[1][7][6])data_;
  float (*restrict out)[9][6] = (float (*)[9][6])out_;
  for (int64_t iy = 0; iy < 9; iy++)
    for (int64_t ix = 0; ix < 6; ix++)
      out[0][iy][ix] = (iy >= 1 && iy < 8) ? data[0][0][iy - 1][ix] : 0.0f;
}
int tp_probe(void) {
  float d[42], o[54];
  for (int i = 0; i < 42; i++) d[i] = (float)(i + 1);
  tp_fill(d, o);
  int bad = 0;
  for (int iy = 0; iy < 9; iy++)
    for (int ix = 0; ix < 6; ix++)
      bad += o[iy * 6 + ix] != ((iy >= 1 && iy < 8) ? d[(iy - 1) * 6 + ix] : 0.0f);
  return bad;
}
"""
# the recurrence gcc 12.2 -O3 miscompiles after peeling its inner loop: the
# number of wrong values (the kernel called through a pointer, so that what
# runs is the function as compiled; the reference through volatile reads)
_PROBE_PEEL_SRC = """
#include <stdint.h>
int tp_recurrence(double *restrict A_) {
  double (*restrict A)[6] = (double (*)[6])A_;
  for (int64_t k = 0; k < 5; k++) {
    for (int64_t i = 0; i < 5; i++) {
      A[k + 1][i + 1] = 1.0 + -0.25 * A[k][i];
    }
  }
  return 0;
}
int tp_probe(void) {
  double a[36], r[36];
  for (int i = 0; i < 36; i++) a[i] = r[i] = (double)(i * 7 % 11) - 5.0;
  int (*volatile run)(double *restrict) = tp_recurrence;
  run(a);
  volatile double *rv = r;
  for (int k = 0; k < 5; k++)
    for (int i = 0; i < 5; i++)
      rv[(k + 1) * 6 + i + 1] = 1.0 + -0.25 * rv[k * 6 + i];
  int bad = 0;
  for (int i = 0; i < 36; i++) bad += a[i] != r[i];
  return bad;
}
"""
# (the probe, the flags that work around what it finds)
MISCOMPILE_PROBES = ((_PROBE_MISCOMPILE_SRC, IFCVT_FLAGS), (_PROBE_PEEL_SRC, PEEL_FLAGS))
_PROBE_OMP_SRC = """#include <omp.h>
int tp_probe(int n) {
  int s = 0;
#pragma omp parallel for reduction(+:s)
  for (int i = 0; i < n; i++) s += i;
  return s + omp_get_max_threads();
}
"""


class CompileError(RuntimeError):
    """The C compiler rejected a generated file (kept on disk for inspection)."""

    def __init__(self, message: str, c_path=None, stderr: str = ""):
        super().__init__(message)
        self.c_path = c_path
        self.stderr = stderr


@dataclass(frozen=True)
class Compiler:
    argv: tuple        # the command, its first word resolved to an absolute path
    identity: str      # command + realpath + size + mtime_ns of the binary (+ host CPU)


def _host_cpu() -> str:
    """What ``-march=native`` depends on, read without running anything."""
    cpu = platform.machine()
    try:
        with open("/proc/cpuinfo") as f:
            for line in f:
                key = line.split(":", 1)[0].strip()
                if key in ("model name", "flags", "Features", "cpu model"):
                    cpu += "|" + line.strip()
                if line.strip() == "" and "|" in cpu:
                    break
    except OSError:
        pass
    return hashlib.sha256(cpu.encode()).hexdigest()[:16]


def find_c_compiler() -> Compiler:
    """``$TIRAMISU_PY_CC``, else ``$CC``, else ``cc``, else ``gcc``."""
    for var in ("TIRAMISU_PY_CC", "CC"):
        value = os.environ.get(var, "").strip()
        if value:
            argv = _split(var, value)
            exe = shutil.which(argv[0])
            if exe is None:
                raise RuntimeError(f"no C compiler found: ${var}={value!r} is not an executable; "
                                   "set CC or install gcc")
            return _compiler([exe, *argv[1:]])
    for name in ("cc", "gcc"):
        exe = shutil.which(name)
        if exe is not None:
            return _compiler([exe])
    raise RuntimeError("no C compiler found: set CC or install gcc")


def _compiler(argv: list) -> Compiler:
    real = os.path.realpath(argv[0])
    st = os.stat(real)
    ident = f"{shlex.join(argv)}|{real}|{st.st_size}|{st.st_mtime_ns}|cpu={_host_cpu()}"
    return Compiler(tuple(argv), ident)


def _kill_group(p: subprocess.Popen) -> None:
    """SIGKILLs ``p``'s whole process group and reaps ``p``."""
    try:
        os.killpg(p.pid, signal.SIGKILL)
    except OSError:                     # already gone
        pass
    try:
        p.kill()
    except OSError:
        pass
    p.wait()
    for f in (p.stdout, p.stderr):
        if f is not None:
            try:
                f.close()
            except OSError:
                pass


def run_compiler(cmd: list, cwd=None) -> subprocess.CompletedProcess:
    """Runs the compiler in a new process group; raises subprocess.TimeoutExpired
    after BUILD_TIMEOUT_S.  On any exception (timeout, KeyboardInterrupt...)
    the whole group is killed before it propagates."""
    global COMPILER_INVOCATIONS
    COMPILER_INVOCATIONS += 1
    p = subprocess.Popen(cmd, cwd=cwd, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE,
                         stderr=subprocess.PIPE, text=True, start_new_session=True)
    try:
        out, err = p.communicate(timeout=BUILD_TIMEOUT_S)
    except BaseException:
        _kill_group(p)
        raise
    return subprocess.CompletedProcess(cmd, p.returncode, out, err)


_probed: dict = {}                # identity -> flags
_verified: set = set()            # identities whose flags were probed by this process
_probe_lock = threading.Lock()


def probe_path(cc: Compiler) -> Path:
    key = hashlib.sha256(f"probe|{cache.FORMAT_VERSION}|{cc.identity}|"
                         f"{OPTIONAL_FLAGS}|{WORKAROUND_FLAGS}".encode()).hexdigest()[:32]
    return cache.cache_dir() / f"probe-{key}.json"


def _read_probe(cc: Compiler, path: Path):
    """The flags of a trusted, valid probe file for ``cc``, else None."""
    data = cache.read_trusted(path, cache.PROBE_MAX)
    if data is None:
        return None
    try:
        record = json.loads(data)
    except ValueError:
        return None
    if not isinstance(record, dict) or record.get("identity") != cc.identity:
        return None
    flags = record.get("flags")
    if not isinstance(flags, list) or not all(isinstance(f, str) for f in flags):
        return None
    ordered = tuple(f for f in OPTIONAL_FLAGS + WORKAROUND_FLAGS if f in flags)
    return ordered if tuple(flags) == ordered else None     # only our flags, in our order


def _write_probe(cc: Compiler, path: Path, flags) -> None:
    try:
        cache.atomic_write(path, json.dumps({"identity": cc.identity, "flags": list(flags)}).encode())
    except OSError:
        pass                          # a read-only cache: probe again next process


def _probe(cc: Compiler) -> tuple:
    """The optional flags ``cc`` accepts; cached in memory and on disk (in
    every cache directory used, so a later process there never probes)."""
    path = probe_path(cc)
    if cc.identity in _probed:
        flags = _probed[cc.identity]
        if _read_probe(cc, path) != flags:
            _write_probe(cc, path, flags)
        return flags
    with _probe_lock:
        flags = _read_probe(cc, path)
        if flags is None:
            flags = _run_probe(cc)
            _verified.add(cc.identity)
            _write_probe(cc, path, flags)
        _probed[cc.identity] = flags
        return flags


def reprobe(cc: Compiler) -> bool:
    """Re-runs the probe of ``cc`` if its flags came from disk (not probed by
    this process) and stores the result; True if the flags changed."""
    with _probe_lock:
        if cc.identity in _verified:
            return False
        old = _probed.get(cc.identity)
        flags = _run_probe(cc)
        _verified.add(cc.identity)
        _probed[cc.identity] = flags
        _write_probe(cc, probe_path(cc), flags)
        return flags != old


def _run_probe(cc: Compiler) -> tuple:
    with tempfile.TemporaryDirectory(prefix="tp-probe-") as d:
        plain, omp = Path(d, "plain.c"), Path(d, "omp.c")
        plain.write_text(_PROBE_SRC)
        omp.write_text(_PROBE_OMP_SRC)

        def ok(flags, src) -> bool:
            try:
                r = run_compiler([*cc.argv, *BASE_FLAGS, *flags, "-o", str(Path(d, "p.so")), str(src), *LIBS])
            except (OSError, subprocess.SubprocessError):
                return False
            return r.returncode == 0 and not r.stderr.strip()

        if ok(OPTIONAL_FLAGS, omp):                 # the usual case: one run
            flags = OPTIONAL_FLAGS
        elif not ok((), plain):
            raise RuntimeError(f"C compiler {cc.argv[0]} cannot build a shared library "
                               f"with {' '.join(BASE_FLAGS)}")
        else:
            flags = tuple(f for f in OPTIONAL_FLAGS
                          if ok((f,), omp if f == "-fopenmp" else plain))
        return flags + _workarounds(cc, flags, d, ok)


def _miscompiles(cc: Compiler, flags, d, src=_PROBE_MISCOMPILE_SRC) -> bool:
    """Whether ``cc`` with ``flags`` builds the probe ``src`` (one of
    :data:`MISCOMPILE_PROBES`; default the guarded copy) wrongly (run once,
    in this process)."""
    tag = hashlib.sha256(" ".join((src, *flags)).encode()).hexdigest()[:12]
    path, so = Path(d, f"miscompile-{tag}.c"), Path(d, f"miscompile-{tag}.so")
    path.write_text(src)
    try:
        r = run_compiler([*cc.argv, *BASE_FLAGS, *flags, "-o", str(so), str(path), *LIBS])
        if r.returncode != 0:
            return False
        return ctypes.CDLL(str(so)).tp_probe() != 0
    except (OSError, subprocess.SubprocessError, AttributeError):
        return False                      # not loadable here (a cross compiler): no evidence


def _workarounds(cc: Compiler, flags, d, ok) -> tuple:
    """The flags of each of :data:`MISCOMPILE_PROBES` that the compiler
    miscompiles with ``flags`` and builds right with them, else ()."""
    extra = ()
    for src, fix in MISCOMPILE_PROBES:
        if not _miscompiles(cc, flags + extra, d, src):
            continue
        if all(ok((f,), Path(d, "plain.c")) for f in fix) \
                and not _miscompiles(cc, flags + extra + fix, d, src):
            extra += fix
    return extra


def _split(var: str, value: str) -> list:
    """``value`` of the environment variable ``var`` split as a shell would;
    ValueError naming the variable when it cannot be (an unclosed quote)."""
    try:
        return shlex.split(value)
    except ValueError as exc:
        raise ValueError(f"${var}={value!r} cannot be split into arguments ({exc}); "
                         "fix its quoting") from None


def extra_flags() -> tuple:
    return tuple(_split("TIRAMISU_PY_CFLAGS", os.environ.get("TIRAMISU_PY_CFLAGS", "")))


def compiler_flags(cc: Compiler) -> tuple:
    """Every flag of a build, in order (base, probed optional, ``$TIRAMISU_PY_CFLAGS``)."""
    return (*BASE_FLAGS, *_probe(cc), *extra_flags())


def build_shared(cc: Compiler, flags, c_path, so_path) -> None:
    """Compiles ``c_path`` into the shared library ``so_path``; raises CompileError."""
    cmd = [*cc.argv, *flags, "-o", str(so_path), str(c_path), *LIBS]
    try:
        r = run_compiler(cmd, cwd=os.path.dirname(str(c_path)) or None)
    except subprocess.TimeoutExpired as exc:
        raise CompileError(f"C compiler timed out after {BUILD_TIMEOUT_S} s on {c_path} (its "
                           f"process group was killed)\ncommand: {shlex.join(cmd)}", c_path) from exc
    except (OSError, subprocess.SubprocessError) as exc:
        raise CompileError(f"C compiler could not run on {c_path}: {exc}\ncommand: "
                           f"{shlex.join(cmd)}", c_path) from exc
    if r.returncode != 0:
        raise CompileError(f"C compiler failed (exit {r.returncode}) on generated file {c_path}\n"
                           f"command: {shlex.join(cmd)}\n{r.stderr.strip()}", c_path, r.stderr)

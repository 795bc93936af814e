"""Warm start: the result of ``compile()`` kept in the on-disk cache.

A compile runs the polyhedral analysis (dependences, legality, the isl AST)
and then the backend; the backends' cache only saves the last step.  This
module keeps the whole result, keyed by what determines it:

* a Function's **fingerprint**: its name, params (and fixed values), loops,
  buffers, statements (expressions, update targets, ``store_in``), nests, the
  scheduling commands in order, the target, the pinned host facts
  (``$TIRAMISU_PY_HOST``), and the compiler's own code
  (size and mtime of every ``.py`` file of ``tiramisu_py`` and ``codegen``);
* for an operator of :mod:`schedules`, its key (operator, algorithm, shape),
  the host description its schedule is derived from, the target and the
  code of ``schedules`` too (:func:`library_kernel`): the Function is not
  even built.

The entry holds the generated source (and the C backend's cffi declaration),
the kernel's arrays and params, what the call-time checks need, and, in a
second file, the lowered loop IR (read only if ``kernel.lowered`` is used).
A warm ``compile()`` is then a hash, a lookup and a load (the backend's
own cache maps the source to the built library or object): no isl.

The bounds proof a call needs is made at compile time when it holds for
every size (:meth:`tiramisu_py.analysis.bounds.BoundsChecker.prove_all`); otherwise
(index arrays, indices affine only once the sizes are known) the first call
with new sizes builds the model then (isl), as a cold kernel does at every
first call with new sizes.  ``kernel.model`` and ``kernel.schedule`` of a
warm kernel are computed when first read.  An entry that cannot be read or
loaded is ignored (compiled again and rewritten), never an error.
``$TIRAMISU_PY_WARM_START=0`` (or ``ENABLED = False``) turns it off.
"""
from __future__ import annotations

import hashlib
import os
import pickle
import types

import codegen

from ..analysis.bounds import BoundsChecker
from ..analysis.legality import analyse
from ..base import types as T
from ..lang.expr import Expr, Var
from ..lang.program import Buffer
from ..poly.model import build_model
from ..runtime.kernel import Kernel
from ..tuning import grain

FORMAT = 2                  # 2: entries name their key (a moved entry is a miss)
ENABLED = os.environ.get("TIRAMISU_PY_WARM_START", "1") != "0"
_ENTRY_MAX = 64 << 20
_code: dict = {}


def _code_version(dirs) -> str:
    """Size and mtime of the ``.py`` files of ``dirs`` (packages beside
    this one) and of their subpackages (``codegen/c``, ``codegen/llvm``,
    ``codegen/cuda``), hashed once per process."""
    key = tuple(dirs)
    if key not in _code:
        root = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
        h = hashlib.sha256(str(FORMAT).encode())
        for d in dirs:
            for base, subdirs, files in os.walk(os.path.join(root, d)):
                subdirs[:] = sorted(s for s in subdirs if s != "__pycache__")
                rel = os.path.relpath(base, root).replace(os.sep, "/")
                for name in sorted(files):
                    if name.endswith(".py"):
                        st = os.stat(os.path.join(base, name))
                        h.update(f"{rel}/{name}:{st.st_size}:{st.st_mtime_ns};".encode())
        _code[key] = h.hexdigest()
    return _code[key]


# ------------------------------------------------------------------ fingerprint
def _expr_lines(roots, out):
    """Each distinct node of the expressions ``roots`` once (a DAG stays
    linear); returns their ids in ``out``'s numbering."""
    memo = out.setdefault("memo", {})
    lines = out.setdefault("lines", [])

    def node(e):
        if not isinstance(e, Expr):
            return repr(e)
        k = memo.get(id(e))
        if k is not None:
            return k
        if isinstance(e, Var):
            text = f"var {e.name}"
        else:
            parts = [type(e).__name__]
            for cls in type(e).__mro__:
                for slot in getattr(cls, "__slots__", ()):
                    v = getattr(e, slot, None)
                    if isinstance(v, Expr):
                        parts.append(node(v))
                    elif isinstance(v, (tuple, list)):
                        parts.append("(" + ",".join(node(x) for x in v) + ")")
                    elif isinstance(v, T.DType):
                        parts.append(v.name)
                    elif hasattr(v, "name") and hasattr(v, "function"):
                        parts.append(f"@{v.name}")        # an access's buffer or computation
                    else:
                        parts.append(repr(v))
            text = " ".join(parts)
        lines.append(text)
        k = memo[id(e)] = f"#{len(lines) - 1}"
        return k
    return [node(r) for r in roots]


def algorithm_lines(f) -> list:
    """The algorithm of ``f`` as text: everything but the schedule."""
    out = {}
    head = [f"function {f.name}", f"params {list(f.params)} {sorted(f.fixed.items())}"]
    for v in f.vars:
        head.append(f"loop {v.name} {_expr_lines([v.lo, v.hi], out)}")
    for b in f.buffers.values():
        head.append(f"buffer {b.name} {b.kind} {b.dtype.name} {_expr_lines(b.shape, out)}")

    def visit(item, depth):
        if hasattr(item, "items") and not hasattr(item, "function"):      # a Nest
            head.append(f"{'  ' * depth}nest {[v.name for v in item.vars]}")
            for x in item.items:
                visit(x, depth + 1)
            return
        s = item
        line = f"{'  ' * depth}{type(s).__name__} {s.name} {s.loops} {_expr_lines([s.value], out)}"
        if s.is_update:
            line += f" into {s.parent.name} {s.op} {_expr_lines(s.lhs, out)}"
        else:
            dt = s.explicit_dtype.name if s.explicit_dtype else None
            store = None if s.buffer is None or getattr(s, "_auto_buffer", False) \
                else (s.buffer.name, _expr_lines(s.store_index, out))
            line += f" dtype {dt} store {store}"
        head.append(line)
    visit(f._root, 0)
    return head + out.get("lines", [])


def key(f, target) -> str:
    """The warm-start key of compiling ``f`` for ``target``."""
    h = hashlib.sha256()
    # the pinned host facts change the generated code (vector width, dot-product instructions)
    host = os.environ.get(codegen.target.ENV, "")
    for line in [f"target {target}", f"host {host}", f"grain {grain.parallel_grain()}",
                 _code_version(("tiramisu_py", "codegen"))] \
            + algorithm_lines(f) \
            + [f"cmd {c.stmt} {c.op} {c.args!r} {sorted(c.kwargs.items())!r}" for c in f._commands]:
        h.update(line.encode())
        h.update(b"\n")
    return h.hexdigest()


# ------------------------------------------------------------------ entries
def _paths(k):
    from codegen.cache import cache_dir
    d = cache_dir()
    return d / f"{k}.warm", d / f"{k}.warm-ir"


def _read(path):
    from codegen.cache import read_trusted
    data = read_trusted(path, _ENTRY_MAX)
    if data is None:
        return None
    try:
        return pickle.loads(data)
    except Exception:        # noqa: BLE001 - a damaged entry is a miss
        return None


def store(k, f, target, kernel):
    """Writes the entry of ``kernel`` (just compiled from ``f``) under ``k``."""
    from codegen import ir
    from codegen.cache import atomic_write
    if not ENABLED:
        return
    try:
        low = kernel.lowered
        shell = ir.LoweredFunction(low.name, low.scalars, low.arrays, None, low.constants,
                                   syncs=low.syncs)
        decl = None
        if target != "llvm":
            from codegen.c.emit import cffi_declaration
            decl = cffi_declaration(low)
        ch = kernel.checker
        entry = {
            "format": FORMAT, "key": k, "target": target, "name": f.name, "params": list(f.params),
            "fixed": dict(f.fixed), "source": kernel.source, "declaration": decl, "shell": shell,
            "buffers": [(role, b.name, b.dtype.name, b.kind, tuple(b.shape))
                        for role, bs in (("in", kernel.inputs), ("out", kernel.outputs),
                                         ("temp", kernel.temps)) for b in bs],
            "zeroed": sorted(kernel.zeroed_outputs), "domain_shaped": sorted(kernel._domain_shaped),
            "checker": {"value_arrays": list(ch.value_arrays), "csr_pairs": list(ch.csr_pairs),
                        "always": ch.always, "proven": list(ch.cache)},
            "algorithm": hashlib.sha256("\n".join(algorithm_lines(f)).encode()).hexdigest(),
        }
        main, ir_path = _paths(k)
        atomic_write(ir_path, pickle.dumps({"key": k, "ir": low},
                                           protocol=pickle.HIGHEST_PROTOCOL))
        data = pickle.dumps(entry, protocol=pickle.HIGHEST_PROTOCOL)
        atomic_write(main, data)
    except Exception:        # noqa: BLE001 - the warm start is an optimisation only
        return


def load(k, f=None, build=None):
    """The kernel of entry ``k``, or None (no entry, or one that cannot be
    used).  ``f``: the Function it was compiled from, or ``build``: how to
    make it (a library operator), for what a warm kernel computes lazily."""
    if not ENABLED:
        return None
    try:
        main, _ = _paths(k)
        entry = _read(main)
        if isinstance(entry, dict) and "alias" in entry:
            if entry.get("key") != k:
                return None
            k = entry["alias"]
            entry = _read(_paths(k)[0])
        # an entry names the key it was written under: one moved over another
        # key's name (a swapped entry) is a miss, never another kernel
        if not isinstance(entry, dict) or entry.get("format") != FORMAT or entry.get("key") != k:
            return None
        return _kernel(k, entry, f, build)
    except Exception:        # noqa: BLE001 - compiled again instead
        return None


def _kernel(k, entry, f, build):
    stand_in = types.SimpleNamespace(name=entry["name"], params=entry["params"],
                                     fixed=entry["fixed"], computations={})
    if entry["target"] == "llvm":
        compiled = codegen.compile_llvm(entry["shell"], source=entry["source"])
    else:
        compiled = codegen.compile_c(entry["shell"], source=entry["source"],
                                     declaration=entry["declaration"])
    roles = {"in": [], "out": [], "temp": []}
    for role, name, dtype, kind, shape in entry["buffers"]:
        roles[role].append(Buffer(stand_in, name, shape, T.from_any(dtype), kind))
    source_of = f

    def function():
        nonlocal source_of
        if source_of is None:
            source_of = build()
        return source_of
    checker = LazyChecker(entry["checker"], entry["algorithm"], function)
    kern = WarmKernel(stand_in, compiled, roles["in"], roles["out"], roles["temp"], checker,
                      None, zeroed_outputs=entry["zeroed"])
    kern._domain_shaped = set(entry["domain_shaped"])
    kern._function, kern._ir_path, kern._ir_key = function, _paths(k)[1], k
    kern.timings = {"warm": True}
    return kern


class LazyChecker:
    """The call-time bounds checks of a warm kernel: nothing when proved at
    compile time for every size or for these sizes; else the checker of the
    Function's model, built on first need."""

    def __init__(self, info, algorithm, function):
        self.value_arrays, self.csr_pairs = info["value_arrays"], info["csr_pairs"]
        self.always, self.cache = info["always"], {k: True for k in info["proven"]}
        self._algorithm, self._function, self._real = algorithm, function, None

    def check(self, values, ranges, arrays=None):
        if self.always:
            return
        if (tuple(sorted(values.items())), tuple(sorted(ranges.items()))) in self.cache:
            return
        if self._real is None:
            f = self._function()
            now = hashlib.sha256("\n".join(algorithm_lines(f)).encode()).hexdigest()
            if now != self._algorithm:
                raise RuntimeError(f"{f.name}: the Function was changed after compile(); "
                                   "compile it again before calling the kernel")
            self._real = BoundsChecker(build_model(f))
        self._real.check(values, ranges, arrays)


class WarmKernel(Kernel):
    """A kernel from a warm start: its lowered loop IR is read, and its model
    and schedule are computed, when first used."""

    @property
    def lowered(self):
        if self.__dict__.get("_lowered") is None and hasattr(self, "_ir_path"):
            got = _read(self._ir_path)
            ok = isinstance(got, dict) and got.get("key") == self._ir_key
            self.__dict__["_lowered"] = got["ir"] if ok else None
        return self.__dict__.get("_lowered")

    @lowered.setter
    def lowered(self, value):
        self.__dict__["_lowered"] = value

    def _analysis(self):
        if "_state" not in self.__dict__:
            model, _, state = analyse(self._function())
            self.__dict__["_state"] = (model, state)
        return self.__dict__["_state"]

    model = property(lambda self: self._analysis()[0])
    schedule = property(lambda self: self._analysis()[1])


# ------------------------------------------------------------------ the library
def library_key(op_key, target, host_text) -> str:
    """The key of a library operator: its key (operator, algorithm, shape),
    the host its schedule is derived from, the target, the parallel grain
    (which loops run on one thread) and the code."""
    h = hashlib.sha256()
    for part in ("library", repr(op_key), target, host_text, os.environ.get(codegen.target.ENV, ""),
                 f"grain {grain.parallel_grain()}",
                 _code_version(("tiramisu_py", "codegen", "schedules"))):
        h.update(part.encode())
        h.update(b"\n")
    return h.hexdigest()


def library_kernel(op_key, build, target, host_text):
    """The compiled kernel of a library operator: from its warm entry (the
    Function is not built), else ``build().compile(target)``, remembered
    under both keys."""
    lk = library_key(op_key, target, host_text)
    kern = load(lk, build=build)
    if kern is not None:
        return kern
    f = build()
    kern = f.compile(target=target)          # writes the Function's entry
    _alias(lk, key(f, target))
    return kern


def _alias(alias, k):
    from codegen.cache import atomic_write
    if not ENABLED:
        return
    try:
        if _read(_paths(k)[0]) is not None:
            atomic_write(_paths(alias)[0], pickle.dumps({"format": FORMAT, "key": alias,
                                                         "alias": k}))
    except Exception:        # noqa: BLE001 - the warm start is an optimisation only
        return

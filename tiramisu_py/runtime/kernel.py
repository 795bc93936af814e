"""A compiled kernel: a Python callable over NumPy arrays and CPU torch tensors.

Every argument is checked before native code runs: names, dtypes, ranks,
shapes against params, contiguity, alignment, writability, aliasing of
outputs, and the contents of index arrays that feed bounds or indirect
accesses (proved in range by :mod:`tiramisu_py.analysis.bounds`).  Bad input raises
TypeError / ValueError / IndexError naming the argument.

A misaligned input (address not a multiple of the element size) is read from
an aligned copy; a misaligned output is refused (it is written in place).  An
output is writable when NumPy or torch allocated it (NumPy: and its flag
says so), else when the kernel maps all its pages writable."""
from __future__ import annotations

import math
import sys

import cffi
import numpy as np

from ..lang import affine
from ..lang.affine import NonAffine
from .device_arrays import refuse_lazy_view
from .memory import HUGE_PAGE, check_monotone, memory_writable, torch_output, value_range
from .shapes import eval_size, names_in, shape_text


_FFI = cffi.FFI()                  # (buffer addresses only: no declarations)


class _Arg:
    """A uniform view of a NumPy array or a torch tensor."""
    __slots__ = ("name", "obj", "is_torch", "shape", "dtype", "address", "nbytes")

    def __init__(self, name, obj):
        self.name, self.obj = name, obj
        if isinstance(obj, np.ndarray):
            self.is_torch = False
            if not obj.dtype.isnative:
                raise TypeError(f"argument {name!r} has non-native byte order ({obj.dtype.str}); "
                                f"pass {name}.astype({obj.dtype.name!r})")
            self.shape, self.dtype = obj.shape, obj.dtype.name
            self.address = _address(obj)
            self.nbytes = obj.nbytes
        elif type(obj).__module__.startswith("torch") and hasattr(obj, "data_ptr"):
            self.is_torch = True
            if obj.device.type != "cpu":
                raise ValueError(f"argument {name!r} is on {obj.device}; the cpu kernel needs "
                                 "a CPU tensor")
            refuse_lazy_view(obj, name)
            self.shape = tuple(obj.shape)
            self.dtype = str(obj.dtype).split(".")[-1]
            self.address = obj.data_ptr()
            self.nbytes = obj.numel() * obj.element_size()
        elif hasattr(obj, "__dlpack__"):
            self.__init__(name, _from_dlpack(name, obj))
        else:
            raise TypeError(f"argument {name!r} must be a NumPy array, a torch tensor or an "
                            f"object with __dlpack__, not {type(obj).__name__}")

    def contiguous(self):
        if self.is_torch:
            return self.obj.is_contiguous()
        return self.obj.flags.c_contiguous

    def aligned(self):
        """The address is a multiple of the element size (NumPy arrays from
        ``np.frombuffer(..., offset=1)`` and torch tensors over them are not)."""
        if self.is_torch:
            return self.address % self.obj.element_size() == 0
        return self.obj.flags.aligned

    def aligned_copy(self):
        """An aligned, C-contiguous copy (for an input: it is only read)."""
        return _Arg(self.name, self.obj.clone() if self.is_torch else self.obj.copy())

    def writable(self):
        """Whether the kernel may write the memory.  Memory from NumPy's or
        torch's own allocators is writable (NumPy: when its flag says so);
        any other (a mapping, a foreign buffer, a tensor from
        ``torch.from_numpy`` / ``torch.frombuffer``, an array from
        ``tensor.numpy()``) is asked of the kernel's page tables
        (:func:`tiramisu_py.runtime.memory.memory_writable`), since neither torch nor
        NumPy's flag through torch knows it is read-only."""
        if self.nbytes == 0:
            return True
        if self.is_torch:
            if self.obj.untyped_storage().resizable():    # torch's allocator
                return True
        else:
            if not self.obj.flags.writeable:
                return False
            root = self.obj
            while isinstance(root, np.ndarray) and root.base is not None:
                root = root.base
            if isinstance(root, np.ndarray) and root.flags.owndata:    # NumPy's allocator
                return True
        return memory_writable(self.address, self.nbytes) is not False

    def numpy(self):
        return self.obj.detach().numpy() if self.is_torch else self.obj


class Kernel:
    """Call with the inputs (positionally in declaration order, or by name),
    optionally outputs by name (updated in place) and params by name (others
    are inferred from shapes).  Returns the output array, or a dict of them by
    name when there are several.  ``source`` is the generated code.
    ``tuned``: None, or the tuning record ``compile()`` used, in words
    (:func:`tiramisu_py.tune`; then the source's first line says it too).
    Parallel loops run on OpenMP's threads; in a forked child (``os.fork``, a
    'fork' multiprocessing worker, a DataLoader worker) the thread that forked
    runs them on itself alone, since fork() does not copy the parent's OpenMP
    threads (:mod:`codegen.after_fork`)."""
    tuned = None
    _note = ""

    def __init__(self, f, compiled, inputs, outputs, temps, checker, lowered,
                 zeroed_outputs=None):
        self.name = f.name
        self._compiled = compiled
        self.inputs = list(inputs)            # Buffers
        self.outputs = list(outputs)          # Buffers
        self.temps = list(temps)              # Buffers the kernel allocates itself
        self.params = [p for p in f.params if p not in f.fixed]
        self.fixed = dict(f.fixed)
        self.checker = checker
        self.lowered = lowered
        # outputs the kernel may read before writing, or may leave partly
        # unwritten: allocated zero-filled; the others uninitialised
        self.zeroed_outputs = {b.name for b in outputs} if zeroed_outputs is None else set(zeroed_outputs)
        # outputs and temporaries shaped by the compiler like their
        # computation's domain: an extent below 0 there with no negative param
        # (``N - 1`` at N = 0, the box of an empty triangle) is an empty
        # domain, i.e. 0 (the generated code allocates such a temporary with
        # its extent clamped at 0: driver.compile)
        self._domain_shaped = {c.buffer.name for c in f.computations.values()
                               if getattr(c, "_auto_buffer", False)
                               and (c.buffer in self.outputs or c.buffer in self.temps)}
        self._shape_cache = {}
        self._torch_ops = {}        # in-place outputs -> torch_ops.KernelOp
        self._plans = {}            # checked signature -> _Plan (see _signature)

    @property
    def source(self) -> str:
        return self._note + self._compiled.source

    def mark_tuned(self, description, comment="// "):
        """Records that this kernel was compiled with a tuning record:
        ``tuned`` = ``description``, and a ``comment`` line (the language's
        comment mark) atop :attr:`source`."""
        self.tuned = description
        self._note = comment + " ".join(str(description).split()) + "\n"

    @property
    def library_path(self) -> str:
        return self._compiled.path

    def __repr__(self):
        ins = ", ".join(b.name for b in self.inputs)
        outs = ", ".join(b.name for b in self.outputs)
        return f"<Kernel {self.name}({ins}) -> {outs}>"

    def torch_op(self, qualname, inplace=(), backward=None, setup_context=None):
        """Registers this kernel as the PyTorch operator ``qualname``
        (``"namespace::name"``) and returns ``torch.ops.namespace.name``.

        Its arguments are the inputs (in order), then the outputs named in
        ``inplace`` (written in place: ``mutates_args``), then keyword-only the
        params the shapes cannot give; it returns the other outputs (a tuple
        when several).  Its fake implementation infers the params and output
        shapes with the same rules as a call.  ``backward`` / ``setup_context``:
        as for ``torch.library.register_autograd``; without one, asking for a
        gradient raises.  Works in eager, under ``torch.compile`` (no graph
        break) and passes ``torch.library.opcheck``.  Once an op with a
        backward is registered, a plain call of the kernel on tensors that
        require grad goes through it.  Needs torch; see
        :mod:`tiramisu_py.runtime.torch_bridge`."""
        from . import torch_bridge          # needs torch: loaded on first use
        inplace = tuple(inplace)
        info = self._torch_ops.get(inplace)
        if info is not None and info.qualname == qualname:
            return info.op
        return torch_bridge.kernel_op(self, qualname, inplace, backward, setup_context).op

    # ------------------------------------------------------------------ call
    def __call__(self, *args, **kwargs):
        torch = sys.modules.get("torch")
        compiling = torch is not None and torch.compiler.is_compiling()
        # (a tensor that requires grad while grad mode is on: no signature)
        signature = None if compiling else _signature(self, args, kwargs, torch)
        if signature is not None:
            plan = self._plans.get(signature[0])
            if plan is not None:
                return plan.run(self, signature[1])
        if torch is not None and _through_op(torch, args, kwargs, compiling):
            from . import torch_bridge      # torch is loaded already
            return torch_bridge.call(self, args, kwargs)
        if len(args) > len(self.inputs):
            self._too_many_positional(args)
        given = {}
        for b, a in zip(self.inputs, args):
            given[b.name] = a
        in_names = {b.name for b in self.inputs}
        out_names = {b.name for b in self.outputs}
        values = {}
        for k, v in kwargs.items():
            if k in given:
                raise TypeError(f"{self.name}() got argument {k!r} twice")
            if k in in_names or k in out_names:
                given[k] = v
            elif k in self.params or k in self.fixed:
                if isinstance(v, bool) or not isinstance(v, (int, np.integer)):
                    raise TypeError(f"param {k!r} must be an int, not {type(v).__name__}")
                if not -2 ** 63 <= int(v) < 2 ** 63:
                    raise ValueError(f"param {k!r} = {int(v)} is outside the int64 range")
                if k in self.fixed and int(v) != self.fixed[k]:
                    raise ValueError(f"param {k!r} is fixed to {self.fixed[k]} in this "
                                     f"function; got {int(v)}")
                values[k] = int(v)
            else:
                expected = [b.name for b in self.inputs + self.outputs] + self.params
                raise TypeError(f"{self.name}() got an unexpected argument {k!r}; "
                                f"it takes {', '.join(expected)}")
        missing = [b.name for b in self.inputs if b.name not in given]
        if missing:
            raise TypeError(f"{self.name}() missing array argument(s): {', '.join(map(repr, missing))}")

        arrs = {}
        misaligned = []         # inputs: read from an aligned copy
        for b in self.inputs + self.outputs:
            if b.name not in given:
                continue
            a = _Arg(b.name, given[b.name])
            if a.dtype != b.dtype.name:
                raise TypeError(f"argument {b.name!r} has dtype {a.dtype}, expected {b.dtype.name}")
            if len(a.shape) != len(b.shape):
                raise ValueError(f"argument {b.name!r} has {len(a.shape)} dimensions, expected "
                                 f"{len(b.shape)} {shape_text(b.shape)}")
            if not a.contiguous():
                raise ValueError(f"argument {b.name!r} is not C-contiguous; pass "
                                 f"np.ascontiguousarray({b.name}) (or .contiguous())")
            if b in self.outputs:
                if not a.aligned():
                    raise ValueError(f"output argument {b.name!r} is misaligned: its address "
                                     f"{a.address:#x} is not a multiple of its element size; "
                                     "it is written in place, so pass an aligned array "
                                     f"({b.name}.copy() is one)")
                if not a.writable():
                    raise ValueError(f"output argument {b.name!r} is read-only (its memory "
                                     "cannot be written)")
            elif not a.aligned():
                misaligned.append(b.name)
            arrs[b.name] = a

        self._infer_params(values, arrs)
        buffers = self.inputs + self.outputs
        for b in buffers:
            if b.name in arrs:
                exp = self._extents(b, values)
                if tuple(arrs[b.name].shape) != exp:
                    ps = ", ".join(f"{k}={v}" for k, v in sorted(values.items()))
                    raise ValueError(f"argument {b.name!r} has shape {tuple(arrs[b.name].shape)}, "
                                     f"expected {shape_text(b.shape)} = {exp}"
                                     + (f" with {ps}" if ps else ""))
        for b in self.temps + self.outputs:
            for s, v in zip(b.shape, self._shape(b, values)):
                if v < 0:
                    if b.name in self._domain_shaped and \
                            all(values.get(k, self.fixed.get(k, 0)) >= 0 for k in names_in(s)):
                        continue
                    ps = ", ".join(f"{k}={values[k]}" for k in sorted(values)
                                   if k in names_in(s))
                    raise ValueError(f"param(s) {ps or 'given'} make buffer {b.name!r} have a "
                                     f"negative extent ({s!r} = {v})")
        self._check_aliasing(arrs)
        for name in misaligned:
            arrs[name] = arrs[name].aligned_copy()

        # contents of index arrays
        ranges, held = {}, {}
        for name in self.checker.value_arrays:
            vals = held[name] = arrs[name].numpy()
            ranges[name] = value_range(vals)
        for name, _ in self.checker.csr_pairs:
            check_monotone(name, arrs[name].numpy())
        self.checker.check(values, ranges, held)

        # allocate outputs not passed
        use_torch = any(a.is_torch for a in arrs.values())
        results = {}
        for b in self.outputs:
            if b.name not in arrs:
                obj = self._new_output(b, self._extents(b, values), use_torch)
                arrs[b.name] = _Arg(b.name, obj)
            results[b.name] = arrs[b.name].obj
        scalars = [values[p] for p in self.params]
        self._run_native(scalars, [arrs[b.name].address for b in buffers])
        if signature is not None and not misaligned:
            if len(self._plans) >= 64:
                self._plans.clear()
            self._plans[signature[0]] = _Plan(self, scalars, values, use_torch)
        if len(results) == 1:
            return next(iter(results.values()))
        return results

    def call_prechecked(self, arrays, values):
        """Runs the native code on ``arrays`` (name -> the arrays a checked
        call of this kernel took, every input and output) with the params
        ``values`` (name -> int, all of them), without the call-time
        checks: for a caller that proved them for these values (the
        distributed runtime checks all the steps of a call at once with
        ``kernel.checker``, then runs the steps through here)."""
        self._run_native([int(values[p]) for p in self.params],
                         [_address(arrays[b.name]) for b in self.inputs + self.outputs])

    # -------------------------------------------------------------- helpers
    def _too_many_positional(self, args):
        """The TypeError of a call with more positional arguments than
        inputs: the outputs and params are passed by name."""
        ins = ", ".join(b.name for b in self.inputs) or "none"
        by_name = [f"{b.name}=..." for b in self.outputs] + [f"{p}=..." for p in self.params]
        kinds = [f"{what} ({', '.join(names)})" for what, names in
                 (("the outputs", [b.name for b in self.outputs]), ("the params", self.params))
                 if names]
        raise TypeError(
            f"{self.name}() takes {len(self.inputs)} positional arrays (the inputs: {ins}), "
            f"got {len(args)}; {' and '.join(kinds)} are passed by name: "
            f"{self.name}({', '.join([b.name for b in self.inputs] + by_name)})")

    def _run_native(self, scalars, addresses):
        """The native call on the params ``scalars`` and the buffers'
        ``addresses`` (inputs, then outputs, in declaration order)."""
        if self._compiled.call(scalars, addresses) != 0:
            raise MemoryError(f"{self.name}: could not allocate the kernel's temporaries")

    def _new_output(self, b, shape, use_torch):
        """A fresh array for output ``b`` of ``shape``: a torch tensor with
        ``use_torch``, else a NumPy array; zero-filled where the kernel may
        read it before writing it (``zeroed_outputs``)."""
        zero = b.name in self.zeroed_outputs
        if use_torch:
            import torch
            return torch_output(shape, getattr(torch, b.dtype.name), zero)
        if b.dtype.np is None:
            raise TypeError(f"{self.name}: output {b.name!r} is bfloat16, which NumPy "
                            "lacks: pass torch tensors (or install ml_dtypes)")
        return (np.zeros if zero else np.empty)(shape, dtype=b.dtype.np)

    def _shape(self, b, values):
        try:
            key = (b.name, tuple(sorted(values.items())))
            s = self._shape_cache.get(key)
        except TypeError:           # symbolic sizes (torch.SymInt) of a fake call
            key = s = None
        if s is None:
            vals = dict(self.fixed, **values)
            s = tuple(eval_size(e, vals, b.name) for e in b.shape)
            if key is not None:
                if len(self._shape_cache) > 1024:
                    self._shape_cache.clear()
                self._shape_cache[key] = s
        return s

    def _extents(self, b, values):
        """The shape of ``b`` for these params (see ``_domain_shaped``)."""
        s = self._shape(b, values)
        if b.name in self._domain_shaped and min(s, default=0) < 0:
            s = tuple(max(0, v) for v in s)
        return s

    def _infer_params(self, values, arrs):
        unknown = [p for p in self.params if p not in values]
        progress = True
        while unknown and progress:
            progress = False
            for b in self.inputs + self.outputs:
                if b.name not in arrs:
                    continue
                for k, e in enumerate(b.shape):
                    try:
                        form = affine.linear(e, values=dict(self.fixed, **values))
                    except NonAffine:
                        continue
                    free = [a for a in form if a != 1]
                    if len(free) != 1 or free[0] not in unknown:
                        continue
                    p, coef = free[0], form[free[0]]
                    rest = arrs[b.name].shape[k] - form.get(1, 0)
                    if rest % coef:
                        raise ValueError(f"argument {b.name!r}: dimension {k} has extent "
                                         f"{arrs[b.name].shape[k]}, which is not {e!r} for any "
                                         f"integer {p}")
                    values[p] = rest // coef
                    unknown.remove(p)
                    progress = True
        if unknown:
            raise TypeError(f"{self.name}(): cannot infer param(s) {', '.join(map(repr, unknown))} "
                            "from the arrays' shapes; pass them by name")

    def _check_aliasing(self, arrs):
        outs = [arrs[b.name] for b in self.outputs if b.name in arrs]
        for o in outs:
            if o.nbytes == 0:
                continue
            for a in arrs.values():
                if a is o or a.nbytes == 0:
                    continue
                if a.address < o.address + o.nbytes and o.address < a.address + a.nbytes:
                    raise ValueError(f"output argument {o.name!r} overlaps argument {a.name!r} "
                                     "in memory; pass separate arrays")


class _Plan:
    """What a checked call proved for its inputs' signature (names, kinds,
    shapes, dtypes; :func:`_signature`): the params, and the outputs to
    allocate.  A later call of the same signature runs with these, its
    per-array checks (contiguity, alignment, device) made by
    :func:`_signature` itself."""
    __slots__ = ("scalars", "shapes", "made", "order", "single", "empty")

    def __init__(self, kernel, scalars, values, use_torch):
        self.scalars = list(scalars)
        self.shapes = [kernel._extents(b, values) for b in kernel.outputs]
        # torch outputs: (name, shape, torch dtype, zero-filled, large enough to
        # advise huge pages), found once
        torch = sys.modules["torch"] if use_torch else None
        self.empty = torch.empty if use_torch else None
        self.made = [(b.name, shape, getattr(torch, b.dtype.name), b.name in kernel.zeroed_outputs,
                      math.prod(shape) * b.dtype.bits // 8 >= 2 * HUGE_PAGE)
                     for b, shape in zip(kernel.outputs, self.shapes)] if use_torch else None
        self.order = [b.name for b in kernel.inputs + kernel.outputs]
        self.single = kernel.outputs[0].name if len(kernel.outputs) == 1 else None

    def run(self, kernel, addresses):
        results = {}
        if self.made is not None:
            for name, shape, dtype, zero, large in self.made:
                # (too small for huge pages: torch.empty, its sizes unpacked: 0.5 us faster)
                obj = results[name] = torch_output(shape, dtype, zero) if large or zero or not shape \
                    else self.empty(*shape, dtype=dtype)
                addresses[name] = obj.data_ptr()
        else:
            for b, shape in zip(kernel.outputs, self.shapes):
                obj = results[b.name] = kernel._new_output(b, shape, False)
                addresses[b.name] = _address(obj)
        kernel._run_native(self.scalars, [addresses[n] for n in self.order])
        return results[self.single] if self.single is not None else results


def _signature(kernel, args, kwargs, torch):
    """``(key, addresses)`` of a call passing only inputs, each a C-contiguous,
    aligned NumPy array of native byte order or CPU torch tensor (not a lazy
    view, recording no gradient), to a kernel whose checks read no array's values: ``key`` the
    names, kinds, shapes and dtypes (what a :class:`_Plan` is valid for),
    ``addresses`` name -> data address.  None for any other call (it takes
    the checked path)."""
    known = kernel.__dict__.get("_input_names")
    if known is None:           # the inputs' names (a set; None: the checks read values)
        known = kernel.__dict__["_input_names"] = (None, ()) \
            if kernel.checker.value_arrays or kernel.checker.csr_pairs \
            else (frozenset(b.name for b in kernel.inputs), tuple(b.name for b in kernel.inputs))
    names, order = known
    if names is None or len(args) > len(order):
        return None
    tensor = torch.Tensor if torch is not None else None
    key, addresses = [], {}
    items = zip(order, args) if not kwargs else (*zip(order, args), *kwargs.items())
    for name, a in items:
        kind = type(a)
        if kind is tensor:
            if not a.is_cpu or a.is_neg() or a.is_conj() or not a.is_contiguous() \
                    or (a.requires_grad and torch.is_grad_enabled()):
                return None
            address = a.data_ptr()
            if address % a.element_size():
                return None
        elif kind is np.ndarray:
            if not (a.flags.c_contiguous and a.flags.aligned and a.dtype.isnative):
                return None
            address = _address(a)
        else:
            return None
        if name in addresses:
            return None
        key.append((name, kind, a.shape, a.dtype))
        addresses[name] = address
    if addresses.keys() != names:
        return None
    return tuple(key), addresses


def _address(a):
    """The data address of the NumPy array ``a`` (through cffi's buffer
    view: half the time of ``__array_interface__``, which builds a dict); an
    array with no such view (not C-contiguous, or a dtype without a buffer
    format: ml_dtypes' bfloat16) through the latter."""
    try:
        return int(_FFI.cast("intptr_t", _FFI.from_buffer(a)))
    except (TypeError, ValueError, BufferError):
        return a.__array_interface__["data"][0]


def _through_op(torch, args, kwargs, compiling):
    """A call on torch tensors goes through the kernel's torch op inside
    torch.compile (``compiling``: tracing the argument checks would fail) and
    when an input requires grad (the result must carry its gradient, or the
    call fails)."""
    if compiling:
        return any(isinstance(a, torch.Tensor) for a in (*args, *kwargs.values()))
    if not torch.is_grad_enabled():
        return False
    return any(isinstance(a, torch.Tensor) and a.requires_grad
               for a in (*args, *kwargs.values()))


def _from_dlpack(name, obj):
    """A NumPy view of a CPU ``__dlpack__`` object (no copy)."""
    dev = getattr(obj, "__dlpack_device__", None)
    if dev is not None and dev()[0] != 1:                # kDLCPU
        raise ValueError(f"argument {name!r} lives on DLPack device {dev()}; the cpu kernel "
                         "needs host memory")
    try:
        return np.from_dlpack(obj)
    except (TypeError, ValueError, RuntimeError, BufferError) as exc:
        raise TypeError(f"argument {name!r}: its __dlpack__ export cannot be read as a NumPy "
                        f"array ({exc})") from None

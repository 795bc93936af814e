"""The one-line convolution operators and the find step.

``conv2d(..., algo="auto")`` times every applicable algorithm once for a shape
(as MIOpen's find step does), records the winner in the tuning store
(:mod:`tiramisu_py.tuning`, kind "conv_find", keyed by shape, machine and
backend) in the on-disk cache and uses it from then on,
in this process and later ones.  ``algo=`` forces one.  The fused
``conv_relu_maxpool(..., algo="auto")`` chooses between its "direct" and
"winograd" blocks the same way.
"""
from __future__ import annotations

import json
import os
import time

import tiramisu_py as tp
from tiramisu_py import tuning

from . import conv as C
from . import fused, runtime
from .host import host

CONV_ALGOS = C.ALGOS
FUSED_ALGOS = fused.ALGOS
FIND_KIND = "conv_find"          # the records' kind in the tuning store
FIND_FILE = "conv_find.json"     # the former store: imported once, then unused


def _pair(v, name, least):
    """``v`` (an int, or a pair of ints for height and width, as torch takes
    them) checked: each at least ``least``."""
    items = tuple(v) if isinstance(v, (tuple, list)) else (v,)
    if (len(items) not in (1, 2) or (len(items) == 1 and isinstance(v, (tuple, list)))
            or any(not isinstance(i, int) or isinstance(i, bool) or i < least for i in items)):
        what = "non-negative" if least == 0 else "positive"
        raise ValueError(f"conv2d: {name} must be a {what} int or a pair of them "
                         f"(height, width), got {v!r}")
    return items[0] if len(items) == 1 else items


def _padding(padding, kh, kw, stride, dilation):
    """torch's ``padding``: an int, a pair, "valid" (0) or "same" (stride 1;
    the total padding ``dilation * (k - 1)`` must be even: torch puts an odd
    extra row on one side, which these kernels do not)."""
    if padding == "valid":
        return 0
    if padding == "same":
        if stride not in (1, (1, 1)):
            raise ValueError("conv2d: padding='same' is not supported for strided convolutions "
                             f"(stride={stride!r}), as in torch")
        dh, dw = dilation if isinstance(dilation, tuple) else (dilation, dilation)
        th, tw = dh * (kh - 1), dw * (kw - 1)
        if th % 2 or tw % 2:
            raise ValueError(f"conv2d: padding='same' with a {kh}x{kw} kernel (dilation "
                             f"{dilation!r}) needs uneven padding, which is not supported; "
                             f"pad the input and use padding=0")
        return (th // 2, tw // 2)
    if isinstance(padding, str):
        raise ValueError(f"conv2d: padding must be an int, a pair, 'valid' or 'same'; got {padding!r}")
    return _pair(padding, "padding", 0)


def _shape(x, w, stride, padding, dilation, groups):
    stride, dilation = _pair(stride, "stride", 1), _pair(dilation, "dilation", 1)
    if not isinstance(groups, int) or isinstance(groups, bool) or groups < 1:
        raise ValueError(f"conv2d: groups must be a positive int, got {groups!r}")
    n, ci, h, wd = x.shape
    co, cig, kh, kw = w.shape
    if kh < 1 or kw < 1:
        raise ValueError(f"conv2d: the kernel is {kh}x{kw}; it must be at least 1x1")
    padding = _padding(padding, kh, kw, stride, dilation)
    if ci % groups or co % groups:
        raise ValueError(f"conv2d: groups={groups} must divide the {ci} input and {co} output channels")
    if cig != ci // groups:
        raise ValueError(f"conv2d: weight has {cig} input channels per group; input has {ci} channels in "
                         f"{groups} group(s), so {ci // groups} were expected")
    s = C.ConvShape(n, ci, h, wd, co, kh, kw, stride, padding, dilation, groups)
    if s.ho < 1 or s.wo < 1:
        raise ValueError(f"conv2d: the {kh}x{kw} kernel (dilation {dilation}) does not fit the "
                         f"{h}x{wd} input with padding {padding}")
    return s


def _degenerate(s):
    """An empty output (batch or output channels 0) or an empty sum (input
    channels 0: the output is the bias): every algorithm handles it, the find
    step has nothing to time."""
    return s.n == 0 or s.co == 0 or s.ci == 0


def _kernel(algo, s, bias, target):
    return runtime.kernel(("conv2d", algo, s, bias), lambda: C.BUILDERS[algo](s, bias=bias), target)


def _run(algo, s, x, w, b, target):
    k = _kernel(algo, s, b is not None, target)
    args = {"data": x, "bias": b} if b is not None else {"data": x}
    if algo == "im2col":
        out = k(w2=w.reshape(s.co, s.ci * s.kh * s.kw), **args)     # (-1 fails when Co = 0)
        return out.reshape(s.n, s.co, s.ho, s.wo)
    return k(weight=w, **args)


# ------------------------------------------------------------------ find step
def _find_key(s, bias, target, op=()):
    """The record's key: ``op`` (empty for conv2d), then shape, bias,
    backend, SIMD width, cores and version."""
    h = host()
    return json.dumps([*op, list(vars(s).values()), bool(bias), runtime.target_of(target),
                       h.vector_bits, h.cores, tp.__version__])


def _valid_record(value):
    """A find record: ``{"algo": name, "seconds": {name: time}}``."""
    return (isinstance(value, dict) and isinstance(value.get("algo"), str)
            and isinstance(value.get("seconds"), dict)
            and all(isinstance(t, (int, float)) and not isinstance(t, bool)
                    for t in value["seconds"].values()))


def _find_store():
    """The tuning store of the cache directory, with the records of a
    legacy ``conv_find.json`` imported once."""
    store = tuning.store()
    store.migrate_json(FIND_KIND, FIND_FILE, _valid_record)
    return store


def _load_find(key):
    """The find record of ``key`` (a dict as stored by :func:`_store_find`),
    or None: missing, or damaged (then reported once and timed again)."""
    return _find_store().get(FIND_KIND, key, valid=_valid_record)


def _store_find(key, algo, times, repeats=None):
    _find_store().put(FIND_KIND, key, {"algo": algo, "seconds": times},
                      meta={"repeats": repeats, "pid": os.getpid()})


def find_records():
    """{key: record} of every conv find record in the cache directory."""
    return _find_store().records(FIND_KIND, valid=_valid_record)


def _choose(key, candidates, run, repeats):
    """The remembered choice for ``key`` if it is one of ``candidates``; else
    each candidate is run once (compile and warm-up), then timed
    ``repeats`` times on the same arguments, and the fastest remembered."""
    known = _load_find(key)
    if known is not None and known["algo"] in candidates:
        return known["algo"]
    times = {}
    for algo in candidates:
        run(algo)                                           # compile + warm up
        samples = []
        for _ in range(repeats):
            t0 = time.perf_counter()
            run(algo)
            samples.append(time.perf_counter() - t0)
        times[algo] = min(samples)        # noise only ever slows a run down
    best = min(times, key=times.get)
    _store_find(key, best, times, repeats)
    return best


def find(s, x, w, b, target=None, repeats=3):
    """The fastest applicable conv2d algorithm for shape ``s``: remembered,
    or timed now on these arguments and remembered."""
    return _choose(_find_key(s, b is not None, target),
                   [a for a in CONV_ALGOS if C.applicable(a, s)],
                   lambda algo: _run(algo, s, x, w, b, target), repeats)


def find_fused(s, pool, x, w, b, target=None, repeats=3):
    """The same for the fused block: "direct" or "winograd" (where it
    applies).  Its records start with "conv_relu_maxpool" and ``pool``."""
    return _choose(_find_key(s, b is not None, target, op=("conv_relu_maxpool", pool)),
                   [a for a in FUSED_ALGOS if fused.applicable(a, s, pool)],
                   lambda algo: _run_fused(algo, s, pool, x, w, b, target), repeats)


# ------------------------------------------------------------------ operators
def conv2d(input, weight, bias=None, stride=1, padding=0, dilation=1, groups=1, algo="auto",
           target=None):
    """2-D convolution with ``torch.nn.functional.conv2d``'s signature and
    defaults: NCHW float32 (NumPy arrays or CPU torch tensors; the result has
    the same kind); ``stride``, ``padding`` and ``dilation`` an int or a
    (height, width) pair; ``padding`` also "valid" or "same".  ``algo``:
    "auto" (find step), "direct", "im2col" or "spatial_pack"."""
    runtime.same_kind((input, weight, bias), ("input", "weight", "bias"))
    x, w = runtime.float32_array(input, "input", 4), runtime.float32_array(weight, "weight", 4)
    b = None if bias is None else runtime.float32_array(bias, "bias", 1)
    s = _shape(x, w, stride, padding, dilation, groups)
    if b is not None and b.shape[0] != s.co:
        raise ValueError(f"conv2d: bias has {b.shape[0]} values for {s.co} output channels")
    if algo == "auto":
        # nothing to time when the output is empty or no input channel feeds it
        algo = "direct" if _degenerate(s) else find(s, x, w, b, target)
    elif algo not in CONV_ALGOS:
        raise ValueError(f"conv2d: algo must be 'auto' or one of {', '.join(CONV_ALGOS)}; got {algo!r}")
    elif not C.applicable(algo, s):
        raise ValueError(f"conv2d: algo {algo!r} needs groups=1 (got groups={groups}); use 'direct'")
    return _run(algo, s, x, w, b, target)


def conv2d_function(n, ci, h, w, co, kh=3, kw=3, stride=1, padding=0, dilation=1, groups=1,
                    algo="direct", bias=True):
    """The scheduled Function of one algorithm, to inspect or re-schedule
    (``stride``, ``padding``, ``dilation`` as in :func:`conv2d`)."""
    stride, dilation = _pair(stride, "stride", 1), _pair(dilation, "dilation", 1)
    s = C.ConvShape(n, ci, h, w, co, kh, kw, stride, _padding(padding, kh, kw, stride, dilation),
                    dilation, groups)
    return C.BUILDERS[algo](s, bias=bias)


def _fused_kernel(algo, s, pool, bias, target):
    return runtime.kernel(("conv_relu_maxpool", algo, s, pool, bias),
                          lambda: fused.function(s, pool, bias=bias, algo=algo), target)


def _run_fused(algo, s, pool, x, w, b, target):
    k = _fused_kernel(algo, s, pool, b is not None, target)
    return k(data=x, weight=w, bias=b) if b is not None else k(data=x, weight=w)


def conv_relu_maxpool(input, weight, bias=None, stride=1, padding=0, dilation=1, groups=1, *,
                      pool=2, algo="auto", target=None):
    """``max_pool2d(relu(conv2d(input, weight, bias, stride, padding, dilation,
    groups)), pool)`` in one fused pass (see :mod:`schedules.fused`): the
    convolution's arguments and defaults are :func:`conv2d`'s (torch's);
    ``groups`` must be 1.  ``algo``: "auto" (find step), "direct" or
    "winograd" (3x3 kernels, stride 1, no dilation, ``pool=2``)."""
    runtime.same_kind((input, weight, bias), ("input", "weight", "bias"))
    x, w = runtime.float32_array(input, "input", 4), runtime.float32_array(weight, "weight", 4)
    b = None if bias is None else runtime.float32_array(bias, "bias", 1)
    s = _shape(x, w, stride, padding, dilation, groups)
    if groups != 1:
        raise ValueError(f"conv_relu_maxpool: groups must be 1, got {groups!r}; use conv2d")
    if b is not None and b.shape[0] != s.co:
        raise ValueError(f"conv_relu_maxpool: bias has {b.shape[0]} values for {s.co} output channels")
    if not isinstance(pool, int) or isinstance(pool, bool) or not 1 <= pool <= min(s.ho, s.wo):
        raise ValueError(f"conv_relu_maxpool: pool must be an int in [1, {min(s.ho, s.wo)}], got {pool!r}")
    if algo == "auto":
        algo = "direct" if _degenerate(s) else find_fused(s, pool, x, w, b, target)
    elif algo not in FUSED_ALGOS:
        raise ValueError(f"conv_relu_maxpool: algo must be 'auto' or one of "
                         f"{', '.join(FUSED_ALGOS)}; got {algo!r}")
    elif not fused.applicable(algo, s, pool):
        raise ValueError(f"conv_relu_maxpool: algo {algo!r} needs a 3x3 kernel and pool=2 "
                         f"(got {s.kh}x{s.kw}, pool={pool}); use 'direct'")
    return _run_fused(algo, s, pool, x, w, b, target)

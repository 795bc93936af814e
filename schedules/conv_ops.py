"""The one-line convolution operators and the find step.

``conv2d(..., algo="auto")`` times every applicable algorithm once for a shape
(as MIOpen's find step does), records the winner in the tuning store
(:mod:`tiramisu_py.tuning`, kind "conv_find", keyed by shape, machine and
backend) in the on-disk cache and uses it from then on,
in this process and later ones.  ``algo=`` forces one.  The fused
``conv_relu_maxpool(..., algo="auto")`` chooses between its "direct" and
"winograd" blocks the same way.  Both also consider "sparse"
(:mod:`schedules.sparse`) when the weight is at most ``SPARSE_MAX_DENSITY``
dense; those records are keyed by the density bucket too.
"""
from __future__ import annotations

import json
import os
import time

import tiramisu_py as tp
from tiramisu_py import tuning

from . import conv as C
from . import fused, runtime
from . import sparse as SP
from .host import host

CONV_ALGOS = C.ALGOS
FUSED_ALGOS = fused.ALGOS
FIND_KIND = "conv_find"          # the records' kind in the tuning store
FIND_FILE = "conv_find.json"     # the former store: imported once, then unused
SPARSE_MAX_DENSITY = 0.7         # denser weights never try "sparse" in the find step
DENSITY_BUCKETS = (0.01, 0.02, 0.05, 0.1, 0.2, 0.3, 0.4, 0.5, 0.6, SPARSE_MAX_DENSITY)


def _shape(x, w, stride, padding, dilation, groups):
    """The checked :class:`schedules.conv.ConvShape` of a conv2d call."""
    return C.ConvShape.make(x.shape, w.shape, stride, padding, dilation, groups)


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


def _sparse_candidate(s, w, csr):
    """``(op, weight)``: the key prefix of a find that also tries "sparse"
    (the density bucket) and the weight it runs on (``csr``, else the dense
    ``w``, converted by each call as a user's call would), or ``((), None)``
    where sparse cannot win (groups, or denser than ``SPARSE_MAX_DENSITY``)."""
    if s.groups != 1:
        return (), None
    density = csr.density if csr is not None else SP.density_of(w)
    bucket = next((d for d in DENSITY_BUCKETS if density <= d), None)
    if bucket is None:
        return (), None
    return ("density<=", bucket), (csr if csr is not None else w)


def find(s, x, w, b, target=None, repeats=3, csr=None):
    """The fastest applicable conv2d algorithm for shape ``s``: remembered,
    or timed now on these arguments and remembered.  "sparse" is a
    candidate when the weight is sparse enough (timed on ``csr`` if given,
    else on the dense ``w``, converted by each call as the user's will be)."""
    op, csr = _sparse_candidate(s, w, csr)
    cands = [a for a in CONV_ALGOS if C.applicable(a, s)] + (["sparse"] if op else [])

    def run(algo):
        if algo == "sparse":
            return SP.sparse_conv2d(x, csr, b, s.stride, s.padding, s.dilation, target=target)
        return _run(algo, s, x, w, b, target)
    return _choose(_find_key(s, b is not None, target, op=op), cands, run, repeats)


def find_fused(s, pool, x, w, b, target=None, repeats=3, csr=None):
    """The same for the fused block: "direct", "winograd" (where it
    applies) or "sparse" (as in :func:`find`).  Its records start with
    "conv_relu_maxpool" and ``pool``."""
    op, csr = _sparse_candidate(s, w, csr)
    cands = [a for a in FUSED_ALGOS if fused.applicable(a, s, pool)] + (["sparse"] if op else [])

    def run(algo):
        if algo == "sparse":
            return SP.sparse_conv_relu_maxpool(x, csr, b, pool, stride=s.stride, padding=s.padding,
                                               dilation=s.dilation, target=target)
        return _run_fused(algo, s, pool, x, w, b, target)
    return _choose(_find_key(s, b is not None, target, op=("conv_relu_maxpool", pool, *op)),
                   cands, run, repeats)


def _sparse_args(x, w, bias, algo, op):
    """For a sparse ``w`` (CSRWeights, torch sparse-CSR, scipy CSR): ``(x, w
    dense, bias, csr)`` for the find step; ``None`` for a dense ``w``.  A
    sparse ``w`` takes "auto" or "sparse" only."""
    if not SP.is_sparse(w):
        return None
    if algo not in ("auto", "sparse"):
        raise ValueError(f"{op}: algo {algo!r} needs a dense w; a sparse w takes 'auto' or 'sparse'")
    runtime.same_kind((x, bias), ("x", "bias"))
    x = runtime.float32_array(x, "x", 4)
    csr = SP.as_csr(w, x.shape[1])
    dense = csr.derived(("dense",), csr.to_dense)
    if runtime.is_torch(x):
        import torch
        dense = torch.from_numpy(dense)
    return x, dense, bias, csr


# ------------------------------------------------------------------ operators
def _arguments(op, input, weight, bias, stride, padding, dilation, groups, algo):
    """The checked arguments of a dense-algorithm call ``(x, w, b, shape,
    csr)``: a sparse ``weight`` is densified (``csr`` kept for "sparse")."""
    sp = _sparse_args(input, weight, bias, algo, op)
    input, weight, bias, csr = sp if sp else (input, weight, bias, None)
    runtime.same_kind((input, weight, bias), ("input", "weight", "bias"))
    x, w = runtime.float32_array(input, "input", 4), runtime.float32_array(weight, "weight", 4)
    b = None if bias is None else runtime.float32_array(bias, "bias", 1)
    s = _shape(x, w, stride, padding, dilation, groups)
    if b is not None and b.shape[0] != s.co:
        raise ValueError(f"{op}: bias has {b.shape[0]} values for {s.co} output channels")
    return x, w, b, s, csr


def conv2d(input, weight, bias=None, stride=1, padding=0, dilation=1, groups=1, algo="auto",
           target=None):
    """2-D convolution with ``torch.nn.functional.conv2d``'s signature and
    defaults: NCHW float32 (NumPy arrays or CPU torch tensors; the result has
    the same kind); ``stride``, ``padding`` and ``dilation`` an int or a
    (height, width) pair; ``padding`` also "valid" or "same".  ``algo``:
    "auto" (find step), "direct", "im2col", "spatial_pack" or "sparse"
    (:func:`schedules.sparse_conv2d`; ``weight`` may then also be a sparse
    weight, see there).  ``target="cuda"``, or torch CUDA tensors with no
    target: the CUDA schedules (:mod:`schedules.gpu_ops`; "auto"/"direct":
    :mod:`schedules.gpu_conv`, a sparse weight: :mod:`schedules.gpu_sparse`;
    ``groups=1``), the result on the input's device."""
    if runtime.use_cuda(target, input, None if SP.is_sparse(weight) else weight, bias):
        from .gpu_ops import conv2d_cuda
        return conv2d_cuda(input, weight, bias, stride, padding, dilation, groups, algo)
    if algo == "sparse":
        return SP.sparse_conv2d(input, weight, bias, stride, padding, dilation, groups,
                                target=target)
    x, w, b, s, csr = _arguments("conv2d", input, weight, bias, stride, padding, dilation,
                                 groups, algo)
    if algo == "auto":
        # nothing to time when the output is empty or no input channel feeds it
        algo = "direct" if _degenerate(s) else find(s, x, w, b, target, csr=csr)
        if algo == "sparse":
            return SP.sparse_conv2d(x, w if csr is None else csr, b, s.stride, s.padding, s.dilation,
                                    target=target)
    elif algo not in CONV_ALGOS:
        raise ValueError(f"conv2d: algo must be 'auto' or one of {', '.join(CONV_ALGOS)}, sparse; "
                         f"got {algo!r}")
    elif not C.applicable(algo, s):
        raise ValueError(f"conv2d: algo {algo!r} needs groups=1 (got groups={groups}); use 'direct'")
    return _run(algo, s, x, w, b, target)


def conv2d_function(n, ci, h, w, co, kh=3, kw=3, stride=1, padding=0, dilation=1, groups=1,
                    algo="direct", bias=True):
    """The scheduled Function of one algorithm, to inspect or re-schedule
    (``stride``, ``padding``, ``dilation`` as in :func:`conv2d`)."""
    good = isinstance(groups, int) and not isinstance(groups, bool) and groups >= 1
    s = C.ConvShape.make((n, ci, h, w), (co, ci // groups if good else ci, kh, kw), stride,
                         padding, dilation, groups, op="conv2d_function")   # (bad groups: named)
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
    ``groups`` must be 1.  ``algo``: "auto" (find step), "direct",
    "winograd" (3x3 kernels, stride 1, no dilation, ``pool=2``) or "sparse"
    (:func:`schedules.sparse_conv_relu_maxpool`; ``weight`` may be sparse)."""
    if groups != 1:
        raise ValueError(f"conv_relu_maxpool: groups must be 1, got {groups!r}; use conv2d")
    if algo == "sparse":
        return SP.sparse_conv_relu_maxpool(input, weight, bias, pool, stride=stride,
                                           padding=padding, dilation=dilation, target=target)
    x, w, b, s, csr = _arguments("conv_relu_maxpool", input, weight, bias, stride, padding,
                                 dilation, groups, algo)
    if not isinstance(pool, int) or isinstance(pool, bool) or not 1 <= pool <= min(s.ho, s.wo):
        raise ValueError(f"conv_relu_maxpool: pool must be an int in [1, {min(s.ho, s.wo)}], got {pool!r}")
    if algo == "auto":
        algo = "direct" if _degenerate(s) else find_fused(s, pool, x, w, b, target, csr=csr)
        if algo == "sparse":
            return SP.sparse_conv_relu_maxpool(x, w if csr is None else csr, b, pool, stride=s.stride,
                                               padding=s.padding, dilation=s.dilation, target=target)
    elif algo not in FUSED_ALGOS:
        raise ValueError(f"conv_relu_maxpool: algo must be 'auto' or one of "
                         f"{', '.join(FUSED_ALGOS)}, sparse; got {algo!r}")
    elif not fused.applicable(algo, s, pool):
        raise ValueError(f"conv_relu_maxpool: algo {algo!r} needs a 3x3 kernel and pool=2 "
                         f"(got {s.kh}x{s.kw}, pool={pool}); use 'direct'")
    return _run_fused(algo, s, pool, x, w, b, target)

"""The float32 convolution gradients at speed (:mod:`schedules.torch_ops`'s
backward; the float64 and odd cases run the reference kernels of
:mod:`schedules.solvers.backward`):

* the input's gradient is convolutions by the forward solvers
  (:func:`grad_input`) of the output's gradient with the flipped,
  group-transposed weight (:func:`flipped`, made once per weight): one for
  stride 1; for a strided, undilated conv one per phase of the input's
  pixels with that phase's taps only (:func:`phase_weight`, the exact
  multiply-adds); a pointwise strided conv's is the pointwise conv of the
  gradient, scattered to every ``stride``-th pixel; a strided depthwise
  conv's, channels in the lanes, sums each phase's taps in one kernel
  (:func:`blocked_depthwise_grad_input`); a strided dilated conv's (and a
  depthwise one's whose channels fill no vector) convolves the gradient
  spread out by the stride;
* the weights' gradient (:func:`weight_grad` chooses by shape): the
  blocked kernels, the taps' sums in registers with channels in the
  vector lanes (:func:`blocked_grad_weight`, :func:`blocked_depthwise_grad_weight`),
  else one GEMM per chunk of images of the columns and
  the gradient (:func:`grad_weight`: which operand is read how), where
  ``cols (Ci*Kh*Kw x M)`` holds the receptive fields of the chunk's ``M``
  pixels (the im2col of the input, :func:`im2col`, a kernel of its own:
  zero-padded, strided, dilated); chunks whose columns take at most
  :data:`COLS_BYTES`;
* the fused block's gradient recomputes the convolution with the forward
  solvers (``schedules.conv2d``: the same sums in the same order as the
  fused block's own, so the same maxima) and sends the pooled gradient to
  the first maximum of each window where the convolution is positive
  (:func:`pooled_grad`).
"""
from __future__ import annotations

import threading

import tiramisu_py as tp
from tiramisu_py.runtime.memory import torch_output

from ..blocks.conv_common import packed_channels, vector_loop, window_first
from ..core.kernels import kernel
from ..core.prepared import own, prepared
from ..core.sizes import largest_divisor
from ..core.transpose import flip_packed, flipped_items
from ..host import host
from ..problems.conv import ConvShape

COLS_BYTES = 64 << 20          # the columns of one chunk of images at most
SHORT_K = 64                   # fewer fields: cols @ the gradient pixel-major (27: 2x faster)
_WORKSPACE = threading.local()  # per thread: the im2col buffer (see _columns)


def im2col(s: ConvShape, per_image=False):
    """``cols[(c * Kh + ky) * Kw + kx][n * P + y * Wo + x] = data[n, c, y *
    sh + ky * dh - ph, x * sw + kx * dw - pw]`` (0 outside the input,
    ``P = Ho * Wo``): the receptive fields of one group's images side by
    side, float32; channels in parallel, columns in vectors.
    ``per_image``: ``cols[n][(c * Kh + ky) * Kw + kx][y * Wo + x]``, each
    image's fields a matrix of their own."""
    f = tp.Function("conv_im2col", params={})
    X = f.input("data", (s.n, s.ci, s.h, s.w), tp.float32)
    n, c = f.var("n", 0, s.n), f.var("c", 0, s.ci)
    ky, kx = f.var("ky", 0, s.kh), f.var("kx", 0, s.kw)
    y, x = f.var("y", 0, s.ho), f.var("x", 0, s.wo)
    iy, ix = y * s.sh + ky * s.dh - s.ph, x * s.sw + kx * s.dw - s.pw
    inside = (iy >= 0) & (iy < s.h) & (ix >= 0) & (ix < s.w)
    cols = f.computation("patch", [c, ky, kx, n, y, x], tp.select(inside, X[n, c, iy, ix], 0.0))
    field = (c * s.kh + ky) * s.kw + kx
    if per_image:
        cols.store_in(f.buffer("cols", (s.n, s.ci * s.kh * s.kw, s.ho * s.wo), tp.float32,
                               output=True), [n, field, y * s.wo + x])
    else:
        cols.store_in(f.buffer("cols", (s.ci * s.kh * s.kw, s.n * s.ho * s.wo), tp.float32,
                               output=True), [field, (n * s.ho + y) * s.wo + x])
    vector_loop(cols, "x", s.wo, host().lanes(4))
    cols.parallelize("c")
    return f


def _columns(k, m):
    """A ``k x m`` float32 tensor for the im2col, the calling thread's one
    buffer reused from call to call (grown when needed, at most
    :data:`COLS_BYTES` unless one image needs more): the columns are written
    whole, and a fresh buffer every call cost its page faults (58 ms for the
    58 MB of a 64-channel 112 x 112 layer at batch 2, against 2.4 ms
    written into memory already mapped)."""
    buf = getattr(_WORKSPACE, "cols", None)
    if buf is None or buf.numel() < k * m:
        import torch
        buf = _WORKSPACE.cols = torch_output((k * m,), torch.float32, zero=False)
    return buf[:k * m].view(k, m)


def grad_weight(g, x, s: ConvShape, gemm, batched_gemm=None):
    """The weights' gradient of a float32 convolution of one group
    (torch tensors ``g`` N x Co x Ho x Wo and ``x``, contiguous) by
    ``gemm(a, b)`` (the library's): per chunk of images, with ``M`` the
    chunk's pixels and ``K = Ci * Kh * Kw``: ``cols (K x M) @ grad^T (M x
    Co)`` where ``M >= K >= SHORT_K`` (the gradient read transposed in
    place), ``grad (Co x M) @ cols^T`` where ``M < K`` (the columns read
    transposed in place), and where ``K < SHORT_K`` ``cols @`` the gradient
    copied pixel-major (``M x Co``, read as stored: 2x faster than either
    for an RGB stem).  Measured at batch 2 and 16 on ResNet / MobileNet
    shapes; transposing the columns first never won.  With ``batched_gemm``
    (the library's), two images or more whose pixels are at least ``K``
    take :func:`_per_image` instead."""
    k, p = s.ci * s.kh * s.kw, s.ho * s.wo
    chunk = max(1, min(s.n, COLS_BYTES // max(1, 4 * k * p)))
    if batched_gemm is not None and s.n >= 2 and p >= k:
        return _per_image(g, x, s, batched_gemm, chunk)
    gw = None
    rows = k < SHORT_K
    # a short K (an RGB stem): the gradient pixel-major (N x Ho x Wo x Co,
    # one copy), each chunk's (images * P) x Co rows contiguous, B as stored
    g_rows = _pixel_major(g).view(s.n * p, s.co) if rows else None
    for i, m, cols in _chunk_columns(x, s, chunk):
        if rows:                    # K x Co: cols @ the gradient's rows
            prod = gemm(cols, g_rows[i * p:(i + m) * p]).t()
        else:
            # the chunk's gradient as Co x (images * P): its images side by side
            gc = g[i:i + m].reshape(m, s.co, p)
            gc = gc[0] if m == 1 else gc.transpose(0, 1).reshape(s.co, m * p)
            if m * p >= k:          # many pixels: K x Co, the gradient read transposed
                prod = gemm(cols, gc.t()).t()
            else:                   # few pixels: Co x K, the columns read transposed
                prod = gemm(gc, cols.t())
        gw = prod.contiguous() if gw is None else gw.add_(prod)
    return gw.reshape(s.co, s.ci, s.kh, s.kw)


def weight_grad(g, x, s: ConvShape, compiled, gemm, batched_gemm):
    """The float32 weights' gradient of a convolution of shape ``s`` (torch
    tensors ``g`` and ``x``, contiguous) by the fastest kernel that takes it,
    compiled by ``compiled(key, build)``; None for a grouped one neither
    depthwise nor taken by the blocked kernel, or an empty shape (the
    caller's plain kernel).  Depthwise: :func:`blocked_depthwise_grad_weight`
    where a vector divides the channels, else :func:`depthwise_grad_weight`;
    :func:`blocked_grad_weight` where it applies (grouped too); one group: a
    pointwise conv of one or two images per image ``grad (Co x P) @
    input^T`` (the input read
    transposed in place by the library's GEMM; with more images one GEMM
    over a chunk's columns is 2-3.6x faster at batch 16), else
    :func:`grad_weight`'s GEMMs over the im2col."""
    if min(s.n, s.ci, s.co, s.ho, s.wo) == 0:
        return None
    if s.groups == s.ci == s.co:
        if vector_of(s.co):
            return compiled(("depthwise_grad_weight_blocked", s),
                          lambda: blocked_depthwise_grad_weight(s))(data=x, grad=g)
        return compiled(("depthwise_grad_weight", s), lambda: depthwise_grad_weight(s))(data=x,
                                                                                       grad=g)
    if blocked_applies(s):
        return compiled(("grad_weight_blocked", s), lambda: blocked_grad_weight(s))(data=x, grad=g)
    if s.groups != 1:
        return None
    if (s.kh, s.kw, s.sh, s.sw, s.ph, s.pw) == (1, 1, 1, 1, 0, 0) and s.n <= 2:
        p, gw = s.ho * s.wo, None
        for i in range(s.n):
            part = gemm(g[i].reshape(s.co, p), x[i].reshape(s.ci, p).t())
            gw = part if gw is None else gw.add_(part)
        return gw
    return grad_weight(g, x, s, gemm, batched_gemm)


def _per_image(g, x, s: ConvShape, batched_gemm, chunk):
    """:func:`grad_weight` as one product per image, ``cols[n] (K x P) @
    grad[n]^T (P x Co)``, the images of a chunk one batched GEMM (the
    images split over the cores: one long product of few rows shared them
    badly) and summed: the columns image-major (``im2col(...,
    per_image=True)``), the gradient copied pixel-major once.  Measured
    against :func:`grad_weight`'s products, the median of 9 interleaved
    calls on this host's 2 cores: the 7x7 stem 7.5 -> 5.1 ms at batch 2,
    75 -> 48 at batch 16; MobileNet's 3x3 stem 1.7 -> 1.5; 64@56 3x3 3.9 ->
    3.6, 30 -> 26 at batch 16; where an image has fewer pixels than ``K``
    (128@28, 512@7 3x3) 10-50% slower, so those keep the others."""
    g_rows = _pixel_major(g).view(s.n, s.ho * s.wo, s.co)
    gw = None
    for i, m, cols in _chunk_columns(x, s, chunk, per_image=True):
        prod = batched_gemm(cols, g_rows[i:i + m]).sum(0)           # K x Co
        gw = prod if gw is None else gw.add_(prod)
    return gw.t().contiguous().reshape(s.co, s.ci, s.kh, s.kw)


def _pixel_major(g):
    """The gradient ``g`` (N x Co x Ho x Wo) copied pixel-major: N x Ho x Wo x Co."""
    return g.permute(0, 2, 3, 1).contiguous()


def _chunk_columns(x, s: ConvShape, chunk, per_image=False):
    """``(i, m, cols)`` per chunk of at most ``chunk`` images: the im2col of
    images ``i .. i + m`` (:func:`im2col`; ``per_image``: m x K x P) in the
    calling thread's buffer (:func:`_columns`), reused by the next chunk."""
    k, p = s.ci * s.kh * s.kw, s.ho * s.wo
    for i in range(0, s.n, chunk):
        m = min(chunk, s.n - i)
        part = ConvShape(m, s.ci, s.h, s.w, s.co, s.kh, s.kw, s.stride, s.padding, s.dilation)
        key = ("conv_im2col", part) + (("per_image",) if per_image else ())
        cols = _columns(k, m * p)
        yield i, m, kernel(key, lambda: im2col(part, per_image=per_image), None)(
            data=x[i:i + m], cols=cols.view(m, k, p) if per_image else cols)


def pooled_grad(s: ConvShape, pool):
    """``grad_conv`` (N, Co, Ho, Wo) from the convolution ``conv`` (its
    result, before ReLU) and the pooled output's ``grad``: the gradient of
    each window goes to its first maximum (row-major, as torch's
    max_pool2d scans) where the convolution is positive; 0 elsewhere
    (rows and columns past the last whole window included)."""
    f = tp.Function("conv_relu_maxpool_grad_mask", params={})
    ph, pw = s.ho // pool, s.wo // pool
    z = f.input("conv", (s.n, s.co, s.ho, s.wo), tp.float32)
    G = f.input("grad", (s.n, s.co, ph, pw), tp.float32)
    _, fi = window_first(f, z, s, pool)          # (parallel already)
    n, c = f.var("n", 0, s.n), f.var("c", 0, s.co)
    py, px = f.var("gy", 0, ph), f.var("gx", 0, pw)
    y, x = f.var("y", 0, s.ho), f.var("x", 0, s.wo)
    out = f.buffer("grad_conv", (s.n, s.co, s.ho, s.wo), tp.float32, output=True)
    stmts = []
    if s.ho % pool or s.wo % pool:
        # rows or columns past the last whole window: all zeros first
        gz = f.computation("zeros", [n, c, y, x], 0.0).store_in(out, [n, c, y, x])
        gz.vectorize("x", min(s.wo, host().lanes(4)))
        stmts.append(gz)
    # window by window: no division in an index, the window's pixels unrolled
    dy, dx = f.var("dy", 0, pool), f.var("dx", 0, pool)
    yy, xx = py * pool + dy, px * pool + dx
    take = (z[n, c, yy, xx] > 0.0) & (fi[n, c, py, px] == tp.cast(tp.int32, dy * pool + dx))
    hit = f.computation("grad_window", [n, c, py, dy, px, dx],
                        tp.select(take, G[n, c, py, px], 0.0))
    hit.store_in(out, [n, c, yy, xx])
    hit.unroll("dx", pool)
    par = "n" if s.n >= 2 * host().cores else "c"
    for stmt in stmts + [hit]:
        stmt.parallelize(par)
    return f


def _transposed_flip(w, groups):
    """The torch tensor ``w`` ``(Co, Ci/g, Kh, Kw)`` per group transposed to
    ``(Ci/g, Co/g)``, each kernel rotated by 180 degrees: ``(Ci, Co/g, Kh,
    Kw)``, contiguous and owned by the prepared-weights cache (the conv's
    packing of it is found by identity)."""
    import numpy as np
    import torch
    co, cig, kh, kw = w.shape
    cog = co // groups
    if w.dtype == torch.float32 and w.is_contiguous():     # in one pass
        out = flipped_items(w.numpy().reshape(groups, cog, cig, kh * kw),
                            np.empty((groups, cig, cog, kh * kw), np.float32))
        out = torch.from_numpy(out.reshape(groups * cig, cog, kh, kw))
    else:
        out = w.reshape(groups, cog, cig, kh, kw).transpose(1, 2).flip(-1, -2) \
            .reshape(groups * cig, cog, kh, kw).contiguous()
    own(out)
    return out


def flipped(weight, groups):
    """The weight of the convolution that maps an output gradient to the
    input gradient (:func:`_transposed_flip`), a torch tensor made once per
    value of ``weight`` (never stale)."""

    def make(arrays):       # (flipped into a new tensor: the read-only array is only read)
        return _transposed_flip(_tensor_of(arrays[0]), groups)
    return prepared("flipped_weight", [weight], make, extra=(groups,))


def flipped_packed(weight, vb, stride=1, phase=(0, 0)):
    """:func:`flipped` of a one-group ``weight`` (with a ``stride`` above 1:
    its sub-kernel of ``phase``, :func:`phase_weight`) already packed for
    the NCHWc conv in blocks of ``vb`` (:func:`schedules.core.transpose.flip_packed`:
    one pass, no flipped weight made), a NumPy array made once per value of
    ``weight`` (never stale)."""
    return prepared("flipped_nchwc_weight", [weight],
                    lambda a: flip_packed(a[0], vb, stride, phase), extra=(vb, stride, phase))


def _tensor_of(array):
    """A torch tensor over the read-only NumPy ``array`` (no copy), for a
    function that reads it only (torch warns of every non-writable array)."""
    import warnings

    import torch
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", UserWarning)
        return torch.from_numpy(array)


def grad_input(g, weight, s: ConvShape, conv2d, compiled, flipped_conv):
    """The input's gradient of a float32 convolution of shape ``s`` (square
    stride, padding and dilation) from the output's gradient ``g`` (a
    contiguous torch tensor) by ``conv2d`` (the library's), or None where
    the transposed convolution would need a negative padding (``padding >
    dilation * (kernel - 1)``).  A strided, undilated depthwise conv whose
    channels fill vectors: :func:`blocked_depthwise_grad_input`, compiled
    by ``compiled(key, build)``.  ``flipped_conv(x, weight, padding,
    dilation, groups, conv2d, stride=1, phase=(0, 0))``: the stride-1
    convolution of ``x`` with the flipped weight or a phase's flipped
    sub-kernel (:func:`schedules.plans.flipped_conv`)."""
    st, d = s.sh, s.dh
    if st > 1 and s.sw == st and d == s.dw == 1 \
            and s.groups == s.ci == s.co and vector_of(s.ci):
        return compiled(("depthwise_grad_input_blocked", s),
                        lambda: blocked_depthwise_grad_input(s))(grad=g, weight=weight)
    q = (d * (s.kh - 1) - s.ph, d * (s.kw - 1) - s.pw)
    if min(q) < 0:
        return None

    def through(x, padding, dilation):          # (the flipped weight made where it is used)
        return flipped_conv(x, weight, padding, dilation, s.groups, conv2d)
    if st == 1:
        return through(g, q, d)
    if (s.kh, s.kw, s.ph, s.pw) == (1, 1, 0, 0):
        # pointwise: every stride-th pixel has its gradient, the others 0
        out = g.new_zeros((s.n, s.ci, s.h, s.w))
        out[:, :, :(s.ho - 1) * st + 1:st, :(s.wo - 1) * st + 1:st] = through(g, 0, 1)
        return out
    if d == 1 and s.dw == 1 and s.sw == st and not s.groups == s.ci == s.co:
        return _phases(g, weight, s, conv2d, flipped_conv)
    # the gradient spread out by the stride, the rows and columns the stride
    # did not reach at the end added as zeros: a stride-1 convolution then
    # (a depthwise one's, its channels filling no vector, too: bound by
    # memory, its zeros' products cost less than the phases' four
    # convolutions and scatters; the blocked kernel beats both, batch 2:
    # 96@112 1.5 ms against 1.7 spread, 576@14 0.08 against 0.27)
    rh = (s.h + s.ph - q[0] - 1) % st
    rw = (s.w + s.pw - q[1] - 1) % st
    spread = g.new_zeros((s.n, s.co, (s.ho - 1) * st + 1 + rh, (s.wo - 1) * st + 1 + rw))
    spread[:, :, :(s.ho - 1) * st + 1:st, :(s.wo - 1) * st + 1:st] = g
    return through(spread, q, d)


def phase_weight(weight, groups, stride, phase):
    """The sub-kernel of ``phase`` ``(rh, rw)`` of a stride-``stride``
    convolution's input gradient: ``weight[:, :, rh::stride, rw::stride]``
    rotated by 180 degrees and group-transposed as in :func:`flipped`
    (``None`` for a phase no tap reaches), made once per value of
    ``weight`` and owned by the prepared-weights cache (each phase its own:
    a phase whose convolution runs on its sub-kernel packed in one pass
    makes none, :func:`schedules.plans.flipped_conv`)."""
    rh, rw = phase

    def make(arrays):
        sub = _tensor_of(arrays[0])[:, :, rh::stride, rw::stride]
        return _transposed_flip(sub.contiguous(), groups) if sub.numel() else None
    return prepared("phase_weight", [weight], make, extra=(groups, stride, phase))


def phase_taps(s: ConvShape):
    """The taps ``(th, tw)`` of each phase ``(rh, rw)`` of a stride-``s.sh`` conv's
    input gradient, row-major (:func:`phase_weight`): ``rh, rh + stride, ...``
    below Kh by ``rw, rw + stride, ...`` below Kw; ``(0, 0)`` where none."""
    st = s.sh
    taps = [(len(range(rh, s.kh, st)), len(range(rw, s.kw, st)))
            for rh in range(st) for rw in range(st)]
    return [(th, tw) if th and tw else (0, 0) for th, tw in taps]


def _phases(g, weight, s: ConvShape, conv2d, flipped_conv):
    """The input gradient of a strided, undilated convolution as ``stride**2``
    stride-1 convolutions of ``g``, one per phase ``(rh, rw)`` of the input's
    pixels (those ``i`` with ``(i + padding) % stride == r``), each with the
    taps ``r, r + stride, ...`` only: the exact multiply-adds, where the
    gradient spread out by the stride multiplies zeros ``stride**2 - 1``
    times in ``stride**2``.  Input pixel ``i = j * stride + r - padding``
    of a phase is its convolution's output ``j`` (padding ``taps - 1``:
    every ``j`` a tap reaches); pixels no tap reaches are 0.  Each phase's
    convolution by ``flipped_conv`` (:func:`schedules.plans.flipped_conv`:
    where it runs ``spatial_pack``, on the sub-kernel flipped and packed in
    one pass, no sub-kernel made)."""
    st = s.sh
    taps = phase_taps(s)

    def axis(r, pad, size, out, taps):
        """(first input pixel of the phase, its pixels, the output index of
        the first, how many of them a tap reaches) along one axis."""
        first = (r - pad) % st
        count = max(0, -(-(size - first) // st))
        j0 = (first + pad - r) // st
        return first, count, j0, max(0, min(count, out + taps - 1 - j0)) if taps else 0

    parts = []
    for idx, (th, tw) in enumerate(taps):
        rh, rw = divmod(idx, st)
        parts.append((axis(rh, s.ph, s.h, s.ho, th), axis(rw, s.pw, s.w, s.wo, tw)))
    short = any(count != have for part in parts for _, count, _, have in part)
    gx = (g.new_zeros if short else g.new_empty)((s.n, s.ci, s.h, s.w))
    for idx, ((th, tw), ((fh, _, jh, nh), (fw, _, jw, nw))) in enumerate(zip(taps, parts)):
        if nh == 0 or nw == 0:          # (none where the phase has no tap)
            continue
        y = flipped_conv(g, weight, (th - 1, tw - 1), 1, s.groups, conv2d, stride=st,
                         phase=divmod(idx, st))
        gx[:, :, fh:fh + (nh - 1) * st + 1:st, fw:fw + (nw - 1) * st + 1:st] = \
            y[:, :, jh:jh + nh, jw:jw + nw]
    return gx


def _padded_channel(f, X, s: ConvShape, block=1):
    """``x_padded[c, n, y, x]``: the zero-padded input, channel-major, stored
    ``block`` channels' images at a time (``x_channel``, for the caller to
    compute per block of channels, each thread its own), not a full padded
    copy: fresh memory that size cost its page faults per call."""
    pc, pn = f.var("pc", 0, s.ci), f.var("pn", 0, s.n)
    py, px = f.var("py", 0, s.hp), f.var("px", 0, s.wp)
    inside = (py >= s.ph) & (py < s.h + s.ph) & (px >= s.pw) & (px < s.w + s.pw)
    xp = f.computation("x_padded", [pc, pn, py, px],
                       tp.select(inside, X[pn, pc, py - s.ph, px - s.pw], 0.0))
    if block == 1:
        xp.store_in(f.buffer("x_channel", (s.n, s.hp, s.wp), tp.float32), [pn, py, px])
    else:
        xp.store_in(f.buffer("x_channel", (block, s.n, s.hp, s.wp), tp.float32),
                    [pc % block, pn, py, px])
    return xp


def depthwise_grad_weight(s: ConvShape):
    """``grad_weight[c, ky, kx] = sum_{n, y, x} grad[n, c, y, x] * data[n,
    c, y * sh + ky * dh - ph, x * sw + kx * dw - pw]`` of a depthwise
    convolution (``groups == Ci == Co``): channels in parallel, the columns
    in vectors whose lanes are summed once per tap (their partial sums kept
    in registers over the images and rows; a strided conv reads the input's
    columns strided)."""
    f = tp.Function("conv_depthwise_grad_weight", params={})
    X = f.input("data", (s.n, s.ci, s.h, s.w), tp.float32)
    G = f.input("grad", (s.n, s.co, s.ho, s.wo), tp.float32)
    c, ky, kx = f.var("c", 0, s.co), f.var("ky", 0, s.kh), f.var("kx", 0, s.kw)
    n, y, x = f.var("n", 0, s.n), f.var("y", 0, s.ho), f.var("x", 0, s.wo)
    xp = _padded_channel(f, X, s)
    dw = f.computation("grad_weight", [c, ky, kx], 0.0)
    dw[c, ky, kx] += G[n, c, y, x] * xp[c, n, y * s.sh + ky * s.dh, x * s.sw + kx * s.dw]
    lanes = host().lanes(4)
    u = dw.update
    if s.wo >= lanes:
        u.split("x", lanes, names=("x0", "x1"))
        u.vectorize("x1", lanes)
    elif s.wo > 1:                  # a short row: one partial vector
        u.vectorize("x", s.wo)
    if s.wo > 1:
        u.accumulate_locally("n", allow_reassociation=True)
    u.parallelize("c")
    dw.parallelize("c")
    xp.compute_at(u, "c")
    return f


def vector_of(channels, least=8) -> int:
    """The channels per vector of the blocked gradient kernels: the SIMD
    lanes, or half or a quarter of them (at least ``least``), that divide
    ``channels``; 0: none."""
    lanes = host().lanes(4)
    return next((v for v in (lanes, lanes // 2, lanes // 4) if v >= least and channels % v == 0),
                0)


def group_vector(s: ConvShape) -> int:
    """:func:`vector_of` a group's output channels (a grouped convolution's
    blocks each inside one group: 4 channels and up)."""
    return vector_of(s.co // s.groups, 8 if s.groups == 1 else 4)


def _packed_grad(f, G, s: ConvShape, vb):
    """``grad_packed[b][n][y][x][v]``: the output's gradient, VB channels a
    vector (vectorised over them)."""
    gb, gn, gy, gx, gv = (f.var(nm, 0, e) for nm, e in
                          (("gb", s.co // vb), ("gn", s.n), ("gy", s.ho), ("gx", s.wo),
                           ("gv", vb)))
    gp = f.computation("grad_packed", [gb, gn, gy, gx, gv], G[gn, gb * vb + gv, gy, gx])
    gp.vectorize("gv", vb)
    return gp


def _sums_in_registers(u, s: ConvShape, outer, pixels, vb, channels=()):
    """The weight-gradient update ``u`` scheduled as sums in registers: the
    loops ``outer``, then the pixels summed over, inside them the loops
    ``channels`` (blocks of output or input channels, unrolled) and every tap
    (unrolled) of a kernel of at most 12 (else a row: ``ky`` before the
    pixels), the VB channels of ``v`` a vector."""
    every_tap = s.kh * s.kw <= TAPS
    u.reorder(*(outer + pixels + channels + ("ky", "kx", "v") if every_tap
                else outer + ("ky",) + pixels + channels + ("kx", "v")))
    for loop in channels:
        u.unroll(loop)
    if every_tap:
        u.unroll("ky", s.kh)
    u.unroll("kx", s.kw)
    u.vectorize("v", vb)


TAPS = 12                   # the sums a register block holds per vector of channels
FRESH_BYTES = 128 << 10     # glibc's first mmap threshold: larger blocks are fresh pages
BLOCKED_PIXELS = 256    # the blocked kernel's least pixels (images x Ho x Wo) to sum over


def blocked_applies(s: ConvShape) -> bool:
    """Whether :func:`blocked_grad_weight` takes ``s`` (and, measured, beats
    the GEMMs of :func:`grad_weight`): a group's Co a multiple of a vector
    (or of half of one; grouped, of a quarter) and at least :data:`BLOCKED_PIXELS` pixels over the
    images -- fewer sum too briefly to pay for a block's setup (512@7, 3x3,
    two images: 5.1 ms against the GEMMs' 3.0; sixteen images 19.2 / 19.3)
    -- and, for a block of several input channels (:func:`channel_block`),
    their padded images in half of L2 (16 -> 96 1x1 at 112x112, two images,
    9.8 ms against 1.1; 144 -> 24 at 56x56 0.50 against 0.90, torch 0.49).
    Batch 2 on this host's 2 cores: 64@56 3x3 2.2 ms against 3.2 (torch
    2.5), 256@14 2.4 / 2.8, the 7x7 stride-2 stem 2.5 / 5.1 (torch 2.7),
    MobileNet's 3x3 stride-2 stem 0.38 / 1.13."""
    cib = channel_block(s)
    block = cib * s.n * s.hp * s.wp * 4             # a block's padded input, bytes
    return (group_vector(s) > 0 and s.n * s.ho * s.wo >= BLOCKED_PIXELS
            and (cib == 1 or block <= host().l2 // 2) and not _gemms_win(s, block))


def _gemms_win(s: ConvShape, block) -> bool:
    """Whether the GEMMs beat the blocked kernel on a 1x1 convolution of
    one group, unpadded, at most two images (a stride-1 one's per-image
    GEMMs, a strided one's im2col GEMMs).  The blocked kernel makes each
    block of input channels' images once per block of output channels, in
    a buffer allocated in the loop (above :data:`FRESH_BYTES`, fresh pages
    from the system each time): the GEMMs win at stride 1 with more than
    four blocks of output channels and such a buffer (32 -> 192 at 56x56,
    two images: 7.3 ms against 0.78; 128 -> 256 12-17 against 2.9; 144 ->
    24, three blocks: 0.64 against 1.05), and at any stride with a large
    weight (256 -> 512 at 28x28: 2.9 against 2.4; stride 2 at 56x56: 4.6
    against 3.1)."""
    if (s.kh, s.kw, s.ph, s.pw) != (1, 1, 0, 0) or s.n > 2 or s.groups != 1:
        return False
    blocks = s.co // group_vector(s)
    return ((s.sh, s.sw) == (1, 1) and blocks > 4 and block >= FRESH_BYTES) \
        or s.co * s.ci >= 1 << 17


def channel_block(s: ConvShape) -> int:
    """Input channels per register block of :func:`blocked_grad_weight`: a
    kernel of few taps (a 1x1 has one) sums a block of them, a divisor of
    group's Ci, for :data:`TAPS` sums in all."""
    return largest_divisor(s.ci // s.groups, max(1, TAPS // (s.kh * s.kw)))


def out_pairs(s: ConvShape, vb) -> bool:
    """Whether :func:`blocked_grad_weight` sums two blocks of output channels
    at once (twice the taps' sums in registers, each input value broadcast
    once for both): a kernel of 7 to 12 taps (one input channel a block,
    every tap summed over the pixels at once), an even count of blocks in
    each group.  Batch 2, 3x3, 2 cores: 64@56 2.36 ms against 2.99, 128@28
    2.59 / 2.94, 256@14 3.38 / 3.84, 32@112 2.88 / 4.49; four blocks spilled
    the sums (3.9 ms at 64@56); a 5x5's rows of taps ran slower paired (3.3
    / 2.7 ms at 64 -> 96 @28), a 7x7 stem even."""
    return 6 < s.kh * s.kw <= TAPS and (s.co // s.groups // vb) % 2 == 0


def blocked_grad_weight(s: ConvShape, vb=None, pair=None):
    """``grad_weight[co, ci, ky, kx] = sum_{n, y, x} grad[n, co, y, x] *
    data[n, ci, y * sh + ky * dh - ph, x * sw + kx * dw - pw]`` of a dense
    convolution, no column matrix (grouped: ``ci`` of the block's group,
    each block of channels inside one): the gradient packed
    ``[Co/VB][N][Ho][Wo][VB]`` (VB output channels a vector, ``vb``,
    dividing a group's Co), and per (block of channels, input channel) that channel's
    padded images (``x_channel``, each thread its own) and the sums of the
    taps kept in registers over every pixel -- VB channels x the taps
    (every tap of a kernel of at most 12, else a row of them), one vector
    load of the gradient and one broadcast of the input per tap and pixel
    (with ``pair``, default :func:`out_pairs`: two blocks of channels summed
    at once, two loads of the gradient per broadcast), then written out ``Co
    x Ci x Kh x Kw``.  Blocks of channels in parallel (input channels where
    there are fewer blocks than cores)."""
    vb = vb or group_vector(s)
    cog, cig = s.co // s.groups, s.ci // s.groups
    if not vb or cog % vb:
        raise ValueError(f"blocked_grad_weight: needs a group's Co a multiple of the vector "
                         f"(got {s.co} channels, groups={s.groups}, vb={vb})")
    cob = s.co // vb
    f = tp.Function("conv_grad_weight_blocked", params={})
    X = f.input("data", (s.n, s.ci, s.h, s.w), tp.float32)
    G = f.input("grad", (s.n, s.co, s.ho, s.wo), tp.float32)
    cib = channel_block(s)
    gp = _packed_grad(f, G, s, vb)
    xp = _padded_channel(f, X, s, cib)
    b, c, ky, kx, v = (f.var(nm, 0, e) for nm, e in
                       (("b", cob), ("c", cig), ("ky", s.kh), ("kx", s.kw), ("v", vb)))
    n, y, x = f.var("n", 0, s.n), f.var("y", 0, s.ho), f.var("x", 0, s.wo)
    chan = c if s.groups == 1 else (b // (cog // vb)) * cig + c      # (the block's group)
    acc = f.computation("sums", [b, c, ky, kx, v], 0.0)
    acc[b, c, ky, kx, v] += gp[b, n, y, x, v] * xp[chan, n, y * s.sh + ky * s.dh,
                                                   x * s.sw + kx * s.dw]
    u = acc.update
    pair = out_pairs(s, vb) if pair is None else pair
    if cib > 1:
        u.split("c", cib, names=("c0", "c1"))
    if pair:
        u.split("b", 2, names=("b0", "b1"))
    outer_b = "b0" if pair else "b"
    _sums_in_registers(u, s, (outer_b, "c0" if cib > 1 else "c"), ("n", "y", "x"), vb,
                       ("b1",) * pair + (("c1",) if cib > 1 else ()))
    acc.vectorize("v", vb)
    co, ci, oy, ox = (f.var(nm, 0, e) for nm, e in
                      (("co", s.co), ("ci", cig), ("oy", s.kh), ("ox", s.kw)))
    out = f.computation("grad_weight", [co, ci, oy, ox], acc[co // vb, ci, oy, ox, co % vb])
    outer_c = "c0" if cib > 1 else "c"
    u.parallelize(outer_b if cob >> pair >= host().cores else outer_c)
    acc.parallelize("b")
    gp.parallelize("gb" if cob >= host().cores else "gn")
    out.parallelize("co")
    xp.compute_at(u, outer_c)
    return f


def blocked_depthwise_grad_weight(s: ConvShape, vb=None):
    """The weights' gradient of a depthwise convolution (``groups == Ci ==
    Co``) with the channels in the vector lanes: per block of VB channels
    (``vb`` dividing Co) and image, the image's padded input and its
    gradient packed ``[Hp][Wp][VB]`` / ``[Ho][Wo][VB]`` (each thread its
    own), and the taps' sums (every tap of a kernel of at most 12, else a
    row of them) kept in registers over the image's pixels: vector loads
    only, strided or not, and no lanes summed at the end.  Blocks in
    parallel.  Batch 2 on 2 cores, against :func:`depthwise_grad_weight`:
    32@112 0.56 / 2.36 ms (torch 0.29), 96@112 stride 2 1.2 / 2.1, 384@14
    0.09 / 0.46; batch 16 1.4-4.3x faster."""
    vb = vb or vector_of(s.co)
    if not vb or s.co % vb or not s.groups == s.ci == s.co:
        raise ValueError(f"blocked_depthwise_grad_weight: needs a depthwise conv with channels "
                         f"a multiple of the vector (got {s.ci} -> {s.co} channels, groups="
                         f"{s.groups}, vb={vb})")
    nb = s.co // vb
    f = tp.Function("conv_depthwise_grad_weight_blocked", params={})
    X = f.input("data", (s.n, s.ci, s.h, s.w), tp.float32)
    G = f.input("grad", (s.n, s.co, s.ho, s.wo), tp.float32)
    xpk = packed_channels(f, X, s, vb)
    gpk = _packed_grad(f, G, s, vb)
    gpk.store_in(f.buffer("grad_block", (s.ho, s.wo, vb), tp.float32), gpk.vars[2:])
    b, n, ky, kx, v = (f.var(nm, 0, e) for nm, e in
                       (("b", nb), ("n", s.n), ("ky", s.kh), ("kx", s.kw), ("v", vb)))
    y, x = f.var("y", 0, s.ho), f.var("x", 0, s.wo)
    acc = f.computation("sums", [b, ky, kx, v], 0.0)
    acc[b, ky, kx, v] += gpk[b, n, y, x, v] * xpk[n, b, y * s.sh + ky * s.dh,
                                                 x * s.sw + kx * s.dw, v]
    u = acc.update
    _sums_in_registers(u, s, ("b", "n"), ("y", "x"), vb)
    acc.vectorize("v", vb)
    c, oy, ox = f.var("c", 0, s.co), f.var("oy", 0, s.kh), f.var("ox", 0, s.kw)
    out = f.computation("grad_weight", [c, oy, ox], acc[c // vb, oy, ox, c % vb])
    u.parallelize("b")
    acc.parallelize("b")
    out.parallelize("c")
    xpk.compute_at(u, "n")
    gpk.compute_at(u, "n")
    return f


def blocked_depthwise_grad_input(s: ConvShape, vb=None):
    """The input's gradient of a strided depthwise convolution (``groups ==
    Ci == Co``, square stride above 1, no dilation) with the channels in the
    vector lanes and no product by a zero: per image and block of VB
    channels, the output's gradient packed ``[Ho + pads][Wo + pads][VB]``
    (zero-padded: every phase reads in range), and per phase ``(ry, rx)``
    of the input's pixels (``iy = stride * jy + ry``) the sum of that
    phase's taps only (``ky`` with ``(ry + ph - ky) % stride == 0``, read
    at ``oy = jy + (ry + ph - ky) // stride``) into a tile ``[Jy][Jx][VB]``,
    then written to its pixels of the NCHW result.  Blocks in parallel (images
    with two a core)."""
    vb = vb or vector_of(s.ci)
    st = s.sh
    if not vb or s.ci % vb or not s.groups == s.ci == s.co or st < 2 or s.sw != st \
            or (s.dh, s.dw) != (1, 1):
        raise ValueError(f"blocked_depthwise_grad_input: needs a strided, undilated depthwise "
                         f"conv with channels a multiple of the vector (got {s.ci} -> {s.co} "
                         f"channels, groups={s.groups}, stride {(s.sh, s.sw)}, dilation "
                         f"{(s.dh, s.dw)}, vb={vb})")
    nb = s.ci // vb

    def phases(r, pad, size, out, taps):
        """Per phase ``r`` of one axis: (its pixels, [(tap, offset)])."""
        return [(-(-(size - q) // st), [(k, (q + pad - k) // st) for k in range(taps)
                                        if (q + pad - k) % st == 0]) for q in range(r)]
    rows, cols = phases(st, s.ph, s.h, s.ho, s.kh), phases(st, s.pw, s.w, s.wo, s.kw)

    def pads(axis, out):
        reach = [j + d for count, taps in axis for j in (0, count - 1) for _, d in taps
                 if count > 0]
        return max([0] + [-r for r in reach]), max([0] + [r - (out - 1) for r in reach])
    (top, bottom), (left, right) = pads(rows, s.ho), pads(cols, s.wo)
    hp, wp = s.ho + top + bottom, s.wo + left + right
    f = tp.Function("conv_depthwise_grad_input_blocked", params={})
    G = f.input("grad", (s.n, s.co, s.ho, s.wo), tp.float32)
    W = f.input("weight", (s.co, 1, s.kh, s.kw), tp.float32)
    result = f.buffer("grad_input", (s.n, s.ci, s.h, s.w), tp.float32, output=True)
    wb, wy, wx, wv = (f.var(nm, 0, e) for nm, e in
                      (("wb", nb), ("wky", s.kh), ("wkx", s.kw), ("wv", vb)))
    wpk = f.computation("w_packed", [wb, wy, wx, wv], W[wb * vb + wv, 0, wy, wx])
    wpk.parallelize("wb")
    n, b = f.var("n", 0, s.n), f.var("b", 0, nb)
    par = "n" if s.n >= 2 * host().cores else "b"
    with f.nest(n, b):
        gy, gx, gv = f.var("gy", 0, hp), f.var("gx", 0, wp), f.var("gv", 0, vb)
        inside = (gy >= top) & (gy < s.ho + top) & (gx >= left) & (gx < s.wo + left)
        gpk = f.computation("grad_padded", [n, b, gy, gx, gv],
                            tp.select(inside, G[n, b * vb + gv, gy - top, gx - left], 0.0))
        gpk.store_in(f.buffer("grad_block", (hp, wp, vb), tp.float32), [gy, gx, gv])
        gpk.vectorize("gv", vb)
        stmts = [gpk]
        for ry, (count_y, taps_y) in enumerate(rows):
            for rx, (count_x, taps_x) in enumerate(cols):
                if not count_y or not count_x:
                    continue
                name = f"phase{ry}{rx}"
                jy, jx, v = (f.var(f"{name}_{a}", 0, e) for a, e in
                             (("y", count_y), ("x", count_x), ("v", vb)))
                value = 0.0
                for ky, dy in taps_y:
                    for kx, dx in taps_x:
                        term = gpk[n, b, jy + dy + top, jx + dx + left, v] * wpk[b, ky, kx, v]
                        value = term if isinstance(value, float) else value + term
                ph = f.computation(name, [n, b, jy, jx, v], value)
                ph.store_in(f.buffer(f"{name}_tile", (count_y, count_x, vb), tp.float32),
                            [jy, jx, v])
                ph.vectorize(f"{name}_v", vb)
                oy, ox, ov = (f.var(f"{name}_o{a}", 0, e) for a, e in
                              (("y", count_y), ("x", count_x), ("v", vb)))
                out = f.computation(f"{name}_written", [n, b, ov, oy, ox], ph[n, b, oy, ox, ov])
                out.store_in(result, [n, b * vb + ov, st * oy + ry, st * ox + rx])
                stmts += [ph, out]
    for stmt in stmts:
        stmt.parallelize(par)
    return f

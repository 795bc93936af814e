"""Pieces several convolution solvers schedule with: the inputs every conv
Function declares, the zero-padded input, a loop in vectors, the pooling
windows' first maxima, the run of a solver without a grouped schedule
once per group (:func:`by_group`), and the base of every convolution solver
(:class:`ConvSolver`: what a call returns around the kernel's result)."""
from __future__ import annotations

from dataclasses import replace

import tiramisu_py as tp

from ..core import arrays as A
from ..core.solver import Solver
from ..host import host
from ..problems.conv import ConvShape


def conv_inputs(name, s: ConvShape, bias, dtype=tp.float32, packed_vb=None):
    """``(f, data, weight, bias or None)``: a Function ``name`` with the
    inputs of a convolution of shape ``s``, of ``dtype``.  ``packed_vb``:
    the weight is given packed instead, ``w_packed[Co/VB][Ci][Kh][Kw][VB]``
    (:func:`schedules.weights.conv.pack_weight`, made once per weight by
    the solver)."""
    f = tp.Function(name, params={})
    X = f.input("data", (s.n, s.ci, s.h, s.w), dtype)
    if packed_vb:
        Wt = f.input("w_packed", (-(-s.co // packed_vb), s.ci // s.groups, s.kh, s.kw, packed_vb),
                     dtype)
    else:
        Wt = f.input("weight", (s.co, s.ci // s.groups, s.kh, s.kw), dtype)
    B = f.input("bias", (s.co,), dtype) if bias else None
    return f, X, Wt, B


def residual_input(f, s: ConvShape, dtype=tp.float32):
    """The input ``residual`` of a conv kernel with a residual epilogue: an
    array of the result's shape (N x Co x Ho x Wo)."""
    return f.input("residual", (s.n, s.co, s.ho, s.wo), dtype)


def epilogue(value, activation, residual=None):
    """``value`` (an expression of the convolution's result) plus
    ``residual`` (an expression of the residual at the same point, or None)
    with ``activation`` ("relu", "relu6" or None) applied: NaN-propagating
    ``max`` / ``min``, as torch's ``relu`` / ``relu6`` keep a NaN."""
    if residual is not None:
        value = value + residual
    if activation is None:
        return value
    value = tp.max(value, 0.0)
    return tp.min(value, 6.0) if activation == "relu6" else value


def padded(f, X, s: ConvShape, name="xp"):
    """The zero-padded input (a computation), or ``X`` itself without padding."""
    ph, pw = s.ph, s.pw
    if ph == pw == 0:
        return X
    hp, wp = s.hp, s.wp
    n, c = f.var(f"{name}_n", 0, s.n), f.var(f"{name}_c", 0, s.ci)
    y, x = f.var(f"{name}_y", 0, hp), f.var(f"{name}_x", 0, wp)
    inside = (y >= ph) & (y < s.h + ph) & (x >= pw) & (x < s.w + pw)
    xp = f.computation(name, [n, c, y, x], tp.select(inside, X[n, c, y - ph, x - pw], 0.0))
    xp.parallelize(c if s.n < 2 * host().cores else n)
    return xp


def packed_channels(f, X, s: ConvShape, vb):
    """``x_packed[n][C/VB][Hp][Wp][VB]``: the input zero-padded, VB channels
    a vector (vectorised over them), stored one (image, block of channels)
    at a time in ``x_block`` ``[Hp][Wp][VB]``, for the caller to compute
    per image and block (the depthwise convolution and its weights'
    gradient: channels in the lanes, no transpose left for a kernel)."""
    pn, pb, py, px, pv = (f.var(nm, 0, e) for nm, e in
                          (("pn", s.n), ("pb", s.ci // vb), ("py", s.hp), ("px", s.wp),
                           ("pv", vb)))
    inside = (py >= s.ph) & (py < s.h + s.ph) & (px >= s.pw) & (px < s.w + s.pw)
    xpk = f.computation("x_packed", [pn, pb, py, px, pv],
                        tp.select(inside, X[pn, pb * vb + pv, py - s.ph, px - s.pw], 0.0))
    xpk.vectorize("pv", vb)
    xpk.store_in(f.buffer("x_block", (s.hp, s.wp, vb), tp.float32), [py, px, pv])
    return xpk


def taps(f, s: ConvShape, y, x, names=("ky", "kx")):
    """The loops ``(ky, kx)`` over the kernel taps of output ``(y, x)`` that
    read the input, not its padding: ``0 <= y * sh + ky * dh - ph < h``
    (and so for ``kx``).  A tap on the padding is skipped, not multiplied by
    zero, as oneDNN's convolution does: a zero-padded border neither costs
    a product (9% of a 3x3 convolution's at 14x14) nor turns ``0 * inf``
    into a NaN.  Every "ordered" CPU solver of conv2d sums over these taps
    (the same products in the same order, so the same bits).  Columns are
    clipped at stride 1 only: with a stride the first column of a tile that
    a tap reaches is a floor division, which the column tiles' peeling
    (:mod:`codegen.simplify`) does not take apart, and an unpeeled tile
    loses its registers (ResNet-18 b2 was 12-18% slower); a strided
    convolution's taps on the left and right padding are multiplied by its
    zeros, as before."""
    ky = _tap_loop(f, names[0], y, s.sh, s.dh, s.ph, s.h, s.kh)     # (declared first: the
    kx = (_tap_loop(f, names[1], x, s.sw, s.dw, s.pw, s.w, s.kw)    # sums run ky, then kx)
          if s.sw == 1 else f.var(names[1], 0, s.kw))
    return ky, kx


def _tap_loop(f, name, o, stride, dilation, pad, size, k):
    """``k`` taps of output ``o`` reading ``o * stride + tap * dilation - pad``:
    those with ``0 <= that < size``."""
    if pad == 0:            # (no output reads outside the input)
        return f.var(name, 0, k)
    first, last = pad - o * stride, size - 1 + pad - o * stride    # tap * dilation in [first, last]
    if dilation == 1:
        return f.var(name, tp.max(0, first), tp.min(k, last + 1))
    return f.var(name, tp.max(0, (first + dilation - 1) // dilation),
                 tp.min(k, last // dilation + 1))


def vector_loop(stmt, loop, extent, lanes):
    """``loop`` (of ``extent`` iterations) of ``stmt`` in vectors of
    ``lanes``: split by the lanes when at least two vectors long, else one
    (partial) vector."""
    if extent >= 2 * lanes:
        stmt.split(loop, lanes, names=(f"{loop}0", f"{loop}1"))
        stmt.vectorize(f"{loop}1", lanes)
    elif extent > 1:
        stmt.vectorize(loop, extent)


def window_first(f, z, s: ConvShape, pool):
    """``(m, first)``: per ``pool x pool`` window of ``z`` (N x Co x Ho x
    Wo, floor mode) its maximum ``m`` and the position ``dy * pool + dx``
    of the maximum's first occurrence, row-major as torch's max_pool2d
    scans; images in parallel when there are two a core, else channels."""
    n, c = f.var("wn", 0, s.n), f.var("wc", 0, s.co)
    py, px = f.var("py", 0, s.ho // pool), f.var("px", 0, s.wo // pool)
    vals = [(dy * pool + dx, z[n, c, py * pool + dy, px * pool + dx])
            for dy in range(pool) for dx in range(pool)]
    best = vals[0][1]
    for _, v in vals[1:]:
        best = tp.max(best, v)
    m = f.computation("window_max", [n, c, py, px], best)
    first = tp.cast(tp.int32, pool * pool)
    for k, v in reversed(vals):
        first = tp.select(v == m[n, c, py, px], tp.cast(tp.int32, k), first)
    fi = f.computation("window_first", [n, c, py, px], first)
    par = n if s.n >= 2 * host().cores else c
    m.parallelize(par)
    fi.parallelize(par)
    return m, fi


def by_group(run, p, args):
    """``run(p, args)`` of a solver whose schedule takes ``groups=1``, for
    any ``groups``: once per group, on the group's problem
    (:meth:`schedules.problems.conv.ConvProblem.per_group`: one kernel for
    every group) and arguments (its channels), the results joined along the
    channels.  Each output is the same sum as with the grouped loop nest."""
    g = p.shape.groups
    if g == 1:
        return run(p, args)
    one = p.per_group()
    return A.concat_channels([run(one, args.group(k, g)) for k in range(g)])


class ConvSolver(Solver):
    """A solver of a convolution problem (conv2d, the fused block): its
    :meth:`solve` is what the public call returns."""

    def solve(self, p, args):
        """torch's empty result for a degenerate problem (no kernel run),
        else :meth:`run`'s with the residual and the activation its kernels
        do not apply (:func:`epilogue_after`), without the batch axis for an
        unbatched input."""
        out = args.zeros(p) if p.degenerate else self.result(p, args)
        return out[0] if args.unbatched else out

    def result(self, p, args, values=None):
        """:meth:`run`'s result of :meth:`problem_run` with the residual and
        the activation its kernels do not apply (:func:`epilogue_after`)."""
        ran = self.problem_run(p)
        given = args if ran.residual else replace(args, r=None)
        out = self.run(ran, given) if values is None else self.run(ran, given, values)
        return epilogue_after(out, p, ran, args.r, self.activations)

    def problem_run(self, p):
        """The problem its kernels run for ``p``: ``p``, or without its
        epilogue (:meth:`~schedules.problems.conv.ConvProblem.plain`) where
        ``p`` has a residual and the kernels add none."""
        return p.plain() if p.residual and not self.residual else p


def epilogue_after(out, p, ran, residual, activations):
    """``out``, the result of a kernel of problem ``ran`` applying
    ``activations``, completed to ``p``'s epilogue in place: ``residual``
    added where ``ran`` has none, then ``p.activation`` where the kernel did
    not apply it (:func:`schedules.core.arrays.activate`)."""
    if p.residual and not ran.residual:
        A.add_into(out, residual)
    if p.activation is not None and (ran.activation is None or ran.activation not in activations):
        A.activate(out, p.activation)
    return out


class PerGroupSolver(ConvSolver):
    """A convolution solver whose schedule is of one group: :meth:`run`
    runs :meth:`run_group` once per group (:func:`by_group`)."""

    def run(self, p, args, values=None):
        return by_group(lambda q, a: self.run_group(q, a, values), p, args)

    def run_group(self, p, args, values=None):
        """One group's result (``p`` and ``args`` of ``groups=1``)."""
        raise NotImplementedError

    def runner(self, p):
        """One group's kernel found once (:meth:`group_runner`), or per
        group as :meth:`run`."""
        return self.group_runner(p) if p.shape.groups == 1 else super().runner(p)

    def group_runner(self, p):
        """``args -> result`` of a one-group ``p``, its kernel found once
        (the default: :meth:`run_group` each call)."""
        return lambda args: self.run_group(p, args)

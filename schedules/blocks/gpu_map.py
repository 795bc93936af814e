"""Pieces the GPU convolution solvers share: the check of a schedule's
arguments and the mapping of a copy-like computation onto blocks and threads."""
from __future__ import annotations

from ..problems.conv import ConvShape

THREADS = 128            # threads per block the default tiles aim at


def check_shape(op, shape, bias):
    """The arguments every GPU conv schedule takes: a ConvShape and a bool."""
    if not isinstance(shape, ConvShape):
        raise TypeError(f"{op}: shape must be a schedules.problems.conv.ConvShape, not "
                        f"{type(shape).__name__}")
    if not isinstance(bias, bool):
        raise TypeError(f"{op}: bias must be a bool (whether the function takes a bias "
                        f"argument), not {bias!r}")


def map_rows(comp, blocks, y, x, width, serial=(), threads=THREADS):
    """A copy-like computation mapped to the GPU: the loops ``blocks`` on
    block.z, .y, .x (outermost first), then the loops ``serial``; rows ``y``
    and columns ``x`` split into thread tiles (at most 64 columns, ``threads``
    in all) on thread.y/.x, their outer parts (``y0``, ``x0``) block loops
    when named in ``blocks``, else serial in the block."""
    tx = min(64, width)
    comp.split(y, max(1, threads // tx)).split(x, tx)
    rest = [v for v in (y + "0", x + "0") if v not in blocks]
    comp.reorder(*blocks, *serial, *rest, y + "1", x + "1")
    for loop, to in zip(blocks, ("block.z", "block.y", "block.x")):
        comp.bind(loop, to)
    comp.bind(y + "1", "thread.y")
    return comp.bind(x + "1", "thread.x")

"""MPI helpers of the runtime: the block rule, ``scatter``/``gather`` of
NumPy arrays, the point-to-point exchange the distributed kernels use, and
the per-process byte and message counter.

mpi4py is optional (``pip install tiramisu_py[mpi]``): this module imports
without it, and each function that needs it raises :class:`MPIUnavailable`
naming the extra.

**The block rule** (:func:`block_range`): ``n`` items over ``size`` ranks,
rank ``r`` gets ``[r * q + min(r, m), (r + 1) * q + min(r + 1, m))`` with
``q, m = divmod(n, size)``: the first ``m`` ranks one item more, blocks
contiguous and in rank order, possibly empty when ``n < size``."""
from __future__ import annotations

import numpy as np

_INSTALL = "pip install tiramisu_py[mpi]"


class MPIUnavailable(ImportError):
    """mpi4py (or an MPI library) is missing."""


def _mpi():
    try:
        from mpi4py import MPI
    except ImportError as exc:
        raise MPIUnavailable(f"distributed execution needs mpi4py and an MPI library: "
                             f"{_INSTALL} ({exc})") from None
    return MPI


def comm_world():
    """``MPI.COMM_WORLD`` (initialises MPI on first use)."""
    return _mpi().COMM_WORLD


def block_range(n, size, rank):
    """``(lo, hi)``: the block of ``n`` items that ``rank`` of ``size`` owns
    (the module's block rule; uneven blocks differ by at most one)."""
    for name, v in (("n", n), ("size", size), ("rank", rank)):
        if isinstance(v, bool) or not isinstance(v, (int, np.integer)):
            raise TypeError(f"block_range: {name} must be an int, not {type(v).__name__}")
    if n < 0:
        raise ValueError(f"block_range: n must be >= 0, not {n}")
    if size < 1:
        raise ValueError(f"block_range: size must be >= 1, not {size}")
    if not 0 <= rank < size:
        raise ValueError(f"block_range: rank must be in [0, {size}), not {rank}")
    q, m = divmod(int(n), int(size))
    return rank * q + min(rank, m), (rank + 1) * q + min(rank + 1, m)


def block_owner(index, n, size):
    """The rank whose block (:func:`block_range`) holds item ``index`` of ``n``."""
    q, m = divmod(n, size)
    if index < m * (q + 1):
        return index // (q + 1)
    return m + (index - m * (q + 1)) // q


# ------------------------------------------------------------------ counter
_STATS = {"messages_sent": 0, "bytes_sent": 0, "messages_received": 0, "bytes_received": 0}


def stats(reset=False):
    """This process's point-to-point traffic through this module so far:
    ``{"messages_sent", "bytes_sent", "messages_received", "bytes_received"}``
    (collectives of :func:`scatter`/:func:`gather` count too).  ``reset=True``
    returns the counts and sets them to zero."""
    out = dict(_STATS)
    if reset:
        for k in _STATS:
            _STATS[k] = 0
    return out


def _count(kind, nbytes):
    _STATS[f"messages_{kind}"] += 1
    _STATS[f"bytes_{kind}"] += int(nbytes)


def post(comm, sends, recvs, tag):
    """Starts a non-blocking exchange: ``sends`` is ``[(rank, array)]``
    (contiguous, not to be touched until :func:`wait`), ``recvs``
    ``[(rank, array)]`` filled by then; every receive is posted before the
    sends.  Returns the requests.  Counted in :func:`stats`."""
    reqs = []
    for peer, buf in recvs:
        reqs.append(comm.Irecv(buf, source=peer, tag=tag))
        _count("received", buf.nbytes)
    for peer, buf in sends:
        reqs.append(comm.Isend(buf, dest=peer, tag=tag))
        _count("sent", buf.nbytes)
    return reqs


def wait(reqs):
    """Waits for the requests of :func:`post`."""
    if reqs:
        _mpi().Request.Waitall(reqs)


def exchange(comm, sends, recvs, tag):
    """:func:`post` then :func:`wait`."""
    wait(post(comm, sends, recvs, tag))


def send(array, dest, tag=0, comm=None):
    """Sends the C-contiguous ``array`` to rank ``dest`` (blocking; counted)."""
    comm = comm if comm is not None else comm_world()
    buf = np.ascontiguousarray(array)
    comm.Send(buf, dest=dest, tag=tag)
    _count("sent", buf.nbytes)


def recv(shape, dtype, source, tag=0, comm=None):
    """A new array of ``shape``/``dtype`` received from rank ``source`` (counted)."""
    comm = comm if comm is not None else comm_world()
    buf = np.empty(shape, dtype=dtype)
    comm.Recv(buf, source=source, tag=tag)
    _count("received", buf.nbytes)
    return buf


def _check_axis(axis, ndim, what):
    if isinstance(axis, bool) or not isinstance(axis, (int, np.integer)):
        raise TypeError(f"{what}: axis must be an int, not {type(axis).__name__}")
    if not -ndim <= axis < ndim:
        raise ValueError(f"{what}: axis {axis} is out of range for an array of {ndim} "
                         "dimensions")
    return int(axis) % ndim


def _check_root(comm, root, what):
    if isinstance(root, bool) or not isinstance(root, (int, np.integer)) \
            or not 0 <= root < comm.Get_size():
        raise ValueError(f"{what}: root must be a rank in [0, {comm.Get_size()}), not {root!r}")
    return int(root)


def _block(a, name, axis, what):
    """``(array, axis)``: the argument ``name`` as a C-contiguous array that
    MPI can send, split or joined along ``axis`` (checked)."""
    ndim = np.ndim(a)
    if ndim == 0:
        raise ValueError(f"{what}: argument {name!r} is a 0-d array (a scalar); its blocks "
                         "are taken along an axis: pass an array of at least one dimension")
    a = np.ascontiguousarray(a)
    if a.dtype.hasobject:
        raise TypeError(f"{what}: argument {name!r} has dtype object, which MPI cannot send; "
                        "pass an array of numbers")
    return a, _check_axis(axis, ndim, what)


class _Refusal:
    """An argument error one rank found, sent to the others so that every
    rank raises it (none waits for a message that never comes)."""

    def __init__(self, exc, rank=None):
        self.kind = TypeError if isinstance(exc, TypeError) else ValueError
        self.message = str(exc) if rank is None else f"{exc} (on rank {rank})"

    def raise_(self):
        raise self.kind(self.message)


def scatter(global_or_none, axis=0, root=0, comm=None):
    """Every rank gets its block (:func:`block_range`) along ``axis`` of the
    array that rank ``root`` holds (the other ranks pass None); the result
    is a new C-contiguous array.  A bad argument on the root (None, a 0-d
    array, a bad ``axis``) raises on every rank, naming it."""
    comm = comm if comm is not None else comm_world()
    root = _check_root(comm, root, "scatter")
    rank, size = comm.Get_rank(), comm.Get_size()
    meta = None
    if rank == root:
        try:
            if global_or_none is None:
                raise ValueError(f"scatter: the root rank {root} must pass the global array "
                                 "(argument 'global_or_none'), not None")
            a, axis = _block(global_or_none, "global_or_none", axis, f"scatter (root rank {root})")
            meta = (a.shape, a.dtype.str, axis)
        except (TypeError, ValueError) as exc:
            meta = _Refusal(exc)
    meta = comm.bcast(meta, root=root)
    if isinstance(meta, _Refusal):
        meta.raise_()
    shape, dtype, axis = meta
    lo, hi = block_range(shape[axis], size, rank)
    local = np.empty(shape[:axis] + (hi - lo,) + shape[axis + 1:], dtype=np.dtype(dtype))
    if rank == root:
        for r in range(size):
            rlo, rhi = block_range(shape[axis], size, r)
            part = np.ascontiguousarray(np.take(a, np.arange(rlo, rhi), axis=axis))
            if r == root:
                local[...] = part
            else:
                comm.Send(part, dest=r, tag=7001)
                _count("sent", part.nbytes)
    else:
        comm.Recv(local, source=root, tag=7001)
        _count("received", local.nbytes)
    return local


def gather(local, axis=0, root=0, comm=None):
    """The global array on rank ``root`` (the ranks' blocks concatenated
    along ``axis`` in rank order; None on the other ranks).  Every rank
    checks every rank's block (shape, dtype and ``axis`` exchanged first):
    a bad ``local`` or ``axis`` on any rank, or blocks that do not fit
    together, raise on every rank, naming the argument and the rank."""
    comm = comm if comm is not None else comm_world()
    root = _check_root(comm, root, "gather")
    rank = comm.Get_rank()
    try:
        if local is None:
            raise ValueError("gather: argument 'local' is None: every rank passes its block")
        local, axis = _block(local, "local", axis, "gather")
        mine = (local.shape, local.dtype.str, axis)
    except (TypeError, ValueError) as exc:
        mine = _Refusal(exc, rank)
    metas = comm.allgather(mine)
    for m in metas:
        if isinstance(m, _Refusal):
            m.raise_()
    shape0, dtype0, axis0 = metas[root]
    for r, (shape, dtype, ax) in enumerate(metas):
        if ax != axis0:
            raise ValueError(f"gather: argument 'axis' is {ax} on rank {r} but {axis0} on the "
                             f"root rank {root}: every rank passes the same axis")
        if shape[:ax] + shape[ax + 1:] != shape0[:ax] + shape0[ax + 1:] or dtype != dtype0:
            raise ValueError(f"gather: argument 'local' on rank {r}, a block {shape} {dtype}, "
                             f"does not fit rank {root}'s {shape0} {dtype0} along axis {ax}")
    if rank != root:
        comm.Send(local, dest=root, tag=7002)
        _count("sent", local.nbytes)
        return None
    parts = []
    for r, (shape, dtype, _) in enumerate(metas):
        if r == root:
            parts.append(local)
        else:
            buf = np.empty(shape, dtype=np.dtype(dtype))
            comm.Recv(buf, source=r, tag=7002)
            _count("received", buf.nbytes)
            parts.append(buf)
    return np.concatenate(parts, axis=axis)


ABORT_GRACE_S = 0.5     # seconds a failing rank's output has to reach mpiexec


def abort_on_error(fn):
    """Runs ``fn()``; an exception prints its traceback and calls
    ``MPI_Abort`` (every rank stops, no hang waiting for the failed one)."""
    try:
        return fn()
    except BaseException:
        import sys
        import time
        import traceback
        traceback.print_exc()
        sys.stdout.flush()
        sys.stderr.flush()
        # the launcher forwards each rank's output through its own processes,
        # which MPI_Abort kills: without a moment to forward it, MPICH's
        # mpiexec lost the traceback in 1 run of 12 (the user saw only rc 1)
        time.sleep(ABORT_GRACE_S)
        comm_world().Abort(1)

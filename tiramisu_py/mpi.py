"""Distributed execution helpers (``pip install tiramisu_py[mpi]``).

The same program runs on every rank (``mpiexec -n P python script.py``).
``COMM_WORLD`` is mpi4py's ``MPI.COMM_WORLD``; :func:`block_range` is the
block rule of :meth:`Computation.distribute <tiramisu_py.Computation.distribute>`
and of :func:`scatter`/:func:`gather`; :func:`stats` counts this process's
messages and bytes (:func:`send`/:func:`recv`: counted point-to-point
messages).  The module imports without mpi4py; ``COMM_WORLD`` and the
functions that communicate raise :class:`MPIUnavailable` then.  Guide:
``docs/guide/mpi.md``; design: the "Distributed execution" section of
``docs/DESIGN.md``."""
from .runtime.mpi import (MPIUnavailable, abort_on_error, block_owner, block_range, comm_world,
                          gather, recv, scatter, send, stats)


def __getattr__(name):
    if name == "COMM_WORLD":
        return comm_world()
    raise AttributeError(f"module 'tiramisu_py.mpi' has no attribute {name!r}")


__all__ = ["COMM_WORLD", "MPIUnavailable", "abort_on_error", "block_owner", "block_range",
           "comm_world", "gather", "recv", "scatter", "send", "stats"]

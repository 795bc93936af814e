"""Jacobi 2-D distributed by rows over MPI ranks::

    mpiexec -n 4 python3 -m examples.mpi_jacobi2d

Every rank runs this same program: rank 0 makes the global arrays,
``scatter`` gives each rank its block of rows, the compiled kernel runs the
time loop exchanging one halo row per neighbour, buffer and step (derived
from the dependences), and ``gather`` brings the result back to rank 0,
which compares it with the single-process kernel (bitwise in float64)."""
import numpy as np

from examples import jacobi2d
from tiramisu_py import mpi


def build_distributed():
    f = jacobi2d.build()
    for s in f.statements:          # sB and sA: rows i over the ranks
        s.distribute("i")
    return f


def run(n=40, steps=10, comm=None):
    """(global A, global B) on rank 0 (None elsewhere) and this rank's comm_stats."""
    comm = comm if comm is not None else mpi.COMM_WORLD
    root = comm.Get_rank() == 0
    A, B = jacobi2d.random_inputs(n, seed=0) if root else (None, None)
    a, b = mpi.scatter(A, comm=comm), mpi.scatter(B, comm=comm)
    kernel = build_distributed().compile()
    out = kernel(A=a, B=b, T=steps, comm=comm)       # each rank: its blocks, in place
    return mpi.gather(out["A"], comm=comm), mpi.gather(out["B"], comm=comm), kernel.comm_stats


def main(n=40, steps=10):
    comm = mpi.COMM_WORLD
    A, B, stats = run(n, steps, comm)
    print(f"rank {comm.Get_rank()}: {stats['messages_sent']} messages, "
          f"{stats['bytes_sent']} bytes sent", flush=True)
    if comm.Get_rank() == 0:
        A0, B0 = jacobi2d.random_inputs(n, seed=0)
        jacobi2d.build().compile()(A=A0, B=B0, T=steps)
        print("equal to one process:", np.array_equal(A, A0) and np.array_equal(B, B0))


if __name__ == "__main__":
    mpi.abort_on_error(main)

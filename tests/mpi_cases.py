"""The distributed proof cases, run by tests/tiramisu_py/test_mpi.py under
``mpiexec -n P python3 tests/mpi_cases.py [fail|bad]``: every rank runs them all;
rank 0 prints one line ``RESULT <json>`` with, per case, whether the result
equals the single-process one and every rank's message and byte counts.
An exception on any rank aborts the whole run (``MPI_Abort``)."""
import json
import os
import sys

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from examples import gemm, jacobi2d, mpi_jacobi2d            # noqa: E402
from tiramisu_py import mpi                                  # noqa: E402

import schedules                                             # noqa: E402

JACOBI_N, JACOBI_T = 11, 4          # blocks of 11 rows: uneven on 2, 3 and 4 ranks
GEMM = (13, 6, 9)                   # N (distributed), M, K
LSTM = (5, 2, 4, 6, 4)              # T, batch, input, hidden, layers
CONV = (5, 3, 4, 6, 7)              # batch (split), cin, cout, h, w


def jacobi(comm):
    A, B, stats = mpi_jacobi2d.run(JACOBI_N, JACOBI_T, comm)
    out = {"stats": comm.gather(stats)}
    if comm.Get_rank() == 0:
        A0, B0 = jacobi2d.random_inputs(JACOBI_N, seed=0)
        jacobi2d.build().compile()(A=A0, B=B0, T=JACOBI_T)
        out["equal"] = bool(np.array_equal(A, A0) and np.array_equal(B, B0))
    return out


def jacobi_tiled(comm):
    """The user's schedule applies inside each rank's blocks."""
    f = mpi_jacobi2d.build_distributed()
    for s in f.statements:
        s.tile("i", "j", 4, 4)
        s.parallelize("i0")
    kernel = f.compile()
    A, B = jacobi2d.random_inputs(JACOBI_N, seed=4) if comm.Get_rank() == 0 else (None, None)
    out = kernel(A=mpi.scatter(A, comm=comm), B=mpi.scatter(B, comm=comm), T=JACOBI_T, comm=comm)
    A_all = mpi.gather(out["A"], comm=comm)
    res = {"stats": comm.gather(kernel.comm_stats), "tiled": "i0" in kernel.source}
    if comm.Get_rank() == 0:
        jacobi2d.build().compile()(A=A, B=B, T=JACOBI_T)
        res["equal"] = bool(np.array_equal(A_all, A))
    return res


def jacobi_empty(comm):
    """No step, then fewer interior rows than ranks (some blocks empty):
    the arrays come back as one process leaves them."""
    kernel, equal, stats = mpi_jacobi2d.build_distributed().compile(), True, []
    for n, steps in ((JACOBI_N, 0), (2, JACOBI_T), (3, JACOBI_T)):
        A, B = jacobi2d.random_inputs(n, seed=8) if comm.Get_rank() == 0 else (None, None)
        out = kernel(A=mpi.scatter(A, comm=comm), B=mpi.scatter(B, comm=comm), T=steps, comm=comm)
        A_all, B_all = mpi.gather(out["A"], comm=comm), mpi.gather(out["B"], comm=comm)
        stats.append(kernel.comm_stats)
        if comm.Get_rank() == 0:
            jacobi2d.build().compile()(A=A, B=B, T=steps)
            equal = equal and bool(np.array_equal(A_all, A) and np.array_equal(B_all, B))
    out = {"stats": comm.gather(stats)}
    if comm.Get_rank() == 0:
        out["equal"] = equal
    return out


def gemm_rows(comm):
    n, m, k = GEMM
    rng = np.random.default_rng(3)
    a = rng.standard_normal((n, k)).astype(np.float32)
    b = rng.standard_normal((k, m)).astype(np.float32)       # replicated: every rank has it
    f = gemm.build()
    for s in f.statements:                                   # C and C_update: rows i
        s.distribute("i")
    kernel = f.compile()
    c = kernel(A=mpi.scatter(a if comm.Get_rank() == 0 else None, comm=comm), B=b, comm=comm)
    c = mpi.gather(c, comm=comm)
    out = {"stats": comm.gather(kernel.comm_stats)}
    if comm.Get_rank() == 0:
        ref = gemm.build().compile()(a, b)
        out["equal"] = bool(np.array_equal(c, ref))
        out["max_err"] = float(np.abs(c - ref).max())
    return out


def lstm_weights(layers, inp, hidden, seed=5):
    rng = np.random.default_rng(seed)
    out = []
    for layer in range(layers):
        i = inp if layer == 0 else hidden
        out.append([rng.standard_normal((4 * hidden, i)).astype(np.float32) * 0.3,
                    rng.standard_normal((4 * hidden, hidden)).astype(np.float32) * 0.3,
                    rng.standard_normal(4 * hidden).astype(np.float32) * 0.1,
                    rng.standard_normal(4 * hidden).astype(np.float32) * 0.1])
    return out


def lstm_pipeline(comm):
    """Layers block-distributed over the ranks: rank r runs its layers for
    one time step, then sends h_t of its last layer to rank r + 1."""
    T, batch, inp, hidden, layers = LSTM
    rank, size = comm.Get_rank(), comm.Get_size()
    weights = lstm_weights(layers, inp, hidden)
    x = np.random.default_rng(6).standard_normal((T, batch, inp)).astype(np.float32)
    lo, hi = mpi.block_range(layers, size, rank)
    prev = next((r for r in range(rank - 1, -1, -1) if mpi.block_range(layers, size, r)[0]
                 < mpi.block_range(layers, size, r)[1]), None)
    nxt = next((r for r in range(rank + 1, size) if mpi.block_range(layers, size, r)[0]
                < mpi.block_range(layers, size, r)[1]), None)
    before = mpi.stats()
    state = {layer: (np.zeros((1, batch, hidden), np.float32),) * 2 for layer in range(lo, hi)}
    ys = []
    for t in range(T):
        if lo == hi:
            break
        h = x[t:t + 1] if lo == 0 else mpi.recv((1, batch, hidden), np.float32, prev, t, comm)
        for layer in range(lo, hi):
            h, (hn, cn) = schedules.lstm(h, [weights[layer]], *state[layer], schedule="layer")
            state[layer] = (hn, cn)
        if nxt is not None and hi < layers:
            mpi.send(h, nxt, t, comm)
        ys.append(h)
    after = mpi.stats()
    stats = {k: after[k] - before[k] for k in after}
    last = mpi.block_range(layers, size, size - 1)
    owner = max(r for r in range(size) if mpi.block_range(layers, size, r)[0]
                < mpi.block_range(layers, size, r)[1])
    out = {"stats": comm.gather(stats)}
    y = np.concatenate(ys) if rank == owner else None
    if owner != 0:
        if rank == owner:
            mpi.send(y, 0, 99, comm)
        elif rank == 0:
            y = mpi.recv((T, batch, hidden), np.float32, owner, 99, comm)
    if rank == 0:
        ref, _ = schedules.lstm(x, weights, schedule="layer")
        out["equal"] = bool(np.array_equal(y, ref))
        out["max_err"] = float(np.abs(y - ref).max())
    del last
    return out


def conv_batch(comm):
    n, cin, cout, h, w = CONV
    rng = np.random.default_rng(7)
    x = rng.standard_normal((n, cin, h, w)).astype(np.float32)
    wt = rng.standard_normal((cout, cin, 3, 3)).astype(np.float32)
    bias = rng.standard_normal(cout).astype(np.float32)
    before = mpi.stats()
    local = mpi.scatter(x if comm.Get_rank() == 0 else None, axis=0, comm=comm)
    y = mpi.gather(schedules.conv2d(local, wt, bias, padding=1), axis=0, comm=comm)
    after = mpi.stats()
    out = {"stats": comm.gather({k: after[k] - before[k] for k in after})}
    if comm.Get_rank() == 0:
        ref = schedules.conv2d(x, wt, bias, padding=1)
        out["equal"] = bool(np.array_equal(y, ref))
        out["max_err"] = float(np.abs(y - ref).max())
    return out


def bad_arguments(comm):
    """Calls that one rank's argument makes wrong, each on every rank: per
    call, what each rank raised (type and message), or "returned"."""
    rank, last = comm.Get_rank(), comm.Get_size() - 1
    big = np.zeros((64, 4096))                             # 2 MB: a rendezvous send
    calls = {
        "scatter_0d": lambda: mpi.scatter(np.float64(3.0) if rank == 0 else None, comm=comm),
        "scatter_none": lambda: mpi.scatter(None, comm=comm),
        "scatter_axis": lambda: mpi.scatter(big if rank == 0 else None, axis=2, comm=comm),
        "gather_columns": lambda: mpi.gather(big[:, :4095] if rank == last else big, comm=comm),
        "gather_0d": lambda: mpi.gather(np.float64(1.0) if rank == last else big, comm=comm),
        "gather_axis": lambda: mpi.gather(big, axis=1 if rank == last else 0, comm=comm),
    }
    out = {}
    for name, call in calls.items():
        try:
            call()
            out[name] = "returned"
        except (TypeError, ValueError) as e:
            out[name] = [type(e).__name__, str(e)]
    # the communicator still works: no message of a refused call is left over
    whole = mpi.gather(mpi.scatter(big if rank == 0 else None, comm=comm), comm=comm)
    res = {"raised": comm.gather(out)}
    if rank == 0:
        res["after"] = bool(np.array_equal(whole, big))
    return res


def main():
    comm = mpi.COMM_WORLD
    if sys.argv[1:] == ["bad"]:
        results = bad_arguments(comm)
        if comm.Get_rank() == 0:
            print("RESULT " + json.dumps(results), flush=True)
        return
    if sys.argv[1:] == ["fail"]:
        if comm.Get_rank() == comm.Get_size() - 1:
            raise RuntimeError("a failing rank")
        comm.Barrier()                      # the others wait: the abort must end them
    results = {}
    for case in (jacobi, jacobi_tiled, jacobi_empty, gemm_rows, lstm_pipeline, conv_batch):
        results[case.__name__] = case(comm)
    if comm.Get_rank() == 0:
        print("RESULT " + json.dumps(results), flush=True)


if __name__ == "__main__":
    mpi.abort_on_error(main)

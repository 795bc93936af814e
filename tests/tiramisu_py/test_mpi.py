"""Distributed execution (tiramisu_py.mpi, ``distribute``): the block rule,
the exact messages and the legality rule in this process (no MPI needed),
and the proof cases of tests/mpi_cases.py under ``mpiexec -n 1..4`` on
localhost (oversubscribed), each run bounded in time, compared with the
single-process results.  The mpiexec tests skip when mpi4py or mpiexec is
missing (``pip install tiramisu_py[mpi]``)."""
from repo_paths import TESTS
import importlib.util
import json
import os
import shutil
import signal
import subprocess
import sys

import numpy as np
import pytest

import tiramisu_py as tp
from examples import jacobi2d, mpi_jacobi2d
from tiramisu_py import mpi
from tiramisu_py.analysis import distribution
from tiramisu_py.poly.model import build_model
from lang_helpers import OneRank

HERE = TESTS
CASES = os.path.join(HERE, "mpi_cases.py")
RUN_TIMEOUT_S = 120
HAVE_MPI = importlib.util.find_spec("mpi4py") is not None and shutil.which("mpiexec")
needs_mpi = pytest.mark.skipif(not HAVE_MPI, reason="mpi4py and mpiexec are not installed "
                               "(pip install tiramisu_py[mpi])")


# ------------------------------------------------------------- block rule
@pytest.mark.parametrize("n,size", [(11, 1), (11, 3), (11, 4), (3, 5), (0, 2), (12, 4)])
def test_block_range_tiles_the_range_in_rank_order(n, size):
    blocks = [mpi.block_range(n, size, r) for r in range(size)]
    assert blocks[0][0] == 0 and blocks[-1][1] == n
    assert all(a[1] == b[0] for a, b in zip(blocks, blocks[1:]))
    lens = [hi - lo for lo, hi in blocks]
    assert max(lens) - min(lens) <= 1 and lens == sorted(lens, reverse=True)
    for r, (lo, hi) in enumerate(blocks):
        assert all(mpi.block_owner(x, n, size) == r for x in range(lo, hi))


def test_block_range_refuses_bad_arguments():
    with pytest.raises(ValueError, match="size must be >= 1"):
        mpi.block_range(4, 0, 0)
    with pytest.raises(ValueError, match="rank must be in"):
        mpi.block_range(4, 2, 2)
    with pytest.raises(TypeError, match="n must be an int"):
        mpi.block_range(4.0, 2, 0)


def test_without_mpi4py_the_error_names_the_extra(monkeypatch):
    monkeypatch.setitem(sys.modules, "mpi4py", None)
    with pytest.raises(mpi.MPIUnavailable, match=r"pip install tiramisu_py\[mpi\]"):
        mpi.COMM_WORLD
    with pytest.raises(mpi.MPIUnavailable, match="mpi4py"):
        mpi.scatter(np.zeros(3))


# ---------------------------------------------------- messages, in process
def _plan(f):
    return distribution.plan(f, build_model(f))


def test_jacobi_halo_is_one_row_of_each_buffer_per_neighbour():
    n, size = 11, 3
    p = _plan(mpi_jacobi2d.build_distributed())
    assert p.dims == {"A": 0, "B": 0} and p.outer == ["t"] and p.phases == ["sB", "sA"]
    sends, recvs, (lo, hi), (off, rows) = distribution.messages(p, {"N": n, "T": 4}, size, 1)
    assert (lo, hi) == (4, 8) and (off, rows) == (3, 6)         # block + one row each side
    got = set()
    for m in recvs:
        region = m.region if m.phase is None else m.region.range()
        box = [(region.dim_min_val(k).to_python(), region.dim_max_val(k).to_python())
               for k in range(2)]
        got.add((m.buffer, m.phase, m.peer, tuple(box)))
    interior = (1, n - 2)
    assert got == {("A", None, 0, ((3, 3), interior)), ("A", None, 2, ((8, 8), interior)),
                   ("B", 0, 0, ((3, 3), interior)), ("B", 0, 2, ((8, 8), interior)),
                   ("A", 1, 0, ((3, 3), interior)), ("A", 1, 2, ((8, 8), interior))}
    assert len(sends) == len(recvs)
    # the rows that wait for the previous phase's messages (the others run
    # while they are in flight): the block's first and last
    for src, snk in ((0, 1), (1, 0)):
        assert distribution.boundary(p, {"N": n, "T": 4}, size, 1, src, snk) == {4, 7}
    assert distribution.boundary(p, {"N": n, "T": 4}, 1, 0, 0, 1) == set()


def test_one_rank_equals_the_plain_kernel_bitwise():
    A, B = jacobi2d.random_inputs(9, seed=2)
    A0, B0 = A.copy(), B.copy()
    out = mpi_jacobi2d.build_distributed().compile()(A=A, B=B, T=3, comm=OneRank())
    jacobi2d.build().compile()(A=A0, B=B0, T=3)
    assert out["A"] is A and np.array_equal(A, A0) and np.array_equal(B, B0)


@pytest.mark.parametrize("n,steps", [(9, 0), (2, 3), (1, 3)])
def test_an_empty_domain_returns_the_arrays_unchanged_like_the_plain_kernel(n, steps):
    """No step (T = 0) or no interior row (N <= 2): nothing runs, as without
    ``distribute`` (it raised min()'s 'empty sequence' on every rank)."""
    A, B = jacobi2d.random_inputs(n, seed=2)
    A0, B0 = A.copy(), B.copy()
    out = mpi_jacobi2d.build_distributed().compile()(A=A, B=B, T=steps, comm=OneRank())
    jacobi2d.build().compile()(A=A0, B=B0, T=steps)
    assert out["A"] is A and out["B"] is B
    assert np.array_equal(A, A0) and np.array_equal(B, B0)


def test_a_block_of_the_wrong_size_or_an_unknown_argument_is_refused_by_name():
    kernel = mpi_jacobi2d.build_distributed().compile()
    A, B = jacobi2d.random_inputs(9, seed=2)
    with pytest.raises(ValueError, match=r"argument 'A' has shape \(8, 9\): rank 0 of 1 "
                                         r"holds rows \[0, 9\)"):
        kernel(A=A[:8], B=B, T=1, comm=OneRank())
    with pytest.raises(TypeError, match="unexpected argument 'C'"):
        kernel(A=A, B=B, C=A, T=1, comm=OneRank())
    with pytest.raises(TypeError, match="param 'T' must be an int"):
        kernel(A=A, B=B, T=1.5, comm=OneRank())


# ------------------------------------------------------------------ legality
def _seidel():
    f = tp.Function("seidel_rows", params=["T", "N"])
    t, i, j = f.var("t", 0, "T"), f.var("i", 1, "N - 1"), f.var("j", 0, "N")
    A = f.buffer("A", ("N", "N"), tp.float64, output=True)
    with f.nest(t):
        s = f.computation("s", [t, i, j], (A[i - 1, j] + A[i, j] + A[i + 1, j]) / 3.0)
        s.store_in(A, [i, j])
    return f, s


def test_a_flow_inside_one_step_across_rows_is_refused_with_instances():
    f, s = _seidel()
    s.distribute("i")
    with pytest.raises(tp.IllegalScheduleError,
                       match=r"s\[\d+, \d+, \d+\] -> s\[\d+, \d+, \d+\].*flows between two "
                             r"instances of the same phase and step with different i"):
        f.compile()


def test_distributing_the_other_loop_of_the_same_program_is_legal():
    f, s = _seidel()
    s.distribute("j")
    p = _plan(f)
    assert p.dims == {"A": 1}


def test_every_statement_must_be_distributed_and_write_its_own_rows():
    f = jacobi2d.build()
    f.statements[0].distribute("i")
    with pytest.raises(ValueError, match="sA is not"):
        f.compile()
    g = tp.Function("rowsum", params=["N"])
    i, j = g.var("i", 0, "N"), g.var("j", 0, "N")
    A = g.input("A", ("N", "N"), tp.float64)
    s = g.computation("s", [j], 0.0)
    s[j] += A[i, j]
    s.distribute("j")
    s.update.distribute("i")
    with pytest.raises(ValueError, match="must be the same for every statement"):
        g.compile()
    g.undo()
    s.update.distribute("j")
    assert _plan(g).dims == {"A": 1, "s": 0}
    h = tp.Function("shifted", params=["N"])
    i, j = h.var("i", 0, "N"), h.var("j", 0, "N")
    A = h.input("A", ("N", "N"), tp.float64)
    B = h.buffer("B", ("N", "N"), tp.float64, output=True)
    c = h.computation("c", [i, j], A[i, j]).store_in(B, [j, i])
    c.distribute("i")
    assert _plan(h).dims == {"A": 0, "B": 1}     # a transpose: rows of A, columns of B
    d = h.computation("d", [i, j], A[i, j] + A[j, i]).store_in(B, [i, j])
    d.distribute("i")
    with pytest.raises(ValueError, match="indexed by the distributed loops in dimensions"):
        h.compile()
    h.undo()
    c2 = h.computation("c2", [i, j], 1.0).store_in(B, [j, 0])
    with pytest.raises(ValueError, match="d, c2 are not"):
        h.compile()
    with pytest.raises(ValueError, match="no declared loop 'k'"):
        s.distribute("k")


# ------------------------------------------------------------- under mpiexec
def _mpiexec(n, *args):
    cmd = ["mpiexec", "-n", str(n), sys.executable, CASES, *args]
    env = dict(os.environ, OMP_NUM_THREADS="1")       # the ranks share 2 cores already
    proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                            start_new_session=True, env=env)
    try:
        out, _ = proc.communicate(timeout=RUN_TIMEOUT_S)
    except subprocess.TimeoutExpired:
        os.killpg(proc.pid, signal.SIGKILL)
        out, _ = proc.communicate()
        pytest.fail(f"mpiexec -n {n} hung beyond {RUN_TIMEOUT_S} s:\n{out[-3000:]}")
    return proc.returncode, out


@needs_mpi
@pytest.mark.parametrize("ranks", [1, 2, 3, 4])
def test_proof_cases_equal_one_process(ranks):
    from tests import mpi_cases as C
    rc, out = _mpiexec(ranks)
    assert rc == 0, out[-3000:]
    res = json.loads(next(x for x in out.splitlines() if x.startswith("RESULT "))[7:])
    for case in ("jacobi", "jacobi_tiled", "jacobi_empty", "gemm_rows", "lstm_pipeline",
                 "conv_batch"):
        assert res[case]["equal"], (case, res[case])
        assert len(res[case]["stats"]) == ranks
    # jacobi: per neighbour, the initial halo row of A, then one row of B and
    # one of A per step (the last step's A row is read by no one): N - 2 values
    n, steps, row = C.JACOBI_N, C.JACOBI_T, (C.JACOBI_N - 2) * 8
    for r, st in enumerate(res["jacobi"]["stats"]):
        nb = (r > 0) + (r < ranks - 1)
        assert st["initial_messages_sent"] == nb and st["initial_bytes_sent"] == nb * row
        assert st["messages_sent"] == 2 * steps * nb and st["bytes_sent"] == 2 * steps * nb * row
        assert st["bytes_received"] == st["bytes_sent"] and st["steps"] == steps
    assert res["jacobi_tiled"]["tiled"]
    assert res["jacobi_tiled"]["stats"] == res["jacobi"]["stats"]    # same messages
    assert all(st["messages_sent"] == 0 for st in res["gemm_rows"]["stats"])   # B replicated
    T, batch, _, hidden, layers = C.LSTM
    for r, st in enumerate(res["lstm_pipeline"]["stats"]):
        sends = r < min(ranks, layers) - 1                  # h_t to the next rank, each step
        assert st["messages_sent"] == (T if sends else 0)
        assert st["bytes_sent"] == (T * batch * hidden * 4 if sends else 0)
    N, cin, cout, h, w = C.CONV
    x_bytes, y_bytes = cin * h * w * 4, cout * h * w * 4
    for r, st in enumerate(res["conv_batch"]["stats"]):
        lo, hi = mpi.block_range(N, ranks, r)
        if r == 0:
            assert st["bytes_sent"] == (N - hi) * x_bytes
            assert st["bytes_received"] == (N - hi) * y_bytes
        else:
            assert st["bytes_received"] == (hi - lo) * x_bytes
            assert st["bytes_sent"] == (hi - lo) * y_bytes


@needs_mpi
def test_a_failing_rank_fails_the_run_without_hanging():
    rc, out = _mpiexec(2, "fail")
    assert rc != 0 and "a failing rank" in out


@needs_mpi
@pytest.mark.parametrize("ranks", [2, 3])
def test_an_argument_error_on_one_rank_raises_on_every_rank(ranks):
    """scatter's root with a 0-d array, None or a bad axis; gather with one
    rank's block of other columns (2 MB: its send waits for a receive), a 0-d
    block, another axis: every rank raises the same error naming the
    argument (none waits forever), and the next scatter/gather works."""
    rc, out = _mpiexec(ranks, "bad")
    assert rc == 0, out[-3000:]
    res = json.loads(next(x for x in out.splitlines() if x.startswith("RESULT "))[7:])
    assert res["after"]
    names = {"scatter_0d": "'global_or_none' is a 0-d array", "scatter_none": "'global_or_none'",
             "scatter_axis": "axis 2 is out of range", "gather_columns": "'local' on rank",
             "gather_0d": "'local' is a 0-d array", "gather_axis": "'axis' is 1 on rank"}
    for case, words in names.items():
        seen = [per_rank[case] for per_rank in res["raised"]]
        assert seen[0] != "returned" and seen[0][0] == "ValueError", (case, seen)
        assert words in seen[0][1], (case, seen[0])
        assert all(x == seen[0] for x in seen), (case, seen)

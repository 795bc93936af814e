"""A read of a computation ``P[i, j]`` means the value of that instance of
P, whatever storage ``store_in`` gives P (tiramisu_py/poly/dataflow.py:
``_meaning``).  Storage that two of P's values share (folded, or another
statement's) is legal exactly when, under the final schedule, no write
reaches the element between a value's write and a read that names it: a
storage that breaks this is refused by name (``P.store_in(...)``), and a
schedule that makes it hold is accepted (the row buffer of a fused
producer/consumer pair, the TIRAMISU paper's storage folding).

Each case below is judged by a brute-force oracle that replays the
instances in the schedule's order over a dict of storage elements (no isl):
an accepted case must compute NumPy's answer and be legal by the oracle; a
refused one must be illegal by the oracle."""
import itertools

import numpy as np
import pytest

import tiramisu_py as tp
from codegen import ir

N, M = 5, 4
STORAGE = {                         # P's storage: (buffer shape, index, python)
    "own": (("N", "M"), lambda i, j: [i, j], lambda i, j: (i, j)),
    "row": (("M",), lambda i, j: [j], lambda i, j: (j,)),
    "two_rows": ((2, "M"), lambda i, j: [i % 2, j], lambda i, j: (i % 2, j)),
    "cell": ((1,), lambda i, j: [i * 0], lambda i, j: (0,)),
}
READS = {                           # C(i, j) reads P at
    "same": (0, 0),
    "row_above": (-1, 0),
    "left": (0, -1),
}
SCHEDULES = ("program", "after_i", "after_j", "after_i_parallel")


def program(storage, read, schedule):
    f = tp.Function("fold", params=["N", "M"])
    i, j = f.var("i", 0, "N"), f.var("j", 0, "M")
    A = f.input("A", ("N", "M"), tp.float64)
    P = f.computation("P", [i, j], A[i, j] * 2.0 + 1.0)
    shape, index, _ = STORAGE[storage]
    if storage != "own":
        P.store_in(f.buffer("T", shape, tp.float64), index(i, j))
    di, dj = READS[read]
    named = P[i + di, j + dj]
    if (di, dj) != (0, 0):
        named = tp.select((i + di >= 0) & (j + dj >= 0), named, 0.0)
    C = f.computation("C", [i, j], named * 3.0)
    if schedule.startswith("after_"):
        C.after(P, schedule.split("_")[1])
    if schedule.endswith("parallel"):
        C.parallelize("i")
    return f


def oracle(storage, read, schedule):
    """True when every read of C sees the value of P it names (and, for a
    parallel i loop, reads only what its own iteration wrote: each thread
    may get its own copy of folded storage)."""
    place = STORAGE[storage][2]
    di, dj = READS[read]
    ps = [("P", i, j) for i in range(N) for j in range(M)]
    cs = [("C", i, j) for i in range(N) for j in range(M)]
    if schedule == "program":
        order = ps + cs
    elif schedule.startswith("after_i"):
        order = [x for i in range(N) for x in ps[i * M:(i + 1) * M] + cs[i * M:(i + 1) * M]]
    else:
        order = [x for k in range(N * M) for x in (ps[k], cs[k])]
    memory = {}
    for what, i, j in order:
        if what == "P":
            memory[place(i, j)] = (i, j)
            continue
        ri, rj = i + di, j + dj
        if ri < 0 or rj < 0:
            continue                     # the select's other arm: no read
        if memory.get(place(ri, rj)) != (ri, rj):
            return False
        if schedule.endswith("parallel") and ri != i:
            return False
    return True


def reference(a, read):
    p = a * 2.0 + 1.0
    di, dj = READS[read]
    out = np.zeros_like(a)
    for i, j in itertools.product(range(N), range(M)):
        ri, rj = i + di, j + dj
        out[i, j] = 3.0 * (p[ri, rj] if ri >= 0 and rj >= 0 else 0.0)
    return out


@pytest.mark.parametrize("schedule", SCHEDULES)
@pytest.mark.parametrize("read", READS)
@pytest.mark.parametrize("storage", STORAGE)
def test_folded_storage_is_accepted_exactly_when_every_named_value_survives(storage, read,
                                                                             schedule):
    f = program(storage, read, schedule)
    legal = oracle(storage, read, schedule)
    try:
        kernel = f.compile()
    except tp.IllegalScheduleError as e:
        assert not legal, f"false refusal: {e}"
        if schedule == "program":        # nothing but the storage to blame
            assert str(e).startswith("P.store_in(T, [") and "overwrites" in str(e)
        return
    assert legal, "an illegal schedule compiled"
    a = np.random.default_rng(1).standard_normal((N, M))
    np.testing.assert_allclose(kernel(A=a, N=N, M=M), reference(a, read), rtol=1e-14)


@pytest.mark.parametrize("target", ["c", "llvm"])
def test_a_row_buffer_fused_into_its_consumer_runs_in_parallel_rows(target):
    # the case: P in one row, C right after it per row; each thread
    # of the parallel row loop gets its own row
    f = program("row", "same", "after_i_parallel")
    kernel = f.compile(target=target)
    a = np.random.default_rng(2).standard_normal((N, M))
    np.testing.assert_allclose(kernel(A=a, N=N, M=M), reference(a, "same"), rtol=1e-14)
    par = [s for s in ir.walk_stmts(kernel.lowered.body)
           if isinstance(s, ir.For) and s.kind == "parallel"]
    assert [p.attrs["private"] for p in par] == [["T"]]


def test_the_refusal_names_the_storage_the_read_and_the_overwrite():
    with pytest.raises(tp.IllegalScheduleError) as e:
        program("row", "same", "program").compile()
    msg = str(e.value)
    assert msg.startswith("P.store_in(T, [j]) is illegal under this schedule: ")
    assert "C(i=0, j=0) reads P(i=0, j=0) from 'T', but P(i=1, j=0) overwrites" in msg


def test_shared_storage_overwritten_before_a_named_read_is_refused():
    # s0 and s2 share T; s1 names s0's value after s2 overwrote it
    f = tp.Function("shared", params=["N"])
    i = f.var("i", 0, "N")
    A = f.input("A", ("N",), tp.float64)
    T = f.buffer("T", ("N",), tp.float64)
    s0 = f.computation("s0", [i], A[i] + 1.0).store_in(T, [i])
    f.computation("s2", [i], A[i] * 5.0).store_in(T, [i])
    f.computation("s1", [i], s0[i] * 3.0)
    with pytest.raises(tp.IllegalScheduleError, match=r"s0.store_in\(T, \[i\]\).*s2\(i=0\) "
                                                      "overwrites"):
        f.compile()


def test_an_update_accumulating_into_folded_storage_is_read_by_name():
    # P[i, j] = sum_k A[i, k] * (j + 1), kept in one row, read by C in its row
    f = tp.Function("rowsum", params=["N", "M", "K"])
    i, j, k = f.var("i", 0, "N"), f.var("j", 0, "M"), f.var("k", 0, "K")
    A = f.input("A", ("N", "K"), tp.float64)
    with f.nest(i, j):
        P = f.computation("P", [i, j], 0.0)
        P[i, j] += A[i, k] * (j + 1.0)
    P.store_in(f.buffer("T", ("M",), tp.float64), [j])
    C = f.computation("C", [i, j], P[i, j] * 2.0)
    with pytest.raises(tp.IllegalScheduleError, match=r"P.store_in\(T, \[j\]\)"):
        f.compile()
    C.after(P.update, "i")
    a = np.random.default_rng(3).standard_normal((N, 3))
    ref = 2.0 * a.sum(axis=1)[:, None] * (np.arange(M) + 1.0)[None, :]
    np.testing.assert_allclose(f.compile()(A=a, N=N, M=M, K=3), ref, rtol=1e-13)


def test_two_values_named_by_one_read_in_one_element_are_refused():
    # s0 and s1 share A[i]; s2 names both: only s1's can be there (found by
    # the fuzzer: the check keyed by (read, element) let s1's event hide s0's)
    f = tp.Function("two", params=["N"])
    i = f.var("i", 0, "N")
    B = f.input("B", ("N",), tp.float64)
    A = f.buffer("A", ("N",), tp.float64)
    s0 = f.computation("s0", [i], 1.0 + 0.3 * B[i]).store_in(A, [i])
    s1 = f.computation("s1", [i], 2.0 + 0.3 * B[i]).store_in(A, [i])
    f.computation("s2", [i], 1.0 + 0.3 * s0[i] + 0.25 * s1[i])
    with pytest.raises(tp.IllegalScheduleError, match=r"^s0.store_in\(A, \[i\]\) is illegal under "
                       r"this schedule: s2\(i=0\) reads s0\(i=0\) from 'A', but s1\(i=0\) "
                       "overwrites that element"):
        f.compile()


def test_the_refusal_names_the_value_the_overwrite_replaces():
    # s1(i) names s0(3) and s0(i); the message pairs the read with the value
    # whose element is overwritten (s0(0) by s0(2)), not with another it names
    f = tp.Function("fold", params={"N": 4})
    i = f.var("i", 0, "N")
    A = f.input("A", ("N",), tp.float64)
    s0 = f.computation("s0", [i], A[i] + 1.0).store_in(f.buffer("T", (2,), tp.float64), [i % 2])
    f.computation("s1", [i], s0[3] + s0[i])
    with pytest.raises(tp.IllegalScheduleError) as e:
        f.compile()
    assert "s1(i=0) reads s0(i=0) from 'T', but s0(i=2) overwrites that element" in str(e.value)

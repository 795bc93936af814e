"""The order rule of the legality check is value-based (issue 52, item 8):
a schedule may run two accesses of one element the other way when no read
and no final value of an array the caller sees changes writer
(tiramisu_py/poly/dataflow.py: value_violations); a write overwritten before
any read orders nothing.  Where the writes are not known exactly (an
indirect index) every memory dependence still orders the schedule, and a
parallel loop still must not carry a write another iteration touches."""
import numpy as np
import pytest

import tiramisu_py as tp

TARGETS = ["c", "llvm"]


def overwritten(output):
    """s0 writes B0[k + i] for every (k, i); s1 overwrites B0[0..N); s2 reads
    only those: s0's writes are dead, unless B0 is an output (then its
    elements N..2N-2 keep s0's last write)."""
    f = tp.Function("dead", params=["N"])
    k, i, j = f.var("k", 0, "N"), f.var("i", 0, "N"), f.var("j", 0, "N")
    A = f.input("A", ("N", "N"), tp.float64)
    B0 = f.buffer("B0", ("2*N",), tp.float64, output=output)
    O = f.buffer("O", ("N",), tp.float64, output=True)
    s0 = f.computation("s0", [k, i], A[k, i] + 1.0).store_in(B0, [k + i])
    f.computation("s1", [j], A[j, j] * 2.0).store_in(B0, [j])
    f.computation("s2", [j], B0[j] * 3.0).store_in(O, [j])
    return f, s0


@pytest.mark.parametrize("target", TARGETS)
def test_interchange_over_an_overwritten_temporary_is_accepted(target):
    # the false refusal: a WAW on B0 between writes nobody reads
    f, s0 = overwritten(output=False)
    s0.interchange("k", "i")
    kernel = f.compile(target=target)
    a = np.random.default_rng(0).standard_normal((5, 5))
    np.testing.assert_array_equal(kernel(A=a, N=5), 6.0 * np.diag(a))


def test_last_write_of_an_output_still_orders():
    f, s0 = overwritten(output=True)
    s0.interchange("k", "i")
    with pytest.raises(tp.IllegalScheduleError, match="WAW on 'B0'") as e:
        f.compile()
    v = e.value.violation
    # the pair named writes an element that nothing overwrites: one the caller sees
    (k1, i1), (k2, i2), n = v.source[1], v.sink[1], v.params["N"]
    assert v.kind == "WAW" and k1 + i1 == k2 + i2 >= n
    assert "a schedule may run a pair the other way" in f.explain(file=open("/dev/null", "w"))


def three_statements():
    """s0: T[i] = A[i]; s1: O[i] = T[i]; s2: T[i] = 2 (dead: T is a temporary)."""
    f = tp.Function("clobber", params=["N"])
    i = f.var("i", 0, "N")
    A = f.input("A", ("N",), tp.float64)
    T = f.buffer("T", ("N",), tp.float64)
    O = f.buffer("O", ("N",), tp.float64, output=True)
    s0 = f.computation("s0", [i], A[i] + 1.0).store_in(T, [i])
    s1 = f.computation("s1", [i], T[i] * 3.0).store_in(O, [i])
    s2 = f.computation("s2", [i], A[i] * 0.0 + 2.0).store_in(T, [i])
    return f, s0, s1, s2


@pytest.mark.parametrize("target", TARGETS)
def test_a_dead_write_may_move_before_the_write_that_overwrites_it(target):
    f, s0, s1, s2 = three_statements()
    s0.after(s2, None)                       # s2, s0, s1
    s1.after(s0, None)
    a = np.arange(4.0)
    np.testing.assert_array_equal(f.compile(target=target)(A=a, N=4), (a + 1) * 3)


def test_a_write_between_a_value_and_its_read_is_refused():
    f, s0, s1, s2 = three_statements()
    s1.after(s2, None)                       # s0, s2, s1: s1 would read s2's value
    with pytest.raises(tp.IllegalScheduleError, match="WAR on 'T'") as e:
        f.compile()
    assert (e.value.violation.source[0], e.value.violation.sink[0]) == ("s1", "s2")


def test_reversing_a_scatter_with_an_index_array_is_refused():
    # the writes' elements come from idx (may-writes): with repeated indices
    # the last write wins, so every memory dependence keeps its order
    f = tp.Function("scatter", params=["N"])
    i = f.var("i", 0, "N")
    idx = f.input("idx", ("N",), tp.int32)
    A = f.input("A", ("N",), tp.float64)
    O = f.buffer("O", ("N",), tp.float64, output=True)
    s = f.computation("s", [i], A[i] + 0.0).store_in(O, [idx[i]])
    s.reverse("i")
    with pytest.raises(tp.IllegalScheduleError, match="WAW on 'O'"):
        f.compile()


def test_a_parallel_loop_may_not_race_on_dead_writes():
    # s0's writes of T[0] are all overwritten by s1 (no value is lost by
    # reversing i), but iterations running at once would race on T[0]
    f = tp.Function("race", params=["N"])
    i = f.var("i", 0, "N")
    A = f.input("A", ("N",), tp.float64)
    T = f.buffer("T", ("N",), tp.float64)
    O = f.buffer("O", ("N",), tp.float64, output=True)
    s0 = f.computation("s0", [i], A[i] + 1.0).store_in(T, [0])
    f.computation("s1", [i], A[i] * 2.0).store_in(T, [i])
    f.computation("s2", [i], T[i] + 0.0).store_in(O, [i])
    s0.reverse("i")
    a = np.arange(3.0)
    np.testing.assert_array_equal(f.compile()(A=a, N=3), 2 * a)
    s0.parallelize("i")
    with pytest.raises(tp.IllegalScheduleError, match="cannot be parallelised"):
        f.compile()

"""``store_nontemporal()``: a computation's stores written past the caches
(:class:`codegen.ir.StreamStore`; C: :mod:`codegen.c.stream`, LLVM:
:mod:`codegen.llvm.stream`).  The values are the plain kernel's bit for bit
on both targets, whatever the output's alignment (rows starting at every
4-byte offset of a line), with rows written in turn (an unrolled row loop:
one run per row), partial tiles, a serial kernel, an output read again in
the kernel (no run held), another computation writing the streamed array
after it (plainly, streamed in shorter vectors, or through other rows'
runs: the runs are flushed first), a kernel's own temporary (no run: it is
freed before the scope's flush), 8-byte and integer elements, a store not
contiguous in its vector loop (kept plain); the fences end each parallel
range and the kernel; the command refuses updates and replays when printed.
No timing is asserted (bench peers measures the stencil)."""
from __future__ import annotations

import numpy as np
import pytest

import tiramisu_py as tp

TARGETS = ("c", "llvm")


def elementwise(n, m, dtype=tp.float32, *, stream=True, rows=False, serial=False):
    f = tp.Function("ew", params={"N": n, "M": m})
    i, j = f.var("i", 0, "N"), f.var("j", 0, "M")
    A = f.input("A", ("N", "M"), dtype)
    out = f.computation("out", [i, j], A[i, j] * 2 + 1)
    if rows:                                   # 4 rows in turn, a vector of each
        out.split(i, 4)
        out.split(j, 16 if dtype.name in ("float32", "int32") else 8)
        out.interchange("i1", "j0")
        out.unroll("i1", 4)
        out.vectorize("j1", 16 if dtype.name in ("float32", "int32") else 8)
        if not serial:
            out.parallelize("i0")
    else:
        out.split(j, 16 if dtype.name in ("float32", "int32") else 8)
        out.vectorize("j1", 16 if dtype.name in ("float32", "int32") else 8)
        if not serial:
            out.parallelize(i)
    if stream:
        out.store_nontemporal()
    return f


def _outputs(shape, dtype):
    """The output at each element offset of a 64-byte line."""
    per_line = 64 // np.dtype(dtype).itemsize
    size = int(np.prod(shape))
    raw = np.zeros(size + 2 * per_line, dtype)
    first = (-(raw.ctypes.data % 64) // raw.itemsize) % per_line
    for off in range(per_line):
        yield raw[first + off:first + off + size].reshape(shape)


@pytest.mark.parametrize("target", TARGETS)
@pytest.mark.parametrize("n,m,dtype,rows", [
    (13, 70, tp.float32, False), (13, 70, tp.float32, True), (8, 64, tp.float32, True),
    (9, 37, tp.float64, False), (6, 50, tp.float64, True), (7, 45, tp.int32, True)])
def test_streamed_values_equal_the_plain_kernels_at_every_alignment(target, n, m, dtype, rows):
    npt = np.dtype(dtype.name)
    A = (np.random.default_rng(0).standard_normal((n, m)) * 50).astype(npt)
    plain = elementwise(n, m, dtype, stream=False, rows=rows).compile(target=target)
    k = elementwise(n, m, dtype, rows=rows).compile(target=target)
    want = np.zeros((n, m), npt)
    plain(A=A, out=want)
    np.testing.assert_array_equal(want, A * npt.type(2) + npt.type(1))
    for out in _outputs((n, m), npt):
        k(A=A, out=out)
        np.testing.assert_array_equal(out, want)


@pytest.mark.parametrize("serial", [False, True])
def test_c_holds_a_run_per_row_and_fences(serial):
    src = elementwise(8, 64, rows=True, serial=serial).compile(target="c").source
    assert "tp_stream_run tp_run_out[4] = {{0}};" in src
    # each row its run (the row modulo 4: a constant in each unrolled copy)
    assert src.count("tp_stream_line(&tp_run_out[(uint64_t)(4 * i0 + i1) & 3], "
                     "&out[4 * i0 + i1][16 * j0 + 0], tp_nt_out);") == 4
    assert "for (int tp_r = 0; tp_r < 4; tp_r++) tp_stream_flush(&tp_run_out[tp_r]);" in src
    body = src[src.index("int ew("):]
    assert body.count("tp_stream_fence();") == (1 if serial else 2)   # each range, the kernel
    A = np.arange(8 * 64, dtype=np.float32).reshape(8, 64)
    for out in _outputs((8, 64), np.float32):
        elementwise(8, 64, rows=True, serial=serial).compile(target="c")(A=A, out=out)
        np.testing.assert_array_equal(out, A * 2 + 1)


def test_llvm_streams_line_aligned_vectors_and_fences():
    src = elementwise(8, 64).compile(target="llvm").source
    assert "!nontemporal" in src and "align 64, !nontemporal" in src
    assert src.count("call void @llvm.x86.sse.sfence()") == 2 or "fence seq_cst" in src


def test_an_output_read_again_holds_no_run_and_stays_right():
    f = tp.Function("ew", params={"N": 9, "M": 40})
    i, j = f.var("i", 0, "N"), f.var("j", 0, "M")
    A = f.input("A", ("N", "M"), tp.float32)
    O = f.buffer("O", ("N", "M"), tp.float32, output=True)
    out = f.computation("out", [i, j], A[i, j] * 2 + 1)
    out.store_in(O, [i, j])
    out.split(j, 16)
    out.vectorize("j1", 16)
    out.parallelize(i)
    out.store_nontemporal()
    i2, j2 = f.var("i2", 0, "N"), f.var("j2", 0, "M")
    T = f.buffer("T", (1,), tp.float32, output=True)
    total = f.computation("total", [], 0.0, dtype=tp.float32)
    total.store_in(T, [0])
    total[()] += O[i2, j2]
    A_ = np.random.default_rng(1).standard_normal((9, 40)).astype(np.float32)
    for target in TARGETS:
        k = f.compile(target=target)
        if target == "c":
            assert "tp_stream(&O" in k.source and "tp_stream_run tp_run_" not in k.source
        got = k(A=A_)
        np.testing.assert_array_equal(got["O"], A_ * np.float32(2) + np.float32(1))
        np.testing.assert_allclose(got["T"][0], got["O"].sum(dtype=np.float64), rtol=1e-5)


def test_a_store_not_contiguous_in_its_vector_loop_stays_plain():
    f = tp.Function("tr", params={"N": 32})
    i, j = f.var("i", 0, "N"), f.var("j", 0, "N")
    A = f.input("A", ("N", "N"), tp.float32)
    out = f.computation("out", [i, j], A[j, i] + 1)
    out.interchange(i, j)
    out.vectorize(i, 16)                     # out[i][j] along i: a column
    out.store_nontemporal()
    A_ = np.random.default_rng(2).standard_normal((32, 32)).astype(np.float32)
    for target in TARGETS:
        k = f.compile(target=target)
        assert "tp_stream" not in k.source and "!nontemporal" not in k.source
        np.testing.assert_array_equal(k(A=A_), A_.T + np.float32(1))


def test_updates_are_refused_and_the_command_replays():
    f = tp.Function("g", params={"N": 8})
    i, k = f.var("i", 0, "N"), f.var("k", 0, "N")
    A = f.input("A", ("N", "N"), tp.float32)
    s = f.computation("s", [i], 0.0, dtype=tp.float32)
    s[i] += A[i, k]
    with pytest.raises(ValueError, match=r"s_update\.store_nontemporal\(\): applies to computations"):
        s.update.store_nontemporal()
    s.store_nontemporal()
    assert f.schedule_commands() == ["s.store_nontemporal()"]
    g = elementwise(8, 64)
    h = elementwise(8, 64, stream=False)
    exec("\n".join(f"f.computations['out'].{c.split('.', 1)[1]}"
                   for c in g.schedule_commands() if c.startswith("out.store")), {"f": h})
    assert h.compile(target="c").source == g.compile(target="c").source


def test_passes_that_rebuild_a_store_keep_it_streaming():
    from codegen import ir
    assert issubclass(ir.StreamStore, ir.Store)
    s = ir.StreamStore("out", (ir.Var("i"),), ir.Const(1.0, "float32"))
    assert type(ir.store_like(s, "x", s.index, s.value)) is ir.StreamStore


@pytest.mark.parametrize("kind", ["plain", "short", "rows"])
def test_another_computation_writing_the_array_after_it_wins(kind):
    """``d`` overwrites all of ``O`` after the streamed ``c``: plainly, in
    8-lane streamed vectors (no run), or streamed with ``c``'s rows
    unrolled (other runs): what ``c``'s runs held is written before."""
    f = tp.Function("k", params={"N": 4, "M": 32})
    i, j = f.var("i", 0, "N"), f.var("j", 0, "M")
    A = f.input("A", ("N", "M"), tp.float32)
    O = f.buffer("O", ("N", "M"), tp.float32, output=True)
    c = f.computation("c", [i, j], A[i, j] + 1)
    c.store_in(O, [i, j])
    if kind == "rows":
        c.split(i, 2)
        c.split(j, 16)
        c.interchange("i1", "j0")
        c.unroll("i1")
        c.vectorize("j1", 16)
    else:
        c.vectorize(j, 16)
    c.store_nontemporal()
    i2, j2 = f.var("i2", 0, "N"), f.var("j2", 0, "M")
    d = f.computation("d", [i2, j2], A[i2, j2] - 3)
    d.store_in(O, [i2, j2])
    d.vectorize(j2, 8 if kind == "short" else 16)
    if kind != "plain":
        d.store_nontemporal()
    A_ = np.arange(128, dtype=np.float32).reshape(4, 32)
    for target in TARGETS:
        k = f.compile(target=target)
        for out in _outputs((4, 32), np.float32):
            k(A=A_, O=out)
            np.testing.assert_array_equal(out, A_ - np.float32(3))


def test_a_temporary_is_streamed_without_a_run():
    f = tp.Function("k", params={"N": 64, "M": 40})
    i, j = f.var("i", 0, "N"), f.var("j", 0, "M")
    A = f.input("A", ("N", "M"), tp.float32)
    T = f.buffer("T", ("N", "M"), tp.float32)
    c = f.computation("c", [i, j], A[i, j] + 1)
    c.store_in(T, [i, j])
    c.vectorize(j, 16)
    c.store_nontemporal()
    i2, j2 = f.var("i2", 0, "N"), f.var("j2", 0, "M")
    f.computation("d", [i2, j2], A[i2, j2] * 2)
    k = f.compile(target="c")
    assert "tp_stream(&T" in k.source and "tp_stream_run tp_run_" not in k.source
    A_ = np.ones((64, 40), np.float32)
    np.testing.assert_array_equal(k(A=A_), A_ * 2)

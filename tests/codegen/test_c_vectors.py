"""The C target keeps its vector code: gcc 12.2's miscompile of if-converted
guarded loads is worked around only in kernels that have a guarded access
(codegen.toolchain.IFCVT_GUARD), so a scheduled softmax -- selects in the
vector math's clamps and in max, no guarded load -- is vector code on C.
Counted in the assembly gcc makes from the kernel's source, not timed."""
import platform
import re
import subprocess

import numpy as np
import pytest

import tiramisu_py as tp
from codegen import toolchain
from codegen.c.emit import guarded_access

X86 = platform.machine() in ("x86_64", "AMD64", "i686")


def softmax():
    """The README's style of schedule: parallel rows, 16-wide vectors,
    reassociated sums."""
    f = tp.Function("softmax", params=["N", "M"])
    i, j = f.var("i", 0, "N"), f.var("j", 0, "M")
    X = f.input("X", ("N", "M"), tp.float32)
    mx = f.computation("mx", [i], X[i, 0])
    mx[i].max(X[i, j])
    e = f.computation("e", [i, j], tp.exp(X[i, j] - mx[i]))
    s = f.computation("s", [i], 0.0)
    s[i] += e[i, j]
    out = f.computation("out", [i, j], e[i, j] / s[i])
    for c in (mx, mx.update, e, s, s.update, out):
        c.parallelize("i")
    mx.update.vectorize("j", 16, allow_reassociation=True)
    e.vectorize("j", 16)
    s.update.vectorize("j", 16, allow_reassociation=True)
    out.vectorize("j", 16)
    return f


def padded_copy(fixed=True):
    """``out[y, x] = 1 <= y < N + 1 ? data[y - 1, x] : 0``: the guarded copy
    gcc 12.2 vectorised wrongly (spatial_pack's padded input); ``fixed``:
    its sizes fixed at declaration, else given at the call."""
    f = tp.Function("padded", params={"N": 7, "W": 6} if fixed else ["N", "W"])
    y, x = f.var("y", 0, "N + 2"), f.var("x", 0, "W")
    data = f.input("data", ("N", "W"), tp.float32)
    f.computation("out", [y, x], tp.select((y >= 1) & (y < f.param("N") + 1), data[y - 1, x], 0.0))
    return f


def packed_float_ops(source: str) -> int:
    """The packed single-precision instructions on 256- or 512-bit registers
    in the assembly of ``source`` built with every flag of a kernel's build."""
    cc = toolchain.find_c_compiler()
    flags = [f for f in toolchain.compiler_flags(cc) if f != "-shared"]
    r = subprocess.run([*cc.argv, *flags, "-S", "-o", "-", "-x", "c", "-"], input=source,
                       capture_output=True, text=True, timeout=300)
    assert r.returncode == 0, r.stderr
    return sum(1 for line in r.stdout.splitlines()
               if re.match(r"\s+v\w+ps\s", line) and re.search(r"%[yz]mm", line))


def test_only_a_kernel_with_a_guarded_load_turns_if_conversion_off():
    """A read-only array of fixed shape is read before the select chooses
    (codegen.c.speculate: the index held to its extent, a blend): no guarded
    load is left and if-conversion stays on; with sizes given at the call the
    load stays guarded and the kernel turns if-conversion off."""
    soft = softmax().compile(target="cpu")
    pad = padded_copy().compile(target="cpu")
    free = padded_copy(fixed=False).compile(target="cpu")
    assert toolchain.IFCVT_GUARD not in soft.source
    assert not guarded_access(soft.lowered.body, soft.lowered.constants)
    assert toolchain.IFCVT_GUARD not in pad.source and "tp_pick_f32(" in pad.source
    assert "[tp_min_i64(tp_max_i64(y - 1, 0), 6)][x]" in pad.source     # x stays in bounds
    assert toolchain.IFCVT_GUARD in free.source and "tp_pick" not in free.source
    d = np.arange(42, dtype=np.float32).reshape(7, 6) + 1
    want = np.concatenate([np.zeros((1, 6), np.float32), d, np.zeros((1, 6), np.float32)])
    np.testing.assert_array_equal(pad(d), want)
    np.testing.assert_array_equal(free(d, N=7, W=6), want)


def test_a_speculated_guarded_load_is_right_where_gcc_miscompiled_it():
    """The padded copy at sizes that make gcc vectorise it (masked group
    loads where if-conversion meets a guarded load), every row and edge."""
    for n, w in ((7, 6), (33, 40), (5, 17)):
        f = tp.Function("padded_at", params={"N": n, "W": w})
        y, x = f.var("y", 0, n + 2), f.var("x", 0, w)
        data = f.input("data", ("N", "W"), tp.float32)
        f.computation("out", [y, x], tp.select((y >= 1) & (y < n + 1), data[y - 1, x], 0.0))
        if w >= 16:
            f.computations["out"].vectorize("x", 16)
        k = f.compile(target="cpu")
        d = np.random.default_rng(n).standard_normal((n, w)).astype(np.float32)
        np.testing.assert_array_equal(k(d), np.pad(d, ((1, 1), (0, 0))))


def test_a_column_held_in_a_vector_loop_is_read_unheld_inside():
    """A padded input read along the vector loop (``in[y - 1][x - 1]``, a
    3x3 convolution's tap): the column's hold would make the lanes a gather,
    so the loop is printed twice, the version whose every lane is inside the
    array reading the program's column (contiguous), the border's the held
    one; the result is the padded array at every edge and size."""
    for n, w in ((7, 6), (9, 40), (5, 33)):
        f = tp.Function("padded_cols", params={"N": n, "W": w})
        y, x = f.var("y", 0, n + 2), f.var("x", 0, w + 2)
        data = f.input("data", ("N", "W"), tp.float32)
        inside = (y >= 1) & (y < n + 1) & (x >= 1) & (x < w + 1)
        f.computation("out", [y, x], tp.select(inside, data[y - 1, x - 1], 0.0))
        f.computations["out"].vectorize("x", 16)
        k = f.compile(target="cpu")
        assert "every lane's read inside its array" in k.source
        row = f"[tp_min_i64(tp_max_i64(y - 1, 0), {n - 1})]"
        assert re.search(re.escape(f"data{row}[") + r"[^\]]*x\w* - 1\]", k.source), k.source
        assert f"data{row}[tp_min_i64(tp_max_i64(" in k.source       # the border's
        d = np.random.default_rng(n).standard_normal((n, w)).astype(np.float32)
        np.testing.assert_array_equal(k(d), np.pad(d, 1))


@pytest.mark.skipif(not X86, reason="counts x86 vector instructions (ymm/zmm registers)")
def test_scheduled_softmax_is_vector_code_on_c():
    k = softmax().compile(target="cpu")
    x = np.random.default_rng(0).standard_normal((64, 1024)).astype(np.float32)
    e = np.exp(x - x.max(1, keepdims=True))
    np.testing.assert_allclose(k(x), e / e.sum(1, keepdims=True), rtol=1e-5, atol=1e-7)
    if "avx2" not in open("/proc/cpuinfo").read():
        pytest.skip("the host has no 256-bit vectors")
    # 66 with if-conversion on gcc 12.2 (AVX-512), 12 without it: the exp
    # polynomial, the max, the sums and the division as packed operations
    assert packed_float_ops(k.source) >= 40


@pytest.mark.skipif(not X86, reason="counts x86 vector instructions (ymm/zmm registers)")
def test_a_load_each_vector_iteration_repeats_is_read_once_before_the_loop():
    """A softmax's rows fused by ``auto_schedule(reassociate=True)``, sizes
    fixed: ``mx[i]`` and ``s[i]``, read at every lane of loops that write
    neither, are read once before each loop (codegen.c.invariant); gcc then
    vectorises the exp and the division (reloading them per iteration inside
    the OpenMP region, it had kept those loops scalar, "control flow in loop":
    15 packed operations instead of 49 on gcc 12.2, AVX-512)."""
    from examples.beyond_polybench import build_softmax
    f = build_softmax({"N": 64, "M": 1024}, tp.float32)
    f.auto_schedule(target="cpu", reassociate=True)
    k = f.compile(target="cpu")
    assert re.search(r"const float tp_inv\d+ = mx\[i\];", k.source), k.source
    assert re.search(r"const float tp_inv\d+ = s\[i\];", k.source)
    x = np.random.default_rng(0).standard_normal((64, 1024)).astype(np.float32)
    e = np.exp(x - x.max(1, keepdims=True))
    np.testing.assert_allclose(k(X=x), e / e.sum(1, keepdims=True), rtol=1e-5, atol=1e-7)
    if "avx2" not in open("/proc/cpuinfo").read():
        pytest.skip("the host has no 256-bit vectors")
    assert packed_float_ops(k.source) >= 40


def test_only_loads_every_iteration_makes_are_read_before_the_loop():
    """Not hoisted: a load in a select's arm (it may be out of bounds where
    the select does not take it: ``A[i - 1]`` at ``i = 0``), one whose index
    reads the loop's variable, one of an array the loop writes, and any load
    of a loop that may run no iteration; the results stay right."""
    f = tp.Function("arms", params={"N": 5, "M": 32})
    i, j = f.var("i", 0, "N"), f.var("j", 0, "M")
    A, B = f.input("A", ("N",), tp.float32), f.input("B", ("N", "M"), tp.float32)
    f.computation("out", [i, j], tp.select(i >= 1, A[i - 1], 0.0) + B[i, j])
    f.computations["out"].vectorize("j", 16)
    k = f.compile(target="cpu")
    assert "tp_inv" not in k.source
    a = np.arange(5, dtype=np.float32) + 1
    b = np.ones((5, 32), np.float32)
    np.testing.assert_array_equal(k(a, b), np.concatenate([[0], a[:-1]])[:, None] + b)
    g = tp.Function("tail", params=["N", "M"])
    i, j = g.var("i", 0, "N"), g.var("j", 0, "M")
    A, B = g.input("A", ("N",), tp.float32), g.input("B", ("N", "M"), tp.float32)
    g.computation("out", [i, j], A[i] * B[i, j])
    g.computations["out"].vectorize("j", 16)
    src = g.compile(target="cpu").source
    # the full strips (16 iterations) read A[i] once; the last, partial one
    # (possibly empty when M is a multiple of 16) reads it in the loop
    assert re.search(r"const float tp_inv\d+ = A\[i\];", src), src
    assert re.search(r"j1 < tp_min_i64[^\n]*\n[^\n]*A\[i\] \*", src), src


def blocked_gemm(rows, vectors, n=37, m=45, k=29):
    """C = A B with a register block of ``rows`` x ``vectors`` 16-wide vectors
    accumulated locally over k (partial tiles at every edge)."""
    from examples import gemm
    f = gemm.build()
    u = f.computations["C"].update
    u.tile("i", "j", rows, 16 * vectors)
    u.split("j1", 16)
    u.reorder("i0", "j0", "k", "i1", "j10", "j11")
    u.unroll("i1")
    u.unroll("j10")
    u.vectorize("j11", 16)
    u.accumulate_locally("k")
    return f, (n, m, k)


@pytest.mark.parametrize("rows, vectors", [(2, 2), (6, 4)])
def test_a_small_register_block_is_printed_as_vector_statements(rows, vectors):
    """A register block's vectors of known length (full tiles) in 3/4 of the
    vector registers are named vector variables (codegen.c.regtile: gcc keeps
    them in registers over k, as it does not an array); a larger block stays
    an array of omp simd loops (it would spill anyway); partial tiles stay
    loops; the result is right either way."""
    from codegen import target
    f, (n, m, kk) = blocked_gemm(rows, vectors)
    k = f.compile(target="c")
    per_vector = max(1, 16 // max(1, target.vector_bits() // 32))      # registers
    named = rows * vectors * per_vector <= target.vector_registers() * 3 // 4
    named_sums = re.findall(r"(C_local__v\d+) = \(\1 \+ ", k.source)
    loop_sums = "C_local[i1][j10][j11] = C_local[i1][j10][j11] + " in k.source
    assert len(set(named_sums)) == (rows * vectors * per_vector if named else 0), k.source
    assert loop_sums == (not named), k.source
    rng = np.random.default_rng(5)
    a = rng.standard_normal((n, kk), dtype=np.float32)
    b = rng.standard_normal((kk, m), dtype=np.float32)
    np.testing.assert_allclose(k(a, b), a @ b, rtol=1e-5, atol=1e-5)


def rows_in_lanes(dtype, n, m, w, blocks=1):
    """``y[b, i] += A[b, i, j] * x[b, j]`` with its rows in the lanes: the
    ``blocks * w x w`` tile of A copied per ``j0`` transposed (``[j % w][i %
    (blocks * w)]``; ``blocks`` vectors of rows, unrolled inside ``j1``)."""
    f = tp.Function("rows_in_lanes", params={"NB": 3, "N": n, "M": m})
    b, i, j = f.var("b", 0, "NB"), f.var("i", 0, "N"), f.var("j", 0, "M")
    A, x = f.input("A", ("NB", "N", "M"), dtype), f.input("x", ("NB", "M"), dtype)
    y = f.computation("y", [b, i], 0.0, dtype=dtype)
    y[b, i] += A[b, i, j] * x[b, j]
    u = y.update
    u.split("i", blocks * w)
    u.split("j", w)
    lanes = "i1"
    if blocks > 1:
        u.split("i1", w)
        lanes = "i11"
        u.reorder("i0", "j0", "j1", "i10", lanes)
    else:
        u.reorder("i0", "j0", "j1", lanes)
    c = u.cache_at("A[b, i, j]", "j0", name="At")
    c.store_in(f.buffer("At_tile", (w, blocks * w), dtype), [c.vars[2] % w, c.vars[1] % (blocks * w)])
    u.vectorize(lanes, w)
    u.unroll("j1")
    if blocks > 1:
        u.unroll("i10")
    return f


@pytest.mark.parametrize("dtype", [tp.float32, tp.float64])
@pytest.mark.parametrize("n,m", [(32, 48), (37, 21)])
def test_a_transposing_square_copy_goes_through_registers(monkeypatch, dtype, n, m):
    """A tile copied transposed by two loops of the lanes' length is printed
    as vector loads, interleaving shuffles and vector stores (sizes with
    partial tiles, 37 x 21, keep the loops); the values are the element-by-element copy's,
    bit for bit."""
    from codegen import loops
    from codegen.c import transpose
    w = loops.host_lanes(dtype.bits)
    rng = np.random.default_rng(0)
    npt = np.float32 if dtype == tp.float32 else np.float64
    A, x = rng.random((3, n, m)).astype(npt), rng.random((3, m)).astype(npt)
    k = rows_in_lanes(dtype, n, m, w).compile()
    whole = w >= 4 and n % w == 0 and m % w == 0   # else min() bounds: the loops stay
    assert k.source.count("copy transposed through registers") == int(whole)
    rounds = w.bit_length() - 1
    assert sum(k.source.count(f"tp_zip{n}_lo_{transpose.SUF[dtype.name]}x{w}(")
               for n in range(rounds)) == ((w // 2 + 1) * rounds if whole else 0)   # calls, helpers
    assert k.source.count("__builtin_prefetch(") == (w if whole else 0)
    got = np.asarray(k(A=A, x=x))
    from tiramisu_py.driver import warm
    monkeypatch.setattr(warm, "ENABLED", False)      # printed again, not the kept kernel
    monkeypatch.setattr(transpose.TransposeMixin, "transposed_copy", lambda self, s, ind: False)
    plain = rows_in_lanes(dtype, n, m, w).compile()
    assert "transposed through registers" not in plain.source
    np.testing.assert_array_equal(got, np.asarray(plain(A=A, x=x)))
    np.testing.assert_allclose(got, np.einsum("bij,bj->bi", A, x), rtol=1e-5)


@pytest.mark.parametrize("dtype", [tp.float32, tp.float64])
@pytest.mark.parametrize("blocks", [2, 4])
def test_a_copy_of_stacked_square_blocks_goes_through_registers(monkeypatch, dtype, blocks):
    """A transposing copy whose outer loop runs 2 or 4 times the lanes (the
    tile of ``blocks`` vectors of rows, ``transposed_rows``) is printed as
    that many register transposes; bit for bit the element-by-element copy."""
    from codegen import loops
    from codegen.c import transpose
    w = loops.host_lanes(dtype.bits)
    if w < 4:
        pytest.skip(f"{w} lanes of {dtype.name}: the copy keeps its loops below 4")
    n, m = 2 * blocks * w, 3 * w
    npt = np.float32 if dtype == tp.float32 else np.float64

    rng = np.random.default_rng(1)
    A, x = rng.random((3, n, m)).astype(npt), rng.random((3, m)).astype(npt)
    k = rows_in_lanes(dtype, n, m, w, blocks).compile()
    assert k.source.count(f"a {blocks * w} x {w} copy transposed through registers") == 1
    assert k.source.count("__builtin_prefetch(") == blocks * w
    got = np.asarray(k(A=A, x=x))
    from tiramisu_py.driver import warm
    monkeypatch.setattr(warm, "ENABLED", False)
    monkeypatch.setattr(transpose.TransposeMixin, "transposed_copy", lambda self, s, ind: False)
    np.testing.assert_array_equal(got, np.asarray(rows_in_lanes(dtype, n, m, w, blocks).compile()(A=A, x=x)))
    np.testing.assert_allclose(got, np.einsum("bij,bj->bi", A, x), rtol=1e-5)


@pytest.mark.parametrize("w,q", [(16, 4), (8, 2), (8, 4), (4, 2), (4, 4), (16, 8)])
def test_the_transpose_rounds_move_each_column_into_one_register(w, q):
    """The shuffles of :func:`codegen.c.transpose.rounds` (in-lane rounds,
    then whole 128-bit lanes), run on a ``w x w`` matrix with NumPy, leave
    column ``c`` in register ``order[c]``, its rows in lane order."""
    from codegen.c.transpose import rounds
    plan, order = rounds(w, q)
    assert len(plan) == w.bit_length() - 1
    regs = [row for row in np.arange(w * w).reshape(w, w)]
    for n, (lo, hi) in enumerate(plan):
        d, new = 1 << n, list(regs)
        for m in (m for m in range(w) if not m & d):
            both = np.concatenate([regs[m], regs[m + d]])
            new[m], new[m + d] = both[list(lo)], both[list(hi)]
        regs = new
    for c in range(w):
        np.testing.assert_array_equal(regs[order[c]], np.arange(w) * w + c)


def two_row_sums():
    """``s[i] += A[i][j] x[j]`` and ``t[i] += B[i][j] x[j]`` fused in one
    vector loop over ``j``, reassociation allowed (gesummv's row)."""
    f = tp.Function("two_sums", params={"N": 8, "M": 64})
    i, j = f.var("i", 0, "N"), f.var("j", 0, "M")
    A, B = f.input("A", ("N", "M"), tp.float64), f.input("B", ("N", "M"), tp.float64)
    x = f.input("x", ("M",), tp.float64)
    with f.nest(i):
        s = f.computation("s", [i], 0.0, dtype=tp.float64)
        t = f.computation("t", [i], 0.0, dtype=tp.float64)
        with f.nest(j):
            s[i] += A[i, j] * x[j]
            t[i] += B[i, j] * x[j]
    for c in (s, t):
        c.update.vectorize("j", 8, allow_reassociation=True)
    return f


def test_two_reductions_in_one_vector_loop_each_get_an_accumulator():
    """Each sum in a local accumulator under one ``omp simd reduction``
    (they had stayed scalar, loaded and stored at every element).  (A
    statement reading an array the loop reduces into, which the printer
    would leave in memory, is refused by the legality check before.)"""
    rng = np.random.default_rng(0)
    a = {"A": rng.standard_normal((8, 64)), "B": rng.standard_normal((8, 64)),
         "x": rng.standard_normal(64)}
    k = two_row_sums().compile("c")
    assert re.search(r"reduction\(\+: tp_acc_\w+_0, tp_acc_\w+_1\)", k.source), k.source
    assert "kept scalar" not in k.source
    out = k(**a)
    np.testing.assert_allclose(out["s"], a["A"] @ a["x"], rtol=1e-12)
    np.testing.assert_allclose(out["t"], a["B"] @ a["x"], rtol=1e-12)

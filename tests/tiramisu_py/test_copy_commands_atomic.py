"""The copy commands (cache_at on the CPU, cache_shared and cache_local on
the GPU) are atomic: a refused call, whether it refuses before or after the
copy was made, leaves the Function exactly as it was (computations,
statements and nests, the consumer's expression, loops, buffers, names,
commands, cached state), the kernel compiled afterwards matches NumPy, and a
correct command works after it.  ``f.undo()`` of a successful copy command
removes the copy too; ``f.reset_schedule()`` removes every copy."""
import numpy as np
import pytest

import tiramisu_py as tp
from examples import gemm
from schedules.solvers import gemm_cuda as gpu_gemm
from tiramisu_py.commands.state import state_of

RNG = np.random.default_rng(14)
SMALL = (37, 29, 53)


def _items(nest):
    return [_items(x) if hasattr(x, "items") else x.name for x in nest.items]


def observed(f):
    """Everything a copy command may change, as comparable values."""
    return {
        "computations": list(f.computations),
        "statements": [s.name for s in f.statements],
        "nests": _items(f._root),
        "values": [repr(s.value) for s in f.statements],
        "commands": f.schedule_commands(),
        "calls": [c.call for c in f._commands],
        "vars": [v.name for v in f.vars],
        "buffers": list(f.buffers),
        "names": sorted(f._names),
    }


def refused_unchanged(f, consumer, call, match, exc=ValueError):
    """``call()`` raises ``exc`` matching ``match`` and leaves ``f`` as it
    was: the same observations, the same expression object, the same cached
    schedule state and model."""
    state_of(f)                         # a cached state, to check it is kept
    before, value = observed(f), consumer.value
    state, model = f._state_cache, f._model_cache
    with pytest.raises(exc, match=match):
        call()
    assert observed(f) == before
    assert consumer.value is value
    assert f._state_cache is state and f._model_cache is model


def gemm_args(n, m, k):
    return (RNG.standard_normal((n, k), dtype=np.float32),
            RNG.standard_normal((k, m), dtype=np.float32))


def assert_gemm(f, shape=SMALL, target="c"):
    a, b = gemm_args(*shape)
    np.testing.assert_allclose(f.compile(target=target)(a, b), a @ b, rtol=1e-4, atol=1e-4)


# ------------------------------------------------------------------ cache_at (CPU)
def tiled_gemm():
    f = gemm.build()
    u = f.computations["C"].update
    u.tile("i", "j", 8, 16)
    return f, u


def test_cache_at_refused_after_the_copy_leaves_the_function_unchanged():
    f, u = tiled_gemm()
    B = f.buffers["B"]
    # an unknown loop: refused by the copy's compute_at, after the copy was declared
    refused_unchanged(f, u, lambda: u.cache_at(B, "nope", name="Bp"), r"has no loop 'nope'")
    # a name taken: refused after the copy's loops (Bx_0, Bx_1) were declared
    f.buffer("Bx", (4,), tp.float32)
    refused_unchanged(f, u, lambda: u.cache_at(B, "j0", name="Bx"),
                      r"computation name 'Bx' is already used")
    assert "Bx_0" not in [v.name for v in f.vars]
    assert_gemm(f, target="llvm")
    # a correct command after the refusals
    bp = u.cache_at(B, "j0", name="Bp")
    assert f.schedule_commands()[-1] == "Bp.compute_at(C_update, j0)"
    assert "Bp[" in repr(u.value) and "B[" not in repr(u.value)
    bp.store_in(f.buffer("Bpk", ("K", 16), tp.float32), [bp.vars[0], bp.vars[1] % 16])
    assert_gemm(f)
    assert "Bpk[" in f.compile().source


def test_cache_at_refused_before_the_copy_source_written_in_the_nest():
    f = tp.Function("f", params=["N"])
    t, i = f.var("t", 0, 3), f.var("i", 0, "N")
    A = f.buffer("A", ("N",), tp.float64, output=True)
    R = f.buffer("R", (3, "N"), tp.float64, output=True)
    X = f.input("X", ("N",), tp.float64)
    with f.nest(t):
        f.computation("w", [t, i], A[i] + 1.0).store_in(A, [i])
        r = f.computation("r", [t, i], A[i] * 2.0 + X[i]).store_in(R, [t, i])
    refused_unchanged(f, r, lambda: r.cache_at(A, "t"), "stale")
    a = RNG.random(9)
    x = RNG.random(9)
    ref = np.stack([(a + t + 1) * 2.0 + x for t in range(3)])
    out = f.compile()(x, A=a.copy(), R=np.zeros((3, 9)))
    np.testing.assert_allclose(out["A"], a + 3.0)
    np.testing.assert_allclose(out["R"], ref)
    # a correct command after the refusal: a copy of the input X per t
    xc = r.cache_at(X, "t", name="Xc")
    assert xc.name == "Xc" and "Xc[" in repr(r.value) and "A[" in repr(r.value)
    np.testing.assert_allclose(f.compile()(x, A=a.copy(), R=np.zeros((3, 9)))["R"], ref)


# ------------------------------------------------------------------ cache_shared
def mapped(row=False, n=None):
    """``Y[i, j] = 2 X[...]`` on blocks of 16 threads (``i``).  ``row``: X[i, j]
    with j < 300 (a thread reads 300 values); else X[j] with j < N (every
    thread reads all of X; N a param, or fixed to ``n``)."""
    f = tp.Function("rows" if row else "bcast",
                    params={"N": n or 64} if row or n else ["N"])
    i, j = f.var("i", 0, 64), f.var("j", 0, 300 if row else "N")
    x = f.input("X", (64, 300) if row else ("N",), tp.float32)
    y = f.computation("Y", [i, j], (x[i, j] if row else x[j]) * 2.0)
    y.split(i, 16).bind("i0", "block.x").bind("i1", "thread.x")
    return f, x, y


def test_cache_shared_unbounded_footprint_refused_unchanged():
    f, x, y = mapped()
    refused_unchanged(f, y, lambda: y.cache_shared(x, "i0"),
                      r"Y\.cache_shared\(X, i0\): the part of 'X' one iteration of 'i0' "
                      r"reads is unbounded")
    xv = RNG.standard_normal(20, dtype=np.float32)
    np.testing.assert_allclose(f.compile(target="c")(xv), np.tile(2 * xv, (64, 1)))


def test_cache_shared_tile_name_taken_refused_unchanged_then_works():
    f, x, y = mapped(n=24)
    f.buffer("X_shared_tile", (4,), tp.float32)          # the tile's default name, taken
    refused_unchanged(f, y, lambda: y.cache_shared(x, "i0"),
                      r"buffer name 'X_shared_tile' is already used")
    # refused before the copy: a thread loop
    refused_unchanged(f, y, lambda: y.cache_shared(x, "i1"), r"'i1' is a thread loop")
    xv = RNG.standard_normal(24, dtype=np.float32)
    np.testing.assert_allclose(f.compile(target="c")(xv), np.tile(2 * xv, (64, 1)))
    xs = y.cache_shared(x, "i0", name="Xs")
    assert f.buffers["Xs_tile"].memory == "shared" and "Xs[" in repr(y.value)
    np.testing.assert_allclose(f.compile(target="c")(xv), np.tile(2 * xv, (64, 1)))
    assert xs.name in f.computations


# ------------------------------------------------------------------ cache_local
def test_cache_local_too_big_refused_unchanged_then_works():
    f, x, y = mapped(row=True)
    refused_unchanged(f, y, lambda: y.cache_local(x, "i1"),
                      r"Y\.cache_local\(X, i1\): one thread's part of 'X' has 1 x 300 = 300 "
                      r"elements, beyond 256")
    xv = RNG.standard_normal((64, 300), dtype=np.float32)
    np.testing.assert_allclose(f.compile(target="c")(xv), 2 * xv)
    # a correct command: a copy at the inner loop j (one element per iteration)
    y.cache_local(x, "j")
    assert f.buffers["X_local_regs"].memory == "local" and "X_local[" in repr(y.value)
    np.testing.assert_allclose(f.compile(target="c")(xv), 2 * xv)


def test_cache_local_non_constant_footprint_refused_unchanged():
    f, x, y = mapped()
    refused_unchanged(f, y, lambda: y.cache_local(x, "i1"), r"is not of constant size")
    xv = RNG.standard_normal(20, dtype=np.float32)
    np.testing.assert_allclose(f.compile(target="c")(xv), np.tile(2 * xv, (64, 1)))


def test_cache_local_source_written_inside_refused_unchanged():
    f = tp.Function("two", params={"N": 64})
    i = f.var("i", 0, 64)
    x = f.input("X", (64,), tp.float32)
    t = f.computation("T", [i], x[i] * 2.0)
    y = f.computation("Y", [i], t[i] + 1.0)
    for s in (t, y):
        s.split(i, 16).bind("i0", "block.x").bind("i1", "thread.x")
    y.after(t, "i1")
    refused_unchanged(f, y, lambda: y.cache_local(t, "i1"), r"would be stale")
    xv = RNG.standard_normal(64, dtype=np.float32)
    np.testing.assert_allclose(f.compile(target="c")(xv), 2 * xv + 1)


def test_cache_local_of_a_shared_tile_refused_after_the_retarget_unchanged():
    """cache_local of A_shared retargets A_shared's compute_at (rewriting
    earlier commands) before its buffer is declared: a buffer name taken
    refuses it there, and the command log is back as it was."""
    f = gpu_gemm.function(*SMALL, tile=32, tk=8, micro=4)
    u = f.computations["C"].update
    a_sh = f.computations["A_shared"]
    f.buffer("Afrag_regs", (4,), tp.float32)
    refused_unchanged(f, u, lambda: u.cache_local(a_sh, "k1", name="Afrag"),
                      r"buffer name 'Afrag_regs' is already used")
    assert "A_shared.compute_at(C_update, k0)" in f.schedule_commands()
    assert_gemm(f)
    u.cache_local(a_sh, "k1")
    assert "A_shared.compute_at(A_shared_local, k0)" in f.schedule_commands()
    assert_gemm(f)


# ------------------------------------------------------------------ undo, reset, copy
def test_undo_of_cache_at_removes_the_copy():
    f, u = tiled_gemm()
    before, value = observed(f), u.value
    bp = u.cache_at(f.buffers["B"], "j0", name="Bp")
    bp.split(bp.vars[1].name, 4)              # the copy's own command: a later call
    assert f.undo() == f"bp.split(\"{bp.vars[1].name}\", 4)"
    assert "Bp" in f.computations
    assert f.undo().startswith("u.cache_at(")
    assert observed(f) == before and u.value is value
    assert_gemm(f)
    u.cache_at(f.buffers["B"], "j0", name="Bp")       # the names are free again
    assert_gemm(f)


def test_undo_of_cache_shared_and_cache_local_removes_the_copies():
    f = gpu_gemm.function(*SMALL, tile=32, tk=8, micro=4)
    u = f.computations["C"].update
    before = observed(f)
    u.cache_local(f.computations["A_shared"], "k1")       # retargets A_shared's compute_at
    assert "A_shared_local_regs" in f.buffers
    assert f.undo() == 'u.cache_local(A_shared, "k1")'
    assert observed(f) == before
    assert "A_shared.compute_at(C_update, k0)" in f.schedule_commands()
    assert_gemm(f)
    # the library's own calls, undone last first
    assert f.undo().startswith("u.accumulate_locally(")
    assert f.undo() == 'u.cache_shared(B, "k0")'
    assert "B_shared" not in f.computations and "B_shared_tile" not in f.buffers
    assert "A_shared[" in repr(u.value) and "B[" in repr(u.value)
    assert not any(c.startswith("B_shared") for c in f.schedule_commands())
    assert f.undo() == 'u.cache_shared(A, "k0")'
    assert list(f.computations) == ["C"] and list(f.buffers) == ["A", "B"]
    assert "A[" in repr(u.value)
    assert_gemm(f)


def test_reset_schedule_removes_every_copy():
    f = gpu_gemm.function(*SMALL, tile=32, tk=8, micro=4, fragments=True)
    f.reset_schedule()
    assert f.schedule_commands() == []
    assert list(f.computations) == ["C"]
    assert all(b.kind == "input" for b in f.buffers.values())
    assert "A[" in repr(f.computations["C"].update.value)
    assert_gemm(f)


def test_undo_on_a_copy_of_the_function_leaves_the_original():
    f, u = tiled_gemm()
    u.cache_at(f.buffers["B"], "j0", name="Bp")
    g = f.copy()
    after = observed(f)
    g.undo()
    assert "Bp" not in g.computations and "B[" in repr(g.computations["C"].update.value)
    assert observed(f) == after
    assert_gemm(g)
    assert_gemm(f)


def test_undo_refused_while_a_later_statement_reads_the_copy():
    f, u = tiled_gemm()
    bp = u.cache_at(f.buffers["B"], "j0", name="Bp")
    i, j = f.loop("i"), f.loop("j")
    f.computation("D", [i, j], bp[i % 4, j] + 1.0)     # declared after, reads the copy
    u.split("i0", 2)
    after = observed(f)
    assert f.undo() == 'u.split("i0", 2)'
    after_split = observed(f)
    for call in (f.undo, f.reset_schedule):
        with pytest.raises(ValueError, match=r"f\.undo\(\) of u\.cache_at\(.*\): D uses Bp, "
                                             r"which that call declared"):
            call()
        assert observed(f) == after_split
    assert after["commands"][:-1] == after_split["commands"]

"""The PolyBench legality suite (tests/polybench_kernels.py) with GPU mappings.

For every kernel of the suite, mappings written with the mapping commands
(`bind`, `gpu_tile`, `cache_shared`; time and wavefront loops as host loops,
one launch per step, or as a serial loop inside one block):

- legal mappings: `compile(target="cuda")` (printed, no cubins), the emulated
  CUDA source == the kernel's NumPy reference in the three thread orders, and
  the same GPU-mapped Function on the CPU (C and LLVM backends) == reference;
  the number of `__syncthreads()` the legality check inserted is the one
  derived by hand (comment per case);
- naive mappings that race (a block loop carrying a dependence, a dependence
  between the threads of one thread loop) are refused naming the command and
  two instances;
- deleting an inserted barrier from the printed source changes the emulated
  result; two mappings are built to cubins for sm_80/sm_90 (no spills).

Some mappings run a whole sequential loop inside one block (a persistent
kernel: the time loop, the wavefront, a triangular solve's column loop).  The
block loop then has one iteration, which the exact check can only know with the
sizes fixed: those kernels are built with `fixed(...)`, the suite's builder
with its params given as constants (the suite's default input sizes)."""
import functools
import re
import zlib
from unittest import mock

import numpy as np
import pytest

import tiramisu_py as tp
import tests.polybench_kernels as pk
from tests.polybench_kernels import SPECS
from codegen.cuda.printer import evaluate
from tests.test_cuda import ORDERS, cuda_kernel, emulate_source, needs_cxx, needs_nvcc

RTOL, ATOL = 1e-9, 1e-12


# ------------------------------------------------------------------- helpers
def S(f, name):
    """A statement by name or by the kernel's readable alias (``f.named``)."""
    named = getattr(f, "named", {})
    if name in named:
        return named[name]
    return next(s for s in f.statements if s.name == name)


class _FixedSizes:
    """Stands for ``tiramisu_py`` inside the suite's builders: ``Function``
    gets its params as constants."""

    def __init__(self, sizes):
        self.sizes = sizes

    def __getattr__(self, name):
        return getattr(tp, name)

    def Function(self, name, params=()):
        return tp.Function(name, params={p: self.sizes.get(p) for p in params})


def fixed(kernel, **sizes):
    """The suite's ``kernel`` built with ``sizes`` fixed (the others stay params)."""
    with mock.patch.object(pk, "tp", _FixedSizes(sizes)):
        return SPECS[kernel].build()


@functools.lru_cache(maxsize=None)
def case(kernel):
    """(inputs, reference) of a suite kernel, computed once."""
    spec = SPECS[kernel]
    inputs = spec.inputs(np.random.default_rng(zlib.crc32(kernel.encode())))
    return inputs, spec.reference(**inputs, **spec.params)


def run(call, kernel):
    inputs, _ = case(kernel)
    args = {n: a.copy() for n, a in inputs.items()}      # outputs are updated in place
    out = call(**args, **{p: v for p, v in SPECS[kernel].params.items()})
    return out if isinstance(out, dict) else {next(iter(case(kernel)[1])): out}


def assert_reference(out, kernel, what):
    for n, want in case(kernel)[1].items():
        np.testing.assert_allclose(out[n], want, rtol=RTOL, atol=ATOL,
                                   err_msg=f"{kernel} {what}: output {n!r}")


def both_tiled(f, names, i, j, ti=4, tj=8):
    for n in names:
        S(f, n).gpu_tile(i, j, ti, tj)


def split_bind(s, loop, factor, block="block.x", thread="thread.x"):
    """``split(loop, factor)``, outer part on ``block``, inner on ``thread``
    (None: left serial)."""
    s.split(loop, factor)
    s.bind(f"{loop}0", block)
    if thread:
        s.bind(f"{loop}1", thread)


# ================================================================ legal mappings
# Each builds a fresh Function; MAPPINGS[id] = (kernel, build, barriers expected).
def gemm_tile():
    """One C element per thread: scale then the k loop, in the same thread."""
    f = SPECS["gemm"].build()
    both_tiled(f, ["scale", "scale_update"], "i", "j")
    S(f, "scale_update").after(S(f, "scale"), "j1")
    return f


def gemm_shared():
    """k-steps of 4 with A and B tiles in shared memory: a barrier after the
    copies (RAW) and at the end of each k-step (WAR: the next copy)."""
    f = SPECS["gemm"].build()
    both_tiled(f, ["scale", "scale_update"], "i", "j")
    shared_k_steps(f, "scale", "scale_update", "k", "j", ["A", "B"])
    return f


def shared_k_steps(f, init, update, k, j, buffers):
    """``update``'s reduction loop ``k`` in steps of 4 between the block and
    the thread loops (``i1``, ``{j}1``), fused after ``init`` in the block, the
    ``buffers`` it reads cached in shared memory per step."""
    u = S(f, update)
    u.split(k, 4)
    u.reorder(f"{k}0", "i1", f"{j}1", f"{k}1")
    u.after(S(f, init), f"{j}0")
    for b in buffers:
        u.cache_shared(f.buffers[b], f"{k}0")


def gemm_registers():
    """8 x 8 of C per block, 4 x 4 threads, 2 x 2 of C per thread in registers
    (`accumulate_locally` over the block-level k-step loop), A and B tiles in
    shared memory.  3 barriers: after the copies, at the end of each k-step,
    and before the register tile is added to C (scale wrote C in 8 x 8
    threads, the combine reads it in 4 x 4)."""
    f = SPECS["gemm"].build()
    s, u = S(f, "scale"), S(f, "scale_update")
    s.gpu_tile("i", "j", 8, 8)
    u.tile("i", "j", 8, 8)
    u.split("i1", 4, names=("i_reg", "i_th"))
    u.split("j1", 4, names=("j_reg", "j_th"))
    u.split("k", 4)
    u.reorder("i0", "j0", "k0", "i_th", "j_th", "k1", "i_reg", "j_reg")
    u.bind("i0", "block.y").bind("j0", "block.x")
    u.bind("i_th", "thread.y").bind("j_th", "thread.x")
    u.after(s, "j0")
    u.cache_shared(f.buffers["A"], "k0")
    u.cache_shared(f.buffers["B"], "k0")
    u.accumulate_locally("k0", allow_reassociation=True)
    return f


def mm2_tile():
    """Two kernels (tmp, then D), one element per thread each."""
    f = SPECS["2mm"].build()
    both_tiled(f, ["T", "T_update"], "i", "j")
    both_tiled(f, ["Dscale", "Dscale_update"], "i", "l")
    S(f, "T_update").after(S(f, "T"), "j1")
    S(f, "Dscale_update").after(S(f, "Dscale"), "l1")
    return f


def mm2_shared():
    """The D kernel with tmp and C tiles in shared memory per j-step: 2 barriers."""
    f = SPECS["2mm"].build()
    both_tiled(f, ["T", "T_update"], "i", "j")
    both_tiled(f, ["Dscale", "Dscale_update"], "i", "l")
    S(f, "T_update").after(S(f, "T"), "j1")
    shared_k_steps(f, "Dscale", "Dscale_update", "j", "l", ["tmp", "C"])
    return f


def jacobi1d_host():
    """Time loop on the host: sB and sA each one launch per step."""
    f = SPECS["jacobi-1d"].build()
    for n in ("sB", "sA"):
        split_bind(S(f, n), "i", 8)
    return f


def jacobi1d_block():
    """The whole time loop in one block (N = 23 < 32 threads): a barrier
    between sB and sA (neighbours' B) and at the end of each step (sB reads
    the neighbours' A)."""
    f = fixed("jacobi-1d", N=23)
    for n in ("sB", "sA"):
        s = S(f, n)
        s.split("i", 32)
        s.interchange("t", "i0")
        s.bind("i0", "block.x")
        s.bind("i1", "thread.x")
    S(f, "sA").after(S(f, "sB"), "t")
    return f


def jacobi2d_host():
    f = SPECS["jacobi-2d"].build()
    both_tiled(f, ["sB", "sA"], "i", "j")
    return f


def jacobi2d_block():
    """10 x 10 points on 16 x 16 threads of one block, time loop inside: 2 barriers."""
    f = fixed("jacobi-2d", N=12)
    for n in ("sB", "sA"):
        s = S(f, n)
        s.tile("i", "j", 16, 16)
        s.reorder("i0", "j0", "t", "i1", "j1")
        s.bind("i0", "block.y").bind("j0", "block.x")
        s.bind("i1", "thread.y").bind("j1", "thread.x")
    S(f, "sA").after(S(f, "sB"), "t")
    return f


def heat3d_host():
    """(j, k) tiles on blocks x/y, i on blocks z; time loop on the host."""
    f = SPECS["heat-3d"].build()
    for n in ("sB", "sA"):
        S(f, n).gpu_tile("j", "k", 2, 4)
        S(f, n).bind("i", "block.z")
    return f


def heat3d_block():
    """5 x 5 x 5 points on the threads of one block (N = 7), time loop inside:
    2 barriers (sB -> sA, end of step)."""
    f = fixed("heat-3d", N=7)
    for n in ("sB", "sA"):
        s = S(f, n)
        s.split("i", 8)
        s.tile("j", "k", 8, 8)
        s.reorder("i0", "j0", "k0", "t", "i1", "j1", "k1")
        s.bind("i0", "block.z").bind("j0", "block.y").bind("k0", "block.x")
        s.bind("i1", "thread.z").bind("j1", "thread.y").bind("k1", "thread.x")
    S(f, "sA").after(S(f, "sB"), "t")
    return f


def seidel_wavefront():
    """(t, i, j) -> (i + 2t, t, j + i + 2t): the wavefront i' on the host (one
    launch per wavefront), t on blocks and threads (no dependence at fixed i'),
    j serial per thread (it carries one)."""
    f = SPECS["seidel-2d"].build()
    s = S(f, "S")
    s.skew("t", "i", 2)
    s.skew("i", "j", 1)
    s.interchange("t", "i")
    split_bind(s, "t", 4)
    return f


def seidel_block():
    """The same wavefront run inside one block (T = 5 < 8 threads): one
    barrier at the end of each wavefront."""
    f = fixed("seidel-2d", T=5, N=11)
    s = S(f, "S")
    s.skew("t", "i", 2)
    s.skew("i", "j", 1)
    s.interchange("t", "i")
    s.split("t", 8)
    s.interchange("i", "t0")
    s.bind("t0", "block.x").bind("t1", "thread.x")
    return f


def fdtd2d_host():
    """Time loop on the host, each statement its own kernel (4 launches per step)."""
    f = SPECS["fdtd-2d"].build()
    split_bind(S(f, "s0"), "y0", 8)
    S(f, "s1").gpu_tile("ei", "ej", 4, 8)
    S(f, "s2").gpu_tile("xi", "xj", 4, 8)
    S(f, "s3").gpu_tile("hi", "hj", 4, 8)
    return f


def fdtd2d_block():
    """The four statements of a step in one block (NX = 10 rows on thread.y,
    NY = 11 columns on thread.x), time loop inside: 2 barriers, before s3
    (it reads the neighbours' ex and ey, and overwrites the hz that s1 and
    s2 read in other threads) and at the end of each step (s1, s2 read the
    neighbours' hz)."""
    f = fixed("fdtd-2d", NX=10, NY=11)
    s0 = S(f, "s0")
    s0.split("y0", 16)
    s0.interchange("t", "y00")
    s0.bind("y00", "block.x").bind("y01", "thread.x")
    prev = s0
    for n, (i, j) in (("s1", ("ei", "ej")), ("s2", ("xi", "xj")), ("s3", ("hi", "hj"))):
        s = S(f, n)
        s.split(j, 16)
        s.reorder(f"{j}0", "t", i, f"{j}1")
        s.bind(f"{j}0", "block.x").bind(i, "thread.y").bind(f"{j}1", "thread.x")
        s.after(prev, "t")
        prev = s
    return f


def lu_block():
    """Row i on the host; in one block (N = 11 < 16): the lower part of row i
    (a chain along j, thread 0), then the upper part, one column per thread;
    one barrier: the threads read the lower part thread 0 wrote."""
    f = fixed("lu", N=11)
    S(f, "A0").gpu_tile("r", "c", 4, 8)
    L1, L2, U1 = S(f, "L1"), S(f, "L2"), S(f, "U1")
    for s in (L1, L2):
        split_bind(s, "j", 16, thread=None)
    split_bind(U1, "ju", 16)
    U1.after(L2, "j0")
    return f


def cholesky_block():
    """All of the factorisation in one block (N = 11 < 16) on thread 0 (each
    row is a chain), after the identity copy A0 done by all threads: 1
    barrier between them."""
    f = fixed("cholesky", N=11)
    a0 = S(f, "A0")
    split_bind(a0, "r", 16, thread=None)
    a0.bind("c", "thread.x")
    for n in ("C1", "C2", "C3", "C4"):
        split_bind(S(f, n), "i", 16, thread=None)
    S(f, "C1").after(a0, "r0")
    S(f, "C2").after(S(f, "C1"), "j")
    S(f, "C3").after(S(f, "C2"), "i1")
    S(f, "C4").after(S(f, "C3"), "i1")
    return f


def trisolv_block():
    """Column-oriented substitution in one block (N = 13 < 16): x = b on all
    threads, then per column j: x[j] /= L[j][j] on thread 0, x[i] -= L[i][j]
    x[j] on thread i.  3 barriers: after x = b, after the division, at the
    end of each column."""
    f = fixed("trisolv", N=13)
    s, u, d = S(f, "xinit"), S(f, "xinit_update"), S(f, "xdiv")
    u.interchange("i", "j")
    split_bind(s, "i", 16)
    split_bind(d, "i", 16, thread=None)
    split_bind(u, "j", 16, thread=None)
    u.bind("i", "thread.x")
    d.after(s, "i0")
    u.after(d, "i1")
    return f


def floyd_block():
    """Exact dependences leave no two FW instances of one k independent
    (row and column k are read and written in the same k step: safe only
    because path[k][k] >= 0, which no analysis knows), so the legal mapping
    is one thread: k on the host, one block (N = 11 < 16).  No mapping of FW
    with two threads is legal (rows or columns on threads: refused, see
    floyd_naive_threads), hence none with a barrier."""
    f = fixed("floyd-warshall", N=11)
    split_bind(S(f, "FW"), "i", 16, thread=None)
    return f


def syrk_tile():
    """Row i per block, j on threads (triangular: j0 serial), scale then k loop."""
    f = SPECS["syrk"].build()
    S(f, "C0").gpu_tile("r", "c", 4, 8)
    for n in ("scale", "acc"):
        s = S(f, n)
        s.bind("i", "block.x")
        s.split("j", 8)
        s.bind("j1", "thread.x")
    S(f, "acc").after(S(f, "scale"), "j1")
    return f


def syrk_reversed_scale():
    """scale's threads take the columns in reverse: acc's thread reads what
    another thread scaled: one barrier between them."""
    f = syrk_tile()
    sc, acc = S(f, "scale"), S(f, "acc")
    sc.reverse("j1")
    acc.after(sc, "j0")
    return f


ADI = ["c1", "c2", "c3", "c4", "c5", "c6", "c7", "r1", "r2", "r3", "r4", "r5", "r6", "r7"]


def adi_host():
    """Time loop on the host; each sweep one kernel, one line i per thread
    (the sweeps along j are chains: serial in the thread)."""
    f = SPECS["adi"].build()
    for n in ADI:
        split_bind(S(f, n), "i", 4)
    return f


def adi_block():
    """Both sweeps of every step in one block (N = 10): one line per thread;
    2 barriers (column sweep -> row sweep, end of step)."""
    f = fixed("adi", N=10)
    for n in ADI:
        s = S(f, n)
        s.split("i", 16)
        s.interchange("t", "i0")
        s.bind("i0", "block.x").bind("i1", "thread.x")
    for prev, n in zip(ADI, ADI[1:]):
        S(f, n).after(S(f, prev), "t" if n == "r1" else "i1")
    return f


MAPPINGS = {
    "gemm_tile": ("gemm", gemm_tile, 0),
    "gemm_shared": ("gemm", gemm_shared, 2),
    "gemm_registers": ("gemm", gemm_registers, 3),
    "2mm_tile": ("2mm", mm2_tile, 0),
    "2mm_shared": ("2mm", mm2_shared, 2),
    "jacobi-1d_host": ("jacobi-1d", jacobi1d_host, 0),
    "jacobi-1d_block": ("jacobi-1d", jacobi1d_block, 2),
    "jacobi-2d_host": ("jacobi-2d", jacobi2d_host, 0),
    "jacobi-2d_block": ("jacobi-2d", jacobi2d_block, 2),
    "heat-3d_host": ("heat-3d", heat3d_host, 0),
    "heat-3d_block": ("heat-3d", heat3d_block, 2),
    "seidel-2d_wavefront": ("seidel-2d", seidel_wavefront, 0),
    "seidel-2d_block": ("seidel-2d", seidel_block, 1),
    "fdtd-2d_host": ("fdtd-2d", fdtd2d_host, 0),
    "fdtd-2d_block": ("fdtd-2d", fdtd2d_block, 2),
    "lu_block": ("lu", lu_block, 1),
    "cholesky_block": ("cholesky", cholesky_block, 1),
    "trisolv_block": ("trisolv", trisolv_block, 3),
    "floyd-warshall_block": ("floyd-warshall", floyd_block, 0),
    "syrk_tile": ("syrk", syrk_tile, 0),
    "syrk_reversed_scale": ("syrk", syrk_reversed_scale, 1),
    "adi_host": ("adi", adi_host, 0),
    "adi_block": ("adi", adi_block, 2),
}


def test_every_suite_kernel_has_a_mapping():
    assert {k for k, _, _ in MAPPINGS.values()} == set(SPECS)
    # one with barriers for every kernel but floyd-warshall (see floyd_block)
    assert {k for k, _, b in MAPPINGS.values() if b} == set(SPECS) - {"floyd-warshall"}
    racy = {"seidel-2d", "lu", "cholesky", "trisolv", "floyd-warshall", "adi"}
    assert {n.rsplit("_", 1)[0] for n in ILLEGAL} == racy


@functools.lru_cache(maxsize=None)
def mapping(name):
    return MAPPINGS[name][1]


@pytest.mark.parametrize("name", list(MAPPINGS))
def test_legal_mapping_cpu_runs_match_reference(name):
    kernel, build, _ = MAPPINGS[name]
    for target in ("cpu", "llvm"):
        assert_reference(run(build().compile(target=target), kernel), kernel, f"{name} {target}")


@needs_cxx
@pytest.mark.parametrize("name", list(MAPPINGS))
def test_legal_mapping_emulated_matches_reference(name):
    kernel, build, barriers = MAPPINGS[name]
    k = cuda_kernel(mapping(name))
    assert k.source.count("__syncthreads();") == barriers
    for order in ORDERS:
        out = run(functools.partial(k.emulate, order=order, seed=7), kernel)
        assert_reference(out, kernel, f"{name} emulated {order}")


def launches(name, **values):
    """[(kernel, grid)] in launch order for the params ``values``."""
    plan = cuda_kernel(mapping(name)).launch_plan
    return [(kl.name, tuple(evaluate(g, v) for g in kl.grid)) for kl, v in plan.launches(values)]


def test_host_loops_launch_per_step():
    """jacobi-1d: sB and sA per step; fdtd-2d: 4 launches per step; adi: the
    two sweeps per step; seidel-2d: one per wavefront i + 2t (1 .. 17)."""
    for name, values, count in (("jacobi-1d_host", dict(T=5, N=23), 2 * 5),
                                ("fdtd-2d_host", dict(T=4, NX=10, NY=11), 4 * 4),
                                ("adi_host", dict(T=3, N=10), 2 * 3),
                                ("seidel-2d_wavefront", dict(T=5, N=11), 17)):
        assert len(launches(name, **values)) == count, name


def test_persistent_kernels_are_one_launch_of_one_block():
    for name, values in (("jacobi-1d_block", dict(T=5)), ("jacobi-2d_block", dict(T=5)),
                         ("seidel-2d_block", {}), ("trisolv_block", {}),
                         ("cholesky_block", {}), ("heat-3d_block", dict(T=3)),
                         ("fdtd-2d_block", dict(T=4)), ("adi_block", dict(T=3))):
        assert launches(name, **values) == [(f"{mapping(name)().name}_k0", (1, 1, 1))], name
    # lu: the identity copy A0, then one single-block launch per row i >= 1
    # (row 0 has no instance: its k and ku ranges are empty)
    got = launches("lu_block")
    assert got[0][0] == "lu_k0" and got[1:] == [("lu_k1", (1, 1, 1))] * 10
    assert launches("floyd-warshall_block") == [("floyd_k0", (1, 1, 1))] * 11    # per k


# ============================================================== illegal mappings
def seidel_naive_blocks():
    f = SPECS["seidel-2d"].build()
    s = S(f, "S")
    s.bind("i", "block.y")
    split_bind(s, "j", 8)
    return f


def seidel_naive_threads():
    f = fixed("seidel-2d", N=11)
    s = S(f, "S")
    split_bind(s, "i", 16, thread=None)
    s.bind("j", "thread.x")
    return f


def lu_naive():
    f = SPECS["lu"].build()
    S(f, "A0").gpu_tile("r", "c", 4, 8)
    for n in ("L1", "L2"):
        S(f, n).bind("j", "block.x")
    split_bind(S(f, "U1"), "ju", 8)
    return f


def cholesky_naive():
    f = SPECS["cholesky"].build()
    S(f, "A0").gpu_tile("r", "c", 4, 8)
    for n in ("C1", "C2"):
        split_bind(S(f, n), "j", 8)
    return f


def trisolv_naive():
    f = SPECS["trisolv"].build()
    for n in ("xinit", "xinit_update", "xdiv"):
        split_bind(S(f, n), "i", 8)
    return f


def floyd_naive():
    f = SPECS["floyd-warshall"].build()
    S(f, "FW").gpu_tile("i", "j", 4, 8)
    return f


def floyd_naive_threads():
    """Rows on the threads of one block: every row reads row k, which row
    k's thread rewrites in the same step (a dependence between two threads
    of one thread loop)."""
    f = fixed("floyd-warshall", N=11)
    split_bind(S(f, "FW"), "i", 16)
    return f


def jacobi1d_fused(gpu=True):
    """sA shifted by one and fused into sB's i loop: legal on the CPU (sA(i)
    runs after sB(i + 1)), a race on threads (sB(i + 1) is another thread)."""
    f = fixed("jacobi-1d", N=23)
    sB, sA = S(f, "sB"), S(f, "sA")
    sA.shift("i", 1)
    for s in (sB, sA):
        s.split("i", 32)
        s.interchange("t", "i0")
        if gpu:
            s.bind("i0", "block.x").bind("i1", "thread.x")
    sA.after(sB, "i1")
    return f


def test_fused_stencil_legal_on_cpu_refused_on_threads():
    assert_reference(run(jacobi1d_fused(gpu=False).compile(), "jacobi-1d"), "jacobi-1d", "cpu")
    with pytest.raises(tp.IllegalScheduleError,
                       match=re.compile(THREAD.format(cmd=re.escape("sB.bind(i1, 'thread.x')"),
                                                      loop="i1", i=INST), re.S)):
        jacobi1d_fused().compile(target="cuda")


def adi_naive_threads():
    """The column sweep's recurrence along j on threads."""
    f = SPECS["adi"].build()
    for n in ADI:
        S(f, n).bind("i", "block.x")
    for n in ("c4", "c5"):
        S(f, n).split("j", 16)
        S(f, n).bind("j1", "thread.x")
    return f


INST = r"\w+\([a-z0-9=, ]+\)"
BLOCK = r"{cmd} is illegal: block loop '{loop}' carries a dependence.*{i} and {i}"
THREAD = r"{cmd} is illegal: two threads of one block.*thread loop '{loop}'.*{i} and {i}"
ILLEGAL = {
    "seidel-2d_blocks": (seidel_naive_blocks,
                         BLOCK.format(cmd=re.escape("S.bind(i, 'block.y')"), loop="i", i=INST)),
    "seidel-2d_threads": (seidel_naive_threads,
                          THREAD.format(cmd=re.escape("S.bind(j, 'thread.x')"), loop="j", i=INST)),
    "lu_blocks": (lu_naive, BLOCK.format(cmd=r"A0_update1?\.bind\(j, 'block.x'\)", loop="j",
                                         i=INST)),
    "cholesky_blocks": (cholesky_naive, BLOCK.format(cmd=r"A0_update1?\.bind\(j0, 'block.x'\)",
                                                     loop="j0", i=INST)),
    "trisolv_blocks": (trisolv_naive, BLOCK.format(cmd=r"\w+\.bind\(i0, 'block.x'\)", loop="i0",
                                                   i=INST)),
    "floyd-warshall_blocks": (floyd_naive, BLOCK.format(cmd=r"FW\.bind\(i0, 'block.y'\)",
                                                        loop="i0", i=INST)),
    "floyd-warshall_threads": (floyd_naive_threads,
                               THREAD.format(cmd=r"FW\.bind\(i1, 'thread.x'\)", loop="i1",
                                             i=INST)),
    "adi_threads": (adi_naive_threads, THREAD.format(cmd=r"c[45]\.bind\(j1, 'thread.x'\)",
                                                     loop="j1", i=INST)),
}


@pytest.mark.parametrize("name", list(ILLEGAL))
def test_racy_mapping_refused(name):
    build, message = ILLEGAL[name]
    with pytest.raises(tp.IllegalScheduleError, match=re.compile(message, re.S)):
        build().compile(target="cuda")


# ============================================================== barriers, cubins
def _without(source, which):
    parts = source.split("__syncthreads();")
    return "".join(p + ("/* removed */" if n == which else "__syncthreads();")
                   for n, p in enumerate(parts[:-1])) + parts[-1]


@needs_cxx
@pytest.mark.parametrize("name,which", [("jacobi-1d_block", 0), ("jacobi-1d_block", 1),
                                        ("trisolv_block", 1), ("lu_block", 0),
                                        ("fdtd-2d_block", 0)])
def test_emulator_catches_a_removed_barrier(name, which):
    kernel = MAPPINGS[name][0]
    k = cuda_kernel(mapping(name))
    src = _without(k.source, which)
    assert src.count("__syncthreads();") == MAPPINGS[name][2] - 1
    wrong = 0
    for order in ORDERS:
        out = run(functools.partial(emulate_source, k, src, order=order, seed=3), kernel)
        wrong += any(not np.allclose(out[n], w, rtol=RTOL, atol=ATOL)
                     for n, w in case(kernel)[1].items())
    assert wrong > 0


@needs_nvcc
@pytest.mark.parametrize("name", ["gemm_registers", "trisolv_block"])
def test_cubins_without_spills(name):
    k = cuda_kernel(mapping(name), cubins=True)
    assert set(k.cubins) == {"sm_80", "sm_90"}
    for arch, res in k.resources.items():
        assert res, arch
        for kname, r in res.items():
            assert r.spill_stores == r.spill_loads == 0 and 0 < r.registers <= 255, (arch, kname)
        assert sum(r.barriers > 0 for r in res.values()) == 1, (arch, res)

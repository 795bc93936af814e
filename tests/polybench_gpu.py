"""GPU mappings of the PolyBench legality suite (tests/polybench_kernels.py),
written with the mapping commands; used by tests/codegen/cuda/test_cuda_polybench.py.

Legal mappings first (one function per mapping, each builds a fresh Function;
its docstring derives the barriers the legality check must insert), then the
naive racy ones the compiler must refuse.  Some mappings run a whole
sequential loop inside one block (a persistent kernel: the time loop, the
wavefront, a triangular solve's column loop).  The block loop then has one
iteration, which the exact check can only know with the sizes fixed: those
are built with :func:`fixed`, the suite's builder with its params given as
constants (the suite's default input sizes)."""
from unittest import mock

import tiramisu_py as tp
import tests.polybench_kernels as pk
from tests.polybench_kernels import SPECS


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


def mm2_tile(shared=False):
    """Two kernels (tmp, then D), one element per thread each; ``shared``:
    the D kernel with tmp and C tiles in shared memory per j-step (2 barriers)."""
    f = SPECS["2mm"].build()
    both_tiled(f, ["T", "T_update"], "i", "j")
    both_tiled(f, ["Dscale", "Dscale_update"], "i", "l")
    S(f, "T_update").after(S(f, "T"), "j1")
    if shared:
        shared_k_steps(f, "Dscale", "Dscale_update", "j", "l", ["tmp", "C"])
    else:
        S(f, "Dscale_update").after(S(f, "Dscale"), "l1")
    return f


def mm2_shared():
    return mm2_tile(shared=True)


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


def adi_naive_threads():
    """The column sweep's recurrence along j on threads."""
    f = SPECS["adi"].build()
    for n in ADI:
        S(f, n).bind("i", "block.x")
    for n in ("c4", "c5"):
        S(f, n).split("j", 16)
        S(f, n).bind("j1", "thread.x")
    return f

"""GPU mappings of the PolyBench legality suite (the kernels of
:mod:`examples.polybench` at the sizes of ``tests.auto_kernels.SUITE``),
written with the mapping commands; used by tests/codegen/cuda/test_cuda_polybench.py.

Legal mappings first (one function per mapping, each builds a fresh Function;
its docstring derives the barriers the legality check must insert), then the
naive racy ones the compiler must refuse.  Some mappings run a whole
sequential loop inside one block (a persistent kernel: the time loop, the
wavefront, a triangular solve's column loop).  The block loop then has one
iteration, which the exact check can only know with the sizes fixed: those
are built with :func:`fixed`, some of the suite's sizes given as constants
(adi's are always fixed: its coefficients depend on them)."""
from examples.polybench.common import stmt as S
from tests.auto_kernels import SUITE


# ------------------------------------------------------------------- helpers
def build(kernel):
    """The suite's ``kernel``, its sizes symbolic."""
    return SUITE[kernel].build()


def fixed(kernel, *sizes):
    """The suite's ``kernel`` with the ``sizes`` named fixed at the suite's
    values (the others stay params)."""
    return SUITE[kernel].build(*sizes)


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
def ijk(kernel):
    """gemm or syrk, its update's k and j interchanged: (i, j, k), as scale's (i, j)."""
    f = build(kernel)
    S(f, "scale_update").interchange("k", "j")
    return f


def gemm_tile():
    """One C element per thread: scale then the k loop, in the same thread."""
    f = ijk("gemm")
    both_tiled(f, ["scale", "scale_update"], "i", "j")
    S(f, "scale_update").after(S(f, "scale"), "j1")
    return f


def gemm_shared():
    """k-steps of 4 with A and B tiles in shared memory: a barrier after the
    copies (RAW) and at the end of each k-step (WAR: the next copy)."""
    f = ijk("gemm")
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
    f = ijk("gemm")
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
    f = build("2mm")
    both_tiled(f, ["tmp_init", "tmp_init_update"], "i", "j")
    both_tiled(f, ["D_init", "D_init_update"], "i", "l")
    S(f, "tmp_init_update").after(S(f, "tmp_init"), "j1")
    if shared:
        shared_k_steps(f, "D_init", "D_init_update", "j", "l", ["tmp", "C"])
    else:
        S(f, "D_init_update").after(S(f, "D_init"), "l1")
    return f


def mm2_shared():
    return mm2_tile(shared=True)


def jacobi1d_host():
    """Time loop on the host: sB and sA each one launch per step."""
    f = build("jacobi-1d")
    for n in ("sB", "sA"):
        split_bind(S(f, n), "i", 8)
    return f


def jacobi1d_block():
    """The whole time loop in one block (N = 23 < 32 threads): a barrier
    between sB and sA (neighbours' B) and at the end of each step (sB reads
    the neighbours' A)."""
    f = fixed("jacobi-1d", "N")
    for n in ("sB", "sA"):
        s = S(f, n)
        s.split("i", 32)
        s.interchange("t", "i0")
        s.bind("i0", "block.x")
        s.bind("i1", "thread.x")
    S(f, "sA").after(S(f, "sB"), "t")
    return f


def jacobi2d_host():
    f = build("jacobi-2d")
    both_tiled(f, ["sB", "sA"], "i", "j")
    return f


def jacobi2d_block():
    """10 x 10 points on 16 x 16 threads of one block, time loop inside: 2 barriers."""
    f = fixed("jacobi-2d", "N")
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
    f = build("heat-3d")
    for n in ("sB", "sA"):
        S(f, n).gpu_tile("j", "k", 2, 4)
        S(f, n).bind("i", "block.z")
    return f


def heat3d_block():
    """5 x 5 x 5 points on the threads of one block (N = 7), time loop inside:
    2 barriers (sB -> sA, end of step)."""
    f = fixed("heat-3d", "N")
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
    f = build("seidel-2d")
    s = S(f, "S")
    s.skew("t", "i", 2)
    s.skew("i", "j", 1)
    s.interchange("t", "i")
    split_bind(s, "t", 4)
    return f


def seidel_block():
    """The same wavefront run inside one block (T = 5 < 8 threads): one
    barrier at the end of each wavefront."""
    f = fixed("seidel-2d", "TSTEPS", "N")
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
    f = build("fdtd-2d")
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
    f = fixed("fdtd-2d", "NX", "NY")
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
    f = fixed("lu", "N")
    L1, L2, U1 = S(f, "L1"), S(f, "L2"), S(f, "U1")
    for s in (L1, L2):
        split_bind(s, "j", 16, thread=None)
    split_bind(U1, "ju", 16)
    U1.after(L2, "j0")
    return f


def cholesky_block():
    """Column by column in one block (N = 11 < 16), as the hand schedule on
    the CPU: for column j, the diagonal element on thread 0 (C3, C3_update,
    C4 at i = j), then the elements below it, row i on thread i (C0,
    C0_update, C2, interchanged to j, i).  2 barriers: after the diagonal
    (the threads divide by A[j][j]), at the end of each column (the next
    diagonal reads A[j + 1][k], the next column A[j + 1][k] and A[i][k], all
    written by other threads)."""
    f = fixed("cholesky", "N")
    diag = [S(f, n) for n in ("C3", "C3_update", "C4")]
    col = [S(f, n) for n in ("C0", "C0_update", "C2")]
    for s in diag:
        split_bind(s, "i", 16, thread=None)
    for s in col:
        s.interchange("i", "j")
        split_bind(s, "j", 16, thread=None)
        s.bind("i", "thread.x")
    col[0].after(diag[2], "i1")
    col[1].after(col[0], "i")
    col[2].after(col[1], "i")
    return f


def trisolv_block():
    """Column-oriented substitution in one block (N = 13 < 16): x = b on all
    threads, then per column j: x[j] /= L[j][j] on thread 0, x[i] -= L[i][j]
    x[j] on thread i.  3 barriers: after x = b, after the division, at the
    end of each column."""
    f = fixed("trisolv", "N")
    s, u, d = S(f, "x0"), S(f, "x0_update"), S(f, "x2")
    u.interchange("i", "j")
    split_bind(s, "i", 16)
    split_bind(d, "i", 16, thread=None)
    split_bind(u, "j", 16, thread=None)
    u.bind("i", "thread.x")
    d.after(s, "i0")
    u.after(d, "i1")
    return f


def floyd_block():
    """Exact dependences leave no two relax instances of one k independent
    (row and column k are read and written in the same k step: safe only
    because path[k][k] >= 0, which no analysis knows), so the legal mapping
    is one thread: k on the host, one block (N = 11 < 16).  No mapping of relax
    with two threads is legal (rows or columns on threads: refused, see
    floyd_naive_threads), hence none with a barrier."""
    f = fixed("floyd-warshall", "N")
    split_bind(S(f, "relax"), "i", 16, thread=None)
    return f


def syrk_tile():
    """Row i per block, j on threads (triangular: j0 serial), scale then the
    k loop (the update interchanged to i, j, k)."""
    f = ijk("syrk")
    for n in ("scale", "scale_update"):
        s = S(f, n)
        s.bind("i", "block.x")
        s.split("j", 8)
        s.bind("j1", "thread.x")
    S(f, "scale_update").after(S(f, "scale"), "j1")
    return f


def syrk_reversed_scale():
    """scale's threads take the columns in reverse: the update's thread reads
    what another thread scaled: one barrier between them."""
    f = syrk_tile()
    sc, acc = S(f, "scale"), S(f, "scale_update")
    sc.reverse("j1")
    acc.after(sc, "j0")
    return f


ADI = ["c1", "c2", "c3", "c4", "c5", "c6", "c7", "r1", "r2", "r3", "r4", "r5", "r6", "r7"]


def adi_host():
    """Time loop on the host; each sweep one kernel, one line i per thread
    (the sweeps along j are chains: serial in the thread)."""
    f = build("adi")
    for n in ADI:
        split_bind(S(f, n), "i", 4)
    return f


def adi_block():
    """Both sweeps of every step in one block (N = 10): one line per thread;
    2 barriers (column sweep -> row sweep, end of step)."""
    f = build("adi")
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
    f = build("seidel-2d")
    s = S(f, "S")
    s.bind("i", "block.y")
    split_bind(s, "j", 8)
    return f


def seidel_naive_threads():
    f = fixed("seidel-2d", "N")
    s = S(f, "S")
    split_bind(s, "i", 16, thread=None)
    s.bind("j", "thread.x")
    return f


def lu_naive():
    f = build("lu")
    for n in ("L1", "L2"):
        S(f, n).bind("j", "block.x")
    split_bind(S(f, "U1"), "ju", 8)
    return f


def cholesky_naive():
    f = build("cholesky")
    for n in ("C0", "C0_update", "C2"):
        split_bind(S(f, n), "j", 8)
    return f


def trisolv_naive():
    f = build("trisolv")
    for n in ("x0", "x0_update", "x2"):
        split_bind(S(f, n), "i", 8)
    return f


def floyd_naive():
    f = build("floyd-warshall")
    S(f, "relax").gpu_tile("i", "j", 4, 8)
    return f


def floyd_naive_threads():
    """Rows on the threads of one block: every row reads row k, which row
    k's thread rewrites in the same step (a dependence between two threads
    of one thread loop)."""
    f = fixed("floyd-warshall", "N")
    split_bind(S(f, "relax"), "i", 16)
    return f


def jacobi1d_fused(gpu=True):
    """sA shifted by one and fused into sB's i loop: legal on the CPU (sA(i)
    runs after sB(i + 1)), a race on threads (sB(i + 1) is another thread)."""
    f = fixed("jacobi-1d", "N")
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
    f = build("adi")
    for n in ADI:
        S(f, n).bind("i", "block.x")
    for n in ("c4", "c5"):
        S(f, n).split("j", 16)
        S(f, n).bind("j1", "thread.x")
    return f

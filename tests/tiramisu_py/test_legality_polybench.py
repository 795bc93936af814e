"""Two-sided legality suite over PolyBench kernels.

For every kernel (:mod:`examples.polybench`, at the sizes of
``tests.auto_kernels.SUITE``: below MINI, symbolic in the Function):
- the unscheduled program matches an independent sequential NumPy reference;
- legal schedules compile and give the unscheduled program's result (and the
  reference's) on random inputs whose sizes are not multiples of the tile
  factors (partial tiles everywhere);
- illegal schedules raise tp.IllegalScheduleError at compile, and for many the
  message names the offending command.

Tolerances (float64 everywhere): rtol=1e-9, atol=1e-12.  Most schedules give
bit-identical results; reassociated reductions differ in the last bits.

Statement names are the examples': an update of computation C is C_update,
C_update1, ...; gemm's and syrk's updates run in PolyBench's i, k, j order."""
import os
os.environ.setdefault("OMP_WAIT_POLICY", "passive")

import functools
import zlib

import numpy as np
import pytest

import tiramisu_py as tp

pytestmark = pytest.mark.usefixtures("backend")     # every case on the C and LLVM backends
from examples.polybench.common import stmt as S
from tests.auto_kernels import SUITE

RTOL, ATOL = 1e-9, 1e-12


# ------------------------------------------------------------------- helpers
def each(f, names, fn):
    """Applies the same commands to several statements."""
    for n in names:
        fn(S(f, n))


@functools.lru_cache(maxsize=None)
def baseline(name):
    """(inputs, NumPy reference, unscheduled result) for a kernel, computed once."""
    case = SUITE[name]
    inputs = case.inputs(np.random.default_rng(zlib.crc32(name.encode())))
    return inputs, case.reference(inputs), case.run(case.build().compile(), inputs)


def assert_same(out, expected, what):
    assert set(expected) <= set(out), f"{what}: outputs {sorted(out)}"
    for n, e in expected.items():
        np.testing.assert_allclose(out[n], e, rtol=RTOL, atol=ATOL,
                                   err_msg=f"{what}: output {n!r}")


# ============================================================ the schedules
# Each legal case: (id, schedule(f), expects an OpenMP parallel loop).
# Each illegal case: (id, schedule(f), substring the error must contain or None).

# ---- gemm: scale (i, j), scale_update (i, k, j); both share loop i
GU = "scale_update"


def gemm_ijk(f):
    """The update's k and j interchanged: (i, j, k), as scale's (i, j)."""
    S(f, GU).interchange("k", "j")


LEGAL = {"gemm": [
    ("parallelize_i", lambda f: S(f, GU).parallelize("i"), True),
    ("tile_ij_both", lambda f: (gemm_ijk(f), each(f, ["scale", GU],
                                                  lambda s: s.tile("i", "j", 4, 3))), False),
    ("interchange_ij_both", lambda f: each(f, ["scale", GU], lambda s: s.interchange("i", "j")),
     False),
    ("reassociate_reverse_k", lambda f: (S(f, GU).allow_reassociation(), S(f, GU).reverse("k")),
     False),
    ("parallelize_k_reassociate", lambda f: S(f, GU).parallelize("k", allow_reassociation=True),
     True),
    ("interchange_kj", gemm_ijk, False),
    ("vectorize_j", lambda f: S(f, GU).vectorize("j", 4), False),      # j innermost
]}
ILLEGAL = {"gemm": [
    ("reverse_k_no_optin", lambda f: S(f, GU).reverse("k"), "scale_update.reverse(k)"),
    ("parallelize_k_no_optin", lambda f: S(f, GU).parallelize("k"), "allow_reassociation=True"),
    ("vectorize_k_no_optin", lambda f: S(f, GU).vectorize("k", 4), "vectorize("),
    # the scale of row i would run after the update of rows of its i-tile
    ("tile_update_only", lambda f: (gemm_ijk(f), S(f, GU).tile("i", "j", 4, 3)),
     "scale_update.tile("),
    ("interchange_update_only", lambda f: S(f, GU).interchange("i", "j"),
     "scale_update.interchange(i, j)"),
    ("scale_after_update", lambda f: S(f, "scale").after(S(f, GU), "i"), "scale.after("),
]}

# ---- 2mm: tmp_init (i, j), tmp_init_update (i, j, k); D_init (i, l), D_init_update (i, l, j)
TMP, TMPU, D, DU = "tmp_init", "tmp_init_update", "D_init", "D_init_update"


def mm_fuse_i(f):
    """D's nest runs inside tmp's i loop: row i of tmp is complete before it is read."""
    S(f, TMPU).then(S(f, D), "i").then(S(f, DU), "l")


def mm_tile_all(f):
    each(f, [TMP, TMPU], lambda s: s.tile("i", "j", 4, 3))
    each(f, [D, DU], lambda s: s.tile("i", "l", 4, 3))


def mm_interchange_all(f):
    each(f, [TMP, TMPU], lambda s: s.interchange("i", "j"))
    each(f, [D, DU], lambda s: s.interchange("i", "l"))


LEGAL["2mm"] = [
    ("fuse_at_i", mm_fuse_i, False),
    ("fuse_at_i_parallelize_i", lambda f: (mm_fuse_i(f), S(f, TMP).parallelize("i")), True),
    ("parallelize_i", lambda f: (S(f, TMP).parallelize("i"), S(f, D).parallelize("i")), True),
    ("tile_all", mm_tile_all, False),
    ("interchange_all", mm_interchange_all, False),
    ("reassociate_reverse_j", lambda f: (S(f, DU).allow_reassociation(), S(f, DU).reverse("j")),
     False),
    ("reassociate_reverse_k", lambda f: (S(f, TMPU).allow_reassociation(),
                                         S(f, TMPU).reverse("k")), False),
    pytest.param("2mm", "parallelize_k_reassociate",
                 lambda f: S(f, TMPU).parallelize("k", allow_reassociation=True), True,
                 id="2mm-parallelize_k_reassociate"),
]
ILLEGAL["2mm"] = [
    # D[i, l] would read tmp[i, j] for j > l before tmp_init computes it
    ("fuse_too_deep_at_j", lambda f: S(f, TMPU).then(S(f, D), "j").then(S(f, DU), "l"),
     "after("),
    # the producer of tmp moved after its consumer
    ("producer_after_consumer", lambda f: (S(f, TMP).after(S(f, DU)),
                                           S(f, TMPU).after(S(f, TMP), "j")),
     "tmp_init.after(D_init_update, None)"),
    ("reverse_k_no_optin", lambda f: S(f, TMPU).reverse("k"), "tmp_init_update.reverse(k)"),
    ("parallelize_j_of_D_reduction", lambda f: S(f, DU).parallelize("j"), "parallelize(j)"),
]


# ---- jacobi-1d: sB (t, i), sA (t, i) in one t loop
def j1d_time_tile(skew, shift, interleave=True):
    def schedule(f):
        sB, sA = S(f, "sB"), S(f, "sA")
        if skew:
            for s in (sB, sA):
                s.skew("t", "i", skew)
        if shift:
            sA.shift("i", shift)
        for s in (sB, sA):
            s.tile("t", "i", 2, 4)
        if interleave:                       # sB then sA at every point of the tile
            sA.after(sB, "i1")
    return schedule


def j1d_skew_interchange(par_first):
    """skew 2 + shift 1 make every distance non-negative in i, so (t, i) may be
    interchanged (sA interleaved after sB at each point).  A parallel tag on i
    given first is re-checked: i is now the outer loop and carries dependences."""
    def schedule(f):
        sB, sA = S(f, "sB"), S(f, "sA")
        if par_first:
            for s in (sB, sA):
                s.parallelize("i")
        for s in (sB, sA):
            s.skew("t", "i", 2)
        sA.shift("i", 1)
        for s in (sB, sA):
            s.interchange("t", "i")
        sA.after(sB, "t")
    return schedule


LEGAL["jacobi-1d"] = [
    ("parallelize_i", lambda f: each(f, ["sB", "sA"], lambda s: s.parallelize("i")), True),
    ("skew2_shift1_tile", j1d_time_tile(2, 1), False),
    ("skew2_shift1_no_tile", lambda f: (each(f, ["sB", "sA"], lambda s: s.skew("t", "i", 2)),
                                        S(f, "sA").shift("i", 1)), False),
    ("skew2_shift1_interchange_t_i", j1d_skew_interchange(False), False),
]
ILLEGAL["jacobi-1d"] = [
    ("tile_direct", j1d_time_tile(0, 0), "sB.tile(t, i, 2, 4)"),
    ("skew1_tile", j1d_time_tile(1, 0), "tile("),
    ("skew1_shift1_tile", j1d_time_tile(1, 1), "tile("),
    ("skew2_no_shift_tile", j1d_time_tile(2, 0), "tile("),
    # the right skew and shift, but each tile runs all of sB before all of sA
    ("skew2_shift1_tile_no_interleave", j1d_time_tile(2, 1, interleave=False), "tile("),
    ("parallelize_t", lambda f: S(f, "sB").parallelize("t"), "sB.parallelize(t)"),
    ("parallelize_i_then_skew_interchange", j1d_skew_interchange(True), "sB.parallelize(i)"),
]


# ---- jacobi-2d: sB (t, i, j), sA (t, i, j)
def j2d_time_tile(f):
    sB, sA = S(f, "sB"), S(f, "sA")
    for s in (sB, sA):
        s.skew("t", "i", 2)
        s.skew("t", "j", 2)
    sA.shift("i", 1)
    sA.shift("j", 1)
    for s in (sB, sA):
        s.tile("t", "i", "j", 2, 4, 3)
    sA.after(sB, "j1")


LEGAL["jacobi-2d"] = [
    ("parallelize_i", lambda f: each(f, ["sB", "sA"], lambda s: s.parallelize("i")), True),
    ("tile_ij", lambda f: each(f, ["sB", "sA"], lambda s: s.tile("i", "j", 4, 3)), False),
    ("interchange_ij", lambda f: each(f, ["sB", "sA"], lambda s: s.interchange("i", "j")), False),
    ("time_tile_skew2_shift1", j2d_time_tile, False),
]
ILLEGAL["jacobi-2d"] = [
    ("parallelize_t", lambda f: each(f, ["sB", "sA"], lambda s: s.parallelize("t")),
     "parallelize(t)"),
    ("interchange_t_i", lambda f: each(f, ["sB", "sA"], lambda s: s.interchange("t", "i")),
     "sB.interchange(t, i)"),
    ("fuse_sA_into_sB_at_j", lambda f: S(f, "sA").after(S(f, "sB"), "j"), "sA.after(sB, j)"),
]


# ---- seidel-2d: S (t, i, j), in place
def seidel_wavefront(par=None):
    """(t, i, j) -> (t, t+i, 2t+i+j) makes every dependence distance
    non-negative; then i' = i + t and (i', t) interchanged: the outer loop is
    the wavefront, the middle loop t carries no dependence, j still does."""
    def schedule(f):
        s = S(f, "S")
        s.skew("t", "i", 1)
        s.skew("t", "j", 1)
        s.skew("i", "j", 1)
        s.skew("t", "i", 1)
        s.interchange("t", "i")
        if par:
            s.parallelize(par)
    return schedule


def seidel_wavefront_compact(f):
    s = S(f, "S")
    s.skew("t", "i", 2)          # i' = i + 2t
    s.skew("i", "j", 1)          # j' = j + i + 2t
    s.interchange("t", "i")
    s.parallelize("t")


def seidel_time_tile(f):
    s = S(f, "S")
    s.skew("t", "i", 1)
    s.skew("t", "j", 1)
    s.skew("i", "j", 1)
    s.tile("t", "i", "j", 2, 3, 4)


LEGAL["seidel-2d"] = [
    ("wavefront_parallelize_t", seidel_wavefront("t"), True),
    ("wavefront_compact_parallelize_t", seidel_wavefront_compact, True),
    ("skew_then_tile_tij", seidel_time_tile, False),
    ("skew_only", lambda f: (S(f, "S").skew("t", "i", 1), S(f, "S").skew("t", "j", 1)), False),
]
ILLEGAL["seidel-2d"] = [
    ("parallelize_i", lambda f: S(f, "S").parallelize("i"), "S.parallelize(i)"),
    ("parallelize_j", lambda f: S(f, "S").parallelize("j"), "S.parallelize(j)"),
    ("parallelize_t", lambda f: S(f, "S").parallelize("t"), "S.parallelize(t)"),
    ("interchange_t_i", lambda f: S(f, "S").interchange("t", "i"), "S.interchange(t, i)"),
    ("tile_ij_without_skew", lambda f: S(f, "S").tile("i", "j", 3, 4), "S.tile(i, j, 3, 4)"),
    ("skew_t_only_then_tile", lambda f: (S(f, "S").skew("t", "i", 1), S(f, "S").skew("t", "j", 1),
                                         S(f, "S").tile("t", "i", "j", 2, 3, 4)), "tile("),
    ("wavefront_parallelize_outer", seidel_wavefront("i"), "S.parallelize(i)"),
    ("wavefront_parallelize_inner_j", seidel_wavefront("j"), "S.parallelize(j)"),
]

# ---- heat-3d: sB, sA (t, i, j, k)
HB = ["sB", "sA"]
LEGAL["heat-3d"] = [
    ("parallelize_i", lambda f: each(f, HB, lambda s: s.parallelize("i")), True),
    ("parallelize_j", lambda f: each(f, HB, lambda s: s.parallelize("j")), True),
    ("tile_jk_parallelize_i", lambda f: each(f, HB, lambda s: (s.tile("j", "k", 4, 3),
                                                               s.parallelize("i"))), True),
    ("interchange_jk", lambda f: each(f, HB, lambda s: s.interchange("j", "k")), False),
]
ILLEGAL["heat-3d"] = [
    ("parallelize_t", lambda f: each(f, HB, lambda s: s.parallelize("t")), "parallelize(t)"),
    ("interchange_t_i", lambda f: each(f, HB, lambda s: s.interchange("t", "i")),
     "sB.interchange(t, i)"),
    ("interchange_t_k_sB_only", lambda f: S(f, "sB").interchange("t", "k"), "interchange("),
]

# ---- fdtd-2d: s0 (t, y0), s1 (t, ei, ej), s2 (t, xi, xj), s3 (t, hi, hj)
LEGAL["fdtd-2d"] = [
    ("parallelize_spatial", lambda f: (S(f, "s0").parallelize("y0"), S(f, "s1").parallelize("ei"),
                                       S(f, "s2").parallelize("xi"), S(f, "s3").parallelize("hi")),
     True),
    ("interchange_s1_parallelize_ej_tile_s3", lambda f: (S(f, "s1").interchange("ei", "ej"),
                                                        S(f, "s1").parallelize("ej"),
                                                        S(f, "s3").tile("hi", "hj", 4, 3)), True),
    # ex's update does not depend on ey's: it may run first
    ("ex_update_before_ey_update", lambda f: S(f, "s2").after(S(f, "s0"), "t"), False),
]
ILLEGAL["fdtd-2d"] = [
    ("parallelize_t", lambda f: S(f, "s1").parallelize("t"), "s1.parallelize(t)"),
    ("interchange_t_hi", lambda f: S(f, "s3").interchange("t", "hi"), "s3.interchange(t, hi)"),
    ("interchange_t_ei", lambda f: S(f, "s1").interchange("t", "ei"), "interchange("),
    # hz's update reads the new ey: it may not run before it
    ("hz_update_before_ey_update", lambda f: S(f, "s3").after(S(f, "s0"), "t"), "s3.after(s0, t)"),
]

# ---- lu: L1 (i, j, k), L2 (i, j), U1 (i, ju, ku), in place
def lu_upper_first(f):
    """All of U1 (its own nest) before the lower part: row i's upper part
    would read A[i][ku] before L2 divides it."""
    S(f, "L1").after(S(f, "U1"), None)
    S(f, "L2").after(S(f, "L1"), "j")


LEGAL["lu"] = [
    ("interchange_ju_ku", lambda f: S(f, "U1").interchange("ju", "ku"), False),
    ("reverse_ju", lambda f: S(f, "U1").reverse("ju"), False),
    ("tile_ju_ku", lambda f: S(f, "U1").tile("ju", "ku", 4, 3), False),
    ("split_k", lambda f: S(f, "L1").split("k", 4), False),
    pytest.param("lu", "parallelize_ju", lambda f: S(f, "U1").parallelize("ju"), True,
                 id="lu-parallelize_ju"),
]
ILLEGAL["lu"] = [
    ("interchange_j_k", lambda f: S(f, "L1").interchange("j", "k"), "interchange(j, k)"),
    ("parallelize_j", lambda f: S(f, "L1").parallelize("j"), "parallelize(j)"),
    ("parallelize_i", lambda f: S(f, "U1").parallelize("i"), "parallelize(i)"),
    ("reverse_k", lambda f: S(f, "L1").reverse("k"), "reverse(k)"),
    ("upper_update_before_factorisation", lu_upper_first, "L1.after(U1, None)"),
]

# ---- cholesky: row i: C0 (i, j) = A[i][j], C0_update (i, j, k) -= A[i][k] A[j][k],
# C2 (i, j) = C0 / A[j][j]; then C3 (i) = A[i][i], C3_update (i, kd) -= A[i][kd]^2,
# C4 (i) = sqrt(C3)
def cholesky_diag_in_j_loop(f):
    """A[i][i] -= A[i][k]^2 right after A[i][k] is final, inside the j loop
    (C3, its start, moved before that loop)."""
    S(f, "C0").after(S(f, "C3"), "i")
    S(f, "C0_update").after(S(f, "C0"), "j")
    S(f, "C2").after(S(f, "C0_update"), "j")
    S(f, "C3_update").after(S(f, "C2"), "j")
    S(f, "C4").after(S(f, "C3_update"), "i")


LEGAL["cholesky"] = [
    ("fuse_diag_into_j_loop", cholesky_diag_in_j_loop, False),
    ("split_j", lambda f: each(f, ["C0", "C0_update", "C2"], lambda s: s.split("j", 3)), False),
    ("split_k", lambda f: S(f, "C0_update").split("k", 4), False),
]
ILLEGAL["cholesky"] = [
    ("interchange_j_k", lambda f: S(f, "C0_update").interchange("j", "k"), "interchange(j, k)"),
    ("parallelize_j", lambda f: S(f, "C0_update").parallelize("j"), "parallelize(j)"),
    ("sqrt_before_diag_update", lambda f: S(f, "C4").after(S(f, "C2"), "i"), "C4.after("),
    ("reverse_kd", lambda f: S(f, "C3_update").reverse("kd"), "reverse(kd)"),
]


# ---- trisolv: x0 (i) = b[i], x0_update (i, j), x2 (i) = x0 / L[i][i]
def trisolv_column(par=False):
    """Column-oriented substitution: all x[i] = b[i] first, then for each j:
    x[j] /= L[j][j]; x[i] -= L[i][j] x[j] for i > j (that loop is parallel)."""
    def schedule(f):
        s, u, d = S(f, "x0"), S(f, "x0_update"), S(f, "x2")
        d.after(s)
        u.interchange("i", "j")
        u.after(d, "i")
        if par:
            u.parallelize("i")
    return schedule


LEGAL["trisolv"] = [
    ("column_oriented", trisolv_column(), False),
    ("column_oriented_parallelize_i", trisolv_column(True), True),
    ("split_j", lambda f: S(f, "x0_update").split("j", 4), False),
]
ILLEGAL["trisolv"] = [
    ("interchange_update_only", lambda f: S(f, "x0_update").interchange("i", "j"),
     "x0_update.interchange(i, j)"),
    ("parallelize_i", lambda f: S(f, "x0").parallelize("i"), "x0.parallelize(i)"),
    ("reverse_j", lambda f: S(f, "x0_update").reverse("j"), "reverse(j)"),
    ("divide_before_update", lambda f: S(f, "x2").after(S(f, "x0"), "i"), "x2.after("),
    # x2's i loop is the one x0_update's (interchanged) j loop was fused into
    ("column_oriented_parallelize_shared_loop",
     lambda f: (trisolv_column()(f), S(f, "x2").parallelize("i")), "x2.parallelize(i)"),
]

# ---- floyd-warshall: relax (k, i, j), in place
FW = "relax"
LEGAL["floyd-warshall"] = [
    ("tile_ij", lambda f: S(f, FW).tile("i", "j", 4, 3), False),
    ("interchange_ij", lambda f: S(f, FW).interchange("i", "j"), False),
    ("split_j_unroll", lambda f: (S(f, FW).split("j", 4), S(f, FW).unroll("j1")), False),
]
ILLEGAL["floyd-warshall"] = [
    ("parallelize_k", lambda f: S(f, FW).parallelize("k"), "relax.parallelize(k)"),
    # safe only because path[k][k] >= 0, which no dependence analysis knows
    ("parallelize_i", lambda f: S(f, FW).parallelize("i"), "relax.parallelize(i)"),
    ("parallelize_j", lambda f: S(f, FW).parallelize("j"), "relax.parallelize(j)"),
    ("interchange_k_inward", lambda f: S(f, FW).interchange("k", "i"), "relax.interchange(k, i)"),
    ("reorder_k_innermost", lambda f: S(f, FW).reorder("i", "j", "k"), "reorder("),
    ("reverse_i", lambda f: S(f, FW).reverse("i"), "reverse(i)"),
]

# ---- syrk: scale (i, j <= i), its update acc (i, k, j <= i)
ACC = "scale_update"
SY = ["scale", ACC]


def syrk_ijk(f):
    """acc's k and j interchanged: (i, j, k), as scale's (i, j)."""
    S(f, ACC).interchange("k", "j")


LEGAL["syrk"] = [
    ("reassociate_reverse_k", lambda f: (S(f, ACC).allow_reassociation(),
                                         S(f, ACC).reverse("k")), False),
    ("parallelize_k_reassociate", lambda f: S(f, ACC).parallelize("k", allow_reassociation=True),
     True),
    ("vectorize_k_reassociate", lambda f: S(f, ACC).vectorize("k", 4, allow_reassociation=True),
     False),
    ("parallelize_i", lambda f: each(f, SY, lambda s: s.parallelize("i")), True),
    ("tile_ij_both", lambda f: (syrk_ijk(f), each(f, SY, lambda s: s.tile("i", "j", 4, 3))),
     False),
    ("interchange_ij_both", lambda f: each(f, SY, lambda s: s.interchange("i", "j")), False),
    ("fuse_acc_into_scale_j", lambda f: (syrk_ijk(f), S(f, ACC).after(S(f, "scale"), "j")),
     False),
]
ILLEGAL["syrk"] = [
    ("reverse_k_no_optin", lambda f: S(f, ACC).reverse("k"), "reverse(k)"),
    ("parallelize_k_no_optin", lambda f: S(f, ACC).parallelize("k"), "allow_reassociation=True"),
    ("vectorize_k_no_optin", lambda f: S(f, ACC).vectorize("k", 4), "vectorize("),
    ("interchange_acc_only", lambda f: S(f, ACC).interchange("i", "j"), "interchange(i, j)"),
    ("scale_after_acc", lambda f: S(f, "scale").after(S(f, ACC), "i"), "after("),
]

# ---- adi: column sweep c1..c7 and row sweep r1..r7 inside t, each inside its own i loop
ADI_COL = ["c1", "c2", "c3", "c4", "c5", "c6", "c7"]
LEGAL["adi"] = [
    ("parallelize_column_i", lambda f: S(f, "c1").parallelize("i"), True),
    ("parallelize_row_i", lambda f: S(f, "r1").parallelize("i"), True),
    ("parallelize_both_i", lambda f: (S(f, "c1").parallelize("i"), S(f, "r1").parallelize("i")),
     True),
    ("split_column_i_parallelize_i0", lambda f: (each(f, ADI_COL, lambda s: s.split("i", 3)),
                                                 S(f, "c1").parallelize("i0")), True),
]
ILLEGAL["adi"] = [
    ("parallelize_t", lambda f: S(f, "c1").parallelize("t"), "c1.parallelize(t)"),
    ("parallelize_forward_j", lambda f: S(f, "c4").parallelize("j"), "c4.parallelize(j)"),
    ("parallelize_backward_jb", lambda f: S(f, "c7").parallelize("jb"), "c7.parallelize(jb)"),
    ("reverse_backward_jb", lambda f: S(f, "c7").reverse("jb"), "c7.reverse(jb)"),
    ("interchange_t_i_column_sweep", lambda f: each(f, ADI_COL, lambda s: s.interchange("t", "i")),
     "interchange(t, i)"),
]


def _cases(table):
    out = []
    for kernel, cases in table.items():
        for c in cases:
            if hasattr(c, "marks"):          # already a pytest.param
                out.append(c)
            else:
                out.append(pytest.param(kernel, *c, id=f"{kernel}-{c[0]}"))
    return out


# ================================================================== the tests
@pytest.mark.parametrize("kernel", list(SUITE))
def test_unscheduled_matches_numpy(kernel):
    _inputs, ref, unscheduled = baseline(kernel)
    assert_same(unscheduled, ref, f"{kernel} unscheduled vs NumPy")


@pytest.mark.parametrize("kernel,name,schedule,parallel", _cases(LEGAL))
def test_legal_schedule(kernel, name, schedule, parallel):
    case = SUITE[kernel]
    inputs, ref, unscheduled = baseline(kernel)
    f = case.build()
    schedule(f)
    k = f.compile()
    llvm = os.environ.get("TIRAMISU_PY_TARGET") == "llvm"
    if parallel:
        marker = "GOMP_parallel" if llvm else "#pragma omp parallel"
        assert marker in k.source, f"{kernel}-{name}: no parallel loop emitted"
    out = case.run(k, inputs)
    assert_same(out, unscheduled, f"{kernel}-{name} vs unscheduled")
    assert_same(out, ref, f"{kernel}-{name} vs NumPy")


@pytest.mark.parametrize("kernel,name,schedule,must_name", _cases(ILLEGAL))
def test_illegal_schedule(kernel, name, schedule, must_name):
    f = SUITE[kernel].build()
    schedule(f)
    with pytest.raises(tp.IllegalScheduleError) as info:
        f.compile()
    msg = str(info.value)
    assert " is illegal" in msg
    if must_name:
        assert must_name in msg, msg


def test_every_kernel_has_both_sides():
    for kernel in SUITE:
        assert len(LEGAL[kernel]) >= 2, kernel
        assert len(ILLEGAL[kernel]) >= 2, kernel


# =============================================== regressions of bugs this suite found
def test_bug_triangular_computation():
    """Computations over triangular domains (lu's j < i and i <= ju), declared
    as such; here with the size fixed (the suite's is symbolic)."""
    case = SUITE["lu"].at(N=13)
    inputs = case.inputs(np.random.default_rng(3))
    out = case.run(case.build("N").compile(), inputs)
    np.testing.assert_allclose(out["A"], case.reference(inputs)["A"], rtol=RTOL, atol=ATOL)


def test_bug_update_reading_its_accumulator_is_not_a_reduction():
    f = tp.Function("prodsum", params=["N", "K"])
    i, k = f.var("i", 0, "N"), f.var("k", 0, "K")
    a = f.input("a", ("K",), tp.float64)
    x = f.computation("x", [i], 1.0, dtype=tp.float64)
    x[i] += x[i] * a[k]                      # x <- x * (1 + a[k]): not a sum of terms
    x.update.parallelize("k", allow_reassociation=True)
    try:
        kernel = f.compile()
    except tp.IllegalScheduleError:
        return                               # a sound compiler may refuse it
    av = np.random.default_rng(5).uniform(0.0, 0.5, 64)
    out = kernel(a=av, N=3, K=64)
    np.testing.assert_allclose(out, np.full(3, np.prod(1.0 + av)), rtol=RTOL)

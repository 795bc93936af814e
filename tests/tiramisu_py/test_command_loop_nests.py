"""Each scheduling command by example: a tiny program, the command, and the
C loop nest it gives (the documentation of a command is its test, as TVM
keeps one per schedule primitive).  The nests are the kernel's body without
its constants and argument views; each program also runs and gives NumPy's
answer.  A change to the printing or to a command that alters a nest shows
here, written out.  ``distribute`` also writes out the messages one rank
sends and receives, and runs on three MPI ranks when mpi4py is there."""
import importlib.util
import json
import os
import re
import shutil
import signal
import subprocess
import sys

import islpy as isl
import numpy as np
import pytest

import tiramisu_py as tp
from tiramisu_py.analysis import distribution
from tiramisu_py.poly.model import build_model
from lang_helpers import OneRank

VIEW = re.compile(r"^(const )?\w+ \(\*restrict \w+\)(\[\w+\])* = \((const )?\w+ \(\*\)(\[\w+\])*\)\w+_;$")


def nest(f):
    """The loop nest of ``f``'s C kernel (its body less the leading constants
    and array views), dedented."""
    src = f.compile(target="c").source
    body = src[src.index("{", src.index(f"int {f.name}(")) + 1:]
    body = body[:body.rindex("return")]
    lines = [ln for ln in body.splitlines() if ln.strip()]
    while lines and (lines[0].strip().startswith("const int64_t") or VIEW.match(lines[0].strip())):
        lines.pop(0)
    ind = min(len(ln) - len(ln.lstrip()) for ln in lines)
    return "\n".join(ln[ind:] for ln in lines)


def two():
    """``C[i, j] = A[i, j] + 1`` over 8 x 6."""
    f = tp.Function("two", params={"N": 8, "M": 6})
    i, j = f.var("i", 0, "N"), f.var("j", 0, "M")
    A = f.input("A", ("N", "M"), tp.float32)
    C = f.computation("C", [i, j], A[i, j] + 1.0)
    return f, {"C": C}, lambda A: A + 1


def chain():
    """``P = 2 A``, then ``C = P + 1``: P a temporary."""
    f = tp.Function("chain", params={"N": 8, "M": 6})
    i, j = f.var("i", 0, "N"), f.var("j", 0, "M")
    A = f.input("A", ("N", "M"), tp.float32)
    P = f.computation("P", [i, j], A[i, j] * 2.0)
    C = f.computation("C", [i, j], P[i, j] + 1.0)
    return f, {"P": P, "C": C}, lambda A: A * 2 + 1


def rowsum():
    """``s[i] = sum over k of A[i, k]``, 4 x 5."""
    f = tp.Function("rowsum", params={"N": 4, "K": 5})
    i, k = f.var("i", 0, "N"), f.var("k", 0, "K")
    A = f.input("A", ("N", "K"), tp.float32)
    s = f.computation("s", [i], 0.0)
    s[i] += A[i, k]
    return f, {"s": s}, lambda A: A.sum(1)


def stencil():
    """``P[x] = A[x] + A[x + 1]``, then ``C[i] = P[i] + P[i + 1]``, 6 outputs."""
    f = tp.Function("stencil", params={"N": 6})
    i, x = f.var("i", 0, "N"), f.var("x", 0, "N + 1")
    A = f.input("A", ("N + 2",), tp.float32)
    P = f.computation("P", [x], A[x] + A[x + 1])
    C = f.computation("C", [i], P[i] + P[i + 1])
    return f, {"P": P, "C": C}, lambda A: A[:-2] + 2 * A[1:-1] + A[2:]


def gemv():
    """``s[i] = sum over k of A[i, k] x[k]``, 4 x 8."""
    f = tp.Function("gemv", params={"N": 4, "K": 8})
    i, k = f.var("i", 0, "N"), f.var("k", 0, "K")
    A, x = f.input("A", ("N", "K"), tp.float32), f.input("x", ("K",), tp.float32)
    s = f.computation("s", [i], 0.0)
    s[i] += A[i, k] * x[k]
    return f, {"s": s, "x": x}, lambda A, x: A @ x


def jacobi_reference(A, T=2):
    A = A.copy()
    for t in range(T):
        A[(t + 1) % 2, 1:-1] = (A[t % 2, :-2] + A[t % 2, 1:-1] + A[t % 2, 2:]) / np.float32(3)
    return A


def jacobi():
    """1-D Jacobi, 2 steps over 10 points, in place in the two rows of ``A``:
    ``A[(t + 1) % 2, i]`` the mean of ``A[t % 2, i - 1 .. i + 1]``."""
    f = tp.Function("jacobi", params={"T": 2, "N": 10})
    t, i = f.var("t", 0, "T"), f.var("i", 1, "N - 1")
    A = f.buffer("A", (2, "N"), tp.float32, output=True)
    S = f.computation("S", [t, i], (A[t % 2, i - 1] + A[t % 2, i] + A[t % 2, i + 1]) / 3.0)
    S.store_in(A, [(t + 1) % 2, i])
    return f, {"S": S}, jacobi_reference


PROGRAMS = {"two": two, "chain": chain, "rowsum": rowsum, "stencil": stencil, "gemv": gemv,
            "jacobi": jacobi}
INPUTS = {"two": {"A": (8, 6)}, "chain": {"A": (8, 6)}, "rowsum": {"A": (4, 5)},
          "stencil": {"A": (8,)}, "gemv": {"A": (4, 8), "x": (8,)}, "jacobi": {"A": (2, 10)}}

# command name -> (program, the command as a user writes it, what it does, the nest)
CASES = {
    "tile": ("two", 'C.tile("i", "j", 4, 3)',
          "two loops cut into tiles of 4 x 3: the tile loops outside, the point loops inside", """
    for (int64_t i0 = 0; i0 < 2; i0++) {
      for (int64_t j0 = 0; j0 < 2; j0++) {
        for (int64_t i1 = 0; i1 < 4; i1++) {
          for (int64_t j1 = 0; j1 < 3; j1++) {
            C[4 * i0 + i1][3 * j0 + j1] = A[4 * i0 + i1][3 * j0 + j1] + 1.0f;
          }
        }
      }
    }
"""),
    "split": ("two", 'C.split("j", 4)',
          "one loop cut in two: j0 over blocks of 4, j1 inside (the last block partial)", """
    for (int64_t i = 0; i < 8; i++) {
      for (int64_t j0 = 0; j0 < 2; j0++) {
        for (int64_t j1 = 0; j1 < tp_min_i64(3, -4 * j0 + 5) + 1; j1++) {
          C[i][4 * j0 + j1] = A[i][4 * j0 + j1] + 1.0f;
        }
      }
    }
"""),
    "interchange": ("two", 'C.interchange("i", "j")',
          "two loops swapped", """
    for (int64_t j = 0; j < 6; j++) {
      for (int64_t i = 0; i < 8; i++) {
        C[i][j] = A[i][j] + 1.0f;
      }
    }
"""),
    "reverse": ("two", 'C.reverse("j")',
          "a loop run backwards (its iterator negated)", """
    for (int64_t i = 0; i < 8; i++) {
      for (int64_t j = -5; j < 1; j++) {
        C[i][-j] = A[i][-j] + 1.0f;
      }
    }
"""),
    "shift": ("two", 'C.shift("j", 2)',
          "a loop's iterations moved by 2 (the body reads j - 2)", """
    for (int64_t i = 0; i < 8; i++) {
      for (int64_t j = 2; j < 8; j++) {
        C[i][j - 2] = A[i][j - 2] + 1.0f;
      }
    }
"""),
    "skew": ("two", 'C.skew("i", "j", 1)',
          "j skewed by i: its bounds move with i (a wavefront's first step)", """
    for (int64_t i = 0; i < 8; i++) {
      for (int64_t j = i; j < i + 6; j++) {
        C[i][-i + j] = A[i][-i + j] + 1.0f;
      }
    }
"""),
    "collapse": ("two", 'C.collapse("i", "j")',
          "two loops made one (one parallel loop of 48 instead of 8)", """
    for (int64_t i_j = 0; i_j < 48; i_j++) {
      const int64_t i = i_j / 6;
      const int64_t j = i_j % 6;
      C[i][j] = A[i][j] + 1.0f;
    }
"""),
    "unroll": ("two", 'C.unroll("j", 3)',
          "split by 3 and the inner loop written out", """
    for (int64_t i = 0; i < 8; i++) {
      for (int64_t j0 = 0; j0 < 2; j0++) {
        { /* j1 = 0 */
          const int64_t j1 = 0;
          C[i][3 * j0 + j1] = A[i][3 * j0 + j1] + 1.0f;
        }
        { /* j1 = 1 */
          const int64_t j1 = 1;
          C[i][3 * j0 + j1] = A[i][3 * j0 + j1] + 1.0f;
        }
        { /* j1 = 2 */
          const int64_t j1 = 2;
          C[i][3 * j0 + j1] = A[i][3 * j0 + j1] + 1.0f;
        }
      }
    }
"""),
    "vectorize": ("two", 'C.vectorize("j", 4)',
          "split by 4, the full blocks and the partial one each an omp simd loop", """
    for (int64_t i = 0; i < 8; i++) {
      for (int64_t j0 = 0; j0 < 2; j0++) {
        if (-4 * j0 + 5 >= 3) {
          #pragma omp simd
          for (int64_t j1 = 0; j1 < 4; j1++) {
            C[i][4 * j0 + j1] = A[i][4 * j0 + j1] + 1.0f;
          }
        } else {
          #pragma omp simd
          for (int64_t j1 = 0; j1 < tp_min_i64(3, -4 * j0 + 5) + 1; j1++) {
            C[i][4 * j0 + j1] = A[i][4 * j0 + j1] + 1.0f;
          }
        }
      }
    }
"""),
    "reorder": ("two", '(C.split("j", 3), C.reorder("j0", "i"))',
          "the loops named take the places they hold in the order named, the others stay: "
          "j's blocks outside i, its points inside", """
    for (int64_t j0 = 0; j0 < 2; j0++) {
      for (int64_t i = 0; i < 8; i++) {
        for (int64_t j1 = 0; j1 < 3; j1++) {
          C[i][3 * j0 + j1] = A[i][3 * j0 + j1] + 1.0f;
        }
      }
    }
"""),
    "parallelize": ("two", 'C.parallelize("i")',
          "the outer loop an OpenMP parallel for", """
    #pragma omp parallel for
    for (int64_t i = 0; i < 8; i++) {
      for (int64_t j = 0; j < 6; j++) {
        C[i][j] = A[i][j] + 1.0f;
      }
    }
"""),
    "after": ("chain", 'C.after(P, "i")',
          "C fused into P's loop i (its own loop j after P's); P a temporary of the kernel", """
    float (*restrict P)[6] = tp_alloc((const int64_t[]){8, 6}, 2, sizeof(float), 0);
    if (P == NULL) {
      return 1;
    }
    for (int64_t i = 0; i < 8; i++) {
      for (int64_t j = 0; j < 6; j++) {
        P[i][j] = A[i][j] * 2.0f;
      }
      for (int64_t j = 0; j < 6; j++) {
        C[i][j] = P[i][j] + 1.0f;
      }
    }
    free(P);
"""),
    "then": ("chain", 'P.then(C, "j")',
          "C.after(P, \"j\") from the producer's side: both statements in one loop j", """
    float (*restrict P)[6] = tp_alloc((const int64_t[]){8, 6}, 2, sizeof(float), 0);
    if (P == NULL) {
      return 1;
    }
    for (int64_t i = 0; i < 8; i++) {
      for (int64_t j = 0; j < 6; j++) {
        P[i][j] = A[i][j] * 2.0f;
        C[i][j] = P[i][j] + 1.0f;
      }
    }
    free(P);
"""),
    "tile_band": ("chain", '(C.after(P, "i"), f.tile_band([P, C], ["i", "j"], [4, 3]))',
          "two statements tiled as one band: the tile loops and i1 shared, each statement keeping "
          "its own loop j1 after i1, where the two parted", """
    float (*restrict P)[6] = tp_alloc((const int64_t[]){8, 6}, 2, sizeof(float), 0);
    if (P == NULL) {
      return 1;
    }
    for (int64_t i0 = 0; i0 < 2; i0++) {
      for (int64_t j0 = 0; j0 < 2; j0++) {
        for (int64_t i1 = 0; i1 < 4; i1++) {
          for (int64_t j1 = 0; j1 < 3; j1++) {
            P[4 * i0 + i1][3 * j0 + j1] = A[4 * i0 + i1][3 * j0 + j1] * 2.0f;
          }
          for (int64_t j1 = 0; j1 < 3; j1++) {
            C[4 * i0 + i1][3 * j0 + j1] = P[4 * i0 + i1][3 * j0 + j1] + 1.0f;
          }
        }
      }
    }
    free(P);
"""),
    "store_in": ("chain",
          '(P.store_in(f.buffer("row", ("M",), tp.float32), [P.vars[1]]), C.after(P, "i"))',
          "P kept in one row, legal once C runs in P's row loop (refused in program order)", """
    float *restrict row = tp_alloc((const int64_t[]){6}, 1, sizeof(float), 0);
    if (row == NULL) {
      return 1;
    }
    for (int64_t i = 0; i < 8; i++) {
      for (int64_t j = 0; j < 6; j++) {
        row[j] = A[i][j] * 2.0f;
      }
      for (int64_t j = 0; j < 6; j++) {
        C[i][j] = row[j] + 1.0f;
      }
    }
    free(row);
"""),
    "compute_at": ("stencil", 'P.compute_at(C, "i")',
          "the two values of P that C(i) reads computed inside C's loop i (overlaps recomputed)", """
    float *restrict P = tp_alloc((const int64_t[]){7}, 1, sizeof(float), 0);
    if (P == NULL) {
      return 1;
    }
    for (int64_t i = 0; i < 6; i++) {
      for (int64_t x = i; x < i + 2; x++) {
        P[x] = A[x] + A[x + 1];
      }
      C[i] = P[i] + P[i + 1];
    }
    free(P);
"""),
    "cache_at": ("gemv", 's.update.cache_at(x, "i")',
          "a copy of what one iteration of i reads of x, made in that iteration, read instead", """
    float *restrict x_cache = tp_alloc((const int64_t[]){8}, 1, sizeof(float), 0);
    if (x_cache == NULL) {
      return 1;
    }
    for (int64_t i = 0; i < 4; i++) {
      s[i] = 0.0f;
    }
    for (int64_t i = 0; i < 4; i++) {
      for (int64_t x_cache_0 = 0; x_cache_0 < 8; x_cache_0++) {
        x_cache[x_cache_0] = x[x_cache_0];
      }
      for (int64_t k = 0; k < 8; k++) {
        s[i] = s[i] + A[i][k] * x_cache[k];
      }
    }
    free(x_cache);
"""),
    "allow_reassociation": ("rowsum", 's.update.vectorize("k", 4, allow_reassociation=True)',
          "a sum vectorised: four partial sums in lanes, the tail and the lanes added at the end", """
    for (int64_t i = 0; i < 4; i++) {
      s[i] = 0.0f;
    }
    for (int64_t i = 0; i < 4; i++) {
      float s_vacc[4];
      #pragma omp simd
      for (int64_t s_lane = 0; s_lane < 4; s_lane++) {
        s_vacc[s_lane] = -0.0f;
      }
      for (int64_t k0 = 0; k0 < 2; k0++) {
        if (-4 * k0 + 4 >= 3) {
          #pragma omp simd
          for (int64_t k1 = 0; k1 < 4; k1++) {
            s_vacc[k1] = s_vacc[k1] + A[i][4 * k0 + k1];
          }
        } else {
          {
            float tp_acc_k1 = s[i];
            #pragma omp simd reduction(+: tp_acc_k1)
            for (int64_t k1 = 0; k1 < tp_min_i64(3, -4 * k0 + 4) + 1; k1++) {
              tp_acc_k1 = tp_acc_k1 + A[i][4 * k0 + k1];
            }
            s[i] = tp_acc_k1;
          }
        }
      }
      {
        float tp_acc_s_lane = s[i];
        #pragma omp simd reduction(+: tp_acc_s_lane)
        for (int64_t s_lane = 0; s_lane < 4; s_lane++) {
          tp_acc_s_lane = tp_acc_s_lane + s_vacc[s_lane];
        }
        s[i] = tp_acc_s_lane;
      }
    }
"""),
    "store_nontemporal": ("two", 'C.vectorize("j", 6).store_nontemporal()',
          "each row's lanes computed into a small buffer, then streamed to the row past the "
          "caches; a fence after the stores", """
    for (int64_t i = 0; i < 8; i++) {
      { /* C: 6 lanes streamed past the caches (store_nontemporal) */
        float tp_nt_C[6];
        #pragma omp simd
        for (int64_t j = 0; j < 6; j++) {
          tp_nt_C[j] = A[i][j] + 1.0f;
        }
        tp_stream(&C[i][0], tp_nt_C, sizeof(tp_nt_C));
      }
    }
    tp_stream_fence();
"""),
    "accumulate_locally": ("rowsum", 's.update.accumulate_locally("k")',
          "the sum kept in a local over k, copied in and out (the order of its additions unchanged)", """
    for (int64_t i = 0; i < 4; i++) {
      s[i] = 0.0f;
    }
    for (int64_t i = 0; i < 4; i++) {
      float s_local[1];
      s_local[0] = s[i];
      for (int64_t k = 0; k < 5; k++) {
        s_local[0] = s_local[0] + A[i][k];
      }
      s[i] = s_local[0];
    }
"""),
    "distribute": ("jacobi", 'S.distribute("i")',
          "a rank's kernel: its block of i (dist_lo <= i < dist_hi, given per call), its columns "
          "of A stored from dist_off (a halo of one each side), the steps of t and the phases "
          "one call at a time; the messages go between the calls (written out below)", """
    if (dist_phase == 0) {
      for (int64_t t = tp_max_i64(0, dist_from_t); t < tp_min_i64(1, dist_to_t - 1) + 1; t++) {
        for (int64_t i = tp_max_i64(1, dist_lo); i < tp_min_i64(8, dist_hi - 1) + 1; i++) {
          A[tp_floormod_i64(t + 1, 2)][i - dist_off] = (A[t][i - 1 - dist_off] + A[t][i - dist_off] + A[t][i + 1 - dist_off]) / 3.0f;
        }
      }
    }
"""),
}


@pytest.fixture(autouse=True)
def _parallel_even_when_small(monkeypatch):
    monkeypatch.setenv("TIRAMISU_PY_PARALLEL_GRAIN", "0")


@pytest.mark.parametrize("name", list(CASES))
def test_a_command_gives_this_loop_nest(name):
    program, command, _, want = CASES[name]
    f, env, reference = PROGRAMS[program]()
    eval(command, {"tp": tp}, dict(env, f=f))
    assert nest(f) == "\n".join(ln[4:] for ln in want.strip("\n").splitlines()), command
    rng = np.random.default_rng(0)
    args = {n: rng.standard_normal(s).astype(np.float32) for n, s in INPUTS[program].items()}
    want = reference(**args)                   # before the call: an output may be an input
    one_rank = {"comm": OneRank()} if name == "distribute" else {}
    out = f.compile(target="c")(**args, **one_rank)
    np.testing.assert_allclose(out, want, rtol=1e-5, atol=1e-6)


def points(s):
    """The integer points of an isl set, in order."""
    n, out = s.dim(isl.dim_type.set), []
    s.foreach_point(lambda p: out.append(tuple(p.get_coordinate_val(isl.dim_type.set, k)
                                               .to_python() for k in range(n))))
    return sorted(out)


def messages(f, size, rank):
    """The messages rank ``rank`` of ``size`` receives and sends, one line
    an element: the initial halo ("before" the first step) and after each
    step of t (a message's region maps the step to the elements)."""
    sends, recvs, _, _ = distribution.messages(distribution.plan(f, build_model(f)), {}, size,
                                               rank)
    lines = []
    for verb, to, msgs in (("receive", "from", recvs), ("send", "to", sends)):
        for m in msgs:
            for p in points(m.region if m.phase is None else m.region.wrap()):
                step, idx = (-1, p) if m.phase is None else (p[0], p[1:])
                when = "before" if step < 0 else f"after t = {step}"
                lines.append(((step, verb, m.peer, idx), f"{when}: {verb} {m.buffer}"
                              f"[{', '.join(map(str, idx))}] {to} rank {m.peer}"))
    return "\n".join(line for _, line in sorted(lines))


def test_distribute_exchanges_these_messages():
    """The messages of ``S.distribute("i")`` (the case above) for rank 1 of
    3: it runs i = 4 .. 6 (the block rule over A's 10 columns), reads
    columns 3 and 7 of its neighbours, and sends them columns 4 and 6: of
    row 0 (the initial values) before the first step, of row 1 after step
    t = 0; after the last step none (no one reads its values).  Derived
    exactly from the dependences, sent by the Python side between the
    kernel's calls (tiramisu_py.driver.distributed)."""
    f, env, _ = jacobi()
    env["S"].distribute("i")
    assert messages(f, 3, 1) == """\
before: receive A[0, 3] from rank 0
before: receive A[0, 7] from rank 2
before: send A[0, 4] to rank 0
before: send A[0, 6] to rank 2
after t = 0: receive A[1, 3] from rank 0
after t = 0: receive A[1, 7] from rank 2
after t = 0: send A[1, 4] to rank 0
after t = 0: send A[1, 6] to rank 2"""


RANKS_SCRIPT = """
import json, numpy as np
from tiramisu_py import mpi
from tests.tiramisu_py.test_command_loop_nests import jacobi

def main():
    comm = mpi.COMM_WORLD
    f, env, reference = jacobi()
    env["S"].distribute("i")
    A = np.random.default_rng(0).standard_normal((2, 10)).astype(np.float32)
    kernel = f.compile(target="c")
    out = kernel(A=mpi.scatter(A if comm.Get_rank() == 0 else None, axis=1, comm=comm), comm=comm)
    got, stats = mpi.gather(out, axis=1, comm=comm), comm.gather(kernel.comm_stats)
    if comm.Get_rank() == 0:
        print("RESULT " + json.dumps({"error": float(np.abs(got - reference(A)).max()),
                                      "sent": [s["messages_sent"] for s in stats]}))

mpi.abort_on_error(main)
"""
HAVE_MPI = importlib.util.find_spec("mpi4py") is not None and shutil.which("mpiexec")


@pytest.mark.skipif(not HAVE_MPI, reason="running on ranks needs mpi4py and mpiexec "
                    "(pip install tiramisu_py[mpi]); the nest and the messages are checked above")
def test_distribute_on_three_ranks_gives_numpys_answer():
    """The case above under ``mpiexec -n 3``: each rank its block of A's
    columns (``mpi.scatter(..., axis=1)``), the result gathered on rank 0
    equal to NumPy's; ranks 0 and 2 send 2 messages, rank 1 the 4 above."""
    proc = subprocess.Popen(["mpiexec", "-n", "3", sys.executable, "-c", RANKS_SCRIPT],
                            stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                            start_new_session=True, env=dict(os.environ, OMP_NUM_THREADS="1"))
    try:
        out, _ = proc.communicate(timeout=120)
    except subprocess.TimeoutExpired:
        os.killpg(proc.pid, signal.SIGKILL)          # mpiexec and its ranks
        pytest.fail(f"mpiexec -n 3 hung beyond 120 s:\n{proc.communicate()[0][-3000:]}")
    assert proc.returncode == 0, out[-3000:]
    res = json.loads(next(ln for ln in out.splitlines() if ln.startswith("RESULT "))[7:])
    assert res["error"] < 1e-6 and res["sent"] == [2, 4, 2], res


def test_every_scheduling_command_is_written_out_here_or_for_the_gpu():
    """Each command of a statement (the public methods of Schedulable),
    ``f.tile_band`` and ``store_in`` has its case in this file or in
    tests/codegen/cuda/test_gpu_command_nests.py: a new command gets one."""
    from tests.codegen.cuda.test_gpu_command_nests import CASES as GPU_CASES
    from tiramisu_py.commands.schedulable import Schedulable
    commands = {n for n in vars(Schedulable) if not n.startswith("_")} | {"tile_band", "store_in"}
    assert commands - set(CASES) - set(GPU_CASES) == set()

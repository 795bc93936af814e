"""Each scheduling command by example: a tiny program, the command, and the
C loop nest it gives (the documentation of a command is its test, as TVM
keeps one per schedule primitive).  The nests are the kernel's body without
its constants and argument views; each program also runs and gives NumPy's
answer.  A change to the printing or to a command that alters a nest shows
here, written out."""
import re

import numpy as np
import pytest

import tiramisu_py as tp

VIEW = re.compile(r"^(const )?\w+ \(\*restrict \w+\)(\[\d+\])* = \((const )?\w+ \(\*\)(\[\d+\])*\)\w+_;$")


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


PROGRAMS = {"two": two, "chain": chain, "rowsum": rowsum, "stencil": stencil, "gemv": gemv}
INPUTS = {"two": {"A": (8, 6)}, "chain": {"A": (8, 6)}, "rowsum": {"A": (4, 5)},
          "stencil": {"A": (8,)}, "gemv": {"A": (4, 8), "x": (8,)}}

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
    out = f.compile(target="c")(**args)
    np.testing.assert_allclose(out, reference(**args), rtol=1e-5, atol=1e-6)

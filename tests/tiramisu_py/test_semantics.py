"""Value semantics shared by both backends and NumPy (issue 17):

* integer ``//`` and ``%`` (and the loop IR's truncating ``div``/``mod``) never
  trap: ``x // 0 == x % 0 == 0``, ``MIN // -1 == MIN``, ``MIN % -1 == 0``,
  scalar and vector code (crash tests run in a child process);
* float ``max``/``min`` propagate NaN like ``np.maximum``/``np.max``: element-wise
  (either operand order), in reductions (plain, vectorised, parallel, array
  sections, ``accumulate_locally``) and in the library's fused
  conv-ReLU-maxpool block;
* integer arithmetic wraps at its width (C is compiled with ``-fwrapv``, LLVM
  emits no ``nsw``/``nuw`` on values): ``INT_MAX + 1 == INT_MIN`` and
  ``select(X + 1 > X, 1, 0)`` is 0 at ``INT_MAX``.
"""
from repo_paths import ROOT
import os
import subprocess
import sys

os.environ.setdefault("OMP_WAIT_POLICY", "passive")

import numpy as np  # noqa: E402
import pytest  # noqa: E402

import tiramisu_py as tp  # noqa: E402
from codegen import compile_c, compile_llvm  # noqa: E402
from codegen.ir import (ArrayArg, Binary, Block, Const, For, Load, LoweredFunction,  # noqa: E402
                        ScalarArg, Store, Var)

INT_TYPES = ("int8", "uint8", "int32", "int64")
NAN = float("nan")


def _child(script: str):
    env = dict(os.environ)
    env.setdefault("OMP_WAIT_POLICY", "passive")
    r = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True,
                       timeout=600, env=env, cwd=ROOT)
    assert r.returncode == 0, f"child died with {r.returncode}:\n{r.stdout[-3000:]}\n{r.stderr[-3000:]}"
    assert "MISMATCH" not in r.stdout, r.stdout[-3000:]
    assert "DONE" in r.stdout, r.stdout[-3000:]
    return r.stdout


# =========================================================== integer division
_DIV_CHILD = r"""
import sys
import numpy as np, tiramisu_py as tp
target = {target!r}
N = 67
rng = np.random.default_rng(5)
f = tp.Function("divzero_" + target, params=["N"])
i = f.var("i", 0, "N")
refs, args = {{}}, {{}}
for dt in ("int8", "uint8", "int32", "int64"):
    info = np.iinfo(dt)
    x = rng.integers(info.min, int(info.max) + 1, N, dtype=dt)
    y = rng.integers(max(info.min, -9), 10, N, dtype=dt)
    x[:8] = [info.min, info.min, info.max, 0, 5, info.min, 7, info.max]
    y[:8] = [0, -1 if dt != "uint8" else 3, 0, 0, 0, -1 if dt != "uint8" else 0, -1 if dt != "uint8" else 1, 0]
    y[20:36] = 0                      # a whole vector of zero divisors
    if dt != "uint8":
        x[40:56] = info.min
        y[40:56] = -1                 # a whole vector of MIN // -1
    args["x_" + dt], args["y_" + dt] = x, y
    X = f.input("x_" + dt, ("N",), getattr(tp, dt))
    Y = f.input("y_" + dt, ("N",), getattr(tp, dt))
    lits = [0, 3] + ([-1] if dt != "uint8" else [])
    for sched in ("plain", "vec"):
        for name, e, ref in (
                ("fdiv", X[i] // Y[i], lambda: x // y),
                ("fmod", X[i] % Y[i], lambda: x % y),
                # under a lane-dependent condition (LLVM used to refuse to widen it)
                ("sel", tp.select(X[i] > 0, X[i] // Y[i], X[i] % Y[i]),
                 lambda: np.where(x > 0, x // y, x % y)),
                *[(f"ldiv{{k}}", X[i] // v, (lambda v=v: x // np.array(v).astype(dt)))
                  for k, v in enumerate(lits)],
                *[(f"lmod{{k}}", X[i] % v, (lambda v=v: x % np.array(v).astype(dt)))
                  for k, v in enumerate(lits)]):
            c = f.computation(f"{{name}}_{{sched}}_{{dt}}", [i], e)
            if sched == "vec":
                c.vectorize("i", 16)
            with np.errstate(all="ignore"):
                refs[c.name] = ref()
k = f.compile(target=target)
out = k(**args)
for name, ref in refs.items():
    if out[name].dtype != ref.dtype or not np.array_equal(out[name], ref):
        print("MISMATCH", name, out[name][:12], ref[:12])
print("DONE", len(refs))
"""


@pytest.mark.parametrize("target", ["c", "llvm"])
def test_integer_floor_division_by_zero_and_min_by_minus_one(target):
    """``//`` and ``%`` by 0 and ``MIN // -1`` on every integer type, scalar,
    vectorised and under a lane-dependent condition, with variable and literal
    divisors: no signal, NumPy's values."""
    out = _child(_DIV_CHILD.format(target=target))
    assert "DONE" in out


def _trunc_ref(x, y, op, dt):
    """C's truncating ``/`` and ``%`` with NumPy's answers where C has none."""
    lo, hi = (int(np.iinfo(dt).min), int(np.iinfo(dt).max))
    out = []
    for a, b in zip(x.tolist(), y.tolist()):
        if b == 0:
            r = 0
        else:
            q = abs(a) // abs(b)
            q = q if (a < 0) == (b < 0) else -q
            r = q if op == "div" else a - q * b
        out.append((r - lo) % (hi - lo + 1) + lo)
    return np.array(out, dt)


_TRUNC_CHILD = r"""
import sys
import numpy as np
from tests.tiramisu_py.test_semantics import run_truncating_division
run_truncating_division({target!r})
print("DONE")
"""


def run_truncating_division(target):
    """The loop IR's ``div``/``mod`` on integers (not spelled by the language:
    isl's and hand-built IR's), scalar and vector loops.  Runs in a child."""
    cf = compile_c if target == "c" else compile_llvm
    rng = np.random.default_rng(9)
    n = 53
    for dt in INT_TYPES:
        info = np.iinfo(dt)
        x = rng.integers(info.min, int(info.max) + 1, n, dtype=dt)
        y = rng.integers(max(info.min, -5), 6, n, dtype=dt)
        x[:6] = [info.min, info.min, info.max, 0, 9, info.min]
        y[:6] = [0, -1 if dt != "uint8" else 7, 0, 0, 0, 1]
        y[16:32] = 0
        for kind in ("serial", "vector"):
            for op in ("div", "mod"):
                i, N = Var("i"), Var("N")
                val = Binary(op, Load("X", (i,), dt), Load("Y", (i,), dt), dt)
                fn = LoweredFunction(f"trunc_{op}_{dt}_{kind}", [ScalarArg("N")],
                                     [ArrayArg("X", dt, (N,), False), ArrayArg("Y", dt, (N,), False),
                                      ArrayArg("O", dt, (N,), True)],
                                     For("i", Const(0, "int64"), N, Store("O", (i,), val), kind=kind))
                o = np.full(n, 77, dt)
                assert cf(fn).call([n], [a.__array_interface__["data"][0] for a in (x, y, o)]) == 0
                ref = _trunc_ref(x, y, op, dt)
                if not np.array_equal(o, ref):
                    print("MISMATCH", target, dt, kind, op, o[:8], ref[:8])


@pytest.mark.parametrize("target", ["c", "llvm"])
def test_truncating_ir_division_never_traps(target):
    _child(_TRUNC_CHILD.format(target=target))


def test_llvm_widens_a_division_under_a_lane_dependent_condition():
    """A guarded division cannot trap, so a lane-dependent select around one is
    widened (it used to fall back to scalar code)."""
    f = tp.Function("seldiv", params=["N"])
    i = f.var("i", 0, "N")
    X = f.input("X", ("N",), tp.int32)
    Y = f.input("Y", ("N",), tp.int32)
    # both loads in the condition: only the division is lane-dependent
    c = f.computation("Q", [i], tp.select(X[i] * Y[i] > 0, X[i] // Y[i], -1))
    c.vectorize("i", 16)
    k = f.compile(target="llvm")
    assert "sdiv <16 x i32>" in k.source and "not widened" not in k.source
    x = np.arange(-40, 40, dtype=np.int32)
    y = (np.arange(80, dtype=np.int32) % 7) - 3
    ref = np.where(x * y > 0, x // np.where(y == 0, 1, y), -1)
    np.testing.assert_array_equal(k(X=x, Y=y), ref)


# =========================================================== NaN in max / min
def _nan_rows(dt, k=37):
    """Rows with NaN first, in the middle, last, everywhere, nowhere, twice,
    among infinities, and a row of -inf / +inf."""
    rng = np.random.default_rng(11)
    x = rng.standard_normal((10, k)).astype(dt)
    x[0, 0] = NAN
    x[1, k // 2] = NAN
    x[2, k - 1] = NAN
    x[3, :] = NAN
    x[5, [3, 30]] = NAN
    x[6, :] = np.inf
    x[6, 17] = NAN
    x[7, :] = -np.inf
    x[8, :] = np.inf
    x[9, 16] = NAN                   # the first lane of the second vector
    return x


def _reduction(sched, dt, name):
    f = tp.Function(name, params=["N", "K"])
    i, k = f.var("i", 0, "N"), f.var("k", 0, "K")
    X = f.input("X", ("N", "K"), getattr(tp, dt))
    R = f.computation("R", [i], -np.inf)
    R[i].max(X[i, k])
    S = f.computation("S", [i], np.inf)
    S[i].min(X[i, k])
    for u in (R.update, S.update):
        if sched == "vector":
            u.vectorize("k", 8, allow_reassociation=True)
        elif sched == "parallel":
            u.parallelize("k", allow_reassociation=True)
        elif sched == "parallel_sections":          # a whole array per thread
            u.reorder("k", "i")
            u.parallelize("k", allow_reassociation=True)
        elif sched == "accumulate":
            u.split("i", 4)
            u.reorder("i0", "k", "i1")
            u.vectorize("i1", 4)
            u.accumulate_locally("k", allow_reassociation=True)
    return f


@pytest.mark.parametrize("dt", ["float32", "float64"])
@pytest.mark.parametrize("sched", ["plain", "vector", "parallel", "parallel_sections", "accumulate"])
def test_max_min_reductions_propagate_nan(backend, sched, dt):
    x = _nan_rows(dt)
    k = _reduction(sched, dt, f"nanred_{sched}_{dt}").compile()
    out = k(X=x)
    np.testing.assert_array_equal(out["R"], np.max(x, axis=1))
    np.testing.assert_array_equal(out["S"], np.min(x, axis=1))
    # wider rows: NaN in the unrolled vector accumulators and the epilogue
    for kk in (1, 16, 100, 131):
        y = np.random.default_rng(kk).standard_normal((6, kk)).astype(dt)
        for r, pos in enumerate((0, kk // 3, kk - 1, min(kk - 1, 64), kk // 2)):
            y[r, pos] = NAN
        out = k(X=y)
        np.testing.assert_array_equal(out["R"], np.max(y, axis=1))
        np.testing.assert_array_equal(out["S"], np.min(y, axis=1))


@pytest.mark.parametrize("dt", ["float32", "float64"])
@pytest.mark.parametrize("vec", [False, True])
def test_elementwise_max_min_propagate_nan_in_either_operand(backend, dt, vec):
    f = tp.Function(f"nanew_{dt}_{vec}", params=["N"])
    i = f.var("i", 0, "N")
    X = f.input("X", ("N",), getattr(tp, dt))
    Y = f.input("Y", ("N",), getattr(tp, dt))
    exprs = {
        "mxy": (tp.max(X[i], Y[i]), lambda x, y: np.maximum(x, y)),
        "myx": (tp.max(Y[i], X[i]), lambda x, y: np.maximum(y, x)),
        "nxy": (tp.min(X[i], Y[i]), lambda x, y: np.minimum(x, y)),
        "nyx": (tp.min(Y[i], X[i]), lambda x, y: np.minimum(y, x)),
        "relu": (tp.max(X[i], 0.0), lambda x, y: np.maximum(x, 0)),
        "relu_r": (tp.max(0.0, X[i]), lambda x, y: np.maximum(0, x).astype(x.dtype)),
        "m3": (tp.max(X[i], 1.0, Y[i]), lambda x, y: np.maximum(np.maximum(x, 1), y)),
        "litnan": (tp.max(X[i], NAN), lambda x, y: np.maximum(x, np.array(NAN, x.dtype))),
        "litnan_r": (tp.min(NAN, X[i]), lambda x, y: np.minimum(np.array(NAN, x.dtype), x)),
        "consts": (tp.max(tp.cast(getattr(tp, dt), 1.0), NAN) + X[i] * 0,
                   lambda x, y: np.full_like(x, NAN)),
    }
    for name, (e, _) in exprs.items():
        c = f.computation(name, [i], e)
        if vec:
            c.vectorize("i", 8)
    k = f.compile()
    x = np.array([NAN, 1, NAN, -2, 3, NAN, np.inf, -np.inf, 0, -0.5, NAN, 2, 5, -1, NAN, 7, 8, 9, NAN],
                 dt)
    y = np.array([1, NAN, NAN, 4, -3, -np.inf, NAN, NAN, 0, 0.5, 2, NAN, 5, -7, 1, NAN, 9, 8, NAN], dt)
    out = k(X=x, Y=y)
    for name, (_, ref) in exprs.items():
        np.testing.assert_array_equal(out[name], ref(x, y), err_msg=name)


def test_nan_propagating_code_stays_a_compare_and_blend():
    """The NaN test is cheap: no libm fmax/fmin calls, no fast-math flags that
    would fold ``x != x`` away, OpenMP combines through a declared reduction."""
    f = tp.Function("cheap", params=["N"])
    i = f.var("i", 0, "N")
    X = f.input("X", ("N",), tp.float32)
    c = f.computation("O", [i], tp.max(X[i], 0.0))
    c.vectorize("i", 16)
    src = f.compile(target="c").source
    assert "fmax" not in src and "a != a" in src
    ll = f.compile(target="llvm").source
    assert "fcmp uno" in ll and "fmax" not in ll and "maxnum" not in ll
    for flag in (" fast ", " nnan ", " ninf "):
        assert flag not in ll
    r = _reduction("parallel", "float32", "cheap_red")
    src = r.compile(target="c").source
    assert "#pragma omp declare reduction(tp_omp_max_f32" in src
    assert "reduction(max:" not in src and "reduction(min:" not in src
    from codegen.toolchain import BASE_FLAGS
    assert not any(fl in BASE_FLAGS for fl in ("-ffast-math", "-ffinite-math-only", "-Ofast"))


# ------------------------------------------------- the fused conv-ReLU-maxpool
def _ref_block(x, w, b, pool):
    n, ci, h, wd = x.shape
    co = w.shape[0]
    xp = np.pad(x.astype(np.float64), ((0, 0), (0, 0), (1, 1), (1, 1)))
    conv = np.zeros((n, co, h, wd))
    for ky in range(3):
        for kx in range(3):
            conv += np.einsum("nchw,oc->nohw", xp[:, :, ky:ky + h, kx:kx + wd], w[:, :, ky, kx])
    conv += b[None, :, None, None]
    r = np.maximum(conv, 0)                        # propagates NaN
    ph, pw = h // pool, wd // pool
    return r[:, :, :ph * pool, :pw * pool].reshape(n, co, ph, pool, pw, pool).max(axis=(3, 5))


@pytest.mark.parametrize("algo,pool", [("direct", 2), ("direct", 3), ("winograd", 2)])
@pytest.mark.parametrize("target", ["c", "llvm"])
def test_conv_relu_maxpool_keeps_nan(algo, pool, target):
    import schedules
    rng = np.random.default_rng(21)
    n, ci, h, wd, co = 2, 5, 9, 11, 7
    x = rng.standard_normal((n, ci, h, wd), dtype=np.float32)
    w = rng.standard_normal((co, ci, 3, 3), dtype=np.float32)
    b = rng.standard_normal(co, dtype=np.float32)
    x[0, 1, 0, 0] = NAN          # a corner
    x[0, 3, 4, 6] = NAN          # the middle
    x[1, 0, 8, 10] = NAN         # the last row and column (outside every window)
    x[1, 4, 2, 10] = NAN         # the last column
    b[5] = NAN                   # a whole channel
    out = schedules.conv_relu_maxpool(x, w, b, padding=1, pool=pool, algo=algo, target=target)
    ref = _ref_block(x, w, b, pool)
    assert np.isnan(ref).any() and not np.isnan(ref).all()
    np.testing.assert_array_equal(np.isnan(out), np.isnan(ref))
    ok = ~np.isnan(ref)
    np.testing.assert_allclose(out[ok], ref[ok], rtol=1e-4, atol=1e-4)


# =========================================================== wrapping integers
@pytest.mark.parametrize("dt", INT_TYPES)
@pytest.mark.parametrize("vec", [False, True])
def test_integer_arithmetic_wraps_like_numpy(backend, dt, vec):
    f = tp.Function(f"wrap_{dt}_{vec}", params=["N"])
    i = f.var("i", 0, "N")
    X = f.input("X", ("N",), getattr(tp, dt))
    Y = f.input("Y", ("N",), getattr(tp, dt))
    one = np.array(1, dt)
    exprs = {
        "inc": (X[i] + 1, lambda x, y: x + one),
        "dec": (X[i] - 1, lambda x, y: x - one),
        "cmp": (tp.select(X[i] + 1 > X[i], 1, 0), lambda x, y: np.where(x + one > x, 1, 0)),
        "cmp2": (tp.select(X[i] + Y[i] < X[i], 1, 0), lambda x, y: np.where(x + y < x, 1, 0)),
        "add": (X[i] + Y[i], lambda x, y: x + y),
        "mul": (X[i] * Y[i], lambda x, y: x * y),
        "sq": (X[i] * X[i], lambda x, y: x * x),
        "neg": (-X[i], lambda x, y: -x),
        "absx": (tp.abs(X[i]), lambda x, y: np.abs(x)),
        "fold": (X[i] + 127 + 1, lambda x, y: x + np.array(128).astype(dt)),
        # the index simplifier must not split a sum that wraps: (4x + 1) // 4 != x
        "split_q": ((X[i] * 4 + 1) // 4, lambda x, y: (x * np.array(4, dt) + one) // np.array(4, dt)),
        "split_r": ((X[i] * 4 + 5) % 4, lambda x, y: (x * np.array(4, dt) + np.array(5, dt)) % np.array(4, dt)),
    }
    for name, (e, _) in exprs.items():
        c = f.computation(name, [i], e)
        if vec:
            c.vectorize("i", 16)
    k = f.compile()
    info = np.iinfo(dt)
    rng = np.random.default_rng(4)
    x = rng.integers(info.min, int(info.max) + 1, 40, dtype=dt)
    y = rng.integers(info.min, int(info.max) + 1, 40, dtype=dt)
    x[:6] = [info.max, info.min, info.max, info.max - 1, 0, info.min]
    y[:6] = [1, info.max if dt != "uint8" else 1, info.max, 2, 0, info.min]
    out = k(X=x, Y=y)
    for name, (_, ref) in exprs.items():
        with np.errstate(all="ignore"):
            r = ref(x, y)
        got = out[name]
        np.testing.assert_array_equal(got.astype(np.int64) if name.startswith("cmp") else got,
                                      r.astype(np.int64) if name.startswith("cmp") else r.astype(got.dtype),
                                      err_msg=name)
        if not name.startswith("cmp"):
            assert got.dtype == np.dtype(dt), name
    assert out["cmp"][0] == 0                    # the repro: INT_MAX + 1 > INT_MAX is false


def test_c_is_compiled_with_fwrapv_and_llvm_values_carry_no_nsw():
    from codegen.toolchain import BASE_FLAGS
    assert "-fwrapv" in BASE_FLAGS
    f = tp.Function("nsw", params=["N"])
    i = f.var("i", 0, "N")
    X = f.input("X", ("N",), tp.int32)
    L = f.input("L", ("N",), tp.int64)
    c = f.computation("O", [i], X[i] * X[i] + X[i] - 1)
    d = f.computation("P", [i], L[0] + i)              # int64 and affine in the lane
    c.vectorize("i", 16)
    d.vectorize("i", 8)
    ll = f.compile(target="llvm").source
    value_lines = [ln for ln in ll.splitlines()
                   if (" nsw " in ln or " nuw " in ln) and "i32" in ln]
    assert not value_lines, value_lines
    k = f.compile(target="llvm")
    big = np.iinfo(np.int64).max
    out = k(X=np.full(20, 2**31 - 1, np.int32), L=np.full(20, big - 5, np.int64))
    np.testing.assert_array_equal(out["P"], (np.full(20, big - 5) + np.arange(20)).astype(np.int64))
    with np.errstate(all="ignore"):
        x = np.full(20, 2**31 - 1, np.int32)
        np.testing.assert_array_equal(out["O"], x * x + x - np.int32(1))

"""``auto_schedule``'s distribution of a deep statement (``distribute_deep``)
where it cannot run between the statements before and after it: last, after
all of them (symm's column updates ``C[k][j] += alpha B[i][j] A[i][k]``,
whose row ``i = k`` is finished by a later statement of the same nest).
Results the unscheduled kernel's within rounding (the same additions in the
same order; gcc fuses ``alpha * B * A + C`` into an FMA in one loop form and
not in another); the printed commands replay; a seeded differential test
of symm-shaped programs.  No timing is asserted."""
from __future__ import annotations

import numpy as np

import examples.polybench as pb


def test_symm_column_updates_run_last_in_a_nest_of_their_own():
    k = pb.KERNELS["symm"]
    f = pb.function(k, "MEDIUM", "plain")
    steps = [str(s) for s in f.auto_schedule(target="c")]
    assert steps[0] == "f.computations['c'].updates[0].after(f.computations['c'].update, None)"
    assert any(s.startswith("f.computations['c'].updates[0].tile(") for s in steps), steps
    arrays = pb.random_inputs(k, "MEDIUM")
    want = pb.run(k, pb.function(k, "MEDIUM", "plain").compile("c", tuned=False), arrays)
    got = pb.run(k, f.compile("c"), arrays)
    for name in want:
        np.testing.assert_allclose(got[name], want[name], rtol=1e-12, atol=1e-12, err_msg=name)
    pb.assert_close(got, k.reference(arrays, pb.sizes(k, "MEDIUM")), "symm auto")
    g = pb.function(k, "MEDIUM", "plain")
    exec("\n".join(steps), {"f": g})
    assert g.schedule_commands() == f.schedule_commands()


def symm_like(seed, M=200, N=240):
    """A seeded program of symm's form: per (i, j) a start, then over k < i
    column updates of earlier rows (the deep statement) beside a sum, then
    a finish adding the sum; its coefficients and the sum's reads drawn."""
    import tiramisu_py as tp
    rng = np.random.default_rng(seed)
    a, b, g = (round(float(x), 3) for x in rng.uniform(0.5, 1.5, 3))
    f = tp.Function(f"symm_like{seed}", params={"M": M, "N": N})
    i, j = f.var("i", 0, "M"), f.var("j", 0, "N")
    k = f.var("k", 0, i)
    A, B = f.input("A", ("M", "M"), tp.float64), f.input("B", ("M", "N"), tp.float64)
    C = f.buffer("C", ("M", "N"), tp.float64, output=True)
    t2 = f.buffer("t2", ("N",), tp.float64)
    with f.nest(i, j):
        c = f.computation("c", [i, j], b * C[i, j] + g * B[i, j]).store_in(C, [i, j])
        t = f.computation("t", [i, j], 0.0, dtype=tp.float64).store_in(t2, [j])
        with f.nest(k):
            c[k, j] += a * B[i, j] * A[i, k]
            t[i, j] += B[k, j] * (A[i, k] if rng.random() < 0.5 else A[k, i])
        c[i, j] += a * t[i, j]
    return f


def test_random_symm_like_programs_auto_scheduled_equal_the_unscheduled_kernel():
    """Seeded differential test of the distribution (the deep statement last
    where it cannot run between its neighbours): each program's auto
    schedule gives the unscheduled kernel's result within rounding, and its
    printed commands replay; the rule fired on some of them."""
    fired = 0
    for seed in range(3):
        rng = np.random.default_rng(200 + seed)
        arrays = {"A": rng.standard_normal((200, 200)), "B": rng.standard_normal((200, 240))}
        C0 = rng.standard_normal((200, 240))
        plain = {"C": C0.copy()}
        symm_like(seed).compile("c", tuned=False)(**arrays, **plain)
        f = symm_like(seed)
        steps = [str(s) for s in f.auto_schedule(target="c")]
        fired += any(s.endswith(".after(f.computations['c'].update, None)") for s in steps)
        got = {"C": C0.copy()}
        f.compile("c")(**arrays, **got)
        np.testing.assert_allclose(got["C"], plain["C"], rtol=1e-11, atol=1e-11,
                                   err_msg=f"seed {seed}")
        g = symm_like(seed)
        exec("\n".join(steps), {"f": g})
        assert g.schedule_commands() == f.schedule_commands()
    assert fired >= 1

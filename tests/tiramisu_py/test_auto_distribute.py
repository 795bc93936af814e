"""``auto_schedule``'s distribution of a deep statement (``distribute_deep``)
where it cannot run between the statements before and after it: last, after
all of them (symm's column updates ``C[k][j] += alpha B[i][j] A[i][k]``,
whose row ``i = k`` is finished by a later statement of the same nest).
Results the unscheduled kernel's within rounding (the same additions in the
same order; gcc fuses ``alpha * B * A + C`` into an FMA in one loop form and
not in another); the printed commands replay.  No timing is asserted."""
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

"""The GPU mapping rules against the emulator: random two-statement programs
(tests/fuzz_programs.py) fused in a loop bound to blocks, with random thread
binds.  Every mapping ``compile(target="cuda")`` accepts must give the
program-order result (a pure-Python interpreter) when the generated CUDA is
emulated with the threads of each block in forward, reverse and shuffled
order: an accepted racy mapping, a missing barrier or a wrong thread guard
shows up as a difference.  Refusals must be IllegalScheduleError."""
import shutil

import numpy as np
import pytest

import tiramisu_py as tp
from tests.fuzz_oracle import interpret, random_arrays
from tests.fuzz_programs import Acc, Program, Stmt, build

pytestmark = pytest.mark.skipif(not any(shutil.which(c) for c in ("g++", "c++", "clang++")),
                                reason="no C++ compiler for the CUDA emulator")
CASES = 10
N = 6


def random_program(rng):
    def index(loops):
        if rng.integers(0, 6) > 0:
            return ("v", str(rng.choice(loops)), int(rng.integers(-1, 2)))
        return ("c", int(rng.integers(0, 2)))

    stmts = []
    for k in range(2):
        loops = ("i", "j")
        write = Acc(str(rng.choice(("A", "B"))), (("v", "i", 0), index(loops)))
        # rows mostly i (blocks independent), columns anything: threads meet
        reads = tuple(Acc(str(rng.choice(("A", "B"))),
                          (("v", "i", 0) if rng.integers(0, 6) else index(loops), index(loops)))
                      for _ in range(int(rng.integers(1, 3))))
        coefs = tuple(float(rng.choice((0.3, -0.25, 0.2))) for _ in reads)
        stmts.append(Stmt(f"s{k}", loops, write, reads, coefs))
    return Program(2, ("A", "B"), "i", (0, 2), tuple(stmts), N)


@pytest.fixture
def no_cubins(monkeypatch):
    from tiramisu_py.driver import cuda as cuda_driver
    monkeypatch.setattr(cuda_driver, "CUDA_ARCHS", ())     # emulation only: no nvcc here


def test_accepted_mappings_are_race_free(no_cubins):
    rng = np.random.default_rng(2020)
    accepted = refused = with_barrier = 0
    for case in range(200):
        if accepted >= CASES:
            break
        p = random_program(rng)
        f, ns = build(p)
        threads = [bool(rng.integers(0, 4)) for _ in p.stmts]
        for s, t in zip(p.stmts, threads):
            ns[s.name].bind("i", "block.x")
            if t:
                ns[s.name].bind("j", "thread.x")
        try:
            k = f.compile(target="cuda")
        except tp.IllegalScheduleError:
            refused += 1
            continue
        accepted += 1
        with_barrier += "__syncthreads();" in k.source
        arrays = random_arrays(p, N, case)
        want = interpret(p, {"N": N}, arrays)
        for order in ("forward", "reverse", "shuffle"):
            got = {b: a.copy() for b, a in arrays.items()}
            k.emulate(order=order, seed=case, **got)
            for b in p.bufs:
                np.testing.assert_allclose(got[b], want[b], rtol=1e-12, atol=1e-12,
                                           err_msg=f"case {case}, order {order}:\n{k.source}")
    assert accepted >= CASES and refused > 0 and with_barrier >= 2

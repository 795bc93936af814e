"""Differential fuzzing of the legality check against a brute-force oracle
that does not use isl, and of the auto-scheduler against the interpreter.

Hypothesis draws small programs (tests/fuzz_programs.py: 1-3 statements,
depth 1-3, rectangular boxes over symbolic ``N`` (and ``T``), shared float64
output buffers written at ``v + c``, a constant or ``v % 2`` (folded and
shared storage) and read at ``v + d``, or an earlier statement's value read
by name (``s0[i - 1, j]``, guarded by a ``tp.select`` to ``s0``'s domain),
optionally inside ``with f.nest(t)`` or ``f.nest(i)``) and 1-4 schedule
commands (``collapse``
among them: its inner loop's bounds are constant when the sizes are fixed or
the loop is a split's inner part).  Each case is
judged twice:

- by the library: ``legality.check`` on the model and dependences that
  ``compile()`` uses; then ``f.compile()`` itself, on both CPU backends (C and
  LLVM), for every accepted case (each kernel is run on random inputs, at the
  call's N and at N + 4, and compared with a pure-Python interpreter of the
  program in program order) and for one rejected case in four (it must raise
  ``IllegalScheduleError``);
- by the oracle: every instance enumerated for concrete params, program order
  derived from the program's structure, the transformed order from the
  replayed ``StmtSchedule.dims()`` evaluated by a small parser (no isl); the
  order judged by values (every read sees the same write, every element keeps
  its last write; a read by name sees the write of the value it names, when
  that runs before it in program order: folded or shared storage overwritten
  in between is illegal even unscheduled, and legal once a schedule reads
  each value before the next write to its element), tagged loops by every
  pair of instances touching one element with a write (all buffers are
  outputs: none is privatised).

Accepted => legal for the call's params (and both kernels' results equal the
reference, whose named reads are the values they name; the interpreter run
in the schedule's order, reading memory, gives the same values, bit for
bit).  Rejected => the oracle finds a broken dependence that changes a value,
a named read that sees another write than its value's, a dependence carried
by a parallel/vector loop, or a tag whose loop a later command removed, for
some small params (else: a *false refusal*); and the concrete instance pair
the error names really is such a dependence (for a ``store_in`` refusal: the
read, the value it names and the write that overwrites it).

The auto-scheduler's fuzz: a random program, sometimes with a legal user
schedule, ``f.auto_schedule()``; the kernels of both backends compute the
reference, and the steps it returns, printed and replayed on a fresh copy of
the program (with the same user commands), give the same generated code.

CI runs a few hundred cases (about 30 s of CPU).  The long run,
thousands: ``pytest -m fuzz tests/tiramisu_py/test_fuzz_legality.py`` (or
``TIRAMISU_PY_FUZZ=nightly``), ``TIRAMISU_PY_FUZZ_EXAMPLES`` cases (default
5000, and a tenth as many for the auto-scheduler), stopping early after
``TIRAMISU_PY_FUZZ_MINUTES`` if set (three quarters of them for legality, a
quarter for the auto-scheduler); every failing case is collected, not
shrunk, and it prints the counts (cases, accepted, rejected, false
refusals, wrong answers) and the failing cases.  ``TIRAMISU_PY_FUZZ_SEED=n``
explores other (still reproducible) cases; ``TIRAMISU_PY_FUZZ_MAX_COMMANDS``
raises the 4-command limit.  The regression tests at the end keep the library
bugs the fuzzer found fixed."""
from __future__ import annotations

import collections
import hashlib
import itertools
import os
import re
import time

import numpy as np
import pytest
from hypothesis import HealthCheck, given, note, seed, settings
from hypothesis import strategies as st

import tiramisu_py as tp
from codegen.toolchain import CompileError
from tiramisu_py.analysis import legality
from tiramisu_py.analysis.legality import analyse
from tiramisu_py.lang.schedule import replay
from tiramisu_py.commands.state import model_of

from tests.fuzz_oracle import (dependences, describe, interpret, judge,
                               overwritten_in_program_order, random_arrays, reads_folded_values)
from tests.fuzz_programs import Acc, Named, Program, Stmt, apply_command, build, draw_case, repro

EXAMPLES, AUTO_EXAMPLES = 300, 20          # CI
LONG = int(os.environ.get("TIRAMISU_PY_FUZZ_EXAMPLES", "5000"))
MINUTES = float(os.environ.get("TIRAMISU_PY_FUZZ_MINUTES", "0")) or None
# another fixed seed (an int) explores other cases, still reproducibly
SEED = os.environ.get("TIRAMISU_PY_FUZZ_SEED")
MAX_COMMANDS = int(os.environ.get("TIRAMISU_PY_FUZZ_MAX_COMMANDS", "4"))
TARGETS = ("cpu", "llvm")

COUNTS = collections.Counter(cases=0, accepted=0, rejected=0, disagreements=0)
START = [None]
FAILURES = []                 # the long run's failing cases (messages with their repro)
CURRENT = [""]                # the repro of the case running


# ------------------------------------------------------------------ the check
def search_params(p, first, hint=None):
    """Params to look for a violation at: the call's, the error message's
    example, then small ones, smallest first (only T when N is fixed)."""
    out = [first] + ([hint] if hint and _size(p, hint) <= 20000 else [])
    Ns = (p.fixed_n,) if p.fixed_n is not None else range(1, 13)
    Ts = range(1, 9) if "T" in p.params else (None,)
    for N, T in sorted(itertools.product(Ns, Ts), key=lambda x: (x[0] + (x[1] or 0), x)):
        q = {"N": N} if T is None else {"N": N, "T": T}
        if q not in out and _size(p, q) <= 3000:
            out.append(q)
    return out


def _size(p, params):
    rng = p.ranges(params)
    return sum(int(np.prod([len(rng[v]) for v in s.loops])) for s in p.stmts)


_INST = re.compile(r"(\w+)\(((?:\w+=-?\d+(?:, )?)*)\)")


def parse_message(p, msg):
    """(first, second, params) named by an IllegalScheduleError (instances as
    (stmt, {loop: value})), or None.  Order messages read "SECOND would no
    longer run after FIRST", carry messages "FIRST and SECOND would run ..."."""
    insts = [(m.group(1), dict((kv.split("=")[0], int(kv.split("=")[1]))
                               for kv in m.group(2).split(", ") if kv))
             for m in _INST.finditer(msg)]
    insts = [x for x in insts if re.fullmatch(r"s\d", x[0])]
    params = {"N": p.fixed_n} if p.fixed_n is not None else {}
    pm = re.search(r"e\.g\. with ((?:\w+=-?\d+(?:, )?)+)\.", msg)
    if pm:
        params.update((kv.split("=")[0], int(kv.split("=")[1])) for kv in pm.group(1).split(", "))
    if len(insts) < 2 or any(x not in params for x in p.params):
        return None
    if "would no longer run after" in msg:
        return insts[1], insts[0], params
    return insts[0], insts[1], params


def check_message(p, state, msg):
    """The pair an error message names must be a real dependence that the
    schedule breaks (or, for a tagged loop, a real dependence; for a
    ``store_in``: a named read that sees the write named instead of its
    value's).  Returns what is wrong, or None."""
    if re.match(r"s\d\.store_in\(", msg):
        return check_storage_message(p, state, msg)
    parsed = parse_message(p, msg)
    if parsed is None:
        return None if "no longer exists" in msg else f"no concrete instance pair in {msg!r}"
    (s1, e1), (s2, e2), params = parsed
    v = judge(p, state, params)
    idx = _instance_index(p, v)
    a = idx.get((s1, tuple(sorted(e1.items()))))
    b = idx.get((s2, tuple(sorted(e2.items()))))
    if a is None or b is None:
        return f"message names instances outside the domain at {params}: {msg!r}"
    if "different iterations" in msg:
        deps = dependences(p, v.insts)
        if (a, b) not in deps and (b, a) not in deps:
            return f"message's pair is not a dependence at {params}: {msg!r}"
        return None
    if (a, b) not in set(v.violations):
        return f"message's pair is not a broken dependence at {params}: {msg!r}"
    return None


def _instance_index(p, v):
    return {(p.stmts[k].name, tuple(sorted(env.items()))): n for n, (k, env) in enumerate(v.insts)}


def check_storage_message(p, state, msg):
    """A refusal "sK.store_in(B, [..]) is illegal under this schedule: READ
    reads VALUE from 'B', but WRITE overwrites that element before the read":
    at the message's params, READ names VALUE's value (an instance of sK)
    and, under the schedule, sees WRITE's instead."""
    m = re.match(r"(s\d)\.store_in\(\w+, \[.*?\]\) is illegal under this schedule: (.*?) reads "
                 r"(.*?) from '\w+', but (.*?) overwrites", msg)
    params = {"N": p.fixed_n} if p.fixed_n is not None else {}
    pm = re.search(r"e\.g\. with ((?:\w+=-?\d+(?:, )?)+)\.", msg)
    if pm:
        params.update((kv.split("=")[0], int(kv.split("=")[1])) for kv in pm.group(1).split(", "))
    if m is None or any(x not in params for x in p.params):
        return f"cannot parse the store_in refusal {msg!r}"
    v = judge(p, state, params)
    idx = _instance_index(p, v)

    def inst(text):
        g = _INST.fullmatch(text)
        if g is None:
            return None
        env = tuple(sorted((kv.split("=")[0], int(kv.split("=")[1]))
                           for kv in g.group(2).split(", ") if kv))
        return idx.get((g.group(1), env))
    read, value, write = inst(m.group(2)), inst(m.group(3)), inst(m.group(4))
    if read is None or write is None or (value is None and m.group(3) != "the value it names"):
        return f"message names instances outside the domain at {params}: {msg!r}"
    if p.stmts[v.insts[value if value is not None else write][0]].name != m.group(1):
        return f"the store_in is not the named value's at {params}: {msg!r}"
    if not any(r == read and w == write and value in (None, x) for x, r, w in v.storage):
        seen = [tuple(describe(p, v, n) for n in triple) for triple in v.storage[:3]]
        return (f"the read does not see that write instead of the value it names at {params} "
                f"(the oracle's (value, read, write): {seen}): {msg!r}")
    return None


def _stable_hash(text):
    return int(hashlib.sha256(text.encode()).hexdigest()[:8], 16)


def _disagree(msg):
    COUNTS["disagreements"] += 1
    raise AssertionError(msg)


def run_case(p, ns, cmds, params):
    """Judges one case both ways; raises AssertionError on a disagreement."""
    f = ns["f"]
    COUNTS["cases"] += 1
    model, deps, _ = analyse(f)
    state = replay(model_of(f), f._commands)
    error = None
    try:
        legality.check(model, deps, f._commands)
        accepted = True
    except tp.IllegalScheduleError as e:
        accepted, error = False, str(e)
    text = repro(p, cmds, params)
    seed = _stable_hash(text) % 2**16
    if any(isinstance(r, Named) for s in p.stmts for r in s.reads):
        COUNTS["named_cases"] += 1
        COUNTS["named_accepted" if accepted else "named_rejected"] += 1
        if reads_folded_values(p, params):              # the value rule decides
            COUNTS["named_folded"] += 1
            COUNTS["named_folded_accepted"] += accepted
        if overwritten_in_program_order(p, params):     # only the schedule can make it legal
            COUNTS["named_overwritten"] += 1
            COUNTS["named_overwritten_accepted"] += accepted
    if not accepted and re.match(r"s\d\.store_in\(", error):
        COUNTS["reject_store_in"] += 1
    arrays = random_arrays(p, params["N"], seed)
    ref = interpret(p, params, arrays)

    if accepted:
        COUNTS["accepted"] += 1
        v = judge(p, state, params)
        if not v.legal:
            x, y = (v.violations or [w[:2] for w in v.storage] or list(v.carried.values())
                    or [(0, 0)])[0]
            _disagree(f"ACCEPTED but the oracle finds it illegal at {params}: violations="
                      f"{len(v.violations)} storage={len(v.storage)} carried={list(v.carried)} "
                      f"vanished={v.vanished} ties={v.ties[:3]}; e.g. {describe(p, v, x)} -> "
                      f"{describe(p, v, y)}\n{text}")
        if v.memory_violations:
            COUNTS["accepted_value_only"] += 1       # the memory rule would refuse it
        # oracle self-check: a legal order computes the same values, bit for bit
        alt = interpret(p, params, arrays, sorted(range(len(v.insts)), key=lambda n: v.times[n]))
        for b in p.bufs:
            assert np.array_equal(ref[b], alt[b]), f"oracle self-check failed\n{text}"
    else:
        COUNTS["rejected"] += 1
        parsed = parse_message(p, error)
        found, any_carry = None, None
        for q in search_params(p, params, parsed and parsed[2]):
            v = judge(p, state, q)
            if not v.legal:
                found = v
                break
            if v.carried_any and any_carry is None:
                any_carry = q
        if found is None:
            COUNTS["false_refusals"] += 1
            _disagree(f"FALSE REFUSAL: REJECTED but the oracle finds it legal for every small N"
                      f"{', T' if 'T' in p.params else ''} "
                      f"(carried by other statements' loops only: {any_carry}): "
                      f"{error}\n{text}")
        else:
            reason = ("order" if found.violations else "storage" if found.storage
                      else "carried" if found.carried
                      else "vanished_tag" if found.vanished else "tie")
            COUNTS["reject_" + reason] += 1
            why = check_message(p, state, error)
            if why is not None:
                _disagree(f"bad explanation: {why}\n{text}")

    # the real thing: compile() agrees with check(); an accepted kernel computes
    # the program's result (every accepted case; one rejected case in four)
    if not accepted and _stable_hash(text) % 4:
        return
    if not accepted:
        COUNTS["compile_rejected"] += 1
        with pytest.raises(tp.IllegalScheduleError):
            f.compile()
        return
    COUNTS["compiled"] += 1
    runs = [(params, arrays, ref)]
    if p.fixed_n is None:             # and at a larger N: tiles of 2..4 cross more boundaries
        big = dict(params, N=params["N"] + 4)
        big_arrays = random_arrays(p, big["N"], seed + 1)
        runs.append((big, big_arrays, interpret(p, big, big_arrays)))
    for target in TARGETS:
        try:
            kernel = f.compile(target)
        except CompileError as e:
            _disagree(f"ACCEPTED by check() but compile({target!r}) failed: {e}\n{text}")
        except tp.IllegalScheduleError as e:
            _disagree(f"ACCEPTED by check() but compile({target!r}) rejects it: {e}\n{text}")
        for s in p.stmts:
            assert kernel.schedule[s.name].dims() == state[s.name].dims()
        run_kernel(p, kernel, runs, f"{target}: ACCEPTED", text)


def run_kernel(p, kernel, runs, what, text):
    """Runs ``kernel`` on each (params, arrays, expected results) of ``runs``."""
    for q, arrs, expect in runs:
        outs = {b: a.copy() for b, a in arrs.items()}
        kernel(**outs, **{x: q[x] for x in p.call_params})
        COUNTS["ran"] += 1
        for b in p.bufs:
            if not np.allclose(outs[b], expect[b], rtol=1e-9, atol=1e-12):
                COUNTS["wrong_answers"] += 1
                _disagree(f"{what} but the kernel's {b} differs from the reference at {q} "
                          f"(max err {np.abs(outs[b] - expect[b]).max()}):\n{text}")


def run_auto_case(p, cmds, params, reassociate=False):
    """Per target, on a fresh copy of ``p`` with ``cmds`` (dropped if
    illegal): ``auto_schedule(target, reassociate)`` (reassociated sums: the
    reference within the comparison's tolerance), whose kernel computes the reference,
    and whose printed steps replayed on another fresh copy give the same
    code.  (A schedule is made for its target: the C target's round-robin
    ``schedule="static", chunk=1`` is refused by the LLVM backend.)  A
    program that is illegal without a schedule (folded or shared storage
    overwriting a value before a read that names it) is skipped when the
    user commands do not make it legal: the auto-scheduler need not repair
    storage."""
    COUNTS["auto_cases"] += 1

    def fresh(commands):
        f, ns = build(p)
        for c in commands:
            assert apply_command(ns, c), c
        return f
    try:
        f = fresh(cmds)
        legality.check(*analyse(f)[:2], f._commands)
    except tp.IllegalScheduleError:
        cmds = []
        try:
            f = fresh(cmds)
            legality.check(*analyse(f)[:2], f._commands)
        except tp.IllegalScheduleError:
            COUNTS["auto_illegal_programs"] += 1
            return
    text = repro(p, cmds, params)
    arrays = random_arrays(p, params["N"], _stable_hash(text) % 2**16)
    runs = [(params, arrays, interpret(p, params, arrays))]
    for target in TARGETS:
        f = fresh(cmds)
        steps = f.auto_schedule(target=target, reassociate=reassociate)
        printed = "\n".join(map(str, steps))
        case = text.replace("kernel = f.compile()", f"# f.auto_schedule(target={target!r}, "
                            f"reassociate={reassociate}):\n"
                            + printed + f"\nkernel = f.compile({target!r})")
        COUNTS["auto_steps"] += len(steps)
        g = fresh(cmds)
        exec(printed, {"f": g})                       # the printed schedule, pasted
        kernel = f.compile(target)
        if kernel.source != g.compile(target).source:
            COUNTS["disagreements"] += 1
            raise AssertionError(f"{target}: the printed steps replayed give other code:\n{case}")
        run_kernel(p, kernel, runs, f"{target}: auto-scheduled", case)


def _collecting(body):
    """``body`` that records a failing case in FAILURES (with its repro) and
    returns, so that the run goes on and counts them all."""
    def run(data):
        try:
            body(data)
        except Exception as e:               # noqa: BLE001 - recorded, reported in the summary
            if not isinstance(e, AssertionError):
                COUNTS["crashes"] += 1
            FAILURES.append(f"{type(e).__name__}: {e}\n{CURRENT[0]}")
    return run


def _fuzz(body, examples, seed_=None, collect=False):
    """A hypothesis test of ``body(data)`` over ``examples`` cases
    (derandomized, or from ``seed_``)."""
    def test(data):
        if START[0] is None:
            START[0] = time.perf_counter()
        (_collecting(body) if collect else body)(data)
    seed_ = seed_ if seed_ is not None else int(SEED or 0)
    return settings(max_examples=examples, deadline=None,
                    derandomize=SEED is None and not collect, database=None,
                    suppress_health_check=list(HealthCheck),
                    print_blob=False)(seed(seed_)(given(data=st.data())(test)))


def _long(body, examples, minutes):
    """The long run of ``body``: hypothesis runs of 100 cases, each from its
    own seed (TIRAMISU_PY_FUZZ_SEED's chunk k), until ``examples`` cases or
    past ``minutes``; failing cases are collected, not shrunk."""
    @pytest.mark.fuzz
    def test():
        start, done, chunk = time.perf_counter(), 0, 0
        while done < examples and (minutes is None or time.perf_counter() - start < 60 * minutes):
            n = min(100, examples - done)
            _fuzz(body, n, int(SEED or 0) * 1_000_003 + chunk, collect=True)()
            done, chunk = done + n, chunk + 1
    return test


def legality_case(data):
    p, params, f, ns, cmds = draw_case(data, MAX_COMMANDS, COUNTS)
    CURRENT[0] = repro(p, cmds, params)
    note(CURRENT[0])
    run_case(p, ns, cmds, params)


def auto_case(data):
    p, params, f, ns, cmds = draw_case(data, 2, COUNTS)
    cmds = cmds[:data.draw(st.integers(0, len(cmds)), label="user commands kept")]
    reassociate = data.draw(st.booleans(), label="reassociate")
    CURRENT[0] = repro(p, cmds, params) + \
        f"# then f.auto_schedule(target, reassociate={reassociate}) per target\n"
    note(CURRENT[0])
    run_auto_case(p, cmds, params, reassociate)


test_fuzz_legality = _fuzz(legality_case, EXAMPLES)
test_fuzz_auto_schedule = _fuzz(auto_case, AUTO_EXAMPLES)
# the long run: a tenth of the cases, and a quarter of the time, for auto_schedule
test_fuzz_legality_long = _long(legality_case, LONG, MINUTES and MINUTES * 3 / 4)
test_fuzz_auto_schedule_long = _long(auto_case, max(1, LONG // 10), MINUTES and MINUTES / 4)


def summary(capsys, what):
    """Prints the counts; the fuzzer must have exercised both sides of the
    check, and found no disagreement."""
    if COUNTS["cases"] + COUNTS["auto_cases"] == 0:
        pytest.skip("the fuzz tests did not run")
    took = time.perf_counter() - START[0] if START[0] else 0.0
    main = ("cases", "accepted", "rejected", "false_refusals", "wrong_answers",
            "disagreements", "crashes", "accepted_value_only", "compiled", "ran", "compile_rejected",
            "auto_cases", "auto_steps")
    rest = sorted(k for k in COUNTS if k not in main)
    with capsys.disabled():
        print(f"\nlegality fuzz ({what}, {took:.1f}s): "
              + ", ".join(f"{k}={COUNTS[k]}" for k in main)
              + "\n  " + ", ".join(f"{k}={COUNTS[k]}" for k in rest))
        for text in FAILURES:
            print("\nFAILED CASE:\n" + text)
    assert COUNTS["cases"] == 0 or (COUNTS["accepted"] > 0 and COUNTS["rejected"] > 0)
    assert COUNTS["disagreements"] == 0 and not FAILURES


def test_fuzz_summary(capsys):
    summary(capsys, "ci")


@pytest.mark.fuzz
def test_fuzz_summary_long(capsys):
    summary(capsys, "long")


# ------------------------------------------------ oracle sanity (no library)
def test_oracle_self_checks():
    from tests.fuzz_oracle import eval_affine
    assert eval_affine("floor(((i) + 1*(t))/2)", {"i": -3, "t": 0}) == -2
    assert eval_affine("(((i) + -1*(t)) mod 3)", {"i": 1, "t": 3}) == 1
    assert eval_affine("-((j) + -2)", {"j": 5}) == -3
    assert eval_affine("floor((floor((i)/2))/2)", {"i": 7}) == 1


# ------------------------------------------------------- regression (bugs)
def _known_case(prog, cmds):
    f, ns = build(prog)
    for c in cmds:
        assert apply_command(ns, c), c
    return f, ns


CROSS = Program(1, ("A", "B"), None, (0, 0), (
    Stmt("s0", ("i",), Acc("A", (("v", "i", 0),)), (Acc("A", (("v", "i", 0),)),), (0.3,)),
    Stmt("s1", ("i",), Acc("B", (("v", "i", 0),)), (Acc("B", (("v", "i", -1),)),), (0.3,)),
))


def test_regression_cross_statement_carry():
    f, ns = _known_case(CROSS, ["s0.parallelize('i')"])
    v = judge(CROSS, replay(model_of(f), f._commands), {"N": 5})
    assert v.legal and v.carried_any      # the oracle: legal; only s1's loop carries
    kernel = f.compile()
    arrays = random_arrays(CROSS, 5, 0)
    outs = {b: a.copy() for b, a in arrays.items()}
    kernel(**outs, N=5)
    ref = interpret(CROSS, {"N": 5}, arrays)
    for b in CROSS.bufs:
        np.testing.assert_allclose(outs[b], ref[b])


SIMD = Program(2, ("A",), None, (0, 0), (
    Stmt("s0", ("i", "j"), Acc("A", (("v", "i", 0), ("v", "j", 0))),
         (Acc("A", (("v", "i", 0), ("v", "j", 0))),), (0.3,)),
))


def test_regression_parallel_inside_vector():
    f, ns = _known_case(SIMD, ["s0.vectorize('i', 2)", "s0.parallelize('j')"])
    v = judge(SIMD, replay(model_of(f), f._commands), {"N": 5})
    assert v.legal                        # the oracle: legal (no dependence at all)
    kernel = f.compile()
    arrays = random_arrays(SIMD, 5, 0)
    outs = {b: a.copy() for b, a in arrays.items()}
    kernel(**outs, N=5)
    np.testing.assert_allclose(outs["A"], interpret(SIMD, {"N": 5}, arrays)["A"])


OVERWRITTEN = Program(1, ("A",), "i", (0, 1), (
    Stmt("s0", ("i", "j"), Acc("A", (("c", 0),)), (Acc("A", (("c", 1),)),), (0.3,)),
), 3)


@pytest.mark.parametrize("target", TARGETS)
def test_regression_overwritten_writes_do_not_order(target):
    # every s0(i, j) writes A[0] and only the last one's value is kept: the
    # interchange keeps it last, so it is legal (refused when every WAW ordered)
    f, ns = _known_case(OVERWRITTEN, ["s0.interchange('i', 'j')"])
    v = judge(OVERWRITTEN, replay(model_of(f), f._commands), {"N": 3})
    assert v.legal and v.memory_violations
    arrays = random_arrays(OVERWRITTEN, 3, 0)
    outs = {b: a.copy() for b, a in arrays.items()}
    f.compile(target)(**outs)
    np.testing.assert_array_equal(outs["A"], interpret(OVERWRITTEN, {"N": 3}, arrays)["A"])
    f.undo()
    ns["s0"].reverse("j")             # now s0(i=2, j=0) would write A[0] last
    with pytest.raises(tp.IllegalScheduleError, match="WAW on 'A'"):
        f.compile(target)


# A row buffer (s0 in one row of A, read by name by s1): illegal in program
# order (s1 would read s0's last row), legal once s1 runs in s0's row loop,
# illegal again with that loop parallel (A is an output: not privatised).
ROW = Program(1, ("A", "B", "C"), None, (0, 0), (
    Stmt("s0", ("i", "j"), Acc("A", (("v", "j", 0),)), (Acc("C", (("v", "i", 0),)),), (0.3,)),
    Stmt("s1", ("i", "j"), Acc("B", (("v", "i", 0),)),
         (Named(0, (("v", "i", 0), ("v", "j", 0))),), (0.3,)),
))


@pytest.mark.parametrize("target", TARGETS)
def test_oracle_named_reads_of_folded_storage(target):
    f, ns = _known_case(ROW, [])
    q = {"N": 4}
    v = judge(ROW, replay(model_of(f), f._commands), q)
    assert v.storage and not v.violations and not v.legal
    with pytest.raises(tp.IllegalScheduleError, match=r"^s0\.store_in\(A, \[j\]\) is illegal") as e:
        f.compile(target)
    assert check_message(ROW, replay(model_of(f), f._commands), str(e.value)) is None
    ns["s1"].after(ns["s0"], "i")
    assert judge(ROW, replay(model_of(f), f._commands), q).legal
    arrays = random_arrays(ROW, 4, 0)
    ref = interpret(ROW, q, arrays)
    memory = interpret(ROW, q, arrays, list(range(32)))     # program order, reading memory
    assert not np.array_equal(ref["B"], memory["B"])         # s1 would read s0's last row
    outs = {b: a.copy() for b, a in arrays.items()}
    f.compile(target)(**outs, N=4)
    for b in ROW.bufs:
        np.testing.assert_allclose(outs[b], ref[b])
    ns["s1"].parallelize("i")
    v = judge(ROW, replay(model_of(f), f._commands), q)
    assert v.carried and not v.legal
    with pytest.raises(tp.IllegalScheduleError, match="cannot be parallelised"):
        f.compile(target)

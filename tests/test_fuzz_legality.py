"""Differential fuzzing of the legality check against a brute-force oracle
that does not use isl.

Hypothesis draws small programs (tests/fuzz_programs.py: 1-3 statements,
depth 1-3, rectangular boxes over symbolic ``N`` (and ``T``), shared float64
output buffers written at ``v + c`` and read at ``v + d``, optionally inside
``with f.nest(t)`` or ``f.nest(i)``) and 1-4 schedule commands (``collapse``
among them: its inner loop's bounds are constant when the sizes are fixed or
the loop is a split's inner part).  Each case is
judged twice:

- by the library: ``legality.check`` on the model and dependences that
  ``compile()`` uses; then ``f.compile()`` itself for every accepted case (the
  kernel is run on random inputs, at the call's N and at N + 4, and compared
  with a pure-Python interpreter of the program in program order) and for one
  rejected case in four (it must raise ``IllegalScheduleError``);
- by the oracle: every instance enumerated for concrete params, program order
  derived from the program's structure, the transformed order from the
  replayed ``StmtSchedule.dims()`` evaluated by a small parser (no isl), and
  every pair of instances touching one element with a write checked.

Accepted => legal for the call's params (and the kernel's result equals the
reference).  Rejected => the oracle finds a broken dependence, a dependence
carried by a parallel/vector loop, or a tag whose loop a later command removed,
for some small params; and the concrete instance pair the error names really
is such a dependence.

``TIRAMISU_PY_FUZZ=nightly`` runs 10x the examples; ``TIRAMISU_PY_FUZZ_SEED=n``
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
from tiramisu_py.commands.state import model_of, state_of

from tests.fuzz_programs import (BUFS, SPATIAL, Acc, Program, Stmt, apply_command, build,
                                 dependences, describe, interpret, judge, random_arrays,
                                 repro)

NIGHTLY = os.environ.get("TIRAMISU_PY_FUZZ") == "nightly"
EXAMPLES = 3000 if NIGHTLY else 300
# another fixed seed (an int) explores other cases, still reproducibly
SEED = os.environ.get("TIRAMISU_PY_FUZZ_SEED")
MAX_COMMANDS = int(os.environ.get("TIRAMISU_PY_FUZZ_MAX_COMMANDS", "4"))

COUNTS = collections.Counter(cases=0, accepted=0, rejected=0, disagreements=0)
START = [None]


# ------------------------------------------------------------- strategies
COEFS = (0.3, -0.3, 0.25, -0.2, 0.15)      # |sum| < 1: values stay bounded


@st.composite
def programs(draw):
    n = draw(st.integers(1, 3))
    rank = draw(st.sampled_from((1, 2, 2, 3)))
    bufs = BUFS[:draw(st.integers(1, 3))]
    nest = draw(st.sampled_from((None, None, "t", "i")))
    span = (0, 0)
    if nest is not None:
        a = draw(st.integers(0, n - 1))
        span = (a, draw(st.integers(a + 1, n)))
    stmts = []
    for k in range(n):
        nested = nest is not None and span[0] <= k < span[1]
        if nested:
            pool = [v for v in SPATIAL if v != nest]
            own = draw(st.permutations(pool).map(tuple))[:draw(st.integers(0, 2))]
            loops = (nest,) + own
        else:
            loops = draw(st.permutations(SPATIAL).map(tuple))[:draw(st.integers(1, 3))]
        spatial = [v for v in loops if v != "t"]

        def index():
            if spatial and draw(st.integers(0, 5)) > 0:
                return ("v", draw(st.sampled_from(spatial)), draw(st.integers(-1, 1)))
            return ("c", draw(st.integers(0, 1)))

        def access():
            return Acc(draw(st.sampled_from(bufs)), tuple(index() for _ in range(rank)))
        write = access()
        reads = tuple(access() for _ in range(draw(st.integers(1, 3))))
        coefs = tuple(draw(st.sampled_from(COEFS)) for _ in reads)
        stmts.append(Stmt(f"s{k}", loops, write, reads, coefs))
    fixed = draw(st.sampled_from((None, None, None, 3, 4, 5, 6)))
    return Program(rank, bufs, nest, span, tuple(stmts), fixed)


OPS = ("interchange", "reorder", "skew", "shift", "reverse", "split", "tile",
       "parallelize", "parallelize", "vectorize", "unroll", "after", "then", "collapse")


def draw_command(data, p, f):
    """One command as a line of DSL code, its arguments picked among the
    statement's current loops (None when the op does not fit)."""
    state = state_of(f)
    names = [s.name for s in p.stmts]
    s = data.draw(st.sampled_from(names), label="stmt")
    loops = [lp.name for lp in state[s].loops]
    op = data.draw(st.sampled_from(OPS), label="op")
    one = lambda: repr(data.draw(st.sampled_from(loops)))     # noqa: E731
    if op in ("interchange", "skew") and len(loops) >= 2:
        a, b = data.draw(st.permutations(loops))[:2]
        if op == "interchange":
            return f"{s}.interchange({a!r}, {b!r})"
        if data.draw(st.booleans()):       # mostly outer first, sometimes not
            ka, kb = loops.index(a), loops.index(b)
            a, b = (a, b) if ka < kb else (b, a)
        name = data.draw(st.sampled_from(("", "", "", f", name={b + 's'!r}")))
        return f"{s}.skew({a!r}, {b!r}, {data.draw(st.integers(-1, 2))}{name})"
    if op == "reorder" and len(loops) >= 2:
        sub = data.draw(st.permutations(loops))[:data.draw(st.integers(2, len(loops)))]
        return f"{s}.reorder({', '.join(map(repr, sub))})"
    if op == "collapse" and len(loops) >= 2:
        k = data.draw(st.integers(0, len(loops) - 2))     # a loop and the one inside it
        return f"{s}.collapse({loops[k]!r}, {loops[k + 1]!r})"
    if op == "shift":
        return f"{s}.shift({one()}, {data.draw(st.integers(-2, 2))})"
    if op == "reverse":
        return f"{s}.reverse({one()})"
    if op == "split":
        lp = data.draw(st.sampled_from(loops))
        names = data.draw(st.sampled_from(("", "", "", (lp, lp + "x"), (lp + "o", lp))))
        names = f", names={names!r}" if names else ""
        return f"{s}.split({lp!r}, {data.draw(st.integers(2, 4))}{names})"
    if op == "tile" and len(loops) >= 2:
        d = data.draw(st.integers(2, min(3, len(loops))))
        k = data.draw(st.integers(0, len(loops) - d))
        fs = [data.draw(st.integers(2, 3)) for _ in range(d)]
        return f"{s}.tile({', '.join(map(repr, loops[k:k + d]))}, {', '.join(map(str, fs))})"
    if op == "parallelize":
        return f"{s}.parallelize({one()})"
    if op == "vectorize":
        return f"{s}.vectorize({one()}, {data.draw(st.sampled_from((2, 4)))})"
    if op == "unroll":
        return f"{s}.unroll({one()}, {data.draw(st.integers(2, 3))})"
    if op in ("after", "then") and len(names) >= 2:
        other = data.draw(st.sampled_from([n for n in names if n != s]))
        olo = [lp.name for lp in state[other].loops]
        loop = data.draw(st.sampled_from([None] + olo))
        if op == "after":
            return f"{s}.after({other}, {loop!r})"
        return f"{other}.then({s}, {loop!r})"
    return None


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
    schedule breaks (or, for a tagged loop, a real dependence).  Returns
    what is wrong, or None."""
    parsed = parse_message(p, msg)
    if parsed is None:
        return None if "no longer exists" in msg else f"no concrete instance pair in {msg!r}"
    (s1, e1), (s2, e2), params = parsed
    v = judge(p, state, params)
    idx = {(p.stmts[k].name, tuple(sorted(env.items()))): n for n, (k, env) in enumerate(v.insts)}
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
    arrays = random_arrays(p, params["N"], seed)
    ref = interpret(p, params, arrays)

    if accepted:
        COUNTS["accepted"] += 1
        v = judge(p, state, params)
        if not v.legal:
            x, y = (v.violations or list(v.carried.values()) or [(0, 0)])[0]
            _disagree(f"ACCEPTED but the oracle finds it illegal at {params}: violations="
                      f"{len(v.violations)} carried={list(v.carried)} vanished={v.vanished} "
                      f"ties={v.ties[:3]}; e.g. {describe(p, v, x)} -> {describe(p, v, y)}\n{text}")
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
            _disagree(f"REJECTED but the oracle finds it legal for every small N"
                      f"{', T' if 'T' in p.params else ''} "
                      f"(carried by other statements' loops only: {any_carry}): "
                      f"{error}\n{text}")
        else:
            reason = ("order" if found.violations else "carried" if found.carried
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
    try:
        target = ("c", "llvm")[_stable_hash(text) // 4 % 2]    # both backends, alternately
        COUNTS["compiled_" + target] += 1
        kernel = f.compile(target)
    except CompileError as e:
        _disagree(f"ACCEPTED by check() but compile() failed: {e}\n{text}")
    except tp.IllegalScheduleError as e:
        _disagree(f"ACCEPTED by check() but compile() rejects it: {e}\n{text}")
    for s in p.stmts:
        assert kernel.schedule[s.name].dims() == state[s.name].dims()
    runs = [(params, arrays, ref)]
    if p.fixed_n is None:             # and at a larger N: tiles of 2..4 cross more boundaries
        big = dict(params, N=params["N"] + 4)
        big_arrays = random_arrays(p, big["N"], seed + 1)
        runs.append((big, big_arrays, interpret(p, big, big_arrays)))
    for q, arrs, expect in runs:
        outs = {b: a.copy() for b, a in arrs.items()}
        kernel(**outs, **{x: q[x] for x in p.call_params})
        COUNTS["ran"] += 1
        for b in p.bufs:
            if not np.allclose(outs[b], expect[b], rtol=1e-9, atol=1e-12):
                _disagree(f"ACCEPTED but the kernel's {b} differs from the reference at {q} "
                          f"(max err {np.abs(outs[b] - expect[b]).max()}):\n{text}")


@settings(max_examples=EXAMPLES, deadline=None, derandomize=SEED is None, database=None,
          suppress_health_check=list(HealthCheck), print_blob=False)
@seed(int(SEED or 0))
@given(data=st.data())
def test_fuzz_legality(data):
    if START[0] is None:
        START[0] = time.perf_counter()
    p = data.draw(programs(), label="program")
    params = {"N": p.fixed_n if p.fixed_n is not None else data.draw(st.integers(3, 6), label="N")}
    if "T" in p.params:
        params["T"] = data.draw(st.integers(1, 3), label="T")
    f, ns = build(p)
    cmds = []
    want = data.draw(st.integers(1, MAX_COMMANDS), label="n_commands")
    for _ in range(3 * want):
        if len(cmds) == want:
            break
        line = draw_command(data, p, f)
        if line is None:
            continue
        COUNTS["commands"] += 1
        if apply_command(ns, line):
            cmds.append(line)
            COUNTS["op_" + line.split(".")[1].split("(")[0]] += 1
        else:
            COUNTS["api_errors"] += 1
    note(repro(p, cmds, params))
    run_case(p, ns, cmds, params)


def test_fuzz_summary(capsys):
    """Runs after the fuzz test: prints the counts; the fuzzer must have
    exercised both sides of the check."""
    if COUNTS["cases"] == 0:
        pytest.skip("the fuzz test did not run")
    took = time.perf_counter() - START[0] if START[0] else 0.0
    main = ("cases", "accepted", "rejected", "disagreements", "compiled", "ran",
            "compile_rejected")
    rest = sorted(k for k in COUNTS if k not in main)
    with capsys.disabled():
        print(f"\nlegality fuzz ({'nightly' if NIGHTLY else 'ci'}, {took:.1f}s): "
              + ", ".join(f"{k}={COUNTS[k]}" for k in main)
              + "\n  " + ", ".join(f"{k}={COUNTS[k]}" for k in rest))
    assert COUNTS["accepted"] > 0 and COUNTS["rejected"] > 0
    assert COUNTS["disagreements"] == 0


# ------------------------------------------------ oracle sanity (no library)
def test_oracle_self_checks():
    from tests.fuzz_programs import eval_affine
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

"""``tiramisu_py.tune(f, space=None, budget=60, params=None)``: times legal
schedules of ``f`` on this host and records the fastest in the tuning store,
if it confirmably beats ``f`` as written; ``compile()`` of the same
algorithm on the same host then uses it.

Candidates (``space``): each is a dict of auto-scheduler options
(:class:`tiramisu_py.driver.auto_schedule.AutoScheduler`: tile sizes, time
tile, register blocks, vectorise or not, unroll or not, fuse or not, the
parallel loops' OpenMP schedule), or a callable ``fn(g)`` that gives
commands to a copy ``g`` of ``f`` (any schedule a user wants timed).
Without one, the knobs the auto-scheduler's rules consult on ``f`` are
varied around the values they chose, the candidates ordered by a cost
model of the host (:mod:`tiramisu_py.driver.tune_space`), the auto schedule
first.  The defaults are ``f`` as written (what ``compile()``
runs without a record), timed first.  Each candidate is scheduled on a
copy, compiled (the legality check: an illegal one is rejected, counted,
never timed), called once to warm up and timed (median of ``repeats``
calls) on random inputs shaped by ``params`` (or on ``inputs``).  A
progress bar goes to stderr; no candidate starts once ``budget`` seconds
have passed (the first always runs).  The fastest, if faster than the
defaults, is then timed against them interleaved
(:func:`tiramisu_py.tuning.confirm.confirm`: paired A/B rounds) and kept only
if it beats them beyond the noise; otherwise the record says "as written".

The record (kind :data:`KIND` in the tuning store, :mod:`tiramisu_py.tuning`)
is keyed by the algorithm (every declaration, no schedule), the size class of
``params`` (each param's power of two, rounded), the target and the host
(CPU model, SIMD width, caches, cores: :mod:`tiramisu_py.tuning.keys`) and
the auto-scheduler's rules (:func:`rules_fingerprint`: a record tuned
under other rules is not used, and ``tune`` searches again); a
second record under the key without the size class names the last size class
tuned.  Its value is the Function's name,
the kept commands as data (statement, verb, arguments; only the scheduling
verbs are ever replayed, never code; none when nothing was kept) and the
A/B verdict.  ``tune`` of an algorithm already recorded for that key
returns the record without timing anything; ``dry_run=True`` records
nothing.  ``compile()`` of a Function with no command uses the record of its
fixed params' size class, else the last one tuned (``compile(tuned=False)``
or ``$TIRAMISU_PY_USE_TUNED=0`` turns that off): it compiles a scheduled
copy, the user's Function stays as written, and the kernel says so
(``kernel.tuned``, a comment atop ``kernel.source``).  :data:`RECORDS` lists
and removes the records by the Function's name (``tiramisu-py tune --list``,
``--forget [NAME]``)."""
from __future__ import annotations

import functools
import hashlib
import importlib.util
import os
import statistics
import sys
import time

import numpy as np

from codegen import CompileError

from ..base.errors import IllegalScheduleError
from ..poly.model import build_model
from ..tuning import database, keys
from ..tuning.confirm import decide, recorded
from ..tuning.kinds import RecordKind
from ..tuning.search import Bar, check_budget, check_clock, check_repeats
from ..runtime.shapes import eval_size
from .auto_schedule import AutoScheduler
from . import tune_space
from .auto_steps import Code, Step, StmtRef as _StmtRef, code_of
from .compile import compile_function, default_target
from .warm import algorithm_lines

KIND = "auto_tune"
FORMAT = 2                  # 2: records hold only confirmed wins (1: unconfirmed, unused)
USE_TUNED = os.environ.get("TIRAMISU_PY_USE_TUNED", "1") != "0"
FINALISTS = 4              # the search's fastest, timed again in turns
FINAL_ROUNDS = 3
VERBS = frozenset({"split", "tile", "interchange", "reorder", "skew", "shift", "reverse", "cache_at",
                   "parallelize", "vectorize", "unroll", "after", "tile_band",
                   "accumulate_locally", "collapse", "store_in", "store_nontemporal"})
RULES = tuple(f"tiramisu_py.driver.{m}" for m in ("auto_schedule", "auto_point_loops", "auto_storage",
                                                   "auto_nests", "auto_steps", "tune_space"))
RUNS = {"timed": 0}               # candidates timed in this process (tests count them)


def record_key(f, target, params=None) -> str:
    """The key of ``f``'s record for ``target`` on this host (``params``:
    the sizes' class; None: the key of the last class tuned)."""
    h = hashlib.sha256()
    for line in [f"format {FORMAT}", f"target {target}", keys.schedule_host(),
                 f"rules {rules_fingerprint()}"] + algorithm_lines(f):
        h.update(line.encode() + b"\n")
    return h.hexdigest() + ("" if params is None else "|" + keys.size_class(params))


@functools.cache
def rules_fingerprint() -> str:
    """A hash of the source of the auto-scheduler and of the space ``tune``
    searches (the modules of :data:`RULES`): a record tuned before their
    rules changed was chosen among other candidates, and the new automatic
    schedule (the search's first candidate) may beat it, so it is not used
    (its key differs) and ``tune`` searches again."""
    h = hashlib.sha256()
    for name in RULES:
        h.update(importlib.util.find_spec(name).loader.get_data(
            importlib.util.find_spec(name).origin))
    return h.hexdigest()[:16]


# -------------------------------------------------------------- commands as data
def encoded(steps) -> list:
    """``steps`` (Steps) as a record holds them: plain data (JSON), each
    statement by name, each buffer and index as data (:func:`code_of`)."""
    return [_encode(s) for s in steps]


def _encode(step: Step):
    def arg(a):
        if isinstance(a, list) and a and isinstance(a[0], _StmtRef):
            return {"stmts": [r.name for r in a]}
        if isinstance(a, _StmtRef):
            return {"stmt": a.name}
        if isinstance(a, Code):
            return {"code": a.data}
        return a
    return {"stmt": step.stmt, "verb": step.verb, "args": [arg(a) for a in step.args],
            "kwargs": step.kwargs}


def _decode(f, item) -> Step:
    if not isinstance(item, dict) or item.get("verb") not in VERBS:
        raise ValueError(f"not a recorded scheduling command: {item!r}")

    def arg(a):
        if isinstance(a, dict) and "stmts" in a:
            return [_StmtRef(f, n) for n in a["stmts"]]
        if isinstance(a, dict) and "stmt" in a:
            return _StmtRef(f, a["stmt"])
        if isinstance(a, dict) and "code" in a:
            return code_of(a["code"])          # rebuilt from checked data, never text
        return a
    return Step(f, item["stmt"], item["verb"], *[arg(a) for a in item["args"]],
                **dict(item.get("kwargs") or {}))


def _valid(value):
    return isinstance(value, dict) and isinstance(value.get("steps"), list)


def apply_record(f, value):
    """Gives the recorded commands to ``f``, each decoded after the ones
    before it are applied (a copy ``cache_at`` made is the next one's
    receiver); returns the Steps."""
    steps = []
    for item in value["steps"]:
        steps.append(_decode(f, item))
        steps[-1].apply(f)
    return steps


# ------------------------------------------------------------------- inputs
def _arguments(f, params, inputs, model, seed=0):
    """The arrays of a timed call: ``inputs`` as given, the others random
    (zeros for integers), every output included (a computation's own
    buffer too: left out, each call would allocate it, and a 64 MB
    output's fresh pages had been most of a stencil's timed call)."""
    rng = np.random.default_rng(seed)
    values = dict(f.fixed)
    values.update(params)
    out = dict(inputs or {})
    for b in [*model.inputs, *model.outputs]:
        if b.name in out:
            continue
        shape = tuple(eval_size(s, values, b.name) for s in b.shape)
        dt = np.dtype(b.dtype.name if b.dtype.name != "bool" else "bool")
        out[b.name] = rng.standard_normal(shape).astype(dt) if dt.kind == "f" \
            else np.zeros(shape, dt)
    return out


def _read_outputs(model, args) -> set:
    """The arrays of ``args`` that the kernel writes and also reads (an
    output updated in place, jacobi-2d's ``A``): each call gets a fresh
    copy.  An output only written (an update's read of the element its
    computation initialised aside) is passed as it is: a copy of a
    stencil's 64 MB output in each timed call was half of what was timed,
    and its stores were timed on lines the copy had just brought into the
    cache."""
    read = {a.buffer.name for m in model.stmts for a in m.accesses
            if not a.write and not a.implicit}
    inputs = {b.name for b in model.inputs}
    return {n for n in args if n not in inputs and n in read}


def _caller(kernel, args, params, written):
    """One call of ``kernel`` on ``args``, fresh copies of the arrays it
    writes and reads (``written``: :func:`_read_outputs`); an input, never
    written, is passed as it is: copying bmv's 134 MB matrix in every timed
    call had been most of what was timed)."""
    def call():
        kernel(**{k: (v.copy() if k in written and isinstance(v, np.ndarray) else v)
                  for k, v in args.items()}, **params)
    return call


def _time(call, repeats, clock):
    call()
    times = []
    for _ in range(repeats):
        t = clock()
        call()
        times.append(clock() - t)
    return statistics.median(times)


# --------------------------------------------------------------------- tune
def tune(f, space=None, budget=60.0, params=None, inputs=None, target=None, repeats=3,
         progress=True, retune=False, dry_run=False, clock=None):
    """Times legal schedules of the unscheduled Function ``f`` on this host
    and records the fastest in the tuning store if it confirmably beats
    ``f`` as written; a later ``compile()`` of the same algorithm
    (unscheduled) on this host uses it, in any process
    (``compile(tuned=False)`` does not; ``kernel.tuned`` says which record
    a kernel was compiled with).

    ``params``: the sizes to time with (every free param); ``inputs``: arrays
    by name (default: random, shaped by ``params``); ``space``: candidates,
    each a dict of auto-scheduler options (``tile``, ``time_tile``, ``mr``,
    ``nv``, ``jam``, ``sums``, ``block_vectors``, ``vectorize``, ``unroll``,
    ``fuse``, ``pad``, ``schedule``) or a callable that
    schedules a copy (default: :func:`tiramisu_py.driver.tune_space.candidates`,
    ranked by its cost model); illegal candidates are
    rejected by the legality check.  ``budget``: seconds, after which no
    candidate starts.  The search's fastest is timed again against ``f`` as
    written, interleaved, and kept only if it wins beyond the noise
    (:func:`tiramisu_py.tuning.confirm.confirm`); a record that keeps nothing
    compiles ``f`` as written (and is not timed again unless ``retune``).
    ``progress``: a bar on stderr.  ``retune``: time again even if
    recorded.  ``dry_run``: measure and decide, record nothing.  ``clock``:
    the timer (default :func:`time.perf_counter`; tests give a fake one).
    Returns ``{"steps": [Step, ...] (kept; [] when none), "candidate": the
    search's fastest, "kept": bool, "verdict": Verdict (default and best
    ms, the A/B ratio and its quartiles, "kept" or why not; ``.line()``
    says it), "time": seconds, "key": key, "timed": n, "rejected": [why,
    ...], "tried": [{"candidate", "predicted" (the model's cost relative to
    the auto schedule; None for a space given), "ms" (None if not timed),
    "note"}, ...] in the order tried (:func:`report` prints it), "cached":
    bool, "recorded": bool}`` (:mod:`tiramisu_py.driver.tune`)."""
    target = target or default_target()
    if target not in ("cpu", "c", "llvm"):
        raise ValueError(f"tune: target must be 'cpu', 'c' or 'llvm', not {target!r}")
    check_budget("tune", budget)
    check_repeats("tune", repeats)
    check_clock("tune", clock)
    params = dict(params or {})
    missing = [p for p in f.params if p not in f.fixed and p not in params]
    if missing:
        raise ValueError(f"tune: params= must give the sizes to time with; missing "
                         f"{', '.join(missing)}")
    for p, v in params.items():
        if p not in f.params or p in f.fixed:
            raise ValueError(f"tune: params=: {p!r} is not a free param of {f.name!r}")
        if isinstance(v, bool) or not isinstance(v, int) or v < 0:
            raise ValueError(f"tune: params=: {p} must be a non-negative int, not {v!r}")
    if f._commands:
        raise ValueError(f"tune: {f.name!r} already has scheduling commands; tune the "
                         "algorithm alone (f.reset_schedule(), or tune a copy)")
    key = record_key(f, target, params)
    store = database.store()
    old = None if retune else store.get(KIND, key, valid=_valid)
    if old is not None:
        steps = apply_record(f.copy(), old)
        return {"steps": steps, "candidate": steps, "kept": bool(steps),
                "verdict": recorded(old), "time": old.get("time"),
                "key": key, "timed": 0, "rejected": [], "tried": [], "cached": True,
                "recorded": False}
    modelled = space is None
    if modelled:
        ranked = tune_space.candidates(f, target)
    else:
        ranked = [(c, None) for c in space]
    if not ranked:
        raise ValueError("tune: space is empty")
    if target == "llvm":
        ranked = [(c, p) for c, p in ranked if not (isinstance(c, dict) and c.get("schedule"))]
    space = [c for c, _ in ranked]
    tried = [{"candidate": _candidate_text(c), "predicted": p, "ms": None, "note": "not tried "
              "(budget spent)"} for c, p in ranked]
    clock = clock or time.perf_counter
    model = build_model(f.copy())          # (compile's buffers, on a copy)
    args = _arguments(f, params, inputs, model)
    bar = Bar(sys.stderr if progress else None)

    def show(note=""):
        bar.show(f.name, done, len(space), best and best[0], note)
    start = time.perf_counter()
    written = _read_outputs(model, args)
    as_written = _caller(compile_function(f, target), args, params, written)
    default_t = _time(as_written, repeats, clock)          # the defaults: f as written
    best, rejected, timed, seen, done, results = None, [], 0, {}, 0, []
    for k, cand in enumerate(space):
        if k and time.perf_counter() - start > budget:
            show("(budget spent)")
            break
        g = f.copy()
        try:
            if callable(cand):
                before = len(g._commands)
                cand(g)
                steps = _user_steps(g, g._commands[before:])
            elif isinstance(cand, dict):
                steps = AutoScheduler(g, target, None, cand).run()
            else:
                raise TypeError(f"tune: a candidate is a dict of options or a callable, "
                                f"not {type(cand).__name__}")
            if any(isinstance(a, Code) and a.data is None
                   for s in steps for a in [*s.args, *s.kwargs.values()]):
                raise ValueError("its steps give code to evaluate, which a record does not hold")
            sig = tuple(str(s) for s in steps)
            if sig in seen:
                tried[k]["note"] = f"the same schedule as candidate {seen[sig]}"
                done += 1
                continue
            seen[sig] = k
            kernel = compile_function(g, target)
        except (IllegalScheduleError, ValueError, CompileError) as e:
            rejected.append(f"candidate {k}: {str(e).splitlines()[0]}")
            tried[k]["note"] = "rejected: " + str(e).splitlines()[0]
            done += 1
            show("(rejected)")
            continue
        call = _caller(kernel, args, params, written)
        t = _time(call, repeats, clock)
        tried[k].update(ms=t * 1e3, note="timed")
        RUNS["timed"] += 1
        timed += 1
        results.append((t, k, steps, call))
        if best is None or t < best[0]:
            best = (t, steps, call)
        done += 1
        show()
    if best is None:
        bar.end()
        raise ValueError(f"tune: no legal candidate for {f.name!r}: " + "; ".join(rejected))
    if len(results) > 1:
        show("(the fastest again, in turns)")
        best, med = _final(results, tried, repeats, clock)
        auto = next((r for r in results if r[1] == 0), None)
        if modelled and auto is not None and best[2] is not auto[3]:
            # the space's first is auto_schedule's own: another is kept only if
            # it confirmably beats it too (noise must not pick a slower one)
            show("(A/B against the auto schedule)")
            auto_t = med.get(0, auto[0])
            if not decide(auto[3], best[2], auto_t, best[0], clock).kept:
                tried[0]["note"] += "; kept: no other confirmably faster"
                best = (auto_t, auto[2], auto[3])
    if best[0] < default_t:
        show("(A/B against the defaults)")
    verdict = decide(as_written, best[2], default_t, best[0], clock)
    show(verdict.why)
    bar.end()
    kept = best[1] if verdict.kept else []
    value = {"name": f.name, "steps": encoded(kept),
             "time": verdict.best_s if verdict.kept else verdict.default_s,
             "sizes": params, "target": target, "verdict": verdict.as_dict(),
             "candidate": [str(s) for s in best[1]]}
    if not dry_run:
        store.put(KIND, key, value)
        store.put(KIND, record_key(f, target), value)
    return {"steps": kept, "candidate": best[1], "kept": verdict.kept, "verdict": verdict,
            "time": value["time"], "key": key, "timed": timed, "rejected": rejected,
            "tried": tried, "cached": False, "recorded": not dry_run}


def _final(results, tried, repeats, clock):
    """The search's :data:`FINALISTS` fastest timed again in turns,
    :data:`FINAL_ROUNDS` rounds (one quick median a candidate in the search
    picks by noise among near-equals): ``(median, steps, call)`` of the
    fastest, and ``{candidate index: median}``."""
    finalists = sorted(results, key=lambda r: r[0])[:FINALISTS]
    times = {k: [t] for t, k, _, _ in finalists}
    for _ in range(FINAL_ROUNDS):
        for _, k, _, call in finalists:
            times[k].append(_time(call, repeats, clock))
    med = {k: statistics.median(ts) for k, ts in times.items()}
    for k, m in med.items():
        tried[k].update(ms=m * 1e3, note=f"finalist ({FINAL_ROUNDS + 1} medians)")
    _, k, steps, call = min(finalists, key=lambda r: med[r[1]])
    return (med[k], steps, call), med


def _candidate_text(c) -> str:
    if isinstance(c, dict):
        return ", ".join(f"{k}={v!r}" for k, v in c.items()) or "auto_schedule's own"
    return getattr(c, "__name__", None) or repr(c)


def report(result) -> str:
    """What :func:`tune` tried, a line a candidate: its options, the cost
    model's prediction, the measured time or why none; then the verdict."""
    rows = [f"{'candidate':44} {'predicted':>9} {'ms':>9}  note"]
    for t in result["tried"]:
        pred = "-" if t["predicted"] is None else f"{t['predicted']:.2f}"
        ms = "-" if t["ms"] is None else f"{t['ms']:.3f}"
        rows.append(f"{t['candidate'][:44]:44} {pred:>9} {ms:>9}  {t['note']}")
    rows.append(result["verdict"].line() if result["verdict"] is not None else "no verdict")
    return "\n".join(rows)


def _user_steps(g, commands):
    """The commands a callable candidate gave, as Steps: one per user call
    (``vectorize`` records a split and a tag, ``tile_band`` one command per
    statement)."""
    calls = {}
    for c in commands:
        calls.setdefault(c.call_id, []).append(c)
    out = []
    for cs in calls.values():
        last = cs[-1]
        if last.op == "tile_band":
            loops, sizes, _ = last.args
            out.append(Step(g, None, "tile_band", [_StmtRef(g, c.stmt) for c in cs],
                            list(loops), list(sizes)))
        elif last.op == "tag" and last.args[1] in ("parallel", "vector", "unrolled"):
            loop, kind, arg = last.args
            if kind == "parallel":
                kw = {} if arg is None else {"schedule": arg[0], "chunk": arg[1]}
                if any(c.op == "allow_reassociation" for c in cs):
                    kw["allow_reassociation"] = True
                out.append(Step(g, last.stmt, "parallelize", loop, **kw))
            else:
                first = cs[0].args[0] if cs[0].op == "split" else loop
                out.append(Step(g, last.stmt, {"vector": "vectorize", "unrolled": "unroll"}[kind],
                                first, arg))
        elif last.op == "accumulate":
            kw = {"allow_reassociation": True} if any(c.op == "allow_reassociation"
                                                      for c in cs) else {}
            out.append(Step(g, last.stmt, "accumulate_locally", last.args[0], **kw))
        elif last.op == "nontemporal":
            out.append(Step(g, last.stmt, "store_nontemporal"))
        elif len(cs) == 1 and last.op in VERBS:
            out.append(Step(g, last.stmt, last.op, *_command_args(g, last)))
        else:
            raise ValueError(f"tune: a candidate's command {last.text} cannot be recorded "
                             "(loop transformations and parallel/vector/unroll only)")
    return out


def _command_args(g, c):
    if c.op == "tile":
        loops, factors, _ = c.args
        return (*loops, *factors)
    if c.op == "after":
        return (_StmtRef(g, c.args[0]), c.args[1])
    if c.op in ("split", "skew"):
        return c.args[:-1]
    return c.args


def describe(value) -> str:
    """A record in words: which Function, the sizes, the A/B verdict and
    the commands kept."""
    if not _valid(value):
        return f"tiramisu_py.tune record, damaged: {str(value)[:60]}"
    name = value.get("name", "?")
    sizes = keys.size_class(value.get("sizes") or {}) or "fixed sizes"
    verdict = recorded(value)
    if verdict is None:
        return f"tiramisu_py.tune record of {name!r}: unconfirmed (made before A/B), not used"
    steps = "; ".join(str(_decode_text(item)) for item in value["steps"]) or "as written"
    return (f"tiramisu_py.tune record of {name!r} ({value.get('target', '?')}, {sizes}; "
            f"{verdict.line()}): {steps}")


def _decode_text(item):
    """A recorded command as text (no Function needed)."""
    if not isinstance(item, dict):
        return repr(item)
    args = [a["stmts"] if isinstance(a, dict) and "stmts" in a else
            a["stmt"] if isinstance(a, dict) and "stmt" in a else
            _code_text(a["code"]) if isinstance(a, dict) and "code" in a else a
            for a in item.get("args", [])]
    kw = [f"{k}={v!r}" for k, v in (item.get("kwargs") or {}).items()]
    return f"{item.get('stmt') or 'f'}.{item.get('verb')}({', '.join([*map(repr, args), *kw])})"


def _code_text(data):
    try:
        return code_of(data)
    except ValueError:
        return data


def _name(value):
    return str(value.get("name")) if isinstance(value, dict) else ""


# the records, one per size class tuned (the key without a size class names the
# last one tuned: removed with it, not counted), by the Function's name; any
# host, any format (an unconfirmed record of an earlier version is listed, and
# never used)
RECORDS = RecordKind(KIND, "tiramisu_py.tune record", lambda key, value: describe(value),
                     names=lambda key, value: (_name(value),), listed=lambda key: "|" in key,
                     order=lambda key, value: (_name(value), key))


def tuned_function(f, target):
    """``(g, description)``: a copy ``g`` of ``f`` scheduled by its tuning
    record (see the module's doc) and the record in words
    (:func:`describe`), or None (no record, one that keeps nothing, or one
    that no longer applies)."""
    if not USE_TUNED or f._commands:
        return None
    free = [p for p in f.params if p not in f.fixed]
    key = record_key(f, target, {}) if not free else record_key(f, target)
    value = database.store().get(KIND, key, valid=_valid)
    if value is None or not value["steps"]:
        return None
    g = f.copy()
    try:
        apply_record(g, value)
    except (ValueError, TypeError, KeyError, IllegalScheduleError):
        return None                     # a record that no longer applies: compiled as written
    return g, describe(value)


__all__ = ["tune", "tuned_function", "record_key", "describe", "report", "KIND", "RECORDS"]

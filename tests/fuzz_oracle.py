"""The isl-free oracle of the legality fuzz test (its programs:
:mod:`tests.fuzz_programs`).

The oracle enumerates every statement instance for concrete param values,
orders them by program order (computed here from the program's structure,
not from the library's model) and by the transformed schedule (the
library's ``StmtSchedule.dims()`` text evaluated by a small parser here),
and judges the order by values: every read must see the same write as in
program order and every element keep its last write (all buffers are
outputs), element by element (:func:`value_violations`); a parallel or
vector loop must carry no pair of instances that touch one element with at
least one write (a race), found by brute force over every such pair (all
buffers are outputs: the library privatises none).

A named read means the value of the instance it names (the library's
``_meaning``, tiramisu_py/poly/dataflow.py): where that instance runs before
the reader in program order, the read must see exactly its write under the
schedule, whatever the program order's memory holds (folded or shared
storage overwritten before the read is illegal even unscheduled; a schedule
that reads every value before the next write to its element is legal); a
named instance that runs after the reader in program order has no value to
read yet, so that read means memory, as a buffer read.  The reference
interpreter computes with these semantics; run in a schedule's order it
reads memory, as the kernels do."""
from __future__ import annotations

import itertools
import math
import re
from dataclasses import dataclass, field
from fractions import Fraction

import numpy as np

from tests.fuzz_programs import Acc, Program


# ------------------------------------------------ a tiny isl affine evaluator
_TOKEN = re.compile(r"\s*(?:(\d+)|([A-Za-z_][A-Za-z0-9_]*)|(\S))")


def _tokens(text):
    out, pos = [], 0
    text = text.strip()
    while pos < len(text):
        m = _TOKEN.match(text, pos)
        if not m:
            raise SyntaxError(f"cannot tokenize {text!r} at {pos}")
        pos = m.end()
        if m.group(1):
            out.append(("int", int(m.group(1))))
        elif m.group(2):
            out.append(("name", m.group(2)))
        else:
            out.append(("op", m.group(3)))
    return out


class _Parser:
    """expr := term (('+'|'-') term)*; term := unary (('*'|'/'|'mod') unary)*;
    unary := '-' unary | primary; primary := int | name | '(' expr ')' |
    'floor' '(' expr ')'.  Values are exact (Fraction for '/')."""

    def __init__(self, text):
        self.text, self.toks, self.k = text, _tokens(text), 0

    def peek(self):
        return self.toks[self.k] if self.k < len(self.toks) else (None, None)

    def eat(self, kind=None, val=None):
        t = self.peek()
        if (kind and t[0] != kind) or (val is not None and t[1] != val):
            raise SyntaxError(f"{self.text!r}: expected {val or kind} at token {self.k}, got {t}")
        self.k += 1
        return t

    def parse(self):
        e = self.expr()
        if self.k != len(self.toks):
            raise SyntaxError(f"{self.text!r}: trailing tokens {self.toks[self.k:]}")
        return e

    def expr(self):
        e = self.term()
        while self.peek() in (("op", "+"), ("op", "-")):
            op = self.eat()[1]
            r = self.term()
            e = (lambda a, b: lambda env: a(env) + b(env))(e, r) if op == "+" else \
                (lambda a, b: lambda env: a(env) - b(env))(e, r)
        return e

    def term(self):
        e = self.unary()
        while self.peek() in (("op", "*"), ("op", "/"), ("name", "mod")):
            op = self.eat()[1]
            r = self.unary()
            if op == "*":
                e = (lambda a, b: lambda env: a(env) * b(env))(e, r)
            elif op == "/":
                e = (lambda a, b: lambda env: Fraction(a(env)) / b(env))(e, r)
            else:
                e = (lambda a, b: lambda env: _mod(a(env), b(env)))(e, r)
        return e

    def unary(self):
        if self.peek() == ("op", "-"):
            self.eat()
            a = self.unary()
            return lambda env: -a(env)
        return self.primary()

    def primary(self):
        kind, val = self.peek()
        if kind == "int":
            self.eat()
            return lambda env: val
        if kind == "name" and val == "floor":
            self.eat()
            self.eat("op", "(")
            a = self.expr()
            self.eat("op", ")")
            return lambda env: math.floor(a(env))
        if kind == "name":
            self.eat()
            return lambda env: env[val]
        if (kind, val) == ("op", "("):
            self.eat()
            a = self.expr()
            self.eat("op", ")")
            return a
        raise SyntaxError(f"{self.text!r}: unexpected token {(kind, val)}")


def _mod(a, b):
    assert isinstance(a, int) and isinstance(b, int) and b > 0, (a, b)
    return a % b                 # isl's mod: non-negative for a positive divisor


_PARSED = {}


def affine_fn(text):
    fn = _PARSED.get(text)
    if fn is None:
        fn = _PARSED[text] = _Parser(text).parse()
    return fn


def eval_affine(text, env):
    v = affine_fn(text)(env)
    if isinstance(v, Fraction):
        assert v.denominator == 1, (text, env, v)
        v = int(v)
    return v


# -------------------------------------------------------------------- oracle
@dataclass
class Verdict:
    violations: list = field(default_factory=list)   # (src, dst): broken, changes a value
    memory_violations: list = field(default_factory=list)   # (src, dst): order broken
    carried: dict = field(default_factory=dict)      # (stmt, loop) -> (src, dst), loop's own deps
    carried_any: dict = field(default_factory=dict)  # same, any two instances (isl's relation)
    vanished: list = field(default_factory=list)     # (stmt, loop, kind): tag on a lost loop
    ties: list = field(default_factory=list)         # distinct instances with equal time
    storage: list = field(default_factory=list)      # (value, read, write): a named read sees
    #                                                  write, not the value it names

    @property
    def legal(self):
        return not (self.violations or self.storage or self.carried or self.vanished
                    or self.ties)


def instances(p: Program, params):
    rng = p.ranges(params)
    out = []
    for k, s in enumerate(p.stmts):
        for pt in itertools.product(*(rng[v] for v in s.loops)):
            out.append((k, dict(zip(s.loops, pt))))
    return out


def _index(d, env):
    if d[0] == "c":
        return d[1]
    if d[0] == "m":
        return env[d[1]] % d[2]
    return env[d[1]] + d[2]


def _elem(a: Acc, env):
    return (a.buf,) + tuple(_index(d, env) for d in a.idx)


def read_info(p: Program, insts):
    """Per instance, per read (in the order of its ``reads``): (element,
    value) where ``value`` is the instance index whose value a named read
    means (it runs before the reader in program order), else None (a buffer
    read, or a named instance that runs after the reader: memory); (None,
    None) for a named read of an instance outside the named domain (the
    guard reads nothing)."""
    where = {(k, tuple(env[v] for v in p.stmts[k].loops)): n for n, (k, env) in enumerate(insts)}
    out = []
    for k, env in insts:
        s = p.stmts[k]
        row = []
        for r in s.reads:
            if isinstance(r, Acc):
                row.append((_elem(r, env), None))
                continue
            named = p.stmts[r.stmt]
            x = tuple(_index(d, env) for d in r.idx)
            m = where.get((r.stmt, x))
            if m is None:
                row.append((None, None))
                continue
            e = _elem(named.write, dict(zip(named.loops, x)))
            before = original_key(p, r.stmt, insts[m][1]) < original_key(p, k, env)
            row.append((e, m if before else None))
        out.append(row)
    return out


def original_key(p: Program, k, env):
    """Program order, from the program's structure: statements in
    declaration order, each its own nest; the nest's statements interleaved
    per iteration of its loop."""
    s = p.stmts[k]
    vals = tuple(env[v] for v in s.loops)
    if p.nest is None:
        return (k,) + vals
    a, b = p.span
    if k < a:
        return (k,) + vals
    if k >= b:
        return (k - (b - a) + 1,) + vals
    return (a, vals[0], k - a) + vals[1:]


def transformed_times(p: Program, state, insts):
    dims = {s.name: state[s.name].dims() for s in p.stmts}
    depth = max(len(d) for d in dims.values())
    out = []
    for k, env in insts:
        d = dims[p.stmts[k].name]
        vec = [eval_affine(x, env) for x in d]
        out.append(tuple(vec + [0] * (depth - len(vec))))
    return out


def dependences(p: Program, insts):
    """(src, dst) instance indices, src before dst in program order, for
    every pair of distinct instances touching one element, one a write
    (a named read touches the element its value is stored in)."""
    touch = {}
    info = read_info(p, insts)
    for n, (k, env) in enumerate(insts):
        s = p.stmts[k]
        seen = {}
        for e, _ in info[n]:
            if e is not None:
                seen[e] = seen.get(e, False)
        seen[_elem(s.write, env)] = True
        for e, w in seen.items():
            touch.setdefault(e, []).append((n, w))
    keys = [original_key(p, k, env) for k, env in insts]
    deps = set()
    for lst in touch.values():
        for (x, wx), (y, wy) in itertools.combinations(lst, 2):
            if x == y or not (wx or wy):
                continue
            deps.add((x, y) if keys[x] < keys[y] else (y, x))
    return deps


def value_violations(p: Program, insts, times, storage=None):
    """The broken dependences that change a value (every buffer is an
    output, so live-out): (src, dst) instance pairs, src first in program
    order, found by running both orders over every element.  A read that
    sees another write than in program order (or, in one of them, none)
    gives each of these that is a broken dependence: its own write -> it (it
    now runs first); it -> the write it now sees (that came after it); the
    write it now sees -> its own.  An element whose last write changes
    gives: the new last -> the old.

    "Its own write" is, for a named read whose value runs before it in
    program order, the write of that value (not the last write of the
    element in program order: folded or shared storage may have overwritten
    it).  Each such read that now sees another write than its value's,
    broken dependence or not, is appended to ``storage`` as (value, read,
    the write it sees)."""
    keys = [original_key(p, k, env) for k, env in insts]
    info = read_info(p, insts)
    events = {}                    # element -> [(instance, is_write, value)], reads first
    for n, (k, env) in enumerate(insts):
        s = p.stmts[k]
        for e, m in dict.fromkeys(info[n]):
            if e is not None:
                events.setdefault(e, []).append((n, False, m))
        events.setdefault(_elem(s.write, env), []).append((n, True, None))

    def last_before(order, writes, n):
        """The write of ``writes`` latest in ``order`` before instance ``n``."""
        earlier = [w for w in writes if order[w] < order[n]]
        return max(earlier, key=lambda w: order[w]) if earlier else None
    out = set()
    for lst in events.values():
        writes = [n for n, w, _ in lst if w]
        if not writes:
            continue
        for n, w, meant in lst:
            if w:
                continue
            old = meant if meant is not None else last_before(keys, writes, n)
            new = last_before(times, writes, n)
            if old == new:
                continue
            if meant is not None and new is not None and storage is not None:
                storage.append((meant, n, new))
            if old is not None and not times[old] < times[n]:
                out.add((old, n))
            if new is not None and keys[new] > keys[n]:
                out.add((n, new))
            if None not in (old, new) and keys[new] < keys[old] and not times[new] < times[old]:
                out.add((new, old))
        old = max(writes, key=lambda w: keys[w])
        new = max(writes, key=lambda w: times[w])
        if old != new:
            out.add((new, old))
    return out


def overwritten_in_program_order(p: Program, params) -> bool:
    """True when, in program order itself, folded or shared storage
    overwrites a value before a read that names it (only a schedule that
    reads it earlier makes the program legal)."""
    insts = instances(p, params)
    keys = [original_key(p, k, env) for k, env in insts]
    storage = []
    value_violations(p, insts, keys, storage)
    return bool(storage)


def reads_folded_values(p: Program, params) -> bool:
    """True when some read names a value whose storage element other
    instances write too (folded or shared storage: the library's value
    rule for named reads decides, not memory)."""
    insts = instances(p, params)
    writers = {}
    for k, env in insts:
        e = _elem(p.stmts[k].write, env)
        writers[e] = writers.get(e, 0) + 1
    return any(m is not None and writers[e] > 1 for row in read_info(p, insts) for e, m in row)


def judge(p: Program, state, params) -> Verdict:
    """The oracle's verdict on the schedule ``state`` for these params."""
    insts = instances(p, params)
    times = transformed_times(p, state, insts)
    v = Verdict()
    by_time = {}
    for n, t in enumerate(times):
        if t in by_time:
            v.ties.append((by_time[t], n))
        by_time[t] = n
    deps = dependences(p, insts)
    v.memory_violations = [(x, y) for x, y in deps if not times[x] < times[y]]
    v.violations = sorted(value_violations(p, insts, times, v.storage))
    for s in p.stmts:
        st = state[s.name]
        names = [lp.name for lp in st.loops]
        for loop, tag in st.tags.items():
            if loop not in names:
                v.vanished.append((s.name, loop, tag.kind))
                continue
            if tag.kind not in ("parallel", "vector"):
                continue
            kpos = names.index(loop)
            pos = 2 * kpos + 1
            consts = tuple(st.consts[:kpos + 1])
            for x, y in sorted(deps):
                tx, ty = times[x], times[y]
                if tx[:pos] != ty[:pos] or tx[pos] == ty[pos]:
                    continue
                v.carried_any.setdefault((s.name, loop), (x, y))
                # inside this loop: the sequence positions around it are s's
                if tuple(tx[0:pos:2]) == consts:
                    v.carried.setdefault((s.name, loop), (x, y))
    v.insts, v.times = insts, times
    return v


def describe(p: Program, v: Verdict, n) -> str:
    k, env = v.insts[n]
    s = p.stmts[k]
    return f"{s.name}({', '.join(f'{l}={env[l]}' for l in s.loops)})"


# ------------------------------------------------------------- interpreters
def random_arrays(p: Program, N, seed):
    rng = np.random.default_rng(seed)
    return {b: rng.standard_normal((N,) * p.rank) for b in p.bufs}


def interpret(p: Program, params, arrays, order=None):
    """Runs the instances one by one on copies of ``arrays``: in program
    order, the reference (a named read is the value of the instance it names,
    when that ran before it), unless ``order`` (a list of instance indices)
    is given: then in that order, every read from memory (as a kernel
    does)."""
    out = {b: a.copy() for b, a in arrays.items()}
    insts = instances(p, params)
    info = read_info(p, insts)
    reference = order is None
    if reference:
        order = sorted(range(len(insts)), key=lambda n: original_key(p, *insts[n]))
    values = {}
    for n in order:
        k, env = insts[n]
        s = p.stmts[k]
        val = 1.0
        for c, (e, m) in zip(s.coefs, info[n]):
            if e is None:
                x = 0.0                            # the guard's other arm
            elif reference and m is not None:
                x = values[m]
            else:
                x = out[e[0]][e[1:]]
            val = val + c * x
        values[n] = val
        e = _elem(s.write, env)
        out[e[0]][e[1:]] = val
    return out

"""Random small programs and schedules for the legality fuzz test, and an
oracle for them that does not use isl.

A program is plain data (:class:`Program`): 1-3 statements over rectangular
boxes ``lo <= v < N - hi`` (``t`` in ``0 <= t < T``), each writing one element
of a shared float64 output buffer and reading 1-3 elements of shared buffers
at constant offsets.  :func:`source` turns it into DSL code and :func:`build`
runs exactly that code, so a failure's reproducer is the text that was run.

The oracle enumerates every statement instance for concrete param values,
orders them by program order (computed here from the program's structure,
not from the library's model) and by the transformed schedule (the
library's ``StmtSchedule.dims()`` text evaluated by a small parser here),
and judges the order by values: every read must see the same write as in
program order and every element keep its last write (all buffers are
outputs), element by element (:func:`value_violations`); a parallel or
vector loop must carry no pair of instances that touch one element with at
least one write (a race), found by brute force over every such pair."""
from __future__ import annotations

import itertools
import math
import re
from dataclasses import dataclass, field
from fractions import Fraction

import numpy as np
from hypothesis import strategies as st

import tiramisu_py as tp
from tiramisu_py.commands.state import state_of

SPATIAL = ("i", "j", "k")
BUFS = ("A", "B", "C")


# ------------------------------------------------------------------ programs
@dataclass(frozen=True)
class Acc:
    buf: str
    idx: tuple            # per dimension: ("v", var, offset) or ("c", value)


@dataclass(frozen=True)
class Stmt:
    name: str
    loops: tuple          # loop names, outermost first
    write: Acc
    reads: tuple          # Accs
    coefs: tuple          # one float per read


@dataclass(frozen=True)
class Program:
    rank: int             # rank of every buffer (each dimension has extent N)
    bufs: tuple           # buffer names
    nest: str | None      # shared outer loop of the statements in span, or None
    span: tuple           # (a, b): statements a..b-1 are declared inside the nest
    stmts: tuple
    fixed_n: int | None = None   # N fixed in the Function (folded in) instead of symbolic

    @property
    def params(self):
        """Every param of the program (fixed or not)."""
        return ("N", "T") if self.nest == "t" else ("N",)

    @property
    def call_params(self):
        """The params a kernel call passes."""
        return tuple(x for x in self.params if not (x == "N" and self.fixed_n is not None))

    def in_nest(self, k):
        return self.nest is not None and self.span[0] <= k < self.span[1]

    def vars_used(self):
        out = []
        if self.nest is not None:
            out.append(self.nest)
        for s in self.stmts:
            for v in s.loops:
                if v not in out:
                    out.append(v)
        return sorted(out, key=lambda v: ("tijk".index(v)))

    def bounds(self):
        """var -> (lo, hi_sub): ``lo <= v < N - hi_sub`` keeps every
        ``v + offset`` index inside ``[0, N)``; ``t``: ``0 <= t < T``."""
        offs = {v: [] for v in self.vars_used()}
        for s in self.stmts:
            for a in (s.write,) + s.reads:
                for d in a.idx:
                    if d[0] == "v":
                        offs[d[1]].append(d[2])
        out = {}
        for v, o in offs.items():
            if v == "t":
                out[v] = (0, 0)
            else:
                out[v] = (max([0] + [-x for x in o]), max([0] + o))
        return out

    def ranges(self, params):
        out = {}
        for v, (lo, hs) in self.bounds().items():
            hi = params["T"] if v == "t" else params["N"] - hs
            out[v] = range(lo, hi)
        return out


def _index_text(d):
    if d[0] == "c":
        return str(d[1])
    _, v, off = d
    return v if off == 0 else f"{v} {'+' if off > 0 else '-'} {abs(off)}"


def _acc_text(a):
    return f"{a.buf}[{', '.join(_index_text(d) for d in a.idx)}]"


def source(p: Program) -> str:
    """The DSL code of ``p``; defines ``f`` and one name per statement."""
    if p.fixed_n is None:
        ps = repr(list(p.params))
    else:
        ps = repr({x: (p.fixed_n if x == "N" else None) for x in p.params})
    lines = ["import tiramisu_py as tp", f"f = tp.Function('fz', params={ps})"]
    for v, (lo, hs) in p.bounds().items():
        hi = "'T'" if v == "t" else (f"'N - {hs}'" if hs else "'N'")
        lines.append(f"{v} = f.var('{v}', {lo}, {hi})")
    shape = "(" + ", ".join(["'N'"] * p.rank) + ("," if p.rank == 1 else "") + ")"
    for b in p.bufs:
        lines.append(f"{b} = f.buffer('{b}', {shape}, tp.float64, output=True)")
    for k, s in enumerate(p.stmts):
        expr = " + ".join(["1.0"] + [f"{c!r} * {_acc_text(a)}" for c, a in zip(s.coefs, s.reads)])
        idx = ", ".join(_index_text(d) for d in s.write.idx)
        line = (f"{s.name} = f.computation('{s.name}', [{', '.join(s.loops)}], {expr})"
                f".store_in({s.write.buf}, [{idx}])")
        if p.in_nest(k):
            if k == p.span[0]:
                lines.append(f"with f.nest({p.nest}):")
            line = "    " + line
        lines.append(line)
    return "\n".join(lines) + "\n"


def build(p: Program):
    ns = {}
    exec(compile(source(p), "<fuzz program>", "exec"), ns)
    return ns["f"], ns


# ------------------------------------------------------------------ commands
def apply_command(ns, line):
    """Runs one schedule command (a line of DSL code) on the program in
    ``ns``; returns False when the command itself is refused (ValueError /
    TypeError: an API error such as an unknown loop, not a legality verdict)."""
    try:
        exec(line, ns)
    except (ValueError, TypeError):
        return False
    return True


def repro(p: Program, commands, params=None) -> str:
    text = source(p) + "".join(c + "\n" for c in commands) + "kernel = f.compile()\n"
    if params:
        args = ", ".join(f"{k}={v}" for k, v in params.items())
        text += f"# call with {args} and random {', '.join(p.bufs)} of shape (N,)*{p.rank}\n"
    return text


# ------------------------------------------- random programs and commands (hypothesis)
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


def draw_case(data, max_commands, counts):
    """(program, params of the call, f, its namespace, command lines applied):
    a random program and 1..``max_commands`` commands that the API took
    (``counts``: a Counter of the commands drawn, by op)."""
    p = data.draw(programs(), label="program")
    params = {"N": p.fixed_n if p.fixed_n is not None else data.draw(st.integers(3, 6), label="N")}
    if "T" in p.params:
        params["T"] = data.draw(st.integers(1, 3), label="T")
    f, ns = build(p)
    cmds = []
    want = data.draw(st.integers(1, max_commands), label="n_commands")
    for _ in range(3 * want):
        if len(cmds) == want:
            break
        line = draw_command(data, p, f)
        if line is None:
            continue
        counts["commands"] += 1
        if apply_command(ns, line):
            cmds.append(line)
            counts["op_" + line.split(".")[1].split("(")[0]] += 1
        else:
            counts["api_errors"] += 1
    return p, params, f, ns, cmds


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

    @property
    def legal(self):
        return not (self.violations or self.carried or self.vanished or self.ties)


def instances(p: Program, params):
    rng = p.ranges(params)
    out = []
    for k, s in enumerate(p.stmts):
        for pt in itertools.product(*(rng[v] for v in s.loops)):
            out.append((k, dict(zip(s.loops, pt))))
    return out


def _elem(a: Acc, env):
    return (a.buf,) + tuple(env[d[1]] + d[2] if d[0] == "v" else d[1] for d in a.idx)


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
    every pair of distinct instances touching one element, one a write."""
    touch = {}
    for n, (k, env) in enumerate(insts):
        s = p.stmts[k]
        seen = {}
        for a in s.reads:
            e = _elem(a, env)
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


def value_violations(p: Program, insts, times):
    """The broken dependences that change a value (every buffer is an
    output, so live-out): (src, dst) instance pairs, src first in program
    order, found by running both orders over every element.  A read that
    sees another write than in program order (or, in one of them, none)
    gives each of these that is a broken dependence: its own write -> it (it
    now runs first); it -> the write it now sees (that came after it); the
    write it now sees -> its own.  An element whose last write changes
    gives: the new last -> the old."""
    keys = [original_key(p, k, env) for k, env in insts]
    events = {}                    # element -> [(instance, is_write)], reads first
    for n, (k, env) in enumerate(insts):
        s = p.stmts[k]
        for e in dict.fromkeys(_elem(a, env) for a in s.reads):
            events.setdefault(e, []).append((n, False))
        events.setdefault(_elem(s.write, env), []).append((n, True))

    def last_before(order, writes, n):
        """The write of ``writes`` latest in ``order`` before instance ``n``."""
        earlier = [w for w in writes if order[w] < order[n]]
        return max(earlier, key=lambda w: order[w]) if earlier else None
    out = set()
    for lst in events.values():
        writes = [n for n, w in lst if w]
        if not writes:
            continue
        for n, w in lst:
            if w:
                continue
            old, new = last_before(keys, writes, n), last_before(times, writes, n)
            if old == new:
                continue
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
    v.violations = sorted(value_violations(p, insts, times))
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
    """Runs the instances one by one (program order unless ``order``, a
    list of instance indices, is given) on copies of ``arrays``."""
    out = {b: a.copy() for b, a in arrays.items()}
    insts = instances(p, params)
    if order is None:
        order = sorted(range(len(insts)), key=lambda n: original_key(p, *insts[n]))
    for n in order:
        k, env = insts[n]
        s = p.stmts[k]
        val = 1.0
        for c, a in zip(s.coefs, s.reads):
            e = _elem(a, env)
            val = val + c * out[e[0]][e[1:]]
        e = _elem(s.write, env)
        out[e[0]][e[1:]] = val
    return out

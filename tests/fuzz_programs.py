"""Random small programs and schedules for the legality fuzz test, and an
oracle for them that does not use isl.

A program is plain data (:class:`Program`): 1-3 statements over rectangular
boxes ``lo <= v < N - hi`` (``t`` in ``0 <= t < T``), each writing one element
of a shared float64 output buffer (at ``v + c``, a constant or ``v % 2``: the
storage may be folded, several instances writing one element, and shared,
several statements writing one buffer) and reading 1-3 values: elements of
shared buffers at constant offsets (memory), or an earlier statement's value
by name (:class:`Named`: ``s0[i - 1, j]``, in ``s0``'s own coordinates,
guarded by a ``tp.select`` that reads it only inside ``s0``'s domain, else
0.0).  :func:`source` turns it into DSL code and :func:`build` runs exactly
that code, so a failure's reproducer is the text that was run.

The oracle that judges them, and the interpreter that computes their
reference, are :mod:`tests.fuzz_oracle`."""
from __future__ import annotations

from dataclasses import dataclass

from hypothesis import strategies as st

from tiramisu_py.commands.state import state_of

SPATIAL = ("i", "j", "k")
BUFS = ("A", "B", "C")


# ------------------------------------------------------------------ programs
@dataclass(frozen=True)
class Acc:
    buf: str
    idx: tuple            # per dimension: ("v", var, offset), ("c", value) or ("m", var, 2)


@dataclass(frozen=True)
class Named:
    """A read of statement ``stmt``'s value by name, at the instance ``idx``
    (one index per loop of that statement: ("v", var, offset) or ("c",
    value)), guarded: outside that statement's domain it reads nothing and
    is 0.0."""
    stmt: int
    idx: tuple


@dataclass(frozen=True)
class Stmt:
    name: str
    loops: tuple          # loop names, outermost first
    write: Acc
    reads: tuple          # Accs (buffer reads: memory) and Nameds (values)
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
                if isinstance(a, Named):
                    continue        # guarded: reads only inside the named domain
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
    if d[0] == "m":
        return f"{d[1]} % {d[2]}"
    _, v, off = d
    return v if off == 0 else f"{v} {'+' if off > 0 else '-'} {abs(off)}"


def _acc_text(a):
    return f"{a.buf}[{', '.join(_index_text(d) for d in a.idx)}]"


def _hi_text(p, u):
    """The upper bound of loop ``u`` as a DSL expression."""
    if u == "t":
        return "f.param('T')"
    hs = p.bounds()[u][1]
    return "f.param('N')" + (f" - {hs}" if hs else "")


def guard_texts(p, r: Named):
    """The conditions (DSL code) under which the instance ``r`` names is in
    the named statement's domain, those that always hold left out."""
    b = p.bounds()
    out = []
    for u, d in zip(p.stmts[r.stmt].loops, r.idx):
        lo_u, hs_u = b[u]
        if d[0] == "c":
            assert d[1] >= lo_u, (r, b)
            out.append(f"{_hi_text(p, u)} > {d[1]}")
            continue
        _, v, off = d
        lo_v, hs_v = b[v]
        if lo_v + off < lo_u:
            out.append(f"{_index_text(d)} >= {lo_u}")
        if (u == "t") != (v == "t") or (u == v == "t" and off > 0) \
                or (u != "t" and off - hs_v > -hs_u):
            out.append(f"{_index_text(d)} < {_hi_text(p, u)}")
    return out


def _read_text(p, r):
    if isinstance(r, Acc):
        return _acc_text(r)
    text = f"{p.stmts[r.stmt].name}[{', '.join(_index_text(d) for d in r.idx)}]"
    conds = guard_texts(p, r)
    if not conds:
        return text
    cond = conds[0] if len(conds) == 1 else " & ".join(f"({c})" for c in conds)
    return f"tp.select({cond}, {text}, 0.0)"


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
        expr = " + ".join(["1.0"] + [f"{c!r} * {_read_text(p, a)}"
                                     for c, a in zip(s.coefs, s.reads)])
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
    # a pipeline: s0 reads A and alone writes C, folded over its outer loop
    # (a row, a cell); s1 reads A and B, writes B and reads s0's values by
    # name: a schedule that runs it inside s0's outer loop (fuse) can make
    # it legal
    pipeline = n == 2 and draw(st.integers(0, 3)) > 0
    if pipeline:
        bufs = BUFS
    nest = draw(st.sampled_from((None, None, "t", "i")))
    span = (0, 0)
    if nest is not None:
        a = draw(st.integers(0, n - 1))
        span = (a, draw(st.integers(a + 1, n)))
    stmts = []

    def nested(k):
        return nest is not None and span[0] <= k < span[1]
    for k in range(n):
        if nested(k):
            pool = [v for v in SPATIAL if v != nest]
            own = draw(st.permutations(pool).map(tuple))[:draw(st.integers(0, 2))]
            loops = (nest,) + own
        elif pipeline and k and not nested(0):
            loops = stmts[0].loops                 # the producer's loops: fusable
        else:
            loops = draw(st.permutations(SPATIAL).map(tuple))[:draw(st.integers(1, 3))]
        spatial = [v for v in loops if v != "t"]

        def index():
            kind = draw(st.integers(0, 9)) if spatial else 0
            if kind == 1:
                return ("m", draw(st.sampled_from(spatial)), 2)     # folded by parity
            if kind > 1:
                return ("v", draw(st.sampled_from(spatial)), draw(st.integers(-1, 1)))
            return ("c", draw(st.integers(0, 1)))

        def access(write=False):
            pool = bufs if not pipeline else ("B",) if write else ("A",) if k == 0 else ("A", "B")
            return Acc(draw(st.sampled_from(pool)), tuple(index() for _ in range(rank)))

        def folded():
            inner = [v for v in loops[1:] if v != "t"]
            if inner and draw(st.integers(0, 3)) < 3:
                return ("v", draw(st.sampled_from(inner)), 0)
            return ("c", 0)

        def named_index(u):
            """An index of the named statement's loop ``u``: mostly the
            reader's own ``u`` at an offset; another of its loops; or 1
            (every loop's lower bound is 0 or 1)."""
            kind = draw(st.integers(0, 5))
            if u in loops and kind < 4:                # in a pipeline, mostly the same instance
                return ("v", u, 0 if pipeline and kind < 3 else draw(st.integers(-1, 1)))
            if kind < 5:
                return ("v", draw(st.sampled_from(loops)), draw(st.integers(-1, 1)))
            return ("c", 1)

        def read():
            if k and draw(st.integers(0, 1 if pipeline else 2)) == 0:
                j = draw(st.integers(0, k - 1))        # an earlier statement, by name
                return Named(j, tuple(named_index(u) for u in stmts[j].loops))
            return access()
        if pipeline and k == 0:
            write = Acc("C", tuple(folded() for _ in range(rank)))
        else:
            write = access(write=True)
        reads = tuple(read() for _ in range(draw(st.integers(1, 3))))
        coefs = tuple(draw(st.sampled_from(COEFS)) for _ in reads)
        stmts.append(Stmt(f"s{k}", loops, write, reads, coefs))
    fixed = draw(st.sampled_from((None, None, None, 3, 4, 5, 6)))
    return Program(rank, bufs, nest, span, tuple(stmts), fixed)


OPS = ("interchange", "reorder", "skew", "shift", "reverse", "split", "tile",
       "parallelize", "parallelize", "vectorize", "unroll", "after", "then", "collapse",
       "fuse")       # fuse: a reader after the statement it names (folded storage's fix)


def draw_command(data, p, f, op=None):
    """One command (``op``, else a random one) as a line of DSL code, its
    arguments picked among the statement's current loops (None when the op
    does not fit)."""
    state = state_of(f)
    names = [s.name for s in p.stmts]
    s = data.draw(st.sampled_from(names), label="stmt")
    loops = [lp.name for lp in state[s].loops]
    op = op or data.draw(st.sampled_from(OPS), label="op")
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
    if op == "fuse":
        pairs = sorted({(k, r.stmt) for k, x in enumerate(p.stmts) for r in x.reads
                        if isinstance(r, Named)})
        if not pairs:
            return None
        k, j = data.draw(st.sampled_from(pairs), label="named pair")
        olo = [lp.name for lp in state[names[j]].loops]
        return f"{names[k]}.after({names[j]}, {data.draw(st.sampled_from(olo))!r})"
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
    (``counts``: a Counter of the commands drawn, by op).  Half the programs
    that read by name start with a fuse (a reader after the statement it
    names), the schedule that makes folded storage legal."""
    p = data.draw(programs(), label="program")
    params = {"N": p.fixed_n if p.fixed_n is not None else data.draw(st.integers(3, 6), label="N")}
    if "T" in p.params:
        params["T"] = data.draw(st.integers(1, 3), label="T")
    f, ns = build(p)
    cmds = []
    fuse = any(isinstance(r, Named) for s in p.stmts for r in s.reads) \
        and data.draw(st.booleans(), label="fuse first")
    want = data.draw(st.integers(1, max_commands), label="n_commands")
    for attempt in range(3 * want):
        if len(cmds) == want:
            break
        line = draw_command(data, p, f, "fuse" if fuse and attempt == 0 else None)
        if line is None:
            continue
        counts["commands"] += 1
        if apply_command(ns, line):
            cmds.append(line)
            counts["op_" + line.split(".")[1].split("(")[0]] += 1
        else:
            counts["api_errors"] += 1
    return p, params, f, ns, cmds

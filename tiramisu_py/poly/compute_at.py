"""``P.compute_at(C, loop)``: the producer P (with its updates: the *group*)
is recomputed inside ``C``'s loops up to ``loop``, for exactly the region of P
that one iteration of those loops reads (overlapping regions are recomputed).

Model: each group member X becomes X'[o, v] with ``o`` the values of C's outer
loops (``tp_o0, tp_o1, ...``) and ``v`` X's own loops, over the footprint
F_X = { [o] -> X[v] : X[v] writes an element of P that C reads at some c with
outer(c) = o }.  X' is placed right before C inside those loops.

Dependences of the original program are carried over to the copies:
  * within the group: between copies of the same o;
  * group -> C (C reads P): from the copy of C's own iteration o = outer(c);
  * anything else touching the group: to or from every copy.
Copies of different iterations rewrite the same elements with the same values
(P's inputs are not modified in between, which the rules above enforce), so
those pairs are not ordering constraints; they are still conflicts that forbid
running the iterations in parallel, since they share P's buffer."""
from __future__ import annotations

import islpy as isl

from ..base.errors import IllegalScheduleError
from ..lang import affine
from ..lang.affine import NonAffine
from ..lang.expr import Access, walk
from .dataflow import value_flow


def outer_names(d):
    return [f"tp_o{k}" for k in range(d)]


class ComputeAt:
    """The footprint relations of one compute_at, built on demand."""

    def __init__(self, model, state, producer, consumer, depth, outer=None):
        self.model, self.producer, self.consumer, self.depth = model, producer, consumer, depth
        self.state = state
        self.outer = outer      # the ComputeAt that moved the consumer, if any
        cs = state[consumer]
        self.outer_exprs = [lp.expr for lp in cs.loops[:depth]]
        self.group = [producer] + [u.name for u in model.by_name[producer].stmt.updates]
        self.buffer = [a for a in model.by_name[producer].accesses if a.write][0].buffer.name
        self._outer_map = None
        self._fp = self._footprint()

    def consumer_domain(self) -> isl.Set:
        """C's instances: its copies C'[o', c] when C is itself computed at
        another statement (nested compute_at), else its own domain."""
        m = self.model
        if self.outer is not None:
            return self.outer.member_domain(self.consumer)
        return m.domain(m.by_name[self.consumer])

    def _consumer_map(self, outs, name):
        """{ C[c] -> name[outs] } over C's instances (``outs``: affine texts in
        C's coordinates)."""
        m = self.model
        cvars = m.tuple_vars(m.by_name[self.consumer], self.state)
        rel = isl.Map(f"{m.prefix()}{{ {self.consumer}[{', '.join(cvars)}] -> {name}"
                      f"[{', '.join(f'q{k}' for k in range(len(outs)))}] : "
                      + (" and ".join(f"q{k} = {e}" for k, e in enumerate(outs)) or "true")
                      + " }", context=m.ctx)
        return rel.intersect_domain(self.consumer_domain())

    def _footprint(self):
        """F = { [o] -> P[p] } of the producer's own domain."""
        m, pm = self.model, self.model.by_name[self.producer]
        cm = self.model.by_name[self.consumer]
        pstmt = pm.stmt
        reads = [n for n in walk(cm.stmt.value) if isinstance(n, Access) and n.target is pstmt]
        if not reads:
            raise ValueError(f"compute_at: {self.consumer} does not read {self.producer}")
        outer = self.outer_of_consumer().reverse()                    # [o] -> C[c]
        rel = None
        for r in reads:
            try:
                idx = [affine.text(e, values=m.f.fixed) for e in r.indices]
            except NonAffine as exc:
                raise ValueError(f"compute_at: {self.consumer} reads {r!r} at a non-affine "
                                 f"index ({exc})") from None
            part = outer.apply_range(self._consumer_map(idx, self.producer))
            rel = part if rel is None else rel.union(part)
        return rel.intersect_range(m.domain(pm)).coalesce()

    def member_domain(self, name) -> isl.Set:
        """X'[o, v]: the copies of group member ``name``."""
        m = self.model
        xm = m.by_name[name]
        if name == self.producer:
            fx = self._fp
        else:
            # update instances whose written element lies in the footprint
            s = xm.stmt
            lhs = [affine.text(e, values=m.f.fixed) for e in s.lhs]
            w = isl.Map(f"{m.prefix()}{{ {name}[{', '.join(v.name for v in xm.vars)}] -> "
                        f"{self.producer}[{', '.join(lhs)}] }}", context=m.ctx)
            w = w.intersect_domain(m.domain(xm))
            fx = self._fp.apply_range(w.reverse())
        # flatten [o] -> X[v] into X[o, v]
        flat = fx.wrap().flatten()
        names = outer_names(self.depth) + [v.name for v in xm.vars]
        flat = flat.set_tuple_name(name)
        for k, n in enumerate(names):
            flat = flat.set_dim_name(isl.dim_type.set, k, n)
        return flat

    def copies(self, name) -> isl.Map:
        """R_X = { X[v] -> X[o, v] } over the footprint."""
        dom = self.member_domain(name)
        n = self.model.by_name[name]
        v = ", ".join(x.name for x in n.vars)
        o = ", ".join(outer_names(self.depth))
        r = isl.Map(f"{self.model.prefix()}{{ {name}[{v}] -> {name}[{o}, {v}] }}",
                    context=self.model.ctx)
        return r.intersect_range(dom)

    def outer_of_consumer(self) -> isl.Map:
        """{ C[c] -> [o] } (built once: the footprint and every dependence
        into C use it)."""
        if self._outer_map is None:
            self._outer_map = self._consumer_map(self.outer_exprs, "")
        return self._outer_map

    def same_o(self, a, b, equal=True) -> isl.Map:
        am, bm = self.model.by_name[a], self.model.by_name[b]
        o1 = [f"a{k}" for k in range(self.depth)]
        o2 = [f"b{k}" for k in range(self.depth)]
        va = [f"x_{v.name}" for v in am.vars]
        vb = [f"y_{v.name}" for v in bm.vars]
        rel = " and ".join(f"{x} = {y}" for x, y in zip(o1, o2)) if equal else \
            "(" + " or ".join(f"{x} != {y}" for x, y in zip(o1, o2)) + ")"
        return isl.Map(f"{self.model.prefix()}{{ {a}[{', '.join(o1 + va)}] -> "
                       f"{b}[{', '.join(o2 + vb)}] : {rel or 'true'} }}", context=self.model.ctx)

    def _pairs(self, s, t, src_writes, dst_writes):
        """{ S[v] -> T[w] : S's access (a write if src_writes) and T's access (a
        write if dst_writes) touch one element of the producer's buffer }."""
        ms, mt = self.model.by_name[s], self.model.by_name[t]
        rel = None
        for a in ms.accesses:
            if a.buffer.name != self.buffer or a.write != src_writes:
                continue
            for b in mt.accesses:
                if b.buffer.name != self.buffer or b.write != dst_writes:
                    continue
                am, _ = self.model.access_map(ms, a)
                bm, _ = self.model.access_map(mt, b)
                r = am.apply_range(bm.reverse())
                rel = r if rel is None else rel.union(r)
        if rel is None:
            v = ", ".join(x.name for x in ms.vars)
            w = ", ".join(f"y_{x.name}" for x in mt.vars)
            rel = isl.Map(f"{self.model.prefix()}{{ {s}[{v}] -> {t}[{w}] : false }}",
                          context=self.model.ctx)
        return rel

    def _check_no_collision(self, m, s, same):
        """Two different instances of one producer statement writing one element
        within a single iteration: storage folding lost a value still needed."""
        ww = self.copies(s).reverse().apply_range(m.intersect(self._pairs(s, s, True, True))) \
            .apply_range(self.copies(s)).intersect(self.same_o(s, s))
        n = len(self.model.by_name[s].vars)
        d = self.depth
        differ = isl.Map(f"{self.model.prefix()}{{ {s}[{', '.join(f'a{k}' for k in range(d + n))}] -> "
                         f"{s}[{', '.join(f'b{k}' for k in range(d + n))}] : "
                         + " or ".join(f"a{k} != b{k}" for k in range(d, d + n)) + " }",
                         context=self.model.ctx)
        bad = ww.intersect(differ)
        if not bad.is_empty():
            pt = bad.wrap().sample_point()
            raise IllegalScheduleError(
                f"{self.producer}.compute_at({self.consumer}, ...): within one iteration two "
                f"instances of {s} write the same element of {self.buffer!r} (its storage is "
                f"folded too tightly for the region one iteration needs), e.g. {pt}")

    def _own_copy_missing(self, cross, s, t):
        """The pairs of ``cross`` whose source has no copy in the sink's iteration."""
        if cross.is_empty():
            return cross
        sm, tm = self.model.by_name[s], self.model.by_name[t]
        d = self.depth
        a = [f"a{k}" for k in range(d)]
        b = [f"b{k}" for k in range(d)]
        v = [f"v{k}" for k in range(len(sm.vars))]
        w = [f"w{k}" for k in range(len(tm.vars))]
        own = isl.Map(f"{self.model.prefix()}{{ [{s}[{', '.join(a + v)}] -> "
                      f"{t}[{', '.join(b + w)}]] -> {s}[{', '.join(b + v)}] }}",
                      context=self.model.ctx)
        bad = own.intersect_domain(cross.wrap()).subtract_range(self.member_domain(s))
        return bad.domain().unwrap()

    def transform(self, m: isl.Map, buffer: str):
        """A dependence map S -> T through ``buffer`` of the original program,
        as (ordering constraints, parallel-only conflicts) over the copies."""
        s = m.get_tuple_name(isl.dim_type.in_)
        t = m.get_tuple_name(isl.dim_type.out)
        gs, gt = s in self.group, t in self.group
        if not gs and not gt:
            return m.to_union_map(), None
        if buffer != self.buffer:
            # through another array (P's inputs): every copy keeps the order
            if gs and gt:
                return self.copies(s).reverse().apply_range(m).apply_range(
                    self.copies(t)).to_union_map(), None
            if gs:
                return self.copies(s).reverse().apply_range(m).to_union_map(), None
            return m.apply_range(self.copies(t)).to_union_map(), None
        if gs and gt:
            full = self.copies(s).reverse().apply_range(m).apply_range(self.copies(t))
            same = full.intersect(self.same_o(s, t))
            cross = full.intersect(self.same_o(s, t, False))
            if s == t == self.producer:     # (updates accumulate into one element)
                self._check_no_collision(m, s, same)
            # across iterations, X'[o, v] -> Y'[o', w] is storage reuse (or an equal
            # rewrite) unless it is a flow of a value whose source has no copy in
            # the sink's own iteration: then Y' reads what another iteration
            # computed.  Value-based: a read whose element its own iteration
            # rewrote first (an update after its init) does not see the other
            # iteration's write, though it touches the same folded element.
            flows = value_flow(self.model, self.buffer).intersect(m.to_union_map())
            flow = self.copies(s).reverse().apply_range(flows.extract_map(m.get_space())) \
                .apply_range(self.copies(t)).intersect(self.same_o(s, t, False))
            missing = self._own_copy_missing(flow, s, t)
            return (same.union(missing).to_union_map(),
                    cross.subtract(missing).to_union_map())
        if gs and t == self.consumer:
            # X[v] -> C[c] becomes X[outer(c), v] -> C[c]
            oc = self.outer_of_consumer()
            pairs = m.reverse().range_product(oc)          # C[c] -> [X[v] -> [o]]
            flat = pairs.flatten_range()                   # C[c] -> [v..., o...]
            xm = self.model.by_name[s]
            nv = len(xm.vars)
            # reorder to [o..., v...] and name it X
            perm = isl.Map(f"{{ [{', '.join(f'v{k}' for k in range(nv))}, "
                           f"{', '.join(f'q{k}' for k in range(self.depth))}] -> "
                           f"{s}[{', '.join([f'q{k}' for k in range(self.depth)] + [f'v{k}' for k in range(nv)])}] }}",
                           context=self.model.ctx)
            mine = flat.apply_range(perm).reverse()        # X[o, v] -> C[c]
            everything = self.copies(s).reverse().apply_range(m)
            return mine.to_union_map(), everything.subtract(mine).to_union_map()
        if gs:
            return self.copies(s).reverse().apply_range(m).to_union_map(), None
        return m.apply_range(self.copies(t)).to_union_map(), None

"""Compiling and running a distributed Function (``s.distribute(loop)``).

**Design: the Python side issues the messages (mpi4py) between calls of one
compiled kernel per rank.**  The kernel is the user's Function with every
distributed buffer stored as the rank's rows ``[off, off + dist_rows)`` of the
distributed dimension (indices shifted by ``dist_off``) and each statement's
domain restricted, with constraints over ``dist_`` params, to one phase
(``dist_phase``), a box of iterations of the outer loops
(``dist_from_<loop> <= loop < dist_to_<loop>``) and the rank's block of the
distributed loop (``dist_lo <= v < dist_hi``); the user's
other commands (tile, vectorize, parallelize, ...) apply inside it, on
both CPU backends.  :class:`DistributedKernel` runs it phase by phase and
exchanges, after each, the regions :func:`tiramisu_py.analysis.distribution.messages`
derives (packed with NumPy fancy indexing, sent with ``Isend``/``Irecv``).
Reasons: the generated code and both CPU backends stay MPI-free (no mpicc
needed to compile, the same cached kernels), mpi4py already owns MPI's
initialisation and abort, and one Python call per phase and step costs
microseconds against a network's latency of the same order.  While a phase's
messages are in flight the next phase runs its rows that read none of them;
the price is a NumPy copy each way per message and at least one kernel call
per phase and step (docs/DESIGN.md, docs/internals/distribution.md)."""
from __future__ import annotations

import numpy as np
import islpy as isl

from ..analysis import distribution
from ..lang.expr import Access, BinOp, Call, Cast, Const, ParamRef, Select, UnOp, Var
from ..lang.program import Buffer
from ..poly.model import build_model
from ..runtime import mpi
from .compile import compile_function

DIST_PARAMS = ("dist_lo", "dist_hi", "dist_off", "dist_rows", "dist_phase")


def compile_distributed(f, target):
    model = build_model(f)
    plan = distribution.plan(f, model)
    g = rank_function(f, plan)
    return DistributedKernel(f, plan, compile_function(g, target))


def rank_function(f, plan):
    """The Function one rank compiles (see the module's docstring)."""
    g = f.copy()
    for c in g.computations.values():
        if getattr(c, "_auto_buffer", False):         # give it as store_in would
            g.buffers[c.name] = c.buffer
            c._auto_buffer = False
    for name in DIST_PARAMS + tuple(f"dist_{w}_{o}" for o in plan.outer for w in ("from", "to")):
        if name in g._names:
            raise ValueError(f"distribute: the name {name!r} is used in {f.name!r}; the "
                             "distributed kernel takes it as a param (rename yours)")
        g.params[name] = ParamRef(name)
        g._names.add(name)
    off = g.params["dist_off"]
    for name, d in plan.dims.items():
        b = g.buffers[name]
        b.shape = b.shape[:d] + (g.params["dist_rows"],) + b.shape[d + 1:]
        if b.kind == "temp":            # kept by the runtime between phases
            b.kind = "output"

    def shift(e):
        if isinstance(e, Access):
            idx = [shift(i) for i in e.indices]
            if isinstance(e.target, Buffer) and e.target.name in plan.dims:
                d = plan.dims[e.target.name]
                idx[d] = BinOp("sub", idx[d], off)
            return Access(e.target, idx)
        if isinstance(e, (Const, ParamRef, Var)):
            return e
        if isinstance(e, BinOp):
            return BinOp(e.op, shift(e.a), shift(e.b))
        if isinstance(e, UnOp):
            return UnOp(e.op, shift(e.a))
        if isinstance(e, Call):
            return Call(e.func, [shift(a) for a in e.args])
        if isinstance(e, Select):
            return Select(shift(e.cond), shift(e.a), shift(e.b))
        if isinstance(e, Cast):
            return Cast(e.to, shift(e.a))
        raise TypeError(f"distribute: cannot rewrite {e!r}")

    for s in g.statements:
        s.value = shift(s.value)
        if not s.is_update and s.buffer.name in plan.dims:
            d = plan.dims[s.buffer.name]
            idx = [shift(i) for i in s.store_index]
            idx[d] = BinOp("sub", idx[d], off)
            s.store_index = idx
        elif s.is_update:
            s.lhs = tuple(shift(i) for i in s.lhs)
    g._restrict = {s.name: [f"dist_phase = {k}", f"dist_lo <= {plan.loops[s.name]} < dist_hi"]
                   + [f"dist_from_{o} <= {o} < dist_to_{o}" for o in plan.outer]
                   for k, s in enumerate(g.statements)}
    g._commands[:] = [c for c in g._commands if c.op != "distribute"]
    # the restriction is part of the algorithm: a warm entry of g is keyed by it
    g._commands.append(_restrict_marker(g))
    g._state_cache = g._model_cache = None
    return g


def _restrict_marker(g):
    from ..lang.schedule import Command
    return Command(g.statements[0].name, "restricted", (repr(sorted(g._restrict.items())),), {},
                   "the distributed part of a rank")


class DistributedKernel:
    """The callable of a distributed Function: call it on every rank with
    the rank's blocks of the distributed arrays (as :func:`tiramisu_py.mpi.scatter`
    gives them), the replicated arrays whole and the global params; it
    returns the rank's blocks of the outputs (a dict when several) and
    updates the blocks passed as outputs in place (an empty domain, e.g. no
    outer iteration: unchanged, as without ``distribute``).  ``comm_stats``: the
    last call's messages and bytes on this rank (``initial_*``: the first
    halo exchange; ``steps``: the outer iterations run)."""

    def __init__(self, f, plan, kernel):
        self.f, self.plan, self.kernel = f, plan, kernel
        self.name = f.name
        self.source = kernel.source
        self.comm_stats = None
        self._cache = {}
        user_outputs = {b.name for b in plan.model.outputs}   # not the temps kept between phases
        self._out_names = [b.name for b in kernel.outputs if b.name in user_outputs]

    def __call__(self, comm=None, **kwargs):
        comm = comm if comm is not None else mpi.comm_world()
        size, rank = comm.Get_size(), comm.Get_rank()
        k = self.kernel
        names = {b.name: b for b in k.inputs + k.outputs}
        arrays, values = {}, {}
        for key, v in kwargs.items():
            if key in names:
                arrays[key] = v
            elif key in self.f.params and key not in self.f.fixed:
                if isinstance(v, bool) or not isinstance(v, (int, np.integer)):
                    raise TypeError(f"param {key!r} must be an int, not {type(v).__name__}")
                values[key] = int(v)
            else:
                raise TypeError(f"{self.name}() got an unexpected argument {key!r}; it takes "
                                f"{', '.join(list(names) + [p for p in self.f.params])}")
        self._infer(arrays, values, comm)
        e = distribution.affine_value(self.plan.extent, values, self.plan.model)
        lo, hi = mpi.block_range(e, size, rank)
        key = (tuple(sorted(values.items())), size, rank)
        if key not in self._cache:
            self._cache[key] = _Schedule(self.plan, values, size, rank)
        sch = self._cache[key]
        local = {}
        for name, b in names.items():
            d = self.plan.dims.get(name)
            a = arrays.get(name)
            if d is None:
                if a is not None:
                    local[name] = a
                continue
            if a is not None:
                a = np.asarray(a)
                if a.ndim != len(b.shape) or a.shape[d] != hi - lo:
                    raise ValueError(f"argument {name!r} has shape {a.shape}: rank {rank} of "
                                     f"{size} holds rows [{lo}, {hi}) of dimension {d} "
                                     f"(extent {e}; tiramisu_py.mpi.block_range)")
            shape = list(a.shape) if a is not None else None
            if shape is None:
                shape = [distribution.affine_value(s, values, self.plan.model)
                         for s in self.f.buffers[name].shape] if name in self.f.buffers \
                    else [distribution.affine_value(s, values, self.plan.model)
                          for s in self.plan.model.f.computations[name].buffer.shape]
            shape[d] = sch.rows
            buf = np.zeros(shape, dtype=b.dtype.name)
            if a is not None:
                _rows(buf, d, lo - sch.off, hi - sch.off)[...] = a
            local[name] = buf
        before = mpi.stats()
        sch.finish(sch.start(comm, None, None, local))
        initial = mpi.stats()
        params = dict(values, dist_off=sch.off, dist_rows=sch.rows)
        pending, run = None, _Runner(k, local, sch.outer_points, self.plan.outer)
        for o in sch.outer_points:
            params.update({f"dist_{w}_{n}": v + (w == "to") for n, v in zip(self.plan.outer, o)
                           for w in ("from", "to")})
            for phase in range(len(self.plan.phases)):
                # interior rows while the previous phase's messages are in
                # flight, the rows that read them after the wait
                ranges = [(lo, hi)] if pending is None else sch.interior(phase, lo, hi)
                run(params, phase, *ranges[0])
                sch.finish(pending)
                for a, b in ranges[1:]:
                    run(params, phase, a, b)
                pending = sch.start(comm, phase, o, local)
        sch.finish(pending)
        after = mpi.stats()
        self.comm_stats = {x: after[x] - before[x] for x in after}
        self.comm_stats.update({f"initial_{x}": initial[x] - before[x] for x in after})
        self.comm_stats["steps"] = len(sch.outer_points)
        out = {}
        for name in self._out_names:
            d = self.plan.dims.get(name)
            block = local[name] if d is None else _rows(local[name], d, lo - sch.off, hi - sch.off)
            if name in arrays and d is not None:
                arrays[name][...] = block
                out[name] = arrays[name]
            else:
                out[name] = block.copy() if d is not None else block
        return out[self._out_names[0]] if len(out) == 1 else out

    def _infer(self, arrays, values, comm):
        """Params from the arrays' shapes (the distributed extent from the
        sum of the ranks' blocks)."""
        total = None
        for name, a in arrays.items():
            shape = self._global_shape(name)
            d = self.plan.dims.get(name)
            for k, (s, n) in enumerate(zip(shape, np.shape(a))):
                if k == d:
                    total = n if total is None else total
                    continue
                if isinstance(s, ParamRef) and s.name not in values:
                    values[s.name] = int(n)
        rows = comm.allreduce(-1 if total is None else total)
        ext = self.plan.extent
        if isinstance(ext, ParamRef) and ext.name not in values and total is not None:
            values[ext.name] = rows

    def _global_shape(self, name):
        if name in self.f.buffers:
            return self.f.buffers[name].shape
        return self.plan.model.f.computations[name].buffer.shape


class _Runner:
    """Runs one phase on a range of rows: the first time for a (phase,
    rows) through the kernel's checked call, and its bounds proved at once
    for every outer iteration of the call (the box of them); later steps
    through ``call_prechecked``.  Kernels with index arrays are checked
    every time."""

    def __init__(self, kernel, local, points, outer):
        self.kernel, self.local, self.checked = kernel, local, set()
        self.box = {}
        for k, n in enumerate(outer if points else ()):    # none: an empty domain, no call
            self.box[f"dist_from_{n}"] = min(p[k] for p in points)
            self.box[f"dist_to_{n}"] = max(p[k] for p in points) + 1
        self.always = bool(kernel.checker.value_arrays)

    def __call__(self, params, phase, lo, hi):
        if lo >= hi:
            return
        values = dict(params, dist_phase=phase, dist_lo=lo, dist_hi=hi)
        key = (phase, lo, hi)
        if self.always or key not in self.checked:
            self.kernel(**self.local, **values)
            self.kernel.checker.check(dict(values, **self.box), {}, None)
            self.checked.add(key)
        else:
            self.kernel.call_prechecked(self.local, values)


def _rows(a, d, lo, hi):
    return a[(slice(None),) * d + (slice(lo, hi),)]


class _Schedule:
    """One rank's messages for one call's params: index arrays per message,
    per outer iteration (computed once when a region does not depend on it)."""

    def __init__(self, plan, values, size, rank):
        self.plan = plan
        sends, recvs, (self.lo, self.hi), (self.off, self.rows) = \
            distribution.messages(plan, values, size, rank)
        self.sends, self.recvs = sends, recvs
        self.values, self.size, self.rank = values, size, rank
        self.outer_points = _outer_points(plan, values)
        self._index, self._interior, self._uniform, self._domains = {}, {}, {}, {}

    def _elements(self, msg, o):
        if isinstance(msg.region, isl.Map) and id(msg) not in self._uniform:
            m = msg.region
            self._uniform[id(msg)] = m.is_equal(isl.Map.from_domain_and_range(m.domain(),
                                                                              m.range()))
        varies = isinstance(msg.region, isl.Map) and not self._uniform[id(msg)]
        if isinstance(msg.region, isl.Map) and not varies:
            if id(msg) not in self._domains:
                self._domains[id(msg)] = _points_set(msg.region.domain())
            if o not in self._domains[id(msg)]:
                return None
        key = (id(msg), o if varies else None)
        if key not in self._index:
            s = msg.region
            if isinstance(s, isl.Map) and not varies:
                s = s.range()
            elif isinstance(s, isl.Map):
                pt = isl.Set(f"{{ O[{', '.join(map(str, o))}] }}", context=s.get_ctx())
                s = s.intersect_domain(pt.align_params(s.get_space().domain())).range()
            pts = _points(s)
            d = self.plan.dims[msg.buffer]
            if len(pts):
                pts[:, d] -= self.off
            self._index[key] = tuple(pts.T) if len(pts) else None
        return self._index[key]

    def interior(self, phase, lo, hi):
        """[(a, b), then the boundary ranges]: the block of ``phase`` split
        into the longest run of rows that read nothing of the previous
        phase's exchange (first) and the rest."""
        if phase not in self._interior:
            prev = (phase - 1) % len(self.plan.phases)
            wait = sorted(r for r in distribution.boundary(self.plan, self.values, self.size,
                                                           self.rank, prev, phase)
                          if lo <= r < hi)
            cuts = [lo - 1] + wait + [hi]
            a, b = max(zip(cuts, cuts[1:]), key=lambda c: c[1] - c[0])
            a += 1
            self._interior[phase] = [(a, b), (lo, a), (b, hi)]
        return self._interior[phase]

    def start(self, comm, phase, o, local):
        """Posts the exchange after ``phase`` of outer iteration ``o`` (None:
        the initial halo); returns what :meth:`finish` completes."""
        tag = 0 if phase is None else phase + 1
        sends, recvs = [], []
        for out, msgs in ((sends, self.sends), (recvs, self.recvs)):
            for msg in msgs:
                if msg.phase != phase:
                    continue
                idx = self._elements(msg, o)
                if idx is not None:
                    out.append((msg, idx))
        if not sends and not recvs:
            return None
        send_bufs = [(m.peer, np.ascontiguousarray(local[m.buffer][idx])) for m, idx in sends]
        recv_bufs = [(m.peer, np.empty(len(idx[0]), dtype=local[m.buffer].dtype))
                     for m, idx in recvs]
        return mpi.post(comm, send_bufs, recv_bufs, tag), send_bufs, recvs, recv_bufs, local

    @staticmethod
    def finish(pending):
        if pending is None:
            return
        reqs, _, recvs, recv_bufs, local = pending
        mpi.wait(reqs)
        for (m, idx), (_, buf) in zip(recvs, recv_bufs):
            local[m.buffer][idx] = buf


def _outer_points(plan, values):
    """The outer loops' iterations (sorted), for the call's params."""
    model = plan.model
    if not plan.outer:
        return [()]
    ctx = distribution.fixed_params(model, values)
    u = None
    for m in model.stmts:
        proj = isl.Map(f"{model.prefix()}{{ {m.name}[{', '.join(v.name for v in m.vars)}] -> "
                       f"O[{', '.join(plan.outer)}] }}", context=model.ctx)
        s = model.domain(m).intersect_params(ctx).apply(proj)
        u = s if u is None else u.union(s)
    pts = _points(u)
    return [tuple(int(x) for x in p) for p in pts]


def _points_set(s):
    return {tuple(int(x) for x in p) for p in _points(s)}


def _points(s):
    """The points of an isl set, as an (n, dims) int64 array in lexicographic order."""
    s = s.coalesce()
    n = s.dim(isl.dim_type.set)
    out = []
    s.foreach_point(lambda p: out.append([p.get_coordinate_val(isl.dim_type.set, k).to_python()
                                          for k in range(n)]))
    arr = np.array(out, dtype=np.int64).reshape(-1, n)
    if len(arr):
        arr = arr[np.lexsort(arr.T[::-1])]
    return arr

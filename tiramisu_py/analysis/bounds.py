"""Call-time proofs that a kernel stays inside its arrays.

With the call's param values known, every access relation is affine (a
``y*W`` index becomes ``64*y``).  Loads that feed bounds (``rowptr[co]``) or
indices (``colidx[j]``) become variables ranging over the values the argument
actually holds.  isl then proves, for every access, that no instance of the
statement touches an element outside its array; otherwise the call is refused
with the argument to blame and one offending instance.  Results are cached per
(params, value ranges)."""
from __future__ import annotations

import islpy as isl

from ..lang import affine
from ..lang.affine import NonAffine
from ..lang.expr import Access, Var, walk


class BoundsChecker:
    def __init__(self, model):
        self.model = model
        self.cache = {}
        dd_vars = {v.name for m in model.stmts for v in m.vars if v.data_dependent}
        self.items = []
        for m in model.stmts:
            for a in m.accesses:
                uses_dd = any(isinstance(n, Var) and n.name in dd_vars
                              for e in a.index for n in walk(e))
                self.items.append((m, a, uses_dd))
        # arrays whose values feed bounds or indices
        self.value_arrays = sorted({ld.target.name for m in model.stmts
                                    for ld in m.bound_params.values()}
                                   | {ld.target.name for _, a, _ in self.items
                                      for e in a.index for ld in walk(e)
                                      if isinstance(ld, Access)})
        self.csr_pairs = self._csr_pairs()
        self.always = False          # proved for every param value: calls check nothing

    def prove_all(self) -> bool:
        """At compile time: tries to prove every access in bounds for all
        param values at once (no index arrays; indices affine in loops and
        params).  Then :meth:`check` has nothing to do at call time (and a
        warm start needs no model).  Returns whether it succeeded."""
        if self.value_arrays:
            return False
        try:
            for m, a, _ in self.items:
                text, _, _ = self._bad_set_text(m, a, {}, lambda name: None)
                if not isl.Set(self.model.prefix() + text, context=self.model.ctx).is_empty():
                    return False
        except (NonAffine, isl.Error):
            return False
        self.always = True
        return True

    def _csr_pairs(self):
        """1-D arrays read as ``B[e]`` .. ``B[e + 1]`` bounds: row pointers,
        which must be non-decreasing."""
        out = set()
        for m in self.model.stmts:
            for v in m.vars:
                if isinstance(v.lo, Access) and isinstance(v.hi, Access) \
                        and v.lo.target is v.hi.target and len(v.lo.target.shape) == 1:
                    out.add((v.lo.target.name, v.name))
        return sorted(out)

    def dry_run(self):
        """At compile time: every index must become affine once params are
        known, or no call could be proved safe."""
        values = {p: 1 for p in self.model.f.params}
        for m, a, _ in self.items:
            try:
                self._bad_set_text(m, a, values, lambda name: (0, 0))
            except NonAffine as exc:
                raise ValueError(f"{m.name}: cannot prove {a.what} stays inside "
                                 f"{a.buffer.name!r}: its index is not affine in the loops "
                                 f"({exc})") from None

    def check(self, values: dict, ranges: dict, arrays: dict | None = None):
        """``values``: param -> int; ``ranges``: array name -> (min, max) of its
        values, or None when it is empty; ``arrays``: the index arrays' values
        (NumPy), to name the element that is out of range."""
        if self.always:
            return
        key = (tuple(sorted(values.items())), tuple(sorted(ranges.items())))
        if key in self.cache:
            return
        for m, a, uses_dd in self.items:
            text, names, placeholders = self._bad_set_text(m, a, values, ranges.get)
            bad = isl.Set(text, context=self.model.ctx)
            if not bad.is_empty():
                bad = self._offending(bad, names, placeholders, arrays or {})
                self._raise(m, a, uses_dd, bad, names, placeholders, values, ranges)
        if len(self.cache) > 256:
            self.cache.clear()
        self.cache[key] = True

    # ----------------------------------------------------------------- text
    def _bad_set_text(self, m, a, values, range_of):
        values = dict(self.model.f.fixed, **values)
        placeholders = []            # (name, load)
        cons = self.model.domain_constraints(m, values) + self.model.guard_constraints(a, values)
        for p, ld in m.bound_params.items():
            placeholders.append((p, ld))
        outs = []
        for k, e in enumerate(a.index):
            subst = {}
            for ld in [n for n in walk(e) if isinstance(n, Access)]:
                p = f"tp_x{len(placeholders)}"
                subst[id(ld)] = p
                placeholders.append((p, ld))
            o = f"o{k}"
            outs.append(o)
            cons.append(f"{o} = {affine.text(e, subst=subst, values=values)}")
        for p, ld in placeholders:
            r = range_of(ld.target.name)
            cons.append(f"{r[0]} <= {p} <= {r[1]}" if r is not None else "false")
        out_of = []
        for k, s in enumerate(a.buffer.shape):
            size = affine.text(s, values=values)
            out_of.append(f"o{k} < 0 or o{k} >= {size}")
        cons.append("(" + " or ".join(out_of) + ")" if out_of else "false")
        names = [v.name for v in m.vars] + [p for p, _ in placeholders] + outs
        return f"{{ [{', '.join(names)}] : {' and '.join(cons)} }}", names, placeholders

    @staticmethod
    def _offending(bad, names, placeholders, arrays):
        """``bad`` narrowed to an element the index array really holds: the
        first position of an index array whose value leads out of range,
        with the loops that read it set to that position when the load's
        indices are loops (``colidx[j]``: ``j`` = the position).  ``bad``
        itself when no such element is found (the values' range alone was
        enough to refuse)."""
        import numpy as np
        for p, ld in sorted(placeholders, key=lambda pl: not pl[0].startswith("tp_x")):
            vals = arrays.get(ld.target.name)
            if vals is None or vals.size == 0:
                continue
            k = names.index(p)
            proj = bad.project_out(isl.dim_type.set, k + 1, len(names) - k - 1) \
                .project_out(isl.dim_type.set, 0, k)
            flat = vals.reshape(-1).astype(np.int64)
            mask = np.zeros(flat.shape, bool)
            for piece in proj.get_basic_sets():
                piece = piece.to_set()
                lo, hi = piece.dim_min_val(0), piece.dim_max_val(0)
                if not (lo.is_int() and hi.is_int()):
                    continue
                mask |= (flat >= lo.to_python()) & (flat <= hi.to_python())
            if not mask.any():
                continue
            pos = np.unravel_index(int(np.argmax(mask)), vals.shape)
            cons = [f"{p} = {int(vals[pos])}"]
            if all(type(i).__name__ == "Var" and i.name in names for i in ld.indices):
                cons += [f"{i.name} = {int(x)}" for i, x in zip(ld.indices, pos)]
                for i, x in zip(ld.indices, pos):
                    cons += _row_of(i, int(x), names, placeholders, arrays)
            for c in (cons, cons[:1]):
                narrowed = bad.intersect(isl.Set(f"{{ [{', '.join(names)}] : {' and '.join(c)} }}",
                                                 context=bad.get_ctx()))
                if not narrowed.is_empty():
                    return narrowed
        return bad

    def _raise(self, m, a, uses_dd, bad, names, placeholders, values, ranges):
        pt = bad.sample_point()
        coords = {n: pt.get_coordinate_val(isl.dim_type.set, k).to_python()
                  for k, n in enumerate(names)}
        where = ", ".join(f"{v.name}={coords[v.name]}" for v in m.vars)
        idx = tuple(coords[f"o{k}"] for k in range(len(a.index)))
        shape = tuple(affine.text(s, values=dict(self.model.f.fixed, **values))
                      for s in a.buffer.shape)
        shape = tuple(int(s) if s.lstrip("-").isdigit() else s for s in shape)
        access = "writes" if a.write else "reads"
        detail = (f"{m.name}({where}) {access} {a.what} = {a.buffer.name}"
                  f"[{', '.join(map(str, idx))}], outside its shape {shape}")
        index_arrays = [ld.target.name for p, ld in placeholders if p.startswith("tp_x")]
        bound_arrays = [ld.target.name for p, ld in placeholders if p.startswith("tp_b")]
        blame = index_arrays or (bound_arrays if uses_dd else [])
        if blame:
            name = blame[0]
            lo, hi = ranges[name] if ranges.get(name) else ("-", "-")
            held = [f"{ld.target.name}[{', '.join(str(_value(i, coords)) for i in ld.indices)}]"
                    f" = {coords[p]}" for p, ld in placeholders if p.startswith("tp_x")
                    and all(_value(i, coords) is not None for i in ld.indices)]
            raise ValueError(f"argument {name!r} holds values in [{lo}, {hi}] that index out "
                             f"of range: {detail}" + (f" ({', '.join(held)})" if held else ""))
        params = ", ".join(f"{k}={v}" for k, v in sorted(values.items()))
        raise IndexError(f"out-of-bounds access for {params or 'these sizes'}: {detail}")


def _row_of(v, x, names, placeholders, arrays):
    """For a loop ``v`` over row pointers (``ptr[o] <= v < ptr[o + 1]``) at
    ``v = x``: the constraints that put the outer loop ``o`` on the row that
    holds ``x``, and the bound placeholders on that row's pointers."""
    import numpy as np
    lo, hi = getattr(v, "lo", None), getattr(v, "hi", None)
    if not (isinstance(lo, Access) and isinstance(hi, Access) and lo.target is hi.target
            and len(lo.indices) == 1 and isinstance(lo.indices[0], Var)
            and lo.indices[0].name in names):
        return []
    ptr = arrays.get(lo.target.name)
    if ptr is None or ptr.ndim != 1 or ptr.size < 2:
        return []
    row = int(np.searchsorted(ptr, x, side="right")) - 1
    if not 0 <= row < ptr.size - 1:
        return []
    out = [f"{lo.indices[0].name} = {row}"]
    for p, ld in placeholders:
        if ld is lo:
            out.append(f"{p} = {int(ptr[row])}")
        elif ld is hi:
            out.append(f"{p} = {int(ptr[row + 1])}")
    return out


def _value(e, coords):
    """The value of the index ``e`` at the point ``coords`` (loop -> int),
    or None when it is not a plain loop or constant."""
    if type(e).__name__ == "Var":
        return coords.get(e.name)
    v = getattr(e, "value", None)
    return v if isinstance(v, int) else None

"""C backend: the parallel regions a kernel opens (:mod:`codegen.regions`
forms them from the loop IR): adjacent parallel loops, a stepped loop, or
both, in one ``#pragma omp parallel`` (:meth:`RegionsMixin.region`).  Mixed into the C printer (its ``out``, ``helper``,
``for_header``, ``worksharing_loop``, ``omp``, ``in_parallel``,
``loop_depth``).

This module imports nothing from ``tiramisu_py``."""
from __future__ import annotations

from .. import ir, regions


class RegionsMixin:
    """Needs :class:`codegen.c.emit.CPrinter`."""

    def parallel_run(self, stmts, k) -> list:
        """The adjacent plain parallel loops from ``stmts[k]`` on (no reduction,
        outside any OpenMP region): they share one parallel region."""
        run = []
        while k < len(stmts) and self.omp is None and not self.in_parallel:
            st = stmts[k]
            if not (isinstance(st, ir.For) and st.kind == "parallel"
                    and not st.attrs.get("reduction")):
                break
            run.append(st)
            k += 1
        return run

    def region(self, members: list, ind: int) -> None:
        """Parallel loops and stepped loops (:func:`codegen.regions.stepped_loops`)
        one after the other in one ``#pragma omp parallel`` region (the groups
        :mod:`codegen.regions` forms: adjacent parallel loops, a stepped
        region, a mixed one): each plain loop an ``omp for`` (OpenMP's
        barrier after it: the user's wait policy), each stepped loop run by
        every thread around its inner ``omp for nowait`` loops, the
        generated barrier (``tp_barrier``) after each of those.  One
        fork/join instead of one per loop."""
        stepped = [x for x in members if regions.stepped_loops(x)]
        if stepped:
            bar = ("tp_steps_" if len(members) == 1 else "tp_region_") + members[0].var
            self.helper("tp_barrier")
            if len(members) == 1:
                inner = regions.stepped_loops(members[0])
                self.out(ind, f"/* loop {members[0].var} around parallel loop(s) "
                              f"{', '.join(x.var for x in inner)}: one region, a barrier after each */")
            else:
                self.out(ind, f"/* loops {', '.join(x.var for x in members)}: one region, "
                              "a barrier after each parallel loop */")
            self.out(ind, "{")
            ind += 1
            self.out(ind, f"tp_barrier_t {bar} = {{0, 0, 0}};")
        self.out(ind, "#pragma omp parallel")
        self.out(ind, "{")
        saved = (self.omp, self.in_parallel, self.runs)
        self.omp, self.in_parallel, self.runs = "parallel", True, {}
        for x in members:
            inner = regions.stepped_loops(x)
            if inner:
                self.out(ind + 1, self.for_header(x, ir.check_loop(x, "C backend")))
                self.loop_depth += 1
                for y in inner:
                    self.worksharing_loop(y, ind + 2, "#pragma omp for nowait")
                    self.out(ind + 2, f"tp_barrier(&{bar});")
                self.loop_depth -= 1
                self.out(ind + 1, "}")
            else:
                self.worksharing_loop(x, ind + 1, "#pragma omp for")
        self.omp, self.in_parallel, self.runs = saved
        self.out(ind, "}")
        if stepped:
            self.out(ind - 1, "}")

"""C backend: the parallel regions a kernel opens (:mod:`codegen.regions`
forms them from the loop IR): adjacent parallel loops in one ``#pragma omp
parallel``, a stepped loop and a mixed region with the generated barrier
(``tp_barrier``).  Mixed into the C printer (its ``out``, ``helper``,
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

    def parallel_region(self, loops, ind: int) -> None:
        """Adjacent parallel loops in one ``#pragma omp parallel`` region, each
        an ``omp for`` (its implicit barrier keeps their order): one fork/join
        instead of one per loop (a layer norm's statements, each parallel)."""
        self.out(ind, "#pragma omp parallel")
        self.out(ind, "{")
        saved = (self.omp, self.in_parallel)
        self.omp, self.in_parallel = "parallel", True
        for s in loops:
            self.worksharing_loop(s, ind + 1, "#pragma omp for")
        self.omp, self.in_parallel = saved
        self.out(ind, "}")

    def mixed_region(self, members: list, ind: int) -> None:
        """Plain parallel loops and stepped loops (:func:`codegen.regions.mixed_run`)
        as one ``#pragma omp parallel`` region: each plain loop an ``omp for``
        (OpenMP's barrier after it), each stepped loop run by every thread
        around its inner ``omp for nowait`` loops, the generated barrier
        (``tp_barrier``) after each of those."""
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
        self.out(ind + 1, f"tp_barrier_t {bar} = {{0, 0, 0}};")
        self.out(ind + 1, "#pragma omp parallel")
        self.out(ind + 1, "{")
        saved = (self.omp, self.in_parallel)
        self.omp, self.in_parallel = "parallel", True
        for x in members:
            inner = regions.stepped_loops(x)
            if inner:
                self.out(ind + 2, self.for_header(x, ir.check_loop(x, "C backend")))
                self.loop_depth += 1
                for y in inner:
                    self.worksharing_loop(y, ind + 3, "#pragma omp for nowait")
                    self.out(ind + 3, f"tp_barrier(&{bar});")
                self.loop_depth -= 1
                self.out(ind + 2, "}")
            else:                     # OpenMP's own barrier (the user's wait policy)
                self.worksharing_loop(x, ind + 2, "#pragma omp for")
        self.omp, self.in_parallel = saved
        self.out(ind + 1, "}")
        self.out(ind, "}")

    def stepped_region(self, s: ir.For, loops: list, ind: int) -> None:
        """The serial loop ``s`` around the plain parallel ``loops`` (its whole
        body) as one ``#pragma omp parallel`` region (:mod:`codegen.regions`):
        every thread runs ``s``, each inner loop an ``omp for nowait``
        followed by the generated barrier (``tp_barrier``)."""
        self.mixed_region([s], ind)

"""The classes users hold: ``tp.Function``, ``tp.Computation``, ``tp.Update``
are the language's data (:mod:`tiramisu_py.lang.program`) with the
scheduling verbs (:class:`~tiramisu_py.commands.schedulable.Schedulable`)
and, on the Function, ``compile``, ``explain`` and ``reset_schedule``: the
top floor of the package, which every other one sits below."""
from __future__ import annotations

from .base import provenance
from .base.errors import IllegalScheduleError
from .commands.atomic import all_or_nothing
from .commands.band import tile_band as _tile_band
from .commands.schedulable import Schedulable
from .driver import explain as _explain
from .driver.auto_schedule import auto_schedule as _auto_schedule
from .driver.compile import compile_function, default_target
from .driver.distributed import compile_distributed
from .driver.tune import tuned_function
from .draw import draw_function
from .lang import program


class Computation(Schedulable, program.Computation):
    __doc__ = program.Computation.__doc__


class Update(Schedulable, program.Update):
    __doc__ = program.Update.__doc__


class Function(program.Function):
    __doc__ = program.Function.__doc__
    _Computation = Computation
    _Update = Update

    def reset_schedule(self):
        """Forgets every scheduling command: the program order again.  The
        algorithm (and ``store_in`` layouts) stay; the copies that copy
        commands declared go with them (each call is undone, last first; all
        or nothing)."""
        with all_or_nothing(self):
            while self._commands:
                self.undo()
        self._state_cache = None

    @provenance.command
    def tile_band(self, statements, loops, sizes, names=None):
        """Tiles the ``statements`` (all those that run inside the loop
        ``loops[0]``, each with ``loops`` nested directly in that order) as
        one band: ``f.tile_band([sB, sA], ["t", "i"], [32, 32])`` makes the
        loops ``t0, i0, t1, i1`` shared by both, each statement keeping its
        place after the point loop where the two parted.  One call: refused
        it records nothing, ``f.undo()`` removes it whole.  Legal iff the
        band is permutable for the dependences among them (the exact check
        of ``compile()``; a stencil needs a ``skew`` of each first)
        (:mod:`tiramisu_py.commands.band`)."""
        return _tile_band(self, statements, loops, sizes, names)

    def auto_schedule(self, target=None, budget=None, reassociate=False):
        """Chooses and applies a legal schedule from the exact dependences
        (fusion, permutable bands made by shift and skew then tiled with
        sizes from the host's caches, outer or wavefront parallelism, the
        stride-1 loop vectorised) and returns the commands it applied, each
        printing as the Python that applies it to a Function named ``f``:
        ``print("\\n".join(map(str, f.auto_schedule())))`` is a schedule to
        paste.  Commands given before are kept (a group of statements a
        command touches only gets the missing parallel/vector tags).
        ``budget``: seconds of search (default 5).  ``reassociate=True``
        lets it reorder the sums of every reduction (a row's sum, a dot
        product vectorised with partial sums in the lanes: results then
        differ from the program order's by rounding); without it only the
        reductions given ``allow_reassociation()`` before are
        (:mod:`tiramisu_py.driver.auto_schedule`)."""
        return _auto_schedule(self, target, budget, reassociate=reassociate)

    def explain(self, file=None) -> str:
        """Prints (and returns) the dependences in words and, for each loop of
        the current schedule, whether it is parallel and why not."""
        text = _explain.explain(self)
        print(text, file=file)
        return text

    def draw(self, statement=None, loops=None, params=None, path=None, compare=False):
        """A :class:`~tiramisu_py.Picture` of the iteration space under the
        current schedule, at the concrete ``params`` (a dict, e.g. ``{"N": 8}``):
        a point per instance of each statement, on two of its loops
        (``loops``: (outer, inner) names; by default its two innermost; the
        loops a tile made of one loop count as that loop), one block per
        value of its other loops, coloured by parallel step, labelled by
        execution order, tiles outlined, dependences as arrows by kind.
        ``statement``: a name (or a list) to draw only those;
        ``compare``: the program order beside it; ``path``: also saved there.
        The data drawn is ``picture.data``; rendering needs matplotlib
        (``pip install tiramisu_py[draw]``).  Rules: docs/internals/draw.md."""
        return draw_function(self, statement, loops, params, path, compare)

    # compilation ------------------------------------------------------------
    def compile(self, target=None, tuned=True, **options):
        """Checks the program, generates code for ``target`` ("cpu" or "c": C +
        OpenMP through the system C compiler; "llvm": LLVM IR JIT-compiled
        in-process with llvmlite, no C compiler needed) and returns a callable
        :class:`Kernel`.  The default target is ``$TIRAMISU_PY_TARGET``, else
        "cpu": the C you read is the code that runs, every schedule option is
        there; "llvm" measured 1.13x C's speed geomean on 72 schedules (the
        operator library's kernels 1.33x, which is why the library defaults
        to it): pass it for speed.  A Function without commands whose algorithm
        :func:`tiramisu_py.tune` recorded for this target and host is compiled
        with the recorded schedule (on a copy; :mod:`tiramisu_py.driver.tune`):
        ``kernel.tuned`` then describes the record (which Function, sizes,
        the A/B verdict, the commands; None when no record was used) and a
        comment atop ``kernel.source`` says it.  ``tuned=False`` compiles it
        as written (a baseline to compare a tuned kernel with)."""
        target = target or default_target()
        try:
            if any(c.op == "distribute" for c in self._commands):
                if options:
                    raise TypeError(f"compile: unexpected option(s) {', '.join(options)}")
                return compile_distributed(self, target)
            found = tuned_function(self, target) if tuned and target != "cuda" else None
            if found is None:
                return compile_function(self, target, **options)
            kernel = compile_function(found[0], target, **options)
            kernel.mark_tuned(found[1], "; " if target == "llvm" else "// ")
            return kernel
        except IllegalScheduleError as e:
            raise IllegalScheduleError(str(e) + self._recovery(str(e)), e.violation) from None

    def _recovery(self, msg):
        """What an IllegalScheduleError adds: where the statement was
        declared, and how to go on (the refused command stays recorded)."""
        me = provenance.ref(self, provenance.user_frame())
        me = me if me.isidentifier() else "f"
        # the refused command: the message names it (its canonical text
        # first, then where it was given); one call written once for several
        # statements (a loop over them) is told apart by the first
        given = [c for c in self._commands if (c.call or c.where) and f"given: {c.given()}" in msg]
        cmd = ([c for c in given if msg.startswith(c.text)] or given or [None])[-1]
        out = ""
        if cmd is not None:
            st = next((s for s in self.statements if s.name == cmd.stmt), None)
            if st is not None and st.where:
                out += f"\n  {cmd.stmt} is declared at {st.where}"
        gone = self._last_call()
        last = gone[0].call if gone else None
        if last and any(c.given() == gone[0].given() and c.stmt != gone[0].stmt
                        for c in self._commands):
            # the same words at the same line for another statement: say which
            last = f"{'; '.join(c.text for c in gone)}, given as {gone[0].given()}"
        out += (f"\n  The schedule keeps every command given: {me}.undo() removes the last one"
                + (f" ({last})" if last else "") + f", {me}.reset_schedule() all of them.")
        return out

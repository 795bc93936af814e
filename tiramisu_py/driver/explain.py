"""``f.explain()``: the dependences in words and, for each loop of the
current schedule, whether it is parallel and why not
(:func:`tiramisu_py.analysis.legality.explain`), then each vector loop of the
compiled kernel, widened or not and why (:func:`codegen.report.report`)."""
from __future__ import annotations

from codegen.report import report

from ..analysis import legality
from .compile import compile_function, default_target


def explain(f) -> str:
    """The text ``f.explain()`` prints."""
    model, deps, state = legality.analyse(f)
    return legality.explain(model, deps, state) + vector_report(f)


def vector_report(f) -> str:
    """Each vector loop of the compiled kernel, widened or not and why (the
    same decision in both backends).  Empty when the function does not
    compile."""
    try:
        lowered = compile_function(f, default_target()).lowered
    except Exception:           # explain() must work on a schedule that does not compile
        return ""
    lines = report(lowered)
    return "\nVector loops:\n" + "\n".join("  " + x for x in lines) if lines else ""

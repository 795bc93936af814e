"""The ``torch.compile`` backend "tiramisu" (imports torch)::

    compiled = torch.compile(model, backend="tiramisu")

Dynamo's FX graph of the model has the operators and patterns the library
computes replaced by ``torch.ops.tiramisu`` calls
(:mod:`schedules.graph_rewrite`: conv2d with its bias, an eval-mode
BatchNorm folded in and the activation as its epilogue, conv-ReLU-max-pool,
linear, matmul / mm / bmm, LSTM and GRU), then goes to Inductor
(``torch._inductor.compile_fx.compile_fx``) for the rest: in training
through AOTAutograd, which traces the ops' own autograd formulas (the
library's backward kernels).  ``fullgraph=True`` holds wherever it holds for
Inductor (every op has a fake implementation); shapes recompile as Inductor's
do (the ops add no guard of their own).

The backend is found by name through the ``torch_dynamo_backends`` entry
point of the package (``pyproject.toml``), so no import is needed once the
package is installed; importing this module registers it too (where the
entry point is not installed).  ``options=`` (``torch.compile(...,
options={...})``): ``"inner"``, the compiler after the rewrite:
"inductor" (the default), "aot_eager" (AOTAutograd, no code generation) or
"eager" (the rewritten graph as it is: inference only); the other keys are
Inductor's config (as ``options`` of the "inductor" backend); ``mode=`` as
Inductor's.  ``"freezing": True`` is Inductor's freezing and the library's
too: in an inference graph the model's parameters and buffers are taken as
constants (:func:`schedules.core.prepared.own`): the weights the library
prepares from them (BatchNorm folded into a conv's weight, packed) are found
by identity and version alone, with no comparison of their bytes on each
call, so a write that bumps no version (``param.data.mul_(2)``, a write
through ``.numpy()``) is not seen, as Inductor's freezing does not see one;
an in-place op on the parameter itself (an optimizer's step) still is.

What was replaced: :func:`compile_report` (``compile_report(model)``: the
graphs whose inputs include the model's parameters) and the logger
``schedules.dynamo`` (one INFO record per graph)."""
from __future__ import annotations

import importlib.metadata
import logging
import weakref
from dataclasses import dataclass, field

import torch

from .core.prepared import own
from .graph_rewrite import GraphReport, rewrite

NAME = "tiramisu"
INNER = ("inductor", "aot_eager", "eager")
log = logging.getLogger(__name__)
_GRAPHS: list = []          # (weak set of the graph's tensor inputs, GraphReport), in order
MAX_GRAPHS = 256


def backend(gm: torch.fx.GraphModule, example_inputs, options=None, mode=None):
    """The backend: ``gm`` rewritten (:func:`schedules.graph_rewrite.rewrite`)
    then compiled by the inner compiler (see the module)."""
    options = dict(options or {})
    inner = options.pop("inner", "inductor")
    if inner not in INNER:
        raise ValueError(f"backend {NAME!r}: options['inner'] must be one of "
                         f"{', '.join(map(repr, INNER))}, got {inner!r}")
    tensors = [t for t in example_inputs if isinstance(t, torch.Tensor)]
    training = torch.is_grad_enabled() and any(t.requires_grad for t in tensors)
    if inner == "eager" and training:
        raise ValueError(f"backend {NAME!r}: options['inner']='eager' runs no autograd pass; "
                         "use 'aot_eager' or 'inductor' where gradients are recorded")
    report = rewrite(gm, training)
    _remember(report, tensors)
    if options.get("freezing") and not training:
        own(*_parameters_and_buffers(gm, example_inputs))
    log.info("torch.compile backend %r:\n%s", NAME, report)
    if inner == "eager":
        return gm.forward
    if inner == "aot_eager":
        return torch._dynamo.lookup_backend("aot_eager")(gm, example_inputs)
    from torch._inductor.compile_fx import compile_fx
    if mode not in (None, "default"):
        options = {**torch._inductor.list_mode_options(mode), **options}
    return compile_fx(gm, example_inputs, config_patches=options or None)


def _parameters_and_buffers(gm, example_inputs):
    """The inputs of ``gm`` that Dynamo took from a module's parameters or
    buffers (their placeholders' sources)."""
    from torch._dynamo.source import ParamBufferSource, UnspecializedParamBufferSource
    kinds = (ParamBufferSource, UnspecializedParamBufferSource)
    places = [n for n in gm.graph.nodes if n.op == "placeholder"]
    out = []
    for node, t in zip(places, example_inputs):
        source = getattr(node.meta.get("grapharg"), "source", None)
        while source is not None and not isinstance(source, kinds):
            source = getattr(source, "base", None)
        if isinstance(t, torch.Tensor) and (source is not None
                                            or isinstance(t, torch.nn.Parameter)):
            out.append(t)
    return out


def _remember(report, tensors):
    if len(_GRAPHS) >= MAX_GRAPHS:
        del _GRAPHS[:MAX_GRAPHS // 2]
    held = weakref.WeakSet()
    for t in tensors:
        try:
            held.add(t)
        except TypeError:               # (a tensor that takes no weak reference)
            pass
    _GRAPHS.append((held, report))


@dataclass
class CompileReport:
    """The graphs compiled by the backend (``graphs``: a
    :class:`schedules.graph_rewrite.GraphReport` each, in the order they
    were compiled).  ``str(report)`` is a readable summary; ``counts()``:
    how many of each op the graphs call."""
    graphs: list = field(default_factory=list)

    def counts(self):
        total = {}
        for g in self.graphs:
            for k, v in g.counts().items():
                total[k] = total.get(k, 0) + v
        return total

    def __str__(self):
        if not self.graphs:
            return f"backend {NAME!r}: no graph compiled"
        return "\n".join(f"backend {NAME!r} " + str(g) for g in self.graphs)


def compile_report(model=None) -> CompileReport:
    """What the backend replaced in the graphs compiled so far in this
    process: those whose inputs include a parameter of ``model`` (an
    ``nn.Module``, compiled or not), or every graph (``model`` None)."""
    if model is None:
        return CompileReport([g for _, g in _GRAPHS])
    model = getattr(model, "_orig_mod", model)
    if not isinstance(model, torch.nn.Module):
        raise TypeError(f"compile_report: model must be an nn.Module (or None), got "
                        f"{type(model).__name__}")
    mine = {id(p) for p in model.parameters()}
    return CompileReport([g for held, g in _GRAPHS if any(id(t) in mine for t in held)])


def clear_reports():
    """Forgets the graphs' reports (the compiled graphs stay compiled)."""
    _GRAPHS.clear()


def _register():
    """Registers :func:`backend` as "tiramisu" unless torch knows the name
    already (the installed package's entry point: torch loads this module
    through it)."""
    known = NAME in torch._dynamo.list_backends(exclude_tags=())
    if not known:
        torch._dynamo.register_backend(backend, NAME)


def entry_point():
    """The ``torch_dynamo_backends`` entry point named "tiramisu" of the
    installed distributions, or None."""
    found = importlib.metadata.entry_points(group="torch_dynamo_backends")
    return next((e for e in found if e.name == NAME), None)


_register()

__all__ = ["backend", "compile_report", "clear_reports", "CompileReport", "GraphReport", "NAME"]

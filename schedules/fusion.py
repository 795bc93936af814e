"""Model-level fusion for :func:`schedules.nn.convert` (imports torch): which
``Conv2d -> BatchNorm2d -> ReLU/ReLU6`` chains of a model may run as one
convolution, the modules that stand in for the folded BatchNorm and
activation, the chains with a residual add that a parent's rewritten
forward runs as one conv call (:func:`find_tails`), and the report of what
``convert`` did.

**Finding chains.**  The model's forward is traced with ``torch.fx``
(:func:`find_chains`): a chain is an ``nn.Conv2d`` whose output is used only
by an ``nn.BatchNorm2d`` (with running statistics, over the conv's
channels), whose output is used only by an ``nn.ReLU``/``nn.ReLU6`` (either
link optional, at least one present), every module of it called exactly
once in the forward.  A model ``torch.fx`` cannot trace (data-dependent
control flow) is read as its ``nn.Sequential`` containers only, in order,
where the order is the dataflow.  Functional calls (``F.relu``, ``x + y``)
are not fused; the report counts them.

**One switch, the modules' own modes.**  The conv, the BatchNorm and the
activation of a chain share one :class:`FusionGroup`.  The group is
*active* when its BatchNorm and activation are both in eval mode
(``module.training`` False); then the conv computes
``act(conv(x, W * s, (b - mean) * s + beta))`` with ``s = gamma /
sqrt(var + eps)`` (folded in float64 and rounded once to the weight's
dtype; when no gradient is recorded, made once per value of the six tensors
by the prepared-weights cache, which is never stale) and the BatchNorm and activation modules return their input
unchanged.  When either is in training mode the group is inactive: the
conv is a plain convolution and the BatchNorm (batch statistics, running
averages updated) and activation run as torch's, exactly.  ``model.train()``
after ``model.eval()`` thus un-folds, ``eval()`` folds again with the
current statistics; the parameters and buffers are never modified, so
``state_dict`` keys and values are those of the torch model.
"""
from __future__ import annotations

import operator
from collections import Counter
from dataclasses import dataclass, field

import torch
from torch import nn

from .torch_fused_ops import folded

ACTIVATIONS = {nn.ReLU: "relu", nn.ReLU6: "relu6"}


class FusionGroup:
    """The modules of one chain (held as plain references: they stay where
    the model has them, once in its ``state_dict``) and the folded
    weights' cache."""

    def __init__(self, conv, bn=None, act=None):
        self.conv, self.bn, self.act = conv, bn, act
        self.activation = ACTIVATIONS[type(act)] if act is not None else None

    def active(self) -> bool:
        return all(not m.training for m in (self.bn, self.act) if m is not None)

    def folded(self, weight, bias):
        """``(weight, bias)`` with the BatchNorm folded in (unchanged without
        one): :func:`schedules.torch_fused_ops.folded` (differentiable when
        gradients are recorded, else made once per value of the six
        tensors)."""
        bn = self.bn
        if bn is None:
            return weight, bias
        return folded(weight, bias, bn.weight, bn.bias, bn.running_mean, bn.running_var, bn.eps)

    def names(self, names):
        return " + ".join(names[id(m)] for m in (self.conv, self.bn, self.act) if m is not None)


class _PassThrough:
    """A chain's BatchNorm or activation: its input unchanged while the group
    is active (the conv applied it), else the torch module's forward."""

    def forward(self, input):
        group = self.__dict__.get("_fusion")
        if group is not None and group.active():
            return input
        return super().forward(input)

    @classmethod
    def adopt(cls, module, group):
        """A new module of this class with ``module``'s parameters, buffers,
        settings and mode (the same tensor objects)."""
        new = cls.__new__(cls)
        new.__dict__.update(module.__dict__)
        new._parameters, new._buffers = dict(module._parameters), dict(module._buffers)
        new._modules = dict(module._modules)
        new.__dict__["_fusion"] = group
        return new


class FoldedBatchNorm2d(_PassThrough, nn.BatchNorm2d):
    """An ``nn.BatchNorm2d`` folded into the preceding conv while in eval
    mode (:class:`FusionGroup`); torch's BatchNorm in training mode."""


class FusedReLU(_PassThrough, nn.ReLU):
    """An ``nn.ReLU`` applied by the preceding conv while in eval mode."""


class FusedReLU6(_PassThrough, nn.ReLU6):
    """An ``nn.ReLU6`` applied by the preceding conv while in eval mode."""


STAND_INS = {nn.BatchNorm2d: FoldedBatchNorm2d, nn.ReLU: FusedReLU, nn.ReLU6: FusedReLU6}


def _foldable_bn(conv, bn):
    return (type(bn) is nn.BatchNorm2d and bn.track_running_stats
            and bn.running_mean is not None and bn.num_features == conv.out_channels)


def _chain(conv, after):
    """The ``(bn, act)`` that follow ``conv`` given ``after(module)``: the
    one module that alone consumes a module's output (or None)."""
    bn = after(conv)
    if not _foldable_bn(conv, bn):
        bn = None
    act = after(bn if bn is not None else conv)
    if type(act) not in ACTIVATIONS:
        act = None
    return (bn, act) if bn is not None or act is not None else None


def find_chains(model: nn.Module):
    """``({id(conv): FusionGroup}, how, functions)``: the chains of
    ``model`` (see the module's docstring), ``how`` they were found
    ("torch.fx" or "nn.Sequential order") and, when traced, a count of the
    functional calls of the forward (left to torch)."""
    try:
        gm = torch.fx.symbolic_trace(model)
    except Exception:   # noqa: BLE001 -- any tracing failure: read the Sequentials instead
        return _sequential_chains(model), "nn.Sequential order", Counter()
    mods = dict(gm.named_modules())
    calls = Counter(n.target for n in gm.graph.nodes if n.op == "call_module")
    node_of = {n.target: n for n in gm.graph.nodes if n.op == "call_module" and calls[n.target] == 1}

    def after(module):
        if module is None:
            return None
        node = next((n for t, n in node_of.items() if mods[t] is module), None)
        if node is None or len(node.users) != 1:
            return None
        user = next(iter(node.users))
        return mods[user.target] if user.op == "call_module" and user.target in node_of else None

    groups = {}
    for target, node in node_of.items():
        conv = mods[target]
        if type(conv) is nn.Conv2d:
            found = _chain(conv, after)
            if found is not None:
                groups[id(conv)] = FusionGroup(conv, *found)
    functions = Counter(getattr(n.target, "__name__", str(n.target))
                        for n in gm.graph.nodes if n.op in ("call_function", "call_method"))
    return groups, "torch.fx", functions


def _sequential_chains(model):
    uses = Counter(id(m) for _, m in model.named_modules(remove_duplicate=False))
    groups = {}
    for seq in model.modules():
        if not isinstance(seq, nn.Sequential):
            continue
        parts = list(seq)
        for k, conv in enumerate(parts):
            if type(conv) is not nn.Conv2d:
                continue
            nxt = {id(a): b for a, b in zip(parts, parts[1:])}
            found = _chain(conv, lambda m: nxt.get(id(m)) if m is not None else None)
            if found and all(uses[id(m)] == 1 for m in (conv, *found) if m is not None):
                groups[id(conv)] = FusionGroup(conv, *found)
    return groups


# ------------------------------------------------------------------ chains in a parent's forward
ADDS = (operator.add, operator.iadd, torch.add)
IN_PLACE = (operator.iadd, "add_")      # (they write their first operand: the chain's value)


class TailChain(FusionGroup):
    """``conv [-> bn] [-> add(residual)] [-> act]`` of one parent module's
    forward, which :func:`find_tails` rewrites to one call of the conv
    (``conv(x, residual=r, tail=True)``): the conv runs the whole chain
    (:meth:`schedules.nn.Conv2d.forward`).  ``add``: None (no residual),
    "add" (``a + b``, ``torch.add``) or "add_" (``+=``, ``Tensor.add_``:
    the chain's value written); ``function``: the add's name in the traced
    forward (the report's count of functional calls)."""

    def __init__(self, conv, bn=None, act=None, add=None, function=None):
        super().__init__(conv, bn, act)
        self.add, self.function = add, function

    def names(self, names):
        parts = [names[id(m)] for m in (self.conv, self.bn) if m is not None]
        parts += ["add"] if self.add else []
        parts += [names[id(self.act)]] if self.act is not None else []
        return " + ".join(parts)


class _Children(torch.fx.Tracer):
    """Traces a module's own forward: every submodule is a leaf."""

    def is_leaf_module(self, m, module_qualified_name):
        return True


def find_tails(model: nn.Module, chains: dict) -> list:
    """``[(parent, graph_module, [TailChain])]``: the modules of ``model``
    whose own forward (traced with its children as leaves, the same code in
    training and eval mode) has a conv chain with a residual ``add`` (``+``,
    ``+=``, ``torch.add``, ``Tensor.add``/``add_`` without ``alpha``), or an
    activation module that the whole-model chains (``chains``, from
    :func:`find_chains`) could not take because it is called more than once;
    ``graph_module``'s code is the forward with each such chain one call of
    its conv.  The convs taken leave ``chains``."""
    uses = Counter(id(m) for _, m in model.named_modules(remove_duplicate=False))
    found = []
    for parent in model.modules():
        if isinstance(parent, (nn.Sequential, nn.ModuleList, nn.ModuleDict)) or not any(
                type(m) is nn.Conv2d for m in parent.children()):
            continue
        gm = _own_trace(parent)
        if gm is None:
            continue
        tails = _rewrite_tails(gm, chains, uses)
        if tails:
            found.append((parent, gm, tails))
            for t in tails:
                chains.pop(id(t.conv), None)
    return found


def _own_trace(parent):
    """``parent``'s forward traced with its children as leaves, or None where
    it does not trace or its code differs between training and eval mode
    (each module's own mode restored)."""
    modes = [(m, m.training) for m in parent.modules()]
    try:
        codes = []
        for mode in (True, False):
            parent.train(mode)
            graph = _Children().trace(parent)
            codes.append(torch.fx.GraphModule(parent, graph))
    except Exception:  # noqa: BLE001 -- any tracing failure: the forward stays as it is
        return None
    finally:
        for m, mode in modes:
            m.training = mode
    return codes[1] if codes[0].code == codes[1].code else None


def _rewrite_tails(gm, chains, uses):
    """The chains of ``gm``'s graph that :func:`find_tails` takes, each
    rewritten in place to one call of its conv; the graph recompiled."""
    graph, mods = gm.graph, dict(gm.named_children())
    calls = Counter(n.target for n in graph.nodes if n.op == "call_module")

    def module_after(value):
        """The child module that alone consumes ``value`` (with its node)."""
        user = only_user(value)
        if user is None or user.op != "call_module" or len(user.args) != 1 or user.kwargs:
            return None, None
        return mods.get(user.target), user

    tails = []
    for node in list(graph.nodes):
        conv = mods.get(node.target) if node.op == "call_module" else None
        if type(conv) is not nn.Conv2d or calls[node.target] != 1 or uses[id(conv)] != 1 \
                or len(node.args) != 1 or node.kwargs:
            continue
        chain, value = [node], node
        bn, user = module_after(value)
        if _foldable_bn(conv, bn) and calls[user.target] == 1 and uses[id(bn)] == 1:
            chain.append(user)
            value = user
        else:
            bn = None
        add, residual = residual_add(only_user(value), value)
        function = None
        if add is not None:
            value = only_user(value)
            chain.append(value)
            function = getattr(value.target, "__name__", value.target)
        act, user = module_after(value)
        if type(act) in ACTIVATIONS:
            chain.append(user)
        else:
            act = None
        known = chains.get(id(conv))
        shared_act = act is not None and (known is None or known.act is not act)
        if add is None and not shared_act:
            continue                          # (the whole-model chain does as well)
        with graph.inserting_before(chain[-1]):
            new = graph.call_module(node.target, (node.args[0],),
                                    {"residual": residual, "tail": True})
        chain[-1].replace_all_uses_with(new)
        for n in reversed(chain):
            graph.erase_node(n)
        tails.append(TailChain(conv, bn, act, add, function))
    if tails:
        graph.lint()
        gm.recompile()
    return tails


def only_user(node):
    """The one user of the FX node ``node``, else None (none, several, or no node)."""
    return next(iter(node.users)) if node is not None and len(node.users) == 1 else None


def residual_add(node, value):
    """``(kind, other)`` where the FX node ``node`` is ``value + other``
    (``+``, ``+=``, ``torch.add``, ``Tensor.add``/``add_`` without ``alpha``;
    ``other`` a node that is not ``value``; an in-place add writing
    ``value``), ``kind`` "add" or "add_" (see :class:`TailChain`), else
    ``(None, None)``.  Also the ``torch.compile`` backend's match
    (:mod:`schedules.graph_rewrite`)."""
    if node is None or not (node.op == "call_function" and node.target in ADDS
                            or node.op == "call_method" and node.target in ("add", "add_")):
        return None, None
    if node.kwargs or len(node.args) != 2 or value not in node.args:
        return None, None
    other = node.args[1] if node.args[0] is value else node.args[0]
    if not isinstance(other, torch.fx.Node) or other is value:
        return None, None
    if node.target in IN_PLACE:
        return ("add_", other) if node.args[0] is value else (None, None)
    return "add", other


@dataclass
class ConvertReport:
    """What :func:`schedules.nn.convert` did to a model (also
    ``model.tiramisu_report``): ``converted`` ``[(name, torch type, our
    type)]``, ``fused`` ``[(names, what)]``, ``left_to_torch`` ``[(name,
    type, why)]`` (leaf modules only), ``functions`` (functional calls of
    the traced forward, left to torch: ``{name: count}``) and ``how`` the
    chains were found.  ``str(report)`` is a readable summary."""
    converted: list = field(default_factory=list)
    fused: list = field(default_factory=list)
    left_to_torch: list = field(default_factory=list)
    functions: dict = field(default_factory=dict)
    how: str = ""

    def __str__(self):
        lines = [f"schedules.nn.convert: {len(self.converted)} converted, {len(self.fused)} "
                 f"fused, {len(self.left_to_torch)} left to torch (chains found by {self.how})"]
        lines += [f"  converted  {n}: {a} -> {b}" for n, a, b in self.converted]
        lines += [f"  fused      {n}: {what}" for n, what in self.fused]
        lines += [f"  torch      {n}: {t} ({why})" for n, t, why in self.left_to_torch]
        if self.functions:
            calls = ", ".join(f"{k} x{v}" for k, v in sorted(self.functions.items()))
            lines.append(f"  torch      functional calls in forward: {calls}")
        return "\n".join(lines)


__all__ = ["FusionGroup", "TailChain", "FoldedBatchNorm2d", "FusedReLU", "FusedReLU6",
           "STAND_INS", "find_chains", "find_tails", "only_user", "residual_add",
           "ConvertReport"]

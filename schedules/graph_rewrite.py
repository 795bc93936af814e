"""The graph rewrite of the ``torch.compile`` backend (:mod:`schedules.dynamo`):
the operators and patterns of a Dynamo FX graph (torch-level functions, the
parameters as graph inputs) that the library computes, replaced by
``torch.ops.tiramisu`` calls; everything else is left for the compiler that
runs after (Inductor).

Patterns, each replaced only where its inputs are float32 CPU tensors and
every intermediate value has one user:

* ``conv2d -> relu -> max_pool2d`` (a square non-overlapping floor-mode
  window): ``tiramisu::conv_relu_maxpool`` (inference and training);
* inference only (no gradient recorded): ``conv2d [-> batch_norm (eval,
  running statistics)] [-> add(_, residual)] [-> relu / relu6 / hardtanh(0,
  6)]`` with at least one link: ``tiramisu::conv2d_folded`` (the BatchNorm
  folded into the weight and bias, cached per value; the residual -- a
  tensor of the same shape, the add ``+``, ``+=``, ``torch.add`` or
  ``Tensor.add``/``add_`` without ``alpha`` -- and the activation the
  kernel's epilogue);
* ``conv2d``: ``tiramisu::conv2d`` (with its backward kernels);
* ``linear``: ``tiramisu::linear``; ``mm``: ``tiramisu::gemm``; ``matmul``
  (``@``) and ``bmm``: ``tiramisu::matmul``;
* ``lstm`` / ``gru`` (one direction, no projection, no dropout while
  training; Dynamo traces ``nn.LSTM`` / ``nn.GRU`` with
  ``torch._dynamo.config.allow_rnn = True``): ``tiramisu::lstm`` / ``gru``
  (where gradients are recorded ``lstm_train`` / ``gru_train``, which keep
  the states for the backward).

A training-mode BatchNorm, the residual ``add`` of a training graph, pooling
other than the fused block's and the pointwise operators stay Inductor's (it fuses them into
loops around our calls).  :func:`rewrite` returns a :class:`GraphReport`."""
from __future__ import annotations

import operator
import re
from collections import Counter
from dataclasses import dataclass, field

import torch
from torch.fx.experimental.symbolic_shapes import statically_known_true

from . import (
    torch_fused_ops,  # noqa: F401
    torch_ops,  # noqa: F401  (registers torch.ops.tiramisu)
)
from .fusion import only_user, residual_add
from .torch_rnn_ops import rnn_recorded

F = torch.nn.functional
ops = torch.ops.tiramisu

CONV = (torch.conv2d,)                                  # (F.conv2d is torch.conv2d)
BATCH_NORM = (F.batch_norm,)
RELU = (F.relu, torch.relu, torch.relu_)                # (F.relu_ is torch.relu_)
RELU6 = (F.relu6,)
HARDTANH = (F.hardtanh, F.hardtanh_, torch._C._nn.hardtanh, torch._C._nn.hardtanh_)
MAX_POOL = (F.max_pool2d, torch.max_pool2d)
LINEAR = (F.linear,)
MATMUL = (torch.matmul, operator.matmul)
MM, BMM = (torch.mm,), (torch.bmm,)
RNNS = {torch.lstm: "lstm", torch.gru: "gru"}
METHODS = {"relu": RELU, "relu_": RELU, "matmul": MATMUL, "mm": MM, "bmm": BMM}

# each function's positional parameters and defaults, as torch names them
_PARAMS = {
    "conv2d": (("input", "weight", "bias", "stride", "padding", "dilation", "groups"),
               {"bias": None, "stride": 1, "padding": 0, "dilation": 1, "groups": 1}),
    "batch_norm": (("input", "running_mean", "running_var", "weight", "bias", "training",
                    "momentum", "eps"),
                   {"weight": None, "bias": None, "training": False, "momentum": 0.1,
                    "eps": 1e-5}),
    "relu": (("input", "inplace"), {"inplace": False}),
    "hardtanh": (("input", "min_val", "max_val", "inplace"),
                 {"min_val": -1.0, "max_val": 1.0, "inplace": False}),
    "max_pool2d": (("input", "kernel_size", "stride", "padding", "dilation", "ceil_mode",
                    "return_indices"),
                   {"stride": None, "padding": 0, "dilation": 1, "ceil_mode": False,
                    "return_indices": False}),
    "linear": (("input", "weight", "bias"), {"bias": None}),
    "rnn": (("input", "hx", "params", "has_biases", "num_layers", "dropout", "train",
             "bidirectional", "batch_first"), {}),
}


@dataclass
class GraphReport:
    """What :func:`rewrite` did to one graph: ``replaced`` ``[(where,
    what)]`` (the nodes' modules or names, the pattern and the op),
    ``kept`` ``[(where, why)]`` (a pattern's operator left to the compiler,
    with the reason), ``left`` (the graph's other operators, by name and
    count: the compiler's) and whether it is a ``training`` graph."""
    training: bool = False
    replaced: list = field(default_factory=list)
    kept: list = field(default_factory=list)
    left: dict = field(default_factory=dict)

    def __str__(self):
        mode = "training" if self.training else "inference"
        lines = [f"graph ({mode}): {len(self.replaced)} replaced, {len(self.kept)} kept"]
        lines += [f"  tiramisu  {w}: {what}" for w, what in self.replaced]
        lines += [f"  kept      {w}: {why}" for w, why in self.kept]
        if self.left:
            rest = ", ".join(f"{k} x{v}" for k, v in sorted(self.left.items()))
            lines.append(f"  compiler  {rest}")
        return "\n".join(lines)

    def counts(self) -> Counter:
        """How many of each op the graph calls now (``{"tiramisu::conv2d": 3, ...}``)."""
        return Counter(what.rsplit("-> ", 1)[-1].split()[0] for _, what in self.replaced)


# ------------------------------------------------------------------ replacements
def _conv2d(input, weight, bias, stride, padding, dilation, groups):
    if isinstance(padding, str):
        return ops.conv2d(input, weight, bias, _pair(stride), padding, _pair(dilation), groups)
    return ops.conv2d(input, weight, bias, _pair(stride), _pair(padding), _pair(dilation), groups)


def _conv_relu_maxpool(input, weight, bias, stride, padding, dilation, groups, pool):
    return ops.conv_relu_maxpool(input, weight, bias, _pair(stride), _pair(padding),
                                 _pair(dilation), groups, pool=pool)


def _conv2d_folded(input, weight, bias, bn, stride, padding, dilation, groups, activation,
                   residual=None):
    gamma, beta, mean, var, eps = bn if bn is not None else (None,) * 4 + (0.0,)
    return ops.conv2d_folded(input, weight, bias, gamma, beta, mean, var, float(eps),
                             _pair(stride), _pair(padding), _pair(dilation), groups,
                             residual=residual, activation=activation)


def _rnn(kind, input, hx, params, num_layers, batch_first):
    x = input.transpose(0, 1) if batch_first else input
    state = tuple(hx) if kind == "lstm" else (hx,)
    op = getattr(ops, f"{kind}_train" if rnn_recorded(x, params, state) else kind)
    y, hn, *rest = op(x, list(params), num_layers, *state)   # (_train: and the states kept)
    return ((y.transpose(0, 1) if batch_first else y), hn, *rest[:len(state) - 1])


def _pair(v):
    return [v, v] if isinstance(v, int) else list(v)


# ------------------------------------------------------------------ matching
def _kind(node):
    """The name of ``node``'s operator among those above, or None."""
    if node.op == "call_method":
        family = METHODS.get(node.target)
    elif node.op == "call_function":
        family = next((f for f in (CONV, BATCH_NORM, RELU, RELU6, HARDTANH, MAX_POOL, LINEAR,
                                   MATMUL, MM, BMM) if node.target in f), None)
        if family is None:
            return RNNS.get(node.target)
    else:
        return None
    return {CONV: "conv2d", BATCH_NORM: "batch_norm", RELU: "relu", RELU6: "relu6",
            HARDTANH: "hardtanh", MAX_POOL: "max_pool2d", LINEAR: "linear", MATMUL: "matmul",
            MM: "mm", BMM: "bmm"}.get(family)


def _bind(node, kind):
    names, defaults = _PARAMS[kind]
    args = dict(defaults)
    args.update(zip(names, node.args))
    args.update(node.kwargs)
    return args


def _value(node):
    return node.meta.get("example_value") if isinstance(node, torch.fx.Node) else None


def _float32_cpu(*nodes):
    """Why these nodes' values are not all float32 CPU tensors (None: they are)."""
    for n in nodes:
        if n is None:
            continue
        v = _value(n)
        if not isinstance(v, torch.Tensor):
            return "an argument whose value is unknown"
        if v.dtype != torch.float32 or v.device.type != "cpu":
            return f"{v.dtype} on {v.device.type} (the ops here take float32 CPU tensors)"
    return None


def _activation(node):
    """"relu" / "relu6" for an activation node, else None."""
    kind = _kind(node) if node is not None else None
    if kind == "relu" or kind == "relu6":
        return kind
    if kind == "hardtanh":
        a = _bind(node, "hardtanh")
        if a["min_val"] == 0 and a["max_val"] == 6:
            return "relu6"
    return None


def _residual(node, operand):
    """The other operand of ``node`` where it is ``operand + residual``
    (:func:`schedules.fusion.residual_add`) with a residual of ``operand``'s
    shape, float32 on the CPU, else None."""
    other = residual_add(node, operand)[1]
    if other is None or _float32_cpu(other):
        return None
    mine, theirs = _value(operand), _value(other)
    if mine is None or mine.dim() != theirs.dim() or not all(
            statically_known_true(a == b) for a, b in zip(mine.shape, theirs.shape)):
        return None
    return other


def _pool_of(node):
    """The window of a max_pool2d node the fused block takes, else None."""
    if node is None or _kind(node) != "max_pool2d":
        return None
    a = _bind(node, "max_pool2d")
    one = lambda v: v if isinstance(v, int) else (v[0] if len(set(v)) == 1 else None)  # noqa: E731
    k = one(a["kernel_size"])
    stride = k if a["stride"] is None or a["stride"] == [] else one(a["stride"])
    if k is None or stride != k or one(a["padding"]) != 0 or one(a["dilation"]) != 1 \
            or a["ceil_mode"] or a["return_indices"]:
        return None
    return k


def _where(node):
    """The module that called ``node`` (its path in the compiled model, as
    ``named_modules`` names it), else the node's name."""
    stack = node.meta.get("nn_module_stack")
    if not stack:
        return node.name
    path = re.sub(r"^L\['(?:fn|self)'\]\.?", "", list(stack.values())[-1][0])
    return re.sub(r"\[(\d+)\]", r".\1", path).replace("._modules['", ".").replace("']", "") \
        or node.name


class _Rewriter:
    def __init__(self, gm, training):
        self.gm, self.graph, self.training = gm, gm.graph, training
        self.report = GraphReport(training=training)

    def replace(self, nodes, fn, args, what):
        """Replaces the chain ``nodes`` (the last one's users take the new
        node) by ``fn(*args)``."""
        last = nodes[-1]
        with self.graph.inserting_before(last):
            new = self.graph.call_function(fn, tuple(args))
        new.meta.update({k: v for k, v in last.meta.items()
                         if k in ("example_value", "stack_trace", "nn_module_stack",
                                  "source_fn_stack")})
        last.replace_all_uses_with(new)
        for n in reversed(nodes):
            self.graph.erase_node(n)
        self.report.replaced.append((" + ".join(dict.fromkeys(map(_where, nodes))), what))

    def keep(self, node, why):
        self.report.kept.append((_where(node), f"{_kind(node)}: {why}"))

    def run(self):
        for node in list(self.graph.nodes):
            if node.graph is not self.graph:        # (erased with an earlier chain)
                continue
            kind = _kind(node)
            if kind == "conv2d":
                self.conv(node)
            elif kind == "linear":
                self.linear(node)
            elif kind in ("matmul", "mm", "bmm"):
                self.matmul(node, kind)
            elif kind in ("lstm", "gru"):
                self.rnn(node, kind)
        self.graph.lint()
        self.gm.recompile()
        self.report.left = dict(Counter(
            _name(n) for n in self.graph.nodes if n.op in ("call_function", "call_method")
            and n.target is not operator.getitem and not _ours(n)))
        return self.report

    def conv(self, node):
        a = _bind(node, "conv2d")
        why = _float32_cpu(a["input"], a["weight"], a["bias"])
        if why is None and (_value(a["input"]).dim() != 4):
            why = "an unbatched input"
        if why:
            return self.keep(node, why)
        conf = [a[k] for k in ("stride", "padding", "dilation", "groups")]
        args = [a["input"], a["weight"], a["bias"]] + conf
        after = only_user(node)
        act, pool = _activation(after), None
        if act == "relu" and not isinstance(a["padding"], str):
            pool = _pool_of(only_user(after))
        if pool is not None:
            pooling = only_user(after)
            return self.replace([node, after, pooling], _conv_relu_maxpool, args + [pool],
                                f"conv2d + relu + max_pool2d({pool}) -> "
                                "tiramisu::conv_relu_maxpool")
        if not self.training and not isinstance(a["padding"], str):
            bn = after if after is not None and _kind(after) == "batch_norm" else None
            fold = self._foldable(node, bn)
            chain = [node] + ([bn] if fold is not None else [])
            tail = only_user(chain[-1]) if len(chain) > 1 else after
            residual = _residual(tail, chain[-1])
            if residual is not None:
                chain.append(tail)
                tail = only_user(tail)
            act = _activation(tail)
            if fold is not None or act is not None or residual is not None:
                chain += [tail] if act is not None else []
                what = " + ".join(["conv2d"] + (["batch_norm (folded)"] if fold else [])
                                  + (["add"] if residual is not None else [])
                                  + ([act] if act else []))
                return self.replace(chain, _conv2d_folded,
                                    args[:3] + [fold] + conf + [act, residual],
                                    f"{what} -> tiramisu::conv2d_folded")
        self.replace([node], _conv2d, args, "conv2d -> tiramisu::conv2d")

    def _foldable(self, conv, bn):
        """``(gamma, beta, mean, var, eps)`` nodes of an eval-mode BatchNorm
        over ``conv``'s output with running statistics, else None."""
        if bn is None:
            return None
        b = _bind(bn, "batch_norm")
        if b["input"] is not conv or b["training"] is not False or b["running_mean"] is None \
                or b["running_var"] is None or not isinstance(b["eps"], (int, float)) \
                or _float32_cpu(b["running_mean"], b["running_var"], b["weight"], b["bias"]):
            return None
        return (b["weight"], b["bias"], b["running_mean"], b["running_var"], b["eps"])

    def linear(self, node):
        a = _bind(node, "linear")
        why = _float32_cpu(a["input"], a["weight"], a["bias"])
        if why:
            return self.keep(node, why)
        self.replace([node], ops.linear, [a["input"], a["weight"], a["bias"]],
                     "linear -> tiramisu::linear")

    def matmul(self, node, kind):
        x, y = (node.args + (None, None))[:2]
        why = _float32_cpu(x, y) if y is not None and not node.kwargs else "its arguments"
        if why is None:
            vx, vy = _value(x), _value(y)
            if kind == "mm" and (vx.dim(), vy.dim()) != (2, 2):
                why = "not 2-D"
            elif kind == "bmm" and ((vx.dim(), vy.dim()) != (3, 3)
                                    or not statically_known_true(vx.shape[0] == vy.shape[0])):
                why = "not two 3-D batches of one size"
            elif min(vx.dim(), vy.dim()) < 1:
                why = "a 0-D operand"
        if why:
            return self.keep(node, why)
        op = ops.gemm if kind == "mm" else ops.matmul
        self.replace([node], op, [x, y], f"{kind} -> tiramisu::{'gemm' if kind == 'mm' else 'matmul'}")

    def rnn(self, node, kind):
        if len(node.args) != 9 or not isinstance(node.args[1], (tuple, list, torch.fx.Node)):
            return self.keep(node, "a packed sequence")
        a = _bind(node, "rnn")
        params, layers = list(a["params"]), a["num_layers"]
        hx = list(a["hx"]) if isinstance(a["hx"], (tuple, list)) else [a["hx"]]
        why = _float32_cpu(a["input"], *params, *hx)
        if why is None:
            if a["bidirectional"]:
                why = "bidirectional (the op runs one direction)"
            elif not isinstance(layers, int) or len(params) not in (2 * layers, 4 * layers):
                why = "a projection (proj_size)"
            elif a["train"] and a["dropout"]:
                why = "dropout in training"
        if why:
            return self.keep(node, why)
        state = a["hx"] if kind == "lstm" else hx[0]
        self.replace([node], _rnn, [kind, a["input"], state, a["params"], layers,
                                    a["batch_first"]],
                     f"{kind} -> tiramisu::{kind}{'_train' if self.training else ''}")


def _ours(node):
    return node.op == "call_function" and (
        node.target in (_conv2d, _conv_relu_maxpool, _conv2d_folded, _rnn)
        or "tiramisu" in str(getattr(node.target, "__module__", "") or "")
        or str(node.target).startswith("tiramisu."))


def _name(node):
    t = node.target
    return t if isinstance(t, str) else getattr(t, "__name__", str(t))


def rewrite(gm: torch.fx.GraphModule, training: bool) -> GraphReport:
    """Replaces, in place, the patterns of ``gm`` (a Dynamo graph) that the
    library computes (see the module); ``training``: a graph whose
    gradients are recorded (no BatchNorm is folded).  Returns what it did."""
    return _Rewriter(gm, training).run()

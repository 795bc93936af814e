"""PyTorch conformance on PyTorch's own sample inputs (issue 30, A5): every
float32 OpInfo / ModuleInfo sample of the ops and modules we register (each
also non-contiguous and, where a tensor is 4-D, channels_last) equals
torch's result or is refused by a rule of ``schedules.conformance.REFUSALS``
(the one documented list; the targets are listed there).  The fraction of
samples that ran is printed; the count may only grow (``RAN_AT_LEAST``)."""
import re

import pytest

torch = pytest.importorskip("torch", reason="torch is an optional extra; its tests need it")
try:        # PyTorch's test data imports expecttest and hypothesis (the test extra)
    from torch.testing._internal.common_methods_invocations import op_db
    from torch.testing._internal.common_modules import module_db
    from torch.testing._internal.common_utils import noncontiguous_like
except ImportError as exc:
    pytest.skip(f"PyTorch's OpInfo/ModuleInfo samples need expecttest and hypothesis: {exc}",
                allow_module_level=True)

import schedules.nn as snn                                   # noqa: E402
from schedules.conformance import REFUSALS, rule_for         # noqa: E402

ops = torch.ops.tiramisu
F = torch.nn.functional
ERRORS = (ValueError, TypeError, RuntimeError)
TOLERANCE = dict(rtol=1e-4, atol=1e-4)
# samples (variants included) that run, when written: 135 of the 279 of the ops and modules
# listed (48.4%), 204 of 435 with the routes derived from conv2d's samples (46.9%); raise it
# as refusal rules go (the goal: >= 90% of the samples torch accepts)
RAN_AT_LEAST = 435


def _pair(v):
    """An int as a pair, as ``F.conv2d``'s Python binding makes it (the op
    packets, as ``torch.ops.aten.conv2d``, take lists, or a string padding)."""
    return [v, v] if isinstance(v, int) else v


def _conv2d(input, weight, bias=None, stride=1, padding=0, dilation=1, groups=1):
    """``tiramisu::conv2d`` called as ``F.conv2d`` is."""
    return ops.conv2d(input, weight, bias, _pair(stride), _pair(padding), _pair(dilation), groups)


def _sparse_conv2d(input, weight, bias=None, stride=1, padding=0, dilation=1, groups=1):
    """``tiramisu::sparse_conv2d`` on the sample's weight in CSR form (a
    grouped weight as its dense block-diagonal equivalent, without the zeros
    off the blocks)."""
    co, cig, kh, kw = weight.shape
    dense, per = weight.new_zeros((co, cig * groups, kh, kw)), co // groups
    for g in range(groups):
        dense[g * per:(g + 1) * per, g * cig:(g + 1) * cig] = weight[g * per:(g + 1) * per]
    csr = dense.reshape(co, -1).to_sparse_csr()
    return ops.sparse_conv2d(input, csr.crow_indices(), csr.col_indices(), csr.values(),
                             list(dense.shape), bias, _pair(stride), _pair(padding),
                             _pair(dilation))


def _fused(input, weight, bias=None, stride=1, padding=0, dilation=1, groups=1):
    return ops.conv_relu_maxpool(input, weight, bias, _pair(stride), _pair(padding),
                                 _pair(dilation), groups, pool=2)


def _conv_relu_maxpool(*args, **kwargs):
    return F.max_pool2d(F.relu(F.conv2d(*args, **kwargs)), 2)


def _linear(input, weight, bias=None):
    """``F.linear`` by ``schedules.nn.Linear`` holding ``weight`` and ``bias``."""
    lin = torch.nn.Linear(weight.shape[-1], weight.shape[0], bias=bias is not None,
                          device="meta")
    lin.weight = torch.nn.Parameter(weight, requires_grad=False)
    if bias is not None:
        lin.bias = torch.nn.Parameter(bias, requires_grad=False)
    return snn.Linear.from_torch(lin)(input)


# (OpInfo name, our target, our callable, torch's when not the OpInfo's op); the targets the
# issue lists first, then the routes derived from conv2d's samples (reported apart)
OP_TARGETS = [("nn.functional.conv2d", "conv2d", _conv2d, None), ("mm", "gemm", ops.gemm, None),
              ("matmul", "matmul", ops.matmul, None), ("bmm", "matmul", ops.matmul, None),
              ("nn.functional.linear", "nn.Linear", _linear, None),
              ("nn.functional.conv2d", "sparse_conv2d", _sparse_conv2d, None),
              ("nn.functional.conv2d", "conv_relu_maxpool", _fused, _conv_relu_maxpool)]
DERIVED = ("sparse_conv2d", "conv_relu_maxpool")
MODULES = {torch.nn.Conv2d: snn.Conv2d, torch.nn.Linear: snn.Linear, torch.nn.LSTM: snn.LSTM,
           torch.nn.GRU: snn.GRU}


def _map(f, v):
    """``f`` on every tensor of ``v`` (nested tuples, lists, dicts)."""
    if isinstance(v, torch.Tensor):
        return f(v)
    if isinstance(v, (tuple, list)):
        return type(v)(_map(f, x) for x in v)
    if isinstance(v, dict):
        return {k: _map(f, x) for k, x in v.items()}
    return v


def _tensors(v):
    out = []
    _map(out.append, v)
    return out


def _channels_last(t):
    return t.contiguous(memory_format=torch.channels_last) if t.dim() == 4 else t


def _variants(args, kwargs):
    """(name, args, kwargs): as given, non-contiguous, and channels_last
    where a tensor is 4-D."""
    yield "contiguous", args, kwargs
    yield "noncontiguous", _map(noncontiguous_like, args), _map(noncontiguous_like, kwargs)
    if any(t.dim() == 4 for t in _tensors((args, kwargs))):
        yield "channels_last", _map(_channels_last, args), _map(_channels_last, kwargs)


FAILURES = ("MISMATCH", "UNDOCUMENTED REFUSAL")


def _outcome(target, theirs, ours):
    """``(outcome, detail)``: "ran", the refusal rule's name, or a failure
    ("MISMATCH", "UNDOCUMENTED REFUSAL") with the message; None when torch
    refuses the sample too (not counted)."""
    try:
        want = theirs()
    except ERRORS:
        return None
    try:
        got = ours()
    except ERRORS as exc:
        rule = rule_for(target, str(exc))
        if rule is None:
            return FAILURES[1], f"{type(exc).__name__}: {exc}"
        return rule.name, ""
    try:
        torch.testing.assert_close(got, want, **TOLERANCE)
    except AssertionError as exc:
        return FAILURES[0], str(exc)
    return "ran", ""


def _op_samples():
    infos = {info.name: info for info in op_db if not info.variant_test_name}
    for name, target, ours, theirs in OP_TARGETS:
        info = infos[name]
        for s in info.sample_inputs("cpu", torch.float32, requires_grad=False):
            for variant, args, kwargs in _variants((s.input,) + tuple(s.args), s.kwargs):
                yield (f"{name} -> {target}", target, variant,
                       lambda a=args, k=kwargs, f=theirs or info.op: f(*a, **k),
                       lambda a=args, k=kwargs, f=ours: f(*a, **k))


def _ours(cls, module):
    return lambda *a, **k: MODULES[cls].from_torch(module)(*a, **k)


def _module_samples():
    for info in module_db:
        cls = info.module_cls
        if cls not in MODULES:
            continue
        target = f"nn.{cls.__name__}"
        for mi in info.module_inputs_func(info, device="cpu", dtype=torch.float32,
                                          requires_grad=False, training=False):
            if mi.forward_input is None:
                continue
            c = mi.constructor_input
            module = cls(*c.args, **c.kwargs).to(torch.float32).eval()
            for variant, args, kwargs in _variants(mi.forward_input.args,
                                                   mi.forward_input.kwargs):
                yield (f"nn.{cls.__name__} (module)", target, variant,
                       lambda a=args, k=kwargs, m=module: m(*a, **k),
                       lambda a=args, k=kwargs, m=_ours(cls, module): m(*a, **k))


@pytest.fixture(scope="module")
def outcomes():
    """(group, variant, outcome, detail) of every sample torch accepts."""
    torch.manual_seed(0)
    out = []
    with torch.no_grad():
        for group, target, variant, theirs, ours in list(_op_samples()) + list(_module_samples()):
            outcome = _outcome(target, theirs, ours)
            if outcome is not None:
                out.append((group, variant) + outcome)
    return [(g, v, o) for g, v, o, _ in out], [x for x in out if x[2] in FAILURES]


def test_every_sample_matches_torch_or_is_refused_by_a_documented_rule(outcomes):
    """No mismatch, no refusal outside the rules; prints the fraction that
    ran, per target and in all."""
    outcomes, failures = outcomes
    assert not failures, "\n".join(f"{g} [{v}]: {o}: {d[:400]}" for g, v, o, d in failures)
    groups = sorted({g for g, _, _ in outcomes})
    lines = []
    for g in groups:
        mine = [o for gg, _, o in outcomes if gg == g]
        refused = sorted({o for o in mine if o != "ran"})
        why = ", ".join(f"{r} ({mine.count(r)})" for r in refused)
        lines.append(f"{g}: {mine.count('ran')}/{len(mine)} ran"
                     + (f"; refused: {why}" if why else ""))
    listed = [o for g, _, o in outcomes if not g.endswith(DERIVED)]
    ran = sum(o == "ran" for _, _, o in outcomes)
    lines.append(f"the ops and modules listed: {listed.count('ran')}/{len(listed)} = "
                 f"{listed.count('ran') / len(listed):.1%} ran")
    lines.append(f"all, with the routes derived from conv2d's samples: {ran}/{len(outcomes)} "
                 f"= {ran / len(outcomes):.1%} ran")
    print("\n".join(lines))
    assert ran >= RAN_AT_LEAST, "\n".join(lines)


def test_every_rule_is_used_and_well_formed(outcomes):
    """A rule no sample needs is stale: remove it when the work it names
    lands (and raise ``RAN_AT_LEAST``)."""
    used = {o for _, _, o in outcomes[0]}
    for r in REFUSALS:
        re.compile(r.pattern)
        assert r.reason and r.targets, r
        assert r.name in used, f"refusal rule {r.name!r} refuses no sample any more: remove it"


def test_the_harness_fails_what_it_must(monkeypatch):
    """A wrong number, or a refusal no rule documents, is a failure; torch's
    own refusal is not counted; a rule applies to its targets only (a rule
    made for this test: the table itself is empty today)."""
    import schedules.conformance as conformance
    monkeypatch.setattr(conformance, "REFUSALS", (conformance.Refusal(
        "bidirectional or projected RNN", ("nn.GRU",),
        r"bidirectional and proj_size are not supported", "a test rule"),))
    x = torch.ones(2)
    assert _outcome("matmul", lambda: x, lambda: x + 1)[0] == "MISMATCH"
    assert _outcome("matmul", lambda: x, lambda: x) == ("ran", "")

    def refuse(message):
        raise ValueError(message)
    assert _outcome("matmul", lambda: x, lambda: refuse("no"))[0] == "UNDOCUMENTED REFUSAL"
    # a rule applies only to its targets
    rnn = "schedules.nn.GRU: bidirectional and proj_size are not supported"
    assert _outcome("nn.GRU", lambda: x, lambda: refuse(rnn)) == ("bidirectional or projected RNN",
                                                                  "")
    assert _outcome("gemm", lambda: x, lambda: refuse(rnn))[0] == "UNDOCUMENTED REFUSAL"
    assert _outcome("matmul", lambda: refuse("torch refuses"), lambda: x) is None

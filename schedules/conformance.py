"""The one list of refusals allowed in the PyTorch conformance suite
(issue 30, A5; ``tests/test_torch_opinfo.py``).

The suite runs PyTorch's own sample inputs (OpInfo ``op_db`` and ModuleInfo
``module_db`` of ``torch.testing._internal``; float32, each also
non-contiguous and channels_last) through every op and module we register
whose torch counterpart has samples:

=========================  ===============================================
torch's samples            ours
=========================  ===============================================
``nn.functional.conv2d``   ``torch.ops.tiramisu.conv2d`` (and ``.padding``)
``mm``                     ``torch.ops.tiramisu.gemm``
``matmul``                 ``torch.ops.tiramisu.matmul``
``bmm``                    ``torch.ops.tiramisu.matmul`` (bmm's inputs are
                           matmul's without broadcasting)
``nn.functional.linear``   ``schedules.nn.Linear`` holding the sample's
                           weight and bias
``nn.Conv2d``, ``nn.Linear``, ``nn.LSTM``, ``nn.GRU`` (ModuleInfo)
                           ``schedules.nn.*.from_torch`` of torch's module
                           (the same parameters), eval mode
``nn.functional.conv2d``   derived routes, reported apart:
                           ``torch.ops.tiramisu.sparse_conv2d`` (the weight
                           in CSR form, a grouped one block-diagonal) and
                           ``torch.ops.tiramisu.conv_relu_maxpool`` (pool 2;
                           torch: ``max_pool2d(relu(conv2d(...)), 2)``)
=========================  ===============================================

Each sample either equals torch's result (``rtol=1e-4, atol=1e-4``, the
float32 tolerance of sums taken in another order) or is refused with a
ValueError/TypeError/RuntimeError whose message matches one rule of
:data:`REFUSALS` for that target; any other refusal fails the suite.
``addmm`` and ``max_pool2d`` have no op of ours (max-pool exists only fused
after a conv, ``tiramisu::conv_relu_maxpool``), so their samples are not
run.  ``until`` names the work that is to remove a rule ("" for a lasting
one).

Bidirectional stacks and LSTMs with ``proj_size`` > 0 run (composed per
direction by :func:`schedules.lstm`; the rule that refused them is gone).
torch's ModuleInfo samples of ``nn.LSTM``/``nn.GRU`` are all unbatched
``(T, I)`` inputs, so they stay under "unbatched RNN input" until that
lands; ``tests/test_rnn_bidirectional.py`` runs each of them as a batch of
one against torch."""
from __future__ import annotations

import re
from dataclasses import dataclass


@dataclass(frozen=True)
class Refusal:
    """A documented refusal: ``targets`` (the suite's target names it may
    refuse), ``pattern`` (a regex searched in the message), ``reason``,
    ``until`` (the work that removes it; "" for a lasting rule)."""
    name: str
    targets: tuple
    pattern: str
    reason: str
    until: str = ""


REFUSALS = (
    Refusal("unbatched conv2d input", ("conv2d", "sparse_conv2d", "conv_relu_maxpool"),
            r"tiramisu::\w+: input must be 4-D \(N, C, H, W\), got shape \(\d+, \d+, \d+\)$",
            "the conv ops take NCHW; torch also takes an unbatched (C, H, W) input",
            "issue 30 A2: unbatched conv input (the conv engineer's part)"),
    Refusal("uneven 'same' padding", ("conv2d", "conv_relu_maxpool", "nn.Conv2d"),
            r"padding='same' .* (needs uneven padding|pads unevenly)",
            "padding='same' with an odd total padding d*(k-1) pads one more on the "
            "bottom/right in torch; the kernels pad both sides equally",
            "issue 30 A2: uneven 'same' padding (the conv engineer's part)"),
    Refusal("string padding on sparse_conv2d", ("sparse_conv2d",),
            r"tiramisu::sparse_conv2d\(\) Expected a value of type 'List\[int\]' for argument "
            r"'padding' but instead found type 'str'",
            "tiramisu::sparse_conv2d has no overload taking padding='valid'/'same' (conv2d's "
            "conv2d.padding); the caller passes the padding as ints",
            "a sparse_conv2d.padding overload, as conv2d's"),
    Refusal("unbatched RNN input", ("nn.LSTM", "nn.GRU"),
            r"expected \((T, B, I|B, T, I)\).*got shape \(\d+, \d+\)$",
            "the RNN kernels take (T, B, I) (or (B, T, I) batch_first); torch also takes an "
            "unbatched (T, I) input",
            "issue 30 A2: unbatched LSTM/GRU input (the RNN engineer's part)"),
)


def rule_for(target: str, message: str) -> Refusal | None:
    """The rule of :data:`REFUSALS` that allows ``target`` to refuse with
    ``message``, None if none does."""
    return next((r for r in REFUSALS if target in r.targets and re.search(r.pattern, message)),
                None)

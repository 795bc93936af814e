"""The one list of refusals allowed in the PyTorch conformance suite
(issue 30, A5; ``tests/schedules/test_torch_opinfo.py``).

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

Today the table is empty: every float32 sample of the list above runs and
equals torch's (unbatched conv and RNN inputs, torch's uneven "same"
padding, ``sparse_conv2d.padding``, groups on every algorithm, bidirectional
stacks and ``proj_size`` > 0 have removed the rules that once refused them).
A refusal the library adds must be listed here, with its reason, or the suite
fails."""
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


REFUSALS: tuple = ()


def rule_for(target: str, message: str) -> Refusal | None:
    """The rule of :data:`REFUSALS` that allows ``target`` to refuse with
    ``message``, None if none does."""
    return next((r for r in REFUSALS if target in r.targets and re.search(r.pattern, message)),
                None)

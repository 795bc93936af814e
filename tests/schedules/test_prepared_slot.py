"""schedules.core.prepared's Slot: a call site's memory of its last lookup
(a folded conv's layer), found again with a few attribute reads and the same
bytewise comparison as any lookup -- never stale, every write seen; what it
does not remember; it keeps no entry alive; and the folded conv's plan that
uses it (layers of one layout, a fold of another layout).  Nothing is timed."""
import copy
import os

os.environ.setdefault("OMP_WAIT_POLICY", "passive")

import numpy as np
import pytest

from schedules.core import prepared as P

torch = pytest.importorskip("torch", reason="a slot remembers torch tensors only")


def test_a_slot_finds_its_entry_again_and_never_stale():
    """``prepared(..., slot=)``: the sources of the slot's last lookup are
    found again without a new value; a write the version cannot see
    (``.data``), an in-place op, another tensor of the same layout in the
    same place of the call, and an entry dropped from the cache are each
    seen: the value is that of the values passed, as without the slot."""
    P.clear()
    slot = P.Slot()
    w = torch.nn.Parameter(torch.randn(6, 4))
    b = torch.randn(6)

    def call(*sources):           # (the value, and how many values it made)
        before = P.PREPARATIONS["t_slot"]
        value = P.prepared("t_slot", list(sources), lambda c: float(c[0].sum() + c[1].sum()),
                           slot=slot)
        return value, P.PREPARATIONS["t_slot"] - before

    expect = lambda *s: float(np.float32(s[0].detach().numpy().sum() + s[1].numpy().sum()))
    assert call(w, b)[1] == 1 and slot.key is not None
    assert call(w, b) == (expect(w, b), 0)
    assert call(w.detach(), b)[1] == 0                   # (a detached view: the same place)
    w.data.mul_(2.0)                                     # .data: the version unchanged
    assert call(w, b) == (expect(w, b), 1)
    with torch.no_grad():
        b.add_(1.0)                                      # in place: a new version
    assert call(w, b) == (expect(w, b), 1)
    other = torch.randn(6, 4)                            # another weight, the same layout
    assert call(other, b) == (expect(other, b), 1)
    assert call(w, b) == (expect(w, b), 0)               # (the cache's entry, found whole)
    P.clear()                                            # its entry gone: a whole lookup
    assert call(w, b) == (expect(w, b), 1)
    assert call(w, b)[1] == 0


def test_a_slot_finds_owned_sources_by_identity_while_they_stay_owned():
    """An owned source (:func:`~schedules.core.prepared.own`: a frozen
    graph's parameter, the cache's own fold) is remembered by a slot and
    found again by identity alone, as a whole lookup finds it (a ``.data``
    write is not seen, as freezing documents); an in-place op (a new
    version), another owner at the same place, and the owned array's death
    are each a new lookup; a source not owned beside it is still compared."""
    P.clear()
    slot = P.Slot()
    w, b = torch.randn(6, 4), torch.randn(6)
    P.own(w)

    def call(*sources):
        before = P.PREPARATIONS["t_slot_owned"]
        value = P.prepared("t_slot_owned", list(sources),
                           lambda c: float(c[0].sum() + c[1].sum()), slot=slot)
        return value, P.PREPARATIONS["t_slot_owned"] - before

    expect = lambda: float(np.float32(w.numpy().sum() + b.numpy().sum()))
    first = call(w, b)
    assert first[1] == 1 and slot.key is not None and slot.owners[0] and not slot.owners[1]
    assert call(w, b) == (first[0], 0)
    w.data.mul_(2.0)                        # owned: found by identity, as any lookup finds it
    assert call(w, b) == (first[0], 0)
    b.data.add_(1.0)                        # not owned: compared, the write seen
    assert call(w, b) == (expect(), 1)
    with torch.no_grad():
        w.add_(1.0)                         # a new version of the owned source
    assert call(w, b) == (expect(), 1)
    assert call(w, b)[1] == 0
    P.own(w)                                # owned again: another serial, another entry
    assert call(w, b) == (expect(), 1)
    assert call(w, b)[1] == 0
    del w
    import gc
    gc.collect()
    w = torch.randn(6, 4)                   # (may take the dead one's place): not found by it
    assert call(w, b) == (expect(), 1)


@pytest.mark.parametrize("with_slot", [False, True])
def test_an_owned_tensor_whose_storage_moved_owns_its_old_place_no_more(with_slot):
    """An owned tensor whose storage moves (``set_``; ``param.data = ...``
    likewise) leaves its old place to another tensor, found there as an
    ordinary source (compared), not by identity as the owned one was: here
    a tensor over the same memory, in the same version, whose values were
    then written through NumPy (no version bump) -- the value is made anew,
    with or without a slot (the old place had stayed owned while the
    tensor lived: the other tensor got the owned one's value)."""
    P.clear()
    slot = P.Slot() if with_slot else None
    make = lambda arrays: float(np.asarray(arrays[0]).sum())
    storage = torch.ones(1024).untyped_storage()
    t = torch.empty(0).set_(storage, 0, (1024,), (1,))
    P.own(t)
    version = t._version
    assert P.prepared("t_moved", [t], make, slot=slot) == 1024.0
    assert P.prepared("t_moved", [t], make, slot=slot) == 1024.0       # (found by identity)
    t.set_(torch.zeros(1024))                                          # its storage moves
    other = torch.empty(0).set_(storage, 0, (1024,), (1,))             # at t's old place
    assert other._version == version and other.data_ptr() != t.data_ptr()
    other.numpy()[:] = 5.0                                             # (no version bump)
    assert P.prepared("t_moved", [other], make, slot=slot) == 5120.0
    assert P.prepared("t_moved", [t], make, slot=slot) == 0.0


def test_a_slot_is_not_kept_for_sources_it_cannot_identify():
    """NumPy sources (no version) and inference tensors (none either) are
    looked up whole through a slot: it remembers nothing."""
    slot = P.Slot()
    a = np.arange(5, dtype=np.float32)
    P.prepared("t_slot_np", [a], lambda c: 1, slot=slot)
    assert slot.key is None
    with torch.inference_mode():
        t = torch.randn(5)
    P.prepared("t_slot_inf", [t], lambda c: 1, slot=slot)
    assert slot.key is None


def test_folded_layers_of_one_layout_each_get_their_own_fold():
    """Converted conv + BatchNorm layers of one layout share the folded
    conv's plan (the call memo's): each layer's result is its own, and a
    BatchNorm statistic written through ``.data`` after the plan ran is
    seen by the next call (torch's values)."""
    import schedules.nn
    nn = torch.nn
    torch.manual_seed(3)
    model = nn.Sequential(*(m for _ in range(3) for m in (nn.Conv2d(8, 8, 3, padding=1),
                                                          nn.BatchNorm2d(8), nn.ReLU())))
    for m in model:
        if isinstance(m, nn.BatchNorm2d):
            nn.init.uniform_(m.weight, 0.5, 1.5)
            m.running_var.uniform_(0.5, 1.5)
    model.eval()
    ours = schedules.nn.convert(copy.deepcopy(model)).eval()
    x = torch.randn(2, 8, 9, 9)
    with torch.no_grad():
        for _ in range(3):
            torch.testing.assert_close(ours(x), model(x), rtol=1e-5, atol=1e-5)
        for m in (model, ours):
            m[4].running_var.data.mul_(4.0)
            m[3].weight.data.add_(0.5)
        torch.testing.assert_close(ours(x), model(x), rtol=1e-5, atol=1e-5)


def test_a_slot_keeps_no_entry_alive():
    """A slot refers to its entry weakly: an entry the cache drops (cleared,
    evicted) is freed, with its copies and value, whatever slot remembers it."""
    import gc
    import weakref

    class Value:
        pass
    slot, w = P.Slot(), torch.randn(64)
    value = weakref.ref(P.prepared("t_slot_alive", [w], lambda c: Value(), slot=slot))
    assert slot.key is not None and value() is not None
    P.clear()
    gc.collect()
    assert value() is None
    assert P.prepared("t_slot_alive", [w], lambda c: 7, slot=slot) == 7


def test_a_folded_plan_takes_a_fold_of_another_layout_whole():
    """The fold of an expanded (stride-0) weight is contiguous from the cache
    and keeps the weight's strides when made apart (inference tensors): a
    plan made by one call runs the other's fold through the whole path, not
    its kernel (which refused it), with torch's values."""
    import torch.nn.functional as F

    import schedules.torch_fused_ops  # noqa: F401  (registers the op)

    def params(inference, seed):
        with torch.inference_mode(inference):
            torch.manual_seed(seed)
            w = torch.randn(8, 1, 3, 3).expand(8, 8, 3, 3)
            b, g, beta, mean = (torch.randn(8) for _ in range(4))
            var = torch.rand(8) + 0.5
        return w, b, g, beta, mean, var

    x = torch.randn(2, 8, 10, 10)
    for p in (params(True, 1), params(False, 2), params(False, 2), params(True, 3)):
        w, b, g, beta, mean, var = p
        got = torch.ops.tiramisu.conv2d_folded(x, w, b, g, beta, mean, var, 1e-5, [1, 1],
                                               [1, 1], [1, 1], 1, activation="relu")
        want = F.relu(F.batch_norm(F.conv2d(x, w, b, 1, 1), mean, var, g, beta, False, 0.0,
                                   1e-5))
        torch.testing.assert_close(got, want, rtol=1e-4, atol=1e-4)

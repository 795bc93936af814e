"""Helpers of the torch tests (torch imported when called: it is optional)."""


def dispatch_recorder():
    """A ``TorchDispatchMode`` that records the name of every op dispatched
    under it (``.ops``) and runs it: a tracer's view of a call."""
    from torch.utils._python_dispatch import TorchDispatchMode

    class Seen(TorchDispatchMode):
        def __init__(self):
            super().__init__()
            self.ops = []

        def __torch_dispatch__(self, func, types, args=(), kwargs=None):
            self.ops.append(str(func))
            return func(*args, **(kwargs or {}))

    return Seen()


ADDS = ("iadd", "radd", "torch.add", "add_")


def residual_add(how, out, shortcut):
    """``out + shortcut`` spelt as ``how`` (one of :data:`ADDS`): ``+=``,
    the shortcut first, ``torch.add``, ``Tensor.add_``; what a residual
    block's forward writes (each spelling a different node of a traced graph)."""
    import torch
    if how == "iadd":
        out += shortcut
        return out
    if how == "radd":
        return shortcut + out
    return torch.add(out, shortcut) if how == "torch.add" else out.add_(shortcut)

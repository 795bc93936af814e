"""Magnitude pruning: the stand-in for the lottery-ticket masks of the
TIRAMISU paper's sparse benchmarks (those masks come from training runs on
data this project does not have; pruning a layer's weights to the same
density by magnitude gives the same number and spread of nonzeros per
layer, which is what the sparse kernels' speed depends on, not which
weights they are)."""
from __future__ import annotations

import numpy as np

from ..core.arrays import is_torch


def prune_magnitude(w, density):
    """A copy of the dense weight ``w`` (NumPy array or torch tensor, any
    shape; the result has its kind, dtype and device) with all but its
    ``round(density * w.size)`` largest-magnitude entries set to zero (ties
    kept in order of position).  ``density`` in [0, 1]; ValueError naming it
    otherwise.  NaN entries are refused (their magnitude has no order)."""
    if isinstance(density, bool) or not isinstance(density, (int, float, np.floating)) \
            or not 0.0 <= float(density) <= 1.0:
        raise ValueError(f"prune_magnitude: density must be a number in [0, 1], got {density!r}")
    if is_torch(w):
        dense = w.detach().cpu().numpy()
    elif isinstance(w, np.ndarray):
        dense = w
    else:
        raise TypeError(f"prune_magnitude: w must be a NumPy array or torch tensor, got "
                        f"{type(w).__name__}")
    if not np.issubdtype(dense.dtype, np.floating):
        raise TypeError(f"prune_magnitude: w must be floating point, got {dense.dtype}")
    mag = np.abs(dense).ravel()
    if np.isnan(mag).any():
        raise ValueError("prune_magnitude: w holds NaN, whose magnitude has no order")
    keep = int(round(float(density) * mag.size))
    mask = np.zeros(mag.size, bool)
    if keep:
        mask[np.argsort(-mag, kind="stable")[:keep]] = True
    pruned = np.where(mask.reshape(dense.shape), dense, dense.dtype.type(0))
    if is_torch(w):
        import torch
        return torch.as_tensor(pruned, dtype=w.dtype).to(w.device)
    return pruned

"""Helpers of the language tests (tests/tiramisu_py/test_language*.py): seeded random
inputs and the tolerance rule (integers exact; float64 rtol 1e-6, float32
rtol = atol = 1e-5), a communicator of one rank without MPI."""
import os

import numpy as np

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
INTS = ["int8", "int32", "int64"]
FLOATS = ["float32", "float64"]


def rng(seed):
    return np.random.default_rng(seed)


def close(out, ref, dtype):
    if np.dtype(dtype) == np.float32:
        np.testing.assert_allclose(out, ref, rtol=1e-5, atol=1e-5)
    else:
        np.testing.assert_allclose(out, ref, rtol=1e-6, atol=1e-12)


class OneRank:
    """A communicator of one rank, without MPI (nothing is ever sent): a
    distributed kernel's call on one process."""

    def Get_size(self):
        return 1

    def Get_rank(self):
        return 0

    def allreduce(self, x):
        return x

"""The documented public path of the sparse convolution's names
(``from schedules.sparse import CSRWeights``, as ``tiramisu_py/nn.py`` and
users import them); they live in :mod:`schedules.weights.csr` and
:mod:`schedules.api`."""
from .api import sparse_conv2d, sparse_conv2d_function, sparse_conv_relu_maxpool
from .weights.csr import CSRWeights, as_csr, is_sparse

__all__ = ["CSRWeights", "as_csr", "is_sparse", "sparse_conv2d", "sparse_conv2d_function",
           "sparse_conv_relu_maxpool"]

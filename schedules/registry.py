"""The operator library's solvers, one list per operator in order of
preference, and the design of the library.

Design (as MIOpen's solver architecture)
----------------------------------------
* **Problem** (:mod:`schedules.problems`): per operator one frozen dataclass
  (:class:`~schedules.problems.conv.ConvProblem` for conv2d and the fused
  conv+ReLU+max-pool block, dense or CSR weights;
  :class:`~schedules.problems.gemm.GemmProblem` for gemm / batched gemm;
  :class:`~schedules.problems.rnn.RnnProblem` for lstm / gru, inference
  or training, :class:`~schedules.problems.rnn.ProjectedProblem` for a
  projected stack's layer), parsed ONCE
  from the torch-style arguments by ``from_call`` (host or device arrays,
  checked into the arguments the solvers run on) -- or, for shapes only,
  ``ConvProblem.from_meta`` (torch's fake implementations,
  :mod:`schedules.torch_ops`).  ``key()`` names every field and the
  problem's ``VERSION``: a new field makes new keys, never orphaned records.
* **Solver** (:class:`schedules.core.solver.Solver`, :mod:`schedules.solvers`):
  ``applicable(problem)`` returns True or the reason it does not apply;
  ``params(problem)`` the defaults (derived from :func:`schedules.host`);
  ``space(problem)`` the tunable parameters (may be empty);
  ``build(problem, params)`` the scheduled Function; ``run(problem, args)``
  lays the arguments out (im2col's weight matrix, CSR arrays, RNN packing)
  and runs the kernel compiled once per process
  (:mod:`schedules.core.kernels`); ``solve(problem, args)`` is the call's
  result (``run``'s, with what the operator adds around it: the bases
  :class:`~schedules.blocks.conv_common.ConvSolver`,
  :class:`~schedules.blocks.rnn_common.RnnSolver`).  Each solver is its own
  class with its own ``build`` and ``run`` (no branch on its own name).
  Solver modules never import each other: what several share lives below
  them in :mod:`schedules.blocks` (schedule pieces, solver bases) and
  :mod:`schedules.weights` (CSR and RNN weight layouts); a solver that
  needs others (training finds its forward) is given them here.
* **Registry** (``SOLVERS`` here): one list per operator (and per kind of
  problem: "lstm_train", "lstm_projected"); adding a solver is one class
  and one line here.  A forced
  ``algo=`` (``schedule=``) that does not apply raises one error naming
  every solver of the operator and why it does not apply.
* **Find** (:func:`schedules.core.find.find`): with "auto", among the
  candidates -- the applicable solvers with the first one's ``numerics``,
  which give the same result bit for bit, so timing never changes the
  answer (:func:`schedules.core.find.candidates`: a dense conv weight runs
  direct or spatial_pack, never im2col, Winograd or the sparse solver,
  which skips zeros; those run when ``algo=`` names them) -- the only one,
  the first for a degenerate problem, else the fastest:
  remembered in the tuning store (:class:`tiramisu_py.tuning.Store`) under
  ONE record kind, "find", keyed by the problem's key, the candidates'
  versions, the library's version and the host (SIMD width, cores); or
  timed now on the call's arguments and recorded.
* **Migration**: the former kinds "conv_find" and "rnn_find" (and the
  legacy ``conv_find.json``) are retired, not migrated: their keys were
  positional (``json.dumps(list(vars(ConvShape).values()))``), so their
  records are removed from the store on first use and each problem is
  timed once more (:data:`schedules.core.find.RETIRED`).
* **Tuned parameters** (:mod:`schedules.core.tuned`, :mod:`schedules.tuner`):
  ``schedules.tune_library`` times each solver's ``space`` per host and
  shape class and records the winners under the kind "params"; ``run``
  builds with them (the host defaults where none is recorded), and the find
  key names them, so a choice made before tuning is made again.
* **API** (:mod:`schedules.api`): each public call is parse ->
  :func:`schedules.core.find.solve` (find, then the solver's ``solve``);
  it imports no solver module.
"""
from __future__ import annotations

from .solvers import conv_dense, conv_fused, rnn_cpu
from .solvers.conv_cuda import CudaDirect
from .solvers.conv_dense import Direct, Im2col, SpatialPack
from .solvers.conv_depthwise import Depthwise
from .solvers.conv_fused import FusedDirect, FusedWinograd
from .solvers.conv_pointwise import Pointwise
from .solvers.conv_sparse import SparseCSR
from .solvers.conv_sparse_cuda import CudaSparseCSR
from .solvers.gemm_blis import Blis
from .solvers.gemm_cuda import CudaTiled
from .solvers.gemm_cuda_mma import CudaTensorCore
from .solvers.gemm_dot import DotGemm
from .solvers.gemm_rows import Rows, RowsT
from .solvers.lstm_projected import Projected
from .solvers.resize_conv import ResizeDirect, ResizeSparse
from .solvers.rnn_cpu import Layer, Wavefront
from .solvers.rnn_cuda import CudaWavefront
from .solvers.rnn_train import TrainLayer, TrainWavefront

_RNN = {cell: [Layer(cell), Wavefront(cell), CudaWavefront(cell)] for cell in ("lstm", "gru")}

SOLVERS = {
    "conv2d": [Direct(), Depthwise(), Pointwise(), Im2col(), SpatialPack(), SparseCSR("conv2d"),
               CudaDirect(), CudaSparseCSR()],
    "conv_relu_maxpool": [FusedDirect(), FusedWinograd(), SparseCSR("conv_relu_maxpool")],
    "resize_conv_relu_maxpool": [ResizeDirect(), ResizeSparse()],
    "gemm": [RowsT(), Rows(), Blis("gemm"), DotGemm("gemm"), CudaTiled(), CudaTensorCore()],
    "batched_gemm": [Blis("batched_gemm"), DotGemm("batched_gemm")],
    "gemm_int8": [DotGemm("gemm_int8")],
    "lstm": _RNN["lstm"],
    "gru": _RNN["gru"],
    # training: the backward's schedules, each finding its forward among the op's solvers
    "lstm_train": [TrainLayer("lstm", _RNN["lstm"]), TrainWavefront("lstm", _RNN["lstm"])],
    "gru_train": [TrainLayer("gru", _RNN["gru"]), TrainWavefront("gru", _RNN["gru"])],
    "lstm_projected": [Projected()],      # one direction of one layer of a projected stack
}

CONV_ALGOS = tuple(conv_dense.BUILDERS)  # conv2d's dense algorithms (conv2d_function's)
FUSED_ALGOS = conv_fused.ALGOS           # conv_relu_maxpool's dense algorithms
RNN_SCHEDULES = rnn_cpu.SCHEDULES        # lstm / gru's schedules


def names(op, target="cpu"):
    """The names of ``op``'s solvers for ``target`` ("cpu" or "cuda"), in order."""
    return tuple(dict.fromkeys(s.name for s in SOLVERS[op] if s.target == target))

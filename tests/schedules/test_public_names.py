"""The public names of ``tiramisu_py`` and ``schedules``, listed: the
architecture work moves code between modules, and none of these may change
(a new public name is added here on purpose, in the change that adds it)."""
import inspect

import tiramisu_py as tp
import schedules

TIRAMISU_PY = ["Function", "Var", "Buffer", "Computation", "Update", "Kernel", "Expr", "DType",
               "bfloat16", "float16", "float32", "float64", "int8", "uint8", "int32", "int64", "bool_", "bool", "exp",
               "log", "tanh", "sigmoid", "sqrt", "abs", "floor", "ceil", "min", "max", "select",
               "cast", "IllegalScheduleError", "cache_dir", "Picture", "draw_compare",
               "tune"]
SCHEDULES = ["gemm", "batched_gemm", "gemm_int8", "gemm_function", "gemm_params", "GemmParams", "conv2d",
             "conv2d_function", "conv_relu_maxpool", "conv_relu_maxpool_function", "CONV_ALGOS",
             "FUSED_ALGOS", "host", "gemm_cuda_function", "rnn_cuda_function", "CSRWeights",
             "sparse_conv2d", "sparse_conv2d_function", "sparse_conv_relu_maxpool", "lstm", "gru",
             "lstm_function", "gru_function", "RNNWeights", "RNN_SCHEDULES",
             "resize_conv_relu_maxpool", "resize_conv_relu_maxpool_function", "prune_magnitude",
             "fold_batchnorm", "vgg_block", "resnet_block", "matmul", "max_pool2d", "tune_library"]

# tiramisu_py.mpi (distributed execution; imports without mpi4py)
MPI = ["COMM_WORLD", "MPIUnavailable", "abort_on_error", "block_owner", "block_range",
       "comm_world", "gather", "recv", "scatter", "send", "stats"]


def test_tiramisu_py_public_names():
    assert tp.__all__ == TIRAMISU_PY
    classes = {"Function", "Var", "Buffer", "Computation", "Update", "Kernel", "Expr", "DType",
               "IllegalScheduleError", "Picture"}
    for name in TIRAMISU_PY:
        obj = getattr(tp, name)
        assert inspect.isclass(obj) == (name in classes), name
    assert issubclass(tp.IllegalScheduleError, Exception)
    assert isinstance(tp.float32, tp.DType) and tp.bool is tp.bool_


def test_mpi_public_names():
    import tiramisu_py.mpi as tpmpi
    assert tpmpi.__all__ == MPI
    assert callable(tp.Computation.distribute)


def test_schedules_public_names():
    assert schedules.__all__ == SCHEDULES
    for name in SCHEDULES:
        assert getattr(schedules, name) is not None, name
    assert callable(schedules.conv2d) and isinstance(schedules.CONV_ALGOS, tuple)


def test_the_signatures_users_call():
    sig = lambda f: list(inspect.signature(f).parameters)       # noqa: E731
    assert sig(schedules.conv2d)[:7] == ["input", "weight", "bias", "stride", "padding",
                                         "dilation", "groups"]
    assert sig(schedules.gemm)[:2] == ["a", "b"]
    assert sig(schedules.resize_conv_relu_maxpool)[:5] == ["x", "size", "weight", "bias", "pool"]
    assert sig(tp.Function)[:2] == ["name", "params"]


def test_the_scheduling_signatures_of_issue_29():
    sig = lambda f: list(inspect.signature(f).parameters)       # noqa: E731
    # issue 55 named reassociate=True
    assert sig(tp.Function.auto_schedule) == ["self", "target", "budget", "reassociate"]
    assert sig(tp.tune)[:4] == ["f", "space", "budget", "params"]
    assert sig(tp.Function.tile_band)[:4] == ["self", "statements", "loops", "sizes"]
    assert sig(tp.Computation.parallelize)[:5] == ["self", "loop", "allow_reassociation",
                                                   "schedule", "chunk"]

"""Clear errors for the cases a hostile sweep found unclear (issue 30,
item 11): each reproduced, each message names the argument and says what
to do."""
import os
import re

os.environ.setdefault("OMP_WAIT_POLICY", "passive")

import numpy as np
import pytest

import schedules
from schedules.weights.csr import CSRWeights

torch = pytest.importorskip("torch")
RNG = np.random.default_rng(11)


def f32(*shape):
    return RNG.standard_normal(shape, dtype=np.float32)


@pytest.mark.parametrize("cell", ["lstm", "gru"])
def test_a_flat_weight_list_is_refused(cell):
    m = getattr(torch.nn, cell.upper())(4, 5, num_layers=2)
    with pytest.raises(TypeError, match=rf"weights: got a flat list of {4 * 2} arrays \(like "
                                        rf"{cell.upper()}._flat_weights\); pass one list per layer"):
        getattr(schedules, cell)(torch.randn(3, 2, 4), m._flat_weights)


class DeviceArray:
    """Any ``__cuda_array_interface__`` object (as cupy's or numba's)."""
    shape = (4, 4)
    __cuda_array_interface__ = {"shape": (4, 4), "typestr": "<f4", "data": (0, False),
                                "version": 3}


def test_a_device_array_passed_to_a_cpu_op_is_named():
    a = f32(4, 4)
    with pytest.raises(ValueError, match=r"target='llvm' runs on the CPU, but a is a device "
                                         r"array \(DeviceArray\)"):
        schedules.gemm(DeviceArray(), a, target="llvm")
    with pytest.raises(ValueError, match="but input is a device array"):
        schedules.conv2d(DeviceArray(), f32(2, 2, 3, 3), target="c")
    # an operator without a GPU solver: copy it to the host
    with pytest.raises(TypeError, match=r"a: a device array \(DeviceArray, "
                                        r"__cuda_array_interface__\) passed to an operator that "
                                        r"runs on the CPU here; copy it to the host"):
        schedules.batched_gemm(DeviceArray(), f32(1, 4, 4))


def test_a_mutated_rowptr_is_named():
    w = f32(4, 2, 3, 3) * (RNG.random((4, 2, 3, 3)) < 0.4)
    x = f32(1, 2, 6, 6)
    for used_before in (True, False):
        c = CSRWeights.from_dense(w.astype(np.float32))
        if used_before:            # a cached layout must not hide the change
            schedules.sparse_conv2d(x, c)
        with pytest.raises(ValueError, match="read-only"):   # CSRWeights freezes its copies
            c.rowptr[1] = c.rowptr[2] + 3
        c.rowptr.setflags(write=True)                           # a caller who insists
        c.rowptr[1] = c.rowptr[2] + 3
        with pytest.raises(ValueError, match=r"w: its rowptr was changed after construction "
                                             r"\(rowptr\[1\] = \d+, rowptr\[2\] = \d+.*make a new "
                                             "CSRWeights"):
            schedules.sparse_conv2d(x, c)


def test_a_sparse_weight_that_requires_grad_is_refused():
    w = torch.from_numpy(f32(4, 18)).to_sparse_csr().requires_grad_(True)
    x = torch.from_numpy(f32(1, 2, 6, 6))
    with pytest.raises(ValueError, match=r"w: a sparse weight that requires grad: the sparse "
                                         r"convolution has no backward; pass w.detach\(\)"):
        schedules.sparse_conv2d(x, w)
    with pytest.raises(ValueError, match=r"weight: a sparse weight that requires grad"):
        schedules.conv2d(x, w)


class Sub(torch.Tensor):
    pass


def test_a_tensor_subclass_is_named():
    want = r"{}: a subclass of torch.Tensor \(Sub\) is not supported.*{}.as_subclass\(torch.Tensor\)"
    x, w = torch.from_numpy(f32(1, 2, 5, 5)), torch.from_numpy(f32(2, 2, 3, 3))
    with pytest.raises(TypeError, match=want.format("input", "input")):
        schedules.conv2d(x.as_subclass(Sub), w)
    with pytest.raises(TypeError, match=want.format("weight", "weight")):
        schedules.conv2d(x, w.as_subclass(Sub))
    with pytest.raises(TypeError, match=want.format("b", "b")):
        schedules.gemm(torch.ones(3, 3), torch.ones(3, 3).as_subclass(Sub))
    m = torch.nn.LSTM(4, 5)
    with pytest.raises(TypeError, match=want.format("x", "x")):
        schedules.lstm(torch.randn(3, 2, 4).as_subclass(Sub), m.all_weights)
    # torch's own subclass (a Parameter) is a plain tensor to us
    assert schedules.conv2d(x, torch.nn.Parameter(w, requires_grad=False)).shape == (1, 2, 3, 3)


def test_a_csr_shape_beyond_int64_is_refused():
    with pytest.raises(ValueError, match=r"CSRWeights: shape \(2, 4611686018427387904, 4, 4\) "
                                         r"has \d+ elements, more than int64 can index"):
        CSRWeights(np.zeros(3, np.int64), np.zeros(0, np.int64), np.zeros(0, np.float32),
                   (2, 2 ** 62, 4, 4))


@pytest.mark.parametrize("cell", ["LSTM", "GRU"])
def test_batch_first_message_shows_the_callers_shape(cell):
    from schedules import nn as snn
    m = getattr(snn, cell).from_torch(getattr(torch.nn, cell)(4, 5, batch_first=True))
    for shape in [(2, 3, 4, 1), (0, 3, 4)]:      # (2, 3) is an unbatched (T, I): see below
        with pytest.raises(ValueError, match=rf"{cell}: input: expected \(B, T, I\) "
                                             rf"\(batch_first=True\).*got shape "
                                             + re.escape(str(shape))):
            m(torch.randn(*shape))
    with pytest.raises(ValueError, match=r"x: input size 7 \(its last dimension\), but "
                                         r"weights\[0\]\[0\] \(w_ih of layer 0\) expects 4"):
        m(torch.randn(2, 3, 7))
    with pytest.raises(ValueError, match=r"x: input size 3 \(its last dimension\), but "
                                         r"weights\[0\]\[0\] \(w_ih of layer 0\) expects 4"):
        m(torch.randn(2, 3))                       # unbatched, as torch takes it


def test_batched_gemm_says_which_size_differs():
    with pytest.raises(ValueError, match=r"batched_gemm: a holds 2 matrices but b holds 3"):
        schedules.batched_gemm(f32(2, 3, 4), f32(3, 4, 5))
    with pytest.raises(ValueError, match=r"batched_gemm: a is 2x3x4 but b is 2x5x6; inner "
                                         r"dimensions differ \(4 and 5\)"):
        schedules.batched_gemm(f32(2, 3, 4), f32(2, 5, 6))


@pytest.mark.parametrize("which", ["a", "b"])
def test_non_native_byte_order_says_so_and_how_to_convert(which):
    """Issue 52: gemm on a big-endian array said "expected >f4, got >f4"."""
    args = {"a": f32(3, 4), "b": f32(4, 5)}
    args[which] = args[which].astype(">f4")
    for call in (schedules.gemm, schedules.matmul):
        with pytest.raises(TypeError, match=rf"^{which}: non-native byte order \(>f4\); convert "
                                            rf"it with {which}\.astype\(np\.float32\) \(or "
                                            rf"{which}\.byteswap\(\)\.view\({which}\.dtype"
                                            r"\.newbyteorder\(\)\)\)$"):
            call(args["a"], args["b"])
    with pytest.raises(TypeError, match=r"^weight: non-native byte order"):
        schedules.conv2d(f32(1, 2, 5, 5), f32(3, 2, 3, 3).astype(">f4"))


def test_winograd_names_the_stride_and_dilation():
    x, w = f32(1, 2, 8, 8), f32(2, 2, 3, 3)
    for kw, got in (({"stride": 2}, "stride=2"), ({"dilation": 2}, "dilation=2")):
        with pytest.raises(ValueError, match=rf"algo 'winograd' needs a 3x3 kernel, stride=1, "
                                             rf"dilation=1, pool=2 and an output of at "
                                             rf"least 2x2 \(got {got}\); use 'direct'"):
            schedules.conv_relu_maxpool(x, w, padding=1, algo="winograd", **kw)


def test_lstm_and_gru_never_drop_autograd_silently():
    """``schedules.lstm(x, m.all_weights)`` on parameters that require grad
    returned ``y.requires_grad=False`` without a word.  Now the result
    carries the backpropagation-through-time kernels' backward (gradients
    as torch's); the paths with no backward kernel (CSR weights) still
    attach one that raises, naming the operator (issue 30, item 4)."""
    for cell, make in (("lstm", torch.nn.LSTM), ("gru", torch.nn.GRU)):
        m = make(4, 6, 2)
        x = torch.randn(3, 2, 4)
        run = getattr(schedules, cell)
        want = m(x)[0]
        y = run(x, m.all_weights)[0]
        assert y.requires_grad
        torch.testing.assert_close(y.detach(), want.detach(), atol=1e-5, rtol=1e-5)
        want.sum().backward()
        torch_grads = [p.grad.clone() for p in m.parameters()]
        m.zero_grad()
        y.sum().backward()
        for got, ref in zip((p.grad for p in m.parameters()), torch_grads):
            torch.testing.assert_close(got, ref, atol=1e-5, rtol=1e-4)
        xg = x.clone().requires_grad_(True)
        with pytest.raises(RuntimeError, match="has no backward kernel yet"):
            run(xg, [[w.detach() for w in layer] for layer in m.all_weights],
                sparse=True)[0].sum().backward()
        with torch.no_grad():                       # no graph: a plain result
            assert not run(x, m.all_weights)[0].requires_grad
        assert not run(x, [[w.detach() for w in layer] for layer in m.all_weights])[0].requires_grad


def test_training_mode_dropout_follows_torch_and_eval_does_not_drop():
    """Training-mode dropout was refused as a stopgap; now it drops what
    torch drops (its generator, its order), and eval mode drops nothing."""
    from schedules import nn as tnn
    m = torch.nn.LSTM(4, 6, 2, dropout=0.3)
    ours = tnn.LSTM.from_torch(m)
    x = torch.randn(3, 2, 4)
    torch.manual_seed(5)
    want = m(x)[0]
    torch.manual_seed(5)
    torch.testing.assert_close(ours(x)[0], want, atol=1e-5, rtol=1e-5)
    with pytest.raises(ValueError, match=r"dropout should be a number in range \[0, 1\]"):
        schedules.lstm(x, m.all_weights, dropout=1.5, training=True)
    ours.eval()
    m.eval()
    with torch.no_grad():
        torch.testing.assert_close(ours(x)[0], m(x)[0], atol=1e-5, rtol=1e-5)

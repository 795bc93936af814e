"""PyTorch integration: Kernel.torch_op, torch.ops.tiramisu.*, schedules.nn,
torch.compile, autograd, DLPack (issue 16)."""
import subprocess
import sys
import textwrap

import numpy as np
import pytest

import tiramisu_py as tp

torch = pytest.importorskip("torch", reason="torch is an optional extra; its tests need it")
F = torch.nn.functional
nn = torch.nn


def _axpy(name="axpy"):
    f = tp.Function(name, params=["N"])
    i = f.var("i", 0, "N")
    X, Y = f.input("X", ("N",), tp.float64), f.input("Y", ("N",), tp.float64)
    f.computation("Z", [i], 2.0 * X[i] + Y[i])
    return f.compile()


_OPCHECK_OK = {"test_schema": "SUCCESS", "test_autograd_registration": "SUCCESS",
               "test_faketensor": "SUCCESS", "test_aot_dispatch_dynamic": "SUCCESS"}


def _opcheck(op, args, kwargs=None):
    assert torch.library.opcheck(op, args, kwargs) == _OPCHECK_OK


def _d(*shape):
    return torch.randn(*shape, dtype=torch.float64, requires_grad=True)


# ------------------------------------------------------------ optional torch
def test_core_never_imports_torch():
    code = textwrap.dedent("""
        import sys
        import tiramisu_py, schedules
        assert "torch" not in sys.modules, "tiramisu_py imported torch"
        sys.modules["torch"] = None          # as if torch were not installed
        import numpy as np, tiramisu_py as tp
        f = tp.Function("neg", params=["N"]); i = f.var("i", 0, "N")
        A = f.input("A", ("N",), tp.float64); f.computation("B", [i], -A[i])
        assert (f.compile()(np.ones(3)) == -1).all()
        print("ok")
    """)
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert r.returncode == 0 and "ok" in r.stdout, r.stderr


# ------------------------------------------------------------ user kernels
def test_kernel_torch_op_eager_opcheck_and_grad():
    k = _axpy("axpy_op")
    op = k.torch_op("tp_test::axpy", backward=lambda ctx, g: (2 * g, g))
    assert op is torch.ops.tp_test.axpy
    assert k.torch_op("tp_test::axpy") is op            # idempotent
    x, y = torch.randn(7, dtype=torch.float64), torch.randn(7, dtype=torch.float64)
    torch.testing.assert_close(op(x, y), 2 * x + y)
    _opcheck(op.default, (x, y))
    # a plain call on tensors requiring grad goes through the op's backward
    xr = x.clone().requires_grad_()
    k(xr, y).sum().backward()
    torch.testing.assert_close(xr.grad, torch.full_like(x, 2.0))
    # the fake implementation uses the kernel's shape rules
    with pytest.raises(Exception, match="shape"):
        op(x, torch.randn(6, dtype=torch.float64))
    with pytest.raises(ValueError, match="already registered"):
        _axpy("axpy_other").torch_op("tp_test::axpy")


def test_kernel_torch_op_inplace_and_int_params():
    f = tp.Function("copy_into", params=["N"])
    i = f.var("i", 0, "N")
    A = f.input("A", ("N",), tp.float64)
    out = f.buffer("acc", ("N",), tp.float64, output=True)
    f.computation("acc_c", [i], A[i] + 1.0).store_in(out)
    op = f.compile().torch_op("tp_test::copy_into", inplace=("acc",))
    assert "Tensor(a!) acc" in str(op.default._schema)
    a, acc = torch.randn(4, dtype=torch.float64), torch.zeros(8, dtype=torch.float64)[::2]
    assert op(a, acc) is None
    torch.testing.assert_close(acc, a + 1)               # non-contiguous: copied back
    _opcheck(op.default, (a, torch.zeros(4, dtype=torch.float64)))
    # M is in no input's shape: a keyword-only int argument
    g = tp.Function("ramp", params=["N", "M"])
    i, j = g.var("i", 0, "N"), g.var("j", 0, "M")
    B = g.input("B", ("N",), tp.float64)
    g.computation("grid", [i, j], B[i] * j)
    op = g.compile().torch_op("tp_test::ramp")
    assert "*, int M" in str(op.default._schema)
    b = torch.randn(3, dtype=torch.float64)
    torch.testing.assert_close(op(b, M=4), b[:, None] * torch.arange(4.0, dtype=torch.float64))
    assert torch.library.opcheck(op.default, (b,), {"M": 4}) == _OPCHECK_OK


def test_kernel_without_backward_refuses_grad():
    f = tp.Function("square_nb", params=["N"])
    i = f.var("i", 0, "N")
    A = f.input("A", ("N",), tp.float64)
    f.computation("B", [i], A[i] * A[i])
    k = f.compile()
    x = torch.randn(3, dtype=torch.float64, requires_grad=True)
    with pytest.raises(RuntimeError, match="no backward"):
        k(x)
    with torch.no_grad():
        torch.testing.assert_close(k(x), x.detach() ** 2)


def test_a_call_after_a_fast_one_still_records_its_gradient():
    """The same shapes called first without a gradient (the call's plan is
    kept: the fast path), then on an input that requires one: the result
    carries the op's gradient, and under no_grad the fast path again."""
    f = tp.Function("square_fast", params=["N"])
    i = f.var("i", 0, "N")
    A = f.input("A", ("N",), tp.float64)
    f.computation("B", [i], A[i] * A[i])
    k = f.compile()
    k.torch_op("tp_test::square_fast", backward=lambda ctx, g: (2 * ctx.saved[0] * g,),
               setup_context=lambda ctx, inputs, output: setattr(ctx, "saved", inputs))
    x = torch.randn(5, dtype=torch.float64)
    torch.testing.assert_close(k(x), x ** 2)
    torch.testing.assert_close(k(x), x ** 2)                 # the kept plan
    xg = x.clone().requires_grad_()
    y = k(xg)
    assert y.requires_grad
    y.sum().backward()
    torch.testing.assert_close(xg.grad, 2 * x)
    with torch.no_grad():
        assert not k(xg).requires_grad


def test_shape_not_derivable_is_a_clear_error():
    """The fake implementation runs the kernel's own inference: an extent
    that fits no param value fails there (meta tensors, as under compile)."""
    f = tp.Function("pairs", params=["N"])
    i = f.var("i", 0, "N")
    A = f.input("A", ("2 * N",), tp.float64)
    f.computation("S", [i], A[2 * i] + A[2 * i + 1])
    op = f.compile().torch_op("tp_test::pairs")
    assert op(torch.empty(6, device="meta", dtype=torch.float64)).shape == (3,)
    with pytest.raises(ValueError, match=r"extent 5, which is not \(2 \* N\)"):
        op(torch.empty(5, device="meta", dtype=torch.float64))


# ------------------------------------------------------------ interop
class _DLPackOnly:
    """An object that only speaks DLPack (as CuPy or JAX arrays would)."""

    def __init__(self, a):
        self._a = a

    def __dlpack__(self, **kw):
        return self._a.__dlpack__(**kw)

    def __dlpack_device__(self):
        return self._a.__dlpack_device__()


def test_dlpack_without_copy_and_strides_rule():
    k = _axpy("axpy_dl")
    x, y = np.arange(5.0), np.ones(5)
    z = np.zeros(5)
    k(_DLPackOnly(x), _DLPackOnly(torch.from_numpy(y)), Z=_DLPackOnly(z))
    np.testing.assert_array_equal(z, 2 * x + 1)         # written through the DLPack view
    with pytest.raises(ValueError, match="not C-contiguous"):
        k(_DLPackOnly(np.arange(10.0)[::2]), y)
    # the op copies a non-contiguous tensor; a plain call refuses it
    op = k.torch_op("tp_test::axpy_dl")
    xt = torch.arange(10.0, dtype=torch.float64)[::2]
    torch.testing.assert_close(op(xt, torch.from_numpy(y)), 2 * xt + 1)
    with pytest.raises(ValueError, match="not C-contiguous"):
        k(xt, torch.from_numpy(y))


# ------------------------------------------------------------ library ops
@pytest.fixture(scope="module")
def ops():
    import schedules.torch_ops  # noqa: F401
    return torch.ops.tiramisu


def test_library_opcheck(ops):
    torch.manual_seed(0)
    a, b = _d(3, 4), _d(4, 2)
    _opcheck(ops.gemm.default, (a, b))
    x, w, bias = _d(2, 2, 5, 5), _d(3, 2, 3, 3), _d(3)
    _opcheck(ops.conv2d.default, (x, w, bias, [1, 1], [1, 1], [1, 1], 1))
    _opcheck(ops.conv2d.default, (x, w))                       # aten's defaults
    _opcheck(ops.conv2d.default, (x, w, None, [2], [1, 0], [1], 1), {"algo": "direct"})
    _opcheck(ops.conv2d.padding, (x, w, bias, [1, 1], "same"))
    _opcheck(ops.conv2d.padding, (x, w, None, [2, 1], "valid", [1, 2]))
    _opcheck(ops.conv_relu_maxpool.default, (x, w, bias, [1, 1], [1, 1]), {"pool": 2})
    _opcheck(ops.conv_relu_maxpool.default, (x, w, None, [2], [1], [1], 1), {"pool": 1})
    _opcheck(ops.conv_relu_maxpool.padding, (x, w, bias, [1], "same"))
    # the backward ops have no backward themselves (no double backward)
    g, x, w, bias = torch.randn(2, 3, 5, 5, dtype=torch.float64), x.detach(), w.detach(), bias.detach()
    _opcheck(ops.conv2d_grad_input.default, (g, w, [2, 2, 5, 5], [1, 1], [1, 1], [1, 1], 1))
    _opcheck(ops.conv2d_grad_weight.default, (g, x, [3, 2, 3, 3], [1, 1], [1, 1], [1, 1], 1))
    _opcheck(ops.conv2d_grad_weight.default, (g, x, [3, 2, 3, 3], [1, 1], [1, 1], [1, 1], 1),
             {"bias": False})
    # bias=False (a conv without one): the same weights' gradient, the sum not made
    with_bias = ops.conv2d_grad_weight(g, x, [3, 2, 3, 3], [1, 1], [1, 1], [1, 1], 1)
    without = ops.conv2d_grad_weight(g, x, [3, 2, 3, 3], [1, 1], [1, 1], [1, 1], 1, bias=False)
    assert torch.equal(with_bias[0], without[0]) and without[1].shape == (0,)
    torch.testing.assert_close(with_bias[1], g.sum((0, 2, 3)))
    gp = torch.randn(2, 3, 2, 2, dtype=torch.float64)
    _opcheck(ops.conv_relu_maxpool_grad.default,
             (gp, x, w, bias, [1, 1], [1, 1], [1, 1], 1, 2))


def test_gradcheck_float64(ops):
    torch.manual_seed(0)
    assert torch.autograd.gradcheck(ops.gemm, (_d(3, 5), _d(5, 4)))
    x, w, bias = _d(2, 4, 7, 6), _d(6, 2, 3, 2), _d(6)
    conv = lambda x, w, b: ops.conv2d(x, w, b, [2, 1], [1, 0], [1, 2], 2)   # noqa: E731
    torch.testing.assert_close(conv(x, w, bias), F.conv2d(x, w, bias, (2, 1), (1, 0), (1, 2), 2))
    assert torch.autograd.gradcheck(conv, (x, w, bias))
    x, w, bias = _d(2, 2, 5, 5), _d(3, 2, 3, 3), _d(3)          # the kernels of the opchecks
    fused = lambda x, w, b: ops.conv_relu_maxpool(x, w, b, [1, 1], [1, 1])  # noqa: E731
    torch.testing.assert_close(fused(x, w, bias), F.max_pool2d(F.relu(F.conv2d(x, w, bias, 1, 1)), 2))
    assert torch.autograd.gradcheck(fused, (x, w, bias))
    # the fused op takes conv2d's stride, dilation and groups, and no bias
    x, w = _d(2, 4, 9, 8), _d(6, 2, 3, 2)
    fused = lambda x, w: ops.conv_relu_maxpool(x, w, None, [2, 1], [1, 0], [1, 2], 2,  # noqa: E731
                                               pool=2)
    torch.testing.assert_close(
        fused(x, w), F.max_pool2d(F.relu(F.conv2d(x, w, None, (2, 1), (1, 0), (1, 2), 2)), 2))
    assert torch.autograd.gradcheck(fused, (x, w))


def test_the_autograd_kernel_runs_the_implementation_directly_only_where_it_may(ops):
    """Where nothing is recorded on plain CPU tensors an op's Autograd kernel
    runs the implementation at once (no redispatch); a lazily negated input,
    a tensor subclass (fake tensors), a dispatch mode or a recorded gradient
    take torch's way, with the same results."""
    from torch._subclasses.fake_tensor import FakeTensorMode
    from torch_helpers import dispatch_recorder
    seen = []
    k = _axpy("axpy_direct")
    op = k.torch_op("tp_test::axpy_direct", backward=lambda ctx, g: (2 * g, g))
    x, y = torch.randn(5, dtype=torch.float64), torch.randn(5, dtype=torch.float64)
    torch.testing.assert_close(op(x, y), 2 * x + y)
    torch.testing.assert_close(op(torch._neg_view(x), y), y - 2 * x)     # materialised first
    with dispatch_recorder() as mode:
        torch.testing.assert_close(op(x, y), 2 * x + y)
    assert any("axpy_direct" in o for o in mode.ops)
    with FakeTensorMode() as fake:
        assert op(fake.from_tensor(x), fake.from_tensor(y)).shape == (5,)
    xg = x.clone().requires_grad_()
    op(xg, y).sum().backward()
    torch.testing.assert_close(xg.grad, torch.full_like(x, 2.0))
    with torch.no_grad():                          # a Parameter: plain, direct
        seen.append(op(torch.nn.Parameter(x), y))
    torch.testing.assert_close(seen[0], 2 * x + y)


def test_fused_ops_linear_and_folded_conv(ops):
    """tiramisu::linear (aten::linear's schema, a backward of two GEMMs and a
    sum, gradcheck in float64) and tiramisu::conv2d_folded (an eval-mode
    BatchNorm folded into the conv, the activation as its epilogue;
    forward only) pass opcheck and equal torch's."""
    import schedules.torch_fused_ops  # noqa: F401  (registers them)
    torch.manual_seed(0)
    assert str(ops.linear.default._schema).split("(", 1)[1] == \
        str(torch.ops.aten.linear.default._schema).split("(", 1)[1]
    x, w, b = _d(2, 3, 5), _d(4, 5), _d(4)
    _opcheck(ops.linear.default, (x, w, b))
    _opcheck(ops.linear.default, (x[0, 0], w))                 # 1-D input, no bias
    torch.testing.assert_close(ops.linear(x, w, b), F.linear(x, w, b))
    assert torch.autograd.gradcheck(ops.linear, (x, w, b))
    with pytest.raises(RuntimeError, match="tiramisu::linear: input .* do not match"):
        ops.linear(x, w.t())
    x, w, b = torch.randn(2, 6, 7, 7), torch.randn(6, 3, 3, 3), torch.randn(6)
    gamma, beta, mean, var = torch.rand(6) + 0.5, torch.randn(6), torch.randn(6), torch.rand(6) + 0.5
    conf = ([1, 1], [1, 1], [1, 1], 2)
    ref = F.batch_norm(F.conv2d(x, w, b, 1, 1, 1, 2), mean, var, gamma, beta, eps=1e-3)
    for act, f in ((None, lambda t: t), ("relu", F.relu), ("relu6", F.relu6)):
        args = (x, w, b, gamma, beta, mean, var, 1e-3, *conf)
        torch.testing.assert_close(ops.conv2d_folded(*args, activation=act), f(ref),
                                   rtol=1e-5, atol=1e-5)
        _opcheck(ops.conv2d_folded.default, args, {"activation": act})
    plain = ops.conv2d_folded(x, w, None, None, None, None, None, 0.0, [1, 1], [1, 1], [1, 1], 2,
                              activation="relu")               # no BatchNorm: conv + relu
    torch.testing.assert_close(plain, F.relu(F.conv2d(x, w, None, 1, 1, 1, 2)))
    with pytest.raises(RuntimeError, match="activation must be one of"):
        ops.conv2d_folded(x, w, b, None, None, None, None, 0.0, *conf, activation="gelu")
    with pytest.raises(RuntimeError, match="has no backward"):
        ops.conv2d_folded(x, w.requires_grad_(), b, None, None, None, None, 0.0,
                          *conf).sum().backward()


# ------------------------------------------------------------ modules
def test_from_torch_round_trip():
    import schedules.nn as tnn
    torch.manual_seed(0)
    lin = nn.Linear(12, 5)
    ours = tnn.Linear.from_torch(lin)
    assert ours.weight is lin.weight
    x = torch.randn(2, 3, 12)
    torch.testing.assert_close(ours(x), lin(x))
    conv = nn.Conv2d(4, 6, (3, 2), stride=(2, 1), padding=(1, 0), dilation=(1, 2), groups=2).double()
    xc = torch.randn(2, 4, 9, 8, dtype=torch.float64)
    torch.testing.assert_close(tnn.Conv2d.from_torch(conv)(xc), conv(xc))
    conv = nn.Conv2d(3, 8, 3, stride=1, padding=0)                 # torch's default padding
    xc = torch.randn(2, 3, 10, 10)
    torch.testing.assert_close(tnn.Conv2d.from_torch(conv, algo="direct")(xc), conv(xc),
                               atol=1e-5, rtol=1e-5)
    block = nn.Sequential(nn.Conv2d(3, 8, 3, padding=1), nn.ReLU(), nn.MaxPool2d(2))
    fused = tnn.ConvReLUMaxPool2d.from_torch(block, algo="direct")
    torch.testing.assert_close(fused(xc), block(xc), atol=1e-5, rtol=1e-5)
    strided = nn.Conv2d(3, 8, 3, stride=2)          # any conv of the block: torch's composition
    torch.testing.assert_close(tnn.ConvReLUMaxPool2d.from_torch(strided, pool=2)(xc),
                               nn.functional.max_pool2d(strided(xc).relu(), 2),
                               atol=1e-5, rtol=1e-5)


def test_compiled_model_no_graph_break_and_plain_kernel_inside():
    """torch.compile(fullgraph=True) on a model with our modules and a plain
    kernel call: zero graph breaks, same output and gradients as eager."""
    import schedules.nn as tnn
    torch.manual_seed(0)
    f = tp.Function("shift_relu", params=["N", "C"])
    n, c = f.var("n", 0, "N"), f.var("c", 0, "C")
    A = f.input("A", ("N", "C"), tp.float64)
    f.computation("B", [n, c], tp.max(A[n, c] + 0.5, 0.0))
    plain = f.compile()                                   # never registered by hand
    model = nn.Sequential(nn.Conv2d(2, 4, 3, padding=1), nn.ReLU(), nn.MaxPool2d(2),
                          nn.Conv2d(4, 4, 3, stride=2, padding=1), nn.Flatten(),
                          nn.Linear(16, 3)).double()
    tnn.convert(model)
    assert isinstance(model[0], tnn.ConvReLUMaxPool2d) and isinstance(model[1], tnn.Conv2d)

    def fn(x):
        return model(x), plain(x.flatten(1))

    x = torch.randn(2, 2, 8, 8, dtype=torch.float64)
    explain = torch._dynamo.explain(fn)(x)
    assert explain.graph_break_count == 0 and explain.graph_count == 1
    compiled = torch.compile(fn, fullgraph=True)
    out, shifted = compiled(x)
    ref, ref_shifted = fn(x)
    torch.testing.assert_close(out, ref)
    torch.testing.assert_close(shifted, torch.relu(x.flatten(1) + 0.5))
    out.sum().backward()
    grads = [p.grad.clone() for p in model.parameters()]
    model.zero_grad()
    ref.sum().backward()
    for g, p in zip(grads, model.parameters()):
        torch.testing.assert_close(g, p.grad)


def test_sparse_conv2d_op_module_and_grads():
    """tiramisu::sparse_conv2d (CSR weight) passes opcheck; SparseConv2d.from_torch
    of a pruned conv equals the conv; its gradients (input, values at the
    nonzeros, bias) equal torch's dense ones restricted to the pattern."""
    from schedules import CSRWeights
    import schedules.torch_ops  # noqa: F401
    import schedules.nn as tnn
    torch.manual_seed(0)
    conv = nn.Conv2d(4, 6, 3, stride=(1, 2), padding=1, bias=True)
    with torch.no_grad():
        conv.weight.mul_((torch.rand_like(conv.weight) < 0.3).float())     # pruned, ~30%
    x = torch.randn(2, 4, 9, 8)
    csr = CSRWeights.from_dense(conv.weight.detach().numpy())
    args = (x, torch.as_tensor(csr.rowptr, dtype=torch.int64),
            torch.as_tensor(csr.colidx, dtype=torch.int64), torch.as_tensor(csr.values),
            list(csr.shape), conv.bias.detach(), [1, 2], [1, 1], [1, 1])
    _opcheck(torch.ops.tiramisu.sparse_conv2d.default, args)   # (an overload now: .padding)
    sp = tnn.SparseConv2d.from_torch(conv)
    assert abs(sp.density - csr.density) < 1e-9
    xg = x.clone().requires_grad_()
    out = sp(xg)
    ref_x = x.clone().requires_grad_()
    ref = conv(ref_x)
    torch.testing.assert_close(out, ref, rtol=1e-4, atol=1e-4)
    g = torch.randn_like(ref)
    out.backward(g)
    ref.backward(g)
    torch.testing.assert_close(xg.grad, ref_x.grad, rtol=1e-4, atol=1e-4)
    torch.testing.assert_close(sp.bias.grad, conv.bias.grad, rtol=1e-4, atol=1e-4)
    dense_grad = conv.weight.grad.reshape(6, -1)
    rows = np.repeat(np.arange(6), np.diff(csr.rowptr))
    torch.testing.assert_close(sp.values.grad, dense_grad[rows, csr.colidx], rtol=1e-4, atol=1e-4)


@pytest.mark.parametrize("kind", ["LSTM", "GRU"])
def test_recurrent_ops_and_modules(kind):
    """tiramisu::lstm / gru pass opcheck (forward-only ops) and nn.LSTM/GRU
    .from_torch equal torch's modules, with and without an initial state."""
    import schedules.torch_ops  # noqa: F401
    import schedules.nn as tnn
    torch.manual_seed(0)
    mod = getattr(nn, kind)(5, 7, num_layers=2)
    x = torch.randn(4, 3, 5)
    flat = [w.detach() for layer in mod.all_weights for w in layer]
    op = getattr(torch.ops.tiramisu, kind.lower())
    _opcheck(op, (x, flat, 2))
    ours = getattr(tnn, kind).from_torch(mod)
    h0 = torch.randn(2, 3, 7)
    state = (h0, torch.randn(2, 3, 7)) if kind == "LSTM" else h0
    with torch.no_grad():
        for args in ((x,), (x, state)):
            got, want = ours(*args), mod(*args)
            torch.testing.assert_close(got[0], want[0], rtol=1e-4, atol=1e-5)
            torch.testing.assert_close(got[1], want[1], rtol=1e-4, atol=1e-5)


def test_backward_calls_the_grad_ops_directly_unless_something_records(ops):
    """A plain backward runs the gradient ops' implementations directly (no
    dispatch); under a dispatch mode (a tracer) and with ``create_graph``
    they go through the ops, with the same gradients."""
    from torch_helpers import dispatch_recorder

    x = torch.randn(2, 3, 7, 7, requires_grad=True)
    w = torch.randn(4, 3, 3, 3, requires_grad=True)
    grads = []
    for mode in (None, dispatch_recorder()):
        y = ops.conv2d(x, w, None, [2, 2], [1, 1], [1, 1], 1)
        if mode is None:
            grads.append(torch.autograd.grad(y.square().sum(), (x, w)))
        else:
            with mode:
                grads.append(torch.autograd.grad(y.square().sum(), (x, w)))
            assert any("conv2d_grad_input" in o for o in mode.ops)
            assert any("conv2d_grad_weight" in o for o in mode.ops)
    for a, b in zip(*grads):
        torch.testing.assert_close(a, b)
    y = ops.conv2d(x, w, None, [2, 2], [1, 1], [1, 1], 1)
    gx, = torch.autograd.grad(y.square().sum(), x, create_graph=True)
    assert gx.grad_fn is not None                  # recorded: a double backward exists
    torch.testing.assert_close(gx.detach(), grads[0][0])

"""Invalid convolution arguments (issue 30, A3; issue 27, item 4): every
argument torch's ``F.conv2d`` refuses is refused on EVERY path of ours
(``schedules.conv2d``, ``schedules.conv_relu_maxpool``,
``schedules.sparse_conv2d``, ``torch.ops.tiramisu.*``, the nn modules) with
a ValueError/TypeError/RuntimeError naming the argument; what torch accepts
and we can run (a 1-element list is both sides, as aten takes it) runs and
equals torch; and the ops' schemas are aten's, defaults included."""
import numpy as np
import pytest

import schedules
from schedules import CSRWeights

torch = pytest.importorskip("torch", reason="torch is an optional extra; its tests need it")
F = torch.nn.functional

ERRORS = (ValueError, TypeError, RuntimeError)


def _x():
    return torch.randn(1, 4, 8, 8)


def _w(*shape):
    return torch.randn(*(shape or (4, 4, 3, 3)))


# name, the call's arguments beyond (input, weight), a regex the message must match
INVALID = [
    ("negative padding", dict(padding=-1), "padding"),
    ("negative padding pair", dict(padding=[1, -1]), "padding"),
    ("3 padding values", dict(padding=[1, 1, 1]), "padding"),
    ("no padding value", dict(padding=[]), "padding"),
    ("zero stride", dict(stride=0), "stride"),
    ("negative stride", dict(stride=[-1, 1]), "stride"),
    ("3 stride values", dict(stride=[1, 1, 1]), "stride"),
    ("no stride value", dict(stride=[]), "stride"),
    ("zero dilation", dict(dilation=0), "dilation"),
    ("negative dilation", dict(dilation=[1, -1]), "dilation"),
    ("3 dilation values", dict(dilation=[1, 1, 1]), "dilation"),
    ("float stride", dict(stride=1.5), "stride"),
    ("groups 0", dict(groups=0), "groups"),
    ("groups -1", dict(groups=-1), "groups"),
    ("groups not dividing channels", dict(groups=3), "groups"),
    ("unknown padding string", dict(padding="full"), "padding"),
    ("'same' with stride 2", dict(padding="same", stride=2), "same"),
    ("weight of rank 3", dict(weight=(4, 4, 3)), "weight|w"),
    ("weight of rank 5", dict(weight=(4, 4, 3, 3, 1)), "weight|w"),
    ("channel mismatch", dict(weight=(4, 3, 3, 3)), "channels"),
    ("kernel larger than the input", dict(weight=(4, 4, 9, 9)), "does not fit"),
]
INVALID_IDS = [c[0] for c in INVALID]


def _call_args(kw):
    kw = dict(kw)
    w = _w(*kw.pop("weight", ()))
    return w, kw


def _list(v):
    """An int argument as the list torch.ops takes (aten: ``SymInt[2]``)."""
    return v if isinstance(v, (list, str)) else [v]


@pytest.mark.parametrize("name,kw,match", INVALID, ids=INVALID_IDS)
def test_torch_refuses(name, kw, match):
    """The table lists only what torch itself refuses."""
    w, kw = _call_args(kw)
    with pytest.raises(ERRORS):
        F.conv2d(_x(), w, **kw)


@pytest.mark.parametrize("name,kw,match", INVALID, ids=INVALID_IDS)
def test_schedules_conv2d_refuses(name, kw, match):
    w, kw = _call_args(kw)
    with pytest.raises(ERRORS, match=match):
        schedules.conv2d(_x(), w, **kw)


@pytest.mark.parametrize("name,kw,match", INVALID, ids=INVALID_IDS)
def test_schedules_conv_relu_maxpool_refuses(name, kw, match):
    w, kw = _call_args(kw)
    if kw.get("groups") == 3:
        match = "groups"
    with pytest.raises(ERRORS, match=match):
        schedules.conv_relu_maxpool(_x(), w, pool=1, **kw)


@pytest.mark.parametrize("name,kw,match", INVALID, ids=INVALID_IDS)
def test_schedules_sparse_conv2d_refuses(name, kw, match):
    w, kw = _call_args(kw)
    if w.dim() == 4:
        w = CSRWeights.from_dense(w.numpy())
    if "groups" in kw:
        match = "groups"
    with pytest.raises(ERRORS, match=match):
        schedules.sparse_conv2d(_x(), w, **kw)


@pytest.mark.parametrize("name,kw,match", INVALID, ids=INVALID_IDS)
@pytest.mark.parametrize("op", ["conv2d", "conv_relu_maxpool"])
@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
def test_torch_op_refuses(name, kw, match, op, dtype):
    """Both dtypes: float64 runs the plain kernels, which ignored bad
    arguments before (a crop for padding -1, summed taps for dilation 0)."""
    import schedules.torch_ops  # noqa: F401
    w, kw = _call_args(kw)
    kw = {k: _list(v) if k != "groups" else v for k, v in kw.items()}
    with pytest.raises(ERRORS, match=match):
        getattr(torch.ops.tiramisu, op)(_x().to(dtype), w.to(dtype), **kw)


@pytest.mark.parametrize("name,kw,match", INVALID, ids=INVALID_IDS)
def test_sparse_op_refuses(name, kw, match):
    import schedules.torch_ops  # noqa: F401
    w, kw = _call_args(kw)
    if isinstance(kw.get("stride"), float):
        pytest.skip("the sparse op has aten's int-list arguments only (the schema refuses a "
                    "float)")
    kw = {k: v if k == "groups" or isinstance(v, str) else _list(v) for k, v in kw.items()}
    csr = CSRWeights.from_dense(w.reshape(w.shape[0], -1).numpy())
    args = (torch.as_tensor(csr.rowptr, dtype=torch.int64),
            torch.as_tensor(csr.colidx, dtype=torch.int64), torch.as_tensor(csr.values))
    with pytest.raises(ERRORS, match=match):
        torch.ops.tiramisu.sparse_conv2d(_x(), *args, list(w.shape), **kw)


@pytest.mark.parametrize("name,kw,match", INVALID, ids=INVALID_IDS)
def test_module_refuses(name, kw, match):
    """nn.Conv2d built with the argument (where torch's constructor takes it)
    and converted: the forward refuses as torch's does."""
    import schedules.nn as tnn
    w, kw = _call_args(kw)
    if w.dim() != 4 or any(isinstance(v, list) and len(v) != 2 for v in kw.values()) \
            or isinstance(kw.get("stride"), float):
        pytest.skip("nn.Conv2d's constructor makes a 4-D weight and 2-element lists")
    try:
        conv = torch.nn.Conv2d(w.shape[1] * kw.get("groups", 1) if kw.get("groups", 1) > 0
                               else w.shape[1], w.shape[0], tuple(w.shape[2:]), **kw)
    except ERRORS:
        pytest.skip("torch's constructor refuses it already")
    conv.weight = torch.nn.Parameter(w) if "groups" not in kw else conv.weight
    with pytest.raises(ERRORS):
        conv(_x())
    try:
        ours = tnn.Conv2d.from_torch(conv)
    except ERRORS as e:
        assert any(n in str(e) for n in ("padding", "same", "stride")), e
        return
    with pytest.raises(ERRORS, match=match):
        ours(_x())


def test_unknown_algo_is_refused():
    import schedules.torch_ops  # noqa: F401
    x, w = _x(), _w()
    for dt in (torch.float32, torch.float64):
        with pytest.raises(ValueError, match="algo must be one of"):
            torch.ops.tiramisu.conv2d(x.to(dt), w.to(dt), algo="fastest")
        with pytest.raises(ValueError, match="algo must be one of"):
            torch.ops.tiramisu.conv_relu_maxpool(x.to(dt), w.to(dt), algo="fastest")
    with pytest.raises(ERRORS, match="algo"):
        schedules.conv2d(x, w, algo="fastest")


# ------------------------------------------------------------ accepted as aten
ACCEPTED = [
    dict(),
    dict(stride=[2]),
    dict(padding=[1]),
    dict(dilation=[2]),
    dict(stride=[2], padding=[1, 0], dilation=[1]),
    dict(padding="same"),
    dict(padding="valid", stride=[2, 1]),
]


@pytest.mark.parametrize("kw", ACCEPTED, ids=[str(k) for k in ACCEPTED])
@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
def test_what_aten_accepts_runs(kw, dtype):
    """A 1-element list is both sides (aten's rule); the ops' defaults are
    aten's: ``tiramisu.conv2d(x, w)`` is ``aten.conv2d(x, w)``."""
    import schedules.torch_ops  # noqa: F401
    torch.manual_seed(0)
    x, w = _x().to(dtype), _w().to(dtype)
    ref = torch.ops.aten.conv2d(x, w, None, **kw)
    torch.testing.assert_close(torch.ops.tiramisu.conv2d(x, w, None, **kw), ref,
                               rtol=1e-4, atol=1e-4)
    if dtype == torch.float32:
        plain = {k: (v[0] if isinstance(v, list) and len(v) == 1 else v) for k, v in kw.items()}
        torch.testing.assert_close(schedules.conv2d(x, w, **kw), ref, rtol=1e-4, atol=1e-4)
        torch.testing.assert_close(schedules.conv2d(x, w, **plain), ref, rtol=1e-4, atol=1e-4)
        torch.testing.assert_close(schedules.sparse_conv2d(x, w, **kw), ref, rtol=1e-4, atol=1e-4)


def test_schemas_are_atens():
    """Arguments, types and defaults as aten's own schemas print them; ours
    add only the keyword-only ``algo`` (and the fused op's ``pool``)."""
    import schedules.torch_ops  # noqa: F401
    ours, aten = torch.ops.tiramisu, torch.ops.aten

    def args(schema, drop=("algo", "pool")):
        return [(a.name, str(a.type), a.default_value, a.kwarg_only)
                for a in schema.arguments if a.name not in drop]

    for overload in ("default", "padding"):
        want = args(getattr(aten.conv2d, overload)._schema)
        assert args(getattr(ours.conv2d, overload)._schema) == want
        assert args(getattr(ours.conv_relu_maxpool, overload)._schema) == want
    assert args(ours.gemm.default._schema) == args(aten.mm.default._schema)
    for a in ours.conv2d.default._schema.arguments:
        if a.name == "algo":
            assert a.kwarg_only and a.default_value == "auto"
    x, w = _x(), _w()
    torch.testing.assert_close(ours.conv2d(x, w), aten.conv2d(x, w), rtol=1e-4, atol=1e-4)


def test_module_forward_names_input():
    """Modules' forward takes ``input`` as torch's do."""
    import inspect
    import schedules.nn as tnn
    for mod in (tnn.Linear, tnn.Conv2d, tnn.ConvReLUMaxPool2d, tnn.SparseConv2d, tnn.LSTM,
                tnn.GRU):
        assert list(inspect.signature(mod.forward).parameters)[1] == "input", mod
    conv = torch.nn.Conv2d(4, 4, 3)
    x = _x()
    torch.testing.assert_close(tnn.Conv2d.from_torch(conv)(input=x), conv(input=x),
                               rtol=1e-4, atol=1e-4)


def test_numpy_paths_take_one_element_lists():
    x = np.random.default_rng(0).standard_normal((1, 4, 8, 8), dtype=np.float32)
    w = np.random.default_rng(1).standard_normal((4, 4, 3, 3), dtype=np.float32)
    ref = F.conv2d(torch.from_numpy(x), torch.from_numpy(w), None, [2], [1]).numpy()
    np.testing.assert_allclose(schedules.conv2d(x, w, None, [2], [1]), ref, rtol=1e-4, atol=1e-4)
    np.testing.assert_allclose(schedules.sparse_conv2d(x, CSRWeights.from_dense(w), None, [2],
                                                       [1]), ref, rtol=1e-4, atol=1e-4)

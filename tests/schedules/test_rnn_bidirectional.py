"""Bidirectional LSTM/GRU stacks and LSTMs with a projection (proj_size > 0)
compute what torch.nn.LSTM/GRU compute with the same weights: outputs, h_n
and c_n (torch's shapes and order), through schedules.lstm/gru (NumPy and
torch arguments, both CPU backends), torch.ops.tiramisu and schedules.nn;
bad arguments are refused naming them, a gradient asked of a projected layer
raises."""
import numpy as np
import pytest

import schedules

torch = pytest.importorskip("torch", reason="torch is an optional extra; these tests compare "
                                            "with torch.nn.LSTM/GRU")
import schedules.nn as snn                   # noqa: E402

TOL = dict(rtol=1e-4, atol=1e-5)
pytestmark = pytest.mark.filterwarnings("ignore:LSTM with projections is not supported")

# (layers, bidirectional, bias, proj_size): 1-3 layers, both directions, with
# and without biases, projected stacks of one and two directions
CONFIGS = [(1, True, True, 0), (2, True, False, 0), (3, True, True, 0),
           (2, False, True, 2), (1, True, False, 3), (2, True, True, 2)]
T, B, I, H = 4, 3, 5, 6


def _module(cell, L, bidirectional, bias, proj, batch_first=False):
    torch.manual_seed(L * 10 + proj)
    kw = dict(proj_size=proj) if proj else {}
    m = (torch.nn.LSTM if cell == "lstm" else torch.nn.GRU)(
        I, H, num_layers=L, bias=bias, bidirectional=bidirectional, batch_first=batch_first, **kw)
    return m.eval()


def _states(m, batch=B):
    D = 2 if m.bidirectional else 1
    out = getattr(m, "proj_size", 0) or H
    g = torch.Generator().manual_seed(3)
    return (torch.randn(m.num_layers * D, batch, out, generator=g),
            torch.randn(m.num_layers * D, batch, H, generator=g))


def _close(got, want):
    for g, w in zip(got, want):
        assert tuple(g.shape) == tuple(w.shape)
        np.testing.assert_allclose(np.asarray(g), w.detach().numpy(), **TOL)


def _cases():
    for L, bd, bias, proj in CONFIGS:
        yield "lstm", L, bd, bias, proj
        if not proj:
            yield "gru", L, bd, bias, proj


@pytest.mark.parametrize("cell,L,bd,bias,proj", list(_cases()))
def test_api_matches_torch(backend, cell, L, bd, bias, proj):
    """schedules.lstm/gru on torch tensors (states given) and on NumPy
    arrays (zero states), on the backend the fixture sets."""
    m = _module(cell, L, bd, bias, proj)
    x = torch.randn(T, B, I, generator=torch.Generator().manual_seed(1))
    h0, c0 = _states(m)
    weights = [[w.detach().numpy() for w in layer] for layer in m.all_weights]
    with torch.no_grad():
        if cell == "lstm":
            y, (hn, cn) = m(x, (h0, c0))
            got = schedules.lstm(x, m.all_weights, h0, c0, bidirectional=bd)
            _close((got[0], *got[1]), (y, hn, cn))
            y, (hn, cn) = m(x)
            got = schedules.lstm(x.numpy(), weights, bidirectional=bd)
            assert isinstance(got[0], np.ndarray)
            _close((got[0], *got[1]), (y, hn, cn))
        else:
            y, hn = m(x, h0)
            _close(schedules.gru(x, m.all_weights, h0, bidirectional=bd), (y, hn))
            _close(schedules.gru(x.numpy(), weights, bidirectional=bd), m(x))


@pytest.mark.parametrize("target", ["c", "llvm"])
def test_explicit_target_and_schedule(target):
    """``target=`` and ``schedule="layer"`` reach every direction's layer."""
    m = _module("lstm", 2, True, True, 2)
    x = torch.randn(T, B, I)
    with torch.no_grad():
        y, (hn, cn) = m(x)
        got = schedules.lstm(x, m.all_weights, bidirectional=True, schedule="layer",
                             target=target)
    _close((got[0], *got[1]), (y, hn, cn))
    g = _module("gru", 2, True, False, 0)
    with torch.no_grad():
        _close(schedules.gru(x, g.all_weights, bidirectional=True, target=target), g(x))


@pytest.mark.parametrize("cell,L,bd,bias,proj", [("lstm", 2, True, True, 2),
                                                 ("lstm", 3, True, False, 0),
                                                 ("lstm", 2, False, False, 3),
                                                 ("gru", 2, True, True, 0)])
@pytest.mark.parametrize("batch_first", [False, True])
def test_modules_from_torch(cell, L, bd, bias, proj, batch_first):
    """schedules.nn.LSTM/GRU.from_torch (through torch.ops.tiramisu), with
    and without states, batch_first; the samples of torch's ModuleInfo
    (input 2, hidden 3, 2 layers, proj_size 2) are such stacks."""
    m = _module(cell, L, bd, bias, proj, batch_first)
    ours = (snn.LSTM if cell == "lstm" else snn.GRU).from_torch(m)
    x = torch.randn(B, T, I) if batch_first else torch.randn(T, B, I)
    h0, c0 = _states(m)
    with torch.no_grad():
        if cell == "lstm":
            for hx in (None, (h0, c0)):
                y, (hn, cn) = m(x, hx)
                got_y, (got_h, got_c) = ours(x, hx)
                _close((got_y, got_h, got_c), (y, hn, cn))
        else:
            for hx in (None, h0):
                _close(ours(x, hx), m(x, hx))


def test_autograd_composes_or_is_refused_clearly():
    """A bidirectional stack's gradients flow through its one-layer calls
    (their backpropagation-through-time kernels) and the flips and
    concatenations, equal to torch's; a gradient asked of a projected layer
    (no backward kernel) raises naming it, never dropped silently."""
    for m in (_module("lstm", 2, True, True, 0), _module("gru", 2, True, True, 0)):
        x = torch.randn(T, B, I, requires_grad=True)
        out = (schedules.lstm if isinstance(m, torch.nn.LSTM) else schedules.gru)(
            x, m.all_weights, bidirectional=True)
        out[0].square().sum().backward()
        xt = x.detach().clone().requires_grad_(True)
        m(xt)[0].square().sum().backward()
        torch.testing.assert_close(x.grad, xt.grad, rtol=1e-4, atol=1e-5)
    m = _module("lstm", 1, False, True, 2)
    y, _ = schedules.lstm(torch.randn(T, B, I), m.all_weights)
    with pytest.raises(RuntimeError, match="proj_size > 0 has no backward"):
        y.sum().backward()


def _lstm_weights(L=2, bd=True, proj=2):
    return [[w.detach().numpy() for w in layer]
            for layer in _module("lstm", L, bd, True, proj).all_weights]


@pytest.mark.parametrize("call,error,message", [
    (lambda w, x: schedules.lstm(x, w[:3], bidirectional=True), ValueError,
     r"two lists per layer"),
    (lambda w, x: schedules.lstm(x, w, bidirectional=1), TypeError, "bidirectional must be"),
    (lambda w, x: schedules.lstm(x[..., :4], w, bidirectional=True), ValueError,
     r"x: input size 4 .* expects 5"),
    (lambda w, x: schedules.lstm(x, w, np.zeros((2, B, 2), np.float32), bidirectional=True),
     ValueError, r"h0: expected shape \(4, 3, 2\) \(layers \* directions, batch, proj_size\)"),
    (lambda w, x: schedules.lstm(x, w, None, np.zeros((4, B, 2), np.float32),
                                 bidirectional=True), ValueError,
     r"c0: expected shape \(4, 3, 6\)"),
    (lambda w, x: schedules.lstm(x, [w[0], w[1], [w[2][0][:, :3]] + w[2][1:]] + w[3:],
                                 bidirectional=True), ValueError,
     r"weights\[2\]\[0\] \(w_ih of layer 1\): expected shape \(24, 4\)"),
    (lambda w, x: schedules.lstm(x, [w[0], w[1][:4] + [w[1][4].T.copy()]] + w[2:],
                                 bidirectional=True), ValueError,
     r"weights\[1\]\[4\] \(w_hr of layer 0, reverse\): expected shape \(2, 6\)"),
    (lambda w, x: schedules.lstm(x, [l[:4] if k == 1 else l for k, l in enumerate(w)],
                                 bidirectional=True), ValueError, "all of one form"),
    (lambda w, x: schedules.lstm(x, w, bidirectional=True, schedule="wavefront"), ValueError,
     "schedule='wavefront'"),
    (lambda w, x: schedules.lstm(x, w, bidirectional=True, target="cuda"), ValueError,
     "proj_size > 0 has no GPU schedule"),
    (lambda w, x: schedules.lstm(x.astype(np.float64), w, bidirectional=True), TypeError,
     "x: expected float32"),
    (lambda w, x: schedules.lstm(x, _lstm_weights(2, True, 0)), ValueError,
     r"weights\[1\]\[0\] .* pass bidirectional=True"),
])
def test_bad_arguments(call, error, message):
    x = np.random.default_rng(0).standard_normal((T, B, I)).astype(np.float32)
    with pytest.raises(error, match=message):
        call(_lstm_weights(), x)


def test_sparse_weights_per_direction():
    """``sparse=True`` and CSR objects reach every direction's layer."""
    m = _module("gru", 2, True, True, 0)
    w = [[a.detach().numpy().copy() for a in layer] for layer in m.all_weights]
    for layer in w:
        for a in layer[:2]:
            a[np.abs(a) < 0.15] = 0
    with torch.no_grad():
        for p, a in zip(m.parameters(), [a for layer in w for a in layer]):
            p.copy_(torch.from_numpy(a))
        want = m(torch.randn(T, B, I, generator=torch.Generator().manual_seed(5)))
    x = torch.randn(T, B, I, generator=torch.Generator().manual_seed(5)).numpy()
    csr = [[schedules.CSRWeights.from_dense(a) for a in layer[:2]] + layer[2:] for layer in w]
    _close(schedules.gru(x, w, bidirectional=True, sparse=True), want)
    _close(schedules.gru(x, csr, bidirectional=True), want)


def test_projection_not_smaller_than_hidden_refused():
    w = [[np.zeros((4 * H, I), np.float32), np.zeros((4 * H, H), np.float32),
          np.zeros((H, H), np.float32)]]
    with pytest.raises(ValueError, match=r"proj_size .* must lie in \[1, hidden size 6\)"):
        schedules.lstm(np.zeros((T, B, I), np.float32), w)


def test_packed_weights_refused_with_bidirectional():
    w = schedules.RNNWeights(_lstm_weights(1, False, 0), "lstm")
    with pytest.raises(TypeError, match="RNNWeights holds one direction"):
        schedules.lstm(np.zeros((T, B, I), np.float32), w, bidirectional=True)


def test_torch_module_samples_batched():
    """Every ModuleInfo sample of nn.LSTM/nn.GRU (all unbatched (T, I) inputs
    in torch's test data; half bidirectional, a quarter of the LSTM's with
    proj_size) run as a batch of one through from_torch equals torch's."""
    try:
        from torch.testing._internal.common_modules import module_db
    except ImportError as exc:
        pytest.skip(f"PyTorch's ModuleInfo samples need expecttest and hypothesis: {exc}")
    ran = 0
    for info in module_db:
        cls = info.module_cls
        if cls not in (torch.nn.LSTM, torch.nn.GRU):
            continue
        for mi in info.module_inputs_func(info, device="cpu", dtype=torch.float32,
                                          requires_grad=False, training=False):
            c = mi.constructor_input
            m = cls(*c.args, **c.kwargs).eval()
            x, *rest = mi.forward_input.args
            assert x.dim() == 2
            batch = 0 if m.batch_first else 1
            state = [s.unsqueeze(1) for s in (rest[0] if rest and isinstance(rest[0], tuple)
                                               else rest)]
            hx = (tuple(state) if cls is torch.nn.LSTM else state[0]) if state else None
            ours = (snn.LSTM if cls is torch.nn.LSTM else snn.GRU).from_torch(m)
            with torch.no_grad():
                want, got = m(x.unsqueeze(batch), hx), ours(x.unsqueeze(batch), hx)
            flat = lambda o: [o[0], *o[1]] if isinstance(o[1], tuple) else list(o)  # noqa: E731
            _close(flat(got), flat(want))
            ran += 1
    assert ran >= 48, ran

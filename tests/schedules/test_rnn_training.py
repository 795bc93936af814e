"""LSTM/GRU training (issue 30, item 4): the backpropagation-through-time
kernels (layer-major and wavefront) under float64 gradcheck on both CPU
backends, float32 gradients equal to torch.nn.LSTM/GRU's, dropout between
layers drawn as torch draws it, unbatched input, conv2d's double backward,
``schedules.nn.convert`` of recurrent modules, and a converted seq2seq model
that trains as torch's does."""
import copy

import numpy as np
import pytest

torch = pytest.importorskip("torch", reason="torch is not installed")

import schedules  # noqa: E402
import schedules.nn as tnn  # noqa: E402
from schedules.problems.rnn import dropout_masks, dropout_p  # noqa: E402
from schedules.solvers import rnn_train  # noqa: E402

MODULES = {"lstm": torch.nn.LSTM, "gru": torch.nn.GRU}


def _run(cell, x, weights, h0, c0, **kw):
    """The results of schedules.lstm / gru as a flat tuple."""
    if cell == "lstm":
        y, (hn, cn) = schedules.lstm(x, weights, h0, c0, **kw)
        return y, hn, cn
    return schedules.gru(x, weights, h0, **kw)


@pytest.mark.parametrize("cell, backend", [("lstm", "c"), ("gru", "llvm")])
def test_gradcheck_float64_both_backends_and_schedules(cell, backend):
    """float64 gradcheck of every input (x, h0, c0, all weights) through the
    layer-major backward and the wavefront one (3 layers of input size H,
    layer 0 of another input size: the stack is the two above it); each
    cell on one backend, the two backends between them."""
    torch.manual_seed(0)
    L, T, B, I, H = 3, 3, 2, 2, 3
    m = MODULES[cell](I, H, L).double()
    x = torch.randn(T, B, I, dtype=torch.float64, requires_grad=True)
    h0 = torch.randn(L, B, H, dtype=torch.float64, requires_grad=True)
    c0 = torch.randn(L, B, H, dtype=torch.float64, requires_grad=True)
    ws = [w.detach().clone().requires_grad_(True) for layer in m.all_weights for w in layer]
    for schedule in ("layer", "wavefront"):
        def f(x, h0, c0, *ws):
            weights = [list(ws[4 * l:4 * l + 4]) for l in range(L)]
            return _run(cell, x, weights, h0, c0 if cell == "lstm" else None,
                        schedule=schedule, target=backend)
        assert torch.autograd.gradcheck(f, (x, h0, c0, *ws), fast_mode=True)


@pytest.mark.parametrize("cell", ["lstm", "gru"])
def test_float32_gradients_equal_torchs(cell):
    """schedules.lstm/gru on a module's own parameters (all_weights), and
    the converted module (batch_first), give torch's gradients."""
    torch.manual_seed(1)
    L, T, B, I, H = 2, 4, 3, 5, 6
    m = MODULES[cell](I, H, L, batch_first=True)
    x = torch.randn(B, T, I, requires_grad=True)
    h0 = torch.randn(L, B, H, requires_grad=True)
    c0 = torch.randn(L, B, H, requires_grad=True)
    state = (h0, c0) if cell == "lstm" else h0

    def grads(fn):
        for p in [*m.parameters(), x, h0, c0]:
            p.grad = None
        y, hn = fn()
        hn = hn if cell == "gru" else hn[0] * 0.5 + hn[1]
        ((y * torch.linspace(-1, 1, H)).sum() + hn.pow(2).sum()).backward()
        return [p.grad.clone() for p in [*m.parameters(), x, h0]] + \
            ([c0.grad.clone()] if cell == "lstm" else [])

    want = grads(lambda: m(x, state))
    ours = tnn.convert(torch.nn.Sequential(m))[0]
    assert isinstance(ours, tnn.LSTM if cell == "lstm" else tnn.GRU)
    for got in (grads(lambda: ours(x, state)),
                grads(lambda: _api_batch_first(cell, m, x, h0, c0))):
        for g, w in zip(got, want):
            torch.testing.assert_close(g, w, rtol=1e-4, atol=1e-5)


def _api_batch_first(cell, m, x, h0, c0):
    out = _run(cell, x.transpose(0, 1), m.all_weights, h0, c0)
    hn = out[1] if cell == "gru" else (out[1], out[2])
    return out[0].transpose(0, 1), hn


def _seeded_runs(m, models, x, seed):
    """Per model: (y, the gradients of m's parameters) of ``sum(y ** 2)``,
    each run from the same seed (the dropout masks' generator)."""
    res = []
    for model in models:
        m.zero_grad()
        torch.manual_seed(seed)
        y = model(x)[0]
        y.pow(2).sum().backward()
        res.append((y.detach(), [p.grad.clone() for p in m.parameters()]))
    return res


@pytest.mark.parametrize("cell", ["lstm", "gru"])
def test_seeded_dropout_forward_and_backward_equal_torchs(cell):
    """Training-mode dropout between layers: the masks come from torch's
    generator in torch's order, so a seeded run equals torch's, forward and
    gradients (3 layers: two masks)."""
    torch.manual_seed(2)
    m = MODULES[cell](4, 5, 3, dropout=0.4)
    ours = tnn.convert(torch.nn.Sequential(m))[0]
    x = torch.randn(6, 2, 4)
    res = _seeded_runs(m, (m, ours), x, 11)
    torch.testing.assert_close(res[1][0], res[0][0], rtol=1e-5, atol=1e-6)
    for g, w in zip(res[1][1], res[0][1]):
        torch.testing.assert_close(g, w, rtol=1e-4, atol=1e-5)
    with torch.no_grad():                               # something was dropped below
        assert not torch.allclose(m.eval()(x)[0], res[0][0])
    m.train()
    # the API draws the same masks (dropout=, training=)
    torch.manual_seed(11)
    got = _run(cell, x, m.all_weights, None, None, dropout=0.4, training=True)[0]
    torch.testing.assert_close(got.detach(), res[0][0], rtol=1e-5, atol=1e-6)


def test_dropout_masks_are_torchs_draws():
    torch.manual_seed(3)
    want = [torch.empty(2, 3, 4).bernoulli_(0.75).div_(0.75) for _ in range(2)]
    torch.manual_seed(3)
    got = dropout_masks(torch.zeros(2, 3, 1), 3, [[None, torch.zeros(16, 4)]], 0.25)
    for g, w in zip(got, want):
        assert torch.equal(g, w)
    with pytest.raises(ValueError, match=r"dropout should be a number in range \[0, 1\]"):
        dropout_p(-0.1, True)
    assert dropout_p(0.5, False) == 0.0


def test_a_training_call_finds_its_schedule_among_the_registrys():
    """A call that trains goes through the find step too (its problem's op,
    "lstm_train", names the registry's list: the backward's schedules): a
    forced schedule that does not apply says why, an unknown one lists
    them, as for inference."""
    from schedules.problems.rnn import rnn_call
    m = torch.nn.LSTM(3, 4, 1)
    x = torch.randn(2, 1, 3, requires_grad=True)
    p, _ = rnn_call("lstm", x, m.all_weights, None, None, False, "auto", None, 0.0, False, None)
    assert p.op == "lstm_train" and p.cell == "lstm" and p.dtype == "float32"
    with pytest.raises(ValueError, match="lstm: schedule 'wavefront' needs at least two stacked"):
        schedules.lstm(x, m.all_weights, schedule="wavefront")
    with pytest.raises(ValueError, match="schedule must be 'auto' or one of layer, wavefront"):
        schedules.lstm(x, m.all_weights, schedule="diagonal")


@pytest.mark.parametrize("cell", ["lstm", "gru"])
def test_unbatched_input(cell):
    """(T, I) input with (L, H) states, as torch takes it: the API, the
    module (also batch_first), and the refusals of mismatched ranks."""
    torch.manual_seed(4)
    for batch_first in (False, True):
        m = MODULES[cell](3, 4, 2, batch_first=batch_first)
        ours = tnn.convert(torch.nn.Sequential(m))[0]
        x, h0, c0 = torch.randn(5, 3), torch.randn(2, 4), torch.randn(2, 4)
        state = (h0, c0) if cell == "lstm" else h0
        with torch.no_grad():
            want, got = m(x, state), ours(x, state)
        torch.testing.assert_close(got[0], want[0], rtol=1e-4, atol=1e-5)
        assert got[0].shape == (5, 4)
        if cell == "lstm":
            torch.testing.assert_close(got[1][1], want[1][1], rtol=1e-4, atol=1e-5)
    out = _run(cell, x.numpy(), [[w.detach().numpy() for w in layer] for layer in m.all_weights],
               h0.numpy(), c0.numpy() if cell == "lstm" else None)
    np.testing.assert_allclose(out[0], want[0].numpy(), rtol=1e-4, atol=1e-5)
    assert out[1].shape == (2, 4)
    with pytest.raises(ValueError, match=r"h0: for unbatched 2-D input x, h0 should be 2-D"):
        _run(cell, x, m.all_weights, h0[:, None], None)
    with pytest.raises(ValueError, match=r"for unbatched 2-D input, h0 should be 2-D"):
        ours(x, (h0[:, None], c0[:, None]) if cell == "lstm" else h0[:, None])


def test_op_backward_with_masks_gradcheck():
    """torch.ops.tiramisu.lstm's backward (the forward recomputed, then the
    BPTT kernels), dropout masks given, in float64."""
    torch.manual_seed(5)
    m = torch.nn.LSTM(2, 3, 2).double()
    x = torch.randn(3, 2, 2, dtype=torch.float64, requires_grad=True)
    ws = [w.detach().clone().requires_grad_(True) for layer in m.all_weights for w in layer]
    mask = torch.empty(3, 2, 3, dtype=torch.float64).bernoulli_(0.5).mul_(2)
    fn = lambda x, *ws: torch.ops.tiramisu.lstm(x, list(ws), 2, dropout_masks=[mask])  # noqa: E731
    assert torch.autograd.gradcheck(fn, (x, *ws))
    with pytest.raises(NotImplementedError, match="tiramisu::lstm has no double backward"):
        torch.autograd.gradgradcheck(fn, (x, *ws))
    # unbatched (T, I) with (L, H) states, as torch's module takes them
    xu, h0 = x[:, 0].detach().requires_grad_(), torch.randn(2, 3, dtype=torch.float64)
    fu = lambda x, *ws: torch.ops.tiramisu.lstm(x, list(ws), 2, h0, h0)  # noqa: E731
    assert fu(xu, *ws)[0].shape == (3, 3) and fu(xu, *ws)[1].shape == (2, 3)
    assert torch.autograd.gradcheck(fu, (xu, *ws), fast_mode=True)


def test_conv2d_double_backward():
    """gradgradcheck through tiramisu::conv2d (stride, padding, dilation,
    groups); the fused block refuses a double backward by name."""
    import schedules.torch_ops  # noqa: F401
    torch.manual_seed(6)
    x = torch.randn(1, 4, 5, 4, dtype=torch.float64, requires_grad=True)
    w = torch.randn(4, 2, 3, 2, dtype=torch.float64, requires_grad=True)
    b = torch.randn(4, dtype=torch.float64, requires_grad=True)
    def conv(x, w, b):
        return torch.ops.tiramisu.conv2d(x, w, b, [2, 1], [1, 0], [1, 2], 2)

    def fused(x, w):
        return torch.ops.tiramisu.conv_relu_maxpool(x, w, None, padding=[1, 1])

    assert torch.autograd.gradgradcheck(conv, (x, w, b))
    w1 = torch.randn(2, 4, 3, 3, dtype=torch.float64, requires_grad=True)
    with pytest.raises(NotImplementedError, match="conv_relu_maxpool has no double backward"):
        torch.autograd.gradgradcheck(fused, (x, w1))


class Seq2Seq(torch.nn.Module):
    def __init__(self, vocab=11, emb=6, hidden=8):
        super().__init__()
        self.embed = torch.nn.Embedding(vocab, emb)
        self.rnn = torch.nn.LSTM(emb, hidden, num_layers=2, dropout=0.2)
        self.out = torch.nn.Linear(hidden, vocab)

    def forward(self, tokens):
        return self.out(self.rnn(self.embed(tokens))[0])


def _train(model, data, steps=6):
    opt = torch.optim.SGD(model.parameters(), lr=0.5)
    losses = []
    torch.manual_seed(100)                  # the dropout masks' generator
    for k in range(steps):
        src, tgt = data[k % len(data)]
        opt.zero_grad()
        loss = torch.nn.functional.cross_entropy(model(src).reshape(-1, 11), tgt.reshape(-1))
        loss.backward()
        opt.step()
        losses.append(loss.item())
    return losses


def test_converted_seq2seq_trains_like_torch():
    """Embedding -> LSTM(2 layers, dropout=0.2) -> Linear, converted with
    schedules.nn.convert (which reports what it converted), trains a few
    seeded SGD steps with torch's loss curve."""
    gen = torch.Generator().manual_seed(7)
    data = [(torch.randint(0, 11, (5, 3), generator=gen),
             torch.randint(0, 11, (5, 3), generator=gen)) for _ in range(3)]
    torch.manual_seed(8)
    ref = Seq2Seq()
    ours = Seq2Seq()
    ours.load_state_dict(ref.state_dict())
    report = []
    tnn.convert(ours, report=report)
    assert report == ["rnn: LSTM -> schedules.nn.LSTM", "out: Linear -> schedules.nn.Linear"]
    want, got = _train(ref, data), _train(ours, data)
    assert want[-1] < want[0]
    np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-5)


def test_compiled_module_trains_with_dropout_like_torch():
    """torch.compile(fullgraph=True) of a converted LSTM in training mode:
    the masks drawn in the module, the backward an op of its own
    (tiramisu::lstm_backward), gradients equal torch's for a seeded run."""
    torch.manual_seed(9)
    m = torch.nn.LSTM(3, 4, 2, dropout=0.3)
    compiled = torch.compile(tnn.LSTM.from_torch(m), fullgraph=True)
    x = torch.randn(5, 2, 3)
    res = _seeded_runs(m, (m, compiled), x, 3)
    torch._dynamo.reset()
    torch.testing.assert_close(res[1][0], res[0][0], rtol=1e-5, atol=1e-6)
    for g, w in zip(res[1][1], res[0][1]):
        torch.testing.assert_close(g, w, rtol=1e-4, atol=1e-5)


def test_numpy_input_with_weights_that_require_grad_keeps_the_graph():
    """A NumPy x with a module's parameters: the results are tensors that
    carry the backward (never a NumPy array that silently drops it)."""
    torch.manual_seed(10)
    m = torch.nn.GRU(3, 4, 1)
    x = torch.randn(2, 2, 3)
    y, _ = schedules.gru(x.numpy(), m.all_weights)
    assert isinstance(y, torch.Tensor) and y.requires_grad
    y.sum().backward()
    want = m.weight_ih_l0.grad.clone()
    m.zero_grad()
    m(x)[0].sum().backward()
    torch.testing.assert_close(want, m.weight_ih_l0.grad, rtol=1e-4, atol=1e-5)
    y, _ = schedules.gru(x.numpy(), [[w.detach() for w in layer] for layer in m.all_weights])
    assert isinstance(y, np.ndarray)
    y, _ = schedules.gru(x.numpy(), m.all_weights, sparse=True)   # CSR: no backward kernel
    assert isinstance(y, torch.Tensor) and y.requires_grad
    with pytest.raises(RuntimeError, match="has no backward kernel yet"):
        y.sum().backward()


@pytest.mark.parametrize("cell", ["lstm", "gru"])
def test_the_float32_training_forward_is_the_library_solvers(monkeypatch, cell):
    """A converted module's training forward (``lstm_train``/``gru_train``,
    keeping the states) is the library's (the plain training forward nest
    never runs for float32): the gradients stay torch's."""
    def refuse(*a, **k):
        raise AssertionError("the plain training forward ran")
    monkeypatch.setattr(rnn_train, "_forward_kernel", refuse)
    torch.manual_seed(3)
    mod = (torch.nn.LSTM if cell == "lstm" else torch.nn.GRU)(6, 5, num_layers=2)
    ours = tnn.convert(torch.nn.Sequential(copy.deepcopy(mod)))[0]
    x = torch.randn(4, 3, 6)
    _same_gradients(mod, ours, x)


@pytest.mark.parametrize("cell,B,H", [("lstm", 16, 64), ("gru", 9, 40), ("lstm", 2, 20)])
def test_float32_layer_backward_is_library_gemms_and_a_recurrence(monkeypatch, cell, B, H):
    """Float32 layer-major: the products without recurrence are library
    GEMMs and only the recurrence is a nest (the one-kernel nest never
    runs); the h gradient's register block over batch rows and columns (a
    column tail where H is not whole vectors), the vectorised gate math and
    bias sums give torch's gradients."""
    def refuse(*a, **k):
        raise AssertionError("the one-kernel float32 backward ran")
    monkeypatch.setattr(rnn_train, "_backward_kernel", refuse)
    torch.manual_seed(4)
    mod = (torch.nn.LSTM if cell == "lstm" else torch.nn.GRU)(24, H, num_layers=2)
    ours = tnn.convert(torch.nn.Sequential(copy.deepcopy(mod)))[0]
    x = torch.randn(5, B, 24)
    _same_gradients(mod, ours, x)


def _same_gradients(mod, ours, x):
    """The input's and the parameters' gradients of ``sum(y ** 2)`` through
    torch's module ``mod`` and our converted ``ours`` agree."""
    xa, xb = x.clone().requires_grad_(), x.clone().requires_grad_()
    mod(xa)[0].square().sum().backward()
    ours(xb)[0].square().sum().backward()
    torch.testing.assert_close(xb.grad, xa.grad, rtol=1e-4, atol=1e-5)
    for p, q in zip(ours.parameters(), mod.parameters()):
        torch.testing.assert_close(p.grad, q.grad, rtol=1e-4, atol=1e-5)


def _op_call(op, cell, x, ws, h0=None, masks=None):
    """``torch.ops.tiramisu.<op>`` of a 2-layer stack (LSTM: c0 = h0)."""
    f = getattr(torch.ops.tiramisu, op)
    state = (h0, h0) if cell == "lstm" else (h0,)
    return f(x, list(ws), 2, *state, dropout_masks=masks)


@pytest.mark.parametrize("cell", ["lstm", "gru"])
def test_train_ops_keep_the_states_and_their_backward_recomputes_nothing(monkeypatch, cell):
    """``lstm_train``/``gru_train``: the results of ``lstm``/``gru`` and each
    layer's h states (h0 first, the top layer's the output, the last h_n);
    their backward runs no forward and gives the recomputing op's gradients;
    a converted module in training runs one forward a step."""
    torch.manual_seed(7)
    m = MODULES[cell](6, 5, num_layers=2)
    ws = [w.detach().clone().requires_grad_(True) for layer in m.all_weights for w in layer]
    x, h0 = torch.randn(4, 3, 6, requires_grad=True), torch.randn(2, 3, 5)
    mask = torch.empty(4, 3, 5).bernoulli_(0.5).mul_(2)
    calls = []
    real = rnn_train._forward_states  # (every forward that keeps states)
    monkeypatch.setattr(rnn_train, "_forward_states",
                        lambda *a, **k: calls.append(1) or real(*a, **k))
    for masks in (None, [mask]):
        *got, states = _op_call(f"{cell}_train", cell, x, ws, h0, masks)
        want = _op_call(cell, cell, x, ws, h0, masks)
        for g, w in zip(got, want):
            torch.testing.assert_close(g, w, rtol=1e-6, atol=1e-6)
        assert states.shape == (2, 5, 3, 5) and not states.requires_grad
        torch.testing.assert_close(states[:, 0], h0, rtol=0, atol=0)
        torch.testing.assert_close(states[1, 1:], got[0], rtol=0, atol=0)
        torch.testing.assert_close(states[:, -1], got[1], rtol=0, atol=0)
        grads = torch.autograd.grad(sum((o ** 2).sum() for o in got), [x, *ws])
        calls.clear()
        theirs = torch.autograd.grad(sum((o ** 2).sum() for o in want), [x, *ws])
        assert len(calls) == 1                  # the recomputing op's backward: a forward
        for g, w in zip(grads, theirs):
            torch.testing.assert_close(g, w, rtol=1e-5, atol=1e-6)
    ours = tnn.convert(torch.nn.Sequential(copy.deepcopy(m)))[0]
    calls.clear()
    ours(x)[0].square().sum().backward()
    assert len(calls) == 1                      # the forward's; the backward's states are kept


@pytest.mark.parametrize("cell", ["lstm", "gru"])
def test_train_ops_gradcheck_with_masks_and_unbatched(cell):
    """float64 gradcheck through ``lstm_train``/``gru_train``'s kept states,
    dropout masks given, and unbatched (T, I) input with (L, H) states."""
    torch.manual_seed(8)
    m = MODULES[cell](2, 3, 2).double()
    x = torch.randn(3, 2, 2, dtype=torch.float64, requires_grad=True)
    ws = [w.detach().clone().requires_grad_(True) for layer in m.all_weights for w in layer]
    mask = torch.empty(3, 2, 3, dtype=torch.float64).bernoulli_(0.5).mul_(2)
    fn = lambda x, *ws: _op_call(f"{cell}_train", cell, x, ws, masks=[mask])[:-1]  # noqa: E731
    assert torch.autograd.gradcheck(fn, (x, *ws))
    xu, h0 = x[:, 0].detach().requires_grad_(), torch.randn(2, 3, dtype=torch.float64)
    fu = lambda x, *ws: _op_call(f"{cell}_train", cell, x, ws, h0)  # noqa: E731
    out = fu(xu, *ws)
    assert out[0].shape == (3, 3) and out[1].shape == (2, 3) and out[-1].shape == (2, 4, 3)
    assert torch.autograd.gradcheck(lambda *a: fu(*a)[:-1], (xu, *ws), fast_mode=True)


@pytest.mark.parametrize("G,H,K,hb", [(4, 64, 24, 16), (3, 48, 7, 16), (4, 64, 33, 32)])
def test_gate_blocked_is_numpys_layout(G, H, K, hb):
    """The recurrent weights' packed layout made by the tiled transposes of
    :func:`schedules.core.transpose.gate_blocked` is NumPy's transpose."""
    from schedules.core.transpose import gate_blocked
    m = np.random.default_rng(0).random((G * H, K), dtype=np.float32)
    out = gate_blocked(m, G, hb, np.empty((H // hb, K, G, hb), np.float32))
    np.testing.assert_array_equal(out, m.reshape(G, H // hb, hb, K).transpose(1, 3, 0, 2))
    with pytest.raises(ValueError, match="cannot hold"):
        gate_blocked(m, G, hb, np.empty((H // hb, K, G, hb + 1), np.float32))

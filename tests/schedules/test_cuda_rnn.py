"""The multilayer LSTM (and GRU) wavefront as a library GPU schedule
(``schedules.solvers.rnn_cuda``) and ``target="cuda"`` on ``schedules.gemm`` /
``schedules.lstm`` / ``schedules.gru``, tested without a GPU: the generated CUDA emulated in
three thread orders and the same GPU-mapped Function run on the CPU, both
against a float64 NumPy LSTM (and torch's module when torch is installed);
cubins for sm_80/sm_90 without spills; the dispatch (the CUDA path is taken
and, with no driver, raises ``NoCudaDriverError``)."""
import functools
import shutil

import numpy as np
import pytest

import schedules
from schedules.problems.rnn_device import DeviceArrays
from schedules.solvers import rnn_cuda as gpu_rnn

ORDERS = ("forward", "reverse", "shuffle")
needs_cxx = pytest.mark.skipif(not any(shutil.which(c) for c in ("g++", "c++", "clang++")),
                               reason="the CUDA emulator needs a C++ compiler")
needs_nvcc = pytest.mark.skipif(shutil.which("nvcc") is None,
                                reason="nvcc not found: no cubins are built")


def driver_missing():
    from codegen.cuda.runtime import NoCudaDriverError, driver
    try:
        driver()
    except NoCudaDriverError:
        return True
    return False


needs_no_driver = pytest.mark.skipif(not driver_missing(),
                                     reason="a CUDA driver is present: calls launch for real")


# ------------------------------------------------------------------ reference
def sigmoid(v):
    return 1 / (1 + np.exp(-v))


def gru_reference(x, weights, h0):
    """torch.nn.GRU's forward in float64 NumPy: y, h_n."""
    seq, hn = x.astype(np.float64), []
    for l, (wih, whh, bih, bhh) in enumerate(weights):
        H = whh.shape[1]
        h, outs = h0[l].astype(np.float64), []
        for t in range(seq.shape[0]):
            gi, gh = seq[t] @ wih.T + bih, h @ whh.T + bhh
            r = sigmoid(gi[:, :H] + gh[:, :H])
            z = sigmoid(gi[:, H:2 * H] + gh[:, H:2 * H])
            n = np.tanh(gi[:, 2 * H:] + r * gh[:, 2 * H:])
            h = (1 - z) * n + z * h
            outs.append(h)
        seq = np.stack(outs)
        hn.append(h)
    return seq, np.stack(hn)


def reference(x, weights, h0, c0):
    """torch.nn.LSTM's forward in float64 NumPy: y, h_n, c_n."""
    seq = x.astype(np.float64)
    hn, cn = [], []
    for l, (wih, whh, bih, bhh) in enumerate(weights):
        H = whh.shape[1]
        h, c = h0[l].astype(np.float64), c0[l].astype(np.float64)
        outs = []
        for t in range(seq.shape[0]):
            z = seq[t] @ wih.T + h @ whh.T + bih + bhh
            i, f = sigmoid(z[:, :H]), sigmoid(z[:, H:2 * H])
            g, o = np.tanh(z[:, 2 * H:3 * H]), sigmoid(z[:, 3 * H:])
            c = f * c + i * g
            h = o * np.tanh(c)
            outs.append(h)
        seq = np.stack(outs)
        hn.append(h)
        cn.append(c)
    return seq, np.stack(hn), np.stack(cn)


def problem(L, T, B, I, H, seed=0, gates=4):
    rng = np.random.default_rng(seed)
    s = 1 / np.sqrt(H)
    G = gates
    x = rng.standard_normal((T, B, I)).astype(np.float32)
    weights = [[rng.uniform(-s, s, shape).astype(np.float32)
                for shape in ((G * H, I if l == 0 else H), (G * H, H), (G * H,), (G * H,))]
               for l in range(L)]
    h0 = rng.standard_normal((L, B, H)).astype(np.float32)
    c0 = rng.standard_normal((L, B, H)).astype(np.float32)
    return x, weights, h0, c0


def kernel_args(x, weights, h0, c0=None):
    H = weights[0][1].shape[1]
    cell = "lstm" if c0 is not None else "gru"
    return dict(x=x, **gpu_rnn.pack(weights, x.shape[2], H, x, cell), h0=h0,
                **({} if c0 is None else {"c0": c0}))


def check(out, want, atol=2e-5):
    """The kernel's ``out`` (LSTM: {h, c}; GRU: h) against y, h_n (, c_n)."""
    h, c = (out["h"], out["c"]) if isinstance(out, dict) else (out, None)
    got = gpu_rnn.unpack(h, c, DeviceArrays(h))
    assert len(want) == 3 - (c is None)
    for g, ref in zip(got, want):
        np.testing.assert_allclose(g, ref, atol=atol, rtol=1e-5)


# (L, T, B, I, H, hc, bc): hidden and batch chunks that do not divide the
# sizes (partial blocks), an input size other than H and equal to it, one
# layer at batch 1 with the default chunks
SHAPES = [(3, 4, 3, 5, 10, 4, 2), (2, 3, 5, 6, 6, 4, 4), (1, 3, 1, 2, 3, None, None),
          (1, 3, 1, 4, 1, None, None)]      # L = H = B = 1: one block per launch


@functools.lru_cache(maxsize=None)
def cuda_kernel(shape, cubins=False, cell="lstm"):
    from tests.codegen.cuda.test_cuda import emulation_cubins
    L, T, B, I, H, hc, bc = shape
    f = gpu_rnn.function(L, T, B, I, H, hc=hc, bc=bc, cell=cell)
    if cubins:
        return f.compile(target="cuda")
    with emulation_cubins():
        return f.compile(target="cuda")


# ------------------------------------------------------------------ semantics
@needs_cxx
@pytest.mark.parametrize("shape", SHAPES + [(2, 2, 4, 3, 64, None, None)])
def test_emulated_wavefront_matches_reference_in_three_orders(shape):
    """The last shape has the default chunks: 32 units x 4 gates x 2 rows =
    256 threads per block, whole warps."""
    L, T, B, I, H, _, _ = shape
    prob = problem(L, T, B, I, H)
    want = reference(*prob)
    k = cuda_kernel(shape)
    for order in ORDERS:
        check(k.emulate(order=order, seed=7, **kernel_args(*prob)), want)


@pytest.mark.parametrize("shape", SHAPES)
def test_cpu_run_of_the_gpu_function_matches_reference(shape):
    L, T, B, I, H, hc, bc = shape
    prob = problem(L, T, B, I, H, seed=1)
    k = gpu_rnn.function(L, T, B, I, H, hc=hc, bc=bc).compile(target="llvm")
    check(k(**kernel_args(*prob)), reference(*prob))


@needs_cxx
@pytest.mark.parametrize("shape", SHAPES[:2])
def test_gru_emulated_and_cpu_match_reference(shape):
    L, T, B, I, H, hc, bc = shape
    x, weights, h0, _ = problem(L, T, B, I, H, seed=2, gates=3)
    want = gru_reference(x, weights, h0)
    k = cuda_kernel(shape, cell="gru")
    assert k.source.count("__syncthreads();") == 1
    for order in ORDERS:
        check(k.emulate(order=order, seed=11, **kernel_args(x, weights, h0)), want)
    cpu = gpu_rnn.function(L, T, B, I, H, hc=hc, bc=bc, cell="gru").compile(target="llvm")
    check(cpu(**kernel_args(x, weights, h0)), want)


def test_matches_torch_module():
    torch = pytest.importorskip("torch", reason="torch not installed")
    L, T, B, I, H = 3, 4, 3, 5, 10
    torch.manual_seed(0)
    m = torch.nn.LSTM(I, H, L)
    x, h0, c0 = torch.randn(T, B, I), torch.randn(L, B, H), torch.randn(L, B, H)
    with torch.no_grad():
        y, (hn, cn) = m(x, (h0, c0))
    weights = [[p.detach().numpy() for p in layer] for layer in m.all_weights]
    k = gpu_rnn.function(L, T, B, I, H, hc=4, bc=2).compile(target="llvm")
    check(k(**kernel_args(x.numpy(), weights, h0.numpy(), c0.numpy())),
          (y.numpy(), hn.numpy(), cn.numpy()))


# ------------------------------------------------------------------ the mapping
@needs_cxx
def test_one_launch_per_antidiagonal_layers_on_blocks():
    L, T, B, I, H, hc, bc = SHAPES[0]
    k = cuda_kernel(SHAPES[0])
    launches = [s for s in k.launch_plan.steps if hasattr(s, "block")]
    loops = [s for s in k.launch_plan.steps if not hasattr(s, "block")]
    assert len(launches) == 3                      # the projection, h0, c0: once each
    assert len(loops) == 1 and loops[0].var == "t"
    step = loops[0].steps[0]
    assert step.host_vars == ("t",)
    assert step.block == (hc, 4, bc)                # hidden units x gates x batch rows
    from codegen.cuda.printer import evaluate
    plan = k.launch_plan
    steps = [(launch.name, tuple(evaluate(g, v) for g in launch.grid), v.get("t"))
             for launch, v in plan.launches(plan.constants)]
    assert [s[0] for s in steps[:3]] == [s.name for s in launches]
    diagonals = steps[3:]
    assert [d for _, _, d in diagonals] == list(range(T + L - 1))
    for name, grid, d in diagonals:       # the layers l with 0 <= d - l < T, all chunks
        layers = min(d, L - 1) - max(0, d - T + 1) + 1
        assert name == step.name and grid == (layers, -(-H // hc), -(-B // bc))
    src = k.source
    body = src[src.index(step.name + "("):]
    assert body[:body.index("#ifdef")].count("__syncthreads();") == 1   # gates -> cell


@needs_nvcc
@pytest.mark.parametrize("cell", ["lstm", "gru"])
def test_cubins_without_spills_at_a_real_size(cell):
    """L=4, B=64, I=H=512: the step kernel's registers, shared memory and
    barriers recorded for sm_80 and sm_90."""
    from tiramisu_py.driver import cuda as ck
    k = gpu_rnn.function(4, 16, 64, 512, 512, cell=cell).compile(target="cuda")
    assert set(k.resources) == set(ck.CUDA_ARCHS) and {"sm_80", "sm_90"} <= set(k.resources)
    step = next(s for s in k.launch_plan.steps if not hasattr(s, "block")).steps[0]
    assert step.block == (gpu_rnn.HC, 4, gpu_rnn.BC)
    for arch, res in k.resources.items():
        assert set(res) == {s.name for s in k.launch_plan.kernels}
        for r in res.values():
            assert r.spill_stores == 0 and r.spill_loads == 0 and r.stack_bytes == 0
        r = res[step.name]
        assert 0 < r.registers <= 64 and r.barriers == 1 and r.shared_bytes == 0
        assert r.registers * gpu_rnn.HC * 4 * gpu_rnn.BC <= 65536    # a block fits an SM


# ------------------------------------------------------------------ dispatch
def torch_weights(L, I, H):
    torch = pytest.importorskip("torch", reason="torch not installed")
    torch.manual_seed(3)
    m = torch.nn.LSTM(I, H, L)
    return torch, m, [[p.detach() for p in layer] for layer in m.all_weights]


@needs_no_driver
def test_target_cuda_takes_the_cuda_path():
    from codegen.cuda.runtime import NoCudaDriverError
    x, weights, h0, c0 = problem(2, 3, 2, 4, 6)
    with pytest.raises(NoCudaDriverError, match="no CUDA driver on this machine"):
        schedules.lstm(x, weights, h0, c0, target="cuda")
    xg, wg, hg, _ = problem(2, 3, 2, 4, 6, gates=3)
    with pytest.raises(NoCudaDriverError, match="no CUDA driver on this machine"):
        schedules.gru(xg, wg, hg, target="cuda")
    a = np.ones((40, 3), np.float32)
    with pytest.raises(NoCudaDriverError, match="no CUDA driver on this machine"):
        schedules.gemm(a, a.T.copy(), target="cuda")


class FakeDeviceArray:
    """A device array as CuPy / Numba / pycuda present one (never launched:
    there is no driver)."""

    def __init__(self, shape, typestr="<f4"):
        self.shape = shape
        self.__cuda_array_interface__ = {"shape": shape, "typestr": typestr,
                                         "data": (0, False), "version": 3}


@needs_no_driver
def test_device_arrays_select_the_cuda_path():
    from codegen.cuda.runtime import NoCudaDriverError
    x, weights, _, _ = problem(2, 3, 2, 4, 6)
    with pytest.raises(NoCudaDriverError):
        schedules.lstm(FakeDeviceArray((3, 2, 4)), weights)
    with pytest.raises(NoCudaDriverError):
        schedules.gemm(FakeDeviceArray((40, 3)), FakeDeviceArray((3, 4)))
    with pytest.raises(ValueError, match="target='llvm' runs on the CPU"):
        schedules.lstm(FakeDeviceArray((3, 2, 4)), weights, target="llvm")
    with pytest.raises(ValueError, match="target='llvm' runs on the CPU"):
        schedules.gemm(FakeDeviceArray((5, 3)), FakeDeviceArray((3, 4)), target="llvm")


@needs_cxx
def test_dispatch_end_to_end_through_the_emulator(monkeypatch):
    """``schedules.lstm(..., target="cuda")`` with torch's ``all_weights``
    and ``schedules.gemm(..., target="cuda")``, every launch emulated: the
    packing, the kernel key and the unpacking are the device path's."""
    from tiramisu_py.runtime.cuda_kernel import CudaKernel
    monkeypatch.setattr(CudaKernel, "__call__",
                        lambda self, *a, **kw: self.emulate(*a, order="shuffle", **kw))
    torch, m, weights = torch_weights(2, 5, 7)
    x, h0 = torch.randn(3, 2, 5), torch.randn(2, 2, 7)
    with torch.no_grad():
        y, (hn, cn) = m(x, (h0, torch.zeros(2, 2, 7)))
    got_y, (got_hn, got_cn) = schedules.lstm(x, weights, h0, target="cuda")
    assert all(isinstance(t, torch.Tensor) for t in (got_y, got_hn, got_cn))
    for got, want in ((got_y, y), (got_hn, hn), (got_cn, cn)):
        assert tuple(got.shape) == tuple(want.shape)
        torch.testing.assert_close(got, want, atol=2e-5, rtol=1e-5)
    packed = schedules.RNNWeights([[p.numpy() for p in layer] for layer in weights], "lstm")
    np_y, (np_hn, np_cn) = schedules.lstm(x.numpy(), packed, h0.numpy(), target="cuda")
    assert isinstance(np_y, np.ndarray)
    for got, want in ((np_y, y), (np_hn, hn), (np_cn, cn)):
        np.testing.assert_allclose(got, want.numpy(), atol=2e-5, rtol=1e-5)
    g = torch.nn.GRU(5, 7, 2)
    with torch.no_grad():
        y, hn = g(x, h0)
    got_y, got_hn = schedules.gru(x, [[p.detach() for p in layer] for layer in g.all_weights],
                                  h0, target="cuda")
    torch.testing.assert_close(got_y, y, atol=2e-5, rtol=1e-5)
    torch.testing.assert_close(got_hn, hn, atol=2e-5, rtol=1e-5)
    a = np.random.default_rng(0).standard_normal((19, 23), dtype=np.float32)
    b = np.random.default_rng(1).standard_normal((23, 17), dtype=np.float32)
    np.testing.assert_allclose(schedules.gemm(a, b, target="cuda"), a @ b, atol=1e-4, rtol=1e-4)


def test_cuda_bad_arguments_are_named():
    x, weights, h0, c0 = problem(2, 3, 2, 4, 6)
    with pytest.raises(ValueError, match="sparse=True: sparse"):
        schedules.lstm(x, weights, target="cuda", sparse=True)
    with pytest.raises(ValueError, match="schedule 'layer' has no CUDA schedule"):
        schedules.lstm(x, weights, target="cuda", schedule="layer")
    bad = [list(layer) for layer in weights]
    bad[1][1] = bad[1][1][:, :5]
    with pytest.raises(ValueError, match=r"weights\[1\]\[1\] \(w_hh of layer 1\)"):
        schedules.lstm(x, bad, target="cuda")
    csr = [list(layer) for layer in weights]
    csr[0][1] = schedules.CSRWeights.from_dense(weights[0][1])
    with pytest.raises(ValueError, match=r"weights\[0\]: sparse \(CSR\) weights"):
        schedules.lstm(x, csr, target="cuda")
    with pytest.raises(ValueError, match="c0: expected shape"):
        schedules.lstm(x, weights, h0, c0[:1], target="cuda")
    with pytest.raises(TypeError, match="x: expected float32"):
        schedules.lstm(x.astype(np.float64), weights, target="cuda")
    with pytest.raises(ValueError, match="params: GemmParams"):
        schedules.gemm(x[0], x[0].T.copy(), params=schedules.gemm_params(2, 2, 4),
                       target="cuda")
    with pytest.raises(ValueError, match="inner dimensions differ"):
        schedules.gemm(x[0], x[0], target="cuda")
    with pytest.raises(ValueError, match="H: expected a positive int"):
        gpu_rnn.function(2, 3, 2, 4, 0)


@pytest.mark.gpu
def test_real_device_matches_torch():
    import torch
    torch, m, weights = torch_weights(3, 32, 64)
    m = m.cuda()
    x = torch.randn(10, 4, 32, device="cuda")
    # cuDNN's LSTM may multiply in TF32 (10-bit mantissa; torch's default
    # allows it): a float32 reference needs it off, as bench/bench_cuda.py does
    tf32, torch.backends.cudnn.allow_tf32 = torch.backends.cudnn.allow_tf32, False
    try:
        with torch.no_grad():
            y, (hn, cn) = m(x)
    finally:
        torch.backends.cudnn.allow_tf32 = tf32
    got_y, (got_hn, got_cn) = schedules.lstm(x, [[p.detach() for p in layer]
                                                for layer in m.all_weights])
    for got, want in ((got_y, y), (got_hn, hn), (got_cn, cn)):
        assert got.device == want.device
        torch.testing.assert_close(got, want, atol=1e-4, rtol=1e-4)


@needs_cxx
def test_barrier_kept_where_isl_drops_a_one_iteration_loop():
    """A block-level loop of one iteration (here the single k-step of a
    shared-tile GEMM with K <= TK; the LSTM's layer and chunk loops with one
    layer and one batch chunk) is substituted by isl, not printed: the
    barrier planned at the sequence inside it must still be placed (it was
    lost: every thread order gave a wrong product)."""
    from schedules.solvers import gemm_cuda as gpu_gemm
    from tiramisu_py.driver import cuda as ck
    saved, ck.CUDA_ARCHS = ck.CUDA_ARCHS, ()
    try:
        k = gpu_gemm.function(17, 19, 3).compile(target="cuda")
    finally:
        ck.CUDA_ARCHS = saved
    assert "for (int64_t k0" not in k.source and k.source.count("__syncthreads();") >= 1
    rng = np.random.default_rng(5)
    a = rng.standard_normal((17, 3), dtype=np.float32)
    b = rng.standard_normal((3, 19), dtype=np.float32)
    for order in ORDERS:
        np.testing.assert_allclose(k.emulate(a, b, order=order), a @ b, atol=1e-5, rtol=1e-5)


def test_layers_on_blocks_without_the_skew_is_refused():
    """Without the skew, one launch per step would run layer l beside layer
    l - 1 of the same step, whose output it reads: the check refuses the
    block loop (blocks communicate only across launches)."""
    import tiramisu_py as tp
    g = gpu_rnn.algorithm(3, 4, 2, 5, 6)
    cs = g.computations
    xp = cs["xp"]
    for s in (xp, xp.update):
        s.bind("t", "block.x")
        s.bind("g", "thread.x")
    xp.update.after(xp, "g")
    for name in ("h_init", "c_init"):
        cs[name].bind("l", "block.x")
        gpu_rnn._units(cs[name], ("l",), 4, 2)
    for s in (cs["z"], cs["z"].update, cs["c_step"], cs["h_step"]):
        s.interchange("l", "t")           # time on the host, layers on blocks: no skew
        s.bind("l", "block.x")
        gpu_rnn._units(s, ("t", "l"), 4, 2)
    cs["z"].update.after(cs["z"], "j1")
    cs["c_step"].after(cs["z"].update, "b0")
    cs["h_step"].after(cs["c_step"], "j1")
    with pytest.raises(tp.IllegalScheduleError, match="block loop 'l' carries a dependence"):
        g.compile(target="llvm")


@pytest.mark.parametrize("cell", ["lstm", "gru"])
def test_torch_packing_equals_numpy_packing(cell):
    """The device path packs and unpacks with torch operations on the
    tensors' device; on CPU tensors they give NumPy's packing exactly."""
    torch = pytest.importorskip("torch", reason="torch not installed")
    G = 4 if cell == "lstm" else 3
    x, weights, h0, c0 = problem(3, 2, 2, 5, 6, gates=G)
    want = gpu_rnn.pack(weights, 5, 6, x, cell)
    got = gpu_rnn.pack([[torch.from_numpy(m) for m in layer] for layer in weights], 5, 6,
                       torch.from_numpy(x), cell)
    assert set(got) == set(want) == {"w_ih0T", "wiT", "whT", "bias"}
    for name in want:
        assert got[name].is_contiguous()
        np.testing.assert_array_equal(got[name].numpy(), want[name])
    h = np.random.default_rng(0).standard_normal((4, 3, 2, 6)).astype(np.float32)
    c = h[1:] + 1
    for a, b in zip(gpu_rnn.unpack(torch.from_numpy(h), torch.from_numpy(c),
                                   DeviceArrays(torch.from_numpy(h))),
                    gpu_rnn.unpack(h, c, DeviceArrays(h))):
        np.testing.assert_array_equal(a.numpy(), b)

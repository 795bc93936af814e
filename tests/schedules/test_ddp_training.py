"""Data-parallel training on torch's engine: a model converted by
``schedules.nn.convert``, and the torch model compiled with the "tiramisu"
backend (Dynamo's DDP graph split, the rewrite, AOTAutograd), train
under ``torch.nn.parallel.DistributedDataParallel`` (gloo, 2 processes on
this host): after 5 seeded SGD steps their weights and BatchNorm statistics
equal torch DDP's to float32 rounding, and both ranks hold the same weights."""
import gc
import socket
import time

import pytest

torch = pytest.importorskip("torch", reason="torch is an optional extra")
import torch.distributed as dist  # noqa: E402
import torch.multiprocessing as mp  # noqa: E402
from torch import nn  # noqa: E402

if not dist.is_available() or not dist.is_gloo_available():
    pytest.skip("torch.distributed with gloo is not available", allow_module_level=True)

VARIANTS = ("torch", "converted", "compiled")
STEPS, WORLD = 5, 2


def _model():
    torch.manual_seed(0)
    return nn.Sequential(nn.Conv2d(3, 8, 3, padding=1), nn.BatchNorm2d(8), nn.ReLU(),
                         nn.Conv2d(8, 8, 3, padding=1), nn.ReLU(), nn.MaxPool2d(2),
                         nn.Flatten(), nn.Linear(8 * 4 * 4, 5))


def _state(model):
    """Parameters then buffers, in order (convert renumbers a fused run's
    modules, so names differ; the order does not)."""
    return [t.detach().clone() for t in (*model.parameters(), *model.buffers())]


def _train(rank, port, out):
    """One rank: each variant trained STEPS steps on this rank's batches."""
    import schedules.dynamo  # noqa: F401  (the backend)
    import schedules.nn
    from torch.nn.parallel import DistributedDataParallel as DDP
    torch.set_num_threads(1)
    dist.init_process_group("gloo", init_method=f"tcp://127.0.0.1:{port}", rank=rank,
                            world_size=WORLD)
    try:
        states = {}
        for variant in VARIANTS:
            model = _model()
            if variant == "converted":
                model = schedules.nn.convert(model)
            if variant == "compiled":      # (compiled inside DDP: Dynamo stops at DDP's forward)
                ddp = DDP(torch.compile(model, backend="tiramisu", options={"inner": "aot_eager"}))
            else:
                ddp = DDP(model)
            opt = torch.optim.SGD(model.parameters(), lr=0.1, momentum=0.9)
            for step in range(STEPS):
                g = torch.Generator().manual_seed(100 * step + rank)
                x, y = torch.randn(4, 3, 8, 8, generator=g), torch.randint(0, 5, (4,), generator=g)
                opt.zero_grad()
                nn.functional.cross_entropy(ddp(x), y).backward()
                opt.step()
            states[variant] = _state(model)
            if variant == "compiled":
                states["replaced"] = schedules.dynamo.compile_report(model).counts()
            # DDP's reducer freed here, while the group is registered: freed
            # as _train returns, its last reference destroys the gloo group
            # holding the GIL while gloo's worker thread waits for the GIL to
            # free a finished allreduce (a deadlock in torch, seen once here)
            del ddp, opt, model
            gc.collect()
        torch.save(states, f"{out}/rank{rank}.pt")
        dist.barrier()
    finally:
        dist.destroy_process_group()


def _free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


TIMEOUT_S = 300      # ~15 s here: a rank that hangs fails the test instead of the run


def test_converted_and_compiled_models_train_under_ddp_as_torch(tmp_path):
    context = mp.spawn(_train, args=(_free_port(), str(tmp_path)), nprocs=WORLD, join=False)
    deadline = time.monotonic() + TIMEOUT_S
    while not context.join(timeout=1):         # raises if a rank failed
        if time.monotonic() > deadline:
            for p in context.processes:
                p.kill()
            pytest.fail(f"the DDP ranks did not finish in {TIMEOUT_S} s "
                        f"(exit codes {[p.exitcode for p in context.processes]})")
    ranks = [torch.load(tmp_path / f"rank{r}.pt") for r in range(WORLD)]
    start = _state(_model())
    for states in ranks:
        assert states["replaced"] == {"tiramisu::conv2d": 1, "tiramisu::conv_relu_maxpool": 1,
                                      "tiramisu::linear": 1}
        ref = states["torch"]
        assert any(not torch.equal(a, b) for a, b in zip(ref, start))     # it trained
        for variant in ("converted", "compiled"):
            assert len(states[variant]) == len(ref)
            for ours, theirs in zip(states[variant], ref):
                torch.testing.assert_close(ours, theirs, rtol=1e-5, atol=1e-6)
    n = len(list(_model().parameters()))          # DDP kept the parameters in step (each
    for a, b in zip(ranks[0]["compiled"][:n], ranks[1]["compiled"][:n]):    # rank's BatchNorm
        torch.testing.assert_close(a, b, rtol=0, atol=0)      # statistics saw its own last batch)

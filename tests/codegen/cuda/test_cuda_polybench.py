"""The PolyBench legality suite (``tests.auto_kernels.SUITE``) with GPU mappings.

For every kernel of the suite, mappings written with the mapping commands
(`bind`, `gpu_tile`, `cache_shared`; time and wavefront loops as host loops,
one launch per step, or as a serial loop inside one block):

- legal mappings: `compile(target="cuda")` (printed, no cubins), the emulated
  CUDA source == the kernel's NumPy reference in the three thread orders, and
  the same GPU-mapped Function on the CPU (C and LLVM backends) == reference;
  the number of `__syncthreads()` the legality check inserted is the one
  derived by hand (in each mapping's docstring);
- naive mappings that race (a block loop carrying a dependence, a dependence
  between the threads of one thread loop) are refused naming the command and
  two instances;
- deleting an inserted barrier from the printed source changes the emulated
  result; two mappings are built to cubins for sm_80/sm_90 (no spills).

The mappings are in tests/polybench_gpu.py (persistent one-block kernels
with the sizes fixed: see there)."""
import functools
import re
import zlib

import numpy as np
import pytest

import tiramisu_py as tp
from codegen.cuda.printer import evaluate
import tests.polybench_gpu as pg
from tests.auto_kernels import SUITE
from tests.codegen.cuda.test_cuda import ORDERS, cuda_kernel, emulate_source, needs_cxx, needs_nvcc

RTOL, ATOL = 1e-9, 1e-12


# ------------------------------------------------------------------- helpers
@functools.lru_cache(maxsize=None)
def case(kernel):
    """(inputs, reference) of a suite kernel, computed once."""
    inputs = SUITE[kernel].inputs(np.random.default_rng(zlib.crc32(kernel.encode())))
    return inputs, SUITE[kernel].reference(inputs)


def run(call, kernel):
    """The outputs of ``call`` (a compiled kernel or an emulation) on the inputs."""
    return SUITE[kernel].run(call, case(kernel)[0])


def assert_reference(out, kernel, what):
    for n, want in case(kernel)[1].items():
        np.testing.assert_allclose(out[n], want, rtol=RTOL, atol=ATOL,
                                   err_msg=f"{kernel} {what}: output {n!r}")


# ================================================================ legal mappings
MAPPINGS = {
    "gemm_tile": ("gemm", pg.gemm_tile, 0),
    "gemm_shared": ("gemm", pg.gemm_shared, 2),
    "gemm_registers": ("gemm", pg.gemm_registers, 3),
    "2mm_tile": ("2mm", pg.mm2_tile, 0),
    "2mm_shared": ("2mm", pg.mm2_shared, 2),
    "jacobi-1d_host": ("jacobi-1d", pg.jacobi1d_host, 0),
    "jacobi-1d_block": ("jacobi-1d", pg.jacobi1d_block, 2),
    "jacobi-2d_host": ("jacobi-2d", pg.jacobi2d_host, 0),
    "jacobi-2d_block": ("jacobi-2d", pg.jacobi2d_block, 2),
    "heat-3d_host": ("heat-3d", pg.heat3d_host, 0),
    "heat-3d_block": ("heat-3d", pg.heat3d_block, 2),
    "seidel-2d_wavefront": ("seidel-2d", pg.seidel_wavefront, 0),
    "seidel-2d_block": ("seidel-2d", pg.seidel_block, 1),
    "fdtd-2d_host": ("fdtd-2d", pg.fdtd2d_host, 0),
    "fdtd-2d_block": ("fdtd-2d", pg.fdtd2d_block, 2),
    "lu_block": ("lu", pg.lu_block, 1),
    "cholesky_block": ("cholesky", pg.cholesky_block, 2),
    "trisolv_block": ("trisolv", pg.trisolv_block, 3),
    "floyd-warshall_block": ("floyd-warshall", pg.floyd_block, 0),
    "syrk_tile": ("syrk", pg.syrk_tile, 0),
    "syrk_reversed_scale": ("syrk", pg.syrk_reversed_scale, 1),
    "adi_host": ("adi", pg.adi_host, 0),
    "adi_block": ("adi", pg.adi_block, 2),
}


def test_every_suite_kernel_has_a_mapping():
    assert {k for k, _, _ in MAPPINGS.values()} == set(SUITE)
    # one with barriers for every kernel but floyd-warshall (see pg.floyd_block)
    assert {k for k, _, b in MAPPINGS.values() if b} == set(SUITE) - {"floyd-warshall"}
    racy = {"seidel-2d", "lu", "cholesky", "trisolv", "floyd-warshall", "adi"}
    assert {n.rsplit("_", 1)[0] for n in ILLEGAL} == racy


@functools.lru_cache(maxsize=None)
def mapping(name):
    return MAPPINGS[name][1]


@pytest.mark.parametrize("name, target", [(n, ("cpu", "llvm")[(k + k // 2) % 2])
                                           for k, n in enumerate(MAPPINGS)])
def test_legal_mapping_cpu_runs_match_reference(name, target):
    """The GPU mapping compiled for the CPU (blocks and threads as serial
    loops), the mappings dealt to the C and LLVM backends in turns of two
    (the lowering is the same; each backend still takes host loops and
    persistent blocks)."""
    kernel, build, _ = MAPPINGS[name]
    assert_reference(run(build().compile(target=target), kernel), kernel, f"{name} {target}")


@needs_cxx
@pytest.mark.parametrize("name", list(MAPPINGS))
def test_legal_mapping_emulated_matches_reference(name):
    kernel, build, barriers = MAPPINGS[name]
    k = cuda_kernel(mapping(name))
    assert k.source.count("__syncthreads();") == barriers
    for order in ORDERS:
        out = run(functools.partial(k.emulate, order=order, seed=7), kernel)
        assert_reference(out, kernel, f"{name} emulated {order}")


def launches(name, **values):
    """[(kernel, grid)] in launch order for the params ``values``."""
    plan = cuda_kernel(mapping(name)).launch_plan
    return [(kl.name, tuple(evaluate(g, v) for g in kl.grid)) for kl, v in plan.launches(values)]


def test_host_loops_launch_per_step():
    """jacobi-1d: sB and sA per step; fdtd-2d: 4 launches per step; adi (its
    sizes fixed): the two sweeps per step; seidel-2d: one per wavefront
    i + 2t (1 .. 17)."""
    for name, values, count in (("jacobi-1d_host", dict(TSTEPS=5, N=23), 2 * 5),
                                ("fdtd-2d_host", dict(TMAX=4, NX=10, NY=11), 4 * 4),
                                ("adi_host", {}, 2 * 3),
                                ("seidel-2d_wavefront", dict(TSTEPS=5, N=11), 17)):
        assert len(launches(name, **values)) == count, name


def test_persistent_kernels_are_one_launch_of_one_block():
    for name, values in (("jacobi-1d_block", dict(TSTEPS=5)), ("jacobi-2d_block", dict(TSTEPS=5)),
                         ("seidel-2d_block", {}), ("trisolv_block", {}),
                         ("cholesky_block", {}), ("heat-3d_block", dict(TSTEPS=3)),
                         ("fdtd-2d_block", dict(TMAX=4)), ("adi_block", {})):
        assert launches(name, **values) == [(f"{mapping(name)().name}_k0", (1, 1, 1))], name
    # lu: one single-block launch per row i >= 1 (row 0 has no instance: its
    # j and ku ranges are empty)
    assert launches("lu_block") == [("lu_k0", (1, 1, 1))] * 10
    assert launches("floyd-warshall_block") == [("floyd_warshall_k0", (1, 1, 1))] * 11  # per k


def test_fused_stencil_legal_on_cpu_refused_on_threads():
    assert_reference(run(pg.jacobi1d_fused(gpu=False).compile(), "jacobi-1d"), "jacobi-1d", "cpu")
    with pytest.raises(tp.IllegalScheduleError,
                       match=re.compile(THREAD.format(cmd=re.escape("sB.bind(i1, 'thread.x')"),
                                                      loop="i1", i=INST), re.S)):
        pg.jacobi1d_fused().compile(target="cuda")


INST = r"\w+\([a-z0-9=, ]+\)"
BLOCK = r"{cmd} is illegal: block loop '{loop}' carries a dependence.*{i} and {i}"
THREAD = r"{cmd} is illegal: two threads of one block.*thread loop '{loop}'.*{i} and {i}"
ILLEGAL = {
    "seidel-2d_blocks": (pg.seidel_naive_blocks,
                         BLOCK.format(cmd=re.escape("S.bind(i, 'block.y')"), loop="i", i=INST)),
    "seidel-2d_threads": (pg.seidel_naive_threads,
                          THREAD.format(cmd=re.escape("S.bind(j, 'thread.x')"), loop="j", i=INST)),
    "lu_blocks": (pg.lu_naive, BLOCK.format(cmd=r"L[12]\.bind\(j, 'block.x'\)", loop="j", i=INST)),
    "cholesky_blocks": (pg.cholesky_naive,
                        BLOCK.format(cmd=r"C(0|0_update|2)\.bind\(j0, 'block.x'\)", loop="j0",
                                     i=INST)),
    "trisolv_blocks": (pg.trisolv_naive, BLOCK.format(cmd=r"\w+\.bind\(i0, 'block.x'\)", loop="i0",
                                                   i=INST)),
    "floyd-warshall_blocks": (pg.floyd_naive, BLOCK.format(cmd=r"relax\.bind\(i0, 'block.y'\)",
                                                        loop="i0", i=INST)),
    "floyd-warshall_threads": (pg.floyd_naive_threads,
                               THREAD.format(cmd=r"relax\.bind\(i1, 'thread.x'\)", loop="i1",
                                             i=INST)),
    "adi_threads": (pg.adi_naive_threads, THREAD.format(cmd=r"c[45]\.bind\(j1, 'thread.x'\)",
                                                     loop="j1", i=INST)),
}


@pytest.mark.parametrize("name", list(ILLEGAL))
def test_racy_mapping_refused(name):
    build, message = ILLEGAL[name]
    with pytest.raises(tp.IllegalScheduleError, match=re.compile(message, re.S)):
        build().compile(target="cuda")


# ============================================================== barriers, cubins
def _without(source, which):
    parts = source.split("__syncthreads();")
    return "".join(p + ("/* removed */" if n == which else "__syncthreads();")
                   for n, p in enumerate(parts[:-1])) + parts[-1]


@needs_cxx
@pytest.mark.parametrize("name,which", [("jacobi-1d_block", 0), ("jacobi-1d_block", 1),
                                        ("trisolv_block", 1), ("lu_block", 0),
                                        ("cholesky_block", 0), ("fdtd-2d_block", 0)])
def test_emulator_catches_a_removed_barrier(name, which):
    kernel = MAPPINGS[name][0]
    k = cuda_kernel(mapping(name))
    src = _without(k.source, which)
    assert src.count("__syncthreads();") == MAPPINGS[name][2] - 1
    wrong = 0
    for order in ORDERS:
        out = run(functools.partial(emulate_source, k, src, order=order, seed=3), kernel)
        wrong += any(not np.allclose(out[n], w, rtol=RTOL, atol=ATOL)
                     for n, w in case(kernel)[1].items())
    assert wrong > 0


@needs_nvcc
@pytest.mark.parametrize("name", ["gemm_registers", "trisolv_block"])
def test_cubins_without_spills(name):
    k = cuda_kernel(mapping(name), cubins=True)
    assert set(k.cubins) == {"sm_80", "sm_90"}
    for arch, res in k.resources.items():
        assert res, arch
        for kname, r in res.items():
            assert r.spill_stores == r.spill_loads == 0 and 0 < r.registers <= 255, (arch, kname)
        assert sum(r.barriers > 0 for r in res.values()) == 1, (arch, res)

"""The GPU scheduling commands by example (as tests/tiramisu_py/
test_command_loop_nests.py does for the CPU ones): a tiny program, the
commands, and the CUDA kernel they give, written out (for ``tensor_core``
only the lane loops of its update's kernel); each kernel also runs on the
CUDA emulator in its three thread orders and gives NumPy's answer."""
import numpy as np
import pytest

import tiramisu_py as tp
from codegen.cuda.emulator import ORDERS


def kernel_text(k, name=None, part=None):
    """The ``__global__`` function of ``k``'s CUDA source (its emulator stub
    left out): the first, or the one called ``name``; with ``part``, only
    the block that opens on the line containing it, dedented."""
    src = k.source
    src = src[:src.rindex("#ifdef TPY_EMULATE")]
    kernels = ["__global__" + x for x in src.split('extern "C" __global__')[1:]]
    body = next(x for x in kernels if name is None or f"\n{name}(" in x).strip()
    if part is None:
        return body
    lines = body.splitlines()
    first = next(n for n, ln in enumerate(lines) if part in ln)
    depth, last = 0, first
    for last in range(first, len(lines)):
        depth += lines[last].count("{") - lines[last].count("}")
        if depth == 0:
            break
    ind = len(lines[first]) - len(lines[first].lstrip())
    return "\n".join(ln[ind:] for ln in lines[first:last + 1])


def add_one():
    f = tp.Function("two", params={"N": 8, "M": 64})
    i, j = f.var("i", 0, "N"), f.var("j", 0, "M")
    A = f.input("A", ("N", "M"), tp.float32)
    C = f.computation("C", [i, j], A[i, j] + 1.0)
    return f, {"C": C, "A": A}, {"A": (8, 64)}, lambda A: A + 1


def blur():
    f = tp.Function("blur", params={"N": 64})
    i = f.var("i", 0, "N")
    A = f.input("A", ("N + 2",), tp.float32)
    C = f.computation("C", [i], A[i] + A[i + 1] + A[i + 2])
    return f, {"C": C, "A": A}, {"A": (66,)}, lambda A: A[:-2] + A[1:-1] + A[2:]


def rows():
    f = tp.Function("rows", params={"N": 8, "M": 64})
    i, j = f.var("i", 0, "N"), f.var("j", 0, "M")
    A = f.input("A", ("N", "M + 1"), tp.float32)
    C = f.computation("C", [i, j], A[i, j] + A[i, j + 1])
    return f, {"C": C, "A": A}, {"A": (8, 65)}, lambda A: A[:, :-1] + A[:, 1:]


def mma():
    """``C = A @ B``, one tensor-core instruction's shapes: A 16 x 16 and B
    16 x 8 of float16, C of float32."""
    f = tp.Function("mma", params={"N": 16, "M": 8, "K": 16})
    i, j, k = f.var("i", 0, "N"), f.var("j", 0, "M"), f.var("k", 0, "K")
    A, B = f.input("A", ("N", "K"), tp.float16), f.input("B", ("K", "M"), tp.float16)
    C = f.computation("C", [i, j], 0.0, dtype=tp.float32)
    C[i, j] += A[i, k] * B[k, j]
    return f, {"C": C, "u": C.update, "A": A, "B": B}, {"A": (16, 16), "B": (16, 8)}, \
        lambda A, B: A.astype(np.float32) @ B.astype(np.float32)


PROGRAMS = {"add_one": add_one, "blur": blur, "rows": rows, "mma": mma}
# the kernel and the part of it a case writes out, where not the first kernel whole
PARTS = {"tensor_core": ("mma_k1", "thread loop ly")}

# command -> (program, the commands as a user writes them, what they do, the kernel)
CASES = {
    "gpu_tile": ("add_one", 'C.gpu_tile("i", "j", 4, 32)',
          "tiles of 4 x 32: the tile loops on blocks (y, x), the points on threads", """
    __global__ void __launch_bounds__(128, 8)
    two_k0(const float* __restrict__ A, float* __restrict__ C)
    {
      const int64_t N = 8;
      const int64_t M = 64;
      {  /* block loop i0: blockIdx.y */
        const int64_t i0 = (int64_t)blockIdx.y;
        if (i0 < 2) {
          {  /* block loop j0: blockIdx.x */
            const int64_t j0 = (int64_t)blockIdx.x;
            if (j0 < 2) {
              {  /* thread loop i1: threadIdx.y */
                const int64_t i1 = (int64_t)threadIdx.y;
                if (i1 < 4) {
                  {  /* thread loop j1: threadIdx.x */
                    const int64_t j1 = (int64_t)threadIdx.x;
                    if (j1 < 32) {
                      C[(4 * i0 + i1) * 64 + (32 * j0 + j1)] = A[(4 * i0 + i1) * 64 + (32 * j0 + j1)] + 1.0f;
                    }
                  }
                }
              }
            }
          }
        }
      }
    }
"""),
    "bind": ("add_one", '(C.bind("i", "block.x"), C.bind("j", "thread.x"))',
          "a loop on a grid or block dimension, by name", """
    __global__ void __launch_bounds__(64, 16)
    two_k0(const float* __restrict__ A, float* __restrict__ C)
    {
      const int64_t N = 8;
      const int64_t M = 64;
      {  /* block loop i: blockIdx.x */
        const int64_t i = (int64_t)blockIdx.x;
        if (i < 8) {
          {  /* thread loop j: threadIdx.x */
            const int64_t j = (int64_t)threadIdx.x;
            if (j < 64) {
              C[i * 64 + j] = A[i * 64 + j] + 1.0f;
            }
          }
        }
      }
    }
"""),
    "cache_shared": ("blur", '(C.split("i", 32), C.bind("i0", "block.x"), C.bind("i1", "thread.x"), '
                             'C.cache_shared(A, "i0"))',
          "the 34 elements of A a block of 32 reads, copied by its threads into a shared tile; "
          "a barrier after the copy", """
    __global__ void __launch_bounds__(32, 32)
    blur_k0(const float* __restrict__ A, float* __restrict__ C)
    {
      const int64_t N = 64;
      __shared__ float A_shared_tile[34];
      {  /* block loop i0: blockIdx.x */
        const int64_t i0 = (int64_t)blockIdx.x;
        if (i0 < 2) {
          for (int64_t A_shared_00 = i0; A_shared_00 < i0 + 2; A_shared_00++) {
            {  /* thread loop A_shared_01: threadIdx.x */
              const int64_t A_shared_01 = (int64_t)threadIdx.x;
              if (A_shared_01 < tp_min_i64(31, 32 * i0 - 32 * A_shared_00 + 33) + 1) {
                A_shared_tile[tp_floormod_i64(32 * A_shared_00 + A_shared_01, 34)] = A[32 * A_shared_00 + A_shared_01];
              }
            }
          }
          __syncthreads();
          {  /* thread loop i1: threadIdx.x */
            const int64_t i1 = (int64_t)threadIdx.x;
            if (i1 < 32) {
              C[32 * i0 + i1] = A_shared_tile[tp_floormod_i64(32 * i0 + i1, 34)] + A_shared_tile[tp_floormod_i64(32 * i0 + i1 + 1, 34)] + A_shared_tile[tp_floormod_i64(32 * i0 + i1 + 2, 34)];
            }
          }
        }
      }
    }
"""),
    "cache_local": ("blur", '(C.split("i", 32), C.bind("i0", "block.x"), C.bind("i1", "thread.x"), '
                            'C.cache_local(A, "i1"))',
          "the 3 elements of A one thread reads, copied by that thread into a local array "
          "(registers) and read from there; no barrier: no thread reads another's copy", """
    __global__ void __launch_bounds__(32, 1)
    blur_k0(const float* __restrict__ A, float* __restrict__ C)
    {
      const int64_t N = 64;
      float A_local_regs[3];  /* per-thread copy (registers) */
      {  /* block loop i0: blockIdx.x */
        const int64_t i0 = (int64_t)blockIdx.x;
        if (i0 < 2) {
          {  /* thread loop i1: threadIdx.x */
            const int64_t i1 = (int64_t)threadIdx.x;
            if (i1 < 32) {
              for (int64_t A_local_0 = 32 * i0 + i1; A_local_0 < 32 * i0 + i1 + 3; A_local_0++) {
                A_local_regs[tp_floormod_i64(A_local_0, 3)] = A[A_local_0];
              }
              C[32 * i0 + i1] = A_local_regs[tp_floormod_i64(32 * i0 + i1, 3)] + A_local_regs[tp_floormod_i64(32 * i0 + i1 + 1, 3)] + A_local_regs[tp_floormod_i64(32 * i0 + i1 + 2, 3)];
            }
          }
        }
      }
    }
"""),
    "pipeline": ("rows", '(C.split("j", 32), C.interchange("i", "j0"), C.bind("j0", "block.x"), '
                         'C.bind("j1", "thread.x"), C.cache_shared(A, "i"), C.pipeline("i", 2))',
          "the shared copy of row i + 1 issued (cp.async) while row i is read, into the other of "
          "two slots of the tile: the loop starts a step early and its last step only reads; "
          "one barrier a step instead of two (the slots differ), after a wait for the copy", """
    __global__ void __launch_bounds__(32, 32)
    rows_k0(const float* __restrict__ A, float* __restrict__ C)
    {
      const int64_t N = 8;
      const int64_t M = 64;
      __shared__ float A_shared_tile[66];
      {  /* block loop j0: blockIdx.x */
        const int64_t j0 = (int64_t)blockIdx.x;
        if (j0 < 2) {
          for (int64_t i = -1; i < 8; i++) {
            if (i <= 6) {
              for (int64_t A_shared_10 = j0; A_shared_10 < j0 + 2; A_shared_10++) {
                {  /* thread loop A_shared_11: threadIdx.x */
                  const int64_t A_shared_11 = (int64_t)threadIdx.x;
                  if (A_shared_11 < tp_min_i64(31, 32 * j0 - 32 * A_shared_10 + 32) + 1) {
                    tpy_cp_async<4>(&A_shared_tile[(((i + 1) & 1) * 1 + 0) * 33 + tp_floormod_i64(32 * A_shared_10 + A_shared_11, 33)], &A[(i + 1) * ((int64_t)64 + 1) + (32 * A_shared_10 + A_shared_11)]);
                  }
                }
              }
            }
            if (i >= 0) {
              {  /* thread loop j1: threadIdx.x */
                const int64_t j1 = (int64_t)threadIdx.x;
                if (j1 < 32) {
                  C[i * 64 + (32 * j0 + j1)] = A_shared_tile[((i & 1) * 1 + 0) * 33 + tp_floormod_i64(32 * j0 + j1, 33)] + A_shared_tile[((i & 1) * 1 + 0) * 33 + tp_floormod_i64(32 * j0 + j1 + 1, 33)];
                }
              }
            }
            tpy_cp_async_commit();
            tpy_cp_async_wait<0>();
            __syncthreads();
          }
          tpy_cp_async_wait<0>();
          __syncthreads();
        }
      }
    }
"""),
    "tensor_core": ("mma", '(C.gpu_tile("i", "j", 16, 8), u.split("i", 16), '
                           'u.split("i1", 8, names=("i_h", "ly")), '
                           'u.split("j", 2, names=("lx", "j_p")), '
                           'u.reorder("i0", "ly", "lx", "k", "i_h", "j_p"), '
                           'u.bind("i0", "block.x"), u.bind("ly", "lane.y"), '
                           'u.bind("lx", "lane.x"), '
                           'u.cache_shared(A, "i0"), u.cache_shared(B, "i0"), '
                           'u.allow_reassociation(), u.tensor_core("k", "i_h", "j_p"))',
          "the innermost loops k (16), i_h (2), j_p (2) of a warp's lanes (ly: 8 rows, lx: 4 "
          "column pairs) as one mma.sync.m16n8k16: the lanes' fragments of the shared tiles "
          "loaded with ldmatrix, each lane's 4 sums in registers (the update kernel's lane loops)",
          """
    {  /* thread loop ly: lane.y */
      const int64_t ly = ((int64_t)threadIdx.x / 4);
      {  /* thread loop lx: lane.x */
        const int64_t lx = (int64_t)threadIdx.x % 4;
        {
          const int64_t tpy_lane = (int64_t)threadIdx.x % 32;
          unsigned tpy_a[4], tpy_b[2];
          tpy_ldmatrix<4, false>(tpy_a, &A_shared_tile[(tpy_lane % 8 + 8 * (tpy_lane / 8 % 2)) * 16 + tpy_lane / 16 * 8]);
          tpy_ldmatrix<2, true>(tpy_b, &B_shared_tile[tpy_lane % 16 * 8 + ((int64_t)2 * 0 + 0)]);
          {  /* tensor core: mma.sync m16n8k16 over k, i_h, j_p */
            float tpy_c[4] = {C[(ly + (int64_t)8 * 0) * 8 + (2 * lx + 0)], C[(ly + (int64_t)8 * 0) * 8 + (2 * lx + 1)], C[(ly + (int64_t)8 * 1) * 8 + (2 * lx + 0)], C[(ly + (int64_t)8 * 1) * 8 + (2 * lx + 1)]};
            tpy_mma_16816<1>(tpy_c, tpy_a, tpy_b);
            C[(ly + (int64_t)8 * 0) * 8 + (2 * lx + 0)] = tpy_c[0];
            C[(ly + (int64_t)8 * 0) * 8 + (2 * lx + 1)] = tpy_c[1];
            C[(ly + (int64_t)8 * 1) * 8 + (2 * lx + 0)] = tpy_c[2];
            C[(ly + (int64_t)8 * 1) * 8 + (2 * lx + 1)] = tpy_c[3];
          }
        }
      }
    }
"""),
}


@pytest.fixture(autouse=True)
def _printed_and_emulated_only(monkeypatch):
    from tiramisu_py.driver import cuda as ck
    monkeypatch.setattr(ck, "CUDA_ARCHS", ())     # no cubins: the source is what is checked


@pytest.mark.parametrize("name", list(CASES))
def test_gpu_commands_give_this_kernel(name):
    program, command, _, want = CASES[name]
    f, env, shapes, reference = PROGRAMS[program]()
    eval(command, {"tp": tp}, dict(env, f=f))
    k = f.compile(target="cuda")
    assert kernel_text(k, *PARTS.get(name, ())) == \
        "\n".join(ln[4:] for ln in want.strip("\n").splitlines()), command
    rng = np.random.default_rng(0)
    args = [rng.standard_normal(s).astype(f.buffers[n].dtype.name) for n, s in shapes.items()]
    for order in ORDERS:
        np.testing.assert_allclose(k.emulate(*args, order=order, seed=1), reference(*args),
                                   rtol=1e-6, atol=1e-6, err_msg=f"{command}, {order} order")

"""The GPU scheduling commands by example (as tests/tiramisu_py/
test_command_loop_nests.py does for the CPU ones): a tiny program, the
commands, and the CUDA kernel they give, written out; each kernel also runs
on the CUDA emulator in its three thread orders and gives NumPy's answer."""
import numpy as np
import pytest

import tiramisu_py as tp
from codegen.cuda.emulator import ORDERS


def kernel_text(k):
    """The ``__global__`` function of ``k``'s CUDA source (its emulator stub left out)."""
    src = k.source
    body = src[src.index("__global__"):]
    return body[:body.index("#ifdef TPY_EMULATE")].strip()


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


PROGRAMS = {"add_one": add_one, "blur": blur}

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
    assert kernel_text(k) == "\n".join(ln[4:] for ln in want.strip("\n").splitlines()), command
    rng = np.random.default_rng(0)
    args = [rng.standard_normal(s).astype(np.float32) for s in shapes.values()]
    for order in ORDERS:
        np.testing.assert_allclose(k.emulate(*args, order=order, seed=1), reference(*args),
                                   rtol=1e-6, err_msg=f"{command}, {order} order")

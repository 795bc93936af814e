/* tiramisu_py's CPU emulation of the CUDA subset codegen.cuda prints.
 *
 * The generated .cu is compiled as C++17 with -DTPY_EMULATE.  Blocks run one
 * at a time; each thread of a block is a fiber (ucontext) with its own stack.
 * A thread runs until it reaches __syncthreads() or returns; then the
 * scheduler runs the next thread.  One "phase" runs every live thread once,
 * in forward, reverse or a seeded-shuffled order (a new shuffle per phase).
 * After each phase every thread must be waiting at the same barrier or have
 * returned: a barrier that only some threads reach is reported (error 2).
 * __shared__ arrays are static locals of the kernel: one copy, shared by the
 * block's threads (blocks run one after another, so one copy suffices; it is
 * not cleared between blocks, like real shared memory).
 * Global memory is the host's memory: the kernel writes the caller's arrays.
 * A race between threads shows up as results that depend on the order.
 */
#pragma once
#include <stdint.h>
#include <math.h>
#include <cmath>
#include <ucontext.h>
#include <vector>
#include <algorithm>
#include <random>
#include <functional>

#define __global__
#define __device__
#define __host__
#define __forceinline__ inline
#define __shared__ static
#define __launch_bounds__(...)
#define __restrict__ __restrict

struct tpy_dim3 { unsigned x, y, z; };
inline tpy_dim3 threadIdx, blockIdx, blockDim, gridDim;

namespace tpy_emu {

enum { FORWARD = 0, REVERSE = 1, SHUFFLE = 2 };
constexpr size_t STACK_BYTES = 256 * 1024;

struct Fiber {
  ucontext_t ctx;
  std::vector<char> stack;
  tpy_dim3 tid;
  bool done = false;
  long barriers = 0;
};

inline ucontext_t scheduler;
inline Fiber *current = nullptr;
inline std::function<void()> *body = nullptr;

inline void trampoline() {
  (*body)();
  current->done = true;      /* uc_link returns to the scheduler */
}

}  // namespace tpy_emu

inline void __syncthreads() {
  tpy_emu::Fiber *me = tpy_emu::current;
  me->barriers++;
  swapcontext(&me->ctx, &tpy_emu::scheduler);
}

namespace tpy_emu {

/* Runs the kernel body on grid x block threads.  Returns 0, or 2 when a
 * barrier was not reached by every thread of a block, 3 on a bad launch. */
inline int launch(const int64_t *grid, const int64_t *block, int order, uint64_t seed,
                  std::function<void()> fn) {
  for (int d = 0; d < 3; d++)
    if (grid[d] < 0 || block[d] < 1) return 3;
  if (grid[0] == 0 || grid[1] == 0 || grid[2] == 0) return 0;
  const int64_t n = block[0] * block[1] * block[2];
  if (n > 1024) return 3;
  std::vector<Fiber> fibers(n);
  for (auto &f : fibers) f.stack.resize(STACK_BYTES);
  std::vector<int64_t> idx(n);
  std::mt19937_64 rng(seed);
  body = &fn;
  gridDim = {(unsigned)grid[0], (unsigned)grid[1], (unsigned)grid[2]};
  blockDim = {(unsigned)block[0], (unsigned)block[1], (unsigned)block[2]};
  for (int64_t bz = 0; bz < grid[2]; bz++)
  for (int64_t by = 0; by < grid[1]; by++)
  for (int64_t bx = 0; bx < grid[0]; bx++) {
    blockIdx = {(unsigned)bx, (unsigned)by, (unsigned)bz};
    for (int64_t t = 0; t < n; t++) {
      Fiber &f = fibers[t];
      f.tid = {(unsigned)(t % block[0]), (unsigned)(t / block[0] % block[1]),
               (unsigned)(t / (block[0] * block[1]))};
      f.done = false;
      f.barriers = 0;
      getcontext(&f.ctx);
      f.ctx.uc_stack.ss_sp = f.stack.data();
      f.ctx.uc_stack.ss_size = f.stack.size();
      f.ctx.uc_link = &scheduler;
      makecontext(&f.ctx, (void (*)())trampoline, 0);
    }
    for (;;) {
      idx.clear();
      for (int64_t t = 0; t < n; t++)
        if (!fibers[t].done) idx.push_back(t);
      if (idx.empty()) break;
      if (order == REVERSE) std::reverse(idx.begin(), idx.end());
      else if (order == SHUFFLE) std::shuffle(idx.begin(), idx.end(), rng);
      for (int64_t t : idx) {
        current = &fibers[t];
        threadIdx = current->tid;
        swapcontext(&scheduler, &current->ctx);
      }
      /* every thread must now wait at the same barrier, or all be done */
      long b = -1;
      bool some_done = false, some_waiting = false;
      for (auto &f : fibers) {
        if (f.done) { some_done = true; continue; }
        some_waiting = true;
        if (b >= 0 && f.barriers != b) return 2;
        b = f.barriers;
      }
      if (some_done && some_waiting) return 2;
    }
  }
  return 0;
}

}  // namespace tpy_emu

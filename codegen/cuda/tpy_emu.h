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
 *
 * Vector accesses (TPY_VMOVE) and cp.async (tpy_cp_async) check their
 * alignment (error 4).  An asynchronous copy reads its source when issued and
 * writes shared memory only when a tpy_cp_async_wait<N>() of the issuing
 * thread retires its group (all groups but the N newest committed ones): a
 * read before the right wait sees the tile's old content, so a missing or
 * too lax wait shows up as a wrong result.  Copies still pending when the
 * thread returns are dropped.
 *
 * Warp-collective operations (ldmatrix, mma.sync) exchange registers between
 * the 32 lanes of a warp: each lane reads its own memory first (ldmatrix: the
 * 16-byte row at its own address, at its own point of the program, so a
 * missing barrier still shows), deposits its values in the warp's staging
 * area (two of them, alternating), and switches to the scheduler like a
 * barrier (every thread of the block runs the same collectives); after it,
 * each lane takes its result from the other lanes' values.
 */
#pragma once
#include <stdint.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <ucontext.h>
#include <deque>
#include <vector>

#define __global__
#define __device__
#define __host__
#define __forceinline__ inline
#define __shared__ static
#define __launch_bounds__(...)
#define __restrict__ __restrict
#define __align__(n) __attribute__((aligned(n)))

struct tpy_dim3 { unsigned x, y, z; };
inline tpy_dim3 threadIdx, blockIdx, blockDim, gridDim;

namespace tpy_emu {

enum { FORWARD = 0, REVERSE = 1, SHUFFLE = 2 };
constexpr size_t STACK_BYTES = 64 * 1024;   /* per thread: kernel locals are small */

struct Pending {            /* one cp.async: its bytes, read when issued */
  void *dst;
  unsigned char bytes[16];
  int n;
};

struct AsyncState {         /* one thread's cp.async groups */
  std::vector<Pending> open;
  std::deque<std::vector<Pending>> groups;
};

struct Fiber {
  ucontext_t ctx;
  char *stack;
  tpy_dim3 tid;
  bool done;
  long barriers;
  AsyncState *async;
  long collectives;
};

constexpr int STAGE_BYTES = 32;           /* per lane and collective */
inline unsigned char *stage = nullptr;    /* [warp][2][32][STAGE_BYTES] of this block */

inline ucontext_t scheduler;
inline Fiber *current = nullptr;
inline int fault = 0;       /* 4: a misaligned vector access */
inline void (*body)(void *) = nullptr;
inline void *body_arg = nullptr;

inline void trampoline() {
  body(body_arg);
  current->done = true;      /* uc_link returns to the scheduler */
}

inline uint64_t next(uint64_t &s) {   /* splitmix64 */
  uint64_t z = (s += 0x9e3779b97f4a7c15ULL);
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ULL;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebULL;
  return z ^ (z >> 31);
}

template <class F> void call(void *f) { (*static_cast<F *>(f))(); }

inline void check_aligned(const void *p, int n) {
  if ((uintptr_t)p % (uintptr_t)n) fault = 4;
}

template <int B> inline void vmove(void *dst, const void *src) {
  check_aligned(dst, B);
  check_aligned(src, B);
  memcpy(dst, src, B);
}

}  // namespace tpy_emu

#define TPY_VMOVE(B, dst, src) tpy_emu::vmove<B>((dst), (src))

inline void __syncthreads();

namespace tpy_emu {

inline int64_t linear_tid() {
  return threadIdx.x + (int64_t)blockDim.x * (threadIdx.y + (int64_t)blockDim.y * threadIdx.z);
}

/* Deposits ``n`` bytes of this lane, waits for the warp (a scheduler switch),
 * returns the warp's 32 deposits (STAGE_BYTES apart). */
inline const unsigned char *collective(const void *mine, int n) {
  Fiber *me = current;
  int64_t t = linear_tid();
  unsigned char *warp = stage + (t / 32) * 2 * 32 * STAGE_BYTES
                        + (me->collectives++ & 1) * 32 * STAGE_BYTES;
  memcpy(warp + (t % 32) * STAGE_BYTES, mine, n);
  __syncthreads();
  return warp;
}

inline float half_bits(unsigned h, int kind) {   /* kind 0: bfloat16, 1: float16 */
  unsigned bits;
  if (kind == 0) {
    bits = h << 16;
  } else {
    unsigned sign = (h & 0x8000u) << 16, e = (h >> 10) & 0x1f, m = h & 0x3ff;
    if (e == 0x1f) bits = sign | 0x7f800000u | (m << 13);
    else if (e) bits = sign | ((e + 112) << 23) | (m << 13);
    else if (!m) bits = sign;
    else {                                        /* subnormal */
      int s = 0;
      while (!(m & 0x400)) { m <<= 1; s++; }
      bits = sign | ((113 - s) << 23) | ((m & 0x3ff) << 13);
    }
  }
  float f;
  memcpy(&f, &bits, 4);
  return f;
}

}  // namespace tpy_emu

/* ldmatrix.sync.aligned.m8n8.x{N}[.trans].shared.b16 */
template <int N, bool T> inline void tpy_ldmatrix(unsigned *r, const void *addr) {
  unsigned char row[16];
  tpy_emu::check_aligned(addr, 16);
  memcpy(row, addr, 16);
  const unsigned char *all = tpy_emu::collective(row, 16);
  int L = (int)(tpy_emu::linear_tid() % 32);
  for (int q = 0; q < N; q++) {
    unsigned short lo, hi;
    if (!T) {
      memcpy(&lo, all + (8 * q + L / 4) * tpy_emu::STAGE_BYTES + 4 * (L % 4), 2);
      memcpy(&hi, all + (8 * q + L / 4) * tpy_emu::STAGE_BYTES + 4 * (L % 4) + 2, 2);
    } else {
      memcpy(&lo, all + (8 * q + 2 * (L % 4)) * tpy_emu::STAGE_BYTES + 2 * (L / 4), 2);
      memcpy(&hi, all + (8 * q + 2 * (L % 4) + 1) * tpy_emu::STAGE_BYTES + 2 * (L / 4), 2);
    }
    r[q] = lo | ((unsigned)hi << 16);
  }
}

/* mma.sync.aligned.m16n8k16.row.col.f32.{bf16,f16}.{bf16,f16}.f32, c in place */
template <int KIND> inline void tpy_mma_16816(float *c, const unsigned *a, const unsigned *b) {
  unsigned mine[6] = {a[0], a[1], a[2], a[3], b[0], b[1]};
  const unsigned char *all = tpy_emu::collective(mine, sizeof mine);
  int L = (int)(tpy_emu::linear_tid() % 32), g = L / 4, t = L % 4;
  auto reg = [&](int lane, int k) {
    unsigned v;
    memcpy(&v, all + lane * tpy_emu::STAGE_BYTES + 4 * k, 4);
    return v;
  };
  for (int o = 0; o < 4; o++) {
    int row = g + 8 * (o / 2), col = 2 * t + o % 2;
    float sum = c[o];
    for (int k = 0; k < 16; k++) {
      unsigned av = reg((row % 8) * 4 + (k % 8) / 2, (row >= 8) + 2 * (k >= 8));
      unsigned bv = reg(col * 4 + (k % 8) / 2, 4 + (k >= 8));
      float x = tpy_emu::half_bits((av >> (16 * (k % 2))) & 0xffffu, KIND);
      float y = tpy_emu::half_bits((bv >> (16 * (k % 2))) & 0xffffu, KIND);
      sum += x * y;
    }
    c[o] = sum;
  }
}

template <int B> inline void tpy_cp_async(void *dst, const void *src) {
  tpy_emu::check_aligned(dst, B);
  tpy_emu::check_aligned(src, B);
  tpy_emu::Pending p;
  p.dst = dst;
  p.n = B;
  memcpy(p.bytes, src, B);
  tpy_emu::current->async->open.push_back(p);
}

inline void tpy_cp_async_commit() {
  tpy_emu::AsyncState *a = tpy_emu::current->async;
  a->groups.push_back(a->open);
  a->open.clear();
}

template <int N> inline void tpy_cp_async_wait() {
  tpy_emu::AsyncState *a = tpy_emu::current->async;
  while (a->groups.size() > (size_t)N) {
    for (const tpy_emu::Pending &p : a->groups.front()) memcpy(p.dst, p.bytes, p.n);
    a->groups.pop_front();
  }
}

inline void __syncthreads() {
  tpy_emu::Fiber *me = tpy_emu::current;
  me->barriers++;
  swapcontext(&me->ctx, &tpy_emu::scheduler);
}

namespace tpy_emu {

/* Runs one kernel on grid x block threads, one block after another; each
 * thread is a fiber.  Returns 0, or 2 when a barrier was not reached by every
 * thread of a block, 3 on a bad launch or no memory. */
inline int run(const int64_t *grid, const int64_t *block, int order, uint64_t seed) {
  for (int d = 0; d < 3; d++)
    if (grid[d] < 0 || block[d] < 1) return 3;
  if (grid[0] == 0 || grid[1] == 0 || grid[2] == 0) return 0;
  const int64_t n = block[0] * block[1] * block[2];
  if (n > 1024) return 3;
  Fiber *fibers = (Fiber *)calloc(n, sizeof(Fiber));
  int64_t *idx = (int64_t *)malloc(n * sizeof(int64_t));
  char *stacks = (char *)malloc(n * STACK_BYTES);
  std::vector<AsyncState> async(n);
  std::vector<unsigned char> stages(((n + 31) / 32) * 2 * 32 * STAGE_BYTES);
  stage = stages.data();
  int rc = 0;
  fault = 0;
  if (!fibers || !idx || !stacks) rc = 3;
  gridDim = {(unsigned)grid[0], (unsigned)grid[1], (unsigned)grid[2]};
  blockDim = {(unsigned)block[0], (unsigned)block[1], (unsigned)block[2]};
  for (int64_t b = 0; rc == 0 && b < grid[0] * grid[1] * grid[2]; b++) {
    blockIdx = {(unsigned)(b % grid[0]), (unsigned)(b / grid[0] % grid[1]),
                (unsigned)(b / (grid[0] * grid[1]))};
    for (int64_t t = 0; t < n; t++) {
      Fiber &f = fibers[t];
      f.tid = {(unsigned)(t % block[0]), (unsigned)(t / block[0] % block[1]),
               (unsigned)(t / (block[0] * block[1]))};
      f.done = false;
      f.barriers = 0;
      f.stack = stacks + t * STACK_BYTES;
      f.async = &async[t];
      f.collectives = 0;
      async[t].open.clear();
      async[t].groups.clear();
      getcontext(&f.ctx);
      f.ctx.uc_stack.ss_sp = f.stack;
      f.ctx.uc_stack.ss_size = STACK_BYTES;
      f.ctx.uc_link = &scheduler;
      makecontext(&f.ctx, (void (*)())trampoline, 0);
    }
    for (;;) {
      int64_t live = 0;
      for (int64_t t = 0; t < n; t++)
        if (!fibers[t].done) idx[live++] = t;
      if (live == 0) break;
      if (order == REVERSE) {
        for (int64_t i = 0; i < live / 2; i++) {
          int64_t x = idx[i]; idx[i] = idx[live - 1 - i]; idx[live - 1 - i] = x;
        }
      } else if (order == SHUFFLE) {       /* Fisher-Yates, a new order per phase */
        for (int64_t i = live - 1; i > 0; i--) {
          int64_t j = (int64_t)(next(seed) % (uint64_t)(i + 1));
          int64_t x = idx[i]; idx[i] = idx[j]; idx[j] = x;
        }
      }
      for (int64_t i = 0; i < live; i++) {
        current = &fibers[idx[i]];
        threadIdx = current->tid;
        swapcontext(&scheduler, &current->ctx);
      }
      /* every thread must now wait at the same barrier, or all be done */
      long bar = -1;
      bool some_done = false, some_waiting = false;
      for (int64_t t = 0; t < n; t++) {
        Fiber &f = fibers[t];
        if (f.done) { some_done = true; continue; }
        some_waiting = true;
        if (bar >= 0 && f.barriers != bar) rc = 2;
        bar = f.barriers;
      }
      if (rc || (some_done && some_waiting)) { rc = 2; break; }
    }
  }
  free(fibers);
  free(idx);
  free(stacks);
  return rc ? rc : fault;
}

template <class F>
int launch(const int64_t *grid, const int64_t *block, int order, uint64_t seed, F fn) {
  body = &call<F>;
  body_arg = &fn;
  return run(grid, block, order, seed);
}

}  // namespace tpy_emu

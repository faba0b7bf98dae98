/* A CPU emulator for the project's CUDA kernels, so the very kernel source (a .cuh written
 * against warp_mma.cuh) runs in the CPU test suites where no GPU exists.
 *  - Every CUDA thread is a fiber (ucontext) with its own stack, so a kernel's locals are per
 *    thread exactly as registers are. A block's fibers run until they reach a warp collective
 *    (shuffle, vote, reduce, ldmatrix, mma) or __syncthreads; a collective executes when every
 *    lane named in its mask has arrived with the same operation, a barrier when every live
 *    thread of the block has. Anything else (a lane missing, lanes at different collectives,
 *    all threads waiting) aborts with the block, warp and lanes named: what would hang or be
 *    undefined on a GPU fails here.
 *  - Fibers resume in a pseudo-random order each round (seeded per launch) and blocks run in a
 *    chosen order, so results that depend on scheduling (a missing barrier) show as
 *    differences between runs. In blocks of several warpgroups one of them is now and then
 *    held back for up to 256 rounds, so warpgroups that pace each other only through
 *    mbarriers drift apart as they may on a GPU.
 *  - cp.async copies are deferred to cp_async_wait: reading shared memory before the wait
 *    reads the old contents, as on a GPU.
 *  - The tensor-core operations follow the PTX ISA's fragment layouts (mma.m16n8k16 with
 *    bf16 operands and fp32 accumulators, ldmatrix m8n8 x4 with and without .trans),
 *    implemented from that text independently of the kernels. Arithmetic is IEEE fp32 (the
 *    GPU's ex2.approx and the mma's internal accumulation order differ in the last bits).
 *  - Hopper's warpgroup MMA (wgmma.cuh), following the PTX ISA's "Asynchronous Warpgroup
 *    Level Matrix" sections: a warpgroup collective of 128 threads (all at the same call with
 *    the same shape, descriptors and flags); m64nNk16 bf16 -> fp32 with the register layouts
 *    of A and D, operands in shared memory read through the 64-bit matrix descriptor (start
 *    address, leading and stride byte offsets, K-major or N-major B) in the 128-byte swizzle
 *    (byte address bits 4-6 XOR bits 7-9; other swizzle modes and a nonzero base offset
 *    abort as not emulated). Asynchrony: an issued wgmma joins the open group, wgmma_commit
 *    closes it, and the products of a group are computed only when wgmma_wait<N> retires it:
 *    shared memory is read then, and the accumulators are written then, so a kernel that
 *    reads them before the wait, or overwrites an operand tile before it, computes wrong
 *    results here too. A wgmma with no wgmma_fence since the warpgroup's last wait aborts, as
 *    does a block that exits with wgmma groups not waited for. fence_proxy_async is a no-op:
 *    the emulator has one memory, so a missing proxy fence is not detected (a GPU check).
 *  - TMA and mbarriers (tma.cuh): fb_tmap here is a plain description of a 4-D tensor and
 *    its box; tma_load_4d makes the copy (the box, out-of-bounds elements zero, in the
 *    128-byte swizzle of the destination address) either at once or when a thread next
 *    waits on its mbarrier, chosen per copy from the launch's seed (so overwriting a tile
 *    still in use and reading one before waiting for it both show), and then counts its
 *    bytes as completed transactions. An mbarrier completes a phase when its arrivals and expected bytes have
 *    all come; mbar_wait(parity) spins (the fiber yields) until the phase of that parity is
 *    complete; a round in which every running thread only spun aborts as a deadlock.
 *    setmaxnreg is a no-op (the GPU's register budget is checked by ptxas: no spills).
 * Not emulated: global-memory ordering between blocks (blocks run one after another), warp
 * divergence inside a collective's mask, texture/constant memory, clusters. Include this
 * header before the kernel header; link cuda_emu.cc. */
#ifndef FB_CUDA_EMU_H
#define FB_CUDA_EMU_H
#define FB_CUDA_EMU 1
#include <math.h>
#include <stddef.h>
#include <stdint.h>

#include <algorithm>
#include <functional>

struct dim3 {
  unsigned x, y, z;
  constexpr dim3(unsigned a = 1, unsigned b = 1, unsigned c = 1) : x(a), y(b), z(c) {}
};

/* What the running fiber sees as its built-in variables. */
struct emu_builtins {
  dim3 tid, bid, bdim, gdim;
  unsigned char *smem;
};
extern emu_builtins *emu_cur;

#define threadIdx (emu_cur->tid)
#define blockIdx (emu_cur->bid)
#define blockDim (emu_cur->bdim)
#define gridDim (emu_cur->gdim)
#define __global__
#define __device__
#define __host__
#define __forceinline__ inline
#define __launch_bounds__(...)
#define __grid_constant__
#define FB_DECLARE_SMEM(name) unsigned char *name = emu_cur->smem
using std::max;
using std::min;

void __syncthreads(void);
void __syncwarp(unsigned mask = 0xffffffffu);
float __shfl_xor_sync(unsigned mask, float v, int lanemask, int width = 32);
int __shfl_xor_sync(unsigned mask, int v, int lanemask, int width = 32);
unsigned __shfl_xor_sync(unsigned mask, unsigned v, int lanemask, int width = 32);
float __shfl_sync(unsigned mask, float v, int src, int width = 32);
int __shfl_sync(unsigned mask, int v, int src, int width = 32);
unsigned __shfl_sync(unsigned mask, unsigned v, int src, int width = 32);
float __shfl_down_sync(unsigned mask, float v, unsigned delta, int width = 32);
unsigned __reduce_max_sync(unsigned mask, unsigned v);
unsigned __reduce_min_sync(unsigned mask, unsigned v);
unsigned __reduce_add_sync(unsigned mask, unsigned v);
unsigned __ballot_sync(unsigned mask, int pred);
int __any_sync(unsigned mask, int pred);
int __all_sync(unsigned mask, int pred);
/* One process thread runs every fiber, so these are plain read-modify-writes. */
inline unsigned long long atomicAdd(unsigned long long *p, unsigned long long v) {
  unsigned long long o = *p; *p = o + v; return o;
}
inline unsigned atomicAdd(unsigned *p, unsigned v) { unsigned o = *p; *p = o + v; return o; }
inline int atomicAdd(int *p, int v) { int o = *p; *p = o + v; return o; }
inline float atomicAdd(float *p, float v) { float o = *p; *p = o + v; return o; }
inline unsigned atomicMax(unsigned *p, unsigned v) { unsigned o = *p; if (v > o) *p = v; return o; }

/* warp_mma.cuh's primitives */
void mma_bf16_16816(float (&d)[4], const uint32_t (&a)[4], uint32_t b0, uint32_t b1);
void ldsm_x4(uint32_t (&r)[4], const void *p);
void ldsm_x4_t(uint32_t (&r)[4], const void *p);
void cp_async16(void *dst, const void *src, bool pred);
void cp_async_commit(void);
void emu_cp_async_wait(int n);
template <int N>
inline void cp_async_wait(void) { emu_cp_async_wait(N); }
uint32_t pack_bf16x2(float lo, float hi);
inline float fast_exp2(float x) { return exp2f(x); }

/* wgmma.cuh's primitives */
inline uint32_t smem_addr(const void *p) {
  return (uint32_t)((const unsigned char *)p - emu_cur->smem);
}
void emu_wgmma(float *d, int n, const uint32_t *a, uint64_t da, uint64_t db, int acc, int tb);
template <int TB, int R>
inline void wgmma_ss(float (&d)[R][4], uint64_t da, uint64_t db, int acc) {
  emu_wgmma(&d[0][0], 8 * R, nullptr, da, db, acc, TB);
}
template <int TB, int R>
inline void wgmma_rs(float (&d)[R][4], const uint32_t (&a)[4], uint64_t db, int acc) {
  emu_wgmma(&d[0][0], 8 * R, a, 0, db, acc, TB);
}
void wgmma_fence(void);
void wgmma_commit(void);
void emu_wgmma_wait(int n);
template <int N>
inline void wgmma_wait(void) { emu_wgmma_wait(N); }
inline void fence_proxy_async(void) {}
template <int R>
inline void fence_acc(float (&)[R][4]) {}

/* tma.cuh's primitives */
struct fb_tmap {             /* what cuTensorMapEncodeTiled encodes, for the emulator */
  const void *base;
  uint64_t dim[4];           /* elements, dimension 0 innermost */
  uint64_t stride[4];        /* bytes; stride[0] = the element size */
  uint32_t box[4];           /* elements a copy moves along each dimension */
  int swizzle128;            /* the 128-byte swizzle (the only one emulated) */
};
void tma_load_4d(void *dst, const fb_tmap *map, int c0, int c1, int c2, int c3, uint64_t *bar);
void mbar_init(uint64_t *bar, int n);
inline void mbar_init_fence(void) {}
void mbar_arrive(uint64_t *bar);
void mbar_arrive_tx(uint64_t *bar, int bytes);
void mbar_wait(uint64_t *bar, int parity);
template <int N>
inline void setmaxnreg_dec(void) {}
template <int N>
inline void setmaxnreg_inc(void) {}

/* The launch: `body` runs once per thread (it calls the kernel with its arguments). Blocks
 * run one at a time in `order` (0: x fastest ascending, 1: descending, 2: shuffled by seed);
 * the seed also shuffles the fibers' resume order. Returns after the whole grid ran. */
struct emu_launch_opts {
  unsigned seed;
  int order;
};
void emu_launch(dim3 grid, dim3 block, size_t smem_bytes, const std::function<void()> &body,
                emu_launch_opts opts);
/* Counters of the last launch, for tests that check a kernel did use the tensor cores. */
struct emu_counts {
  long long mma, ldsm, shfl, barriers, cp_async, wgmma, tma;
};
emu_counts emu_last_counts(void);

#endif

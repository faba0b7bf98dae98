/* The cuda exact sum of squares (sumsq_bins): a warp-windowed port of engine/ops/norm_bins.c.
 * Each nonzero g = mant * 2^(e-150) adds mant^2 * 4^(e - e') to a bin e' <= e (kernels.h), and
 * integer addition is associative, so the bins' exact sum (fb_norm_bins_exact) is the cpu's
 * for any grid, block size or atomic order: the global norm keeps the same bits.
 *
 * A warp takes chunks of SQ_CHUNK = 32 lanes x 8 floats (two coalesced 16-byte loads a lane).
 * It keeps one window of two SQ_WIN-exponent halves, [wb, wb + SQ_WIN) and [wb + SQ_WIN,
 * wb + 2 SQ_WIN), set from the chunk's largest exponent (__reduce_max_sync): an element of a
 * half adds v = mant^2 << 2(e - base) < 2^62 (base: the half's first exponent) to that half's
 * per-lane fixed-point sums, split into its low 32 bits and the rest (lo += v mod 2^32,
 * hi += v >> 32, so under 2^32 a word per element, as the cpu's runs do). The window moves only
 * when a chunk's top leaves [wb + SQ_WIN, wb + 2 SQ_WIN): the sums are then reduced over the
 * warp (integer shuffles) and lane 0 adds the four words to the block's bins in shared memory.
 * Nonzero elements under the window (under 2^-8 of the chunk's largest magnitude at best,
 * 2^-15 at worst: rare in a gradient) and non-finite ones (exponent 255, which makes the norm
 * NaN) go to their own bins one by one (shared atomics). The block's bins reach the global
 * bins at the end, one atomic per nonzero word. No per-element shared atomic on the common path.
 * Unaligned heads and the tail that does not fill a chunk take the same path with scalar loads.
 * The kernel only (kernels_sumsq.cu launches it); device helpers from kernels_dev.cuh,
 * so the CPU emulator runs this very source (tests/test_sumsq_emu.cc). */
#ifndef FB_SUMSQ_BINS_CUH
#define FB_SUMSQ_BINS_CUH
#include "kernels_dev.cuh"

#define SQ_THREADS 256
#define SQ_PER_LANE 8
#define SQ_CHUNK (32 * SQ_PER_LANE) /* elements a warp takes at once */
#define SQ_WIN 8                    /* exponents one half of the window spans */
#define SQ_MAX_BLOCKS 1056          /* grid-stride: at most 8 blocks per SM of an H100 */
#define SQ_BINS 256                 /* FB_NORM_BINS: one bin per fp32 exponent */
static_assert(48 + 2 * (SQ_WIN - 1) <= 62, "a half's shifted mant^2 must fit 62 bits");

typedef unsigned long long u64;

/* One warp's window: first exponent and the four per-lane words (upper half, lower half). */
struct sq_win {
  uint32_t wb;
  u64 lo1, hi1, lo2, hi2;
};

/* 64-bit words summed over the warp, shuffled as two 32-bit halves (what a 64-bit shuffle
 * compiles to) */
__device__ __forceinline__ u64 warp_sum_u64(u64 x) {
  for (int o = 16; o > 0; o >>= 1) {
    const uint32_t lo = __shfl_xor_sync(0xffffffffu, (uint32_t)x, o);
    const uint32_t hi = __shfl_xor_sync(0xffffffffu, (uint32_t)(x >> 32), o);
    x += ((u64)hi << 32) | lo;
  }
  return x;
}

/* Adds the window's words, summed over the warp, to the block's bins and clears them. */
__device__ __forceinline__ void sq_flush(u64 *sb, sq_win &w, int lane) {
  const u64 lo1 = warp_sum_u64(w.lo1), hi1 = warp_sum_u64(w.hi1);
  const u64 lo2 = warp_sum_u64(w.lo2), hi2 = warp_sum_u64(w.hi2);
  if (lane == 0) {
    const uint32_t up = w.wb + SQ_WIN;
    if (lo1) atomicAdd(&sb[2 * up], lo1);
    if (hi1) atomicAdd(&sb[2 * up + 1], hi1);
    if (lo2) atomicAdd(&sb[2 * w.wb], lo2);
    if (hi2) atomicAdd(&sb[2 * w.wb + 1], hi2);
  }
  w.lo1 = w.hi1 = w.lo2 = w.hi2 = 0;
}

/* One element's own bin (the leftovers: under the window, or not finite). */
__device__ __forceinline__ void sq_single(u64 *sb, float x) {
  uint32_t bin;
  uint64_t msq;
  fb_sumsq_decompose(x, &bin, &msq);
  if (!msq) return;
  atomicAdd(&sb[2 * bin], (u64)(msq & 0xffffffffull));
  atomicAdd(&sb[2 * bin + 1], (u64)(msq >> 32));
}

/* The exponent a nonzero element's square is binned by (denormals: 1); 0 for zeros. */
__device__ __forceinline__ uint32_t sq_exp(float x) {
  const uint32_t u = fb_f32_bits(x), e = (u >> 23) & 0xffu;
  return e ? e : ((u & 0x7fffffu) ? 1u : 0u);
}

/* The warp's chunk: x[8] per lane (zeros where there is no element). Every lane of the warp
 * calls it (warp-collective). */
__device__ __forceinline__ void sq_chunk(u64 *sb, sq_win &w, const float (&x)[SQ_PER_LANE],
                                         int lane) {
  uint32_t emax = 0;
#pragma unroll
  for (int j = 0; j < SQ_PER_LANE; j++) emax = max(emax, sq_exp(x[j]));
  const uint32_t top = __reduce_max_sync(0xffffffffu, emax);
  if (top == 0) return; /* zeros only */
  bool slow = top == 255; /* Inf/NaN: the whole chunk goes element by element */
  if (!slow && (top >= w.wb + 2 * SQ_WIN || (top < w.wb + SQ_WIN && w.wb > 1))) {
    sq_flush(sb, w, lane); /* the window moves: its sums go to their bins first */
    w.wb = top >= 2 * SQ_WIN ? top - (2 * SQ_WIN - 1) : 1;
  }
  bool left = false;
#pragma unroll
  for (int j = 0; j < SQ_PER_LANE; j++) {
    const uint32_t u = fb_f32_bits(x[j]), eraw = (u >> 23) & 0xffu, e = eraw ? eraw : 1u;
    const uint32_t mant = (u & 0x7fffffu) | (eraw ? 0x800000u : 0u);
    const int d = (int)e - (int)w.wb; /* [0, 2 SQ_WIN): in the window; < 0: under it */
    const bool in = !slow && d >= 0 && mant != 0;
    left |= !slow && d < 0 && mant != 0;
    const bool up = d >= SQ_WIN;
    const uint32_t sh = (uint32_t)(2 * (up ? d - SQ_WIN : d)) & 63u;
    const u64 v = in ? ((u64)mant * mant) << sh : 0ull;
    const u64 vl = v & 0xffffffffull, vh = v >> 32;
    w.lo1 += up ? vl : 0ull;
    w.hi1 += up ? vh : 0ull;
    w.lo2 += up ? 0ull : vl;
    w.hi2 += up ? 0ull : vh;
  }
  if (slow || left) { /* rare: the elements the window did not take, one by one */
#pragma unroll
    for (int j = 0; j < SQ_PER_LANE; j++) {
      const uint32_t e = sq_exp(x[j]);
      if (e && (slow || e < w.wb)) sq_single(sb, x[j]);
    }
  }
}

/* g[0, n): the aligned bulk in whole chunks, grid-stride over the warps; the head before the
 * first 16-byte boundary and the tail after the last whole chunk by the grid's last warp. */
__global__ void __launch_bounds__(SQ_THREADS, 4) /* 4 blocks a multiprocessor: 64 registers */
sumsq_bins_k(u64 *bins, const float *g, size_t n) {
  FB_SHARED u64 sb[2 * SQ_BINS];
  for (int i = threadIdx.x; i < 2 * SQ_BINS; i += blockDim.x) sb[i] = 0;
  __syncthreads();
  const int lane = threadIdx.x & 31;
  const size_t warps = (size_t)gridDim.x * (SQ_THREADS / 32);
  const size_t gw = (size_t)blockIdx.x * (SQ_THREADS / 32) + threadIdx.x / 32;
  size_t head = (size_t)((16u - ((uintptr_t)g & 15u)) & 15u) / 4u; /* g is 4-byte aligned */
  if (head > n) head = n;
  const size_t chunks = (n - head) / SQ_CHUNK;
  const float *gb = g + head; /* 16-byte aligned */
  sq_win w = {1, 0, 0, 0, 0};
  for (size_t c = gw; c < chunks; c += warps) {
    const fb_f4 a = fb_ldcs4(gb + c * SQ_CHUNK + 4 * lane);
    const fb_f4 b = fb_ldcs4(gb + c * SQ_CHUNK + 128 + 4 * lane);
    const float x[SQ_PER_LANE] = {a.x, a.y, a.z, a.w, b.x, b.y, b.z, b.w};
    sq_chunk(sb, w, x, lane);
  }
  if (gw == warps - 1) { /* head and tail: at most 3 + SQ_CHUNK - 1 elements */
    const size_t t0 = head + chunks * SQ_CHUNK;
    for (size_t base = 0; base < head + (n - t0); base += SQ_CHUNK) {
      float x[SQ_PER_LANE];
#pragma unroll
      for (int j = 0; j < SQ_PER_LANE; j++) {
        const size_t r = base + (size_t)j * 32 + lane; /* r-th leftover element */
        const size_t i = r < head ? r : t0 + (r - head);
        x[j] = r < head + (n - t0) ? g[i] : 0.0f;
      }
      sq_chunk(sb, w, x, lane);
    }
  }
  sq_flush(sb, w, lane);
  __syncthreads();
  for (int i = threadIdx.x; i < 2 * SQ_BINS; i += blockDim.x)
    if (sb[i]) atomicAdd(&bins[i], sb[i]);
}

#endif

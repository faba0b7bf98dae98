/* The cross-entropy kernel (kernels_xent.cu launches it and sums the row losses in row
 * order): one block per row; device helpers from kernels_dev.cuh, so the CPU emulator runs
 * this very source (tests/test_xent_emu.cc).
 * Two passes over a row: the running maximum and the sum of exp(x - max) together (online
 * softmax: a thread rescales its sum when its maximum grows), then the gradient. A thread's
 * pairs (m, s) combine over the warp (shuffles) and the warps (in order), so a row's result
 * depends on the row only. Rows whose start is 16-byte aligned and whose width is whole vectors
 * of 16 bytes (ld a multiple of 8 bf16 / 4 fp32: a padded vocabulary) load 16 bytes at a time;
 * others element by element. Columns [V, ld) are padding: written as zeros. */
#ifndef FB_XENT_ROWS_CUH
#define FB_XENT_ROWS_CUH
#include "kernels_dev.cuh"

#define XENT_THREADS 256

struct msum {
  float m, s;
};
/* (m, s) for a sum s of exp(x - m): the pair of both sets, rescaled to the larger maximum */
__device__ __forceinline__ msum msum_add(msum a, msum b) {
  const float m = fmaxf(a.m, b.m);
  if (m == -INFINITY) return a;
  return {m, a.s * fb_exp_f(a.m - m) + b.s * fb_exp_f(b.m - m)};
}
__device__ __forceinline__ void msum_push(msum &a, float x) {
  if (x > a.m) {
    a.s = a.s * fb_exp_f(a.m - x) + 1.0f;
    a.m = x;
  } else {
    a.s += fb_exp_f(x - a.m);
  }
}
/* The block's combined pair, the same for every thread (fixed order). */
__device__ __forceinline__ msum block_msum(msum v, msum *sh) {
  const int lane = threadIdx.x % 32, w = threadIdx.x / 32, nw = blockDim.x / 32;
  for (int o = 16; o > 0; o >>= 1) {
    msum u = {__shfl_xor_sync(0xffffffffu, v.m, o), __shfl_xor_sync(0xffffffffu, v.s, o)};
    v = lane & o ? msum_add(u, v) : msum_add(v, u); /* lower lanes first: an order-fixed tree */
  }
  if (lane == 0) sh[w] = v;
  __syncthreads();
  msum r = sh[0];
  for (int i = 1; i < nw; i++) r = msum_add(r, sh[i]);
  return r;
}

template <typename E>
__global__ void __launch_bounds__(XENT_THREADS)
xent_rows_k(E *logits, double *row_loss, const int32_t *targets, int r0, int V, int ldx,
            float dscale) {
  FB_SHARED msum sh[XENT_THREADS / 32];
  constexpr int K = VEC(E);
  const int r = r0 + blockIdx.x, tgt = targets[r];
  E *x = logits + (int64_t)r * ldx;
  const bool vec = aligned16(x) && ldx % K == 0;
  const int nv = vec ? V / K : 0; /* whole vectors, then elements [nv K, V) one by one */
  if (tgt < 0) {
    for (int j = threadIdx.x; j < ldx; j += blockDim.x) st(x, j, 0.0f);
    if (threadIdx.x == 0) row_loss[blockIdx.x] = 0.0;
    return;
  }
  msum a = {-INFINITY, 0.0f};
  for (int q = threadIdx.x; q < nv; q += blockDim.x) {
    float v[K];
    ldv(x + (int64_t)q * K, v);
#pragma unroll
    for (int e = 0; e < K; e++) msum_push(a, v[e]);
  }
  for (int j = nv * K + threadIdx.x; j < V; j += blockDim.x) msum_push(a, ld(x, j));
  const msum t = block_msum(a, sh);
  const float xt = ld(x, tgt);
  __syncthreads(); /* everyone read x[tgt] before it is overwritten */
  const float f = dscale / t.s;
  for (int q = threadIdx.x; q < nv; q += blockDim.x) {
    float v[K];
    ldv(x + (int64_t)q * K, v);
#pragma unroll
    for (int e = 0; e < K; e++)
      v[e] = fb_exp_f(v[e] - t.m) * f - (q * K + e == tgt ? dscale : 0.0f);
    stv(x + (int64_t)q * K, v);
  }
  for (int j = nv * K + threadIdx.x; j < ldx; j += blockDim.x)
    st(x, j, j < V ? fb_exp_f(ld(x, j) - t.m) * f - (j == tgt ? dscale : 0.0f) : 0.0f);
  if (threadIdx.x == 0) row_loss[blockIdx.x] = ((double)t.m + log((double)t.s)) - (double)xt;
}

#endif

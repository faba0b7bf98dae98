/* The cuda block quantisation kernels (zeropp's qwZ int8 weights, qgZ int4 gradients): the
 * layouts of kernels.h's quantize and dequant_sum, the per-element formulas of
 * engine/ops/elementwise.h (the cpu's, so the bits agree). quantize: one thread block per
 * quantisation block; the absmax is a max (exact in any order), then each thread writes its
 * elements (int4: a pair a byte). dequant_sum: one thread per output element adds its terms in
 * order in fp32. Kernels only (kernels_quant.cu launches them); device helpers from
 * kernels_dev.cuh, so the CPU emulator can run this very source. */
#ifndef FB_QUANT_BLOCKS_CUH
#define FB_QUANT_BLOCKS_CUH
#include "kernels_dev.cuh"

#define QB_THREADS 256

template <typename T>
__global__ void quantize_blocks_k(uint8_t *q, float *scales, const T *x, size_t nseg,
                                  size_t seglen, int group, int bits, int rows, size_t bps) {
  FB_SHARED float red[QB_THREADS / 32];
  const size_t b = blockIdx.x, s = b / bps, off = (b % bps) * (size_t)group;
  const size_t len = off + (size_t)group < seglen ? (size_t)group : seglen - off;
  const int64_t i0 = (int64_t)(s * seglen + off);
  float m = 0.0f;
  for (size_t j = threadIdx.x; j < len; j += blockDim.x)
    m = fmaxf(m, fabsf(ld(x, i0 + (int64_t)j)));
  m = warp_max(m);
  if ((threadIdx.x & 31) == 0) red[threadIdx.x >> 5] = m;
  __syncthreads();
  m = 0.0f;
  for (int w = 0; w < (int)(blockDim.x >> 5); w++) m = fmaxf(m, red[w]);
  const float sc = fb_quant_scale(m, bits);
  const size_t cols = nseg / (size_t)rows, to = s % cols * (size_t)rows + s / cols;
  if (threadIdx.x == 0) scales[to * bps + b % bps] = sc;
  const size_t o = to * seglen + off; /* where element i0 lands */
  if (bits == 8) {
    for (size_t j = threadIdx.x; j < len; j += blockDim.x)
      q[o + j] = (uint8_t)(int8_t)fb_quant_one(ld(x, i0 + (int64_t)j), sc, 8);
    return;
  }
  for (size_t j = 2 * threadIdx.x; j < len; j += 2 * blockDim.x) { /* o and j are even */
    const int lo = fb_quant_one(ld(x, i0 + (int64_t)j), sc, 4);
    const int hi = j + 1 < len ? fb_quant_one(ld(x, i0 + (int64_t)j + 1), sc, 4) : 0;
    q[(o + j) / 2] = (uint8_t)((lo & 15) | ((hi & 15) << 4));
  }
}

template <typename T>
__global__ void dequant_sum_k(T *out, const uint8_t *q, const float *scales, size_t nterm,
                              size_t termlen, size_t seglen, int group, int bits, size_t bps) {
  GRID_STRIDE(ii, termlen) {
    float acc = 0.0f;
    for (size_t t = 0; t < nterm; t++) {
      const size_t i = t * termlen + (size_t)ii, s = i / seglen;
      const float sc = scales[s * bps + (i - s * seglen) / (size_t)group];
      const int v = bits == 8 ? (int)(int8_t)q[i] : fb_q4_unpack(q[i / 2], (int)(i & 1));
      acc = fb_dequant_acc(acc, v, sc, t == 0);
    }
    st(out, ii, acc);
  }
}

#endif

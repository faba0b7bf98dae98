/* A stand-in for NCCL's collective kernel, for calibrate's contention measurement: `ctas`
 * blocks (NCCL runs one CTA per channel) stay resident while they copy a buffer several times
 * over, so the SMs they hold and the HBM bandwidth they move are taken from whatever runs
 * beside them. It moves bytes only; it communicates nothing. */
#include "cuda_impl.h"

__global__ void fb_proxy_copy_k(uint4 *dst, const uint4 *src, size_t words, int passes) {
  const size_t stride = (size_t)gridDim.x * blockDim.x;
  for (int p = 0; p < passes; p++)
    for (size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x; i < words; i += stride)
      dst[i] = src[i];
}

extern "C" cudaError_t fb_cuda_proxy_copy_launch(cudaStream_t s, void *dst, const void *src,
                                                 size_t bytes, int ctas, int passes) {
  /* 512 threads a block: NCCL's Simple protocol runs 512 (nccl-model.md section 1) */
  fb_proxy_copy_k<<<ctas, 512, 0, s>>>((uint4 *)dst, (const uint4 *)src, bytes / 16, passes);
  return cudaGetLastError();
}

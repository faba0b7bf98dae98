/* Hopper's tensor memory accelerator and the shared-memory barriers that pace it, as the
 * sm_90a attention forward (flash_attention_sm90.cuh) uses them:
 *  - fb_tmap: a tensor map (CUtensorMap, 64-byte aligned, made on the host by
 *    cuTensorMapEncodeTiled: kernels_attention_sm90.cu) passed as a __grid_constant__
 *    kernel parameter;
 *  - tma_load_4d(dst, map, c0..c3, bar): one box of the 4-D tensor at coordinates c0..c3
 *    into shared memory at dst (1024-byte aligned, in the map's swizzle), out-of-bounds
 *    elements zero; completion is reported to the mbarrier bar as transaction bytes
 *    (cp.async.bulk.tensor ... mbarrier::complete_tx::bytes);
 *  - mbar_init(bar, n): a barrier whose phase completes when n arrivals and every expected
 *    transaction byte have come; mbar_init_fence makes the inits visible (before the block
 *    barrier that follows them); mbar_arrive; mbar_arrive_tx(bar, bytes): arrive and expect
 *    bytes more; mbar_wait(bar, parity): spins until the phase of that parity completed
 *    (the k-th phase has parity k % 2);
 *  - setmaxnreg_dec<N> / setmaxnreg_inc<N>: a warpgroup gives registers back / takes them
 *    (every warp of the warpgroup executes it).
 * When FB_CUDA_EMU is defined the host emulator (tests/cuda_emu) supplies all of these: its
 * fb_tmap is a plain description of the tensor and the box. This file holds no kernel and
 * compiles only for sm_90a. */
#ifndef FB_TMA_CUH
#define FB_TMA_CUH
#include <stdint.h>

#include "warp_mma.cuh"

#ifndef FB_CUDA_EMU
#include <cuda.h>
typedef CUtensorMap fb_tmap;

__device__ __forceinline__ void tma_load_4d(void *dst, const fb_tmap *map, int c0, int c1,
                                            int c2, int c3, uint64_t *bar) {
  asm volatile(
      "cp.async.bulk.tensor.4d.shared::cluster.global.tile.mbarrier::complete_tx::bytes"
      " [%0], [%1, {%2, %3, %4, %5}], [%6];\n" ::"r"(smem_addr(dst)),
      "l"((uint64_t)map), "r"(c0), "r"(c1), "r"(c2), "r"(c3), "r"(smem_addr(bar))
      : "memory");
}
__device__ __forceinline__ void mbar_init(uint64_t *bar, int n) {
  asm volatile("mbarrier.init.shared::cta.b64 [%0], %1;\n" ::"r"(smem_addr(bar)), "r"(n)
               : "memory");
}
__device__ __forceinline__ void mbar_init_fence(void) {
  asm volatile("fence.mbarrier_init.release.cluster;\n" ::: "memory");
}
__device__ __forceinline__ void mbar_arrive(uint64_t *bar) {
  asm volatile("mbarrier.arrive.shared::cta.b64 _, [%0];\n" ::"r"(smem_addr(bar)) : "memory");
}
__device__ __forceinline__ void mbar_arrive_tx(uint64_t *bar, int bytes) {
  asm volatile("mbarrier.arrive.expect_tx.shared::cta.b64 _, [%0], %1;\n" ::"r"(smem_addr(bar)),
               "r"(bytes)
               : "memory");
}
__device__ __forceinline__ void mbar_wait(uint64_t *bar, int parity) {
  uint32_t done = 0;
  while (!done)
    asm volatile(
        "{\n.reg .pred p;\nmbarrier.try_wait.parity.shared::cta.b64 p, [%1], %2;\n"
        "selp.u32 %0, 1, 0, p;\n}\n"
        : "=r"(done)
        : "r"(smem_addr(bar)), "r"(parity)
        : "memory");
}
template <int N>
__device__ __forceinline__ void setmaxnreg_dec(void) {
  asm volatile("setmaxnreg.dec.sync.aligned.u32 %0;\n" ::"n"(N));
}
template <int N>
__device__ __forceinline__ void setmaxnreg_inc(void) {
  asm volatile("setmaxnreg.inc.sync.aligned.u32 %0;\n" ::"n"(N));
}
#endif /* !FB_CUDA_EMU */

#endif

/* Warp-level tensor-core and async-copy primitives for sm_80 and later (valid on sm_90), as
 * the attention kernels (flash_attention.cuh) use them:
 *  - mma_bf16_16816: D += A * B, one m16n8k16 product, bf16 operands, fp32 accumulators
 *    (PTX ISA "Matrix Fragments for mma.m16n8k16 with floating point type": with
 *    g = lane / 4, t = lane % 4, A's registers hold rows g, g+8, g, g+8 at columns 2t, 2t+1
 *    (+8 in registers 2 and 3); B's hold rows 2t, 2t+1 (+8 in register 1) of column g; the
 *    accumulators hold rows g (c0, c1) and g+8 (c2, c3) at columns 2t, 2t+1);
 *  - ldsm_x4 / ldsm_x4_t: four 8x8 bf16 matrices from shared memory; lanes 8m..8m+7 give the
 *    row addresses of matrix m, register m receives row lane/4, columns 2(lane%4) and +1 of
 *    it (ldsm_x4_t: of its transpose);
 *  - cp_async16: a 16-byte global -> shared copy that does not block, zero-filled when the
 *    predicate is false (no global read then); cp_async_commit closes a group,
 *    cp_async_wait<N> waits until at most N groups are still in flight;
 *  - pack_bf16x2: two floats to bf16 (round to nearest even), the first in the low half;
 *  - fast_exp2: 2^x (ex2.approx: 2 ulp; -inf gives +0).
 * When FB_CUDA_EMU is defined the host emulator (tests/cuda_emu) supplies all of these, so the
 * very kernel source runs on the CPU. It does not hold any kernel. */
#ifndef FB_WARP_MMA_CUH
#define FB_WARP_MMA_CUH
#include <stdint.h>

#ifndef FB_CUDA_EMU
/* The kernel's dynamic shared memory, 16-byte aligned. */
#define FB_DECLARE_SMEM(name) extern __shared__ __align__(16) unsigned char name[]

__device__ __forceinline__ uint32_t smem_addr(const void *p) {
  return (uint32_t)__cvta_generic_to_shared(p);
}

__device__ __forceinline__ void mma_bf16_16816(float (&d)[4], const uint32_t (&a)[4],
                                               uint32_t b0, uint32_t b1) {
  asm volatile(
      "mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, "
      "{%8,%9}, {%0,%1,%2,%3};\n"
      : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
      : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
}

__device__ __forceinline__ void ldsm_x4(uint32_t (&r)[4], const void *p) {
  asm volatile("ldmatrix.sync.aligned.m8n8.x4.shared.b16 {%0,%1,%2,%3}, [%4];\n"
               : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
               : "r"(smem_addr(p)));
}
__device__ __forceinline__ void ldsm_x4_t(uint32_t (&r)[4], const void *p) {
  asm volatile("ldmatrix.sync.aligned.m8n8.x4.trans.shared.b16 {%0,%1,%2,%3}, [%4];\n"
               : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
               : "r"(smem_addr(p)));
}

__device__ __forceinline__ void cp_async16(void *dst, const void *src, bool pred) {
  asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;\n" ::"r"(smem_addr(dst)),
               "l"(src), "r"(pred ? 16 : 0));
}
__device__ __forceinline__ void cp_async_commit(void) {
  asm volatile("cp.async.commit_group;\n" ::);
}
template <int N>
__device__ __forceinline__ void cp_async_wait(void) {
  asm volatile("cp.async.wait_group %0;\n" ::"n"(N));
}

__device__ __forceinline__ uint32_t pack_bf16x2(float lo, float hi) {
  uint32_t r;
  asm("cvt.rn.bf16x2.f32 %0, %1, %2;\n" : "=r"(r) : "f"(hi), "f"(lo));
  return r;
}

__device__ __forceinline__ float fast_exp2(float x) {
  float y;
  asm("ex2.approx.ftz.f32 %0, %1;\n" : "=f"(y) : "f"(x));
  return y;
}
#endif /* !FB_CUDA_EMU */

#endif

/* The device side of the cuda kernel files (kernels*.cu and the kernel headers they
 * include: sumsq_bins.cuh, norm_bwd.cuh, xent_rows.cuh): element access in fp32 or bf16, warp
 * reductions, 16-byte vectors and the elementwise map. No host code and no CUDA runtime
 * header, so the CPU emulator of the tests (tests/cuda_emu, FB_CUDA_EMU defined) compiles the
 * same kernel source; kernels.cuh adds the host side (launch checks, dispatch, grids).
 * Under the emulator: fb_f4 / fb_u4 are plain 16-byte structs, FB_SHARED arrays are statics
 * (the emulator runs a block's threads as fibers of one thread, one block at a time, and every
 * kernel here writes its shared memory before reading it), fb_ldcs4 is a plain load. */
#ifndef FB_KERNELS_CUDA_DEV_CUH
#define FB_KERNELS_CUDA_DEV_CUH
#include <math.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>

/* The engine's headers are C: their functions have C linkage. */
extern "C" {
#include "../../ops/elementwise.h"
}

#ifdef FB_CUDA_EMU
struct alignas(16) fb_f4 {
  float x, y, z, w;
};
struct alignas(16) fb_u4 {
  uint32_t x, y, z, w;
};
#define FB_SHARED static
static inline fb_f4 fb_ldcs4(const float *p) {
  fb_f4 v;
  memcpy(&v, p, sizeof v);
  return v;
}
#else
typedef float4 fb_f4;
typedef uint4 fb_u4;
#define FB_SHARED __shared__
/* a streaming 16-byte load (evict first): data read once */
__device__ __forceinline__ fb_f4 fb_ldcs4(const float *p) { return __ldcs((const float4 *)p); }
#endif

typedef uint16_t bf16; /* storage only; converted with fb_bf16_to_f32 / fb_f32_to_bf16 */

/* ---- element access -------------------------------------------------------------------- */
__device__ __forceinline__ float ld(const float *p, int64_t i) { return p[i]; }
__device__ __forceinline__ float ld(const bf16 *p, int64_t i) { return fb_bf16_to_f32(p[i]); }
__device__ __forceinline__ void st(float *p, int64_t i, float x) { p[i] = x; }
__device__ __forceinline__ void st(bf16 *p, int64_t i, float x) { p[i] = fb_f32_to_bf16(x); }

__device__ __forceinline__ float warp_sum(float x) {
  for (int o = 16; o > 0; o >>= 1) x += __shfl_xor_sync(0xffffffffu, x, o);
  return x;
}
__device__ __forceinline__ float warp_max(float x) {
  for (int o = 16; o > 0; o >>= 1) x = fmaxf(x, __shfl_xor_sync(0xffffffffu, x, o));
  return x;
}

#define GRID_STRIDE(i, n)                                                                      \
  for (int64_t i = (int64_t)blockIdx.x * blockDim.x + threadIdx.x; i < (int64_t)(n);           \
       i += (int64_t)gridDim.x * blockDim.x)

/* ---- 16-byte vectors ---------------------------------------------------------------------
 * VEC<E> elements of E in 16 bytes (4 fp32, 8 bf16), loaded and stored as one 128-bit access
 * (LDG.E.128 / STG.E.128) and converted to or from fp32 element by element with the same
 * functions as ld/st, so a vector path gives the scalar path's bits. Kernels take the vector
 * path only when every pointer is 16-byte aligned (aligned16) and finish the elements past the
 * last whole vector with scalar accesses. */
template <typename E> struct vec_of;
template <> struct vec_of<float> { static constexpr int n = 4; };
template <> struct vec_of<bf16> { static constexpr int n = 8; };
#define VEC(E) (vec_of<E>::n)

/* The raw 16 bytes (vraw<E>::t) and their fp32 values: a kernel that keeps a vector across a
 * barrier keeps it raw (4 registers, where 8 floats of bf16 take 8). */
template <typename E> struct vraw;
template <> struct vraw<float> { typedef fb_f4 t; };
template <> struct vraw<bf16> { typedef fb_u4 t; };
template <typename E> __device__ __forceinline__ typename vraw<E>::t ldraw(const E *p) {
  return *(const typename vraw<E>::t *)p;
}
__device__ __forceinline__ void unpack(const fb_f4 &v, float (&x)[4]) {
  x[0] = v.x, x[1] = v.y, x[2] = v.z, x[3] = v.w;
}
__device__ __forceinline__ void unpack(const fb_u4 &v, float (&x)[8]) {
  const uint32_t w[4] = {v.x, v.y, v.z, v.w};
#pragma unroll
  for (int j = 0; j < 4; j++) {
    x[2 * j] = fb_bf16_to_f32((bf16)(w[j] & 0xffffu));
    x[2 * j + 1] = fb_bf16_to_f32((bf16)(w[j] >> 16));
  }
}
__device__ __forceinline__ void ldv(const float *p, float (&x)[4]) { unpack(ldraw(p), x); }
__device__ __forceinline__ void ldv(const bf16 *p, float (&x)[8]) { unpack(ldraw(p), x); }
__device__ __forceinline__ void stv(float *p, const float (&x)[4]) {
  *(fb_f4 *)p = fb_f4{x[0], x[1], x[2], x[3]};
}
__device__ __forceinline__ uint32_t bf16x2(float lo, float hi) {
  return (uint32_t)fb_f32_to_bf16(lo) | ((uint32_t)fb_f32_to_bf16(hi) << 16);
}
__device__ __forceinline__ void stv(bf16 *p, const float (&x)[8]) {
  *(fb_u4 *)p = fb_u4{bf16x2(x[0], x[1]), bf16x2(x[2], x[3]), bf16x2(x[4], x[5]),
                     bf16x2(x[6], x[7])};
}
__host__ __device__ static inline bool aligned16(const void *p) {
  return ((uintptr_t)p & 15u) == 0;
}

/* The split of n elements into a scalar head (up to the first 16-byte boundary of the first
 * operand), nv whole vectors, and a scalar tail, when every operand is 16-byte aligned after
 * the head (operands indexed alike from aligned buffers are); otherwise all scalar (nv = 0,
 * head = n). Scalar element t of the n - nv * K is element vs_index(t) of the operands. */
struct vsplit {
  size_t head, nv;
  int k;
  __host__ __device__ size_t scalars(size_t n) const { return n - nv * (size_t)k; }
  __host__ __device__ size_t vs_index(size_t t) const { return t < head ? t : t + nv * k; }
};
static inline vsplit vsplit_of(const void *const *ptrs, const size_t *esz, int np, size_t n,
                               int k) {
  vsplit v = {n, 0, k};
  size_t head = ((16u - ((uintptr_t)ptrs[0] & 15u)) & 15u) / esz[0];
  if (head > n || ((uintptr_t)ptrs[0] % esz[0])) return v;
  for (int q = 0; q < np; q++)
    if (!aligned16((const char *)ptrs[q] + head * esz[q])) return v;
  v.head = head;
  v.nv = (n - head) / (size_t)k;
  return v;
}

/* Elementwise maps: out_q[i] = F(in_0[i], ..., in_{NI-1}[i])_q for i < n, every operand of type
 * E (fp32 arithmetic). F is a functor, __device__ void operator()(const float *x, float *y)
 * const. An output may alias an input (each element is read and written by one thread). */
template <typename E, int NI, int NO> struct ew_ptrs {
  const E *in[NI];
  E *out[NO];
};
template <typename E, int NI, int NO, typename F>
__global__ void ew_k(ew_ptrs<E, NI, NO> a, size_t n, vsplit sp, F f) {
  constexpr int K = VEC(E);
  GRID_STRIDE(i, sp.nv) {
    const size_t o = sp.head + (size_t)i * K;
    float x[NI][K], y[NO][K];
#pragma unroll
    for (int q = 0; q < NI; q++) ldv(a.in[q] + o, x[q]);
#pragma unroll
    for (int j = 0; j < K; j++) {
      float xi[NI], yi[NO];
#pragma unroll
      for (int q = 0; q < NI; q++) xi[q] = x[q][j];
      f(xi, yi);
#pragma unroll
      for (int q = 0; q < NO; q++) y[q][j] = yi[q];
    }
#pragma unroll
    for (int q = 0; q < NO; q++) stv(a.out[q] + o, y[q]);
  }
  GRID_STRIDE(t, sp.scalars(n)) { /* head and tail, or everything when unaligned */
    const int64_t i = (int64_t)sp.vs_index((size_t)t);
    float xi[NI], yi[NO];
#pragma unroll
    for (int q = 0; q < NI; q++) xi[q] = ld(a.in[q], i);
    f(xi, yi);
#pragma unroll
    for (int q = 0; q < NO; q++) st(a.out[q], i, yi[q]);
  }
}

#endif

/* Private header of the cuda device's kernel files (kernels_cuda*.cu): the helpers every
 * kernel family shares (element access in fp32 or bf16, warp reductions, launch and cuBLAS
 * error checks, the dtype DISPATCH, grid helpers, deterministic column sums) and the entry
 * points the fb_cuda_kernels table (kernels_cuda.cu) references, one family per file:
 *   kernels_cuda_embedding.cu    encoder_fwd/bwd
 *   kernels_cuda_norm.cu         layernorm_fwd/bwd, rmsnorm_fwd/bwd
 *   kernels_cuda_matmul.cu       matmul_fwd/bwd (cuBLAS)
 *   kernels_cuda_attention.cu    attention_fwd/bwd (fp32 kernels; bf16: ..._flash.cu)
 *   kernels_cuda_rope.cu         rope_fwd/bwd
 *   kernels_cuda_elementwise.cu  gelu, swiglu, add
 *   kernels_cuda_xent.cu         xent_fwd_bwd
 *   kernels_cuda_optim.cu        acc_f32, scale_f32, adamw, adamw_cast, sgd
 *   kernels_cuda_sumsq.cu        sumsq_bins (the exact norm's bins)
 *   kernels_cuda_reduce.cu       sum_f64, cast
 * Conventions of all of them: the cpu kernels' (accumulate vs overwrite, lse-only attention,
 * strides, ignored targets), activations in fp32 or bf16 (bf16 storage, fp32 arithmetic, fp32
 * statistics); per-element formulas from engine/ops/elementwise.h, the very functions the cpu
 * ops and their gradient checks use; reductions that feed results are deterministic (fixed
 * partitions in the stream's scratch, summed in a fixed order); no kernel allocates
 * (workspaces belong to the stream, cuda_impl.h). Only the CUDA module's .cu files include it;
 * the module hides every symbol but one, so these names do not leave it. */
#ifndef FB_KERNELS_CUDA_CUH
#define FB_KERNELS_CUDA_CUH
#include <math.h>
#include <stdint.h>
#include <stdio.h>

#include <type_traits>

#include <cublas_v2.h>
#include <cuda_runtime_api.h>

/* The engine's headers are C: their functions have C linkage. */
extern "C" {
#include "../ops/elementwise.h"
#include "cuda_impl.h"
#include "device_cuda.h"
}

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

/* ---- errors --------------------------------------------------------------------------------- */
static inline fb_status launch_check(const fb_kctx *k, const char *kernel) {
  cudaError_t e = cudaGetLastError();
  if (e == cudaSuccess) return FB_OK;
  return FB_ERR(FB_EDEVICE, "rank %d: kernel %s launch failed: %s (%s)", k->dev->rank, kernel,
                cudaGetErrorString(e), cudaGetErrorName(e));
}
static inline fb_status blas_check(const fb_kctx *k, const char *call, cublasStatus_t s) {
  if (s == CUBLAS_STATUS_SUCCESS) return FB_OK;
  return FB_ERR(FB_EDEVICE, "rank %d: %s failed: %s", k->dev->rank, call,
                cublasGetStatusString(s));
}
static inline fb_status bad_dtype(const fb_kctx *k, const char *op) {
  return FB_ERR(FB_EUNSUPPORTED, "rank %d: cuda %s: activation dtype %s is not supported "
                "(allowed: fp32, bf16)", k->dev->rank, op, fb_dtype_name(k->act));
}
static inline fb_status prologue(const fb_kctx *k) {
  if (!k->s)
    return FB_ERR(FB_EINTERNAL, "rank %d: cuda kernel called without a stream", k->dev->rank);
  return fb_cuda_bind(k->dev);
}

/* Runs FN<float>(...) or FN<bf16>(...) (a host launcher) according to k->act. */
#define DISPATCH(k, opname, FN, ...)                                                           \
  do {                                                                                         \
    FB_TRY(prologue(k));                                                                       \
    if ((k)->act == FB_F32) {                                                                  \
      FN<float>(__VA_ARGS__);                                                                  \
    } else if ((k)->act == FB_BF16) {                                                          \
      FN<bf16>(__VA_ARGS__);                                                                   \
    } else {                                                                                   \
      return bad_dtype(k, opname);                                                             \
    }                                                                                          \
    return launch_check(k, opname);                                                            \
  } while (0)

static inline unsigned grid_for(int64_t n, int threads) {
  int64_t g = (n + threads - 1) / threads;
  if (g < 1) g = 1;
  if (g > 65535LL * 32) g = 65535LL * 32; /* kernels below are grid-stride */
  return (unsigned)g;
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
template <> struct vraw<float> { typedef float4 t; };
template <> struct vraw<bf16> { typedef uint4 t; };
template <typename E> __device__ __forceinline__ typename vraw<E>::t ldraw(const E *p) {
  return *(const typename vraw<E>::t *)p;
}
__device__ __forceinline__ void unpack(const float4 &v, float (&x)[4]) {
  x[0] = v.x, x[1] = v.y, x[2] = v.z, x[3] = v.w;
}
__device__ __forceinline__ void unpack(const uint4 &v, float (&x)[8]) {
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
  *(float4 *)p = make_float4(x[0], x[1], x[2], x[3]);
}
__device__ __forceinline__ uint32_t bf16x2(float lo, float hi) {
  return (uint32_t)fb_f32_to_bf16(lo) | ((uint32_t)fb_f32_to_bf16(hi) << 16);
}
__device__ __forceinline__ void stv(bf16 *p, const float (&x)[8]) {
  *(uint4 *)p = make_uint4(bf16x2(x[0], x[1]), bf16x2(x[2], x[3]), bf16x2(x[4], x[5]),
                           bf16x2(x[6], x[7]));
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
/* Launches ew_k on n elements (n > 0). */
template <typename E, int NI, int NO, typename F>
static void ew_launch(cudaStream_t s, F f, ew_ptrs<E, NI, NO> a, size_t n) {
  const void *ptrs[NI + NO];
  size_t esz[NI + NO];
  for (int q = 0; q < NI; q++) ptrs[q] = a.in[q], esz[q] = sizeof(E);
  for (int q = 0; q < NO; q++) ptrs[NI + q] = a.out[q], esz[NI + q] = sizeof(E);
  const vsplit sp = vsplit_of(ptrs, esz, NI + NO, n, VEC(E));
  const size_t units = sp.nv > sp.scalars(n) ? sp.nv : sp.scalars(n);
  ew_k<E, NI, NO, F><<<grid_for((int64_t)units, 256), 256, 0, s>>>(a, n, sp, f);
}

/* Deterministic column sums: rows [0, N) are cut into R fixed chunks; thread (c, r) sums its
 * chunk's rows in order into part[r*C + c]; then thread c adds part[0..R) in order. */
static inline int col_chunks(int N, int C, int nvec, size_t scratch_floats) {
  int64_t r = (int64_t)(scratch_floats / ((size_t)C * (size_t)nvec));
  if (r > 64) r = 64;
  if (r > N) r = N;
  return (int)(r < 1 ? 1 : r);
}

template <typename E>
__global__ void colsum_finalize(E *dst, const float *part, int R, int C) {
  int c = blockIdx.x * blockDim.x + threadIdx.x;
  if (c >= C) return;
  float s = 0.0f;
  for (int r = 0; r < R; r++) s += part[(int64_t)r * C + c];
  st(dst, c, ld(dst, c) + s);
}
/* Thread 0 adds row_loss[0..n) in order to loss_sum[0] (fp64; kernels_cuda_reduce.cu). */
void fb_cuda_sum_rows_in_order(cudaStream_t s, double *loss_sum, const double *row_loss, int n);

/* ---- the entry points of the kernel table (see kernels.h for their contracts) ---------------- */
fb_status fb_cuda_encoder_fwd(const fb_kctx *k, void *out, const int32_t *tok, const void *wte,
                              const void *wpe, int B, int T, int C);
fb_status fb_cuda_encoder_bwd(const fb_kctx *k, void *dwte, void *dwpe, const void *dout,
                              const int32_t *tok, int B, int T, int C);
fb_status fb_cuda_layernorm_fwd(const fb_kctx *k, void *out, float *mean, float *rstd,
                                const void *inp, const void *w, const void *b, int N, int C,
                                float eps);
fb_status fb_cuda_layernorm_bwd(const fb_kctx *k, void *dinp, void *dw, void *db,
                                const void *dout, const void *inp, const void *w,
                                const float *mean, const float *rstd, int N, int C);
fb_status fb_cuda_rmsnorm_fwd(const fb_kctx *k, void *out, float *rstd, const void *inp,
                              const void *w, int N, int C, float eps);
fb_status fb_cuda_rmsnorm_bwd(const fb_kctx *k, void *dinp, void *dw, const void *dout,
                              const void *inp, const void *w, const float *rstd, int N, int C);
fb_status fb_cuda_matmul_fwd(const fb_kctx *k, void *out, const void *inp, const void *w,
                             const void *bias, int N, int C, int OC);
fb_status fb_cuda_matmul_bwd(const fb_kctx *k, void *dinp, void *dw, void *dbias,
                             const void *dout, const void *inp, const void *w, int N, int C,
                             int OC);
fb_status fb_cuda_attention_fwd(const fb_kctx *k, void *out, float *lse, const void *q,
                                const void *kk, const void *v, int B, int T, int H, int KVH,
                                int hd, int ldq, int ldkv, void *scratch);
fb_status fb_cuda_attention_bwd(const fb_kctx *k, void *dq, void *dk, void *dv,
                                const void *dout, const void *q, const void *kk, const void *v,
                                const void *out, const float *lse, int B, int T, int H, int KVH,
                                int hd, int ldq, int ldkv, void *scratch);
/* The tensor-core kernels for bf16, hd <= 128 (kernels_cuda_attention_flash.cu); the entries
 * above call them after their checks. The backward runs bchunk batches a launch. */
fb_status fb_cuda_flash_attention_fwd(const fb_kctx *k, void *out, float *lse, const void *q,
                                      const void *kk, const void *v, int B, int T, int H,
                                      int KVH, int hd, int ldq, int ldkv);
fb_status fb_cuda_flash_attention_bwd(const fb_kctx *k, void *dq, void *dk, void *dv,
                                      const void *dout, const void *q, const void *kk,
                                      const void *v, const void *out, const float *lse, int B,
                                      int T, int H, int KVH, int hd, int ldq, int ldkv,
                                      int bchunk);
fb_status fb_cuda_rope_fwd(const fb_kctx *k, void *x, int B, int T, int nh, int hd, int ldx,
                           float theta);
fb_status fb_cuda_rope_bwd(const fb_kctx *k, void *dx, int B, int T, int nh, int hd, int ldx,
                           float theta);
fb_status fb_cuda_gelu_fwd(const fb_kctx *k, void *out, const void *inp, size_t n);
fb_status fb_cuda_gelu_bwd(const fb_kctx *k, void *dinp, const void *inp, const void *dout,
                           size_t n);
fb_status fb_cuda_swiglu_fwd(const fb_kctx *k, void *out, const void *a, const void *b,
                             size_t n);
fb_status fb_cuda_swiglu_bwd(const fb_kctx *k, void *da, void *db, const void *dout,
                             const void *a, const void *b, size_t n);
fb_status fb_cuda_add(const fb_kctx *k, void *out, const void *a, const void *b, size_t n);
fb_status fb_cuda_xent_fwd_bwd(const fb_kctx *k, void *logits, double *loss_sum,
                               const int32_t *targets, int N, int V, int ld, float dscale);
fb_status fb_cuda_acc_f32(const fb_kctx *k, float *y, const float *x, size_t n);
fb_status fb_cuda_scale_f32(const fb_kctx *k, float *y, float a, size_t n);
fb_status fb_cuda_adamw(const fb_kctx *k, float *p, const float *g, float *m, float *v, size_t n,
                        const fb_adamw_args *a);
fb_status fb_cuda_adamw_cast(const fb_kctx *k, float *p, const float *g, float *m, float *v,
                             void *out, fb_dtype out_dt, size_t n, const fb_adamw_args *a);
fb_status fb_cuda_sgd(const fb_kctx *k, float *p, const float *g, float *mom, size_t n,
                      const fb_sgd_args *a);
fb_status fb_cuda_sumsq_bins(const fb_kctx *k, uint64_t *bins, const float *g, size_t n);
fb_status fb_cuda_sum_f64(const fb_kctx *k, double *out, const float *x, size_t n);
fb_status fb_cuda_cast(const fb_kctx *k, void *dst, fb_dtype dt, const void *src, fb_dtype sty,
                       size_t n);

#endif

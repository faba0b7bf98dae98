/* Private header of the cuda device's kernel files (kernels*.cu): the helpers every
 * kernel family shares (element access in fp32 or bf16, warp reductions, launch and cuBLAS
 * error checks, the dtype DISPATCH, grid helpers, deterministic column sums) and the entry
 * points the fb_cuda_kernels table (kernels.cu) references, one family per file:
 *   kernels_embedding.cu    encoder_fwd/bwd
 *   kernels_norm.cu         layernorm_fwd/bwd, rmsnorm_fwd/bwd
 *   kernels_matmul.cu       matmul_fwd/bwd, matmul_gelu_fwd, matmul_bwd_gelu (cuBLAS, and
 *                           cuBLASLt's epilogues through gemm_lt.h)
 *   kernels_attention.cu    attention_fwd/bwd (fp32 kernels; bf16: ..._flash.cu)
 *   kernels_rope.cu         rope_fwd/bwd
 *   kernels_elementwise.cu  gelu, swiglu, add
 *   kernels_xent.cu         xent_fwd_bwd
 *   kernels_optim.cu        acc_f32, scale (fp32, bf16), adamw, adamw_cast, sgd
 *   kernels_sumsq.cu        sumsq_bins (the exact norm's bins)
 *   kernels_reduce.cu       sum_f64, cast
 *   kernels_quant.cu        quantize, dequant_sum (zeropp; kernels in quant_blocks.cuh)
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
#include "cuda_impl.h"
#include "device_cuda.h"
}
#include "kernels_dev.cuh"

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
/* Thread 0 adds row_loss[0..n) in order to loss_sum[0] (fp64; kernels_reduce.cu). */
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
fb_status fb_cuda_matmul_gelu_fwd(const fb_kctx *k, void *out, void *pre, const void *inp,
                                  const void *w, const void *bias, int N, int C, int OC);
fb_status fb_cuda_matmul_bwd_gelu(const fb_kctx *k, void *dpre, void *dw, void *dbias,
                                  const void *dout, const void *inp, const void *w,
                                  const void *pre, int N, int C, int OC);
fb_status fb_cuda_attention_fwd(const fb_kctx *k, void *out, float *lse, const void *q,
                                const void *kk, const void *v, int B, int T, int H, int KVH,
                                int hd, int ldq, int ldkv, void *scratch);
fb_status fb_cuda_attention_bwd(const fb_kctx *k, void *dq, void *dk, void *dv,
                                const void *dout, const void *q, const void *kk, const void *v,
                                const void *out, const float *lse, int B, int T, int H, int KVH,
                                int hd, int ldq, int ldkv, void *scratch);
/* The tensor-core kernels for bf16, hd <= 128 (kernels_attention_flash.cu); the entries
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
fb_status fb_cuda_scale(const fb_kctx *k, void *y, fb_dtype dt, float a, size_t n);
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
fb_status fb_cuda_quantize(const fb_kctx *k, void *q, float *scales, const void *x, fb_dtype xt,
                           size_t nseg, size_t seglen, int group, int bits, int rows);
fb_status fb_cuda_dequant_sum(const fb_kctx *k, void *out, fb_dtype ot, const void *q,
                              const float *scales, size_t nterm, size_t termlen, size_t seglen,
                              int group, int bits);

#endif

/* The cuda device's kernel table: every entry of engine/device/kernels.h, with the cpu
 * kernels' conventions (accumulate vs overwrite, lse-only attention, strides, ignored targets)
 * for activations in fp32 or bf16 (bf16 storage, fp32 arithmetic, fp32 statistics).
 * Per-element formulas come from engine/ops/elementwise.h, the very functions the cpu ops and
 * their gradient checks use. Matrix products go through cuBLAS (fp32 accumulation, no TF32).
 * Reductions that feed results (weight/bias gradients, losses, sums) are deterministic: fixed
 * partitions written to the stream's scratch, then summed in a fixed order.
 * Attention is a straightforward fused kernel (one warp per query or key row, online softmax),
 * correct for any T and hd <= 256, not a tuned flash kernel.
 * It does not allocate: workspaces belong to the stream (cuda_impl.h). */
#include <math.h>
#include <stdint.h>
#include <stdio.h>

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
static fb_status launch_check(const fb_kctx *k, const char *kernel) {
  cudaError_t e = cudaGetLastError();
  if (e == cudaSuccess) return FB_OK;
  return FB_ERR(FB_EDEVICE, "rank %d: kernel %s launch failed: %s (%s)", k->dev->rank, kernel,
                cudaGetErrorString(e), cudaGetErrorName(e));
}
static fb_status blas_check(const fb_kctx *k, const char *call, cublasStatus_t s) {
  if (s == CUBLAS_STATUS_SUCCESS) return FB_OK;
  return FB_ERR(FB_EDEVICE, "rank %d: %s failed: %s", k->dev->rank, call,
                cublasGetStatusString(s));
}
static fb_status bad_dtype(const fb_kctx *k, const char *op) {
  return FB_ERR(FB_EUNSUPPORTED, "rank %d: cuda %s: activation dtype %s is not supported "
                "(allowed: fp32, bf16)", k->dev->rank, op, fb_dtype_name(k->act));
}
static fb_status prologue(const fb_kctx *k) {
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

/* Deterministic column sums: rows [0, N) are cut into R fixed chunks; thread (c, r) sums its
 * chunk's rows in order into part[r*C + c]; then thread c adds part[0..R) in order. */
static int col_chunks(int N, int C, int nvec, size_t scratch_floats) {
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

/* ==== encoder ================================================================================ */
template <typename E>
__global__ void encoder_fwd_k(E *out, const int32_t *tok, const E *wte, const E *wpe, int T_,
                              int C, int64_t N) {
  GRID_STRIDE(i, N * C) {
    int64_t n = i / C;
    int c = (int)(i % C);
    float x = ld(wte, (int64_t)tok[n] * C + c);
    if (wpe) x += ld(wpe, (int64_t)(n % T_) * C + c);
    st(out, i, x);
  }
}

/* dwte: one block per token position n whose token t = tok[n] does not occur earlier (the
 * first occurrence owns row t; later occurrences exit after a scan of tok[0..n)). The block
 * walks tok[n..N) in chunks of its size, compacts the positions holding t in token order
 * (warp ballots, so the order is exactly the token order), and each thread adds those rows of
 * dout for its columns into fp32 registers starting from dwte's current value. dwte is written
 * once per element: a single rounding to bf16 however many tokens share a row, and the sum is
 * the cpu kernel's (dwte + d_first + ... + d_last in token order), so the result is
 * deterministic and matches the cpu in fp32. Columns are processed ENC_COLS_PER_THREAD per
 * thread per pass (more passes for wider rows). */
#define ENC_THREADS 256
#define ENC_COLS_PER_THREAD 8
template <typename E>
__global__ void __launch_bounds__(ENC_THREADS)
encoder_bwd_wte_k(E *dwte, const E *dout, const int32_t *tok, int64_t N, int C) {
  __shared__ int64_t pos[ENC_THREADS];
  __shared__ int warp_base[ENC_THREADS / 32 + 1];
  const int tid = threadIdx.x, lane = tid & 31, warp = tid >> 5;
  for (int64_t n = blockIdx.x; n < N; n += gridDim.x) {
    const int32_t t = tok[n];
    /* first occurrence? */
    int seen = 0;
    for (int64_t m = tid; m < n && !seen; m += ENC_THREADS) seen = tok[m] == t;
    if (__syncthreads_or(seen)) continue;
    const int64_t row = (int64_t)t * C;
    for (int c0 = 0; c0 < C; c0 += ENC_THREADS * ENC_COLS_PER_THREAD) {
      float acc[ENC_COLS_PER_THREAD];
#pragma unroll
      for (int j = 0; j < ENC_COLS_PER_THREAD; j++) {
        int c = c0 + j * ENC_THREADS + tid;
        acc[j] = c < C ? ld(dwte, row + c) : 0.0f;
      }
      for (int64_t m0 = n; m0 < N; m0 += ENC_THREADS) {
        const int64_t m = m0 + tid;
        const bool hit = m < N && tok[m] == t;
        const unsigned ball = __ballot_sync(0xffffffffu, hit);
        if (lane == 0) warp_base[warp] = __popc(ball);
        __syncthreads();
        if (tid == 0) { /* exclusive prefix over the warps, in warp order */
          int sum = 0;
          for (int w = 0; w < ENC_THREADS / 32; w++) {
            int k = warp_base[w];
            warp_base[w] = sum;
            sum += k;
          }
          warp_base[ENC_THREADS / 32] = sum;
        }
        __syncthreads();
        if (hit) pos[warp_base[warp] + __popc(ball & ((1u << lane) - 1u))] = m;
        __syncthreads();
        const int hits = warp_base[ENC_THREADS / 32];
        for (int h = 0; h < hits; h++) {
          const int64_t src = pos[h] * C;
#pragma unroll
          for (int j = 0; j < ENC_COLS_PER_THREAD; j++) {
            int c = c0 + j * ENC_THREADS + tid;
            if (c < C) acc[j] += ld(dout, src + c);
          }
        }
        __syncthreads(); /* pos and warp_base are rewritten by the next chunk */
      }
#pragma unroll
      for (int j = 0; j < ENC_COLS_PER_THREAD; j++) {
        int c = c0 + j * ENC_THREADS + tid;
        if (c < C) st(dwte, row + c, acc[j]);
      }
    }
  }
}
template <typename E>
__global__ void encoder_bwd_wpe_k(E *dwpe, const E *dout, int B, int T_, int C) {
  GRID_STRIDE(i, (int64_t)T_ * C) {
    int64_t t = i / C, c = i % C;
    float s = ld(dwpe, i);
    for (int b = 0; b < B; b++) s += ld(dout, ((int64_t)b * T_ + t) * C + c);
    st(dwpe, i, s);
  }
}

template <typename E>
static void encoder_fwd_launch(cudaStream_t s, void *out, const int32_t *tok, const void *wte,
                               const void *wpe, int T_, int C, int64_t N) {
  encoder_fwd_k<E><<<grid_for(N * C, 256), 256, 0, s>>>((E *)out, tok, (const E *)wte,
                                                         (const E *)wpe, T_, C, N);
}
template <typename E>
static void encoder_bwd_launch(cudaStream_t s, void *dwte, void *dwpe, const void *dout,
                               const int32_t *tok, int B, int T_, int C) {
  int64_t N = (int64_t)B * T_;
  unsigned blocks = (unsigned)(N < 65535LL * 16 ? N : 65535LL * 16); /* grid-stride over n */
  encoder_bwd_wte_k<E><<<blocks, ENC_THREADS, 0, s>>>((E *)dwte, (const E *)dout, tok, N, C);
  if (dwpe)
    encoder_bwd_wpe_k<E><<<grid_for((int64_t)T_ * C, 256), 256, 0, s>>>((E *)dwpe,
                                                                        (const E *)dout, B, T_, C);
}

static fb_status k_encoder_fwd(const fb_kctx *k, void *out, const int32_t *tok, const void *wte,
                               const void *wpe, int B, int T, int C) {
  if ((int64_t)B * T * C == 0) return FB_OK;
  DISPATCH(k, "encoder_fwd", encoder_fwd_launch, k->s->s, out, tok, wte, wpe, T, C,
           (int64_t)B * T);
}

static fb_status k_encoder_bwd(const fb_kctx *k, void *dwte, void *dwpe, const void *dout,
                               const int32_t *tok, int B, int T, int C) {
  if ((int64_t)B * T * C == 0) return FB_OK;
  DISPATCH(k, "encoder_bwd", encoder_bwd_launch, k->s->s, dwte, dwpe, dout, tok, B, T, C);
}

/* ==== layernorm / rmsnorm: one warp per row ================================================== */
template <typename E>
__global__ void layernorm_fwd_k(E *out, float *mean, float *rstd, const E *inp, const E *w,
                                const E *b, int N, int C, float eps) {
  int row = blockIdx.x * (blockDim.x / 32) + threadIdx.x / 32, lane = threadIdx.x % 32;
  if (row >= N) return;
  const int64_t o = (int64_t)row * C;
  float s = 0.0f;
  for (int c = lane; c < C; c += 32) s += ld(inp, o + c);
  float m = warp_sum(s) / (float)C;
  float v = 0.0f;
  for (int c = lane; c < C; c += 32) {
    float d = ld(inp, o + c) - m;
    v += d * d;
  }
  float r = 1.0f / sqrtf(warp_sum(v) / (float)C + eps);
  for (int c = lane; c < C; c += 32) {
    float y = (ld(inp, o + c) - m) * r * ld(w, c);
    if (b) y += ld(b, c);
    st(out, o + c, y);
  }
  if (lane == 0) {
    mean[row] = m;
    rstd[row] = r;
  }
}

template <typename E>
__global__ void layernorm_bwd_dx_k(E *dinp, const E *dout, const E *inp, const E *w,
                                   const float *mean, const float *rstd, int N, int C) {
  int row = blockIdx.x * (blockDim.x / 32) + threadIdx.x / 32, lane = threadIdx.x % 32;
  if (row >= N) return;
  const int64_t o = (int64_t)row * C;
  float m = mean[row], r = rstd[row];
  float sd = 0.0f, sdn = 0.0f;
  for (int c = lane; c < C; c += 32) {
    float dn = ld(dout, o + c) * ld(w, c);
    float nrm = (ld(inp, o + c) - m) * r;
    sd += dn;
    sdn += dn * nrm;
  }
  float md = warp_sum(sd) / (float)C, mdn = warp_sum(sdn) / (float)C;
  for (int c = lane; c < C; c += 32) {
    float dn = ld(dout, o + c) * ld(w, c);
    float nrm = (ld(inp, o + c) - m) * r;
    st(dinp, o + c, ld(dinp, o + c) + r * (dn - md - nrm * mdn));
  }
}

/* Column partials of a normalisation's weight gradients: pw += dout * norm, pb += dout. */
template <typename E, bool RMS>
__global__ void norm_bwd_dw_part_k(float *part, const E *dout, const E *inp, const float *mean,
                                   const float *rstd, int N, int C, int R, bool want_b) {
  int c = blockIdx.x * blockDim.x + threadIdx.x, r = blockIdx.y;
  if (c >= C) return;
  int64_t rows = (N + R - 1) / R, r0 = r * rows, r1 = r0 + rows < N ? r0 + rows : N;
  float sw = 0.0f, sb = 0.0f;
  for (int64_t n = r0; n < r1; n++) {
    float d = ld(dout, n * C + c);
    float x = ld(inp, n * C + c);
    float nrm = RMS ? x * rstd[n] : (x - mean[n]) * rstd[n];
    sw += d * nrm;
    sb += d;
  }
  part[(int64_t)r * C + c] = sw;
  if (want_b) part[(int64_t)(R + r) * C + c] = sb;
}

template <typename E>
__global__ void rmsnorm_fwd_k(E *out, float *rstd, const E *inp, const E *w, int N, int C,
                              float eps) {
  int row = blockIdx.x * (blockDim.x / 32) + threadIdx.x / 32, lane = threadIdx.x % 32;
  if (row >= N) return;
  const int64_t o = (int64_t)row * C;
  float s = 0.0f;
  for (int c = lane; c < C; c += 32) {
    float x = ld(inp, o + c);
    s += x * x;
  }
  float r = 1.0f / sqrtf(warp_sum(s) / (float)C + eps);
  for (int c = lane; c < C; c += 32) st(out, o + c, ld(inp, o + c) * r * ld(w, c));
  if (lane == 0) rstd[row] = r;
}

template <typename E>
__global__ void rmsnorm_bwd_dx_k(E *dinp, const E *dout, const E *inp, const E *w,
                                 const float *rstd, int N, int C) {
  int row = blockIdx.x * (blockDim.x / 32) + threadIdx.x / 32, lane = threadIdx.x % 32;
  if (row >= N) return;
  const int64_t o = (int64_t)row * C;
  float r = rstd[row];
  float s = 0.0f;
  for (int c = lane; c < C; c += 32) s += ld(dout, o + c) * ld(w, c) * (ld(inp, o + c) * r);
  float mdn = warp_sum(s) / (float)C;
  for (int c = lane; c < C; c += 32) {
    float dn = ld(dout, o + c) * ld(w, c);
    float nrm = ld(inp, o + c) * r;
    st(dinp, o + c, ld(dinp, o + c) + r * (dn - nrm * mdn));
  }
}

#define ROWS_PER_BLOCK 8 /* warps per block in the row kernels */
static inline unsigned row_grid(int N) { return (unsigned)((N + ROWS_PER_BLOCK - 1) / ROWS_PER_BLOCK); }

template <typename E>
static void layernorm_fwd_launch(cudaStream_t s, void *out, float *mean, float *rstd,
                                 const void *inp, const void *w, const void *b, int N, int C,
                                 float eps) {
  layernorm_fwd_k<E><<<row_grid(N), 32 * ROWS_PER_BLOCK, 0, s>>>(
      (E *)out, mean, rstd, (const E *)inp, (const E *)w, (const E *)b, N, C, eps);
}
template <typename E>
static void rmsnorm_fwd_launch(cudaStream_t s, void *out, float *rstd, const void *inp,
                               const void *w, int N, int C, float eps) {
  rmsnorm_fwd_k<E><<<row_grid(N), 32 * ROWS_PER_BLOCK, 0, s>>>((E *)out, rstd, (const E *)inp,
                                                               (const E *)w, N, C, eps);
}

static fb_status k_layernorm_fwd(const fb_kctx *k, void *out, float *mean, float *rstd,
                                 const void *inp, const void *w, const void *b, int N, int C,
                                 float eps) {
  if (N == 0) return FB_OK;
  DISPATCH(k, "layernorm_fwd", layernorm_fwd_launch, k->s->s, out, mean, rstd, inp, w, b, N, C,
           eps);
}

template <typename E, bool RMS>
static void norm_bwd_launch(const fb_kctx *k, void *dinp, void *dw, void *db, const void *dout,
                            const void *inp, const void *w, const float *mean,
                            const float *rstd, int N, int C) {
  cudaStream_t s = k->s->s;
  unsigned g = (unsigned)((N + ROWS_PER_BLOCK - 1) / ROWS_PER_BLOCK);
  if (RMS)
    rmsnorm_bwd_dx_k<E><<<g, 32 * ROWS_PER_BLOCK, 0, s>>>((E *)dinp, (const E *)dout,
                                                          (const E *)inp, (const E *)w, rstd, N,
                                                          C);
  else
    layernorm_bwd_dx_k<E><<<g, 32 * ROWS_PER_BLOCK, 0, s>>>(
        (E *)dinp, (const E *)dout, (const E *)inp, (const E *)w, mean, rstd, N, C);
  float *part = (float *)k->s->scratch;
  int nvec = db ? 2 : 1;
  int R = col_chunks(N, C, nvec, FB_CUDA_SCRATCH_BYTES / sizeof(float));
  dim3 gp((unsigned)((C + 127) / 128), (unsigned)R);
  norm_bwd_dw_part_k<E, RMS><<<gp, 128, 0, s>>>(part, (const E *)dout, (const E *)inp, mean,
                                                 rstd, N, C, R, db != NULL);
  unsigned gc = (unsigned)((C + 255) / 256);
  colsum_finalize<E><<<gc, 256, 0, s>>>((E *)dw, part, R, C);
  if (db) colsum_finalize<E><<<gc, 256, 0, s>>>((E *)db, part + (int64_t)R * C, R, C);
}

static fb_status norm_scratch_check(const fb_kctx *k, const char *op, int C) {
  if ((size_t)C * 2 > FB_CUDA_SCRATCH_BYTES / sizeof(float))
    return FB_ERR(FB_EUNSUPPORTED, "rank %d: cuda %s: C = %d exceeds the kernel scratch",
                  k->dev->rank, op, C);
  return FB_OK;
}

/* The two template arguments of norm_bwd_launch, one name per variant for DISPATCH. */
template <typename E>
static void layernorm_bwd_launch(const fb_kctx *k, void *dinp, void *dw, void *db,
                                 const void *dout, const void *inp, const void *w,
                                 const float *mean, const float *rstd, int N, int C) {
  norm_bwd_launch<E, false>(k, dinp, dw, db, dout, inp, w, mean, rstd, N, C);
}
template <typename E>
static void rmsnorm_bwd_launch(const fb_kctx *k, void *dinp, void *dw, const void *dout,
                               const void *inp, const void *w, const float *rstd, int N, int C) {
  norm_bwd_launch<E, true>(k, dinp, dw, NULL, dout, inp, w, NULL, rstd, N, C);
}

static fb_status k_layernorm_bwd(const fb_kctx *k, void *dinp, void *dw, void *db,
                                 const void *dout, const void *inp, const void *w,
                                 const float *mean, const float *rstd, int N, int C) {
  if (N == 0) return FB_OK;
  FB_TRY(norm_scratch_check(k, "layernorm_bwd", C));
  DISPATCH(k, "layernorm_bwd", layernorm_bwd_launch, k, dinp, dw, db, dout, inp, w, mean, rstd,
           N, C);
}

static fb_status k_rmsnorm_fwd(const fb_kctx *k, void *out, float *rstd, const void *inp,
                               const void *w, int N, int C, float eps) {
  if (N == 0) return FB_OK;
  DISPATCH(k, "rmsnorm_fwd", rmsnorm_fwd_launch, k->s->s, out, rstd, inp, w, N, C, eps);
}

static fb_status k_rmsnorm_bwd(const fb_kctx *k, void *dinp, void *dw, const void *dout,
                               const void *inp, const void *w, const float *rstd, int N, int C) {
  if (N == 0) return FB_OK;
  FB_TRY(norm_scratch_check(k, "rmsnorm_bwd", C));
  DISPATCH(k, "rmsnorm_bwd", rmsnorm_bwd_launch, k, dinp, dw, dout, inp, w, rstd, N, C);
}

/* ==== matmul (cuBLAS, column-major view of row-major data) ================================== */
template <typename E>
__global__ void bias_add_k(E *out, const E *bias, int64_t N, int OC) {
  GRID_STRIDE(i, N * OC) st(out, i, ld(out, i) + ld(bias, i % OC));
}
template <typename E>
__global__ void dbias_part_k(float *part, const E *dout, int N, int OC, int R) {
  int c = blockIdx.x * blockDim.x + threadIdx.x, r = blockIdx.y;
  if (c >= OC) return;
  int64_t rows = (N + R - 1) / R, r0 = r * rows, r1 = r0 + rows < N ? r0 + rows : N;
  float s = 0.0f;
  for (int64_t n = r0; n < r1; n++) s += ld(dout, n * OC + c);
  part[(int64_t)r * OC + c] = s;
}

/* C(m x n) = alpha op(A) op(B) + beta C in cuBLAS's column-major terms. */
static fb_status gemm(const fb_kctx *k, cublasOperation_t ta, cublasOperation_t tb, int m, int n,
                      int kk, const void *A, int lda, const void *B, int ldb, float beta,
                      void *C, int ldc) {
  fb_cuda_dev *c = fb_cuda_of(k->dev);
  cudaDataType_t t = k->act == FB_BF16 ? CUDA_R_16BF : CUDA_R_32F;
  const float alpha = 1.0f;
  fb_status s = FB_OK;
  pthread_mutex_lock(&c->blas_mu);
  cublasStatus_t bs = cublasSetStream(c->blas, k->s->s);
  if (bs == CUBLAS_STATUS_SUCCESS)
    bs = cublasSetWorkspace(c->blas, k->s->blas_ws, FB_CUDA_BLAS_WS_BYTES);
  if (bs != CUBLAS_STATUS_SUCCESS) {
    s = blas_check(k, "cublasSetStream/cublasSetWorkspace", bs);
  } else {
    bs = cublasGemmEx(c->blas, ta, tb, m, n, kk, &alpha, A, t, lda, B, t, ldb, &beta, C, t, ldc,
                      CUBLAS_COMPUTE_32F, CUBLAS_GEMM_DEFAULT);
    s = blas_check(k, "cublasGemmEx", bs);
  }
  pthread_mutex_unlock(&c->blas_mu);
  return s;
}

static fb_status k_matmul_fwd(const fb_kctx *k, void *out, const void *inp, const void *w,
                              const void *bias, int N, int C, int OC) {
  FB_TRY(prologue(k));
  if (k->act != FB_F32 && k->act != FB_BF16) return bad_dtype(k, "matmul_fwd");
  if (N == 0 || OC == 0) return FB_OK;
  if (C == 0) return fb_cuda_device_ops.memset0(k->dev, k->s, out,
                                                (size_t)N * OC * fb_dtype_size(k->act));
  /* out^T (OC x N) = w (OC x C, stored as C x OC col-major -> op T) * inp^T (C x N) */
  FB_TRY(gemm(k, CUBLAS_OP_T, CUBLAS_OP_N, OC, N, C, w, C, inp, C, 0.0f, out, OC));
  if (!bias) return FB_OK;
  unsigned g = grid_for((int64_t)N * OC, 256);
  if (k->act == FB_F32)
    bias_add_k<float><<<g, 256, 0, k->s->s>>>((float *)out, (const float *)bias, N, OC);
  else
    bias_add_k<bf16><<<g, 256, 0, k->s->s>>>((bf16 *)out, (const bf16 *)bias, N, OC);
  return launch_check(k, "bias_add");
}

static fb_status k_matmul_bwd(const fb_kctx *k, void *dinp, void *dw, void *dbias,
                              const void *dout, const void *inp, const void *w, int N, int C,
                              int OC) {
  FB_TRY(prologue(k));
  if (k->act != FB_F32 && k->act != FB_BF16) return bad_dtype(k, "matmul_bwd");
  if (dinp && N > 0 && C > 0) {
    if (OC == 0)
      FB_TRY(fb_cuda_device_ops.memset0(k->dev, k->s, dinp,
                                        (size_t)N * C * fb_dtype_size(k->act)));
    else /* dinp^T (C x N) = w^T (C x OC) * dout^T (OC x N) */
      FB_TRY(gemm(k, CUBLAS_OP_N, CUBLAS_OP_N, C, N, OC, w, C, dout, OC, 0.0f, dinp, C));
  }
  if (N == 0) return FB_OK;
  /* dw^T (C x OC) += inp^T (C x N) * dout (N x OC) */
  if (C > 0 && OC > 0)
    FB_TRY(gemm(k, CUBLAS_OP_N, CUBLAS_OP_T, C, OC, N, inp, C, dout, OC, 1.0f, dw, C));
  if (!dbias || OC == 0) return FB_OK;
  if ((size_t)OC > FB_CUDA_SCRATCH_BYTES / sizeof(float))
    return FB_ERR(FB_EUNSUPPORTED, "rank %d: cuda matmul_bwd: OC = %d exceeds the kernel scratch",
                  k->dev->rank, OC);
  float *part = (float *)k->s->scratch;
  int R = col_chunks(N, OC, 1, FB_CUDA_SCRATCH_BYTES / sizeof(float));
  dim3 gp((unsigned)((OC + 127) / 128), (unsigned)R);
  unsigned gc = (unsigned)((OC + 255) / 256);
  if (k->act == FB_F32) {
    dbias_part_k<float><<<gp, 128, 0, k->s->s>>>(part, (const float *)dout, N, OC, R);
    colsum_finalize<float><<<gc, 256, 0, k->s->s>>>((float *)dbias, part, R, OC);
  } else {
    dbias_part_k<bf16><<<gp, 128, 0, k->s->s>>>(part, (const bf16 *)dout, N, OC, R);
    colsum_finalize<bf16><<<gc, 256, 0, k->s->s>>>((bf16 *)dbias, part, R, OC);
  }
  return launch_check(k, "matmul_dbias");
}

/* ==== attention =============================================================================
 * Tiled on shared memory, CUDA cores, fp32 accumulation. A block of ATT_WARPS warps owns
 * ATT_ROWS rows of one (batch, head) (ATT_RPW rows per warp); the other side streams through
 * shared memory in tiles of 32 rows, one row per lane, so a lane computes a whole dot product
 * over the head dim in float4 steps (no warp reduction per key) and the warp then broadcasts
 * the 32 weights (shuffles) to accumulate the lane's head-dim elements d = lane + 32e, each
 * element loaded once for all of the warp's rows.
 * Forward: block of query rows; key/value tiles 0..last query; online softmax per tile;
 * writes out and lse = m + log(sum exp(s - m)).
 * Backward: (1) block of query rows: D_i = dout_i . out_i (saved to scratch), dq_i =
 * scale * sum_j P_ij (dP_ij - D_i) k_j with P = exp(s - lse); (2) block of key rows (b, g):
 * query tiles from the block's first key to T, over the heads of KV group g in order, for
 * dk_j and dv_j. Every output is overwritten; no atomics, so results are deterministic. */
#define ATT_MAX_NPL 8                     /* hd <= 256 */
#define ATT_WARPS 4
#define ATT_RPW 8                         /* rows per warp */
#define ATT_ROWS (ATT_WARPS * ATT_RPW)    /* rows per block */
#define ATT_KT 32                         /* streamed tile: one row per lane */
#define ATT_FULL 0xffffffffu

/* Shared-memory row strides (floats): hq = hd rounded up to 4 (rows read whole by a warp, as
 * float4 broadcasts or lane-consecutive elements), hp = hq + 4 (rows read one per lane as
 * float4: 8 lanes of a quarter warp then start 4 banks apart). Elements past hd are zeros, so
 * the dot products run over hq in float4 steps. */
__host__ __device__ __forceinline__ int att_hq(int hd) { return (hd + 3) & ~3; }
__host__ __device__ __forceinline__ int att_hp(int hd) { return att_hq(hd) + 4; }

/* Rows [r0, r0 + n) of a [T, ld] matrix into s (row stride sld, fp32): rows at or past T and
 * columns past hd as zeros. */
template <typename E>
__device__ __forceinline__ void att_load(float *s, int sld, const E *x, int64_t base, int ld_,
                                         int r0, int n, int T_, int hd) {
  const int hq = att_hq(hd);
  for (int t = threadIdx.x; t < n * hq; t += blockDim.x) {
    int r = t / hq, d = t % hq, i = r0 + r;
    s[r * sld + d] = i < T_ && d < hd ? ld(x, base + (int64_t)i * ld_ + d) : 0.0f;
  }
}

__device__ __forceinline__ float dot4(float4 a, float4 b) {
  return a.x * b.x + a.y * b.y + a.z * b.z + a.w * b.w;
}

/* acc[r][e] += sum over the tile's 32 rows jj of w[r] (held by lane jj) * X[jj * ld + d],
 * d = lane + 32e: the weights broadcast by shuffles, each element of X loaded once for all the
 * warp's rows. Elements past hq are zeros in shared memory's padding, so they are skipped. */
template <int NPL>
__device__ __forceinline__ void att_bcast_acc(float (&acc)[ATT_RPW][NPL],
                                              const float (&w)[ATT_RPW], const float *X, int ld,
                                              int hq, int lane) {
  for (int jj = 0; jj < ATT_KT; jj++) {
    float x[NPL];
#pragma unroll
    for (int e = 0; e < NPL; e++) x[e] = lane + 32 * e < hq ? X[jj * ld + lane + 32 * e] : 0.0f;
#pragma unroll
    for (int r = 0; r < ATT_RPW; r++) {
      float wj = __shfl_sync(ATT_FULL, w[r], jj);
#pragma unroll
      for (int e = 0; e < NPL; e++) acc[r][e] += wj * x[e];
    }
  }
}

static size_t att_fwd_smem(int hd) {
  return sizeof(float) * ((size_t)ATT_ROWS * att_hq(hd) + (size_t)ATT_KT * att_hp(hd) +
                          (size_t)ATT_KT * att_hq(hd));
}
static size_t att_dq_smem(int hd) {
  return sizeof(float) * (2 * (size_t)ATT_ROWS * att_hq(hd) + 2 * (size_t)ATT_KT * att_hp(hd));
}
static size_t att_dkv_smem(int hd) {
  return sizeof(float) * (2 * (size_t)ATT_ROWS * att_hq(hd) + 2 * (size_t)ATT_KT * att_hp(hd) +
                          2 * ATT_KT);
}

template <typename E, int NPL>
__global__ void __launch_bounds__(32 * ATT_WARPS)
attn_fwd_k(E *out, float *lse, const E *q, const E *kk, const E *v, int T_, int H, int KVH,
           int hd, int ldq, int ldkv, float scale) {
  extern __shared__ float4 sm4[];
  const int hq = att_hq(hd), hp = att_hp(hd), h4 = hq / 4;
  float *Qs = (float *)sm4;                /* [ATT_ROWS][hq] */
  float *Ks = Qs + ATT_ROWS * hq;          /* [ATT_KT][hp] */
  float *Vs = Ks + ATT_KT * hp;            /* [ATT_KT][hq] */
  const int ntiles = (T_ + ATT_ROWS - 1) / ATT_ROWS;
  const int64_t bh = blockIdx.x / ntiles;
  const int tile = ntiles - 1 - (int)(blockIdx.x % ntiles); /* longest rows first */
  const int b = (int)(bh / H), h = (int)(bh % H), g = h / (H / KVH);
  const int i0 = tile * ATT_ROWS, warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  const int64_t kvb = (int64_t)b * T_ * ldkv + (int64_t)g * hd;
  att_load(Qs, hq, q, (int64_t)b * T_ * ldq + (int64_t)h * hd, ldq, i0, ATT_ROWS, T_, hd);
  float m[ATT_RPW], l[ATT_RPW], acc[ATT_RPW][NPL];
#pragma unroll
  for (int r = 0; r < ATT_RPW; r++) {
    m[r] = -INFINITY;
    l[r] = 0.0f;
#pragma unroll
    for (int e = 0; e < NPL; e++) acc[r][e] = 0.0f;
  }
  const float4 *qw = (const float4 *)(Qs + warp * ATT_RPW * hq);
  const float4 *kr = (const float4 *)(Ks + lane * hp);
  const int last = min(T_ - 1, i0 + ATT_ROWS - 1);
  for (int j0 = 0; j0 <= last; j0 += ATT_KT) {
    __syncthreads(); /* the previous tile is consumed */
    att_load(Ks, hp, kk, kvb, ldkv, j0, ATT_KT, T_, hd);
    att_load(Vs, hq, v, kvb, ldkv, j0, ATT_KT, T_, hd);
    __syncthreads();
    float p[ATT_RPW];
#pragma unroll
    for (int r = 0; r < ATT_RPW; r++) p[r] = 0.0f;
    for (int d4 = 0; d4 < h4; d4++) {
      float4 kd = kr[d4];
#pragma unroll
      for (int r = 0; r < ATT_RPW; r++) p[r] += dot4(qw[r * h4 + d4], kd);
    }
    const int j = j0 + lane;
#pragma unroll
    for (int r = 0; r < ATT_RPW; r++) {
      const int i = i0 + warp * ATT_RPW + r;
      /* the first tile holds key 0 <= i, so m is finite from then on */
      float sv = j <= i && j < T_ ? p[r] * scale : -INFINITY;
      float mn = fmaxf(m[r], warp_max(sv));
      float corr = expf(m[r] - mn);
      p[r] = expf(sv - mn);
      l[r] = l[r] * corr + warp_sum(p[r]);
      m[r] = mn;
#pragma unroll
      for (int e = 0; e < NPL; e++) acc[r][e] *= corr;
    }
    att_bcast_acc<NPL>(acc, p, Vs, hq, hq, lane);
  }
#pragma unroll
  for (int r = 0; r < ATT_RPW; r++) {
    const int i = i0 + warp * ATT_RPW + r;
    if (i >= T_) continue;
    const int64_t oo = ((int64_t)b * T_ + i) * ((int64_t)H * hd) + (int64_t)h * hd;
    float inv = 1.0f / l[r];
#pragma unroll
    for (int e = 0; e < NPL; e++) {
      int d = lane + 32 * e;
      if (d < hd) st(out, oo + d, acc[r][e] * inv);
    }
    if (lane == 0) lse[((int64_t)b * H + h) * T_ + i] = m[r] + logf(l[r]);
  }
}

/* Rows of batches [b0, b0 + nb); Dbuf[(b - b0) * H * T + h * T + i]. */
template <typename E, int NPL>
__global__ void __launch_bounds__(32 * ATT_WARPS)
attn_bwd_dq_k(E *dq, float *Dbuf, const E *dout, const E *q, const E *kk, const E *v,
              const E *out, const float *lse, int b0, int T_, int H, int KVH, int hd, int ldq,
              int ldkv, float scale) {
  extern __shared__ float4 sm4[];
  const int hq = att_hq(hd), hp = att_hp(hd), h4 = hq / 4;
  float *Qs = (float *)sm4;                /* [ATT_ROWS][hq] */
  float *Os = Qs + ATT_ROWS * hq;          /* dout rows, [ATT_ROWS][hq] */
  float *Ks = Os + ATT_ROWS * hq;          /* [ATT_KT][hp] */
  float *Vs = Ks + ATT_KT * hp;            /* [ATT_KT][hp] */
  const int ntiles = (T_ + ATT_ROWS - 1) / ATT_ROWS;
  const int64_t bh = blockIdx.x / ntiles;
  const int tile = ntiles - 1 - (int)(blockIdx.x % ntiles);
  const int bl = (int)(bh / H), h = (int)(bh % H), b = b0 + bl, g = h / (H / KVH);
  const int i0 = tile * ATT_ROWS, warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  const int64_t kvb = (int64_t)b * T_ * ldkv + (int64_t)g * hd;
  const int64_t ob = (int64_t)b * T_ * H * hd + (int64_t)h * hd;
  att_load(Qs, hq, q, (int64_t)b * T_ * ldq + (int64_t)h * hd, ldq, i0, ATT_ROWS, T_, hd);
  att_load(Os, hq, dout, ob, H * hd, i0, ATT_ROWS, T_, hd);
  __syncthreads();
  float D[ATT_RPW], L[ATT_RPW], acc[ATT_RPW][NPL];
#pragma unroll
  for (int r = 0; r < ATT_RPW; r++) {
    const int row = warp * ATT_RPW + r, i = i0 + row;
    float dp = 0.0f;
    if (i < T_)
      for (int d = lane; d < hd; d += 32)
        dp += Os[row * hq + d] * ld(out, ob + (int64_t)i * H * hd + d);
    D[r] = warp_sum(dp);
    L[r] = i < T_ ? lse[((int64_t)b * H + h) * T_ + i] : 0.0f;
    if (lane == 0 && i < T_) Dbuf[((int64_t)bl * H + h) * T_ + i] = D[r];
#pragma unroll
    for (int e = 0; e < NPL; e++) acc[r][e] = 0.0f;
  }
  const float4 *qw = (const float4 *)(Qs + warp * ATT_RPW * hq);
  const float4 *ow = (const float4 *)(Os + warp * ATT_RPW * hq);
  const float4 *kr = (const float4 *)(Ks + lane * hp), *vr = (const float4 *)(Vs + lane * hp);
  const int last = min(T_ - 1, i0 + ATT_ROWS - 1);
  for (int j0 = 0; j0 <= last; j0 += ATT_KT) {
    __syncthreads();
    att_load(Ks, hp, kk, kvb, ldkv, j0, ATT_KT, T_, hd);
    att_load(Vs, hp, v, kvb, ldkv, j0, ATT_KT, T_, hd);
    __syncthreads();
    float s[ATT_RPW], dp[ATT_RPW];
#pragma unroll
    for (int r = 0; r < ATT_RPW; r++) s[r] = dp[r] = 0.0f;
    for (int d4 = 0; d4 < h4; d4++) {
      float4 kd = kr[d4], vd = vr[d4];
#pragma unroll
      for (int r = 0; r < ATT_RPW; r++) {
        s[r] += dot4(qw[r * h4 + d4], kd);
        dp[r] += dot4(ow[r * h4 + d4], vd);
      }
    }
    const int j = j0 + lane;
#pragma unroll
    for (int r = 0; r < ATT_RPW; r++) {
      const int i = i0 + warp * ATT_RPW + r;
      float p = j <= i && j < T_ ? expf(s[r] * scale - L[r]) : 0.0f;
      s[r] = p * (dp[r] - D[r]) * scale; /* ds */
    }
    att_bcast_acc<NPL>(acc, s, Ks, hp, hq, lane); /* s holds ds */
  }
#pragma unroll
  for (int r = 0; r < ATT_RPW; r++) {
    const int i = i0 + warp * ATT_RPW + r;
    if (i >= T_) continue;
    const int64_t qo = ((int64_t)b * T_ + i) * ldq + (int64_t)h * hd;
#pragma unroll
    for (int e = 0; e < NPL; e++) {
      int d = lane + 32 * e;
      if (d < hd) st(dq, qo + d, acc[r][e]);
    }
  }
}

template <typename E, int NPL>
__global__ void __launch_bounds__(32 * ATT_WARPS)
attn_bwd_dkv_k(E *dk, E *dv, const float *Dbuf, const E *dout, const E *q, const E *kk,
               const E *v, const float *lse, int b0, int T_, int H, int KVH, int hd, int ldq,
               int ldkv, float scale) {
  extern __shared__ float4 sm4[];
  const int hq = att_hq(hd), hp = att_hp(hd), h4 = hq / 4;
  float *Ks = (float *)sm4;                /* this block's key rows, [ATT_ROWS][hq] */
  float *Vs = Ks + ATT_ROWS * hq;          /* [ATT_ROWS][hq] */
  float *Qs = Vs + ATT_ROWS * hq;          /* [ATT_KT][hp] */
  float *Os = Qs + ATT_KT * hp;            /* dout rows, [ATT_KT][hp] */
  float *Ls = Os + ATT_KT * hp;            /* [ATT_KT] */
  float *Ds = Ls + ATT_KT;                 /* [ATT_KT] */
  const int ntiles = (T_ + ATT_ROWS - 1) / ATT_ROWS;
  const int64_t bg = blockIdx.x / ntiles;
  const int tile = (int)(blockIdx.x % ntiles); /* first keys see the most queries: first */
  const int bl = (int)(bg / KVH), g = (int)(bg % KVH), b = b0 + bl, rep = H / KVH;
  const int j0 = tile * ATT_ROWS, warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  const int64_t kvb = (int64_t)b * T_ * ldkv + (int64_t)g * hd;
  att_load(Ks, hq, kk, kvb, ldkv, j0, ATT_ROWS, T_, hd);
  att_load(Vs, hq, v, kvb, ldkv, j0, ATT_ROWS, T_, hd);
  float ak[ATT_RPW][NPL], av[ATT_RPW][NPL];
#pragma unroll
  for (int r = 0; r < ATT_RPW; r++)
#pragma unroll
    for (int e = 0; e < NPL; e++) ak[r][e] = av[r][e] = 0.0f;
  const float4 *kw = (const float4 *)(Ks + warp * ATT_RPW * hq);
  const float4 *vw = (const float4 *)(Vs + warp * ATT_RPW * hq);
  const float4 *qr = (const float4 *)(Qs + lane * hp), *orow = (const float4 *)(Os + lane * hp);
  for (int h = g * rep; h < (g + 1) * rep; h++) {
    const float *Lh = lse + ((int64_t)b * H + h) * T_;
    const float *Dh = Dbuf + ((int64_t)bl * H + h) * T_;
    for (int i0 = j0 - j0 % ATT_KT; i0 < T_; i0 += ATT_KT) {
      __syncthreads();
      att_load(Qs, hp, q, (int64_t)b * T_ * ldq + (int64_t)h * hd, ldq, i0, ATT_KT, T_, hd);
      att_load(Os, hp, dout, (int64_t)b * T_ * H * hd + (int64_t)h * hd, H * hd, i0, ATT_KT, T_,
               hd);
      if (threadIdx.x < ATT_KT) {
        int i = i0 + threadIdx.x;
        Ls[threadIdx.x] = i < T_ ? Lh[i] : 0.0f;
        Ds[threadIdx.x] = i < T_ ? Dh[i] : 0.0f;
      }
      __syncthreads();
      float s[ATT_RPW], dp[ATT_RPW];
#pragma unroll
      for (int r = 0; r < ATT_RPW; r++) s[r] = dp[r] = 0.0f;
      for (int d4 = 0; d4 < h4; d4++) {
        float4 qd = qr[d4], od = orow[d4];
#pragma unroll
        for (int r = 0; r < ATT_RPW; r++) {
          s[r] += dot4(qd, kw[r * h4 + d4]);
          dp[r] += dot4(od, vw[r * h4 + d4]);
        }
      }
      const int i = i0 + lane;
#pragma unroll
      for (int r = 0; r < ATT_RPW; r++) {
        const int j = j0 + warp * ATT_RPW + r;
        float p = i >= j && i < T_ && j < T_ ? expf(s[r] * scale - Ls[lane]) : 0.0f;
        s[r] = p * (dp[r] - Ds[lane]) * scale; /* ds */
        dp[r] = p;
      }
      for (int ii = 0; ii < ATT_KT; ii++) {
        float qv[NPL], ov[NPL];
#pragma unroll
        for (int e = 0; e < NPL; e++) {
          int d = lane + 32 * e;
          qv[e] = d < hq ? Qs[ii * hp + d] : 0.0f;
          ov[e] = d < hq ? Os[ii * hp + d] : 0.0f;
        }
#pragma unroll
        for (int r = 0; r < ATT_RPW; r++) {
          float dsi = __shfl_sync(ATT_FULL, s[r], ii), pi = __shfl_sync(ATT_FULL, dp[r], ii);
#pragma unroll
          for (int e = 0; e < NPL; e++) {
            ak[r][e] += dsi * qv[e];
            av[r][e] += pi * ov[e];
          }
        }
      }
    }
  }
#pragma unroll
  for (int r = 0; r < ATT_RPW; r++) {
    const int j = j0 + warp * ATT_RPW + r;
    if (j >= T_) continue;
    const int64_t ko = ((int64_t)b * T_ + j) * ldkv + (int64_t)g * hd;
#pragma unroll
    for (int e = 0; e < NPL; e++) {
      int d = lane + 32 * e;
      if (d < hd) {
        st(dk, ko + d, ak[r][e]);
        st(dv, ko + d, av[r][e]);
      }
    }
  }
}

static fb_status attn_check(const fb_kctx *k, const char *op, int H, int KVH, int hd) {
  if (hd < 1 || hd > 32 * ATT_MAX_NPL || KVH < 1 || H % KVH != 0)
    return FB_ERR(FB_EUNSUPPORTED, "rank %d: cuda %s: head dim %d (allowed 1..%d) or heads "
                  "%d/%d (H must be a multiple of KVH) not supported", k->dev->rank, op, hd,
                  32 * ATT_MAX_NPL, H, KVH);
  return FB_OK;
}

/* Blocks for rows(count) x ceil(T / ATT_ROWS) tiles; shared memory above 48 KiB is opted into
 * per kernel (a launch asking more than the device allows fails in launch_check). */
static inline unsigned att_grid(int64_t count, int T) {
  return (unsigned)(count * ((T + ATT_ROWS - 1) / ATT_ROWS));
}
template <typename K>
static void att_smem_optin(K kernel, size_t bytes) {
  if (bytes > ((size_t)48 << 10))
    (void)cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, (int)bytes);
}

template <typename E, int NPL>
static void attn_fwd_npl(const fb_kctx *k, void *out, float *lse, const void *q, const void *kk,
                         const void *v, int B, int T, int H, int KVH, int hd, int ldq,
                         int ldkv) {
  size_t sm = att_fwd_smem(hd);
  att_smem_optin(attn_fwd_k<E, NPL>, sm);
  attn_fwd_k<E, NPL><<<att_grid((int64_t)B * H, T), 32 * ATT_WARPS, sm, k->s->s>>>(
      (E *)out, lse, (const E *)q, (const E *)kk, (const E *)v, T, H, KVH, hd, ldq, ldkv,
      1.0f / sqrtf((float)hd));
}
template <typename E>
static void attn_fwd_launch(const fb_kctx *k, void *out, float *lse, const void *q,
                            const void *kk, const void *v, int B, int T, int H, int KVH, int hd,
                            int ldq, int ldkv) {
  int npl = (hd + 31) / 32;
  if (npl <= 1)
    attn_fwd_npl<E, 1>(k, out, lse, q, kk, v, B, T, H, KVH, hd, ldq, ldkv);
  else if (npl <= 2)
    attn_fwd_npl<E, 2>(k, out, lse, q, kk, v, B, T, H, KVH, hd, ldq, ldkv);
  else if (npl <= 4)
    attn_fwd_npl<E, 4>(k, out, lse, q, kk, v, B, T, H, KVH, hd, ldq, ldkv);
  else
    attn_fwd_npl<E, 8>(k, out, lse, q, kk, v, B, T, H, KVH, hd, ldq, ldkv);
}

template <typename E, int NPL>
static void attn_bwd_npl(const fb_kctx *k, void *dq, void *dk, void *dv, const void *dout,
                         const void *q, const void *kk, const void *v, const void *out,
                         const float *lse, int B, int T, int H, int KVH, int hd, int ldq,
                         int ldkv, int bchunk) {
  float *Dbuf = (float *)k->s->scratch;
  float scale = 1.0f / sqrtf((float)hd);
  size_t smq = att_dq_smem(hd), smkv = att_dkv_smem(hd);
  att_smem_optin(attn_bwd_dq_k<E, NPL>, smq);
  att_smem_optin(attn_bwd_dkv_k<E, NPL>, smkv);
  for (int b0 = 0; b0 < B; b0 += bchunk) {
    int nb = B - b0 < bchunk ? B - b0 : bchunk;
    attn_bwd_dq_k<E, NPL><<<att_grid((int64_t)nb * H, T), 32 * ATT_WARPS, smq, k->s->s>>>(
        (E *)dq, Dbuf, (const E *)dout, (const E *)q, (const E *)kk, (const E *)v,
        (const E *)out, lse, b0, T, H, KVH, hd, ldq, ldkv, scale);
    attn_bwd_dkv_k<E, NPL><<<att_grid((int64_t)nb * KVH, T), 32 * ATT_WARPS, smkv, k->s->s>>>(
        (E *)dk, (E *)dv, Dbuf, (const E *)dout, (const E *)q, (const E *)kk, (const E *)v, lse,
        b0, T, H, KVH, hd, ldq, ldkv, scale);
  }
}
template <typename E>
static void attn_bwd_launch(const fb_kctx *k, void *dq, void *dk, void *dv, const void *dout,
                            const void *q, const void *kk, const void *v, const void *out,
                            const float *lse, int B, int T, int H, int KVH, int hd, int ldq,
                            int ldkv, int bchunk) {
  int npl = (hd + 31) / 32;
  if (npl <= 1)
    attn_bwd_npl<E, 1>(k, dq, dk, dv, dout, q, kk, v, out, lse, B, T, H, KVH, hd, ldq, ldkv,
                       bchunk);
  else if (npl <= 2)
    attn_bwd_npl<E, 2>(k, dq, dk, dv, dout, q, kk, v, out, lse, B, T, H, KVH, hd, ldq, ldkv,
                       bchunk);
  else if (npl <= 4)
    attn_bwd_npl<E, 4>(k, dq, dk, dv, dout, q, kk, v, out, lse, B, T, H, KVH, hd, ldq, ldkv,
                       bchunk);
  else
    attn_bwd_npl<E, 8>(k, dq, dk, dv, dout, q, kk, v, out, lse, B, T, H, KVH, hd, ldq, ldkv,
                       bchunk);
}

static fb_status k_attention_fwd(const fb_kctx *k, void *out, float *lse, const void *q,
                                 const void *kk, const void *v, int B, int T, int H, int KVH,
                                 int hd, int ldq, int ldkv, void *scratch) {
  FB_TRY(attn_check(k, "attention_fwd", H, KVH, hd));
  if ((int64_t)B * H * T == 0) return FB_OK;
  DISPATCH(k, "attention_fwd", attn_fwd_launch, k, out, lse, q, kk, v, B, T, H, KVH, hd, ldq,
           ldkv);
}

static fb_status k_attention_bwd(const fb_kctx *k, void *dq, void *dk, void *dv,
                                 const void *dout, const void *q, const void *kk, const void *v,
                                 const void *out, const float *lse, int B, int T, int H, int KVH,
                                 int hd, int ldq, int ldkv, void *scratch) {
  FB_TRY(attn_check(k, "attention_bwd", H, KVH, hd));
  if ((int64_t)B * H * T == 0) return FB_OK;
  size_t per_b = (size_t)H * (size_t)T, cap = FB_CUDA_SCRATCH_BYTES / sizeof(float);
  if (per_b > cap)
    return FB_ERR(FB_EUNSUPPORTED, "rank %d: cuda attention_bwd: H*T = %zu exceeds the kernel "
                  "scratch (%zu)", k->dev->rank, per_b, cap);
  int bchunk = (int)(cap / per_b < (size_t)B ? cap / per_b : (size_t)B);
  DISPATCH(k, "attention_bwd", attn_bwd_launch, k, dq, dk, dv, dout, q, kk, v, out, lse, B, T, H,
           KVH, hd, ldq, ldkv, bchunk);
}

/* ==== rotary embedding: thread per (token, head, pair); angles in double as on the cpu ==== */
template <typename E>
__global__ void rope_k(E *x, int64_t N, int T_, int nh, int hd, int ld_, double theta,
                       bool inverse) {
  int half = hd / 2;
  GRID_STRIDE(idx, N * nh * half) {
    int i = (int)(idx % half);
    int h = (int)((idx / half) % nh);
    int64_t n = idx / ((int64_t)half * nh);
    int t = (int)(n % T_);
    double a = (double)t * pow(theta, -2.0 * i / hd);
    float cs = (float)cos(a), sn = (float)sin(a);
    if (inverse) sn = -sn;
    int64_t o = n * ld_ + (int64_t)h * hd;
    float x1 = ld(x, o + i), x2 = ld(x, o + i + half);
    st(x, o + i, x1 * cs - x2 * sn);
    st(x, o + i + half, x1 * sn + x2 * cs);
  }
}

template <typename E>
static void rope_launch(cudaStream_t s, void *x, int64_t N, int T, int nh, int hd, int ldx,
                        double theta, bool inverse) {
  rope_k<E><<<grid_for(N * nh * (hd / 2), 256), 256, 0, s>>>((E *)x, N, T, nh, hd, ldx, theta,
                                                             inverse);
}
static fb_status rope_run(const fb_kctx *k, void *x, int B, int T, int nh, int hd, int ldx,
                          float theta, bool inverse, const char *op) {
  if (hd % 2 != 0)
    return FB_ERR(FB_EUNSUPPORTED, "rank %d: cuda %s: head dim %d must be even", k->dev->rank,
                  op, hd);
  int64_t N = (int64_t)B * T;
  if (N * nh * hd == 0) return FB_OK;
  DISPATCH(k, op, rope_launch, k->s->s, x, N, T, nh, hd, ldx, (double)theta, inverse);
}
static fb_status k_rope_fwd(const fb_kctx *k, void *x, int B, int T, int nh, int hd, int ldx,
                            float theta) {
  return rope_run(k, x, B, T, nh, hd, ldx, theta, false, "rope_fwd");
}
static fb_status k_rope_bwd(const fb_kctx *k, void *dx, int B, int T, int nh, int hd, int ldx,
                            float theta) {
  return rope_run(k, dx, B, T, nh, hd, ldx, theta, true, "rope_bwd");
}

/* ==== elementwise =========================================================================== */
template <typename E>
__global__ void gelu_fwd_k(E *out, const E *inp, size_t n) {
  GRID_STRIDE(i, n) st(out, i, fb_gelu_f(ld(inp, i)));
}
template <typename E>
__global__ void gelu_bwd_k(E *dinp, const E *inp, const E *dout, size_t n) {
  GRID_STRIDE(i, n) st(dinp, i, ld(dout, i) * fb_gelu_grad_f(ld(inp, i)));
}
template <typename E>
__global__ void swiglu_fwd_k(E *out, const E *a, const E *b, size_t n) {
  GRID_STRIDE(i, n) st(out, i, fb_swiglu_f(ld(a, i), ld(b, i)));
}
template <typename E>
__global__ void swiglu_bwd_k(E *da, E *db, const E *dout, const E *a, const E *b, size_t n) {
  GRID_STRIDE(i, n) {
    float ga, gb;
    fb_swiglu_grad_f(ld(a, i), ld(b, i), ld(dout, i), &ga, &gb);
    st(da, i, ga);
    st(db, i, gb);
  }
}
template <typename E>
__global__ void add_k(E *out, const E *a, const E *b, size_t n) {
  GRID_STRIDE(i, n) st(out, i, ld(a, i) + ld(b, i));
}

template <typename E>
static void gelu_fwd_launch(cudaStream_t s, void *out, const void *inp, size_t n) {
  gelu_fwd_k<E><<<grid_for((int64_t)n, 256), 256, 0, s>>>((E *)out, (const E *)inp, n);
}
template <typename E>
static void gelu_bwd_launch(cudaStream_t s, void *dinp, const void *inp, const void *dout,
                            size_t n) {
  gelu_bwd_k<E><<<grid_for((int64_t)n, 256), 256, 0, s>>>((E *)dinp, (const E *)inp,
                                                          (const E *)dout, n);
}
template <typename E>
static void swiglu_fwd_launch(cudaStream_t s, void *out, const void *a, const void *b,
                              size_t n) {
  swiglu_fwd_k<E><<<grid_for((int64_t)n, 256), 256, 0, s>>>((E *)out, (const E *)a,
                                                            (const E *)b, n);
}
template <typename E>
static void swiglu_bwd_launch(cudaStream_t s, void *da, void *db, const void *dout,
                              const void *a, const void *b, size_t n) {
  swiglu_bwd_k<E><<<grid_for((int64_t)n, 256), 256, 0, s>>>((E *)da, (E *)db, (const E *)dout,
                                                            (const E *)a, (const E *)b, n);
}
template <typename E>
static void add_launch(cudaStream_t s, void *out, const void *a, const void *b, size_t n) {
  add_k<E><<<grid_for((int64_t)n, 256), 256, 0, s>>>((E *)out, (const E *)a, (const E *)b, n);
}

static fb_status k_gelu_fwd(const fb_kctx *k, void *out, const void *inp, size_t n) {
  if (n == 0) return FB_OK;
  DISPATCH(k, "gelu_fwd", gelu_fwd_launch, k->s->s, out, inp, n);
}
static fb_status k_gelu_bwd(const fb_kctx *k, void *dinp, const void *inp, const void *dout,
                            size_t n) {
  if (n == 0) return FB_OK;
  DISPATCH(k, "gelu_bwd", gelu_bwd_launch, k->s->s, dinp, inp, dout, n);
}
static fb_status k_swiglu_fwd(const fb_kctx *k, void *out, const void *a, const void *b,
                              size_t n) {
  if (n == 0) return FB_OK;
  DISPATCH(k, "swiglu_fwd", swiglu_fwd_launch, k->s->s, out, a, b, n);
}
static fb_status k_swiglu_bwd(const fb_kctx *k, void *da, void *db, const void *dout,
                              const void *a, const void *b, size_t n) {
  if (n == 0) return FB_OK;
  DISPATCH(k, "swiglu_bwd", swiglu_bwd_launch, k->s->s, da, db, dout, a, b, n);
}
static fb_status k_add(const fb_kctx *k, void *out, const void *a, const void *b, size_t n) {
  if (n == 0) return FB_OK;
  DISPATCH(k, "add", add_launch, k->s->s, out, a, b, n);
}

/* ==== softmax cross-entropy: block per row; row losses summed in row order ================== */
#define XENT_THREADS 256
__device__ __forceinline__ float block_reduce(float x, bool is_max, float *sh) {
  int lane = threadIdx.x % 32, w = threadIdx.x / 32, nw = blockDim.x / 32;
  x = is_max ? warp_max(x) : warp_sum(x);
  __syncthreads();
  if (lane == 0) sh[w] = x;
  __syncthreads();
  float r = sh[0];
  for (int i = 1; i < nw; i++) r = is_max ? fmaxf(r, sh[i]) : r + sh[i];
  return r;
}

template <typename E>
__global__ void xent_rows_k(E *logits, double *row_loss, const int32_t *targets, int r0, int V,
                            float dscale) {
  __shared__ float sh[32];
  int r = r0 + blockIdx.x;
  E *x = logits + (int64_t)r * V;
  int tgt = targets[r];
  if (tgt < 0) {
    for (int j = threadIdx.x; j < V; j += blockDim.x) st(x, j, 0.0f);
    if (threadIdx.x == 0) row_loss[blockIdx.x] = 0.0;
    return;
  }
  float m = -INFINITY;
  for (int j = threadIdx.x; j < V; j += blockDim.x) m = fmaxf(m, ld(x, j));
  m = block_reduce(m, true, sh);
  float s = 0.0f;
  for (int j = threadIdx.x; j < V; j += blockDim.x) s += fb_exp_f(ld(x, j) - m);
  s = block_reduce(s, false, sh);
  float xt = ld(x, tgt);
  __syncthreads(); /* everyone read x[tgt] before it is overwritten */
  float f = dscale / s;
  for (int j = threadIdx.x; j < V; j += blockDim.x) {
    float gr = fb_exp_f(ld(x, j) - m) * f;
    if (j == tgt) gr -= dscale;
    st(x, j, gr);
  }
  if (threadIdx.x == 0) row_loss[blockIdx.x] = ((double)m + log((double)s)) - (double)xt;
}
__global__ void sum_rows_in_order_k(double *loss_sum, const double *row_loss, int n) {
  if (threadIdx.x != 0 || blockIdx.x != 0) return;
  double s = loss_sum[0];
  for (int i = 0; i < n; i++) s += row_loss[i];
  loss_sum[0] = s;
}

static fb_status k_xent_fwd_bwd(const fb_kctx *k, void *logits, double *loss_sum,
                                const int32_t *targets, int N, int V, float dscale) {
  FB_TRY(prologue(k));
  if (k->act != FB_F32 && k->act != FB_BF16) return bad_dtype(k, "xent_fwd_bwd");
  double *rows = (double *)k->s->scratch;
  const int chunk = (int)(FB_CUDA_SCRATCH_BYTES / sizeof(double));
  for (int r0 = 0; r0 < N; r0 += chunk) {
    int nr = N - r0 < chunk ? N - r0 : chunk;
    if (k->act == FB_F32)
      xent_rows_k<float><<<nr, XENT_THREADS, 0, k->s->s>>>((float *)logits, rows, targets, r0,
                                                            V, dscale);
    else
      xent_rows_k<bf16><<<nr, XENT_THREADS, 0, k->s->s>>>((bf16 *)logits, rows, targets, r0, V,
                                                           dscale);
    sum_rows_in_order_k<<<1, 32, 0, k->s->s>>>(loss_sum, rows, nr);
    FB_TRY(launch_check(k, "xent_fwd_bwd"));
  }
  return FB_OK;
}

/* ==== fp32 vectors ========================================================================== */
__global__ void acc_k(float *y, const float *x, size_t n) { GRID_STRIDE(i, n) y[i] += x[i]; }
__global__ void scale_k(float *y, float a, size_t n) { GRID_STRIDE(i, n) y[i] *= a; }
__global__ void adamw_k(float *p, const float *g, float *m, float *v, size_t n, fb_adamw_args a) {
  GRID_STRIDE(i, n) {
    float pp = p[i], mm = m[i], vv = v[i];
    fb_adamw_update_f(&pp, g[i], &mm, &vv, a.lr, a.beta1, a.beta2, a.eps, a.weight_decay,
                      a.bias_corr1, a.bias_corr2, a.grad_scale);
    p[i] = pp;
    m[i] = mm;
    v[i] = vv;
  }
}
__global__ void sgd_k(float *p, const float *g, float *mom, size_t n, fb_sgd_args a) {
  GRID_STRIDE(i, n) {
    float pp = p[i];
    if (mom) {
      float mm = mom[i];
      fb_sgd_update_f(&pp, g[i], &mm, a.lr, a.momentum, a.weight_decay, a.grad_scale);
      mom[i] = mm;
    } else {
      float zero = 0.0f;
      fb_sgd_update_f(&pp, g[i], &zero, a.lr, 0.0f, a.weight_decay, a.grad_scale);
    }
    p[i] = pp;
  }
}

#define F32_LAUNCH(k, op, n, KERNEL, ...)                                                      \
  do {                                                                                         \
    FB_TRY(prologue(k));                                                                       \
    if ((n) == 0) return FB_OK;                                                                \
    KERNEL<<<grid_for((int64_t)(n), 256), 256, 0, (k)->s->s>>>(__VA_ARGS__);                   \
    return launch_check(k, op);                                                                \
  } while (0)

static fb_status k_acc_f32(const fb_kctx *k, float *y, const float *x, size_t n) {
  F32_LAUNCH(k, "acc_f32", n, acc_k, y, x, n);
}
static fb_status k_scale_f32(const fb_kctx *k, float *y, float a, size_t n) {
  F32_LAUNCH(k, "scale_f32", n, scale_k, y, a, n);
}
static fb_status k_adamw(const fb_kctx *k, float *p, const float *g, float *m, float *v, size_t n,
                         const fb_adamw_args *a) {
  F32_LAUNCH(k, "adamw", n, adamw_k, p, g, m, v, n, *a);
}
static fb_status k_sgd(const fb_kctx *k, float *p, const float *g, float *mom, size_t n,
                       const fb_sgd_args *a) {
  F32_LAUNCH(k, "sgd", n, sgd_k, p, g, mom, n, *a);
}

/* Exact sum of squares: per-block bins in shared memory, then one atomic per touched word. */
__global__ void sumsq_bins_k(unsigned long long *bins, const float *g, size_t n) {
  __shared__ unsigned long long sb[2 * FB_NORM_BINS];
  for (int i = threadIdx.x; i < 2 * FB_NORM_BINS; i += blockDim.x) sb[i] = 0;
  __syncthreads();
  GRID_STRIDE(i, n) {
    uint32_t bin;
    uint64_t msq;
    fb_sumsq_decompose(g[i], &bin, &msq);
    if (msq) {
      atomicAdd(&sb[2 * bin], (unsigned long long)(msq & 0xffffffffull));
      atomicAdd(&sb[2 * bin + 1], (unsigned long long)(msq >> 32));
    }
  }
  __syncthreads();
  for (int i = threadIdx.x; i < 2 * FB_NORM_BINS; i += blockDim.x)
    if (sb[i]) atomicAdd(&bins[i], sb[i]);
}
static fb_status k_sumsq_bins(const fb_kctx *k, uint64_t *bins, const float *g, size_t n) {
  FB_TRY(prologue(k));
  if (n == 0) return FB_OK;
  unsigned gr = grid_for((int64_t)n, 256);
  if (gr > 1024) gr = 1024;
  sumsq_bins_k<<<gr, 256, 0, k->s->s>>>((unsigned long long *)bins, g, n);
  return launch_check(k, "sumsq_bins");
}

/* fp64 sum: block b sums its fixed contiguous range with a fixed tree; then one thread adds
 * the block partials in order. The partition depends on n only: deterministic. */
#define SUM_THREADS 256
#define SUM_BLOCKS 1024
__global__ void sum_part_k(double *part, const float *x, size_t n, size_t per) {
  __shared__ double sh[SUM_THREADS];
  size_t i0 = (size_t)blockIdx.x * per, i1 = i0 + per < n ? i0 + per : n;
  double s = 0.0;
  for (size_t i = i0 + threadIdx.x; i < i1; i += blockDim.x) s += (double)x[i];
  sh[threadIdx.x] = s;
  __syncthreads();
  for (int w = SUM_THREADS / 2; w > 0; w >>= 1) {
    if ((int)threadIdx.x < w) sh[threadIdx.x] += sh[threadIdx.x + w];
    __syncthreads();
  }
  if (threadIdx.x == 0) part[blockIdx.x] = sh[0];
}
static fb_status k_sum_f64(const fb_kctx *k, double *out, const float *x, size_t n) {
  FB_TRY(prologue(k));
  if (n == 0) return FB_OK;
  size_t per = (n + SUM_BLOCKS - 1) / SUM_BLOCKS;
  unsigned nb = (unsigned)((n + per - 1) / per);
  double *part = (double *)k->s->scratch;
  sum_part_k<<<nb, SUM_THREADS, 0, k->s->s>>>(part, x, n, per);
  sum_rows_in_order_k<<<1, 32, 0, k->s->s>>>(out, part, (int)nb);
  return launch_check(k, "sum_f64");
}

/* ==== casts ================================================================================== */
__global__ void f32_to_bf16_k(bf16 *d, const float *s, size_t n) {
  GRID_STRIDE(i, n) d[i] = fb_f32_to_bf16(s[i]);
}
__global__ void bf16_to_f32_k(float *d, const bf16 *s, size_t n) {
  GRID_STRIDE(i, n) d[i] = fb_bf16_to_f32(s[i]);
}
static fb_status k_cast(const fb_kctx *k, void *dst, fb_dtype dt, const void *src, fb_dtype sty,
                        size_t n) {
  FB_TRY(prologue(k));
  if (n == 0) return FB_OK;
  if (dt == sty) return fb_cuda_device_ops.copy_d2d(k->dev, k->s, dst, src, n * fb_dtype_size(dt));
  unsigned g = grid_for((int64_t)n, 256);
  if (dt == FB_BF16 && sty == FB_F32)
    f32_to_bf16_k<<<g, 256, 0, k->s->s>>>((bf16 *)dst, (const float *)src, n);
  else if (dt == FB_F32 && sty == FB_BF16)
    bf16_to_f32_k<<<g, 256, 0, k->s->s>>>((float *)dst, (const bf16 *)src, n);
  else
    return FB_ERR(FB_EUNSUPPORTED, "rank %d: cuda cast %s -> %s is not supported (allowed: fp32 "
                  "<-> bf16)", k->dev->rank, fb_dtype_name(sty), fb_dtype_name(dt));
  return launch_check(k, "cast");
}

extern "C" const fb_kernels fb_cuda_kernels = {
    .encoder_fwd = k_encoder_fwd,
    .encoder_bwd = k_encoder_bwd,
    .layernorm_fwd = k_layernorm_fwd,
    .layernorm_bwd = k_layernorm_bwd,
    .rmsnorm_fwd = k_rmsnorm_fwd,
    .rmsnorm_bwd = k_rmsnorm_bwd,
    .matmul_fwd = k_matmul_fwd,
    .matmul_bwd = k_matmul_bwd,
    .attention_fwd = k_attention_fwd,
    .attention_bwd = k_attention_bwd,
    .rope_fwd = k_rope_fwd,
    .rope_bwd = k_rope_bwd,
    .gelu_fwd = k_gelu_fwd,
    .gelu_bwd = k_gelu_bwd,
    .swiglu_fwd = k_swiglu_fwd,
    .swiglu_bwd = k_swiglu_bwd,
    .add = k_add,
    .xent_fwd_bwd = k_xent_fwd_bwd,
    .acc_f32 = k_acc_f32,
    .scale_f32 = k_scale_f32,
    .adamw = k_adamw,
    .sgd = k_sgd,
    .sumsq_bins = k_sumsq_bins,
    .sum_f64 = k_sum_f64,
    .cast = k_cast,
};

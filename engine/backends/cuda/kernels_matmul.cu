/* The cuda matmul family: matmul_fwd/bwd and the fused MLP ops matmul_gelu_fwd /
 * matmul_bwd_gelu, as GEMMs on the column-major view of the row-major data (fp32 accumulation,
 * no TF32). Bias, GELU (keeping the pre-activation as the auxiliary output), GELU's gradient
 * and the bias gradient run in cuBLASLt's GEMM epilogues (gemm_lt.h); where cuBLASLt offers
 * no algorithm for a shape, or an operand breaks the epilogues' alignment rules, the same
 * shape always takes the unfused path instead: cublasGemmEx, then the bias add, the
 * deterministic bias gradient or the GELU kernels. Which path runs depends only on the shape,
 * the dtype and the operands' 16-byte alignment, which every strategy gives alike, so the
 * strategies keep computing the same bits. Helpers and conventions: kernels.cuh. */
#include "kernels.cuh"

#include "gemm_lt.h"

/* ==== the unfused kernels ====================================================================== */
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
/* dbias[c] += g[c]: the epilogue's bias gradient (overwritten by cuBLASLt) into the
 * accumulating one, one rounding. */
template <typename E>
__global__ void bias_acc_k(E *dbias, const E *g, int OC) {
  int c = blockIdx.x * blockDim.x + threadIdx.x;
  if (c < OC) st(dbias, c, ld(dbias, c) + ld(g, c));
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

static fb_status bias_add(const fb_kctx *k, void *out, const void *bias, int N, int OC) {
  unsigned g = grid_for((int64_t)N * OC, 256);
  if (k->act == FB_F32)
    bias_add_k<float><<<g, 256, 0, k->s->s>>>((float *)out, (const float *)bias, N, OC);
  else
    bias_add_k<bf16><<<g, 256, 0, k->s->s>>>((bf16 *)out, (const bf16 *)bias, N, OC);
  return launch_check(k, "bias_add");
}

/* dbias += the column sums of dout [N, OC] in fixed row chunks (the unfused path). */
static fb_status dbias_kernels(const fb_kctx *k, void *dbias, const void *dout, int N, int OC) {
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

/* ==== forward ==================================================================================== */
/* out^T (OC x N) = w (OC x C, stored as C x OC col-major -> op T) * inp^T (C x N), with the
 * epilogue `epi` (bias and/or GELU with pre as the auxiliary output). *ran: see lt_gemm. */
static fb_status fwd_lt(const fb_kctx *k, cublasLtEpilogue_t epi, void *out, void *pre,
                        const void *inp, const void *w, const void *bias, int N, int C, int OC,
                        bool *ran) {
  const fb_lt_epilogue e = {.epi = epi, .bias = bias, .aux = pre, .ldaux = OC};
  return fb_lt_gemm(k, CUBLAS_OP_T, CUBLAS_OP_N, OC, N, C, w, C, inp, C, 0.0f, out, OC, &e, ran);
}

fb_status fb_cuda_matmul_fwd(const fb_kctx *k, void *out, const void *inp, const void *w,
                             const void *bias, int N, int C, int OC) {
  FB_TRY(prologue(k));
  if (k->act != FB_F32 && k->act != FB_BF16) return bad_dtype(k, "matmul_fwd");
  if (N == 0 || OC == 0) return FB_OK;
  if (C == 0) return fb_cuda_device_ops.memset0(k->dev, k->s, out,
                                                (size_t)N * OC * fb_dtype_size(k->act));
  bool ran = false;
  if (bias) FB_TRY(fwd_lt(k, CUBLASLT_EPILOGUE_BIAS, out, NULL, inp, w, bias, N, C, OC, &ran));
  if (ran) return FB_OK;
  FB_TRY(gemm(k, CUBLAS_OP_T, CUBLAS_OP_N, OC, N, C, w, C, inp, C, 0.0f, out, OC));
  return bias ? bias_add(k, out, bias, N, OC) : FB_OK;
}

fb_status fb_cuda_matmul_gelu_fwd(const fb_kctx *k, void *out, void *pre, const void *inp,
                                  const void *w, const void *bias, int N, int C, int OC) {
  FB_TRY(prologue(k));
  if (k->act != FB_F32 && k->act != FB_BF16) return bad_dtype(k, "matmul_gelu_fwd");
  if (N == 0 || OC == 0) return FB_OK;
  bool ran = false;
  if (C > 0)
    FB_TRY(fwd_lt(k, bias ? CUBLASLT_EPILOGUE_GELU_AUX_BIAS : CUBLASLT_EPILOGUE_GELU_AUX, out,
                  pre, inp, w, bias, N, C, OC, &ran));
  if (ran) return FB_OK;
  FB_TRY(fb_cuda_matmul_fwd(k, pre, inp, w, bias, N, C, OC));
  return fb_cuda_gelu_fwd(k, out, pre, (size_t)N * OC);
}

/* ==== backward =================================================================================== */
/* dw^T (C x OC) += inp^T (C x N) * dout (N x OC), and dbias += the column sums of dout: the
 * BGRADB epilogue (the reduction of op(B) = dout over k = N) writes them to the stream's
 * scratch, one small kernel adds them. */
static fb_status weight_grads(const fb_kctx *k, void *dw, void *dbias, const void *dout,
                              const void *inp, int N, int C, int OC) {
  if (N == 0) return FB_OK;
  if (C > 0 && OC > 0 && dbias) {
    bool ran = false;
    const fb_lt_epilogue e = {
        .epi = CUBLASLT_EPILOGUE_BGRADB, .bias = k->s->scratch, .aux = NULL, .ldaux = 0};
    if ((size_t)OC * fb_dtype_size(k->act) <= FB_CUDA_SCRATCH_BYTES)
      FB_TRY(fb_lt_gemm(k, CUBLAS_OP_N, CUBLAS_OP_T, C, OC, N, inp, C, dout, OC, 1.0f, dw, C, &e,
                        &ran));
    if (ran) {
      unsigned g = (unsigned)((OC + 255) / 256);
      if (k->act == FB_F32)
        bias_acc_k<float><<<g, 256, 0, k->s->s>>>((float *)dbias, (const float *)k->s->scratch,
                                                   OC);
      else
        bias_acc_k<bf16><<<g, 256, 0, k->s->s>>>((bf16 *)dbias, (const bf16 *)k->s->scratch, OC);
      return launch_check(k, "matmul_dbias_acc");
    }
  }
  if (C > 0 && OC > 0)
    FB_TRY(gemm(k, CUBLAS_OP_N, CUBLAS_OP_T, C, OC, N, inp, C, dout, OC, 1.0f, dw, C));
  return dbias && OC > 0 ? dbias_kernels(k, dbias, dout, N, OC) : FB_OK;
}

/* dinp^T (C x N) = w^T (C x OC) * dout^T (OC x N) */
static fb_status input_grad(const fb_kctx *k, void *dinp, const void *dout, const void *w, int N,
                            int C, int OC) {
  if (!dinp || N == 0 || C == 0) return FB_OK;
  if (OC == 0)
    return fb_cuda_device_ops.memset0(k->dev, k->s, dinp, (size_t)N * C * fb_dtype_size(k->act));
  return gemm(k, CUBLAS_OP_N, CUBLAS_OP_N, C, N, OC, w, C, dout, OC, 0.0f, dinp, C);
}

fb_status fb_cuda_matmul_bwd(const fb_kctx *k, void *dinp, void *dw, void *dbias,
                             const void *dout, const void *inp, const void *w, int N, int C,
                             int OC) {
  FB_TRY(prologue(k));
  if (k->act != FB_F32 && k->act != FB_BF16) return bad_dtype(k, "matmul_bwd");
  FB_TRY(input_grad(k, dinp, dout, w, N, C, OC));
  return weight_grads(k, dw, dbias, dout, inp, N, C, OC);
}

fb_status fb_cuda_matmul_bwd_gelu(const fb_kctx *k, void *dpre, void *dw, void *dbias,
                                  const void *dout, const void *inp, const void *w,
                                  const void *pre, int N, int C, int OC) {
  FB_TRY(prologue(k));
  if (k->act != FB_F32 && k->act != FB_BF16) return bad_dtype(k, "matmul_bwd_gelu");
  bool ran = false;
  if (N > 0 && C > 0 && OC > 0) {
    /* dpre^T = dGELU(w^T dout^T) against pre^T (C x N, ld C: the forward's D layout) */
    const fb_lt_epilogue e = {
        .epi = CUBLASLT_EPILOGUE_DGELU, .bias = NULL, .aux = (void *)pre, .ldaux = C};
    FB_TRY(fb_lt_gemm(k, CUBLAS_OP_N, CUBLAS_OP_N, C, N, OC, w, C, dout, OC, 0.0f, dpre, C, &e,
                      &ran));
  }
  if (!ran) {
    FB_TRY(input_grad(k, dpre, dout, w, N, C, OC));
    if (N > 0 && C > 0) FB_TRY(fb_cuda_gelu_bwd(k, dpre, pre, dpre, (size_t)N * C));
  }
  return weight_grads(k, dw, dbias, dout, inp, N, C, OC);
}

/* The cuda matmul: cuBLAS GEMMs (fp32 accumulation, no TF32) on the column-major view of the
 * row-major data, the bias add and the deterministic bias gradient. Helpers and conventions:
 * kernels.cuh. */
#include "kernels.cuh"

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

fb_status fb_cuda_matmul_fwd(const fb_kctx *k, void *out, const void *inp, const void *w,
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

fb_status fb_cuda_matmul_bwd(const fb_kctx *k, void *dinp, void *dw, void *dbias,
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

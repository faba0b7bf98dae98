/* cuBLASLt GEMMs with an epilogue, for the cuda matmul family (kernels_matmul.cu): bias,
 * GELU keeping its input as the auxiliary output, GELU's gradient against that input, the
 * bias gradient. One call is one cublasLtMatmul on the kernel context's stream and workspace,
 * its algorithm the first one cuBLASLt's heuristic offers for the problem, cached per device
 * by the problem (shapes, leading dimensions, dtype, epilogue), so a problem always runs the
 * same algorithm. It does not fall back: it says when it did not run (no algorithm, or
 * operands off the 16-byte alignment the algorithms are asked for), the caller runs its
 * unfused kernels. */
#ifndef FB_CUDA_GEMM_LT_H
#define FB_CUDA_GEMM_LT_H
#include <stdbool.h>
#include <stdint.h>

#include <cublasLt.h>

#include "cuda_impl.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef struct fb_lt_epilogue {
  cublasLtEpilogue_t epi;
  const void *bias; /* BIAS*: the vector added (length m); BGRAD*: where the gradient is written
                       (BGRADB: length n), in the GEMM's dtype */
  void *aux;        /* GELU_AUX*: the pre-activation written; DGELU*: read (m x n) */
  int64_t ldaux;    /* its leading dimension (a multiple of 8, at least m) */
} fb_lt_epilogue;

/* D (m x n, leading dimension ldd) = op(A) op(B) + beta D in cuBLAS's column-major terms, in
 * k->act (fp32 or bf16) with fp32 accumulation, through the epilogue e. *ran = false, with
 * nothing launched and FB_OK, when cuBLASLt has no algorithm for it or an operand or leading
 * dimension is not 16-byte aligned. */
fb_status fb_lt_gemm(const fb_kctx *k, cublasOperation_t ta, cublasOperation_t tb, int m, int n,
                     int kk, const void *A, int lda, const void *B, int ldb, float beta, void *D,
                     int ldd, const fb_lt_epilogue *e, bool *ran);
/* The device's cuBLASLt handle and algorithm cache: created by the device's init, released by
 * its fini. */
fb_status fb_lt_init(fb_device *d);
void fb_lt_fini(fb_device *d);

#ifdef __cplusplus
}
#endif
#endif

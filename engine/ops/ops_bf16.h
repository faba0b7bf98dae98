/* The CPU ops with bf16 activations and gathered parameters (mixed precision), following the
 * rules of the CUDA kernels (engine/backends/cuda/kernels*.cu): bf16 storage, fp32 arithmetic,
 * every stored result rounded to bf16 to nearest even (fb_f32_to_bf16); statistics (mean,
 * rstd, lse) and losses fp32 / fp64 as kernels.h types them. Each op widens its operands to
 * fp32, runs the fp32 op of ops.h on them and rounds the outputs, so the arithmetic is exactly
 * the fp32 op's and results are bitwise independent of the thread count.
 * Accumulating outputs: a "+=" gradient is formed in fp32 and rounded ONCE per call:
 * dw, db, dbias (norms, matmul) as bf16(dw + fp32 sum of the call's rows), as cuBLAS with
 * beta = 1 and the CUDA column sums do; dinp of the norms as bf16(dinp + fp32 term); the
 * embedding gradients dwte and dwpe start from their stored value and take every token's
 * contribution in fp32, in token order, then round once (never a bf16 sum per token).
 * Matmul forward with a bias rounds twice, as the CUDA kernel does (cuBLAS writes bf16, the
 * bias add rounds again): out = bf16(bf16(x w^T) + bias).
 * Scratch: fp32 copies live in fb_ops_scratch (bf16_scratch.c); element-wise ops work in
 * fixed blocks on the stack. Errors: FB_ENOMEM when the scratch cannot grow.
 * Arguments are those of the fb_kernels entries (kernels.h); shapes are checked by the caller
 * (cpu_kernels.c). This header does not record, time or check devices. */
#ifndef FB_OPS_BF16_H
#define FB_OPS_BF16_H
#include <stddef.h>
#include <stdint.h>

#include "../core/status.h"

/* This thread's scratch, at least `bytes` bytes, 64-byte aligned, contents undefined, valid
 * until this thread's next call; NULL when out of memory. See bf16_scratch.c. */
void *fb_ops_scratch(size_t bytes);

typedef uint16_t fb_bf16;

fb_status fb_encoder_fwd_bf16(fb_bf16 *out, const int32_t *tok, const fb_bf16 *wte,
                              const fb_bf16 *wpe, int B, int T, int C);
fb_status fb_encoder_bwd_bf16(fb_bf16 *dwte, fb_bf16 *dwpe, const fb_bf16 *dout,
                              const int32_t *tok, int B, int T, int C);
fb_status fb_layernorm_fwd_bf16(fb_bf16 *out, float *mean, float *rstd, const fb_bf16 *inp,
                                const fb_bf16 *w, const fb_bf16 *b, int N, int C, float eps);
fb_status fb_layernorm_bwd_bf16(fb_bf16 *dinp, fb_bf16 *dw, fb_bf16 *db, const fb_bf16 *dout,
                                const fb_bf16 *inp, const fb_bf16 *w, const float *mean,
                                const float *rstd, int N, int C);
fb_status fb_rmsnorm_fwd_bf16(fb_bf16 *out, float *rstd, const fb_bf16 *inp, const fb_bf16 *w,
                              int N, int C, float eps);
fb_status fb_rmsnorm_bwd_bf16(fb_bf16 *dinp, fb_bf16 *dw, const fb_bf16 *dout,
                              const fb_bf16 *inp, const fb_bf16 *w, const float *rstd, int N,
                              int C);
fb_status fb_matmul_fwd_bf16(fb_bf16 *out, const fb_bf16 *inp, const fb_bf16 *w,
                             const fb_bf16 *bias, int N, int C, int OC);
fb_status fb_matmul_bwd_bf16(fb_bf16 *dinp, fb_bf16 *dw, fb_bf16 *dbias, const fb_bf16 *dout,
                             const fb_bf16 *inp, const fb_bf16 *w, int N, int C, int OC);
/* scratch: fb_attention_scratch_bytes() bytes (the fp32 op's, used as floats). */
fb_status fb_attention_fwd_bf16(fb_bf16 *out, float *lse, const fb_bf16 *q, const fb_bf16 *k,
                                const fb_bf16 *v, int B, int T, int H, int KVH, int hd, int ldq,
                                int ldkv, float *scratch);
fb_status fb_attention_bwd_bf16(fb_bf16 *dq, fb_bf16 *dk, fb_bf16 *dv, const fb_bf16 *dout,
                                const fb_bf16 *q, const fb_bf16 *k, const fb_bf16 *v,
                                const fb_bf16 *out, const float *lse, int B, int T, int H,
                                int KVH, int hd, int ldq, int ldkv, float *scratch);
fb_status fb_rope_fwd_bf16(fb_bf16 *x, int B, int T, int nh, int hd, int ld, double theta);
fb_status fb_rope_bwd_bf16(fb_bf16 *dx, int B, int T, int nh, int hd, int ld, double theta);
fb_status fb_gelu_fwd_bf16(fb_bf16 *out, const fb_bf16 *inp, size_t n);
fb_status fb_gelu_bwd_bf16(fb_bf16 *dinp, const fb_bf16 *inp, const fb_bf16 *dout, size_t n);
fb_status fb_swiglu_fwd_bf16(fb_bf16 *out, const fb_bf16 *a, const fb_bf16 *b, size_t n);
fb_status fb_swiglu_bwd_bf16(fb_bf16 *da, fb_bf16 *db, const fb_bf16 *dout, const fb_bf16 *a,
                             const fb_bf16 *b, size_t n);
fb_status fb_add_bf16(fb_bf16 *out, const fb_bf16 *a, const fb_bf16 *b, size_t n);
fb_status fb_xent_fwd_bwd_bf16(fb_bf16 *logits, double *loss_sum, const int32_t *targets,
                               int N, int V, int ld, float dscale);

#endif

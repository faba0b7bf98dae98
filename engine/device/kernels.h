/* The kernel table every executing device provides, and the wrappers the model calls.
 * A wrapper (fb_k_*) fills an fb_op_cost from the shapes, stamps start/end marks on the
 * stream, runs the device's kernel (or, on sim, lets the device account the cost) and hands
 * the record to the recorder. Kernels never allocate: scratch is passed in.
 *
 * Conventions (the same on every device, checked by the gradient tests):
 *  - Activations are row-major [N, C] with N = B*T tokens; weights are [out, in] (PyTorch).
 *  - "dinp" of layernorm/rmsnorm ACCUMULATES (+=) — it is the residual stream's gradient.
 *    "dinp" of matmul and every other d-activation is OVERWRITTEN (=).
 *  - Every weight / bias gradient ACCUMULATES (+=) into a buffer the caller zeroed.
 *  - `act` pointers have the context's compute dtype (fp32 on cpu; fp32 or bf16 on cuda);
 *    statistics (mean, rstd, lse), losses and optimizer state are fp32 / fp64 as typed.
 * What this file does not do: decide where buffers live or when they are freed. */
#ifndef FB_KERNELS_H
#define FB_KERNELS_H
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "device.h"

#define FB_NORM_BINS 256 /* one bin per fp32 exponent; see sumsq_bins */
#define FB_NORM_LIMBS 10 /* 640 bits: the exact sum of squares as an integer (fb_norm_bins_exact) */

typedef struct fb_kctx {
  fb_device *dev;
  fb_stream *s;
  fb_dtype act; /* compute dtype of activations and gathered parameters */
  int unit;     /* unit being computed (for the record), -1 outside units */
  int param;    /* 1 + model id of the parameter the op applies (names its trace slice), 0: none */
} fb_kctx;

typedef struct fb_adamw_args {
  float lr, beta1, beta2, eps, weight_decay;
  float bias_corr1, bias_corr2; /* 1 - beta^t */
  float grad_scale;             /* multiplies g before use (clipping coefficient) */
} fb_adamw_args;

typedef struct fb_sgd_args {
  float lr, momentum, weight_decay, grad_scale;
} fb_sgd_args;

/* The cost records the wrappers fill, for tools that price an op without running it (validate
 * --dataset). GEMM: `batch` products of m x n x k plus extra_bytes of traffic. Attention: one
 * FlashAttention-style pass of `products` T x T x hd products per head (forward 2, backward
 * 5: QK^T recomputed, dV, dP, dQ, dK), causal or not. */
fb_op_cost fb_op_gemm_cost(const char *name, fb_dtype t, double m, double n, double kk,
                           double batch, double extra_bytes);
fb_op_cost fb_op_attention_cost(const char *name, fb_dtype t, int B, int T, int H, int KVH,
                                int hd, double products, bool causal);

#define FB_KARGS const fb_kctx *k
typedef struct fb_kernels {
  /* out[B,T,C] = wte[tok] (+ wpe[t]); wpe may be NULL (Llama). */
  fb_status (*encoder_fwd)(FB_KARGS, void *out, const int32_t *tok, const void *wte,
                           const void *wpe, int B, int T, int C);
  /* dwte[tok] += dout, dwpe[t] += dout (dwpe may be NULL); tokens in order (deterministic). */
  fb_status (*encoder_bwd)(FB_KARGS, void *dwte, void *dwpe, const void *dout,
                           const int32_t *tok, int B, int T, int C);
  fb_status (*layernorm_fwd)(FB_KARGS, void *out, float *mean, float *rstd, const void *inp,
                             const void *w, const void *b, int N, int C, float eps);
  fb_status (*layernorm_bwd)(FB_KARGS, void *dinp, void *dw, void *db, const void *dout,
                             const void *inp, const void *w, const float *mean,
                             const float *rstd, int N, int C);
  fb_status (*rmsnorm_fwd)(FB_KARGS, void *out, float *rstd, const void *inp, const void *w,
                           int N, int C, float eps);
  fb_status (*rmsnorm_bwd)(FB_KARGS, void *dinp, void *dw, const void *dout, const void *inp,
                           const void *w, const float *rstd, int N, int C);
  /* out[N,OC] = inp[N,C] @ w[OC,C]^T + bias[OC] (bias may be NULL). */
  fb_status (*matmul_fwd)(FB_KARGS, void *out, const void *inp, const void *w, const void *bias,
                          int N, int C, int OC);
  /* dinp = dout @ w (skipped when dinp == NULL); dw += dout^T @ inp; dbias += sum_rows dout. */
  fb_status (*matmul_bwd)(FB_KARGS, void *dinp, void *dw, void *dbias, const void *dout,
                          const void *inp, const void *w, int N, int C, int OC);
  /* The MLP's first linear and its activation in one op: pre[N,OC] = inp @ w^T + bias (bias
   * may be NULL), out[N,OC] = gelu(pre) (GELU's tanh form, as gelu_fwd). Both are written:
   * pre is what the backward needs. cuda: one cuBLASLt GEMM with the GELU_AUX_BIAS epilogue
   * (pre is the auxiliary output; out is GELU of the unrounded sum, so in bf16 out may differ
   * from gelu_fwd(pre) in the last bit: every strategy runs this same op, so they still agree
   * bitwise); the cpu runs matmul_fwd then gelu_fwd. */
  fb_status (*matmul_gelu_fwd)(FB_KARGS, void *out, void *pre, const void *inp, const void *w,
                               const void *bias, int N, int C, int OC);
  /* The backward of y = gelu(pre) @ w^T + bias whose input inp = gelu(pre) [N,C]: dw +=
   * dout^T @ inp, dbias += sum_rows dout (dbias may be NULL), dpre = gelu'(pre) * (dout @ w)
   * (OVERWRITTEN). cuda: the input-gradient GEMM with the DGELU epilogue reading pre; the cpu
   * runs matmul_bwd then gelu_bwd. */
  fb_status (*matmul_bwd_gelu)(FB_KARGS, void *dpre, void *dw, void *dbias, const void *dout,
                               const void *inp, const void *w, const void *pre, int N, int C,
                               int OC);
  /* Causal grouped-query attention. q[B,T,H,hd] rows of stride ldq, k and v [B,T,KVH,hd] rows
   * of stride ldkv (so q/k/v may live inside one fused qkv buffer). out[B,T,H*hd] dense.
   * Saves only lse[B,H,T] (log-sum-exp of each query's scaled scores) for backward.
   * scratch: fb_attention_scratch_bytes() bytes. */
  fb_status (*attention_fwd)(FB_KARGS, void *out, float *lse, const void *q, const void *kk,
                             const void *v, int B, int T, int H, int KVH, int hd, int ldq,
                             int ldkv, void *scratch);
  /* dq, dk, dv (same layouts/strides as q, k, v) are OVERWRITTEN. */
  fb_status (*attention_bwd)(FB_KARGS, void *dq, void *dk, void *dv, const void *dout,
                             const void *q, const void *kk, const void *v, const void *out,
                             const float *lse, int B, int T, int H, int KVH, int hd, int ldq,
                             int ldkv, void *scratch);
  /* Rotary embedding in place on x[B,T,nh,hd] (row stride ld): pairs (i, i+hd/2) (Llama's
   * "rotate half"), angle t * theta^(-2i/hd). bwd applies the inverse rotation to dx. */
  fb_status (*rope_fwd)(FB_KARGS, void *x, int B, int T, int nh, int hd, int ld, float theta);
  fb_status (*rope_bwd)(FB_KARGS, void *dx, int B, int T, int nh, int hd, int ld, float theta);
  /* GELU, tanh approximation (GPT-2). */
  fb_status (*gelu_fwd)(FB_KARGS, void *out, const void *inp, size_t n);
  fb_status (*gelu_bwd)(FB_KARGS, void *dinp, const void *inp, const void *dout, size_t n);
  /* out = silu(a) * b (Llama FFN: a = w1 x, b = w3 x). */
  fb_status (*swiglu_fwd)(FB_KARGS, void *out, const void *a, const void *b, size_t n);
  fb_status (*swiglu_bwd)(FB_KARGS, void *da, void *db, const void *dout, const void *a,
                          const void *b, size_t n);
  /* out = a + b (out may alias a or b). */
  fb_status (*add)(FB_KARGS, void *out, const void *a, const void *b, size_t n);
  /* Softmax cross-entropy on logits[N,V] (rows ld >= V apart) in place: logits become
   * dlogits * dscale (softmax - onehot) * dscale; loss_sum[0] += sum over rows of
   * -log p[target] (fp64, rows in order). Rows whose target is -1 are ignored (zero gradient,
   * no loss). Columns [V, ld) are padding (a vocabulary padded for the GEMMs): never read,
   * their gradient written as zero. */
  fb_status (*xent_fwd_bwd)(FB_KARGS, void *logits, double *loss_sum, const int32_t *targets,
                            int N, int V, int ld, float dscale);

  /* fp32 vectors: parameters, gradients, optimizer state. */
  fb_status (*acc_f32)(FB_KARGS, float *y, const float *x, size_t n);       /* y += x */
  /* y *= a in y's dtype dt: fp32, or bf16 (the product in fp32, rounded to nearest even) */
  fb_status (*scale)(FB_KARGS, void *y, fb_dtype dt, float a, size_t n);
  fb_status (*adamw)(FB_KARGS, float *p, const float *g, float *m, float *v, size_t n,
                     const fb_adamw_args *a);
  /* adamw, and out[0, n) (out_dt: bf16 or fp32) = the updated p rounded to out_dt (round to
   * nearest even, cast's rounding): the same bits as adamw followed by cast, in one pass (a
   * mixed-precision run's working copy, written by the optimizer). */
  fb_status (*adamw_cast)(FB_KARGS, float *p, const float *g, float *m, float *v, void *out,
                          fb_dtype out_dt, size_t n, const fb_adamw_args *a);
  fb_status (*sgd)(FB_KARGS, float *p, const float *g, float *mom, size_t n,
                   const fb_sgd_args *a);
  /* Exact sum of squares: for each nonzero g, with g = mant * 2^(e-150) (mant < 2^24), adds
   * mant^2 * 4^(e - e') to a bin e' <= e: bins[2e'] += its low 32 bits, bins[2e'+1] += the
   * rest, under 2^32 to each word per element (the cpu folds runs of elements into one bin,
   * the cuda kernel a warp's window of 2 x 8 exponents into two). The bins' exact sum is
   * order-free, so the global norm is bit-identical however the gradient is sharded. See
   * fb_norm_from_bins. */
  fb_status (*sumsq_bins)(FB_KARGS, uint64_t *bins, const float *g, size_t n);
  /* out[0] += sum of x in index order, accumulated in fp64. */
  fb_status (*sum_f64)(FB_KARGS, double *out, const float *x, size_t n);
  /* dst = (dt) src; fp32 <-> bf16 (round to nearest even). */
  fb_status (*cast)(FB_KARGS, void *dst, fb_dtype dt, const void *src, fb_dtype st, size_t n);
  /* Block quantisation (zeropp; formulas in engine/ops/elementwise.h). x (xt: fp32 or bf16) is
   * nseg segments of seglen elements; each segment is cut into blocks of `group` elements (the
   * last one shorter) with one fp32 scale each: scales[s * ceil(seglen/group) + b]. q (FB_I8
   * bytes) = the values, bits 8 (one a byte) or 4 (two a byte; seglen even), segment s at
   * byte s * seglen * bits / 8. rows > 1 reorders the segments as it writes them (qgZ's
   * "tensor slice reordering", DeepSpeed's swizzle_quant): input segment s = a * (nseg/rows)
   * + b of a rows x (nseg/rows) grid is stored at position b * rows + a (its scales with it);
   * rows 1 keeps the order. Overwrites q and scales. */
  fb_status (*quantize)(FB_KARGS, void *q, float *scales, const void *x, fb_dtype xt,
                        size_t nseg, size_t seglen, int group, int bits, int rows);
  /* out[i] (ot: fp32 or bf16) = the sum over terms t = 0..nterm-1, in that order and in fp32,
   * of element i of term t dequantised, i < termlen; term t is the termlen / seglen segments
   * starting at segment t * termlen / seglen of a quantize() layout (termlen a multiple of
   * seglen). nterm 1 is a plain dequantisation. Overwrites out. */
  fb_status (*dequant_sum)(FB_KARGS, void *out, fb_dtype ot, const void *q, const float *scales,
                           size_t nterm, size_t termlen, size_t seglen, int group, int bits);
} fb_kernels;
#undef FB_KARGS

/* Scratch attention needs (bytes), for either direction, on the given device. */
size_t fb_attention_scratch_bytes(const fb_device *d, int B, int T, int H, int KVH, int hd);
/* What that figure is made of (attn_scratch.c): the number of per-thread slots, a constant
 * independent of the host (the attention ops never run on more threads than this), and the
 * elements one slot needs for sequence length T. */
int fb_ops_attn_slots(void);
size_t fb_ops_attn_scratch_elems(int T);
/* sqrt of the exact sum of squares held in merged bins (2*FB_NORM_BINS words); a function of
 * the exact sum alone, not of how it is spread over the words. */
double fb_norm_from_bins(const uint64_t *bins);
/* The exact sum of the bins times 4^150, as a little-endian integer of FB_NORM_LIMBS words:
 * two sets of bins hold the same sum exactly when these words are equal. */
void fb_norm_bins_exact(const uint64_t *bins, uint64_t *limbs);

/* Wrappers: same arguments as the table, plus recording and cost. */
fb_status fb_k_encoder_fwd(const fb_kctx *k, void *out, const int32_t *tok, const void *wte,
                           const void *wpe, int B, int T, int C);
fb_status fb_k_encoder_bwd(const fb_kctx *k, void *dwte, void *dwpe, const void *dout,
                           const int32_t *tok, int B, int T, int C);
fb_status fb_k_layernorm_fwd(const fb_kctx *k, void *out, float *mean, float *rstd,
                             const void *inp, const void *w, const void *b, int N, int C,
                             float eps);
fb_status fb_k_layernorm_bwd(const fb_kctx *k, void *dinp, void *dw, void *db, const void *dout,
                             const void *inp, const void *w, const float *mean,
                             const float *rstd, int N, int C);
fb_status fb_k_rmsnorm_fwd(const fb_kctx *k, void *out, float *rstd, const void *inp,
                           const void *w, int N, int C, float eps);
fb_status fb_k_rmsnorm_bwd(const fb_kctx *k, void *dinp, void *dw, const void *dout,
                           const void *inp, const void *w, const float *rstd, int N, int C);
fb_status fb_k_matmul_fwd(const fb_kctx *k, void *out, const void *inp, const void *w,
                          const void *bias, int N, int C, int OC);
fb_status fb_k_matmul_bwd(const fb_kctx *k, void *dinp, void *dw, void *dbias, const void *dout,
                          const void *inp, const void *w, int N, int C, int OC);
fb_status fb_k_matmul_gelu_fwd(const fb_kctx *k, void *out, void *pre, const void *inp,
                               const void *w, const void *bias, int N, int C, int OC);
fb_status fb_k_matmul_bwd_gelu(const fb_kctx *k, void *dpre, void *dw, void *dbias,
                               const void *dout, const void *inp, const void *w, const void *pre,
                               int N, int C, int OC);
fb_status fb_k_attention_fwd(const fb_kctx *k, void *out, float *lse, const void *q,
                             const void *kk, const void *v, int B, int T, int H, int KVH, int hd,
                             int ldq, int ldkv, void *scratch);
fb_status fb_k_attention_bwd(const fb_kctx *k, void *dq, void *dk, void *dv, const void *dout,
                             const void *q, const void *kk, const void *v, const void *out,
                             const float *lse, int B, int T, int H, int KVH, int hd, int ldq,
                             int ldkv, void *scratch);
fb_status fb_k_rope_fwd(const fb_kctx *k, void *x, int B, int T, int nh, int hd, int ld,
                        float theta);
fb_status fb_k_rope_bwd(const fb_kctx *k, void *dx, int B, int T, int nh, int hd, int ld,
                        float theta);
fb_status fb_k_gelu_fwd(const fb_kctx *k, void *out, const void *inp, size_t n);
fb_status fb_k_gelu_bwd(const fb_kctx *k, void *dinp, const void *inp, const void *dout,
                        size_t n);
fb_status fb_k_swiglu_fwd(const fb_kctx *k, void *out, const void *a, const void *b, size_t n);
fb_status fb_k_swiglu_bwd(const fb_kctx *k, void *da, void *db, const void *dout, const void *a,
                          const void *b, size_t n);
fb_status fb_k_add(const fb_kctx *k, void *out, const void *a, const void *b, size_t n);
/* The same kernel as fb_k_add, recorded as "grad_add": the backward's sum of two branch
 * gradients, which reads what the two GEMMs before it just wrote. Its own name keeps the
 * in-step calibration from pooling it with the forward's residual add (debug-llama's ran at
 * 4.3 GB/s on cpu-opaque where debug's forward adds ran at 10-12). */
fb_status fb_k_grad_add(const fb_kctx *k, void *out, const void *a, const void *b, size_t n);
fb_status fb_k_xent_fwd_bwd(const fb_kctx *k, void *logits, double *loss_sum,
                            const int32_t *targets, int N, int V, int ld, float dscale);
fb_status fb_k_acc_f32(const fb_kctx *k, float *y, const float *x, size_t n);
fb_status fb_k_scale_f32(const fb_kctx *k, float *y, float a, size_t n);
/* y *= a (dt: fp32 or bf16) recorded under `name` (a gradient's divide pass, ...) and priced as
 * the plain "scale" kernel where the profile measured no rate for the name */
fb_status fb_k_scale(const fb_kctx *k, const char *name, void *y, fb_dtype dt, float a,
                     size_t n);
fb_status fb_k_adamw(const fb_kctx *k, float *p, const float *g, float *m, float *v, size_t n,
                     const fb_adamw_args *a);
fb_status fb_k_adamw_cast(const fb_kctx *k, float *p, const float *g, float *m, float *v,
                          void *out, fb_dtype out_dt, size_t n, const fb_adamw_args *a);
fb_status fb_k_sgd(const fb_kctx *k, float *p, const float *g, float *mom, size_t n,
                   const fb_sgd_args *a);
fb_status fb_k_sumsq_bins(const fb_kctx *k, uint64_t *bins, const float *g, size_t n);
fb_status fb_k_sum_f64(const fb_kctx *k, double *out, const float *x, size_t n);
fb_status fb_k_cast(const fb_kctx *k, void *dst, fb_dtype dt, const void *src, fb_dtype st,
                    size_t n);
/* Records a zero/copy done through the device ops as a memory-bound op (name static). */
fb_status fb_k_quantize(const fb_kctx *k, void *q, float *scales, const void *x, fb_dtype xt,
                        size_t nseg, size_t seglen, int group, int bits, int rows);
fb_status fb_k_dequant_sum(const fb_kctx *k, void *out, fb_dtype ot, const void *q,
                           const float *scales, size_t nterm, size_t termlen, size_t seglen,
                           int group, int bits);
/* Blocks of `group` in nseg segments of seglen elements (the scales a quantize() writes). */
static inline size_t fb_quant_nscales(size_t nseg, size_t seglen, int group) {
  return nseg * ((seglen + (size_t)group - 1) / (size_t)group);
}
fb_status fb_k_memset0(const fb_kctx *k, const char *name, void *p, size_t bytes);
fb_status fb_k_copy(const fb_kctx *k, const char *name, void *dst, const void *src, size_t bytes);

#endif

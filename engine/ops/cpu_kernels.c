/* The cpu kernel table: checks the compute dtype and forwards each entry to its op. fp32
 * activations run the f32 ops; bf16 activations (mixed precision) run the bf16 ops
 * (ops_bf16.h: bf16 storage, fp32 math, round to nearest even, the CUDA kernels' rules);
 * fp64 activations select the f64 ops for the forward/backward entries (stats then hold
 * doubles): the whole-model gradient checks run the real transformer code in double through
 * this path. Ops run synchronously on the caller, which is the cpu device's compute stream.
 * Does not record or time anything: the fb_k_* wrappers do. */
#include "cpu_kernels.h"

#include <string.h>

#include "elementwise.h"
#include "ops.h"
#include "ops_bf16.h"

/* After the fp64 and bf16 branches: what is left must be fp32. */
#define NEED_F32(k)                                                                            \
  do {                                                                                         \
    if ((k)->act != FB_F32)                                                                    \
      return FB_ERR(FB_EUNSUPPORTED, "cpu kernels compute in fp32, bf16 (fp32 math) or fp64, "  \
                                     "not %s", fb_dtype_name((k)->act));                       \
  } while (0)

static fb_status cpu_encoder_fwd(const fb_kctx *k, void *out, const int32_t *tok,
                                 const void *wte, const void *wpe, int B, int T, int C) {
  if (k->act == FB_F64) { /* fp64 reference path (whole-model gradient checks) */
    fb_encoder_fwd_f64(out, tok, wte, wpe, B, T, C);
    return FB_OK;
  }
  if (k->act == FB_BF16) return fb_encoder_fwd_bf16(out, tok, wte, wpe, B, T, C);
  NEED_F32(k);
  fb_encoder_fwd_f32(out, tok, wte, wpe, B, T, C);
  return FB_OK;
}
static fb_status cpu_encoder_bwd(const fb_kctx *k, void *dwte, void *dwpe, const void *dout,
                                 const int32_t *tok, int B, int T, int C) {
  if (k->act == FB_F64) { /* fp64 reference path (whole-model gradient checks) */
    fb_encoder_bwd_f64(dwte, dwpe, dout, tok, B, T, C);
    return FB_OK;
  }
  if (k->act == FB_BF16) return fb_encoder_bwd_bf16(dwte, dwpe, dout, tok, B, T, C);
  NEED_F32(k);
  fb_encoder_bwd_f32(dwte, dwpe, dout, tok, B, T, C);
  return FB_OK;
}
static fb_status cpu_layernorm_fwd(const fb_kctx *k, void *out, float *mean, float *rstd,
                                   const void *inp, const void *w, const void *b, int N, int C,
                                   float eps) {
  if (k->act == FB_F64) { /* fp64 reference path (whole-model gradient checks) */
    fb_layernorm_fwd_f64(out, (double *)mean, (double *)rstd, inp, w, b, N, C, eps);
    return FB_OK;
  }
  if (k->act == FB_BF16) return fb_layernorm_fwd_bf16(out, mean, rstd, inp, w, b, N, C, eps);
  NEED_F32(k);
  fb_layernorm_fwd_f32(out, mean, rstd, inp, w, b, N, C, eps);
  return FB_OK;
}
static fb_status cpu_layernorm_bwd(const fb_kctx *k, void *dinp, void *dw, void *db,
                                   const void *dout, const void *inp, const void *w,
                                   const float *mean, const float *rstd, int N, int C) {
  if (k->act == FB_F64) { /* fp64 reference path (whole-model gradient checks) */
    fb_layernorm_bwd_f64(dinp, dw, db, dout, inp, w, (const double *)mean, (const double *)rstd, N, C);
    return FB_OK;
  }
  if (k->act == FB_BF16)
    return fb_layernorm_bwd_bf16(dinp, dw, db, dout, inp, w, mean, rstd, N, C);
  NEED_F32(k);
  fb_layernorm_bwd_f32(dinp, dw, db, dout, inp, w, mean, rstd, N, C);
  return FB_OK;
}
static fb_status cpu_rmsnorm_fwd(const fb_kctx *k, void *out, float *rstd, const void *inp,
                                 const void *w, int N, int C, float eps) {
  if (k->act == FB_F64) { /* fp64 reference path (whole-model gradient checks) */
    fb_rmsnorm_fwd_f64(out, (double *)rstd, inp, w, N, C, eps);
    return FB_OK;
  }
  if (k->act == FB_BF16) return fb_rmsnorm_fwd_bf16(out, rstd, inp, w, N, C, eps);
  NEED_F32(k);
  fb_rmsnorm_fwd_f32(out, rstd, inp, w, N, C, eps);
  return FB_OK;
}
static fb_status cpu_rmsnorm_bwd(const fb_kctx *k, void *dinp, void *dw, const void *dout,
                                 const void *inp, const void *w, const float *rstd, int N,
                                 int C) {
  if (k->act == FB_F64) { /* fp64 reference path (whole-model gradient checks) */
    fb_rmsnorm_bwd_f64(dinp, dw, dout, inp, w, (const double *)rstd, N, C);
    return FB_OK;
  }
  if (k->act == FB_BF16) return fb_rmsnorm_bwd_bf16(dinp, dw, dout, inp, w, rstd, N, C);
  NEED_F32(k);
  fb_rmsnorm_bwd_f32(dinp, dw, dout, inp, w, rstd, N, C);
  return FB_OK;
}
static fb_status cpu_matmul_fwd(const fb_kctx *k, void *out, const void *inp, const void *w,
                                const void *bias, int N, int C, int OC) {
  if (k->act == FB_F64) { /* fp64 reference path (whole-model gradient checks) */
    fb_matmul_fwd_f64(out, inp, w, bias, N, C, OC);
    return FB_OK;
  }
  if (k->act == FB_BF16) return fb_matmul_fwd_bf16(out, inp, w, bias, N, C, OC);
  NEED_F32(k);
  fb_matmul_fwd_f32(out, inp, w, bias, N, C, OC);
  return FB_OK;
}
static fb_status cpu_matmul_bwd(const fb_kctx *k, void *dinp, void *dw, void *dbias,
                                const void *dout, const void *inp, const void *w, int N, int C,
                                int OC) {
  if (k->act == FB_F64) { /* fp64 reference path (whole-model gradient checks) */
    fb_matmul_bwd_f64(dinp, dw, dbias, dout, inp, w, N, C, OC);
    return FB_OK;
  }
  if (k->act == FB_BF16) return fb_matmul_bwd_bf16(dinp, dw, dbias, dout, inp, w, N, C, OC);
  NEED_F32(k);
  fb_matmul_bwd_f32(dinp, dw, dbias, dout, inp, w, N, C, OC);
  return FB_OK;
}
static fb_status cpu_attention_fwd(const fb_kctx *k, void *out, float *lse, const void *q,
                                   const void *kk, const void *v, int B, int T, int H, int KVH,
                                   int hd, int ldq, int ldkv, void *scratch) {
  if (k->act == FB_F64) {
    if (H % KVH)
      return FB_ERR(FB_EUSAGE, "attention: %d heads are not a multiple of %d kv heads", H, KVH);
    fb_attention_fwd_f64(out, (double *)lse, q, kk, v, B, T, H, KVH, hd, ldq, ldkv, scratch);
    return FB_OK;
  }
  if (H % KVH)
    return FB_ERR(FB_EUSAGE, "attention: %d heads are not a multiple of %d kv heads", H, KVH);
  if (k->act == FB_BF16)
    return fb_attention_fwd_bf16(out, lse, q, kk, v, B, T, H, KVH, hd, ldq, ldkv, scratch);
  NEED_F32(k);
  fb_attention_fwd_f32(out, lse, q, kk, v, B, T, H, KVH, hd, ldq, ldkv, scratch);
  return FB_OK;
}
static fb_status cpu_attention_bwd(const fb_kctx *k, void *dq, void *dk, void *dv,
                                   const void *dout, const void *q, const void *kk,
                                   const void *v, const void *out, const float *lse, int B,
                                   int T, int H, int KVH, int hd, int ldq, int ldkv,
                                   void *scratch) {
  if (k->act == FB_F64) {
    if (H % KVH)
      return FB_ERR(FB_EUSAGE, "attention: %d heads are not a multiple of %d kv heads", H, KVH);
    fb_attention_bwd_f64(dq, dk, dv, dout, q, kk, v, out, (const double *)lse, B, T, H, KVH, hd,
                         ldq, ldkv, scratch);
    return FB_OK;
  }
  if (H % KVH)
    return FB_ERR(FB_EUSAGE, "attention: %d heads are not a multiple of %d kv heads", H, KVH);
  if (k->act == FB_BF16)
    return fb_attention_bwd_bf16(dq, dk, dv, dout, q, kk, v, out, lse, B, T, H, KVH, hd, ldq,
                                 ldkv, scratch);
  NEED_F32(k);
  fb_attention_bwd_f32(dq, dk, dv, dout, q, kk, v, out, lse, B, T, H, KVH, hd, ldq, ldkv,
                       scratch);
  return FB_OK;
}
static fb_status cpu_rope_fwd(const fb_kctx *k, void *x, int B, int T, int nh, int hd, int ld,
                              float theta) {
  if (k->act == FB_F64) {
    fb_rope_fwd_f64(x, B, T, nh, hd, ld, theta);
    return FB_OK;
  }
  if (hd % 2 || hd > 1024)
    return FB_ERR(FB_EUSAGE, "rope: head dim %d must be even and at most 1024", hd);
  if (k->act == FB_BF16) return fb_rope_fwd_bf16(x, B, T, nh, hd, ld, theta);
  NEED_F32(k);
  fb_rope_fwd_f32(x, B, T, nh, hd, ld, theta);
  return FB_OK;
}
static fb_status cpu_rope_bwd(const fb_kctx *k, void *dx, int B, int T, int nh, int hd, int ld,
                              float theta) {
  if (k->act == FB_F64) {
    fb_rope_bwd_f64(dx, B, T, nh, hd, ld, theta);
    return FB_OK;
  }
  if (hd % 2 || hd > 1024)
    return FB_ERR(FB_EUSAGE, "rope: head dim %d must be even and at most 1024", hd);
  if (k->act == FB_BF16) return fb_rope_bwd_bf16(dx, B, T, nh, hd, ld, theta);
  NEED_F32(k);
  fb_rope_bwd_f32(dx, B, T, nh, hd, ld, theta);
  return FB_OK;
}
static fb_status cpu_gelu_fwd(const fb_kctx *k, void *out, const void *inp, size_t n) {
  if (k->act == FB_F64) { /* fp64 reference path (whole-model gradient checks) */
    fb_gelu_fwd_f64(out, inp, n);
    return FB_OK;
  }
  if (k->act == FB_BF16) return fb_gelu_fwd_bf16(out, inp, n);
  NEED_F32(k);
  fb_gelu_fwd_f32(out, inp, n);
  return FB_OK;
}
static fb_status cpu_gelu_bwd(const fb_kctx *k, void *dinp, const void *inp, const void *dout,
                              size_t n) {
  if (k->act == FB_F64) { /* fp64 reference path (whole-model gradient checks) */
    fb_gelu_bwd_f64(dinp, inp, dout, n);
    return FB_OK;
  }
  if (k->act == FB_BF16) return fb_gelu_bwd_bf16(dinp, inp, dout, n);
  NEED_F32(k);
  fb_gelu_bwd_f32(dinp, inp, dout, n);
  return FB_OK;
}
/* The fused MLP entries: the unfused kernels in the order the fused op defines (kernels.h), so
 * the cpu's bits are those of the two ops run one after the other. */
static fb_status cpu_matmul_gelu_fwd(const fb_kctx *k, void *out, void *pre, const void *inp,
                                     const void *w, const void *bias, int N, int C, int OC) {
  FB_TRY(cpu_matmul_fwd(k, pre, inp, w, bias, N, C, OC));
  return cpu_gelu_fwd(k, out, pre, (size_t)N * OC);
}
static fb_status cpu_matmul_bwd_gelu(const fb_kctx *k, void *dpre, void *dw, void *dbias,
                                     const void *dout, const void *inp, const void *w,
                                     const void *pre, int N, int C, int OC) {
  FB_TRY(cpu_matmul_bwd(k, dpre, dw, dbias, dout, inp, w, N, C, OC));
  return cpu_gelu_bwd(k, dpre, pre, dpre, (size_t)N * C);
}
static fb_status cpu_swiglu_fwd(const fb_kctx *k, void *out, const void *a, const void *b,
                                size_t n) {
  if (k->act == FB_F64) { /* fp64 reference path (whole-model gradient checks) */
    fb_swiglu_fwd_f64(out, a, b, n);
    return FB_OK;
  }
  if (k->act == FB_BF16) return fb_swiglu_fwd_bf16(out, a, b, n);
  NEED_F32(k);
  fb_swiglu_fwd_f32(out, a, b, n);
  return FB_OK;
}
static fb_status cpu_swiglu_bwd(const fb_kctx *k, void *da, void *db, const void *dout,
                                const void *a, const void *b, size_t n) {
  if (k->act == FB_F64) { /* fp64 reference path (whole-model gradient checks) */
    fb_swiglu_bwd_f64(da, db, dout, a, b, n);
    return FB_OK;
  }
  if (k->act == FB_BF16) return fb_swiglu_bwd_bf16(da, db, dout, a, b, n);
  NEED_F32(k);
  fb_swiglu_bwd_f32(da, db, dout, a, b, n);
  return FB_OK;
}
static fb_status cpu_add(const fb_kctx *k, void *out, const void *a, const void *b, size_t n) {
  if (k->act == FB_F64) { /* fp64 reference path (whole-model gradient checks) */
    fb_add_f64(out, a, b, n);
    return FB_OK;
  }
  if (k->act == FB_BF16) return fb_add_bf16(out, a, b, n);
  NEED_F32(k);
  fb_add_f32(out, a, b, n);
  return FB_OK;
}
static fb_status cpu_xent(const fb_kctx *k, void *logits, double *loss_sum,
                          const int32_t *targets, int N, int V, int ld, float dscale) {
  for (int n = 0; n < N; n++)
    if (targets[n] < -1 || targets[n] >= V)
      return FB_ERR(FB_EUSAGE, "cross-entropy: target %d of row %d is outside [-1, %d)",
                    targets[n], n, V);
  if (k->act == FB_F64) {
    fb_xent_fwd_bwd_f64(logits, loss_sum, targets, N, V, ld, dscale);
    return FB_OK;
  }
  if (k->act == FB_BF16)
    return fb_xent_fwd_bwd_bf16(logits, loss_sum, targets, N, V, ld, dscale);
  NEED_F32(k);
  fb_xent_fwd_bwd_f32(logits, loss_sum, targets, N, V, ld, dscale);
  return FB_OK;
}
/* fp32 state vectors: independent of the compute dtype. */
static fb_status cpu_acc(const fb_kctx *k, float *y, const float *x, size_t n) {
  fb_acc_f32(y, x, n);
  return FB_OK;
}
static fb_status cpu_scale(const fb_kctx *k, void *y, fb_dtype dt, float a, size_t n) {
  if (dt == FB_F32) {
    fb_scale_f32(y, a, n);
    return FB_OK;
  }
  if (dt != FB_BF16)
    return FB_ERR(FB_EUNSUPPORTED, "scale: dtype %s is not supported (allowed: fp32, bf16)",
                  fb_dtype_name(dt));
  uint16_t *h = y;
  for (size_t i = 0; i < n; i++) h[i] = fb_f32_to_bf16(fb_bf16_to_f32(h[i]) * a);
  return FB_OK;
}
static fb_status cpu_adamw(const fb_kctx *k, float *p, const float *g, float *m, float *v,
                           size_t n, const fb_adamw_args *a) {
  fb_adamw_f32(p, g, m, v, n, a);
  return FB_OK;
}
static fb_status cpu_cast(const fb_kctx *k, void *dst, fb_dtype dt, const void *src,
                          fb_dtype st, size_t n);
/* adamw, then the cast of the updated range: the same bits as the two ops apart */
static fb_status cpu_adamw_cast(const fb_kctx *k, float *p, const float *g, float *m, float *v,
                                void *out, fb_dtype out_dt, size_t n, const fb_adamw_args *a) {
  if (out_dt != FB_BF16 && out_dt != FB_F32)
    return FB_ERR(FB_EUNSUPPORTED, "adamw_cast: output dtype %s is not supported (allowed: "
                  "fp32, bf16)", fb_dtype_name(out_dt));
  fb_adamw_f32(p, g, m, v, n, a);
  if (out_dt == FB_F32) {
    if (out != (void *)p) memcpy(out, p, n * sizeof *p);
    return FB_OK;
  }
  return cpu_cast(k, out, out_dt, p, FB_F32, n);
}
static fb_status cpu_sgd(const fb_kctx *k, float *p, const float *g, float *mom, size_t n,
                         const fb_sgd_args *a) {
  fb_sgd_f32(p, g, mom, n, a);
  return FB_OK;
}
static fb_status cpu_sumsq_bins(const fb_kctx *k, uint64_t *bins, const float *g, size_t n) {
  fb_sumsq_bins_f32(bins, g, n);
  return FB_OK;
}
static fb_status cpu_sum_f64(const fb_kctx *k, double *out, const float *x, size_t n) {
  fb_sum_f64_f32(out, x, n);
  return FB_OK;
}
static fb_status cpu_cast(const fb_kctx *k, void *dst, fb_dtype dt, const void *src,
                          fb_dtype st, size_t n) {
  if (dt == FB_BF16 && st == FB_F32) {
    fb_cast_f32_to_bf16(dst, src, n);
    return FB_OK;
  }
  if (dt == FB_F32 && st == FB_BF16) {
    fb_cast_bf16_to_f32(dst, src, n);
    return FB_OK;
  }
  return FB_ERR(FB_EUNSUPPORTED, "cast %s -> %s: the cpu casts only fp32 <-> bf16",
                fb_dtype_name(st), fb_dtype_name(dt));
}

static bool quant_dtype_ok(fb_dtype t) { return t == FB_F32 || t == FB_BF16; }
static fb_status cpu_quantize(const fb_kctx *k, void *q, float *scales, const void *x,
                              fb_dtype xt, size_t nseg, size_t seglen, int group, int bits,
                              int rows) {
  (void)k;
  if (!quant_dtype_ok(xt))
    return FB_ERR(FB_EUNSUPPORTED, "quantize: input dtype %s is not supported (allowed: fp32, "
                  "bf16)", fb_dtype_name(xt));
  fb_quantize_blocks(q, scales, x, xt, nseg, seglen, group, bits, rows);
  return FB_OK;
}
static fb_status cpu_dequant_sum(const fb_kctx *k, void *out, fb_dtype ot, const void *q,
                                 const float *scales, size_t nterm, size_t termlen,
                                 size_t seglen, int group, int bits) {
  (void)k;
  if (!quant_dtype_ok(ot))
    return FB_ERR(FB_EUNSUPPORTED, "dequant_sum: output dtype %s is not supported (allowed: "
                  "fp32, bf16)", fb_dtype_name(ot));
  fb_dequant_sum(out, ot, q, scales, nterm, termlen, seglen, group, bits);
  return FB_OK;
}

const fb_kernels fb_cpu_kernels = {
    .encoder_fwd = cpu_encoder_fwd,
    .encoder_bwd = cpu_encoder_bwd,
    .layernorm_fwd = cpu_layernorm_fwd,
    .layernorm_bwd = cpu_layernorm_bwd,
    .rmsnorm_fwd = cpu_rmsnorm_fwd,
    .rmsnorm_bwd = cpu_rmsnorm_bwd,
    .matmul_fwd = cpu_matmul_fwd,
    .matmul_bwd = cpu_matmul_bwd,
    .matmul_gelu_fwd = cpu_matmul_gelu_fwd,
    .matmul_bwd_gelu = cpu_matmul_bwd_gelu,
    .attention_fwd = cpu_attention_fwd,
    .attention_bwd = cpu_attention_bwd,
    .rope_fwd = cpu_rope_fwd,
    .rope_bwd = cpu_rope_bwd,
    .gelu_fwd = cpu_gelu_fwd,
    .gelu_bwd = cpu_gelu_bwd,
    .swiglu_fwd = cpu_swiglu_fwd,
    .swiglu_bwd = cpu_swiglu_bwd,
    .add = cpu_add,
    .xent_fwd_bwd = cpu_xent,
    .acc_f32 = cpu_acc,
    .scale = cpu_scale,
    .adamw = cpu_adamw,
    .adamw_cast = cpu_adamw_cast,
    .sgd = cpu_sgd,
    .sumsq_bins = cpu_sumsq_bins,
    .sum_f64 = cpu_sum_f64,
    .cast = cpu_cast,
    .quantize = cpu_quantize,
    .dequant_sum = cpu_dequant_sum,
};

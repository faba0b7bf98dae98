/* Kernel wrappers: describe each op's cost from its shapes, stamp marks around it on the
 * stream, run the device's kernel (or let the sim device account the cost), and record it.
 * The FLOP and byte formulas here are the single source for the report, the trace and the
 * simulator. They count useful model work: a matmul of [N,C]x[C,OC] is 2*N*C*OC FLOPs.
 * This file does no math itself. */
#include "kernels.h"

#include <assert.h>
#include <string.h>

#include "recorder.h"

static inline size_t esz(fb_dtype t) { return fb_dtype_size(t); }

/* Operand declarations: what each kernel reads (R), writes (W) or updates (RW), in bytes.
 * A device that checks order (the opaque device) checks and opens exactly these. */
#define R(p_, n_) {.p = (p_), .bytes = (size_t)(n_), .mode = FB_ACC_READ}
#define W(p_, n_) {.p = (p_), .bytes = (size_t)(n_), .mode = FB_ACC_WRITE}
#define RW(p_, n_) {.p = (p_), .bytes = (size_t)(n_), .mode = FB_ACC_RW}
#define NOPND(v_) ((int)(sizeof(v_) / sizeof *(v_)))

/* Runs `call` between two marks, its operands declared to the device; on sim, accounts the
 * cost instead. */
#define FB_KRUN(k, cost, opnd, entry, ...)                                                     \
  do {                                                                                         \
    fb_device *d_ = (k)->dev;                                                                  \
    uint64_t t0_ = d_->ops->mark(d_, (k)->s);                                                  \
    fb_status st_ = FB_OK;                                                                     \
    (cost).param = (k)->param;                                                                 \
    (cost).unit = (k)->unit;                                                                   \
    if (d_->simulated) {                                                                       \
      if (d_->ops->account) d_->ops->account(d_, (k)->s, &(cost));                             \
    } else {                                                                                   \
      assert(d_->ops->kernels && d_->ops->kernels->entry);                                     \
      if (d_->ops->op_begin)                                                                   \
        st_ = d_->ops->op_begin(d_, (k)->s, (cost).name, (opnd), NOPND(opnd));                 \
      if (st_ == FB_OK) {                                                                      \
        st_ = d_->ops->kernels->entry((k), __VA_ARGS__);                                       \
        if (d_->ops->op_end) d_->ops->op_end(d_, (k)->s, (opnd), NOPND(opnd));                 \
      }                                                                                        \
    }                                                                                          \
    uint64_t t1_ = d_->ops->mark(d_, (k)->s);                                                  \
    if (d_->rec) fb_recorder_op(d_->rec, (k)->s, &(cost), (k)->unit, t0_, t1_);                \
    return st_;                                                                                \
  } while (0)

/* bytes of the statistics (mean, rstd) a norm keeps: doubles on the fp64 reference path */
static inline size_t stat_size(const fb_kctx *k) { return k->act == FB_F64 ? 8 : 4; }

static fb_op_cost mem_cost(const char *name, fb_dtype t, double bytes, double flops) {
  fb_op_cost c = {.name = name, .kind = FB_OP_MEM, .dtype = t, .bytes = bytes, .flops = flops,
                  .batch = 1};
  return c;
}

fb_status fb_k_encoder_fwd(const fb_kctx *k, void *out, const int32_t *tok, const void *wte,
                           const void *wpe, int B, int T, int C) {
  double n = (double)B * T * C;
  fb_op_cost c = mem_cost("encoder_fwd", k->act, n * esz(k->act) * (wpe ? 3 : 2), wpe ? n : 0);
  const size_t e = esz(k->act), tc = (size_t)B * T * C;
  const fb_operand v[] = {W(out, tc * e), R(tok, (size_t)B * T * 4), R(wte, FB_OPND_REST),
                          R(wpe, (size_t)T * C * e)};
  FB_KRUN(k, c, v, encoder_fwd, out, tok, wte, wpe, B, T, C);
}

fb_status fb_k_encoder_bwd(const fb_kctx *k, void *dwte, void *dwpe, const void *dout,
                           const int32_t *tok, int B, int T, int C) {
  double n = (double)B * T * C;
  fb_op_cost c = mem_cost("encoder_bwd", FB_F32, n * 4 * (dwpe ? 5 : 3), n * (dwpe ? 2 : 1));
  const size_t e = esz(k->act), tc = (size_t)B * T * C;
  const fb_operand v[] = {RW(dwte, FB_OPND_REST), RW(dwpe, (size_t)T * C * e),
                          R(dout, tc * e), R(tok, (size_t)B * T * 4)};
  FB_KRUN(k, c, v, encoder_bwd, dwte, dwpe, dout, tok, B, T, C);
}

fb_status fb_k_layernorm_fwd(const fb_kctx *k, void *out, float *mean, float *rstd,
                             const void *inp, const void *w, const void *b, int N, int C,
                             float eps) {
  double n = (double)N * C;
  fb_op_cost c = mem_cost("layernorm_fwd", k->act, 2 * n * esz(k->act) + 8.0 * N, 8 * n);
  const size_t e = esz(k->act), nc = (size_t)N * C * e;
  const fb_operand v[] = {W(out, nc), W(mean, (size_t)N * stat_size(k)),
                          W(rstd, (size_t)N * stat_size(k)), R(inp, nc), R(w, (size_t)C * e),
                          R(b, (size_t)C * e)};
  FB_KRUN(k, c, v, layernorm_fwd, out, mean, rstd, inp, w, b, N, C, eps);
}

fb_status fb_k_layernorm_bwd(const fb_kctx *k, void *dinp, void *dw, void *db, const void *dout,
                             const void *inp, const void *w, const float *mean,
                             const float *rstd, int N, int C) {
  double n = (double)N * C;
  fb_op_cost c = mem_cost("layernorm_bwd", k->act, 4 * n * esz(k->act) + 8.0 * N, 12 * n);
  const size_t e = esz(k->act), nc = (size_t)N * C * e;
  const fb_operand v[] = {RW(dinp, nc), RW(dw, (size_t)C * e), RW(db, (size_t)C * e),
                          R(dout, nc), R(inp, nc), R(w, (size_t)C * e),
                          R(mean, (size_t)N * stat_size(k)), R(rstd, (size_t)N * stat_size(k))};
  FB_KRUN(k, c, v, layernorm_bwd, dinp, dw, db, dout, inp, w, mean, rstd, N, C);
}

fb_status fb_k_rmsnorm_fwd(const fb_kctx *k, void *out, float *rstd, const void *inp,
                           const void *w, int N, int C, float eps) {
  double n = (double)N * C;
  fb_op_cost c = mem_cost("rmsnorm_fwd", k->act, 2 * n * esz(k->act) + 4.0 * N, 5 * n);
  const size_t e = esz(k->act), nc = (size_t)N * C * e;
  const fb_operand v[] = {W(out, nc), W(rstd, (size_t)N * stat_size(k)), R(inp, nc),
                          R(w, (size_t)C * e)};
  FB_KRUN(k, c, v, rmsnorm_fwd, out, rstd, inp, w, N, C, eps);
}

fb_status fb_k_rmsnorm_bwd(const fb_kctx *k, void *dinp, void *dw, const void *dout,
                           const void *inp, const void *w, const float *rstd, int N, int C) {
  double n = (double)N * C;
  fb_op_cost c = mem_cost("rmsnorm_bwd", k->act, 4 * n * esz(k->act) + 4.0 * N, 9 * n);
  const size_t e = esz(k->act), nc = (size_t)N * C * e;
  const fb_operand v[] = {RW(dinp, nc), RW(dw, (size_t)C * e), R(dout, nc), R(inp, nc),
                          R(w, (size_t)C * e), R(rstd, (size_t)N * stat_size(k))};
  FB_KRUN(k, c, v, rmsnorm_bwd, dinp, dw, dout, inp, w, rstd, N, C);
}

fb_op_cost fb_op_gemm_cost(const char *name, fb_dtype t, double m, double n, double kk,
                           double batch, double extra_bytes) {
  fb_op_cost c = {.name = name, .kind = FB_OP_GEMM, .dtype = t, .m = (int64_t)m,
                  .n = (int64_t)n, .k = (int64_t)kk, .batch = (int64_t)batch};
  c.flops = 2.0 * m * n * kk * batch;
  c.bytes = (m * kk + kk * n + m * n) * batch * esz(t) + extra_bytes;
  return c;
}

fb_status fb_k_matmul_fwd(const fb_kctx *k, void *out, const void *inp, const void *w,
                          const void *bias, int N, int C, int OC) {
  fb_op_cost c = fb_op_gemm_cost("matmul_fwd", k->act, N, OC, C, 1, bias ? (double)OC * 4 : 0);
  const size_t e = esz(k->act);
  const fb_operand v[] = {W(out, (size_t)N * OC * e), R(inp, (size_t)N * C * e),
                          R(w, (size_t)OC * C * e), R(bias, (size_t)OC * e)};
  FB_KRUN(k, c, v, matmul_fwd, out, inp, w, bias, N, C, OC);
}

fb_status fb_k_matmul_bwd(const fb_kctx *k, void *dinp, void *dw, void *dbias, const void *dout,
                          const void *inp, const void *w, int N, int C, int OC) {
  /* dW = dout^T inp always; dinp = dout W when requested: 1 or 2 products of the fwd size. */
  fb_op_cost c = fb_op_gemm_cost("matmul_bwd", k->act, N, OC, C, dinp ? 2 : 1, 0);
  if (dbias) c.flops += (double)N * OC;
  const size_t e = esz(k->act);
  const fb_operand v[] = {W(dinp, (size_t)N * C * e), RW(dw, (size_t)OC * C * e),
                          RW(dbias, (size_t)OC * e), R(dout, (size_t)N * OC * e),
                          R(inp, (size_t)N * C * e), R(w, (size_t)OC * C * e)};
  FB_KRUN(k, c, v, matmul_bwd, dinp, dw, dbias, dout, inp, w, N, C, OC);
}

/* Causal attention does half of the T x T products: QK^T and PV, each 2*T*T*hd/2 per head. */
fb_op_cost fb_op_attention_cost(const char *name, fb_dtype t, int B, int T, int H, int KVH,
                                int hd, double products, bool causal) {
  double frac = causal ? 0.5 : 1.0;
  fb_op_cost c = {.name = name, .kind = FB_OP_ATTN, .dtype = t, .m = T, .n = T, .k = hd,
                  .batch = (int64_t)B * H, .causal = causal};
  c.flops = products * 2.0 * B * H * (double)T * T * hd * frac + 5.0 * B * H * (double)T * T * frac;
  c.bytes = ((double)B * T * (2.0 * H + 2.0 * KVH) * hd) * esz(t) * (products / 2.0) +
            4.0 * B * H * T;
  return c;
}

/* The fused MLP ops are GEMMs with an epilogue: the product's cost plus the epilogue's
 * element-wise work on the N x OC (forward) / N x C (backward) activation it touches: the
 * auxiliary pre-activation written (forward) or read (backward), and GELU's flops (10 and 16
 * per element, as gelu_fwd / gelu_bwd count them). The simulator prices them as GEMMs
 * (engine/sim/cost_model.c: what the separate GELU pass costs where a framework runs one). */
fb_status fb_k_matmul_gelu_fwd(const fb_kctx *k, void *out, void *pre, const void *inp,
                               const void *w, const void *bias, int N, int C, int OC) {
  const size_t e = esz(k->act), no = (size_t)N * OC * e;
  fb_op_cost c = fb_op_gemm_cost("matmul_gelu_fwd", k->act, N, OC, C, 1,
                                 (bias ? (double)OC * 4 : 0) + (double)no);
  c.flops += 10.0 * N * OC;
  const fb_operand v[] = {W(out, no), W(pre, no), R(inp, (size_t)N * C * e),
                          R(w, (size_t)OC * C * e), R(bias, (size_t)OC * e)};
  FB_KRUN(k, c, v, matmul_gelu_fwd, out, pre, inp, w, bias, N, C, OC);
}

fb_status fb_k_matmul_bwd_gelu(const fb_kctx *k, void *dpre, void *dw, void *dbias,
                               const void *dout, const void *inp, const void *w, const void *pre,
                               int N, int C, int OC) {
  const size_t e = esz(k->act), nc = (size_t)N * C * e;
  fb_op_cost c = fb_op_gemm_cost("matmul_bwd_gelu", k->act, N, OC, C, 2, (double)nc);
  c.flops += 16.0 * N * C + (dbias ? (double)N * OC : 0);
  const fb_operand v[] = {W(dpre, nc), RW(dw, (size_t)OC * C * e), RW(dbias, (size_t)OC * e),
                          R(dout, (size_t)N * OC * e), R(inp, nc), R(w, (size_t)OC * C * e),
                          R(pre, nc)};
  FB_KRUN(k, c, v, matmul_bwd_gelu, dpre, dw, dbias, dout, inp, w, pre, N, C, OC);
}

fb_status fb_k_attention_fwd(const fb_kctx *k, void *out, float *lse, const void *q,
                             const void *kk, const void *v, int B, int T, int H, int KVH, int hd,
                             int ldq, int ldkv, void *scratch) {
  fb_op_cost c = fb_op_attention_cost("attention_fwd", k->act, B, T, H, KVH, hd, 2, true);
  const size_t e = esz(k->act), rows = (size_t)B * T - 1;
  const size_t qb = (rows * ldq + (size_t)H * hd) * e, kb = (rows * ldkv + (size_t)KVH * hd) * e;
  const fb_operand opnd[] = {W(out, (size_t)B * T * H * hd * e), W(lse, (size_t)B * H * T * 4),
                             R(q, qb), R(kk, kb), R(v, kb),
                             RW(scratch, fb_attention_scratch_bytes(k->dev, B, T, H, KVH, hd))};
  FB_KRUN(k, c, opnd, attention_fwd, out, lse, q, kk, v, B, T, H, KVH, hd, ldq, ldkv, scratch);
}

fb_status fb_k_attention_bwd(const fb_kctx *k, void *dq, void *dk, void *dv, const void *dout,
                             const void *q, const void *kk, const void *v, const void *out,
                             const float *lse, int B, int T, int H, int KVH, int hd, int ldq,
                             int ldkv, void *scratch) {
  /* recompute QK^T, then dV, dP, dQ, dK: five products. */
  fb_op_cost c = fb_op_attention_cost("attention_bwd", k->act, B, T, H, KVH, hd, 5, true);
  const size_t e = esz(k->act), rows = (size_t)B * T - 1, ob = (size_t)B * T * H * hd * e;
  const size_t qb = (rows * ldq + (size_t)H * hd) * e, kb = (rows * ldkv + (size_t)KVH * hd) * e;
  const fb_operand opnd[] = {W(dq, qb), W(dk, kb), W(dv, kb), R(dout, ob), R(q, qb), R(kk, kb),
                             R(v, kb), R(out, ob), R(lse, (size_t)B * H * T * 4),
                             RW(scratch, fb_attention_scratch_bytes(k->dev, B, T, H, KVH, hd))};
  FB_KRUN(k, c, opnd, attention_bwd, dq, dk, dv, dout, q, kk, v, out, lse, B, T, H, KVH, hd, ldq, ldkv,
          scratch);
}

fb_status fb_k_rope_fwd(const fb_kctx *k, void *x, int B, int T, int nh, int hd, int ld,
                        float theta) {
  double n = (double)B * T * nh * hd;
  fb_op_cost c = mem_cost("rope_fwd", k->act, 2 * n * esz(k->act), 3 * n);
  const fb_operand v[] = {RW(x, (((size_t)B * T - 1) * ld + (size_t)nh * hd) * esz(k->act))};
  FB_KRUN(k, c, v, rope_fwd, x, B, T, nh, hd, ld, theta);
}

fb_status fb_k_rope_bwd(const fb_kctx *k, void *dx, int B, int T, int nh, int hd, int ld,
                        float theta) {
  double n = (double)B * T * nh * hd;
  fb_op_cost c = mem_cost("rope_bwd", k->act, 2 * n * esz(k->act), 3 * n);
  const fb_operand v[] = {RW(dx, (((size_t)B * T - 1) * ld + (size_t)nh * hd) * esz(k->act))};
  FB_KRUN(k, c, v, rope_bwd, dx, B, T, nh, hd, ld, theta);
}

fb_status fb_k_gelu_fwd(const fb_kctx *k, void *out, const void *inp, size_t n) {
  fb_op_cost c = mem_cost("gelu_fwd", k->act, 2.0 * n * esz(k->act), 10.0 * n);
  const fb_operand v[] = {W(out, n * esz(k->act)), R(inp, n * esz(k->act))};
  FB_KRUN(k, c, v, gelu_fwd, out, inp, n);
}

fb_status fb_k_gelu_bwd(const fb_kctx *k, void *dinp, const void *inp, const void *dout,
                        size_t n) {
  fb_op_cost c = mem_cost("gelu_bwd", k->act, 3.0 * n * esz(k->act), 16.0 * n);
  const fb_operand v[] = {W(dinp, n * esz(k->act)), R(inp, n * esz(k->act)),
                          R(dout, n * esz(k->act))};
  FB_KRUN(k, c, v, gelu_bwd, dinp, inp, dout, n);
}

fb_status fb_k_swiglu_fwd(const fb_kctx *k, void *out, const void *a, const void *b, size_t n) {
  fb_op_cost c = mem_cost("swiglu_fwd", k->act, 3.0 * n * esz(k->act), 6.0 * n);
  const fb_operand v[] = {W(out, n * esz(k->act)), R(a, n * esz(k->act)), R(b, n * esz(k->act))};
  FB_KRUN(k, c, v, swiglu_fwd, out, a, b, n);
}

fb_status fb_k_swiglu_bwd(const fb_kctx *k, void *da, void *db, const void *dout, const void *a,
                          const void *b, size_t n) {
  fb_op_cost c = mem_cost("swiglu_bwd", k->act, 5.0 * n * esz(k->act), 12.0 * n);
  const size_t e = esz(k->act);
  const fb_operand v[] = {W(da, n * e), W(db, n * e), R(dout, n * e), R(a, n * e), R(b, n * e)};
  FB_KRUN(k, c, v, swiglu_bwd, da, db, dout, a, b, n);
}

static fb_status add_as(const fb_kctx *k, const char *name, void *out, const void *a,
                        const void *b, size_t n) {
  fb_op_cost c = mem_cost(name, k->act, 3.0 * n * esz(k->act), (double)n);
  const fb_operand v[] = {W(out, n * esz(k->act)), R(a, n * esz(k->act)), R(b, n * esz(k->act))};
  FB_KRUN(k, c, v, add, out, a, b, n);
}

fb_status fb_k_add(const fb_kctx *k, void *out, const void *a, const void *b, size_t n) {
  return add_as(k, "residual_add", out, a, b, n);
}

fb_status fb_k_grad_add(const fb_kctx *k, void *out, const void *a, const void *b, size_t n) {
  return add_as(k, "grad_add", out, a, b, n);
}

/* The padding columns [V, ld) are written (zeros), not read. */
fb_status fb_k_xent_fwd_bwd(const fb_kctx *k, void *logits, double *loss_sum,
                            const int32_t *targets, int N, int V, int ld, float dscale) {
  assert(ld >= V);
  double n = (double)N * V;
  fb_op_cost c = mem_cost("softmax_xent", k->act,
                          (3.0 * n + (double)N * (ld - V)) * esz(k->act), 6.0 * n);
  const fb_operand v[] = {RW(logits, (size_t)N * ld * esz(k->act)),
                          RW(loss_sum, sizeof(double)), R(targets, (size_t)N * 4)};
  FB_KRUN(k, c, v, xent_fwd_bwd, logits, loss_sum, targets, N, V, ld, dscale);
}

fb_status fb_k_acc_f32(const fb_kctx *k, float *y, const float *x, size_t n) {
  fb_op_cost c = mem_cost("grad_accumulate", FB_F32, 12.0 * n, (double)n);
  const fb_operand v[] = {RW(y, n * 4), R(x, n * 4)};
  FB_KRUN(k, c, v, acc_f32, y, x, n);
}

fb_status fb_k_scale_f32(const fb_kctx *k, float *y, float a, size_t n) {
  return fb_k_scale(k, "scale", y, FB_F32, a, n);
}

fb_status fb_k_scale(const fb_kctx *k, const char *name, void *y, fb_dtype dt, float a,
                     size_t n) {
  const size_t e = fb_dtype_size(dt);
  fb_op_cost c = mem_cost(name, dt, 2.0 * e * n, (double)n);
  if (strcmp(name, "scale")) c.raw = "scale"; /* a pass under its caller's name */
  const fb_operand v[] = {RW(y, n * e)};
  FB_KRUN(k, c, v, scale, y, dt, a, n);
}

fb_status fb_k_adamw(const fb_kctx *k, float *p, const float *g, float *m, float *v, size_t n,
                     const fb_adamw_args *a) {
  fb_op_cost c = mem_cost("adamw", FB_F32, 28.0 * n, 14.0 * n);
  c.kind = FB_OP_OPTIM;
  const fb_operand opnd[] = {RW(p, n * 4), R(g, n * 4), RW(m, n * 4), RW(v, n * 4)};
  FB_KRUN(k, c, opnd, adamw, p, g, m, v, n, a);
}

/* Recorded as "adamw" (the kernel the profiles price, kernel_gbs.adamw) with the copy's bytes:
 * the fused update moves 28 + esz(out_dt) bytes a parameter, where adamw and a cast moved 34. */
fb_status fb_k_adamw_cast(const fb_kctx *k, float *p, const float *g, float *m, float *v,
                          void *out, fb_dtype out_dt, size_t n, const fb_adamw_args *a) {
  fb_op_cost c = mem_cost("adamw", FB_F32, (28.0 + (double)esz(out_dt)) * n, 14.0 * n);
  c.kind = FB_OP_OPTIM;
  const fb_operand opnd[] = {RW(p, n * 4), R(g, n * 4), RW(m, n * 4), RW(v, n * 4),
                             W(out, n * esz(out_dt))};
  FB_KRUN(k, c, opnd, adamw_cast, p, g, m, v, out, out_dt, n, a);
}

fb_status fb_k_sgd(const fb_kctx *k, float *p, const float *g, float *mom, size_t n,
                   const fb_sgd_args *a) {
  fb_op_cost c = mem_cost("sgd", FB_F32, 20.0 * n, 5.0 * n);
  c.kind = FB_OP_OPTIM;
  const fb_operand v[] = {RW(p, n * 4), R(g, n * 4), RW(mom, n * 4)};
  FB_KRUN(k, c, v, sgd, p, g, mom, n, a);
}

fb_status fb_k_sumsq_bins(const fb_kctx *k, uint64_t *bins, const float *g, size_t n) {
  fb_op_cost c = mem_cost("grad_norm", FB_F32, 4.0 * n, 2.0 * n);
  const fb_operand v[] = {RW(bins, 2 * FB_NORM_BINS * sizeof(uint64_t)), R(g, n * 4)};
  FB_KRUN(k, c, v, sumsq_bins, bins, g, n);
}

fb_status fb_k_sum_f64(const fb_kctx *k, double *out, const float *x, size_t n) {
  fb_op_cost c = mem_cost("param_sum", FB_F32, 4.0 * n, (double)n);
  const fb_operand v[] = {RW(out, sizeof(double)), R(x, n * 4)};
  FB_KRUN(k, c, v, sum_f64, out, x, n);
}

fb_status fb_k_cast(const fb_kctx *k, void *dst, fb_dtype dt, const void *src, fb_dtype st,
                    size_t n) {
  fb_op_cost c = mem_cost("cast", dt, (double)n * (esz(dt) + esz(st)), 0);
  const fb_operand v[] = {W(dst, n * esz(dt)), R(src, n * esz(st))};
  FB_KRUN(k, c, v, cast, dst, dt, src, st, n);
}

/* Block quantisation: memory-bound, priced by the bytes they move (zeropp's qwZ and qgZ). */
fb_status fb_k_quantize(const fb_kctx *k, void *q, float *scales, const void *x, fb_dtype xt,
                        size_t nseg, size_t seglen, int group, int bits, int rows) {
  assert((bits == 8 || (bits == 4 && seglen % 2 == 0 && group % 2 == 0)) && group > 0);
  assert(rows >= 1 && nseg % (size_t)rows == 0);
  const size_t n = nseg * seglen, qb = n * (size_t)bits / 8;
  const size_t ns = fb_quant_nscales(nseg, seglen, group);
  fb_op_cost c = mem_cost("quantize", xt, (double)n * esz(xt) + (double)qb + 4.0 * ns, 3.0 * n);
  const fb_operand v[] = {W(q, qb), W(scales, ns * 4), R(x, n * esz(xt))};
  FB_KRUN(k, c, v, quantize, q, scales, x, xt, nseg, seglen, group, bits, rows);
}

fb_status fb_k_dequant_sum(const fb_kctx *k, void *out, fb_dtype ot, const void *q,
                           const float *scales, size_t nterm, size_t termlen, size_t seglen,
                           int group, int bits) {
  assert((bits == 8 || (bits == 4 && seglen % 2 == 0)) && group > 0 && seglen > 0);
  assert(termlen % seglen == 0);
  const size_t n = nterm * termlen, qb = n * (size_t)bits / 8;
  const size_t ns = fb_quant_nscales(n / seglen, seglen, group);
  fb_op_cost c = mem_cost("dequant_sum", ot, (double)qb + 4.0 * ns + (double)termlen * esz(ot),
                          2.0 * n);
  const fb_operand v[] = {W(out, termlen * esz(ot)), R(q, qb), R(scales, ns * 4)};
  FB_KRUN(k, c, v, dequant_sum, out, ot, q, scales, nterm, termlen, seglen, group, bits);
}

/* Zero and copy go through the device ops table but are recorded like kernels, under their
 * caller's name. On a simulated device they are accounted under that name too (the cost model
 * falls back to c->raw, the plain memset0 / copy_d2d, where the profile measured no rate for
 * it); sim_priced is true when it did so. */
static bool sim_priced(fb_device *d, fb_stream *s, const fb_op_cost *c) {
  if (!d->simulated || !d->ops->account) return false;
  d->ops->account(d, s, c);
  return true;
}

fb_status fb_k_memset0(const fb_kctx *k, const char *name, void *p, size_t bytes) {
  fb_device *d = k->dev;
  if (!bytes) return FB_OK;
  fb_op_cost c = mem_cost(name, FB_F32, (double)bytes, 0);
  c.raw = "memset0";
  c.unit = k->unit;
  uint64_t t0 = d->ops->mark(d, k->s);
  fb_status st = sim_priced(d, k->s, &c) ? FB_OK : d->ops->memset0(d, k->s, p, bytes);
  uint64_t t1 = d->ops->mark(d, k->s);
  if (d->rec) fb_recorder_op(d->rec, k->s, &c, k->unit, t0, t1);
  return st;
}

fb_status fb_k_copy(const fb_kctx *k, const char *name, void *dst, const void *src, size_t bytes) {
  fb_device *d = k->dev;
  if (!bytes) return FB_OK;
  fb_op_cost c = mem_cost(name, FB_F32, 2.0 * bytes, 0);
  c.raw = "copy_d2d";
  c.unit = k->unit;
  uint64_t t0 = d->ops->mark(d, k->s);
  fb_status st = sim_priced(d, k->s, &c) ? FB_OK : d->ops->copy_d2d(d, k->s, dst, src, bytes);
  uint64_t t1 = d->ops->mark(d, k->s);
  if (d->rec) fb_recorder_op(d->rec, k->s, &c, k->unit, t0, t1);
  return st;
}

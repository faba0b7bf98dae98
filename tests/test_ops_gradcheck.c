/* Gradient checks of every CPU op: the double-precision backward against central finite
 * differences of L = sum(out * R) (R random) on small random shapes, plus forward references
 * (naive attention, rope's formula) and the agreement of the f32 forward/backward with the
 * f64 ones. Also checks the accumulate (+=) vs overwrite (=) conventions of kernels.h by
 * prefilling gradient buffers. Prints the relative error of every check. */
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "engine/ops/ops.h"
#include "tests/check.h"

#define GC_TOL 1e-6   /* finite differences vs analytic, double */
#define F32_TOL 2e-5  /* f32 vs f64 */
#define FD_H 1e-5

static uint64_t rng_state = 0x9e3779b97f4a7c15ull;
static double urand(void) { /* splitmix64 -> [-1, 1) */
  uint64_t z = (rng_state += 0x9e3779b97f4a7c15ull);
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
  z ^= z >> 31;
  return (double)(z >> 11) * 0x1.0p-52 - 1.0;
}
static double *drand_vec(size_t n, double s) {
  double *x = malloc(n * sizeof *x);
  for (size_t i = 0; i < n; i++) x[i] = urand() * s;
  return x;
}
static double *dfill(size_t n, double v) {
  double *x = malloc(n * sizeof *x);
  for (size_t i = 0; i < n; i++) x[i] = v;
  return x;
}
static float *to_f32(const double *x, size_t n) {
  float *y = malloc(n * sizeof *y);
  for (size_t i = 0; i < n; i++) y[i] = (float)x[i];
  return y;
}
static double dotd(const double *a, const double *b, size_t n) {
  double s = 0;
  for (size_t i = 0; i < n; i++) s += a[i] * b[i];
  return s;
}
/* max |a - b| / max(max |b|, 1e-30) */
static double rel_err(const double *a, const double *b, size_t n) {
  double num = 0, den = 1e-30;
  for (size_t i = 0; i < n; i++) {
    double d = fabs(a[i] - b[i]);
    num = d > num ? d : num;
    den = fabs(b[i]) > den ? fabs(b[i]) : den;
  }
  return num / den;
}
static double rel_err_f(const float *a, const double *b, size_t n) {
  double num = 0, den = 1e-30;
  for (size_t i = 0; i < n; i++) {
    double d = fabs((double)a[i] - b[i]);
    num = d > num ? d : num;
    den = fabs(b[i]) > den ? fabs(b[i]) : den;
  }
  return num / den;
}

/* The scalar loss of one op as a function of its inputs (closure via a struct). */
typedef double (*loss_fn)(void *ctx);
/* Central differences of f with respect to every element of x. */
static void numeric_grad(loss_fn f, void *ctx, double *x, size_t n, double *g) {
  for (size_t i = 0; i < n; i++) {
    double x0 = x[i];
    x[i] = x0 + FD_H;
    double lp = f(ctx);
    x[i] = x0 - FD_H;
    double lm = f(ctx);
    x[i] = x0;
    g[i] = (lp - lm) / (2 * FD_H);
  }
}
/* analytic minus `prefill` (accumulating buffers were prefilled) vs numeric. */
static void check_grad(const char *op, const char *what, loss_fn f, void *ctx, double *x,
                       size_t n, const double *analytic, double prefill) {
  double *num = malloc(n * sizeof *num), *an = malloc(n * sizeof *an);
  numeric_grad(f, ctx, x, n, num);
  for (size_t i = 0; i < n; i++) an[i] = analytic[i] - prefill;
  double e = rel_err(an, num, n);
  printf("  %-10s d%-6s rel err %.3e\n", op, what, e);
  CHECK(e < GC_TOL, "%s: d%s relative error %.3e >= %g", op, what, e, GC_TOL);
  free(num);
  free(an);
}
static void check_f32(const char *op, const char *what, const float *a, const double *b,
                      size_t n) {
  double e = rel_err_f(a, b, n);
  printf("  %-10s %-7s f32 vs f64 rel err %.3e\n", op, what, e);
  CHECK(e < F32_TOL, "%s: f32 %s relative error %.3e >= %g", op, what, e, F32_TOL);
}

/* ---- encoder ------------------------------------------------------------------------- */
enum { EB = 2, ET = 3, EC = 5, EV = 4 };
typedef struct { double *wte, *wpe, *R; int32_t tok[EB * ET]; } enc_ctx;
static double enc_loss(void *p) {
  enc_ctx *c = p;
  double out[EB * ET * EC];
  fb_encoder_fwd_f64(out, c->tok, c->wte, c->wpe, EB, ET, EC);
  return dotd(out, c->R, EB * ET * EC);
}
static void test_encoder(void) {
  enc_ctx c = {drand_vec(EV * EC, 1), drand_vec(ET * EC, 1), drand_vec(EB * ET * EC, 1),
               {1, 3, 1, 1, 0, 3}}; /* repeated tokens */
  double *dwte = dfill(EV * EC, 0.5), *dwpe = dfill(ET * EC, 0.5);
  fb_encoder_bwd_f64(dwte, dwpe, c.R, c.tok, EB, ET, EC);
  check_grad("encoder", "wte", enc_loss, &c, c.wte, EV * EC, dwte, 0.5);
  check_grad("encoder", "wpe", enc_loss, &c, c.wpe, ET * EC, dwpe, 0.5);
  /* no wpe (Llama) */
  double out[EB * ET * EC];
  fb_encoder_fwd_f64(out, c.tok, c.wte, NULL, EB, ET, EC);
  CHECK(out[EC + 2] == c.wte[3 * EC + 2], "encoder without wpe copies wte rows");
  float *wte32 = to_f32(c.wte, EV * EC), *wpe32 = to_f32(c.wpe, ET * EC);
  float out32[EB * ET * EC];
  fb_encoder_fwd_f32(out32, c.tok, wte32, wpe32, EB, ET, EC);
  fb_encoder_fwd_f64(out, c.tok, c.wte, c.wpe, EB, ET, EC);
  check_f32("encoder", "out", out32, out, EB * ET * EC);
  free(c.wte), free(c.wpe), free(c.R), free(dwte), free(dwpe), free(wte32), free(wpe32);
}

/* ---- layernorm / rmsnorm ---------------------------------------------------------------- */
enum { NN = 3, NC = 13 };
typedef struct { double *x, *w, *b, *R; int rms; } norm_ctx;
static double norm_loss(void *p) {
  norm_ctx *c = p;
  double out[NN * NC], mean[NN], rstd[NN];
  if (c->rms)
    fb_rmsnorm_fwd_f64(out, rstd, c->x, c->w, NN, NC, 1e-5);
  else
    fb_layernorm_fwd_f64(out, mean, rstd, c->x, c->w, c->b, NN, NC, 1e-5);
  return dotd(out, c->R, NN * NC);
}
static void test_norm(int rms) {
  const char *op = rms ? "rmsnorm" : "layernorm";
  norm_ctx c = {drand_vec(NN * NC, 2), drand_vec(NC, 1), drand_vec(NC, 1), drand_vec(NN * NC, 1),
                rms};
  for (int i = 0; i < NN * NC; i++) c.x[i] += 0.3; /* nonzero mean */
  double out[NN * NC], mean[NN], rstd[NN];
  double *dx = dfill(NN * NC, 0.5), *dw = dfill(NC, 0.5), *db = dfill(NC, 0.5);
  if (rms) {
    fb_rmsnorm_fwd_f64(out, rstd, c.x, c.w, NN, NC, 1e-5);
    fb_rmsnorm_bwd_f64(dx, dw, c.R, c.x, c.w, rstd, NN, NC);
  } else {
    fb_layernorm_fwd_f64(out, mean, rstd, c.x, c.w, c.b, NN, NC, 1e-5);
    fb_layernorm_bwd_f64(dx, dw, db, c.R, c.x, c.w, mean, rstd, NN, NC);
  }
  check_grad(op, "inp", norm_loss, &c, c.x, NN * NC, dx, 0.5); /* dinp accumulates */
  check_grad(op, "w", norm_loss, &c, c.w, NC, dw, 0.5);
  if (!rms) check_grad(op, "b", norm_loss, &c, c.b, NC, db, 0.5);

  float *x32 = to_f32(c.x, NN * NC), *w32 = to_f32(c.w, NC), *b32 = to_f32(c.b, NC);
  float *R32 = to_f32(c.R, NN * NC);
  float o32[NN * NC], m32[NN], r32[NN], dx32[NN * NC] = {0}, dw32[NC] = {0}, db32[NC] = {0};
  double dx64[NN * NC] = {0}, dw64[NC] = {0}, db64[NC] = {0};
  if (rms) {
    fb_rmsnorm_fwd_f32(o32, r32, x32, w32, NN, NC, 1e-5f);
    fb_rmsnorm_bwd_f32(dx32, dw32, R32, x32, w32, r32, NN, NC);
    fb_rmsnorm_bwd_f64(dx64, dw64, c.R, c.x, c.w, rstd, NN, NC);
  } else {
    fb_layernorm_fwd_f32(o32, m32, r32, x32, w32, b32, NN, NC, 1e-5f);
    fb_layernorm_bwd_f32(dx32, dw32, db32, R32, x32, w32, m32, r32, NN, NC);
    fb_layernorm_bwd_f64(dx64, dw64, db64, c.R, c.x, c.w, mean, rstd, NN, NC);
  }
  check_f32(op, "out", o32, out, NN * NC);
  check_f32(op, "rstd", r32, rstd, NN);
  check_f32(op, "dinp", dx32, dx64, NN * NC);
  check_f32(op, "dw", dw32, dw64, NC);
  free(c.x), free(c.w), free(c.b), free(c.R), free(dx), free(dw), free(db);
  free(x32), free(w32), free(b32), free(R32);
}

/* ---- matmul --------------------------------------------------------------------------- */
enum { MN = 4, MC = 6, MOC = 5 };
typedef struct { double *x, *w, *bias, *R; } mm_ctx;
static double mm_loss(void *p) {
  mm_ctx *c = p;
  double out[MN * MOC];
  fb_matmul_fwd_f64(out, c->x, c->w, c->bias, MN, MC, MOC);
  return dotd(out, c->R, MN * MOC);
}
static void test_matmul(void) {
  mm_ctx c = {drand_vec(MN * MC, 1), drand_vec(MOC * MC, 1), drand_vec(MOC, 1),
              drand_vec(MN * MOC, 1)};
  double *dx = dfill(MN * MC, 7.0), *dw = dfill(MOC * MC, 0.5), *db = dfill(MOC, 0.5);
  fb_matmul_bwd_f64(dx, dw, db, c.R, c.x, c.w, MN, MC, MOC);
  check_grad("matmul", "inp", mm_loss, &c, c.x, MN * MC, dx, 0.0); /* dinp overwritten */
  check_grad("matmul", "w", mm_loss, &c, c.w, MOC * MC, dw, 0.5);
  check_grad("matmul", "bias", mm_loss, &c, c.bias, MOC, db, 0.5);
  /* dinp == NULL skips the input gradient but still accumulates dw */
  double *dw2 = dfill(MOC * MC, 0.5);
  fb_matmul_bwd_f64(NULL, dw2, NULL, c.R, c.x, c.w, MN, MC, MOC);
  CHECK(rel_err(dw2, dw, MOC * MC) < 1e-15, "matmul_bwd without dinp/dbias gives the same dw");
  float *x32 = to_f32(c.x, MN * MC), *w32 = to_f32(c.w, MOC * MC), *b32 = to_f32(c.bias, MOC);
  float o32[MN * MOC];
  double o64[MN * MOC];
  fb_matmul_fwd_f32(o32, x32, w32, b32, MN, MC, MOC);
  fb_matmul_fwd_f64(o64, c.x, c.w, c.bias, MN, MC, MOC);
  check_f32("matmul", "out", o32, o64, MN * MOC);
  free(c.x), free(c.w), free(c.bias), free(c.R), free(dx), free(dw), free(db), free(dw2);
  free(x32), free(w32), free(b32);
}

/* ---- attention: q, k, v inside one fused, padded qkv buffer ---------------------------- */
enum { AB = 2, AT = 67, AH = 4, AKVH = 2, AHD = 4 };
#define ALD ((AH + 2 * AKVH) * AHD + 3) /* row stride of the fused buffer, with padding */
typedef struct { double *qkv, *R, *scratch; } att_ctx;
static void att_fwd64(att_ctx *c, double *out, double *lse) {
  fb_attention_fwd_f64(out, lse, c->qkv, c->qkv + AH * AHD, c->qkv + (AH + AKVH) * AHD, AB, AT,
                       AH, AKVH, AHD, ALD, ALD, c->scratch);
}
static double att_loss(void *p) {
  att_ctx *c = p;
  static double out[AB * AT * AH * AHD], lse[AB * AH * AT];
  att_fwd64(c, out, lse);
  return dotd(out, c->R, AB * AT * AH * AHD);
}
/* Naive reference: causal softmax(q k^T / sqrt(hd)) v, kv head h / (H/KVH). */
static void att_naive(const double *qkv, double *out, double *lse) {
  double s[AT];
  for (int b = 0; b < AB; b++)
    for (int h = 0; h < AH; h++) {
      int kh = h / (AH / AKVH);
      for (int t = 0; t < AT; t++) {
        const double *q = qkv + (size_t)(b * AT + t) * ALD + h * AHD;
        double m = -INFINITY, sum = 0;
        for (int j = 0; j <= t; j++) {
          const double *k = qkv + (size_t)(b * AT + j) * ALD + (AH + kh) * AHD;
          s[j] = dotd(q, k, AHD) / sqrt((double)AHD);
          m = s[j] > m ? s[j] : m;
        }
        for (int j = 0; j <= t; j++) sum += exp(s[j] - m);
        lse[(b * AH + h) * AT + t] = m + log(sum);
        double *o = out + (size_t)(b * AT + t) * AH * AHD + h * AHD;
        for (int d = 0; d < AHD; d++) o[d] = 0;
        for (int j = 0; j <= t; j++) {
          const double *v = qkv + (size_t)(b * AT + j) * ALD + (AH + AKVH + kh) * AHD;
          for (int d = 0; d < AHD; d++) o[d] += exp(s[j] - m) / sum * v[d];
        }
      }
    }
}
static void test_attention(void) {
  size_t nbuf = (size_t)AB * AT * ALD, nout = (size_t)AB * AT * AH * AHD;
  size_t nscr = (size_t)fb_ops_attn_slots() * fb_ops_attn_scratch_elems(AT);
  att_ctx c = {drand_vec(nbuf, 1.5), drand_vec(nout, 1), malloc(nscr * sizeof(double))};
  double *out = malloc(nout * sizeof *out), *lse = malloc(AB * AH * AT * sizeof *lse);
  double *ref = malloc(nout * sizeof *ref), *lref = malloc(AB * AH * AT * sizeof *lref);
  att_fwd64(&c, out, lse);
  att_naive(c.qkv, ref, lref);
  double e = rel_err(out, ref, nout), el = rel_err(lse, lref, AB * AH * AT);
  printf("  attention out vs naive %.3e, lse vs naive %.3e\n", e, el);
  CHECK(e < 1e-12 && el < 1e-12, "attention forward differs from the naive reference");

  double *dqkv = dfill(nbuf, 7.0); /* dq, dk, dv are overwritten; padding must stay 7 */
  fb_attention_bwd_f64(dqkv, dqkv + AH * AHD, dqkv + (AH + AKVH) * AHD, c.R, c.qkv,
                       c.qkv + AH * AHD, c.qkv + (AH + AKVH) * AHD, out, lse, AB, AT, AH, AKVH,
                       AHD, ALD, ALD, c.scratch);
  int pad_ok = 1;
  for (size_t r = 0; r < (size_t)AB * AT; r++)
    for (int j = (AH + 2 * AKVH) * AHD; j < ALD; j++) {
      pad_ok &= dqkv[r * ALD + j] == 7.0;
      dqkv[r * ALD + j] = 0; /* the loss does not depend on padding */
    }
  CHECK(pad_ok, "attention_bwd wrote into the padding of the fused buffer");
  check_grad("attention", "qkv", att_loss, &c, c.qkv, nbuf, dqkv, 0.0);

  float *qkv32 = to_f32(c.qkv, nbuf), *R32 = to_f32(c.R, nout);
  float *o32 = malloc(nout * 4), *l32 = malloc(AB * AH * AT * 4), *d32 = calloc(nbuf, 4);
  float *s32 = malloc(nscr * 4);
  fb_attention_fwd_f32(o32, l32, qkv32, qkv32 + AH * AHD, qkv32 + (AH + AKVH) * AHD, AB, AT, AH,
                       AKVH, AHD, ALD, ALD, s32);
  fb_attention_bwd_f32(d32, d32 + AH * AHD, d32 + (AH + AKVH) * AHD, R32, qkv32,
                       qkv32 + AH * AHD, qkv32 + (AH + AKVH) * AHD, o32, l32, AB, AT, AH, AKVH,
                       AHD, ALD, ALD, s32);
  check_f32("attention", "out", o32, out, nout);
  check_f32("attention", "lse", l32, lse, AB * AH * AT);
  check_f32("attention", "dqkv", d32, dqkv, nbuf);
  free(c.qkv), free(c.R), free(c.scratch), free(out), free(lse), free(ref), free(lref);
  free(dqkv), free(qkv32), free(R32), free(o32), free(l32), free(d32), free(s32);
}

/* ---- rope ------------------------------------------------------------------------------ */
enum { RB = 2, RT = 5, RNH = 3, RHD = 6 };
#define RLD (RNH * RHD + 2)
typedef struct { double *x, *R; } rope_ctx;
static double rope_loss(void *p) {
  rope_ctx *c = p;
  size_t n = (size_t)RB * RT * RLD;
  double y[RB * RT * RLD];
  memcpy(y, c->x, n * sizeof(double));
  fb_rope_fwd_f64(y, RB, RT, RNH, RHD, RLD, 10000.0);
  return dotd(y, c->R, n);
}
static void test_rope(void) {
  size_t n = (size_t)RB * RT * RLD;
  rope_ctx c = {drand_vec(n, 1), drand_vec(n, 1)};
  for (size_t r = 0; r < (size_t)RB * RT; r++) /* padding is not part of the rows' heads */
    c.R[r * RLD + RNH * RHD] = c.R[r * RLD + RNH * RHD + 1] = 0;
  double *y = malloc(n * sizeof *y);
  memcpy(y, c.x, n * sizeof *y);
  fb_rope_fwd_f64(y, RB, RT, RNH, RHD, RLD, 10000.0);
  /* formula at b=1, t=3, head 2, pair i=1: angle 3 * 10000^(-2/6) */
  size_t base = (size_t)(1 * RT + 3) * RLD + 2 * RHD;
  double a = 3 * pow(10000.0, -2.0 / 6), x1 = c.x[base + 1], x2 = c.x[base + 1 + RHD / 2];
  CHECK_CLOSE(y[base + 1], x1 * cos(a) - x2 * sin(a), 1e-14, 1e-14);
  CHECK_CLOSE(y[base + 1 + RHD / 2], x1 * sin(a) + x2 * cos(a), 1e-14, 1e-14);
  double *d = malloc(n * sizeof *d);
  memcpy(d, c.R, n * sizeof *d);
  fb_rope_bwd_f64(d, RB, RT, RNH, RHD, RLD, 10000.0);
  for (size_t r = 0; r < (size_t)RB * RT; r++)
    d[r * RLD + RNH * RHD] = d[r * RLD + RNH * RHD + 1] = 0;
  check_grad("rope", "x", rope_loss, &c, c.x, n, d, 0.0);
  fb_rope_bwd_f64(y, RB, RT, RNH, RHD, RLD, 10000.0); /* inverse of fwd */
  double e = rel_err(y, c.x, n);
  CHECK(e < 1e-14, "rope_bwd(rope_fwd(x)) != x: %.3e", e);
  float *y32 = to_f32(c.x, n);
  fb_rope_fwd_f32(y32, RB, RT, RNH, RHD, RLD, 10000.0);
  memcpy(y, c.x, n * sizeof *y);
  fb_rope_fwd_f64(y, RB, RT, RNH, RHD, RLD, 10000.0);
  check_f32("rope", "out", y32, y, n);
  free(c.x), free(c.R), free(y), free(d), free(y32);
}

/* ---- gelu / swiglu ------------------------------------------------------------------- */
enum { GN = 37 };
typedef struct { double *a, *b, *R; int swi; } ew_ctx;
static double ew_loss(void *p) {
  ew_ctx *c = p;
  double out[GN];
  if (c->swi)
    fb_swiglu_fwd_f64(out, c->a, c->b, GN);
  else
    fb_gelu_fwd_f64(out, c->a, GN);
  return dotd(out, c->R, GN);
}
static void test_elementwise(void) {
  ew_ctx c = {drand_vec(GN, 4), drand_vec(GN, 2), drand_vec(GN, 1), 0};
  double *da = dfill(GN, 7.0), *db = dfill(GN, 7.0);
  fb_gelu_bwd_f64(da, c.a, c.R, GN);
  check_grad("gelu", "inp", ew_loss, &c, c.a, GN, da, 0.0);
  c.swi = 1;
  fb_swiglu_bwd_f64(da, db, c.R, c.a, c.b, GN);
  check_grad("swiglu", "a", ew_loss, &c, c.a, GN, da, 0.0);
  check_grad("swiglu", "b", ew_loss, &c, c.b, GN, db, 0.0);

  float *a32 = to_f32(c.a, GN), *b32 = to_f32(c.b, GN), *R32 = to_f32(c.R, GN);
  float o32[GN], da32[GN], db32[GN];
  double o64[GN];
  fb_gelu_fwd_f32(o32, a32, GN);
  fb_gelu_fwd_f64(o64, c.a, GN);
  check_f32("gelu", "out", o32, o64, GN);
  fb_gelu_bwd_f32(da32, a32, R32, GN);
  fb_gelu_bwd_f64(da, c.a, c.R, GN);
  check_f32("gelu", "dinp", da32, da, GN);
  fb_swiglu_fwd_f32(o32, a32, b32, GN);
  fb_swiglu_fwd_f64(o64, c.a, c.b, GN);
  check_f32("swiglu", "out", o32, o64, GN);
  fb_swiglu_bwd_f32(da32, db32, R32, a32, b32, GN);
  fb_swiglu_bwd_f64(da, db, c.R, c.a, c.b, GN);
  check_f32("swiglu", "da", da32, da, GN);
  check_f32("swiglu", "db", db32, db, GN);
  free(c.a), free(c.b), free(c.R), free(da), free(db), free(a32), free(b32), free(R32);
}

/* ---- cross-entropy: loss as the function, logits become its gradient ------------------ */
enum { XN = 5, XV = 11 };
typedef struct { double *x; int32_t tgt[XN]; } xent_ctx;
static double xent_loss(void *p) {
  xent_ctx *c = p;
  double y[XN * XV], loss = 0;
  memcpy(y, c->x, sizeof y);
  fb_xent_fwd_bwd_f64(y, &loss, c->tgt, XN, XV, XV, 1.0);
  return loss;
}
static void test_xent(void) {
  xent_ctx c = {drand_vec(XN * XV, 3), {3, -1, 0, 10, 3}}; /* row 1 ignored */
  double y[XN * XV], loss = 1.25;
  memcpy(y, c.x, sizeof y);
  fb_xent_fwd_bwd_f64(y, &loss, c.tgt, XN, XV, XV, 1.0);
  check_grad("xent", "logits", xent_loss, &c, c.x, XN * XV, y, 0.0);
  int zero = 1;
  for (int j = 0; j < XV; j++) zero &= y[XV + j] == 0.0;
  CHECK(zero, "xent: ignored row has a nonzero gradient");
  /* loss_sum accumulates: 1.25 + sum of -log p */
  double ref = 1.25;
  for (int n = 0; n < XN; n++) {
    if (c.tgt[n] < 0) continue;
    double m = -INFINITY, s = 0;
    for (int j = 0; j < XV; j++) m = c.x[n * XV + j] > m ? c.x[n * XV + j] : m;
    for (int j = 0; j < XV; j++) s += exp(c.x[n * XV + j] - m);
    ref += m + log(s) - c.x[n * XV + c.tgt[n]];
  }
  CHECK_CLOSE(loss, ref, 1e-14, 0);
  /* dscale multiplies the gradient */
  double y2[XN * XV], loss2 = 0;
  memcpy(y2, c.x, sizeof y2);
  fb_xent_fwd_bwd_f64(y2, &loss2, c.tgt, XN, XV, XV, 0.25);
  for (int i = 0; i < XN * XV; i++) y[i] *= 0.25;
  CHECK(rel_err(y2, y, XN * XV) < 1e-15, "xent: dscale does not scale the gradient");
  float *x32 = to_f32(c.x, XN * XV);
  double l32 = 0;
  fb_xent_fwd_bwd_f32(x32, &l32, c.tgt, XN, XV, XV, 0.25f);
  CHECK_CLOSE(l32, loss2, F32_TOL, 0);
  check_f32("xent", "dlogits", x32, y2, XN * XV);
  free(c.x), free(x32);
}

int main(void) {
  printf("gradient checks (double, central differences, h = %g):\n", FD_H);
  test_encoder();
  test_norm(0);
  test_norm(1);
  test_matmul();
  test_attention();
  test_rope();
  test_elementwise();
  test_xent();
  return fb_test_done("test_ops_gradcheck");
}

/* The bf16 (mixed precision) CPU ops: widen bf16 operands to fp32 (exact), run the fp32 op of
 * ops_f32.c, round the results to bf16 to nearest even; the rules (what is rounded when, what
 * accumulates in fp32) are those of the CUDA kernels and are listed in ops_bf16.h.
 * Every loop here is element-wise or row-wise, and the fp32 ops are bitwise independent of
 * the thread count, so these are too. Does not check shapes (cpu_kernels.c does) and does not
 * keep any state besides the per-thread scratch (bf16_scratch.c). */
#pragma GCC optimize("no-trapping-math", "no-math-errno")
#include <omp.h>
#include <string.h>

#include "elementwise.h"
#include "ops.h"
#include "ops_bf16.h"

#define PAR_MIN 16384       /* elements below which a conversion loop stays on one thread */
#define EW_CHUNK 2048       /* elements per stack block of the element-wise ops */
#define XENT_ELEMS (1 << 22) /* logits widened at a time by cross-entropy (16 MiB of fp32) */

static inline size_t min_sz(size_t a, size_t b) { return a < b ? a : b; }

/* ---- scratch carving ------------------------------------------------------------------- */
typedef struct {
  size_t need; /* first pass: bytes asked so far */
  char *base;  /* second pass: the block being handed out */
} carve;
static size_t al64(size_t b) { return (b + 63) / 64 * 64; }
/* First pass (base NULL) counts; second pass returns consecutive aligned pieces. */
static void *take(carve *c, size_t bytes) {
  void *p = c->base ? c->base + c->need : NULL;
  c->need += al64(bytes);
  return p;
}
static fb_status grab(carve *c, const char *op) {
  c->base = fb_ops_scratch(c->need);
  if (!c->base)
    return FB_ERR(FB_ENOMEM, "cpu %s (bf16): out of host memory for %zu bytes of fp32 scratch",
                  op, c->need);
  c->need = 0;
  return FB_OK;
}
/* Declares the scratch layout once and runs it twice: to size it, then to hand it out. */
#define CARVE(c, op, ...)                                                                      \
  do {                                                                                         \
    for (int pass_ = 0; pass_ < 2; pass_++) {                                                  \
      if (pass_ == 1) FB_TRY(grab(&(c), op));                                                  \
      __VA_ARGS__;                                                                             \
    }                                                                                          \
  } while (0)

/* ---- conversions ----------------------------------------------------------------------- */
/* dst[r*ldd + j] = (float)src[r*lds + j] for r < rows, j < cols. */
static void widen_rows(float *dst, int64_t ldd, const fb_bf16 *src, int64_t lds, int64_t rows,
                       int64_t cols) {
#pragma omp parallel for schedule(static) if (rows * cols > PAR_MIN)
  for (int64_t r = 0; r < rows; r++) {
    const fb_bf16 *s = src + r * lds;
    float *d = dst + r * ldd;
    for (int64_t j = 0; j < cols; j++) d[j] = fb_bf16_to_f32(s[j]);
  }
}
/* dst[r*ldd + j] = bf16(src[r*lds + j]); other elements of dst rows are left alone. */
static void narrow_rows(fb_bf16 *dst, int64_t ldd, const float *src, int64_t lds, int64_t rows,
                        int64_t cols) {
#pragma omp parallel for schedule(static) if (rows * cols > PAR_MIN)
  for (int64_t r = 0; r < rows; r++) {
    const float *s = src + r * lds;
    fb_bf16 *d = dst + r * ldd;
    for (int64_t j = 0; j < cols; j++) d[j] = fb_f32_to_bf16(s[j]);
  }
}
static void widen(float *dst, const fb_bf16 *src, size_t n) { fb_cast_bf16_to_f32(dst, src, n); }
static void narrow(fb_bf16 *dst, const float *src, size_t n) { fb_cast_f32_to_bf16(dst, src, n); }
/* dst = bf16((float)dst + acc): one rounding of a gradient summed in fp32. */
static void acc_round(fb_bf16 *dst, const float *acc, size_t n) {
#pragma omp parallel for schedule(static) if (n > PAR_MIN)
  for (size_t i = 0; i < n; i++) dst[i] = fb_f32_to_bf16(fb_bf16_to_f32(dst[i]) + acc[i]);
}
/* single-threaded block conversions for the element-wise ops */
static void blk_widen(float *dst, const fb_bf16 *src, size_t n) {
  for (size_t i = 0; i < n; i++) dst[i] = fb_bf16_to_f32(src[i]);
}
static void blk_narrow(fb_bf16 *dst, const float *src, size_t n) {
  for (size_t i = 0; i < n; i++) dst[i] = fb_f32_to_bf16(src[i]);
}

/* ---- encoder --------------------------------------------------------------------------- */
fb_status fb_encoder_fwd_bf16(fb_bf16 *out, const int32_t *tok, const fb_bf16 *wte,
                              const fb_bf16 *wpe, int B, int T, int C) {
  int64_t N = (int64_t)B * T;
  /* the fp32 op's sum e + p on the widened rows, rounded once (no table-sized copy) */
#pragma omp parallel for schedule(static) if (N * C > PAR_MIN)
  for (int64_t n = 0; n < N; n++) {
    fb_bf16 *o = out + n * C;
    const fb_bf16 *e = wte + (int64_t)tok[n] * C;
    const fb_bf16 *p = wpe ? wpe + (n % T) * C : NULL;
    for (int c = 0; c < C; c++)
      o[c] = fb_f32_to_bf16(p ? fb_bf16_to_f32(e[c]) + fb_bf16_to_f32(p[c])
                              : fb_bf16_to_f32(e[c]));
  }
  return FB_OK;
}

/* The rows of dwte the tokens touch are widened into a compact fp32 table (row u = u-th
 * distinct token in order of first use), dwpe whole; the fp32 op adds every token in token
 * order; each touched row (and dwpe) is rounded once. */
fb_status fb_encoder_bwd_bf16(fb_bf16 *dwte, fb_bf16 *dwpe, const fb_bf16 *dout,
                              const int32_t *tok, int B, int T, int C) {
  int64_t N = (int64_t)B * T;
  if (N == 0 || C == 0) return FB_OK;
  int32_t maxtok = 0;
  for (int64_t n = 0; n < N; n++) {
    if (tok[n] < 0)
      return FB_ERR(FB_EUSAGE, "encoder_bwd (bf16): token %d at position %lld is negative",
                    (int)tok[n], (long long)n);
    maxtok = tok[n] > maxtok ? tok[n] : maxtok;
  }
  size_t nmap = (size_t)maxtok + 1, umax = min_sz(nmap, (size_t)N);
  carve c = {0};
  int32_t *map, *tok2, *rows;
  float *dout32, *dwte32, *dwpe32;
  CARVE(c, "encoder_bwd", map = take(&c, nmap * 4), tok2 = take(&c, (size_t)N * 4),
        rows = take(&c, umax * 4), dout32 = take(&c, (size_t)N * C * 4),
        dwte32 = take(&c, umax * C * 4), dwpe32 = take(&c, dwpe ? (size_t)T * C * 4 : 0));
  memset(map, 0xff, nmap * 4); /* -1: not seen yet */
  int32_t U = 0;
  for (int64_t n = 0; n < N; n++) {
    if (map[tok[n]] < 0) {
      map[tok[n]] = U;
      rows[U++] = tok[n];
    }
    tok2[n] = map[tok[n]];
  }
#pragma omp parallel for schedule(static) if ((int64_t)U * C > PAR_MIN)
  for (int32_t u = 0; u < U; u++)
    blk_widen(dwte32 + (int64_t)u * C, dwte + (int64_t)rows[u] * C, (size_t)C);
  widen(dout32, dout, (size_t)N * C);
  if (dwpe) widen(dwpe32, dwpe, (size_t)T * C);
  fb_encoder_bwd_f32(dwte32, dwpe ? dwpe32 : NULL, dout32, tok2, B, T, C);
#pragma omp parallel for schedule(static) if ((int64_t)U * C > PAR_MIN)
  for (int32_t u = 0; u < U; u++)
    blk_narrow(dwte + (int64_t)rows[u] * C, dwte32 + (int64_t)u * C, (size_t)C);
  if (dwpe) narrow(dwpe, dwpe32, (size_t)T * C);
  return FB_OK;
}

/* ---- layernorm / rmsnorm --------------------------------------------------------------- */
fb_status fb_layernorm_fwd_bf16(fb_bf16 *out, float *mean, float *rstd, const fb_bf16 *inp,
                                const fb_bf16 *w, const fb_bf16 *b, int N, int C, float eps) {
  size_t nc = (size_t)N * C;
  carve c = {0};
  float *x32, *w32, *b32, *o32;
  CARVE(c, "layernorm_fwd", x32 = take(&c, nc * 4), w32 = take(&c, (size_t)C * 4),
        b32 = take(&c, b ? (size_t)C * 4 : 0), o32 = take(&c, nc * 4));
  widen(x32, inp, nc);
  widen(w32, w, (size_t)C);
  if (b) widen(b32, b, (size_t)C);
  fb_layernorm_fwd_f32(o32, mean, rstd, x32, w32, b ? b32 : NULL, N, C, eps);
  narrow(out, o32, nc);
  return FB_OK;
}

fb_status fb_layernorm_bwd_bf16(fb_bf16 *dinp, fb_bf16 *dw, fb_bf16 *db, const fb_bf16 *dout,
                                const fb_bf16 *inp, const fb_bf16 *w, const float *mean,
                                const float *rstd, int N, int C) {
  size_t nc = (size_t)N * C;
  carve c = {0};
  float *di32, *d32, *x32, *w32, *dw32, *db32;
  CARVE(c, "layernorm_bwd", di32 = take(&c, nc * 4), d32 = take(&c, nc * 4),
        x32 = take(&c, nc * 4), w32 = take(&c, (size_t)C * 4), dw32 = take(&c, (size_t)C * 4),
        db32 = take(&c, db ? (size_t)C * 4 : 0));
  widen(di32, dinp, nc); /* the fp32 op adds its term to dinp: bf16(dinp + term) */
  widen(d32, dout, nc);
  widen(x32, inp, nc);
  widen(w32, w, (size_t)C);
  memset(dw32, 0, (size_t)C * 4);
  if (db) memset(db32, 0, (size_t)C * 4);
  fb_layernorm_bwd_f32(di32, dw32, db ? db32 : NULL, d32, x32, w32, mean, rstd, N, C);
  narrow(dinp, di32, nc);
  acc_round(dw, dw32, (size_t)C);
  if (db) acc_round(db, db32, (size_t)C);
  return FB_OK;
}

fb_status fb_rmsnorm_fwd_bf16(fb_bf16 *out, float *rstd, const fb_bf16 *inp, const fb_bf16 *w,
                              int N, int C, float eps) {
  size_t nc = (size_t)N * C;
  carve c = {0};
  float *x32, *w32, *o32;
  CARVE(c, "rmsnorm_fwd", x32 = take(&c, nc * 4), w32 = take(&c, (size_t)C * 4),
        o32 = take(&c, nc * 4));
  widen(x32, inp, nc);
  widen(w32, w, (size_t)C);
  fb_rmsnorm_fwd_f32(o32, rstd, x32, w32, N, C, eps);
  narrow(out, o32, nc);
  return FB_OK;
}

fb_status fb_rmsnorm_bwd_bf16(fb_bf16 *dinp, fb_bf16 *dw, const fb_bf16 *dout,
                              const fb_bf16 *inp, const fb_bf16 *w, const float *rstd, int N,
                              int C) {
  size_t nc = (size_t)N * C;
  carve c = {0};
  float *di32, *d32, *x32, *w32, *dw32;
  CARVE(c, "rmsnorm_bwd", di32 = take(&c, nc * 4), d32 = take(&c, nc * 4),
        x32 = take(&c, nc * 4), w32 = take(&c, (size_t)C * 4), dw32 = take(&c, (size_t)C * 4));
  widen(di32, dinp, nc);
  widen(d32, dout, nc);
  widen(x32, inp, nc);
  widen(w32, w, (size_t)C);
  memset(dw32, 0, (size_t)C * 4);
  fb_rmsnorm_bwd_f32(di32, dw32, d32, x32, w32, rstd, N, C);
  narrow(dinp, di32, nc);
  acc_round(dw, dw32, (size_t)C);
  return FB_OK;
}

/* ---- matmul ---------------------------------------------------------------------------- */
fb_status fb_matmul_fwd_bf16(fb_bf16 *out, const fb_bf16 *inp, const fb_bf16 *w,
                             const fb_bf16 *bias, int N, int C, int OC) {
  size_t nc = (size_t)N * C, wc = (size_t)OC * C, no = (size_t)N * OC;
  carve c = {0};
  float *x32, *w32, *o32;
  CARVE(c, "matmul_fwd", x32 = take(&c, nc * 4), w32 = take(&c, wc * 4), o32 = take(&c, no * 4));
  widen(x32, inp, nc);
  widen(w32, w, wc);
  fb_matmul_fwd_f32(o32, x32, w32, NULL, N, C, OC);
  narrow(out, o32, no);
  if (!bias) return FB_OK;
  /* the CUDA kernel's separate bias add: bf16(bf16(product) + bias) */
#pragma omp parallel for schedule(static) if ((int64_t)no > PAR_MIN)
  for (int n = 0; n < N; n++) {
    fb_bf16 *o = out + (int64_t)n * OC;
    for (int j = 0; j < OC; j++)
      o[j] = fb_f32_to_bf16(fb_bf16_to_f32(o[j]) + fb_bf16_to_f32(bias[j]));
  }
  return FB_OK;
}

fb_status fb_matmul_bwd_bf16(fb_bf16 *dinp, fb_bf16 *dw, fb_bf16 *dbias, const fb_bf16 *dout,
                             const fb_bf16 *inp, const fb_bf16 *w, int N, int C, int OC) {
  size_t nc = (size_t)N * C, wc = (size_t)OC * C, no = (size_t)N * OC;
  carve c = {0};
  float *di32, *d32, *x32, *w32, *dw32, *db32;
  CARVE(c, "matmul_bwd", di32 = take(&c, dinp ? nc * 4 : 0), d32 = take(&c, no * 4),
        x32 = take(&c, nc * 4), w32 = take(&c, dinp ? wc * 4 : 0), dw32 = take(&c, wc * 4),
        db32 = take(&c, dbias ? (size_t)OC * 4 : 0));
  widen(d32, dout, no);
  widen(x32, inp, nc);
  if (dinp) widen(w32, w, wc);
  memset(dw32, 0, wc * 4); /* dw += sum over this call's rows, summed in fp32 from zero */
  if (dbias) memset(db32, 0, (size_t)OC * 4);
  fb_matmul_bwd_f32(dinp ? di32 : NULL, dw32, dbias ? db32 : NULL, d32, x32, w32, N, C, OC);
  if (dinp) narrow(dinp, di32, nc);
  acc_round(dw, dw32, wc);
  if (dbias) acc_round(dbias, db32, (size_t)OC);
  return FB_OK;
}

/* ---- attention: dense fp32 copies of the (possibly strided) q, k, v rows --------------- */
fb_status fb_attention_fwd_bf16(fb_bf16 *out, float *lse, const fb_bf16 *q, const fb_bf16 *k,
                                const fb_bf16 *v, int B, int T, int H, int KVH, int hd, int ldq,
                                int ldkv, float *scratch) {
  int64_t N = (int64_t)B * T, qc = (int64_t)H * hd, kc = (int64_t)KVH * hd;
  carve c = {0};
  float *q32, *k32, *v32, *o32;
  CARVE(c, "attention_fwd", q32 = take(&c, (size_t)(N * qc) * 4),
        k32 = take(&c, (size_t)(N * kc) * 4), v32 = take(&c, (size_t)(N * kc) * 4),
        o32 = take(&c, (size_t)(N * qc) * 4));
  widen_rows(q32, qc, q, ldq, N, qc);
  widen_rows(k32, kc, k, ldkv, N, kc);
  widen_rows(v32, kc, v, ldkv, N, kc);
  fb_attention_fwd_f32(o32, lse, q32, k32, v32, B, T, H, KVH, hd, (int)qc, (int)kc, scratch);
  narrow(out, o32, (size_t)(N * qc));
  return FB_OK;
}

fb_status fb_attention_bwd_bf16(fb_bf16 *dq, fb_bf16 *dk, fb_bf16 *dv, const fb_bf16 *dout,
                                const fb_bf16 *q, const fb_bf16 *k, const fb_bf16 *v,
                                const fb_bf16 *out, const float *lse, int B, int T, int H,
                                int KVH, int hd, int ldq, int ldkv, float *scratch) {
  int64_t N = (int64_t)B * T, qc = (int64_t)H * hd, kc = (int64_t)KVH * hd;
  size_t nq = (size_t)(N * qc) * 4, nk = (size_t)(N * kc) * 4;
  carve c = {0};
  float *do32, *q32, *k32, *v32, *o32, *dq32, *dk32, *dv32;
  CARVE(c, "attention_bwd", do32 = take(&c, nq), q32 = take(&c, nq), k32 = take(&c, nk),
        v32 = take(&c, nk), o32 = take(&c, nq), dq32 = take(&c, nq), dk32 = take(&c, nk),
        dv32 = take(&c, nk));
  widen(do32, dout, (size_t)(N * qc));
  widen(o32, out, (size_t)(N * qc));
  widen_rows(q32, qc, q, ldq, N, qc);
  widen_rows(k32, kc, k, ldkv, N, kc);
  widen_rows(v32, kc, v, ldkv, N, kc);
  fb_attention_bwd_f32(dq32, dk32, dv32, do32, q32, k32, v32, o32, lse, B, T, H, KVH, hd,
                       (int)qc, (int)kc, scratch);
  narrow_rows(dq, ldq, dq32, qc, N, qc);
  narrow_rows(dk, ldkv, dk32, kc, N, kc);
  narrow_rows(dv, ldkv, dv32, kc, N, kc);
  return FB_OK;
}

/* ---- rotary embedding, in place on the nh*hd leading elements of each row --------------- */
static fb_status rope_bf16(fb_bf16 *x, int B, int T, int nh, int hd, int ld, double theta,
                           int inverse) {
  int64_t N = (int64_t)B * T, cols = (int64_t)nh * hd;
  carve c = {0};
  float *x32;
  CARVE(c, inverse ? "rope_bwd" : "rope_fwd", x32 = take(&c, (size_t)(N * cols) * 4));
  widen_rows(x32, cols, x, ld, N, cols);
  if (inverse)
    fb_rope_bwd_f32(x32, B, T, nh, hd, (int)cols, theta);
  else
    fb_rope_fwd_f32(x32, B, T, nh, hd, (int)cols, theta);
  narrow_rows(x, ld, x32, cols, N, cols);
  return FB_OK;
}
fb_status fb_rope_fwd_bf16(fb_bf16 *x, int B, int T, int nh, int hd, int ld, double theta) {
  return rope_bf16(x, B, T, nh, hd, ld, theta, 0);
}
fb_status fb_rope_bwd_bf16(fb_bf16 *dx, int B, int T, int nh, int hd, int ld, double theta) {
  return rope_bf16(dx, B, T, nh, hd, ld, theta, 1);
}

/* ---- element-wise: EW_CHUNK blocks widened on the stack, the fp32 op on each block ------- */
#define EW_BLOCKS(n, i0, m, ...)                                                               \
  do {                                                                                         \
    int64_t nb_ = (int64_t)(((n) + EW_CHUNK - 1) / EW_CHUNK);                                  \
    _Pragma("omp parallel for schedule(static) if (nb_ > 8)")                                  \
    for (int64_t b_ = 0; b_ < nb_; b_++) {                                                     \
      size_t i0 = (size_t)b_ * EW_CHUNK, m = min_sz(EW_CHUNK, (n) - i0);                       \
      __VA_ARGS__;                                                                             \
    }                                                                                          \
  } while (0)

fb_status fb_gelu_fwd_bf16(fb_bf16 *out, const fb_bf16 *inp, size_t n) {
  EW_BLOCKS(n, i0, m, {
    float x[EW_CHUNK], y[EW_CHUNK];
    blk_widen(x, inp + i0, m);
    fb_gelu_fwd_f32(y, x, m);
    blk_narrow(out + i0, y, m);
  });
  return FB_OK;
}
fb_status fb_gelu_bwd_bf16(fb_bf16 *dinp, const fb_bf16 *inp, const fb_bf16 *dout, size_t n) {
  EW_BLOCKS(n, i0, m, {
    float x[EW_CHUNK], d[EW_CHUNK], y[EW_CHUNK];
    blk_widen(x, inp + i0, m);
    blk_widen(d, dout + i0, m);
    fb_gelu_bwd_f32(y, x, d, m);
    blk_narrow(dinp + i0, y, m);
  });
  return FB_OK;
}
fb_status fb_swiglu_fwd_bf16(fb_bf16 *out, const fb_bf16 *a, const fb_bf16 *b, size_t n) {
  EW_BLOCKS(n, i0, m, {
    float xa[EW_CHUNK], xb[EW_CHUNK], y[EW_CHUNK];
    blk_widen(xa, a + i0, m);
    blk_widen(xb, b + i0, m);
    fb_swiglu_fwd_f32(y, xa, xb, m);
    blk_narrow(out + i0, y, m);
  });
  return FB_OK;
}
fb_status fb_swiglu_bwd_bf16(fb_bf16 *da, fb_bf16 *db, const fb_bf16 *dout, const fb_bf16 *a,
                             const fb_bf16 *b, size_t n) {
  EW_BLOCKS(n, i0, m, {
    float xa[EW_CHUNK], xb[EW_CHUNK], d[EW_CHUNK], ga[EW_CHUNK], gb[EW_CHUNK];
    blk_widen(xa, a + i0, m);
    blk_widen(xb, b + i0, m);
    blk_widen(d, dout + i0, m);
    fb_swiglu_bwd_f32(ga, gb, d, xa, xb, m);
    blk_narrow(da + i0, ga, m);
    blk_narrow(db + i0, gb, m);
  });
  return FB_OK;
}
/* out may alias a or b: each block is read whole before it is written */
fb_status fb_add_bf16(fb_bf16 *out, const fb_bf16 *a, const fb_bf16 *b, size_t n) {
  EW_BLOCKS(n, i0, m, {
    float xa[EW_CHUNK], xb[EW_CHUNK], y[EW_CHUNK];
    blk_widen(xa, a + i0, m);
    blk_widen(xb, b + i0, m);
    fb_add_f32(y, xa, xb, m);
    blk_narrow(out + i0, y, m);
  });
  return FB_OK;
}

/* ---- cross-entropy: rows widened a slab at a time; the fp32 op adds the row losses in row
 * order, slab after slab, so the fp64 loss is the one a single call would give. ---------- */
fb_status fb_xent_fwd_bwd_bf16(fb_bf16 *logits, double *loss_sum, const int32_t *targets,
                               int N, int V, int ld, float dscale) {
  if (N == 0 || V == 0) return FB_OK;
  int slab = XENT_ELEMS / V < 1 ? 1 : XENT_ELEMS / V;
  slab = slab < N ? slab : N;
  carve c = {0};
  float *l32;
  CARVE(c, "xent_fwd_bwd", l32 = take(&c, (size_t)slab * V * 4));
  for (int r0 = 0; r0 < N; r0 += slab) {
    int nr = N - r0 < slab ? N - r0 : slab;
    fb_bf16 *l = logits + (int64_t)r0 * ld;
    widen_rows(l32, V, l, ld, nr, V);
    fb_xent_fwd_bwd_f32(l32, loss_sum, targets + r0, nr, V, V, dscale);
    narrow_rows(l, ld, l32, V, nr, V);
    for (int r = 0; r < nr; r++) /* padding: no gradient */
      memset(l + (int64_t)r * ld + V, 0, (size_t)(ld - V) * sizeof *l);
  }
  return FB_OK;
}

#undef EW_BLOCKS

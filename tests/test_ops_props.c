/* Properties of the cpu kernel table (called through fb_cpu_kernels with a context whose dev
 * and stream are NULL): exact, shard-independent sum-of-squares bins; results bitwise equal
 * with 1 and 2 OpenMP threads for every op; AdamW and SGD against a scalar reference, AdamW on
 * odd-length shards bitwise as on the whole tensor; zero
 * padding stays zero under AdamW with weight decay; bf16 round trips and rounding; the fp32
 * exp used by the kernels; and the dtype rule of the table (fp32, bf16 with fp32 math, fp64;
 * anything else refused). */
#include <float.h>
#include <math.h>
#include <omp.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "engine/ops/cpu_kernels.h"
#include "engine/ops/elementwise.h"
#include "engine/ops/ops.h"
#include "tests/check.h"

static const fb_kctx K = {.dev = NULL, .s = NULL, .act = FB_F32, .unit = -1};
#define KT (&fb_cpu_kernels)

static uint64_t rs = 12345;
static uint64_t next_u64(void) {
  uint64_t z = (rs += 0x9e3779b97f4a7c15ull);
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
  return z ^ (z >> 31);
}
static float frand(void) { return (float)((double)(next_u64() >> 11) * 0x1.0p-52 - 1.0); }
static float *fvec(size_t n, float s) {
  float *x = malloc(n * sizeof *x);
  for (size_t i = 0; i < n; i++) x[i] = frand() * s;
  return x;
}

/* ---- sum of squares bins ---------------------------------------------------------------- */
/* Two sets of bins hold the same exact sum (their words may differ). */
static bool same_sum(const uint64_t *a, const uint64_t *b) {
  uint64_t x[FB_NORM_LIMBS], y[FB_NORM_LIMBS];
  fb_norm_bins_exact(a, x);
  fb_norm_bins_exact(b, y);
  return !memcmp(x, y, sizeof x);
}

/* The kernel's bins of g against the reference layout (every element in its own bin); once
 * whole (full runs take the AVX-512 path where the CPU has it) and once in pieces of 100
 * (shorter than a run: the portable path). */
static bool bins_exact(const float *g, size_t n) {
  uint64_t got[2 * FB_NORM_BINS] = {0}, one[2 * FB_NORM_BINS] = {0};
  uint64_t short_runs[2 * FB_NORM_BINS] = {0};
  CHECK_OK(KT->sumsq_bins(&K, got, g, n));
  for (size_t i = 0; i < n; i += 100)
    CHECK_OK(KT->sumsq_bins(&K, short_runs, g + i, n - i < 100 ? n - i : 100));
  for (size_t i = 0; i < n; i++) {
    uint32_t e;
    uint64_t sq;
    fb_sumsq_decompose(g[i], &e, &sq);
    one[2 * e] += sq & 0xffffffffu;
    one[2 * e + 1] += sq >> 32;
  }
  return same_sum(got, one) && same_sum(short_runs, one);
}

static void test_sumsq(void) {
  enum { N = 100003 };
  float *g = malloc(N * sizeof *g);
  for (size_t i = 0; i < N; i++) { /* exponents spread over the fp32 range, zeros, denormals */
    int ex = (int)(next_u64() % 200) - 120;
    g[i] = ldexpf(frand(), ex);
    if (i % 97 == 0) g[i] = 0.0f;
    if (i % 101 == 0) g[i] = (float)(next_u64() % 1000) * FLT_TRUE_MIN;
  }
  /* narrow spread first (most elements in their run's window), then the wide one */
  float *narrow = fvec(N, 1e-3f);
  for (size_t i = 0; i < N; i += 4099) narrow[i] *= 1e4f; /* outliers widen a run's window */
  CHECK(bins_exact(narrow, N), "narrow spread: the bins do not hold the exact sum of squares");
  free(narrow);
  CHECK(bins_exact(g, N), "wide spread: the bins do not hold the exact sum of squares");
  uint64_t whole[2 * FB_NORM_BINS] = {0};
  CHECK_OK(KT->sumsq_bins(&K, whole, g, N));
  double norm = fb_norm_from_bins(whole);
  long double ref = 0;
  for (size_t i = 0; i < N; i++) ref += (long double)g[i] * (long double)g[i];
  double rel = fabs(norm - (double)sqrtl(ref)) / (double)sqrtl(ref);
  printf("  sumsq: norm %.17g, long double reference rel diff %.3e\n", norm, rel);
  CHECK(rel < 1e-15, "norm from bins differs from the long double reference by %.3e", rel);

  for (int trial = 0; trial < 20; trial++) { /* random shardings, random shard order */
    int k = 2 + (int)(next_u64() % 7);
    size_t cut[10];
    cut[0] = 0;
    cut[k] = N;
    for (int j = 1; j < k; j++) cut[j] = next_u64() % N;
    for (int a = 1; a < k; a++) /* sort the cut points */
      for (int b = a + 1; b < k; b++)
        if (cut[b] < cut[a]) {
          size_t t = cut[a];
          cut[a] = cut[b];
          cut[b] = t;
        }
    uint64_t merged[2 * FB_NORM_BINS] = {0};
    int start = (int)(next_u64() % (uint64_t)k);
    for (int jj = 0; jj < k; jj++) {
      int j = (start + jj) % k;
      uint64_t part[2 * FB_NORM_BINS] = {0};
      CHECK_OK(KT->sumsq_bins(&K, part, g + cut[j], cut[j + 1] - cut[j]));
      for (int i = 0; i < 2 * FB_NORM_BINS; i++) merged[i] += part[i];
    }
    CHECK(same_sum(merged, whole), "trial %d: merged bins hold another sum", trial);
    double nm = fb_norm_from_bins(merged);
    CHECK(!memcmp(&nm, &norm, sizeof nm), "trial %d: norm %.17g != %.17g", trial, nm, norm);
  }
  /* runs of 128 at the double-precision path's edges (norm_bins.c, sumsq_run_fp64): spans of
   * 20 exponents (taken) and 21 (left to the integer passes), all-ones mantissas for the
   * largest sums, magnitudes near 2^126 and 2^-128 (its bin limits), signed zeros, denormals
   * under small normals, and a run of zeros */
  enum { RUNS = 12, RL = 128 };
  float *edge = malloc(RUNS * RL * sizeof *edge);
  const int top[RUNS] = {0, 0, 100, 126, 127, -127, -128, -120, -100, 5, -20, 60};
  const int span[RUNS] = {20, 21, 20, 3, 0, 2, 0, 7, 20, 0, 19, 22};
  for (int r = 0; r < RUNS; r++)
    for (int i = 0; i < RL; i++) {
      float m = 1.0f + (float)(i * 37 % 128) / 128.0f - FLT_EPSILON * (float)(i % 3);
      if (i % 5 == 0) m = 2.0f - FLT_EPSILON; /* mantissa 0xffffff */
      float x = ldexpf(m, top[r] - (i % 11 == 0 ? span[r] : (int)(i % (span[r] + 1)) / 2));
      if (i % 7 == 0) x = -x;
      if (i % 13 == 0) x = i % 2 ? -0.0f : 0.0f;
      edge[r * RL + i] = x;
    }
  for (int i = 0; i < RL; i++) edge[4 * RL + i] = i % 2 ? 0.0f : -0.0f; /* zeros only */
  for (int i = 0; i < RL; i += 9) edge[7 * RL + i] = (float)(i + 1) * FLT_TRUE_MIN;
  CHECK(bins_exact(edge, RUNS * RL), "edge runs: the bins do not hold the exact sum of squares");
  free(edge);
  /* long runs of 1024 (the same path's first try): spans of 17 (taken) and 20 (not taken: it
   * would lose bits), at ordinary, large and small magnitudes, most elements at the smallest
   * exponent (the largest sum of remainders) */
  enum { LRUNS = 4, LL = 1024 };
  float *lng = malloc(LRUNS * LL * sizeof *lng);
  const int ltop[LRUNS] = {0, 0, 110, -100}, lspan[LRUNS] = {17, 20, 17, 17};
  for (int r = 0; r < LRUNS; r++)
    for (int i = 0; i < LL; i++) {
      float m = i % 3 ? 2.0f - FLT_EPSILON : 1.0f + (float)(i % 127) / 128.0f;
      lng[r * LL + i] = ldexpf(i % 17 ? m : -m, ltop[r] - (i == 0 ? 0 : lspan[r]));
    }
  CHECK(bins_exact(lng, LRUNS * LL), "long runs: the bins do not hold the exact sum of squares");
  free(lng);
  /* exact small cases */
  float v[3] = {3.0f, -4.0f, 0.0f};
  uint64_t b3[2 * FB_NORM_BINS] = {0};
  CHECK_OK(KT->sumsq_bins(&K, b3, v, 3));
  CHECK(fb_norm_from_bins(b3) == 5.0, "norm of (3, -4, 0) is %.17g", fb_norm_from_bins(b3));
  float den = FLT_TRUE_MIN;
  uint64_t bd[2 * FB_NORM_BINS] = {0};
  CHECK_OK(KT->sumsq_bins(&K, bd, &den, 1));
  CHECK(fb_norm_from_bins(bd) == (double)FLT_TRUE_MIN, "norm of the smallest denormal");
  float inf = INFINITY;
  CHECK_OK(KT->sumsq_bins(&K, bd, &inf, 1));
  CHECK(isnan(fb_norm_from_bins(bd)), "a non-finite gradient gives a NaN norm");
  free(g);
}

/* ---- bitwise independence of the thread count ------------------------------------------- */
typedef struct { void *p; size_t bytes; } outbuf;
#define MAXOUT 4
/* Runs op(threads) into fresh outputs, returns them. */
typedef void (*op_run)(outbuf *outs, int *nout);

static float *g_x, *g_y, *g_z, *g_w, *g_b, *g_qkv, *g_dout; /* shared random inputs */
static int32_t g_tok[512], g_tgt[512];
enum { PN = 64, PC = 384, POC = 200, PV = 1000, PE = 50000 };
enum { PB = 2, PT = 100, PH = 4, PKVH = 2, PHD = 16 };
#define PLD ((PH + 2 * PKVH) * PHD)

static float *out_alloc(outbuf *o, int *n, size_t count) {
  float *p = calloc(count, sizeof(float));
  o[*n].p = p;
  o[*n].bytes = count * sizeof(float);
  (*n)++;
  return p;
}
static void run_encoder(outbuf *o, int *n) {
  float *out = out_alloc(o, n, (size_t)PN * PC);
  float *dwte = out_alloc(o, n, (size_t)50 * PC), *dwpe = out_alloc(o, n, (size_t)32 * PC);
  CHECK_OK(KT->encoder_fwd(&K, out, g_tok, g_w, g_b, 2, 32, PC));
  CHECK_OK(KT->encoder_bwd(&K, dwte, dwpe, g_dout, g_tok, 2, 32, PC));
}
static void run_layernorm(outbuf *o, int *n) {
  float *out = out_alloc(o, n, (size_t)PN * PC), *mean = out_alloc(o, n, PN);
  float *rstd = out_alloc(o, n, PN), *dx = out_alloc(o, n, (size_t)PN * PC + 2 * PC);
  CHECK_OK(KT->layernorm_fwd(&K, out, mean, rstd, g_x, g_w, g_b, PN, PC, 1e-5f));
  CHECK_OK(KT->layernorm_bwd(&K, dx, dx + PN * PC, dx + PN * PC + PC, g_dout, g_x, g_w, mean,
                             rstd, PN, PC));
}
static void run_rmsnorm(outbuf *o, int *n) {
  float *out = out_alloc(o, n, (size_t)PN * PC), *rstd = out_alloc(o, n, PN);
  float *dx = out_alloc(o, n, (size_t)PN * PC + PC);
  CHECK_OK(KT->rmsnorm_fwd(&K, out, rstd, g_x, g_w, PN, PC, 1e-5f));
  CHECK_OK(KT->rmsnorm_bwd(&K, dx, dx + PN * PC, g_dout, g_x, g_w, rstd, PN, PC));
}
static void run_matmul(outbuf *o, int *n) {
  float *out = out_alloc(o, n, (size_t)PN * POC), *dx = out_alloc(o, n, (size_t)PN * PC);
  float *dw = out_alloc(o, n, (size_t)POC * PC), *db = out_alloc(o, n, POC);
  CHECK_OK(KT->matmul_fwd(&K, out, g_x, g_w, g_b, PN, PC, POC));
  CHECK_OK(KT->matmul_bwd(&K, dx, dw, db, g_dout, g_x, g_w, PN, PC, POC));
}
/* a shape where OpenBLAS's own threading rounds differently with 1 and 2 threads */
static void run_matmul_big(outbuf *o, int *n) {
  enum { BN = 1000, BC = 700, BOC = 300 };
  float *x = malloc((size_t)BN * BC * 4), *w = malloc((size_t)BOC * BC * 4);
  float *d = malloc((size_t)BN * BOC * 4);
  for (size_t i = 0; i < (size_t)BN * BC; i++) x[i] = g_x[i % ((size_t)PN * PV)];
  for (size_t i = 0; i < (size_t)BOC * BC; i++) w[i] = g_w[i % ((size_t)POC * PC)];
  for (size_t i = 0; i < (size_t)BN * BOC; i++) d[i] = g_dout[i % ((size_t)PN * PV)];
  float *out = out_alloc(o, n, (size_t)BN * BOC), *dx = out_alloc(o, n, (size_t)BN * BC);
  float *dw = out_alloc(o, n, (size_t)BOC * BC);
  CHECK_OK(KT->matmul_fwd(&K, out, x, w, NULL, BN, BC, BOC));
  CHECK_OK(KT->matmul_bwd(&K, dx, dw, NULL, d, x, w, BN, BC, BOC));
  free(x), free(w), free(d);
}
static void run_attention(outbuf *o, int *n) {
  size_t nout = (size_t)PB * PT * PH * PHD, nbuf = (size_t)PB * PT * PLD;
  float *out = out_alloc(o, n, nout), *lse = out_alloc(o, n, (size_t)PB * PH * PT);
  float *d = out_alloc(o, n, nbuf);
  void *scratch = malloc(fb_attention_scratch_bytes(NULL, PB, PT, PH, PKVH, PHD));
  CHECK_OK(KT->attention_fwd(&K, out, lse, g_qkv, g_qkv + PH * PHD, g_qkv + (PH + PKVH) * PHD,
                             PB, PT, PH, PKVH, PHD, PLD, PLD, scratch));
  CHECK_OK(KT->attention_bwd(&K, d, d + PH * PHD, d + (PH + PKVH) * PHD, g_dout, g_qkv,
                             g_qkv + PH * PHD, g_qkv + (PH + PKVH) * PHD, out, lse, PB, PT, PH,
                             PKVH, PHD, PLD, PLD, scratch));
  free(scratch);
}
static void run_rope(outbuf *o, int *n) {
  size_t nbuf = (size_t)PB * PT * PLD;
  float *x = out_alloc(o, n, nbuf), *d = out_alloc(o, n, nbuf);
  memcpy(x, g_qkv, nbuf * sizeof *x);
  memcpy(d, g_qkv, nbuf * sizeof *x);
  CHECK_OK(KT->rope_fwd(&K, x, PB, PT, PH + PKVH, PHD, PLD, 10000.0f));
  CHECK_OK(KT->rope_bwd(&K, d, PB, PT, PH + PKVH, PHD, PLD, 500000.0f));
}
static void run_elementwise(outbuf *o, int *n) {
  float *g = out_alloc(o, n, PE), *dg = out_alloc(o, n, PE), *s = out_alloc(o, n, 3 * PE);
  CHECK_OK(KT->gelu_fwd(&K, g, g_x, PE));
  CHECK_OK(KT->gelu_bwd(&K, dg, g_x, g_dout, PE));
  CHECK_OK(KT->swiglu_fwd(&K, s, g_x, g_y, PE));
  CHECK_OK(KT->swiglu_bwd(&K, s + PE, s + 2 * PE, g_dout, g_x, g_y, PE));
}
static void run_vec(outbuf *o, int *n) {
  float *a = out_alloc(o, n, PE), *y = out_alloc(o, n, PE);
  double *sum = (double *)out_alloc(o, n, 2);
  CHECK_OK(KT->add(&K, a, g_x, g_y, PE));
  memcpy(y, g_z, PE * sizeof *y);
  CHECK_OK(KT->acc_f32(&K, y, g_x, PE));
  CHECK_OK(KT->scale(&K, y, FB_F32, 0.37f, PE));
  CHECK_OK(KT->sum_f64(&K, sum, g_x, PE));
}
static void run_xent(outbuf *o, int *n) {
  float *l = out_alloc(o, n, (size_t)PN * PV);
  double *loss = (double *)out_alloc(o, n, 2);
  memcpy(l, g_z, (size_t)PN * PV * sizeof *l);
  CHECK_OK(KT->xent_fwd_bwd(&K, l, loss, g_tgt, PN, PV, PV, 1.0f / PN));
}
static void run_optim(outbuf *o, int *n) {
  float *p = out_alloc(o, n, PE), *m = out_alloc(o, n, PE), *v = out_alloc(o, n, PE);
  float *p2 = out_alloc(o, n, PE);
  memcpy(p, g_x, PE * sizeof *p);
  memcpy(p2, g_x, PE * sizeof *p);
  float *mom = calloc(PE, sizeof *mom);
  fb_adamw_args a = {1e-3f, 0.9f, 0.95f, 1e-8f, 0.1f, 0.1f, 0.05f, 0.7f};
  fb_sgd_args s = {0.1f, 0.9f, 0.01f, 0.5f};
  for (int it = 0; it < 2; it++) {
    CHECK_OK(KT->adamw(&K, p, g_y, m, v, PE, &a));
    CHECK_OK(KT->sgd(&K, p2, g_y, mom, PE, &s));
  }
  free(mom);
}
static void run_cast(outbuf *o, int *n) {
  uint16_t *h = (uint16_t *)out_alloc(o, n, PE / 2 + 1);
  float *back = out_alloc(o, n, PE);
  CHECK_OK(KT->cast(&K, h, FB_BF16, g_x, FB_F32, PE));
  CHECK_OK(KT->cast(&K, back, FB_F32, h, FB_BF16, PE));
}
static void run_sumsq(outbuf *o, int *n) {
  uint64_t *b = (uint64_t *)out_alloc(o, n, 4 * FB_NORM_BINS);
  CHECK_OK(KT->sumsq_bins(&K, b, g_z, (size_t)PN * PV));
}

static void test_threads(void) {
  g_x = fvec((size_t)PN * PV, 2);
  g_y = fvec((size_t)PN * PV, 1);
  g_z = fvec((size_t)PN * PV, 5);
  g_dout = fvec((size_t)PN * PV, 1);
  g_w = fvec((size_t)POC * PC, 1);
  g_b = fvec((size_t)POC * PC, 1);
  g_qkv = fvec((size_t)PB * PT * PLD, 1.5);
  for (int i = 0; i < 512; i++) {
    g_tok[i] = (int32_t)(next_u64() % 50);
    g_tgt[i] = i % 9 == 4 ? -1 : (int32_t)(next_u64() % PV);
  }
  static const struct { const char *name; op_run fn; } ops[] = {
      {"encoder", run_encoder}, {"layernorm", run_layernorm}, {"rmsnorm", run_rmsnorm},
      {"matmul", run_matmul},   {"matmul 1000x300x700", run_matmul_big},
      {"attention", run_attention}, {"rope", run_rope},
      {"gelu/swiglu", run_elementwise}, {"add/acc/scale/sum", run_vec}, {"xent", run_xent},
      {"adamw/sgd", run_optim}, {"cast", run_cast},           {"sumsq", run_sumsq}};
  int saved = omp_get_max_threads();
  for (size_t i = 0; i < sizeof ops / sizeof ops[0]; i++) {
    outbuf o1[MAXOUT * 2], o2[MAXOUT * 2];
    int n1 = 0, n2 = 0;
    omp_set_num_threads(1);
    ops[i].fn(o1, &n1);
    omp_set_num_threads(2);
    ops[i].fn(o2, &n2);
    int same = n1 == n2;
    for (int j = 0; same && j < n1; j++) same = !memcmp(o1[j].p, o2[j].p, o1[j].bytes);
    printf("  threads 1 vs 2: %-18s %s\n", ops[i].name, same ? "bitwise equal" : "DIFFERENT");
    CHECK(same, "%s: results differ between 1 and 2 threads", ops[i].name);
    for (int j = 0; j < n1; j++) free(o1[j].p);
    for (int j = 0; j < n2; j++) free(o2[j].p);
  }
  omp_set_num_threads(saved);
  free(g_x), free(g_y), free(g_z), free(g_dout), free(g_w), free(g_b), free(g_qkv);
}

/* ---- optimizers against a scalar reference ----------------------------------------------- */
static void test_optim(void) {
  enum { N = 10007 };
  float *p = fvec(N, 1), *g = fvec(N, 0.1f), *m = calloc(N, 4), *v = calloc(N, 4);
  double *pr = malloc(N * 8), *mr = calloc(N, 8), *vr = calloc(N, 8);
  for (int i = 0; i < N; i++) pr[i] = p[i];
  const float b1 = 0.9f, b2 = 0.999f;
  for (int t = 1; t <= 3; t++) {
    fb_adamw_args a = {3e-3f, b1, b2, 1e-8f, 0.1f, 1.0f - powf(b1, (float)t),
                       1.0f - powf(b2, (float)t), 0.8f};
    CHECK_OK(KT->adamw(&K, p, g, m, v, N, &a));
    for (int i = 0; i < N; i++) { /* the formula, written out in double */
      double gs = (double)g[i] * a.grad_scale;
      mr[i] = (double)b1 * mr[i] + (1.0 - (double)b1) * gs;
      vr[i] = (double)b2 * vr[i] + (1.0 - (double)b2) * gs * gs;
      double mh = mr[i] / a.bias_corr1, vh = vr[i] / a.bias_corr2;
      pr[i] -= (double)a.lr * (mh / (sqrt(vh) + (double)a.eps) + (double)a.weight_decay * pr[i]);
    }
  }
  double e = 0;
  for (int i = 0; i < N; i++) e = fmax(e, fabs(p[i] - pr[i]));
  printf("  adamw vs scalar double reference: max abs diff %.3e\n", e);
  CHECK(e < 1e-6, "adamw differs from the reference by %.3e", e);
  { /* shards of odd lengths (the vector kernel's partial tails fall elsewhere) update every
     * element bitwise as the whole tensor does */
    static const int cut[] = {1, 7, 9, 8191, 13, 5};
    float *q = malloc(N * 4), *qm = malloc(N * 4), *qv = malloc(N * 4);
    float *r = malloc(N * 4), *rm = malloc(N * 4), *rv = malloc(N * 4);
    memcpy(q, p, N * 4), memcpy(qm, m, N * 4), memcpy(qv, v, N * 4);
    memcpy(r, p, N * 4), memcpy(rm, m, N * 4), memcpy(rv, v, N * 4);
    fb_adamw_args a = {3e-3f, b1, b2, 1e-8f, 0.1f, 0.5f, 0.25f, 0.8f};
    CHECK_OK(KT->adamw(&K, q, g, qm, qv, N, &a));
    for (int i0 = 0, c = 0; i0 < N; c++) {
      int n = c < (int)(sizeof cut / sizeof cut[0]) ? cut[c] : N - i0;
      CHECK_OK(KT->adamw(&K, r + i0, g + i0, rm + i0, rv + i0, (size_t)n, &a));
      i0 += n;
    }
    int same = !memcmp(q, r, N * 4) && !memcmp(qm, rm, N * 4) && !memcmp(qv, rv, N * 4);
    printf("  adamw on shards 1,7,9,8191,13,5,rest vs whole: %s\n",
           same ? "bitwise equal" : "DIFFERENT");
    CHECK(same, "adamw on odd-length shards differs from the whole-tensor update");
    free(q), free(qm), free(qv), free(r), free(rm), free(rv);
  }

  float *mom = calloc(N, 4);
  double *momr = calloc(N, 8);
  for (int i = 0; i < N; i++) pr[i] = p[i];
  fb_sgd_args s = {0.05f, 0.9f, 0.01f, 0.5f};
  for (int t = 0; t < 3; t++) {
    CHECK_OK(KT->sgd(&K, p, g, mom, N, &s));
    for (int i = 0; i < N; i++) {
      double gg = (double)g[i] * s.grad_scale + (double)s.weight_decay * pr[i];
      momr[i] = (double)s.momentum * momr[i] + gg;
      pr[i] -= (double)s.lr * momr[i];
    }
  }
  e = 0;
  for (int i = 0; i < N; i++) e = fmax(e, fabs(p[i] - pr[i]));
  printf("  sgd vs scalar double reference: max abs diff %.3e\n", e);
  CHECK(e < 1e-6, "sgd differs from the reference by %.3e", e);
  /* without a momentum buffer: one plain step */
  float p1 = 1.0f, g1 = 2.0f;
  fb_sgd_args s0 = {0.5f, 0.0f, 0.0f, 1.0f};
  CHECK_OK(KT->sgd(&K, &p1, &g1, NULL, 1, &s0));
  CHECK(p1 == 0.0f, "plain sgd: 1 - 0.5 * 2 = %g", p1);

  /* padding: zero parameters with zero gradients stay exactly zero */
  float z[64] = {0}, zg[64] = {0}, zm[64] = {0}, zv[64] = {0}, zmom[64] = {0};
  fb_adamw_args a = {1e-2f, 0.9f, 0.95f, 1e-8f, 0.1f, 0.1f, 0.05f, 1.0f};
  for (int t = 0; t < 5; t++) {
    CHECK_OK(KT->adamw(&K, z, zg, zm, zv, 64, &a));
    CHECK_OK(KT->sgd(&K, z, zg, zmom, 64, &s));
  }
  int zero = 1;
  for (int i = 0; i < 64; i++)
    zero &= fb_f32_bits(z[i]) == 0 && fb_f32_bits(zm[i]) == 0 && fb_f32_bits(zv[i]) == 0 &&
            fb_f32_bits(zmom[i]) == 0;
  CHECK(zero, "padding did not stay +0 under adamw/sgd with weight decay");
  free(p), free(g), free(m), free(v), free(pr), free(mr), free(vr), free(mom), free(momr);
}

/* ---- bf16 -------------------------------------------------------------------------------- */
static void test_bf16(void) {
  int ok = 1;
  for (uint32_t h = 0; h < 65536; h++) { /* every non-NaN bf16 survives bf16 -> f32 -> bf16 */
    float f = fb_bf16_to_f32((uint16_t)h);
    if (isnan(f)) {
      ok &= isnan(fb_bf16_to_f32(fb_f32_to_bf16(f)));
      continue;
    }
    ok &= fb_f32_to_bf16(f) == h;
  }
  CHECK(ok, "bf16 -> f32 -> bf16 is not the identity");
  /* ties go to even, others to nearest */
  CHECK(fb_f32_to_bf16(1.0f + 0x1p-8f) == fb_f32_to_bf16(1.0f), "tie rounds down to even");
  CHECK(fb_f32_to_bf16(1.0f + 3 * 0x1p-8f) == fb_f32_to_bf16(1.0f + 0x1p-6f), "tie rounds up");
  CHECK(fb_f32_to_bf16(1.0f + 0x1p-8f + 0x1p-20f) == fb_f32_to_bf16(1.0f + 0x1p-7f),
        "above the tie rounds up");
  CHECK(isinf(fb_bf16_to_f32(fb_f32_to_bf16(FLT_MAX))), "FLT_MAX rounds to inf");
  CHECK(isnan(fb_bf16_to_f32(fb_f32_to_bf16(NAN))), "NaN stays NaN");
  /* through the table: error of a round trip is at most half a bf16 ulp */
  enum { N = 4096 };
  float *x = fvec(N, 100), *y = malloc(N * 4);
  uint16_t *h = malloc(N * 2);
  CHECK_OK(KT->cast(&K, h, FB_BF16, x, FB_F32, N));
  CHECK_OK(KT->cast(&K, y, FB_F32, h, FB_BF16, N));
  double worst = 0;
  for (int i = 0; i < N; i++)
    if (x[i] != 0) worst = fmax(worst, fabs((double)y[i] - x[i]) / fabs((double)x[i]));
  CHECK(worst <= 0x1p-8, "bf16 round trip relative error %.3e > 2^-8", worst);
  double dummy[2];
  CHECK(KT->cast(&K, dummy, FB_F64, x, FB_F32, 2) == FB_EUNSUPPORTED, "f32 -> f64 is refused");
  free(x), free(y), free(h);
}

/* ---- the kernels' exp, and the table's dtype rule ---------------------------------------- */
static void test_exp_and_dtype(void) {
  double worst = 0;
  for (int i = 0; i <= 200000; i++) {
    float x = -87.0f + 175.0f * (float)i / 200000.0f;
    double r = exp((double)x), e = fabs((double)fb_exp_f(x) - r) / r;
    worst = e > worst ? e : worst;
  }
  printf("  fb_exp_f max relative error on [-87, 88]: %.3e\n", worst);
  CHECK(worst < 5e-7, "fb_exp_f relative error %.3e", worst);
  CHECK(fb_exp_f(-1000.0f) == 0.0f && isinf(fb_exp_f(1000.0f)) && isnan(fb_exp_f(NAN)),
        "fb_exp_f saturation / NaN");
  CHECK(fb_exp_f(0.0f) == 1.0f, "exp(0) = %.9g", fb_exp_f(0.0f));

  /* bf16 activations compute on the cpu: fp32 math, outputs rounded to nearest even (the
   * whole table in bf16 is checked by test_ops_bf16) */
  fb_kctx kb = K;
  kb.act = FB_BF16;
  float x[4] = {1, 2, 3, 4};
  uint16_t xh[4], yh[4], sh[4];
  for (int i = 0; i < 4; i++) xh[i] = fb_f32_to_bf16(-1.5f + 1.25f * (float)i);
  CHECK_OK(KT->gelu_fwd(&kb, yh, xh, 4));
  CHECK_OK(KT->add(&kb, sh, xh, yh, 4));
  for (int i = 0; i < 4; i++) {
    float xf = fb_bf16_to_f32(xh[i]), g = fb_gelu_f(xf);
    CHECK(yh[i] == fb_f32_to_bf16(g), "bf16 gelu(%g) = %g, want bf16(%.9g)", xf,
          fb_bf16_to_f32(yh[i]), g);
    CHECK(sh[i] == fb_f32_to_bf16(xf + fb_bf16_to_f32(yh[i])), "bf16 add of element %d", i);
  }
  /* other compute dtypes are refused, naming the dtype */
  fb_kctx ki = K;
  ki.act = FB_I32;
  fb_status st = KT->gelu_fwd(&ki, yh, xh, 4);
  CHECK(st == FB_EUNSUPPORTED, "int32 compute on the cpu is refused (got %d)", st);
  CHECK(strstr(fb_error_msg(), fb_dtype_name(FB_I32)) != NULL, "message: %s", fb_error_msg());
  int32_t bad = 7;
  double loss = 0;
  CHECK(KT->xent_fwd_bwd(&K, x, &loss, &bad, 1, 4, 4, 1.0f) == FB_EUSAGE,
        "an out-of-range target is refused");
  /* every table entry is set */
  const void *const *slot = (const void *const *)KT;
  for (size_t i = 0; i < sizeof(fb_kernels) / sizeof(void *); i++)
    CHECK(slot[i] != NULL, "fb_cpu_kernels entry %zu is NULL", i);
}

int main(void) {
  test_sumsq();
  test_threads();
  test_optim();
  test_bf16();
  test_exp_and_dtype();
  return fb_test_done("test_ops_props");
}

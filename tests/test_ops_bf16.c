/* bf16 mixed precision on the cpu kernel table (called through fb_cpu_kernels with act =
 * bf16, dev and stream NULL). For every entry that takes activations, on bf16-representable
 * inputs:
 *  - the bf16 result against the fp32 kernel on the same values, within the bf16 tolerance
 *    |bf16 - fp32| <= 2^-8 |fp32| + 2^-9 max|fp32| (one bf16 ulp of the value; the absolute
 *    part covers matmul's second rounding after the bias and attention's layout-dependent
 *    fp32 summation order);
 *  - the rounding rule itself, bit for bit where the fp32 math is the same: an output is
 *    round-to-nearest-even of the fp32 result (fb_f32_to_bf16), statistics (mean, rstd, lse)
 *    and the fp64 loss are the fp32 kernel's exactly, and a "+=" gradient is rounded once per
 *    call: bf16(old + fp32 sum) (matmul's biased output: bf16(bf16(x w^T) + bias), as CUDA);
 *  - strided outputs (rope, attention inside a padded qkv buffer) leave the padding alone;
 *  - determinism: every output bitwise equal run to run and with 1, 2 and 3 OpenMP threads;
 *  - the token-embedding gradient sums in fp32: 4096 tokens on one row (and one position),
 *    each adding ~1e-3, give ~4.1, where a bf16 running sum stalls at 0.5.
 * Prints the worst error of every comparison. */
#include <math.h>
#include <omp.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "engine/ops/cpu_kernels.h"
#include "engine/ops/elementwise.h"
#include "engine/ops/ops.h"
#include "tests/check.h"

static const fb_kctx KF = {.dev = NULL, .s = NULL, .act = FB_F32, .unit = -1};
static const fb_kctx KB = {.dev = NULL, .s = NULL, .act = FB_BF16, .unit = -1};
#define KT (&fb_cpu_kernels)
#define REL_TOL 0x1p-8
#define ABS_TOL 0x1p-9

static uint64_t rs = 777;
static uint64_t next_u64(void) {
  uint64_t z = (rs += 0x9e3779b97f4a7c15ull);
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
  return z ^ (z >> 31);
}
static float frand(void) { return (float)((double)(next_u64() >> 11) * 0x1.0p-52 - 1.0); }

static float bf(uint16_t h) { return fb_bf16_to_f32(h); }
static uint16_t rne(float f) { return fb_f32_to_bf16(f); }
/* n random bf16 values in [-s, s) */
static uint16_t *bvec(size_t n, float s) {
  uint16_t *h = malloc(n * sizeof *h);
  for (size_t i = 0; i < n; i++) h[i] = rne(frand() * s);
  return h;
}
static float *widen(const uint16_t *h, size_t n) {
  float *x = malloc(n * sizeof *x);
  for (size_t i = 0; i < n; i++) x[i] = bf(h[i]);
  return x;
}
static uint16_t *hdup(const uint16_t *h, size_t n) {
  uint16_t *c = malloc(n * sizeof *c);
  memcpy(c, h, n * sizeof *c);
  return c;
}

/* ---- comparisons ------------------------------------------------------------------------- */
/* got (bf16, elements at stride ldg in rows of `cols`) against the fp32 kernel's ref. */
static void near_rows(const char *what, const uint16_t *got, int64_t ldg, const float *ref,
                      int64_t ldr, int64_t rows, int64_t cols) {
  double mx = 0, worst = 0;
  for (int64_t r = 0; r < rows; r++)
    for (int64_t j = 0; j < cols; j++) mx = fmax(mx, fabs((double)ref[r * ldr + j]));
  int bad = 0;
  for (int64_t r = 0; r < rows; r++)
    for (int64_t j = 0; j < cols; j++) {
      double g = bf(got[r * ldg + j]), f = ref[r * ldr + j], e = fabs(g - f);
      if (e > REL_TOL * fabs(f) + ABS_TOL * mx) bad++;
      worst = fmax(worst, e / (fabs(f) + mx * 0x1p-1));
    }
  printf("  %-34s vs fp32: worst |err| / (|ref| + max/2) %.3e, %d outside tolerance\n", what,
         worst, bad);
  CHECK(bad == 0, "%s: %d elements differ from fp32 by more than the bf16 tolerance", what, bad);
}
static void near(const char *what, const uint16_t *got, const float *ref, size_t n) {
  near_rows(what, got, 0, ref, 0, 1, (int64_t)n);
}
/* got == expect bit for bit */
static void same_bits(const char *what, const uint16_t *got, const uint16_t *expect, size_t n) {
  size_t bad = 0;
  for (size_t i = 0; i < n; i++) bad += got[i] != expect[i];
  CHECK(bad == 0, "%s: %zu of %zu elements are not the expected rounding", what, bad, n);
}
/* got == rne(ref) bit for bit */
static void rounded(const char *what, const uint16_t *got, const float *ref, size_t n) {
  size_t bad = 0;
  for (size_t i = 0; i < n; i++) bad += got[i] != rne(ref[i]);
  CHECK(bad == 0, "%s: %zu of %zu elements are not round-to-nearest-even of the fp32 result",
        what, bad, n);
}
/* got == rne(old + acc) bit for bit: one rounding of the call's fp32 sum */
static void rounded_once(const char *what, const uint16_t *got, const uint16_t *old,
                         const float *acc, size_t n) {
  size_t bad = 0;
  for (size_t i = 0; i < n; i++) bad += got[i] != rne(bf(old[i]) + acc[i]);
  CHECK(bad == 0, "%s: %zu of %zu elements are not bf16(old + fp32 sum)", what, bad, n);
}
static void same_f32(const char *what, const float *a, const float *b, size_t n) {
  CHECK(!memcmp(a, b, n * sizeof *a), "%s: statistics differ from the fp32 kernel's", what);
}

/* ---- the suite: every kernel once; `check` compares, the hash collects every output ------ */
static uint64_t hash_of[16];
static const char *hash_name[16];
static int nhash;
static void hash_out(int slot, const void *p, size_t bytes) {
  uint64_t h = hash_of[slot] ? hash_of[slot] : 1469598103934665603ull;
  const unsigned char *c = p;
  for (size_t i = 0; i < bytes; i++) h = (h ^ c[i]) * 1099511628211ull;
  hash_of[slot] = h;
}
static int slot_for(const char *name) {
  for (int i = 0; i < nhash; i++)
    if (!strcmp(hash_name[i], name)) return i;
  hash_name[nhash] = name;
  return nhash++;
}

enum { N = 64, C = 384, OC = 200, V = 50, BB = 2, TT = 32 };
enum { AB = 2, AT = 100, AH = 4, AKVH = 2, AHD = 16, APAD = 8 };
#define ALD ((AH + 2 * AKVH) * AHD + APAD)

static void suite_encoder(int check) {
  int h = slot_for("encoder");
  size_t nout = (size_t)BB * TT * C;
  uint16_t *wte = bvec((size_t)V * C, 1), *wpe = bvec((size_t)TT * C, 1);
  uint16_t *dout = bvec(nout, 1), *dwte0 = bvec((size_t)V * C, 0.5f);
  uint16_t *dwpe0 = bvec((size_t)TT * C, 0.5f);
  int32_t tok[BB * TT];
  for (int i = 0; i < BB * TT; i++) tok[i] = (int32_t)((i * 7 + i / 5) % 23); /* repeats */
  uint16_t *out = malloc(nout * 2), *dwte = hdup(dwte0, (size_t)V * C);
  uint16_t *dwpe = hdup(dwpe0, (size_t)TT * C);
  CHECK_OK(KT->encoder_fwd(&KB, out, tok, wte, wpe, BB, TT, C));
  CHECK_OK(KT->encoder_bwd(&KB, dwte, dwpe, dout, tok, BB, TT, C));
  hash_out(h, out, nout * 2), hash_out(h, dwte, (size_t)V * C * 2);
  hash_out(h, dwpe, (size_t)TT * C * 2);
  if (check) {
    float *wte32 = widen(wte, (size_t)V * C), *wpe32 = widen(wpe, (size_t)TT * C);
    float *dout32 = widen(dout, nout), *out32 = malloc(nout * 4);
    float *dwte32 = widen(dwte0, (size_t)V * C), *dwpe32 = widen(dwpe0, (size_t)TT * C);
    CHECK_OK(KT->encoder_fwd(&KF, out32, tok, wte32, wpe32, BB, TT, C));
    CHECK_OK(KT->encoder_bwd(&KF, dwte32, dwpe32, dout32, tok, BB, TT, C));
    near("encoder_fwd out", out, out32, nout);
    rounded("encoder_fwd out", out, out32, nout);
    near("encoder_bwd dwte (+=)", dwte, dwte32, (size_t)V * C);
    rounded("encoder_bwd dwte: fp32 sum from the old value", dwte, dwte32, (size_t)V * C);
    near("encoder_bwd dwpe (+=)", dwpe, dwpe32, (size_t)TT * C);
    rounded("encoder_bwd dwpe: fp32 sum from the old value", dwpe, dwpe32, (size_t)TT * C);
    /* without wpe (Llama) */
    CHECK_OK(KT->encoder_fwd(&KB, out, tok, wte, NULL, BB, TT, C));
    CHECK_OK(KT->encoder_fwd(&KF, out32, tok, wte32, NULL, BB, TT, C));
    rounded("encoder_fwd out, no wpe", out, out32, nout);
    free(wte32), free(wpe32), free(dout32), free(out32), free(dwte32), free(dwpe32);
  }
  free(wte), free(wpe), free(dout), free(dwte0), free(dwpe0), free(out), free(dwte), free(dwpe);
}

static void suite_norms(int check) {
  int h = slot_for("layernorm/rmsnorm");
  size_t nc = (size_t)N * C;
  uint16_t *x = bvec(nc, 2), *w = bvec(C, 1), *b = bvec(C, 1), *dout = bvec(nc, 1);
  uint16_t *dx0 = bvec(nc, 0.5f), *dw0 = bvec(C, 0.5f), *db0 = bvec(C, 0.5f);
  uint16_t *out = malloc(nc * 2), *dx = hdup(dx0, nc), *dw = hdup(dw0, C), *db = hdup(db0, C);
  float mean[N], rstd[N];
  CHECK_OK(KT->layernorm_fwd(&KB, out, mean, rstd, x, w, b, N, C, 1e-5f));
  CHECK_OK(KT->layernorm_bwd(&KB, dx, dw, db, dout, x, w, mean, rstd, N, C));
  hash_out(h, out, nc * 2), hash_out(h, mean, sizeof mean), hash_out(h, rstd, sizeof rstd);
  hash_out(h, dx, nc * 2), hash_out(h, dw, C * 2), hash_out(h, db, C * 2);
  uint16_t *rout = malloc(nc * 2), *rdx = hdup(dx0, nc), *rdw = hdup(dw0, C);
  float rr[N];
  CHECK_OK(KT->rmsnorm_fwd(&KB, rout, rr, x, w, N, C, 1e-5f));
  CHECK_OK(KT->rmsnorm_bwd(&KB, rdx, rdw, dout, x, w, rr, N, C));
  hash_out(h, rout, nc * 2), hash_out(h, rr, sizeof rr), hash_out(h, rdx, nc * 2);
  hash_out(h, rdw, C * 2);
  if (check) {
    float *x32 = widen(x, nc), *w32 = widen(w, C), *b32 = widen(b, C), *d32 = widen(dout, nc);
    float *o32 = malloc(nc * 4), m32[N], r32[N];
    float *dx32 = widen(dx0, nc), *dw32 = widen(dw0, C), *db32 = widen(db0, C);
    float *dwz = calloc(C, 4), *dbz = calloc(C, 4), *dxz = malloc(nc * 4);
    CHECK_OK(KT->layernorm_fwd(&KF, o32, m32, r32, x32, w32, b32, N, C, 1e-5f));
    near("layernorm_fwd out", out, o32, nc);
    rounded("layernorm_fwd out", out, o32, nc);
    same_f32("layernorm_fwd mean", mean, m32, N);
    same_f32("layernorm_fwd rstd", rstd, r32, N);
    CHECK_OK(KT->layernorm_bwd(&KF, dx32, dw32, db32, d32, x32, w32, m32, r32, N, C));
    near("layernorm_bwd dinp (+=)", dx, dx32, nc);
    rounded("layernorm_bwd dinp: bf16(dinp + term)", dx, dx32, nc);
    near("layernorm_bwd dw (+=)", dw, dw32, C);
    near("layernorm_bwd db (+=)", db, db32, C);
    memcpy(dxz, dx32, nc * 4); /* any dinp: only dw/db are looked at below */
    CHECK_OK(KT->layernorm_bwd(&KF, dxz, dwz, dbz, d32, x32, w32, m32, r32, N, C));
    rounded_once("layernorm_bwd dw", dw, dw0, dwz, C);
    rounded_once("layernorm_bwd db", db, db0, dbz, C);

    CHECK_OK(KT->rmsnorm_fwd(&KF, o32, r32, x32, w32, N, C, 1e-5f));
    near("rmsnorm_fwd out", rout, o32, nc);
    rounded("rmsnorm_fwd out", rout, o32, nc);
    same_f32("rmsnorm_fwd rstd", rr, r32, N);
    float *rdx32 = widen(dx0, nc), *rdw32 = widen(dw0, C);
    CHECK_OK(KT->rmsnorm_bwd(&KF, rdx32, rdw32, d32, x32, w32, r32, N, C));
    near("rmsnorm_bwd dinp (+=)", rdx, rdx32, nc);
    rounded("rmsnorm_bwd dinp: bf16(dinp + term)", rdx, rdx32, nc);
    near("rmsnorm_bwd dw (+=)", rdw, rdw32, C);
    memset(dwz, 0, C * 4);
    CHECK_OK(KT->rmsnorm_bwd(&KF, dxz, dwz, d32, x32, w32, r32, N, C));
    rounded_once("rmsnorm_bwd dw", rdw, dw0, dwz, C);
    free(x32), free(w32), free(b32), free(d32), free(o32), free(dx32), free(dw32), free(db32);
    free(dwz), free(dbz), free(dxz), free(rdx32), free(rdw32);
  }
  free(x), free(w), free(b), free(dout), free(dx0), free(dw0), free(db0), free(out), free(dx);
  free(dw), free(db), free(rout), free(rdx), free(rdw);
}

/* nn x cc -> oo; the second shape is one OpenBLAS rounds differently with 1 and 2 threads
 * when left to thread itself */
static void suite_matmul_shape(int check, int nn, int cc, int oo, const char *tag) {
  int h = slot_for(tag);
  size_t nc = (size_t)nn * cc, wc = (size_t)oo * cc, no = (size_t)nn * oo;
  uint16_t *x = bvec(nc, 1), *w = bvec(wc, 0.2f), *bias = bvec(oo, 1), *dout = bvec(no, 1);
  uint16_t *dw0 = bvec(wc, 0.5f), *db0 = bvec(oo, 0.5f);
  uint16_t *out = malloc(no * 2), *outb = malloc(no * 2), *dx = malloc(nc * 2);
  uint16_t *dw = hdup(dw0, wc), *db = hdup(db0, oo), *dw2 = hdup(dw0, wc);
  CHECK_OK(KT->matmul_fwd(&KB, out, x, w, NULL, nn, cc, oo));
  CHECK_OK(KT->matmul_fwd(&KB, outb, x, w, bias, nn, cc, oo));
  CHECK_OK(KT->matmul_bwd(&KB, dx, dw, db, dout, x, w, nn, cc, oo));
  CHECK_OK(KT->matmul_bwd(&KB, NULL, dw2, NULL, dout, x, w, nn, cc, oo)); /* dinp skipped */
  hash_out(h, out, no * 2), hash_out(h, outb, no * 2), hash_out(h, dx, nc * 2);
  hash_out(h, dw, wc * 2), hash_out(h, db, oo * 2), hash_out(h, dw2, wc * 2);
  if (check) {
    float *x32 = widen(x, nc), *w32 = widen(w, wc), *b32 = widen(bias, oo);
    float *d32 = widen(dout, no), *o32 = malloc(no * 4), *ob32 = malloc(no * 4);
    float *dx32 = malloc(nc * 4), *dw32 = widen(dw0, wc), *db32 = widen(db0, oo);
    float *dwz = calloc(wc, 4), *dbz = calloc(oo, 4);
    CHECK_OK(KT->matmul_fwd(&KF, o32, x32, w32, NULL, nn, cc, oo));
    CHECK_OK(KT->matmul_fwd(&KF, ob32, x32, w32, b32, nn, cc, oo));
    CHECK_OK(KT->matmul_bwd(&KF, dx32, dw32, db32, d32, x32, w32, nn, cc, oo));
    CHECK_OK(KT->matmul_bwd(&KF, NULL, dwz, dbz, d32, x32, w32, nn, cc, oo));
    char what[96];
    snprintf(what, sizeof what, "%s matmul_fwd out", tag);
    near(what, out, o32, no);
    rounded(what, out, o32, no);
    snprintf(what, sizeof what, "%s matmul_fwd out + bias", tag);
    near(what, outb, ob32, no);
    uint16_t *twice = malloc(no * 2); /* CUDA's rule: bf16(bf16(x w^T) + bias) */
    for (size_t i = 0; i < no; i++) twice[i] = rne(bf(rne(o32[i])) + b32[i % (size_t)oo]);
    same_bits(what, outb, twice, no);
    snprintf(what, sizeof what, "%s matmul_bwd dinp (=)", tag);
    near(what, dx, dx32, nc);
    rounded(what, dx, dx32, nc);
    snprintf(what, sizeof what, "%s matmul_bwd dw (+=)", tag);
    near(what, dw, dw32, wc);
    rounded_once(what, dw, dw0, dwz, wc);
    snprintf(what, sizeof what, "%s matmul_bwd dw, dinp skipped", tag);
    same_bits(what, dw2, dw, wc);
    snprintf(what, sizeof what, "%s matmul_bwd dbias (+=)", tag);
    near(what, db, db32, oo);
    rounded_once(what, db, db0, dbz, oo);
    free(x32), free(w32), free(b32), free(d32), free(o32), free(ob32), free(dx32), free(dw32);
    free(db32), free(dwz), free(dbz), free(twice);
  }
  free(x), free(w), free(bias), free(dout), free(dw0), free(db0), free(out), free(outb);
  free(dx), free(dw), free(db), free(dw2);
}
static void suite_matmul(int check) {
  suite_matmul_shape(check, N, C, OC, "64x384->200");
  suite_matmul_shape(check, 1000, 700, 300, "1000x700->300");
}

/* q, k, v inside one padded buffer of row stride ALD (APAD trailing columns stay untouched) */
static void suite_attention(int check) {
  int h = slot_for("attention");
  const int qo = 0, ko = AH * AHD, vo = (AH + AKVH) * AHD;
  size_t nrow = (size_t)AB * AT, nbuf = nrow * ALD, nout = nrow * AH * AHD;
  size_t nlse = (size_t)AB * AH * AT;
  uint16_t *qkv = bvec(nbuf, 1.5f), *dout = bvec(nout, 1), *out = malloc(nout * 2);
  uint16_t *d = malloc(nbuf * 2);
  for (size_t i = 0; i < nbuf; i++) d[i] = 0x7fc1; /* sentinel NaN in the padding */
  float *lse = malloc(nlse * 4);
  void *scratch = malloc(fb_attention_scratch_bytes(NULL, AB, AT, AH, AKVH, AHD));
  CHECK_OK(KT->attention_fwd(&KB, out, lse, qkv + qo, qkv + ko, qkv + vo, AB, AT, AH, AKVH, AHD,
                             ALD, ALD, scratch));
  CHECK_OK(KT->attention_bwd(&KB, d + qo, d + ko, d + vo, dout, qkv + qo, qkv + ko, qkv + vo,
                             out, lse, AB, AT, AH, AKVH, AHD, ALD, ALD, scratch));
  hash_out(h, out, nout * 2), hash_out(h, lse, nlse * 4), hash_out(h, d, nbuf * 2);
  if (check) {
    float *qkv32 = widen(qkv, nbuf), *do32 = widen(dout, nout), *o32 = malloc(nout * 4);
    float *l32 = malloc(nlse * 4), *d32 = calloc(nbuf, 4), *ob32 = widen(out, nout);
    float *lb32 = malloc(nlse * 4);
    CHECK_OK(KT->attention_fwd(&KF, o32, l32, qkv32 + qo, qkv32 + ko, qkv32 + vo, AB, AT, AH,
                               AKVH, AHD, ALD, ALD, scratch));
    near("attention_fwd out", out, o32, nout);
    double le = 0;
    for (size_t i = 0; i < nlse; i++) le = fmax(le, fabs((double)lse[i] - l32[i]));
    printf("  %-34s vs fp32: max abs diff %.3e (fp32 math on the same values)\n",
           "attention_fwd lse", le);
    CHECK(le < 1e-5, "attention lse differs from fp32 by %.3e", le);
    /* backward against fp32 on the same bf16 out and lse */
    memcpy(lb32, lse, nlse * 4);
    CHECK_OK(KT->attention_bwd(&KF, d32 + qo, d32 + ko, d32 + vo, do32, qkv32 + qo, qkv32 + ko,
                               qkv32 + vo, ob32, lb32, AB, AT, AH, AKVH, AHD, ALD, ALD,
                               scratch));
    near_rows("attention_bwd dq", d + qo, ALD, d32 + qo, ALD, (int64_t)nrow, AH * AHD);
    near_rows("attention_bwd dk", d + ko, ALD, d32 + ko, ALD, (int64_t)nrow, AKVH * AHD);
    near_rows("attention_bwd dv", d + vo, ALD, d32 + vo, ALD, (int64_t)nrow, AKVH * AHD);
    size_t pad_bad = 0;
    for (size_t r = 0; r < nrow; r++)
      for (int j = ALD - APAD; j < ALD; j++) pad_bad += d[r * ALD + j] != 0x7fc1;
    CHECK(pad_bad == 0, "attention_bwd wrote %zu padding elements", pad_bad);
    free(qkv32), free(do32), free(o32), free(l32), free(d32), free(ob32), free(lb32);
  }
  free(qkv), free(dout), free(out), free(d), free(lse), free(scratch);
}

static void suite_rope(int check) {
  int h = slot_for("rope");
  const int nh = AH + 2 * AKVH;
  size_t nbuf = (size_t)AB * AT * ALD;
  uint16_t *x0 = bvec(nbuf, 1.5f), *x = hdup(x0, nbuf), *dx = hdup(x0, nbuf);
  CHECK_OK(KT->rope_fwd(&KB, x, AB, AT, nh, AHD, ALD, 10000.0f));
  CHECK_OK(KT->rope_bwd(&KB, dx, AB, AT, nh, AHD, ALD, 500000.0f));
  hash_out(h, x, nbuf * 2), hash_out(h, dx, nbuf * 2);
  if (check) {
    float *x32 = widen(x0, nbuf), *dx32 = widen(x0, nbuf);
    CHECK_OK(KT->rope_fwd(&KF, x32, AB, AT, nh, AHD, ALD, 10000.0f));
    CHECK_OK(KT->rope_bwd(&KF, dx32, AB, AT, nh, AHD, ALD, 500000.0f));
    near("rope_fwd (in place, strided)", x, x32, nbuf);
    rounded("rope_fwd (padding untouched too)", x, x32, nbuf);
    near("rope_bwd (in place, strided)", dx, dx32, nbuf);
    rounded("rope_bwd (padding untouched too)", dx, dx32, nbuf);
    free(x32), free(dx32);
  }
  free(x0), free(x), free(dx);
}

static void suite_elementwise(int check) {
  int h = slot_for("gelu/swiglu/add");
  enum { E = 50001 }; /* not a multiple of any block */
  uint16_t *a = bvec(E, 3), *b = bvec(E, 2), *d = bvec(E, 1);
  uint16_t *g = malloc(E * 2), *dg = malloc(E * 2), *s = malloc(E * 2), *da = malloc(E * 2);
  uint16_t *db = malloc(E * 2), *sum = malloc(E * 2), *alias = hdup(a, E);
  CHECK_OK(KT->gelu_fwd(&KB, g, a, E));
  CHECK_OK(KT->gelu_bwd(&KB, dg, a, d, E));
  CHECK_OK(KT->swiglu_fwd(&KB, s, a, b, E));
  CHECK_OK(KT->swiglu_bwd(&KB, da, db, d, a, b, E));
  CHECK_OK(KT->add(&KB, sum, a, b, E));
  CHECK_OK(KT->add(&KB, alias, alias, b, E)); /* out aliases a */
  hash_out(h, g, E * 2), hash_out(h, dg, E * 2), hash_out(h, s, E * 2);
  hash_out(h, da, E * 2), hash_out(h, db, E * 2), hash_out(h, sum, E * 2);
  if (check) {
    float *a32 = widen(a, E), *b32 = widen(b, E), *d32 = widen(d, E), *r = malloc(E * 4);
    float *r2 = malloc(E * 4);
    CHECK_OK(KT->gelu_fwd(&KF, r, a32, E));
    near("gelu_fwd", g, r, E);
    rounded("gelu_fwd", g, r, E);
    CHECK_OK(KT->gelu_bwd(&KF, r, a32, d32, E));
    near("gelu_bwd", dg, r, E);
    rounded("gelu_bwd", dg, r, E);
    CHECK_OK(KT->swiglu_fwd(&KF, r, a32, b32, E));
    near("swiglu_fwd", s, r, E);
    rounded("swiglu_fwd", s, r, E);
    CHECK_OK(KT->swiglu_bwd(&KF, r, r2, d32, a32, b32, E));
    near("swiglu_bwd da", da, r, E);
    rounded("swiglu_bwd da", da, r, E);
    near("swiglu_bwd db", db, r2, E);
    rounded("swiglu_bwd db", db, r2, E);
    CHECK_OK(KT->add(&KF, r, a32, b32, E));
    near("add", sum, r, E);
    rounded("add", sum, r, E);
    same_bits("add, out aliasing a", alias, sum, E);
    free(a32), free(b32), free(d32), free(r), free(r2);
  }
  free(a), free(b), free(d), free(g), free(dg), free(s), free(da), free(db), free(sum);
  free(alias);
}

/* rows x vocab; the second shape is over the 4 Mi-element slab the bf16 path widens at once,
 * so its loss is summed over two slabs and must still equal the fp32 single call's */
static void suite_xent_shape(int check, int rows, int vocab, const char *tag) {
  int h = slot_for(tag);
  size_t n = (size_t)rows * vocab;
  uint16_t *l0 = bvec(n, 4), *l = hdup(l0, n);
  int32_t *tgt = malloc((size_t)rows * 4);
  for (int i = 0; i < rows; i++) tgt[i] = i % 9 == 4 ? -1 : (int32_t)(next_u64() % vocab);
  double loss = 0.25;
  CHECK_OK(KT->xent_fwd_bwd(&KB, l, &loss, tgt, rows, vocab, vocab, 1.0f / rows));
  hash_out(h, l, n * 2), hash_out(h, &loss, sizeof loss);
  if (check) {
    float *l32 = widen(l0, n);
    double loss32 = 0.25;
    CHECK_OK(KT->xent_fwd_bwd(&KF, l32, &loss32, tgt, rows, vocab, vocab, 1.0f / rows));
    char what[96];
    snprintf(what, sizeof what, "xent %s dlogits", tag);
    near(what, l, l32, n);
    rounded(what, l, l32, n);
    printf("  xent %-29s loss %.17g (fp32 kernel %.17g)\n", tag, loss, loss32);
    CHECK(loss == loss32, "xent %s: fp64 loss %.17g differs from the fp32 kernel's %.17g", tag,
          loss, loss32);
    free(l32);
  }
  free(l0), free(l), free(tgt);
}
static void suite_xent(int check) {
  suite_xent_shape(check, N, 1000, "64x1000");
  suite_xent_shape(check, 40, 120000, "40x120000");
}

static void run_suite(int check) {
  memset(hash_of, 0, sizeof hash_of);
  rs = 777; /* same inputs every run */
  suite_encoder(check);
  suite_norms(check);
  suite_matmul(check);
  suite_attention(check);
  suite_rope(check);
  suite_elementwise(check);
  suite_xent(check);
}

/* ---- determinism: run to run, and with 1, 2, 3 threads ----------------------------------- */
static void test_determinism(void) {
  uint64_t ref[16];
  int saved = omp_get_max_threads();
  run_suite(0);
  memcpy(ref, hash_of, sizeof ref);
  run_suite(0);
  for (int i = 0; i < nhash; i++)
    CHECK(hash_of[i] == ref[i], "%s: bf16 results differ between two runs", hash_name[i]);
  const int threads[] = {1, 2, 3};
  for (int t = 0; t < 3; t++) {
    omp_set_num_threads(threads[t]);
    run_suite(0);
    for (int i = 0; i < nhash; i++) {
      CHECK(hash_of[i] == ref[i], "%s: bf16 results with %d threads differ from %d threads",
            hash_name[i], threads[t], saved);
    }
  }
  omp_set_num_threads(saved);
  printf("  determinism: %d op groups bitwise equal run to run and with 1, 2, 3 and %d threads\n",
         nhash, saved);
}

/* ---- the token-embedding gradient accumulates in fp32 ------------------------------------ */
static void test_embedding_accumulation(void) {
  enum { B = 4096, T = 1, EC = 64, EV = 8, ROW = 3 };
  const size_t n = (size_t)B * T * EC;
  uint16_t *dout = malloc(n * 2), *dwte = calloc((size_t)EV * EC, 2), *dwpe = calloc(EC, 2);
  int32_t *tok = malloc((size_t)B * 4);
  for (int i = 0; i < B; i++) tok[i] = ROW; /* every token hits the same row */
  for (size_t i = 0; i < n; i++) dout[i] = rne(1e-3f * (1.0f + 0.25f * frand()));
  CHECK_OK(KT->encoder_bwd(&KB, dwte, dwpe, dout, tok, B, T, EC));
  double worst = 0, stalled = 1e30, want0 = 0;
  int bad_exact = 0, others = 0;
  for (int c = 0; c < EC; c++) {
    double exact = 0;      /* the true sum */
    float f = 0.0f;        /* fp32 running sum in token order: what the kernel must do */
    uint16_t acc16 = 0;    /* a bf16 running sum (one rounding per token): the CUDA bug */
    for (int i = 0; i < B; i++) {
      float v = bf(dout[(size_t)i * EC + c]);
      exact += v;
      f += v;
      acc16 = rne(bf(acc16) + v);
    }
    double got = bf(dwte[ROW * EC + c]);
    worst = fmax(worst, fabs(got - exact) / exact);
    stalled = fmin(stalled, bf(acc16));
    bad_exact += dwte[ROW * EC + c] != rne(f) || dwpe[c] != rne(f);
    if (c == 0) want0 = exact;
  }
  for (int r = 0; r < EV; r++)
    for (int c = 0; c < EC; c++) others += r != ROW && dwte[r * EC + c] != 0;
  printf("  embedding gradient, 4096 tokens x ~1e-3 on one row: exact sum %.6f, kernel %.6f "
         "(worst rel err %.2e); a bf16 running sum would stall at %.4f\n",
         want0, (double)bf(dwte[ROW * EC]), worst, stalled);
  CHECK(worst <= 0x1p-8, "dwte: fp32 accumulation expected, relative error %.3e", worst);
  CHECK(bad_exact == 0, "%d columns of dwte/dwpe are not bf16(fp32 sum in token order)",
        bad_exact);
  CHECK(stalled < 1.0, "the test must discriminate: a bf16 running sum reached %.4f", stalled);
  CHECK(others == 0, "%d elements of untouched dwte rows changed", others);
  free(dout), free(dwte), free(dwpe), free(tok);
}

/* ---- dtype rule ------------------------------------------------------------------------- */
static void test_dtype(void) {
  fb_kctx ki = KB;
  ki.act = FB_I32;
  uint16_t x[4] = {0}, y[4];
  CHECK(KT->gelu_fwd(&ki, y, x, 4) == FB_EUNSUPPORTED, "int32 activations are refused");
  CHECK(strstr(fb_error_msg(), fb_dtype_name(FB_I32)) != NULL, "message: %s", fb_error_msg());
}

int main(void) {
  run_suite(1);
  test_embedding_accumulation();
  test_determinism();
  test_dtype();
  return fb_test_done("test_ops_bf16");
}

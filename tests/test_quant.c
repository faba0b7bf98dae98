/* The block quantisation kernels zeropp uses (quantize, dequant_sum through fb_cpu_kernels):
 * scales are the block's absmax / qmax and each element comes back within half a scale, int8
 * and int4 (packed) alike, partial last blocks and all-zero blocks included; the segment
 * reordering (rows > 1) moves segments and their scales together; dequant_sum adds its terms in
 * order; and the bits do not depend on the OpenMP thread count. */
#include <math.h>
#include <omp.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "engine/ops/cpu_kernels.h"
#include "engine/ops/elementwise.h"
#include "tests/check.h"

static const fb_kctx K = {.dev = NULL, .s = NULL, .act = FB_F32, .unit = -1};
#define KT (&fb_cpu_kernels)

static uint64_t rs = 777;
static float frand(void) {
  uint64_t z = (rs += 0x9e3779b97f4a7c15ull);
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
  z ^= z >> 31;
  return (float)((double)(z >> 11) * 0x1.0p-52 - 1.0);
}

/* Quantise nseg x seglen values, dequantise them (one term) and check the error per element
 * against its block's scale, and the scale against the block's absmax. */
static void round_trip(size_t nseg, size_t seglen, int group, int bits) {
  const size_t n = nseg * seglen, ns = fb_quant_nscales(nseg, seglen, group);
  const size_t bps = ns / nseg;
  float *x = malloc(n * 4), *y = malloc(n * 4), *sc = malloc(ns * 4);
  uint8_t *q = malloc(n);
  for (size_t i = 0; i < n; i++) x[i] = frand() * (float)(1 + i % 7);
  for (size_t i = 0; i < seglen && i < (size_t)group; i++) x[i] = 0; /* one all-zero block */
  CHECK_OK(KT->quantize(&K, q, sc, x, FB_F32, nseg, seglen, group, bits, 1));
  CHECK_OK(KT->dequant_sum(&K, y, FB_F32, q, sc, 1, n, seglen, group, bits));
  int bad = 0, badscale = 0;
  for (size_t s = 0; s < nseg; s++)
    for (size_t b = 0; b < bps; b++) {
      const size_t i0 = s * seglen + b * (size_t)group;
      const size_t i1 = b * (size_t)group + (size_t)group < seglen ? i0 + (size_t)group
                                                                  : (s + 1) * seglen;
      float amax = 0;
      for (size_t i = i0; i < i1; i++) amax = fmaxf(amax, fabsf(x[i]));
      const float scale = sc[s * bps + b];
      badscale += scale != amax / (float)fb_quant_qmax(bits);
      for (size_t i = i0; i < i1; i++) bad += !(fabsf(y[i] - x[i]) <= 0.5f * scale * 1.0001f);
    }
  CHECK(bad == 0 && badscale == 0, "int%d, %zu x %zu, group %d: %d elements off by more than "
        "half a scale, %d scales not absmax/qmax", bits, nseg, seglen, group, bad, badscale);
  CHECK(y[0] == 0 && sc[0] == 0, "an all-zero block: scale %g, first value %g", sc[0], y[0]);
  free(x), free(y), free(sc), free(q);
}

/* rows > 1: segment a*cols + b lands at b*rows + a; dequantising it there gives the values of
 * the unreordered layout at the original place. */
static void reorder(void) {
  const size_t rows = 3, cols = 2, nseg = rows * cols, seglen = 10;
  const int group = 4;
  const size_t n = nseg * seglen, ns = fb_quant_nscales(nseg, seglen, group);
  float x[60], a[60], b[60], sa[60], sb[60];
  uint8_t qa[60], qb[60];
  for (size_t i = 0; i < n; i++) x[i] = frand();
  CHECK_OK(KT->quantize(&K, qa, sa, x, FB_F32, nseg, seglen, group, 4, 1));
  CHECK_OK(KT->quantize(&K, qb, sb, x, FB_F32, nseg, seglen, group, 4, (int)rows));
  CHECK_OK(KT->dequant_sum(&K, a, FB_F32, qa, sa, 1, n, seglen, group, 4));
  CHECK_OK(KT->dequant_sum(&K, b, FB_F32, qb, sb, 1, n, seglen, group, 4));
  int bad = 0;
  for (size_t s = 0; s < nseg; s++) {
    const size_t to = (s % cols) * rows + s / cols;
    bad += memcmp(a + s * seglen, b + to * seglen, seglen * 4) != 0;
  }
  CHECK(bad == 0 && ns == nseg * 3, "%d reordered segments differ", bad);
}

/* dequant_sum over 3 terms = the terms dequantised one by one and added in order. */
static void sums_in_order(void) {
  const size_t seglen = 8, nterm = 3, termlen = 16, n = nterm * termlen;
  const int group = 6;
  const size_t ns = fb_quant_nscales(n / seglen, seglen, group);
  float x[48], y[16], t[48], sc[16];
  uint8_t q[48];
  for (size_t i = 0; i < n; i++) x[i] = frand() * 3;
  CHECK_OK(KT->quantize(&K, q, sc, x, FB_F32, n / seglen, seglen, group, 8, 1));
  CHECK_OK(KT->dequant_sum(&K, y, FB_F32, q, sc, nterm, termlen, seglen, group, 8));
  CHECK_OK(KT->dequant_sum(&K, t, FB_F32, q, sc, 1, n, seglen, group, 8));
  int bad = 0;
  for (size_t i = 0; i < termlen; i++) bad += y[i] != (t[i] + t[termlen + i]) + t[2 * termlen + i];
  CHECK(bad == 0 && ns == 12, "%d sums differ from the in-order sum", bad);
}

/* The same bits with 1 and 2 threads (blocks are independent). */
static void threads(void) {
  const size_t nseg = 4, seglen = 70000, n = nseg * seglen;
  const size_t ns = fb_quant_nscales(nseg, seglen, 2048);
  float *x = malloc(n * 4), *y1 = malloc(n * 4), *y2 = malloc(n * 4), *s1 = malloc(ns * 4);
  float *s2 = malloc(ns * 4);
  uint8_t *q1 = malloc(n), *q2 = malloc(n);
  for (size_t i = 0; i < n; i++) x[i] = frand();
  omp_set_num_threads(1);
  CHECK_OK(KT->quantize(&K, q1, s1, x, FB_F32, nseg, seglen, 2048, 4, 2));
  CHECK_OK(KT->dequant_sum(&K, y1, FB_F32, q1, s1, 2, n / 2, seglen, 2048, 4));
  omp_set_num_threads(2);
  CHECK_OK(KT->quantize(&K, q2, s2, x, FB_F32, nseg, seglen, 2048, 4, 2));
  CHECK_OK(KT->dequant_sum(&K, y2, FB_F32, q2, s2, 2, n / 2, seglen, 2048, 4));
  CHECK(!memcmp(q1, q2, n / 2) && !memcmp(s1, s2, ns * 4) && !memcmp(y1, y2, n / 2 * 4),
        "1 and 2 threads differ");
  free(x), free(y1), free(y2), free(s1), free(s2), free(q1), free(q2);
}

int main(void) {
  round_trip(1, 5000, 4096, 8);  /* a partial last block */
  round_trip(4, 300, 128, 8);
  round_trip(3, 1000, 2048, 4);  /* a segment shorter than a block */
  round_trip(5, 4098, 2048, 4);  /* a short last block of 2 */
  reorder();
  sums_in_order();
  threads();
  return fb_test_done("test_quant");
}

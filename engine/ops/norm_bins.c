/* Exact, order-free sum of squares of fp32 values in integer bins (one per exponent), and the
 * norm computed from merged bins. Integer addition is associative, so bins merged from any
 * sharding of a vector are identical words and give a bit-identical norm.
 * Does not reduce across ranks: the strategy all-reduces the bins (u64 sum). */
/* Elementwise loops with selects, float<->int conversions and sqrt vectorise only when the
 * compiler may assume FP exceptions do not trap and sqrt need not set errno; values are the
 * same either way. */
#pragma GCC optimize("no-trapping-math", "no-math-errno")
#include <assert.h>
#include <math.h>
#include <omp.h>
#include <string.h>

#include "elementwise.h"
#include "ops.h"

#define SUMSQ_BLOCK 65536 /* elements per work item */

void fb_sumsq_bins_f32(uint64_t *bins, const float *g, size_t n) {
  int64_t nb = (int64_t)((n + SUMSQ_BLOCK - 1) / SUMSQ_BLOCK);
#pragma omp parallel if (nb > 1)
  {
    uint64_t local[2 * FB_NORM_BINS];
    memset(local, 0, sizeof local);
#pragma omp for schedule(static)
    for (int64_t b = 0; b < nb; b++) {
      size_t i1 = (size_t)(b + 1) * SUMSQ_BLOCK < n ? (size_t)(b + 1) * SUMSQ_BLOCK : n;
      for (size_t i = (size_t)b * SUMSQ_BLOCK; i < i1; i++) {
        uint32_t e;
        uint64_t sq;
        fb_sumsq_decompose(g[i], &e, &sq);
        local[2 * e] += sq & 0xffffffffu;
        local[2 * e + 1] += sq >> 32;
      }
    }
#pragma omp critical(fb_sumsq_merge)
    for (int i = 0; i < 2 * FB_NORM_BINS; i++) bins[i] += local[i];
  }
}

/* value = sum_e (hi_e * 2^32 + lo_e) * 2^(2(e-150)); both words convert exactly to long double
 * (64-bit mantissa) and are summed from the smallest exponent up. A non-finite input (bin 255)
 * makes the norm NaN. */
double fb_norm_from_bins(const uint64_t *bins) {
  if (bins[2 * 255] | bins[2 * 255 + 1]) return NAN;
  long double acc = 0.0L;
  for (int e = 0; e < 255; e++) {
    uint64_t lo = bins[2 * e], hi = bins[2 * e + 1];
    if (!(lo | hi)) continue;
    long double v = ldexpl((long double)hi, 32) + (long double)lo;
    acc += ldexpl(v, 2 * (e - 150));
  }
  return (double)sqrtl(acc);
}

/* Exact, order-free sum of squares of fp32 values in integer bins (one per exponent), and the
 * norm computed from merged bins. The bins hold one exact number,
 *   S = sum_e (bins[2e+1] * 2^32 + bins[2e]) * 4^(e - 150),
 * and the norm is a function of S alone (fb_norm_from_bins carries the bins into one big
 * integer first), so bins merged from any sharding of a vector give a bit-identical norm even
 * where their words differ. Integer addition is associative: the words may be summed across
 * ranks in any order (u64 all-reduce).
 * Does not reduce across ranks: the strategy all-reduces the bins (u64 sum). The bins' exact
 * value and the norm from it are engine/device/norm_bins_exact.c. */
/* Elementwise loops with selects, float<->int conversions and sqrt vectorise only when the
 * compiler may assume FP exceptions do not trap and sqrt need not set errno; values are the
 * same either way. */
#pragma GCC optimize("no-trapping-math", "no-math-errno")
#include <assert.h>
#include <math.h>
#include <omp.h>
#include <stdbool.h>
#include <string.h>
#include <immintrin.h>

#include "elementwise.h"
#include "ops.h"

#define SUMSQ_BLOCK 65536 /* elements per work item */
#define SQ_SUB 128        /* elements that share one window */
#define SQ_WIN 8          /* exponents one window spans */

/* g = mant * 2^(e-150), so g^2 = mant^2 * 4^(e-150) with mant^2 < 2^48. A run of SQ_SUB
 * elements is summed in passes. A pass takes the two windows of SQ_WIN exponents that end at
 * the largest exponent not yet summed, top: [eb2, eb) and [eb, top] with eb = eb2 + SQ_WIN
 * (eb2 = top - 2 SQ_WIN + 1, or 1 near the bottom of the range):
 * an element in a window adds mant^2 * 4^(e - base) < 2^62 to that window's fixed-point sum,
 * split into its low 32 bits and the rest, which go to bin base. The next pass starts at the
 * largest exponent below eb2 (nonzero elements under 2^-15 of the pass's largest magnitude:
 * rarely any in a gradient, a few passes for heavy tails). The loops have no data-dependent
 * store, so they vectorise (a variable shift per lane); the per-element bin scatter of the old
 * code ran at 6 GB/s per thread. Bounds: per element, under 2^32 is added to a low word and
 * under 2^30 to a high word, as the one-bin-per-element layout (low 32 bits, high 16) does, so
 * no word overflows before 2^32 elements. Inf/NaN (e = 255): the whole run goes to its own
 * bins (scalar), and bin 255 makes the norm NaN. */
_Static_assert(48 + 2 * (SQ_WIN - 1) <= 62, "a window's shifted mant^2 must fit 62 bits");
static void sumsq_scalar(uint64_t *bins, const float *x, size_t m) {
  for (size_t i = 0; i < m; i++) {
    uint32_t e;
    uint64_t sq;
    fb_sumsq_decompose(x[i], &e, &sq);
    bins[2 * e] += sq & 0xffffffffu;
    bins[2 * e + 1] += sq >> 32;
  }
}

/* eb2, the lower window's first exponent, of the pass whose largest exponent is `top`. */
static uint32_t window_base(uint32_t top) {
  return top >= 2 * SQ_WIN ? top - (2 * SQ_WIN - 1) : 1;
}

/* A pass's two fixed-point sums into the bins of the windows' first exponents. */
static void fold(uint64_t *bins, uint32_t eb2, uint64_t lo, uint64_t hi, uint64_t lo2,
                 uint64_t hi2) {
  bins[2 * (eb2 + SQ_WIN)] += lo;
  bins[2 * (eb2 + SQ_WIN) + 1] += hi;
  bins[2 * eb2] += lo2;
  bins[2 * eb2 + 1] += hi2;
}

static uint32_t max_exponent(const float *x, size_t m) {
  uint32_t emax = 0;
  for (size_t i = 0; i < m; i++) {
    uint32_t e = (fb_f32_bits(x[i]) >> 23) & 0xffu;
    emax = e > emax ? e : emax;
  }
  return emax;
}

static void sumsq_run_c(uint64_t *bins, const float *x, size_t m) {
  uint32_t top = max_exponent(x, m);
  if (top == 255) return sumsq_scalar(bins, x, m);
  top += !top; /* denormals and zeros only: the pass at exponent 1 */
  while (top) {
    const uint32_t eb2 = window_base(top);
    const int32_t dtop = (int32_t)(top - eb2); /* above top: summed by an earlier pass */
    uint64_t lo = 0, hi = 0, lo2 = 0, hi2 = 0;
    uint32_t next = 0;
    for (size_t i = 0; i < m; i++) { /* masks, not branches: the loop must vectorise */
      const uint32_t u = fb_f32_bits(x[i]), eraw = (u >> 23) & 0xffu, e = eraw ? eraw : 1u;
      const uint32_t mant = (u & 0x7fffffu) | (eraw ? 0x800000u : 0u);
      const int32_t d = (int32_t)e - (int32_t)eb2; /* [0, dtop]: this pass; < 0: later */
      const uint64_t in1 = -(uint64_t)((d >= SQ_WIN) & (d <= dtop));
      const uint64_t in2 = -(uint64_t)((d >= 0) & (d < SQ_WIN) & (d <= dtop));
      const uint32_t sh = (uint32_t)(2 * (d - (SQ_WIN & (int32_t)in1))) & 63u;
      const uint64_t v = ((uint64_t)mant * mant) << sh;
      lo += v & in1 & 0xffffffffu;
      hi += (v >> 32) & in1;
      lo2 += v & in2 & 0xffffffffu;
      hi2 += (v >> 32) & in2;
      const uint32_t later = (d < 0) & (mant != 0) ? e : 0;
      next = later > next ? later : next;
    }
    fold(bins, eb2, lo, hi, lo2, hi2);
    top = next;
  }
}

/* sumsq_run_c on a full run with AVX-512: the same passes and the same words; mask registers
 * replace the and-masks, eight 64-bit lanes instead of four. */
__attribute__((target("avx512f"))) static void sumsq_run_avx512(uint64_t *bins, const float *x) {
  const __m512i ff = _mm512_set1_epi32(0xff);
  __m512i vmax = _mm512_setzero_si512();
  for (int i = 0; i < SQ_SUB; i += 16) {
    __m512i u = _mm512_loadu_si512((const void *)(x + i));
    vmax = _mm512_max_epu32(vmax, _mm512_and_si512(_mm512_srli_epi32(u, 23), ff));
  }
  uint32_t top = (uint32_t)_mm512_reduce_max_epu32(vmax);
  if (top == 255) return sumsq_scalar(bins, x, SQ_SUB);
  top += !top; /* denormals and zeros only: the pass at exponent 1 */
  const __m512i one = _mm512_set1_epi64(1), low = _mm512_set1_epi64(0xffffffffu),
                mmask = _mm512_set1_epi64(0x7fffff), hidden = _mm512_set1_epi64(0x800000),
                e8 = _mm512_set1_epi64(0xff), win = _mm512_set1_epi64(SQ_WIN),
                zero = _mm512_setzero_si512();
  while (top) {
    const uint32_t eb2 = window_base(top);
    /* unsigned range tests: d in [0, w2) is window 2, d - SQ_WIN in [0, w1) window 1 */
    const uint32_t span = top - eb2 + 1; /* exponents of this pass */
    const __m512i base = _mm512_set1_epi64(eb2),
                  w2 = _mm512_set1_epi64(span < SQ_WIN ? span : SQ_WIN),
                  w1 = _mm512_set1_epi64(span > SQ_WIN ? span - SQ_WIN : 0);
    __m512i lo = zero, hi = zero, lo2 = zero, hi2 = zero;
    __m512i next = zero;
    for (int i = 0; i < SQ_SUB; i += 8) {
      __m512i u = _mm512_cvtepu32_epi64(_mm256_loadu_si256((const __m256i *)(x + i)));
      __m512i eraw = _mm512_and_si512(_mm512_srli_epi64(u, 23), e8);
      __m512i mant = _mm512_and_si512(u, mmask);
      mant = _mm512_mask_or_epi64(mant, _mm512_test_epi64_mask(eraw, eraw), mant, hidden);
      __m512i d = _mm512_sub_epi64(_mm512_max_epu64(eraw, one), base);
      __m512i d1 = _mm512_sub_epi64(d, win);
      __mmask8 k1 = _mm512_cmplt_epu64_mask(d1, w1), k2 = _mm512_cmplt_epu64_mask(d, w2);
      __m512i sh = _mm512_add_epi64(d, d);
      sh = _mm512_mask_add_epi64(sh, k1, d1, d1);
      __m512i v = _mm512_sllv_epi64(_mm512_mul_epu32(mant, mant), sh);
      __m512i vl = _mm512_and_si512(v, low), vh = _mm512_srli_epi64(v, 32);
      lo = _mm512_mask_add_epi64(lo, k1, lo, vl);
      hi = _mm512_mask_add_epi64(hi, k1, hi, vh);
      lo2 = _mm512_mask_add_epi64(lo2, k2, lo2, vl);
      hi2 = _mm512_mask_add_epi64(hi2, k2, hi2, vh);
      __m512i e = _mm512_add_epi64(d, base);
      __mmask8 later = _mm512_mask_test_epi64_mask(_mm512_cmplt_epi64_mask(d, zero), mant, mant);
      next = _mm512_mask_max_epu64(next, later, next, e);
    }
    fold(bins, eb2, (uint64_t)_mm512_reduce_add_epi64(lo), (uint64_t)_mm512_reduce_add_epi64(hi),
         (uint64_t)_mm512_reduce_add_epi64(lo2), (uint64_t)_mm512_reduce_add_epi64(hi2));
    top = (uint32_t)_mm512_reduce_max_epu64(next);
  }
}

/* The common case in fewer instructions: a run of L = 2^l elements (l = 10, or 7 for a run of
 * SQ_SUB) whose nonzero exponents span at most fp64_span(l), far from both ends of the range,
 * summed exactly in double precision (about 8 instructions per 8 elements, against 26 per pass
 * for sumsq_run_avx512). Each p = g^2 is exact in a double (a 48-bit significand). With m2 the
 * run's largest square, m2 < 2^em, and sigma = 2^(em + l + 1): q = (sigma + p, rounded toward
 * zero) - sigma is p cut down to a multiple of Q1 = 2^(em + l - 51) (the ulp of
 * [sigma, 2 sigma)) and r = p - q < Q1 is the rest, both exact (r is a tail of p's 48 bits).
 * The q sum to below L m2 < sigma / 2 in multiples of Q1 (51 bits), the r to below L Q1 in
 * multiples of Q2 = 4^(emin - 150), the quantum of the smallest nonzero element's square
 * (L Q1 / Q2 < 2^(2 l + 2 span - 3) <= 2^51): both sums are exact in any order, and go to the
 * bins as integers: T1 / Q1 into bin b1 with 4^(b1 - 150) = Q1 or Q1 / 2, T2 / Q2 into bin
 * emin, each word getting under 2^32 a run. Returns false, having written nothing, for a run
 * it does not take (a non-finite element, a wider span, a bin outside [1, 254]). */
static int fp64_span(int l) { return (56 - 2 * l) / 2 - 1; }

/* 2^k as a double, for |k| <= 1022 (built from its bits: exact, no libm call). */
static double pow2(int k) {
  union { uint64_t u; double d; } c = {.u = (uint64_t)(k + 1023) << 52};
  return c.d;
}

__attribute__((target("avx512f"))) static bool sumsq_run_fp64(uint64_t *bins, const float *x,
                                                              int l) {
  const int len = 1 << l;
  const __m512i absm = _mm512_set1_epi32(0x7fffffff);
  __m512i vmax = _mm512_setzero_si512(), vmin = _mm512_set1_epi32(0xff);
  for (int i = 0; i < len; i += 16) {
    __m512i u = _mm512_and_si512(_mm512_loadu_si512((const void *)(x + i)), absm);
    vmax = _mm512_max_epu32(vmax, u);
    vmin = _mm512_mask_min_epu32(vmin, _mm512_test_epi32_mask(u, u), vmin,
                                 _mm512_srli_epi32(u, 23));
  }
  const uint32_t umax = (uint32_t)_mm512_reduce_max_epu32(vmax);
  if (umax == 0) return true; /* zeros only */
  if (umax >= 0x7f800000u) return false;
  uint32_t emax = umax >> 23, emin = (uint32_t)_mm512_reduce_min_epu32(vmin);
  emax += !emax; /* denormals share exponent 1's quantum */
  emin += !emin;
  if ((int)(emax - emin) > fp64_span(l)) return false;
  const double fmax = (double)fb_f32_from_bits(umax), m2 = fmax * fmax;
  union { double d; uint64_t u; } mb = {.d = m2};
  const int em = (int)((mb.u >> 52) & 0x7ff) - 1022; /* m2 in [2^(em-1), 2^em) (m2 normal) */
  const int q1 = em + l - 51, b1 = (q1 + 300) >> 1; /* Q1 = 2^q1; b1 = floor((q1 + 300) / 2) */
  if (q1 + 300 < 2 || b1 > 254) return false;
  const __m512d sigma = _mm512_set1_pd(pow2(em + l + 1));
  __m512d t1a = _mm512_setzero_pd(), t2a = t1a, t1b = t1a, t2b = t1a;
  for (int i = 0; i < len; i += 16) { /* two accumulator pairs: half the add latency chain */
    __m512d ga = _mm512_cvtps_pd(_mm256_loadu_ps(x + i));
    __m512d gb = _mm512_cvtps_pd(_mm256_loadu_ps(x + i + 8));
    __m512d pa = _mm512_mul_pd(ga, ga), pb = _mm512_mul_pd(gb, gb);
    __m512d qa = _mm512_sub_pd(
        _mm512_add_round_pd(sigma, pa, _MM_FROUND_TO_ZERO | _MM_FROUND_NO_EXC), sigma);
    __m512d qb = _mm512_sub_pd(
        _mm512_add_round_pd(sigma, pb, _MM_FROUND_TO_ZERO | _MM_FROUND_NO_EXC), sigma);
    t1a = _mm512_add_pd(t1a, qa);
    t1b = _mm512_add_pd(t1b, qb);
    t2a = _mm512_add_pd(t2a, _mm512_sub_pd(pa, qa));
    t2b = _mm512_add_pd(t2b, _mm512_sub_pd(pb, qb));
  }
  /* exact sums: the lanes and the pairs may be added in any order; scaling by a power of two
   * is exact, and the results are integers under 2^52 */
  const double t1 = _mm512_reduce_add_pd(_mm512_add_pd(t1a, t1b));
  const double t2 = _mm512_reduce_add_pd(_mm512_add_pd(t2a, t2b));
  const uint64_t k1 = (uint64_t)(t1 * pow2(-q1)) << ((q1 + 300) & 1);
  const uint64_t k2 = (uint64_t)(t2 * pow2(300 - 2 * (int)emin));
  bins[2 * b1] += k1 & 0xffffffffu;
  bins[2 * b1 + 1] += k1 >> 32;
  bins[2 * emin] += k2 & 0xffffffffu;
  bins[2 * emin + 1] += k2 >> 32;
  return true;
}

#define SQ_LONG 10 /* log2 of the double-precision path's long run: 8 runs of SQ_SUB */
_Static_assert((1 << SQ_LONG) % SQ_SUB == 0, "a long run is whole runs");

static void sumsq_run(uint64_t *bins, const float *x, size_t m, bool avx512) {
  if (avx512 && m == SQ_SUB) {
    if (!sumsq_run_fp64(bins, x, 7)) sumsq_run_avx512(bins, x);
  }
  else sumsq_run_c(bins, x, m);
}

/* Elements [i0, i1) of g: long runs in double precision where they qualify, else runs. */
static void sumsq_span(uint64_t *bins, const float *g, size_t i0, size_t i1, bool avx512) {
  const size_t lr = (size_t)1 << SQ_LONG;
  for (size_t j = i0; j < i1;) {
    const bool long_run = avx512 && i1 - j >= lr;
    if (long_run && sumsq_run_fp64(bins, g + j, SQ_LONG)) {
      j += lr;
      continue;
    }
    const size_t end = long_run ? j + lr : i1;
    for (; j < end; j += SQ_SUB)
      sumsq_run(bins, g + j, end - j < SQ_SUB ? end - j : SQ_SUB, avx512);
  }
}

void fb_sumsq_bins_f32(uint64_t *bins, const float *g, size_t n) {
  int64_t nb = (int64_t)((n + SUMSQ_BLOCK - 1) / SUMSQ_BLOCK);
  const bool avx512 = __builtin_cpu_supports("avx512f");
#pragma omp parallel if (nb > 1)
  {
    uint64_t local[2 * FB_NORM_BINS];
    memset(local, 0, sizeof local);
#pragma omp for schedule(static)
    for (int64_t b = 0; b < nb; b++) {
      size_t i0 = (size_t)b * SUMSQ_BLOCK, i1 = n - i0 < SUMSQ_BLOCK ? n : i0 + SUMSQ_BLOCK;
      sumsq_span(local, g, i0, i1, avx512);
    }
#pragma omp critical(fb_sumsq_merge)
    for (int i = 0; i < 2 * FB_NORM_BINS; i++) bins[i] += local[i];
  }
}

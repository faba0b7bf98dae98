/* Double-precision natural log, sine and cosine for the parameter initialisation (init.c),
 * written out so that its values depend on no C library and so that a loop calling them
 * vectorizes: straight-line code (no branches, no tables, no calls), integer bit operations for
 * the exponent and the quadrant. The algorithms are fdlibm's (Sun's freely distributable code,
 * as in musl and FreeBSD): log reduces x to 2^k * m, m in [sqrt(2)/2, sqrt(2)), and evaluates
 * log(m) = f - f^2/2 + s*(f^2/2 + R(s^2)), s = f/(2+f), with the Remez polynomial Lg1..Lg7
 * (< 1 ulp); sin/cos reduce x by n*pi/2 with pi/2 in four parts (Cody-Waite, the first three
 * of 33 bits, so n*part is exact for |n| < 2^20) and evaluate fdlibm's kernels (S1..S6,
 * C1..C6) on |r| <= pi/4, picked by n mod 4 (1-2 ulp, also next to the zeros).
 * Domains: fb_log_pos for positive normal finite x (no zero, subnormal, inf or NaN handling);
 * fb_sincos_mid and fb_cos_mid for |x| <= 2^20. Not a general libm: no errno, no special
 * values. Each result is a fixed sequence of IEEE double operations as long as the compiler
 * fuses none of them (init.c is built with -ffp-contract=off). tests/test_init_math.c checks
 * them against the C library over dense sweeps. */
#ifndef FB_INIT_MATH_H
#define FB_INIT_MATH_H
#include <stdint.h>
#include <string.h>

static inline uint64_t fb_bits_of(double x) {
  uint64_t u;
  memcpy(&u, &x, sizeof u);
  return u;
}

static inline double fb_double_of(uint64_t u) {
  double x;
  memcpy(&x, &u, sizeof x);
  return x;
}

/* (double)v for v < 2^52, exact, without an integer-to-double instruction (AVX2 has none for
 * 64-bit lanes): 2^52 + v has v in its mantissa. */
static inline double fb_small_u64_to_double(uint64_t v) {
  return fb_double_of(0x4330000000000000ull | v) - 0x1p52;
}

/* log(x) for positive normal finite x. */
static inline double fb_log_pos(double x) {
  const double ln2_hi = 6.93147180369123816490e-01; /* 0x3FE62E42FEE00000: k*ln2_hi exact */
  const double ln2_lo = 1.90821492927058770002e-10; /* 0x3DEA39EF35793C76 */
  const double Lg1 = 6.666666666666735130e-01, Lg2 = 3.999999999940941908e-01,
               Lg3 = 2.857142874366239149e-01, Lg4 = 2.222219843214978396e-01,
               Lg5 = 1.818357216161805012e-01, Lg6 = 1.531383769920937332e-01,
               Lg7 = 1.479819860511658591e-01;
  /* shift the exponent so that mantissas >= sqrt(2) carry into it: m in [sqrt(2)/2, sqrt(2)) */
  uint64_t ix = fb_bits_of(x) + (0x3ff0000000000000ull - 0x3fe6a09e00000000ull);
  const double dk = fb_small_u64_to_double(ix >> 52) - 1023.0; /* k, exact */
  ix = (ix & 0x000fffffffffffffull) + 0x3fe6a09e00000000ull;
  const double f = fb_double_of(ix) - 1.0;
  const double hfsq = 0.5 * f * f;
  const double s = f / (2.0 + f);
  const double z = s * s;
  const double w = z * z;
  const double t1 = w * (Lg2 + w * (Lg4 + w * Lg6));
  const double t2 = z * (Lg1 + w * (Lg3 + w * (Lg5 + w * Lg7)));
  const double R = t2 + t1;
  return s * (hfsq + R) + dk * ln2_lo - hfsq + f + dk * ln2_hi;
}

/* sin(r), |r| <= pi/4 (fdlibm __kernel_sin without a tail). */
static inline double fb_sin_kernel(double r) {
  const double S1 = -1.66666666666666324348e-01, S2 = 8.33333333332248946124e-03,
               S3 = -1.98412698298579493134e-04, S4 = 2.75573137070700676789e-06,
               S5 = -2.50507602534068634195e-08, S6 = 1.58969099521155010221e-10;
  const double z = r * r;
  const double w = z * z;
  const double p = S2 + z * (S3 + z * S4) + z * w * (S5 + z * S6);
  const double v = z * r;
  return r + v * (S1 + z * p);
}

/* cos(r), |r| <= pi/4 (fdlibm __kernel_cos without a tail, musl's form). */
static inline double fb_cos_kernel(double r) {
  const double C1 = 4.16666666666666019037e-02, C2 = -1.38888888888741095749e-03,
               C3 = 2.48015872894767294178e-05, C4 = -2.75573143513906633035e-07,
               C5 = 2.08757232129817482790e-09, C6 = -1.13596475577881948265e-11;
  const double z = r * r;
  const double w = z * z;
  const double p = z * (C1 + z * (C2 + z * C3)) + w * w * (C4 + z * (C5 + z * C6));
  const double hz = 0.5 * z;
  const double a = 1.0 - hz;
  return a + (((1.0 - a) - hz) + z * p);
}

/* sin(x) and cos(x) for |x| <= 2^20, from one reduction and both kernels. */
static inline void fb_sincos_mid(double x, double *sin_x, double *cos_x) {
  const double invpio2 = 6.36619772367581382433e-01;      /* 0x3FE45F306DC9C883 */
  const double pio2_1 = 1.57079632673412561417e+00;       /* 0x3FF921FB54400000 */
  const double pio2_2 = 6.07710050630396597660e-11;       /* 0x3DD0B4611A600000 */
  const double pio2_3 = 2.02226624871116645580e-21;       /* 0x3BA3198A2E000000 */
  const double pio2_3t = 8.47842766036889956997e-32;      /* 0x397B839A252049C1 */
  const double magic = 0x1.8p52; /* adding it rounds to an integer, held in the low bits */
  const double t = x * invpio2 + magic;
  const uint64_t q = fb_bits_of(t) & 3; /* n mod 4, also for negative n */
  const double n = t - magic;
  /* n*pio2_1, n*pio2_2, n*pio2_3 are exact (33-bit parts, |n| < 2^20); the first difference
   * is exact by Sterbenz's lemma, the later ones are where r is already small */
  const double r = ((x - n * pio2_1) - n * pio2_2) - n * pio2_3 - n * pio2_3t;
  const uint64_t s = fb_bits_of(fb_sin_kernel(r)), c = fb_bits_of(fb_cos_kernel(r));
  /* n mod 4 = 0: (sin r, cos r), 1: (cos r, -sin r), 2: (-sin r, -cos r), 3: (-cos r, sin r) */
  const uint64_t odd = 0 - (q & 1);
  *sin_x = fb_double_of(((c & odd) | (s & ~odd)) ^ ((q & 2) << 62));
  *cos_x = fb_double_of(((s & odd) | (c & ~odd)) ^ (((q + 1) & 2) << 62));
}

/* cos(x) for |x| <= 2^20. */
static inline double fb_cos_mid(double x) {
  double s, c;
  fb_sincos_mid(x, &s, &c);
  return c;
}

#endif

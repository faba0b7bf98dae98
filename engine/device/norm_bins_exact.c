/* What the exact-norm bins hold (kernels.h: the sumsq_bins kernel's output format): the
 * exact sum of squares as one big integer, and the norm as a function of that integer alone,
 * so bins merged from any sharding give a bit-identical norm. Pure integer arithmetic on the
 * bins, the same for every backend: it sits with the kernel interface, below the kernels that
 * fill the bins (engine/ops/norm_bins.c on the cpu) and the strategies that read them. */
#include <assert.h>
#include <math.h>
#include <stdint.h>
#include <string.h>

#include "kernels.h"

/* S * 4^150 as a little-endian integer of FB_NORM_LIMBS words: every bin's (hi * 2^32 + lo),
 * a 97-bit number at most, shifted left by 2e and added with carries. The largest exponent
 * (254) shifts by 508 bits, and 255 such terms carry into a few more: 640 bits hold it. */
void fb_norm_bins_exact(const uint64_t *bins, uint64_t *limbs) {
  memset(limbs, 0, FB_NORM_LIMBS * sizeof *limbs);
  for (int e = 0; e < 255; e++) {
    uint64_t lo = bins[2 * e], hi = bins[2 * e + 1];
    if (!(lo | hi)) continue;
    /* t = hi * 2^32 + lo as three words, then shifted by the bit offset within a word */
    uint64_t t[4] = {lo + (hi << 32), (hi >> 32) + (lo + (hi << 32) < lo), 0, 0};
    int k = 2 * e / 64, b = 2 * e % 64;
    if (b)
      for (int j = 3; j > 0; j--) t[j] = (t[j] << b) | (t[j - 1] >> (64 - b));
    if (b) t[0] <<= b;
    uint64_t carry = 0;
    for (int j = 0; k + j < FB_NORM_LIMBS && (j < 4 || carry); j++) {
      uint64_t a = limbs[k + j], add = j < 4 ? t[j] : 0, s = a + add, c1 = s < a;
      uint64_t s2 = s + carry, c2 = s2 < s;
      limbs[k + j] = s2;
      carry = c1 | c2;
    }
    assert(!carry && "the exact sum of squares overflowed its limbs");
  }
}

/* Bits [pos, pos + 64) of the limbs (zeros below bit 0). */
static uint64_t bits64(const uint64_t *n, int pos) {
  if (pos <= -64) return 0;
  if (pos < 0) return n[0] << -pos;
  int k = pos / 64, b = pos % 64;
  uint64_t w = n[k] >> b;
  if (b && k + 1 < FB_NORM_LIMBS) w |= n[k + 1] << (64 - b);
  return w;
}

/* value = S = N * 2^-300 with N the exact integer above. The norm is the sqrt of N's leading
 * 128 bits (two words; each converts exactly to long double, their sum rounds once), so it
 * depends on N alone; the rest of N is below 2^-127 of it. A non-finite input (bin 255) makes
 * the norm NaN. */
double fb_norm_from_bins(const uint64_t *bins) {
  if (bins[2 * 255] | bins[2 * 255 + 1]) return NAN;
  uint64_t n[FB_NORM_LIMBS];
  fb_norm_bins_exact(bins, n);
  int top = FB_NORM_LIMBS - 1;
  while (top >= 0 && !n[top]) top--;
  if (top < 0) return 0.0;
  int msb = 64 * top + 63 - __builtin_clzll(n[top]);
  long double acc = ldexpl((long double)bits64(n, msb - 63), msb - 63 - 300) +
                    ldexpl((long double)bits64(n, msb - 127), msb - 127 - 300);
  return (double)sqrtl(acc);
}

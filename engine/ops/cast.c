/* fp32 <-> bf16 conversion of vectors (round to nearest even), in fixed element blocks so the
 * result never depends on the thread count. Does not handle other dtype pairs. */
/* Elementwise loops with selects, float<->int conversions and sqrt vectorise only when the
 * compiler may assume FP exceptions do not trap and sqrt need not set errno; values are the
 * same either way. */
#pragma GCC optimize("no-trapping-math", "no-math-errno")
#include <omp.h>

#include "elementwise.h"
#include "ops.h"

#define CAST_BLOCK 16384

void fb_cast_f32_to_bf16(uint16_t *dst, const float *src, size_t n) {
  int64_t nb = (int64_t)((n + CAST_BLOCK - 1) / CAST_BLOCK);
#pragma omp parallel for schedule(static) if (nb > 1)
  for (int64_t b = 0; b < nb; b++) {
    size_t i1 = (size_t)(b + 1) * CAST_BLOCK < n ? (size_t)(b + 1) * CAST_BLOCK : n;
    for (size_t i = (size_t)b * CAST_BLOCK; i < i1; i++) dst[i] = fb_f32_to_bf16(src[i]);
  }
}

void fb_cast_bf16_to_f32(float *dst, const uint16_t *src, size_t n) {
  int64_t nb = (int64_t)((n + CAST_BLOCK - 1) / CAST_BLOCK);
#pragma omp parallel for schedule(static) if (nb > 1)
  for (int64_t b = 0; b < nb; b++) {
    size_t i1 = (size_t)(b + 1) * CAST_BLOCK < n ? (size_t)(b + 1) * CAST_BLOCK : n;
    for (size_t i = (size_t)b * CAST_BLOCK; i < i1; i++) dst[i] = fb_bf16_to_f32(src[i]);
  }
}

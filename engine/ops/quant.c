/* Block quantisation on the cpu (zeropp's qwZ int8 weights and qgZ int4 gradients): quantize
 * (one fp32 scale per block of `group` elements inside each segment) and dequant_sum
 * (dequantise terms and sum them in term order, in fp32). Each block is independent, so the
 * bits do not depend on the thread count; the per-element formulas are elementwise.h's, the
 * ones the cuda kernels use. Layouts: kernels.h. Nothing here moves data between ranks. */
#pragma GCC optimize("no-trapping-math", "no-math-errno")
#include <math.h>
#include <omp.h>
#include <string.h>

#include "elementwise.h"
#include "ops.h"

static inline float load(const void *x, fb_dtype t, size_t i) {
  return t == FB_BF16 ? fb_bf16_to_f32(((const uint16_t *)x)[i]) : ((const float *)x)[i];
}

/* Element i (of the whole layout) as quantised: its int value. */
static inline int qload(const uint8_t *q, size_t i, int bits) {
  return bits == 8 ? (int)(int8_t)q[i] : fb_q4_unpack(q[i / 2], (int)(i & 1));
}

void fb_quantize_blocks(uint8_t *q, float *scales, const void *x, fb_dtype xt, size_t nseg,
                        size_t seglen, int group, int bits, int rows) {
  const size_t bps = (seglen + (size_t)group - 1) / (size_t)group, cols = nseg / (size_t)rows;
  const int64_t nblk = (int64_t)(nseg * bps);
#pragma omp parallel for schedule(static) if (nblk > 8)
  for (int64_t b = 0; b < nblk; b++) {
    const size_t s = (size_t)b / bps, off = ((size_t)b % bps) * (size_t)group;
    const size_t i0 = s * seglen + off;
    const size_t i1 = off + (size_t)group < seglen ? i0 + (size_t)group : (s + 1) * seglen;
    const size_t o = (s % cols * (size_t)rows + s / cols) * seglen + off - i0; /* i -> i + o */
    float amax = 0.0f;
    for (size_t i = i0; i < i1; i++) amax = fmaxf(amax, fabsf(load(x, xt, i)));
    const float sc = fb_quant_scale(amax, bits);
    scales[(s % cols * (size_t)rows + s / cols) * bps + (size_t)b % bps] = sc;
    if (bits == 8) {
      for (size_t i = i0; i < i1; i++)
        q[i + o] = (uint8_t)(int8_t)fb_quant_one(load(x, xt, i), sc, 8);
      continue;
    }
    for (size_t i = i0; i < i1; i += 2) /* blocks start at even elements: seglen, group even */
      q[(i + o) / 2] =
          (uint8_t)((fb_quant_one(load(x, xt, i), sc, 4) & 15) |
                    ((i + 1 < i1 ? fb_quant_one(load(x, xt, i + 1), sc, 4) & 15 : 0) << 4));
  }
}

void fb_dequant_sum(void *out, fb_dtype ot, const uint8_t *q, const float *scales, size_t nterm,
                    size_t termlen, size_t seglen, int group, int bits) {
  const size_t bps = (seglen + (size_t)group - 1) / (size_t)group;
  const int64_t n = (int64_t)termlen;
#pragma omp parallel for schedule(static) if (n > 65536)
  for (int64_t ii = 0; ii < n; ii++) {
    float acc = 0.0f;
    for (size_t t = 0; t < nterm; t++) {
      const size_t i = t * termlen + (size_t)ii, s = i / seglen;
      const float sc = scales[s * bps + (i - s * seglen) / (size_t)group];
      acc = fb_dequant_acc(acc, qload(q, i, bits), sc, t == 0);
    }
    if (ot == FB_BF16)
      ((uint16_t *)out)[ii] = fb_f32_to_bf16(acc);
    else
      ((float *)out)[ii] = acc;
  }
}

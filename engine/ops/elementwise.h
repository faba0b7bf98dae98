/* Per-element formulas shared by the CPU ops and the CUDA kernels: GELU (tanh approximation)
 * and SiLU/SwiGLU with their derivatives, the AdamW and SGD updates, fp32 <-> bf16 conversion
 * (round to nearest even) and the exact sum-of-squares bin decomposition of an fp32 value.
 * Float variants end in _f, double variants in _d. Plain C that nvcc also accepts as C++;
 * everything is branch-light so loops over these functions vectorise.
 * This header does not loop over arrays, allocate or thread: the ops around it do. */
#ifndef FB_ELEMENTWISE_H
#define FB_ELEMENTWISE_H
#include <math.h>
#include <stdint.h>

#ifdef __CUDACC__
#define FB_HD __host__ __device__
#else
#define FB_HD
#endif

#define FB_GELU_K0 0.7978845608028654 /* sqrt(2/pi) */
#define FB_GELU_K1 0.044715

/* ---- bit casts ------------------------------------------------------------------------ */
static inline FB_HD uint32_t fb_f32_bits(float f) {
#ifdef __CUDA_ARCH__
  return __float_as_uint(f);
#else
  union { float f; uint32_t u; } c;
  c.f = f;
  return c.u;
#endif
}
static inline FB_HD float fb_f32_from_bits(uint32_t u) {
#ifdef __CUDA_ARCH__
  return __uint_as_float(u);
#else
  union { float f; uint32_t u; } c;
  c.u = u;
  return c.f;
#endif
}

/* ---- exp for float, written so compilers vectorise it ----------------------------------
 * exp(x) = 2^n * exp(r), x = n ln2 + r, |r| <= ln2/2; degree-6 polynomial: about 2 ulp.
 * Saturates: x < -87.3 gives 0, x > 88.7 gives +inf. NaN in gives NaN out. */
static inline FB_HD float fb_exp_f(float x) {
  const float hi = 88.72283f, lo = -87.33654f;
  float xc = x < hi ? x : hi; /* NaN takes hi here; it is returned unchanged below */
  xc = xc > lo ? xc : lo;
  float n = floorf(xc * 1.44269504088896341f + 0.5f);
  float r = xc - n * 0.693359375f; /* ln2 split in two for an exact first step */
  r = r + n * 2.12194440e-4f;
  float p = 1.9875691500e-4f;
  p = p * r + 1.3981999507e-3f;
  p = p * r + 8.3334519073e-3f;
  p = p * r + 4.1665795894e-2f;
  p = p * r + 1.6666665459e-1f;
  p = p * r + 5.0000001201e-1f;
  p = p * r * r + r + 1.0f;
  int32_t ni = (int32_t)n;
  /* 2^n in two halves so n = 128 (x near hi) does not overflow the exponent field */
  int32_t n1 = ni >> 1, n2 = ni - n1;
  float s1 = fb_f32_from_bits((uint32_t)(n1 + 127) << 23);
  float s2 = fb_f32_from_bits((uint32_t)(n2 + 127) << 23);
  float y = p * s1 * s2;
  y = x > hi ? INFINITY : y;
  y = x < lo ? 0.0f : y;
  return x != x ? x : y;
}
static inline FB_HD double fb_exp_d(double x) { return exp(x); }

/* tanh(u) = 1 - 2 / (exp(2u) + 1): absolute error ~1e-7, enough for GELU's 0.5 (1 + tanh). */
static inline FB_HD float fb_tanh_f(float u) { return 1.0f - 2.0f / (fb_exp_f(2.0f * u) + 1.0f); }
static inline FB_HD double fb_tanh_d(double u) { return tanh(u); }

/* ---- GELU, tanh approximation (GPT-2) -------------------------------------------------- */
static inline FB_HD float fb_gelu_f(float x) {
  float u = (float)FB_GELU_K0 * (x + (float)FB_GELU_K1 * x * x * x);
  return 0.5f * x * (1.0f + fb_tanh_f(u));
}
static inline FB_HD float fb_gelu_grad_f(float x) {
  float u = (float)FB_GELU_K0 * (x + (float)FB_GELU_K1 * x * x * x);
  float th = fb_tanh_f(u);
  float du = (float)FB_GELU_K0 * (1.0f + 3.0f * (float)FB_GELU_K1 * x * x);
  return 0.5f * (1.0f + th) + 0.5f * x * (1.0f - th * th) * du;
}
static inline FB_HD double fb_gelu_d(double x) {
  double u = FB_GELU_K0 * (x + FB_GELU_K1 * x * x * x);
  return 0.5 * x * (1.0 + fb_tanh_d(u));
}
static inline FB_HD double fb_gelu_grad_d(double x) {
  double u = FB_GELU_K0 * (x + FB_GELU_K1 * x * x * x);
  double th = fb_tanh_d(u);
  double du = FB_GELU_K0 * (1.0 + 3.0 * FB_GELU_K1 * x * x);
  return 0.5 * (1.0 + th) + 0.5 * x * (1.0 - th * th) * du;
}

/* ---- SiLU / SwiGLU: out = silu(a) * b ------------------------------------------------- */
static inline FB_HD float fb_sigmoid_f(float x) { return 1.0f / (1.0f + fb_exp_f(-x)); }
static inline FB_HD double fb_sigmoid_d(double x) { return 1.0 / (1.0 + exp(-x)); }
static inline FB_HD float fb_silu_f(float x) { return x * fb_sigmoid_f(x); }
static inline FB_HD double fb_silu_d(double x) { return x * fb_sigmoid_d(x); }
static inline FB_HD float fb_silu_grad_f(float x) {
  float s = fb_sigmoid_f(x);
  return s * (1.0f + x * (1.0f - s));
}
static inline FB_HD double fb_silu_grad_d(double x) {
  double s = fb_sigmoid_d(x);
  return s * (1.0 + x * (1.0 - s));
}
static inline FB_HD float fb_swiglu_f(float a, float b) { return fb_silu_f(a) * b; }
static inline FB_HD double fb_swiglu_d(double a, double b) { return fb_silu_d(a) * b; }
/* Gradients of swiglu: *da = dout * b * silu'(a), *db = dout * silu(a). */
static inline FB_HD void fb_swiglu_grad_f(float a, float b, float dout, float *da, float *db) {
  float s = fb_sigmoid_f(a);
  *da = dout * b * (s * (1.0f + a * (1.0f - s)));
  *db = dout * (a * s);
}
static inline FB_HD void fb_swiglu_grad_d(double a, double b, double dout, double *da,
                                          double *db) {
  double s = fb_sigmoid_d(a);
  *da = dout * b * (s * (1.0 + a * (1.0 - s)));
  *db = dout * (a * s);
}

/* ---- optimizer updates ------------------------------------------------------------------
 * AdamW with decoupled weight decay: g' = g * grad_scale; m = b1 m + (1-b1) g';
 * v = b2 v + (1-b2) g'^2; p -= lr * (m/bc1 / (sqrt(v/bc2) + eps) + wd * p).
 * A zero p with a zero g stays zero (padding of shards is preserved). */
static inline FB_HD void fb_adamw_update_f(float *p, float g, float *m, float *v, float lr,
                                           float b1, float b2, float eps, float wd, float bc1,
                                           float bc2, float gscale) {
  float gs = g * gscale;
  float mm = b1 * *m + (1.0f - b1) * gs;
  float vv = b2 * *v + (1.0f - b2) * gs * gs;
  *m = mm;
  *v = vv;
  float mhat = mm / bc1, vhat = vv / bc2;
  *p -= lr * (mhat / (sqrtf(vhat) + eps) + wd * *p);
}
static inline FB_HD void fb_adamw_update_d(double *p, double g, double *m, double *v, double lr,
                                           double b1, double b2, double eps, double wd,
                                           double bc1, double bc2, double gscale) {
  double gs = g * gscale;
  double mm = b1 * *m + (1.0 - b1) * gs;
  double vv = b2 * *v + (1.0 - b2) * gs * gs;
  *m = mm;
  *v = vv;
  double mhat = mm / bc1, vhat = vv / bc2;
  *p -= lr * (mhat / (sqrt(vhat) + eps) + wd * *p);
}
/* SGD with momentum (PyTorch convention, coupled weight decay): g' = g*scale + wd*p;
 * mom = momentum*mom + g'; p -= lr*mom. */
static inline FB_HD void fb_sgd_update_f(float *p, float g, float *mom, float lr, float momentum,
                                         float wd, float gscale) {
  float gg = g * gscale + wd * *p;
  float mm = momentum * *mom + gg;
  *mom = mm;
  *p -= lr * mm;
}
static inline FB_HD void fb_sgd_update_d(double *p, double g, double *mom, double lr,
                                         double momentum, double wd, double gscale) {
  double gg = g * gscale + wd * *p;
  double mm = momentum * *mom + gg;
  *mom = mm;
  *p -= lr * mm;
}

/* ---- bf16 ------------------------------------------------------------------------------ */
/* Round to nearest even; NaN stays a (quiet) NaN; overflow rounds to inf as IEEE does. */
static inline FB_HD uint16_t fb_f32_to_bf16(float f) {
  uint32_t u = fb_f32_bits(f);
  if ((u & 0x7fffffffu) > 0x7f800000u) return (uint16_t)((u >> 16) | 0x0040u);
  u += 0x7fffu + ((u >> 16) & 1u);
  return (uint16_t)(u >> 16);
}
static inline FB_HD float fb_bf16_to_f32(uint16_t h) { return fb_f32_from_bits((uint32_t)h << 16); }

/* ---- block quantisation (zeropp: qwZ int8, qgZ int4) ------------------------------------
 * Symmetric, one fp32 scale per block: scale = absmax / qmax (qmax = 2^(bits-1) - 1: 127 for
 * int8, 7 for int4), q = rint(x / scale) clamped to [-qmax, qmax] (round to nearest even), and
 * x' = q * scale; an all-zero block has scale 0 and q = 0. |x - x'| <= scale / 2 per element.
 * int4 values are packed two a byte, element 2i in the low nibble, 2i+1 in the high one, as
 * two's complement. The cpu and cuda kernels both use these, so their bits agree. */
static inline FB_HD int fb_quant_qmax(int bits) { return (1 << (bits - 1)) - 1; }
static inline FB_HD float fb_quant_scale(float absmax, int bits) {
  return absmax / (float)fb_quant_qmax(bits);
}
static inline FB_HD int fb_quant_one(float x, float scale, int bits) {
  if (!(scale > 0.0f)) return 0;
  const float qm = (float)fb_quant_qmax(bits);
  float r = rintf(x / scale);
  r = r > qm ? qm : r < -qm ? -qm : r;
  return (int)r;
}
/* acc + q * scale (first: the term alone), the product rounded before the sum: nvcc fuses a
 * multiply into the add that follows it (an FMA, one rounding) unless told not to, so the
 * device side names both roundings; the cpu side is built without contraction (quant.c). */
static inline FB_HD float fb_dequant_acc(float acc, int q, float scale, int first) {
#ifdef __CUDA_ARCH__
  const float d = __fmul_rn((float)q, scale);
  return first ? d : __fadd_rn(acc, d);
#else
  const float d = (float)q * scale;
  return first ? d : acc + d;
#endif
}
static inline FB_HD int fb_q4_unpack(uint8_t byte, int hi) {
  const int v = hi ? byte >> 4 : byte & 15;
  return v >= 8 ? v - 16 : v;
}

/* ---- exact sum of squares ---------------------------------------------------------------
 * |g| = mant * 2^(e - 150) with e the biased exponent field (denormals: e = 1, no hidden bit);
 * mant < 2^24 so mant^2 < 2^48 is exact in 64 bits. Zero gives mant = 0 (adds nothing).
 * Inf/NaN land in bin 255, which fb_norm_from_bins reports as a non-finite norm. */
static inline FB_HD void fb_sumsq_decompose(float g, uint32_t *bin, uint64_t *mant_sq) {
  uint32_t u = fb_f32_bits(g);
  uint32_t e = (u >> 23) & 0xffu;
  uint32_t mant = u & 0x7fffffu;
  mant |= e ? 0x800000u : 0u;
  *bin = e ? e : 1u;
  *mant_sq = (uint64_t)mant * mant; /* 32 x 32 -> 64: one widening multiply per lane */
}

#endif

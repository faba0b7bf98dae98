/* The CPU ops in single precision (what the cpu device computes with): instantiates
 * ops_impl.h for float with sgemm. Does not hold the math itself; see ops_impl.h. */
/* Elementwise loops with selects, float<->int conversions and sqrt vectorise only when the
 * compiler may assume FP exceptions do not trap and sqrt need not set errno; values are the
 * same either way. */
#pragma GCC optimize("no-trapping-math", "no-math-errno")
#include <assert.h>
#include <math.h>
#include <omp.h>

#include "blas.h"
#include "elementwise.h"
#include "ops.h"
#if defined(__AVX2__) && defined(__FMA__)
#include <immintrin.h>
#endif

#define REAL float
#define OPN(x) x##_f32
#define LOC(x) x##_f32_
#define R_EXP fb_exp_f
#define R_LOG logf
#define R_SQRT sqrtf
#define R_GEMM cblas_sgemm
#define R_GELU fb_gelu_f
#define R_GELU_GRAD fb_gelu_grad_f
#define R_SWIGLU fb_swiglu_f
#define R_SWIGLU_GRAD fb_swiglu_grad_f
#define R_ADAMW fb_adamw_update_f
#define R_SGD fb_sgd_update_f

#if defined(__AVX2__) && defined(__FMA__)
/* fb_adamw_update_f (elementwise.h) on 8 floats at a time, same operations in the same order
 * (products folded into FMAs as written below). Whole vectors use plain loads and stores; only
 * the last partial vector goes under a mask (masked stores are microcoded and slow on AMD), and
 * it runs the very same vector operations, so every element of every tensor and shard rounds
 * exactly as in the whole tensor. */
typedef struct {
  __m256 lr, b1, b2, eps, wd, bc1, bc2, gsc, c1, c2;
} adamw_vec;

static inline void adamw8(const adamw_vec *k, __m256 *vp, __m256 vg, __m256 *vm, __m256 *vv) {
  __m256 gs = _mm256_mul_ps(vg, k->gsc);
  __m256 mm = _mm256_fmadd_ps(k->b1, *vm, _mm256_mul_ps(k->c1, gs));
  __m256 nv = _mm256_fmadd_ps(k->b2, *vv, _mm256_mul_ps(_mm256_mul_ps(k->c2, gs), gs));
  __m256 mhat = _mm256_div_ps(mm, k->bc1), vhat = _mm256_div_ps(nv, k->bc2);
  __m256 step = _mm256_div_ps(mhat, _mm256_add_ps(_mm256_sqrt_ps(vhat), k->eps));
  *vp = _mm256_fnmadd_ps(k->lr, _mm256_fmadd_ps(k->wd, *vp, step), *vp);
  *vm = mm;
  *vv = nv;
}

static void adamw_block_avx2(float *p, const float *g, float *m, float *v, size_t n,
                             const fb_adamw_args *a) {
  const adamw_vec k = {
      .lr = _mm256_set1_ps(a->lr), .b1 = _mm256_set1_ps(a->beta1),
      .b2 = _mm256_set1_ps(a->beta2), .eps = _mm256_set1_ps(a->eps),
      .wd = _mm256_set1_ps(a->weight_decay), .bc1 = _mm256_set1_ps(a->bias_corr1),
      .bc2 = _mm256_set1_ps(a->bias_corr2), .gsc = _mm256_set1_ps(a->grad_scale),
      .c1 = _mm256_set1_ps(1.0f - a->beta1), .c2 = _mm256_set1_ps(1.0f - a->beta2)};
  size_t i = 0;
  for (; i + 8 <= n; i += 8) {
    __m256 vp = _mm256_loadu_ps(p + i), vm = _mm256_loadu_ps(m + i), vv = _mm256_loadu_ps(v + i);
    adamw8(&k, &vp, _mm256_loadu_ps(g + i), &vm, &vv);
    _mm256_storeu_ps(m + i, vm);
    _mm256_storeu_ps(v + i, vv);
    _mm256_storeu_ps(p + i, vp);
  }
  if (i == n) return;
  __m256i mask = _mm256_cmpgt_epi32(_mm256_set1_epi32((int)(n - i)),
                                    _mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7));
  __m256 vp = _mm256_maskload_ps(p + i, mask), vm = _mm256_maskload_ps(m + i, mask);
  __m256 vv = _mm256_maskload_ps(v + i, mask);
  adamw8(&k, &vp, _mm256_maskload_ps(g + i, mask), &vm, &vv);
  _mm256_maskstore_ps(m + i, mask, vm);
  _mm256_maskstore_ps(v + i, mask, vv);
  _mm256_maskstore_ps(p + i, mask, vp);
}
#define R_ADAMW_BLOCK adamw_block_avx2
#endif
#include "ops_impl.h"

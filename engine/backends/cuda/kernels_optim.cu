/* The cuda fp32 vector kernels of the optimizer step: acc_f32, scale_f32, adamw, sgd (update
 * formulas from engine/ops/elementwise.h). Helpers and conventions: kernels.cuh. */
#include "kernels.cuh"

/* ==== fp32 vectors ========================================================================== */
__global__ void acc_k(float *y, const float *x, size_t n) { GRID_STRIDE(i, n) y[i] += x[i]; }
__global__ void scale_k(float *y, float a, size_t n) { GRID_STRIDE(i, n) y[i] *= a; }
__global__ void adamw_k(float *p, const float *g, float *m, float *v, size_t n, fb_adamw_args a) {
  GRID_STRIDE(i, n) {
    float pp = p[i], mm = m[i], vv = v[i];
    fb_adamw_update_f(&pp, g[i], &mm, &vv, a.lr, a.beta1, a.beta2, a.eps, a.weight_decay,
                      a.bias_corr1, a.bias_corr2, a.grad_scale);
    p[i] = pp;
    m[i] = mm;
    v[i] = vv;
  }
}
__global__ void sgd_k(float *p, const float *g, float *mom, size_t n, fb_sgd_args a) {
  GRID_STRIDE(i, n) {
    float pp = p[i];
    if (mom) {
      float mm = mom[i];
      fb_sgd_update_f(&pp, g[i], &mm, a.lr, a.momentum, a.weight_decay, a.grad_scale);
      mom[i] = mm;
    } else {
      float zero = 0.0f;
      fb_sgd_update_f(&pp, g[i], &zero, a.lr, 0.0f, a.weight_decay, a.grad_scale);
    }
    p[i] = pp;
  }
}

#define F32_LAUNCH(k, op, n, KERNEL, ...)                                                      \
  do {                                                                                         \
    FB_TRY(prologue(k));                                                                       \
    if ((n) == 0) return FB_OK;                                                                \
    KERNEL<<<grid_for((int64_t)(n), 256), 256, 0, (k)->s->s>>>(__VA_ARGS__);                   \
    return launch_check(k, op);                                                                \
  } while (0)

fb_status fb_cuda_acc_f32(const fb_kctx *k, float *y, const float *x, size_t n) {
  F32_LAUNCH(k, "acc_f32", n, acc_k, y, x, n);
}
fb_status fb_cuda_scale_f32(const fb_kctx *k, float *y, float a, size_t n) {
  F32_LAUNCH(k, "scale_f32", n, scale_k, y, a, n);
}
fb_status fb_cuda_adamw(const fb_kctx *k, float *p, const float *g, float *m, float *v, size_t n,
                         const fb_adamw_args *a) {
  F32_LAUNCH(k, "adamw", n, adamw_k, p, g, m, v, n, *a);
}
fb_status fb_cuda_sgd(const fb_kctx *k, float *p, const float *g, float *mom, size_t n,
                       const fb_sgd_args *a) {
  F32_LAUNCH(k, "sgd", n, sgd_k, p, g, mom, n, *a);
}

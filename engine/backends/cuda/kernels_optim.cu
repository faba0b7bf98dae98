/* The cuda vector kernels of the optimizer step and the gradients: acc_f32, scale (fp32, or a
 * bf16 gradient: FSDP1's divides), adamw, adamw_cast (AdamW that also writes the updated
 * parameters in the compute dtype: the working copy of a mixed-precision run, with no separate
 * cast pass) and sgd. Update formulas from engine/ops/elementwise.h; 16-byte vectors with
 * scalar heads and tails (vsplit). Helpers and conventions: kernels.cuh. */
#include "kernels.cuh"

/* ==== fp32 vectors as elementwise maps (ew_k) =============================================== */
struct acc_f {
  __device__ void operator()(const float *x, float *y) const { y[0] = x[0] + x[1]; }
};
struct scale_f {
  float a;
  __device__ void operator()(const float *x, float *y) const { y[0] = x[0] * a; }
};
struct sgd_f { /* x: p, g, mom; y: p, mom */
  fb_sgd_args a;
  __device__ void operator()(const float *x, float *y) const {
    float p = x[0], m = x[2];
    fb_sgd_update_f(&p, x[1], &m, a.lr, a.momentum, a.weight_decay, a.grad_scale);
    y[0] = p, y[1] = m;
  }
};
struct sgd_nomom_f { /* x: p, g; y: p */
  fb_sgd_args a;
  __device__ void operator()(const float *x, float *y) const {
    float p = x[0], zero = 0.0f;
    fb_sgd_update_f(&p, x[1], &zero, a.lr, 0.0f, a.weight_decay, a.grad_scale);
    y[0] = p;
  }
};

fb_status fb_cuda_acc_f32(const fb_kctx *k, float *y, const float *x, size_t n) {
  FB_TRY(prologue(k));
  if (n == 0) return FB_OK;
  ew_launch(k->s->s, acc_f{}, ew_ptrs<float, 2, 1>{{y, x}, {y}}, n);
  return launch_check(k, "acc_f32");
}
fb_status fb_cuda_scale(const fb_kctx *k, void *y, fb_dtype dt, float a, size_t n) {
  FB_TRY(prologue(k));
  if (n == 0) return FB_OK;
  if (dt == FB_F32)
    ew_launch(k->s->s, scale_f{a}, ew_ptrs<float, 1, 1>{{(float *)y}, {(float *)y}}, n);
  else if (dt == FB_BF16)
    ew_launch(k->s->s, scale_f{a}, ew_ptrs<bf16, 1, 1>{{(bf16 *)y}, {(bf16 *)y}}, n);
  else
    return FB_ERR(FB_EUNSUPPORTED, "scale: dtype %s is not supported (allowed: fp32, bf16)",
                  fb_dtype_name(dt));
  return launch_check(k, "scale");
}
fb_status fb_cuda_sgd(const fb_kctx *k, float *p, const float *g, float *mom, size_t n,
                      const fb_sgd_args *a) {
  FB_TRY(prologue(k));
  if (n == 0) return FB_OK;
  if (mom)
    ew_launch(k->s->s, sgd_f{*a}, ew_ptrs<float, 3, 2>{{p, g, mom}, {p, mom}}, n);
  else
    ew_launch(k->s->s, sgd_nomom_f{*a}, ew_ptrs<float, 2, 1>{{p, g}, {p}}, n);
  return launch_check(k, "sgd");
}

/* ==== AdamW, and its copy in the compute dtype ===============================================
 * One thread updates 4 elements from 16-byte loads of p, g, m, v (scalar head and tail); with
 * an output O (bf16 or fp32) it also stores the updated p rounded to O (fb_f32_to_bf16, the
 * rounding of the cast kernel: the same bits as adamw followed by cast). */
__device__ __forceinline__ float adamw_one(float p, float g, float *m, float *v,
                                           const fb_adamw_args &a) {
  fb_adamw_update_f(&p, g, m, v, a.lr, a.beta1, a.beta2, a.eps, a.weight_decay, a.bias_corr1,
                    a.bias_corr2, a.grad_scale);
  return p;
}
__device__ __forceinline__ void put(float *o, size_t i, float x) { o[i] = x; }
__device__ __forceinline__ void put(bf16 *o, size_t i, float x) { o[i] = fb_f32_to_bf16(x); }
__device__ __forceinline__ void put4(float *o, const float (&x)[4]) {
  *(float4 *)o = make_float4(x[0], x[1], x[2], x[3]);
}
__device__ __forceinline__ void put4(bf16 *o, const float (&x)[4]) {
  *(uint2 *)o = make_uint2(bf16x2(x[0], x[1]), bf16x2(x[2], x[3]));
}

/* O = void: no copy. */
template <typename O>
__global__ void adamw_k(float *p, const float *g, float *m, float *v, O *out, size_t n,
                        vsplit sp, fb_adamw_args a) {
  GRID_STRIDE(i, sp.nv) {
    const size_t o = sp.head + (size_t)i * 4;
    float pp[4], gg[4], mm[4], vv[4];
    ldv(p + o, pp), ldv(g + o, gg), ldv(m + o, mm), ldv(v + o, vv);
#pragma unroll
    for (int j = 0; j < 4; j++) pp[j] = adamw_one(pp[j], gg[j], &mm[j], &vv[j], a);
    stv(p + o, pp), stv(m + o, mm), stv(v + o, vv);
    if constexpr (!std::is_void<O>::value) put4(out + o, pp);
  }
  GRID_STRIDE(t, sp.scalars(n)) {
    const size_t i = sp.vs_index((size_t)t);
    float mm = m[i], vv = v[i];
    const float pp = adamw_one(p[i], g[i], &mm, &vv, a);
    p[i] = pp, m[i] = mm, v[i] = vv;
    if constexpr (!std::is_void<O>::value) put(out, i, pp);
  }
}
template <typename O> constexpr size_t out_size() {
  if constexpr (std::is_void<O>::value) return 4;
  else return sizeof(O);
}
template <typename O>
static void adamw_launch(cudaStream_t s, float *p, const float *g, float *m, float *v, O *out,
                         size_t n, const fb_adamw_args *a) {
  const void *ptrs[5] = {p, g, m, v, out};
  const size_t esz[5] = {4, 4, 4, 4, out_size<O>()};
  /* the vector path stores 4 outputs at once: 8 bytes of bf16 (kept 16-byte aligned too) */
  const vsplit sp = vsplit_of(ptrs, esz, out ? 5 : 4, n, 4);
  const size_t units = sp.nv > sp.scalars(n) ? sp.nv : sp.scalars(n);
  adamw_k<O><<<grid_for((int64_t)units, 256), 256, 0, s>>>(p, g, m, v, out, n, sp, *a);
}

fb_status fb_cuda_adamw(const fb_kctx *k, float *p, const float *g, float *m, float *v, size_t n,
                        const fb_adamw_args *a) {
  FB_TRY(prologue(k));
  if (n == 0) return FB_OK;
  adamw_launch<void>(k->s->s, p, g, m, v, NULL, n, a);
  return launch_check(k, "adamw");
}
fb_status fb_cuda_adamw_cast(const fb_kctx *k, float *p, const float *g, float *m, float *v,
                             void *out, fb_dtype out_dt, size_t n, const fb_adamw_args *a) {
  FB_TRY(prologue(k));
  if (n == 0) return FB_OK;
  if (out_dt == FB_BF16)
    adamw_launch(k->s->s, p, g, m, v, (bf16 *)out, n, a);
  else if (out_dt == FB_F32)
    adamw_launch(k->s->s, p, g, m, v, (float *)out, n, a);
  else
    return FB_ERR(FB_EUNSUPPORTED, "rank %d: cuda adamw_cast: output dtype %s is not supported "
                  "(allowed: fp32, bf16)", k->dev->rank, fb_dtype_name(out_dt));
  return launch_check(k, "adamw_cast");
}

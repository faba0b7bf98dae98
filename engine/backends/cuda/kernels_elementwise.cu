/* The cuda elementwise kernels on activations: gelu, swiglu (forward and backward) and add,
 * per-element formulas from engine/ops/elementwise.h, as 16-byte vector maps (ew_k) with scalar
 * tails. Helpers and conventions: kernels.cuh. */
#include "kernels.cuh"

/* ==== elementwise: 16-byte vectors (ew_k), scalar tails =================================== */
struct gelu_fwd_f {
  __device__ void operator()(const float *x, float *y) const { y[0] = fb_gelu_f(x[0]); }
};
struct gelu_bwd_f { /* x: inp, dout */
  __device__ void operator()(const float *x, float *y) const {
    y[0] = x[1] * fb_gelu_grad_f(x[0]);
  }
};
struct swiglu_fwd_f { /* x: a, b */
  __device__ void operator()(const float *x, float *y) const { y[0] = fb_swiglu_f(x[0], x[1]); }
};
struct swiglu_bwd_f { /* x: a, b, dout; y: da, db */
  __device__ void operator()(const float *x, float *y) const {
    fb_swiglu_grad_f(x[0], x[1], x[2], &y[0], &y[1]);
  }
};
struct add_f {
  __device__ void operator()(const float *x, float *y) const { y[0] = x[0] + x[1]; }
};

template <typename E>
static void gelu_fwd_launch(cudaStream_t s, void *out, const void *inp, size_t n) {
  ew_launch(s, gelu_fwd_f{}, ew_ptrs<E, 1, 1>{{(const E *)inp}, {(E *)out}}, n);
}
template <typename E>
static void gelu_bwd_launch(cudaStream_t s, void *dinp, const void *inp, const void *dout,
                            size_t n) {
  ew_launch(s, gelu_bwd_f{}, ew_ptrs<E, 2, 1>{{(const E *)inp, (const E *)dout}, {(E *)dinp}},
            n);
}
template <typename E>
static void swiglu_fwd_launch(cudaStream_t s, void *out, const void *a, const void *b,
                              size_t n) {
  ew_launch(s, swiglu_fwd_f{}, ew_ptrs<E, 2, 1>{{(const E *)a, (const E *)b}, {(E *)out}}, n);
}
template <typename E>
static void swiglu_bwd_launch(cudaStream_t s, void *da, void *db, const void *dout,
                              const void *a, const void *b, size_t n) {
  ew_launch(s, swiglu_bwd_f{},
            ew_ptrs<E, 3, 2>{{(const E *)a, (const E *)b, (const E *)dout}, {(E *)da, (E *)db}},
            n);
}
template <typename E>
static void add_launch(cudaStream_t s, void *out, const void *a, const void *b, size_t n) {
  ew_launch(s, add_f{}, ew_ptrs<E, 2, 1>{{(const E *)a, (const E *)b}, {(E *)out}}, n);
}

fb_status fb_cuda_gelu_fwd(const fb_kctx *k, void *out, const void *inp, size_t n) {
  if (n == 0) return FB_OK;
  DISPATCH(k, "gelu_fwd", gelu_fwd_launch, k->s->s, out, inp, n);
}
fb_status fb_cuda_gelu_bwd(const fb_kctx *k, void *dinp, const void *inp, const void *dout,
                            size_t n) {
  if (n == 0) return FB_OK;
  DISPATCH(k, "gelu_bwd", gelu_bwd_launch, k->s->s, dinp, inp, dout, n);
}
fb_status fb_cuda_swiglu_fwd(const fb_kctx *k, void *out, const void *a, const void *b,
                              size_t n) {
  if (n == 0) return FB_OK;
  DISPATCH(k, "swiglu_fwd", swiglu_fwd_launch, k->s->s, out, a, b, n);
}
fb_status fb_cuda_swiglu_bwd(const fb_kctx *k, void *da, void *db, const void *dout,
                              const void *a, const void *b, size_t n) {
  if (n == 0) return FB_OK;
  DISPATCH(k, "swiglu_bwd", swiglu_bwd_launch, k->s->s, da, db, dout, a, b, n);
}
fb_status fb_cuda_add(const fb_kctx *k, void *out, const void *a, const void *b, size_t n) {
  if (n == 0) return FB_OK;
  DISPATCH(k, "add", add_launch, k->s->s, out, a, b, n);
}

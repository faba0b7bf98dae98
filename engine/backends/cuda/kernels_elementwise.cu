/* The cuda elementwise kernels on activations: gelu, swiglu (forward and backward) and add,
 * per-element formulas from engine/ops/elementwise.h. Helpers and conventions:
 * kernels.cuh. */
#include "kernels.cuh"

/* ==== elementwise =========================================================================== */
template <typename E>
__global__ void gelu_fwd_k(E *out, const E *inp, size_t n) {
  GRID_STRIDE(i, n) st(out, i, fb_gelu_f(ld(inp, i)));
}
template <typename E>
__global__ void gelu_bwd_k(E *dinp, const E *inp, const E *dout, size_t n) {
  GRID_STRIDE(i, n) st(dinp, i, ld(dout, i) * fb_gelu_grad_f(ld(inp, i)));
}
template <typename E>
__global__ void swiglu_fwd_k(E *out, const E *a, const E *b, size_t n) {
  GRID_STRIDE(i, n) st(out, i, fb_swiglu_f(ld(a, i), ld(b, i)));
}
template <typename E>
__global__ void swiglu_bwd_k(E *da, E *db, const E *dout, const E *a, const E *b, size_t n) {
  GRID_STRIDE(i, n) {
    float ga, gb;
    fb_swiglu_grad_f(ld(a, i), ld(b, i), ld(dout, i), &ga, &gb);
    st(da, i, ga);
    st(db, i, gb);
  }
}
template <typename E>
__global__ void add_k(E *out, const E *a, const E *b, size_t n) {
  GRID_STRIDE(i, n) st(out, i, ld(a, i) + ld(b, i));
}

template <typename E>
static void gelu_fwd_launch(cudaStream_t s, void *out, const void *inp, size_t n) {
  gelu_fwd_k<E><<<grid_for((int64_t)n, 256), 256, 0, s>>>((E *)out, (const E *)inp, n);
}
template <typename E>
static void gelu_bwd_launch(cudaStream_t s, void *dinp, const void *inp, const void *dout,
                            size_t n) {
  gelu_bwd_k<E><<<grid_for((int64_t)n, 256), 256, 0, s>>>((E *)dinp, (const E *)inp,
                                                          (const E *)dout, n);
}
template <typename E>
static void swiglu_fwd_launch(cudaStream_t s, void *out, const void *a, const void *b,
                              size_t n) {
  swiglu_fwd_k<E><<<grid_for((int64_t)n, 256), 256, 0, s>>>((E *)out, (const E *)a,
                                                            (const E *)b, n);
}
template <typename E>
static void swiglu_bwd_launch(cudaStream_t s, void *da, void *db, const void *dout,
                              const void *a, const void *b, size_t n) {
  swiglu_bwd_k<E><<<grid_for((int64_t)n, 256), 256, 0, s>>>((E *)da, (E *)db, (const E *)dout,
                                                            (const E *)a, (const E *)b, n);
}
template <typename E>
static void add_launch(cudaStream_t s, void *out, const void *a, const void *b, size_t n) {
  add_k<E><<<grid_for((int64_t)n, 256), 256, 0, s>>>((E *)out, (const E *)a, (const E *)b, n);
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

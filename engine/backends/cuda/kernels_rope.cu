/* The cuda rotary embedding (Llama's rotate-half), forward and its inverse for the backward,
 * angles in double as on the cpu, each computed once for all heads. Helpers and conventions:
 * kernels.cuh. */
#include "kernels.cuh"

/* ==== rotary embedding: thread per (token, pair), looping over the heads ====================
 * The angle t * theta^(-2i/hd) is computed in double as on the cpu, once per (token, pair) and
 * applied to every head (the same cos and sin values each head used to recompute). A warp's
 * lanes take consecutive pairs, so each head's row segment is one coalesced access. */
template <typename E>
__global__ void rope_k(E *x, int64_t N, int T_, int nh, int hd, int ld_, double theta,
                       bool inverse) {
  const int half = hd / 2;
  GRID_STRIDE(idx, N * half) {
    const int i = (int)(idx % half);
    const int64_t n = idx / half;
    const int t = (int)(n % T_);
    const double a = (double)t * pow(theta, -2.0 * i / hd);
    const float cs = (float)cos(a), sn = inverse ? -(float)sin(a) : (float)sin(a);
    for (int h = 0; h < nh; h++) {
      const int64_t o = n * ld_ + (int64_t)h * hd;
      const float x1 = ld(x, o + i), x2 = ld(x, o + i + half);
      st(x, o + i, x1 * cs - x2 * sn);
      st(x, o + i + half, x1 * sn + x2 * cs);
    }
  }
}

template <typename E>
static void rope_launch(cudaStream_t s, void *x, int64_t N, int T, int nh, int hd, int ldx,
                        double theta, bool inverse) {
  rope_k<E><<<grid_for(N * (hd / 2), 256), 256, 0, s>>>((E *)x, N, T, nh, hd, ldx, theta,
                                                        inverse);
}
static fb_status rope_run(const fb_kctx *k, void *x, int B, int T, int nh, int hd, int ldx,
                          float theta, bool inverse, const char *op) {
  if (hd % 2 != 0)
    return FB_ERR(FB_EUNSUPPORTED, "rank %d: cuda %s: head dim %d must be even", k->dev->rank,
                  op, hd);
  int64_t N = (int64_t)B * T;
  if (N * nh * hd == 0) return FB_OK;
  DISPATCH(k, op, rope_launch, k->s->s, x, N, T, nh, hd, ldx, (double)theta, inverse);
}
fb_status fb_cuda_rope_fwd(const fb_kctx *k, void *x, int B, int T, int nh, int hd, int ldx,
                            float theta) {
  return rope_run(k, x, B, T, nh, hd, ldx, theta, false, "rope_fwd");
}
fb_status fb_cuda_rope_bwd(const fb_kctx *k, void *dx, int B, int T, int nh, int hd, int ldx,
                            float theta) {
  return rope_run(k, dx, B, T, nh, hd, ldx, theta, true, "rope_bwd");
}

/* The cuda softmax cross-entropy: logits become their gradient in place, one block per row,
 * row losses summed in row order (fp64). Helpers and conventions: kernels.cuh. */
#include "kernels.cuh"

/* ==== softmax cross-entropy: block per row; row losses summed in row order ================== */
#define XENT_THREADS 256
__device__ __forceinline__ float block_reduce(float x, bool is_max, float *sh) {
  int lane = threadIdx.x % 32, w = threadIdx.x / 32, nw = blockDim.x / 32;
  x = is_max ? warp_max(x) : warp_sum(x);
  __syncthreads();
  if (lane == 0) sh[w] = x;
  __syncthreads();
  float r = sh[0];
  for (int i = 1; i < nw; i++) r = is_max ? fmaxf(r, sh[i]) : r + sh[i];
  return r;
}

template <typename E>
__global__ void xent_rows_k(E *logits, double *row_loss, const int32_t *targets, int r0, int V,
                            float dscale) {
  __shared__ float sh[32];
  int r = r0 + blockIdx.x;
  E *x = logits + (int64_t)r * V;
  int tgt = targets[r];
  if (tgt < 0) {
    for (int j = threadIdx.x; j < V; j += blockDim.x) st(x, j, 0.0f);
    if (threadIdx.x == 0) row_loss[blockIdx.x] = 0.0;
    return;
  }
  float m = -INFINITY;
  for (int j = threadIdx.x; j < V; j += blockDim.x) m = fmaxf(m, ld(x, j));
  m = block_reduce(m, true, sh);
  float s = 0.0f;
  for (int j = threadIdx.x; j < V; j += blockDim.x) s += fb_exp_f(ld(x, j) - m);
  s = block_reduce(s, false, sh);
  float xt = ld(x, tgt);
  __syncthreads(); /* everyone read x[tgt] before it is overwritten */
  float f = dscale / s;
  for (int j = threadIdx.x; j < V; j += blockDim.x) {
    float gr = fb_exp_f(ld(x, j) - m) * f;
    if (j == tgt) gr -= dscale;
    st(x, j, gr);
  }
  if (threadIdx.x == 0) row_loss[blockIdx.x] = ((double)m + log((double)s)) - (double)xt;
}

fb_status fb_cuda_xent_fwd_bwd(const fb_kctx *k, void *logits, double *loss_sum,
                                const int32_t *targets, int N, int V, float dscale) {
  FB_TRY(prologue(k));
  if (k->act != FB_F32 && k->act != FB_BF16) return bad_dtype(k, "xent_fwd_bwd");
  double *rows = (double *)k->s->scratch;
  const int chunk = (int)(FB_CUDA_SCRATCH_BYTES / sizeof(double));
  for (int r0 = 0; r0 < N; r0 += chunk) {
    int nr = N - r0 < chunk ? N - r0 : chunk;
    if (k->act == FB_F32)
      xent_rows_k<float><<<nr, XENT_THREADS, 0, k->s->s>>>((float *)logits, rows, targets, r0,
                                                            V, dscale);
    else
      xent_rows_k<bf16><<<nr, XENT_THREADS, 0, k->s->s>>>((bf16 *)logits, rows, targets, r0, V,
                                                           dscale);
    fb_cuda_sum_rows_in_order(k->s->s, loss_sum, rows, nr);
    FB_TRY(launch_check(k, "xent_fwd_bwd"));
  }
  return FB_OK;
}

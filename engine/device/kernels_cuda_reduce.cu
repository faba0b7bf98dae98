/* The cuda reductions and casts: the deterministic fp64 sum (sum_f64), fp32 <-> bf16 casts,
 * and the in-order row sum the cross-entropy shares. The exact sum of squares is in
 * kernels_cuda_sumsq.cu. Helpers and conventions: kernels_cuda.cuh. */
#include "kernels_cuda.cuh"

__global__ void sum_rows_in_order_k(double *loss_sum, const double *row_loss, int n) {
  if (threadIdx.x != 0 || blockIdx.x != 0) return;
  double s = loss_sum[0];
  for (int i = 0; i < n; i++) s += row_loss[i];
  loss_sum[0] = s;
}
void fb_cuda_sum_rows_in_order(cudaStream_t s, double *loss_sum, const double *row_loss,
                               int n) {
  sum_rows_in_order_k<<<1, 32, 0, s>>>(loss_sum, row_loss, n);
}

/* fp64 sum: block b sums its fixed contiguous range with a fixed tree; then one thread adds
 * the block partials in order. The partition depends on n only: deterministic. */
#define SUM_THREADS 256
#define SUM_BLOCKS 1024
__global__ void sum_part_k(double *part, const float *x, size_t n, size_t per) {
  __shared__ double sh[SUM_THREADS];
  size_t i0 = (size_t)blockIdx.x * per, i1 = i0 + per < n ? i0 + per : n;
  double s = 0.0;
  for (size_t i = i0 + threadIdx.x; i < i1; i += blockDim.x) s += (double)x[i];
  sh[threadIdx.x] = s;
  __syncthreads();
  for (int w = SUM_THREADS / 2; w > 0; w >>= 1) {
    if ((int)threadIdx.x < w) sh[threadIdx.x] += sh[threadIdx.x + w];
    __syncthreads();
  }
  if (threadIdx.x == 0) part[blockIdx.x] = sh[0];
}
fb_status fb_cuda_sum_f64(const fb_kctx *k, double *out, const float *x, size_t n) {
  FB_TRY(prologue(k));
  if (n == 0) return FB_OK;
  size_t per = (n + SUM_BLOCKS - 1) / SUM_BLOCKS;
  unsigned nb = (unsigned)((n + per - 1) / per);
  double *part = (double *)k->s->scratch;
  sum_part_k<<<nb, SUM_THREADS, 0, k->s->s>>>(part, x, n, per);
  sum_rows_in_order_k<<<1, 32, 0, k->s->s>>>(out, part, (int)nb);
  return launch_check(k, "sum_f64");
}

/* ==== casts ================================================================================== */
__global__ void f32_to_bf16_k(bf16 *d, const float *s, size_t n) {
  GRID_STRIDE(i, n) d[i] = fb_f32_to_bf16(s[i]);
}
__global__ void bf16_to_f32_k(float *d, const bf16 *s, size_t n) {
  GRID_STRIDE(i, n) d[i] = fb_bf16_to_f32(s[i]);
}
fb_status fb_cuda_cast(const fb_kctx *k, void *dst, fb_dtype dt, const void *src, fb_dtype sty,
                        size_t n) {
  FB_TRY(prologue(k));
  if (n == 0) return FB_OK;
  if (dt == sty) return fb_cuda_device_ops.copy_d2d(k->dev, k->s, dst, src, n * fb_dtype_size(dt));
  unsigned g = grid_for((int64_t)n, 256);
  if (dt == FB_BF16 && sty == FB_F32)
    f32_to_bf16_k<<<g, 256, 0, k->s->s>>>((bf16 *)dst, (const float *)src, n);
  else if (dt == FB_F32 && sty == FB_BF16)
    bf16_to_f32_k<<<g, 256, 0, k->s->s>>>((float *)dst, (const bf16 *)src, n);
  else
    return FB_ERR(FB_EUNSUPPORTED, "rank %d: cuda cast %s -> %s is not supported (allowed: fp32 "
                  "<-> bf16)", k->dev->rank, fb_dtype_name(sty), fb_dtype_name(dt));
  return launch_check(k, "cast");
}

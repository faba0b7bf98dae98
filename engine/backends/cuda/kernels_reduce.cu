/* The cuda reductions and casts: the deterministic fp64 sum (sum_f64), fp32 <-> bf16 casts,
 * and the in-order row sum the cross-entropy shares. The exact sum of squares is in
 * kernels_sumsq.cu. Helpers and conventions: kernels.cuh. */
#include "kernels.cuh"

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

/* ==== casts: 8 elements a thread (16 bytes of bf16, 32 of fp32), scalar head and tail ======= */
__device__ __forceinline__ void ld8(const float *p, float (&x)[8]) {
  float a[4], b[4];
  ldv(p, a), ldv(p + 4, b);
#pragma unroll
  for (int j = 0; j < 4; j++) x[j] = a[j], x[4 + j] = b[j];
}
__device__ __forceinline__ void ld8(const bf16 *p, float (&x)[8]) { ldv(p, x); }
__device__ __forceinline__ void st8(float *p, const float (&x)[8]) {
  const float a[4] = {x[0], x[1], x[2], x[3]}, b[4] = {x[4], x[5], x[6], x[7]};
  stv(p, a), stv(p + 4, b);
}
__device__ __forceinline__ void st8(bf16 *p, const float (&x)[8]) { stv(p, x); }

template <typename D, typename S>
__global__ void cast_k(D *d, const S *s, size_t n, vsplit sp) {
  GRID_STRIDE(i, sp.nv) {
    const size_t o = sp.head + (size_t)i * 8;
    float x[8];
    ld8(s + o, x);
    st8(d + o, x);
  }
  GRID_STRIDE(t, sp.scalars(n)) {
    const int64_t i = (int64_t)sp.vs_index((size_t)t);
    st(d, i, ld(s, i));
  }
}
template <typename D, typename S>
static void cast_launch(cudaStream_t st, void *dst, const void *src, size_t n) {
  const void *ptrs[2] = {dst, src};
  const size_t esz[2] = {sizeof(D), sizeof(S)};
  const vsplit sp = vsplit_of(ptrs, esz, 2, n, 8);
  const size_t units = sp.nv > sp.scalars(n) ? sp.nv : sp.scalars(n);
  cast_k<D, S><<<grid_for((int64_t)units, 256), 256, 0, st>>>((D *)dst, (const S *)src, n, sp);
}
fb_status fb_cuda_cast(const fb_kctx *k, void *dst, fb_dtype dt, const void *src, fb_dtype sty,
                        size_t n) {
  FB_TRY(prologue(k));
  if (n == 0) return FB_OK;
  if (dt == sty) return fb_cuda_device_ops.copy_d2d(k->dev, k->s, dst, src, n * fb_dtype_size(dt));
  if (dt == FB_BF16 && sty == FB_F32)
    cast_launch<bf16, float>(k->s->s, dst, src, n);
  else if (dt == FB_F32 && sty == FB_BF16)
    cast_launch<float, bf16>(k->s->s, dst, src, n);
  else
    return FB_ERR(FB_EUNSUPPORTED, "rank %d: cuda cast %s -> %s is not supported (allowed: fp32 "
                  "<-> bf16)", k->dev->rank, fb_dtype_name(sty), fb_dtype_name(dt));
  return launch_check(k, "cast");
}

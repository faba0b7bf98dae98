/* The cuda kernels of layernorm and rmsnorm, forward and backward: one warp per row for the
 * activations, deterministic column partials for the weight and bias gradients. Helpers and
 * conventions: kernels.cuh. */
#include "kernels.cuh"
#include "norm_bwd.cuh"

/* ==== layernorm / rmsnorm: one warp per row ================================================== */
template <typename E>
__global__ void layernorm_fwd_k(E *out, float *mean, float *rstd, const E *inp, const E *w,
                                const E *b, int N, int C, float eps) {
  int row = blockIdx.x * (blockDim.x / 32) + threadIdx.x / 32, lane = threadIdx.x % 32;
  if (row >= N) return;
  const int64_t o = (int64_t)row * C;
  float s = 0.0f;
  for (int c = lane; c < C; c += 32) s += ld(inp, o + c);
  float m = warp_sum(s) / (float)C;
  float v = 0.0f;
  for (int c = lane; c < C; c += 32) {
    float d = ld(inp, o + c) - m;
    v += d * d;
  }
  float r = 1.0f / sqrtf(warp_sum(v) / (float)C + eps);
  for (int c = lane; c < C; c += 32) {
    float y = (ld(inp, o + c) - m) * r * ld(w, c);
    if (b) y += ld(b, c);
    st(out, o + c, y);
  }
  if (lane == 0) {
    mean[row] = m;
    rstd[row] = r;
  }
}

template <typename E>
__global__ void layernorm_bwd_dx_k(E *dinp, const E *dout, const E *inp, const E *w,
                                   const float *mean, const float *rstd, int N, int C) {
  int row = blockIdx.x * (blockDim.x / 32) + threadIdx.x / 32, lane = threadIdx.x % 32;
  if (row >= N) return;
  const int64_t o = (int64_t)row * C;
  float m = mean[row], r = rstd[row];
  float sd = 0.0f, sdn = 0.0f;
  for (int c = lane; c < C; c += 32) {
    float dn = ld(dout, o + c) * ld(w, c);
    float nrm = (ld(inp, o + c) - m) * r;
    sd += dn;
    sdn += dn * nrm;
  }
  float md = warp_sum(sd) / (float)C, mdn = warp_sum(sdn) / (float)C;
  for (int c = lane; c < C; c += 32) {
    float dn = ld(dout, o + c) * ld(w, c);
    float nrm = (ld(inp, o + c) - m) * r;
    st(dinp, o + c, ld(dinp, o + c) + r * (dn - md - nrm * mdn));
  }
}

/* Column partials of a normalisation's weight gradients: pw += dout * norm, pb += dout. */
template <typename E, bool RMS>
__global__ void norm_bwd_dw_part_k(float *part, const E *dout, const E *inp, const float *mean,
                                   const float *rstd, int N, int C, int R, bool want_b) {
  int c = blockIdx.x * blockDim.x + threadIdx.x, r = blockIdx.y;
  if (c >= C) return;
  int64_t rows = (N + R - 1) / R, r0 = r * rows, r1 = r0 + rows < N ? r0 + rows : N;
  float sw = 0.0f, sb = 0.0f;
  for (int64_t n = r0; n < r1; n++) {
    float d = ld(dout, n * C + c);
    float x = ld(inp, n * C + c);
    float nrm = RMS ? x * rstd[n] : (x - mean[n]) * rstd[n];
    sw += d * nrm;
    sb += d;
  }
  part[(int64_t)r * C + c] = sw;
  if (want_b) part[(int64_t)(R + r) * C + c] = sb;
}

template <typename E>
__global__ void rmsnorm_fwd_k(E *out, float *rstd, const E *inp, const E *w, int N, int C,
                              float eps) {
  int row = blockIdx.x * (blockDim.x / 32) + threadIdx.x / 32, lane = threadIdx.x % 32;
  if (row >= N) return;
  const int64_t o = (int64_t)row * C;
  float s = 0.0f;
  for (int c = lane; c < C; c += 32) {
    float x = ld(inp, o + c);
    s += x * x;
  }
  float r = 1.0f / sqrtf(warp_sum(s) / (float)C + eps);
  for (int c = lane; c < C; c += 32) st(out, o + c, ld(inp, o + c) * r * ld(w, c));
  if (lane == 0) rstd[row] = r;
}

template <typename E>
__global__ void rmsnorm_bwd_dx_k(E *dinp, const E *dout, const E *inp, const E *w,
                                 const float *rstd, int N, int C) {
  int row = blockIdx.x * (blockDim.x / 32) + threadIdx.x / 32, lane = threadIdx.x % 32;
  if (row >= N) return;
  const int64_t o = (int64_t)row * C;
  float r = rstd[row];
  float s = 0.0f;
  for (int c = lane; c < C; c += 32) s += ld(dout, o + c) * ld(w, c) * (ld(inp, o + c) * r);
  float mdn = warp_sum(s) / (float)C;
  for (int c = lane; c < C; c += 32) {
    float dn = ld(dout, o + c) * ld(w, c);
    float nrm = ld(inp, o + c) * r;
    st(dinp, o + c, ld(dinp, o + c) + r * (dn - nrm * mdn));
  }
}

#define ROWS_PER_BLOCK 8 /* warps per block in the row kernels */
static inline unsigned row_grid(int N) { return (unsigned)((N + ROWS_PER_BLOCK - 1) / ROWS_PER_BLOCK); }

template <typename E>
static void layernorm_fwd_launch(cudaStream_t s, void *out, float *mean, float *rstd,
                                 const void *inp, const void *w, const void *b, int N, int C,
                                 float eps) {
  layernorm_fwd_k<E><<<row_grid(N), 32 * ROWS_PER_BLOCK, 0, s>>>(
      (E *)out, mean, rstd, (const E *)inp, (const E *)w, (const E *)b, N, C, eps);
}
template <typename E>
static void rmsnorm_fwd_launch(cudaStream_t s, void *out, float *rstd, const void *inp,
                               const void *w, int N, int C, float eps) {
  rmsnorm_fwd_k<E><<<row_grid(N), 32 * ROWS_PER_BLOCK, 0, s>>>((E *)out, rstd, (const E *)inp,
                                                               (const E *)w, N, C, eps);
}

fb_status fb_cuda_layernorm_fwd(const fb_kctx *k, void *out, float *mean, float *rstd,
                                 const void *inp, const void *w, const void *b, int N, int C,
                                 float eps) {
  if (N == 0) return FB_OK;
  DISPATCH(k, "layernorm_fwd", layernorm_fwd_launch, k->s->s, out, mean, rstd, inp, w, b, N, C,
           eps);
}

/* Row partitions of the one-pass kernel: as many as the scratch holds partials for (nvec
 * vectors of C), at most NB_MAX_PARTS and N. */
#define NB_MAX_PARTS 512
static int rows_chunks(int N, int C, int nvec) {
  int64_t r = (int64_t)(FB_CUDA_SCRATCH_BYTES / sizeof(float) / ((size_t)C * (size_t)nvec));
  if (r > NB_MAX_PARTS) r = NB_MAX_PARTS;
  if (r > N) r = N;
  return (int)(r < 1 ? 1 : r);
}

/* The one-pass kernel when rows are whole aligned vectors, at most NB_THREADS of them; false
 * (nothing launched) otherwise. */
template <typename E, bool RMS>
static bool norm_bwd_1p(const fb_kctx *k, void *dinp, void *dw, void *db, const void *dout,
                        const void *inp, const void *w, const float *mean, const float *rstd,
                        int N, int C) {
  constexpr int K = VEC(E);
  const int nq = C / K;
  if (C % K || nq > NB_THREADS(RMS) || !aligned16(dinp) || !aligned16(dout) || !aligned16(inp) ||
      !aligned16(w) || (!RMS) != (db != NULL))
    return false;
  const int threads = (nq + 31) / 32 * 32, R = rows_chunks(N, C, RMS ? 1 : 2);
  float *part = (float *)k->s->scratch;
  cudaStream_t s = k->s->s;
  norm_bwd_1p_k<E, RMS><<<(unsigned)R, (unsigned)threads, 0, s>>>(
      (E *)dinp, part, (const E *)dout, (const E *)inp, (const E *)w, mean, rstd, N, C, R);
  const unsigned gc = (unsigned)((C + 31) / 32);
  colsum_tree_k<E><<<gc, 1024, 0, s>>>((E *)dw, part, R, C);
  if (db) colsum_tree_k<E><<<gc, 1024, 0, s>>>((E *)db, part + (int64_t)R * C, R, C);
  return true;
}

template <typename E, bool RMS>
static void norm_bwd_launch(const fb_kctx *k, void *dinp, void *dw, void *db, const void *dout,
                            const void *inp, const void *w, const float *mean,
                            const float *rstd, int N, int C) {
  if (norm_bwd_1p<E, RMS>(k, dinp, dw, db, dout, inp, w, mean, rstd, N, C)) return;
  cudaStream_t s = k->s->s; /* two passes: dinp by rows, then the weight gradients by columns */
  unsigned g = (unsigned)((N + ROWS_PER_BLOCK - 1) / ROWS_PER_BLOCK);
  if (RMS)
    rmsnorm_bwd_dx_k<E><<<g, 32 * ROWS_PER_BLOCK, 0, s>>>((E *)dinp, (const E *)dout,
                                                          (const E *)inp, (const E *)w, rstd, N,
                                                          C);
  else
    layernorm_bwd_dx_k<E><<<g, 32 * ROWS_PER_BLOCK, 0, s>>>(
        (E *)dinp, (const E *)dout, (const E *)inp, (const E *)w, mean, rstd, N, C);
  float *part = (float *)k->s->scratch;
  int nvec = db ? 2 : 1;
  int R = col_chunks(N, C, nvec, FB_CUDA_SCRATCH_BYTES / sizeof(float));
  dim3 gp((unsigned)((C + 127) / 128), (unsigned)R);
  norm_bwd_dw_part_k<E, RMS><<<gp, 128, 0, s>>>(part, (const E *)dout, (const E *)inp, mean,
                                                 rstd, N, C, R, db != NULL);
  unsigned gc = (unsigned)((C + 255) / 256);
  colsum_finalize<E><<<gc, 256, 0, s>>>((E *)dw, part, R, C);
  if (db) colsum_finalize<E><<<gc, 256, 0, s>>>((E *)db, part + (int64_t)R * C, R, C);
}

static fb_status norm_scratch_check(const fb_kctx *k, const char *op, int C) {
  if ((size_t)C * 2 > FB_CUDA_SCRATCH_BYTES / sizeof(float))
    return FB_ERR(FB_EUNSUPPORTED, "rank %d: cuda %s: C = %d exceeds the kernel scratch",
                  k->dev->rank, op, C);
  return FB_OK;
}

/* The two template arguments of norm_bwd_launch, one name per variant for DISPATCH. */
template <typename E>
static void layernorm_bwd_launch(const fb_kctx *k, void *dinp, void *dw, void *db,
                                 const void *dout, const void *inp, const void *w,
                                 const float *mean, const float *rstd, int N, int C) {
  norm_bwd_launch<E, false>(k, dinp, dw, db, dout, inp, w, mean, rstd, N, C);
}
template <typename E>
static void rmsnorm_bwd_launch(const fb_kctx *k, void *dinp, void *dw, const void *dout,
                               const void *inp, const void *w, const float *rstd, int N, int C) {
  norm_bwd_launch<E, true>(k, dinp, dw, NULL, dout, inp, w, NULL, rstd, N, C);
}

fb_status fb_cuda_layernorm_bwd(const fb_kctx *k, void *dinp, void *dw, void *db,
                                 const void *dout, const void *inp, const void *w,
                                 const float *mean, const float *rstd, int N, int C) {
  if (N == 0) return FB_OK;
  FB_TRY(norm_scratch_check(k, "layernorm_bwd", C));
  DISPATCH(k, "layernorm_bwd", layernorm_bwd_launch, k, dinp, dw, db, dout, inp, w, mean, rstd,
           N, C);
}

fb_status fb_cuda_rmsnorm_fwd(const fb_kctx *k, void *out, float *rstd, const void *inp,
                               const void *w, int N, int C, float eps) {
  if (N == 0) return FB_OK;
  DISPATCH(k, "rmsnorm_fwd", rmsnorm_fwd_launch, k->s->s, out, rstd, inp, w, N, C, eps);
}

fb_status fb_cuda_rmsnorm_bwd(const fb_kctx *k, void *dinp, void *dw, const void *dout,
                               const void *inp, const void *w, const float *rstd, int N, int C) {
  if (N == 0) return FB_OK;
  FB_TRY(norm_scratch_check(k, "rmsnorm_bwd", C));
  DISPATCH(k, "rmsnorm_bwd", rmsnorm_bwd_launch, k, dinp, dw, dout, inp, w, rstd, N, C);
}

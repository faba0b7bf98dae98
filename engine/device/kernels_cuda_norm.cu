/* The cuda kernels of layernorm and rmsnorm, forward and backward: one warp per row for the
 * activations, deterministic column partials for the weight and bias gradients. Helpers and
 * conventions: kernels_cuda.cuh. */
#include "kernels_cuda.cuh"

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

/* ==== one-pass backward ========================================================================
 * Block r owns rows [r0, r1) of a fixed partition into R (rows_chunks: a function of N, C and
 * the scratch size only, so the same on every GPU) and walks them in order. Thread q owns the
 * 16-byte vector of columns [q K, q K + K) for the whole block (so a row has at most
 * NB_THREADS vectors: rmsnorm bf16 C <= 8192, fp32 C <= 4096; layernorm half that). It loads
 * its w once; reads its part of a row's dout, inp and dinp once, keeping dout and inp raw in
 * registers across the row's reduction; and keeps its columns' weight (and bias) gradient
 * partials in registers, summed in row order. A row's two sums (sum dn, sum dn * nrm) are a
 * block reduction in a fixed order (warp shuffles, then the warps in order), double-buffered
 * by row parity so one barrier a row suffices. The partials land in the stream's scratch,
 * part[r][c], and colsum_tree_k adds them in a fixed tree: deterministic for any launch. Same
 * formulas as the two-pass kernels above (which serve rows that are not whole aligned
 * vectors). */
#define NB_MAX_THREADS 1024
/* layernorm keeps a bias partial too: at most 512 threads, so 128 registers (no spills) */
#define NB_THREADS(RMS) ((RMS) ? NB_MAX_THREADS : NB_MAX_THREADS / 2)
template <typename E, bool RMS>
__global__ void __launch_bounds__(NB_THREADS(RMS))
norm_bwd_1p_k(E *dinp, float *part, const E *dout, const E *inp, const E *w, const float *mean,
              const float *rstd, int N, int C, int R) {
  constexpr int K = VEC(E);
  __shared__ float red[2][2][NB_MAX_THREADS / 32]; /* [row parity][sum][warp] */
  const int q = threadIdx.x, lane = q & 31, warp = q >> 5, nw = (blockDim.x + 31) >> 5;
  const bool mine = q < C / K;
  const int64_t rows = (N + R - 1) / R, r0 = (int64_t)blockIdx.x * rows;
  const int64_t r1 = r0 + rows < N ? r0 + rows : N;
  float wv[K], aw[K], ab[K];
#pragma unroll
  for (int e = 0; e < K; e++) wv[e] = aw[e] = ab[e] = 0.0f;
  if (mine) ldv(w + (int64_t)q * K, wv);
  for (int64_t n = r0; n < r1; n++) {
    const int64_t o = n * C + (int64_t)q * K;
    const float rs = rstd[n], mu = RMS ? 0.0f : mean[n];
    typename vraw<E>::t draw = {}, xraw = {}; /* kept raw across the barrier */
    float d[K], x[K], s1 = 0.0f, s2 = 0.0f;
    if (mine) {
      draw = ldraw(dout + o), xraw = ldraw(inp + o);
      unpack(draw, d), unpack(xraw, x);
#pragma unroll
      for (int e = 0; e < K; e++) {
        const float dn = d[e] * wv[e], nrm = RMS ? x[e] * rs : (x[e] - mu) * rs;
        s1 += dn;
        s2 += dn * nrm;
      }
    }
    s1 = warp_sum(s1), s2 = warp_sum(s2);
    const int par = (int)(n & 1);
    if (lane == 0) red[par][0][warp] = s1, red[par][1][warp] = s2;
    __syncthreads();
    s1 = s2 = 0.0f;
    for (int i = 0; i < nw; i++) s1 += red[par][0][i], s2 += red[par][1][i];
    if (!mine) continue;
    const float md = s1 / (float)C, mdn = s2 / (float)C;
    float di[K];
    ldv(dinp + o, di);
    unpack(draw, d), unpack(xraw, x);
#pragma unroll
    for (int e = 0; e < K; e++) {
      const float dn = d[e] * wv[e], nrm = RMS ? x[e] * rs : (x[e] - mu) * rs;
      di[e] += RMS ? rs * (dn - nrm * mdn) : rs * (dn - md - nrm * mdn);
      aw[e] += d[e] * nrm;
      if (!RMS) ab[e] += d[e];
    }
    stv(dinp + o, di);
  }
  if (!mine) return;
#pragma unroll
  for (int e = 0; e < K; e++) {
    part[(int64_t)blockIdx.x * C + (int64_t)q * K + e] = aw[e];
    if (!RMS) part[(int64_t)(R + blockIdx.x) * C + (int64_t)q * K + e] = ab[e];
  }
}

/* dst[c] += the sum of part[0..R)[c], in a fixed tree: warp w of 32 adds its contiguous share
 * of the R partials in order (lanes are 32 adjacent columns), then lane c of warp 0 adds the 32
 * warp sums in warp order. The tree depends on R only. */
template <typename E>
__global__ void __launch_bounds__(1024) colsum_tree_k(E *dst, const float *part, int R, int C) {
  __shared__ float sh[32][33];
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5, c = blockIdx.x * 32 + lane;
  const int per = (R + 31) / 32, ra = warp * per, rb = ra + per < R ? ra + per : R;
  float s = 0.0f;
  if (c < C)
    for (int r = ra; r < rb; r++) s += part[(int64_t)r * C + c];
  sh[warp][lane] = s;
  __syncthreads();
  if (warp || c >= C) return;
  float t = 0.0f;
  for (int w = 0; w < 32; w++) t += sh[w][lane];
  st(dst, c, ld(dst, c) + t);
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

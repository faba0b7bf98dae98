/* The one-pass backward of layernorm and rmsnorm (kernels_norm.cu launches it) and the
 * fixed-tree column sum of its partials; device helpers from kernels_dev.cuh, so the CPU
 * emulator runs this very source (tests/test_norm_bwd_emu.cc).
 *
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
 * formulas as the two-pass kernels of kernels_norm.cu (which serve rows that are not whole
 * aligned vectors). */
#ifndef FB_NORM_BWD_CUH
#define FB_NORM_BWD_CUH
#include "kernels_dev.cuh"

#define NB_MAX_THREADS 1024
/* layernorm keeps a bias partial too: at most 512 threads, so 128 registers (no spills) */
#define NB_THREADS(RMS) ((RMS) ? NB_MAX_THREADS : NB_MAX_THREADS / 2)
template <typename E, bool RMS>
__global__ void __launch_bounds__(NB_THREADS(RMS))
norm_bwd_1p_k(E *dinp, float *part, const E *dout, const E *inp, const E *w, const float *mean,
              const float *rstd, int N, int C, int R) {
  constexpr int K = VEC(E);
  FB_SHARED float red[2][2][NB_MAX_THREADS / 32]; /* [row parity][sum][warp] */
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
  FB_SHARED float sh[32][33];
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

#endif

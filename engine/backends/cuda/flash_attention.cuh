/* FlashAttention-2-style causal grouped-query attention on tensor cores (bf16 in, fp32
 * accumulation), with kernels.h's conventions: q [B,T,H,hd] rows of stride ldq, k and v
 * [B,T,KVH,hd] rows of stride ldkv, out [B,T,H*hd] dense, lse [B,H,T] (natural log of each
 * query's sum of exp(scaled score)), dq/dk/dv overwritten in q/k/v's layouts.
 *
 *  - Forward: a block of WARPS warps owns BR = 16 * WARPS query rows of one (batch, head), a
 *    warp 16 of them; key/value tiles of BC = 64 rows stream through shared memory (cp.async,
 *    two stages: tile j+1 loads while tile j computes). S = Q K^T and O += P V are m16n8k16
 *    products; the online softmax runs in the log2 domain on the S accumulators, which are
 *    also P's A fragments (no trip through shared memory).
 *  - Backward, split so that nothing is summed by atomics (every output element is written
 *    by one thread after a fixed-order loop: the same bits for any grid and any run):
 *    dQ kernel: a block of query rows; D_i = dO_i . O_i (kept in Dbuf for the next kernel);
 *    per key tile S, P = exp2(S - lse2), dP = dO V^T, dS = P (dP - D), dQ += dS K.
 *    dKV kernel: a block of key rows of one KV head; over the heads of its group in order,
 *    then the query tiles from the diagonal down: S^T = K Q^T, dP^T = V dO^T, dV += P^T dO,
 *    dK += dS^T Q.
 *  - Causal tiles above the diagonal are not visited; only tiles that cross the diagonal or
 *    the sequence end are masked. Rows/keys at or past T load as zeros (cp.async zero fill).
 *  - HD (64 or 128) is the padded head dim: any hd <= HD runs, columns past hd are zeros in
 *    shared memory. 16-byte loads when hd, the strides and the pointers allow (`vec`), else
 *    element loads.
 * The host emulator (tests/cuda_emu) compiles this same file for the CPU. What it does not
 * do: fp32 attention (kernels_attention.cu's scalar kernels), head dims above 128, dropout,
 * non-causal masks. */
#ifndef FB_FLASH_ATTENTION_CUH
#define FB_FLASH_ATTENTION_CUH
#include <math.h>
#include <stdint.h>

#include "warp_mma.cuh"

namespace fa {

constexpr int BC = 64;                     /* keys per tile (forward, dQ) */
constexpr float LOG2E = 1.4426950408889634f;
constexpr float LN2 = 0.6931471805599453f;

struct args {
  const uint16_t *q, *k, *v, *out, *dout;  /* bf16 storage */
  uint16_t *o, *dq, *dk, *dv;              /* outputs (o: forward's out) */
  float *lse;                              /* forward writes, backward reads */
  float *Dbuf;                             /* [nb, H, T]: dO . O of batches b0 .. b0+nb */
  int B, T, H, KVH, hd, ldq, ldkv;
  int b0;                                  /* first batch of this launch (backward chunks) */
  float scale2;                            /* log2(e) / sqrt(hd) */
  float scale;                             /* 1 / sqrt(hd) */
  bool vec;                                /* 16-byte aligned rows: cp.async path */
};

/* Launch geometry, shared by the launchers and the emulator test. */
template <int HD>
struct shape {
  static constexpr int S = HD + 8;         /* smem row stride (bf16): +16 B breaks conflicts */
  static constexpr int KS = HD / 16;       /* k16 steps over the head dim */
  static constexpr int DT = HD / 8;        /* n8 tiles over the head dim */
  static constexpr int BQ = HD <= 64 ? 64 : 32; /* query tile of the dKV kernel */
};
template <int HD, int WARPS>
__host__ __device__ constexpr int fwd_smem_bytes() {
  return (16 * WARPS + 4 * BC) * shape<HD>::S * 2;
}
template <int HD, int WARPS>
__host__ __device__ constexpr int dq_smem_bytes() {
  return (2 * 16 * WARPS + 4 * BC) * shape<HD>::S * 2;
}
template <int HD, int WARPS>
__host__ __device__ constexpr int dkv_smem_bytes() {
  return (2 * 16 * WARPS + 4 * shape<HD>::BQ) * shape<HD>::S * 2 + 4 * shape<HD>::BQ * 4;
}
__host__ __device__ inline int tiles(int T, int rows) { return (T + rows - 1) / rows; }

/* Whether every row of every operand starts 16-byte aligned (the cp.async path). */
__host__ __device__ inline bool can_vec(const args &a) {
  const void *p[] = {a.q, a.k, a.v, a.out, a.dout, a.o, a.dq, a.dk, a.dv};
  for (const void *x : p)
    if ((uintptr_t)x % 16) return false;
  return a.hd % 8 == 0 && a.ldq % 8 == 0 && a.ldkv % 8 == 0;
}

/* Rows [r0, r0 + ROWS) of one head (g points at row 0, column 0; row stride ld) into shared
 * memory (stride S); rows at or past T and columns at or past hd are zeros. The vector path
 * issues cp.async copies (the caller commits and waits); the element path stores at once. */
template <int HD, int ROWS, int NT>
__device__ __forceinline__ void load_rows(uint16_t *s, const uint16_t *g, int64_t ld, int r0,
                                          int T, int hd, bool vec) {
  constexpr int S = shape<HD>::S, CH = HD / 8;
  for (int c = threadIdx.x; c < ROWS * CH; c += NT) {
    const int r = c / CH, col = (c % CH) * 8, row = r0 + r;
    uint16_t *dst = s + r * S + col;
    if (vec) {
      const bool ok = row < T && col < hd;
      cp_async16(dst, ok ? g + (int64_t)row * ld + col : g, ok);
    } else {
      for (int e = 0; e < 8; e++)
        dst[e] = row < T && col + e < hd ? g[(int64_t)row * ld + col + e] : (uint16_t)0;
    }
  }
}

/* Per-row values v[r0 .. r0+n) (rows at or past T: 0) into shared memory, times mul. */
template <int NT>
__device__ __forceinline__ void load_vals(float *s, const float *v, int r0, int n, int T,
                                          float mul) {
  for (int i = threadIdx.x; i < n; i += NT) s[i] = r0 + i < T ? v[r0 + i] * mul : 0.0f;
}

/* A fragments of the 16 x 16 block at (row0, k0) of a row-major smem tile (stride S). */
template <int S>
__device__ __forceinline__ void frag_a(uint32_t (&a)[4], const uint16_t *t, int row0, int k0) {
  const int lane = threadIdx.x % 32, m = lane >> 3;
  ldsm_x4(a, t + (row0 + (m & 1) * 8 + (lane & 7)) * S + k0 + (m >> 1) * 8);
}
/* B fragments of two n8 tiles (n0, n0+8) x k16 (k0) where the smem tile holds B^T row-major
 * (rows = n, columns = k: K for Q K^T): b[0], b[1] for n0; b[2], b[3] for n0 + 8. */
template <int S>
__device__ __forceinline__ void frag_bt(uint32_t (&b)[4], const uint16_t *t, int n0, int k0) {
  const int lane = threadIdx.x % 32, m = lane >> 3;
  ldsm_x4(b, t + (n0 + (m >> 1) * 8 + (lane & 7)) * S + k0 + (m & 1) * 8);
}
/* B fragments of two n8 tiles (n0, n0+8) x k16 (k0) where the smem tile holds B row-major
 * (rows = k, columns = n: V for P V): transposed on load. */
template <int S>
__device__ __forceinline__ void frag_b(uint32_t (&b)[4], const uint16_t *t, int k0, int n0) {
  const int lane = threadIdx.x % 32, m = lane >> 3;
  ldsm_x4_t(b, t + (k0 + (m & 1) * 8 + (lane & 7)) * S + n0 + (m >> 1) * 8);
}

/* acc[n] += A(16 x 16*KSTEPS, from `at` rows row0..) * B^T-tile(`bt`, NT8 n8 tiles from n0). */
template <int S, int KSTEPS, int NT8>
__device__ __forceinline__ void mma_abt(float (&acc)[NT8][4], const uint16_t *at, int row0,
                                        const uint16_t *bt, int n0) {
#pragma unroll
  for (int kk = 0; kk < KSTEPS; kk++) {
    uint32_t a[4];
    frag_a<S>(a, at, row0, kk * 16);
#pragma unroll
    for (int np = 0; np < NT8 / 2; np++) {
      uint32_t b[4];
      frag_bt<S>(b, bt, n0 + np * 16, kk * 16);
      mma_bf16_16816(acc[2 * np], a, b[0], b[1]);
      mma_bf16_16816(acc[2 * np + 1], a, b[2], b[3]);
    }
  }
}

/* acc[d] += P(16 x 16*KSTEPS, accumulator layout, rounded to bf16) * B-tile (`bt` rows k0..,
 * DT n8 tiles over the head dim). */
template <int S, int KSTEPS, int DT>
__device__ __forceinline__ void mma_pb(float (&acc)[DT][4], const float (&p)[2 * KSTEPS][4],
                                       const uint16_t *bt, int k0) {
#pragma unroll
  for (int kk = 0; kk < KSTEPS; kk++) {
    uint32_t a[4] = {pack_bf16x2(p[2 * kk][0], p[2 * kk][1]),
                     pack_bf16x2(p[2 * kk][2], p[2 * kk][3]),
                     pack_bf16x2(p[2 * kk + 1][0], p[2 * kk + 1][1]),
                     pack_bf16x2(p[2 * kk + 1][2], p[2 * kk + 1][3])};
#pragma unroll
    for (int dp = 0; dp < DT / 2; dp++) {
      uint32_t b[4];
      frag_b<S>(b, bt, k0 + kk * 16, dp * 16);
      mma_bf16_16816(acc[2 * dp], a, b[0], b[1]);
      mma_bf16_16816(acc[2 * dp + 1], a, b[2], b[3]);
    }
  }
}

__device__ __forceinline__ float quad_max(float x) {
  x = fmaxf(x, __shfl_xor_sync(0xffffffffu, x, 1));
  return fmaxf(x, __shfl_xor_sync(0xffffffffu, x, 2));
}
__device__ __forceinline__ float quad_sum(float x) {
  x += __shfl_xor_sync(0xffffffffu, x, 1);
  return x + __shfl_xor_sync(0xffffffffu, x, 2);
}

__device__ __forceinline__ float bf16_to_f32(uint16_t h) {
  union { uint32_t u; float f; } c;
  c.u = (uint32_t)h << 16;
  return c.f;
}

/* Rows row, row+8 (accumulator layout: this lane's columns 2t, 2t+1 of each n8 tile) of a
 * 16 x (8*DT) fp32 tile, times mul, to bf16 at dst (row stride ld), rows < T, columns < hd. */
template <int DT>
__device__ __forceinline__ void store_rows(uint16_t *dst, int64_t ld, const float (&acc)[DT][4],
                                           int row, int T, int hd, float mul0, float mul1,
                                           bool vec) {
  const int t = threadIdx.x % 4;
#pragma unroll
  for (int h2 = 0; h2 < 2; h2++) {
    const int r = row + 8 * h2;
    if (r >= T) continue;
    const float mul = h2 ? mul1 : mul0;
    uint16_t *d = dst + (int64_t)r * ld;
#pragma unroll
    for (int n = 0; n < DT; n++) {
      const int c = n * 8 + 2 * t;
      const uint32_t pk = pack_bf16x2(acc[n][2 * h2] * mul, acc[n][2 * h2 + 1] * mul);
      if (vec && c + 1 < hd) {
        *(uint32_t *)(d + c) = pk;
      } else {
        if (c < hd) d[c] = (uint16_t)(pk & 0xffffu);
        if (c + 1 < hd) d[c + 1] = (uint16_t)(pk >> 16);
      }
    }
  }
}

template <int N>
__device__ __forceinline__ void zero_acc(float (&acc)[N][4]) {
#pragma unroll
  for (int n = 0; n < N; n++) acc[n][0] = acc[n][1] = acc[n][2] = acc[n][3] = 0.0f;
}

/* The two-stage K/V pipeline of the forward and dQ kernels: issues key tile jt+1 into the
 * other buffer (when there is one), waits for tile jt (and what was committed with it) and
 * makes it visible to the block. The caller ends the iteration with a barrier before the
 * buffer it read is refilled. */
template <int HD, int NT>
__device__ __forceinline__ void kv_stage(uint16_t *Ks, uint16_t *Vs, const uint16_t *kg,
                                         const uint16_t *vg, const args &a, int jt, int nkt) {
  constexpr int S = shape<HD>::S;
  if (jt + 1 < nkt) {
    const int nb = (jt & 1) ^ 1, j1 = (jt + 1) * BC;
    load_rows<HD, BC, NT>(Ks + nb * BC * S, kg, a.ldkv, j1, a.T, a.hd, a.vec);
    load_rows<HD, BC, NT>(Vs + nb * BC * S, vg, a.ldkv, j1, a.T, a.hd, a.vec);
  }
  cp_async_commit();
  cp_async_wait<1>();
  __syncthreads();
}

/* ---- forward -------------------------------------------------------------------------------
 * grid (B*H, tiles(T, BR)); blockIdx.y = 0 is the last query tile (the longest rows first). */
template <int HD, int WARPS>
__global__ void __launch_bounds__(WARPS * 32) flash_attn_fwd_k(args a) {
  constexpr int BR = 16 * WARPS, NT = WARPS * 32, S = shape<HD>::S, KS = shape<HD>::KS,
                DT = shape<HD>::DT;
  FB_DECLARE_SMEM(smem);
  uint16_t *Qs = (uint16_t *)smem;  /* [BR][S] */
  uint16_t *Ks = Qs + BR * S;       /* [2][BC][S] */
  uint16_t *Vs = Ks + 2 * BC * S;   /* [2][BC][S] */
  const int T = a.T, H = a.H, hd = a.hd;
  const int tile = (int)gridDim.y - 1 - (int)blockIdx.y, i0 = tile * BR;
  const int b = (int)blockIdx.x / H, h = (int)blockIdx.x % H, g = h / (H / a.KVH);
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32, wr0 = i0 + warp * 16;
  const int row = wr0 + lane / 4, c2 = 2 * (lane % 4);
  const uint16_t *qg = a.q + (int64_t)b * T * a.ldq + (int64_t)h * hd;
  const uint16_t *kg = a.k + (int64_t)b * T * a.ldkv + (int64_t)g * hd;
  const uint16_t *vg = a.v + (int64_t)b * T * a.ldkv + (int64_t)g * hd;
  const int nkt = (min(T, i0 + BR) - 1) / BC + 1; /* key tiles up to the block's last row */

  load_rows<HD, BR, NT>(Qs, qg, a.ldq, i0, T, hd, a.vec);
  load_rows<HD, BC, NT>(Ks, kg, a.ldkv, 0, T, hd, a.vec);
  load_rows<HD, BC, NT>(Vs, vg, a.ldkv, 0, T, hd, a.vec);
  cp_async_commit();
  float o[DT][4], m[2] = {-INFINITY, -INFINITY}, l[2] = {0.0f, 0.0f};
  zero_acc(o);
  uint32_t qf[KS][4];
  for (int jt = 0; jt < nkt; jt++) {
    const int buf = jt & 1, j0 = jt * BC;
    kv_stage<HD, NT>(Ks, Vs, kg, vg, a, jt, nkt); /* tile jt (and Q) has landed */
    if (jt == 0) {
#pragma unroll
      for (int kk = 0; kk < KS; kk++) frag_a<S>(qf[kk], Qs, warp * 16, kk * 16);
    }
    const uint16_t *Kt = Ks + buf * BC * S, *Vt = Vs + buf * BC * S;
    if (j0 <= wr0 + 15) { /* else every key of the tile is above this warp's rows */
      float s[BC / 8][4];
      zero_acc(s);
#pragma unroll
      for (int kk = 0; kk < KS; kk++) {
#pragma unroll
        for (int np = 0; np < BC / 16; np++) {
          uint32_t kb[4];
          frag_bt<S>(kb, Kt, np * 16, kk * 16);
          mma_bf16_16816(s[2 * np], qf[kk], kb[0], kb[1]);
          mma_bf16_16816(s[2 * np + 1], qf[kk], kb[2], kb[3]);
        }
      }
      const bool mask = j0 + BC - 1 > wr0 || j0 + BC > T;
      float mx[2] = {m[0], m[1]};
#pragma unroll
      for (int n = 0; n < BC / 8; n++)
#pragma unroll
        for (int e = 0; e < 4; e++) {
          const int col = j0 + n * 8 + c2 + (e & 1), r = row + (e >> 1) * 8;
          float x = s[n][e] * a.scale2;
          if (mask && (col > r || col >= T)) x = -INFINITY;
          s[n][e] = x;
          mx[e >> 1] = fmaxf(mx[e >> 1], x);
        }
#pragma unroll
      for (int r = 0; r < 2; r++) {
        mx[r] = quad_max(mx[r]); /* finite: key 0 is in the first tile of every row */
        const float corr = fast_exp2(m[r] - mx[r]);
        m[r] = mx[r];
        l[r] *= corr;
#pragma unroll
        for (int n = 0; n < DT; n++) {
          o[n][2 * r] *= corr;
          o[n][2 * r + 1] *= corr;
        }
      }
#pragma unroll
      for (int n = 0; n < BC / 8; n++)
#pragma unroll
        for (int e = 0; e < 4; e++) {
          s[n][e] = fast_exp2(s[n][e] - m[e >> 1]);
          l[e >> 1] += s[n][e];
        }
      mma_pb<S, BC / 16, DT>(o, s, Vt, 0);
    }
    __syncthreads(); /* tile jt consumed before its buffer is refilled */
  }
  l[0] = quad_sum(l[0]);
  l[1] = quad_sum(l[1]);
  uint16_t *og = a.o + (int64_t)b * T * H * hd + (int64_t)h * hd;
  store_rows<DT>(og, (int64_t)H * hd, o, row, T, hd, 1.0f / l[0], 1.0f / l[1], a.vec);
  if (lane % 4 == 0) {
    float *lse = a.lse + ((int64_t)b * H + h) * T;
    if (row < T) lse[row] = (m[0] + log2f(l[0])) * LN2;
    if (row + 8 < T) lse[row + 8] = (m[1] + log2f(l[1])) * LN2;
  }
}

/* ---- backward: dQ -----------------------------------------------------------------------------
 * grid (nb*H, tiles(T, BR)) for batches b0 .. b0+nb; also writes Dbuf for the dKV kernel. */
template <int HD, int WARPS>
__device__ __forceinline__ void dq_rowstats(const args &a, const uint16_t *dOs, int b, int h,
                                            int wr0, float (&D)[2], float (&L)[2]) {
  const int lane = threadIdx.x % 32, warp = threadIdx.x / 32, T = a.T, hd = a.hd;
  const uint16_t *og = a.out + (int64_t)b * T * a.H * hd + (int64_t)h * hd;
  for (int rr = 0; rr < 16; rr++) {
    const int r = wr0 + rr;
    float p = 0.0f;
    if (r < T)
      for (int d = lane; d < hd; d += 32)
        p += bf16_to_f32(dOs[(warp * 16 + rr) * shape<HD>::S + d]) *
             bf16_to_f32(og[(int64_t)r * a.H * hd + d]);
    for (int o = 16; o > 0; o >>= 1) p += __shfl_xor_sync(0xffffffffu, p, o);
    if (rr == lane / 4) D[0] = p;
    if (rr == lane / 4 + 8) D[1] = p;
    if (lane == 0 && r < T) a.Dbuf[((int64_t)(b - a.b0) * a.H + h) * T + r] = p;
  }
  const float *lse = a.lse + ((int64_t)b * a.H + h) * T;
  const int row = wr0 + lane / 4;
  L[0] = row < T ? lse[row] * LOG2E : 0.0f;
  L[1] = row + 8 < T ? lse[row + 8] * LOG2E : 0.0f;
}

template <int HD, int WARPS>
__global__ void __launch_bounds__(WARPS * 32) flash_attn_bwd_dq_k(args a) {
  constexpr int BR = 16 * WARPS, NT = WARPS * 32, S = shape<HD>::S, KS = shape<HD>::KS,
                DT = shape<HD>::DT;
  FB_DECLARE_SMEM(smem);
  uint16_t *Qs = (uint16_t *)smem;  /* [BR][S] */
  uint16_t *dOs = Qs + BR * S;      /* [BR][S] */
  uint16_t *Ks = dOs + BR * S;      /* [2][BC][S] */
  uint16_t *Vs = Ks + 2 * BC * S;   /* [2][BC][S] */
  const int T = a.T, H = a.H, hd = a.hd;
  const int tile = (int)gridDim.y - 1 - (int)blockIdx.y, i0 = tile * BR;
  const int b = a.b0 + (int)blockIdx.x / H, h = (int)blockIdx.x % H, g = h / (H / a.KVH);
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32, wr0 = i0 + warp * 16;
  const int row = wr0 + lane / 4, c2 = 2 * (lane % 4);
  const uint16_t *kg = a.k + (int64_t)b * T * a.ldkv + (int64_t)g * hd;
  const uint16_t *vg = a.v + (int64_t)b * T * a.ldkv + (int64_t)g * hd;
  const int nkt = (min(T, i0 + BR) - 1) / BC + 1;

  load_rows<HD, BR, NT>(Qs, a.q + (int64_t)b * T * a.ldq + (int64_t)h * hd, a.ldq, i0, T, hd,
                        a.vec);
  load_rows<HD, BR, NT>(dOs, a.dout + (int64_t)b * T * H * hd + (int64_t)h * hd,
                        (int64_t)H * hd, i0, T, hd, a.vec);
  load_rows<HD, BC, NT>(Ks, kg, a.ldkv, 0, T, hd, a.vec);
  load_rows<HD, BC, NT>(Vs, vg, a.ldkv, 0, T, hd, a.vec);
  cp_async_commit();
  float dq[DT][4], D[2] = {0.0f, 0.0f}, L[2] = {0.0f, 0.0f};
  zero_acc(dq);
  for (int jt = 0; jt < nkt; jt++) {
    const int buf = jt & 1, j0 = jt * BC;
    kv_stage<HD, NT>(Ks, Vs, kg, vg, a, jt, nkt);
    if (jt == 0) dq_rowstats<HD, WARPS>(a, dOs, b, h, wr0, D, L);
    const uint16_t *Kt = Ks + buf * BC * S, *Vt = Vs + buf * BC * S;
    if (j0 <= wr0 + 15) {
      float s[BC / 8][4], dp[BC / 8][4];
      zero_acc(s);
      zero_acc(dp);
      mma_abt<S, KS, BC / 8>(s, Qs, warp * 16, Kt, 0);
      mma_abt<S, KS, BC / 8>(dp, dOs, warp * 16, Vt, 0);
      const bool mask = j0 + BC - 1 > wr0 || j0 + BC > T;
#pragma unroll
      for (int n = 0; n < BC / 8; n++)
#pragma unroll
        for (int e = 0; e < 4; e++) {
          const int col = j0 + n * 8 + c2 + (e & 1), r = row + (e >> 1) * 8;
          float p = fast_exp2(s[n][e] * a.scale2 - L[e >> 1]);
          if (mask && (col > r || col >= T)) p = 0.0f;
          s[n][e] = p * (dp[n][e] - D[e >> 1]); /* dS, unscaled */
        }
      mma_pb<S, BC / 16, DT>(dq, s, Kt, 0);
    }
    __syncthreads();
  }
  uint16_t *dqg = a.dq + (int64_t)b * T * a.ldq + (int64_t)h * hd;
  store_rows<DT>(dqg, a.ldq, dq, row, T, hd, a.scale, a.scale, a.vec);
}

/* ---- backward: dK, dV ---------------------------------------------------------------------
 * grid (nb*KVH, tiles(T, BK)); blockIdx.y = 0 is the first key tile (it sees the most
 * queries). Items: (head of the group, query tile), heads in order, query tiles from the one
 * holding the block's first key to the end; each item's Q, dO, lse2 and D rows stream through
 * two smem stages. */
template <int HD, int WARPS>
__device__ __forceinline__ void dkv_load_item(const args &a, uint16_t *Qs, uint16_t *dOs,
                                              float *Ls, float *Ds, int b, int h, int i0) {
  constexpr int NT = WARPS * 32, BQ = shape<HD>::BQ;
  const int T = a.T, H = a.H, hd = a.hd;
  load_rows<HD, BQ, NT>(Qs, a.q + (int64_t)b * T * a.ldq + (int64_t)h * hd, a.ldq, i0, T, hd,
                        a.vec);
  load_rows<HD, BQ, NT>(dOs, a.dout + (int64_t)b * T * H * hd + (int64_t)h * hd,
                        (int64_t)H * hd, i0, T, hd, a.vec);
  load_vals<NT>(Ls, a.lse + ((int64_t)b * H + h) * T, i0, BQ, T, LOG2E);
  load_vals<NT>(Ds, a.Dbuf + ((int64_t)(b - a.b0) * H + h) * T, i0, BQ, T, 1.0f);
}

template <int HD, int WARPS>
__global__ void __launch_bounds__(WARPS * 32) flash_attn_bwd_dkv_k(args a) {
  constexpr int BK = 16 * WARPS, NT = WARPS * 32, S = shape<HD>::S, KS = shape<HD>::KS,
                DT = shape<HD>::DT, BQ = shape<HD>::BQ;
  FB_DECLARE_SMEM(smem);
  uint16_t *Ks = (uint16_t *)smem;  /* [BK][S] */
  uint16_t *Vs = Ks + BK * S;       /* [BK][S] */
  uint16_t *Qs = Vs + BK * S;       /* [2][BQ][S] */
  uint16_t *dOs = Qs + 2 * BQ * S;  /* [2][BQ][S] */
  float *Ls = (float *)(dOs + 2 * BQ * S); /* [2][BQ] */
  float *Ds = Ls + 2 * BQ;                 /* [2][BQ] */
  const int T = a.T, rep = a.H / a.KVH, hd = a.hd;
  const int b = a.b0 + (int)blockIdx.x / a.KVH, g = (int)blockIdx.x % a.KVH;
  const int j0 = (int)blockIdx.y * BK;
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32, wk0 = j0 + warp * 16;
  const int key = wk0 + lane / 4, c2 = 2 * (lane % 4);
  const int q0 = j0 / BQ * BQ, nq = tiles(T - q0, BQ), items = rep * nq;

  const int64_t kvo = (int64_t)b * T * a.ldkv + (int64_t)g * hd;
  load_rows<HD, BK, NT>(Ks, a.k + kvo, a.ldkv, j0, T, hd, a.vec);
  load_rows<HD, BK, NT>(Vs, a.v + kvo, a.ldkv, j0, T, hd, a.vec);
  dkv_load_item<HD, WARPS>(a, Qs, dOs, Ls, Ds, b, g * rep, q0);
  cp_async_commit();
  float dk[DT][4], dv[DT][4];
  zero_acc(dk);
  zero_acc(dv);
  for (int it = 0; it < items; it++) {
    const int buf = it & 1, i0 = q0 + (it % nq) * BQ;
    if (it + 1 < items) {
      const int nb = buf ^ 1;
      dkv_load_item<HD, WARPS>(a, Qs + nb * BQ * S, dOs + nb * BQ * S, Ls + nb * BQ,
                               Ds + nb * BQ, b, g * rep + (it + 1) / nq,
                               q0 + ((it + 1) % nq) * BQ);
    }
    cp_async_commit();
    cp_async_wait<1>();
    __syncthreads();
    const uint16_t *Qt = Qs + buf * BQ * S, *dOt = dOs + buf * BQ * S;
    const float *Lt = Ls + buf * BQ, *Dt = Ds + buf * BQ;
    if (i0 + BQ - 1 >= wk0) { /* else every query of the tile precedes this warp's keys */
      float s[BQ / 8][4], dp[BQ / 8][4];
      zero_acc(s);
      zero_acc(dp);
      mma_abt<S, KS, BQ / 8>(s, Ks, warp * 16, Qt, 0);  /* S^T = K Q^T */
      mma_abt<S, KS, BQ / 8>(dp, Vs, warp * 16, dOt, 0); /* dP^T = V dO^T */
      const bool mask = i0 < wk0 + 15 || i0 + BQ > T;
#pragma unroll
      for (int n = 0; n < BQ / 8; n++)
#pragma unroll
        for (int e = 0; e < 4; e++) {
          const int cq = n * 8 + c2 + (e & 1), qi = i0 + cq, kj = key + (e >> 1) * 8;
          float p = fast_exp2(s[n][e] * a.scale2 - Lt[cq]);
          if (mask && (qi < kj || qi >= T)) p = 0.0f;
          s[n][e] = p;
          dp[n][e] = p * (dp[n][e] - Dt[cq]); /* dS^T, unscaled */
        }
      mma_pb<S, BQ / 16, DT>(dv, s, dOt, 0);  /* dV += P^T dO */
      mma_pb<S, BQ / 16, DT>(dk, dp, Qt, 0);  /* dK += dS^T Q */
    }
    __syncthreads();
  }
  store_rows<DT>(a.dk + kvo, a.ldkv, dk, key, T, hd, a.scale, a.scale, a.vec);
  store_rows<DT>(a.dv + kvo, a.ldkv, dv, key, T, hd, 1.0f, 1.0f, a.vec);
}

} /* namespace fa */
#endif

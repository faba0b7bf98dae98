/* Causal grouped-query attention on Hopper's warpgroup tensor cores (sm_90a wgmma, bf16 in,
 * fp32 accumulation), with flash_attention.cuh's conventions (fa::args, layouts, lse in
 * natural log, D = dO . O in Dbuf, dq/dk/dv overwritten) and its split, deterministic
 * backward; kernels_attention_flash.cu picks these on an sm_90 device.
 *
 *  - A block is two warpgroups (256 threads); a warpgroup owns 64 rows (queries in the
 *    forward and dQ kernels, keys in the dKV kernel), a warp 16 of them, so the fp32
 *    accumulators of wgmma m64nNk16 have the per-warp layout of mma.m16n8 (wgmma.cuh) and the
 *    online softmax is the sm_80 kernels' code.
 *  - Operands in shared memory are tiles in the 128-byte swizzle wgmma reads: a tile of ROWS
 *    rows and HD columns is HD/64 blocks of ROWS x 64 bf16 (128 bytes a row), the 16-byte
 *    chunk c of row r stored at chunk c ^ (r % 8); every tile starts 1024-byte aligned.
 *  - Forward: S = Q K^T (A and B from shared memory, K-major), the softmax on S's registers,
 *    O += P V with P from registers (bf16) and V read N-major (the descriptor's transpose).
 *    Key/value tiles in three stages; S of tile j+1 is issued before the softmax of tile j,
 *    so the exponentials overlap the next tile's product (FlashAttention-3's intra-warpgroup
 *    pipelining; no ping-pong scheduling between the two consumer warpgroups). Two kernels:
 *    flash_attn_fwd_tma_sm90_k, fed by TMA (tma.cuh) from a producer warpgroup through
 *    mbarriers (the default), and flash_attn_fwd_sm90_k, where every thread issues its share
 *    of cp.async copies (16 bytes, zero-filled past T and hd) between block barriers (the
 *    fallback); both give the same bits.
 *  - The backward likewise has a TMA-fed pair (flash_attn_bwd_dq_tma_sm90_k,
 *    flash_attn_bwd_dkv_tma_sm90_k: producer warpgroup, two stages, the default) and a
 *    cp.async pair (the fallback), with the same bits; neither overlaps its elementwise work
 *    with the products yet.
 *  - dQ kernel: S = Q K^T, dP = dO V^T, dS = P (dP - D), dQ += dS K (K N-major); writes D.
 *    dKV kernel: keys of one KV head, over the heads of its group in order and the query
 *    tiles from the diagonal down: S^T = K Q^T, dP^T = V dO^T, dV += P^T dO, dK += dS^T Q.
 *    Every output element is written once by one thread after a fixed-order loop: the same
 *    bits for any grid order and any run.
 *  - Each wgmma batch is waited for before its registers are read (wgmma_wait<0>).
 * Needs the 16-byte path (fa::can_vec) and hd <= 128 (HD 64 or 128); the launcher falls back
 * to the sm_80 kernels otherwise. The host emulator (tests/cuda_emu) compiles this file for
 * the CPU. */
#ifndef FB_FLASH_ATTENTION_SM90_CUH
#define FB_FLASH_ATTENTION_SM90_CUH
#include "flash_attention.cuh"
#include "tma.cuh"
#include "wgmma.cuh"

namespace fa3 {

using fa::args;
constexpr int NWG = 2, NT = 128 * NWG; /* warpgroups, threads a block */
constexpr int BR = 64 * NWG;           /* rows a block owns */
constexpr int BC = 64;                 /* keys per tile (forward, dQ) */

template <int HD>
struct shape {
  static constexpr int KS = HD / 16, DT = HD / 8;
  static constexpr int BQ = 64; /* query tile of the dKV kernel */
};
template <int ROWS, int HD>
__host__ __device__ constexpr int tile_bytes() { return ROWS * HD * 2; }
template <int HD>
__host__ __device__ constexpr int fwd_smem_bytes() {
  return 1024 + tile_bytes<BR, HD>() + 6 * tile_bytes<BC, HD>(); /* 3 K/V stages */
}
template <int HD>
__host__ __device__ constexpr int dq_smem_bytes() {
  return 1024 + 2 * tile_bytes<BR, HD>() + 4 * tile_bytes<BC, HD>();
}
template <int HD>
__host__ __device__ constexpr int dkv_smem_bytes() {
  return 1024 + 2 * tile_bytes<BR, HD>() + 4 * tile_bytes<shape<HD>::BQ, HD>() +
         4 * shape<HD>::BQ * 4;
}

/* This thread's warpgroup, as a value the compiler knows is the same across the warp (a
 * shuffle from lane 0), so branches on it are not divergent and wgmma is not serialized. */
__device__ __forceinline__ int warpgroup(void) {
  return __shfl_sync(0xffffffffu, (int)threadIdx.x / 128, 0);
}

/* The dynamic shared memory rounded up to a 1024-byte shared address (the swizzle's period). */
__device__ __forceinline__ unsigned char *align1024(unsigned char *p) {
  return p + ((1024u - (smem_addr(p) & 1023u)) & 1023u);
}

/* Byte offset of 16-byte chunk c8 (columns 8 c8 .. 8 c8 + 7) of row r in a swizzled tile. */
template <int ROWS>
__device__ __forceinline__ uint32_t sw_off(int r, int c8) {
  return (uint32_t)((c8 >> 3) * ROWS * 128 + r * 128 + (((c8 & 7) ^ (r & 7)) << 4));
}

/* Rows [r0, r0 + ROWS) of one head (g: row 0, column 0; stride ld) into a swizzled tile by
 * cp.async; rows at or past T and columns at or past hd are zeros. The caller commits. */
template <int HD, int ROWS>
__device__ __forceinline__ void load_tile(unsigned char *s, const uint16_t *g, int64_t ld,
                                          int r0, int T, int hd) {
  constexpr int CH = HD / 8;
  for (int c = threadIdx.x; c < ROWS * CH; c += NT) {
    const int r = c / CH, c8 = c % CH, row = r0 + r, col = c8 * 8;
    const bool ok = row < T && col < hd;
    cp_async16(s + sw_off<ROWS>(r, c8), ok ? g + (int64_t)row * ld + col : g, ok);
  }
}

/* Descriptor of a K-major operand: rows r0 .. of a swizzled tile of ROWS rows, columns
 * 16 kk .. 16 kk + 15 (8-row groups 1024 bytes apart; the leading offset is unused). */
template <int ROWS>
__device__ __forceinline__ uint64_t desc_k(uint32_t tile, int r0, int kk) {
  return sw128_desc(tile + (uint32_t)((kk >> 2) * ROWS * 128 + r0 * 128 + (kk & 3) * 32), 16,
                    1024);
}
/* Descriptor of an N-major B (k = the tile's rows 16 kk .. 16 kk + 15, n = its columns):
 * 64-column blocks ROWS * 128 bytes apart (leading), 8-row groups 1024 apart (stride). */
template <int ROWS>
__device__ __forceinline__ uint64_t desc_n(uint32_t tile, int kk) {
  return sw128_desc(tile + (uint32_t)(kk * 16 * 128), ROWS * 128, 1024);
}

/* The A fragment (bf16) of k-step kk of a 64 x 16 KS accumulator tile (P, dS). */
template <int R>
__device__ __forceinline__ void frag_p(uint32_t (&a)[4], const float (&p)[R][4], int kk) {
  a[0] = pack_bf16x2(p[2 * kk][0], p[2 * kk][1]);
  a[1] = pack_bf16x2(p[2 * kk][2], p[2 * kk][3]);
  a[2] = pack_bf16x2(p[2 * kk + 1][0], p[2 * kk + 1][1]);
  a[3] = pack_bf16x2(p[2 * kk + 1][2], p[2 * kk + 1][3]);
}

/* The two-stage pipeline of the forward and dQ kernels: key/value tile jt+1 into the other
 * buffer (when there is one), then tile jt (and what was committed with it) made visible
 * to the block and to wgmma's proxy. */
template <int HD>
__device__ __forceinline__ void kv_stage(unsigned char *Ks, unsigned char *Vs,
                                         const uint16_t *kg, const uint16_t *vg, const args &a,
                                         int jt, int nkt) {
  constexpr int KB = tile_bytes<BC, HD>();
  if (jt + 1 < nkt) {
    const int nb = (jt & 1) ^ 1, j1 = (jt + 1) * BC;
    load_tile<HD, BC>(Ks + nb * KB, kg, a.ldkv, j1, a.T, a.hd);
    load_tile<HD, BC>(Vs + nb * KB, vg, a.ldkv, j1, a.T, a.hd);
  }
  cp_async_commit();
  cp_async_wait<1>();
  fence_proxy_async();
  __syncthreads();
}

/* ---- forward -------------------------------------------------------------------------------
 * grid (B*H, tiles(T, BR)); blockIdx.y = 0 is the last query tile (the longest rows first).
 * Key/value tiles rotate through three stages: while a warpgroup runs the softmax of tile j,
 * the tensor cores compute S of tile j+1 (issued before it) and tile j+2 is loading. */
constexpr int FWD_STAGES = 3;

/* The online-softmax step of one tile: S (scaled to log2, masked) to P in place, the running
 * max m and sum l updated, o rescaled. */
template <int DT>
__device__ __forceinline__ void softmax_tile(float (&s)[BC / 8][4], float (&o)[DT][4],
                                             float (&m)[2], float (&l)[2], const args &a,
                                             int j0, int wr0) {
  const int lane = threadIdx.x % 32, row = wr0 + lane / 4, c2 = 2 * (lane % 4);
  const bool mask = j0 + BC - 1 > wr0 || j0 + BC > a.T;
  float mx[2] = {m[0], m[1]};
#pragma unroll
  for (int n = 0; n < BC / 8; n++)
#pragma unroll
    for (int e = 0; e < 4; e++) {
      const int col = j0 + n * 8 + c2 + (e & 1), r = row + (e >> 1) * 8;
      float x = s[n][e] * a.scale2;
      if (mask && (col > r || col >= a.T)) x = -INFINITY;
      s[n][e] = x;
      mx[e >> 1] = fmaxf(mx[e >> 1], x);
    }
#pragma unroll
  for (int r = 0; r < 2; r++) {
    mx[r] = fa::quad_max(mx[r]); /* finite: key 0 is in the first tile of every row */
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
}

/* Issues S = Q K^T of one key tile (Q rows r0.. of the BR-row tile at qa, the key tile at
 * ka) as one wgmma group; the caller waits. */
template <int HD>
__device__ __forceinline__ void issue_s(float (&s)[BC / 8][4], uint32_t qa, int r0,
                                        uint32_t ka) {
  wgmma_fence();
#pragma unroll
  for (int kk = 0; kk < shape<HD>::KS; kk++)
    wgmma_ss<0>(s, desc_k<BR>(qa, r0, kk), desc_k<BC>(ka, 0, kk), kk > 0);
  wgmma_commit();
}

/* The softmax of key tile j0 on S, then O += P V (V tile at va) issued as one wgmma group. */
template <int HD>
__device__ __forceinline__ void softmax_pv(float (&s)[BC / 8][4], float (&o)[HD / 8][4],
                                           float (&m)[2], float (&l)[2], const args &a, int j0,
                                           int wr0, uint32_t va) {
  softmax_tile<HD / 8>(s, o, m, l, a, j0, wr0);
  uint32_t pa[BC / 16][4];
#pragma unroll
  for (int kk = 0; kk < BC / 16; kk++) frag_p(pa[kk], s, kk);
  wgmma_fence();
#pragma unroll
  for (int kk = 0; kk < BC / 16; kk++) wgmma_rs<1>(o, pa[kk], desc_n<BC>(va, kk), 1);
  wgmma_commit();
}

/* Waits for the tile's groups; the next tile's S (when issued) becomes the current one. */
template <int DT>
__device__ __forceinline__ void finish_tile(float (&s)[BC / 8][4], float (&sn)[BC / 8][4],
                                            float (&o)[DT][4], bool next) {
  wgmma_wait<0>();
  if (next) {
    fence_acc(sn);
#pragma unroll
    for (int n = 0; n < BC / 8; n++)
#pragma unroll
      for (int e = 0; e < 4; e++) s[n][e] = sn[n][e];
  }
  fence_acc(o);
}

/* O / l to out (bf16) and lse of the thread's two rows. */
template <int DT>
__device__ __forceinline__ void fwd_store(const args &a, float (&o)[DT][4], const float (&m)[2],
                                          float (&l)[2], int b, int h, int row) {
  const int T = a.T, H = a.H, hd = a.hd;
  l[0] = fa::quad_sum(l[0]);
  l[1] = fa::quad_sum(l[1]);
  uint16_t *og = a.o + (int64_t)b * T * H * hd + (int64_t)h * hd;
  fa::store_rows<DT>(og, (int64_t)H * hd, o, row, T, hd, 1.0f / l[0], 1.0f / l[1], true);
  if (threadIdx.x % 4 == 0) {
    float *lse = a.lse + ((int64_t)b * H + h) * T;
    if (row < T) lse[row] = (m[0] + log2f(l[0])) * fa::LN2;
    if (row + 8 < T) lse[row + 8] = (m[1] + log2f(l[1])) * fa::LN2;
  }
}

/* The cp.async-fed forward: every thread loads its share of each tile. */
template <int HD>
__global__ void __launch_bounds__(NT, 1) flash_attn_fwd_sm90_k(args a) {
  constexpr int DT = shape<HD>::DT, KB = tile_bytes<BC, HD>();
  FB_DECLARE_SMEM(smem_raw);
  unsigned char *Qs = align1024(smem_raw), *Ks = Qs + tile_bytes<BR, HD>();
  unsigned char *Vs = Ks + FWD_STAGES * KB;
  const uint32_t qa = smem_addr(Qs), ka = smem_addr(Ks), va = smem_addr(Vs);
  const int T = a.T, H = a.H, hd = a.hd;
  const int tile = (int)gridDim.y - 1 - (int)blockIdx.y, i0 = tile * BR;
  const int b = (int)blockIdx.x / H, h = (int)blockIdx.x % H, g = h / (H / a.KVH);
  const int wg = warpgroup(), warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  const int g0 = i0 + 64 * wg, wr0 = i0 + warp * 16, row = wr0 + lane / 4;
  const uint16_t *kg = a.k + (int64_t)b * T * a.ldkv + (int64_t)g * hd;
  const uint16_t *vg = a.v + (int64_t)b * T * a.ldkv + (int64_t)g * hd;
  const int nkt = (min(T, i0 + BR) - 1) / BC + 1;
  const int mine = (min(T, g0 + 64) - 1) / BC + 1; /* tiles this warpgroup's rows reach */

  load_tile<HD, BR>(Qs, a.q + (int64_t)b * T * a.ldq + (int64_t)h * hd, a.ldq, i0, T, hd);
  load_tile<HD, BC>(Ks, kg, a.ldkv, 0, T, hd);
  load_tile<HD, BC>(Vs, vg, a.ldkv, 0, T, hd);
  cp_async_commit();
  if (nkt > 1) {
    load_tile<HD, BC>(Ks + KB, kg, a.ldkv, BC, T, hd);
    load_tile<HD, BC>(Vs + KB, vg, a.ldkv, BC, T, hd);
  }
  cp_async_commit();
  cp_async_wait<1>(); /* Q and tile 0 */
  fence_proxy_async();
  __syncthreads();
  float o[DT][4], s[BC / 8][4], sn[BC / 8][4], m[2] = {-INFINITY, -INFINITY}, l[2] = {0.0f, 0.0f};
  fa::zero_acc(o);
  issue_s<HD>(s, qa, 64 * wg, ka);
  wgmma_wait<0>();
  fence_acc(s);
  for (int jt = 0; jt < nkt; jt++) {
    const int st = jt % FWD_STAGES, st1 = (jt + 1) % FWD_STAGES, st2 = (jt + 2) % FWD_STAGES;
    cp_async_wait<0>(); /* tile jt+1 */
    fence_proxy_async();
    __syncthreads(); /* ... visible; and stage st2 (tile jt-1) read by every warpgroup */
    if (jt + 2 < nkt) {
      load_tile<HD, BC>(Ks + st2 * KB, kg, a.ldkv, (jt + 2) * BC, T, hd);
      load_tile<HD, BC>(Vs + st2 * KB, vg, a.ldkv, (jt + 2) * BC, T, hd);
    }
    cp_async_commit();
    const bool next = jt + 1 < mine; /* S of tile jt+1 computes during the softmax of jt */
    if (next) issue_s<HD>(sn, qa, 64 * wg, ka + st1 * KB);
    if (jt < mine) softmax_pv<HD>(s, o, m, l, a, jt * BC, wr0, va + st * KB);
    finish_tile(s, sn, o, next);
  }
  fwd_store(a, o, m, l, b, h, row);
}

/* The TMA-fed forward: warpgroup 0 is the producer (one thread issues the tensor copies of Q
 * and of each key/value tile into a ring of TMA_STAGES stages, paced by mbarriers: full[s]
 * when a tile landed, empty[s] when all 256 consumer threads are done with it); warpgroups
 * 1 and 2 consume, 64 query rows each, as the cp.async kernel does, with no block barrier in the
 * loop. Registers move from the producer (24) to the consumers (240). */
constexpr int TMA_STAGES = 3;
struct tmaps {
  fb_tmap q, k, v; /* [B][T][heads][hd] as 4-D tensors (hd, heads, T, B), boxes of 64 columns */
};
template <int HD>
__host__ __device__ constexpr int fwd_tma_smem_bytes() {
  return 1024 + tile_bytes<BR, HD>() + 2 * TMA_STAGES * tile_bytes<BC, HD>() +
         (1 + 2 * TMA_STAGES) * 8;
}

/* The producer's copies: Q, then key/value tiles 0 .. nkt-1 as stages free up. */
template <int HD>
__device__ __forceinline__ void fwd_produce(const tmaps &tm, unsigned char *Qs,
                                            unsigned char *Ks, unsigned char *Vs,
                                            uint64_t *bars, int b, int h, int g, int i0,
                                            int nkt) {
  constexpr int KB = tile_bytes<BC, HD>(), QB = tile_bytes<BR, HD>();
  uint64_t *full = bars + 1, *empty = bars + 1 + TMA_STAGES;
  mbar_arrive_tx(bars, QB);
  for (int c = 0; c < HD / 64; c++) tma_load_4d(Qs + c * BR * 128, &tm.q, c * 64, h, i0, b, bars);
  for (int t = 0; t < nkt; t++) {
    const int st = t % TMA_STAGES;
    if (t >= TMA_STAGES) mbar_wait(empty + st, (t / TMA_STAGES - 1) & 1);
    mbar_arrive_tx(full + st, 2 * KB);
    for (int c = 0; c < HD / 64; c++) {
      tma_load_4d(Ks + st * KB + c * BC * 128, &tm.k, c * 64, g, t * BC, b, full + st);
      tma_load_4d(Vs + st * KB + c * BC * 128, &tm.v, c * 64, g, t * BC, b, full + st);
    }
  }
}

template <int HD>
__global__ void __launch_bounds__(NT + 128, 1)
    flash_attn_fwd_tma_sm90_k(args a, const __grid_constant__ tmaps tm) {
  constexpr int DT = shape<HD>::DT, KB = tile_bytes<BC, HD>();
  FB_DECLARE_SMEM(smem_raw);
  unsigned char *Qs = align1024(smem_raw), *Ks = Qs + tile_bytes<BR, HD>();
  unsigned char *Vs = Ks + TMA_STAGES * KB;
  uint64_t *bars = (uint64_t *)(Vs + TMA_STAGES * KB); /* Q, full[], empty[] */
  uint64_t *full = bars + 1, *empty = bars + 1 + TMA_STAGES;
  const int T = a.T, H = a.H;
  const int tile = (int)gridDim.y - 1 - (int)blockIdx.y, i0 = tile * BR;
  const int b = (int)blockIdx.x / H, h = (int)blockIdx.x % H, g = h / (H / a.KVH);
  const int nkt = (min(T, i0 + BR) - 1) / BC + 1;
  const int wg = warpgroup();
  if (threadIdx.x == 0) {
    mbar_init(bars, 1);
    for (int st = 0; st < TMA_STAGES; st++) mbar_init(full + st, 1), mbar_init(empty + st, NT);
    mbar_init_fence();
  }
  __syncthreads();
  if (wg == 0) {
    setmaxnreg_dec<24>();
    if (threadIdx.x == 0) fwd_produce<HD>(tm, Qs, Ks, Vs, bars, b, h, g, i0, nkt);
    return;
  }
  setmaxnreg_inc<240>();
  const uint32_t qa = smem_addr(Qs), ka = smem_addr(Ks), va = smem_addr(Vs);
  const int cw = wg - 1, warp = (int)threadIdx.x / 32 - 4, lane = threadIdx.x % 32;
  const int g0 = i0 + 64 * cw, wr0 = i0 + warp * 16, row = wr0 + lane / 4;
  const int mine = (min(T, g0 + 64) - 1) / BC + 1;
  float o[DT][4], s[BC / 8][4], sn[BC / 8][4], m[2] = {-INFINITY, -INFINITY}, l[2] = {0.0f, 0.0f};
  fa::zero_acc(o);
  mbar_wait(bars, 0);
  mbar_wait(full, 0);
  issue_s<HD>(s, qa, 64 * cw, ka);
  wgmma_wait<0>();
  fence_acc(s);
  for (int jt = 0; jt < nkt; jt++) {
    const int st = jt % TMA_STAGES, st1 = (jt + 1) % TMA_STAGES;
    const bool next = jt + 1 < mine;
    if (next) {
      mbar_wait(full + st1, ((jt + 1) / TMA_STAGES) & 1);
      issue_s<HD>(sn, qa, 64 * cw, ka + st1 * KB);
    }
    if (jt < mine) softmax_pv<HD>(s, o, m, l, a, jt * BC, wr0, va + st * KB);
    finish_tile(s, sn, o, next);
    /* A warpgroup past its diagonal waits for tile jt too before releasing it: its release
     * must not complete the stage's phase for a tile the other warpgroup still reads. Every
     * thread arrives (one per warpgroup could let the stage refill and its phase parity turn
     * over twice before a slower warp of the warpgroup saw the tile land). */
    if (jt >= mine) mbar_wait(full + st, (jt / TMA_STAGES) & 1);
    mbar_arrive(empty + st); /* this thread is done with jt */
  }
  fwd_store(a, o, m, l, b, h, row);
}

/* ---- backward: dQ ---------------------------------------------------------------------------
 * D_i = dO_i . O_i of this warp's 16 rows (from global memory; written to Dbuf for the dKV
 * kernel) and lse2 of the thread's two rows. */
__device__ __forceinline__ void dq_rowstats(const args &a, int b, int h, int wr0,
                                            float (&D)[2], float (&L)[2]) {
  const int lane = threadIdx.x % 32, T = a.T, hd = a.hd;
  const int64_t ld = (int64_t)a.H * hd;
  const uint16_t *og = a.out + (int64_t)b * T * ld + (int64_t)h * hd;
  const uint16_t *dg = a.dout + (int64_t)b * T * ld + (int64_t)h * hd;
  for (int rr = 0; rr < 16; rr++) {
    const int r = wr0 + rr;
    float p = 0.0f;
    if (r < T)
      for (int d = lane; d < hd; d += 32)
        p += fa::bf16_to_f32(dg[r * ld + d]) * fa::bf16_to_f32(og[r * ld + d]);
    for (int o = 16; o > 0; o >>= 1) p += __shfl_xor_sync(0xffffffffu, p, o);
    if (rr == lane / 4) D[0] = p;
    if (rr == lane / 4 + 8) D[1] = p;
    if (lane == 0 && r < T) a.Dbuf[((int64_t)(b - a.b0) * a.H + h) * T + r] = p;
  }
  const float *lse = a.lse + ((int64_t)b * a.H + h) * T;
  const int row = wr0 + lane / 4;
  L[0] = row < T ? lse[row] * fa::LOG2E : 0.0f;
  L[1] = row + 8 < T ? lse[row + 8] * fa::LOG2E : 0.0f;
}

/* One key tile of the dQ kernel for this warpgroup's 64 query rows (r0 within the BR-row Q
 * and dO tiles at qa, da; key and value tiles at ka, va): S = Q K^T, dP = dO V^T,
 * dS = P (dP - D), dQ += dS K. */
template <int HD>
__device__ __forceinline__ void dq_tile(float (&dq)[HD / 8][4], const args &a, uint32_t qa,
                                        uint32_t da, uint32_t ka, uint32_t va, int r0, int j0,
                                        int wr0, const float (&D)[2], const float (&L)[2]) {
  constexpr int KS = shape<HD>::KS;
  const int lane = threadIdx.x % 32, row = wr0 + lane / 4, c2 = 2 * (lane % 4), T = a.T;
  float s[BC / 8][4], dp[BC / 8][4];
  wgmma_fence();
#pragma unroll
  for (int kk = 0; kk < KS; kk++)
    wgmma_ss<0>(s, desc_k<BR>(qa, r0, kk), desc_k<BC>(ka, 0, kk), kk > 0);
#pragma unroll
  for (int kk = 0; kk < KS; kk++)
    wgmma_ss<0>(dp, desc_k<BR>(da, r0, kk), desc_k<BC>(va, 0, kk), kk > 0);
  wgmma_commit();
  wgmma_wait<0>();
  fence_acc(s);
  fence_acc(dp);
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
  uint32_t sa[BC / 16][4];
#pragma unroll
  for (int kk = 0; kk < BC / 16; kk++) frag_p(sa[kk], s, kk);
  wgmma_fence();
#pragma unroll
  for (int kk = 0; kk < BC / 16; kk++) wgmma_rs<1>(dq, sa[kk], desc_n<BC>(ka, kk), 1);
  wgmma_commit();
  wgmma_wait<0>();
  fence_acc(dq);
}

/* grid (nb*H, tiles(T, BR)) for batches b0 .. b0+nb. */
template <int HD>
__global__ void __launch_bounds__(NT, 1) flash_attn_bwd_dq_sm90_k(args a) {
  constexpr int DT = shape<HD>::DT, KB = tile_bytes<BC, HD>();
  FB_DECLARE_SMEM(smem_raw);
  unsigned char *Qs = align1024(smem_raw), *dOs = Qs + tile_bytes<BR, HD>();
  unsigned char *Ks = dOs + tile_bytes<BR, HD>(), *Vs = Ks + 2 * KB;
  const uint32_t qa = smem_addr(Qs), da = smem_addr(dOs), ka = smem_addr(Ks),
                 va = smem_addr(Vs);
  const int T = a.T, H = a.H, hd = a.hd;
  const int tile = (int)gridDim.y - 1 - (int)blockIdx.y, i0 = tile * BR;
  const int b = a.b0 + (int)blockIdx.x / H, h = (int)blockIdx.x % H, g = h / (H / a.KVH);
  const int wg = warpgroup(), warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  const int g0 = i0 + 64 * wg, wr0 = i0 + warp * 16, row = wr0 + lane / 4;
  const uint16_t *kg = a.k + (int64_t)b * T * a.ldkv + (int64_t)g * hd;
  const uint16_t *vg = a.v + (int64_t)b * T * a.ldkv + (int64_t)g * hd;
  const int nkt = (min(T, i0 + BR) - 1) / BC + 1;

  load_tile<HD, BR>(Qs, a.q + (int64_t)b * T * a.ldq + (int64_t)h * hd, a.ldq, i0, T, hd);
  load_tile<HD, BR>(dOs, a.dout + (int64_t)b * T * H * hd + (int64_t)h * hd, (int64_t)H * hd,
                    i0, T, hd);
  load_tile<HD, BC>(Ks, kg, a.ldkv, 0, T, hd);
  load_tile<HD, BC>(Vs, vg, a.ldkv, 0, T, hd);
  cp_async_commit();
  float dq[DT][4], D[2] = {0.0f, 0.0f}, L[2] = {0.0f, 0.0f};
  fa::zero_acc(dq);
  dq_rowstats(a, b, h, wr0, D, L);
  for (int jt = 0; jt < nkt; jt++) {
    const int buf = jt & 1, j0 = jt * BC;
    kv_stage<HD>(Ks, Vs, kg, vg, a, jt, nkt);
    if (j0 <= g0 + 63)
      dq_tile<HD>(dq, a, qa, da, ka + buf * KB, va + buf * KB, 64 * wg, j0, wr0, D, L);
    __syncthreads();
  }
  uint16_t *dqg = a.dq + (int64_t)b * T * a.ldq + (int64_t)h * hd;
  fa::store_rows<DT>(dqg, a.ldq, dq, row, T, hd, a.scale, a.scale, true);
}

/* ---- backward: dK, dV -----------------------------------------------------------------------
 * grid (nb*KVH, tiles(T, BR)); blockIdx.y = 0 is the first key tile. Items: (head of the
 * group, query tile), heads in order, query tiles from the one holding the block's first key
 * to the end; each item's Q, dO, lse2 and D stream through two stages. */
template <int HD>
__device__ __forceinline__ void dkv_load_item(const args &a, unsigned char *Qs,
                                              unsigned char *dOs, float *Ls, float *Ds, int b,
                                              int h, int i0) {
  constexpr int BQ = shape<HD>::BQ;
  const int T = a.T, H = a.H, hd = a.hd;
  load_tile<HD, BQ>(Qs, a.q + (int64_t)b * T * a.ldq + (int64_t)h * hd, a.ldq, i0, T, hd);
  load_tile<HD, BQ>(dOs, a.dout + (int64_t)b * T * H * hd + (int64_t)h * hd, (int64_t)H * hd,
                    i0, T, hd);
  fa::load_vals<NT>(Ls, a.lse + ((int64_t)b * H + h) * T, i0, BQ, T, fa::LOG2E);
  fa::load_vals<NT>(Ds, a.Dbuf + ((int64_t)(b - a.b0) * H + h) * T, i0, BQ, T, 1.0f);
}

/* One item of the dKV kernel for this warpgroup's 64 keys (r0 within the BR-row K and V
 * tiles at ka, va; the item's query and dO tiles at qt, dt): S^T = K Q^T, dP^T = V dO^T,
 * dV += P^T dO, dK += dS^T Q. lse2 of query cq is Lq[cq] * lmul and D is Dq[cq], for cq <
 * nq (the rest are masked and not read). */
template <int HD>
__device__ __forceinline__ void dkv_item(float (&dk)[HD / 8][4], float (&dv)[HD / 8][4],
                                         const args &a, uint32_t ka, uint32_t va, uint32_t qt,
                                         uint32_t dt, int r0, int i0, int wk0, const float *Lq,
                                         const float *Dq, float lmul, int nq) {
  constexpr int KS = shape<HD>::KS, BQ = shape<HD>::BQ;
  const int lane = threadIdx.x % 32, key = wk0 + lane / 4, c2 = 2 * (lane % 4), T = a.T;
  float s[BQ / 8][4], dp[BQ / 8][4];
  wgmma_fence();
#pragma unroll
  for (int kk = 0; kk < KS; kk++) /* S^T = K Q^T */
    wgmma_ss<0>(s, desc_k<BR>(ka, r0, kk), desc_k<BQ>(qt, 0, kk), kk > 0);
#pragma unroll
  for (int kk = 0; kk < KS; kk++) /* dP^T = V dO^T */
    wgmma_ss<0>(dp, desc_k<BR>(va, r0, kk), desc_k<BQ>(dt, 0, kk), kk > 0);
  wgmma_commit();
  wgmma_wait<0>();
  fence_acc(s);
  fence_acc(dp);
  const bool mask = i0 < wk0 + 15 || i0 + BQ > T;
#pragma unroll
  for (int n = 0; n < BQ / 8; n++)
#pragma unroll
    for (int e = 0; e < 4; e++) {
      const int cq = n * 8 + c2 + (e & 1), qi = i0 + cq, kj = key + (e >> 1) * 8;
      const float lq = cq < nq ? Lq[cq] * lmul : 0.0f, dq = cq < nq ? Dq[cq] : 0.0f;
      float p = fast_exp2(s[n][e] * a.scale2 - lq);
      if (mask && (qi < kj || qi >= T)) p = 0.0f;
      s[n][e] = p;
      dp[n][e] = p * (dp[n][e] - dq); /* dS^T, unscaled */
    }
  uint32_t pa[BQ / 16][4], sa[BQ / 16][4];
#pragma unroll
  for (int kk = 0; kk < BQ / 16; kk++) frag_p(pa[kk], s, kk), frag_p(sa[kk], dp, kk);
  wgmma_fence();
#pragma unroll
  for (int kk = 0; kk < BQ / 16; kk++) /* dV += P^T dO, dK += dS^T Q */
    wgmma_rs<1>(dv, pa[kk], desc_n<BQ>(dt, kk), 1), wgmma_rs<1>(dk, sa[kk], desc_n<BQ>(qt, kk), 1);
  wgmma_commit();
  wgmma_wait<0>();
  fence_acc(dv);
  fence_acc(dk);
}

template <int HD>
__global__ void __launch_bounds__(NT, 1) flash_attn_bwd_dkv_sm90_k(args a) {
  constexpr int DT = shape<HD>::DT, BQ = shape<HD>::BQ, QB = tile_bytes<BQ, HD>();
  FB_DECLARE_SMEM(smem_raw);
  unsigned char *Ks = align1024(smem_raw), *Vs = Ks + tile_bytes<BR, HD>();
  unsigned char *Qs = Vs + tile_bytes<BR, HD>(), *dOs = Qs + 2 * QB;
  float *Ls = (float *)(dOs + 2 * QB), *Ds = Ls + 2 * BQ;
  const uint32_t ka = smem_addr(Ks), va = smem_addr(Vs), qa = smem_addr(Qs),
                 da = smem_addr(dOs);
  const int T = a.T, rep = a.H / a.KVH, hd = a.hd;
  const int b = a.b0 + (int)blockIdx.x / a.KVH, g = (int)blockIdx.x % a.KVH;
  const int j0 = (int)blockIdx.y * BR;
  const int wg = warpgroup(), warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  const int g0 = j0 + 64 * wg, wk0 = j0 + warp * 16, key = wk0 + lane / 4;
  const int q0 = j0 / BQ * BQ, nq = fa::tiles(T - q0, BQ), items = rep * nq;

  const int64_t kvo = (int64_t)b * T * a.ldkv + (int64_t)g * hd;
  load_tile<HD, BR>(Ks, a.k + kvo, a.ldkv, j0, T, hd);
  load_tile<HD, BR>(Vs, a.v + kvo, a.ldkv, j0, T, hd);
  dkv_load_item<HD>(a, Qs, dOs, Ls, Ds, b, g * rep, q0);
  cp_async_commit();
  float dk[DT][4], dv[DT][4];
  fa::zero_acc(dk);
  fa::zero_acc(dv);
  for (int it = 0; it < items; it++) {
    const int buf = it & 1, i0 = q0 + (it % nq) * BQ;
    if (it + 1 < items) {
      const int nb = buf ^ 1;
      dkv_load_item<HD>(a, Qs + nb * QB, dOs + nb * QB, Ls + nb * BQ, Ds + nb * BQ, b,
                        g * rep + (it + 1) / nq, q0 + ((it + 1) % nq) * BQ);
    }
    cp_async_commit();
    cp_async_wait<1>();
    fence_proxy_async();
    __syncthreads();
    const uint32_t qt = qa + buf * QB, dt = da + buf * QB;
    const float *Lt = Ls + buf * BQ, *Dt = Ds + buf * BQ;
    if (i0 + BQ - 1 >= g0) /* else every query of the tile precedes this warpgroup's keys */
      dkv_item<HD>(dk, dv, a, ka, va, qt, dt, 64 * wg, i0, wk0, Lt, Dt, 1.0f, BQ);
    __syncthreads();
  }
  fa::store_rows<DT>(a.dk + kvo, a.ldkv, dk, key, T, hd, a.scale, a.scale, true);
  fa::store_rows<DT>(a.dv + kvo, a.ldkv, dv, key, T, hd, 1.0f, 1.0f, true);
}

/* ---- backward fed by TMA ---------------------------------------------------------------------
 * The same per-tile work as the kernels above, with warpgroup 0 producing as in the forward:
 * the dQ kernel streams key/value tiles past fixed Q and dO tiles, the dKV kernel streams
 * (Q, dO) tiles of its items past fixed K and V tiles (lse and D read from global memory).
 * Every consumer thread waits for every tile before releasing it (each thread arrives: a
 * release by one thread of a warpgroup could let the stage refill, and its phase parity
 * turn over twice, before a slower warp of the same warpgroup saw the tile land). The tensor maps all have boxes of 64 rows. */
struct bwd_tmaps {
  fb_tmap q, k, v, dout;
};
constexpr int BWD_STAGES = 2;
template <int HD>
__host__ __device__ constexpr int dq_tma_smem_bytes() {
  return dq_smem_bytes<HD>() + (1 + 2 * BWD_STAGES) * 8;
}
template <int HD>
__host__ __device__ constexpr int dkv_tma_smem_bytes() {
  return 1024 + 2 * tile_bytes<BR, HD>() + 2 * BWD_STAGES * tile_bytes<shape<HD>::BQ, HD>() +
         (1 + 2 * BWD_STAGES) * 8;
}

/* Rows [r0, r0 + ROWS) of one head (ROWS a multiple of 64) into a swizzled tile: a box of
 * 64 rows x 64 columns per copy, reported to bar. */
template <int HD, int ROWS>
__device__ __forceinline__ void tma_tile(unsigned char *s, const fb_tmap *m, int head, int r0,
                                         int b, uint64_t *bar) {
#pragma unroll
  for (int c = 0; c < HD / 64; c++)
#pragma unroll
    for (int r = 0; r < ROWS; r += 64)
      tma_load_4d(s + c * ROWS * 128 + r * 128, m, c * 64, head, r0 + r, b, bar);
}

template <int HD>
__global__ void __launch_bounds__(NT + 128, 1)
    flash_attn_bwd_dq_tma_sm90_k(args a, const __grid_constant__ bwd_tmaps tm) {
  constexpr int DT = shape<HD>::DT, KB = tile_bytes<BC, HD>(), QB = tile_bytes<BR, HD>();
  FB_DECLARE_SMEM(smem_raw);
  unsigned char *Qs = align1024(smem_raw), *dOs = Qs + QB, *Ks = dOs + QB;
  unsigned char *Vs = Ks + BWD_STAGES * KB;
  uint64_t *bars = (uint64_t *)(Vs + BWD_STAGES * KB); /* Q and dO, full[], empty[] */
  uint64_t *full = bars + 1, *empty = bars + 1 + BWD_STAGES;
  const int T = a.T, H = a.H;
  const int tile = (int)gridDim.y - 1 - (int)blockIdx.y, i0 = tile * BR;
  const int b = a.b0 + (int)blockIdx.x / H, h = (int)blockIdx.x % H, g = h / (H / a.KVH);
  const int nkt = (min(T, i0 + BR) - 1) / BC + 1, wg = warpgroup();
  if (threadIdx.x == 0) {
    mbar_init(bars, 1);
    for (int st = 0; st < BWD_STAGES; st++) mbar_init(full + st, 1), mbar_init(empty + st, NT);
    mbar_init_fence();
  }
  __syncthreads();
  if (wg == 0) {
    setmaxnreg_dec<24>();
    if (threadIdx.x == 0) {
      mbar_arrive_tx(bars, 2 * QB);
      tma_tile<HD, BR>(Qs, &tm.q, h, i0, b, bars);
      tma_tile<HD, BR>(dOs, &tm.dout, h, i0, b, bars);
      for (int t = 0; t < nkt; t++) {
        const int st = t % BWD_STAGES;
        if (t >= BWD_STAGES) mbar_wait(empty + st, (t / BWD_STAGES - 1) & 1);
        mbar_arrive_tx(full + st, 2 * KB);
        tma_tile<HD, BC>(Ks + st * KB, &tm.k, g, t * BC, b, full + st);
        tma_tile<HD, BC>(Vs + st * KB, &tm.v, g, t * BC, b, full + st);
      }
    }
    return;
  }
  setmaxnreg_inc<240>();
  const uint32_t qa = smem_addr(Qs), da = smem_addr(dOs), ka = smem_addr(Ks),
                 va = smem_addr(Vs);
  const int cw = wg - 1, warp = (int)threadIdx.x / 32 - 4, lane = threadIdx.x % 32;
  const int g0 = i0 + 64 * cw, wr0 = i0 + warp * 16, row = wr0 + lane / 4;
  float dq[DT][4], D[2] = {0.0f, 0.0f}, L[2] = {0.0f, 0.0f};
  fa::zero_acc(dq);
  dq_rowstats(a, b, h, wr0, D, L);
  mbar_wait(bars, 0);
  for (int jt = 0; jt < nkt; jt++) {
    const int st = jt % BWD_STAGES, j0 = jt * BC;
    mbar_wait(full + st, (jt / BWD_STAGES) & 1);
    if (j0 <= g0 + 63) dq_tile<HD>(dq, a, qa, da, ka + st * KB, va + st * KB, 64 * cw, j0, wr0, D, L);
    mbar_arrive(empty + st);
  }
  uint16_t *dqg = a.dq + (int64_t)b * T * a.ldq + (int64_t)h * a.hd;
  fa::store_rows<DT>(dqg, a.ldq, dq, row, T, a.hd, a.scale, a.scale, true);
}

template <int HD>
__global__ void __launch_bounds__(NT + 128, 1)
    flash_attn_bwd_dkv_tma_sm90_k(args a, const __grid_constant__ bwd_tmaps tm) {
  constexpr int DT = shape<HD>::DT, BQ = shape<HD>::BQ, QB = tile_bytes<BQ, HD>();
  FB_DECLARE_SMEM(smem_raw);
  unsigned char *Ks = align1024(smem_raw), *Vs = Ks + tile_bytes<BR, HD>();
  unsigned char *Qs = Vs + tile_bytes<BR, HD>(), *dOs = Qs + BWD_STAGES * QB;
  uint64_t *bars = (uint64_t *)(dOs + BWD_STAGES * QB); /* K and V, full[], empty[] */
  uint64_t *full = bars + 1, *empty = bars + 1 + BWD_STAGES;
  const int T = a.T, H = a.H, rep = a.H / a.KVH;
  const int b = a.b0 + (int)blockIdx.x / a.KVH, g = (int)blockIdx.x % a.KVH;
  const int j0 = (int)blockIdx.y * BR, wg = warpgroup();
  const int q0 = j0 / BQ * BQ, nq = fa::tiles(T - q0, BQ), items = rep * nq;
  if (threadIdx.x == 0) {
    mbar_init(bars, 1);
    for (int st = 0; st < BWD_STAGES; st++) mbar_init(full + st, 1), mbar_init(empty + st, NT);
    mbar_init_fence();
  }
  __syncthreads();
  if (wg == 0) {
    setmaxnreg_dec<24>();
    if (threadIdx.x == 0) {
      mbar_arrive_tx(bars, 2 * tile_bytes<BR, HD>());
      tma_tile<HD, BR>(Ks, &tm.k, g, j0, b, bars);
      tma_tile<HD, BR>(Vs, &tm.v, g, j0, b, bars);
      for (int it = 0; it < items; it++) {
        const int st = it % BWD_STAGES, h = g * rep + it / nq, i0 = q0 + (it % nq) * BQ;
        if (it >= BWD_STAGES) mbar_wait(empty + st, (it / BWD_STAGES - 1) & 1);
        mbar_arrive_tx(full + st, 2 * QB);
        tma_tile<HD, BQ>(Qs + st * QB, &tm.q, h, i0, b, full + st);
        tma_tile<HD, BQ>(dOs + st * QB, &tm.dout, h, i0, b, full + st);
      }
    }
    return;
  }
  setmaxnreg_inc<240>();
  const uint32_t ka = smem_addr(Ks), va = smem_addr(Vs), qa = smem_addr(Qs), da = smem_addr(dOs);
  const int cw = wg - 1, warp = (int)threadIdx.x / 32 - 4, lane = threadIdx.x % 32;
  const int g0 = j0 + 64 * cw, wk0 = j0 + warp * 16, key = wk0 + lane / 4;
  float dk[DT][4], dv[DT][4];
  fa::zero_acc(dk);
  fa::zero_acc(dv);
  mbar_wait(bars, 0);
  for (int it = 0; it < items; it++) {
    const int st = it % BWD_STAGES, h = g * rep + it / nq, i0 = q0 + (it % nq) * BQ;
    mbar_wait(full + st, (it / BWD_STAGES) & 1);
    if (i0 + BQ - 1 >= g0)
      dkv_item<HD>(dk, dv, a, ka, va, qa + st * QB, da + st * QB, 64 * cw, i0, wk0,
                   a.lse + ((int64_t)b * H + h) * T + i0,
                   a.Dbuf + ((int64_t)(b - a.b0) * H + h) * T + i0, fa::LOG2E, T - i0);
    mbar_arrive(empty + st);
  }
  const int64_t kvo = (int64_t)b * T * a.ldkv + (int64_t)g * a.hd;
  fa::store_rows<DT>(a.dk + kvo, a.ldkv, dk, key, T, a.hd, a.scale, a.scale, true);
  fa::store_rows<DT>(a.dv + kvo, a.ldkv, dv, key, T, a.hd, 1.0f, 1.0f, true);
}

} /* namespace fa3 */
#endif

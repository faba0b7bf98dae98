/* The cuda attention entry points the kernel table references (fb_cuda_attention_fwd /
 * fb_cuda_attention_bwd), causal grouped-query, and the fp32 kernels behind them:
 *  - bf16 activations run the tensor-core kernels (flash_attention.cuh, launched from
 *    kernels_cuda_attention_flash.cu) for head dims up to 128;
 *  - fp32 activations run the kernels below: a straightforward fused kernel on CUDA cores (one
 *    warp per query or key row, online softmax), correct for any T and hd <= 256, kept for fp32
 *    runs that compare with the cpu bit for bit as far as fp32 allows.
 * Helpers and conventions: kernels_cuda.cuh. */
#include "kernels_cuda.cuh"

/* ==== attention =============================================================================
 * Tiled on shared memory, CUDA cores, fp32 accumulation. A block of ATT_WARPS warps owns
 * ATT_ROWS rows of one (batch, head) (ATT_RPW rows per warp); the other side streams through
 * shared memory in tiles of 32 rows, one row per lane, so a lane computes a whole dot product
 * over the head dim in float4 steps (no warp reduction per key) and the warp then broadcasts
 * the 32 weights (shuffles) to accumulate the lane's head-dim elements d = lane + 32e, each
 * element loaded once for all of the warp's rows.
 * Forward: block of query rows; key/value tiles 0..last query; online softmax per tile;
 * writes out and lse = m + log(sum exp(s - m)).
 * Backward: (1) block of query rows: D_i = dout_i . out_i (saved to scratch), dq_i =
 * scale * sum_j P_ij (dP_ij - D_i) k_j with P = exp(s - lse); (2) block of key rows (b, g):
 * query tiles from the block's first key to T, over the heads of KV group g in order, for
 * dk_j and dv_j. Every output is overwritten; no atomics, so results are deterministic. */
#define ATT_MAX_NPL 8                     /* hd <= 256 */
#define ATT_WARPS 4
#define ATT_RPW 8                         /* rows per warp */
#define ATT_ROWS (ATT_WARPS * ATT_RPW)    /* rows per block */
#define ATT_KT 32                         /* streamed tile: one row per lane */
#define ATT_FULL 0xffffffffu

/* Shared-memory row strides (floats): hq = hd rounded up to 4 (rows read whole by a warp, as
 * float4 broadcasts or lane-consecutive elements), hp = hq + 4 (rows read one per lane as
 * float4: 8 lanes of a quarter warp then start 4 banks apart). Elements past hd are zeros, so
 * the dot products run over hq in float4 steps. */
__host__ __device__ __forceinline__ int att_hq(int hd) { return (hd + 3) & ~3; }
__host__ __device__ __forceinline__ int att_hp(int hd) { return att_hq(hd) + 4; }

/* Rows [r0, r0 + n) of a [T, ld] matrix into s (row stride sld, fp32): rows at or past T and
 * columns past hd as zeros. */
template <typename E>
__device__ __forceinline__ void att_load(float *s, int sld, const E *x, int64_t base, int ld_,
                                         int r0, int n, int T_, int hd) {
  const int hq = att_hq(hd);
  for (int t = threadIdx.x; t < n * hq; t += blockDim.x) {
    int r = t / hq, d = t % hq, i = r0 + r;
    s[r * sld + d] = i < T_ && d < hd ? ld(x, base + (int64_t)i * ld_ + d) : 0.0f;
  }
}

__device__ __forceinline__ float dot4(float4 a, float4 b) {
  return a.x * b.x + a.y * b.y + a.z * b.z + a.w * b.w;
}

/* acc[r][e] += sum over the tile's 32 rows jj of w[r] (held by lane jj) * X[jj * ld + d],
 * d = lane + 32e: the weights broadcast by shuffles, each element of X loaded once for all the
 * warp's rows. Elements past hq are zeros in shared memory's padding, so they are skipped. */
template <int NPL>
__device__ __forceinline__ void att_bcast_acc(float (&acc)[ATT_RPW][NPL],
                                              const float (&w)[ATT_RPW], const float *X, int ld,
                                              int hq, int lane) {
  for (int jj = 0; jj < ATT_KT; jj++) {
    float x[NPL];
#pragma unroll
    for (int e = 0; e < NPL; e++) x[e] = lane + 32 * e < hq ? X[jj * ld + lane + 32 * e] : 0.0f;
#pragma unroll
    for (int r = 0; r < ATT_RPW; r++) {
      float wj = __shfl_sync(ATT_FULL, w[r], jj);
#pragma unroll
      for (int e = 0; e < NPL; e++) acc[r][e] += wj * x[e];
    }
  }
}

static size_t att_fwd_smem(int hd) {
  return sizeof(float) * ((size_t)ATT_ROWS * att_hq(hd) + (size_t)ATT_KT * att_hp(hd) +
                          (size_t)ATT_KT * att_hq(hd));
}
static size_t att_dq_smem(int hd) {
  return sizeof(float) * (2 * (size_t)ATT_ROWS * att_hq(hd) + 2 * (size_t)ATT_KT * att_hp(hd));
}
static size_t att_dkv_smem(int hd) {
  return sizeof(float) * (2 * (size_t)ATT_ROWS * att_hq(hd) + 2 * (size_t)ATT_KT * att_hp(hd) +
                          2 * ATT_KT);
}

template <typename E, int NPL>
__global__ void __launch_bounds__(32 * ATT_WARPS)
attn_fwd_k(E *out, float *lse, const E *q, const E *kk, const E *v, int T_, int H, int KVH,
           int hd, int ldq, int ldkv, float scale) {
  extern __shared__ float4 sm4[];
  const int hq = att_hq(hd), hp = att_hp(hd), h4 = hq / 4;
  float *Qs = (float *)sm4;                /* [ATT_ROWS][hq] */
  float *Ks = Qs + ATT_ROWS * hq;          /* [ATT_KT][hp] */
  float *Vs = Ks + ATT_KT * hp;            /* [ATT_KT][hq] */
  const int ntiles = (T_ + ATT_ROWS - 1) / ATT_ROWS;
  const int64_t bh = blockIdx.x / ntiles;
  const int tile = ntiles - 1 - (int)(blockIdx.x % ntiles); /* longest rows first */
  const int b = (int)(bh / H), h = (int)(bh % H), g = h / (H / KVH);
  const int i0 = tile * ATT_ROWS, warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  const int64_t kvb = (int64_t)b * T_ * ldkv + (int64_t)g * hd;
  att_load(Qs, hq, q, (int64_t)b * T_ * ldq + (int64_t)h * hd, ldq, i0, ATT_ROWS, T_, hd);
  float m[ATT_RPW], l[ATT_RPW], acc[ATT_RPW][NPL];
#pragma unroll
  for (int r = 0; r < ATT_RPW; r++) {
    m[r] = -INFINITY;
    l[r] = 0.0f;
#pragma unroll
    for (int e = 0; e < NPL; e++) acc[r][e] = 0.0f;
  }
  const float4 *qw = (const float4 *)(Qs + warp * ATT_RPW * hq);
  const float4 *kr = (const float4 *)(Ks + lane * hp);
  const int last = min(T_ - 1, i0 + ATT_ROWS - 1);
  for (int j0 = 0; j0 <= last; j0 += ATT_KT) {
    __syncthreads(); /* the previous tile is consumed */
    att_load(Ks, hp, kk, kvb, ldkv, j0, ATT_KT, T_, hd);
    att_load(Vs, hq, v, kvb, ldkv, j0, ATT_KT, T_, hd);
    __syncthreads();
    float p[ATT_RPW];
#pragma unroll
    for (int r = 0; r < ATT_RPW; r++) p[r] = 0.0f;
    for (int d4 = 0; d4 < h4; d4++) {
      float4 kd = kr[d4];
#pragma unroll
      for (int r = 0; r < ATT_RPW; r++) p[r] += dot4(qw[r * h4 + d4], kd);
    }
    const int j = j0 + lane;
#pragma unroll
    for (int r = 0; r < ATT_RPW; r++) {
      const int i = i0 + warp * ATT_RPW + r;
      /* the first tile holds key 0 <= i, so m is finite from then on */
      float sv = j <= i && j < T_ ? p[r] * scale : -INFINITY;
      float mn = fmaxf(m[r], warp_max(sv));
      float corr = expf(m[r] - mn);
      p[r] = expf(sv - mn);
      l[r] = l[r] * corr + warp_sum(p[r]);
      m[r] = mn;
#pragma unroll
      for (int e = 0; e < NPL; e++) acc[r][e] *= corr;
    }
    att_bcast_acc<NPL>(acc, p, Vs, hq, hq, lane);
  }
#pragma unroll
  for (int r = 0; r < ATT_RPW; r++) {
    const int i = i0 + warp * ATT_RPW + r;
    if (i >= T_) continue;
    const int64_t oo = ((int64_t)b * T_ + i) * ((int64_t)H * hd) + (int64_t)h * hd;
    float inv = 1.0f / l[r];
#pragma unroll
    for (int e = 0; e < NPL; e++) {
      int d = lane + 32 * e;
      if (d < hd) st(out, oo + d, acc[r][e] * inv);
    }
    if (lane == 0) lse[((int64_t)b * H + h) * T_ + i] = m[r] + logf(l[r]);
  }
}

/* Rows of batches [b0, b0 + nb); Dbuf[(b - b0) * H * T + h * T + i]. */
template <typename E, int NPL>
__global__ void __launch_bounds__(32 * ATT_WARPS)
attn_bwd_dq_k(E *dq, float *Dbuf, const E *dout, const E *q, const E *kk, const E *v,
              const E *out, const float *lse, int b0, int T_, int H, int KVH, int hd, int ldq,
              int ldkv, float scale) {
  extern __shared__ float4 sm4[];
  const int hq = att_hq(hd), hp = att_hp(hd), h4 = hq / 4;
  float *Qs = (float *)sm4;                /* [ATT_ROWS][hq] */
  float *Os = Qs + ATT_ROWS * hq;          /* dout rows, [ATT_ROWS][hq] */
  float *Ks = Os + ATT_ROWS * hq;          /* [ATT_KT][hp] */
  float *Vs = Ks + ATT_KT * hp;            /* [ATT_KT][hp] */
  const int ntiles = (T_ + ATT_ROWS - 1) / ATT_ROWS;
  const int64_t bh = blockIdx.x / ntiles;
  const int tile = ntiles - 1 - (int)(blockIdx.x % ntiles);
  const int bl = (int)(bh / H), h = (int)(bh % H), b = b0 + bl, g = h / (H / KVH);
  const int i0 = tile * ATT_ROWS, warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  const int64_t kvb = (int64_t)b * T_ * ldkv + (int64_t)g * hd;
  const int64_t ob = (int64_t)b * T_ * H * hd + (int64_t)h * hd;
  att_load(Qs, hq, q, (int64_t)b * T_ * ldq + (int64_t)h * hd, ldq, i0, ATT_ROWS, T_, hd);
  att_load(Os, hq, dout, ob, H * hd, i0, ATT_ROWS, T_, hd);
  __syncthreads();
  float D[ATT_RPW], L[ATT_RPW], acc[ATT_RPW][NPL];
#pragma unroll
  for (int r = 0; r < ATT_RPW; r++) {
    const int row = warp * ATT_RPW + r, i = i0 + row;
    float dp = 0.0f;
    if (i < T_)
      for (int d = lane; d < hd; d += 32)
        dp += Os[row * hq + d] * ld(out, ob + (int64_t)i * H * hd + d);
    D[r] = warp_sum(dp);
    L[r] = i < T_ ? lse[((int64_t)b * H + h) * T_ + i] : 0.0f;
    if (lane == 0 && i < T_) Dbuf[((int64_t)bl * H + h) * T_ + i] = D[r];
#pragma unroll
    for (int e = 0; e < NPL; e++) acc[r][e] = 0.0f;
  }
  const float4 *qw = (const float4 *)(Qs + warp * ATT_RPW * hq);
  const float4 *ow = (const float4 *)(Os + warp * ATT_RPW * hq);
  const float4 *kr = (const float4 *)(Ks + lane * hp), *vr = (const float4 *)(Vs + lane * hp);
  const int last = min(T_ - 1, i0 + ATT_ROWS - 1);
  for (int j0 = 0; j0 <= last; j0 += ATT_KT) {
    __syncthreads();
    att_load(Ks, hp, kk, kvb, ldkv, j0, ATT_KT, T_, hd);
    att_load(Vs, hp, v, kvb, ldkv, j0, ATT_KT, T_, hd);
    __syncthreads();
    float s[ATT_RPW], dp[ATT_RPW];
#pragma unroll
    for (int r = 0; r < ATT_RPW; r++) s[r] = dp[r] = 0.0f;
    for (int d4 = 0; d4 < h4; d4++) {
      float4 kd = kr[d4], vd = vr[d4];
#pragma unroll
      for (int r = 0; r < ATT_RPW; r++) {
        s[r] += dot4(qw[r * h4 + d4], kd);
        dp[r] += dot4(ow[r * h4 + d4], vd);
      }
    }
    const int j = j0 + lane;
#pragma unroll
    for (int r = 0; r < ATT_RPW; r++) {
      const int i = i0 + warp * ATT_RPW + r;
      float p = j <= i && j < T_ ? expf(s[r] * scale - L[r]) : 0.0f;
      s[r] = p * (dp[r] - D[r]) * scale; /* ds */
    }
    att_bcast_acc<NPL>(acc, s, Ks, hp, hq, lane); /* s holds ds */
  }
#pragma unroll
  for (int r = 0; r < ATT_RPW; r++) {
    const int i = i0 + warp * ATT_RPW + r;
    if (i >= T_) continue;
    const int64_t qo = ((int64_t)b * T_ + i) * ldq + (int64_t)h * hd;
#pragma unroll
    for (int e = 0; e < NPL; e++) {
      int d = lane + 32 * e;
      if (d < hd) st(dq, qo + d, acc[r][e]);
    }
  }
}

template <typename E, int NPL>
__global__ void __launch_bounds__(32 * ATT_WARPS)
attn_bwd_dkv_k(E *dk, E *dv, const float *Dbuf, const E *dout, const E *q, const E *kk,
               const E *v, const float *lse, int b0, int T_, int H, int KVH, int hd, int ldq,
               int ldkv, float scale) {
  extern __shared__ float4 sm4[];
  const int hq = att_hq(hd), hp = att_hp(hd), h4 = hq / 4;
  float *Ks = (float *)sm4;                /* this block's key rows, [ATT_ROWS][hq] */
  float *Vs = Ks + ATT_ROWS * hq;          /* [ATT_ROWS][hq] */
  float *Qs = Vs + ATT_ROWS * hq;          /* [ATT_KT][hp] */
  float *Os = Qs + ATT_KT * hp;            /* dout rows, [ATT_KT][hp] */
  float *Ls = Os + ATT_KT * hp;            /* [ATT_KT] */
  float *Ds = Ls + ATT_KT;                 /* [ATT_KT] */
  const int ntiles = (T_ + ATT_ROWS - 1) / ATT_ROWS;
  const int64_t bg = blockIdx.x / ntiles;
  const int tile = (int)(blockIdx.x % ntiles); /* first keys see the most queries: first */
  const int bl = (int)(bg / KVH), g = (int)(bg % KVH), b = b0 + bl, rep = H / KVH;
  const int j0 = tile * ATT_ROWS, warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  const int64_t kvb = (int64_t)b * T_ * ldkv + (int64_t)g * hd;
  att_load(Ks, hq, kk, kvb, ldkv, j0, ATT_ROWS, T_, hd);
  att_load(Vs, hq, v, kvb, ldkv, j0, ATT_ROWS, T_, hd);
  float ak[ATT_RPW][NPL], av[ATT_RPW][NPL];
#pragma unroll
  for (int r = 0; r < ATT_RPW; r++)
#pragma unroll
    for (int e = 0; e < NPL; e++) ak[r][e] = av[r][e] = 0.0f;
  const float4 *kw = (const float4 *)(Ks + warp * ATT_RPW * hq);
  const float4 *vw = (const float4 *)(Vs + warp * ATT_RPW * hq);
  const float4 *qr = (const float4 *)(Qs + lane * hp), *orow = (const float4 *)(Os + lane * hp);
  for (int h = g * rep; h < (g + 1) * rep; h++) {
    const float *Lh = lse + ((int64_t)b * H + h) * T_;
    const float *Dh = Dbuf + ((int64_t)bl * H + h) * T_;
    for (int i0 = j0 - j0 % ATT_KT; i0 < T_; i0 += ATT_KT) {
      __syncthreads();
      att_load(Qs, hp, q, (int64_t)b * T_ * ldq + (int64_t)h * hd, ldq, i0, ATT_KT, T_, hd);
      att_load(Os, hp, dout, (int64_t)b * T_ * H * hd + (int64_t)h * hd, H * hd, i0, ATT_KT, T_,
               hd);
      if (threadIdx.x < ATT_KT) {
        int i = i0 + threadIdx.x;
        Ls[threadIdx.x] = i < T_ ? Lh[i] : 0.0f;
        Ds[threadIdx.x] = i < T_ ? Dh[i] : 0.0f;
      }
      __syncthreads();
      float s[ATT_RPW], dp[ATT_RPW];
#pragma unroll
      for (int r = 0; r < ATT_RPW; r++) s[r] = dp[r] = 0.0f;
      for (int d4 = 0; d4 < h4; d4++) {
        float4 qd = qr[d4], od = orow[d4];
#pragma unroll
        for (int r = 0; r < ATT_RPW; r++) {
          s[r] += dot4(qd, kw[r * h4 + d4]);
          dp[r] += dot4(od, vw[r * h4 + d4]);
        }
      }
      const int i = i0 + lane;
#pragma unroll
      for (int r = 0; r < ATT_RPW; r++) {
        const int j = j0 + warp * ATT_RPW + r;
        float p = i >= j && i < T_ && j < T_ ? expf(s[r] * scale - Ls[lane]) : 0.0f;
        s[r] = p * (dp[r] - Ds[lane]) * scale; /* ds */
        dp[r] = p;
      }
      for (int ii = 0; ii < ATT_KT; ii++) {
        float qv[NPL], ov[NPL];
#pragma unroll
        for (int e = 0; e < NPL; e++) {
          int d = lane + 32 * e;
          qv[e] = d < hq ? Qs[ii * hp + d] : 0.0f;
          ov[e] = d < hq ? Os[ii * hp + d] : 0.0f;
        }
#pragma unroll
        for (int r = 0; r < ATT_RPW; r++) {
          float dsi = __shfl_sync(ATT_FULL, s[r], ii), pi = __shfl_sync(ATT_FULL, dp[r], ii);
#pragma unroll
          for (int e = 0; e < NPL; e++) {
            ak[r][e] += dsi * qv[e];
            av[r][e] += pi * ov[e];
          }
        }
      }
    }
  }
#pragma unroll
  for (int r = 0; r < ATT_RPW; r++) {
    const int j = j0 + warp * ATT_RPW + r;
    if (j >= T_) continue;
    const int64_t ko = ((int64_t)b * T_ + j) * ldkv + (int64_t)g * hd;
#pragma unroll
    for (int e = 0; e < NPL; e++) {
      int d = lane + 32 * e;
      if (d < hd) {
        st(dk, ko + d, ak[r][e]);
        st(dv, ko + d, av[r][e]);
      }
    }
  }
}

static fb_status attn_check(const fb_kctx *k, const char *op, int H, int KVH, int hd) {
  if (hd < 1 || hd > 32 * ATT_MAX_NPL || KVH < 1 || H % KVH != 0)
    return FB_ERR(FB_EUNSUPPORTED, "rank %d: cuda %s: head dim %d (allowed 1..%d) or heads "
                  "%d/%d (H must be a multiple of KVH) not supported", k->dev->rank, op, hd,
                  32 * ATT_MAX_NPL, H, KVH);
  return FB_OK;
}

/* Blocks for rows(count) x ceil(T / ATT_ROWS) tiles; shared memory above 48 KiB is opted into
 * per kernel (a launch asking more than the device allows fails in launch_check). */
static inline unsigned att_grid(int64_t count, int T) {
  return (unsigned)(count * ((T + ATT_ROWS - 1) / ATT_ROWS));
}
template <typename K>
static void att_smem_optin(K kernel, size_t bytes) {
  if (bytes > ((size_t)48 << 10))
    (void)cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, (int)bytes);
}

template <typename E, int NPL>
static void attn_fwd_npl(const fb_kctx *k, void *out, float *lse, const void *q, const void *kk,
                         const void *v, int B, int T, int H, int KVH, int hd, int ldq,
                         int ldkv) {
  size_t sm = att_fwd_smem(hd);
  att_smem_optin(attn_fwd_k<E, NPL>, sm);
  attn_fwd_k<E, NPL><<<att_grid((int64_t)B * H, T), 32 * ATT_WARPS, sm, k->s->s>>>(
      (E *)out, lse, (const E *)q, (const E *)kk, (const E *)v, T, H, KVH, hd, ldq, ldkv,
      1.0f / sqrtf((float)hd));
}
template <typename E>
static void attn_fwd_launch(const fb_kctx *k, void *out, float *lse, const void *q,
                            const void *kk, const void *v, int B, int T, int H, int KVH, int hd,
                            int ldq, int ldkv) {
  int npl = (hd + 31) / 32;
  if (npl <= 1)
    attn_fwd_npl<E, 1>(k, out, lse, q, kk, v, B, T, H, KVH, hd, ldq, ldkv);
  else if (npl <= 2)
    attn_fwd_npl<E, 2>(k, out, lse, q, kk, v, B, T, H, KVH, hd, ldq, ldkv);
  else if (npl <= 4)
    attn_fwd_npl<E, 4>(k, out, lse, q, kk, v, B, T, H, KVH, hd, ldq, ldkv);
  else
    attn_fwd_npl<E, 8>(k, out, lse, q, kk, v, B, T, H, KVH, hd, ldq, ldkv);
}

template <typename E, int NPL>
static void attn_bwd_npl(const fb_kctx *k, void *dq, void *dk, void *dv, const void *dout,
                         const void *q, const void *kk, const void *v, const void *out,
                         const float *lse, int B, int T, int H, int KVH, int hd, int ldq,
                         int ldkv, int bchunk) {
  float *Dbuf = (float *)k->s->scratch;
  float scale = 1.0f / sqrtf((float)hd);
  size_t smq = att_dq_smem(hd), smkv = att_dkv_smem(hd);
  att_smem_optin(attn_bwd_dq_k<E, NPL>, smq);
  att_smem_optin(attn_bwd_dkv_k<E, NPL>, smkv);
  for (int b0 = 0; b0 < B; b0 += bchunk) {
    int nb = B - b0 < bchunk ? B - b0 : bchunk;
    attn_bwd_dq_k<E, NPL><<<att_grid((int64_t)nb * H, T), 32 * ATT_WARPS, smq, k->s->s>>>(
        (E *)dq, Dbuf, (const E *)dout, (const E *)q, (const E *)kk, (const E *)v,
        (const E *)out, lse, b0, T, H, KVH, hd, ldq, ldkv, scale);
    attn_bwd_dkv_k<E, NPL><<<att_grid((int64_t)nb * KVH, T), 32 * ATT_WARPS, smkv, k->s->s>>>(
        (E *)dk, (E *)dv, Dbuf, (const E *)dout, (const E *)q, (const E *)kk, (const E *)v, lse,
        b0, T, H, KVH, hd, ldq, ldkv, scale);
  }
}
template <typename E>
static void attn_bwd_launch(const fb_kctx *k, void *dq, void *dk, void *dv, const void *dout,
                            const void *q, const void *kk, const void *v, const void *out,
                            const float *lse, int B, int T, int H, int KVH, int hd, int ldq,
                            int ldkv, int bchunk) {
  int npl = (hd + 31) / 32;
  if (npl <= 1)
    attn_bwd_npl<E, 1>(k, dq, dk, dv, dout, q, kk, v, out, lse, B, T, H, KVH, hd, ldq, ldkv,
                       bchunk);
  else if (npl <= 2)
    attn_bwd_npl<E, 2>(k, dq, dk, dv, dout, q, kk, v, out, lse, B, T, H, KVH, hd, ldq, ldkv,
                       bchunk);
  else if (npl <= 4)
    attn_bwd_npl<E, 4>(k, dq, dk, dv, dout, q, kk, v, out, lse, B, T, H, KVH, hd, ldq, ldkv,
                       bchunk);
  else
    attn_bwd_npl<E, 8>(k, dq, dk, dv, dout, q, kk, v, out, lse, B, T, H, KVH, hd, ldq, ldkv,
                       bchunk);
}

/* The bf16 path's head-dim limit and the checks every path shares. */
#define FLASH_MAX_HD 128

static fb_status attn_prep(const fb_kctx *k, const char *op, int H, int KVH, int hd) {
  FB_TRY(attn_check(k, op, H, KVH, hd));
  FB_TRY(prologue(k));
  if (k->act == FB_BF16 && hd > FLASH_MAX_HD)
    return FB_ERR(FB_EUNSUPPORTED, "rank %d: cuda %s: bf16 attention runs head dims up to %d "
                  "(this model has %d); --dtype fp32 runs up to %d", k->dev->rank, op,
                  FLASH_MAX_HD, hd, 32 * ATT_MAX_NPL);
  if (k->act != FB_BF16 && k->act != FB_F32) return bad_dtype(k, op);
  return FB_OK;
}

fb_status fb_cuda_attention_fwd(const fb_kctx *k, void *out, float *lse, const void *q,
                                const void *kk, const void *v, int B, int T, int H, int KVH,
                                int hd, int ldq, int ldkv, void *scratch) {
  FB_TRY(attn_prep(k, "attention_fwd", H, KVH, hd));
  if ((int64_t)B * H * T == 0) return FB_OK;
  if (k->act == FB_BF16)
    return fb_cuda_flash_attention_fwd(k, out, lse, q, kk, v, B, T, H, KVH, hd, ldq, ldkv);
  attn_fwd_launch<float>(k, out, lse, q, kk, v, B, T, H, KVH, hd, ldq, ldkv);
  return launch_check(k, "attention_fwd");
}

fb_status fb_cuda_attention_bwd(const fb_kctx *k, void *dq, void *dk, void *dv,
                                const void *dout, const void *q, const void *kk, const void *v,
                                const void *out, const float *lse, int B, int T, int H, int KVH,
                                int hd, int ldq, int ldkv, void *scratch) {
  FB_TRY(attn_prep(k, "attention_bwd", H, KVH, hd));
  if ((int64_t)B * H * T == 0) return FB_OK;
  size_t per_b = (size_t)H * (size_t)T, cap = FB_CUDA_SCRATCH_BYTES / sizeof(float);
  if (per_b > cap)
    return FB_ERR(FB_EUNSUPPORTED, "rank %d: cuda attention_bwd: H*T = %zu exceeds the kernel "
                  "scratch (%zu)", k->dev->rank, per_b, cap);
  int bchunk = (int)(cap / per_b < (size_t)B ? cap / per_b : (size_t)B);
  if (k->act == FB_BF16)
    return fb_cuda_flash_attention_bwd(k, dq, dk, dv, dout, q, kk, v, out, lse, B, T, H, KVH,
                                       hd, ldq, ldkv, bchunk);
  attn_bwd_launch<float>(k, dq, dk, dv, dout, q, kk, v, out, lse, B, T, H, KVH, hd, ldq, ldkv,
                         bchunk);
  return launch_check(k, "attention_bwd");
}

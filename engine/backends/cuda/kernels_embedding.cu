/* The cuda kernels of the token (and position) embedding: encoder_fwd gathers rows of wte and
 * wpe; encoder_bwd adds dout into them in token order (deterministic, one rounding per
 * element). Helpers and conventions: kernels.cuh. */
#include "kernels.cuh"

/* ==== encoder ================================================================================ */
template <typename E>
__global__ void encoder_fwd_k(E *out, const int32_t *tok, const E *wte, const E *wpe, int T_,
                              int C, int64_t N) {
  GRID_STRIDE(i, N * C) {
    int64_t n = i / C;
    int c = (int)(i % C);
    float x = ld(wte, (int64_t)tok[n] * C + c);
    if (wpe) x += ld(wpe, (int64_t)(n % T_) * C + c);
    st(out, i, x);
  }
}

/* dwte: one block per token position n whose token t = tok[n] does not occur earlier (the
 * first occurrence owns row t; later occurrences exit after a scan of tok[0..n)). The block
 * walks tok[n..N) in chunks of its size, compacts the positions holding t in token order
 * (warp ballots, so the order is exactly the token order), and each thread adds those rows of
 * dout for its columns into fp32 registers starting from dwte's current value. dwte is written
 * once per element: a single rounding to bf16 however many tokens share a row, and the sum is
 * the cpu kernel's (dwte + d_first + ... + d_last in token order), so the result is
 * deterministic and matches the cpu in fp32. Columns are processed ENC_COLS_PER_THREAD per
 * thread per pass (more passes for wider rows). */
#define ENC_THREADS 256
#define ENC_COLS_PER_THREAD 8
template <typename E>
__global__ void __launch_bounds__(ENC_THREADS)
encoder_bwd_wte_k(E *dwte, const E *dout, const int32_t *tok, int64_t N, int C) {
  __shared__ int64_t pos[ENC_THREADS];
  __shared__ int warp_base[ENC_THREADS / 32 + 1];
  const int tid = threadIdx.x, lane = tid & 31, warp = tid >> 5;
  for (int64_t n = blockIdx.x; n < N; n += gridDim.x) {
    const int32_t t = tok[n];
    /* first occurrence? */
    int seen = 0;
    for (int64_t m = tid; m < n && !seen; m += ENC_THREADS) seen = tok[m] == t;
    if (__syncthreads_or(seen)) continue;
    const int64_t row = (int64_t)t * C;
    for (int c0 = 0; c0 < C; c0 += ENC_THREADS * ENC_COLS_PER_THREAD) {
      float acc[ENC_COLS_PER_THREAD];
#pragma unroll
      for (int j = 0; j < ENC_COLS_PER_THREAD; j++) {
        int c = c0 + j * ENC_THREADS + tid;
        acc[j] = c < C ? ld(dwte, row + c) : 0.0f;
      }
      for (int64_t m0 = n; m0 < N; m0 += ENC_THREADS) {
        const int64_t m = m0 + tid;
        const bool hit = m < N && tok[m] == t;
        const unsigned ball = __ballot_sync(0xffffffffu, hit);
        if (lane == 0) warp_base[warp] = __popc(ball);
        __syncthreads();
        if (tid == 0) { /* exclusive prefix over the warps, in warp order */
          int sum = 0;
          for (int w = 0; w < ENC_THREADS / 32; w++) {
            int k = warp_base[w];
            warp_base[w] = sum;
            sum += k;
          }
          warp_base[ENC_THREADS / 32] = sum;
        }
        __syncthreads();
        if (hit) pos[warp_base[warp] + __popc(ball & ((1u << lane) - 1u))] = m;
        __syncthreads();
        const int hits = warp_base[ENC_THREADS / 32];
        for (int h = 0; h < hits; h++) {
          const int64_t src = pos[h] * C;
#pragma unroll
          for (int j = 0; j < ENC_COLS_PER_THREAD; j++) {
            int c = c0 + j * ENC_THREADS + tid;
            if (c < C) acc[j] += ld(dout, src + c);
          }
        }
        __syncthreads(); /* pos and warp_base are rewritten by the next chunk */
      }
#pragma unroll
      for (int j = 0; j < ENC_COLS_PER_THREAD; j++) {
        int c = c0 + j * ENC_THREADS + tid;
        if (c < C) st(dwte, row + c, acc[j]);
      }
    }
  }
}
template <typename E>
__global__ void encoder_bwd_wpe_k(E *dwpe, const E *dout, int B, int T_, int C) {
  GRID_STRIDE(i, (int64_t)T_ * C) {
    int64_t t = i / C, c = i % C;
    float s = ld(dwpe, i);
    for (int b = 0; b < B; b++) s += ld(dout, ((int64_t)b * T_ + t) * C + c);
    st(dwpe, i, s);
  }
}

template <typename E>
static void encoder_fwd_launch(cudaStream_t s, void *out, const int32_t *tok, const void *wte,
                               const void *wpe, int T_, int C, int64_t N) {
  encoder_fwd_k<E><<<grid_for(N * C, 256), 256, 0, s>>>((E *)out, tok, (const E *)wte,
                                                         (const E *)wpe, T_, C, N);
}
template <typename E>
static void encoder_bwd_launch(cudaStream_t s, void *dwte, void *dwpe, const void *dout,
                               const int32_t *tok, int B, int T_, int C) {
  int64_t N = (int64_t)B * T_;
  unsigned blocks = (unsigned)(N < 65535LL * 16 ? N : 65535LL * 16); /* grid-stride over n */
  encoder_bwd_wte_k<E><<<blocks, ENC_THREADS, 0, s>>>((E *)dwte, (const E *)dout, tok, N, C);
  if (dwpe)
    encoder_bwd_wpe_k<E><<<grid_for((int64_t)T_ * C, 256), 256, 0, s>>>((E *)dwpe,
                                                                        (const E *)dout, B, T_, C);
}

fb_status fb_cuda_encoder_fwd(const fb_kctx *k, void *out, const int32_t *tok, const void *wte,
                               const void *wpe, int B, int T, int C) {
  if ((int64_t)B * T * C == 0) return FB_OK;
  DISPATCH(k, "encoder_fwd", encoder_fwd_launch, k->s->s, out, tok, wte, wpe, T, C,
           (int64_t)B * T);
}

fb_status fb_cuda_encoder_bwd(const fb_kctx *k, void *dwte, void *dwpe, const void *dout,
                               const int32_t *tok, int B, int T, int C) {
  if ((int64_t)B * T * C == 0) return FB_OK;
  DISPATCH(k, "encoder_bwd", encoder_bwd_launch, k->s->s, dwte, dwpe, dout, tok, B, T, C);
}

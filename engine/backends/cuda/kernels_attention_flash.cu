/* Launchers of the tensor-core attention kernels (flash_attention.cuh) for bf16 activations:
 * the head dim picks the tile width (64 for hd <= 64, 128 for hd <= 128), four warps a block,
 * shared memory opted into per launch (above 48 KiB; the attribute is per device and cheap to
 * set again). The backward keeps D = dO . O in the stream's scratch, so it runs over as many
 * batches at a time as the scratch holds. On a compute capability 9.0 device (H100, H200)
 * with 16-byte aligned rows the sm_90a warpgroup kernels (kernels_attention_sm90.cu) run
 * instead, unless FSDPB_ATTN_SM90=0 (for comparing the two on one GPU). This file is
 * compiled for sm_80 (SASS, and PTX that later GPUs compile at load) and no other
 * architecture. kernels_attention.cu decides when these run; this file does not handle fp32
 * or head dims above 128. */
#include <stdlib.h>

#include "flash_attention.cuh"
#include "kernels.cuh"

fb_status fb_cuda_flash_attention_sm90_fwd(const fb_kctx *k, const fa::args &a);
fb_status fb_cuda_flash_attention_sm90_bwd(const fb_kctx *k, const fa::args &a, int bchunk);

namespace {

template <typename K>
fb_status smem_optin(const fb_kctx *k, K kernel, int bytes, const char *what) {
  if (bytes <= (48 << 10)) return FB_OK;
  cudaError_t e = cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, bytes);
  if (e == cudaSuccess) return FB_OK;
  return FB_ERR(FB_EDEVICE, "rank %d: cuda %s: %d bytes of shared memory a block: %s",
                k->dev->rank, what, bytes, cudaGetErrorString(e));
}

fa::args make_args(int B, int T, int H, int KVH, int hd, int ldq, int ldkv) {
  fa::args a{};
  a.B = B, a.T = T, a.H = H, a.KVH = KVH, a.hd = hd, a.ldq = ldq, a.ldkv = ldkv;
  a.scale = 1.0f / sqrtf((float)hd);
  a.scale2 = a.scale * fa::LOG2E;
  return a;
}

constexpr int WARPS = 4;

/* Whether the sm_90a kernels run: a 9.0 device, the 16-byte path, not switched off. */
bool use_sm90(const fa::args &a) {
  const char *env = getenv("FSDPB_ATTN_SM90");
  if (!a.vec || (env && env[0] == '0')) return false;
  int dev = 0, major = 0, minor = 0;
  if (cudaGetDevice(&dev) != cudaSuccess ||
      cudaDeviceGetAttribute(&major, cudaDevAttrComputeCapabilityMajor, dev) != cudaSuccess ||
      cudaDeviceGetAttribute(&minor, cudaDevAttrComputeCapabilityMinor, dev) != cudaSuccess)
    return false;
  return major == 9 && minor == 0;
}

template <int HD>
fb_status fwd(const fb_kctx *k, const fa::args &a) {
  constexpr int sm = fa::fwd_smem_bytes<HD, WARPS>();
  FB_TRY(smem_optin(k, fa::flash_attn_fwd_k<HD, WARPS>, sm, "attention_fwd"));
  const dim3 grid((unsigned)(a.B * a.H), (unsigned)fa::tiles(a.T, 16 * WARPS));
  fa::flash_attn_fwd_k<HD, WARPS><<<grid, 32 * WARPS, sm, k->s->s>>>(a);
  return launch_check(k, "attention_fwd (tensor cores)");
}

template <int HD>
fb_status bwd(const fb_kctx *k, fa::args a, int bchunk) {
  constexpr int smq = fa::dq_smem_bytes<HD, WARPS>(), smkv = fa::dkv_smem_bytes<HD, WARPS>();
  FB_TRY(smem_optin(k, fa::flash_attn_bwd_dq_k<HD, WARPS>, smq, "attention_bwd"));
  FB_TRY(smem_optin(k, fa::flash_attn_bwd_dkv_k<HD, WARPS>, smkv, "attention_bwd"));
  const unsigned ty = (unsigned)fa::tiles(a.T, 16 * WARPS);
  for (int b0 = 0; b0 < a.B; b0 += bchunk) {
    const int nb = a.B - b0 < bchunk ? a.B - b0 : bchunk;
    a.b0 = b0;
    fa::flash_attn_bwd_dq_k<HD, WARPS><<<dim3((unsigned)(nb * a.H), ty), 32 * WARPS, smq,
                                          k->s->s>>>(a);
    fa::flash_attn_bwd_dkv_k<HD, WARPS><<<dim3((unsigned)(nb * a.KVH), ty), 32 * WARPS, smkv,
                                           k->s->s>>>(a);
  }
  return launch_check(k, "attention_bwd (tensor cores)");
}

} /* namespace */

fb_status fb_cuda_flash_attention_fwd(const fb_kctx *k, void *out, float *lse, const void *q,
                                      const void *kk, const void *v, int B, int T, int H,
                                      int KVH, int hd, int ldq, int ldkv) {
  fa::args a = make_args(B, T, H, KVH, hd, ldq, ldkv);
  a.q = (const uint16_t *)q, a.k = (const uint16_t *)kk, a.v = (const uint16_t *)v;
  a.o = (uint16_t *)out, a.lse = lse;
  a.vec = fa::can_vec(a);
  if (use_sm90(a)) return fb_cuda_flash_attention_sm90_fwd(k, a);
  return hd <= 64 ? fwd<64>(k, a) : fwd<128>(k, a);
}

fb_status fb_cuda_flash_attention_bwd(const fb_kctx *k, void *dq, void *dk, void *dv,
                                      const void *dout, const void *q, const void *kk,
                                      const void *v, const void *out, const float *lse, int B,
                                      int T, int H, int KVH, int hd, int ldq, int ldkv,
                                      int bchunk) {
  fa::args a = make_args(B, T, H, KVH, hd, ldq, ldkv);
  a.q = (const uint16_t *)q, a.k = (const uint16_t *)kk, a.v = (const uint16_t *)v;
  a.out = (const uint16_t *)out, a.dout = (const uint16_t *)dout;
  a.dq = (uint16_t *)dq, a.dk = (uint16_t *)dk, a.dv = (uint16_t *)dv;
  a.lse = (float *)lse, a.Dbuf = (float *)k->s->scratch;
  a.vec = fa::can_vec(a);
  if (use_sm90(a)) return fb_cuda_flash_attention_sm90_bwd(k, a, bchunk);
  return hd <= 64 ? bwd<64>(k, a, bchunk) : bwd<128>(k, a, bchunk);
}

/* Launchers of the sm_90a attention kernels (flash_attention_sm90.cuh, warpgroup MMA) for bf16
 * activations: hd <= 64 runs the 64-column tiles, hd <= 128 the 128-column ones; two
 * warpgroups a block; shared memory opted into per launch. This file is compiled for sm_90a
 * only (CMakeLists.txt: its own object library), so its kernels exist in no other
 * architecture's code; kernels_attention_flash.cu calls these on a compute capability 9.0
 * device when the 16-byte path applies, else runs the sm_80 kernels. */
#include "flash_attention_sm90.cuh"
#include "kernels.cuh"

namespace {

template <typename K>
fb_status smem_optin(const fb_kctx *k, K kernel, int bytes) {
  cudaError_t e = cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, bytes);
  if (e == cudaSuccess) return FB_OK;
  return FB_ERR(FB_EDEVICE, "rank %d: cuda attention (sm_90a): %d bytes of shared memory a "
                "block: %s", k->dev->rank, bytes, cudaGetErrorString(e));
}

template <int HD>
fb_status fwd(const fb_kctx *k, const fa::args &a) {
  constexpr int sm = fa3::fwd_smem_bytes<HD>();
  FB_TRY(smem_optin(k, fa3::flash_attn_fwd_sm90_k<HD>, sm));
  const dim3 grid((unsigned)(a.B * a.H), (unsigned)fa::tiles(a.T, fa3::BR));
  fa3::flash_attn_fwd_sm90_k<HD><<<grid, fa3::NT, sm, k->s->s>>>(a);
  return launch_check(k, "attention_fwd (sm_90a wgmma)");
}

template <int HD>
fb_status bwd(const fb_kctx *k, fa::args a, int bchunk) {
  constexpr int smq = fa3::dq_smem_bytes<HD>(), smkv = fa3::dkv_smem_bytes<HD>();
  FB_TRY(smem_optin(k, fa3::flash_attn_bwd_dq_sm90_k<HD>, smq));
  FB_TRY(smem_optin(k, fa3::flash_attn_bwd_dkv_sm90_k<HD>, smkv));
  const unsigned ty = (unsigned)fa::tiles(a.T, fa3::BR);
  for (int b0 = 0; b0 < a.B; b0 += bchunk) {
    const int nb = a.B - b0 < bchunk ? a.B - b0 : bchunk;
    a.b0 = b0;
    fa3::flash_attn_bwd_dq_sm90_k<HD><<<dim3((unsigned)(nb * a.H), ty), fa3::NT, smq,
                                        k->s->s>>>(a);
    fa3::flash_attn_bwd_dkv_sm90_k<HD><<<dim3((unsigned)(nb * a.KVH), ty), fa3::NT, smkv,
                                         k->s->s>>>(a);
  }
  return launch_check(k, "attention_bwd (sm_90a wgmma)");
}

} /* namespace */

fb_status fb_cuda_flash_attention_sm90_fwd(const fb_kctx *k, const fa::args &a) {
  return a.hd <= 64 ? fwd<64>(k, a) : fwd<128>(k, a);
}

fb_status fb_cuda_flash_attention_sm90_bwd(const fb_kctx *k, const fa::args &a, int bchunk) {
  return a.hd <= 64 ? bwd<64>(k, a, bchunk) : bwd<128>(k, a, bchunk);
}

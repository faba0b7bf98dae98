/* Launchers of the sm_90a attention kernels (flash_attention_sm90.cuh, warpgroup MMA) for bf16
 * activations: hd <= 64 runs the 64-column tiles, hd <= 128 the 128-column ones; two
 * consumer warpgroups a block; shared memory opted into per launch. The forward is the
 * TMA-fed one (tensor maps of q, k and v made per call by the driver's
 * cuTensorMapEncodeTiled, found through the runtime, so nothing links libcuda); if the driver
 * cannot make them, or FSDPB_ATTN_TMA=0, the cp.async kernels run. The forward's tensor maps
 * have boxes of 128 query / 64 key rows, the backward's of 64 rows. This file is compiled for sm_90a
 * only (CMakeLists.txt: its own object library), so its kernels exist in no other
 * architecture's code; kernels_attention_flash.cu calls these on a compute capability 9.0
 * device when the 16-byte path applies, else runs the sm_80 kernels. */
#include <stdlib.h>

#include <cudaTypedefs.h>

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

/* A 4-D tensor map of q, k or v ([B][T][heads][hd] bf16 rows of stride ld): dimensions
 * (hd, heads, T, B), boxes of 64 columns x `rows` rows in the 128-byte swizzle, zeros out of
 * bounds. False if the driver has no encoder or refuses the tensor. */
bool make_tmap(fb_tmap *m, const uint16_t *base, const fa::args &a, int heads, int ld,
               int rows) {
  static PFN_cuTensorMapEncodeTiled_v12000 encode;
  if (!encode) {
    void *fn = nullptr;
    cudaDriverEntryPointQueryResult q;
    if (cudaGetDriverEntryPointByVersion("cuTensorMapEncodeTiled", &fn, 12000, cudaEnableDefault,
                                         &q) != cudaSuccess || q != cudaDriverEntryPointSuccess)
      return false;
    encode = (PFN_cuTensorMapEncodeTiled_v12000)fn;
  }
  const cuuint64_t dim[4] = {(cuuint64_t)a.hd, (cuuint64_t)heads, (cuuint64_t)a.T,
                             (cuuint64_t)a.B};
  const cuuint64_t stride[3] = {2 * (cuuint64_t)a.hd, 2 * (cuuint64_t)ld,
                                2 * (cuuint64_t)ld * (cuuint64_t)a.T};
  const cuuint32_t box[4] = {64, 1, (cuuint32_t)rows, 1}, estride[4] = {1, 1, 1, 1};
  return encode(m, CU_TENSOR_MAP_DATA_TYPE_BFLOAT16, 4, (void *)base, dim, stride, box, estride,
                CU_TENSOR_MAP_INTERLEAVE_NONE, CU_TENSOR_MAP_SWIZZLE_128B,
                CU_TENSOR_MAP_L2_PROMOTION_L2_128B, CU_TENSOR_MAP_FLOAT_OOB_FILL_NONE) ==
         CUDA_SUCCESS;
}

template <int HD>
fb_status fwd_tma(const fb_kctx *k, const fa::args &a, bool *ran) {
  const char *env = getenv("FSDPB_ATTN_TMA");
  fa3::tmaps tm;
  *ran = false;
  if ((env && env[0] == '0') || !make_tmap(&tm.q, a.q, a, a.H, a.ldq, fa3::BR) ||
      !make_tmap(&tm.k, a.k, a, a.KVH, a.ldkv, fa3::BC) ||
      !make_tmap(&tm.v, a.v, a, a.KVH, a.ldkv, fa3::BC))
    return FB_OK;
  constexpr int sm = fa3::fwd_tma_smem_bytes<HD>();
  FB_TRY(smem_optin(k, fa3::flash_attn_fwd_tma_sm90_k<HD>, sm));
  const dim3 grid((unsigned)(a.B * a.H), (unsigned)fa::tiles(a.T, fa3::BR));
  fa3::flash_attn_fwd_tma_sm90_k<HD><<<grid, fa3::NT + 128, sm, k->s->s>>>(a, tm);
  *ran = true;
  return launch_check(k, "attention_fwd (sm_90a TMA + wgmma)");
}

/* The TMA-fed backward; *ran false (nothing launched) if the tensor maps cannot be made or
 * FSDPB_ATTN_TMA=0. */
template <int HD>
fb_status bwd_tma(const fb_kctx *k, fa::args a, int bchunk, bool *ran) {
  const char *env = getenv("FSDPB_ATTN_TMA");
  fa3::bwd_tmaps tm;
  *ran = false;
  if ((env && env[0] == '0') || !make_tmap(&tm.q, a.q, a, a.H, a.ldq, 64) ||
      !make_tmap(&tm.k, a.k, a, a.KVH, a.ldkv, 64) ||
      !make_tmap(&tm.v, a.v, a, a.KVH, a.ldkv, 64) ||
      !make_tmap(&tm.dout, a.dout, a, a.H, a.H * a.hd, 64))
    return FB_OK;
  constexpr int smq = fa3::dq_tma_smem_bytes<HD>(), smkv = fa3::dkv_tma_smem_bytes<HD>();
  FB_TRY(smem_optin(k, fa3::flash_attn_bwd_dq_tma_sm90_k<HD>, smq));
  FB_TRY(smem_optin(k, fa3::flash_attn_bwd_dkv_tma_sm90_k<HD>, smkv));
  const unsigned ty = (unsigned)fa::tiles(a.T, fa3::BR);
  for (int b0 = 0; b0 < a.B; b0 += bchunk) {
    const int nb = a.B - b0 < bchunk ? a.B - b0 : bchunk;
    a.b0 = b0;
    fa3::flash_attn_bwd_dq_tma_sm90_k<HD><<<dim3((unsigned)(nb * a.H), ty), fa3::NT + 128, smq,
                                            k->s->s>>>(a, tm);
    fa3::flash_attn_bwd_dkv_tma_sm90_k<HD><<<dim3((unsigned)(nb * a.KVH), ty), fa3::NT + 128,
                                             smkv, k->s->s>>>(a, tm);
  }
  *ran = true;
  return launch_check(k, "attention_bwd (sm_90a TMA + wgmma)");
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
  bool ran = false;
  FB_TRY(a.hd <= 64 ? fwd_tma<64>(k, a, &ran) : fwd_tma<128>(k, a, &ran));
  if (ran) return FB_OK;
  return a.hd <= 64 ? fwd<64>(k, a) : fwd<128>(k, a);
}

fb_status fb_cuda_flash_attention_sm90_bwd(const fb_kctx *k, const fa::args &a, int bchunk) {
  bool ran = false;
  FB_TRY(a.hd <= 64 ? bwd_tma<64>(k, a, bchunk, &ran) : bwd_tma<128>(k, a, bchunk, &ran));
  if (ran) return FB_OK;
  return a.hd <= 64 ? bwd<64>(k, a, bchunk) : bwd<128>(k, a, bchunk);
}
